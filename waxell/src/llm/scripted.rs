//! Dry runs: a [`Transport`] that answers from a script instead of calling a model.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::stream;
use serde_json::Value;

use super::error::Error;
use super::transport::{DataStream, Transport};
use super::types::{
    AssistantMessage, ChatChunk, ChatRequest, ChatResponse, Choice, ChunkChoice, Delta, FunctionCallDelta,
    ToolCall, ToolCallDelta, Usage,
};

/// Decides whether a scripted reply answers a request.
type Matcher = Arc<dyn Fn(&ChatRequest) -> bool + Send + Sync>;

/// One scripted answer: text, tool calls, or an HTTP error, with token usage.
///
/// Replies are rendered as real Chat Completions JSON (or SSE chunks for streamed calls) and parsed by
/// the client like any server's, so a dry run exercises the same code and records the same spans.
///
/// ```
/// use serde_json::json;
/// use waxell::llm::ScriptedReply;
///
/// let call = ScriptedReply::tool_call("run_python", json!({"code": "print(1 + 1)"}))
///     .with_usage(420, 35);
/// let answer = ScriptedReply::text("The mean is 4.2.").when(|request| request.has_tool_results());
/// let judge = ScriptedReply::text(r#"{"score": 0.9}"#)
///     .when(|request| request.system_text().contains("evaluator"));
/// # let _ = (call, answer, judge);
/// ```
#[derive(Clone)]
#[must_use]
pub struct ScriptedReply {
    content: Option<String>,
    tool_calls: Vec<(String, String)>,
    usage: Option<Usage>,
    model: Option<String>,
    finish_reason: Option<String>,
    matcher: Option<Matcher>,
    chunk_chars: usize,
    http_error: Option<(u16, String)>,
    cut_after_chunks: Option<usize>,
}

impl fmt::Debug for ScriptedReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedReply")
            .field("content", &self.content)
            .field("tool_calls", &self.tool_calls)
            .field("usage", &self.usage)
            .field("has_matcher", &self.matcher.is_some())
            .field("http_error", &self.http_error)
            .finish_non_exhaustive()
    }
}

/// Streamed text and arguments are split into chunks of this many characters unless told otherwise.
const DEFAULT_CHUNK_CHARS: usize = 16;

impl ScriptedReply {
    fn empty() -> Self {
        Self {
            content: None,
            tool_calls: Vec::new(),
            usage: None,
            model: None,
            finish_reason: None,
            matcher: None,
            chunk_chars: DEFAULT_CHUNK_CHARS,
            http_error: None,
            cut_after_chunks: None,
        }
    }

    /// A plain text answer (finish reason `stop`).
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: Some(content.into()),
            ..Self::empty()
        }
    }

    /// A call of the tool `name` with these arguments (finish reason `tool_calls`). A string is sent as
    /// is, even if it is not valid JSON (models do that); any other value is serialised.
    pub fn tool_call(name: impl Into<String>, arguments: impl Into<Value>) -> Self {
        Self::empty().and_tool_call(name, arguments)
    }

    /// Add another tool call to the same reply (parallel tool calls).
    pub fn and_tool_call(mut self, name: impl Into<String>, arguments: impl Into<Value>) -> Self {
        let arguments = match arguments.into() {
            Value::String(raw) => raw,
            other => other.to_string(),
        };
        self.tool_calls.push((name.into(), arguments));
        self
    }

    /// An error answer: the server's HTTP `status` with `message` as `error.message`.
    pub fn http_error(status: u16, message: impl Into<String>) -> Self {
        Self {
            http_error: Some((status, message.into())),
            ..Self::empty()
        }
    }

    /// Text to send along with tool calls (some models explain before calling).
    pub fn with_text(mut self, content: impl Into<String>) -> Self {
        self.content = Some(content.into());
        self
    }

    /// Report this usage instead of the default estimate (about four characters per token).
    pub fn with_usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Self {
        let cached = self.usage.and_then(|usage| usage.cached_tokens());
        let mut usage = Usage::new(prompt_tokens, completion_tokens);
        if let Some(cached) = cached {
            usage = usage.with_cached_tokens(cached);
        }
        self.usage = Some(usage);
        self
    }

    /// Report exactly this usage (cached and reasoning details included).
    pub fn with_full_usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Answer as this model (default: the requested one).
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Override the finish reason (e.g. `length`).
    pub fn with_finish_reason(mut self, reason: impl Into<String>) -> Self {
        self.finish_reason = Some(reason.into());
        self
    }

    /// Only answer requests for which `matcher` returns `true`; such a reply is picked before any reply
    /// without a matcher. Without a matcher a reply answers whatever request comes next.
    pub fn when(mut self, matcher: impl Fn(&ChatRequest) -> bool + Send + Sync + 'static) -> Self {
        self.matcher = Some(Arc::new(matcher));
        self
    }

    /// Split streamed text and arguments into chunks of `chars` characters (at least 1).
    pub fn chunked(mut self, chars: usize) -> Self {
        self.chunk_chars = chars.max(1);
        self
    }

    /// When streamed, break the stream after this many chunks, as a dropped connection would.
    pub fn cut_after_chunks(mut self, chunks: usize) -> Self {
        self.cut_after_chunks = Some(chunks);
        self
    }

    fn answers(&self, request: &ChatRequest) -> bool {
        self.matcher.as_ref().is_none_or(|matcher| matcher(request))
    }

    fn finish_reason(&self) -> String {
        self.finish_reason.clone().unwrap_or_else(|| {
            if self.tool_calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            }
            .to_owned()
        })
    }

    /// The scripted usage, or an estimate from the text sizes so dry runs still show plausible numbers.
    fn usage(&self, request: &ChatRequest) -> Usage {
        self.usage.unwrap_or_else(|| {
            let input_chars: usize = request
                .messages
                .iter()
                .filter_map(|message| message.text())
                .map(str::len)
                .sum();
            let output_chars = self.content.as_deref().map_or(0, str::len)
                + self
                    .tool_calls
                    .iter()
                    .map(|(name, arguments)| name.len() + arguments.len())
                    .sum::<usize>();
            Usage::new(estimate_tokens(input_chars), estimate_tokens(output_chars))
        })
    }
}

fn estimate_tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4).max(1)
}

/// A [`Transport`] that answers from a queue of [`ScriptedReply`]s, deterministically: for each request,
/// the first queued reply whose [matcher](ScriptedReply::when) accepts it is removed and returned, else
/// the first reply without a matcher. Ids are
/// numbered (`chatcmpl-dryrun-1`, `call_dryrun_1_0`, ...). Spans carry `waxell.dry_run=true`.
///
/// Clones share the queue, so keep one to inspect [`requests`](Self::requests) after the run.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), waxell::llm::Error> {
/// use serde_json::json;
/// use waxell::llm::{ChatRequest, Client, Message, ScriptedReply, ScriptedTransport, Tool};
///
/// let script = ScriptedTransport::new([
///     ScriptedReply::tool_call("run_python", json!({"code": "print(sum([1, 2, 3]) / 3)"})),
///     ScriptedReply::text("The average is 2.0."),
/// ]);
/// let client = Client::builder().with_transport(script.clone()).with_model("gpt-4o-mini").build()?;
///
/// let tools = [Tool::function("run_python", "Run Python", json!({"type": "object"}))];
/// let first = client.chat(ChatRequest::new([Message::user("Average of 1, 2, 3?")]).tools(tools)).await?;
/// assert_eq!(first.tool_calls()[0].function.name, "run_python");
/// let second = client.chat(ChatRequest::new([Message::user("And now?")])).await?;
/// assert_eq!(second.text(), Some("The average is 2.0."));
/// assert_eq!(script.requests().len(), 2);
/// assert_eq!(script.remaining(), 0);
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct ScriptedTransport {
    script: Arc<Mutex<Script>>,
}

#[derive(Default)]
struct Script {
    replies: VecDeque<ScriptedReply>,
    requests: Vec<ChatRequest>,
}

impl fmt::Debug for ScriptedTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let script = self.lock();
        f.debug_struct("ScriptedTransport")
            .field("remaining", &script.replies.len())
            .field("served", &script.requests.len())
            .finish()
    }
}

impl ScriptedTransport {
    /// A transport that answers with these replies.
    pub fn new(replies: impl IntoIterator<Item = ScriptedReply>) -> Self {
        let transport = Self::default();
        transport.lock().replies.extend(replies);
        transport
    }

    /// Queue another reply.
    pub fn push(&self, reply: ScriptedReply) {
        self.lock().replies.push_back(reply);
    }

    /// Replies not used yet.
    pub fn remaining(&self) -> usize {
        self.lock().replies.len()
    }

    /// Every request received so far, as sent (model resolved, `stream` set).
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.lock().requests.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Script> {
        // A panic elsewhere while holding the lock leaves the queue itself intact.
        self.script
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Record the request and take the reply for it, with the request's sequence number (1-based).
    fn take_reply(&self, request: &ChatRequest) -> Result<(ScriptedReply, usize), Error> {
        let mut script = self.lock();
        script.requests.push(request.clone());
        let number = script.requests.len();
        // A reply whose matcher accepts the request wins over the next unconditional one, so a reply
        // meant for a particular request (an evaluator's, say) can sit anywhere in the queue.
        let position = script
            .replies
            .iter()
            .position(|reply| reply.matcher.is_some() && reply.answers(request))
            .or_else(|| script.replies.iter().position(|reply| reply.matcher.is_none()));
        let reply = position.and_then(|position| script.replies.remove(position)).ok_or_else(|| {
            Error::Script(format!(
                "no scripted reply for request #{number} (model {:?}, last user message {:?}); {} unmatched reply(ies) left",
                request.model_name().unwrap_or_default(),
                request.last_user_text().unwrap_or_default(),
                script.replies.len(),
            ))
        })?;
        if let Some((status, message)) = &reply.http_error {
            return Err(Error::Api {
                status: *status,
                message: message.clone(),
                code: None,
                attempts: 1,
            });
        }
        Ok((reply, number))
    }
}

fn response_id(number: usize) -> String {
    format!("chatcmpl-dryrun-{number}")
}

fn tool_call_id(number: usize, index: usize) -> String {
    format!("call_dryrun_{number}_{index}")
}

fn response_model(reply: &ScriptedReply, request: &ChatRequest) -> String {
    reply
        .model
        .clone()
        .or_else(|| request.model.clone())
        .unwrap_or_default()
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, Error> {
    serde_json::to_string(value)
        .map_err(|e| Error::Script(format!("could not render the scripted reply: {e}")))
}

/// `text` in pieces of at most `size` characters (never splitting a character).
fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|piece| piece.iter().collect()).collect()
}

#[async_trait::async_trait]
impl Transport for ScriptedTransport {
    async fn send(&self, request: &ChatRequest) -> Result<String, Error> {
        let (reply, number) = self.take_reply(request)?;
        let tool_calls = reply
            .tool_calls
            .iter()
            .enumerate()
            .map(|(index, (name, arguments))| {
                ToolCall::function(tool_call_id(number, index), name, arguments)
            })
            .collect();
        let response = ChatResponse {
            id: response_id(number),
            model: response_model(&reply, request),
            created: 0,
            choices: vec![Choice {
                index: 0,
                message: AssistantMessage {
                    content: reply.content.clone(),
                    tool_calls,
                    ..AssistantMessage::default()
                },
                finish_reason: Some(reply.finish_reason()),
            }],
            usage: Some(reply.usage(request)),
            system_fingerprint: None,
        };
        to_json(&response)
    }

    async fn send_streaming(&self, request: &ChatRequest) -> Result<DataStream, Error> {
        let (reply, number) = self.take_reply(request)?;
        let id = response_id(number);
        let model = response_model(&reply, request);
        let chunk = |delta: Delta, finish_reason: Option<String>| ChatChunk {
            id: id.clone(),
            model: model.clone(),
            choices: vec![ChunkChoice {
                index: 0,
                delta,
                finish_reason,
            }],
            ..ChatChunk::default()
        };

        let mut chunks = vec![chunk(
            Delta {
                role: Some("assistant".to_owned()),
                ..Delta::default()
            },
            None,
        )];
        for piece in pieces(reply.content.as_deref().unwrap_or_default(), reply.chunk_chars) {
            chunks.push(chunk(
                Delta {
                    content: Some(piece),
                    ..Delta::default()
                },
                None,
            ));
        }
        for (index, (name, arguments)) in reply.tool_calls.iter().enumerate() {
            let fragment = |id: Option<String>, name: Option<String>, arguments: String| Delta {
                tool_calls: vec![ToolCallDelta {
                    index: u32::try_from(index).unwrap_or(u32::MAX),
                    kind: id.as_ref().map(|_| "function".to_owned()),
                    id,
                    function: Some(FunctionCallDelta {
                        name,
                        arguments: Some(arguments),
                    }),
                }],
                ..Delta::default()
            };
            chunks.push(chunk(
                fragment(
                    Some(tool_call_id(number, index)),
                    Some(name.clone()),
                    String::new(),
                ),
                None,
            ));
            for piece in pieces(arguments, reply.chunk_chars) {
                chunks.push(chunk(fragment(None, None, piece), None));
            }
        }
        chunks.push(chunk(Delta::default(), Some(reply.finish_reason())));
        if request
            .stream_options
            .is_some_and(|options| options.include_usage)
        {
            chunks.push(ChatChunk {
                id: id.clone(),
                model: model.clone(),
                usage: Some(reply.usage(request)),
                ..ChatChunk::default()
            });
        }

        let mut payloads = chunks.iter().map(to_json).collect::<Result<Vec<_>, _>>()?;
        let ending = match reply.cut_after_chunks {
            Some(kept) => {
                payloads.truncate(kept);
                Some(Err(Error::StreamCut {
                    chunks: 0,
                    reason: "scripted connection drop".to_owned(),
                }))
            }
            None => Some(Ok("[DONE]".to_owned())),
        };
        let items: Vec<Result<String, Error>> = payloads.into_iter().map(Ok).chain(ending).collect();
        Ok(Box::pin(stream::iter(items)))
    }

    fn is_dry_run(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::types::Message;
    use serde_json::json;

    #[test]
    fn matcher_picks_a_later_reply_and_unmatched_requests_name_what_was_asked() {
        let script = ScriptedTransport::new([
            ScriptedReply::text("answer"),
            ScriptedReply::text(r#"{"score": 1}"#).when(|request| request.system_text().contains("judge")),
        ]);
        let judge = ChatRequest::new([Message::system("You are a judge."), Message::user("rate it")]);
        let (reply, number) = script.take_reply(&judge).unwrap();
        assert_eq!(reply.content.as_deref(), Some(r#"{"score": 1}"#));
        assert_eq!(number, 1);
        let (reply, _) = script
            .take_reply(&ChatRequest::new([Message::user("hi")]))
            .unwrap();
        assert_eq!(reply.content.as_deref(), Some("answer"));
        let error = script
            .take_reply(&ChatRequest::new([Message::user("one more")]))
            .unwrap_err();
        assert!(error.to_string().contains("request #3"), "{error}");
        assert!(error.to_string().contains("one more"), "{error}");
    }

    #[test]
    fn estimated_usage_is_about_four_characters_per_token() {
        let request = ChatRequest::new([Message::user("x".repeat(400))]);
        let usage = ScriptedReply::text("y".repeat(40)).usage(&request);
        assert_eq!((usage.prompt_tokens, usage.completion_tokens), (100, 10));
    }

    #[test]
    fn string_arguments_are_sent_verbatim() {
        let reply = ScriptedReply::tool_call("f", "{not json").and_tool_call("g", json!({"a": 1}));
        assert_eq!(reply.tool_calls[0].1, "{not json");
        assert_eq!(reply.tool_calls[1].1, r#"{"a":1}"#);
    }
}
