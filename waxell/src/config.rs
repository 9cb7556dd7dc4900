//! Configuration from the standard environment variables, resolved once at `init()`. The one module that
//! reads the environment, always through an [`Env`], which a test (or [`crate::Builder::with_env`]) replaces
//! with a lookup of its own.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::error::InitError;

/// A variable lookup: `Some(value)` when the variable is set.
type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

/// Where configuration variables come from: the process environment, or a lookup given instead.
#[derive(Clone, Default)]
pub(crate) struct Env(Option<Arc<Lookup>>);

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Env(lookup)"
        } else {
            "Env(process)"
        })
    }
}

impl Env {
    /// The process environment.
    pub(crate) fn process() -> Self {
        Self(None)
    }

    /// `lookup` instead of the process environment.
    pub(crate) fn lookup(lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(lookup)))
    }

    /// The value of `name`; `None` when it is unset or blank.
    pub(crate) fn var(&self, name: &str) -> Option<String> {
        let value = match &self.0 {
            None => std::env::var(name).ok(),
            Some(lookup) => lookup(name),
        };
        value.filter(|v| !v.trim().is_empty())
    }

    /// Whether the SDK's sampler will be its default, parent-based one (`OTEL_TRACES_SAMPLER` unset or
    /// `parentbased_always_on`): only then is a span's sampled flag known before it starts.
    #[cfg(any(feature = "async-openai", all(feature = "tracing", feature = "llm")))]
    pub(crate) fn samples_by_parent(&self) -> bool {
        self.var("OTEL_TRACES_SAMPLER")
            .is_none_or(|sampler| sampler.trim() == "parentbased_always_on")
    }
}

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// OTLP/HTTP with protobuf bodies (the default).
    HttpProtobuf,
    /// OTLP/HTTP with JSON bodies.
    HttpJson,
    /// OTLP/gRPC.
    Grpc,
}

impl std::str::FromStr for Protocol {
    type Err = InitError;

    /// `http/protobuf`, `http/json` or `grpc`, as in `OTEL_EXPORTER_OTLP_PROTOCOL`.
    fn from_str(s: &str) -> Result<Self, InitError> {
        Self::parse(s, "protocol")
    }
}

impl Protocol {
    /// As written in `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::HttpProtobuf => "http/protobuf",
            Self::HttpJson => "http/json",
            Self::Grpc => "grpc",
        }
    }

    pub(crate) fn parse(value: &str, var: &str) -> Result<Self, InitError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "http/protobuf" => Ok(Self::HttpProtobuf),
            "http/json" => Ok(Self::HttpJson),
            "grpc" => Ok(Self::Grpc),
            other => Err(InitError::InvalidVariable {
                name: var.to_owned(),
                value: other.to_owned(),
                expected: "one of http/protobuf, http/json, grpc".to_owned(),
            }),
        }
    }
}

/// Settings read on the hot path of every instrumented call.
#[derive(Debug, Clone)]
pub(crate) struct Capture {
    /// Record content (arguments, results, messages, code). `WAXELL_CAPTURE_CONTENT`.
    pub(crate) content: bool,
    /// Longest captured string, in characters. `WAXELL_MAX_CONTENT_CHARS`.
    pub(crate) max_chars: usize,
    /// Scrub secrets from captured content. `WAXELL_SCRUB`.
    pub(crate) scrub: bool,
}

impl Default for Capture {
    fn default() -> Self {
        Self {
            content: true,
            max_chars: 4000,
            scrub: true,
        }
    }
}

/// Everything `init()` resolves from the environment before the builder's overrides.
#[derive(Debug, Clone)]
pub(crate) struct EnvConfig {
    pub(crate) observe: bool,
    pub(crate) capture: Capture,
    /// Full traces URL (`.../v1/traces` for HTTP), when any endpoint variable is set.
    pub(crate) traces_endpoint: Option<String>,
    pub(crate) protocol: Protocol,
    pub(crate) headers: Vec<(String, String)>,
    /// Longest wait for one export: `WAXELL_EXPORT_TIMEOUT_MS`, else `OTEL_BSP_EXPORT_TIMEOUT`, else
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`, else 10 s.
    pub(crate) export_timeout: Duration,
    /// The exit budget: how long flush and shutdown wait for the collector (`WAXELL_SHUTDOWN_TIMEOUT_MS`).
    pub(crate) shutdown_timeout: Option<Duration>,
    pub(crate) batch: BatchSettings,
    /// `WAXELL_EXPORT_BREAKER_FAILURES` / `WAXELL_EXPORT_BREAKER_COOLDOWN_MS`, when set.
    pub(crate) breaker_failures: Option<u32>,
    pub(crate) breaker_cooldown: Option<Duration>,
    /// Spans kept per run beyond the root, errors and scores: `WAXELL_MAX_SPANS_PER_RUN` (0 = no cap).
    pub(crate) max_spans_per_run: usize,
    pub(crate) console: bool,
    /// `None` = default location; `Some(None)` = file output off.
    pub(crate) trace_file: Option<Option<PathBuf>>,
    /// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`: where metrics go over HTTP, when not beside the traces.
    pub(crate) metrics_endpoint: Option<String>,
    /// `OTEL_SERVICE_NAME`.
    pub(crate) service_name: Option<String>,
    /// `OTEL_RESOURCE_ATTRIBUTES`, parsed as the SDK parses it (`key=value,...`, trimmed).
    pub(crate) resource_attributes: Vec<(String, String)>,
    /// `WAXELL_PROJECT_NAME`: `openinference.project.name` (Phoenix project).
    pub(crate) project_name: Option<String>,
}

/// The variables that configure export to Waxell's cloud (see `cloud`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CloudVars {
    /// `WAXELL_API_URL` (or `WAX_API_URL`).
    pub(crate) api_url: String,
    /// `WAXELL_API_KEY` (or `WAX_API_KEY`).
    pub(crate) key: String,
    /// `WAXELL_OTEL_ENDPOINT`: the OTLP endpoint, without asking the API.
    pub(crate) otel_endpoint: Option<String>,
}

/// The first of `names` that is set, with its trimmed value.
fn first_var(env: &Env, names: &[&str]) -> Option<(String, String)> {
    names
        .iter()
        .find_map(|n| env.var(n).map(|v| ((*n).to_owned(), v.trim().to_owned())))
}

/// `WAXELL_API_URL` and `WAXELL_API_KEY` (both or neither), and `WAXELL_OTEL_ENDPOINT`. Read only when no
/// collector is named otherwise, so a half-set pair is no error then.
pub(crate) fn cloud_from_env(env: &Env) -> Result<Option<CloudVars>, InitError> {
    let url = first_var(env, &["WAXELL_API_URL", "WAX_API_URL"]);
    let key = first_var(env, &["WAXELL_API_KEY", "WAX_API_KEY"]);
    let ((url_var, api_url), key) = match (url, key) {
        (None, None) => return Ok(None),
        (Some((name, _)), None) => {
            return Err(InitError::InvalidVariable {
                name,
                value: "<set>".into(),
                expected: "WAXELL_API_KEY set as well (Waxell export needs both)".into(),
            })
        }
        (None, Some(_)) => {
            return Err(InitError::InvalidVariable {
                name: "WAXELL_API_KEY".into(),
                value: "<hidden>".into(),
                expected: "WAXELL_API_URL set as well (Waxell export needs both)".into(),
            })
        }
        (Some(url), Some((_, key))) => (url, key),
    };
    if !(api_url.starts_with("http://") || api_url.starts_with("https://")) {
        return Err(InitError::InvalidVariable {
            name: url_var,
            value: api_url,
            expected: "an http:// or https:// URL".into(),
        });
    }
    Ok(Some(CloudVars {
        api_url,
        key,
        otel_endpoint: first_var(env, &["WAXELL_OTEL_ENDPOINT"]).map(|(_, v)| v),
    }))
}

/// `OTEL_RESOURCE_ATTRIBUTES` as the SDK's environment detector reads it.
fn resource_attributes(value: &str) -> Vec<(String, String)> {
    value
        .split_terminator(',')
        .filter_map(|entry| entry.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// The batch span processor's settings, from the standard `OTEL_BSP_*` variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchSettings {
    /// Spans waiting for export before new ones are dropped (and counted): `OTEL_BSP_MAX_QUEUE_SIZE`.
    pub(crate) max_queue_size: usize,
    /// Spans per export request, at most the queue size: `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`.
    pub(crate) max_export_batch_size: usize,
    /// How long a partial batch waits before it is sent: `OTEL_BSP_SCHEDULE_DELAY` (ms).
    pub(crate) schedule_delay: Duration,
}

impl Default for BatchSettings {
    /// The spec's batch size; a deeper queue than its 2,048 (agents emit bursts) and a shorter delay than
    /// its 5 s (short-lived agent processes), both still bounded.
    fn default() -> Self {
        Self {
            max_queue_size: 8192,
            max_export_batch_size: 512,
            schedule_delay: Duration::from_millis(1000),
        }
    }
}

/// Default for `WAXELL_MAX_SPANS_PER_RUN`.
pub(crate) const DEFAULT_MAX_SPANS_PER_RUN: usize = 50_000;

/// The OTel specification's default for `OTEL_EXPORTER_OTLP_TIMEOUT`. The agent never waits on an export
/// (it runs on the batch processor's thread); a generous timeout keeps slow collectors' traces (MLflow takes
/// about 3.5 s per request), and the exit waits at most the shutdown budget whatever this is.
pub(crate) const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The OTLP export settings, read from the standard variables with the meaning `init()` gives them: the
/// traces URL (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` verbatim, else `OTEL_EXPORTER_OTLP_ENDPOINT` plus
/// `/v1/traces` for HTTP), `OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`, `OTEL_EXPORTER_OTLP_(TRACES_)HEADERS` and the
/// export timeout (`WAXELL_EXPORT_TIMEOUT_MS`, else `OTEL_BSP_EXPORT_TIMEOUT`, else `OTEL_EXPORTER_OTLP_TIMEOUT`,
/// else 10 s). `waxell replay` uses exactly these.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OtlpSettings {
    /// Full traces URL (HTTP) or collector address (gRPC), when a variable names one.
    pub traces_endpoint: Option<String>,
    /// The OTLP wire protocol (default HTTP/protobuf).
    pub protocol: Protocol,
    /// Extra request headers (name, value), e.g. an API key; sent with every request.
    pub headers: Vec<(String, String)>,
    /// Longest wait for one request.
    pub timeout: Duration,
}

impl OtlpSettings {
    /// Read them from the environment; a bad value is an error naming the variable.
    pub fn from_env() -> Result<Self, InitError> {
        let env = from_env(&Env::process())?;
        Ok(Self {
            traces_endpoint: env.traces_endpoint,
            protocol: env.protocol,
            headers: env.headers,
            timeout: env.export_timeout,
        })
    }

    /// The traces URL for a base URL given as `OTEL_EXPORTER_OTLP_ENDPOINT` would be (`/v1/traces` appended
    /// for HTTP), so a command-line flag can mean what the variable means.
    pub fn traces_url_for_base(base: &str, protocol: Protocol) -> String {
        traces_url(Some(base), None, protocol).unwrap_or_default()
    }
}

pub(crate) fn parse_bool(name: &str, value: &str) -> Result<bool, InitError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(InitError::InvalidVariable {
            name: name.to_owned(),
            value: value.to_owned(),
            expected: "true or false".to_owned(),
        }),
    }
}

/// A whole number from `name`, with an error naming the variable and what it expects.
fn number_var(env: &Env, name: &str, expected: &str) -> Result<Option<usize>, InitError> {
    env.var(name)
        .map(|v| {
            v.trim().parse().map_err(|_| InitError::InvalidVariable {
                name: name.to_owned(),
                value: v.clone(),
                expected: expected.to_owned(),
            })
        })
        .transpose()
}

/// Like [`number_var`], refusing 0 where it would mean nothing can ever pass.
fn positive_var(env: &Env, name: &str, expected: &str) -> Result<Option<usize>, InitError> {
    match number_var(env, name, expected)? {
        Some(0) => Err(InitError::InvalidVariable {
            name: name.to_owned(),
            value: "0".to_owned(),
            expected: expected.to_owned(),
        }),
        other => Ok(other),
    }
}

fn millis_var(env: &Env, name: &str) -> Result<Option<Duration>, InitError> {
    Ok(number_var(env, name, "milliseconds")?.map(|ms| Duration::from_millis(ms as u64)))
}

fn bool_var(env: &Env, name: &str) -> Result<Option<bool>, InitError> {
    env.var(name).map(|v| parse_bool(name, &v)).transpose()
}

/// `WAXELL_OBSERVE=false` switches everything off. Read on first use by macros when `init()` was not called.
pub(crate) fn observe_from_env(env: &Env) -> bool {
    env.var("WAXELL_OBSERVE")
        .and_then(|v| parse_bool("WAXELL_OBSERVE", &v).ok())
        .unwrap_or(true)
}

/// Content capture: `WAXELL_CAPTURE_CONTENT` wins; else the OTel GenAI convention variable
/// (`NO_CONTENT` / `SPAN_ONLY` / `EVENT_ONLY` / `SPAN_AND_EVENT`, or older `true`/`false`); else on.
pub(crate) fn capture_from_env(env: &Env) -> Result<Capture, InitError> {
    let mut capture = Capture::default();
    if let Some(on) = bool_var(env, "WAXELL_CAPTURE_CONTENT")? {
        capture.content = on;
    } else if let Some(v) = env.var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT") {
        capture.content = match v.trim().to_ascii_uppercase().as_str() {
            "NO_CONTENT" | "FALSE" | "0" | "EVENT_ONLY" => false,
            "SPAN_ONLY" | "SPAN_AND_EVENT" | "TRUE" | "1" => true,
            _ => {
                return Err(InitError::InvalidVariable {
                    name: "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT".into(),
                    value: v,
                    expected: "NO_CONTENT, SPAN_ONLY, EVENT_ONLY, SPAN_AND_EVENT, true or false".into(),
                })
            }
        };
    }
    if let Some(v) = env.var("WAXELL_MAX_CONTENT_CHARS") {
        capture.max_chars = v.trim().parse().map_err(|_| InitError::InvalidVariable {
            name: "WAXELL_MAX_CONTENT_CHARS".into(),
            value: v.clone(),
            expected: "a whole number of characters".into(),
        })?;
    }
    if let Some(on) = bool_var(env, "WAXELL_SCRUB")?.or(bool_var(env, "WAXELL_REDACT_TELEMETRY")?) {
        capture.scrub = on;
    }
    Ok(capture)
}

/// Parse `key=value,key2=value2` (values may be percent-encoded, as the OTel spec allows).
pub(crate) fn parse_headers(name: &str, value: &str) -> Result<Vec<(String, String)>, InitError> {
    value
        .split(',')
        .filter(|pair| !pair.trim().is_empty())
        .enumerate()
        .map(|(index, pair)| {
            let (k, v) = pair.split_once('=').ok_or_else(|| InitError::InvalidVariable {
                name: name.to_owned(),
                // Never echo the value: headers carry credentials.
                value: "<hidden>".to_owned(),
                expected: format!("comma-separated key=value pairs; entry {} has no '='", index + 1),
            })?;
            Ok((k.trim().to_owned(), percent_decode(v.trim())))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The traces URL: `..._TRACES_ENDPOINT` is used verbatim; the generic `OTEL_EXPORTER_OTLP_ENDPOINT` gets
/// `/v1/traces` appended for HTTP (the spec's rule, and a classic way to lose every span when missed).
pub(crate) fn traces_url(generic: Option<&str>, traces: Option<&str>, protocol: Protocol) -> Option<String> {
    if let Some(t) = traces {
        return Some(t.trim().to_owned());
    }
    let base = generic?.trim().trim_end_matches('/');
    Some(match protocol {
        Protocol::Grpc => base.to_owned(),
        _ => format!("{base}/v1/traces"),
    })
}

pub(crate) fn from_env(env: &Env) -> Result<EnvConfig, InitError> {
    let observe = match env.var("WAXELL_OBSERVE") {
        Some(v) => parse_bool("WAXELL_OBSERVE", &v)?,
        None => true,
    };
    let protocol_var = if env.var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").is_some() {
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
    } else {
        "OTEL_EXPORTER_OTLP_PROTOCOL"
    };
    let protocol = Protocol::parse(&env.var(protocol_var).unwrap_or_default(), protocol_var)?;
    let traces_endpoint = traces_url(
        env.var("OTEL_EXPORTER_OTLP_ENDPOINT").as_deref(),
        env.var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").as_deref(),
        protocol,
    );
    if let Some(url) = &traces_endpoint {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(InitError::InvalidVariable {
                name: "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
                value: url.clone(),
                expected: "an http:// or https:// URL".into(),
            });
        }
    }
    let mut headers = Vec::new();
    for name in ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"] {
        if let Some(v) = env.var(name) {
            headers.extend(parse_headers(name, &v)?);
        }
    }
    let export_timeout = millis_var(env, "WAXELL_EXPORT_TIMEOUT_MS")?
        .or(millis_var(env, "OTEL_BSP_EXPORT_TIMEOUT")?)
        .or(millis_var(env, "OTEL_EXPORTER_OTLP_TIMEOUT")?)
        .unwrap_or(DEFAULT_EXPORT_TIMEOUT);
    let shutdown_timeout = millis_var(env, "WAXELL_SHUTDOWN_TIMEOUT_MS")?;
    let defaults = BatchSettings::default();
    let max_queue_size = positive_var(env, "OTEL_BSP_MAX_QUEUE_SIZE", "a positive number of spans")?
        .unwrap_or(defaults.max_queue_size);
    let batch = BatchSettings {
        max_queue_size,
        // As the SDKs do: a batch never exceeds the queue.
        max_export_batch_size: positive_var(
            env,
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
            "a positive number of spans",
        )?
        .unwrap_or(defaults.max_export_batch_size)
        .min(max_queue_size),
        schedule_delay: millis_var(env, "OTEL_BSP_SCHEDULE_DELAY")?.unwrap_or(defaults.schedule_delay),
    };
    let breaker_failures = positive_var(
        env,
        "WAXELL_EXPORT_BREAKER_FAILURES",
        "a positive number of failed exports",
    )?
    .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    let breaker_cooldown = millis_var(env, "WAXELL_EXPORT_BREAKER_COOLDOWN_MS")?;
    let max_spans_per_run = number_var(
        env,
        "WAXELL_MAX_SPANS_PER_RUN",
        "a whole number of spans (0 = no cap)",
    )?
    .unwrap_or(DEFAULT_MAX_SPANS_PER_RUN);
    let console = bool_var(env, "WAXELL_CONSOLE")?.unwrap_or(true);
    let trace_file = env
        .var("WAXELL_TRACE_FILE")
        .map(|v| match v.trim().to_ascii_lowercase().as_str() {
            "off" | "false" | "0" | "none" => None,
            _ => Some(PathBuf::from(v)),
        });
    Ok(EnvConfig {
        metrics_endpoint: env.var("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"),
        service_name: env.var("OTEL_SERVICE_NAME"),
        resource_attributes: env
            .var("OTEL_RESOURCE_ATTRIBUTES")
            .map(|v| resource_attributes(&v))
            .unwrap_or_default(),
        project_name: env.var("WAXELL_PROJECT_NAME"),
        observe,
        capture: capture_from_env(env)?,
        traces_endpoint,
        protocol,
        headers,
        export_timeout,
        shutdown_timeout,
        batch,
        breaker_failures,
        breaker_cooldown,
        max_spans_per_run,
        console,
        trace_file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_endpoint_gets_the_traces_path_only_for_http() {
        assert_eq!(
            traces_url(Some("http://127.0.0.1:4318/"), None, Protocol::HttpProtobuf).as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        assert_eq!(
            traces_url(Some("http://127.0.0.1:4317"), None, Protocol::Grpc).as_deref(),
            Some("http://127.0.0.1:4317")
        );
        assert_eq!(
            traces_url(
                Some("http://a:1"),
                Some("http://b:2/custom"),
                Protocol::HttpProtobuf
            )
            .as_deref(),
            Some("http://b:2/custom")
        );
        assert_eq!(traces_url(None, None, Protocol::HttpProtobuf), None);
    }

    #[test]
    fn headers_parse_and_decode_and_bad_ones_are_named_without_leaking() {
        let h = parse_headers("H", "x-wax-key=abc%3D%3D, Authorization=Basic%20Zm9v").unwrap();
        assert_eq!(
            h,
            vec![
                ("x-wax-key".into(), "abc==".into()),
                ("Authorization".into(), "Basic Zm9v".into())
            ]
        );
        let err = parse_headers("OTEL_EXPORTER_OTLP_HEADERS", "secretvalue")
            .unwrap_err()
            .to_string();
        assert!(err.contains("OTEL_EXPORTER_OTLP_HEADERS"), "{err}");
        assert!(!err.contains("secretvalue"), "{err}");
    }

    #[test]
    fn protocol_errors_list_the_choices() {
        let err = Protocol::parse("thrift", "OTEL_EXPORTER_OTLP_PROTOCOL")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && err.contains("grpc"),
            "{err}"
        );
    }
}
