//! The Connect protocol's streaming framing (`application/connect+json`), as envd's streaming
//! RPCs use it: every message is an envelope of one flags byte and a big-endian u32 length; the
//! last one has flag [`END_STREAM`] and carries `{}` or `{"error": {...}}`. Errors of a streaming
//! RPC travel in that last envelope with HTTP 200.

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use serde_json::{json, Value};

use super::error::ApiError;

/// The content type of Connect streams with the JSON codec.
pub(crate) const STREAM_JSON: &str = "application/connect+json";
/// Envelope flag of a compressed message (refused: the SDKs send none).
const COMPRESSED: u8 = 0x01;
/// Envelope flag of the end-of-stream message.
const END_STREAM: u8 = 0x02;

/// One framed message.
pub(crate) fn envelope(flags: u8, message: &Value) -> Bytes {
    let payload = serde_json::to_vec(message).unwrap_or_else(|_| b"{}".to_vec());
    let mut out = Vec::with_capacity(5 + payload.len());
    out.push(flags);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&payload);
    out.into()
}

/// A data message.
pub(crate) fn message(message: &Value) -> Bytes {
    envelope(0, message)
}

/// The end-of-stream message: success, or the error in Connect's shape.
pub(crate) fn end(error: Option<&ApiError>) -> Bytes {
    match error {
        None => envelope(END_STREAM, &json!({})),
        Some(error) => envelope(
            END_STREAM,
            &json!({ "error": { "code": error.connect_code(), "message": error.message() } }),
        ),
    }
}

/// The single request message of a server-streaming call.
pub(crate) fn request_message(body: &[u8]) -> Result<&[u8], ApiError> {
    let (header, rest) = body
        .split_first_chunk::<5>()
        .ok_or_else(|| ApiError::bad_request("a Connect stream request must start with a 5-byte envelope"))?;
    if header[0] & COMPRESSED != 0 {
        return Err(ApiError::bad_request(
            "compressed Connect messages are not accepted",
        ));
    }
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    rest.get(..len)
        .ok_or_else(|| ApiError::bad_request("the Connect envelope is longer than the request body"))
}

/// A streaming response of already framed messages.
pub(crate) fn stream_response(frames: impl Stream<Item = Bytes> + Send + 'static) -> Response {
    use futures_util::StreamExt;
    let body = Body::from_stream(frames.map(Ok::<_, std::convert::Infallible>));
    ([(CONTENT_TYPE, STREAM_JSON)], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_envelope_round_trips_and_bad_ones_are_refused() {
        let framed = message(&json!({"path": "/home/user"}));
        assert_eq!(framed[0], 0);
        assert_eq!(request_message(&framed).unwrap(), br#"{"path":"/home/user"}"#);
        assert!(request_message(b"\x00\x00").is_err());
        assert!(request_message(b"\x00\x00\x00\x00\x09{}").is_err());
        assert!(request_message(b"\x01\x00\x00\x00\x02{}").is_err());
        let ended = end(Some(&ApiError::not_found("gone")));
        assert_eq!(ended[0], END_STREAM);
        let value: Value = serde_json::from_slice(&ended[5..]).unwrap();
        assert_eq!(value, json!({"error": {"code": "not_found", "message": "gone"}}));
    }
}
