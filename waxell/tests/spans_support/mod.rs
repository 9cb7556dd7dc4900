//! Span capture for behaviour tests, over `waxell::testing`: each test captures the spans of its own
//! thread and context, so the tests of a binary run in one process in parallel (plain `cargo test`).
//! These helpers hand back the SDK's `SpanData` so the assertions can read every field.

#![allow(dead_code, unreachable_pub)]

use opentelemetry::trace::Status;
use opentelemetry_sdk::trace::SpanData;

pub struct Capture {
    pub inner: waxell::testing::Capture,
}

pub fn install() -> Capture {
    install_with(|b| b)
}

pub fn install_with(
    configure: impl FnOnce(waxell::testing::CaptureBuilder) -> waxell::testing::CaptureBuilder,
) -> Capture {
    Capture {
        inner: configure(waxell::testing::builder()).start(),
    }
}

impl Capture {
    pub fn spans(&self) -> Vec<SpanData> {
        self.inner.spans().iter().map(|s| s.data().clone()).collect()
    }

    pub fn span(&self, name: &str) -> SpanData {
        let spans = self.spans();
        spans.iter().find(|s| s.name == name).cloned().unwrap_or_else(|| {
            panic!(
                "no span named {name:?}; have {:?}",
                spans.iter().map(|s| s.name.to_string()).collect::<Vec<_>>()
            )
        })
    }

    pub fn names(&self) -> Vec<String> {
        self.spans().iter().map(|s| s.name.to_string()).collect()
    }
}

pub fn is_child_of(child: &SpanData, parent: &SpanData) -> bool {
    child.parent_span_id == parent.span_context.span_id()
        && child.span_context.trace_id() == parent.span_context.trace_id()
}

pub fn is_error(span: &SpanData) -> bool {
    matches!(span.status, Status::Error { .. })
}
