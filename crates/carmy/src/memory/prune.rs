//! Retention on the in-memory store (docs/semantics.md §12.9, [`crate::retention`]): which records
//! expired, and one pruning step under the store's lock. Running and interrupted records never
//! expire.

use super::{Held, Inner};
use crate::outcome::ExecutionId;
use crate::retention::{is_expired, Pruned};
use crate::store::IdempotencyKey;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;

impl Held {
    /// Whether this record no longer holds its identity at `now` under `retention`: it is
    /// finished and `retention` has passed since its outcome was recorded (the store's clock, as
    /// PostgreSQL's `finished_at` column; never before the `expires_at` answers state, which
    /// count from the record's own `finished_at`).
    pub(super) fn expired(&self, retention: Option<Duration>, now: DateTime<Utc>) -> bool {
        match &self.outcome {
            Some(outcome) => {
                let result = outcome.result();
                let recorded = self
                    .recorded_at
                    .unwrap_or(result.finished_at)
                    .max(result.finished_at);
                is_expired(recorded, retention, now)
            }
            None => false,
        }
    }
}

impl Inner {
    /// Removes `execution_id`'s hold of `key` (its record and indexes); history and audit rows
    /// stay.
    pub(super) fn forget(&mut self, key: &IdempotencyKey, execution_id: &ExecutionId) {
        self.by_key.remove(key);
        self.by_execution.remove(execution_id);
    }

    /// One pruning step: at most `batch` of each kind that outlived `retention` at `now`.
    pub(super) fn prune(
        &mut self,
        retention: Duration,
        batch: usize,
        now: DateTime<Utc>,
    ) -> Pruned {
        let retention = Some(retention);
        let records: Vec<(Arc<IdempotencyKey>, ExecutionId)> = self
            .by_key
            .iter()
            .filter(|(_, held)| held.expired(retention, now))
            .take(batch)
            .map(|(key, held)| (key.clone(), held.record.execution_id.clone()))
            .collect();
        for (key, execution_id) in &records {
            self.forget(key, execution_id);
        }

        let released: Vec<ExecutionId> = self
            .released
            .iter()
            .filter(|(_, lookup)| {
                lookup
                    .released
                    .as_ref()
                    .is_some_and(|resolution| is_expired(resolution.at, retention, now))
            })
            .take(batch)
            .map(|(execution_id, _)| execution_id.clone())
            .collect();
        for execution_id in &released {
            self.released.remove(execution_id);
        }

        let mut audit = 0;
        let held = &self.by_execution;
        self.audit.retain(|entry| {
            let prune = audit < batch
                && is_expired(entry.at, retention, now)
                && !held.contains_key(&entry.execution_id);
            if prune {
                audit += 1;
            }
            !prune
        });

        Pruned {
            records: records.len() as u64,
            released: released.len() as u64,
            audit: audit as u64,
            instances: 0,
        }
    }
}
