//! The gauges read from the store at each scrape (docs/semantics.md §13, the operator's alerts
//! in `deploy/carmy.rules.yml`): interrupted executions per tool, the age of the oldest, the
//! decisions waiting for a person, and this process's failed lease renewals.

use super::{Metrics, ReconcileLabels, ToolLabels};
use crate::store::StoreReadings;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

/// The store's readings as metrics. Cloning shares them.
#[derive(Clone, Default)]
pub(super) struct StoreGauges {
    interrupted: Family<ToolLabels, Gauge>,
    oldest_age: Family<ToolLabels, Gauge<f64, AtomicU64>>,
    pending: Family<ToolLabels, Gauge>,
    renewal_failures: Counter,
    /// Held while the families are cleared and set again, so two scrapes never interleave.
    setting: Arc<Mutex<()>>,
}

impl StoreGauges {
    pub(super) fn register(&self, registry: &mut Registry) {
        let gauges = self.clone();
        registry.register(
            "carmy_interrupted_executions",
            "Interrupted executions (no outcome, owner's lease lapsed) in the store, by tool, across replicas",
            gauges.interrupted,
        );
        registry.register(
            "carmy_interrupted_oldest_age_seconds",
            "Age of the oldest interrupted execution in the store, by tool, since its reservation",
            gauges.oldest_age,
        );
        registry.register(
            "carmy_decisions_pending",
            "Interrupted executions waiting for a person's decision (no probe, or its attempts used up), by tool",
            gauges.pending,
        );
        registry.register(
            "carmy_lease_renewal_failures",
            "Lease renewals of this process that failed",
            gauges.renewal_failures,
        );
    }

    /// Replaces the gauges with `readings`. `tools` are the registered tools (each reads 0 when
    /// it has nothing interrupted); `probed` says whether a tool has a probe: an interrupted
    /// execution of a tool without one waits for a person, one of a tool with one only once
    /// its probes are used up.
    pub(super) fn set(
        &self,
        readings: &StoreReadings,
        tools: &[String],
        probed: &dyn Fn(&str) -> bool,
    ) {
        let _setting = self.setting.lock().unwrap_or_else(PoisonError::into_inner);
        self.clear();
        for tool in tools {
            let labels = ToolLabels { tool: tool.clone() };
            self.interrupted.get_or_create(&labels).set(0);
            self.oldest_age.get_or_create(&labels).set(0.0);
            self.pending.get_or_create(&labels).set(0);
        }
        for reading in &readings.interrupted {
            let labels = ToolLabels {
                tool: reading.tool.clone(),
            };
            let pending = if probed(&reading.tool) {
                reading.probes_used_up
            } else {
                reading.count
            };
            self.interrupted
                .get_or_create(&labels)
                .set(i64::try_from(reading.count).unwrap_or(i64::MAX));
            self.oldest_age
                .get_or_create(&labels)
                .set(reading.oldest_age.as_secs_f64());
            self.pending
                .get_or_create(&labels)
                .set(i64::try_from(pending).unwrap_or(i64::MAX));
        }
        let counted = self.renewal_failures.get();
        if readings.lease_renewal_failures > counted {
            self.renewal_failures
                .inc_by(readings.lease_renewal_failures - counted);
        }
    }

    /// The store could not be read: the gauges are left out of the exposition rather than
    /// showing stale values (an alert on them then stops firing; the store's own failures
    /// show in `carmy_calls_total{outcome="unavailable"}` and `/readyz`).
    pub(super) fn unread(&self) {
        let _setting = self.setting.lock().unwrap_or_else(PoisonError::into_inner);
        self.clear();
    }

    fn clear(&self) {
        self.interrupted.clear();
        self.oldest_age.clear();
        self.pending.clear();
    }
}

impl Metrics {
    /// Sets the gauges read from the store at a scrape (docs/semantics.md §13): `tools` are
    /// the registered tools (each reads 0 when nothing of it is interrupted), `probed` says
    /// whether a tool has a reconciliation probe (its interrupted executions wait for a person
    /// only once its probes are used up).
    pub fn observe_store(
        &self,
        readings: &StoreReadings,
        tools: &[String],
        probed: &dyn Fn(&str) -> bool,
    ) {
        self.store_gauges.set(readings, tools, probed);
    }

    /// Shows `carmy_reconciliations_total{tool, result}` of each tool in `probed` (the tools
    /// with a probe) at 0 until its first probe, for the results the alerts compare
    /// (`deploy/carmy.rules.yml`), so that a rate sees the first one.
    pub fn reconcilable(&self, probed: &[String]) {
        for tool in probed {
            for result in ["resolved", "released", "rerun", "inconclusive"] {
                drop(self.reconciliations.get_or_create(&ReconcileLabels {
                    tool: tool.clone(),
                    result: result.into(),
                }));
            }
        }
    }

    /// The store could not be read at a scrape: its gauges are left out until it can.
    pub fn store_unread(&self) {
        self.store_gauges.unread();
    }
}
