//! The connection layer: HTTP/1.1 over TCP with every resource a client controls bounded. A
//! connection cap (one more is told 503 and closed), a deadline for request headers (idle
//! keep-alive connections included), a header size cap, and a write timeout that drops a client
//! that stopped reading. Request bodies are bounded in size and time by the handlers (body.rs).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Sleep;
use tower::ServiceExt;

use super::config::ServerConfig;

/// Request line plus headers at most (hyper answers 431 past it).
const MAX_HEADER_BYTES: usize = 64 * 1024;
/// After shutdown is asked for, open requests get this long to finish before their connections
/// are dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What a connection over the cap is told before it is closed (the SDKs retry a 503).
fn busy_response() -> Vec<u8> {
    let body = r#"{"code":503,"message":"too many open connections; retry shortly"}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Serve `router` on `listener` with `config`'s connection limits until `shutdown` resolves; then
/// let open requests finish for a few seconds and drop what is left.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    config: &ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let permits = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let (closing_tx, closing_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        while connections.try_join_next().is_some() {}
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(%peer, limit = config.max_connections, "connection refused: too many open");
            // A fresh socket's send buffer is empty, so this never blocks; failure just closes.
            let _ = stream.try_write(&busy_response());
            continue;
        };
        let _ = stream.set_nodelay(true);
        let break_off = BreakOff::default();
        let io = TokioIo::new(WriteTimeout::new(stream, config.write_timeout, break_off.clone()));
        let service =
            TowerToHyperService::new(router.clone().map_request(move |request: Request<Incoming>| {
                let mut request = request.map(Body::new);
                request.extensions_mut().insert(break_off.clone());
                request
            }));
        let header_timeout = config.header_timeout;
        let mut closing = closing_rx.clone();
        connections.spawn(async move {
            let _permit = permit;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .max_buf_size(MAX_HEADER_BYTES);
            let connection = builder.serve_connection(io, service);
            let mut connection = std::pin::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                _ = closing.changed() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::info!(
            open = connections.len(),
            "dropping connections still open after the shutdown grace period"
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// Set by a handler (from the request's extensions) that breaks its response off because the
/// peer it stands for died (a killed sandbox under a process stream): the connection then ends
/// with a reset, as a dead host's does, not a clean close. Clients tell the two apart (E2B's
/// Python SDK reads a reset as the sandbox being gone and checks its health).
#[derive(Clone, Default)]
pub(crate) struct BreakOff(Arc<AtomicBool>);

impl BreakOff {
    pub(crate) fn arm(&self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A TCP stream whose writes fail once they have been blocked for `timeout`: a client that stops
/// reading (its receive window full) is dropped instead of holding the response, and its buffers,
/// forever.
struct WriteTimeout {
    stream: TcpStream,
    timeout: Duration,
    blocked_since: Option<Pin<Box<Sleep>>>,
    break_off: BreakOff,
}

impl WriteTimeout {
    fn new(stream: TcpStream, timeout: Duration, break_off: BreakOff) -> Self {
        Self {
            stream,
            timeout,
            blocked_since: None,
            break_off,
        }
    }

    /// Account for the result of a write-side poll: progress resets the clock, blocking starts it
    /// (and arms a wake-up for when it runs out).
    fn watch<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.blocked_since = None;
            return poll;
        }
        let timeout = self.timeout;
        let deadline = self
            .blocked_since
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client read nothing for {timeout:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for WriteTimeout {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteTimeout {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.watch(cx, poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_flush(cx);
        this.watch(cx, poll)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_shutdown(cx);
        this.watch(cx, poll)
    }
}

impl Drop for WriteTimeout {
    fn drop(&mut self) {
        if self.break_off.0.load(Ordering::Acquire) {
            // Closing with SO_LINGER 0 sends a reset and never blocks.
            let _ = self.stream.set_zero_linger();
        }
    }
}
