//! Who serves LLM calls and where: what every call's span says about its provider.

use std::sync::Arc;

use super::pricing::PriceTable;
use super::transport::ServerAddress;

/// Who serves the calls and where: the provider's `gen_ai.provider.name`, the server called, the prices.
/// Build one per client and reuse it (cheap to clone).
#[derive(Debug, Clone)]
pub struct Provider {
    pub(crate) name: String,
    pub(crate) server: Option<ServerAddress>,
    pub(crate) dry_run: bool,
    pub(crate) prices: Arc<PriceTable>,
}

impl Provider {
    /// `name` is the spec's `gen_ai.provider.name`: `openai`, `anthropic`, `gcp.gemini`, `mistral_ai`,
    /// `deepseek`, `aws.bedrock`, ... Prices default to [`PriceTable::defaults`].
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            server: None,
            dry_run: false,
            prices: PriceTable::shared_defaults(),
        }
    }

    /// The server the calls go to (`server.address`, `server.port`). Leave it unset only when no server
    /// is called (a scripted dry run).
    pub fn with_server(mut self, host: impl Into<String>, port: u16) -> Self {
        self.server = Some(ServerAddress {
            host: host.into(),
            port,
        });
        self
    }

    /// The server of a URL such as `https://api.openai.com/v1` (the scheme's default port when none is
    /// given). A URL without a host leaves the server unset.
    pub fn with_server_url(mut self, url: &str) -> Self {
        self.server = ServerAddress::from_url(url);
        self
    }

    /// Prices for `waxell.llm.cost`. A model the table does not know gets no cost.
    pub fn with_prices(mut self, prices: PriceTable) -> Self {
        self.prices = Arc::new(prices);
        self
    }

    /// Mark calls as answered without a model (`waxell.dry_run=true`).
    pub fn with_dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// The `gen_ai.provider.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server, if one is called.
    pub fn server(&self) -> Option<&ServerAddress> {
        self.server.as_ref()
    }
}
