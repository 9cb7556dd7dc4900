//! The error of `init()`, here below every module that makes one: reading the configuration (`config`,
//! `cloud`), building the exporters and the pipeline (`init`).

/// Why `init()` could not set up telemetry. Every variant names what was wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitError {
    /// An environment variable has a value we cannot use.
    #[error("environment variable {name}={value:?} is invalid: expected {expected}")]
    InvalidVariable {
        /// The variable.
        name: String,
        /// Its value (hidden for secrets).
        value: String,
        /// What would have been valid.
        expected: String,
    },
    /// A builder setting is invalid.
    #[error("invalid setting {setting}: {message}")]
    InvalidSetting {
        /// The setting.
        setting: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The OTLP exporter could not be built.
    #[error("could not build the OTLP {protocol} exporter for {endpoint}: {message}")]
    Exporter {
        /// `http/protobuf`, `http/json` or `grpc`.
        protocol: &'static str,
        /// The endpoint it was for.
        endpoint: String,
        /// Why it could not be built.
        message: String,
    },
    /// The trace file could not be opened.
    #[error("could not open the trace file {path}: {source}")]
    TraceFile {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The configuration asks for something this build of waxell left out.
    #[error("{needed_for} needs waxell's cargo feature `{feature}`: enable it in Cargo.toml (waxell = {{ features = [\"{feature}\"] }})")]
    FeatureMissing {
        /// The cargo feature to enable.
        feature: &'static str,
        /// What the configuration asked for that needs it.
        needed_for: String,
    },
}
