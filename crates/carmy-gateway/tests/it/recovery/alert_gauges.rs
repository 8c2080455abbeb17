//! The alert gauges of `GET /metrics` (docs/semantics.md §13, `deploy/carmy.rules.yml`), read
//! from PostgreSQL at each scrape by real `carmy-gateway` replicas: interrupted executions per
//! tool, the age of the oldest, and the decisions waiting for a person (a tool without a
//! probe at once; a tool with one once its probes are used up), back to 0 once decided; and
//! every metric the alerting rules query is one a replica exposes, under that exact name.

use super::reconciling::{payment_call, Reconciling, WAIT};
use crate::tools_file::write_tools_file;
use carmy_test_support::{eventually, Replica};

/// `unprobed` has no probe; `down`'s probe always fails; `quiet` is never interrupted.
fn tools(base: &str) -> std::path::PathBuf {
    write_tools_file(&format!(
        "[[tools]]\nname = \"unprobed\"\nurl = \"{base}/pay/commit-unprobed\"\n\n\
         [[tools]]\nname = \"down\"\nurl = \"{base}/pay/commit-down\"\n\
         [tools.reconcile]\nurl = \"{base}/lookup-down?idempotency_key={{execution_id}}\"\n\
         timeout_ms = 2000\n\n\
         [[tools]]\nname = \"quiet\"\nurl = \"{base}/pay/ok-quiet\"\n"
    ))
}

/// The samples of the three gauges for `tool`: (interrupted, pending, oldest age in seconds).
async fn gauges(http: &reqwest::Client, replica: &Replica, tool: &str) -> (f64, f64, f64) {
    let text = http
        .get(replica.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let sample = |name: &str| {
        let prefix = format!("{name}{{tool=\"{tool}\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .map(|value| value.trim().parse::<f64>().unwrap())
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
    };
    (
        sample("carmy_interrupted_executions"),
        sample("carmy_decisions_pending"),
        sample("carmy_interrupted_oldest_age_seconds"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn interrupted_executions_and_pending_decisions_are_gauges_per_tool() {
    let fixture = Reconciling::start(tools, &[]).await;
    let http = fixture.http.clone();
    let extra = [("CARMY_RECONCILE_MAX_ATTEMPTS", "1")];
    let mut a = fixture.replica("gauges-a", &extra);
    let b = fixture.replica("gauges-b", &extra);
    for tool in ["unprobed", "down", "quiet"] {
        assert_eq!(gauges(&http, &b, tool).await, (0.0, 0.0, 0.0), "{tool}");
    }

    let unprobed = fixture
        .interrupt_one(
            &mut a,
            &b,
            &payment_call("unprobed", "gauges-1"),
            "/pay/commit-unprobed",
        )
        .await;
    a.restart();
    fixture
        .interrupt_one(
            &mut a,
            &b,
            &payment_call("down", "gauges-2"),
            "/pay/commit-down",
        )
        .await;

    // Without a probe it waits for a person at once; with one, once its one probe failed.
    let (interrupted, pending, age) = gauges(&http, &b, "unprobed").await;
    assert_eq!((interrupted, pending), (1.0, 1.0));
    assert!(age > 0.0 && age < WAIT.as_secs_f64() * 3.0, "{age}");
    eventually(WAIT, "the probe of down is used up", || async {
        let (interrupted, pending, _) = gauges(&http, &b, "down").await;
        (interrupted == 1.0 && pending == 1.0)
            .then_some(())
            .ok_or((interrupted, pending))
    })
    .await;
    assert_eq!(gauges(&http, &b, "quiet").await, (0.0, 0.0, 0.0));
    // Every replica reads the same store: a, restarted, says the same.
    a.restart();
    assert_eq!(gauges(&http, &a, "unprobed").await.0, 1.0);
    // The oldest ages as the clock runs.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert!(gauges(&http, &b, "unprobed").await.2 >= age + 1.0);

    // Decided: back to 0.
    let mut connection = fixture.db.connect().await;
    sqlx::query(
        "SELECT carmy.resolve_execution($1, 'completed', '{\"payment_id\": \"pay_1\"}', NULL, \
         'found in the ledger', 'dba:carol')",
    )
    .bind(&unprobed)
    .execute(&mut connection)
    .await
    .unwrap();
    assert_eq!(gauges(&http, &b, "unprobed").await, (0.0, 0.0, 0.0));
}

/// The identifiers starting with `carmy_` in `text`, sorted, once each.
fn metric_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("carmy_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names.sort();
    names.dedup();
    names
}

/// A renamed metric would leave an alert of `deploy/carmy.rules.yml` that can never fire:
/// each name the rules query has a sample on a replica's `/metrics` (one with a tool that
/// has a probe, on PostgreSQL), before anything happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_alerting_rules_query_only_metrics_a_replica_exposes() {
    let fixture = Reconciling::start(tools, &[]).await;
    let replica = fixture.replica("rules-names", &[]);
    let text = fixture
        .http
        .get(replica.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let rules = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/carmy.rules.yml"
    ))
    .unwrap();
    let names = metric_names(&rules);
    assert_eq!(
        names,
        [
            "carmy_decisions_pending",
            "carmy_interrupted_oldest_age_seconds",
            "carmy_late_arrivals_contradicting_total",
            "carmy_late_arrivals_total",
            "carmy_lease_renewal_failures_total",
            "carmy_reconciliations_total",
        ]
    );
    let exposed = |name: &str| {
        text.lines().any(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
    };
    for name in &names {
        assert!(
            exposed(name),
            "the alerting rules query {name}, which /metrics does not expose\n{text}"
        );
    }
    assert!(!exposed("carmy_interrupted_oldest_age"));
    assert!(text.contains("carmy_reconciliations_total{tool=\"down\",result=\"inconclusive\"} 0"));
}
