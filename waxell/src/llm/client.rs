//! [`Client`] and its [`ClientBuilder`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::FutureExt as _;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::error::malformed;
use super::error::Error;
use super::pricing::PriceTable;
use super::record::{LlmCall, Provider};
use super::stream::ChatStream;
use super::transport::{ApiKey, HttpSettings, HttpTransport, RetryPolicy, Transport};
use super::types::{ChatRequest, ChatResponse, StreamOptions};

/// OpenAI's API, used when no base URL is configured.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// Default time allowed to open a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time allowed for a whole non-streamed response, or between two chunks of a stream.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// An instrumented Chat Completions client for any OpenAI-compatible server.
///
/// Every call records a `chat {model}` span (GenAI and OpenInference attributes, usage, cost), the
/// `gen_ai.client.*` metrics, and a `tool_call:{name}` decision when the model calls tools; see
/// `docs/llm.md`. The span is a child of the caller's current OpenTelemetry context.
///
/// Cheap to clone; clones share the connection pool.
///
/// ```no_run
/// # async fn demo() -> Result<(), waxell::llm::Error> {
/// use waxell::llm::{ChatRequest, Client, Message};
///
/// let client = Client::builder()
///     .with_base_url("http://localhost:11434/v1") // e.g. Ollama
///     .with_model("llama3.2")
///     .build()?;
/// let response = client.chat(ChatRequest::new([Message::user("Say hi")])).await?;
/// println!("{}", response.text().unwrap_or_default());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    transport: Arc<dyn Transport>,
    default_model: Option<String>,
    target: Provider,
    stream_usage: bool,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("transport", &self.inner.transport)
            .field("default_model", &self.inner.default_model)
            .field("provider", &self.inner.target.name)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A builder with the defaults: OpenAI's base URL, no key, no default model, 10 s connect and 300 s
    /// request timeouts, 2 retries, the OpenAI price table.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// A client configured from `OPENAI_API_KEY` and `OPENAI_BASE_URL` (both optional: a local server
    /// needs no key). Use [`ClientBuilder::from_env`] to adjust more.
    pub fn from_env() -> Result<Self, Error> {
        ClientBuilder::from_env().build()
    }

    /// The model used when a request names none.
    pub fn default_model(&self) -> Option<&str> {
        self.inner.default_model.as_deref()
    }

    /// `true` when this client answers from a script instead of a model.
    pub fn is_dry_run(&self) -> bool {
        self.inner.target.dry_run
    }

    /// Send a request and wait for the complete response.
    ///
    /// ```no_run
    /// # async fn demo(client: waxell::llm::Client) -> Result<(), waxell::llm::Error> {
    /// use waxell::llm::{ChatRequest, Message};
    ///
    /// let request = ChatRequest::new([Message::system("Be brief."), Message::user("What is Rust?")])
    ///     .model("gpt-4o-mini")
    ///     .temperature(0.2);
    /// let response = client.chat(request).await?;
    /// println!("{}", response.text().unwrap_or_default());
    /// # Ok(()) }
    /// ```
    pub async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, Error> {
        let request = self.resolve(request, false)?;
        let mut call = LlmCall::start(&self.inner.target, &request);
        let result = async {
            let body = self.inner.transport.send(&request).await?;
            parse_response(&body)
        }
        .with_context(call.context().clone())
        .await;
        match &result {
            Ok(response) => call.finish(response),
            Err(error) => call.fail_with(error),
        }
        result
    }

    /// Send a request with `stream: true` and return the response as it is generated.
    ///
    /// Errors before the first byte (HTTP errors, after retries; timeouts) come back here; errors
    /// during the stream come as its items. See [`ChatStream`].
    pub async fn chat_stream(&self, request: ChatRequest) -> Result<ChatStream, Error> {
        let request = self.resolve(request, true)?;
        let mut call = LlmCall::start(&self.inner.target, &request);
        let payloads = self
            .inner
            .transport
            .send_streaming(&request)
            .with_context(call.context().clone())
            .await;
        match payloads {
            Ok(payloads) => Ok(ChatStream::new(payloads, call)),
            Err(error) => {
                call.fail_with(&error);
                Err(error)
            }
        }
    }

    /// Fill in the default model and the streaming fields.
    fn resolve(&self, mut request: ChatRequest, stream: bool) -> Result<ChatRequest, Error> {
        if request.model.as_deref().is_none_or(str::is_empty) {
            request.model = Some(self.inner.default_model.clone().ok_or_else(|| {
                Error::InvalidRequest(
                    "no model given: set one with ChatRequest::model or ClientBuilder::with_model".to_owned(),
                )
            })?);
        }
        request.stream = stream;
        request.stream_options =
            (stream && self.inner.stream_usage).then_some(StreamOptions { include_usage: true });
        Ok(request)
    }
}

fn parse_response(body: &str) -> Result<ChatResponse, Error> {
    let response: ChatResponse = serde_json::from_str(body)
        .map_err(|e| malformed(format!("the body is not a chat completion: {e}"), body))?;
    if response.choices.is_empty() {
        return Err(malformed("the response has no choices", body));
    }
    Ok(response)
}

/// Configures a [`Client`].
///
/// ```no_run
/// # fn demo() -> Result<(), waxell::llm::Error> {
/// use std::time::Duration;
/// use waxell::llm::{Client, ModelPrice, PriceTable};
///
/// let client = Client::builder()
///     .with_base_url("https://openrouter.ai/api/v1")
///     .with_api_key(std::env::var("OPENROUTER_API_KEY").unwrap_or_default())
///     .with_model("openai/gpt-4o-mini")
///     .with_request_timeout(Duration::from_secs(60))
///     .with_max_retries(4)
///     .with_price_table(PriceTable::openai_defaults().with_price("my-model", ModelPrice::new(0.2, 0.8)))
///     .build()?;
/// # let _ = client; Ok(()) }
/// ```
#[must_use]
pub struct ClientBuilder {
    base_url: String,
    api_key: Option<ApiKey>,
    model: Option<String>,
    connect_timeout: Duration,
    request_timeout: Duration,
    retry: RetryPolicy,
    headers: HeaderMap,
    header_error: Option<String>,
    provider: Option<String>,
    prices: PriceTable,
    transport: Option<Arc<dyn Transport>>,
    stream_usage: bool,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key)
            .field("model", &self.model)
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

impl Default for ClientBuilder {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.to_owned(),
            api_key: None,
            model: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            retry: RetryPolicy::default(),
            headers: HeaderMap::new(),
            header_error: None,
            provider: None,
            prices: PriceTable::defaults(),
            transport: None,
            stream_usage: true,
        }
    }
}

impl ClientBuilder {
    /// Defaults, then `OPENAI_API_KEY` and `OPENAI_BASE_URL` when set and non-empty.
    pub fn from_env() -> Self {
        let env = crate::config::Env::process();
        let mut builder = Self::default();
        if let Some(key) = env.var("OPENAI_API_KEY") {
            builder = builder.with_api_key(key.trim());
        }
        if let Some(base_url) = env.var("OPENAI_BASE_URL") {
            builder = builder.with_base_url(base_url.trim());
        }
        builder
    }

    /// The API root, e.g. `https://api.openai.com/v1` or `http://localhost:11434/v1`; requests go to
    /// `{base_url}/chat/completions`.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// Sent as `Authorization: Bearer {key}`. Never printed by `Debug`, never recorded on spans.
    pub fn with_api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Some(ApiKey::new(api_key));
        self
    }

    /// The model for requests that name none.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Time allowed to open the TCP (and TLS) connection, per attempt (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Time allowed for a whole non-streamed response, or for a stream's headers and then between two of
    /// its chunks. Per attempt.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Retries after a 408, 429, 5xx, timeout or connection failure (0 disables retrying).
    pub fn with_max_retries(mut self, retries: u32) -> Self {
        self.retry.max_retries = retries;
        self
    }

    /// Exponential backoff between retries: `initial`, doubling, at most `max` (with jitter). A
    /// `Retry-After` from the server (up to 60 s) takes precedence.
    pub fn with_retry_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.retry.initial_backoff = initial;
        self.retry.max_backoff = max.max(initial);
        self
    }

    /// A header sent with every request (e.g. OpenRouter's `HTTP-Referer`). Its value is treated as
    /// sensitive and never printed.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            (Ok(name), Ok(mut value)) => {
                value.set_sensitive(true);
                self.headers.insert(name, value);
            }
            _ => self.header_error = Some(format!("header {name:?} has an invalid name or value")),
        }
        self
    }

    /// `gen_ai.provider.name` on spans. By default inferred from the base URL's host (`openai` for
    /// unknown hosts, local servers and routers, as the spec asks for OpenAI-compatible APIs).
    pub fn with_provider_name(mut self, provider: impl Into<String>) -> Self {
        self.provider = Some(provider.into());
        self
    }

    /// Prices used for `waxell.llm.cost` (default: [`PriceTable::defaults`]).
    pub fn with_price_table(mut self, prices: PriceTable) -> Self {
        self.prices = prices;
        self
    }

    /// Send requests through this transport instead of HTTP, e.g. a
    /// [`ScriptedTransport`](super::ScriptedTransport) for a dry run. Base URL, key, timeouts and
    /// retries then do not apply.
    pub fn with_transport(mut self, transport: impl Transport + 'static) -> Self {
        self.transport = Some(Arc::new(transport));
        self
    }

    /// Whether streamed requests ask for usage in the last chunk (`stream_options.include_usage`,
    /// default `true`). Turn off for servers that reject the field.
    pub fn with_stream_usage(mut self, include_usage: bool) -> Self {
        self.stream_usage = include_usage;
        self
    }

    /// Build the client. Fails on an invalid base URL or header.
    pub fn build(self) -> Result<Client, Error> {
        if let Some(problem) = self.header_error {
            return Err(Error::Config(problem));
        }
        let transport: Arc<dyn Transport> = match self.transport {
            Some(transport) => transport,
            None => Arc::new(HttpTransport::new(HttpSettings {
                base_url: self.base_url,
                api_key: self.api_key,
                connect_timeout: self.connect_timeout,
                request_timeout: self.request_timeout,
                retry: self.retry,
                headers: self.headers,
            })?),
        };
        let server = transport.server();
        let provider = self.provider.unwrap_or_else(|| {
            server
                .as_ref()
                .map_or("openai", |server| provider_for_host(&server.host))
                .to_owned()
        });
        Ok(Client {
            inner: Arc::new(Inner {
                target: Provider {
                    name: provider,
                    server,
                    dry_run: transport.is_dry_run(),
                    prices: Arc::new(self.prices),
                },
                transport,
                default_model: self.model,
                stream_usage: self.stream_usage,
            }),
        })
    }
}

/// The `gen_ai.provider.name` of well-known OpenAI-compatible endpoints; `openai` otherwise.
pub(crate) fn provider_for_host(host: &str) -> &'static str {
    const KNOWN: &[(&str, &str)] = &[
        ("openai.azure.com", "azure.ai.openai"),
        ("services.ai.azure.com", "azure.ai.inference"),
        ("api.groq.com", "groq"),
        ("api.deepseek.com", "deepseek"),
        ("api.mistral.ai", "mistral_ai"),
        ("api.x.ai", "x_ai"),
        ("api.perplexity.ai", "perplexity"),
        ("generativelanguage.googleapis.com", "gcp.gemini"),
        ("api.cohere.ai", "cohere"),
        ("api.cohere.com", "cohere"),
    ];
    KNOWN
        .iter()
        // The host itself or a subdomain of it (no allocation: this runs on every recorded request).
        .find(|(suffix, _)| {
            host.strip_suffix(suffix)
                .is_some_and(|rest| rest.is_empty() || rest.ends_with('.'))
        })
        .map_or("openai", |(_, provider)| provider)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_is_inferred_from_well_known_hosts_only() {
        assert_eq!(provider_for_host("api.openai.com"), "openai");
        assert_eq!(provider_for_host("myres.openai.azure.com"), "azure.ai.openai");
        assert_eq!(provider_for_host("api.groq.com"), "groq");
        assert_eq!(provider_for_host("openrouter.ai"), "openai");
        assert_eq!(provider_for_host("127.0.0.1"), "openai");
        assert_eq!(provider_for_host("evil-api.groq.com.example"), "openai");
    }

    #[test]
    fn invalid_configuration_is_reported_at_build() {
        let error = Client::builder().with_base_url("not a url").build().unwrap_err();
        assert!(error.to_string().contains("not a url"), "{error}");
        let error = Client::builder()
            .with_header("bad header", "x")
            .build()
            .unwrap_err();
        assert!(error.to_string().contains("bad header"), "{error}");
    }

    /// Agents spawn calls on multi-threaded runtimes: the futures and the stream must be `Send`.
    #[test]
    fn calls_and_streams_are_send() {
        fn assert_send<T: Send>(_: &T) {}
        let client = Client::builder().with_model("m").build().unwrap();
        let request = || crate::llm::ChatRequest::new([crate::llm::Message::user("hi")]);
        assert_send(&client.chat(request()));
        assert_send(&client.chat_stream(request()));
        fn assert_send_type<T: Send + Sync>() {}
        assert_send_type::<Client>();
        assert_send_type::<crate::llm::ScriptedTransport>();
        fn assert_send_only<T: Send>() {}
        assert_send_only::<ChatStream>();
    }

    #[test]
    fn builder_debug_hides_the_key() {
        let builder = Client::builder().with_api_key("sk-secret-123");
        assert!(!format!("{builder:?}").contains("sk-secret-123"));
        let client = builder.build().unwrap();
        assert!(!format!("{client:?}").contains("sk-secret-123"));
    }
}
