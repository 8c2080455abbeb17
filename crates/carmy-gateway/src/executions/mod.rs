//! `carmy-gateway executions list|show|resolve|release`: the operator's recovery loop
//! (docs/semantics.md §12.5) against `DATABASE_URL`, for operators without curl or an operator key.
//!
//! It reads and decides through [`carmy_postgres::Operator`]: no lease, no instance row, and
//! decisions through the same code as the API's (the SQL functions `carmy.resolve_execution` and
//! `carmy.release_execution`), so the same rules, the same compare-and-set, the same audit row
//! and the same cache invalidation on every replica. A decision's actor is `--actor`, else
//! `cli:<OS user name>`.
//!
//! Flags are checked before the database is touched. Output goes to standard output (a table,
//! a block or one line; `--json` for scripts); a failure prints `carmy-gateway: CODE: what to do
//! next` (with `--json`, a JSON object) on standard error and exits with the code of
//! [`failure`].

pub mod args;
pub mod failure;
mod reconcile;
pub mod render;

use crate::config::Config;
use args::{
    DecisionArgs, ExecutionsAction, ExecutionsArgs, ListArgs, ReleaseArgs, ResolveArgs, ShowArgs,
};
use carmy::decision::{check_note, check_outcome, Decision, ReleaseRequest, ResolveRequest};
use carmy::identity::validate_identifier;
use carmy::outcome::{ExecutionError, ExecutionId};
use carmy::storable::check_outcome_values;
use carmy_postgres::{ConnectError, Operator, OperatorQuery};
use failure::CliFailure;
use serde_json::{json, Value};
use std::io::Write;
use std::process::ExitCode;

/// Runs one `executions` command; prints its answer or its failure and returns the exit code.
pub async fn main(config: &Config, args: ExecutionsArgs) -> ExitCode {
    let json = match &args.action {
        ExecutionsAction::List(list) => list.json,
        ExecutionsAction::Show(show) => show.json,
        ExecutionsAction::Resolve(resolve) => resolve.decision.json,
        ExecutionsAction::Release(release) => release.decision.json,
        ExecutionsAction::Reconcile(reconcile) => reconcile.json,
    };
    match run(config, args.action).await {
        Ok(text) => {
            let mut stdout = std::io::stdout().lock();
            match stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
            {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("carmy-gateway: cannot write the answer to standard output ({error}); the command itself succeeded");
                    ExitCode::FAILURE
                }
            }
        }
        Err(failure) => {
            eprintln!("{}", failure.message(json));
            failure.exit_code()
        }
    }
}

/// The command's output, or why it failed. Every flag is checked before connecting.
async fn run(config: &Config, action: ExecutionsAction) -> Result<String, CliFailure> {
    let url = config
        .database_url
        .as_deref()
        .filter(|url| !url.trim().is_empty());
    // Unpinned statements: the session URL when there is one (docs/semantics.md §14.3).
    let url = url
        .and(
            config
                .database_session_url
                .as_deref()
                .filter(|url| !url.trim().is_empty()),
        )
        .or(url);
    match action {
        ExecutionsAction::List(list) => list_executions(url, &list).await,
        ExecutionsAction::Show(show) => show_execution(url, &show).await,
        ExecutionsAction::Resolve(resolve) => resolve_execution(url, &resolve).await,
        ExecutionsAction::Release(release) => release_execution(url, &release).await,
        ExecutionsAction::Reconcile(args) => reconcile::reconcile_execution(url, &args).await,
    }
}

async fn list_executions(url: Option<&str>, list: &ListArgs) -> Result<String, CliFailure> {
    let query = list_query(list)?;
    let operator = connect(url).await?;
    let found = operator
        .list(&query)
        .await
        .map_err(|error| CliFailure::unavailable(&error))?;
    operator.close().await;
    Ok(if list.json {
        let executions: Vec<Value> = found.iter().map(render::summary_json).collect();
        format!("{}\n", json!({ "executions": executions }))
    } else if found.len() == list.limit {
        format!(
            "{}(the oldest {} shown; --limit shows up to {})\n",
            render::list_table(&found),
            list.limit,
            carmy::engine::decide::MAX_LISTED
        )
    } else {
        render::list_table(&found)
    })
}

async fn resolve_execution(url: Option<&str>, resolve: &ResolveArgs) -> Result<String, CliFailure> {
    let request = resolve_request(resolve)?;
    let operator = connect(url).await?;
    let decided = operator
        .resolve(&request)
        .await
        .map_err(|error| CliFailure::unavailable(&error).naming(&request.decision.execution_id))?;
    operator.close().await;
    let result =
        decided.map_err(|refusal| CliFailure::refused(&refusal, &request.decision.execution_id))?;
    Ok(if resolve.decision.json {
        // The body of POST /v1/executions/{id}/resolve.
        let retention = resolve.decision.retention.duration();
        let expires_at = carmy::retention::expires_at(result.finished_at, retention);
        format!("{}\n", result.to_body_json(expires_at))
    } else {
        render::resolved_line(&result)
    })
}

async fn release_execution(url: Option<&str>, release: &ReleaseArgs) -> Result<String, CliFailure> {
    let request = release_request(release)?;
    let operator = connect(url).await?;
    let decided = operator
        .release(&request)
        .await
        .map_err(|error| CliFailure::unavailable(&error).naming(&request.execution_id))?;
    operator.close().await;
    let released =
        decided.map_err(|refusal| CliFailure::refused(&refusal, &request.execution_id))?;
    Ok(if release.decision.json {
        // The body of POST /v1/executions/{id}/release.
        let body = json!({
            "execution_id": released.execution_id.as_str(),
            "status": "released",
            "data": null,
            "error": null,
            "tool": released.tool,
            "request_id": released.key.request_id,
            "session_id": released.key.session_id,
            "resolution": released.resolution,
            "expires_at": carmy::retention::expires_at(
                released.resolution.at,
                release.decision.retention.duration(),
            )
            .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        });
        format!("{body}\n")
    } else {
        format!(
            "Released {} (principal {}, session_id {}, request_id {}) by {}; the next \
             attempt with that identity runs the tool again.\n",
            released.execution_id,
            render::printable(&released.key.principal),
            render::printable(&released.key.session_id),
            render::printable(&released.key.request_id),
            render::printable(&released.resolution.by),
        )
    })
}

async fn show_execution(url: Option<&str>, show: &ShowArgs) -> Result<String, CliFailure> {
    let execution_id = execution_id(&show.execution_id)?;
    let operator = connect(url).await?;
    let unavailable = |error| CliFailure::unavailable(&error);
    let detail = operator
        .show(&execution_id)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| CliFailure::not_found(&execution_id))?;
    let audit = operator
        .audit_trail(&execution_id)
        .await
        .map_err(unavailable)?;
    let evidence = operator
        .probe_evidence(&execution_id)
        .await
        .map_err(unavailable)?;
    operator.close().await;
    Ok(render::shown(
        &detail,
        &audit,
        evidence.as_ref(),
        show.json.then(|| show.retention.duration()),
    ))
}

/// Connects and checks the schema.
pub(crate) async fn connect(url: Option<&str>) -> Result<Operator, CliFailure> {
    let url = url.ok_or_else(CliFailure::no_database)?;
    let operator = Operator::connect(url, carmy_postgres::DEFAULT_ACQUIRE_TIMEOUT)
        .await
        .map_err(|error| match error {
            ConnectError::Options(error) => CliFailure::invalid(format!("DATABASE_URL: {error}")),
            ConnectError::Unavailable(text) => CliFailure::unreachable(&text),
        })?;
    operator
        .check_schema()
        .await
        .map_err(|error| CliFailure::unavailable(&error))?;
    Ok(operator)
}

/// An execution id as given: a plausible one ([`ExecutionId::parse`]).
pub(crate) fn execution_id(text: &str) -> Result<ExecutionId, CliFailure> {
    ExecutionId::parse(text).ok_or_else(|| {
        CliFailure::invalid(format!(
            "{:?} is not an execution id: ids look like exec_ followed by 32 hex digits (see \
             carmy-gateway executions list)",
            render::printable(text)
        ))
    })
}

fn list_query(list: &ListArgs) -> Result<OperatorQuery, CliFailure> {
    for (flag, value) in [
        ("--request-id", &list.request_id),
        ("--session-id", &list.session_id),
    ] {
        if let Some(value) = value {
            validate_identifier(flag, value)
                .map_err(|error| CliFailure::invalid(error.to_string()))?;
        }
    }
    Ok(OperatorQuery {
        principal: list.principal.clone(),
        session_id: list.session_id.clone(),
        request_id: list.request_id.clone(),
        state: list
            .state
            .map_or(carmy_postgres::StateFilter::Any, args::StateArg::filter),
        limit: list.limit,
        arguments: list
            .arguments
            .as_deref()
            .map(carmy::arguments::search_value)
            .transpose()
            .map_err(|error| CliFailure::invalid(format!("--arguments: {error}")))?,
    })
}

/// The actor of a decision: `--actor`, else `cli:<OS user name>`.
fn actor(given: Option<&str>) -> Result<String, CliFailure> {
    match given {
        Some(actor) if actor.trim().is_empty() || actor.contains('\0') => Err(CliFailure::invalid(
            "--actor must name who decides (not empty, no U+0000)",
        )),
        Some(actor) => Ok(actor.to_owned()),
        None => Ok(format!(
            "cli:{}",
            whoami::fallible::username().unwrap_or_else(|_| "unknown-user".to_owned())
        )),
    }
}

fn note(text: &str) -> Result<String, CliFailure> {
    check_note(text).map_err(|error| CliFailure::invalid(format!("--note: {error}")))?;
    Ok(text.to_owned())
}

/// A JSON flag's value, parsed strictly (a duplicate member is refused).
fn json_flag(flag: &str, text: &str, example: &str) -> Result<Value, CliFailure> {
    carmy::strict_json::parse(text).map_err(|error| {
        CliFailure::invalid(format!(
            "{flag} is not valid JSON ({error}): pass one JSON value, e.g. {flag} '{example}'"
        ))
    })
}

fn resolve_request(resolve: &ResolveArgs) -> Result<ResolveRequest, CliFailure> {
    let execution_id = execution_id(&resolve.execution_id)?;
    let status = resolve.status.status();
    let data = match &resolve.data {
        Some(text) => json_flag("--data", text, r#"{"order_id": 17}"#)?,
        None => Value::Null,
    };
    let error_example = r#"{"code": "ORDER_REJECTED", "message": "the shop refused it"}"#;
    let error = match &resolve.error {
        Some(text) => {
            let value = json_flag("--error", text, error_example)?;
            Some(
                serde_json::from_value::<ExecutionError>(value).map_err(|error| {
                    CliFailure::invalid(format!(
                        "--error must be an object with a string code and message ({error}), e.g. \
                     --error '{error_example}'"
                    ))
                })?,
            )
        }
        None => None,
    };
    check_outcome(status, &data, error.as_ref()).map_err(|error| {
        CliFailure::invalid(format!(
            "--status {}: {error} (--data for completed, --error for the other statuses)",
            status.as_str()
        ))
    })?;
    let max_bytes = carmy::engine::EngineConfig::default().max_result_bytes;
    check_outcome_values(&data, error.as_ref(), max_bytes).map_err(CliFailure::invalid)?;
    Ok(ResolveRequest {
        decision: decision(execution_id, &resolve.decision)?,
        status,
        data,
        error,
    })
}

fn release_request(release: &ReleaseArgs) -> Result<ReleaseRequest, CliFailure> {
    decision(execution_id(&release.execution_id)?, &release.decision)
}

/// An operator's decision from the command line: it may act on any principal's execution.
fn decision(execution_id: ExecutionId, args: &DecisionArgs) -> Result<Decision, CliFailure> {
    Ok(Decision {
        execution_id,
        principal: None,
        note: note(&args.note)?,
        actor: actor(args.actor.as_deref())?,
        force: args.force,
    })
}
