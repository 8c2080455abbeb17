//! What one call costs PostgreSQL on the happy path (issue 5's target: at most two round trips
//! per new identity), against a real gateway process.
//!
//! - `new_identity_is_two_statements_and_a_replay_one` counts statements exactly with
//!   `pg_stat_statements`, on a throwaway cluster that preloads it: a new identity is the
//!   reserve `INSERT … ON CONFLICT DO NOTHING` and the complete `UPDATE`; a replay with the
//!   replay cache off is one statement.
//! - `a_conflict_with_a_cached_record_takes_no_statement`: with the replay cache on, conflicts
//!   with records the gateway recorded are answered from memory (docs/semantics.md §12.8).
//! - `new_identity_is_two_round_trips_on_the_wire` counts every request/response exchange on the
//!   gateway's PostgreSQL connections through a counting proxy, which also sees what
//!   `pg_stat_statements` cannot: connection checks, a bare `Sync` with nothing before it (sqlx's
//!   own pool sends one to every connection it takes back, which is why the store's `reserve`
//!   and `complete` use connections of their own, see `carmy_postgres`'s `hot` module).

use carmy_test_support::{call, client, metric, post, Cluster, Replica, TestDb};
use serde_json::{json, Value};
use sqlx::{Connection, PgConnection, Row};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Sequential calls measured per kind.
const CALLS: u64 = 20;

/// A lease so long that no renewal falls into the measurement (ms).
const LONG_LEASE_MS: &str = "3600000";

/// Whether the gateway has a replay cache to turn off (`CARMY_REPLAY_CACHE_ENTRIES`).
fn has_replay_cache() -> bool {
    std::process::Command::new(carmy_test_support::replica::gateway_binary())
        .arg("--help")
        .env_remove("DATABASE_URL")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).contains("CARMY_REPLAY_CACHE_ENTRIES"))
        .unwrap_or(false)
}

/// The gateway's environment: `database_url`, a long lease, the replay cache off.
fn gateway_env(database_url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("DATABASE_URL", database_url.to_owned()),
        ("CARMY_LEASE_TTL_MS", LONG_LEASE_MS.to_owned()),
        ("CARMY_REPLAY_CACHE_ENTRIES", "0".to_owned()),
    ]
}

fn start_gateway(name: &str, env: &[(&'static str, String)]) -> Replica {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Replica::start(name, &env)
}

/// Calls `echo {}` once for each request id, one after the other; asserts each answer.
async fn calls(http: &reqwest::Client, gateway: &Replica, request_ids: &[String], replayed: bool) {
    for request_id in request_ids {
        let (status, body) = post(http, gateway, &call("echo", json!({}), request_id)).await;
        assert_eq!(
            (status, body["replayed"].clone()),
            (200, Value::Bool(replayed)),
            "{request_id}: {body}"
        );
    }
}

fn request_ids(prefix: &str) -> Vec<String> {
    (0..CALLS)
        .map(|index| format!("{prefix}-{index}"))
        .collect()
}

/// The statements `pg_stat_statements` saw in database `database` since the last reset:
/// their total calls and, for messages, each statement's calls and text.
async fn statements_of(observer: &mut PgConnection, database: &str) -> (i64, String) {
    let rows = sqlx::query(
        "SELECT s.calls, left(regexp_replace(s.query, '\\s+', ' ', 'g'), 90) AS query \
         FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid \
         WHERE d.datname = $1 ORDER BY s.calls DESC, query",
    )
    .bind(database)
    .fetch_all(&mut *observer)
    .await
    .unwrap();
    let mut total = 0;
    let mut listing = String::new();
    for row in rows {
        let calls: i64 = row.get("calls");
        let query: String = row.get("query");
        total += calls;
        listing.push_str(&format!("\n  {calls:>4} × {query}"));
    }
    (total, listing)
}

async fn reset_statements(observer: &mut PgConnection) {
    sqlx::raw_sql("SELECT pg_stat_statements_reset()")
        .execute(&mut *observer)
        .await
        .unwrap();
}

/// A cluster of our own with `pg_stat_statements` preloaded (which needs a restart), and an
/// observer connected to its database `postgres` (the gateways work in databases of their own,
/// so the observer's queries never count).
async fn statements_cluster() -> (Cluster, PgConnection) {
    let cluster = Cluster::start();
    {
        let mut admin = PgConnection::connect(&cluster.url()).await.unwrap();
        sqlx::raw_sql("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
            .execute(&mut admin)
            .await
            .unwrap();
        let _ = admin.close().await;
    }
    cluster.stop();
    cluster.start_again();
    let mut observer = PgConnection::connect(&cluster.url()).await.unwrap();
    sqlx::raw_sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(&mut observer)
        .await
        .expect("pg_stat_statements is installed with the PostgreSQL server");
    (cluster, observer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_identity_is_two_statements_and_a_replay_one() {
    let (cluster, mut observer) = statements_cluster().await;
    sqlx::raw_sql("CREATE DATABASE carmy_rt")
        .execute(&mut observer)
        .await
        .unwrap();
    let database_url = format!("postgres://postgres@127.0.0.1:{}/carmy_rt", cluster.port);
    let gateway = start_gateway("round-trips-statements", &gateway_env(&database_url));
    let http = client();

    // Warm-up: the first call of each kind (connection set-up, statement preparation).
    let warm = request_ids("warm");
    calls(&http, &gateway, &warm[..1], false).await;
    calls(&http, &gateway, &warm[..1], true).await;

    let ids = request_ids("new");
    reset_statements(&mut observer).await;
    calls(&http, &gateway, &ids, false).await;
    let (statements, listing) = statements_of(&mut observer, "carmy_rt").await;
    assert_eq!(
        statements,
        2 * CALLS as i64,
        "{CALLS} new identities must take exactly two statements each (reserve, complete); \
         pg_stat_statements saw:{listing}"
    );

    reset_statements(&mut observer).await;
    calls(&http, &gateway, &ids, true).await;
    let (statements, listing) = statements_of(&mut observer, "carmy_rt").await;
    if has_replay_cache() {
        assert_eq!(
            statements, CALLS as i64,
            "with CARMY_REPLAY_CACHE_ENTRIES=0, {CALLS} replays must take exactly one statement \
             each; pg_stat_statements saw:{listing}"
        );
    } else {
        assert!(
            statements <= CALLS as i64,
            "{CALLS} replays must take at most one statement each; pg_stat_statements \
             saw:{listing}"
        );
    }
    drop(gateway);
}

/// Issue 39, item 3: with the replay cache on (its default), a conflict with a record this
/// replica recorded is answered from the cache, `differs` included (docs/semantics.md §12.8):
/// no statement reaches PostgreSQL. Replays too; and both are answered before the engine
/// reserves anything (§8.4): the store's `reserve` is not timed for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_with_a_cached_record_takes_no_statement() {
    let (cluster, mut observer) = statements_cluster().await;
    sqlx::raw_sql("CREATE DATABASE carmy_conflict")
        .execute(&mut observer)
        .await
        .unwrap();
    let database_url = format!(
        "postgres://postgres@127.0.0.1:{}/carmy_conflict",
        cluster.port
    );
    let mut env = gateway_env(&database_url);
    env.retain(|(name, _)| *name != "CARMY_REPLAY_CACHE_ENTRIES");
    // No background statement in the counted window: no pruning, no reconciliation sweep.
    env.push(("CARMY_PRUNE_INTERVAL_MS", "3600000".to_owned()));
    env.push(("CARMY_RECONCILE_INTERVAL_MS", "3600000".to_owned()));
    let gateway = start_gateway("round-trips-conflicts", &env);
    let http = client();
    let ids = request_ids("conflict");
    calls(&http, &gateway, &ids, false).await;

    let reserves = "carmy_store_reserve_duration_seconds_count";
    let reserved_before = metric(&http, &gateway, reserves).await;
    reset_statements(&mut observer).await;
    calls(&http, &gateway, &ids, true).await;
    for request_id in &ids {
        let body = call("echo", json!({"other": true}), request_id);
        let (status, body) = post(&http, &gateway, &body).await;
        assert_eq!(
            (status, &body["code"], &body["differs"]),
            (409, &json!("IDEMPOTENCY_CONFLICT"), &json!(["arguments"])),
            "{request_id}: {body}"
        );
    }
    let (statements, listing) = statements_of(&mut observer, "carmy_conflict").await;
    assert_eq!(
        statements, 0,
        "{CALLS} replays of and conflicts with cached records must take no statement; \
         pg_stat_statements saw:{listing}"
    );
    assert_eq!(
        (reserved_before, metric(&http, &gateway, reserves).await),
        (CALLS, CALLS),
        "only the {CALLS} new identities reach the store's reserve"
    );
    drop(gateway);
}

/// How long a backend may keep its counts before reporting them to `pg_stat_database` once it
/// is idle (PostgreSQL reports at most once a second, and an idle backend within 10 s).
const STATS_SETTLE: std::time::Duration = std::time::Duration::from_millis(11_000);

/// `pg_stat_database.xact_commit` of each of `databases`, once every backend reported
/// ([`STATS_SETTLE`] after the last call).
async fn settled_commits(observer: &mut PgConnection, databases: &[&str]) -> Vec<i64> {
    tokio::time::sleep(STATS_SETTLE).await;
    let mut commits = Vec::new();
    for database in databases {
        let row = sqlx::query("SELECT xact_commit FROM pg_stat_database WHERE datname = $1")
            .bind(database)
            .fetch_one(&mut *observer)
            .await
            .unwrap();
        commits.push(row.get::<i64, _>("xact_commit"));
    }
    commits
}

/// Issue 30, item 2: a lone caller pays nothing for group commit. Two gateways on databases of
/// their own, one with batching (the default) and one without (`CARMY_DB_BATCH_MAX_ROWS=1`),
/// take the same sequential new identities: the statements `pg_stat_statements` sees (text and
/// calls) and the commits `pg_stat_database` counts must be exactly the same, two per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_caller_costs_the_same_statements_and_commits_with_batching_on_and_off() {
    let (cluster, mut observer) = statements_cluster().await;
    let databases = ["carmy_batched", "carmy_unbatched"];
    let mut gateways = Vec::new();
    for database in databases {
        sqlx::raw_sql(&format!("CREATE DATABASE {database}"))
            .execute(&mut observer)
            .await
            .unwrap();
        let url = format!("postgres://postgres@127.0.0.1:{}/{database}", cluster.port);
        let mut env = gateway_env(&url);
        // No background statement in the counted window: no pruning, no reconciliation sweep.
        env.push(("CARMY_RETENTION", "0".to_owned()));
        env.push(("CARMY_PRUNE_INTERVAL_MS", "3600000".to_owned()));
        env.push(("CARMY_RECONCILE_INTERVAL_MS", "3600000".to_owned()));
        if database == "carmy_unbatched" {
            env.push(("CARMY_DB_BATCH_MAX_ROWS", "1".to_owned()));
        }
        gateways.push(start_gateway(&format!("lone-{database}"), &env));
    }
    let http = client();
    for gateway in &gateways {
        calls(&http, gateway, &request_ids("warm"), false).await;
    }
    let before = settled_commits(&mut observer, &databases).await;
    reset_statements(&mut observer).await;
    let mut listings = Vec::new();
    for gateway in &gateways {
        calls(&http, gateway, &request_ids("lone"), false).await;
    }
    for database in databases {
        listings.push(statements_of(&mut observer, database).await);
    }
    let after = settled_commits(&mut observer, &databases).await;
    drop(gateways);
    let commits: Vec<i64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let [(batched, batched_listing), (unbatched, unbatched_listing)] =
        <[_; 2]>::try_from(listings).unwrap();
    assert_eq!(
        (batched, unbatched),
        (2 * CALLS as i64, 2 * CALLS as i64),
        "{CALLS} sequential new identities: two statements each, batching on or off; \
         batching on:{batched_listing}\nbatching off:{unbatched_listing}"
    );
    assert_eq!(
        batched_listing, unbatched_listing,
        "a lone caller must run the same statements with batching on as with it off"
    );
    // Batching on: exactly two commits per call. Batching off may count a few more in the
    // window (a connection its pool opens there commits its own setup), never fewer.
    assert_eq!(
        commits[0],
        2 * CALLS as i64,
        "{CALLS} sequential new identities with batching on: two commits each ({commits:?})"
    );
    assert!(
        commits[1] >= commits[0],
        "batching on may not commit more than batching off: {commits:?}"
    );
}

/// Round trips on the client side of the PostgreSQL protocol: each `Sync` or `Query` message
/// ends one (the client then waits for `ReadyForQuery`).
#[derive(Default)]
struct WireCounts {
    /// Round trips that executed a statement (`Execute` before the `Sync`, or a `Query`).
    statements: AtomicU64,
    /// Round trips that only prepared one (`Parse` without `Execute`).
    prepares: AtomicU64,
    /// Round trips that carried nothing: connection checks.
    pings: AtomicU64,
}

impl WireCounts {
    fn read(&self) -> [u64; 3] {
        [
            self.statements.load(Ordering::SeqCst),
            self.prepares.load(Ordering::SeqCst),
            self.pings.load(Ordering::SeqCst),
        ]
    }
}

/// Reads the client's messages: untyped ones until the startup message (after an optional
/// `SSLRequest`), then type byte + length.
async fn count_client_messages(
    mut from_client: tokio::net::tcp::OwnedReadHalf,
    mut to_server: tokio::net::tcp::OwnedWriteHalf,
    counts: Arc<WireCounts>,
) {
    let mut buffer = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut typed = false;
    let (mut executes, mut parsed) = (0u64, false);
    loop {
        let read = match from_client.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if to_server.write_all(&chunk[..read]).await.is_err() {
            break;
        }
        buffer.extend_from_slice(&chunk[..read]);
        let mut at = 0;
        loop {
            let rest = &buffer[at..];
            let header = if typed { 5 } else { 8 };
            if rest.len() < header {
                break;
            }
            let offset = usize::from(typed);
            let length = u32::from_be_bytes(rest[offset..offset + 4].try_into().unwrap()) as usize;
            if rest.len() < offset + length {
                break;
            }
            if !typed {
                // 80877103 is an SSLRequest; anything else here is the startup message.
                typed = u32::from_be_bytes(rest[4..8].try_into().unwrap()) != 80_877_103;
            } else {
                match rest[0] {
                    b'P' => parsed = true,
                    b'E' => executes += 1,
                    b'Q' => {
                        counts.statements.fetch_add(1, Ordering::SeqCst);
                    }
                    b'S' => {
                        let counter = if executes > 0 {
                            &counts.statements
                        } else if parsed {
                            &counts.prepares
                        } else {
                            &counts.pings
                        };
                        counter.fetch_add(1, Ordering::SeqCst);
                        (executes, parsed) = (0, false);
                    }
                    _ => {}
                }
            }
            at += offset + length;
        }
        buffer.drain(..at);
    }
    let _ = to_server.shutdown().await;
}

/// A loopback proxy to `upstream` that counts the round trips of every connection.
async fn counting_proxy(upstream: String) -> (u16, Arc<WireCounts>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let counts = Arc::new(WireCounts::default());
    let shared = Arc::clone(&counts);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                continue;
            };
            let (client_read, mut client_write) = client.into_split();
            let (mut server_read, server_write) = server.into_split();
            tokio::spawn(count_client_messages(
                client_read,
                server_write,
                Arc::clone(&shared),
            ));
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                let _ = client_write.shutdown().await;
            });
        }
    });
    (port, counts)
}

/// `url` with its host and port replaced by `127.0.0.1:<port>` and TLS off (the proxy must read
/// the protocol).
pub(crate) fn via_proxy(url: &str, port: u16) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let user = authority
        .rsplit_once('@')
        .map(|(user, _)| format!("{user}@"))
        .unwrap_or_default();
    let database = path.split_once('?').map_or(path, |(database, _)| database);
    format!("{scheme}://{user}127.0.0.1:{port}/{database}?sslmode=disable")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_identity_is_two_round_trips_on_the_wire() {
    let db = TestDb::create().await;
    let options: sqlx::postgres::PgConnectOptions = db.url.parse().unwrap();
    let upstream = format!("{}:{}", options.get_host(), options.get_port());
    let (port, counts) = counting_proxy(upstream).await;
    let gateway = start_gateway("round-trips-wire", &gateway_env(&via_proxy(&db.url, port)));
    let http = client();

    // Warm-up: calls of each kind prepare the statements on the connections used.
    let warm = request_ids("warm");
    calls(&http, &gateway, &warm, false).await;
    calls(&http, &gateway, &warm, true).await;

    let ids = request_ids("new");
    let before = counts.read();
    calls(&http, &gateway, &ids, false).await;
    let after_new = counts.read();
    calls(&http, &gateway, &ids, true).await;
    let after_replay = counts.read();
    let per_call = |from: [u64; 3], to: [u64; 3]| {
        let [statements, prepares, pings] = [0, 1, 2].map(|i| to[i] - from[i]);
        (
            statements + prepares + pings,
            format!(
                "{statements} statements, {prepares} prepares, {pings} connection checks over \
                 {CALLS} calls"
            ),
        )
    };
    let (new_trips, new_detail) = per_call(before, after_new);
    let (replay_trips, replay_detail) = per_call(after_new, after_replay);
    drop(gateway);
    assert!(
        new_trips <= 2 * CALLS,
        "a new identity must take at most two round trips: {new_detail}"
    );
    assert!(
        replay_trips <= CALLS,
        "a replay (replay cache off) must take at most one round trip: {replay_detail}"
    );
}
