//! Checks every request passes before routing: a `Host` the server answers to (DNS rebinding: a
//! web page whose name resolves to 127.0.0.1 still sends its own name) and no browser origin
//! (a page the developer visits must not drive the server with the browser's requests).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{HOST, ORIGIN};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::AppState;

pub(crate) async fn check_request(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    match check(&state.config, &request) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

fn forbidden(message: String) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, message)
}

fn check(config: &super::config::ServerConfig, request: &Request) -> Result<(), ApiError> {
    let headers = request.headers();
    let host = match headers.get(HOST) {
        Some(value) => value
            .to_str()
            .map_err(|_| ApiError::bad_request("the Host header is not text"))?
            .to_owned(),
        None => request
            .uri()
            .authority()
            .map(|a| a.as_str().to_owned())
            .ok_or_else(|| ApiError::bad_request("the request has no Host header"))?,
    };
    if !host_allowed(&config.allowed_hosts, &host) {
        return Err(forbidden(format!(
            "Host {host:?} is not one this server answers to (allowed: {}); start it with \
             --allowed-host {host} if that name is yours",
            config.allowed_hosts.join(", ")
        )));
    }
    let origin = headers.get(ORIGIN).map(|v| v.to_str().unwrap_or("<not text>"));
    let origin_allowed = origin.is_some_and(|o| {
        config
            .allowed_origins
            .iter()
            .any(|allowed| allowed.trim_end_matches('/').eq_ignore_ascii_case(o))
    });
    if let Some(origin) = origin {
        if !origin_allowed {
            return Err(forbidden(format!(
                "requests from browser origin {origin:?} are refused (start the server with \
                 --allowed-origin {origin} to allow that page)"
            )));
        }
    }
    let fetch_site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if matches!(fetch_site, Some("cross-site" | "same-site")) && !origin_allowed {
        return Err(forbidden(
            "requests a browser makes for another site (Sec-Fetch-Site) are refused".into(),
        ));
    }
    Ok(())
}

/// Split `host[:port]` (`[v6]:port` too) into the lowercased name and the port, if any.
fn split_host(value: &str) -> (String, Option<&str>) {
    let value = value.trim();
    if let Some(rest) = value.strip_prefix('[') {
        if let Some(end) = rest.find(']') {
            let name = format!("[{}]", &rest[..end]).to_ascii_lowercase();
            let port = rest[end + 1..].strip_prefix(':');
            return (name, port);
        }
    }
    match value.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') => (name.to_ascii_lowercase(), Some(port)),
        _ => (value.to_ascii_lowercase(), None),
    }
}

/// An entry with a port matches exactly; an entry without one matches the name on any port.
pub(crate) fn host_allowed(allowed: &[String], host: &str) -> bool {
    let (name, port) = split_host(host);
    allowed.iter().any(|entry| {
        let (allowed_name, allowed_port) = split_host(entry);
        allowed_name == name && (allowed_port.is_none() || allowed_port == port)
    })
}

#[cfg(test)]
mod tests {
    use super::host_allowed;

    #[test]
    fn hosts_match_by_name_and_port() {
        let allowed: Vec<String> = ["localhost", "127.0.0.1:3000", "[::1]:3000"]
            .map(String::from)
            .to_vec();
        for ok in ["localhost", "LOCALHOST:9", "127.0.0.1:3000", "[::1]:3000"] {
            assert!(host_allowed(&allowed, ok), "{ok}");
        }
        for refused in [
            "127.0.0.1",
            "127.0.0.1:3001",
            "[::1]:80",
            "evil.example:3000",
            "localhost.evil.example",
            "127.0.0.1.nip.io:3000",
            "",
        ] {
            assert!(!host_allowed(&allowed, refused), "{refused}");
        }
    }
}
