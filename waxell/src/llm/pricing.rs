//! What a call cost, from a table of per-model token prices.
//!
//! The built-in table ([`PriceTable::defaults`]) holds list prices in USD per million tokens of OpenAI,
//! Anthropic, Google Gemini, Mistral and DeepSeek models, as the providers published them on
//! [`PRICES_AS_OF`]. Prices change: override or extend the table with [`PriceTable::with_price`]. A model
//! the table does not know gets **no cost attribute at all** (a made-up zero or a neighbour's price would
//! pollute cost dashboards), and so does a prompt beyond a price's long-context tier.

use std::collections::BTreeMap;

use super::types::Usage;

/// Prices of one model, in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelPrice {
    /// Uncached input tokens.
    pub input_per_million: f64,
    /// Input tokens served from the prompt cache; `None` bills them as ordinary input.
    pub cached_input_per_million: Option<f64>,
    /// Input tokens written to the prompt cache (Anthropic); `None` bills them as ordinary input.
    pub cache_write_per_million: Option<f64>,
    /// Output tokens (reasoning tokens included, as OpenAI bills them).
    pub output_per_million: f64,
    /// Prompts longer than this are billed at another tier the table does not hold: no cost is given.
    pub max_input_tokens: Option<u64>,
}

impl ModelPrice {
    /// A price in USD per million input and output tokens, cached input billed as ordinary input.
    pub const fn new(input_per_million: f64, output_per_million: f64) -> Self {
        Self {
            input_per_million,
            cached_input_per_million: None,
            cache_write_per_million: None,
            output_per_million,
            max_input_tokens: None,
        }
    }

    /// This price holds for prompts of at most `tokens` input tokens (Gemini's and others' tiers).
    pub const fn up_to_input_tokens(mut self, tokens: u64) -> Self {
        self.max_input_tokens = Some(tokens);
        self
    }

    /// Bill input tokens served from the prompt cache at this price (USD per million).
    pub const fn with_cached_input(mut self, cached_input_per_million: f64) -> Self {
        self.cached_input_per_million = Some(cached_input_per_million);
        self
    }

    /// Bill input tokens written to the prompt cache at this price (USD per million).
    pub const fn with_cache_write(mut self, cache_write_per_million: f64) -> Self {
        self.cache_write_per_million = Some(cache_write_per_million);
        self
    }

    /// The cost in USD of this usage, `None` beyond the price's input tier.
    pub fn cost_of(&self, usage: &Usage) -> Option<f64> {
        if self.max_input_tokens.is_some_and(|max| usage.prompt_tokens > max) {
            return None;
        }
        Some(self.cost(usage))
    }

    /// The cost in USD of this usage at this price (tiers ignored; see [`ModelPrice::cost_of`]).
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cached_tokens().unwrap_or(0).min(usage.prompt_tokens);
        let written = usage
            .cache_creation_tokens()
            .unwrap_or(0)
            .min(usage.prompt_tokens - cached);
        let uncached = usage.prompt_tokens - cached - written;
        let cached_price = self.cached_input_per_million.unwrap_or(self.input_per_million);
        let write_price = self.cache_write_per_million.unwrap_or(self.input_per_million);
        (uncached as f64 * self.input_per_million
            + cached as f64 * cached_price
            + written as f64 * write_price
            + usage.completion_tokens as f64 * self.output_per_million)
            / 1_000_000.0
    }
}

/// The day the built-in prices were taken from the providers' pricing pages.
pub const PRICES_AS_OF: &str = "2025-11-20";

/// Per-model prices, looked up by model name.
///
/// Lookup order: the exact name; then the name without a date or release suffix (`gpt-4o-2024-08-06`,
/// `claude-sonnet-4-5-20250929`, `mistral-large-2411`, `gemini-2.0-flash-001`, `claude-3-5-haiku-latest`
/// → the undated name), but never another product (`gpt-4o-mini` is not `gpt-4o`, `claude-opus-4-1` is
/// not `claude-opus-4`); then both again without a router or provider prefix (`openai/gpt-4o`,
/// `models/gemini-2.5-pro` → the bare name).
///
/// ```
/// use waxell::llm::{ModelPrice, PriceTable, Usage};
///
/// let table = PriceTable::defaults()
///     .with_price("my-finetune", ModelPrice::new(1.0, 2.0));
/// let cost = table.cost("my-finetune", &Usage::new(1_000_000, 500_000)).unwrap();
/// assert!((cost - 2.0).abs() < 1e-9);
/// assert!(table.cost("gpt-4o-2024-08-06", &Usage::new(10, 10)).is_some());
/// assert_eq!(table.cost("llama3.2:3b", &Usage::new(10, 10)), None);
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PriceTable {
    prices: BTreeMap<String, ModelPrice>,
}

impl PriceTable {
    /// An empty table: no call gets a cost.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The built-in prices of OpenAI, Anthropic, Gemini, Mistral and DeepSeek models (as of
    /// [`PRICES_AS_OF`]; the table is in `docs/llm.md`).
    pub fn defaults() -> Self {
        let anthropic = ANTHROPIC.iter().map(|row| {
            let price = row.price();
            (
                row.0,
                price.with_cache_write(price.input_per_million * ANTHROPIC_CACHE_WRITE),
            )
        });
        [OPENAI, GEMINI, MISTRAL, DEEPSEEK]
            .into_iter()
            .flatten()
            .map(|row| (row.0, row.price()))
            .chain(anthropic)
            .fold(Self::empty(), |table, (model, price)| {
                table.with_price(model, price)
            })
    }

    /// [`PriceTable::defaults`] built once and shared: every `Provider` starts
    /// with it, and integrations make one per request.
    pub(crate) fn shared_defaults() -> std::sync::Arc<Self> {
        static DEFAULTS: std::sync::LazyLock<std::sync::Arc<PriceTable>> =
            std::sync::LazyLock::new(|| std::sync::Arc::new(PriceTable::defaults()));
        std::sync::Arc::clone(&DEFAULTS)
    }

    /// Only the OpenAI rows of [`PriceTable::defaults`].
    pub fn openai_defaults() -> Self {
        OPENAI
            .iter()
            .fold(Self::empty(), |table, row| table.with_price(row.0, row.price()))
    }

    /// Add or replace the price of `model`.
    pub fn with_price(mut self, model: impl Into<String>, price: ModelPrice) -> Self {
        self.prices.insert(model.into(), price);
        self
    }

    /// The price of `model`, if known (see the lookup order above).
    pub fn price(&self, model: &str) -> Option<&ModelPrice> {
        let unrouted = model.rsplit_once('/').map(|(_, name)| name);
        [Some(model), unrouted]
            .into_iter()
            .flatten()
            .find_map(|name| self.prices.get(name).or_else(|| self.versioned_price(name)))
    }

    /// The cost in USD of `usage` on `model`, or `None` for an unknown model (or a prompt beyond the
    /// price's tier).
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.price(model).and_then(|price| price.cost_of(usage))
    }

    /// The price of the known name `model` extends with a release suffix.
    fn versioned_price(&self, model: &str) -> Option<&ModelPrice> {
        // `gpt-4o-2024-08-06`: the date has dashes too, so it is dropped whole.
        if let Some(base) = strip_iso_date(model) {
            return self.prices.get(base);
        }
        let (base, suffix) = model.rsplit_once('-')?;
        is_release_suffix(suffix).then(|| self.prices.get(base))?
    }
}

/// `latest`, or a date or release number: 3, 4 or 8 digits (`001`, `2411`, `20250929`).
fn is_release_suffix(suffix: &str) -> bool {
    suffix == "latest" || (matches!(suffix.len(), 3 | 4 | 8) && suffix.bytes().all(|b| b.is_ascii_digit()))
}

/// `name` without a trailing `-YYYY-MM-DD`.
fn strip_iso_date(model: &str) -> Option<&str> {
    let split = model.len().checked_sub(11)?;
    let (base, date) = model.split_at_checked(split)?;
    let date = date.strip_prefix('-')?;
    let shape_ok = date.len() == 10
        && date.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        });
    shape_ok.then_some(base)
}

/// One row: model, input, cached input (`None`: billed as input), output, USD per million tokens.
struct Row(&'static str, f64, Option<f64>, f64, Option<u64>);

impl Row {
    fn price(&self) -> ModelPrice {
        let mut price = ModelPrice::new(self.1, self.3);
        price.cached_input_per_million = self.2;
        price.max_input_tokens = self.4;
        price
    }
}

/// Long-context tier boundary of Gemini Pro models and Claude Sonnet's 1M-context beta.
const TIER_200K: Option<u64> = Some(200_000);

// Keep each table in the order of the provider's pricing page, and `docs/llm.md` in step.
const OPENAI: &[Row] = &[
    Row("gpt-5.1", 1.25, Some(0.125), 10.0, None),
    Row("gpt-5", 1.25, Some(0.125), 10.0, None),
    Row("gpt-5-mini", 0.25, Some(0.025), 2.0, None),
    Row("gpt-5-nano", 0.05, Some(0.005), 0.40, None),
    Row("gpt-4.1", 2.0, Some(0.50), 8.0, None),
    Row("gpt-4.1-mini", 0.40, Some(0.10), 1.60, None),
    Row("gpt-4.1-nano", 0.10, Some(0.025), 0.40, None),
    Row("gpt-4o", 2.50, Some(1.25), 10.0, None),
    Row("gpt-4o-mini", 0.15, Some(0.075), 0.60, None),
    Row("o1", 15.0, Some(7.50), 60.0, None),
    Row("o3", 2.0, Some(0.50), 8.0, None),
    Row("o3-mini", 1.10, Some(0.55), 4.40, None),
    Row("o4-mini", 1.10, Some(0.275), 4.40, None),
    Row("gpt-4-turbo", 10.0, None, 30.0, None),
    Row("gpt-3.5-turbo", 0.50, None, 1.50, None),
    Row("text-embedding-3-small", 0.02, None, 0.0, None),
    Row("text-embedding-3-large", 0.13, None, 0.0, None),
    Row("text-embedding-ada-002", 0.10, None, 0.0, None),
];

/// Anthropic bills a write to the prompt cache (its 5-minute cache, the default) at 1.25 times the
/// model's input price; a 1-hour cache write (2 times) is not distinguished in usage, so it is billed as
/// a 5-minute one.
const ANTHROPIC_CACHE_WRITE: f64 = 1.25;

/// Cached input is Anthropic's cache read; cache writes are billed at [`ANTHROPIC_CACHE_WRITE`] times the
/// input price.
const ANTHROPIC: &[Row] = &[
    Row("claude-opus-4-5", 5.0, Some(0.50), 25.0, None),
    Row("claude-opus-4-1", 15.0, Some(1.50), 75.0, None),
    Row("claude-opus-4", 15.0, Some(1.50), 75.0, None),
    Row("claude-sonnet-4-5", 3.0, Some(0.30), 15.0, TIER_200K),
    Row("claude-sonnet-4", 3.0, Some(0.30), 15.0, TIER_200K),
    Row("claude-3-7-sonnet", 3.0, Some(0.30), 15.0, None),
    Row("claude-haiku-4-5", 1.0, Some(0.10), 5.0, None),
    Row("claude-3-5-haiku", 0.80, Some(0.08), 4.0, None),
    Row("claude-3-opus", 15.0, Some(1.50), 75.0, None),
    Row("claude-3-haiku", 0.25, Some(0.03), 1.25, None),
];

/// Paid tier, text input.
const GEMINI: &[Row] = &[
    Row("gemini-3-pro-preview", 2.0, Some(0.20), 12.0, TIER_200K),
    Row("gemini-2.5-pro", 1.25, Some(0.125), 10.0, TIER_200K),
    Row("gemini-2.5-flash", 0.30, Some(0.03), 2.50, None),
    Row("gemini-2.5-flash-lite", 0.10, Some(0.01), 0.40, None),
    Row("gemini-2.0-flash", 0.10, Some(0.025), 0.40, None),
    Row("gemini-2.0-flash-lite", 0.075, None, 0.30, None),
];

/// Dated names only: Mistral's `-latest` aliases move to new models with new prices.
const MISTRAL: &[Row] = &[
    Row("mistral-large-2411", 2.0, None, 6.0, None),
    Row("mistral-medium-2505", 0.40, None, 2.0, None),
    Row("mistral-small-2506", 0.10, None, 0.30, None),
    Row("magistral-medium-2509", 2.0, None, 5.0, None),
    Row("magistral-small-2509", 0.50, None, 1.50, None),
    Row("codestral-2508", 0.30, None, 0.90, None),
    Row("ministral-8b-2410", 0.10, None, 0.10, None),
    Row("ministral-3b-2410", 0.04, None, 0.04, None),
    Row("open-mistral-nemo", 0.15, None, 0.15, None),
];

/// DeepSeek-V3.2 behind both names; cached input is DeepSeek's cache hit.
const DEEPSEEK: &[Row] = &[
    Row("deepseek-chat", 0.28, Some(0.028), 0.42, None),
    Row("deepseek-reasoner", 0.28, Some(0.028), 0.42, None),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dated_versions_and_router_prefixes_resolve() {
        let table = PriceTable::defaults();
        let mini = table.price("gpt-4o-mini").copied();
        assert_eq!(table.price("gpt-4o-mini-2024-07-18").copied(), mini);
        assert_eq!(table.price("openai/gpt-4o-mini").copied(), mini);
        assert_ne!(table.price("gpt-4o-2024-08-06").copied(), mini);
        assert_eq!(
            table.price("o3-pro"),
            None,
            "a different product, not a version of o3"
        );
        assert_eq!(table.price("llama3.1:8b"), None);
        assert_eq!(
            table.price("claude-sonnet-4-5-20250929"),
            table.price("claude-sonnet-4-5")
        );
        assert_eq!(
            table.price("claude-3-5-haiku-latest"),
            table.price("claude-3-5-haiku")
        );
        assert_eq!(
            table
                .price("anthropic/claude-opus-4-5")
                .unwrap()
                .input_per_million,
            5.0
        );
        assert_eq!(
            table.price("claude-opus-4-6"),
            None,
            "not a release of claude-opus-4"
        );
        assert_eq!(
            table.price("gemini-2.0-flash-001"),
            table.price("gemini-2.0-flash")
        );
        assert_eq!(
            table.price("models/gemini-2.5-pro"),
            table.price("gemini-2.5-pro")
        );
        assert_eq!(table.price("mistral-large-latest"), None, "a moving alias");
        assert!(table.price("deepseek-chat").is_some());
        assert!(table.price("mistral-small-2506").is_some());
    }

    #[test]
    fn long_prompts_beyond_a_tier_get_no_cost() {
        let table = PriceTable::defaults();
        assert!(table.cost("gemini-2.5-pro", &Usage::new(200_000, 10)).is_some());
        assert_eq!(table.cost("gemini-2.5-pro", &Usage::new(200_001, 10)), None);
    }

    #[test]
    fn anthropic_cache_writes_are_billed_at_the_cache_write_price() {
        // claude-sonnet-4-5: $3 input, $0.30 cache read, $3.75 cache write, $15 output per million.
        let usage = Usage::new(1_300, 20)
            .with_cached_tokens(300)
            .with_cache_creation_tokens(100);
        let cost = PriceTable::defaults().cost("claude-sonnet-4-5", &usage).unwrap();
        let expected = (900.0 * 3.0 + 300.0 * 0.30 + 100.0 * 3.75 + 20.0 * 15.0) / 1e6;
        assert!((cost - expected).abs() < 1e-12, "{cost} != {expected}");
        // Without a cache-write price (OpenAI has none), written tokens are ordinary input.
        let openai = PriceTable::defaults().cost("gpt-4o-mini", &usage).unwrap();
        let expected = (1_000.0 * 0.15 + 300.0 * 0.075 + 20.0 * 0.60) / 1e6;
        assert!((openai - expected).abs() < 1e-12, "{openai} != {expected}");
    }

    #[test]
    fn cached_tokens_are_billed_at_the_cached_price() {
        let price = ModelPrice::new(2.0, 8.0).with_cached_input(0.5);
        let usage = Usage::new(1_000_000, 1_000_000).with_cached_tokens(400_000);
        let expected = 0.6 * 2.0 + 0.4 * 0.5 + 8.0;
        assert!((price.cost(&usage) - expected).abs() < 1e-9);
    }
}
