//! The Connect protocol's streaming framing with the JSON codec, as E2B's SDKs speak it (Python's
//! `connectrpc` with its JSON codec, JS's `createConnectTransport({useBinaryFormat: false})`):
//! `application/connect+json` bodies of envelopes `[flags u8][length u32 BE][JSON]`; a response
//! stream ends with an envelope flagged end-of-stream carrying `{}` or `{"error": {...}}`.
//! Neither SDK sends the binary codec (`+proto`); it is refused with 415 naming the one we speak.

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::body;
use super::error::ApiError;

/// Flag of a compressed envelope (no SDK compresses; refused).
const FLAG_COMPRESSED: u8 = 0x01;
/// Flag of the envelope that ends a response stream.
const FLAG_END_STREAM: u8 = 0x02;
/// The streaming content type of the JSON codec.
pub(crate) const STREAM_JSON: &str = "application/connect+json";

/// 415 unless the request uses the JSON codec (`streaming`: the enveloped kind).
pub(crate) fn check_codec(headers: &HeaderMap, streaming: bool) -> Result<(), ApiError> {
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let expected = if streaming {
        STREAM_JSON
    } else {
        "application/json"
    };
    if content_type == expected || (!streaming && content_type.is_empty()) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        format!("content type {content_type:?} is not served: this RPC speaks the Connect JSON codec ({expected})"),
    ))
}

/// One envelope.
pub(crate) fn envelope(flags: u8, payload: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(payload.len() + 5);
    out.push(flags);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out.into()
}

/// A message envelope.
pub(crate) fn message(value: &Value) -> Bytes {
    envelope(0, value.to_string().as_bytes())
}

/// The end-of-stream envelope: success, or `error`.
pub(crate) fn end(error: Option<&ApiError>) -> Bytes {
    let body = match error {
        None => json!({}),
        Some(error) => json!({"error": {"code": error.connect_code(), "message": error.message()}}),
    };
    envelope(FLAG_END_STREAM, body.to_string().as_bytes())
}

/// A 200 streaming response of these envelopes.
pub(crate) fn stream_response(envelopes: impl Stream<Item = Bytes> + Send + 'static) -> Response {
    broken_stream_response(envelopes.map(Ok))
}

/// A 200 streaming response of these envelopes; an `Err` breaks the connection off mid-body (the
/// client sees the transport fail, as when an E2B sandbox dies under a stream).
pub(crate) fn broken_stream_response(
    envelopes: impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
) -> Response {
    let body = Body::from_stream(envelopes);
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(STREAM_JSON));
    response
}

/// A stream that failed before its first message: 200 and only the end-of-stream error (how a
/// Connect server reports errors of streaming calls).
pub(crate) fn stream_error(error: &ApiError) -> Response {
    stream_response(futures_util::stream::iter([end(Some(error))]))
}

/// Reads envelopes from a request body as they arrive (a client stream), each at most `limit`
/// bytes.
pub(crate) struct EnvelopeReader {
    body: axum::body::BodyDataStream,
    buffer: Vec<u8>,
    limit: usize,
}

impl EnvelopeReader {
    pub(crate) fn new(body: Body, limit: usize) -> Self {
        Self {
            body: body.into_data_stream(),
            buffer: Vec::new(),
            limit,
        }
    }

    /// The next message parsed as `T`; `None` at the end of the body.
    pub(crate) async fn next<T: DeserializeOwned>(&mut self) -> Result<Option<T>, ApiError> {
        loop {
            if self.buffer.len() >= 5 {
                let flags = self.buffer[0];
                let length =
                    u32::from_be_bytes([self.buffer[1], self.buffer[2], self.buffer[3], self.buffer[4]])
                        as usize;
                if length > self.limit {
                    return Err(ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("a message of {length} bytes is larger than {} bytes", self.limit),
                    ));
                }
                if flags & FLAG_COMPRESSED != 0 {
                    return Err(ApiError::bad_request("compressed messages are not served"));
                }
                if self.buffer.len() >= 5 + length {
                    let payload: Vec<u8> = self.buffer.drain(..5 + length).skip(5).collect();
                    if flags & FLAG_END_STREAM != 0 {
                        return Ok(None);
                    }
                    return body::json(&payload).map(Some);
                }
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buffer.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    return Err(ApiError::bad_request(format!(
                        "could not read the request stream: {e}"
                    )))
                }
                None if self.buffer.is_empty() => return Ok(None),
                None => return Err(ApiError::bad_request("the request stream ended inside a message")),
            }
        }
    }

    /// The one message of a server-streaming call, with the body then read to its end. A client
    /// may send the body's last chunk after the message (E2B's Python SDK streams it chunked);
    /// left unread, hyper would close the kept-alive connection after the response, under the
    /// client's next request on it.
    pub(crate) async fn only<T: DeserializeOwned>(mut self) -> Result<Option<T>, ApiError> {
        let first = self.next::<T>().await?;
        if first.is_some() && self.next::<serde::de::IgnoredAny>().await?.is_some() {
            return Err(ApiError::bad_request(
                "a server-streaming request carries one message",
            ));
        }
        Ok(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(parts: Vec<Vec<u8>>) -> Body {
        let chunks = parts.into_iter().map(|p| Ok::<_, std::io::Error>(Bytes::from(p)));
        Body::from_stream(futures_util::stream::iter(chunks))
    }

    #[tokio::test]
    async fn envelopes_are_read_across_chunk_boundaries_until_the_body_ends() {
        let first = envelope(0, br#"{"n":1}"#).to_vec();
        let second = envelope(0, br#"{"n":2}"#).to_vec();
        // Split inside the first prefix and inside the second payload.
        let mut all = first.clone();
        all.extend(&second);
        let body = chunked(vec![
            all[..3].to_vec(),
            all[3..first.len() + 7].to_vec(),
            all[first.len() + 7..].to_vec(),
        ]);
        let mut reader = EnvelopeReader::new(body, 1024);
        assert_eq!(reader.next::<Value>().await.unwrap(), Some(json!({"n": 1})));
        assert_eq!(reader.next::<Value>().await.unwrap(), Some(json!({"n": 2})));
        assert_eq!(reader.next::<Value>().await.unwrap(), None);
    }

    #[tokio::test]
    async fn an_oversized_truncated_or_compressed_message_is_refused() {
        let mut reader = EnvelopeReader::new(chunked(vec![envelope(0, &[b' '; 100]).to_vec()]), 10);
        assert_eq!(
            reader.next::<Value>().await.unwrap_err().status(),
            StatusCode::PAYLOAD_TOO_LARGE
        );
        let cut = envelope(0, br#"{"n":1}"#)[..6].to_vec();
        let mut reader = EnvelopeReader::new(chunked(vec![cut]), 1024);
        assert!(reader
            .next::<Value>()
            .await
            .unwrap_err()
            .message()
            .contains("ended inside a message"));
        let mut reader = EnvelopeReader::new(chunked(vec![envelope(FLAG_COMPRESSED, b"{}").to_vec()]), 1024);
        assert_eq!(
            reader.next::<Value>().await.unwrap_err().status(),
            StatusCode::BAD_REQUEST
        );
    }

    #[tokio::test]
    async fn a_server_streaming_request_is_one_message_read_to_the_end() {
        let chunks = futures_util::stream::iter([
            Ok::<_, std::io::Error>(envelope(0, br#"{"n":1}"#)),
            Ok(Bytes::new()),
        ]);
        // The body's end comes late, after the message: `only` waits for it.
        let late_end = chunks.chain(futures_util::stream::once(async {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            Ok(Bytes::new())
        }));
        let reader = EnvelopeReader::new(Body::from_stream(late_end), 1024);
        assert_eq!(reader.only::<Value>().await.unwrap(), Some(json!({"n": 1})));

        let mut two = envelope(0, br#"{"n":1}"#).to_vec();
        two.extend_from_slice(&envelope(0, br#"{"n":2}"#));
        let refused = EnvelopeReader::new(chunked(vec![two]), 1024)
            .only::<Value>()
            .await
            .unwrap_err();
        assert!(refused.message().contains("one message"), "{}", refused.message());
        assert_eq!(
            EnvelopeReader::new(chunked(vec![]), 1024)
                .only::<Value>()
                .await
                .unwrap(),
            None
        );
    }

    #[test]
    fn only_the_json_codec_is_served() {
        let headers = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(value));
            headers
        };
        assert!(check_codec(&headers("application/connect+json"), true).is_ok());
        assert!(check_codec(&headers("application/json; charset=utf-8"), false).is_ok());
        let refused = check_codec(&headers("application/connect+proto"), true).unwrap_err();
        assert_eq!(refused.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert!(
            refused.message().contains("application/connect+json"),
            "{}",
            refused.message()
        );
    }

    #[test]
    fn the_end_of_a_stream_carries_a_connect_error() {
        let error = ApiError::new(StatusCode::NOT_IMPLEMENTED, "no processes here");
        let end = end(Some(&error));
        assert_eq!(end[0], FLAG_END_STREAM);
        let body: Value = serde_json::from_slice(&end[5..]).unwrap();
        assert_eq!(
            body,
            json!({"error": {"code": "unimplemented", "message": "no processes here"}})
        );
    }
}
