//! A fake Waxell API on 127.0.0.1: answers `GET /api/v1/observe/config/` (the OTLP endpoint discovery) with a
//! configured body, and records the `X-Wax-Key` each request carried.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;

pub struct FakeWaxellApi {
    pub addr: SocketAddr,
    keys_seen: Arc<Mutex<Vec<String>>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeWaxellApi {
    /// `config`: the discovery answer (`None` answers 404).
    pub fn start(config: Option<serde_json::Value>) -> Self {
        let keys_seen = Arc::new(Mutex::new(Vec::new()));
        let keys = Arc::clone(&keys_seen);
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
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
                    .with_graceful_shutdown(async move {
                        let _ = shutdown_rx.await;
                    })
                    .await
                    .unwrap();
            });
        });
        let addr = addr_rx.recv().expect("fake Waxell API started");
        Self {
            addr,
            keys_seen,
            shutdown: Some(shutdown_tx),
            thread: Some(thread),
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

impl Drop for FakeWaxellApi {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
