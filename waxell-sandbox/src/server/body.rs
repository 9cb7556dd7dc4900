//! Request bodies: read with a size cap and parse as JSON, with errors the client can act on.

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// The whole body, or 413 past `limit` bytes, or 400 if the client stopped sending mid-body.
pub(crate) async fn read(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        // axum reports the cap as an error whose chain contains "length limit exceeded".
        let mut source: Option<&dyn std::error::Error> = Some(&e);
        let mut too_large = false;
        while let Some(error) = source {
            too_large |= error.to_string().contains("length limit exceeded");
            source = error.source();
        }
        if too_large {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body larger than {limit} bytes"),
            )
        } else {
            ApiError::bad_request(format!("could not read the request body: {e}"))
        }
    })
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
