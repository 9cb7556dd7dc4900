//! envd plane (sandbox port 49983): health, `/files` download and upload, the filesystem
//! Connect RPCs (`ListDir`, `Stat`, `MakeDir`, `Move`, `Remove`) over the Connect protocol's JSON
//! codec, and the process RPCs (process.rs).

use std::io::Read;
use std::sync::Arc;

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
};
use waxell::sandbox::EntryInfo;

use super::body;
use super::error::ApiError;
use super::registry::SandboxEntry;
use super::state::AppState;

/// Deepest `ListDir` recursion served.
const MAX_LIST_DEPTH: u32 = 8;

pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/envs", get(envs))
        .route("/files", get(download).post(upload))
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
    let entry = sandbox(&state, &headers).await?;
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
    let entry = sandbox(&state, &parts.headers).await?;
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
            .write_file(&path, &data)
            .await
            .map_err(|e| ApiError::from_file(&path, e))?;
        written.push(UploadedEntry::new(info.path, info.name));
    }
    Ok(Json(written))
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
                entry
                    .session
                    .remove(&request.path)
                    .await
                    .map_err(|e| ApiError::from_file(&request.path, e))?;
                Ok(json!({}))
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
            "WatchDir" | "CreateWatcher" | "GetWatcherEvents" | "RemoveWatcher" => Err(ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                format!("filesystem.Filesystem/{method} is not supported by this server"),
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

/// 413 / Connect `resource_exhausted` for a listing over the cap.
fn too_many_entries(path: &str, cap: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("listing '{path}' has more than {cap} entries: list a narrower path or a smaller depth"),
    )
}

/// Every entry under `path` down to `depth` levels, refusing (rather than truncating silently) a
/// listing of more than `cap` entries.
async fn list_recursive(
    entry: &SandboxEntry,
    path: &str,
    depth: u32,
    cap: usize,
    out: &mut Vec<wire::EntryInfo>,
) -> Result<(), ApiError> {
    let mut pending = vec![(path.to_owned(), depth)];
    while let Some((dir, depth)) = pending.pop() {
        let entries = entry
            .session
            .list_files(&dir)
            .await
            .map_err(|e| ApiError::from_file(&dir, e))?;
        if out.len() + entries.len() > cap {
            return Err(too_many_entries(path, cap));
        }
        for info in entries {
            if info.is_dir && depth > 1 {
                pending.push((info.path.clone(), depth - 1));
            }
            out.push(entry_info(&info));
        }
    }
    Ok(())
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
            size: 0,
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

/// envd's `EntryInfo` for an entry of the sandbox interface.
fn entry_info(info: &EntryInfo) -> wire::EntryInfo {
    let (kind, mode, permissions) = if info.is_dir {
        (wire::FILE_TYPE_DIRECTORY, 0o755, "drwxr-xr-x")
    } else {
        (wire::FILE_TYPE_FILE, 0o644, "-rw-r--r--")
    };
    wire::EntryInfo {
        name: info.name.clone(),
        kind: kind.into(),
        path: info.path.clone(),
        size: info.size,
        mode,
        permissions: permissions.into(),
        owner: "user".into(),
        group: "user".into(),
    }
}

/// A Connect answer body.
fn to_json(value: impl serde::Serialize) -> Result<Value, ApiError> {
    serde_json::to_value(value).map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}
