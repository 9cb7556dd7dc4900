//! Every attribute key, span-name prefix and event name waxell emits, in one place.
//!
//! OpenTelemetry GenAI keys are pinned to semantic conventions **v1.41.1** (the upstream Rust constants are
//! deprecated and experimental, so we keep our own). Each span also carries the OpenInference equivalents
//! (`openinference.span.kind`, `input.value`, ...) so Phoenix, Langfuse, MLflow and Jaeger all render it.
//! Keys that have no convention use the `waxell.` namespace, matching the Python SDK where it has a name.
//!
//! Each constant is named after the key it holds, so the key is its documentation; docs/attributes.md says what
//! each records on which span.
#![allow(missing_docs)]

// ---- OpenTelemetry GenAI (v1.41.1) ----
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
pub const GEN_AI_AGENT_NAME: &str = "gen_ai.agent.name";
pub const GEN_AI_AGENT_ID: &str = "gen_ai.agent.id";
pub const GEN_AI_AGENT_DESCRIPTION: &str = "gen_ai.agent.description";
pub const GEN_AI_CONVERSATION_ID: &str = "gen_ai.conversation.id";
pub const GEN_AI_DATA_SOURCE_ID: &str = "gen_ai.data_source.id";
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
pub const GEN_AI_TOOL_TYPE: &str = "gen_ai.tool.type";
pub const GEN_AI_TOOL_DESCRIPTION: &str = "gen_ai.tool.description";
pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
pub const GEN_AI_TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
pub const GEN_AI_TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";
pub const GEN_AI_TOOL_DEFINITIONS: &str = "gen_ai.tool.definitions";
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
pub const GEN_AI_REQUEST_TEMPERATURE: &str = "gen_ai.request.temperature";
pub const GEN_AI_REQUEST_TOP_P: &str = "gen_ai.request.top_p";
pub const GEN_AI_REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
pub const GEN_AI_REQUEST_FREQUENCY_PENALTY: &str = "gen_ai.request.frequency_penalty";
pub const GEN_AI_REQUEST_PRESENCE_PENALTY: &str = "gen_ai.request.presence_penalty";
pub const GEN_AI_REQUEST_STOP_SEQUENCES: &str = "gen_ai.request.stop_sequences";
pub const GEN_AI_REQUEST_SEED: &str = "gen_ai.request.seed";
pub const GEN_AI_REQUEST_CHOICE_COUNT: &str = "gen_ai.request.choice.count";
pub const GEN_AI_REQUEST_STREAM: &str = "gen_ai.request.stream";
pub const GEN_AI_OUTPUT_TYPE: &str = "gen_ai.output.type";
pub const GEN_AI_RESPONSE_ID: &str = "gen_ai.response.id";
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
pub const GEN_AI_RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
pub const GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: &str = "gen_ai.response.time_to_first_chunk";
pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
pub const GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
pub const GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: &str = "gen_ai.usage.cache_creation.input_tokens";
pub const GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: &str = "gen_ai.usage.reasoning.output_tokens";
pub const GEN_AI_INPUT_MESSAGES: &str = "gen_ai.input.messages";
pub const GEN_AI_OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
pub const GEN_AI_SYSTEM_INSTRUCTIONS: &str = "gen_ai.system_instructions";
pub const GEN_AI_TOKEN_TYPE: &str = "gen_ai.token.type";
pub const SERVER_ADDRESS: &str = "server.address";
pub const SERVER_PORT: &str = "server.port";
pub const ERROR_TYPE: &str = "error.type";

/// Event carrying one evaluation (our `score()`).
pub const GEN_AI_EVALUATION_RESULT: &str = "gen_ai.evaluation.result";
pub const GEN_AI_EVALUATION_NAME: &str = "gen_ai.evaluation.name";
pub const GEN_AI_EVALUATION_SCORE_VALUE: &str = "gen_ai.evaluation.score.value";
pub const GEN_AI_EVALUATION_SCORE_LABEL: &str = "gen_ai.evaluation.score.label";
pub const GEN_AI_EVALUATION_EXPLANATION: &str = "gen_ai.evaluation.explanation";

/// Metrics (gen-ai-metrics.md).
pub const METRIC_TOKEN_USAGE: &str = "gen_ai.client.token.usage";
pub const METRIC_OPERATION_DURATION: &str = "gen_ai.client.operation.duration";

// Well-known operation names. Those of the macros' spans (also their span names' prefixes) are defined with
// the span kinds, which the macros share.
pub const OP_INVOKE_AGENT: &str = waxell_kind::Kind::Agent.operation();
pub const OP_EXECUTE_TOOL: &str = waxell_kind::Kind::Tool.operation();
pub const OP_CHAT: &str = "chat";
pub const OP_RETRIEVAL: &str = waxell_kind::Kind::Retrieval.operation();
/// Custom operations (no convention exists yet for an agent's own reasoning or branch choice).
pub const OP_REASONING: &str = waxell_kind::Kind::Reasoning.operation();
pub const OP_DECIDE: &str = waxell_kind::Kind::Decision.operation();
pub const OP_STEP: &str = waxell_kind::Kind::Step.operation();

// ---- OpenInference ----
pub const OI_SPAN_KIND: &str = "openinference.span.kind";
pub const OI_INPUT_VALUE: &str = "input.value";
pub const OI_INPUT_MIME_TYPE: &str = "input.mime_type";
pub const OI_OUTPUT_VALUE: &str = "output.value";
pub const OI_OUTPUT_MIME_TYPE: &str = "output.mime_type";
pub const OI_AGENT_NAME: &str = "agent.name";
pub const OI_SESSION_ID: &str = "session.id";
pub const OI_USER_ID: &str = "user.id";
pub const OI_TOOL_NAME: &str = "tool.name";
pub const OI_TOOL_DESCRIPTION: &str = "tool.description";
pub const OI_TOOL_PARAMETERS: &str = "tool.parameters";
pub const OI_LLM_MODEL_NAME: &str = "llm.model_name";
pub const OI_LLM_PROVIDER: &str = "llm.provider";
pub const OI_LLM_SYSTEM: &str = "llm.system";
pub const OI_LLM_INVOCATION_PARAMETERS: &str = "llm.invocation_parameters";
pub const OI_LLM_TOKEN_COUNT_PROMPT: &str = "llm.token_count.prompt";
pub const OI_LLM_TOKEN_COUNT_COMPLETION: &str = "llm.token_count.completion";
pub const OI_LLM_TOKEN_COUNT_TOTAL: &str = "llm.token_count.total";
pub const OI_LLM_COST_TOTAL: &str = "llm.cost.total";
/// Prefixes of OpenInference's flattened lists: `llm.input_messages.{i}.message.role`, ...
pub const OI_LLM_INPUT_MESSAGES: &str = "llm.input_messages";
pub const OI_LLM_OUTPUT_MESSAGES: &str = "llm.output_messages";
pub const OI_LLM_TOOLS: &str = "llm.tools";
/// Input messages left out of the flattened `llm.input_messages.*` (the oldest ones) to stay under the
/// span's attribute limit; `gen_ai.input.messages` still has them all.
pub const WAXELL_LLM_INPUT_MESSAGES_OMITTED: &str = "waxell.llm.input_messages.omitted";
pub const OI_RETRIEVAL_DOCUMENTS: &str = "retrieval.documents";
pub const OI_METADATA: &str = "metadata";
pub const OI_TAG_TAGS: &str = "tag.tags";

pub const OI_KIND_AGENT: &str = "AGENT";
pub const OI_KIND_TOOL: &str = "TOOL";
pub const OI_KIND_CHAIN: &str = "CHAIN";
pub const OI_KIND_LLM: &str = "LLM";
pub const OI_KIND_RETRIEVER: &str = "RETRIEVER";

pub const MIME_JSON: &str = "application/json";
pub const MIME_TEXT: &str = "text/plain";

// ---- waxell.* (no convention; names follow the Python SDK where it has one) ----
pub const WAXELL_SPAN_TYPE: &str = "waxell.span_type";
pub const WAXELL_AGENT_NAME: &str = "waxell.agent_name";
pub const WAXELL_SESSION_ID: &str = "waxell.session_id";
pub const WAXELL_USER_ID: &str = "waxell.user_id";
/// Prefix of `tag()` attributes on the agent span: `waxell.tag.{key}`.
pub const WAXELL_TAG_PREFIX: &str = "waxell.tag.";
/// Prefix of `metadata()` attributes on the agent span: `waxell.meta.{key}`.
pub const WAXELL_META_PREFIX: &str = "waxell.meta.";
/// Prefix of the latest value of each score on the agent span: `waxell.score.{name}`.
pub const WAXELL_SCORE_PREFIX: &str = "waxell.score.";
pub const WAXELL_SCORE_DATA_TYPE: &str = "waxell.score.data_type";
pub const WAXELL_TOOL_NAME: &str = "waxell.tool.name";
pub const WAXELL_TOOL_TYPE: &str = "waxell.tool.type";
pub const WAXELL_REASONING_STEP: &str = "waxell.reasoning.step";
pub const WAXELL_REASONING_THOUGHT: &str = "waxell.reasoning.thought";
pub const WAXELL_REASONING_EVIDENCE: &str = "waxell.reasoning.evidence";
pub const WAXELL_REASONING_CONCLUSION: &str = "waxell.reasoning.conclusion";
pub const WAXELL_DECISION_NAME: &str = "waxell.decision.name";
pub const WAXELL_DECISION_OPTIONS: &str = "waxell.decision.options";
pub const WAXELL_DECISION_CHOSEN: &str = "waxell.decision.chosen";
pub const WAXELL_DECISION_REASONING: &str = "waxell.decision.reasoning";
pub const WAXELL_DECISION_CONFIDENCE: &str = "waxell.decision.confidence";
/// `true` when the chosen value is not one of the declared options.
pub const WAXELL_DECISION_INVALID_CHOICE: &str = "waxell.decision.invalid_choice";
pub const WAXELL_STEP_NAME: &str = "waxell.step.name";
pub const WAXELL_RETRIEVAL_SOURCE: &str = "waxell.retrieval.source";
pub const WAXELL_RETRIEVAL_QUERY: &str = "waxell.retrieval.query";
pub const WAXELL_RETRIEVAL_RESULT_COUNT: &str = "waxell.retrieval.result_count";
pub const WAXELL_RETRIEVAL_SCORES: &str = "waxell.retrieval.scores";
/// Set on a span whose future was dropped before it completed.
pub const WAXELL_CANCELLED: &str = "waxell.cancelled";
/// Set on a span whose function panicked; the panic continues.
pub const WAXELL_PANIC: &str = "waxell.panic";
/// Set on spans produced through the scripted (dry-run) LLM transport.
pub const WAXELL_DRY_RUN: &str = "waxell.dry_run";
pub const WAXELL_LLM_COST: &str = "waxell.llm.cost";
pub const WAXELL_LLM_CHUNK_COUNT: &str = "waxell.llm.chunk_count";

// Sandbox boundary (every backend: local, e2b).
pub const WAXELL_SANDBOX_BACKEND: &str = "waxell.sandbox.backend";
pub const WAXELL_SANDBOX_ID: &str = "waxell.sandbox.id";
/// What isolated the code: `bubblewrap`, or a container runtime such as `runc` or `runsc` (gVisor).
pub const WAXELL_SANDBOX_RUNTIME: &str = "waxell.sandbox.runtime";
pub const WAXELL_SANDBOX_TEMPLATE: &str = "waxell.sandbox.template";
pub const WAXELL_SANDBOX_LANGUAGE: &str = "waxell.sandbox.language";
pub const WAXELL_SANDBOX_CONTEXT_ID: &str = "waxell.sandbox.context_id";
pub const WAXELL_SANDBOX_CODE_LENGTH: &str = "waxell.sandbox.code_length";
pub const WAXELL_SANDBOX_CODE_PREVIEW: &str = "waxell.sandbox.code_preview";
pub const WAXELL_SANDBOX_OUTPUT_PREVIEW: &str = "waxell.sandbox.output_preview";
pub const WAXELL_SANDBOX_ERROR_NAME: &str = "waxell.sandbox.error.name";
pub const WAXELL_SANDBOX_ERROR_VALUE: &str = "waxell.sandbox.error.value";
pub const WAXELL_SANDBOX_EXECUTION_COUNT: &str = "waxell.sandbox.execution_count";
/// A cell's stdout and stderr (content-gated, shortened like the previews).
pub const WAXELL_SANDBOX_STDOUT: &str = "waxell.sandbox.stdout";
pub const WAXELL_SANDBOX_STDERR: &str = "waxell.sandbox.stderr";
/// The traceback of the error a cell raised (content-gated).
pub const WAXELL_SANDBOX_ERROR_TRACEBACK: &str = "waxell.sandbox.error.traceback";
/// A cell's image results, base64 by format: `waxell.sandbox.result.{index}.png` / `.jpeg` (content-gated;
/// an image over [`SANDBOX_IMAGE_MAX_BASE64`] characters is left out, as a cut image is no image).
pub const WAXELL_SANDBOX_RESULT_PREFIX: &str = "waxell.sandbox.result.";
/// The largest image (base64 characters) recorded on a sandbox cell's span.
pub const SANDBOX_IMAGE_MAX_BASE64: usize = 256 * 1024;
pub const WAXELL_SANDBOX_RESULT_TYPES: &str = "waxell.sandbox.result_types";
/// `sandbox.metrics`: CPU use (percent of the sandbox's CPUs), memory and disk used (bytes).
pub const WAXELL_SANDBOX_CPU_USED_PCT: &str = "waxell.sandbox.cpu_used_pct";
pub const WAXELL_SANDBOX_MEM_USED: &str = "waxell.sandbox.mem_used";
pub const WAXELL_SANDBOX_DISK_USED: &str = "waxell.sandbox.disk_used";
/// A command run in the sandbox (content: only with content capture, scrubbed and truncated).
pub const WAXELL_SANDBOX_COMMAND: &str = "waxell.sandbox.command";
/// A command's exit code (-1 when a signal ended it).
pub const WAXELL_SANDBOX_EXIT_CODE: &str = "waxell.sandbox.exit_code";
/// Bytes a command wrote to stdout and stderr together.
pub const WAXELL_SANDBOX_OUTPUT_BYTES: &str = "waxell.sandbox.output_bytes";
pub const WAXELL_SANDBOX_FILE_PATH: &str = "waxell.sandbox.file.path";
pub const WAXELL_SANDBOX_FILE_SIZE: &str = "waxell.sandbox.file.size";
/// `sandbox.make_dir`: whether the directory was new.
pub const WAXELL_SANDBOX_FILE_CREATED: &str = "waxell.sandbox.file.created";
/// `sandbox.rename`: where the entry went.
pub const WAXELL_SANDBOX_FILE_DESTINATION: &str = "waxell.sandbox.file.destination";
/// `sandbox.write_file` with metadata: how many keys (their values are the user's, not recorded).
pub const WAXELL_SANDBOX_FILE_METADATA_COUNT: &str = "waxell.sandbox.file.metadata_count";
/// `sandbox.watch_dir`: whether subdirectories are watched too.
pub const WAXELL_SANDBOX_WATCH_RECURSIVE: &str = "waxell.sandbox.watch.recursive";
/// `sandbox.snapshot`: the snapshot's id (a template new sandboxes start from).
pub const WAXELL_SANDBOX_SNAPSHOT_ID: &str = "waxell.sandbox.snapshot.id";
/// `sandbox.fork`: how many forks were asked for.
pub const WAXELL_SANDBOX_FORK_COUNT: &str = "waxell.sandbox.fork.count";
/// `sandbox.fork`: the ids of the forks that started (string array; fewer than the count when
/// some failed).
pub const WAXELL_SANDBOX_FORK_IDS: &str = "waxell.sandbox.fork.ids";

// ---- resource ----
pub const TELEMETRY_SDK_NAME: &str = "telemetry.sdk.name";
pub const WAXELL_SDK_NAME: &str = "waxell.sdk.name";
pub const WAXELL_SDK_VERSION: &str = "waxell.sdk.version";
pub const OPENINFERENCE_PROJECT_NAME: &str = "openinference.project.name";
/// The Waxell tenant the API reported at endpoint discovery.
pub const WAXELL_TENANT_ID: &str = "waxell.tenant_id";

// ---- LLM (owned by the `llm` module) ----
/// Value of `waxell.span_type` on `chat {model}` spans (the Python SDK's name).
pub const WAXELL_SPAN_TYPE_LLM_CALL: &str = "llm_call";
pub const OI_LLM_TOKEN_COUNT_PROMPT_CACHE_READ: &str = "llm.token_count.prompt_details.cache_read";
pub const OI_LLM_TOKEN_COUNT_PROMPT_CACHE_WRITE: &str = "llm.token_count.prompt_details.cache_write";
pub const OI_LLM_TOKEN_COUNT_COMPLETION_REASONING: &str = "llm.token_count.completion_details.reasoning";
/// Streaming only: seconds from sending the request to the first chunk (gen-ai-metrics.md).
pub const METRIC_TIME_TO_FIRST_CHUNK: &str = "gen_ai.client.operation.time_to_first_chunk";
/// Decision name recorded when one response calls several tools at once (the Python SDK's name).
pub const DECISION_PARALLEL_TOOL_CALLS: &str = "tool_calls";
/// Prefix of the decision name recorded when a response calls one tool: `tool_call:{name}`.
pub const DECISION_TOOL_CALL_PREFIX: &str = "tool_call:";

/// `name` as one valid attribute-key segment (OpenTelemetry's naming rules: lowercase `a-z`, digits and `_`;
/// `.` separates namespaces, so it is replaced too): `decision_confidence:Output-Format` becomes
/// `decision_confidence_output_format`. For names that become part of a key (`waxell.score.{name}`, ...);
/// the original name stays in the value or event that carries it.
pub fn key_segment(name: &str) -> std::borrow::Cow<'_, str> {
    let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    if !name.is_empty() && name.chars().all(valid) {
        return name.into();
    }
    let mapped: String = name
        .chars()
        .map(|c| {
            if valid(c.to_ascii_lowercase()) {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if mapped.is_empty() {
        "_".into()
    } else {
        mapped.into()
    }
}

#[cfg(test)]
mod key_segment_tests {
    use super::key_segment;

    #[test]
    fn names_become_valid_key_segments() {
        assert_eq!(key_segment("output_quality"), "output_quality");
        assert_eq!(
            key_segment("decision_confidence:output_format"),
            "decision_confidence_output_format"
        );
        assert_eq!(key_segment("Tone.Of-Voice 2"), "tone_of_voice_2");
        assert_eq!(key_segment(""), "_");
    }
}
