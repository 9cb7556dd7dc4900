//! The span processor chain every default export shares: the per-run cap, the queue gate, the batch processor
//! and the fail-open exporter (see `export::fail_open`).

use std::sync::Arc;

use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SpanProcessor};

use crate::config::BatchSettings;
use crate::error::InitError;
use crate::export::fail_open::{Delivery, DropCounters, FailOpenConfig, FailOpenExporter, QueueGate};
use crate::export::transport::TransportLog;
use crate::limits::SpanCap;

/// The fail-open settings every default pipeline shares, and the drop tallies the guard reports.
pub(super) struct Limits {
    pub(super) fail_open: FailOpenConfig,
    /// Queue and batch sizes; beyond the queue, spans are dropped and counted, never waited for.
    pub(super) batch: BatchSettings,
    pub(super) max_spans_per_run: usize,
    pub(super) counters: Arc<DropCounters>,
}

impl Limits {
    /// `SpanCap -> QueueGate -> BatchSpanProcessor -> FailOpenExporter -> exporter` (see `export::fail_open`).
    pub(super) fn pipeline(
        &self,
        delivery: impl Delivery,
        transport: Option<Arc<TransportLog>>,
    ) -> Result<impl SpanProcessor + 'static, InitError> {
        let exporter = FailOpenExporter::new(delivery, self.fail_open, Arc::clone(&self.counters), transport)
            .map_err(|e| InitError::InvalidSetting {
                setting: "export worker",
                message: format!("could not start the export thread: {e}"),
            })?;
        let batch = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(self.batch.max_queue_size)
                    .with_max_export_batch_size(self.batch.max_export_batch_size)
                    .with_scheduled_delay(self.batch.schedule_delay)
                    .build(),
            )
            .build();
        let gated = QueueGate::new(batch, self.batch.max_queue_size, Arc::clone(&self.counters));
        Ok(SpanCap::new(
            gated,
            self.max_spans_per_run,
            Arc::clone(&self.counters),
        ))
    }
}
