//! Streamed responses: [`ChatStream`] yields chunks as they arrive and assembles the full response.

use std::pin::Pin;
use std::task::{ready, Context as TaskContext, Poll};

use futures_util::{Stream, StreamExt};

use super::error::malformed;
use super::error::Error;
use super::record::LlmCall;
use super::transport::DataStream;
use super::types::{ChatChunk, ChatResponse};

/// A streamed chat response: a [`Stream`] of [`ChatChunk`]s in arrival order.
///
/// The text and tool-call fragments are assembled as they pass; once the stream is over,
/// [`ChatStream::response`] holds the complete response (with usage, since the client asks for it). The
/// `chat` span ends with the stream: when it finishes, fails, or is dropped early (then marked
/// `waxell.cancelled`).
///
/// ```no_run
/// # async fn demo(client: waxell::llm::Client) -> Result<(), waxell::llm::Error> {
/// use futures_util::StreamExt;
/// use waxell::llm::{ChatRequest, Message};
///
/// let mut stream = client.chat_stream(ChatRequest::new([Message::user("Tell me a joke")])).await?;
/// while let Some(chunk) = stream.next().await {
///     if let Some(text) = chunk?.text_delta() {
///         print!("{text}");
///     }
/// }
/// let response = stream.response().expect("the stream completed");
/// println!("\n{} output tokens", response.usage.map_or(0, |usage| usage.completion_tokens));
/// # Ok(()) }
/// ```
#[must_use = "a stream does nothing unless polled"]
#[derive(Debug)]
pub struct ChatStream {
    payloads: Option<DebugIgnored<DataStream>>,
    call: LlmCall,
    response: Option<ChatResponse>,
}

/// Lets `ChatStream` derive `Debug` around the boxed transport stream.
struct DebugIgnored<T>(T);

impl<T> std::fmt::Debug for DebugIgnored<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("..")
    }
}

/// The payload that ends an OpenAI stream.
const DONE: &str = "[DONE]";

impl ChatStream {
    pub(crate) fn new(payloads: DataStream, call: LlmCall) -> Self {
        Self {
            payloads: Some(DebugIgnored(payloads)),
            call,
            response: None,
        }
    }

    /// The assembled response, once the stream has completed successfully.
    pub fn response(&self) -> Option<&ChatResponse> {
        self.response.as_ref()
    }

    /// Read the rest of the stream and return the assembled response.
    pub async fn into_response(mut self) -> Result<ChatResponse, Error> {
        while let Some(chunk) = self.next().await {
            chunk?;
        }
        self.response.take().ok_or_else(|| Error::StreamCut {
            chunks: self.call.chunks(),
            reason: "the stream had already failed".to_owned(),
        })
    }

    /// Handle one `data:` payload: `Some` to yield, `None` when the stream is over.
    fn accept(&mut self, data: &str) -> Option<Result<ChatChunk, Error>> {
        if data.trim() == DONE {
            self.complete();
            return None;
        }
        let chunk = match parse_chunk(data) {
            Ok(chunk) => chunk,
            Err(error) => return Some(Err(self.fail(error))),
        };
        self.call.chunk(&chunk);
        Some(Ok(chunk))
    }

    fn complete(&mut self) {
        self.payloads = None;
        self.response = Some(self.call.finish_stream());
    }

    fn fail(&mut self, error: Error) -> Error {
        self.payloads = None;
        // The transport cannot know how many chunks the client parsed; this is where that is known.
        let error = match error {
            Error::StreamCut { reason, .. } => Error::StreamCut {
                chunks: self.call.chunks(),
                reason,
            },
            other => other,
        };
        self.call.fail_with(&error);
        error
    }
}

impl Stream for ChatStream {
    type Item = Result<ChatChunk, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let Some(payloads) = this.payloads.as_mut() else {
            return Poll::Ready(None);
        };
        let item = ready!(payloads.0.as_mut().poll_next(cx));
        Poll::Ready(match item {
            Some(Ok(data)) => this.accept(&data),
            Some(Err(error)) => Some(Err(this.fail(error))),
            // Some compatible servers close without `[DONE]`; the stream is complete if every choice
            // got its finish reason, and cut otherwise.
            None if this.call.stream_is_finished() => {
                this.complete();
                None
            }
            None => Some(Err(this.fail(Error::StreamCut {
                chunks: 0,
                reason: "the server closed the stream before it was done".to_owned(),
            }))),
        })
    }
}

/// A chunk, or the error a server sent inside the stream (`data: {"error": {...}}`).
fn parse_chunk(data: &str) -> Result<ChatChunk, Error> {
    let value: serde_json::Value = serde_json::from_str(data)
        .map_err(|e| malformed(format!("a stream chunk is not JSON: {e}"), data))?;
    if let Some(error) = value.get("error") {
        let (message, code) =
            super::error::parse_error_body(&serde_json::json!({ "error": error }).to_string());
        // The HTTP status was 200: the failure came inside the stream.
        return Err(Error::Api {
            status: 200,
            message,
            code,
            attempts: 1,
        });
    }
    serde_json::from_value(value).map_err(|e| {
        malformed(
            format!("a stream chunk is not a chat completion chunk: {e}"),
            data,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_inside_a_stream_keeps_the_server_message() {
        let error =
            parse_chunk(r#"{"error": {"message": "overloaded", "code": "server_busy"}}"#).unwrap_err();
        assert!(
            matches!(&error, Error::Api { message, code: Some(code), .. } if message == "overloaded" && code == "server_busy"),
            "{error:?}"
        );
    }
}
