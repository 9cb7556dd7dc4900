//! Recording work the caller does not wait for, in a build without an integration that queues any (the
//! async-openai layer, the `tracing` bridge with `llm`): there is never anything to drain.

use std::time::Duration;

/// How long [`drain`] would wait (see the queue in `deferred.rs`).
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Nothing is ever queued: done at once.
pub(crate) fn drain(_timeout: Duration) -> bool {
    true
}
