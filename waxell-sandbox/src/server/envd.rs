//! envd plane (sandbox port 49983): health, `/files` download and upload, the filesystem
//! Connect RPCs (`ListDir`, `Stat`, `MakeDir`, `Move`, `Remove`) over the Connect protocol's JSON
//! codec, and the process RPCs (process.rs).

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Query, Request, State};
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_ENCODING, CONTENT_TYPE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use waxell::e2b::wire::{
    self, EntryResponse, ListDirResponse, MoveRequest, PathRequest, UploadedEntry, ACCESS_TOKEN_HEADER,
    METADATA_HEADER_PREFIX, SANDBOX_ID_HEADER,
};
use waxell::sandbox::{EntryInfo, FsEvent, SandboxError, WatchOptions};

use super::body;
use super::connect;
use super::error::ApiError;
use super::registry::SandboxEntry;
use super::signature::{Operation, Signed};
use super::state::AppState;

/// Keepalive interval of a `WatchDir` stream when the SDK names none.
const KEEPALIVE: Duration = Duration::from_secs(50);

/// Deepest `ListDir` recursion served.
const MAX_LIST_DEPTH: u32 = 8;

pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/envs", get(envs))
        .route("/files", get(download).post(upload))
        .route("/filesystem.Filesystem/WatchDir", post(watch_dir))
        .route("/filesystem.Filesystem/{method}", post(filesystem_rpc))
        .route("/process.Process/{method}", post(super::process::rpc))
        .fallback(|| async { ApiError::not_found("no such envd route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this route")
        })
        // Bodies are read with the server's own limit (body::read); axum's 2 MiB default would
        // otherwise cap multipart uploads below it.
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

pub(crate) async fn sandbox(state: &AppState, headers: &HeaderMap) -> Result<Arc<SandboxEntry>, ApiError> {
    state
        .registry
        .for_data_plane(headers, &[(ACCESS_TOKEN_HEADER, |e| e.envd_token.as_ref())])
        .await
}

/// 204 while the sandbox lives; E2B's proxy 502 once it is gone (how the SDKs tell "killed").
async fn health(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Result<StatusCode, ApiError> {
    // envd's health check is unauthenticated: only the sandbox's existence matters.
    state.registry.for_data_plane(&headers, &[]).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn envs(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    let entry = sandbox(&state, &headers).await?;
    Ok(Json(json!(entry.env_vars)))
}

#[derive(Deserialize)]
struct FileQuery {
    path: Option<String>,
    username: Option<String>,
    signature: Option<String>,
    signature_expiration: Option<i64>,
}

/// The sandbox a `/files` request is for: by a signed URL's signature when it has one (then it
/// needs no headers at all), else by the usual sandbox id and access token headers.
async fn files_sandbox(
    state: &AppState,
    headers: &HeaderMap,
    query: &FileQuery,
    operation: Operation,
) -> Result<Arc<SandboxEntry>, ApiError> {
    let Some(signature) = query.signature.as_deref() else {
        return sandbox(state, headers).await;
    };
    let signed = Signed {
        path: query.path.as_deref().unwrap_or_default(),
        username: query.username.as_deref(),
        signature,
        expiration: query.signature_expiration,
    };
    let candidates = match headers.get(SANDBOX_ID_HEADER).and_then(|v| v.to_str().ok()) {
        Some(id) => state.registry.get(id).into_iter().collect(),
        None => state.registry.list(),
    };
    let entry = candidates
        .into_iter()
        .find(|entry| {
            entry
                .envd_token
                .as_deref()
                .is_some_and(|token| signed.made_with(operation, token))
        })
        .ok_or_else(|| ApiError::unauthorized("invalid signature for this path, user and operation"))?;
    signed.check_expiry()?;
    Ok(entry)
}

/// Refuse paths no backend should see: empty, NUL bytes, `..` components. Symlinks can only be
/// judged inside the sandbox; the backend refuses them.
fn check_path(path: &str) -> Result<(), ApiError> {
    let reason = if path.is_empty() {
        "path is empty"
    } else if path.contains('\0') {
        "path contains a NUL byte"
    } else if path.split('/').any(|part| part == "..") {
        "`..` is not allowed in paths"
    } else {
        return Ok(());
    };
    Err(ApiError::bad_request(format!("invalid path '{path}': {reason}")))
}

async fn download(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(query): Query<FileQuery>,
) -> Result<Response, ApiError> {
    let entry = files_sandbox(&state, &headers, &query, Operation::Read).await?;
    let path = query
        .path
        .ok_or_else(|| ApiError::bad_request("the path query parameter is required"))?;
    check_path(&path)?;
    let data = entry
        .session
        .read_file(&path)
        .await
        .map_err(|e| ApiError::from_file(&path, e))?;
    let name = path.rsplit('/').next().unwrap_or_default().replace('"', "");
    Ok((
        [
            (CONTENT_TYPE, "application/octet-stream".to_owned()),
            (CONTENT_DISPOSITION, format!("inline; filename=\"{name}\"")),
        ],
        data,
    )
        .into_response())
}

/// `POST /files`: multipart parts named `file` (target = `path` query, else the part's filename),
/// or a raw `application/octet-stream` body (optionally gzip) written to `path`. The body is read
/// once, within the size cap and the body deadline: multipart is parsed as it streams in.
async fn upload(
    State(state): State<Arc<AppState>>,
    Query(query): Query<FileQuery>,
    request: Request,
) -> Result<Json<Vec<UploadedEntry>>, ApiError> {
    let (parts, request_body) = request.into_parts();
    let entry = files_sandbox(&state, &parts.headers, &query, Operation::Write).await?;
    let metadata = metadata_headers(&parts.headers)?;
    let (limit, timeout) = (state.config.max_body_bytes, state.config.body_timeout);
    let files = tokio::time::timeout(timeout, receive_files(parts, request_body, &query, limit))
        .await
        .map_err(|_| body::too_slow(timeout))??;
    if files.is_empty() {
        return Err(ApiError::bad_request("the multipart body has no \"file\" part"));
    }
    let mut written = Vec::new();
    for (path, data) in files {
        check_path(&path)?;
        let info = entry
            .session
            .write_file_with_metadata(&path, &data, &metadata)
            .await
            .map_err(|e| ApiError::from_file(&path, e))?;
        let mut uploaded = UploadedEntry::new(info.path, info.name);
        uploaded.metadata = info.metadata;
        written.push(uploaded);
    }
    Ok(Json(written))
}

/// The upload's `X-Metadata-<key>: <value>` headers (keys lower-case, as HTTP gives them).
fn metadata_headers(headers: &HeaderMap) -> Result<BTreeMap<String, String>, ApiError> {
    let mut metadata = BTreeMap::new();
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix(METADATA_HEADER_PREFIX) else {
            continue;
        };
        let value = value.to_str().map_err(|_| {
            ApiError::bad_request(format!("metadata value for key {key:?} is not printable ASCII"))
        })?;
        metadata.insert(key.to_owned(), value.to_owned());
    }
    Ok(metadata)
}

/// The files an upload carries, as `(target path, content)`.
async fn receive_files(
    parts: axum::http::request::Parts,
    request_body: Body,
    query: &FileQuery,
    limit: usize,
) -> Result<Vec<(String, Bytes)>, ApiError> {
    let content_type = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !content_type.starts_with("multipart/form-data") {
        let target = query
            .path
            .clone()
            .ok_or_else(|| ApiError::bad_request("the path query parameter is required for a raw upload"))?;
        let gzip = parts
            .headers
            .get(CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("gzip"));
        let bytes = axum::body::to_bytes(request_body, limit)
            .await
            .map_err(|e| body::read_error(&e, limit))?;
        let data = if gzip { gunzip(&bytes, limit)? } else { bytes };
        return Ok(vec![(target, data)]);
    }
    let limited = Body::new(http_body_util::Limited::new(request_body, limit));
    let mut multipart = Multipart::from_request(Request::from_parts(parts, limited), &())
        .await
        .map_err(|e| ApiError::bad_request(format!("invalid multipart body: {e}")))?;
    let multipart_error = |e: axum::extract::multipart::MultipartError| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            body::read_error(&e, limit)
        } else {
            let api = body::read_error(&e, limit);
            if api.status() == StatusCode::PAYLOAD_TOO_LARGE {
                api
            } else {
                ApiError::bad_request(format!("invalid multipart body: {e}"))
            }
        }
    };
    let mut files = Vec::new();
    while let Some(field) = multipart.next_field().await.map_err(multipart_error)? {
        if field.name() != Some("file") {
            return Err(ApiError::bad_request(format!(
                "unexpected multipart part {:?}: every part must be named \"file\"",
                field.name().unwrap_or_default()
            )));
        }
        let target = query
            .path
            .clone()
            .or_else(|| field.file_name().map(str::to_owned))
            .ok_or_else(|| ApiError::bad_request("no path query parameter and no part filename"))?;
        files.push((target, field.bytes().await.map_err(multipart_error)?));
    }
    Ok(files)
}

/// Decompress a gzip body, refusing to inflate past `limit` bytes (a zip bomb gets 413).
fn gunzip(data: &[u8], limit: usize) -> Result<Bytes, ApiError> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| ApiError::bad_request(format!("invalid gzip body: {e}")))?;
    if out.len() > limit {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("decompressed body larger than {limit} bytes"),
        ));
    }
    Ok(out.into())
}

/// Connect unary RPCs of `filesystem.Filesystem`. Only what the sandbox interface can answer is
/// served; the others are Connect `unimplemented`.
async fn filesystem_rpc(
    State(state): State<Arc<AppState>>,
    axum::extract::Path(method): axum::extract::Path<String>,
    headers: HeaderMap,
    request: Body,
) -> Response {
    let result = async {
        let entry = sandbox(&state, &headers).await?;
        let bytes = body::read(request, state.config.json_limit(), state.config.body_timeout).await?;
        match method.as_str() {
            "ListDir" => {
                let request: PathRequest = body::json(&bytes)?;
                check_path(&request.path)?;
                let depth = request.depth.unwrap_or(1).clamp(1, MAX_LIST_DEPTH);
                let mut entries = Vec::new();
                let cap = state.config.max_list_entries;
                list_recursive(&entry, &request.path, depth, cap, &mut entries).await?;
                to_json(ListDirResponse { entries })
            }
            "Stat" => {
                let request: PathRequest = body::json(&bytes)?;
                check_path(&request.path)?;
                let cap = state.config.max_list_entries;
                to_json(EntryResponse {
                    entry: stat(&entry, &request.path, cap).await?,
                })
            }
            "MakeDir" => {
                let request: PathRequest = body::json(&bytes)?;
                check_path(&request.path)?;
                let created = entry
                    .session
                    .make_dir(&request.path)
                    .await
                    .map_err(|e| ApiError::from_file(&request.path, e))?;
                if !created {
                    return Err(ApiError::new(
                        StatusCode::CONFLICT,
                        format!("directory '{}' already exists", request.path),
                    ));
                }
                let cap = state.config.max_list_entries;
                to_json(EntryResponse {
                    entry: stat(&entry, &request.path, cap).await?,
                })
            }
            "Remove" => {
                let request: PathRequest = body::json(&bytes)?;
                check_path(&request.path)?;
                // As envd (`os.RemoveAll`): removing what is not there succeeds.
                match entry.session.remove(&request.path).await {
                    Ok(()) | Err(SandboxError::FileNotFound { .. }) => Ok(json!({})),
                    Err(e) => Err(ApiError::from_file(&request.path, e)),
                }
            }
            "Move" => {
                let request: MoveRequest = body::json(&bytes)?;
                check_path(&request.source)?;
                check_path(&request.destination)?;
                let moved = entry
                    .session
                    .rename(&request.source, &request.destination)
                    .await
                    .map_err(|e| ApiError::from_file(&request.source, e))?;
                to_json(EntryResponse {
                    entry: entry_info(&moved),
                })
            }
            "CreateWatcher" => {
                let request: WatchRequest = body::json(&bytes)?;
                check_path(&request.path)?;
                let options = request.options();
                let watch = entry
                    .session
                    .watch_dir(&request.path, options)
                    .await
                    .map_err(|e| ApiError::from_file(&request.path, e))?;
                let watcher_id = entry.watchers.add(&request.path, options, watch);
                Ok(json!({ "watcherId": watcher_id }))
            }
            "GetWatcherEvents" => {
                let request: WatcherRequest = body::json(&bytes)?;
                let events = entry.watchers.take_events(&request.watcher_id).await?;
                Ok(json!({ "events": events.iter().map(fs_event).collect::<Vec<_>>() }))
            }
            "RemoveWatcher" => {
                let request: WatcherRequest = body::json(&bytes)?;
                entry.watchers.remove(&request.watcher_id);
                Ok(json!({}))
            }
            "WatchDir" => Err(ApiError::bad_request(
                "filesystem.Filesystem/WatchDir is server-streaming: send it with the Connect streaming content type",
            )),
            _ => Err(ApiError::not_found(format!(
                "no RPC filesystem.Filesystem/{method}"
            ))),
        }
    }
    .await;
    match result {
        Ok(value) => Json(value).into_response(),
        Err(e) => e.into_connect().into_response(),
    }
}

/// `WatchDir`, server-streaming: a start message, then the events as they happen, with a
/// keepalive message at the interval the SDK asks for (`Keepalive-Ping-Interval`, seconds) so
/// idle proxies keep the stream open. Ends when the client goes away or the sandbox does.
async fn watch_dir(State(state): State<Arc<AppState>>, headers: HeaderMap, request: Body) -> Response {
    if let Err(e) = connect::check_codec(&headers, true) {
        return e.into_connect().into_response();
    }
    let started = async {
        let entry = sandbox(&state, &headers).await?;
        let request: WatchRequest = connect::EnvelopeReader::new(request, state.config.json_limit())
            .only()
            .await?
            .ok_or_else(|| ApiError::bad_request("the WatchDir stream carries no request message"))?;
        check_path(&request.path)?;
        let watch = entry
            .session
            .watch_dir(&request.path, request.options())
            .await
            .map_err(|e| ApiError::from_file(&request.path, e))?;
        Ok::<_, ApiError>((entry, watch))
    }
    .await;
    let (entry, mut watch) = match started {
        Ok(started) => started,
        Err(e) => return connect::stream_response(futures_util::stream::iter([connect::end(Some(&e))])),
    };
    let keepalive = headers
        .get("keepalive-ping-interval")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(KEEPALIVE, |secs| Duration::from_secs(secs.clamp(1, 3600)));
    let (frames, receiver) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        let _ = frames.send(connect::message(&json!({ "start": {} }))).await;
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + keepalive, keepalive);
        let ending = loop {
            tokio::select! {
                () = frames.closed() => return,
                _ = ticks.tick() => {
                    if state.registry.get(&entry.id).is_none() {
                        break Some(ApiError::not_found(format!("sandbox {} is gone", entry.id)));
                    }
                    if frames.send(connect::message(&json!({ "keepalive": {} }))).await.is_err() {
                        return;
                    }
                }
                events = watch.next_events() => match events {
                    Ok(events) => {
                        for event in &events {
                            if frames.send(connect::message(&json!({ "filesystem": fs_event(event) }))).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => break Some(ApiError::from(e)),
                },
            }
        };
        let _ = frames.send(connect::end(ending.as_ref())).await;
    });
    connect::stream_response(tokio_stream_of(receiver))
}

/// The stream of a channel's messages.
fn tokio_stream_of(
    mut receiver: tokio::sync::mpsc::Receiver<Bytes>,
) -> impl futures_util::Stream<Item = Bytes> {
    futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

/// 413 / Connect `resource_exhausted` for a listing over the cap.
fn too_many_entries(path: &str, cap: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("listing '{path}' has more than {cap} entries: list a narrower path or a smaller depth"),
    )
}

/// Every entry under `path` down to `depth` levels, in envd's order (a directory's entries by
/// name, each subdirectory's entries right after it), refusing (rather than truncating silently)
/// a listing of more than `cap` entries.
async fn list_recursive(
    entry: &SandboxEntry,
    path: &str,
    depth: u32,
    cap: usize,
    out: &mut Vec<wire::EntryInfo>,
) -> Result<(), ApiError> {
    // A stack of listings still being walked: (entries left, in reverse; depth left below them).
    let mut stack = vec![(list_sorted(entry, path).await?, depth)];
    while let Some((pending, depth)) = stack.last_mut() {
        let Some(info) = pending.pop() else {
            stack.pop();
            continue;
        };
        if out.len() >= cap {
            return Err(too_many_entries(path, cap));
        }
        out.push(entry_info(&info));
        if info.is_dir && info.symlink_target.is_none() && *depth > 1 {
            let below = *depth - 1;
            stack.push((list_sorted(entry, &info.path).await?, below));
        }
    }
    Ok(())
}

/// One directory's entries, sorted by name, reversed (for popping in order).
async fn list_sorted(entry: &SandboxEntry, dir: &str) -> Result<Vec<EntryInfo>, ApiError> {
    let mut entries = entry
        .session
        .list_files(dir)
        .await
        .map_err(|e| ApiError::from_file(dir, e))?;
    entries.sort_by(|a, b| b.name.cmp(&a.name));
    Ok(entries)
}

/// `Stat` through the interface's listing: list the parent and pick the entry. A parent of more
/// than `cap` entries is refused like a listing that large.
async fn stat(entry: &SandboxEntry, path: &str, cap: usize) -> Result<wire::EntryInfo, ApiError> {
    let trimmed = path.trim_end_matches('/');
    let (parent, name) = match trimmed.rsplit_once('/') {
        Some((parent, name)) => (if parent.is_empty() { "/" } else { parent }, name),
        None => (".", trimmed),
    };
    if name.is_empty() || trimmed == "/home/user" || trimmed == "." {
        return Ok(entry_info(&EntryInfo {
            name: "user".into(),
            path: "/home/user".into(),
            is_dir: true,
            ..EntryInfo::default()
        }));
    }
    let siblings = entry
        .session
        .list_files(parent)
        .await
        .map_err(|e| ApiError::from_file(path, e))?;
    if siblings.len() > cap {
        return Err(too_many_entries(parent, cap));
    }
    siblings
        .iter()
        .find(|info| info.name == name)
        .map(entry_info)
        .ok_or_else(|| ApiError::not_found(format!("path '{path}' does not exist")))
}

/// envd's `EntryInfo` for an entry of the sandbox interface. A symlink is reported as envd
/// reports one to a file (type file, with its target), since the host never follows it.
pub(super) fn entry_info(info: &EntryInfo) -> wire::EntryInfo {
    let (kind, type_char) = if info.is_dir {
        (wire::FILE_TYPE_DIRECTORY, 'd')
    } else if info.symlink_target.is_some() {
        (wire::FILE_TYPE_FILE, 'L')
    } else {
        (wire::FILE_TYPE_FILE, '-')
    };
    let mode = info.mode.unwrap_or(if info.is_dir { 0o755 } else { 0o644 });
    let mut permissions = String::with_capacity(10);
    permissions.push(type_char);
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 0o7;
        permissions.push(if bits & 4 != 0 { 'r' } else { '-' });
        permissions.push(if bits & 2 != 0 { 'w' } else { '-' });
        permissions.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    wire::EntryInfo {
        name: info.name.clone(),
        kind: kind.into(),
        path: info.path.clone(),
        size: info.size,
        mode: mode & 0o777,
        permissions,
        owner: "user".into(),
        group: "user".into(),
        modified_time: info
            .modified
            .map(|at| humantime::format_rfc3339_nanos(at).to_string()),
        symlink_target: info.symlink_target.clone(),
        metadata: info.metadata.clone(),
    }
}

/// envd's `FilesystemEvent` for an event of the sandbox interface.
pub(super) fn fs_event(event: &FsEvent) -> wire::FilesystemEvent {
    wire::FilesystemEvent {
        name: event.name.clone(),
        kind: wire::FilesystemEvent::kind_name(event.kind).to_owned(),
        entry: event.entry.as_ref().map(entry_info),
    }
}

/// `CreateWatcher` and `WatchDir`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WatchRequest {
    pub(super) path: String,
    #[serde(default)]
    recursive: bool,
    #[serde(default)]
    include_entry: bool,
}

impl WatchRequest {
    pub(super) fn options(&self) -> WatchOptions {
        WatchOptions::default()
            .recursive(self.recursive)
            .include_entry(self.include_entry)
    }
}

/// `GetWatcherEvents` and `RemoveWatcher`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WatcherRequest {
    watcher_id: String,
}

/// A Connect answer body.
fn to_json(value: impl serde::Serialize) -> Result<Value, ApiError> {
    serde_json::to_value(value).map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}
