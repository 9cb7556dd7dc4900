//! HTTP for the E2B client: trace-context injection, retries honouring `Retry-After`, and the one
//! mapping from E2B's answers to [`SandboxError`].

use std::time::Duration;

use reqwest::{RequestBuilder, Response, StatusCode};

use super::config::E2bConfig;
use crate::sandbox::SandboxError;

/// Characters of a peer's answer kept in an error.
const RECEIVED_CHARS: usize = 512;
/// First wait between retries when the server gives no `Retry-After`; doubles per retry.
const BASE_RETRY_DELAY: Duration = Duration::from_millis(250);

/// What a request was for: decides how a 404 or 400 is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// Control plane: 404 = the sandbox does not exist.
    Control,
    /// Code Interpreter: 404 = the context does not exist.
    Code,
    /// envd files: 404 / 400 = the path.
    Files,
    /// envd processes: 404 = no such process.
    Process,
}

pub(crate) use crate::http::trace_headers;

/// `s` cut to `max` characters, marked when cut.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    crate::capture::truncate_owned(std::borrow::Cow::Borrowed(s), max)
}

/// Send `build()` (rebuilt for every attempt), retrying what E2B says may be retried. Returns a
/// response with a success status, or the mapped error.
pub(crate) async fn send(
    config: &E2bConfig,
    endpoint: Endpoint,
    what: &str,
    build: impl Fn() -> RequestBuilder,
) -> Result<Response, SandboxError> {
    let mut attempt = 0u32;
    loop {
        let response = build()
            .headers(trace_headers())
            .send()
            .await
            .map_err(|e| transport_error(what, &e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let should_retry = response
            .headers()
            .get("should-retry")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.eq_ignore_ascii_case("true"));
        let retry_after = crate::retry_after::from_headers(response.headers());
        let body = response.text().await.unwrap_or_default();
        let retryable = should_retry.unwrap_or(matches!(status.as_u16(), 429 | 502 | 503 | 504))
            && !sandbox_gone(endpoint, status, &body);
        if retryable && attempt < config.max_retries {
            let delay = retry_after
                .unwrap_or(BASE_RETRY_DELAY * 2u32.saturating_pow(attempt))
                .min(config.max_retry_delay);
            attempt += 1;
            tokio::time::sleep(delay).await;
            continue;
        }
        return Err(status_error(endpoint, what, status, &body));
    }
}

/// E2B's proxy answers a data-plane request for a sandbox that is gone with 502: JSON "The sandbox
/// was not found", or an HTML error page (to browsers, and from a self-hosted nginx in front of a
/// dead sandbox). On the control plane a 502 is just a 502, and retried.
fn sandbox_gone(endpoint: Endpoint, status: StatusCode, body: &str) -> bool {
    endpoint != Endpoint::Control
        && status == StatusCode::BAD_GATEWAY
        && (body.contains("was not found") || looks_like_html(body))
}

fn looks_like_html(body: &str) -> bool {
    let start = body
        .trim_start()
        .get(..15)
        .unwrap_or(body.trim_start())
        .to_ascii_lowercase();
    start.starts_with("<!doctype html") || start.starts_with("<html")
}

/// The `message` of a JSON error body, else the body itself; truncated either way.
fn error_message(body: &str) -> String {
    let message = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
        .unwrap_or_else(|| body.trim().to_owned());
    truncate(&message, RECEIVED_CHARS)
}

/// Map a non-success answer to an error naming what was asked and what came back.
pub(crate) fn status_error(endpoint: Endpoint, what: &str, status: StatusCode, body: &str) -> SandboxError {
    let message = format!("{what}: {status}: {}", error_message(body));
    if sandbox_gone(endpoint, status, body) {
        let reason = if looks_like_html(body) {
            format!("{what}: {status} with an HTML page (the sandbox is gone or its server is not running)")
        } else {
            message
        };
        return SandboxError::NotFound(reason);
    }
    match (status.as_u16(), endpoint) {
        (401 | 403, _) => SandboxError::Authentication(message),
        (429, _) => SandboxError::RateLimited(message),
        (404, Endpoint::Control) => SandboxError::NotFound(message),
        (404, Endpoint::Code) => SandboxError::ContextNotFound(message),
        (404 | 400, Endpoint::Files) => SandboxError::InvalidPath {
            path: what.to_owned(),
            reason: format!("{status}: {}", error_message(body)),
        },
        (400 | 404 | 409 | 413 | 422, _) => SandboxError::InvalidArgument(message),
        (504, _) => SandboxError::Timeout(message),
        (502 | 503, _) => SandboxError::Transport(message),
        _ => SandboxError::Other(message),
    }
}

pub(crate) fn transport_error(what: &str, error: &reqwest::Error) -> SandboxError {
    if error.is_timeout() {
        SandboxError::Timeout(format!("{what}: request timed out"))
    } else {
        // The chain says why (connection refused, reset, ...); the top level only says "error sending".
        let mut message = format!("{what}: {error}");
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            message.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        SandboxError::Transport(message)
    }
}

/// Parse a success body as JSON, or say what was received instead.
pub(crate) async fn json<T: serde::de::DeserializeOwned>(
    what: &str,
    response: Response,
) -> Result<T, SandboxError> {
    let body = response.text().await.map_err(|e| transport_error(what, &e))?;
    serde_json::from_str(&body).map_err(|e| SandboxError::Protocol {
        message: format!("{what}: unexpected response ({e})"),
        received: truncate(&body, RECEIVED_CHARS),
    })
}
