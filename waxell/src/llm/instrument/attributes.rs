//! Attributes of a call that hold no content: request parameters, finish reasons, and the OpenInference
//! names of a provider.

use opentelemetry::{Array, KeyValue, StringValue, Value};

use crate::llm::types::{ChatRequest, ChatResponse};
use crate::semconv::*;

/// Request parameters as GenAI attributes plus `llm.invocation_parameters` (no content: safe to record
/// whatever the capture policy).
pub(super) fn request_parameters(request: &ChatRequest) -> Vec<KeyValue> {
    let mut attributes = Vec::new();
    let mut push_f64 = |key: &'static str, value: Option<f64>| {
        if let Some(value) = value {
            attributes.push(KeyValue::new(key, value));
        }
    };
    push_f64(GEN_AI_REQUEST_TEMPERATURE, request.temperature);
    push_f64(GEN_AI_REQUEST_TOP_P, request.top_p);
    push_f64(GEN_AI_REQUEST_FREQUENCY_PENALTY, request.frequency_penalty);
    push_f64(GEN_AI_REQUEST_PRESENCE_PENALTY, request.presence_penalty);
    if let Some(max_tokens) = request.max_completion_tokens.or(request.max_tokens) {
        attributes.push(KeyValue::new(GEN_AI_REQUEST_MAX_TOKENS, i64::from(max_tokens)));
    }
    if let Some(seed) = request.seed {
        attributes.push(KeyValue::new(GEN_AI_REQUEST_SEED, seed));
    }
    if let Some(n) = request.n.filter(|n| *n != 1) {
        attributes.push(KeyValue::new(GEN_AI_REQUEST_CHOICE_COUNT, i64::from(n)));
    }
    if !request.stop.is_empty() {
        attributes.push(KeyValue::new(
            GEN_AI_REQUEST_STOP_SEQUENCES,
            string_array(request.stop.iter().cloned()),
        ));
    }
    if let Some(format) = &request.response_format {
        attributes.push(KeyValue::new(GEN_AI_OUTPUT_TYPE, format.output_type()));
    }
    if let Ok(serde_json::Value::Object(mut parameters)) = serde_json::to_value(request) {
        // Content is captured separately (and only when allowed); the rest is configuration.
        for content_key in ["messages", "tools", "user"] {
            parameters.remove(content_key);
        }
        attributes.push(KeyValue::new(
            OI_LLM_INVOCATION_PARAMETERS,
            serde_json::Value::Object(parameters).to_string(),
        ));
    }
    attributes
}

fn string_array(values: impl Iterator<Item = String>) -> Value {
    Value::Array(Array::String(values.map(StringValue::from).collect()))
}

/// The provider's finish reasons, one per choice, as sent (`stop`, `tool_calls`, ...).
pub(super) fn finish_reasons(response: &ChatResponse) -> Value {
    string_array(
        response
            .choices
            .iter()
            .filter_map(|choice| choice.finish_reason.clone()),
    )
}

/// OpenInference's `llm.provider` for a GenAI `gen_ai.provider.name`: the two vocabularies agree on
/// `openai`, `anthropic`, `cohere`, `deepseek`, and differ on these.
pub(super) fn openinference_provider(provider: &str) -> String {
    match provider {
        "gcp.gemini" | "gcp.vertex_ai" | "gcp.gen_ai" => "google",
        "mistral_ai" => "mistralai",
        "aws.bedrock" => "aws",
        "azure.ai.openai" | "azure.ai.inference" => "azure",
        "x_ai" => "xai",
        other => other,
    }
    .to_owned()
}

/// OpenInference's `llm.system` (the model family's API): Google's models are `vertexai` there.
pub(super) fn openinference_system(provider: &str) -> String {
    match openinference_provider(provider).as_str() {
        "google" => "vertexai".to_owned(),
        other => other.to_owned(),
    }
}

#[cfg(test)]
mod openinference_tests {
    #[test]
    fn genai_provider_names_map_to_openinference_ones() {
        assert_eq!(super::openinference_provider("gcp.gemini"), "google");
        assert_eq!(super::openinference_system("gcp.gemini"), "vertexai");
        assert_eq!(super::openinference_provider("mistral_ai"), "mistralai");
        assert_eq!(super::openinference_provider("anthropic"), "anthropic");
        assert_eq!(super::openinference_system("openai"), "openai");
    }
}
