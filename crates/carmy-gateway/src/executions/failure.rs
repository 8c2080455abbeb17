//! Why an `executions` command failed: a machine code, a sentence saying what to do next, and
//! the exit code (documented in docs/operations.md, "Failure semantics").
//!
//! | exit | code | meaning |
//! |---|---|---|
//! | 0 | | done |
//! | 1 | `RECORD_DAMAGED`, `INTERNAL` | a row cannot be read back, or another failure |
//! | 2 | `INVALID_REQUEST`, `DATABASE_URL_MISSING` | bad flags or values (clap's usage errors exit 2 too) |
//! | 3 | `NOT_FOUND` | no execution with that id |
//! | 4 | `EXECUTION_FINISHED` | already decided (it has an outcome or was released); nothing changed |
//! | 5 | `EXECUTION_RUNNING` | its owner still holds its lease; nothing changed |
//! | 6 | `STORE_UNAVAILABLE`, `SCHEMA_NOT_MIGRATED` | the database cannot be reached or is not migrated; nothing changed |
//! | 7 | `DECISION_UNCERTAIN` | the connection was lost while the decision was on its way: it may or may not have been applied |

use carmy::decision::DecisionRefusal;
use carmy::outcome::ExecutionId;
use carmy::store::StoreError;
use std::process::ExitCode;

/// A failed command: [`CliFailure::code`] for scripts, [`CliFailure::detail`] for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CliFailure {
    /// The machine code, e.g. `EXECUTION_FINISHED`.
    pub code: &'static str,
    /// What happened and what to do next.
    pub detail: String,
    /// The process exit code (see the module docs).
    pub exit: u8,
}

impl CliFailure {
    fn new(code: &'static str, exit: u8, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
            exit,
        }
    }

    /// Exit 2 `INVALID_REQUEST`: a flag's value is wrong; `detail` says which and how.
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::new("INVALID_REQUEST", 2, detail)
    }

    /// Exit 2 `DATABASE_URL_MISSING`.
    pub fn no_database() -> Self {
        Self::new(
            "DATABASE_URL_MISSING",
            2,
            "DATABASE_URL is not set: set it (or pass --database-url) to the PostgreSQL database \
             the gateway replicas use, e.g. postgres://user@host:5432/carmy",
        )
    }

    /// Exit 3 `NOT_FOUND`.
    pub fn not_found(execution_id: &ExecutionId) -> Self {
        Self::new(
            "NOT_FOUND",
            3,
            format!(
                "no execution {execution_id} in this database: check the id (carmy-gateway \
                 executions list --state interrupted) and DATABASE_URL"
            ),
        )
    }

    /// Exit 6 `STORE_UNAVAILABLE` (or `SCHEMA_NOT_MIGRATED` for a schema behind this build).
    pub fn unavailable(error: &StoreError) -> Self {
        match error {
            StoreError::NotReady(text) => Self::new(
                "SCHEMA_NOT_MIGRATED",
                6,
                format!("{text}; nothing was changed"),
            ),
            StoreError::RecordDamaged {
                execution_id,
                problem,
            } => Self::new(
                "RECORD_DAMAGED",
                1,
                format!(
                    "the record of execution {execution_id} cannot be read back ({problem}): \
                     inspect the row with SELECT * FROM carmy.reservations WHERE execution_id = \
                     '{execution_id}'"
                ),
            ),
            StoreError::Indeterminate(text) => Self::new(
                "DECISION_UNCERTAIN",
                7,
                format!(
                    "the connection to PostgreSQL was lost while the command was on its way \
                     ({text}): it may or may not have been applied; run carmy-gateway executions \
                     show <id> to see which, before trying again"
                ),
            ),
            StoreError::Unavailable(text) => Self::new(
                "STORE_UNAVAILABLE",
                6,
                format!(
                    "{text}; nothing was changed: check that PostgreSQL is up and DATABASE_URL \
                     is right, then run the command again"
                ),
            ),
            other => Self::new("INTERNAL", 1, other.to_string()),
        }
    }

    /// Exit 6 `STORE_UNAVAILABLE`: no session could be opened (`text` carries the cause).
    pub fn unreachable(text: &str) -> Self {
        Self::new(
            "STORE_UNAVAILABLE",
            6,
            format!(
                "{text}: check that PostgreSQL is up and that DATABASE_URL names it (host, \
                 port, database, user, sslmode), then run the command again"
            ),
        )
    }

    /// Exit 3, 4 or 5 for a decision the store refused; nothing changed.
    pub fn refused(refusal: &DecisionRefusal, execution_id: &ExecutionId) -> Self {
        match refusal {
            DecisionRefusal::NotFound => Self::not_found(execution_id),
            DecisionRefusal::AlreadyDecided => Self::new(
                "EXECUTION_FINISHED",
                4,
                format!(
                    "execution {execution_id} was already decided (it has an outcome or was \
                     released); nothing was changed: see who decided with carmy-gateway \
                     executions show {execution_id}"
                ),
            ),
            DecisionRefusal::StillRunning => Self::new(
                "EXECUTION_RUNNING",
                5,
                format!(
                    "execution {execution_id} is still running: its owner holds a live lease; \
                     nothing was changed. Wait for its outcome, or check that the owner process \
                     is gone (carmy-gateway executions show {execution_id} names it) and add \
                     --force"
                ),
            ),
            // `DecisionRefusal` is non-exhaustive: a refusal added to carmy later still says
            // that nothing changed.
            _ => Self::new(
                "INTERNAL",
                1,
                format!(
                    "the decision on execution {execution_id} was refused ({refusal}); nothing \
                     was changed: see carmy-gateway executions show {execution_id}"
                ),
            ),
        }
    }

    /// The same failure with `<id>` in its detail replaced by `execution_id`.
    pub fn naming(mut self, execution_id: &ExecutionId) -> Self {
        self.detail = self.detail.replace("<id>", execution_id.as_str());
        self
    }

    /// The exit code.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.exit)
    }

    /// The message for standard error: `carmy-gateway: CODE: detail`, or with `json` the
    /// problem object `{"code": …, "detail": …, "exit": …}`.
    pub fn message(&self, json: bool) -> String {
        if json {
            serde_json::json!({"code": self.code, "detail": self.detail, "exit": self.exit})
                .to_string()
        } else {
            format!("carmy-gateway: {}: {}", self.code, self.detail)
        }
    }
}
