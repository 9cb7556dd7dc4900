//! The direct encoding decodes to exactly the request `opentelemetry-proto`'s transform builds.

use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId, TraceState,
    Tracer as _, TracerProvider as _,
};
use opentelemetry::{Array, Context, InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use opentelemetry_sdk::Resource;
use prost::Message as _;

use super::{encode_request, encode_request_json};

fn every_value() -> Vec<KeyValue> {
    vec![
        KeyValue::new("s", "text with ünïcode and a \"quote\""),
        KeyValue::new("empty", ""),
        KeyValue::new("long", "x".repeat(300)),
        KeyValue::new("t", true),
        KeyValue::new("f", false),
        KeyValue::new("zero", 0_i64),
        KeyValue::new("neg", -42_i64),
        KeyValue::new("big", i64::MAX),
        KeyValue::new("min", i64::MIN),
        KeyValue::new("pi", 3.25_f64),
        KeyValue::new("fzero", 0.0_f64),
        KeyValue::new("nan", f64::NAN),
        KeyValue::new("owned", String::from("owned")),
        KeyValue::new("shared", StringValue::from(std::sync::Arc::<str>::from("shared"))),
        KeyValue::new("bools", Value::Array(Array::Bool(vec![true, false]))),
        KeyValue::new("ints", Value::Array(Array::I64(vec![1, -2, 0]))),
        KeyValue::new("floats", Value::Array(Array::F64(vec![0.5]))),
        KeyValue::new(
            "strings",
            Value::Array(Array::String(vec!["a".into(), "".into()])),
        ),
        KeyValue::new("", "empty key"),
    ]
}

/// Spans of every shape: kinds, statuses, parents (local, remote, none), trace state, events, links, dropped
/// counts, and three scopes (interleaved).
fn spans() -> Vec<SpanData> {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .with_max_attributes_per_span(12)
        .with_max_events_per_span(2)
        .with_max_links_per_span(1)
        .build();
    let plain = provider.tracer("plain");
    let versioned = provider.tracer_with_scope(
        InstrumentationScope::builder("versioned")
            .with_version("1.2.3")
            .with_schema_url("https://opentelemetry.io/schemas/1.30.0")
            .with_attributes([KeyValue::new("scope.attr", 7_i64)])
            .build(),
    );
    let remote = SpanContext::new(
        TraceId::from(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10_u128),
        opentelemetry::trace::SpanId::from(0x1112_1314_1516_1718_u64),
        TraceFlags::SAMPLED,
        true,
        TraceState::from_key_value([("vendor", "value"), ("other", "x")]).unwrap(),
    );
    let remote_cx = Context::new().with_remote_span_context(remote.clone());
    for round in 0..3 {
        let tracer = if round == 1 { &versioned } else { &plain };
        let mut root = tracer
            .span_builder(format!("root {round}"))
            .with_kind(SpanKind::Server)
            .with_attributes(every_value())
            .start(tracer);
        root.add_event("first", vec![KeyValue::new("e", 1_i64)]);
        root.add_event_with_timestamp(
            "dated",
            SystemTime::UNIX_EPOCH + Duration::from_nanos(123),
            vec![],
        );
        root.add_event("over the cap", vec![]);
        root.set_status(Status::error(format!("failed {round}")));
        let cx = Context::current_with_span(root);
        for kind in [
            SpanKind::Client,
            SpanKind::Producer,
            SpanKind::Consumer,
            SpanKind::Internal,
        ] {
            let mut child = tracer
                .span_builder("child")
                .with_kind(kind)
                .with_links(vec![
                    Link::with_context(remote.clone()),
                    Link::new(remote.clone(), vec![KeyValue::new("l", "v")], 0),
                ])
                .start_with_context(tracer, &cx);
            child.set_status(Status::Ok);
            child.set_attribute(KeyValue::new("n", round as i64));
        }
        drop(
            plain
                .span_builder("under a remote parent")
                .start_with_context(&plain, &remote_cx),
        );
        cx.span().end();
    }
    drop(provider.tracer("third").start("unset status, no attributes"));
    exporter.get_finished_spans().unwrap()
}

fn resource() -> ResourceAttributesWithSchema {
    (&Resource::builder()
        .with_service_name("encode-test")
        .with_attribute(KeyValue::new("deployment.environment", "test"))
        .with_schema_url([], "https://opentelemetry.io/schemas/1.29.0")
        .build())
        .into()
}

fn transformed(spans: Vec<SpanData>, resource: &ResourceAttributesWithSchema) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: group_spans_by_resource_and_scope(spans, resource),
    }
}

#[test]
fn decodes_to_the_transform_of_every_kind_of_span() {
    let spans = spans();
    assert!(spans.len() > 15, "the fixture made {} spans", spans.len());
    let resource = resource();
    let ours = ExportTraceServiceRequest::decode(encode_request(&spans, &resource).as_slice()).unwrap();
    let theirs = transformed(spans, &resource);
    assert_eq!(theirs.resource_spans[0].scope_spans.len(), 3);
    // NaN != NaN: compare the bytes prost makes of both (deterministic for equal messages).
    assert_eq!(ours.encode_to_vec(), theirs.encode_to_vec());
    assert_eq!(format!("{ours:?}"), format!("{theirs:?}"));
}

#[test]
fn writes_the_bytes_prost_writes() {
    // Not only equal after decoding: the same encoding, field order and omitted defaults included.
    let spans = spans();
    let resource = resource();
    assert_eq!(
        encode_request(&spans, &resource),
        transformed(spans, &resource).encode_to_vec()
    );
}

#[test]
fn an_empty_batch_and_an_empty_resource() {
    let resource = ResourceAttributesWithSchema::default();
    assert_eq!(
        encode_request(&[], &resource),
        transformed(vec![], &resource).encode_to_vec()
    );
}

#[test]
fn the_json_line_is_what_serde_makes_of_the_transform() {
    let spans = spans();
    let resource = resource();
    let ours: serde_json::Value = serde_json::from_slice(&encode_request_json(&spans, &resource)).unwrap();
    let theirs = serde_json::to_value(transformed(spans, &resource)).unwrap();
    assert_eq!(ours, theirs);
    let empty = ResourceAttributesWithSchema::default();
    let ours: serde_json::Value = serde_json::from_slice(&encode_request_json(&[], &empty)).unwrap();
    assert_eq!(ours, serde_json::to_value(transformed(vec![], &empty)).unwrap());
}

#[test]
fn the_json_line_is_one_line_and_reads_back() {
    let line = encode_request_json(&spans(), &resource());
    assert!(!line.contains(&b'\n'));
    let request: ExportTraceServiceRequest = serde_json::from_slice(&line).unwrap();
    assert_eq!(
        request.resource_spans[0]
            .scope_spans
            .iter()
            .map(|s| s.spans.len())
            .sum::<usize>(),
        spans().len()
    );
}
