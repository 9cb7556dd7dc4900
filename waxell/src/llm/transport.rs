//! How a request reaches a model: the [`Transport`] trait, and [`HttpTransport`] for real servers.
//!
//! A transport moves bytes only. It returns the raw JSON body of a response (or the raw `data:` payloads
//! of a stream); parsing, stream assembly and instrumentation happen once, in the client, whichever
//! transport is used. That is what makes a dry run ([`ScriptedTransport`](super::ScriptedTransport))
//! produce the same spans as a real call.

use std::fmt;
use std::pin::Pin;
use std::time::Duration;

use eventsource_stream::{EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE, USER_AGENT};

use super::error::{parse_error_body, Error};
use super::types::ChatRequest;

/// The raw `data:` payloads of a streamed response, in order, `[DONE]` included when the server sent it.
pub type DataStream = Pin<Box<dyn Stream<Item = Result<String, Error>> + Send>>;

/// Host and port the requests go to (`server.address` / `server.port` on the span).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerAddress {
    /// Host name or IP address, as the URL names it.
    pub host: String,
    /// Port, the scheme's default when the URL names none.
    pub port: u16,
}

impl ServerAddress {
    /// Host and port of a URL (the scheme's default port when it names none); `None` without a host.
    pub fn from_url(url: &str) -> Option<Self> {
        let url = reqwest::Url::parse(url).ok()?;
        Some(Self {
            host: url.host_str()?.to_owned(),
            port: url.port_or_known_default()?,
        })
    }
}

/// Sends a resolved [`ChatRequest`] somewhere and returns what came back, unparsed.
///
/// Implemented by [`HttpTransport`] (any OpenAI-compatible server) and
/// [`ScriptedTransport`](super::ScriptedTransport) (dry runs). Retries, timeouts and authentication are
/// the transport's business; the client only sees the final success or [`Error`].
#[async_trait::async_trait]
pub trait Transport: Send + Sync + fmt::Debug {
    /// Send a non-streamed request; return the body of the successful response.
    async fn send(&self, request: &ChatRequest) -> Result<String, Error>;

    /// Send a streamed request; return its server-sent-event payloads.
    async fn send_streaming(&self, request: &ChatRequest) -> Result<DataStream, Error>;

    /// Where requests go, if over a network.
    fn server(&self) -> Option<ServerAddress> {
        None
    }

    /// `true` when no model is called at all; spans then carry `waxell.dry_run=true`.
    fn is_dry_run(&self) -> bool {
        false
    }
}

/// An API key: never shown in `Debug` output or logs.
pub(crate) type ApiKey = crate::secret::Secret;

/// Retry behaviour for 408, 429, 5xx, timeouts and connection failures.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    /// Retries after the first attempt (so at most `max_retries + 1` requests).
    pub(crate) max_retries: u32,
    /// First backoff; doubles per retry, up to `max_backoff`.
    pub(crate) initial_backoff: Duration,
    pub(crate) max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 2,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
        }
    }
}

/// A `Retry-After` longer than this is ignored in favour of our own backoff, so a misbehaving server
/// cannot park the agent for an hour.
const MAX_HONOURED_RETRY_AFTER: Duration = Duration::from_secs(60);

impl RetryPolicy {
    /// How long to wait before retry number `retry` (1-based), preferring the server's `Retry-After`.
    fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(wait) = retry_after.filter(|wait| *wait <= MAX_HONOURED_RETRY_AFTER) {
            return wait;
        }
        let exponential = self
            .initial_backoff
            .saturating_mul(2u32.saturating_pow(retry.saturating_sub(1)));
        let capped = exponential.min(self.max_backoff);
        // Jitter (75-100 %) so that many agents hitting the same limit do not retry in lockstep; the
        // clock's sub-second noise is random enough for that and needs no RNG dependency.
        let noise = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |now| now.subsec_nanos() % 250);
        capped.mul_f64(0.75 + f64::from(noise) / 1000.0)
    }
}

/// Settings of an [`HttpTransport`], filled in by [`ClientBuilder`](super::ClientBuilder).
#[derive(Debug, Clone)]
pub(crate) struct HttpSettings {
    pub(crate) base_url: String,
    pub(crate) api_key: Option<ApiKey>,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) retry: RetryPolicy,
    pub(crate) headers: HeaderMap,
}

/// Chat Completions over HTTP(S) to any OpenAI-compatible server (`POST {base_url}/chat/completions`).
///
/// Sends `Authorization: Bearer {key}` when a key is configured and a W3C `traceparent` for the current
/// span, so a traced server joins the agent's trace. Built by [`ClientBuilder`](super::ClientBuilder).
pub struct HttpTransport {
    http: reqwest::Client,
    endpoint: reqwest::Url,
    api_key: Option<ApiKey>,
    request_timeout: Duration,
    retry: RetryPolicy,
    headers: HeaderMap,
}

impl fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpTransport")
            .field("endpoint", &self.endpoint.as_str())
            .field("api_key", &self.api_key)
            .field("request_timeout", &self.request_timeout)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// One failed attempt, with the server's `Retry-After` if it sent one.
struct Failure {
    error: Error,
    retry_after: Option<Duration>,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Self {
            error,
            retry_after: None,
        }
    }
}

impl HttpTransport {
    pub(crate) fn new(settings: HttpSettings) -> Result<Self, Error> {
        let base = settings.base_url.trim_end_matches('/');
        let endpoint = reqwest::Url::parse(&format!("{base}/chat/completions")).map_err(|e| {
            Error::Config(format!(
                "base URL {:?} is not a valid URL: {e}",
                settings.base_url
            ))
        })?;
        if !matches!(endpoint.scheme(), "http" | "https") {
            return Err(Error::Config(format!(
                "base URL {:?} must be http:// or https://",
                settings.base_url
            )));
        }
        let http = crate::http::async_client()
            .connect_timeout(settings.connect_timeout)
            .build()
            .map_err(|e| Error::Config(format!("could not build the HTTP client: {}", error_chain(&e))))?;
        Ok(Self {
            http,
            endpoint,
            api_key: settings.api_key,
            request_timeout: settings.request_timeout,
            retry: settings.retry,
            headers: settings.headers,
        })
    }

    /// The full URL requests are posted to.
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_str()
    }

    /// Post the body once and return the successful response (headers received, body not yet read).
    async fn post(&self, body: &[u8], streaming: bool) -> Result<reqwest::Response, Failure> {
        let mut headers = self.headers.clone();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            ACCEPT,
            HeaderValue::from_static(if streaming {
                "text/event-stream"
            } else {
                "application/json"
            }),
        );
        headers
            .entry(USER_AGENT)
            .or_insert(HeaderValue::from_static(concat!(
                "waxell-rs/",
                env!("CARGO_PKG_VERSION")
            )));
        // The client runs this inside the chat span's context, so the server becomes its child.
        headers.extend(crate::http::trace_headers());

        let mut request = self
            .http
            .post(self.endpoint.clone())
            .headers(headers)
            .body(body.to_vec());
        if let Some(key) = self.api_key.as_ref().map(ApiKey::expose) {
            // `bearer_auth` marks the header sensitive, so reqwest never prints it either.
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| self.request_error(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = retry_after(response.headers());
        let body = response.text().await.unwrap_or_default();
        let (message, code) = parse_error_body(&body);
        Err(Failure {
            error: Error::Api {
                status: status.as_u16(),
                message,
                code,
                attempts: 1,
            },
            retry_after,
        })
    }

    fn request_error(&self, error: &reqwest::Error) -> Failure {
        let error = if error.is_timeout() {
            Error::Timeout {
                after: self.request_timeout,
                attempts: 1,
            }
        } else {
            Error::Connection {
                url: self.endpoint.to_string(),
                message: error_chain(error),
                attempts: 1,
            }
        };
        error.into()
    }

    /// Run `attempt` until it succeeds, fails for good, or the retries are used up.
    async fn with_retries<T, F, Fut>(&self, mut attempt: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, Failure>>,
    {
        let mut attempts = 0;
        loop {
            attempts += 1;
            // The whole attempt (connect, headers, and for non-streamed calls the body) is bounded.
            let outcome = match tokio::time::timeout(self.request_timeout, attempt()).await {
                Ok(outcome) => outcome,
                Err(_elapsed) => Err(Error::Timeout {
                    after: self.request_timeout,
                    attempts,
                }
                .into()),
            };
            match outcome {
                Ok(value) => return Ok(value),
                Err(failure) if attempts > self.retry.max_retries || !failure.error.is_retryable() => {
                    return Err(failure.error.with_attempts(attempts));
                }
                Err(failure) => {
                    tokio::time::sleep(self.retry.delay(attempts, failure.retry_after)).await;
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl Transport for HttpTransport {
    async fn send(&self, request: &ChatRequest) -> Result<String, Error> {
        let body = encode(request)?;
        self.with_retries(|| async {
            let response = self.post(&body, false).await?;
            response.text().await.map_err(|e| self.request_error(&e))
        })
        .await
    }

    async fn send_streaming(&self, request: &ChatRequest) -> Result<DataStream, Error> {
        let body = encode(request)?;
        let response = self.with_retries(|| self.post(&body, true)).await?;
        Ok(sse_payloads(response, self.request_timeout))
    }

    fn server(&self) -> Option<ServerAddress> {
        Some(ServerAddress {
            host: self.endpoint.host_str()?.to_owned(),
            port: self.endpoint.port_or_known_default()?,
        })
    }
}

fn encode(request: &ChatRequest) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(request)
        .map_err(|e| Error::InvalidRequest(format!("the request does not serialise to JSON: {e}")))
}

/// The `data:` payloads of an SSE body. Waiting longer than `idle_timeout` for the next event ends the
/// stream with [`Error::Timeout`]; a broken connection ends it with [`Error::StreamCut`].
fn sse_payloads(response: reqwest::Response, idle_timeout: Duration) -> DataStream {
    let events = response.bytes_stream().eventsource();
    let payloads = futures_util::stream::unfold(Some(events), move |events| async move {
        let mut events = events?;
        loop {
            let item = match tokio::time::timeout(idle_timeout, events.next()).await {
                Err(_elapsed) => Err(Error::Timeout {
                    after: idle_timeout,
                    attempts: 1,
                }),
                Ok(None) => return None,
                Ok(Some(Ok(event))) if event.data.is_empty() => continue,
                Ok(Some(Ok(event))) => Ok(event.data),
                Ok(Some(Err(EventStreamError::Transport(e)))) => Err(Error::StreamCut {
                    chunks: 0,
                    reason: error_chain(&e),
                }),
                Ok(Some(Err(e))) => Err(Error::MalformedResponse {
                    reason: format!("invalid server-sent events: {e}"),
                    received: String::new(),
                }),
            };
            // After an error the stream is over: the next poll returns None.
            let rest = item.is_ok().then_some(events);
            return Some((item, rest));
        }
    });
    Box::pin(payloads)
}

/// `retry-after-ms` (OpenAI) or `retry-after` in seconds. HTTP-date values are not supported and fall
/// back to exponential backoff.
/// OpenAI's `retry-after-ms` when present (finer), else the standard `Retry-After`.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    crate::retry_after::number(headers, "retry-after-ms", Duration::from_millis(1))
        .or_else(|| crate::retry_after::from_headers(headers))
}

/// An error and all its sources, so "error sending request" comes with the reason (refused, DNS, ...).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_prefers_milliseconds_then_seconds() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
        headers.clear();
        // A date already past: retry now.
        headers.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&headers), Some(Duration::ZERO));
    }

    #[test]
    fn backoff_doubles_is_capped_and_honours_short_retry_after() {
        let policy = RetryPolicy {
            max_retries: 5,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(4),
        };
        let first = policy.delay(1, None);
        assert!(first >= Duration::from_millis(750) && first <= Duration::from_secs(1));
        let third = policy.delay(3, None);
        assert!(third >= Duration::from_secs(3) && third <= Duration::from_secs(4));
        assert!(policy.delay(10, None) <= Duration::from_secs(4));
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
        assert!(policy.delay(1, Some(Duration::from_secs(3600))) <= Duration::from_secs(1));
    }

    #[test]
    fn api_key_is_redacted_in_debug() {
        let transport = HttpTransport::new(HttpSettings {
            base_url: "http://127.0.0.1:1/v1/".to_owned(),
            api_key: Some(ApiKey::new("sk-very-secret")),
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(1),
            retry: RetryPolicy::default(),
            headers: HeaderMap::new(),
        })
        .unwrap();
        assert_eq!(transport.endpoint(), "http://127.0.0.1:1/v1/chat/completions");
        let debug = format!("{transport:?}");
        assert!(!debug.contains("sk-very-secret"), "{debug}");
        assert!(debug.contains("<redacted>"), "{debug}");
    }
}
