//! Request bodies: read with a size cap and a deadline, and parsed as JSON, with errors the client
//! can act on.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::config::ServerConfig;
use super::error::ApiError;

/// The whole body, or 413 past `limit` bytes, 408 if it took longer than `timeout`, 400 if the
/// client stopped sending mid-body.
pub(crate) async fn read(body: Body, limit: usize, timeout: Duration) -> Result<Bytes, ApiError> {
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Ok(result) => result.map_err(|e| read_error(&e, limit)),
        Err(_) => Err(too_slow(timeout)),
    }
}

/// A JSON body of at most the server's JSON cap, parsed as `T`.
pub(crate) async fn json_request<T: DeserializeOwned>(
    config: &ServerConfig,
    body: Body,
) -> Result<T, ApiError> {
    let bytes = read(body, config.json_limit(), config.body_timeout).await?;
    json(&bytes)
}

/// 408 for a body that did not arrive in time.
pub(crate) fn too_slow(timeout: Duration) -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        format!("the request body did not arrive within {timeout:?}"),
    )
}

/// 413 when a size cap (`http_body_util::Limited`, axum's `to_bytes`) cut the body, else 400.
pub(crate) fn read_error(error: &(dyn std::error::Error + 'static), limit: usize) -> ApiError {
    // Both report the cap as an error whose chain says "length limit exceeded".
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let mut too_large = false;
    while let Some(error) = source {
        too_large |= error.to_string().contains("length limit exceeded")
            || error.is::<http_body_util::LengthLimitError>();
        source = error.source();
    }
    if too_large {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body larger than {limit} bytes"),
        )
    } else {
        ApiError::bad_request(format!("could not read the request body: {error}"))
    }
}

/// Parse `bytes` as JSON of type `T`; an empty body parses as `{}` when `T` allows it.
pub(crate) fn json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}
