//! Control plane (`api.<domain>` on E2B): create, list, inspect, connect, set-timeout and kill
//! sandboxes; pause, resume, snapshot and fork them (lifecycle.rs) and read their metrics. Every
//! route needs `X-API-KEY` when the server has one. A route this server does not have answers
//! E2B's error shape naming the method and path (501 for E2B's own API paths), never a bare 404
//! the SDKs would report as a missing sandbox.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use waxell::e2b::wire::{self, ConnectRequest, NewSandbox, PauseRequest, TimeoutRequest, API_KEY_HEADER};
use waxell::sandbox::SandboxMetrics;

use super::body;
use super::config::ENVD_VERSION;
use super::error::ApiError;
use super::lifecycle::{is_snapshot_id, KeptState, ResumeOutcome};
use super::listing::{page, ListQuery, Listed};
use super::logs::{self, LogsQuery};
use super::registry::{constant_time_eq, CreateRequest, Hold, Lifecycle, SandboxEntry};
use super::state::AppState;
use super::store::{from_ms, PausedRecord};

/// E2B's deprecated `clientID`, still required by the Python SDK's parser; E2B sends this constant.
const CLIENT_ID: &str = "6532622b";
const DEFAULT_TEMPLATE: &str = "code-interpreter-v1";

pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/sandboxes", post(create).get(list_running))
        .route("/v2/sandboxes", post(create).get(list))
        .route("/sandboxes/{id}", get(detail).delete(kill))
        .route("/sandboxes/{id}/timeout", post(set_timeout))
        .route("/sandboxes/{id}/refreshes", post(refresh))
        .route("/sandboxes/{id}/connect", post(connect))
        .route("/v2/sandboxes/{id}/connect", post(connect))
        .route("/sandboxes/{id}/pause", post(pause))
        .route("/sandboxes/{id}/resume", post(resume))
        .route("/sandboxes/{id}/snapshots", post(snapshot))
        .route("/sandboxes/{id}/fork", post(fork))
        .route("/sandboxes/{id}/metrics", get(metrics))
        .route("/sandboxes/{id}/logs", get(logs))
        .route("/v2/sandboxes/{id}/logs", get(logs_v2))
        .route("/sandboxes/metrics", get(metrics_of_many))
        .route("/snapshots", get(list_snapshots))
        .route("/templates/{id}", delete(delete_snapshot))
        .fallback(unknown_route)
        .method_not_allowed_fallback(|request: Request| async move {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                format!(
                    "{} {}: method not allowed on this route",
                    request.method(),
                    request.uri().path()
                ),
            )
        })
        .layer(middleware::from_fn_with_state(state.clone(), require_api_key))
        // Added after the key check's layer: health checks need no key.
        .route(
            "/health",
            get(|| async { (StatusCode::OK, "Health check successful") }),
        )
        .with_state(state)
}

/// 401 unless `X-API-KEY` matches the configured key (when there is one).
async fn require_api_key(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if let Some(key) = &state.config.api_key {
        let given = request
            .headers()
            .get(API_KEY_HEADER)
            .and_then(|v| v.to_str().ok());
        if !given.is_some_and(|g| constant_time_eq(g.as_bytes(), key.as_bytes())) {
            let message = if given.is_some() {
                "Invalid API key"
            } else {
                "Missing X-API-KEY header: this server requires the key it printed at start (E2B_API_KEY)"
            };
            return ApiError::unauthorized(message).into_response();
        }
    }
    next.run(request).await
}

#[derive(Deserialize)]
struct RefreshBody {
    duration: Option<i64>,
}

async fn create(State(state): State<Arc<AppState>>, request: Body) -> Result<Response, ApiError> {
    let new: NewSandbox = body::json_request(&state.config, request).await?;
    let timeout = match new.timeout {
        Some(seconds) => state.registry.check_timeout(seconds)?,
        None => state.config.default_timeout,
    };
    let template_id = new
        .template_id
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_TEMPLATE.into());
    let auto_pause = new.auto_pause.unwrap_or(false);
    let auto_pause_memory = auto_pause && new.auto_pause_memory.unwrap_or(true);
    let auto_resume = new.auto_resume.is_some_and(|a| a.enabled);
    if auto_resume && !auto_pause {
        return Err(ApiError::bad_request(
            "autoResume needs autoPause (lifecycle.onTimeout: pause)",
        ));
    }
    if auto_resume && !auto_pause_memory {
        // E2B's rule: traffic never resumes a filesystem-only pause (it would cold-boot the
        // sandbox under a request that expects its processes).
        return Err(ApiError::bad_request(
            "autoResume cannot be combined with autoPauseMemory: false: a sandbox paused with its \
             files only is resumed by connect, not by traffic",
        ));
    }
    if auto_pause_memory && state.config.refuse_memory_pause && state.registry.keeps_memory().is_none() {
        // Said now rather than failing the pause (and killing the sandbox) when its time is up.
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "autoPause keeping memory (autoPauseMemory, true by default) is not supported by this server: \
             it pauses files only; create with autoPauseMemory: false (keep_memory=False)",
        ));
    }
    let request = CreateRequest {
        template_id,
        timeout,
        metadata: new.metadata.unwrap_or_default(),
        env_vars: new.env_vars.unwrap_or_default(),
        lifecycle: Lifecycle {
            auto_pause,
            auto_pause_memory,
            auto_resume,
        },
        files: None,
        history: Vec::new(),
    };
    // A snapshot's id or name as the template: a sandbox restored from the snapshot's checkpoint,
    // or with its files; `Waxell-Restore` says which.
    let entry = match state.registry.saved.snapshot_for(&request.template_id) {
        Some(snapshot) => {
            let (entry, outcome) = state.registry.create_from_snapshot(&snapshot, request).await?;
            let mut response = (StatusCode::CREATED, Json(sandbox_json(&entry))).into_response();
            response.headers_mut().insert(
                "waxell-restore",
                axum::http::HeaderValue::from_static(outcome.kept()),
            );
            return Ok(response);
        }
        // Any other template is served by the backend's one image, but a snapshot id names a
        // snapshot: a deleted one is an error, not a fresh sandbox.
        None if is_snapshot_id(&request.template_id) => {
            return Err(ApiError::not_found(format!(
                "snapshot {:?} not found (deleted, or never taken on this server)",
                request.template_id
            )))
        }
        None => state.registry.create(request).await?,
    };
    Ok((StatusCode::CREATED, Json(sandbox_json(&entry))).into_response())
}

/// E2B's answer for a sandbox that does not exist (or is not yours).
fn sandbox_not_found(id: &str) -> ApiError {
    ApiError::not_found(format!(
        "Sandbox \"{id}\" doesn't exist or you don't have access to it"
    ))
}

fn live(state: &AppState, id: &str) -> Result<Arc<SandboxEntry>, ApiError> {
    state.registry.get(id).ok_or_else(|| sandbox_not_found(id))
}

/// `GET /sandboxes` (E2B's first list): the running sandboxes only.
async fn list_running(
    State(state): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let mut query = ListQuery::parse(query.as_deref())?;
    query.states = vec!["running".into()];
    list_matching(&state, &query)
}

/// `GET /v2/sandboxes`: live and paused sandboxes, filtered, ordered and paged as the query asks.
async fn list(State(state): State<Arc<AppState>>, RawQuery(query): RawQuery) -> Result<Response, ApiError> {
    let query = ListQuery::parse(query.as_deref())?;
    list_matching(&state, &query)
}

fn list_matching(state: &AppState, query: &ListQuery) -> Result<Response, ApiError> {
    // The live ones first: a sandbox whose pause ends meanwhile is then in both lists (listed
    // once, paused), never in neither.
    let live = state.registry.list_with_pausing();
    let paused = state.registry.saved.all_paused();
    let live = live.into_iter().filter_map(|e| {
        let state = api_state(&e);
        (!paused.iter().any(|p| p.record.id == e.id)
            && query.matches(&e.metadata, state, &e.template_id, e.started_at))
        .then(|| Listed {
            id: e.id.clone(),
            at: e.started_at,
            item: detail_json(&e),
        })
    });
    let paused = paused.iter().filter_map(|p| {
        let r = &p.record;
        let started_at = from_ms(r.started_at_ms);
        query
            .matches(&r.metadata, "paused", &r.template_id, started_at)
            .then(|| Listed {
                id: r.id.clone(),
                at: started_at,
                item: paused_json(r),
            })
    });
    let (items, next) = page(live.chain(paused).collect(), query);
    Ok(with_next_token(Json(Value::Array(items)).into_response(), next))
}

/// `X-Next-Token` when there is a next page.
fn with_next_token(mut response: Response, next: Option<String>) -> Response {
    if let Some(value) = next.and_then(|t| axum::http::HeaderValue::from_str(&t).ok()) {
        response.headers_mut().insert("x-next-token", value);
    }
    response
}

async fn detail(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    if let Some(paused) = state.registry.saved.paused(&id) {
        return Ok(Json(paused_json(&paused.record)));
    }
    let entry = live(&state, &id)?;
    Ok(Json(detail_json(&entry)))
}

async fn kill(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    if state.registry.kill(&id).await {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(sandbox_not_found(&id))
    }
}

async fn set_timeout(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    request: Body,
) -> Result<StatusCode, ApiError> {
    let entry = live(&state, &id)?;
    let TimeoutRequest { timeout } = body::json_request(&state.config, request).await?;
    // As E2B: 0 ends the lifetime now, and the sandbox's lifecycle (kill or auto-pause) follows.
    let timeout = match timeout {
        0 => Duration::ZERO,
        seconds => state.registry.check_timeout(seconds)?,
    };
    state.registry.set_timeout(&entry, timeout, false).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn refresh(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    request: Body,
) -> Result<StatusCode, ApiError> {
    let entry = live(&state, &id)?;
    let RefreshBody { duration } = body::json_request(&state.config, request).await?;
    let duration = state.registry.check_timeout(duration.unwrap_or(60))?;
    state.registry.set_timeout(&entry, duration, true).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A running sandbox: extend its lifetime only ("TTL is only extended"), 200. A paused one:
/// resume it with that lifetime, 201.
async fn connect(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    request: Body,
) -> Result<Response, ApiError> {
    let ConnectRequest { timeout } = body::json_request(&state.config, request).await?;
    let timeout = match timeout {
        Some(seconds) => Some(state.registry.check_timeout(seconds)?),
        None => None,
    };
    match state.registry.get(&id) {
        Some(entry) if entry.hold() == Hold::Free => {
            if let Some(timeout) = timeout {
                state.registry.set_timeout(&entry, timeout, true).await?;
            }
            Ok(Json(sandbox_json(&entry)).into_response())
        }
        // Paused, or being paused (resume waits for the pause to end): resume it.
        _ => {
            let timeout = timeout.unwrap_or(state.config.default_timeout);
            let (entry, outcome) = state.registry.resume_telling(&id, timeout).await?;
            Ok(resumed(&entry, &outcome))
        }
    }
}

/// E2B's `ResumedSandbox` (the deprecated resume route's body).
#[derive(Deserialize)]
struct ResumeBody {
    timeout: Option<i64>,
}

/// Resume a paused sandbox (201); 409 when it is running.
async fn resume(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    request: Body,
) -> Result<Response, ApiError> {
    let ResumeBody { timeout } = body::json_request(&state.config, request).await?;
    let timeout = match timeout {
        Some(seconds) => state.registry.check_timeout(seconds)?,
        None => state.config.default_timeout,
    };
    if state.registry.get(&id).is_some() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("sandbox {id} is already running"),
        ));
    }
    let (entry, outcome) = state.registry.resume_telling(&id, timeout).await?;
    Ok(resumed(&entry, &outcome))
}

/// A resume's answer (201): the sandbox, and `Waxell-Resume: memory` or `filesystem` saying what
/// came back.
fn resumed(entry: &super::registry::SandboxEntry, outcome: &ResumeOutcome) -> Response {
    let mut response = (StatusCode::CREATED, Json(sandbox_json(entry))).into_response();
    if *outcome != ResumeOutcome::Running {
        response.headers_mut().insert(
            "waxell-resume",
            axum::http::HeaderValue::from_static(outcome.kept()),
        );
    }
    response
}

/// Pause (lifecycle.rs). The answer says which pause it got: `Waxell-Pause: memory` (processes,
/// commands and terminals included, and memory kept; directory watchers ended) or `filesystem`, with a `Warning`
/// saying why when memory was asked for.
async fn pause(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    request: Body,
) -> Result<Response, ApiError> {
    let PauseRequest { memory } = body::json_request(&state.config, request).await?;
    let kept = state.registry.pause(&id, memory).await?;
    Ok(telling_kept(
        StatusCode::NO_CONTENT.into_response(),
        "waxell-pause",
        &kept,
    ))
}

/// `response` with `header: memory` or `filesystem` saying what a pause, snapshot or fork kept,
/// and a `Warning` saying why where memory could have been kept but was not.
fn telling_kept(mut response: Response, header: &'static str, kept: &KeptState) -> Response {
    let headers = response.headers_mut();
    headers.insert(header, axum::http::HeaderValue::from_static(kept.kind()));
    if let KeptState::FilesNotMemory(reason) = kept {
        headers.insert(axum::http::header::WARNING, memory_warning(reason));
    }
    response
}

/// The `Warning` of a pause that kept the files only: RFC 7234's form, the reason quoted (one line
/// of visible ASCII: what a header may carry).
fn memory_warning(reason: &str) -> axum::http::HeaderValue {
    let clean: String = reason
        .chars()
        .map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { ' ' })
        .filter(|c| *c != '"' && *c != '\\')
        .take(300)
        .collect();
    axum::http::HeaderValue::from_str(&format!("299 waxell-sandbox \"memory not kept: {clean}\""))
        .unwrap_or_else(|_| axum::http::HeaderValue::from_static("299 waxell-sandbox \"memory not kept\""))
}

async fn snapshot(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    request: Body,
) -> Result<Response, ApiError> {
    let wire::SnapshotRequest { name } = body::json_request(&state.config, request).await?;
    let (record, kept) = state
        .registry
        .snapshot(&id, name.filter(|n| !n.is_empty()))
        .await?;
    let body = wire::SnapshotInfo {
        snapshot_id: record.snapshot_id,
        names: record.names,
    };
    Ok(telling_kept(
        (StatusCode::CREATED, Json(body)).into_response(),
        "waxell-snapshot",
        &kept,
    ))
}

async fn list_snapshots(
    State(state): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let query = ListQuery::parse(query.as_deref())?;
    let items = state
        .registry
        .saved
        .all_snapshots()
        .into_iter()
        .filter(|s| {
            let r = &s.record;
            query.sandbox_id.as_ref().is_none_or(|id| &r.sandbox_id == id)
                && query.name.as_ref().is_none_or(|name| {
                    let bare = name.strip_suffix(":default").unwrap_or(name);
                    r.snapshot_id == bare || r.names.iter().any(|n| n == bare)
                })
        })
        .map(|s| Listed {
            id: s.record.snapshot_id.clone(),
            at: from_ms(s.record.created_at_ms),
            item: wire::SnapshotInfo {
                snapshot_id: s.record.snapshot_id.clone(),
                names: s.record.names.clone(),
            },
        })
        .collect();
    let (items, next) = page(items, &query);
    Ok(with_next_token(Json(items).into_response(), next))
}

/// E2B deletes a snapshot as the template it is.
async fn delete_snapshot(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if state.registry.delete_snapshot(&id).await {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!(
            "snapshot or template {id:?} not found"
        )))
    }
}

/// Most forks one request may ask for (E2B: 100).
const MAX_FORKS: i64 = 100;

async fn fork(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    request: Body,
) -> Result<Response, ApiError> {
    let wire::ForkRequest { timeout, count } = body::json_request(&state.config, request).await?;
    let count = count.unwrap_or(1);
    if !(1..=MAX_FORKS).contains(&count) {
        return Err(ApiError::bad_request(format!(
            "count {count}: expected 1..={MAX_FORKS}"
        )));
    }
    let timeout = match timeout {
        Some(seconds) => state.registry.check_timeout(seconds)?,
        None => state.config.default_timeout,
    };
    let (forks, kept) = state.registry.fork(&id, count as usize, timeout).await?;
    let results: Vec<wire::ForkResult> = forks
        .into_iter()
        .map(|fork| match fork {
            Ok(entry) => wire::ForkResult {
                sandbox: Some(sandbox_json(&entry)),
                error: None,
            },
            Err(e) => wire::ForkResult {
                sandbox: None,
                error: Some(wire::ErrorBody {
                    code: e.status().as_u16().into(),
                    message: e.message().to_owned(),
                }),
            },
        })
        .collect();
    Ok(telling_kept(
        (StatusCode::CREATED, Json(results)).into_response(),
        "waxell-fork",
        &kept,
    ))
}

/// The sandbox's log (logs.rs), live or paused: E2B's first route's lines and entries.
async fn logs(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    axum::extract::Query(query): axum::extract::Query<LogsQuery>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(logs::logs_json(log_of(&state, &id)?, &query)?))
}

/// E2B's second logs route: structured entries, with direction, level and search.
async fn logs_v2(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    axum::extract::Query(query): axum::extract::Query<LogsQuery>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(logs::logs_v2_json(log_of(&state, &id)?, &query)?))
}

fn log_of(state: &AppState, id: &str) -> Result<Vec<logs::LogEntry>, ApiError> {
    if let Some(paused) = state.registry.saved.paused(id) {
        return Ok(paused.record.logs.clone());
    }
    Ok(live(state, id)?.log.entries())
}

#[derive(Deserialize)]
struct MetricsRange {
    start: Option<u64>,
    end: Option<u64>,
}

/// The sandbox's metrics now, as E2B's one-sample list; empty when `start..end` (Unix seconds)
/// does not include now, or the sandbox is paused (it uses nothing).
async fn metrics(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    axum::extract::Query(range): axum::extract::Query<MetricsRange>,
) -> Result<Json<Value>, ApiError> {
    if state.registry.saved.paused(&id).is_some() {
        return Ok(Json(json!([])));
    }
    let entry = live(&state, &id)?;
    let metrics = entry.session.metrics().await?;
    let at = unix_seconds(metrics.timestamp);
    // Second-precision bounds, as the SDKs send them.
    let in_range = range.start.is_none_or(|s| at + 1 >= s) && range.end.is_none_or(|e| at <= e + 1);
    Ok(Json(if in_range {
        json!([metric_json(&metrics)])
    } else {
        json!([])
    }))
}

#[derive(Deserialize)]
struct ManyIds {
    sandbox_ids: String,
}

/// Metrics of several live sandboxes (`sandbox_ids=a,b`), keyed by id; unknown or paused ones
/// are left out.
async fn metrics_of_many(
    State(state): State<Arc<AppState>>,
    axum::extract::Query(ManyIds { sandbox_ids }): axum::extract::Query<ManyIds>,
) -> Result<Json<Value>, ApiError> {
    let ids: Vec<&str> = sandbox_ids
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if ids.len() > 100 {
        return Err(ApiError::bad_request(format!(
            "sandbox_ids: {} ids, 100 at most",
            ids.len()
        )));
    }
    let mut all = serde_json::Map::new();
    for id in ids {
        if let Some(entry) = state.registry.get(id) {
            if let Ok(metrics) = entry.session.metrics().await {
                all.insert(id.to_owned(), metric_json(&metrics));
            }
        }
    }
    Ok(Json(json!({ "sandboxes": all })))
}

fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// E2B's `SandboxMetric`.
fn metric_json(m: &SandboxMetrics) -> Value {
    json!({
        "timestamp": rfc3339(m.timestamp),
        "timestampUnix": unix_seconds(m.timestamp),
        "cpuCount": m.cpu_count,
        "cpuUsedPct": (m.cpu_used_pct * 100.0).round() / 100.0,
        "memUsed": m.mem_used,
        "memTotal": m.mem_total,
        "memCache": 0,
        "diskUsed": m.disk_used,
        "diskTotal": m.disk_total,
    })
}

/// The paths of E2B's own API: a route of it this server lacks is "not implemented", anything
/// else is "no such route".
const E2B_API_PREFIXES: &[&str] = &[
    "/sandboxes",
    "/v2/sandboxes",
    "/snapshots",
    "/templates",
    "/v2/templates",
    "/v3/templates",
    "/teams",
    "/volumes",
    "/secrets",
    "/nodes",
    "/access-tokens",
    "/api-keys",
    "/admin",
];

async fn unknown_route(request: Request) -> ApiError {
    let (method, path) = (request.method(), request.uri().path());
    let e2b = E2B_API_PREFIXES
        .iter()
        .any(|p| path == *p || path.strip_prefix(p).is_some_and(|rest| rest.starts_with('/')));
    if e2b {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            format!("{method} {path}: this route of E2B's API is not implemented by waxell-sandbox serve"),
        )
    } else {
        ApiError::not_found(format!("{method} {path}: no such route on this server"))
    }
}

/// E2B's `Sandbox` (create and connect responses).
fn sandbox_json(entry: &SandboxEntry) -> wire::Sandbox {
    wire::Sandbox {
        template_id: entry.template_id.clone(),
        sandbox_id: entry.id.clone(),
        alias: Some(entry.template_id.clone()),
        client_id: CLIENT_ID.into(),
        envd_version: Some(ENVD_VERSION.into()),
        envd_access_token: entry.envd_token.clone(),
        traffic_access_token: entry.traffic_token.clone(),
        domain: None,
    }
}

/// The state E2B's API gives a live sandbox: `paused` from the moment its pause begins (its
/// data plane stops answering then).
fn api_state(entry: &SandboxEntry) -> &'static str {
    if entry.is_pausing() {
        "paused"
    } else {
        "running"
    }
}

/// E2B's `SandboxDetail` (also used for list entries, a superset of `ListedSandbox`).
fn detail_json(entry: &SandboxEntry) -> Value {
    let end_at = if entry.is_pausing() {
        SystemTime::now()
    } else {
        entry.end_at()
    };
    json!({
        "templateID": entry.template_id,
        "alias": entry.template_id,
        "sandboxID": entry.id,
        "clientID": CLIENT_ID,
        "startedAt": rfc3339(entry.started_at),
        "endAt": rfc3339(end_at),
        "cpuCount": 1,
        "memoryMB": 512,
        "diskSizeMB": 512,
        "state": api_state(entry),
        "envdVersion": ENVD_VERSION,
        "metadata": entry.metadata,
        "lifecycle": lifecycle_json(entry.lifecycle),
    })
}

/// A paused sandbox's `SandboxDetail`: `endAt` is when it was paused.
fn paused_json(record: &PausedRecord) -> Value {
    json!({
        "templateID": record.template_id,
        "alias": record.template_id,
        "sandboxID": record.id,
        "clientID": CLIENT_ID,
        "startedAt": rfc3339(from_ms(record.started_at_ms)),
        "endAt": rfc3339(from_ms(record.paused_at_ms)),
        "cpuCount": 1,
        "memoryMB": 512,
        "diskSizeMB": 512,
        "state": "paused",
        "envdVersion": ENVD_VERSION,
        "metadata": record.metadata,
        "lifecycle": lifecycle_json(Lifecycle {
            auto_pause: record.auto_pause,
            auto_pause_memory: record.auto_pause_memory,
            auto_resume: record.auto_resume,
        }),
    })
}

fn lifecycle_json(lifecycle: Lifecycle) -> Value {
    json!({
        "onTimeout": if lifecycle.auto_pause { "pause" } else { "kill" },
        "autoResume": lifecycle.auto_resume,
    })
}

fn rfc3339(time: SystemTime) -> String {
    // Whole seconds are plenty here and keep the format the generated clients parse most easily.
    let secs = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    humantime::format_rfc3339_seconds(SystemTime::UNIX_EPOCH + Duration::from_secs(secs)).to_string()
}

#[cfg(test)]
mod tests {
    use super::memory_warning;

    /// Why a pause kept the files only reaches the client as a valid `Warning`, whatever the
    /// engine's message holds.
    #[test]
    fn a_files_only_pause_warns_with_its_reason_in_a_valid_header() {
        let warning =
            memory_warning("the engine answered 500: {\"message\":\"restore \\ failed\"}\nnext line é");
        assert_eq!(
            warning.to_str().unwrap(),
            "299 waxell-sandbox \"memory not kept: the engine answered 500: {message:restore  failed} next line  \""
        );
        let long = memory_warning(&"x".repeat(1000));
        assert!(long.len() < 400);
    }
}
