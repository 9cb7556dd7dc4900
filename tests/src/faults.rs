//! A misbehaving OTLP/HTTP collector on 127.0.0.1 for fail-open tests: it counts the requests that reach it
//! and answers each one according to a [`Fault`] that can be changed while it runs.
//!
//! Plain threads and a minimal HTTP/1.1 reader, so a fault can be anything, including not HTTP at all.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the collector answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `200 OK` with an empty body (a valid empty `ExportTraceServiceResponse`).
    Healthy,
    /// Reset the connection once a request arrives (TCP RST: closed with unread data).
    Reset,
    /// Wait this long before answering `200 OK`.
    Slow(Duration),
    /// Answer this status (e.g. 500, or 429 with `Retry-After: 1`).
    Status(u16),
    /// Answer bytes that are not HTTP, then close.
    Garbage,
}

/// A URL on 127.0.0.1 where nothing listens (the port was bound, then released).
pub fn nothing_listening_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    format!("http://{addr}/v1/traces")
}

struct Shared {
    fault: Mutex<Fault>,
    requests: AtomicUsize,
    /// Path and raw body of the requests answered `200 OK`, as they came off the wire.
    bodies: Mutex<Vec<(String, Vec<u8>)>>,
    stop: AtomicBool,
}

/// The misbehaving collector. Dropping it stops accepting connections.
pub struct FaultServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FaultServer {
    pub fn start(fault: Fault) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let shared = Arc::new(Shared {
            fault: Mutex::new(fault),
            requests: AtomicUsize::new(0),
            bodies: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let accept_shared = Arc::clone(&shared);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if accept_shared.stop.load(Ordering::Acquire) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let conn_shared = Arc::clone(&accept_shared);
                std::thread::spawn(move || serve(stream, &conn_shared));
            }
        });
        Self { addr, shared }
    }

    /// Full OTLP/HTTP traces URL.
    pub fn traces_url(&self) -> String {
        format!("http://{}/v1/traces", self.addr)
    }

    /// Requests that reached the collector (for `Reset`, connections that sent data).
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::Acquire)
    }

    /// Path and raw body of the requests answered `200 OK` (`Healthy`, `Slow`), byte for byte as received
    /// (traces on `/v1/traces`, metrics on `/v1/metrics`).
    pub fn bodies(&self) -> Vec<(String, Vec<u8>)> {
        self.shared.bodies.lock().unwrap().clone()
    }

    /// Change how the collector answers from now on.
    pub fn set_fault(&self, fault: Fault) {
        *self.shared.fault.lock().unwrap() = fault;
    }
}

impl Drop for FaultServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

/// Answer requests on one connection until the client closes it or the fault ends it.
fn serve(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    loop {
        // Wait for the next request, then read the fault: a kept-alive connection must not answer with a stale one.
        let mut byte = [0u8; 1];
        if !matches!(stream.peek(&mut byte), Ok(n) if n > 0) {
            return;
        }
        let fault = *shared.fault.lock().unwrap();
        if fault == Fault::Reset {
            // Close without reading the request: the kernel answers with RST.
            shared.requests.fetch_add(1, Ordering::AcqRel);
            return;
        }
        let Some(request) = read_request(&mut stream) else {
            return;
        };
        shared.requests.fetch_add(1, Ordering::AcqRel);
        let response: Vec<u8> = match fault {
            Fault::Healthy | Fault::Reset => {
                shared.bodies.lock().unwrap().push(request);
                ok()
            }
            Fault::Slow(delay) => {
                std::thread::sleep(delay);
                shared.bodies.lock().unwrap().push(request);
                ok()
            }
            Fault::Status(429) => {
                b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\ncontent-length: 0\r\n\r\n".to_vec()
            }
            Fault::Status(code) => {
                format!("HTTP/1.1 {code} Fault\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\nfault")
                    .into_bytes()
            }
            Fault::Garbage => {
                let _ = stream.write_all(b"\x00\x01\x02 this is not HTTP \xff\xfe\r\n\r\n");
                return;
            }
        };
        if stream.write_all(&response).is_err() {
            return;
        }
    }
}

fn ok() -> Vec<u8> {
    b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n".to_vec()
}

/// Read one HTTP/1.1 request (headers and a `content-length` body) and return its path and body; `None` when
/// the connection ends.
fn read_request(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
        if head.len() > 64 * 1024 {
            return None;
        }
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let path = head.split_whitespace().nth(1).unwrap_or_default().to_owned();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).ok()?;
    Some((path, body))
}
