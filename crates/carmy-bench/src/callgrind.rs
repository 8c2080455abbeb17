//! Instructions per call, counted by callgrind (valgrind): the gateway's CPU cost in a unit
//! that does not move with the machine's load or the disk, so a regression shows whatever else
//! the run measured.
//!
//! One gateway runs under `valgrind --tool=callgrind` on the bench database (PostgreSQL store,
//! the main gateway's settings). For each kind of call (a new identity and a replay, over
//! `POST /v1/executions` and over `/mcp`) it makes [`WARM_UP`] calls, zeroes the counters
//! (`callgrind_control --zero`), makes [`CALLS`] sequential calls on one kept-alive connection
//! and dumps the counters (`callgrind_control --dump`): the dump's total, divided by the calls,
//! is the figure. Everything the process ran in between counts (the HTTP server, the engine,
//! the store's statements as sqlx encodes and decodes them, the background tasks), nothing of
//! PostgreSQL. Replays are of the identities its counted new identities made (the other steps
//! may have emptied the table), each replayed once uncounted first.
//!
//! A second gateway with group commit off (`CARMY_DB_BATCH_MAX_ROWS=1`) then counts new
//! identities alone, the lone caller's comparison (issue 30).
//!
//! Needs `valgrind` on `PATH` (`scripts/bench` installs it on Debian when missing); without it
//! the figures are skipped.

use crate::gateway::Gateway;
use crate::load::{self, Scenario};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Calls of each kind counted.
pub const CALLS: usize = 200;
/// Uncounted calls of each kind before (statements prepared, caches filled).
pub const WARM_UP: usize = 30;

/// Instructions per call of each kind.
#[derive(Clone, Debug, Serialize)]
pub struct Instructions {
    /// Calls counted per kind.
    pub calls: usize,
    /// A new identity over `POST /v1/executions`.
    pub http_new_identity: f64,
    /// A replay over `POST /v1/executions` (replay cache on).
    pub http_replay: f64,
    /// A new identity over `/mcp` (`tools/call`).
    pub mcp_new_identity: f64,
    /// A replay over `/mcp`.
    pub mcp_replay: f64,
    /// A new identity over `POST /v1/executions` on a gateway with group commit off
    /// (`CARMY_DB_BATCH_MAX_ROWS=1`), when the gateway has the setting: what a lone caller
    /// would cost without batching, against [`Instructions::http_new_identity`].
    pub http_new_identity_unbatched: Option<f64>,
}

/// Whether `program` is on `PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Counts the instructions per call of `binary` on `database_url` with `env`; `Ok(None)` (with
/// a note on standard error) when valgrind is not installed. The dumps are kept in `keep` when
/// given (for `callgrind_annotate`), else written to a temporary directory and deleted.
///
/// # Errors
/// When the gateway does not start under valgrind, a call fails, or a dump cannot be read.
pub async fn measure(
    binary: &Path,
    database_url: &str,
    env: &[(&'static str, String)],
    keep: Option<&Path>,
) -> Result<Option<Instructions>, String> {
    if !on_path("valgrind") || !on_path("callgrind_control") {
        eprintln!("instructions per call: skipped (valgrind is not installed)");
        return Ok(None);
    }
    let dir = keep.map_or_else(
        || {
            std::env::temp_dir().join(format!(
                "carmy-bench-callgrind-{}",
                uuid::Uuid::new_v4().simple()
            ))
        },
        Path::to_path_buf,
    );
    std::fs::create_dir_all(&dir)
        .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
    // A kept directory may hold an earlier run's dumps, which would be read as this run's.
    remove_dumps(&dir);
    remove_dumps(&dir.join("unbatched"));
    let wrapper = callgrind_wrapper(&dir);
    eprintln!("instructions per call: starting the gateway under callgrind");
    let mut gateway = Gateway::start_under(
        &wrapper,
        Duration::from_secs(300),
        binary,
        "callgrind",
        database_url,
        env,
    )?;
    let counted = count_all(&gateway, &dir).await;
    gateway.stop();
    let mut counted = match counted {
        Ok(counted) => counted,
        Err(error) => {
            if keep.is_none() {
                let _ = std::fs::remove_dir_all(&dir);
            }
            return Err(error);
        }
    };
    if crate::gateway::has_setting(binary, "CARMY_DB_BATCH_MAX_ROWS") {
        let unbatched_dir = dir.join("unbatched");
        let mut env = env.to_vec();
        env.push(("CARMY_DB_BATCH_MAX_ROWS", "1".to_owned()));
        let outcome = count_unbatched(binary, database_url, &env, &unbatched_dir).await;
        counted.http_new_identity_unbatched = Some(outcome?);
    }
    if keep.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(Some(counted))
}

/// Deletes the files `callgrind.out*` in `dir`, if any.
fn remove_dumps(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("callgrind.out")
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The wrapper that runs a gateway under callgrind, its dumps going to `dir`.
fn callgrind_wrapper(dir: &Path) -> Vec<String> {
    vec![
        "valgrind".to_owned(),
        "--tool=callgrind".to_owned(),
        format!(
            "--callgrind-out-file={}",
            dir.join("callgrind.out").display()
        ),
        "--dump-instr=no".to_owned(),
    ]
}

/// Instructions per new identity over HTTP of a gateway started under callgrind with `env`
/// (group commit off), dumps going to `dir`.
async fn count_unbatched(
    binary: &Path,
    database_url: &str,
    env: &[(&'static str, String)],
    dir: &Path,
) -> Result<f64, String> {
    std::fs::create_dir_all(dir)
        .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
    eprintln!("instructions per call: new identity, group commit off");
    let mut gateway = Gateway::start_under(
        &callgrind_wrapper(dir),
        Duration::from_secs(300),
        binary,
        "callgrind-unbatched",
        database_url,
        env,
    )?;
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let bodies = |kind: &str, calls: usize| -> Vec<String> {
        (0..calls)
            .map(|index| load::call_body(&format!("cg-{tag}-{kind}-{index}"), false))
            .collect()
    };
    let counted = async {
        load::sequential(
            gateway.address,
            Scenario::NewIdentity,
            &bodies("warm", WARM_UP),
        )
        .await?;
        control(&gateway, "--zero")?;
        let measured = bodies("http", CALLS);
        load::sequential(gateway.address, Scenario::NewIdentity, &measured).await?;
        control(&gateway, "--dump")?;
        let total = dump_total(&dir.join("callgrind.out.1"))?;
        Ok::<f64, String>(total as f64 / measured.len() as f64)
    }
    .await;
    gateway.stop();
    counted
}

/// The four counts on `gateway`, dumps going to `dir`.
async fn count_all(gateway: &Gateway, dir: &Path) -> Result<Instructions, String> {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let new = |front: &str, calls: usize| -> Vec<String> {
        (0..calls)
            .map(|index| {
                let id = format!("cg-{tag}-{front}-{index}");
                if front.ends_with("mcp") {
                    load::mcp_call_body(&id)
                } else {
                    load::call_body(&id, false)
                }
            })
            .collect()
    };
    let mut dumps = 0;
    let mut per_call = Vec::new();
    for (scenario, warm, counted) in [
        (
            Scenario::NewIdentity,
            new("warm", WARM_UP),
            new("http", CALLS),
        ),
        (Scenario::Replay, new("http", CALLS), new("http", CALLS)),
        (
            Scenario::McpNewIdentity,
            new("warm-mcp", WARM_UP),
            new("mcp", CALLS),
        ),
        (Scenario::McpReplay, new("mcp", CALLS), new("mcp", CALLS)),
    ] {
        eprintln!("instructions per call: {}", scenario.label());
        load::sequential(gateway.address, scenario, &warm).await?;
        control(gateway, "--zero")?;
        load::sequential(gateway.address, scenario, &counted).await?;
        control(gateway, "--dump")?;
        dumps += 1;
        let total = dump_total(&dir.join(format!("callgrind.out.{dumps}")))?;
        per_call.push(total as f64 / counted.len() as f64);
    }
    Ok(Instructions {
        calls: CALLS,
        http_new_identity: per_call[0],
        http_replay: per_call[1],
        mcp_new_identity: per_call[2],
        mcp_replay: per_call[3],
        http_new_identity_unbatched: None,
    })
}

/// Runs `callgrind_control <option> <pid>` for the gateway.
fn control(gateway: &Gateway, option: &str) -> Result<(), String> {
    let pid = gateway.pid().ok_or("the gateway under callgrind is gone")?;
    let status = Command::new("callgrind_control")
        .arg(option)
        .arg(pid.to_string())
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|error| format!("cannot run callgrind_control: {error}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "callgrind_control {option} {pid} failed ({status})"
        ))
    }
}

/// The instructions (`totals:` line) of the dump at `path`, waiting up to 60 s for it to be
/// written.
fn dump_total(path: &PathBuf) -> Result<u64, String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Some(total) = totals(&text) {
                return Ok(total);
            }
        }
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "no callgrind dump at {} after 60 s",
                path.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The first event count of the `totals:` (or `summary:`) line of a callgrind dump.
fn totals(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line
            .strip_prefix("totals:")
            .or_else(|| line.strip_prefix("summary:"))?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_total_of_a_dump() {
        let dump = "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\n\nfn=main\n1 5\n\
                    summary: 181374261\ntotals: 181374472\n";
        assert_eq!(super::totals(dump), Some(181_374_261));
        assert_eq!(super::totals("events: Ir\n"), None);
    }
}
