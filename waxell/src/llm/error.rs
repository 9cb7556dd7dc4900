//! Errors of the LLM client.

use std::time::Duration;

/// Everything that can go wrong with a chat call.
///
/// Each variant carries what is needed to tell the user what happened: the server's own message for
/// HTTP errors, what was received for malformed responses, how far a stream got before it was cut.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server answered with a non-success HTTP status (after any retries).
    #[error("the LLM server answered HTTP {status}: {message} (after {attempts} attempt(s))")]
    Api {
        /// HTTP status code.
        status: u16,
        /// `error.message` from the body, or the body itself when it has no such field.
        message: String,
        /// `error.code` (or `error.type`) from the body, e.g. `rate_limit_exceeded`.
        code: Option<String>,
        /// How many requests were sent, retries included.
        attempts: u32,
    },
    /// No complete response (or, when streaming, no next chunk) within the configured time.
    #[error("the LLM request timed out after {after:?} (after {attempts} attempt(s))")]
    Timeout {
        /// The time allowed for the attempt (or for the next chunk) that ran out.
        after: Duration,
        /// How many requests were sent, retries included.
        attempts: u32,
    },
    /// The request could not be sent or the connection failed.
    #[error("could not reach the LLM server at {url}: {message} (after {attempts} attempt(s))")]
    Connection {
        /// The URL the request went to.
        url: String,
        /// What the HTTP client reported (refused, DNS, TLS, ...).
        message: String,
        /// How many requests were sent, retries included.
        attempts: u32,
    },
    /// The server answered 2xx but the body is not a Chat Completions response.
    #[error("malformed LLM response ({reason}); received: {received}")]
    MalformedResponse {
        /// What is wrong with it (the JSON error, a missing field).
        reason: String,
        /// The start of what was received.
        received: String,
    },
    /// The stream ended (or broke) before the server said it was done.
    #[error("the LLM response stream was cut after {chunks} chunk(s): {reason}")]
    StreamCut {
        /// Chunks received before the cut.
        chunks: usize,
        /// What ended it (a read error, end of stream without `[DONE]`).
        reason: String,
    },
    /// The request cannot be sent as given (e.g. no model named anywhere).
    #[error("invalid LLM request: {0}")]
    InvalidRequest(String),
    /// The client could not be built (e.g. a base URL that does not parse).
    #[error("invalid LLM client configuration: {0}")]
    Config(String),
    /// The scripted (dry-run) transport has no reply for this request.
    #[error("scripted LLM transport: {0}")]
    Script(String),
}

impl Error {
    /// The `error.type` recorded on the span and the duration metric: the provider's error code when it
    /// sent one, else the HTTP status, else a short name of the failure.
    pub fn error_type(&self) -> String {
        match self {
            Self::Api { status, code, .. } => code.clone().unwrap_or_else(|| status.to_string()),
            Self::Timeout { .. } => "timeout".to_owned(),
            Self::Connection { .. } => "connection_error".to_owned(),
            Self::MalformedResponse { .. } => "malformed_response".to_owned(),
            Self::StreamCut { .. } => "stream_cut".to_owned(),
            Self::InvalidRequest(_) => "invalid_request".to_owned(),
            Self::Config(_) => "invalid_configuration".to_owned(),
            Self::Script(_) => "script_exhausted".to_owned(),
        }
    }

    /// Whether sending the same request again may succeed (429, 408, 5xx, timeouts, connection errors).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Api { status, .. } => *status == 408 || *status == 429 || *status >= 500,
            Self::Timeout { .. } | Self::Connection { .. } => true,
            _ => false,
        }
    }

    /// Record that this error happened on attempt number `attempts`.
    pub(crate) fn with_attempts(mut self, total: u32) -> Self {
        match &mut self {
            Self::Api { attempts, .. }
            | Self::Timeout { attempts, .. }
            | Self::Connection { attempts, .. } => *attempts = total,
            _ => {}
        }
        self
    }
}

/// A [`Error::MalformedResponse`] quoting the start of what was received.
pub(crate) fn malformed(reason: impl Into<String>, received: &str) -> Error {
    Error::MalformedResponse {
        reason: reason.into(),
        received: received_preview(received),
    }
}

/// How much of an unexpected body to keep in an error message.
const RECEIVED_PREVIEW_CHARS: usize = 500;

/// The start of `text`, for error messages about what the server sent.
pub(crate) fn received_preview(text: &str) -> String {
    let mut preview: String = text.chars().take(RECEIVED_PREVIEW_CHARS).collect();
    if preview.len() < text.len() {
        preview.push_str("...");
    }
    if preview.is_empty() {
        preview.push_str("<empty body>");
    }
    preview
}

/// The message and code of an error body in any of the shapes compatible servers use:
/// `{"error": {"message", "code"|"type"}}`, `{"error": "..."}`, `{"message": "..."}`, `{"detail": "..."}`,
/// or plain text.
pub(crate) fn parse_error_body(body: &str) -> (String, Option<String>) {
    let Ok(json) = serde_json::from_str::<serde_json::Value>(body) else {
        return (received_preview(body.trim()), None);
    };
    let as_text = |value: &serde_json::Value| match value {
        serde_json::Value::String(text) => Some(text.clone()),
        serde_json::Value::Null => None,
        other => Some(other.to_string()),
    };
    let error = json.get("error").unwrap_or(&json);
    let message = error
        .get("message")
        .or_else(|| error.get("detail"))
        .and_then(as_text)
        .or_else(|| error.as_str().map(str::to_owned))
        .unwrap_or_else(|| received_preview(body.trim()));
    let code = error
        .get("code")
        .and_then(as_text)
        .or_else(|| error.get("type").and_then(as_text));
    (message, code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_error_body_gives_message_and_code() {
        let body =
            r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#;
        assert_eq!(
            parse_error_body(body),
            (
                "Rate limit reached".to_owned(),
                Some("rate_limit_exceeded".to_owned())
            )
        );
    }

    #[test]
    fn other_error_shapes_keep_the_message() {
        assert_eq!(
            parse_error_body(r#"{"error":"model not found"}"#).0,
            "model not found"
        );
        assert_eq!(parse_error_body(r#"{"detail":"bad input"}"#).0, "bad input");
        assert_eq!(parse_error_body("upstream exploded").0, "upstream exploded");
        assert_eq!(parse_error_body("").0, "<empty body>");
    }
}
