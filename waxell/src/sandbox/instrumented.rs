//! [`Sandbox`]: the one place where every backend is instrumented. Each call starts a span under the
//! caller's current context (usually a `#[tool]` span) and runs the backend inside it, so spans the
//! backend itself emits nest below.

use std::future::Future;
use std::time::Duration;

use opentelemetry::trace::{FutureExt, SpanBuilder, SpanKind, Status, TraceContextExt};
use opentelemetry::KeyValue;

use super::{
    CodeContext, CommandOutput, DirWatch, EntryInfo, Execution, ProcessSpec, RunOptions, SandboxBackend,
    SandboxError, SandboxMetrics, SandboxOptions, SandboxProcess, SandboxSession, SandboxSnapshot,
    WatchOptions,
};
use crate::semconv::*;
use crate::telemetry;

/// Characters of code or output kept in a span attribute.
const PREVIEW_CHARS: usize = 2048;

/// A live sandbox of any backend, instrumented at this boundary. Create it with [`Sandbox::create`].
pub struct Sandbox {
    backend: &'static str,
    session: Box<dyn SandboxSession>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("backend", &self.backend)
            .field("id", &self.session.sandbox_id())
            .finish()
    }
}

/// Run `work` inside a new span; record `Err` as the span's error status. Every sandbox operation is a
/// tool call on the sandbox (OpenInference kind TOOL, span `execute_tool sandbox.{operation}` as GenAI names tool spans), so
/// backends that group spans by kind (Phoenix, MLflow) never show one as UNKNOWN.
async fn traced<T, F>(
    name: String,
    mut attributes: Vec<KeyValue>,
    work: F,
    on_ok: impl FnOnce(&T) -> Vec<KeyValue>,
) -> Result<T, SandboxError>
where
    F: Future<Output = Result<T, SandboxError>>,
{
    attributes.extend([
        KeyValue::new(GEN_AI_OPERATION_NAME, OP_EXECUTE_TOOL),
        KeyValue::new(GEN_AI_TOOL_NAME, name.clone()),
        KeyValue::new(GEN_AI_TOOL_TYPE, "extension"),
        KeyValue::new(OI_SPAN_KIND, "TOOL"),
        KeyValue::new(OI_TOOL_NAME, name.clone()),
    ]);
    let cx = telemetry::start_current(
        SpanBuilder::from_name(format!("{OP_EXECUTE_TOOL} {name}"))
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes),
    );
    let result = work.with_context(cx.clone()).await;
    let span = cx.span();
    match &result {
        Ok(value) => {
            for attribute in on_ok(value) {
                span.set_attribute(attribute);
            }
        }
        Err(e) => {
            span.set_attribute(KeyValue::new(ERROR_TYPE, e.kind()));
            span.set_status(Status::error(e.to_string()));
        }
    }
    span.end();
    result
}

impl Sandbox {
    /// Create a sandbox with `backend` (span `sandbox.create`).
    pub async fn create<B: SandboxBackend + ?Sized>(
        backend: &B,
        options: &SandboxOptions,
    ) -> Result<Self, SandboxError> {
        let name = backend.name();
        let mut attributes = vec![KeyValue::new(WAXELL_SANDBOX_BACKEND, name)];
        if let Some(template) = &options.template {
            attributes.push(KeyValue::new(WAXELL_SANDBOX_TEMPLATE, template.clone()));
        }
        let session = traced(
            "sandbox.create".into(),
            attributes,
            backend.create(options),
            |session| {
                let mut attributes = vec![KeyValue::new(WAXELL_SANDBOX_ID, session.sandbox_id().to_owned())];
                if let Some(runtime) = session.runtime() {
                    attributes.push(KeyValue::new(WAXELL_SANDBOX_RUNTIME, runtime.to_owned()));
                }
                attributes
            },
        )
        .await?;
        Ok(Self {
            backend: name,
            session,
        })
    }

    /// Wrap an existing session (e.g. one a backend reconnected to).
    pub fn from_session(backend: &'static str, session: Box<dyn SandboxSession>) -> Self {
        Self { backend, session }
    }

    /// The backend's name (`local`, `e2b`, ...), as recorded on spans.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The sandbox's id.
    pub fn sandbox_id(&self) -> &str {
        self.session.sandbox_id()
    }

    /// The backend session, for backend-specific calls (not instrumented).
    pub fn session(&self) -> &dyn SandboxSession {
        self.session.as_ref()
    }

    fn base_attributes(&self) -> Vec<KeyValue> {
        let mut attributes = vec![
            KeyValue::new(WAXELL_SANDBOX_BACKEND, self.backend),
            KeyValue::new(WAXELL_SANDBOX_ID, self.session.sandbox_id().to_owned()),
        ];
        if let Some(runtime) = self.session.runtime() {
            attributes.push(KeyValue::new(WAXELL_SANDBOX_RUNTIME, runtime.to_owned()));
        }
        attributes
    }

    /// Run code (span `execute_tool {backend}.run_code`, a TOOL span). Errors of the code are in
    /// [`Execution::error`] and also mark the span as failed.
    pub async fn run_code(&self, code: &str, options: &RunOptions) -> Result<Execution, SandboxError> {
        let tool = format!("{}.run_code", self.backend);
        let language = options.language.clone().unwrap_or_else(|| "python".into());
        let mut attributes = self.base_attributes();
        attributes.extend([
            KeyValue::new(GEN_AI_OPERATION_NAME, OP_EXECUTE_TOOL),
            KeyValue::new(GEN_AI_TOOL_NAME, tool.clone()),
            KeyValue::new(GEN_AI_TOOL_TYPE, "extension"),
            KeyValue::new(OI_SPAN_KIND, "TOOL"),
            KeyValue::new(OI_TOOL_NAME, tool.clone()),
            KeyValue::new(WAXELL_SANDBOX_LANGUAGE, language),
            KeyValue::new(WAXELL_SANDBOX_CODE_LENGTH, code.chars().count() as i64),
        ]);
        if let Some(context) = &options.context_id {
            attributes.push(KeyValue::new(WAXELL_SANDBOX_CONTEXT_ID, context.clone()));
        }
        let capture = telemetry::capture_content();
        if capture {
            let preview = telemetry::content_preview(code, PREVIEW_CHARS);
            attributes.push(KeyValue::new(WAXELL_SANDBOX_CODE_PREVIEW, preview.clone()));
            attributes.push(KeyValue::new(OI_INPUT_VALUE, preview));
        }
        let cx = telemetry::start_current(
            SpanBuilder::from_name(format!("{OP_EXECUTE_TOOL} {tool}"))
                .with_kind(SpanKind::Internal)
                .with_attributes(attributes),
        );
        let result = self
            .session
            .run_code(code, options)
            .with_context(cx.clone())
            .await;
        let span = cx.span();
        match &result {
            Ok(execution) => {
                let types: Vec<String> = execution.results.iter().flat_map(|r| r.formats()).collect();
                span.set_attribute(KeyValue::new(WAXELL_SANDBOX_RESULT_TYPES, types.join(",")));
                if let Some(count) = execution.execution_count {
                    span.set_attribute(KeyValue::new(WAXELL_SANDBOX_EXECUTION_COUNT, count as i64));
                }
                if capture {
                    let output = output_text(execution);
                    let preview = telemetry::content_preview(&output, PREVIEW_CHARS);
                    span.set_attribute(KeyValue::new(WAXELL_SANDBOX_OUTPUT_PREVIEW, preview.clone()));
                    span.set_attribute(KeyValue::new(OI_OUTPUT_VALUE, preview));
                    for attribute in cell_content(execution) {
                        span.set_attribute(attribute);
                    }
                }
                if let Some(error) = &execution.error {
                    span.set_attribute(KeyValue::new(WAXELL_SANDBOX_ERROR_NAME, error.name.clone()));
                    let value = if capture {
                        telemetry::content_preview(&error.value, PREVIEW_CHARS)
                    } else {
                        String::new()
                    };
                    if capture {
                        span.set_attribute(KeyValue::new(WAXELL_SANDBOX_ERROR_VALUE, value.clone()));
                    }
                    span.set_attribute(KeyValue::new(ERROR_TYPE, error.name.clone()));
                    span.set_status(Status::error(if capture {
                        format!("{}: {value}", error.name)
                    } else {
                        error.name.clone()
                    }));
                }
            }
            Err(e) => {
                span.set_attribute(KeyValue::new(ERROR_TYPE, e.kind()));
                span.set_status(Status::error(e.to_string()));
            }
        }
        span.end();
        result
    }

    /// Run a command to its end (span `execute_tool {backend}.run_command`, a TOOL span): its
    /// output and exit. With content capture on, the span carries the command line and what it
    /// wrote (scrubbed and truncated); always its exit code and how many bytes it wrote. A nonzero
    /// exit marks the span failed (`error.type` = `exit_status`) but is not an `Err`.
    pub async fn run_command(&self, spec: &ProcessSpec) -> Result<CommandOutput, SandboxError> {
        let tool = format!("{}.run_command", self.backend);
        let mut attributes = self.base_attributes();
        attributes.extend([
            KeyValue::new(GEN_AI_OPERATION_NAME, OP_EXECUTE_TOOL),
            KeyValue::new(GEN_AI_TOOL_NAME, tool.clone()),
            KeyValue::new(GEN_AI_TOOL_TYPE, "extension"),
            KeyValue::new(OI_SPAN_KIND, "TOOL"),
            KeyValue::new(OI_TOOL_NAME, tool.clone()),
        ]);
        let capture = telemetry::capture_content();
        if capture {
            let preview = telemetry::content_preview(&spec.command_line(), PREVIEW_CHARS);
            attributes.push(KeyValue::new(WAXELL_SANDBOX_COMMAND, preview.clone()));
            attributes.push(KeyValue::new(OI_INPUT_VALUE, preview));
        }
        let cx = telemetry::start_current(
            SpanBuilder::from_name(format!("{OP_EXECUTE_TOOL} {tool}"))
                .with_kind(SpanKind::Internal)
                .with_attributes(attributes),
        );
        let result = async {
            let process = self.session.start_process(spec).await?;
            Ok::<_, SandboxError>(process.wait().await)
        }
        .with_context(cx.clone())
        .await;
        let span = cx.span();
        match &result {
            Ok(output) => {
                span.set_attribute(KeyValue::new(
                    WAXELL_SANDBOX_EXIT_CODE,
                    i64::from(output.exit.exit_code),
                ));
                let bytes = output.stdout.len() + output.stderr.len();
                span.set_attribute(KeyValue::new(WAXELL_SANDBOX_OUTPUT_BYTES, bytes as i64));
                if capture {
                    let stdout = telemetry::content_preview(&output.stdout_text(), PREVIEW_CHARS);
                    span.set_attribute(KeyValue::new(OI_OUTPUT_VALUE, stdout.clone()));
                    span.set_attribute(KeyValue::new(WAXELL_SANDBOX_STDOUT, stdout));
                    let stderr = output.stderr_text();
                    if !stderr.is_empty() {
                        span.set_attribute(KeyValue::new(
                            WAXELL_SANDBOX_STDERR,
                            telemetry::content_preview(&stderr, PREVIEW_CHARS),
                        ));
                    }
                }
                if !output.success() {
                    span.set_attribute(KeyValue::new(ERROR_TYPE, "exit_status"));
                    span.set_status(Status::error(
                        output.exit.error.clone().unwrap_or_else(|| output.exit.status()),
                    ));
                }
            }
            Err(e) => {
                span.set_attribute(KeyValue::new(ERROR_TYPE, e.kind()));
                span.set_status(Status::error(e.to_string()));
            }
        }
        span.end();
        result
    }

    /// Start a process and return at once (span `sandbox.start_process`, the start only): a
    /// background command or a terminal, read and steered through the [`SandboxProcess`].
    pub async fn start_process(&self, spec: &ProcessSpec) -> Result<SandboxProcess, SandboxError> {
        let mut attributes = self.base_attributes();
        if telemetry::capture_content() {
            let preview = telemetry::content_preview(&spec.command_line(), PREVIEW_CHARS);
            attributes.push(KeyValue::new(WAXELL_SANDBOX_COMMAND, preview));
        }
        traced(
            "sandbox.start_process".into(),
            attributes,
            self.session.start_process(spec),
            |_| Vec::new(),
        )
        .await
    }

    /// Span `sandbox.write_file`.
    pub async fn write_file(&self, path: &str, data: &[u8]) -> Result<EntryInfo, SandboxError> {
        let mut attributes = self.file_attributes(path);
        attributes.push(KeyValue::new(WAXELL_SANDBOX_FILE_SIZE, data.len() as i64));
        traced(
            "sandbox.write_file".into(),
            attributes,
            self.session.write_file(path, data),
            |_| Vec::new(),
        )
        .await
    }

    /// Span `sandbox.write_file`, with `waxell.sandbox.file.metadata_count` (the values are not
    /// recorded).
    pub async fn write_file_with_metadata(
        &self,
        path: &str,
        data: &[u8],
        metadata: &std::collections::BTreeMap<String, String>,
    ) -> Result<EntryInfo, SandboxError> {
        let mut attributes = self.file_attributes(path);
        attributes.push(KeyValue::new(WAXELL_SANDBOX_FILE_SIZE, data.len() as i64));
        attributes.push(KeyValue::new(
            WAXELL_SANDBOX_FILE_METADATA_COUNT,
            metadata.len() as i64,
        ));
        traced(
            "sandbox.write_file".into(),
            attributes,
            self.session.write_file_with_metadata(path, data, metadata),
            |_| Vec::new(),
        )
        .await
    }

    /// Span `sandbox.watch_dir` for starting the watch (its events are not spans).
    pub async fn watch_dir(
        &self,
        path: &str,
        options: WatchOptions,
    ) -> Result<Box<dyn DirWatch>, SandboxError> {
        let mut attributes = self.file_attributes(path);
        attributes.push(KeyValue::new(WAXELL_SANDBOX_WATCH_RECURSIVE, options.recursive));
        traced(
            "sandbox.watch_dir".into(),
            attributes,
            self.session.watch_dir(path, options),
            |_| Vec::new(),
        )
        .await
    }

    /// Span `sandbox.read_file`.
    pub async fn read_file(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
        traced(
            "sandbox.read_file".into(),
            self.file_attributes(path),
            self.session.read_file(path),
            |data| vec![KeyValue::new(WAXELL_SANDBOX_FILE_SIZE, data.len() as i64)],
        )
        .await
    }

    /// Span `sandbox.list_files`.
    pub async fn list_files(&self, path: &str) -> Result<Vec<EntryInfo>, SandboxError> {
        traced(
            "sandbox.list_files".into(),
            self.file_attributes(path),
            self.session.list_files(path),
            |_| Vec::new(),
        )
        .await
    }

    /// Span `sandbox.make_dir`; `waxell.sandbox.file.created` says whether it was new.
    pub async fn make_dir(&self, path: &str) -> Result<bool, SandboxError> {
        traced(
            "sandbox.make_dir".into(),
            self.file_attributes(path),
            self.session.make_dir(path),
            |created| vec![KeyValue::new(WAXELL_SANDBOX_FILE_CREATED, *created)],
        )
        .await
    }

    /// Span `sandbox.rename`, with the destination as `waxell.sandbox.file.destination`.
    pub async fn rename(&self, from: &str, to: &str) -> Result<EntryInfo, SandboxError> {
        let mut attributes = self.file_attributes(from);
        attributes.push(KeyValue::new(
            WAXELL_SANDBOX_FILE_DESTINATION,
            telemetry::content_preview(to, 512),
        ));
        traced(
            "sandbox.rename".into(),
            attributes,
            self.session.rename(from, to),
            |_| Vec::new(),
        )
        .await
    }

    /// Span `sandbox.remove`.
    pub async fn remove(&self, path: &str) -> Result<(), SandboxError> {
        traced(
            "sandbox.remove".into(),
            self.file_attributes(path),
            self.session.remove(path),
            |_| Vec::new(),
        )
        .await
    }

    fn file_attributes(&self, path: &str) -> Vec<KeyValue> {
        let mut attributes = self.base_attributes();
        attributes.push(KeyValue::new(
            WAXELL_SANDBOX_FILE_PATH,
            telemetry::content_preview(path, 512),
        ));
        attributes
    }

    /// Span `sandbox.create_context`.
    pub async fn create_context(
        &self,
        language: Option<&str>,
        cwd: Option<&str>,
    ) -> Result<CodeContext, SandboxError> {
        traced(
            "sandbox.create_context".into(),
            self.base_attributes(),
            self.session.create_context(language, cwd),
            |c| vec![KeyValue::new(WAXELL_SANDBOX_CONTEXT_ID, c.id.clone())],
        )
        .await
    }

    /// The contexts this sandbox has.
    pub async fn list_contexts(&self) -> Result<Vec<CodeContext>, SandboxError> {
        self.session.list_contexts().await
    }

    /// Restart a context: its state is lost, its id kept.
    pub async fn restart_context(&self, context_id: &str) -> Result<(), SandboxError> {
        self.session.restart_context(context_id).await
    }

    /// Remove a context and its state.
    pub async fn remove_context(&self, context_id: &str) -> Result<(), SandboxError> {
        self.session.remove_context(context_id).await
    }

    /// Extend or shorten the sandbox's lifetime, counted from now.
    pub async fn set_timeout(&self, timeout: Duration) -> Result<(), SandboxError> {
        self.session.set_timeout(timeout).await
    }

    /// Pause the sandbox (span `sandbox.pause`); see [`SandboxSession::pause`].
    pub async fn pause(&self) -> Result<(), SandboxError> {
        traced(
            "sandbox.pause".into(),
            self.base_attributes(),
            self.session.pause(),
            |_| Vec::new(),
        )
        .await
    }

    /// Resume a paused sandbox with a lifetime of `timeout` (span `sandbox.resume`).
    pub async fn resume(&self, timeout: Duration) -> Result<(), SandboxError> {
        traced(
            "sandbox.resume".into(),
            self.base_attributes(),
            self.session.resume(timeout),
            |_| Vec::new(),
        )
        .await
    }

    /// The sandbox's resource use now (span `sandbox.metrics`, with the memory and CPU figures).
    pub async fn metrics(&self) -> Result<SandboxMetrics, SandboxError> {
        traced(
            "sandbox.metrics".into(),
            self.base_attributes(),
            self.session.metrics(),
            |m: &SandboxMetrics| {
                vec![
                    KeyValue::new(WAXELL_SANDBOX_CPU_USED_PCT, m.cpu_used_pct),
                    KeyValue::new(WAXELL_SANDBOX_MEM_USED, m.mem_used as i64),
                    KeyValue::new(WAXELL_SANDBOX_DISK_USED, m.disk_used as i64),
                ]
            },
        )
        .await
    }

    /// Snapshot the sandbox (span `sandbox.snapshot`, with `waxell.sandbox.snapshot.id`);
    /// see [`SandboxSession::snapshot`].
    pub async fn snapshot(&self, name: Option<&str>) -> Result<SandboxSnapshot, SandboxError> {
        traced(
            "sandbox.snapshot".into(),
            self.base_attributes(),
            self.session.snapshot(name),
            |snapshot: &SandboxSnapshot| vec![KeyValue::new(WAXELL_SANDBOX_SNAPSHOT_ID, snapshot.id.clone())],
        )
        .await
    }

    /// Start `count` copies of this sandbox, each living `timeout` (span `sandbox.fork`,
    /// with `waxell.sandbox.fork.count` asked for and `waxell.sandbox.fork.ids` of the forks that
    /// started); see [`SandboxSession::fork`]. One result per fork; the forks are traced like this
    /// sandbox.
    pub async fn fork(
        &self,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<Result<Sandbox, SandboxError>>, SandboxError> {
        let mut attributes = self.base_attributes();
        attributes.push(KeyValue::new(
            WAXELL_SANDBOX_FORK_COUNT,
            i64::try_from(count).unwrap_or(i64::MAX),
        ));
        let forks = traced(
            "sandbox.fork".into(),
            attributes,
            self.session.fork(count, timeout),
            |forks: &Vec<Result<Box<dyn SandboxSession>, SandboxError>>| {
                let started: Vec<&str> = forks
                    .iter()
                    .filter_map(|fork| fork.as_ref().ok())
                    .map(|session| session.sandbox_id())
                    .collect();
                vec![KeyValue::new(
                    WAXELL_SANDBOX_FORK_IDS,
                    crate::spans::string_array(&started),
                )]
            },
        )
        .await?;
        Ok(forks
            .into_iter()
            .map(|fork| fork.map(|session| Sandbox::from_session(self.backend, session)))
            .collect())
    }

    /// Span `sandbox.kill`.
    pub async fn kill(&self) -> Result<(), SandboxError> {
        traced(
            "sandbox.kill".into(),
            self.base_attributes(),
            self.session.kill(),
            |_| Vec::new(),
        )
        .await
    }
}

/// What a cell printed, the traceback of its error and its images (charts), for content capture: a viewer
/// such as `waxell ui` shows the cell from these.
fn cell_content(execution: &Execution) -> Vec<KeyValue> {
    let mut attributes = Vec::new();
    for (key, text) in [
        (WAXELL_SANDBOX_STDOUT, execution.stdout()),
        (WAXELL_SANDBOX_STDERR, execution.stderr()),
    ] {
        if !text.is_empty() {
            attributes.push(KeyValue::new(
                key,
                telemetry::content_preview(&text, PREVIEW_CHARS),
            ));
        }
    }
    if let Some(error) = execution.error.as_ref().filter(|e| !e.traceback.is_empty()) {
        attributes.push(KeyValue::new(
            WAXELL_SANDBOX_ERROR_TRACEBACK,
            telemetry::content_preview(&error.traceback, 2 * PREVIEW_CHARS),
        ));
    }
    for (index, result) in execution.results.iter().enumerate() {
        for (format, image) in [("png", &result.png), ("jpeg", &result.jpeg)] {
            if let Some(image) = image.as_ref().filter(|i| i.len() <= SANDBOX_IMAGE_MAX_BASE64) {
                attributes.push(KeyValue::new(
                    format!("{WAXELL_SANDBOX_RESULT_PREFIX}{index}.{format}"),
                    image.clone(),
                ));
            }
        }
    }
    attributes
}

/// What the execution showed: the main result's text, else stdout, plus the error line.
fn output_text(execution: &Execution) -> String {
    let mut out = match execution.text() {
        Some(text) => text.to_owned(),
        None => execution.stdout(),
    };
    if let Some(error) = &execution.error {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("{}: {}", error.name, error.value));
    }
    out
}
