//! Rows of `carmy.reservations` read back as the core's types: records
//! ([`decode_record`]) and identities ([`decode_key`]).

use crate::failure::unavailable;
use carmy::fingerprint::{Fingerprint, FingerprintParts};
use carmy::outcome::{ExecutionId, ExecutionResult, ExecutionStatus};
use carmy::store::{IdempotencyKey, InFlightState, RecordState, StoreError, StoredRecord};
use sqlx::postgres::PgRow;
use sqlx::Row;

/// Decodes the record columns of [`crate::sql`] (`execution_id`, `tool`, `fingerprint`,
/// `fingerprint_version`, `state`, `outcome`, `in_flight_state`, `fingerprint_parts`) of a row
/// into a record. Part digests that do not read back (a row edited by hand) are `None`: they
/// are diagnostic only.
///
/// # Errors
/// [`StoreError::RecordDamaged`] for a damaged row: an unknown state, an outcome that is not a
/// record, or an outcome whose status or execution id disagrees with its columns
/// (docs/semantics.md §5, §8.3).
pub(crate) fn decode_record(row: &PgRow) -> Result<StoredRecord, StoreError> {
    let execution_id: String = row.try_get("execution_id").map_err(unavailable)?;
    let tool: String = row.try_get("tool").map_err(unavailable)?;
    let digest: String = row.try_get("fingerprint").map_err(unavailable)?;
    let version: String = row.try_get("fingerprint_version").map_err(unavailable)?;
    let state: String = row.try_get("state").map_err(unavailable)?;
    let outcome: Option<String> = row.try_get("outcome").map_err(unavailable)?;
    let in_flight: Option<String> = row.try_get("in_flight_state").map_err(unavailable)?;
    let parts: Option<String> = row.try_get("fingerprint_parts").map_err(unavailable)?;
    let damaged = |why: &str| StoreError::RecordDamaged {
        execution_id: ExecutionId::from_stored(execution_id.clone()),
        problem: why.to_owned(),
    };

    let state = if state == "running" {
        RecordState::InFlight(match in_flight.as_deref() {
            Some("running") => InFlightState::Running,
            Some("interrupted") => InFlightState::Interrupted,
            _ => return Err(damaged("no in-flight state")),
        })
    } else {
        let status = ExecutionStatus::parse(&state)
            .ok_or_else(|| damaged(&format!("unknown state {state:?}")))?;
        let text = outcome.ok_or_else(|| damaged("finished without an outcome"))?;
        let result = ExecutionResult::from_record_json(&text)
            .map_err(|error| damaged(&format!("outcome is not a record: {error}")))?;
        if result.status != status {
            return Err(damaged("outcome status differs from the state column"));
        }
        if result.execution_id.as_str() != execution_id {
            return Err(damaged("outcome execution_id differs from the column"));
        }
        RecordState::Finished(result)
    };
    Ok(StoredRecord {
        execution_id: ExecutionId::from_stored(execution_id),
        fingerprint: Fingerprint { version, digest },
        tool,
        state,
        parts: parts.as_deref().and_then(FingerprintParts::decode),
    })
}

/// The reservation a row of the reserve statements answers for an inserted identity:
/// [`Reservation::Replaced`](carmy::store::Reservation) when its columns `replaced_execution_id`,
/// `replaced_by` and `replaced_note` name the identity's last released execution
/// (docs/semantics.md §12.1), else `Reserved`.
///
/// # Errors
/// [`StoreError::Unavailable`] when a column is missing or not text.
pub(crate) fn decode_reserved(row: &PgRow) -> Result<carmy::store::Reservation, StoreError> {
    let text = |name: &str| row.try_get::<Option<String>, _>(name).map_err(unavailable);
    Ok(match text("replaced_execution_id")? {
        None => carmy::store::Reservation::Reserved,
        Some(execution_id) => carmy::store::Reservation::Replaced(carmy::store::Replaced {
            execution_id: carmy::outcome::ExecutionId::from_stored(execution_id),
            ended: carmy::store::ReplacedEnd::Released {
                by: text("replaced_by")?.unwrap_or_default(),
                note: text("replaced_note")?.unwrap_or_default(),
            },
        }),
    })
}

/// The kept arguments of a row (docs/semantics.md §8.5), from its `arguments` column.
///
/// # Errors
/// [`StoreError::Unavailable`] when the column is missing or not text.
pub(crate) fn decode_arguments(row: &PgRow) -> Result<Option<String>, StoreError> {
    row.try_get::<Option<String>, _>("arguments")
        .map_err(unavailable)
}

/// Decodes the identity columns (`principal`, `session_id`, `request_id`) of a row.
///
/// # Errors
/// [`StoreError::Unavailable`] when a column is missing or not text.
pub(crate) fn decode_key(row: &PgRow) -> Result<IdempotencyKey, StoreError> {
    Ok(IdempotencyKey::new(
        row.try_get::<String, _>("principal").map_err(unavailable)?,
        row.try_get::<String, _>("session_id")
            .map_err(unavailable)?,
        row.try_get::<String, _>("request_id")
            .map_err(unavailable)?,
    ))
}
