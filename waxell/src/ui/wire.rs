//! OTLP protobuf read in place: a trace request's spans as views of the bytes that came (no message built,
//! no string copied), checked as prost checks them (well-formed, strings UTF-8). The store keeps a span as
//! its own protobuf bytes with the resource's service name and the scope's name appended as two fields of
//! numbers OTLP does not use (a span read back takes the last of each, so a span that carried them itself
//! cannot pass for another service).

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use super::model::{Score, SpanFacts};
use crate::semconv::{
    GEN_AI_EVALUATION_EXPLANATION, GEN_AI_EVALUATION_NAME, GEN_AI_EVALUATION_RESULT,
    GEN_AI_EVALUATION_SCORE_LABEL, GEN_AI_EVALUATION_SCORE_VALUE,
};

/// Nesting of array and map values accepted (prost's own limit is 100).
const MAX_DEPTH: u32 = 64;

/// Bytes that are not an OTLP trace request.
#[derive(Debug)]
pub(crate) struct WireError(pub(crate) &'static str);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

type Result<T> = std::result::Result<T, WireError>;

#[derive(Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32,
    Bytes(&'a [u8]),
}

/// The fields of one message, in order.
#[derive(Clone, Copy)]
struct Fields<'a>(&'a [u8]);

#[inline]
fn varint(buf: &mut &[u8]) -> Result<u64> {
    // Tags, lengths and small numbers are one byte.
    if let Some((&b, rest)) = buf.split_first() {
        if b < 0x80 {
            *buf = rest;
            return Ok(u64::from(b));
        }
    }
    varint_long(buf)
}

fn varint_long(buf: &mut &[u8]) -> Result<u64> {
    let mut value = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf.split_first().ok_or(WireError("a varint runs past the end"))?;
        *buf = rest;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok(value);
        }
    }
    Err(WireError("a varint is too long"))
}

impl<'a> Fields<'a> {
    #[inline]
    fn field(&mut self) -> Result<(u64, Wire<'a>)> {
        let tag = varint(&mut self.0)?;
        let field = tag >> 3;
        if field == 0 {
            return Err(WireError("field number 0"));
        }
        let wire = match tag & 7 {
            0 => Wire::Varint(varint(&mut self.0)?),
            1 => {
                let (b, rest) = self
                    .0
                    .split_first_chunk::<8>()
                    .ok_or(WireError("a fixed64 runs past the end"))?;
                self.0 = rest;
                Wire::Fixed64(u64::from_le_bytes(*b))
            }
            2 => {
                let len =
                    usize::try_from(varint(&mut self.0)?).map_err(|_| WireError("a length is too large"))?;
                let (b, rest) = self
                    .0
                    .split_at_checked(len)
                    .ok_or(WireError("a field runs past the end"))?;
                self.0 = rest;
                Wire::Bytes(b)
            }
            5 => {
                let (_, rest) = self
                    .0
                    .split_first_chunk::<4>()
                    .ok_or(WireError("a fixed32 runs past the end"))?;
                self.0 = rest;
                Wire::Fixed32
            }
            _ => return Err(WireError("an unknown wire type")),
        };
        Ok((field, wire))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Wire<'a>)>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let item = self.field();
        if item.is_err() {
            self.0 = &[];
        }
        Some(item)
    }
}

#[inline]
fn bytes<'a>(w: Wire<'a>) -> Result<&'a [u8]> {
    match w {
        Wire::Bytes(b) => Ok(b),
        _ => Err(WireError("a field of the wrong wire type")),
    }
}

#[inline]
fn text(w: Wire<'_>) -> Result<&str> {
    std::str::from_utf8(bytes(w)?).map_err(|_| WireError("a string is not UTF-8"))
}

#[inline]
fn uint(w: Wire<'_>) -> Result<u64> {
    match w {
        Wire::Varint(v) => Ok(v),
        _ => Err(WireError("a field of the wrong wire type")),
    }
}

#[inline]
fn fixed64(w: Wire<'_>) -> Result<u64> {
    match w {
        Wire::Fixed64(v) => Ok(v),
        _ => Err(WireError("a field of the wrong wire type")),
    }
}

/// An OTLP `AnyValue`, read in place.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) enum Any<'a> {
    #[default]
    Null,
    Str(&'a str),
    Bool(bool),
    Int(i64),
    Double(f64),
    /// An `ArrayValue`'s bytes (checked).
    Array(&'a [u8]),
    /// A `KeyValueList`'s bytes (checked).
    Map(&'a [u8]),
    Bytes(&'a [u8]),
}

impl<'a> Any<'a> {
    /// Read (and check, nested values included) an `AnyValue`.
    fn read(buf: &'a [u8], depth: u32) -> Result<Self> {
        if depth > MAX_DEPTH {
            return Err(WireError("values nested too deeply"));
        }
        let mut value = Any::Null;
        for f in Fields(buf) {
            let (field, w) = f?;
            value = match field {
                1 => Any::Str(text(w)?),
                2 => Any::Bool(uint(w)? != 0),
                3 => Any::Int(uint(w)? as i64),
                4 => Any::Double(f64::from_bits(fixed64(w)?)),
                5 => {
                    let b = bytes(w)?;
                    for f in Fields(b) {
                        let (n, w) = f?;
                        if n == 1 {
                            Any::read(bytes(w)?, depth + 1)?;
                        }
                    }
                    Any::Array(b)
                }
                6 => {
                    let b = bytes(w)?;
                    for f in Fields(b) {
                        let (n, w) = f?;
                        if n == 1 {
                            key_value(bytes(w)?, depth + 1)?;
                        }
                    }
                    Any::Map(b)
                }
                7 => Any::Bytes(bytes(w)?),
                _ => value,
            };
        }
        Ok(value)
    }

    fn as_str(self) -> Option<&'a str> {
        match self {
            Any::Str(s) => Some(s),
            _ => None,
        }
    }

    fn as_num(self) -> Option<f64> {
        match self {
            Any::Int(i) => Some(i as f64),
            Any::Double(d) if d.is_finite() => Some(d),
            _ => None,
        }
    }
}

/// A `KeyValue`: its key and value.
fn key_value(buf: &[u8], depth: u32) -> Result<(&str, Any<'_>)> {
    let (mut key, mut value) = ("", Any::Null);
    for f in Fields(buf) {
        let (field, w) = f?;
        match field {
            1 => key = text(w)?,
            2 => value = Any::read(bytes(w)?, depth)?,
            _ => {}
        }
    }
    Ok((key, value))
}

/// The attributes among a message's fields (`field`), in order.
fn attributes(buf: &[u8], field: u64) -> impl Iterator<Item = (&str, Any<'_>)> {
    // Checked when the span was read: errors cannot occur here.
    Fields(buf)
        .filter_map(|f| f.ok())
        .filter(move |(n, _)| *n == field)
        .filter_map(|(_, w)| key_value(bytes(w).ok()?, 0).ok())
}

fn last<'a>(buf: &'a [u8], field: u64, key: &str) -> Option<Any<'a>> {
    attributes(buf, field)
        .filter(|(k, _)| *k == key)
        .last()
        .map(|(_, v)| v)
}

/// One span, read in place, with its service and scope names.
#[derive(Debug, Clone, Default)]
pub(crate) struct WireSpan<'a> {
    /// The span's own bytes (without the service and scope names).
    raw: &'a [u8],
    pub(crate) trace_id: &'a [u8],
    pub(crate) span_id: &'a [u8],
    parent_id: &'a [u8],
    name: &'a str,
    kind: u64,
    start: u64,
    end: u64,
    status_code: u64,
    status_message: &'a str,
    service: &'a str,
    scope: &'a str,
    /// The span's attributes, in order (a key given twice appears twice; the last wins).
    attrs: Vec<(&'a str, Any<'a>)>,
    has_events: bool,
    has_links: bool,
}

impl<'a> WireSpan<'a> {
    /// Read and check a span of `service` and `scope`.
    fn read(raw: &'a [u8], service: &'a str, scope: &'a str) -> Result<Self> {
        let mut s = WireSpan {
            raw,
            service,
            scope,
            // An agent's or tool's span carries a few attributes: one allocation for them.
            attrs: Vec::with_capacity(8),
            ..WireSpan::default()
        };
        for f in Fields(raw) {
            let (field, w) = f?;
            match field {
                1 => s.trace_id = bytes(w)?,
                2 => s.span_id = bytes(w)?,
                3 => {
                    text(w)?;
                }
                4 => s.parent_id = bytes(w)?,
                5 => s.name = text(w)?,
                6 => s.kind = uint(w)?,
                7 => s.start = fixed64(w)?,
                8 => s.end = fixed64(w)?,
                9 => s.attrs.push(key_value(bytes(w)?, 0)?),
                11 => {
                    s.has_events = true;
                    for f in Fields(bytes(w)?) {
                        let (n, w) = f?;
                        match n {
                            1 => {
                                fixed64(w)?;
                            }
                            2 => {
                                text(w)?;
                            }
                            3 => {
                                key_value(bytes(w)?, 0)?;
                            }
                            _ => {}
                        }
                    }
                }
                13 => {
                    s.has_links = true;
                    for f in Fields(bytes(w)?) {
                        let (n, w) = f?;
                        match n {
                            1 | 2 => {
                                bytes(w)?;
                            }
                            3 => {
                                text(w)?;
                            }
                            4 => {
                                key_value(bytes(w)?, 0)?;
                            }
                            _ => {}
                        }
                    }
                }
                15 => {
                    for f in Fields(bytes(w)?) {
                        let (n, w) = f?;
                        match n {
                            2 => s.status_message = text(w)?,
                            3 => s.status_code = uint(w)?,
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(s)
    }

    /// A stored span (see [`WireSpan::stored`]) read back.
    pub(crate) fn from_stored(value: &'a [u8]) -> Result<Self> {
        let bad = || WireError("a stored span is cut short");
        let (rest, lens) = value.split_last_chunk::<8>().ok_or_else(bad)?;
        let service_len = u32::from_le_bytes(lens[..4].try_into().unwrap_or_default()) as usize;
        let scope_len = u32::from_le_bytes(lens[4..].try_into().unwrap_or_default()) as usize;
        let raw_len = rest.len().checked_sub(service_len + scope_len).ok_or_else(bad)?;
        let (raw, names) = rest.split_at(raw_len);
        let (service, scope) = names.split_at(service_len);
        let name = |b| std::str::from_utf8(b).map_err(|_| WireError("a stored name is not UTF-8"));
        Self::read(raw, name(service)?, name(scope)?)
    }

    /// The length of [`WireSpan::stored`].
    pub(crate) fn stored_len(&self) -> usize {
        self.raw.len() + self.service.len() + self.scope.len() + 8
    }

    /// The span as the store keeps it: its bytes, its service and scope names, and their lengths.
    pub(crate) fn stored(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.raw);
        out.extend_from_slice(self.service.as_bytes());
        out.extend_from_slice(self.scope.as_bytes());
        out.extend_from_slice(&(self.service.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.scope.len() as u32).to_le_bytes());
    }

    fn events(&self) -> impl Iterator<Item = (&'a str, u64, &'a [u8])> + '_ {
        Fields(self.raw)
            .filter_map(|f| f.ok())
            .filter(|(n, _)| *n == 11)
            .filter_map(|(_, w)| {
                let b = bytes(w).ok()?;
                let (mut name, mut time) = ("", 0);
                for (n, w) in Fields(b).filter_map(|f| f.ok()) {
                    match n {
                        1 => time = fixed64(w).unwrap_or(0),
                        2 => name = text(w).unwrap_or(""),
                        _ => {}
                    }
                }
                Some((name, time, b))
            })
    }

    fn links(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + '_ {
        Fields(self.raw)
            .filter_map(|f| f.ok())
            .filter(|(n, _)| *n == 13)
            .filter_map(|(_, w)| {
                let (mut trace, mut span) = (&[][..], &[][..]);
                for (n, w) in Fields(bytes(w).ok()?).filter_map(|f| f.ok()) {
                    match n {
                        1 => trace = bytes(w).unwrap_or_default(),
                        2 => span = bytes(w).unwrap_or_default(),
                        _ => {}
                    }
                }
                Some((trace, span))
            })
    }

    fn attr(&self, key: &str) -> Option<Any<'a>> {
        self.attrs.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

/// Every span of a protobuf `ExportTraceServiceRequest`, checked.
pub(crate) fn request_spans(buf: &[u8]) -> Result<Vec<WireSpan<'_>>> {
    let mut out = Vec::new();
    for f in Fields(buf) {
        let (field, w) = f?;
        if field != 1 {
            continue;
        }
        let resource_spans = bytes(w)?;
        let (mut service, mut service_seen) = ("", false);
        let mut scopes = Vec::new();
        for f in Fields(resource_spans) {
            let (n, w) = f?;
            match n {
                1 => {
                    let resource = bytes(w)?;
                    for f in Fields(resource) {
                        let (n, w) = f?;
                        if n == 1 {
                            // The first `service.name`, if it is a string.
                            let (k, v) = key_value(bytes(w)?, 0)?;
                            if k == "service.name" && !service_seen {
                                service_seen = true;
                                service = v.as_str().unwrap_or_default();
                            }
                        }
                    }
                }
                2 => scopes.push(bytes(w)?),
                _ => {}
            }
        }
        for scope_spans in scopes {
            let mut scope = "";
            let mut spans = Vec::new();
            for f in Fields(scope_spans) {
                let (n, w) = f?;
                match n {
                    1 => {
                        for f in Fields(bytes(w)?) {
                            let (n, w) = f?;
                            match n {
                                1 => scope = text(w)?,
                                2 => {
                                    text(w)?;
                                }
                                3 => {
                                    key_value(bytes(w)?, 0)?;
                                }
                                _ => {}
                            }
                        }
                    }
                    2 => spans.push(bytes(w)?),
                    _ => {}
                }
            }
            for raw in spans {
                out.push(WireSpan::read(raw, service, scope)?);
            }
        }
    }
    Ok(out)
}

impl SpanFacts for WireSpan<'_> {
    fn start(&self) -> u64 {
        self.start
    }
    fn end(&self) -> u64 {
        self.end.max(self.start)
    }
    fn service(&self) -> &str {
        self.service
    }
    fn name(&self) -> &str {
        self.name
    }
    fn is_error(&self) -> bool {
        self.status_code == 2
    }
    fn is_root(&self) -> bool {
        self.parent_id.is_empty()
    }
    fn str_attr(&self, key: &str) -> Option<&str> {
        self.attr(key)?.as_str()
    }
    fn num_attr(&self, key: &str) -> Option<f64> {
        self.attr(key)?.as_num()
    }
    fn scores(&self, found: &mut dyn FnMut(&str, Score)) {
        if !self.has_events {
            return;
        }
        for (name, time, event) in self.events() {
            if name != GEN_AI_EVALUATION_RESULT {
                continue;
            }
            let get = |k: &str| last(event, 3, k);
            let Some(score) = get(GEN_AI_EVALUATION_NAME).and_then(Any::as_str) else {
                continue;
            };
            found(
                score,
                Score {
                    value: get(GEN_AI_EVALUATION_SCORE_VALUE).and_then(Any::as_num),
                    label: get(GEN_AI_EVALUATION_SCORE_LABEL)
                        .and_then(Any::as_str)
                        .map(str::to_owned),
                    comment: get(GEN_AI_EVALUATION_EXPLANATION)
                        .and_then(Any::as_str)
                        .map(str::to_owned),
                    time,
                },
            );
        }
    }
}

/// Bytes as lowercase hex, written straight into the output.
struct Hex<'a>(&'a [u8]);

impl Serialize for Hex<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut buf = [0u8; 64];
        if self.0.len() > 32 {
            return s.serialize_str(&super::model::hex(self.0));
        }
        for (i, b) in self.0.iter().enumerate() {
            buf[2 * i] = DIGITS[usize::from(b >> 4)];
            buf[2 * i + 1] = DIGITS[usize::from(b & 15)];
        }
        s.serialize_str(std::str::from_utf8(&buf[..2 * self.0.len()]).unwrap_or_default())
    }
}

impl Serialize for Any<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            Any::Null => s.serialize_unit(),
            Any::Str(v) => s.serialize_str(v),
            Any::Bool(b) => s.serialize_bool(b),
            Any::Int(i) => s.serialize_i64(i),
            Any::Double(d) if d.is_finite() => s.serialize_f64(d),
            Any::Double(d) => s.serialize_str(&d.to_string()),
            Any::Array(b) => s.collect_seq(Fields(b).filter_map(|f| f.ok()).filter(|(n, _)| *n == 1).map(
                |(_, w)| {
                    bytes(w)
                        .ok()
                        .and_then(|b| Any::read(b, 0).ok())
                        .unwrap_or_default()
                },
            )),
            Any::Map(b) => Attrs(b, 1).serialize(s),
            Any::Bytes(b) => {
                use base64::Engine;
                s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b))
            }
        }
    }
}

/// The attributes among a message's fields (`field`) as a JSON object, in order: a key given twice appears
/// twice, and a JSON reader keeps the last, as a [`super::SpanRecord`]'s map does.
struct Attrs<'a>(&'a [u8], u64);

impl Serialize for Attrs<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_map(attributes(self.0, self.1))
    }
}

struct SpanAttrs<'b, 'a>(&'b [(&'a str, Any<'a>)]);

impl Serialize for SpanAttrs<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (*k, *v)))
    }
}

struct Link<'a>(&'a [u8], &'a [u8]);

impl Serialize for Link<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("trace_id", &Hex(self.0))?;
        m.serialize_entry("span_id", &Hex(self.1))?;
        m.end()
    }
}

/// The span as a [`super::SpanRecord`]'s JSON.
impl Serialize for WireSpan<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        struct Events<'b, 'a>(&'b WireSpan<'a>);
        impl Serialize for Events<'_, '_> {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(None)?;
                for (name, time, event) in self.0.events() {
                    struct Event<'a>(&'a str, u64, &'a [u8]);
                    impl Serialize for Event<'_> {
                        fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                            let mut m = s.serialize_map(Some(3))?;
                            m.serialize_entry("name", self.0)?;
                            m.serialize_entry("time", &self.1)?;
                            m.serialize_entry("attributes", &Attrs(self.2, 3))?;
                            m.end()
                        }
                    }
                    seq.serialize_element(&Event(name, time, event))?;
                }
                seq.end()
            }
        }
        struct Links<'b, 'a>(&'b WireSpan<'a>);
        impl Serialize for Links<'_, '_> {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(None)?;
                for (trace, span) in self.0.links() {
                    seq.serialize_element(&Link(trace, span))?;
                }
                seq.end()
            }
        }
        let kind = match self.kind {
            1 => "internal",
            2 => "server",
            3 => "client",
            4 => "producer",
            5 => "consumer",
            _ => "unspecified",
        };
        let status = match self.status_code {
            1 => "ok",
            2 => "error",
            _ => "unset",
        };
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("trace_id", &Hex(self.trace_id))?;
        m.serialize_entry("span_id", &Hex(self.span_id))?;
        m.serialize_entry("parent_id", &Hex(self.parent_id))?;
        m.serialize_entry("name", self.name)?;
        m.serialize_entry("kind", kind)?;
        m.serialize_entry("start", &self.start)?;
        m.serialize_entry("end", &self.end())?;
        m.serialize_entry("status", status)?;
        if !self.status_message.is_empty() {
            m.serialize_entry("status_message", self.status_message)?;
        }
        m.serialize_entry("attributes", &SpanAttrs(&self.attrs))?;
        if self.has_events {
            m.serialize_entry("events", &Events(self))?;
        }
        if self.has_links {
            m.serialize_entry("links", &Links(self))?;
        }
        if !self.service.is_empty() {
            m.serialize_entry("service", self.service)?;
        }
        if !self.scope.is_empty() {
            m.serialize_entry("scope", self.scope)?;
        }
        m.end()
    }
}
