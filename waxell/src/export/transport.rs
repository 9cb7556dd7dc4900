//! What happened to the last export request (connection refused, other network error, or the HTTP status and
//! `Retry-After`), recorded by the transport so the fail-open exporter can decide what to do with a failed
//! batch. Retries happen in `fail_open`, only where they can help and never during shutdown (a refused
//! connection is final: retrying it with back-off is what made a dead collector slow the exit).

use std::sync::Mutex;
use std::time::Duration;

/// What the last request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Nothing listens at the address (or the host is unreachable): final, no retry can help now.
    Refused(String),
    /// Another transport error (reset, timeout, not HTTP).
    Network(String),
    /// An HTTP answer (only the HTTP transport, and tests, see one).
    #[cfg(any(feature = "otlp-http", test))]
    Status {
        code: u16,
        retry_after: Option<Duration>,
    },
}

impl Outcome {
    /// Why the export failed, for the exit message.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Refused(why) | Self::Network(why) => why.clone(),
            #[cfg(any(feature = "otlp-http", test))]
            Self::Status { code, .. } => format!("the collector answered HTTP {code}"),
        }
    }

    /// Whether a retry may help (OTLP/HTTP: 429, 502, 503, 504), with the delay the collector asked for.
    pub(crate) fn retry(&self) -> Option<Option<Duration>> {
        match self {
            #[cfg(any(feature = "otlp-http", test))]
            Self::Status {
                code: 429 | 502 | 503 | 504,
                retry_after,
            } => Some(*retry_after),
            _ => None,
        }
    }
}

/// The last outcome, shared between the client (on the export worker) and the fail-open exporter.
#[derive(Debug, Default)]
pub(crate) struct TransportLog(Mutex<Option<Outcome>>);

impl TransportLog {
    pub(crate) fn take(&self) -> Option<Outcome> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    #[cfg(any(feature = "otlp-http", test))]
    pub(crate) fn set(&self, outcome: Outcome) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(outcome);
    }
}

/// A transport error as a short reason, telling a refused connection from the rest.
#[cfg(feature = "otlp-http")]
pub(crate) fn classify(error: &(dyn std::error::Error + 'static)) -> Outcome {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let mut innermost = error.to_string();
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            match io.kind() {
                ConnectionRefused => {
                    return Outcome::Refused("connection refused (is the collector running?)".into())
                }
                HostUnreachable | NetworkUnreachable | AddrNotAvailable => {
                    return Outcome::Refused(format!("collector unreachable: {io}"))
                }
                TimedOut => return Outcome::Network("no answer before the export timeout".into()),
                _ => {}
            }
        }
        if let Some(r) = e.downcast_ref::<reqwest::Error>() {
            if r.is_timeout() {
                return Outcome::Network("no answer before the export timeout".into());
            }
        }
        innermost = e.to_string();
        source = e.source();
    }
    Outcome::Network(innermost)
}

/// A gRPC export error, classified from its text (tonic reports a refused connection inside its status).
pub(crate) fn classify_message(message: &str) -> Outcome {
    let lower = message.to_ascii_lowercase();
    if lower.contains("connection refused") || lower.contains("tcp connect error") {
        Outcome::Refused("connection refused (is the collector running?)".into())
    } else {
        Outcome::Network(message.to_owned())
    }
}
