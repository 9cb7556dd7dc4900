//! Control plane (`api.<domain>` on E2B): create, list, inspect, connect, set-timeout and kill
//! sandboxes. Every route needs `X-API-KEY` when the server has one.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use waxell::e2b::wire::{self, ConnectRequest, NewSandbox, TimeoutRequest, API_KEY_HEADER};

use super::body;
use super::config::ENVD_VERSION;
use super::error::ApiError;
use super::registry::{constant_time_eq, CreateRequest, SandboxEntry};
use super::state::AppState;

/// E2B's deprecated `clientID`, still required by the Python SDK's parser; E2B sends this constant.
const CLIENT_ID: &str = "6532622b";
const DEFAULT_TEMPLATE: &str = "code-interpreter-v1";

pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/sandboxes", post(create).get(list))
        .route("/v2/sandboxes", post(create).get(list))
        .route("/sandboxes/{id}", get(detail).delete(kill))
        .route("/sandboxes/{id}/timeout", post(set_timeout))
        .route("/sandboxes/{id}/refreshes", post(refresh))
        .route("/sandboxes/{id}/connect", post(connect))
        .route("/v2/sandboxes/{id}/connect", post(connect))
        .fallback(|| async { ApiError::not_found("no such control-plane route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this route")
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
    let entry = state
        .registry
        .create(CreateRequest {
            template_id,
            timeout,
            metadata: new.metadata.unwrap_or_default(),
            env_vars: new.env_vars.unwrap_or_default(),
        })
        .await?;
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

async fn list(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(Value::Array(
        state.registry.list().iter().map(|e| detail_json(e)).collect(),
    ))
}

async fn detail(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
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
    let timeout = state.registry.check_timeout(timeout)?;
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

/// Sandboxes here never pause, so connect only extends the lifetime ("TTL is only extended").
async fn connect(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    request: Body,
) -> Result<Json<wire::Sandbox>, ApiError> {
    let entry = live(&state, &id)?;
    let ConnectRequest { timeout } = body::json_request(&state.config, request).await?;
    if let Some(seconds) = timeout {
        let timeout = state.registry.check_timeout(seconds)?;
        state.registry.set_timeout(&entry, timeout, true).await?;
    }
    Ok(Json(sandbox_json(&entry)))
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

/// E2B's `SandboxDetail` (also used for list entries, a superset of `ListedSandbox`).
fn detail_json(entry: &SandboxEntry) -> Value {
    json!({
        "templateID": entry.template_id,
        "alias": entry.template_id,
        "sandboxID": entry.id,
        "clientID": CLIENT_ID,
        "startedAt": rfc3339(entry.started_at),
        "endAt": rfc3339(entry.end_at()),
        "cpuCount": 1,
        "memoryMB": 512,
        "diskSizeMB": 512,
        "state": "running",
        "envdVersion": ENVD_VERSION,
        "metadata": entry.metadata,
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
