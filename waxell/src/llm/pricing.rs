//! What a call cost, from a table of per-model token prices.
//!
//! The built-in table holds OpenAI list prices in USD per million tokens at the time of writing; prices
//! change, so override or extend it with [`PriceTable::with_price`] and
//! [`ClientBuilder::with_price_table`](super::ClientBuilder::with_price_table). A model the table does not
//! know gets **no cost attribute at all**: a made-up zero would pollute cost dashboards.

use std::collections::BTreeMap;

use super::types::Usage;

/// Prices of one model, in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelPrice {
    /// Uncached input tokens.
    pub input_per_million: f64,
    /// Input tokens served from the prompt cache; `None` bills them as ordinary input.
    pub cached_input_per_million: Option<f64>,
    /// Output tokens (reasoning tokens included, as OpenAI bills them).
    pub output_per_million: f64,
}

impl ModelPrice {
    pub const fn new(input_per_million: f64, output_per_million: f64) -> Self {
        Self {
            input_per_million,
            cached_input_per_million: None,
            output_per_million,
        }
    }

    pub const fn with_cached_input(mut self, cached_input_per_million: f64) -> Self {
        self.cached_input_per_million = Some(cached_input_per_million);
        self
    }

    /// The cost in USD of this usage.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cached_tokens().unwrap_or(0).min(usage.prompt_tokens);
        let uncached = usage.prompt_tokens - cached;
        let cached_price = self.cached_input_per_million.unwrap_or(self.input_per_million);
        (uncached as f64 * self.input_per_million
            + cached as f64 * cached_price
            + usage.completion_tokens as f64 * self.output_per_million)
            / 1_000_000.0
    }
}

/// Per-model prices, looked up by model name.
///
/// Lookup order: the exact name; then the name without a dated or numbered version suffix
/// (`gpt-4o-2024-08-06` → `gpt-4o`, but never `gpt-4o-mini` → `gpt-4o`); then both again without a
/// router prefix (`openai/gpt-4o` → `gpt-4o`).
///
/// ```
/// use waxell::llm::{ModelPrice, PriceTable, Usage};
///
/// let table = PriceTable::openai_defaults()
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

    /// OpenAI list prices (USD per million tokens: input, cached input, output), as published when this
    /// table was written. See `docs/llm.md` for the table.
    pub fn openai_defaults() -> Self {
        const DEFAULTS: &[(&str, f64, f64, f64)] = &[
            ("gpt-5", 1.25, 0.125, 10.0),
            ("gpt-5-mini", 0.25, 0.025, 2.0),
            ("gpt-5-nano", 0.05, 0.005, 0.40),
            ("gpt-4.1", 2.0, 0.50, 8.0),
            ("gpt-4.1-mini", 0.40, 0.10, 1.60),
            ("gpt-4.1-nano", 0.10, 0.025, 0.40),
            ("gpt-4o", 2.50, 1.25, 10.0),
            ("gpt-4o-mini", 0.15, 0.075, 0.60),
            ("o1", 15.0, 7.50, 60.0),
            ("o3", 2.0, 0.50, 8.0),
            ("o3-mini", 1.10, 0.55, 4.40),
            ("o4-mini", 1.10, 0.275, 4.40),
            ("gpt-4-turbo", 10.0, 10.0, 30.0),
            ("gpt-3.5-turbo", 0.50, 0.50, 1.50),
        ];
        DEFAULTS
            .iter()
            .fold(Self::empty(), |table, &(model, input, cached, output)| {
                table.with_price(model, ModelPrice::new(input, output).with_cached_input(cached))
            })
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

    /// The cost in USD of `usage` on `model`, or `None` for an unknown model.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.price(model).map(|price| price.cost(usage))
    }

    /// The longest known name that `model` extends with a version suffix (`-` then a digit).
    fn versioned_price(&self, model: &str) -> Option<&ModelPrice> {
        self.prices
            .iter()
            .filter(|(known, _)| {
                model
                    .strip_prefix(known.as_str())
                    .and_then(|suffix| suffix.strip_prefix('-'))
                    .is_some_and(|version| version.starts_with(|c: char| c.is_ascii_digit()))
            })
            .max_by_key(|(known, _)| known.len())
            .map(|(_, price)| price)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dated_versions_and_router_prefixes_resolve() {
        let table = PriceTable::openai_defaults();
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
    }

    #[test]
    fn cached_tokens_are_billed_at_the_cached_price() {
        let price = ModelPrice::new(2.0, 8.0).with_cached_input(0.5);
        let usage = Usage::new(1_000_000, 1_000_000).with_cached_tokens(400_000);
        let expected = 0.6 * 2.0 + 0.4 * 0.5 + 8.0;
        assert!((price.cost(&usage) - expected).abs() < 1e-9);
    }
}
