//! Every error the server answers: a status and a JSON body in the shape the caller's plane uses.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use waxell::sandbox::{LimitKind, SandboxError};

/// An error response. The body is `{"code": <status>, "message": ...}` (control plane, Code
/// Interpreter and envd REST, as E2B's SDKs parse it), `{"code": "<connect code>", "message": ...}`
/// for envd Connect RPCs, and E2B's proxy shape (with `sandboxId`) for unknown sandboxes.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    style: Style,
}

#[derive(Debug, Clone)]
enum Style {
    Rest,
    Connect,
    Proxy { sandbox_id: String },
}

impl ApiError {
    /// An error with this status and message.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            style: Style::Rest,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Connect's code for this error (`not_found`, `invalid_argument`, ...).
    pub(crate) fn connect_code(&self) -> &'static str {
        connect_code(self.status)
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// What E2B's proxy answers for a data-plane request to a sandbox that does not exist (killed,
    /// expired, never created); the SDKs recognise "was not found".
    pub(crate) fn sandbox_not_running(sandbox_id: &str) -> Self {
        Self {
            status: StatusCode::BAD_GATEWAY,
            message: "The sandbox was not found".into(),
            style: Style::Proxy {
                sandbox_id: sandbox_id.to_owned(),
            },
        }
    }

    pub(crate) fn proxy_port_closed(port: u16) -> Self {
        Self::new(
            StatusCode::BAD_GATEWAY,
            format!("The sandbox is running but port is not open (port {port})"),
        )
    }

    /// The same error rendered as a Connect-RPC error (`{"code": "not_found", ...}`).
    pub(crate) fn into_connect(mut self) -> Self {
        if matches!(self.style, Style::Rest) {
            self.style = Style::Connect;
        }
        self
    }

    /// Map a backend error to the status E2B would answer.
    pub(crate) fn from_sandbox(error: SandboxError) -> Self {
        let status = match &error {
            SandboxError::NotFound(_)
            | SandboxError::ContextNotFound(_)
            | SandboxError::FileNotFound { .. } => StatusCode::NOT_FOUND,
            SandboxError::InvalidPath { .. }
            | SandboxError::InvalidArgument(_)
            | SandboxError::LimitExceeded {
                limit: LimitKind::FileSize,
                ..
            } => StatusCode::BAD_REQUEST,
            SandboxError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            SandboxError::Authentication(_) => StatusCode::UNAUTHORIZED,
            SandboxError::RateLimited(_)
            | SandboxError::LimitExceeded {
                limit: LimitKind::Watches,
                ..
            } => StatusCode::TOO_MANY_REQUESTS,
            SandboxError::Unavailable(_) | SandboxError::LimitExceeded { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            SandboxError::Unsupported { .. } => StatusCode::NOT_IMPLEMENTED,
            SandboxError::Protocol { .. } | SandboxError::Transport(_) => StatusCode::BAD_GATEWAY,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = match error {
            // Context errors already carry E2B's exact message ("Context <id> not found").
            SandboxError::ContextNotFound(message) => message,
            other => other.to_string(),
        };
        Self::new(status, message)
    }

    /// Map a file operation's error as envd does: a missing path is 404 "path '...' does not exist".
    pub(crate) fn from_file(path: &str, error: SandboxError) -> Self {
        let api = Self::from_sandbox(error);
        if api.status() == StatusCode::NOT_FOUND {
            Self::not_found(format!("path '{path}' does not exist"))
        } else {
            api
        }
    }

    /// The `name` of the error line that ends a failed execution's stream (E2B's Code Interpreter
    /// reports a timeout as `TimeoutError`).
    pub(crate) fn execution_error_name(error: &SandboxError) -> &'static str {
        match error {
            SandboxError::Timeout(_) => "TimeoutError",
            _ => "SandboxError",
        }
    }
}

impl From<SandboxError> for ApiError {
    fn from(error: SandboxError) -> Self {
        Self::from_sandbox(error)
    }
}

/// Connect's name for an HTTP status (the Connect protocol's table, as the E2B SDKs invert it).
fn connect_code(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "invalid_argument",
        401 => "unauthenticated",
        403 => "permission_denied",
        404 => "not_found",
        409 => "already_exists",
        413 => "resource_exhausted",
        429 => "resource_exhausted",
        499 => "canceled",
        501 => "unimplemented",
        502 | 503 => "unavailable",
        504 => "deadline_exceeded",
        _ => "internal",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = %self.status, message = %self.message, "request failed");
        } else {
            tracing::debug!(status = %self.status, message = %self.message, "request rejected");
        }
        let body = match &self.style {
            Style::Rest => serde_json::json!({"code": self.status.as_u16(), "message": self.message}),
            Style::Connect => serde_json::json!({"code": connect_code(self.status), "message": self.message}),
            Style::Proxy { sandbox_id } => serde_json::json!({
                "sandboxId": sandbox_id,
                "message": self.message,
                "code": self.status.as_u16(),
            }),
        };
        (self.status, Json(body)).into_response()
    }
}
