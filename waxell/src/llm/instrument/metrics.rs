//! The `gen_ai.client.*` histograms an LLM call records into.

use std::sync::{Arc, RwLock};

use opentelemetry::metrics::Histogram;

use crate::semconv::*;
use crate::telemetry;

/// Boundaries of `gen_ai.client.token.usage` (gen-ai-metrics.md).
const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];
/// Boundaries of the duration histograms, in seconds (gen-ai-metrics.md).
const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// The `gen_ai.client.*` instruments of the global meter provider. Built once per provider: creating an
/// instrument takes the provider's registry locks, which cost more than the recording itself. A provider
/// installed later (by `init()` or by the application) is noticed by pointer and gets instruments of its own.
pub(super) struct Instruments {
    provider: Arc<dyn opentelemetry::metrics::MeterProvider + Send + Sync>,
    pub(super) duration: Histogram<f64>,
    pub(super) time_to_first_chunk: Histogram<f64>,
    pub(super) tokens: Histogram<u64>,
}

impl Instruments {
    pub(super) fn current() -> Arc<Self> {
        static CACHE: RwLock<Option<Arc<Instruments>>> = RwLock::new(None);
        let provider = opentelemetry::global::meter_provider();
        if let Some(cached) = CACHE.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
            if Arc::ptr_eq(&cached.provider, &provider) {
                return Arc::clone(cached);
            }
        }
        let meter = provider.meter_with_scope(telemetry::scope());
        let built = Arc::new(Self {
            duration: meter
                .f64_histogram(METRIC_OPERATION_DURATION)
                .with_unit("s")
                .with_description("GenAI operation duration")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            time_to_first_chunk: meter
                .f64_histogram(METRIC_TIME_TO_FIRST_CHUNK)
                .with_unit("s")
                .with_description("Time to receive the first chunk of a streamed response")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            tokens: meter
                .u64_histogram(METRIC_TOKEN_USAGE)
                .with_unit("{token}")
                .with_description("Number of input and output tokens used")
                .with_boundaries(TOKEN_BUCKETS.to_vec())
                .build(),
            provider,
        });
        *CACHE.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(&built));
        built
    }
}
