//! A batch of spans as an OTLP/protobuf `ExportTraceServiceRequest`, written straight from the SDK's
//! `SpanData`.
//!
//! `opentelemetry-proto`'s transform first builds the request as Rust structs (a `String` per attribute key and
//! value, a `Vec` per id) and then encodes them; for the small attribute-heavy spans agents emit, building and
//! dropping those structs cost more than the encoding. This writes the same bytes without them: field numbers
//! and wire rules from the OTLP protos, the wire primitives from `prost`. Resource, scope, links and attribute
//! arrays (once per request, or rare) go through `opentelemetry-proto`'s own types. The tests decode the
//! output with `opentelemetry-proto` and compare it with its transform's request, field by field.

// Without `otlp-http` only the JSON writer (the trace files) is used; the protobuf writer stays
// compiled so the two share their helpers and tests.
#![cfg_attr(
    not(feature = "otlp-http"),
    allow(dead_code, reason = "the protobuf writer serves the OTLP/HTTP exporter only")
)]

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanId, Status};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope as ProtoScope};
use opentelemetry_proto::tonic::resource::v1::Resource as ProtoResource;
use opentelemetry_proto::tonic::trace::v1::span::Link as ProtoLink;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_sdk::trace::SpanData;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
use prost::Message as _;

/// `spans` as the body of one OTLP/HTTP protobuf request: one `ResourceSpans` for `resource`, one `ScopeSpans`
/// per instrumentation scope in order of first appearance (as `opentelemetry-proto`'s transform groups them).
pub(crate) fn encode_request(spans: &[SpanData], resource: &ResourceAttributesWithSchema) -> Vec<u8> {
    let scopes = group_by_scope(spans);
    let span_lens: Vec<usize> = spans.iter().map(span_len).collect();

    let proto_resource = ProtoResource {
        attributes: resource.attributes.0.clone(),
        dropped_attributes_count: 0,
        entity_refs: vec![],
    };
    let resource_schema = resource.schema_url.as_deref().unwrap_or_default();
    let scope_parts: Vec<(ProtoScope, Cow<'_, str>, usize)> = scopes
        .iter()
        .map(|(scope, members)| {
            let proto: ProtoScope = (*scope, None).into();
            let schema = Cow::Borrowed(scope.schema_url().unwrap_or_default());
            let body = message_len(1, proto.encoded_len())
                + members
                    .iter()
                    .map(|&i| message_len(2, span_lens[i]))
                    .sum::<usize>()
                + string_len(3, &schema);
            (proto, schema, body)
        })
        .collect();
    let resource_spans_len = message_len(1, proto_resource.encoded_len())
        + scope_parts
            .iter()
            .map(|(_, _, body)| message_len(2, *body))
            .sum::<usize>()
        + string_len(3, resource_schema);

    let total = message_len(1, resource_spans_len);
    let mut out = Vec::with_capacity(total);
    let buf = &mut out;
    message_header(1, resource_spans_len, buf);
    message_header(1, proto_resource.encoded_len(), buf);
    proto_resource.encode_raw(buf);
    for ((_, members), (proto, schema, body)) in scopes.iter().zip(&scope_parts) {
        message_header(2, *body, buf);
        message_header(1, proto.encoded_len(), buf);
        proto.encode_raw(buf);
        for &i in members {
            message_header(2, span_lens[i], buf);
            write_span(&spans[i], buf);
        }
        string(3, schema, buf);
    }
    string(3, resource_schema, buf);
    debug_assert_eq!(out.len(), total);
    out
}

// ---- Span ---------------------------------------------------------------------------------------

fn span_len(span: &SpanData) -> usize {
    let cx = &span.span_context;
    let mut n = bytes_len(1, 16) + bytes_len(2, 8);
    n += string_len(3, &cx.trace_state().header());
    if span.parent_span_id != SpanId::INVALID {
        n += bytes_len(4, 8);
    }
    n += string_len(5, &span.name);
    n += varint_len(6, span_kind(span) as u64);
    n += fixed64_len(7, nanos(span.start_time)) + fixed64_len(8, nanos(span.end_time));
    n += span
        .attributes
        .iter()
        .map(|kv| message_len(9, key_value_len(kv)))
        .sum::<usize>();
    n += varint_len(10, span.dropped_attributes_count.into());
    n += span
        .events
        .iter()
        .map(|e| message_len(11, event_len(e)))
        .sum::<usize>();
    n += varint_len(12, span.events.dropped_count.into());
    n += span
        .links
        .iter()
        .map(|l| message_len(13, ProtoLink::from(l.clone()).encoded_len()))
        .sum::<usize>();
    n += varint_len(14, span.links.dropped_count.into());
    n += message_len(15, status_len(&span.status));
    n += fixed32_len(16, flags(span));
    n
}

fn write_span(span: &SpanData, buf: &mut Vec<u8>) {
    let cx = &span.span_context;
    bytes(1, &cx.trace_id().to_bytes(), buf);
    bytes(2, &cx.span_id().to_bytes(), buf);
    string(3, &cx.trace_state().header(), buf);
    if span.parent_span_id != SpanId::INVALID {
        bytes(4, &span.parent_span_id.to_bytes(), buf);
    }
    string(5, &span.name, buf);
    varint(6, span_kind(span) as u64, buf);
    fixed64(7, nanos(span.start_time), buf);
    fixed64(8, nanos(span.end_time), buf);
    for kv in &span.attributes {
        message_header(9, key_value_len(kv), buf);
        write_key_value(kv, buf);
    }
    varint(10, span.dropped_attributes_count.into(), buf);
    for event in span.events.iter() {
        message_header(11, event_len(event), buf);
        fixed64(1, nanos(event.timestamp), buf);
        string(2, &event.name, buf);
        for kv in &event.attributes {
            message_header(3, key_value_len(kv), buf);
            write_key_value(kv, buf);
        }
        varint(4, event.dropped_attributes_count.into(), buf);
    }
    varint(12, span.events.dropped_count.into(), buf);
    for link in span.links.iter() {
        let link = ProtoLink::from(link.clone());
        message_header(13, link.encoded_len(), buf);
        link.encode_raw(buf);
    }
    varint(14, span.links.dropped_count.into(), buf);
    message_header(15, status_len(&span.status), buf);
    if let Status::Error { description } = &span.status {
        string(2, description, buf);
    }
    varint(3, status_code(&span.status), buf);
    fixed32(16, flags(span), buf);
}

fn event_len(event: &opentelemetry::trace::Event) -> usize {
    fixed64_len(1, nanos(event.timestamp))
        + string_len(2, &event.name)
        + event
            .attributes
            .iter()
            .map(|kv| message_len(3, key_value_len(kv)))
            .sum::<usize>()
        + varint_len(4, event.dropped_attributes_count.into())
}

fn status_len(status: &Status) -> usize {
    let message = match status {
        Status::Error { description } => string_len(2, description),
        _ => 0,
    };
    message + varint_len(3, status_code(status))
}

/// OTLP's `StatusCode`: unset 0, ok 1, error 2.
fn status_code(status: &Status) -> u64 {
    match status {
        Status::Unset => 0,
        Status::Ok => 1,
        Status::Error { .. } => 2,
    }
}

/// OTLP's `SpanKind` (internal 1 ... consumer 5).
fn span_kind(span: &SpanData) -> i32 {
    use opentelemetry_proto::tonic::trace::v1::span::SpanKind as Proto;
    let kind: Proto = span.span_kind.clone().into();
    kind as i32
}

/// The W3C trace flags plus OTLP's "parent is remote" bits (always says whether it is known, as the SDK knows).
fn flags(span: &SpanData) -> u32 {
    const HAS_IS_REMOTE: u32 = 0x100;
    const IS_REMOTE: u32 = 0x200;
    let mut flags = u32::from(span.span_context.trace_flags().to_u8()) | HAS_IS_REMOTE;
    if span.parent_span_is_remote {
        flags |= IS_REMOTE;
    }
    flags
}

fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos() as u64
}

// ---- Attributes ---------------------------------------------------------------------------------

fn key_value_len(kv: &KeyValue) -> usize {
    string_len(1, kv.key.as_str()) + message_len(2, any_value_len(&kv.value))
}

fn write_key_value(kv: &KeyValue, buf: &mut Vec<u8>) {
    string(1, kv.key.as_str(), buf);
    message_header(2, any_value_len(&kv.value), buf);
    write_any_value(&kv.value, buf);
}

/// `AnyValue`'s oneof: always written, even when it holds its type's default.
fn any_value_len(value: &Value) -> usize {
    match value {
        Value::String(s) => message_len(1, s.as_str().len()),
        Value::Bool(_) => key_len(2) + 1,
        Value::I64(i) => key_len(3) + encoded_len_varint(*i as u64),
        Value::F64(_) => key_len(4) + 8,
        other => AnyValue::from(other.clone()).encoded_len(),
    }
}

fn write_any_value(value: &Value, buf: &mut Vec<u8>) {
    match value {
        Value::String(s) => {
            message_header(1, s.as_str().len(), buf);
            buf.extend_from_slice(s.as_str().as_bytes());
        }
        Value::Bool(b) => {
            encode_key(2, WireType::Varint, buf);
            encode_varint(u64::from(*b), buf);
        }
        Value::I64(i) => {
            encode_key(3, WireType::Varint, buf);
            encode_varint(*i as u64, buf);
        }
        Value::F64(f) => {
            encode_key(4, WireType::SixtyFourBit, buf);
            buf.extend_from_slice(&f.to_le_bytes());
        }
        other => AnyValue::from(other.clone()).encode_raw(buf),
    }
}

// ---- Wire primitives (proto3: a field holding its default is not written) ------------------------

/// A length-delimited field of `len` bytes: key and length.
fn message_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

fn message_header(tag: u32, len: usize, buf: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(len as u64, buf);
}

fn string_len(tag: u32, s: &str) -> usize {
    bytes_len(tag, s.len())
}

fn string(tag: u32, s: &str, buf: &mut Vec<u8>) {
    bytes(tag, s.as_bytes(), buf);
}

fn bytes_len(tag: u32, len: usize) -> usize {
    if len == 0 {
        0
    } else {
        message_len(tag, len)
    }
}

fn bytes(tag: u32, b: &[u8], buf: &mut Vec<u8>) {
    if !b.is_empty() {
        message_header(tag, b.len(), buf);
        buf.extend_from_slice(b);
    }
}

fn varint_len(tag: u32, v: u64) -> usize {
    if v == 0 {
        0
    } else {
        key_len(tag) + encoded_len_varint(v)
    }
}

fn varint(tag: u32, v: u64, buf: &mut Vec<u8>) {
    if v != 0 {
        encode_key(tag, WireType::Varint, buf);
        encode_varint(v, buf);
    }
}

fn fixed64_len(tag: u32, v: u64) -> usize {
    if v == 0 {
        0
    } else {
        key_len(tag) + 8
    }
}

fn fixed64(tag: u32, v: u64, buf: &mut Vec<u8>) {
    if v != 0 {
        encode_key(tag, WireType::SixtyFourBit, buf);
        buf.extend_from_slice(&v.to_le_bytes());
    }
}

fn fixed32_len(tag: u32, v: u32) -> usize {
    if v == 0 {
        0
    } else {
        key_len(tag) + 4
    }
}

fn fixed32(tag: u32, v: u32, buf: &mut Vec<u8>) {
    if v != 0 {
        encode_key(tag, WireType::ThirtyTwoBit, buf);
        buf.extend_from_slice(&v.to_le_bytes());
    }
}

// ---- OTLP JSON (the trace file's lines) --------------------------------------------------------

/// `spans` as one OTLP/JSON `ExportTraceServiceRequest` (one line of a trace file), written straight from
/// the spans as [`encode_request`] writes protobuf: the same JSON `opentelemetry-proto`'s serde gives its
/// transform's request (tested), without building that request. Resource, scope, events, links, status and
/// attribute arrays go through `opentelemetry-proto`'s own types and serde.
pub(crate) fn encode_request_json(spans: &[SpanData], resource: &ResourceAttributesWithSchema) -> Vec<u8> {
    use std::io::Write as _;
    let mut out = Vec::with_capacity(256 + spans.len() * 1024);
    let w = &mut out;
    let proto_resource = ProtoResource {
        attributes: resource.attributes.0.clone(),
        dropped_attributes_count: 0,
        entity_refs: vec![],
    };
    w.extend_from_slice(b"{\"resourceSpans\":[{\"resource\":");
    json(&proto_resource, w);
    w.extend_from_slice(b",\"scopeSpans\":[");
    for (n, (scope, members)) in group_by_scope(spans).iter().enumerate() {
        if n > 0 {
            w.push(b',');
        }
        w.extend_from_slice(b"{\"scope\":");
        json(&ProtoScope::from((*scope, None)), w);
        w.extend_from_slice(b",\"spans\":[");
        for (k, &i) in members.iter().enumerate() {
            if k > 0 {
                w.push(b',');
            }
            write_span_json(&spans[i], w);
        }
        w.extend_from_slice(b"],\"schemaUrl\":");
        json(scope.schema_url().unwrap_or_default(), w);
        w.push(b'}');
    }
    w.extend_from_slice(b"],\"schemaUrl\":");
    json(resource.schema_url.as_deref().unwrap_or_default(), w);
    let _ = w.write_all(b"}]}");
    out
}

fn write_span_json(span: &SpanData, w: &mut Vec<u8>) {
    use opentelemetry_proto::tonic::trace::v1::span::Event as ProtoEvent;
    use opentelemetry_proto::tonic::trace::v1::Status as ProtoStatus;
    let cx = &span.span_context;
    w.extend_from_slice(b"{\"traceId\":\"");
    hex(&cx.trace_id().to_bytes(), w);
    w.extend_from_slice(b"\",\"spanId\":\"");
    hex(&cx.span_id().to_bytes(), w);
    w.extend_from_slice(b"\",\"traceState\":");
    json(&cx.trace_state().header(), w);
    w.extend_from_slice(b",\"parentSpanId\":\"");
    if span.parent_span_id != SpanId::INVALID {
        hex(&span.parent_span_id.to_bytes(), w);
    }
    w.extend_from_slice(b"\",\"flags\":");
    w.extend_from_slice(flags(span).to_string().as_bytes());
    w.extend_from_slice(b",\"name\":");
    json(span.name.as_ref(), w);
    w.extend_from_slice(b",\"kind\":");
    w.extend_from_slice(span_kind(span).to_string().as_bytes());
    w.extend_from_slice(b",\"startTimeUnixNano\":\"");
    w.extend_from_slice(nanos(span.start_time).to_string().as_bytes());
    w.extend_from_slice(b"\",\"endTimeUnixNano\":\"");
    w.extend_from_slice(nanos(span.end_time).to_string().as_bytes());
    w.extend_from_slice(b"\",\"attributes\":");
    attributes_json(&span.attributes, w);
    w.extend_from_slice(b",\"droppedAttributesCount\":");
    w.extend_from_slice(span.dropped_attributes_count.to_string().as_bytes());
    w.extend_from_slice(b",\"events\":[");
    for (k, event) in span.events.iter().enumerate() {
        if k > 0 {
            w.push(b',');
        }
        json(
            &ProtoEvent {
                time_unix_nano: nanos(event.timestamp),
                name: event.name.to_string(),
                attributes: event.attributes.iter().map(proto_key_value).collect(),
                dropped_attributes_count: event.dropped_attributes_count,
            },
            w,
        );
    }
    w.extend_from_slice(b"],\"droppedEventsCount\":");
    w.extend_from_slice(span.events.dropped_count.to_string().as_bytes());
    w.extend_from_slice(b",\"links\":[");
    for (k, link) in span.links.iter().enumerate() {
        if k > 0 {
            w.push(b',');
        }
        json(&ProtoLink::from(link.clone()), w);
    }
    w.extend_from_slice(b"],\"droppedLinksCount\":");
    w.extend_from_slice(span.links.dropped_count.to_string().as_bytes());
    w.extend_from_slice(b",\"status\":");
    let message = match &span.status {
        Status::Error { description } => description.to_string(),
        _ => String::new(),
    };
    json(
        &ProtoStatus {
            message,
            code: status_code(&span.status) as i32,
        },
        w,
    );
    w.push(b'}');
}

fn attributes_json(attributes: &[KeyValue], w: &mut Vec<u8>) {
    w.push(b'[');
    for (k, kv) in attributes.iter().enumerate() {
        if k > 0 {
            w.push(b',');
        }
        w.extend_from_slice(b"{\"key\":");
        json(kv.key.as_str(), w);
        w.extend_from_slice(b",\"value\":");
        match &kv.value {
            Value::String(s) => {
                w.extend_from_slice(b"{\"stringValue\":");
                json(s.as_str(), w);
                w.push(b'}');
            }
            Value::Bool(b) => {
                w.extend_from_slice(if *b {
                    b"{\"boolValue\":true}"
                } else {
                    b"{\"boolValue\":false}"
                });
            }
            Value::I64(i) => {
                w.extend_from_slice(b"{\"intValue\":\"");
                w.extend_from_slice(i.to_string().as_bytes());
                w.extend_from_slice(b"\"}");
            }
            other => json(&AnyValue::from(other.clone()), w),
        }
        w.push(b'}');
    }
    w.push(b']');
}

fn proto_key_value(kv: &KeyValue) -> opentelemetry_proto::tonic::common::v1::KeyValue {
    opentelemetry_proto::tonic::common::v1::KeyValue {
        key: kv.key.as_str().to_owned(),
        value: Some(AnyValue::from(kv.value.clone())),
        key_strindex: 0,
    }
}

/// `value` as serde_json writes it (strings escaped as serde_json escapes them).
fn json<T: serde::Serialize + ?Sized>(value: &T, w: &mut Vec<u8>) {
    // Writing to a Vec fails only for types whose serialisation fails, which these never do.
    let _ = serde_json::to_writer(w, value);
}

fn hex(bytes: &[u8], w: &mut Vec<u8>) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        w.push(DIGITS[usize::from(b >> 4)]);
        w.push(DIGITS[usize::from(b & 0xf)]);
    }
}

/// The spans' instrumentation scopes in order of first appearance, each with its spans' indexes (as
/// `opentelemetry-proto`'s transform groups them).
fn group_by_scope(spans: &[SpanData]) -> Vec<(&InstrumentationScope, Vec<usize>)> {
    let mut scopes: Vec<(&InstrumentationScope, Vec<usize>)> = Vec::new();
    for (i, span) in spans.iter().enumerate() {
        let scope = &span.instrumentation_scope;
        match scopes
            .iter_mut()
            .find(|(s, _)| std::ptr::eq(*s, scope) || *s == scope)
        {
            Some((_, members)) => members.push(i),
            None => scopes.push((scope, vec![i])),
        }
    }
    scopes
}

#[cfg(test)]
mod tests;
