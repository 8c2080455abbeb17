//! Whether the commits Carmy reports survive a failover (docs/semantics.md §14): a primary with
//! standbys whose commits do not wait for a synchronous one can lose acknowledged outcomes when
//! a standby is promoted ([`check_replication`]).

use sqlx::postgres::Postgres;
use sqlx::Row;

/// Reads the primary's standbys and its synchronous settings. `pg_stat_replication` shows one
/// row per connected standby to any role (the details need `pg_read_all_stats`; none are read).
pub const REPLICATION_SQL: &str = "SELECT (SELECT count(*) FROM pg_stat_replication), \
     current_setting('synchronous_standby_names'), current_setting('synchronous_commit')";

/// What [`check_replication`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Replication {
    /// No standby streams from this server: a failover can only come from a backup.
    Alone,
    /// Standbys stream from this server and commits wait for a synchronous one: a failover to
    /// that standby loses no acknowledged commit.
    Synchronous {
        /// Connected standbys.
        standbys: i64,
    },
    /// Standbys stream from this server but commits do not wait for any of them: a failover
    /// can lose the last acknowledged commits (outcomes Carmy reported).
    Asynchronous {
        /// Connected standbys.
        standbys: i64,
        /// `synchronous_standby_names`.
        standby_names: String,
        /// `synchronous_commit`.
        synchronous_commit: String,
    },
}

impl Replication {
    /// The warning for [`Replication::Asynchronous`]; `None` otherwise.
    pub fn warning(&self) -> Option<String> {
        match self {
            Self::Asynchronous {
                standbys,
                standby_names,
                synchronous_commit,
            } => Some(format!(
                "the primary has {standbys} standby(s) but commits do not wait for a synchronous one (synchronous_standby_names = '{standby_names}', synchronous_commit = {synchronous_commit}): a failover can lose outcomes Carmy already reported, and their retries run the tools again; configure a synchronous standby (Patroni synchronous_mode: true; docs/operations.md)"
            )),
            Self::Alone | Self::Synchronous { .. } => None,
        }
    }
}

/// Reads [`REPLICATION_SQL`] on `executor`'s server (a pool, a connection, [`crate::Db::executor`]): [`Replication::Synchronous`] when
/// `synchronous_standby_names` is set and `synchronous_commit` is `on`, `remote_write` or
/// `remote_apply`.
///
/// # Errors
/// The statement's error.
pub async fn check_replication<'c, E>(executor: E) -> Result<Replication, sqlx::Error>
where
    E: sqlx::Executor<'c, Database = Postgres>,
{
    let row = sqlx::query(REPLICATION_SQL).fetch_one(executor).await?;
    let standbys: i64 = row.try_get(0)?;
    let standby_names: String = row.try_get(1)?;
    let synchronous_commit: String = row.try_get(2)?;
    Ok(classify(standbys, standby_names, synchronous_commit))
}

/// The rule of [`check_replication`].
fn classify(standbys: i64, standby_names: String, synchronous_commit: String) -> Replication {
    let waits = !standby_names.trim().is_empty()
        && matches!(
            synchronous_commit.as_str(),
            "on" | "remote_write" | "remote_apply"
        );
    match (standbys, waits) {
        (0, _) => Replication::Alone,
        (standbys, true) => Replication::Synchronous { standbys },
        (standbys, false) => Replication::Asynchronous {
            standbys,
            standby_names,
            synchronous_commit,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_are_synchronous_only_with_names_and_a_waiting_commit_level() {
        let of = |n, names: &str, commit: &str| classify(n, names.to_owned(), commit.to_owned());
        assert_eq!(of(0, "", "on"), Replication::Alone);
        assert_eq!(of(1, "*", "on"), Replication::Synchronous { standbys: 1 });
        assert_eq!(
            of(2, "ANY 1 (a, b)", "remote_apply"),
            Replication::Synchronous { standbys: 2 }
        );
        for (names, commit) in [("", "on"), ("*", "local"), ("*", "off"), ("  ", "on")] {
            let found = of(1, names, commit);
            assert!(
                matches!(found, Replication::Asynchronous { standbys: 1, .. }),
                "{names:?} {commit}"
            );
            assert!(found
                .warning()
                .unwrap()
                .contains("a failover can lose outcomes"));
        }
        assert_eq!(of(1, "*", "on").warning(), None);
    }
}
