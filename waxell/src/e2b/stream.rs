//! Assembling an [`Execution`] from the `/execute` NDJSON stream, delivering each output and result
//! to the callbacks as its line arrives.

use serde_json::{Map, Value};

use super::http::truncate;
use super::wire::line;
use crate::sandbox::{Execution, ExecutionError, ExecutionResult, OutputMessage, RunOptions, SandboxError};

/// Characters of an offending line kept in a protocol error.
const RECEIVED_CHARS: usize = 256;

/// Field names of E2B's `Result` that [`ExecutionResult`] has; other keys go to `extra`.
const RESULT_FIELDS: &[&str] = &[
    "text",
    "html",
    "markdown",
    "svg",
    "png",
    "jpeg",
    "pdf",
    "latex",
    "json",
    "javascript",
    "data",
    "chart",
    "extra",
    "is_main_result",
];

/// Splits the body into lines (a line may span chunks) and folds them into an [`Execution`].
pub(crate) struct ExecutionAssembler<'a> {
    options: &'a RunOptions,
    execution: Execution,
    partial: Vec<u8>,
    ended: bool,
    lines: usize,
}

impl<'a> ExecutionAssembler<'a> {
    pub(crate) fn new(options: &'a RunOptions) -> Self {
        Self {
            options,
            execution: Execution::default(),
            partial: Vec::new(),
            ended: false,
            lines: 0,
        }
    }

    /// Feed one chunk of the body.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Result<(), SandboxError> {
        self.partial.extend_from_slice(chunk);
        while let Some(newline) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=newline).collect();
            self.line(&line[..line.len() - 1])?;
        }
        Ok(())
    }

    /// The execution, once the body has ended; an error if `end_of_execution` never came.
    pub(crate) fn finish(mut self) -> Result<Execution, SandboxError> {
        if !self.partial.is_empty() {
            let rest = std::mem::take(&mut self.partial);
            self.line(&rest)?;
        }
        if !self.ended {
            return Err(SandboxError::Transport(format!(
                "the /execute stream ended after {} line(s) without end_of_execution (connection cut?)",
                self.lines
            )));
        }
        Ok(self.execution)
    }

    fn line(&mut self, line: &[u8]) -> Result<(), SandboxError> {
        let text = String::from_utf8_lossy(line);
        if text.trim().is_empty() {
            return Ok(());
        }
        self.lines += 1;
        let protocol = |message: &str| SandboxError::Protocol {
            message: format!("/execute stream line {}: {message}", self.lines),
            received: truncate(&text, RECEIVED_CHARS),
        };
        let Ok(Value::Object(mut object)) = serde_json::from_str::<Value>(&text) else {
            return Err(protocol("not a JSON object"));
        };
        let kind = object.remove("type");
        match kind.as_ref().and_then(Value::as_str) {
            Some(stream @ (line::STDOUT | line::STDERR)) => {
                let Some(chunk) = object.get("text").and_then(Value::as_str) else {
                    return Err(protocol("output line without a text"));
                };
                let error = stream == line::STDERR;
                let message = OutputMessage {
                    line: chunk.to_owned(),
                    error,
                };
                let (logs, callback) = if error {
                    (&mut self.execution.logs.stderr, &self.options.on_stderr)
                } else {
                    (&mut self.execution.logs.stdout, &self.options.on_stdout)
                };
                if let Some(callback) = callback {
                    callback(&message);
                }
                logs.push(message.line);
            }
            Some(line::RESULT) => {
                let result = parse_result(object).map_err(|e| protocol(&format!("bad result: {e}")))?;
                if let Some(callback) = &self.options.on_result {
                    callback(&result);
                }
                self.execution.results.push(result);
            }
            Some(line::ERROR) => {
                let field = |name: &str| match object.get(name) {
                    Some(Value::String(s)) => s.clone(),
                    // Some servers send the traceback as a list of lines.
                    Some(Value::Array(lines)) => lines
                        .iter()
                        .map(|l| l.as_str().unwrap_or_default())
                        .collect::<Vec<_>>()
                        .join("\n"),
                    _ => String::new(),
                };
                self.execution.error = Some(ExecutionError {
                    name: field("name"),
                    value: field("value"),
                    traceback: field("traceback"),
                });
            }
            Some(line::NUMBER_OF_EXECUTIONS) => {
                self.execution.execution_count = object.get("execution_count").and_then(Value::as_u64);
            }
            Some(line::END_OF_EXECUTION) => self.ended = true,
            // keepalive, and types newer than this client: E2B's SDKs ignore them too.
            Some(_) => {}
            None => return Err(protocol("no \"type\"")),
        }
        Ok(())
    }
}

/// E2B's `Result` object (minus `type`): known MIME fields by name, anything else into `extra`.
fn parse_result(mut object: Map<String, Value>) -> Result<ExecutionResult, serde_json::Error> {
    let unknown: Vec<String> = object
        .keys()
        .filter(|k| !RESULT_FIELDS.contains(&k.as_str()))
        .cloned()
        .collect();
    let extra: Vec<(String, Value)> = unknown
        .into_iter()
        .filter_map(|k| object.remove(&k).map(|v| (k, v)))
        .collect();
    // `null` fields mean "absent"; drop them so the typed fields parse.
    object.retain(|_, v| !v.is_null());
    let mut result: ExecutionResult = serde_json::from_value(Value::Object(object))?;
    result.extra.extend(extra);
    Ok(result)
}
