//! A fake Waxell API on 127.0.0.1: answers `GET /api/v1/observe/config/` (the OTLP endpoint discovery) with a
//! configured body, and records the `X-Wax-Key` each request carried.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;

use crate::ServerThread;

pub struct FakeWaxellApi {
    pub addr: SocketAddr,
    keys_seen: Arc<Mutex<Vec<String>>>,
    _server: ServerThread,
}

impl FakeWaxellApi {
    /// `config`: the discovery answer (`None` answers 404).
    pub fn start(config: Option<serde_json::Value>) -> Self {
        let keys_seen = Arc::new(Mutex::new(Vec::new()));
        let keys = Arc::clone(&keys_seen);
        let server = ServerThread::spawn(move |listener, stop| async move {
            let app = axum::Router::new().route(
                "/api/v1/observe/config/",
                get(move |headers: HeaderMap| {
                    let keys = Arc::clone(&keys);
                    let config = config.clone();
                    async move {
                        let key = headers
                            .get("x-wax-key")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default();
                        keys.lock().unwrap().push(key.to_owned());
                        match config {
                            Some(body) => (StatusCode::OK, body.to_string()),
                            None => (StatusCode::NOT_FOUND, "{}".to_owned()),
                        }
                    }
                }),
            );
            axum::serve(listener, app)
                .with_graceful_shutdown(stop)
                .await
                .unwrap();
        });
        Self {
            addr: server.addr,
            keys_seen,
            _server: server,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The `X-Wax-Key` of every discovery request.
    pub fn keys_seen(&self) -> Vec<String> {
        self.keys_seen.lock().unwrap().clone()
    }
}
