//! The two HTTP services: the web app (pages, assets and a read-only JSON API) and the OTLP/HTTP receiver
//! (`POST /v1/traces`, protobuf or JSON), each behind the same request checks: the `Host` header, the
//! token when one is required, and no cross-site requests.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;

use super::ingest::Ingest;
use super::model::RunFilter;
use super::store::Prepared;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// Span content is text; the pages load only their own script and style, images only from themselves or
/// `data:` URLs, and cannot be framed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// What every request is checked against.
#[derive(Debug)]
pub(crate) struct Security {
    pub(crate) token: Option<String>,
    pub(crate) allowed_hosts: Vec<String>,
    pub(crate) cookie: String,
}

#[derive(Clone)]
struct AppState {
    ingest: Arc<Ingest>,
    security: Arc<Security>,
}

fn refuse(status: StatusCode, why: &str) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        )],
        format!("waxell ui: {why}\n"),
    )
        .into_response()
}

/// Whether two strings are equal, in time that depends only on their lengths.
pub(crate) fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The host part of a `Host` header (`[::1]:80` → `::1`, `example.com:80` → `example.com`).
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    }
}

impl Security {
    /// A `Host` naming an IP address, `localhost` or an allowed name. A DNS-rebinding page reaches the
    /// server under its own host name, so it is refused here.
    fn host_ok(&self, headers: &HeaderMap) -> bool {
        let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
            return false;
        };
        let name = host_name(host);
        name.parse::<std::net::IpAddr>().is_ok()
            || name.eq_ignore_ascii_case("localhost")
            || self.allowed_hosts.iter().any(|h| h.eq_ignore_ascii_case(name))
    }

    /// An `Origin` header, if present, must be this very server (scheme-less comparison with `Host`).
    fn origin_ok(headers: &HeaderMap) -> bool {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return true;
        };
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        let origin = origin.to_str().unwrap_or_default();
        origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|o| o.eq_ignore_ascii_case(host))
    }

    fn bearer_ok(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else { return true };
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let own = headers.get("x-waxell-token").and_then(|v| v.to_str().ok());
        bearer.or(own).is_some_and(|t| same(t.trim(), token))
    }

    fn cookie_ok(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else { return true };
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .any(|(name, value)| name == self.cookie && same(value, token))
    }
}

fn query_token(query: Option<&str>) -> Option<&str> {
    query?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "token")
        .map(|(_, v)| v)
}

/// The web app's checks: known `Host`; no request from another site except a plain navigation to a page;
/// the token (from `?token=`, then a cookie) when one is required.
async fn guard_app(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let sec = &state.security;
    let headers = request.headers();
    if !sec.host_ok(headers) {
        return refuse(
            StatusCode::FORBIDDEN,
            "unknown Host header (add it with --allow-host)",
        );
    }
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    let navigate = headers.get("sec-fetch-mode").and_then(|v| v.to_str().ok()) == Some("navigate");
    let is_api = request.uri().path().starts_with("/api/");
    let cross = matches!(site, Some(s) if s != "same-origin" && s != "none");
    if cross && !(request.method() == Method::GET && navigate && !is_api) {
        return refuse(StatusCode::FORBIDDEN, "cross-site request refused");
    }
    if !Security::origin_ok(headers) {
        return refuse(StatusCode::FORBIDDEN, "cross-origin request refused");
    }
    if let Some(token) = &sec.token {
        if let Some(given) = query_token(request.uri().query()) {
            if !same(given, token) {
                return refuse(StatusCode::UNAUTHORIZED, "wrong token");
            }
            // Keep the token in a cookie and take it out of the address bar (and of any Referer).
            let cookie = format!("{}={token}; Path=/; HttpOnly; SameSite=Strict", sec.cookie);
            let location = request.uri().path().to_owned();
            return Response::builder()
                .status(StatusCode::SEE_OTHER)
                .header(header::LOCATION, location)
                .header(header::SET_COOKIE, cookie)
                .header(header::REFERRER_POLICY, "no-referrer")
                .body(Body::empty())
                .unwrap_or_else(|_| refuse(StatusCode::INTERNAL_SERVER_ERROR, "response"));
        }
        if !sec.cookie_ok(headers) && !sec.bearer_ok(headers) {
            return refuse(
                StatusCode::UNAUTHORIZED,
                "a token is required: open the URL that `waxell ui` printed (with ?token=)",
            );
        }
    }
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The receiver's checks: known `Host`; nothing from a web page of another site (OTLP exporters send
/// neither `Origin` nor `Sec-Fetch-Site`); the token as `Authorization: Bearer` or `x-waxell-token` when
/// one is required.
async fn guard_otlp(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let sec = &state.security;
    let headers = request.headers();
    if !sec.host_ok(headers) {
        return refuse(
            StatusCode::FORBIDDEN,
            "unknown Host header (add it with --allow-host)",
        );
    }
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if matches!(site, Some(s) if s != "same-origin" && s != "none") || !Security::origin_ok(headers) {
        return refuse(StatusCode::FORBIDDEN, "cross-site request refused");
    }
    if !sec.bearer_ok(headers) {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "a token is required: OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20<token>",
        );
    }
    next.run(request).await
}

pub(crate) fn app(ingest: Arc<Ingest>, security: Arc<Security>) -> Router {
    let state = AppState { ingest, security };
    Router::new()
        .route("/", get(index))
        .route("/runs/{id}", get(index))
        .route(
            "/assets/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/assets/app.css",
            get(|| async { asset("text/css; charset=utf-8", APP_CSS) }),
        )
        .route("/api/status", get(api_status))
        .route("/api/runs", get(api_runs))
        .route("/api/runs/{id}", get(api_run))
        .layer(middleware::from_fn_with_state(state.clone(), guard_app))
        .with_state(state)
}

pub(crate) fn otlp(ingest: Arc<Ingest>, security: Arc<Security>) -> Router {
    let state = AppState { ingest, security };
    Router::new()
        .route("/v1/traces", post(otlp_traces))
        // Metrics and logs are acknowledged and dropped, so an exporter sending all three stays quiet.
        .route("/v1/metrics", post(otlp_ignored))
        .route("/v1/logs", post(otlp_ignored))
        .layer(DefaultBodyLimit::max(64 * 1024 * 1024))
        .layer(middleware::from_fn_with_state(state.clone(), guard_otlp))
        .with_state(state)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

fn internal(e: impl std::fmt::Display) -> Response {
    refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Response> {
    tokio::task::spawn_blocking(f).await.map_err(internal)
}

/// [`blocking`] for the OTLP receiver's reading of a request, which an exporter waits on request by
/// request: on the UI's multi-thread runtime it runs in place (the worker's other tasks move to another
/// worker), saving the two thread hand-offs of a blocking task on every request.
async fn blocking_in_place<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Response> {
    if tokio::runtime::Handle::current().runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
        Ok(tokio::task::block_in_place(f))
    } else {
        blocking(f).await
    }
}

#[derive(serde::Deserialize)]
struct StatusQuery {
    /// A run whose own change counter to report as `run_seq`, so its page redraws only when it changed.
    #[serde(default)]
    run: Option<String>,
}

async fn api_status(State(state): State<AppState>, Query(query): Query<StatusQuery>) -> Response {
    let ingest = state.ingest.clone();
    let run = query
        .run
        .map(|r| r.to_ascii_lowercase())
        .filter(|r| is_trace_id(r));
    let answer = blocking(move || -> Result<_, super::store::StoreError> {
        let store = ingest.settled();
        let run_seq = match &run {
            Some(id) => store.run_seq(id)?,
            None => None,
        };
        Ok((store.seq()?, store.counts()?, run_seq))
    })
    .await;
    match answer {
        Ok(Ok((seq, counts, run_seq))) => Json(serde_json::json!({
            "seq": seq,
            "runs": counts.get("runs"),
            "spans": counts.get("spans"),
            "run_seq": run_seq,
        }))
        .into_response(),
        Ok(Err(e)) => internal(e),
        Err(r) => r,
    }
}

async fn api_runs(State(state): State<AppState>, Query(filter): Query<RunFilter>) -> Response {
    let ingest = state.ingest.clone();
    let runs = move || {
        let store = ingest.settled();
        store.seq().and_then(|seq| Ok((seq, store.runs(&filter)?)))
    };
    match blocking(runs).await {
        Ok(Ok((seq, (mut runs, agents)))) => {
            runs.iter_mut().for_each(|r| r.search.clear());
            Json(serde_json::json!({ "seq": seq, "runs": runs, "agents": agents })).into_response()
        }
        Ok(Err(e)) => internal(e),
        Err(r) => r,
    }
}

fn is_trace_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

async fn api_run(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    let id = id.to_ascii_lowercase();
    if !is_trace_id(&id) {
        return refuse(
            StatusCode::BAD_REQUEST,
            "a run is named by its trace id (32 hex digits)",
        );
    }
    let ingest = state.ingest.clone();
    let run = move || {
        let store = ingest.settled();
        store.seq().and_then(|seq| Ok((seq, store.run_json(&id)?)))
    };
    match blocking(run).await {
        Ok(Ok((seq, Some((mut run, spans))))) => {
            run.search.clear();
            // The spans go out as stored (JSON the store wrote), not parsed and written again.
            let mut body = format!("{{\"seq\":{seq},\"run\":").into_bytes();
            if let Err(e) = serde_json::to_writer(&mut body, &run) {
                return internal(e);
            }
            body.extend_from_slice(b",\"spans\":");
            body.extend_from_slice(&spans);
            body.push(b'}');
            ([(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
        Ok(Ok((_, None))) => refuse(StatusCode::NOT_FOUND, "no such run"),
        Ok(Err(e)) => internal(e),
        Err(r) => r,
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Encoding {
    Protobuf,
    Json,
}

/// The request's encoding and whether its body is gzip-compressed, or why it is not accepted (415).
fn otlp_encoding(headers: &HeaderMap) -> Result<(Encoding, bool), &'static str> {
    let gzip = match headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("identity") => false,
        Some("gzip") => true,
        Some(_) => return Err("OTLP/HTTP bodies may be gzip-compressed or not compressed"),
    };
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match ct.as_str() {
        "application/x-protobuf" | "application/protobuf" => Ok((Encoding::Protobuf, gzip)),
        "application/json" => Ok((Encoding::Json, gzip)),
        _ => Err("OTLP/HTTP needs Content-Type application/x-protobuf or application/json"),
    }
}

fn otlp_reply(encoding: Encoding) -> Response {
    let reply = ExportTraceServiceResponse::default();
    match encoding {
        Encoding::Protobuf => (
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            reply.encode_to_vec(),
        )
            .into_response(),
        Encoding::Json => ([(header::CONTENT_TYPE, "application/json")], "{}").into_response(),
    }
}

/// Largest OTLP body once decompressed.
const MAX_BODY: u64 = 64 * 1024 * 1024;

async fn otlp_traces(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let (encoding, gzip) = match otlp_encoding(&headers) {
        Ok(e) => e,
        Err(why) => return refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, why),
    };
    let body = if gzip {
        use std::io::Read;
        let mut out = Vec::new();
        let read = flate2::read::GzDecoder::new(&body[..])
            .take(MAX_BODY + 1)
            .read_to_end(&mut out);
        match read {
            Ok(n) if n as u64 <= MAX_BODY => Bytes::from(out),
            Ok(_) => {
                return refuse(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "the decompressed body is over 64 MiB",
                )
            }
            Err(e) => return refuse(StatusCode::BAD_REQUEST, &format!("not gzip: {e}")),
        }
    } else {
        body
    };
    // Read, checked and made ready here; answered once queued for the store's writer.
    let prepared = match encoding {
        // Read in place: no message is built.
        Encoding::Protobuf => blocking_in_place(move || Prepared::from_protobuf(&body)).await,
        Encoding::Json => match serde_json::from_slice::<ExportTraceServiceRequest>(&body) {
            Ok(request) => {
                blocking_in_place(move || Ok(Prepared::from_otlp(std::slice::from_ref(&request)))).await
            }
            Err(e) => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    &format!("not an OTLP trace request: {e}"),
                )
            }
        },
    };
    let prepared = match prepared {
        Ok(Ok(Ok(prepared))) => prepared,
        Ok(Ok(Err(e))) => return refuse(StatusCode::BAD_REQUEST, &e.to_string()),
        Ok(Err(e)) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                &format!("not an OTLP trace request: {e}"),
            )
        }
        Err(r) => return r,
    };
    match state.ingest.submit(prepared).await {
        Ok(()) => otlp_reply(encoding),
        Err(e) => {
            let mut answer = refuse(StatusCode::SERVICE_UNAVAILABLE, &e.to_string());
            answer
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            answer
        }
    }
}

async fn otlp_ignored(headers: HeaderMap) -> Response {
    match otlp_encoding(&headers) {
        Ok((Encoding::Protobuf, _)) => {
            ([(header::CONTENT_TYPE, "application/x-protobuf")], Vec::new()).into_response()
        }
        Ok((Encoding::Json, _)) => ([(header::CONTENT_TYPE, "application/json")], "{}").into_response(),
        Err(why) => refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, why),
    }
}
