//! Client configuration, read from the environment like E2B's own SDKs.

use std::time::Duration;

/// Default domain of E2B's cloud (`e2b.dev` before March 2025).
pub const DEFAULT_DOMAIN: &str = "e2b.app";
/// Domains whose sandboxes are reached through the shared, header-routed `sandbox.<domain>` host.
const SHARED_HOST_DOMAINS: &[&str] = &[
    "e2b.app",
    "e2b.dev",
    "e2b.pro",
    "e2b-staging.dev",
    "e2b-tango.dev",
    "e2b-juliett.dev",
    "foxtrot-2.e2b.dev",
];

pub use crate::secret::Secret;

/// How to reach E2B (or an E2B-compatible server such as `waxell-sandbox serve`).
///
/// [`E2bConfig::from_env`] reads the variables E2B's SDKs read: `E2B_API_KEY`, `E2B_DOMAIN`,
/// `E2B_API_URL`, `E2B_SANDBOX_URL`, `E2B_DEBUG`, `E2B_CONNECTION_RETRIES`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct E2bConfig {
    /// Sent as `X-API-KEY` on the control plane; required for E2B's cloud (not for a server of your own
    /// given as `api_url`, nor in `debug`).
    pub api_key: Option<Secret>,
    /// Domain of the E2B deployment (default `e2b.app`); a sandbox's own domain wins when it has one.
    pub domain: String,
    /// Control-plane base URL; default `https://api.<domain>` (`http://localhost:3000` in debug).
    pub api_url: Option<String>,
    /// One base URL for all sandbox traffic (envd and Code Interpreter), routed by headers.
    /// Overrides debug mode, as in E2B's SDKs.
    pub sandbox_url: Option<String>,
    /// E2B's debug mode: no control-plane calls for create/kill/set-timeout, sandbox traffic to
    /// `http://localhost:<port>`.
    pub debug: bool,
    /// Limit of every request except the body of `/execute` (E2B: 60 s).
    pub request_timeout: Duration,
    /// Default limit of one `run_code`, as one wall-clock deadline (E2B: 300 s).
    pub execution_timeout: Duration,
    /// Retries on 429, 502, 503, 504 or `Should-Retry: true` (E2B: 3).
    pub max_retries: u32,
    /// Longest wait between retries, whatever `Retry-After` says.
    pub max_retry_delay: Duration,
}

impl Default for E2bConfig {
    fn default() -> Self {
        Self {
            api_key: None,
            domain: DEFAULT_DOMAIN.into(),
            api_url: None,
            sandbox_url: None,
            debug: false,
            request_timeout: Duration::from_secs(60),
            execution_timeout: Duration::from_secs(300),
            max_retries: 3,
            max_retry_delay: Duration::from_secs(30),
        }
    }
}

impl E2bConfig {
    /// Defaults, nothing read from the environment.
    pub fn new() -> Self {
        Self::default()
    }

    /// Defaults overridden by `E2B_*` environment variables.
    pub fn from_env() -> Self {
        let env = crate::config::Env::process();
        Self::from_lookup(|name| env.var(name))
    }

    /// [`E2bConfig::from_env`] with a custom variable lookup (for tests and embedding).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let mut config = Self {
            api_key: get("E2B_API_KEY").map(Secret::new),
            domain: get("E2B_DOMAIN").unwrap_or_else(|| DEFAULT_DOMAIN.into()),
            api_url: get("E2B_API_URL"),
            sandbox_url: get("E2B_SANDBOX_URL"),
            debug: get("E2B_DEBUG").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
            ..Self::default()
        };
        if let Some(retries) = get("E2B_CONNECTION_RETRIES").and_then(|v| v.trim().parse().ok()) {
            config.max_retries = retries;
        }
        config
    }

    /// Use this API key.
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(Secret::new(key));
        self
    }
    /// Use this E2B domain.
    pub fn with_domain(mut self, domain: impl Into<String>) -> Self {
        self.domain = domain.into();
        self
    }
    /// Use this control-plane base URL.
    pub fn with_api_url(mut self, url: impl Into<String>) -> Self {
        self.api_url = Some(url.into());
        self
    }
    /// Send all sandbox traffic to this base URL (header-routed).
    pub fn with_sandbox_url(mut self, url: impl Into<String>) -> Self {
        self.sandbox_url = Some(url.into());
        self
    }
    /// Turn E2B's debug mode on or off.
    pub fn with_debug(mut self, debug: bool) -> Self {
        self.debug = debug;
        self
    }
    /// Limit every request (for `/execute`: until the response headers).
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }
    /// Default limit of one `run_code`.
    pub fn with_execution_timeout(mut self, timeout: Duration) -> Self {
        self.execution_timeout = timeout;
        self
    }
    /// Retry retryable answers at most this many times.
    pub fn with_max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }
    /// Never wait longer than this between retries.
    pub fn with_max_retry_delay(mut self, delay: Duration) -> Self {
        self.max_retry_delay = delay;
        self
    }

    /// Control-plane base URL, without a trailing slash.
    pub fn api_base(&self) -> String {
        let url = match &self.api_url {
            Some(url) => url.clone(),
            None if self.debug => "http://localhost:3000".into(),
            None => format!("https://api.{}", self.domain),
        };
        url.trim_end_matches('/').to_owned()
    }

    /// Base URL of a sandbox's `port` (E2B's `get_sandbox_url`), without a trailing slash.
    pub fn sandbox_base(&self, sandbox_id: &str, sandbox_domain: Option<&str>, port: u16) -> String {
        let domain = sandbox_domain.unwrap_or(&self.domain);
        let url = match &self.sandbox_url {
            Some(url) => url.clone(),
            None if self.debug => format!("http://localhost:{port}"),
            None if SHARED_HOST_DOMAINS.contains(&domain) => format!("https://sandbox.{domain}"),
            None => format!("https://{port}-{sandbox_id}.{domain}"),
        };
        url.trim_end_matches('/').to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> E2bConfig {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        E2bConfig::from_lookup(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_reach_e2b_cloud_through_the_shared_host() {
        let config = env(&[("E2B_API_KEY", "e2b_1")]);
        assert_eq!(config.api_base(), "https://api.e2b.app");
        assert_eq!(config.sandbox_base("abc", None, 49999), "https://sandbox.e2b.app");
        assert_eq!(config.api_key.as_ref().map(Secret::expose), Some("e2b_1"));
    }

    #[test]
    fn other_domains_use_the_port_and_id_host_and_the_sandboxs_domain_wins() {
        let config = env(&[("E2B_DOMAIN", "example.org")]);
        assert_eq!(config.api_base(), "https://api.example.org");
        assert_eq!(
            config.sandbox_base("abc", None, 49983),
            "https://49983-abc.example.org"
        );
        assert_eq!(
            config.sandbox_base("abc", Some("e2b.dev"), 49983),
            "https://sandbox.e2b.dev"
        );
    }

    #[test]
    fn debug_mode_uses_localhost_and_explicit_urls_win() {
        let config = env(&[("E2B_DEBUG", "TRUE")]);
        assert!(config.debug);
        assert_eq!(config.api_base(), "http://localhost:3000");
        assert_eq!(config.sandbox_base("x", None, 49999), "http://localhost:49999");
        let config = env(&[
            ("E2B_DEBUG", "true"),
            ("E2B_API_URL", "http://127.0.0.1:9/"),
            ("E2B_SANDBOX_URL", "http://127.0.0.1:8/"),
            ("E2B_CONNECTION_RETRIES", "5"),
        ]);
        assert_eq!(config.api_base(), "http://127.0.0.1:9");
        assert_eq!(config.sandbox_base("x", None, 49999), "http://127.0.0.1:8");
        assert_eq!(config.max_retries, 5);
        assert!(
            !env(&[("E2B_DEBUG", "1")]).debug,
            "only `true` turns debug on, as in E2B's SDKs"
        );
    }

    #[test]
    fn the_api_key_never_shows_in_debug_output() {
        let config = E2bConfig::new().with_api_key("e2b_supersecret");
        let shown = format!("{config:?}");
        assert!(!shown.contains("supersecret"), "{shown}");
        assert!(shown.contains("redacted"), "{shown}");
    }
}
