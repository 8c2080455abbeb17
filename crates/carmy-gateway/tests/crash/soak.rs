//! Soak under faults: two gateway replicas on a throwaway PostgreSQL cluster, driven by a mix of
//! new calls, retries, conflicting calls and slow calls, while replicas are killed (`kill -9`)
//! and restarted and PostgreSQL is restarted. Afterwards the invariants are checked from the
//! database and by replaying every answer the clients saw.
//!
//! Bounded in time (`CARMY_SOAK_SECONDS`, default 20) and loopback only. The long run:
//! `CARMY_SOAK_SECONDS=600 scripts/test -p carmy-gateway --features fault-injection --test crash
//! soak -- --nocapture`.

use carmy_test_support::{client, Cluster, Replica};
use serde_json::{json, Value};
use sqlx::Connection;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

const CLIENTS: usize = 8;

/// A reproducible xorshift generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What the clients sent and saw for one identity.
#[derive(Default)]
struct Identity {
    body: Value,
    /// The first 200 answer, without `replayed`.
    answer: Option<Value>,
}

#[derive(Default)]
struct Counts {
    calls: AtomicU64,
    ok: AtomicU64,
    conflict: AtomicU64,
    uncertain: AtomicU64,
    unavailable: AtomicU64,
    not_executed: AtomicU64,
    transport_errors: AtomicU64,
    other: AtomicU64,
    violations: AtomicU64,
}

fn without_replayed(mut answer: Value) -> Value {
    if let Some(object) = answer.as_object_mut() {
        object.remove("replayed");
    }
    answer
}

async fn client_loop(
    id: usize,
    bases: Arc<RwLock<Vec<String>>>,
    identities: Arc<Mutex<BTreeMap<String, Identity>>>,
    counts: Arc<Counts>,
    deadline: Instant,
) {
    let http = client();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (id as u64 + 1));
    let mut sequence = 0u64;
    while Instant::now() < deadline {
        sequence += 1;
        // Identities with a recorded answer: certainly reserved, so a changed call must conflict.
        let recorded: Vec<String> = identities
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, identity)| identity.answer.is_some())
            .map(|(request_id, _)| request_id.clone())
            .collect();
        let (request_id, body, conflicting) = match rng.below(10) {
            // retry an identity that has an answer
            0..=2 if !recorded.is_empty() => {
                let request_id = recorded[rng.below(recorded.len() as u64) as usize].clone();
                let body = identities.lock().unwrap()[&request_id].body.clone();
                (request_id, body, false)
            }
            // the same identity with other arguments
            3 if !recorded.is_empty() => {
                let request_id = recorded[rng.below(recorded.len() as u64) as usize].clone();
                let mut body = identities.lock().unwrap()[&request_id].body.clone();
                if body["tool"] == "sleep" {
                    body["arguments"]["ms"] = json!(body["arguments"]["ms"].as_u64().unwrap() + 1);
                } else {
                    body["arguments"]["note"] = json!("conflicting");
                }
                (request_id, body, true)
            }
            4 => {
                let request_id = format!("slow-{id}-{sequence}");
                let body = json!({"tool": "sleep", "arguments": {"ms": 200 + rng.below(600)}, "request_id": request_id});
                (request_id, body, false)
            }
            _ => {
                let request_id = format!("order-{id}-{sequence}");
                let body = json!({"tool": "create_order", "arguments": {"sku": request_id}, "request_id": request_id});
                (request_id, body, false)
            }
        };
        if !conflicting {
            identities
                .lock()
                .unwrap()
                .entry(request_id.clone())
                .or_insert_with(|| Identity {
                    body: body.clone(),
                    answer: None,
                });
        }
        let base = {
            let bases = bases.read().unwrap();
            bases[rng.below(bases.len() as u64) as usize].clone()
        };
        counts.calls.fetch_add(1, Ordering::Relaxed);
        let sent = http
            .post(format!("{base}/v1/executions"))
            .header("content-type", "application/json")
            .timeout(Duration::from_secs(5))
            .body(body.to_string())
            .send()
            .await;
        let Ok(response) = sent else {
            counts.transport_errors.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let status = response.status().as_u16();
        let Ok(answer) = response.json::<Value>().await else {
            counts.transport_errors.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        match (status, answer["code"].as_str()) {
            (200, _) => {
                counts.ok.fetch_add(1, Ordering::Relaxed);
                if conflicting {
                    eprintln!("VIOLATION: a conflicting call ran or replayed: {body} -> {answer}");
                    counts.violations.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let answer = without_replayed(answer);
                let mut identities = identities.lock().unwrap();
                let identity = identities.get_mut(&request_id).unwrap();
                match &identity.answer {
                    None => identity.answer = Some(answer),
                    Some(first) if *first != answer => {
                        eprintln!("VIOLATION: two different answers for {request_id}: {first} vs {answer}");
                        counts.violations.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(_) => {}
                }
            }
            (409, Some("IDEMPOTENCY_CONFLICT")) => {
                counts.conflict.fetch_add(1, Ordering::Relaxed);
                if !conflicting {
                    eprintln!("VIOLATION: an honest retry got a conflict: {body} -> {answer}");
                    counts.violations.fetch_add(1, Ordering::Relaxed);
                }
            }
            (409 | 503, Some("EXECUTION_UNCERTAIN")) => {
                counts.uncertain.fetch_add(1, Ordering::Relaxed);
            }
            (503, Some("STORE_UNAVAILABLE")) => {
                counts.unavailable.fetch_add(1, Ordering::Relaxed);
            }
            // The order book could not be reached: released, nothing recorded (§4.1).
            (503, Some("ORDER_BOOK_UNAVAILABLE")) => {
                counts.not_executed.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                eprintln!("VIOLATION: unexpected answer {status}: {body} -> {answer}");
                counts.other.fetch_add(1, Ordering::Relaxed);
                counts.violations.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Starts a replica on a fixed address (so clients keep their URLs across restarts).
fn start_replica(name: &str, listen: &str, url: &str) -> Replica {
    Replica::start(
        name,
        &[
            ("DATABASE_URL", url),
            ("CARMY_LISTEN", listen),
            ("CARMY_LEASE_TTL_MS", "2000"),
            ("CARMY_DB_ACQUIRE_TIMEOUT_MS", "1000"),
            ("CARMY_DRAIN_MS", "3000"),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn soak_under_faults() {
    let seconds: u64 = std::env::var("CARMY_SOAK_SECONDS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(20);
    let cluster = Arc::new(Cluster::start());
    let url = cluster.url();
    let ports: Vec<String> = (0..2)
        .map(|_| {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            format!("127.0.0.1:{port}")
        })
        .collect();
    let replicas: Arc<Mutex<Vec<Replica>>> = Arc::new(Mutex::new(
        ports
            .iter()
            .enumerate()
            .map(|(i, listen)| start_replica(&format!("soak-{i}"), listen, &url))
            .collect(),
    ));
    let bases = Arc::new(RwLock::new(
        replicas
            .lock()
            .unwrap()
            .iter()
            .map(|replica| replica.base.clone())
            .collect::<Vec<_>>(),
    ));
    let identities = Arc::new(Mutex::new(BTreeMap::<String, Identity>::new()));
    let counts = Arc::new(Counts::default());
    let deadline = Instant::now() + Duration::from_secs(seconds);

    // Chaos: one fault at a time, every 1.5-3 s, until the deadline.
    let killed_pids = Arc::new(Mutex::new(Vec::<u32>::new()));
    let (kills, database_restarts) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let chaos_done = Arc::new(AtomicBool::new(false));
    let chaos = {
        let (replicas, cluster, killed_pids) =
            (replicas.clone(), cluster.clone(), killed_pids.clone());
        let (kills, database_restarts, chaos_done) =
            (kills.clone(), database_restarts.clone(), chaos_done.clone());
        let (ports, url) = (ports.clone(), url.clone());
        tokio::task::spawn_blocking(move || {
            let mut rng = Rng(0x2545_f491_4f6c_dd1d);
            while Instant::now() + Duration::from_secs(3) < deadline {
                std::thread::sleep(Duration::from_millis(1500 + rng.below(1500)));
                if rng.below(3) == 0 {
                    cluster.stop();
                    std::thread::sleep(Duration::from_millis(500 + rng.below(1000)));
                    cluster.start_again();
                    database_restarts.fetch_add(1, Ordering::Relaxed);
                } else {
                    let index = rng.below(2) as usize;
                    let mut replicas = replicas.lock().unwrap();
                    if let Some(pid) = replicas[index].pid() {
                        killed_pids.lock().unwrap().push(pid);
                    }
                    replicas[index].kill9();
                    kills.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(200 + rng.below(800)));
                    let name = format!("soak-{index}-{}", kills.load(Ordering::Relaxed));
                    replicas[index] = start_replica(&name, &ports[index], &url);
                }
            }
            chaos_done.store(true, Ordering::Relaxed);
        })
    };

    let workers: Vec<_> = (0..CLIENTS)
        .map(|id| {
            tokio::spawn(client_loop(
                id,
                bases.clone(),
                identities.clone(),
                counts.clone(),
                deadline,
            ))
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    chaos.await.unwrap();
    assert!(chaos_done.load(Ordering::Relaxed));

    // Let background recordings finish, then check every answer the clients saw replays.
    let http = client();
    let base = bases.read().unwrap()[0].clone();
    let mut replays_checked = 0u64;
    let snapshot: Vec<(String, Value, Option<Value>)> = identities
        .lock()
        .unwrap()
        .iter()
        .map(|(request_id, identity)| {
            (
                request_id.clone(),
                identity.body.clone(),
                identity.answer.clone(),
            )
        })
        .collect();
    for (request_id, body, answer) in &snapshot {
        let Some(answer) = answer else { continue };
        let mut replay = Value::Null;
        for _ in 0..100 {
            let response = http
                .post(format!("{base}/v1/executions"))
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            replay = response.json().await.unwrap();
            if replay["code"] != "EXECUTION_UNCERTAIN" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        replays_checked += 1;
        if replay["replayed"] != true || without_replayed(replay.clone()) != *answer {
            eprintln!(
                "VIOLATION: {request_id} does not replay what the client saw: {answer} vs {replay}"
            );
            counts.violations.fetch_add(1, Ordering::Relaxed);
        }
    }

    // Stop the replicas cleanly: everything they still hold is recorded or cancelled.
    for replica in replicas.lock().unwrap().iter_mut() {
        assert!(replica.terminate(), "a replica exited uncleanly");
    }
    let mut database = sqlx::PgConnection::connect(&url).await.unwrap();
    let more_than_one_order: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT sku FROM carmy.example_orders GROUP BY sku HAVING count(*) > 1) AS duplicated",
    )
    .fetch_one(&mut database)
    .await
    .unwrap();
    let killed: Vec<i32> = killed_pids
        .lock()
        .unwrap()
        .iter()
        .map(|pid| i32::try_from(*pid).unwrap())
        .collect();
    let running_without_a_killed_owner: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM carmy.reservations r LEFT JOIN carmy.instances i ON i.instance_id = r.owner_instance \
         WHERE r.state = 'running' AND (i.pid IS NULL OR NOT (i.pid = ANY($1)))",
    )
    .bind(&killed)
    .fetch_one(&mut database)
    .await
    .unwrap();
    // A record that does not say "effect unknown" tells the truth: a failed create_order
    // without it never has an order (docs/semantics.md §4.1).
    let failed_with_an_order: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM carmy.reservations r \
         WHERE r.tool = 'create_order' AND r.state = 'failed' \
         AND (r.outcome::jsonb -> 'error' ->> 'effect') IS DISTINCT FROM 'unknown' \
         AND EXISTS (SELECT 1 FROM carmy.example_orders o WHERE o.sku = r.request_id)",
    )
    .fetch_one(&mut database)
    .await
    .unwrap();
    let effect_unknown: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM carmy.reservations \
         WHERE state <> 'running' AND (outcome::jsonb -> 'error' ->> 'effect') = 'unknown'",
    )
    .fetch_one(&mut database)
    .await
    .unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM carmy.reservations")
        .fetch_one(&mut database)
        .await
        .unwrap();
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM carmy.example_orders")
        .fetch_one(&mut database)
        .await
        .unwrap();
    let sent = identities.lock().unwrap().len() as i64;
    for (what, bad) in [
        (
            "create_order identities with more than one order",
            more_than_one_order,
        ),
        (
            "running rows whose owner was not killed",
            running_without_a_killed_owner,
        ),
        ("rows beyond the identities sent", (rows - sent).max(0)),
        (
            "failed create_order records without effect unknown that have an order",
            failed_with_an_order,
        ),
    ] {
        if bad > 0 {
            eprintln!("VIOLATION: {bad} {what}");
            counts.violations.fetch_add(1, Ordering::Relaxed);
        }
    }

    let c = &counts;
    println!(
        "soak: {seconds} s, {} calls ({} ok, {} conflict, {} uncertain, {} unavailable, {} not executed, \
         {} transport errors), {} identities, {rows} rows ({effect_unknown} effect unknown), \
         {orders} orders, {replays_checked} replays checked, \
         {} replica kills, {} PostgreSQL restarts, violations = {}",
        c.calls.load(Ordering::Relaxed),
        c.ok.load(Ordering::Relaxed),
        c.conflict.load(Ordering::Relaxed),
        c.uncertain.load(Ordering::Relaxed),
        c.unavailable.load(Ordering::Relaxed),
        c.not_executed.load(Ordering::Relaxed),
        c.transport_errors.load(Ordering::Relaxed),
        sent,
        kills.load(Ordering::Relaxed),
        database_restarts.load(Ordering::Relaxed),
        c.violations.load(Ordering::Relaxed),
    );
    assert_eq!(
        counts.violations.load(Ordering::Relaxed),
        0,
        "see VIOLATION lines above"
    );
    assert!(
        kills.load(Ordering::Relaxed) + database_restarts.load(Ordering::Relaxed) > 0,
        "no fault was injected"
    );
}
