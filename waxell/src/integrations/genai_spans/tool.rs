//! An agent runtime's `execute_tool` span, recorded like a `#[tool]`'s.

use opentelemetry::trace::{SpanBuilder, Tracer};
use opentelemetry::{Context, KeyValue};

use super::is_bridge_bookkeeping;
use crate::semconv::*;
use crate::telemetry::bridge::{BridgeSpan, BridgeTracer};

/// An agent runtime's `execute_tool` span: named `execute_tool {tool}` once the tool is known, with the
/// OpenInference and waxell tool attributes, and its arguments and result captured under waxell's content
/// policy (scrubbed, truncated) like a `#[tool]`'s.
pub(crate) struct ToolSpan {
    pub(super) inner: BridgeSpan,
    pub(super) state: std::sync::Arc<crate::telemetry::State>,
}

impl std::fmt::Debug for ToolSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSpan")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl ToolSpan {
    pub(super) fn build(
        tracer: &BridgeTracer,
        mut builder: SpanBuilder,
        attributes: Vec<KeyValue>,
        parent_cx: &Context,
        state: std::sync::Arc<crate::telemetry::State>,
    ) -> Self {
        let mut kept = vec![
            KeyValue::new(OI_SPAN_KIND, OI_KIND_TOOL),
            KeyValue::new(WAXELL_SPAN_TYPE, "tool"),
        ];
        let mut name = None;
        for kv in attributes {
            if kv.key.as_str() == GEN_AI_TOOL_NAME {
                name = Some(kv.value.as_str().into_owned());
            }
            kept.extend(tool_attributes(&state, kv));
        }
        if let Some(name) = name {
            builder.name = format!("{OP_EXECUTE_TOOL} {name}").into();
        }
        builder.attributes = Some(kept);
        Self {
            inner: tracer.build_with_context(builder, parent_cx),
            state,
        }
    }

    pub(super) fn set_attribute(&mut self, attribute: KeyValue) {
        use opentelemetry::trace::Span as _;
        if attribute.key.as_str() == GEN_AI_TOOL_NAME {
            self.inner
                .update_name(format!("{OP_EXECUTE_TOOL} {}", attribute.value.as_str()));
        }
        for kv in tool_attributes(&self.state, attribute) {
            self.inner.set_attribute(kv);
        }
    }
}

/// One attribute of a tool span as waxell records it: bookkeeping dropped, the tool's name mirrored,
/// arguments and result only when content may be captured, scrubbed.
fn tool_attributes(state: &crate::telemetry::State, kv: KeyValue) -> Vec<KeyValue> {
    let key = kv.key.as_str();
    if is_bridge_bookkeeping(key) {
        return Vec::new();
    }
    match key {
        GEN_AI_TOOL_NAME => {
            let name = kv.value.as_str().into_owned();
            vec![
                KeyValue::new(OI_TOOL_NAME, name.clone()),
                KeyValue::new(WAXELL_TOOL_NAME, name),
                kv,
            ]
        }
        GEN_AI_TOOL_TYPE => vec![
            KeyValue::new(WAXELL_TOOL_TYPE, kv.value.as_str().into_owned()),
            kv,
        ],
        GEN_AI_TOOL_CALL_ARGUMENTS | GEN_AI_TOOL_CALL_RESULT => {
            if !state.capture.content {
                return Vec::new();
            }
            let text = state.content(&kv.value.as_str());
            let mirror = if key == GEN_AI_TOOL_CALL_ARGUMENTS {
                OI_INPUT_VALUE
            } else {
                OI_OUTPUT_VALUE
            };
            vec![
                KeyValue::new(kv.key.clone(), text.clone()),
                KeyValue::new(mirror, text),
            ]
        }
        _ => vec![kv],
    }
}
