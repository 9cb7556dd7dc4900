//! Code Interpreter plane (sandbox port 49999): `/execute` and the contexts API.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::error::ApiError;
use super::registry::SandboxEntry;
use super::state::AppState;
use super::{body, execute};
use waxell::e2b::wire::{ExecuteRequest, NewContext, ACCESS_TOKEN_HEADER, TRAFFIC_TOKEN_HEADER};

pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(|| async { Json("OK") }))
        .route("/execute", post(execute_code))
        .route("/contexts", post(create_context).get(list_contexts))
        .route("/contexts/{id}/restart", post(restart_context))
        .route("/contexts/{id}", delete(remove_context))
        .fallback(|| async { ApiError::not_found("no such Code Interpreter route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this route")
        })
        .with_state(state)
}

async fn sandbox(state: &AppState, headers: &HeaderMap) -> Result<Arc<SandboxEntry>, ApiError> {
    state
        .registry
        .for_data_plane(headers, &[(TRAFFIC_TOKEN_HEADER, |e| e.traffic_token.as_ref())])
        .await
}

/// `/execute` runs code, so it also takes the sandbox's envd access token, as E2B's SDKs send it.
async fn sandbox_for_execute(state: &AppState, headers: &HeaderMap) -> Result<Arc<SandboxEntry>, ApiError> {
    state
        .registry
        .for_data_plane(
            headers,
            &[
                (TRAFFIC_TOKEN_HEADER, |e| e.traffic_token.as_ref()),
                (ACCESS_TOKEN_HEADER, |e| e.envd_token.as_ref()),
            ],
        )
        .await
}

async fn execute_code(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    request: Body,
) -> Result<Response, ApiError> {
    let entry = sandbox_for_execute(&state, &headers).await?;
    let request: ExecuteRequest = body::json_request(&state.config, request).await?;
    if request.context_id.is_some() && request.language.is_some() {
        return Err(ApiError::bad_request(
            "Only one of context_id or language can be provided",
        ));
    }
    let target = match (request.context_id, request.language) {
        (Some(id), _) => {
            // Check before answering 200: once the stream starts the status cannot change.
            let contexts = entry.session.list_contexts().await?;
            if !contexts.iter().any(|c| c.id == id) {
                return Err(ApiError::not_found(format!("Context {id} not found")));
            }
            execute::Target::Context(id)
        }
        (None, Some(language)) => {
            // Refused before the stream starts, with E2B's error shape, when the runtime is missing.
            entry.session.check_language(&language)?;
            execute::Target::Language(normalize_language(&language))
        }
        (None, None) => execute::Target::Default,
    };
    Ok(execute::stream(
        entry.session.clone(),
        request.code,
        target,
        request.env_vars.unwrap_or_default(),
        state.config.keepalive_interval,
        state.config.max_stream_buffer_bytes,
    ))
}

/// E2B's language names: trimmed, lowercased, `js` -> `javascript`, `ts` -> `typescript`, empty ->
/// `python`. Returns `None` for Python (the default context).
fn normalize_language(language: &str) -> Option<String> {
    let language = language.trim().to_lowercase();
    match language.as_str() {
        "" | "python" | "python3" => None,
        "js" => Some("javascript".into()),
        "ts" => Some("typescript".into()),
        _ => Some(language),
    }
}

async fn create_context(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    request: Body,
) -> Result<Json<Value>, ApiError> {
    let entry = sandbox(&state, &headers).await?;
    let new: NewContext = body::json_request(&state.config, request).await?;
    let language = new.language.as_deref().and_then(normalize_language);
    let context = entry
        .session
        .create_context(language.as_deref(), new.cwd.as_deref())
        .await?;
    Ok(Json(json!(context)))
}

async fn list_contexts(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let entry = sandbox(&state, &headers).await?;
    Ok(Json(json!(entry.session.list_contexts().await?)))
}

async fn restart_context(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let entry = sandbox(&state, &headers).await?;
    entry.session.restart_context(&id).await?;
    Ok(Json(Value::Null))
}

async fn remove_context(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let entry = sandbox(&state, &headers).await?;
    entry.session.remove_context(&id).await?;
    Ok(Json(Value::Null))
}
