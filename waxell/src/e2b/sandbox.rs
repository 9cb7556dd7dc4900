//! [`E2bBackend`] and [`E2bSandbox`]: E2B's control plane, Code Interpreter and envd behind the
//! backend-neutral sandbox traits.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use reqwest::header::CONTENT_TYPE;
use reqwest::{Client, Method, RequestBuilder, Url};
use serde::Serialize;

use super::config::{E2bConfig, Secret};
use super::http::{self, Endpoint};
use super::stream::ExecutionAssembler;
use super::wire::{
    self, ConnectRequest, EntryResponse, ExecuteRequest, ForkRequest, ForkResult, ListDirResponse,
    MoveRequest, NewContext, NewSandbox, PathRequest, SnapshotInfo, SnapshotRequest, TimeoutRequest,
    UploadedEntry, CODE_INTERPRETER_PORT, DEBUG_SANDBOX_ID, ENVD_PORT, METADATA_HEADER_PREFIX,
};
use crate::sandbox::{
    CodeContext, DirWatch, EntryInfo, Execution, FsEvent, ProcessSpec, RunOptions, SandboxBackend,
    SandboxError, SandboxMetrics, SandboxOptions, SandboxProcess, SandboxSession, SandboxSnapshot,
    WatchOptions,
};

/// Default template of E2B Code Interpreter.
pub const DEFAULT_TEMPLATE: &str = "code-interpreter-v1";
/// envd version assumed in debug mode: passes every version gate.
const DEBUG_ENVD_VERSION: &str = "99.99.99";
const USER_AGENT: &str = concat!("waxell-rs/", env!("CARGO_PKG_VERSION"));

/// Creates (and connects to) E2B sandboxes. Wrap sessions in [`crate::sandbox::Sandbox`] for spans:
///
/// ```no_run
/// # async fn demo() -> Result<(), waxell::sandbox::SandboxError> {
/// use waxell::e2b::{E2bBackend, E2bConfig};
/// use waxell::sandbox::{RunOptions, Sandbox, SandboxOptions};
///
/// let backend = E2bBackend::new(E2bConfig::from_env())?;
/// let sandbox = Sandbox::create(&backend, &SandboxOptions::default()).await?;
/// let execution = sandbox.run_code("1 + 1", &RunOptions::default()).await?;
/// assert_eq!(execution.text(), Some("2"));
/// sandbox.kill().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct E2bBackend {
    inner: Arc<Shared>,
}

/// What the backend and all its sandboxes share.
struct Shared {
    config: E2bConfig,
    /// Pooled client for everything but `/execute`.
    client: Client,
    /// Client for `/execute`: HTTP/1.1 and no idle pool, so every execution gets a fresh connection that
    /// closes with it. Built once: building a client loads the TLS root store (~5 ms).
    execute_client: Client,
}

impl std::fmt::Debug for E2bBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2bBackend")
            .field("config", &self.inner.config)
            .finish()
    }
}

impl E2bBackend {
    /// A backend with this configuration. E2B's cloud needs an API key, so without one this fails unless
    /// the control plane is a server of your own (`api_url` set, e.g. a `waxell-sandbox serve` on loopback,
    /// which needs none; one that does answers 401, an `Authentication` error) or debug mode is on.
    pub fn new(config: E2bConfig) -> Result<Self, SandboxError> {
        if config.api_key.is_none() && config.api_url.is_none() && !config.debug {
            return Err(SandboxError::Authentication(
                "no E2B API key: set E2B_API_KEY or E2bConfig::with_api_key".into(),
            ));
        }
        let client = crate::http::async_client()
            .user_agent(USER_AGENT)
            .connect_timeout(config.request_timeout)
            .timeout(config.request_timeout)
            .build()
            .map_err(|e| SandboxError::Other(format!("building the HTTP client: {e}")))?;
        // One fresh HTTP/1.1 connection per execution, never pooled: dropping it on timeout is
        // what tells the server to interrupt the code (HTTP/2 would hide the disconnect).
        let execute_client = crate::http::async_client()
            .user_agent(USER_AGENT)
            .http1_only()
            .pool_max_idle_per_host(0)
            .connect_timeout(config.request_timeout)
            .build()
            .map_err(|e| SandboxError::Other(format!("building the HTTP client: {e}")))?;
        Ok(Self {
            inner: Arc::new(Shared {
                config,
                client,
                execute_client,
            }),
        })
    }

    /// A backend configured from `E2B_*` environment variables.
    pub fn from_env() -> Result<Self, SandboxError> {
        Self::new(E2bConfig::from_env())
    }

    /// The configuration.
    pub fn config(&self) -> &E2bConfig {
        &self.inner.config
    }

    /// Create a sandbox (`POST /v2/sandboxes`), returning the concrete session type.
    pub async fn create_sandbox(&self, options: &SandboxOptions) -> Result<E2bSandbox, SandboxError> {
        let config = &self.inner.config;
        if config.debug {
            return Ok(self.session(wire::Sandbox {
                sandbox_id: DEBUG_SANDBOX_ID.into(),
                envd_version: Some(DEBUG_ENVD_VERSION.into()),
                ..wire::Sandbox::default()
            }));
        }
        let mut body = NewSandbox::new(options.template.as_deref().unwrap_or(DEFAULT_TEMPLATE));
        body.metadata = Some(options.metadata.clone());
        body.env_vars = Some(options.env_vars.clone());
        body.timeout = options.timeout.map(timeout_seconds);
        let what = "create sandbox";
        let response = http::send(config, Endpoint::Control, what, || {
            self.control(Method::POST, "/v2/sandboxes").json(&body)
        })
        .await?;
        Ok(self.session(http::json(what, response).await?))
    }

    /// Connect to a running sandbox by id (`POST /sandboxes/{id}/connect`), extending its lifetime
    /// to at least `timeout` when given.
    pub async fn connect(
        &self,
        sandbox_id: &str,
        timeout: Option<Duration>,
    ) -> Result<E2bSandbox, SandboxError> {
        let config = &self.inner.config;
        if config.debug {
            return self.create_sandbox(&SandboxOptions::default()).await;
        }
        let body = ConnectRequest {
            timeout: timeout.map(timeout_seconds),
        };
        let what = format!("connect to sandbox {sandbox_id}");
        let path = format!("/sandboxes/{sandbox_id}/connect");
        let response = http::send(config, Endpoint::Control, &what, || {
            self.control(Method::POST, &path).json(&body)
        })
        .await?;
        Ok(self.session(http::json(&what, response).await?))
    }

    /// Delete a snapshot (`DELETE /templates/{id}`: E2B deletes a snapshot as the template it
    /// is): `true` when it was deleted, `false` when there was none (404).
    pub async fn delete_snapshot(&self, snapshot_id: &str) -> Result<bool, SandboxError> {
        let what = format!("delete snapshot {snapshot_id}");
        // E2B's snapshot ids may hold `/` (`team/name:tag`): one path segment all the same.
        let path = format!("/templates/{}", path_segment(snapshot_id));
        match http::send(&self.inner.config, Endpoint::Control, &what, || {
            self.control(Method::DELETE, &path)
        })
        .await
        {
            Ok(_) => Ok(true),
            Err(SandboxError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn session(&self, info: wire::Sandbox) -> E2bSandbox {
        E2bSandbox::new(self.inner.clone(), info)
    }

    fn control(&self, method: Method, path: &str) -> RequestBuilder {
        self.inner.control(method, path)
    }
}

impl Shared {
    fn control(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self
            .client
            .request(method, format!("{}{path}", self.config.api_base()));
        match &self.config.api_key {
            Some(key) => request.header(wire::API_KEY_HEADER, key.expose()),
            None => request,
        }
    }
}

/// `text` percent-encoded as one URL path segment (all but RFC 3986's unreserved characters).
fn path_segment(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// Whole seconds, at least 1 (E2B's API takes int32 seconds; 0 would not mean "no limit").
fn timeout_seconds(timeout: Duration) -> i64 {
    timeout.as_secs_f64().ceil().clamp(1.0, i32::MAX as f64) as i64
}

#[async_trait]
impl SandboxBackend for E2bBackend {
    fn name(&self) -> &'static str {
        "e2b"
    }

    async fn create(&self, options: &SandboxOptions) -> Result<Box<dyn SandboxSession>, SandboxError> {
        Ok(Box::new(self.create_sandbox(options).await?))
    }
}

/// One E2B sandbox. Tokens are kept out of `Debug` output. Cheap to clone (a clone is a handle
/// to the same sandbox).
#[derive(Clone)]
pub struct E2bSandbox {
    shared: Arc<Shared>,
    id: String,
    envd_version: String,
    envd_token: Option<Secret>,
    traffic_token: Option<Secret>,
    domain: Option<String>,
}

impl std::fmt::Debug for E2bSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2bSandbox")
            .field("id", &self.id)
            .field("envd_version", &self.envd_version)
            .field("domain", &self.domain)
            .finish_non_exhaustive()
    }
}

/// `(major, minor, patch)` of a version string; unparsable parts count as 0.
fn version(v: &str) -> (u64, u64, u64) {
    let mut parts = v
        .trim_start_matches('v')
        .split('.')
        .map(|p| p.parse().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

impl From<wire::EntryInfo> for EntryInfo {
    fn from(entry: wire::EntryInfo) -> Self {
        EntryInfo {
            is_dir: entry.is_dir(),
            name: entry.name,
            path: entry.path,
            size: entry.size,
            mode: Some(entry.mode).filter(|mode| *mode != 0),
            modified: entry
                .modified_time
                .as_deref()
                .and_then(|time| humantime::parse_rfc3339_weak(time).ok()),
            symlink_target: entry.symlink_target,
            metadata: entry.metadata,
        }
    }
}

impl E2bSandbox {
    fn new(shared: Arc<Shared>, info: wire::Sandbox) -> Self {
        Self {
            shared,
            id: info.sandbox_id,
            envd_version: info.envd_version.unwrap_or_default(),
            envd_token: info.envd_access_token.map(Secret::new),
            traffic_token: info.traffic_access_token.map(Secret::new),
            domain: info.domain,
        }
    }

    /// [`SandboxSession::fork`] with the forks as this concrete type (`POST
    /// /sandboxes/{id}/fork`).
    pub async fn fork_sandboxes(
        &self,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<Result<E2bSandbox, SandboxError>>, SandboxError> {
        let what = format!("fork sandbox {}", self.id);
        let path = format!("/sandboxes/{}/fork", self.id);
        let body = ForkRequest {
            timeout: Some(timeout_seconds(timeout)),
            count: Some(i64::try_from(count).unwrap_or(i64::MAX)),
        };
        let response = http::send(self.config(), Endpoint::Control, &what, || {
            self.shared.control(Method::POST, &path).json(&body)
        })
        .await?;
        let results: Vec<ForkResult> = http::json(&what, response).await?;
        Ok(results
            .into_iter()
            .enumerate()
            .map(|(index, result)| match result {
                ForkResult {
                    sandbox: Some(info), ..
                } => Ok(E2bSandbox::new(self.shared.clone(), info)),
                ForkResult {
                    error: Some(error), ..
                } => {
                    // The same mapping as a whole request's answer with that status.
                    let status = u16::try_from(error.code)
                        .ok()
                        .and_then(|code| reqwest::StatusCode::from_u16(code).ok())
                        .unwrap_or(reqwest::StatusCode::INTERNAL_SERVER_ERROR);
                    let body = serde_json::to_string(&error).unwrap_or_default();
                    Err(http::status_error(
                        Endpoint::Control,
                        &format!("{what} (fork {index})"),
                        status,
                        &body,
                    ))
                }
                ForkResult { .. } => Err(SandboxError::Protocol {
                    message: format!("{what} (fork {index}): neither a sandbox nor an error"),
                    received: "{}".into(),
                }),
            })
            .collect())
    }

    /// envd version of the sandbox (gates upload format and `username`).
    pub fn envd_version(&self) -> &str {
        &self.envd_version
    }

    pub(super) fn config(&self) -> &E2bConfig {
        &self.shared.config
    }

    pub(super) fn shared_clients(&self) -> (&Client, &Client) {
        (&self.shared.client, &self.shared.execute_client)
    }

    /// An envd URL of this sandbox.
    pub(super) fn envd_url(&self, path: &str) -> Result<Url, SandboxError> {
        self.url(ENVD_PORT, path, &[])
    }

    /// An envd request with the routing headers and the access token.
    pub(super) fn envd(&self, client: &Client, method: Method, url: Url) -> RequestBuilder {
        self.data(client, method, ENVD_PORT, url, true)
    }

    /// A data-plane request to `port` with E2B's routing headers and the tokens that port takes.
    fn data(
        &self,
        client: &Client,
        method: Method,
        port: u16,
        url: Url,
        access_token: bool,
    ) -> RequestBuilder {
        let mut request = client
            .request(method, url)
            .header(wire::SANDBOX_ID_HEADER, &self.id)
            .header(wire::SANDBOX_PORT_HEADER, port.to_string());
        if access_token {
            if let Some(token) = &self.envd_token {
                request = request.header(wire::ACCESS_TOKEN_HEADER, token.expose());
            }
        }
        if port != ENVD_PORT {
            if let Some(token) = &self.traffic_token {
                request = request.header(wire::TRAFFIC_TOKEN_HEADER, token.expose());
            }
        }
        request
    }

    fn url(&self, port: u16, path: &str, query: &[(&str, &str)]) -> Result<Url, SandboxError> {
        let base = self.config().sandbox_base(&self.id, self.domain.as_deref(), port);
        let mut url = Url::parse(&format!("{base}{path}"))
            .map_err(|e| SandboxError::InvalidArgument(format!("sandbox URL {base}{path}: {e}")))?;
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        Ok(url)
    }

    /// A unary Connect RPC of envd's `filesystem.Filesystem` service, JSON codec.
    async fn filesystem_rpc(
        &self,
        method: &str,
        body: &impl Serialize,
        path: &str,
    ) -> Result<reqwest::Response, SandboxError> {
        let url = self.url(ENVD_PORT, &format!("/filesystem.Filesystem/{method}"), &[])?;
        http::send(self.config(), Endpoint::Files, path, || {
            self.data(&self.shared.client, Method::POST, ENVD_PORT, url.clone(), true)
                .header("Connect-Protocol-Version", "1")
                .json(body)
        })
        .await
    }

    /// `username` for envd file calls: older envd needs `user`; newer picks the sandbox's user.
    fn file_query<'a>(&self, path: &'a str) -> Vec<(&'static str, &'a str)> {
        let mut query = vec![("path", path)];
        if version(&self.envd_version) < (0, 4, 0) {
            query.push(("username", "user"));
        }
        query
    }

    /// A Code Interpreter call on `/<segments...>` (each segment percent-encoded, so an id cannot
    /// change the route).
    async fn code_json(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<&NewContext>,
        what: &str,
    ) -> Result<reqwest::Response, SandboxError> {
        let mut url = self.url(CODE_INTERPRETER_PORT, "", &[])?;
        let cannot_have_path = SandboxError::InvalidArgument(format!("sandbox URL {url} cannot have a path"));
        url.path_segments_mut()
            .map_err(|()| cannot_have_path)?
            .pop_if_empty()
            .extend(segments);
        http::send(self.config(), Endpoint::Code, what, || {
            let request = self.data(
                &self.shared.client,
                method.clone(),
                CODE_INTERPRETER_PORT,
                url.clone(),
                false,
            );
            match &body {
                Some(body) => request.json(body),
                None => request,
            }
        })
        .await
    }

    async fn run(&self, code: &str, options: &RunOptions) -> Result<Execution, SandboxError> {
        let client = &self.shared.execute_client;
        let url = self.url(CODE_INTERPRETER_PORT, "/execute", &[])?;
        let mut body = ExecuteRequest::new(code);
        body.context_id = options.context_id.clone();
        body.language = options.language.clone();
        body.env_vars = Some(options.env_vars.clone());
        let what = "execute";
        let request_timeout = self.config().request_timeout;
        let response = tokio::time::timeout(
            request_timeout,
            http::send(self.config(), Endpoint::Code, what, || {
                self.data(client, Method::POST, CODE_INTERPRETER_PORT, url.clone(), true)
                    .json(&body)
            }),
        )
        .await
        .map_err(|_| {
            SandboxError::Timeout(format!(
                "execute: no response headers within the {request_timeout:?} request timeout"
            ))
        })??;
        let mut assembler = ExecutionAssembler::new(options);
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| {
                SandboxError::Transport(format!(
                    "the /execute stream broke: {}",
                    http::transport_error(what, &e)
                ))
            })?;
            assembler.feed(&chunk)?;
        }
        assembler.finish()
    }
}

#[async_trait]
impl SandboxSession for E2bSandbox {
    fn sandbox_id(&self) -> &str {
        &self.id
    }

    async fn run_code(&self, code: &str, options: &RunOptions) -> Result<Execution, SandboxError> {
        if options.language.is_some() && options.context_id.is_some() {
            return Err(SandboxError::InvalidArgument(
                "Only one of context_id or language can be provided".into(),
            ));
        }
        let timeout = options.timeout.unwrap_or(self.config().execution_timeout);
        // One wall-clock deadline for the whole call (headers and body alike). On expiry the future
        // and with it the connection are dropped; the server interrupts the code, state kept.
        match tokio::time::timeout(timeout, self.run(code, options)).await {
            Ok(result) => result,
            Err(_) => Err(SandboxError::Timeout(format!(
                "execution exceeded {timeout:?}; the connection was closed so the sandbox interrupts the \
                 code (its state is kept)"
            ))),
        }
    }

    async fn create_context(
        &self,
        language: Option<&str>,
        cwd: Option<&str>,
    ) -> Result<CodeContext, SandboxError> {
        let body = NewContext {
            language: language.map(str::to_owned),
            cwd: cwd.map(str::to_owned),
        };
        let what = "create context";
        let response = self
            .code_json(Method::POST, &["contexts"], Some(&body), what)
            .await?;
        http::json(what, response).await
    }

    async fn list_contexts(&self) -> Result<Vec<CodeContext>, SandboxError> {
        let what = "list contexts";
        let response = self.code_json(Method::GET, &["contexts"], None, what).await?;
        http::json(what, response).await
    }

    async fn restart_context(&self, context_id: &str) -> Result<(), SandboxError> {
        let what = format!("restart context {context_id}");
        self.code_json(Method::POST, &["contexts", context_id, "restart"], None, &what)
            .await?;
        Ok(())
    }

    async fn remove_context(&self, context_id: &str) -> Result<(), SandboxError> {
        let what = format!("remove context {context_id}");
        self.code_json(Method::DELETE, &["contexts", context_id], None, &what)
            .await?;
        Ok(())
    }

    async fn write_file(&self, path: &str, data: &[u8]) -> Result<EntryInfo, SandboxError> {
        self.write_file_with_metadata(path, data, &BTreeMap::new()).await
    }

    async fn write_file_with_metadata(
        &self,
        path: &str,
        data: &[u8],
        metadata: &BTreeMap<String, String>,
    ) -> Result<EntryInfo, SandboxError> {
        let url = self.url(ENVD_PORT, "/files", &self.file_query(path))?;
        // envd >= 0.5.7 takes a raw body; older ones only multipart.
        let raw = version(&self.envd_version) >= (0, 5, 7);
        let (content_type, body) = if raw {
            ("application/octet-stream".to_owned(), data.to_vec())
        } else {
            multipart_file(path, data)
        };
        let response = http::send(self.config(), Endpoint::Files, path, || {
            let mut request = self
                .data(&self.shared.client, Method::POST, ENVD_PORT, url.clone(), true)
                .header(CONTENT_TYPE, content_type.clone());
            for (key, value) in metadata {
                request = request.header(format!("{METADATA_HEADER_PREFIX}{key}"), value);
            }
            request.body(body.clone())
        })
        .await?;
        let written: Vec<UploadedEntry> = http::json(&format!("write {path}"), response).await?;
        let entry = written.into_iter().next().ok_or_else(|| SandboxError::Protocol {
            message: format!("write {path}: the upload response lists no file"),
            received: "[]".into(),
        })?;
        Ok(EntryInfo {
            name: entry.name,
            path: entry.path,
            is_dir: false,
            size: data.len() as u64,
            metadata: entry.metadata,
            ..EntryInfo::default()
        })
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
        let url = self.url(ENVD_PORT, "/files", &self.file_query(path))?;
        let response = http::send(self.config(), Endpoint::Files, path, || {
            self.data(&self.shared.client, Method::GET, ENVD_PORT, url.clone(), true)
        })
        .await?;
        let bytes = response
            .bytes()
            .await
            .map_err(|e| http::transport_error(&format!("read {path}"), &e))?;
        Ok(bytes.to_vec())
    }

    async fn list_files(&self, path: &str) -> Result<Vec<EntryInfo>, SandboxError> {
        let response = self
            .filesystem_rpc("ListDir", &PathRequest::new(path).with_depth(1), path)
            .await?;
        let listing: ListDirResponse = http::json(&format!("list {path}"), response).await?;
        Ok(listing.entries.into_iter().map(EntryInfo::from).collect())
    }

    async fn make_dir(&self, path: &str) -> Result<bool, SandboxError> {
        match self
            .filesystem_rpc("MakeDir", &PathRequest::new(path), path)
            .await
        {
            Ok(_) => Ok(true),
            // envd answers Connect `already_exists` (409) for a directory that is there already.
            Err(SandboxError::InvalidArgument(message)) if message.contains(": 409 Conflict: ") => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn rename(&self, from: &str, to: &str) -> Result<EntryInfo, SandboxError> {
        let response = self
            .filesystem_rpc("Move", &MoveRequest::new(from, to), from)
            .await?;
        let moved: EntryResponse = http::json(&format!("rename {from} to {to}"), response).await?;
        Ok(moved.entry.into())
    }

    async fn remove(&self, path: &str) -> Result<(), SandboxError> {
        self.filesystem_rpc("Remove", &PathRequest::new(path), path)
            .await?;
        Ok(())
    }

    /// envd's polled watcher (`CreateWatcher`; `GetWatcherEvents` per take; `RemoveWatcher` when
    /// dropped), which every envd version with watches serves over unary calls.
    async fn watch_dir(&self, path: &str, options: WatchOptions) -> Result<Box<dyn DirWatch>, SandboxError> {
        let request = serde_json::json!({
            "path": path,
            "recursive": options.recursive,
            "includeEntry": options.include_entry,
        });
        let response = self.filesystem_rpc("CreateWatcher", &request, path).await?;
        let created: serde_json::Value = http::json(&format!("watch {path}"), response).await?;
        let watcher_id = created["watcherId"]
            .as_str()
            .ok_or_else(|| SandboxError::Protocol {
                message: format!("watch {path}: CreateWatcher answered no watcherId"),
                received: created.to_string(),
            })?
            .to_owned();
        Ok(Box::new(E2bWatch {
            sandbox: self.clone(),
            path: path.to_owned(),
            watcher_id,
        }))
    }

    async fn start_process(&self, spec: &ProcessSpec) -> Result<SandboxProcess, SandboxError> {
        self.start_process_rpc(spec).await
    }

    async fn set_timeout(&self, timeout: Duration) -> Result<(), SandboxError> {
        if self.config().debug {
            return Ok(());
        }
        let what = format!("set timeout of sandbox {}", self.id);
        let path = format!("/sandboxes/{}/timeout", self.id);
        let body = TimeoutRequest {
            timeout: timeout_seconds(timeout),
        };
        http::send(self.config(), Endpoint::Control, &what, || {
            self.shared.control(Method::POST, &path).json(&body)
        })
        .await?;
        Ok(())
    }

    /// `POST /sandboxes/{id}/pause` with E2B's default (keep memory where the server can).
    async fn pause(&self) -> Result<(), SandboxError> {
        if self.config().debug {
            return Ok(());
        }
        let what = format!("pause sandbox {}", self.id);
        let path = format!("/sandboxes/{}/pause", self.id);
        http::send(self.config(), Endpoint::Control, &what, || {
            self.shared
                .control(Method::POST, &path)
                .json(&wire::PauseRequest::default())
        })
        .await?;
        Ok(())
    }

    /// `POST /sandboxes/{id}/connect`, which resumes a paused sandbox (its tokens stay the same).
    async fn resume(&self, timeout: Duration) -> Result<(), SandboxError> {
        if self.config().debug {
            return Ok(());
        }
        let what = format!("resume sandbox {}", self.id);
        let path = format!("/sandboxes/{}/connect", self.id);
        let body = ConnectRequest {
            timeout: Some(timeout_seconds(timeout)),
        };
        http::send(self.config(), Endpoint::Control, &what, || {
            self.shared.control(Method::POST, &path).json(&body)
        })
        .await?;
        Ok(())
    }

    /// `POST /sandboxes/{id}/snapshots`.
    async fn snapshot(&self, name: Option<&str>) -> Result<SandboxSnapshot, SandboxError> {
        let what = format!("snapshot sandbox {}", self.id);
        let path = format!("/sandboxes/{}/snapshots", self.id);
        let body = SnapshotRequest {
            name: name.map(str::to_owned),
        };
        let response = http::send(self.config(), Endpoint::Control, &what, || {
            self.shared.control(Method::POST, &path).json(&body)
        })
        .await?;
        let info: SnapshotInfo = http::json(&what, response).await?;
        Ok(SandboxSnapshot::new(info.snapshot_id, info.names))
    }

    /// `POST /sandboxes/{id}/fork` ([`E2bSandbox::fork_sandboxes`]).
    async fn fork(
        &self,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<Result<Box<dyn SandboxSession>, SandboxError>>, SandboxError> {
        let forks = self.fork_sandboxes(count, timeout).await?;
        Ok(forks
            .into_iter()
            .map(|fork| fork.map(|sandbox| Box::new(sandbox) as Box<dyn SandboxSession>))
            .collect())
    }

    /// The newest sample of `GET /sandboxes/{id}/metrics`.
    async fn metrics(&self) -> Result<SandboxMetrics, SandboxError> {
        let what = format!("metrics of sandbox {}", self.id);
        let path = format!("/sandboxes/{}/metrics", self.id);
        let response = http::send(self.config(), Endpoint::Control, &what, || {
            self.shared.control(Method::GET, &path)
        })
        .await?;
        let samples: Vec<wire::Metric> = http::json(&what, response).await?;
        let newest = samples
            .into_iter()
            .max_by_key(|m| m.timestamp_unix)
            .ok_or_else(|| SandboxError::Other(format!("{what}: no sample (is the sandbox paused?)")))?;
        let mut metrics = SandboxMetrics::new(
            newest.cpu_count,
            newest.cpu_used_pct,
            newest.mem_used,
            newest.mem_total,
            newest.disk_used,
            newest.disk_total,
        );
        if newest.timestamp_unix > 0 {
            metrics.timestamp = std::time::UNIX_EPOCH + Duration::from_secs(newest.timestamp_unix as u64);
        }
        Ok(metrics)
    }

    async fn kill(&self) -> Result<(), SandboxError> {
        if self.config().debug {
            return Ok(());
        }
        let what = format!("kill sandbox {}", self.id);
        let path = format!("/sandboxes/{}", self.id);
        http::send(self.config(), Endpoint::Control, &what, || {
            self.shared.control(Method::DELETE, &path)
        })
        .await?;
        Ok(())
    }
}

/// A multipart body with one part named `file` (what envd < 0.5.7 accepts).
fn multipart_file(path: &str, data: &[u8]) -> (String, Vec<u8>) {
    // Any boundary works as long as the data does not contain it.
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let boundary = loop {
        let candidate = format!("waxell-boundary-{seed:016x}");
        if !data.windows(candidate.len()).any(|w| w == candidate.as_bytes()) {
            break candidate;
        }
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    };
    let filename = path.replace(['"', '\r', '\n'], "_");
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(data);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// A watcher of envd's, polled.
struct E2bWatch {
    sandbox: E2bSandbox,
    path: String,
    watcher_id: String,
}

/// How often [`DirWatch::next_events`] polls an E2B watcher.
const WATCH_POLL: Duration = Duration::from_millis(100);

#[async_trait]
impl DirWatch for E2bWatch {
    async fn take_events(&mut self) -> Result<Vec<FsEvent>, SandboxError> {
        let request = serde_json::json!({ "watcherId": self.watcher_id });
        let response = self
            .sandbox
            .filesystem_rpc("GetWatcherEvents", &request, &self.path)
            .await?;
        #[derive(serde::Deserialize)]
        struct Events {
            #[serde(default)]
            events: Vec<wire::FilesystemEvent>,
        }
        let answer: Events = http::json(&format!("watch {}", self.path), response).await?;
        Ok(answer
            .events
            .into_iter()
            .filter_map(|event| {
                Some(FsEvent {
                    kind: event.event_kind()?,
                    name: event.name,
                    entry: event.entry.map(EntryInfo::from),
                })
            })
            .collect())
    }

    async fn next_events(&mut self) -> Result<Vec<FsEvent>, SandboxError> {
        loop {
            let events = self.take_events().await?;
            if !events.is_empty() {
                return Ok(events);
            }
            tokio::time::sleep(WATCH_POLL).await;
        }
    }
}

impl Drop for E2bWatch {
    fn drop(&mut self) {
        let (sandbox, path) = (self.sandbox.clone(), self.path.clone());
        let request = serde_json::json!({ "watcherId": self.watcher_id });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = sandbox.filesystem_rpc("RemoveWatcher", &request, &path).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_id_is_one_path_segment() {
        assert_eq!(path_segment("snapshot-ab12"), "snapshot-ab12");
        assert_eq!(path_segment("team/name:v1"), "team%2Fname%3Av1");
        assert_eq!(path_segment("a b?é"), "a%20b%3F%C3%A9");
    }
}
