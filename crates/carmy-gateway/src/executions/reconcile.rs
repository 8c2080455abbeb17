//! `carmy-gateway executions reconcile ID` (docs/semantics.md §12.10): makes an
//! interrupted execution due for its tool's probe now, waits until a running replica has probed
//! it (new evidence on the record, or a decision), and shows the execution as `show` does.
//! The CLI holds no tools file: the probe runs on a replica, claimed like any other.

use super::args::ReconcileArgs;
use super::failure::CliFailure;
use super::{connect, execution_id, render};
use carmy::store::RecordState;
use std::time::{Duration, Instant};

/// How often the record is read while waiting for the probe.
const POLL: Duration = Duration::from_millis(100);

/// Runs `executions reconcile`.
pub(super) async fn reconcile_execution(
    url: Option<&str>,
    args: &ReconcileArgs,
) -> Result<String, CliFailure> {
    let execution_id = execution_id(&args.execution_id)?;
    let operator = connect(url).await?;
    let unavailable = |error| CliFailure::unavailable(&error);
    let before = operator
        .probe_evidence(&execution_id)
        .await
        .map_err(unavailable)?;
    if !operator
        .reconcile_soon(&execution_id)
        .await
        .map_err(unavailable)?
    {
        let found = operator.show(&execution_id).await.map_err(unavailable)?;
        operator.close().await;
        return Err(match found {
            None => CliFailure::not_found(&execution_id),
            Some(_) => CliFailure::invalid(format!(
                "execution {execution_id} is not interrupted: it has an outcome, was released, or its owner is alive; see `carmy-gateway executions show {execution_id}`"
            )),
        });
    }
    let started = Instant::now();
    let wait = Duration::from_millis(args.wait_ms);
    loop {
        let detail = operator
            .show(&execution_id)
            .await
            .map_err(unavailable)?
            .ok_or_else(|| CliFailure::not_found(&execution_id))?;
        let evidence = operator
            .probe_evidence(&execution_id)
            .await
            .map_err(unavailable)?;
        let decided = detail.lookup.released.is_some()
            || matches!(detail.lookup.record.state, RecordState::Finished(_));
        if decided || (evidence.is_some() && evidence != before) {
            let audit = operator
                .audit_trail(&execution_id)
                .await
                .map_err(unavailable)?;
            operator.close().await;
            return Ok(render::shown(
                &detail,
                &audit,
                evidence.as_ref(),
                args.json.then(|| args.retention.duration()),
            ));
        }
        if started.elapsed() >= wait {
            operator.close().await;
            return Err(CliFailure::invalid(format!(
                "no replica probed execution {execution_id} within {} ms; it stays due: is a gateway whose tools file gives this tool a [tools.reconcile] probe running on this database?",
                args.wait_ms
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}
