//! Changes made to finished records behind this process's back (docs/semantics.md §8.4, §12.3):
//! heard through the store ([`IdempotencyStore::record_changes`]) and handed back to it
//! ([`IdempotencyStore::drop_cached`]) so that a replay cache drops its stale copies at once.

use super::Engine;
#[cfg(doc)]
use crate::store::IdempotencyStore;
use crate::store::RecordChange;
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

impl Engine {
    /// Hands every change the store hears of to [`IdempotencyStore::drop_cached`] until the
    /// engine is dropped; a lag (changes missed because this task fell behind) drops every
    /// copy ([`RecordChange::Unknown`]). Needs a Tokio runtime; does nothing for a store
    /// nothing else changes (process-local). Called by `App::start_background`.
    pub fn follow_record_changes(self: &Arc<Self>) {
        let Some(mut changes) = self.store.record_changes() else {
            return;
        };
        let engine = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let change = match changes.recv().await {
                    Ok(change) => change,
                    Err(RecvError::Lagged(missed)) => {
                        tracing::warn!(
                            missed,
                            "missed changes to records; dropping every cached copy"
                        );
                        RecordChange::Unknown
                    }
                    Err(RecvError::Closed) => return,
                };
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                engine.store.drop_cached(&change);
            }
        });
    }
}
