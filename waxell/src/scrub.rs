//! Secret scrubbing for every captured string (arguments, results, errors, LLM messages, sandbox code and
//! output). On by default; each match is replaced by a tag naming its kind, e.g. `[REDACTED:OPENAI_KEY]`.
//!
//! Patterns are compiled once. A `RegexSet` pre-check keeps the common case (nothing to scrub) to one pass
//! over the text without allocating.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::{Regex, RegexSet};

/// Keys whose values are replaced whole, wherever they appear (argument names, JSON object keys).
const SENSITIVE_KEY_PARTS: &[&str] = &[
    "password",
    "passwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "api-key",
    "authorization",
    "private_key",
    "access_key",
    "credential",
];

/// Built-in patterns: (kind, regex, capture group to replace; 0 = the whole match).
const BUILT_IN: &[(&str, &str, usize)] = &[
    (
        "PRIVATE_KEY",
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
        0,
    ),
    ("ANTHROPIC_KEY", r"\bsk-ant-[A-Za-z0-9_\-]{20,}", 0),
    (
        "OPENAI_KEY",
        r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
        0,
    ),
    ("E2B_KEY", r"\be2b_[A-Za-z0-9]{20,}", 0),
    ("WAXELL_KEY", r"\bwax_(?:sk_)?[A-Za-z0-9]{20,}", 0),
    (
        "AWS_ACCESS_KEY",
        r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b",
        0,
    ),
    (
        "GITHUB_TOKEN",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})",
        0,
    ),
    ("SLACK_TOKEN", r"\bxox[abposr]-[A-Za-z0-9\-]{10,}", 0),
    ("STRIPE_KEY", r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}", 0),
    ("GOOGLE_API_KEY", r"\bAIza[0-9A-Za-z_\-]{35}", 0),
    (
        "JWT",
        r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
        0,
    ),
    ("BEARER", r"(?i)\bbearer\s+([A-Za-z0-9._~+/=\-]{12,})", 1),
    // user:password@host in URLs (postgres://, mysql://, redis://, amqp://, https://, ...).
    (
        "CONNECTION_STRING_PASSWORD",
        r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^:/\s@]+:([^@\s/]+)@",
        1,
    ),
    // password=..., "api_key": "...", AWS_SECRET_ACCESS_KEY=..., token: ...
    (
        "LABELLED_SECRET",
        r#"(?i)(?:password|passwd|pwd|secret|token|api[_\-]?key|access[_\-]?key|client[_\-]?secret|authorization)["']?\s*[:=]\s*["']?([^\s"',;}{]{4,})"#,
        1,
    ),
];

/// The scrubber's compiled patterns.
pub(crate) struct Scrubber {
    any: RegexSet,
    patterns: Vec<(String, Regex, usize)>,
    /// Only the built-in patterns: the cheap pre-check below is valid for them, not for user patterns.
    built_in_only: bool,
}

/// A cheap test that rules out every built-in pattern: each needs a `:` or `=` (labels, URLs with
/// credentials, "Authorization: Bearer"), a run of at least 12 token characters (API keys, JWTs, bearer
/// tokens), or a PEM armour line. Most captured strings (numbers, short words, code without
/// assignments) pass it in one scan and skip the regex set.
fn might_contain_secret(text: &str) -> bool {
    let (mut run, mut dashes) = (0usize, 0usize);
    for b in text.bytes() {
        dashes = if b == b'-' { dashes + 1 } else { 0 };
        if dashes >= 5 {
            return true; // "-----BEGIN ... PRIVATE KEY-----"
        }
        match b {
            b':' | b'=' => return true,
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'+' | b'/' => {
                run += 1;
                if run >= 12 {
                    return true;
                }
            }
            _ => run = 0,
        }
    }
    false
}

impl Scrubber {
    /// Built-in patterns plus `extra` (kind, regex source). Fails naming the pattern that does not compile.
    pub(crate) fn new(extra: &[(String, String)]) -> Result<Self, String> {
        let mut patterns = Vec::with_capacity(BUILT_IN.len() + extra.len());
        for (kind, source, group) in BUILT_IN {
            let re = Regex::new(source).map_err(|e| format!("built-in pattern {kind}: {e}"))?;
            patterns.push(((*kind).to_owned(), re, *group));
        }
        for (kind, source) in extra {
            let re = Regex::new(source).map_err(|e| format!("scrub pattern {kind:?} ({source:?}): {e}"))?;
            patterns.push((kind.clone(), re, 0));
        }
        let any = RegexSet::new(patterns.iter().map(|(_, re, _)| re.as_str()))
            .map_err(|e| format!("scrub patterns: {e}"))?;
        Ok(Self {
            any,
            patterns,
            built_in_only: extra.is_empty(),
        })
    }

    /// Replace every secret in `text` with a tag naming its kind.
    pub(crate) fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.built_in_only && !might_contain_secret(text) {
            return Cow::Borrowed(text);
        }
        let hits = self.any.matches(text);
        if !hits.matched_any() {
            return Cow::Borrowed(text);
        }
        let mut out = text.to_owned();
        for index in hits.iter() {
            let (kind, re, group) = &self.patterns[index];
            let tag = format!("[REDACTED:{kind}]");
            out = if *group == 0 {
                re.replace_all(&out, tag.as_str()).into_owned()
            } else {
                re.replace_all(&out, |caps: &regex::Captures<'_>| {
                    let whole = caps.get(0).map_or("", |m| m.as_str());
                    match (caps.get(0), caps.get(*group)) {
                        (Some(m0), Some(g)) => {
                            let (start, end) = (g.start() - m0.start(), g.end() - m0.start());
                            format!("{}{}{}", &whole[..start], tag, &whole[end..])
                        }
                        _ => whole.to_owned(),
                    }
                })
                .into_owned()
            };
        }
        Cow::Owned(out)
    }

    /// Scrub a JSON value in place: values under sensitive keys are replaced whole, strings are scrubbed.
    pub(crate) fn scrub_json(&self, value: &mut serde_json::Value) {
        match value {
            serde_json::Value::String(s) => {
                if let Cow::Owned(clean) = self.scrub(s) {
                    *s = clean;
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| self.scrub_json(v)),
            serde_json::Value::Object(map) => {
                for (key, v) in map.iter_mut() {
                    if is_sensitive_key(key) && !v.is_null() {
                        *v = serde_json::Value::String(format!("[REDACTED:{}]", key.to_ascii_uppercase()));
                    } else {
                        self.scrub_json(v);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Whether a key (argument name, JSON key, header name) names a secret.
pub(crate) fn is_sensitive_key(key: &str) -> bool {
    let key = key.as_bytes();
    let ends_with = |suffix: &str| {
        key.len() >= suffix.len() && key[key.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
    };
    // "max_tokens", "input_tokens" and friends count tokens; they are not secrets.
    if ends_with("tokens") || ends_with("token_count") {
        return false;
    }
    // Case-insensitive substring test without allocating: this runs for every captured JSON key.
    SENSITIVE_KEY_PARTS.iter().any(|part| {
        key.windows(part.len())
            .any(|w| w.eq_ignore_ascii_case(part.as_bytes()))
    })
}

/// The default scrubber (built-in patterns only), compiled on first use.
pub(crate) static DEFAULT: LazyLock<Scrubber> =
    LazyLock::new(|| Scrubber::new(&[]).expect("built-in scrub patterns compile"));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_kind_is_replaced() {
        let planted = [
            ("OPENAI_KEY", "sk-proj-abcdefghijklmnopqrstuvwxyz012345"),
            ("ANTHROPIC_KEY", "sk-ant-api03-abcdefghijklmnopqrstuvwxyz"),
            ("E2B_KEY", "e2b_0123456789abcdef0123456789abcdef"),
            ("AWS_ACCESS_KEY", "AKIAIOSFODNN7EXAMPLE"),
            ("GITHUB_TOKEN", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
            ("SLACK_TOKEN", "xoxb-1234567890-abcdefghij"),
            ("STRIPE_KEY", "sk_live_abcdefghijklmnop1234"),
            ("GOOGLE_API_KEY", "AIzaSyA-abcdefghijklmnopqrstuvwxyz12345"),
            ("JWT", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
        ];
        for (kind, secret) in planted {
            let text = format!("config: {secret} end");
            let clean = DEFAULT.scrub(&text);
            assert!(!clean.contains(secret), "{kind} survived: {clean}");
            assert!(
                clean.contains(&format!("[REDACTED:{kind}]")),
                "{kind} not tagged: {clean}"
            );
        }
    }

    #[test]
    fn labelled_values_connection_strings_and_bearer_keep_their_label() {
        let clean = DEFAULT.scrub("db=postgres://app:hunter2secret@db:5432/x password=swordfish Authorization: Bearer abcdefghijklmnop123");
        assert!(!clean.contains("hunter2secret"), "{clean}");
        assert!(!clean.contains("swordfish"), "{clean}");
        assert!(!clean.contains("abcdefghijklmnop123"), "{clean}");
        assert!(clean.contains("postgres://app:"), "{clean}");
    }

    #[test]
    fn private_keys_are_removed_whole() {
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nabc\n-----END RSA PRIVATE KEY-----";
        assert_eq!(DEFAULT.scrub(pem), "[REDACTED:PRIVATE_KEY]");
    }

    #[test]
    fn the_pre_check_never_hides_a_planted_secret() {
        for secret in [
            "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
            "AKIAIOSFODNN7EXAMPLE",
            "xoxb-1234567890-abcdefghij",
            "-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----",
            "Bearer abcdefghijklmnop123",
            "password=hunter22",
            "redis://u:pw12@host",
        ] {
            assert!(might_contain_secret(secret), "{secret}");
            assert_ne!(DEFAULT.scrub(secret), secret, "{secret}");
        }
        assert!(!might_contain_secret("print(sum(range(10)))"));
    }

    #[test]
    fn clean_text_is_borrowed() {
        assert!(matches!(
            DEFAULT.scrub("monthly sales grew 12%"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn json_sensitive_keys_are_replaced_but_token_counts_are_not() {
        let mut v = serde_json::json!({"api_key": "abc", "nested": {"password": 5}, "max_tokens": 10, "note": "sk-abcdefghijklmnopqrstuvwxyz"});
        DEFAULT.scrub_json(&mut v);
        assert_eq!(v["api_key"], "[REDACTED:API_KEY]");
        assert_eq!(v["nested"]["password"], "[REDACTED:PASSWORD]");
        assert_eq!(v["max_tokens"], 10);
        assert_eq!(v["note"], "[REDACTED:OPENAI_KEY]");
    }

    #[test]
    fn extra_patterns_apply_and_bad_ones_are_named() {
        let s = Scrubber::new(&[("EMPLOYEE_ID".into(), r"EMP-\d{6}".into())]).unwrap();
        assert_eq!(s.scrub("id EMP-123456"), "id [REDACTED:EMPLOYEE_ID]");
        let err = Scrubber::new(&[("BROKEN".into(), "(".into())]).err().unwrap();
        assert!(err.contains("BROKEN"), "{err}");
    }
}
