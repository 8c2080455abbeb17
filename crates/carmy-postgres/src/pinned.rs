//! The store's statements behind a transaction-mode pooler (docs/semantics.md §14.3): one sqlx
//! executor, [`Pinned`], over a [`Source`] (the shared pool, [`Db::executor`], or one
//! connection, [`Through`]) runs each statement as sqlx would on a direct connection, or, when [`Pinning`]
//! says a transaction-mode pooler (PgBouncer `pool_mode = transaction`) is in between, inside a
//! transaction of its own with an unnamed statement.
//!
//! Why: such a pooler hands a server connection to a client only for one transaction, and
//! between two `Sync` messages outside a transaction it may hand the next message to another
//! server. sqlx's named (`sqlx_s_N`) statements then meet statements of other clients
//! (`prepared statement "sqlx_s_1" already exists`) or miss their own, and even an unnamed
//! statement is sent in two steps (`Parse`/`Describe`/`Sync`, then `Bind`/`Execute`/`Sync`), so
//! its `Bind` could reach a server where another client's statement sits. Inside `BEGIN` …
//! `COMMIT` the pooler keeps one server for the client, and the unnamed statement leaves nothing
//! behind on it. The `BEGIN` also carries `SET LOCAL statement_timeout` and
//! `idle_in_transaction_session_timeout` (docs/semantics.md §14.1), since session settings do not
//! survive there. A statement without parameters (sqlx's simple protocol, e.g.
//! `sqlx::raw_sql`) is one message and runs as it is.
//!
//! Cost: two more round trips per statement (`BEGIN`, `COMMIT`), and no cached plans; only in
//! that mode. On a direct connection (or a session-mode pooler) every method forwards to sqlx
//! unchanged.

use futures::future::BoxFuture;
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgArguments, PgConnection, PgPool, PgQueryResult, PgRow, PgStatement};
use sqlx::postgres::{PgTypeInfo, Postgres};
use sqlx::{Either, Execute, Executor};
use std::ops::DerefMut;
use std::sync::Arc;
use std::time::Duration;

/// How statements must run: `None` on a direct path, else the `BEGIN` that pins a server of a
/// transaction-mode pooler for one statement.
#[derive(Clone, Debug, Default)]
pub struct Pinning(Option<Arc<str>>);

impl Pinning {
    /// A direct connection or a session-mode pooler: statements run as sqlx runs them.
    pub const fn direct() -> Self {
        Self(None)
    }

    /// A transaction-mode pooler: each statement with parameters runs in a transaction of its
    /// own that starts with `SET LOCAL statement_timeout` and
    /// `idle_in_transaction_session_timeout` = `statement_timeout` (none when zero).
    pub fn transaction_pooler(statement_timeout: Duration) -> Self {
        let begin = if statement_timeout.is_zero() {
            "BEGIN".to_owned()
        } else {
            let millis = statement_timeout.as_millis().max(1);
            format!(
                "BEGIN; SET LOCAL statement_timeout = {millis}; \
                 SET LOCAL idle_in_transaction_session_timeout = {millis}"
            )
        };
        Self(Some(begin.into()))
    }

    /// Whether statements are pinned (a transaction-mode pooler is in between).
    pub fn is_pinned(&self) -> bool {
        self.0.is_some()
    }
}

/// The store's pool with its [`Pinning`]: the executor ([`Db::executor`]) of every statement
/// that is not bound to a session.
#[derive(Clone, Debug)]
pub struct Db {
    pool: PgPool,
    pinning: Pinning,
}

impl Db {
    /// `pool`, whose statements run as `pinning` says.
    pub fn new(pool: PgPool, pinning: Pinning) -> Self {
        Self { pool, pinning }
    }

    /// The sqlx pool (its statements do not get this executor's pinning).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// How statements run.
    pub fn pinning(&self) -> &Pinning {
        &self.pinning
    }

    /// `connection` (e.g. one taken from [`Db::pool`]) as an executor with this pinning.
    pub fn through<'c>(&self, connection: &'c mut PgConnection) -> Through<'c> {
        Through::new(connection, self.pinning.clone())
    }

    /// The pool as the executor of a statement, with this pinning.
    pub fn executor(&self) -> Pinned<&PgPool> {
        Pinned {
            source: &self.pool,
            pinning: self.pinning.clone(),
        }
    }
}

/// A pool on a direct path ([`Pinning::direct`]).
impl From<PgPool> for Db {
    fn from(pool: PgPool) -> Self {
        Self::new(pool, Pinning::direct())
    }
}

/// One connection with a [`Pinning`], as an executor.
pub type Through<'c> = Pinned<&'c mut PgConnection>;

impl<'c> Through<'c> {
    /// `connection`, whose statements run as `pinning` says.
    pub fn new(connection: &'c mut PgConnection, pinning: Pinning) -> Self {
        Self {
            source: connection,
            pinning,
        }
    }
}

type Item = Either<PgQueryResult, PgRow>;

/// A query with its arguments taken out, run as an unnamed statement.
struct Unnamed<'q> {
    sql: &'q str,
    arguments: Option<PgArguments>,
}

impl<'q> Execute<'q, Postgres> for Unnamed<'q> {
    fn sql(&self) -> &'q str {
        self.sql
    }

    fn statement(&self) -> Option<&PgStatement<'q>> {
        None
    }

    fn take_arguments(&mut self) -> Result<Option<PgArguments>, sqlx::error::BoxDynError> {
        Ok(self.arguments.take())
    }

    fn persistent(&self) -> bool {
        false
    }
}

/// Runs `query` on `connection` pinned by `begin` (see the module): its results, all read.
async fn pinned<'q, E>(
    connection: &mut PgConnection,
    begin: &str,
    mut query: E,
) -> Result<Vec<Item>, sqlx::Error>
where
    E: 'q + Execute<'q, Postgres>,
{
    let arguments = query.take_arguments().map_err(sqlx::Error::Encode)?;
    let sql = query.sql();
    let Some(arguments) = arguments else {
        // The simple protocol: one message, one server.
        return connection
            .fetch_many(sqlx::raw_sql(sql))
            .try_collect()
            .await;
    };
    connection.execute(sqlx::raw_sql(begin)).await?;
    let statement = Unnamed {
        sql,
        arguments: Some(arguments),
    };
    let items: Result<Vec<Item>, sqlx::Error> =
        (&mut *connection).fetch_many(statement).try_collect().await;
    match items {
        Ok(items) => {
            connection.execute(sqlx::raw_sql("COMMIT")).await?;
            Ok(items)
        }
        Err(error) => {
            // Hand the server back to the pooler now, not at the connection's next use.
            let _ = connection.execute(sqlx::raw_sql("ROLLBACK")).await;
            Err(error)
        }
    }
}

/// The first row of `items`.
fn first_row(items: Vec<Item>) -> Option<PgRow> {
    items.into_iter().find_map(|item| match item {
        Either::Right(row) => Some(row),
        Either::Left(_) => None,
    })
}

/// Runs `query` pinned by `begin` on a connection of `source` (see the module): its results,
/// all read.
async fn run_pinned<'c, 'q, S, E>(
    source: S,
    begin: Arc<str>,
    query: E,
) -> Result<Vec<Item>, sqlx::Error>
where
    S: Source<'c>,
    E: 'q + Execute<'q, Postgres>,
{
    let mut connection = source.connection().await?;
    pinned(&mut connection, &begin, query).await
}

/// What a [`Pinned`] executor runs statements on: the pool or one connection. An unpinned
/// statement runs on it as sqlx runs it; a pinned one on [`Source::connection`].
pub trait Source<'c>: Executor<'c, Database = Postgres> + 'c {
    /// The connection a pinned statement runs on.
    type Connection: DerefMut<Target = PgConnection> + Send + 'c;

    /// A connection for one pinned statement: taken from the pool, or the one held.
    fn connection(self) -> BoxFuture<'c, Result<Self::Connection, sqlx::Error>>;
}

impl<'p> Source<'p> for &'p PgPool {
    type Connection = PoolConnection<Postgres>;

    fn connection(self) -> BoxFuture<'p, Result<Self::Connection, sqlx::Error>> {
        Box::pin(self.acquire())
    }
}

impl<'c> Source<'c> for &'c mut PgConnection {
    type Connection = Self;

    fn connection(self) -> BoxFuture<'c, Result<Self, sqlx::Error>> {
        Box::pin(std::future::ready(Ok(self)))
    }
}

/// The store's executor: a [`Source`] (the pool or one connection) with a [`Pinning`]. On a
/// direct path every method is the source's own; behind a transaction-mode pooler a statement
/// with parameters runs pinned, in a transaction of its own on [`Source::connection`].
#[derive(Debug)]
pub struct Pinned<S> {
    source: S,
    pinning: Pinning,
}

impl<'c, S: Source<'c>> Executor<'c> for Pinned<S> {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, Result<Item, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let Some(begin) = self.pinning.0 else {
            return self.source.fetch_many(query);
        };
        stream::once(run_pinned(self.source, begin, query))
            .map_ok(|items| stream::iter(items.into_iter().map(Ok)))
            .try_flatten()
            .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let Some(begin) = self.pinning.0 else {
            return self.source.fetch_optional(query);
        };
        let items = run_pinned(self.source, begin, query);
        Box::pin(async move { Ok(first_row(items.await?)) })
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.source.prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<sqlx::Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.source.describe(sql)
    }
}
