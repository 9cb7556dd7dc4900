//! E2B's protocol on the wire: the JSON bodies, header names and ports that both waxell's E2B
//! client ([`crate::e2b`], feature `e2b`) and `waxell-sandbox serve` use, defined once so the two
//! cannot drift apart. Field names follow E2B's OpenAPI spec (control plane), the Code
//! Interpreter's pydantic models and envd's proto3-JSON (int64 as strings, enums by name). Needs
//! no feature: only serde.
//!
//! Readers are lenient as E2B's SDKs are: unknown fields are ignored and absent optional ones
//! default.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Port of the Code Interpreter server inside an E2B sandbox.
pub const CODE_INTERPRETER_PORT: u16 = 49999;
/// Port of envd (files, filesystem RPCs) inside an E2B sandbox.
pub const ENVD_PORT: u16 = 49983;
/// Sandbox id the E2B SDKs use in debug mode (`E2B_DEBUG=true`), where they never call create.
pub const DEBUG_SANDBOX_ID: &str = "debug_sandbox_id";

/// Control-plane key header.
pub const API_KEY_HEADER: &str = "x-api-key";
/// Data-plane routing: the sandbox a request is for.
pub const SANDBOX_ID_HEADER: &str = "e2b-sandbox-id";
/// Data-plane routing: the port inside the sandbox a request is for.
pub const SANDBOX_PORT_HEADER: &str = "e2b-sandbox-port";
/// The sandbox's envd access token, on envd requests and `/execute`.
pub const ACCESS_TOKEN_HEADER: &str = "x-access-token";
/// The sandbox's traffic token, on Code Interpreter requests.
pub const TRAFFIC_TOKEN_HEADER: &str = "e2b-traffic-access-token";

/// `NewSandbox` / `NewSandboxV2`: the body of `POST /sandboxes` and `POST /v2/sandboxes`. Fields
/// E2B defines and these sides do not use (`network`, `secure`, ...) are left out.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct NewSandbox {
    /// Template id or alias (`code-interpreter-v1`).
    #[serde(rename = "templateID", default, skip_serializing_if = "Option::is_none")]
    pub template_id: Option<String>,
    /// Lifetime in seconds; the server's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
    /// String metadata kept with the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
    /// Environment variables of every run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_vars: Option<BTreeMap<String, String>>,
    /// Pause instead of kill when the lifetime ends (E2B's `lifecycle.onTimeout: pause`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_pause: Option<bool>,
    /// Whether that pause keeps memory (E2B's default: true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_pause_memory: Option<bool>,
    /// Resume the paused sandbox when a request reaches it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_resume: Option<AutoResume>,
}

/// `SandboxAutoResumeConfig`: `{"enabled": bool}`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct AutoResume {
    /// Resume on traffic.
    pub enabled: bool,
}

impl NewSandbox {
    /// A create request for this template.
    pub fn new(template_id: impl Into<String>) -> Self {
        Self {
            template_id: Some(template_id.into()),
            ..Self::default()
        }
    }
}

/// E2B's `Sandbox`: the answer to create and connect.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    /// The template it was made from.
    #[serde(rename = "templateID", default)]
    pub template_id: String,
    /// 20 characters of `[a-z0-9]`.
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    /// The template's alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// Deprecated, but E2B's Python SDK fails without it.
    #[serde(rename = "clientID", default)]
    pub client_id: String,
    /// envd version: gates upload formats and `username` in the SDKs.
    #[serde(default)]
    pub envd_version: Option<String>,
    /// Token for envd requests and `/execute` ([`ACCESS_TOKEN_HEADER`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envd_access_token: Option<String>,
    /// Token for Code Interpreter requests ([`TRAFFIC_TOKEN_HEADER`]); `null` when none.
    #[serde(default)]
    pub traffic_access_token: Option<String>,
    /// Domain of the sandbox's URLs; `null`: the client's configured one.
    #[serde(default)]
    pub domain: Option<String>,
}

/// Body of `POST /sandboxes/{id}/timeout`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimeoutRequest {
    /// New lifetime from now, in seconds.
    pub timeout: i64,
}

/// Body of `POST /sandboxes/{id}/pause`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PauseRequest {
    /// Keep memory (processes, variables) as well as files; E2B's default is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<bool>,
}

/// `SandboxSnapshotRequest`: the body of `POST /sandboxes/{id}/snapshots`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SnapshotRequest {
    /// A name to create sandboxes from besides the snapshot's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// E2B's `SnapshotInfo`: the answer to a snapshot, and an entry of `GET /snapshots`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SnapshotInfo {
    /// The id, which a create takes as its template; `DELETE /templates/{id}` deletes it.
    #[serde(rename = "snapshotID")]
    pub snapshot_id: String,
    /// Its names (the one it was taken with), also usable as a template.
    #[serde(default)]
    pub names: Vec<String>,
}

/// `SandboxForkRequest`: the body of `POST /sandboxes/{id}/fork`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ForkRequest {
    /// Lifetime of each fork in seconds (E2B's default: 15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
    /// How many forks, 1 to 100 (default 1); the files are saved once for all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
}

/// `SandboxForkResult`: one fork of a fork's answer (a JSON array of these, one per fork asked
/// for). Exactly one of the two is set.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ForkResult {
    /// The fork, when it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Sandbox>,
    /// Why it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// E2B's `Error`: what a failed request answers, and a failed fork's [`ForkResult::error`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The HTTP status it stands for.
    pub code: i32,
    /// What went wrong.
    #[serde(default)]
    pub message: String,
}

/// One sample of `GET /sandboxes/{id}/metrics` (E2B's `SandboxMetric`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metric {
    /// When it was measured (RFC 3339).
    pub timestamp: String,
    /// The same, in Unix seconds.
    #[serde(default)]
    pub timestamp_unix: i64,
    /// CPUs of the sandbox.
    pub cpu_count: u32,
    /// CPU use in percent of them.
    pub cpu_used_pct: f64,
    /// Memory used, bytes.
    pub mem_used: u64,
    /// Memory cap, bytes.
    pub mem_total: u64,
    /// Page cache, bytes.
    #[serde(default)]
    pub mem_cache: u64,
    /// Disk used, bytes.
    pub disk_used: u64,
    /// Disk cap, bytes.
    pub disk_total: u64,
}

/// Body of `POST /sandboxes/{id}/connect`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConnectRequest {
    /// Extend the lifetime to at least this many seconds from now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
}

/// Body of `POST /execute` (Code Interpreter).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ExecuteRequest {
    /// The code to run.
    pub code: String,
    /// The context to run in (not with `language`).
    #[serde(default)]
    pub context_id: Option<String>,
    /// The language's default context (not with `context_id`).
    #[serde(default)]
    pub language: Option<String>,
    /// Environment variables of this run only.
    #[serde(default)]
    pub env_vars: Option<BTreeMap<String, String>>,
}

impl ExecuteRequest {
    /// Run `code` in the default context.
    pub fn new(code: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            ..Self::default()
        }
    }
}

/// Body of `POST /contexts` (Code Interpreter).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NewContext {
    /// Language of the new context (`python` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// Its working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// `type` values of the `/execute` NDJSON lines.
pub mod line {
    /// `{"type": "stdout", "text", "timestamp"}`.
    pub const STDOUT: &str = "stdout";
    /// `{"type": "stderr", "text", "timestamp"}`.
    pub const STDERR: &str = "stderr";
    /// A result: `text`, MIME fields, `is_main_result`, `extra`.
    pub const RESULT: &str = "result";
    /// `{"type": "error", "name", "value", "traceback"}`.
    pub const ERROR: &str = "error";
    /// `{"type": "number_of_executions", "execution_count"}`.
    pub const NUMBER_OF_EXECUTIONS: &str = "number_of_executions";
    /// Always the last line of a run.
    pub const END_OF_EXECUTION: &str = "end_of_execution";
    /// Sent during silence; readers ignore it.
    pub const KEEPALIVE: &str = "keepalive";
}

/// envd `filesystem.Filesystem` request naming one path (`ListDir`, `Stat`, `MakeDir`, `Remove`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PathRequest {
    /// The path (relative to the user's home, or absolute).
    #[serde(default)]
    pub path: String,
    /// `ListDir` only: levels to list (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
}

impl PathRequest {
    /// A request for `path`.
    pub fn new(path: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            depth: None,
        }
    }
    /// With a `ListDir` depth.
    pub fn with_depth(mut self, depth: u32) -> Self {
        self.depth = Some(depth);
        self
    }
}

/// envd `Move` request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MoveRequest {
    /// Path moved.
    #[serde(default)]
    pub source: String,
    /// Where to.
    #[serde(default)]
    pub destination: String,
}

impl MoveRequest {
    /// Move `source` to `destination`.
    pub fn new(source: impl Into<String>, destination: impl Into<String>) -> Self {
        Self {
            source: source.into(),
            destination: destination.into(),
        }
    }
}

/// `FILE_TYPE_FILE` in envd's `EntryInfo.type`.
pub const FILE_TYPE_FILE: &str = "FILE_TYPE_FILE";
/// `FILE_TYPE_DIRECTORY` in envd's `EntryInfo.type`.
pub const FILE_TYPE_DIRECTORY: &str = "FILE_TYPE_DIRECTORY";
/// `FILE_TYPE_SYMLINK` in envd's `EntryInfo.type`.
pub const FILE_TYPE_SYMLINK: &str = "FILE_TYPE_SYMLINK";

/// The upload headers that carry a file's metadata: `X-Metadata-<key>: <value>` (lower-case, as
/// HTTP/1.1 and the `http` crate spell header names).
pub const METADATA_HEADER_PREFIX: &str = "x-metadata-";

/// envd's `FilesystemEvent` in proto3-JSON (`GetWatcherEvents`, the `WatchDir` stream).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FilesystemEvent {
    /// Path relative to the watched directory.
    #[serde(default)]
    pub name: String,
    /// `EVENT_TYPE_CREATE`, `EVENT_TYPE_WRITE`, ... (see [`FilesystemEvent::kind_name`]).
    #[serde(default, rename = "type")]
    pub kind: String,
    /// The entry, when the watch asked for it and it still exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

impl FilesystemEvent {
    const KINDS: [(crate::sandbox::FsEventKind, &'static str); 5] = [
        (crate::sandbox::FsEventKind::Create, "EVENT_TYPE_CREATE"),
        (crate::sandbox::FsEventKind::Write, "EVENT_TYPE_WRITE"),
        (crate::sandbox::FsEventKind::Remove, "EVENT_TYPE_REMOVE"),
        (crate::sandbox::FsEventKind::Rename, "EVENT_TYPE_RENAME"),
        (crate::sandbox::FsEventKind::Chmod, "EVENT_TYPE_CHMOD"),
    ];

    /// envd's name of an event type.
    pub fn kind_name(kind: crate::sandbox::FsEventKind) -> &'static str {
        Self::KINDS
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or("EVENT_TYPE_UNSPECIFIED", |(_, name)| name)
    }

    /// The event type, if envd named one this client knows.
    pub fn event_kind(&self) -> Option<crate::sandbox::FsEventKind> {
        Self::KINDS
            .iter()
            .find(|(_, name)| *name == self.kind)
            .map(|(k, _)| *k)
    }
}

/// envd's `EntryInfo` in proto3-JSON.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryInfo {
    /// File name.
    #[serde(default)]
    pub name: String,
    /// [`FILE_TYPE_FILE`], [`FILE_TYPE_DIRECTORY`] or `FILE_TYPE_SYMLINK`.
    #[serde(default, rename = "type")]
    pub kind: String,
    /// Absolute path.
    #[serde(default)]
    pub path: String,
    /// Size in bytes: int64, so a string in proto3-JSON (some servers send a number).
    #[serde(default, with = "int64")]
    pub size: u64,
    /// Unix mode bits.
    #[serde(default)]
    pub mode: u32,
    /// `ls -l` style permissions.
    #[serde(default)]
    pub permissions: String,
    /// Owner's user name.
    #[serde(default)]
    pub owner: String,
    /// Group name.
    #[serde(default)]
    pub group: String,
    /// Last modification as a proto3-JSON `Timestamp` (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified_time: Option<String>,
    /// The target, when the entry is a symbolic link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
    /// User metadata (envd keeps it as `user.e2b.*` extended attributes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

impl EntryInfo {
    /// True for a directory.
    pub fn is_dir(&self) -> bool {
        self.kind == FILE_TYPE_DIRECTORY
    }
}

/// proto3-JSON int64: written as a string, read from a string or a number.
mod int64 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(value: &u64, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&value.to_string())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Int64 {
            Text(String),
            Number(u64),
        }
        Ok(match Int64::deserialize(deserializer)? {
            Int64::Text(text) => text.parse().map_err(serde::de::Error::custom)?,
            Int64::Number(n) => n,
        })
    }
}

/// `ListDir` answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ListDirResponse {
    /// Entries, all levels together.
    #[serde(default)]
    pub entries: Vec<EntryInfo>,
}

/// `Stat`, `MakeDir` and `Move` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EntryResponse {
    /// The entry.
    pub entry: EntryInfo,
}

/// One file of a `POST /files` answer (a JSON array of these).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct UploadedEntry {
    /// Absolute path written.
    pub path: String,
    /// File name.
    pub name: String,
    /// Always `file`.
    #[serde(rename = "type", default = "file_type")]
    pub kind: String,
    /// The file's user metadata as stored (envd's `X-Metadata-*` upload headers).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

fn file_type() -> String {
    "file".into()
}

impl UploadedEntry {
    /// A written file.
    pub fn new(path: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            name: name.into(),
            kind: file_type(),
            metadata: BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_info_is_proto3_json() {
        let entry: EntryInfo =
            serde_json::from_str(r#"{"name":"a","type":"FILE_TYPE_FILE","path":"/a","size":"12","x":1}"#)
                .unwrap();
        assert_eq!((entry.size, entry.is_dir()), (12, false));
        let numeric: EntryInfo = serde_json::from_str(r#"{"size":7,"type":"FILE_TYPE_DIRECTORY"}"#).unwrap();
        assert_eq!((numeric.size, numeric.is_dir()), (7, true));
        let written = serde_json::to_value(&entry).unwrap();
        assert_eq!(written["size"], "12");
        assert_eq!(written["modifiedTime"], serde_json::Value::Null);
    }

    #[test]
    fn snapshots_and_forks_use_e2bs_field_names() {
        let info: SnapshotInfo =
            serde_json::from_str(r#"{"snapshotID":"snapshot-a","names":["n"]}"#).unwrap();
        assert_eq!(
            (info.snapshot_id.as_str(), info.names),
            ("snapshot-a", vec!["n".to_owned()])
        );
        let fork = ForkRequest {
            timeout: Some(60),
            count: Some(2),
        };
        assert_eq!(
            serde_json::to_value(&fork).unwrap(),
            serde_json::json!({"timeout": 60, "count": 2})
        );
        assert_eq!(
            serde_json::to_value(SnapshotRequest::default()).unwrap(),
            serde_json::json!({})
        );
        let results: Vec<ForkResult> = serde_json::from_str(
            r#"[{"sandbox":{"sandboxID":"s","templateID":"t"}},{"error":{"code":507,"message":"full"}}]"#,
        )
        .unwrap();
        assert_eq!(results[0].sandbox.as_ref().unwrap().sandbox_id, "s");
        assert_eq!(results[1].error.as_ref().unwrap().code, 507);
    }

    #[test]
    fn sandbox_uses_e2bs_field_names() {
        let sandbox: Sandbox = serde_json::from_str(
            r#"{"templateID":"t","sandboxID":"s","clientID":"c","envdVersion":"0.6.13","envdAccessToken":"e","trafficAccessToken":null,"domain":null}"#,
        )
        .unwrap();
        assert_eq!(sandbox.envd_access_token.as_deref(), Some("e"));
        let written = serde_json::to_value(&sandbox).unwrap();
        for field in [
            "templateID",
            "sandboxID",
            "clientID",
            "envdVersion",
            "trafficAccessToken",
            "domain",
        ] {
            assert!(written.get(field).is_some(), "{field} in {written}");
        }
    }
}
