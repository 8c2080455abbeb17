//! Every code block of `README.md` runs as written, so the front page cannot rot.
//!
//! The README's fenced blocks say how they are checked by their info string:
//!
//! - `sh server`: starts what the following blocks talk to. Each line is `export NAME=VALUE`, or
//!   `[NAME=VALUE ...] COMMAND` with COMMAND one of `cargo run -p carmy-gateway` (the built
//!   gateway binary on a free port instead), `python3 examples/demo_upstream.py` (on a free port)
//!   or `scripts/replicas` (with `CARMY_REPLICA_PORTS` set to two free ports, the built binary and
//!   a database of its own). A server block begins a group: the blocks up to the next one run
//!   against what it started, with the README's ports (8080, 8081, 9000) replaced by the free ones
//!   (also in a `CARMY_TOOLS_FILE`, copied).
//! - `console`: `$ ` lines (with `\` continuations) run in bash; the lines below a command are its
//!   expected standard output, where `…` stands for any text.
//! - `sh` (plain): runs in bash and must succeed.
//! - `rust example=PATH`: must be PATH's text below its `//!` header; the example runs with
//!   `cargo run -p <its crate> --example <name>` and `CARMY_URL` set to the gateway.
//! - `python`: runs with the Python client (`clients/python/src`) in a virtualenv holding its
//!   dependencies (the one `clients/python/run-tests.sh` uses), the address replaced.
//! - `text output`: the expected standard output of the `rust` or `python` block above it.
//! - `json`: must parse; `toml from=PATH`: must appear verbatim in PATH (which another block
//!   uses).
//! - `sh no-run: REASON`: not run (Docker); a reason is required and at most two such blocks
//!   exist. The Docker compose file is checked by `docker-compose config -q` in `.ci/run`.
//!
//! The figures table between `<!-- figures:begin -->` and `<!-- figures:end -->` must be what
//! `bench/results/summary.py --short` prints from `bench/results/latest.json`.
//!
//! What a server block starts, and the README's ports mapped to the real ones, is in
//! `readme/servers.rs`.

mod servers;

use servers::Servers;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn readme() -> String {
    std::fs::read_to_string(repository().join("README.md")).unwrap()
}

/// One fenced block: its info string, its text (with a final newline) and its first line.
#[derive(Debug, Clone)]
struct Block {
    info: String,
    body: String,
    line: usize,
}

impl Block {
    fn kind(&self) -> &str {
        self.info.split_whitespace().next().unwrap_or("")
    }

    /// The value of `key=VALUE` in the info string.
    fn attribute(&self, key: &str) -> Option<&str> {
        self.info
            .split_whitespace()
            .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
    }

    fn is_server(&self) -> bool {
        self.info == "sh server"
    }

    fn is_no_run(&self) -> bool {
        self.info.starts_with("sh no-run")
    }
}

/// The fenced blocks of `text`, in order.
fn blocks(text: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut open: Option<Block> = None;
    for (index, line) in text.lines().enumerate() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => {
                open = Some(Block {
                    info: info.trim().to_owned(),
                    body: String::new(),
                    line: index + 1,
                });
            }
            (Some(_), Some("")) => found.push(open.take().unwrap()),
            (Some(block), _) => {
                block.body.push_str(line);
                block.body.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "README.md ends inside a code block");
    found
}

/// Whether `text` matches `pattern`, where `…` in the pattern stands for any text.
fn matches(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('…').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || !text[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// Runs `script` in bash with `env`; returns its standard output.
fn bash(script: &str, env: &BTreeMap<String, String>, what: &str) -> String {
    let output = Command::new("bash")
        .args(["-o", "pipefail", "-c", script])
        .current_dir(repository())
        .envs(env)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed: {script}\n{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn assert_output(expected: &str, actual: &str, what: &str) {
    let (expected, actual) = (expected.trim_end(), actual.trim_end());
    assert!(
        matches(expected, actual),
        "{what}: the output differs from the README's\nREADME: {expected}\nactual: {actual}"
    );
}

/// The commands of a `console` block, each with its expected output.
fn console_commands(body: &str) -> Vec<(String, String)> {
    let mut commands: Vec<(String, String)> = Vec::new();
    let mut continued = false;
    for line in body.lines() {
        if let Some(command) = line.strip_prefix("$ ") {
            commands.push((command.to_owned(), String::new()));
        } else if continued {
            let (command, _) = commands.last_mut().unwrap();
            command.push('\n');
            command.push_str(line);
        } else {
            let (_, output) = commands
                .last_mut()
                .expect("a console block starts with `$ `");
            output.push_str(line);
            output.push('\n');
        }
        continued = line.ends_with('\\');
    }
    commands
}

/// The virtualenv's Python with the client's dependencies (made as `run-tests.sh` makes it).
fn python() -> PathBuf {
    let venv = std::env::var_os("CARMY_PYCLIENT_VENV").map_or_else(
        || std::env::temp_dir().join("carmy-pyclient-venv"),
        PathBuf::from,
    );
    let python = venv.join("bin/python");
    let has_httpx = |python: &Path| {
        Command::new(python)
            .args(["-c", "import httpx, anyio"])
            .status()
            .is_ok_and(|status| status.success())
    };
    if !has_httpx(&python) {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap();
        assert!(made.success(), "python3 -m venv {}", venv.display());
        let installed = Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg(repository().join("clients/python"))
            .status()
            .unwrap();
        assert!(installed.success(), "pip install clients/python");
    }
    python
}

/// The text of an example below its `//!` header (and the blank line after it).
fn example_snippet(path: &str) -> String {
    let text = std::fs::read_to_string(repository().join(path)).unwrap();
    let body: Vec<&str> = text
        .lines()
        .skip_while(|line| line.starts_with("//!"))
        .skip_while(|line| line.is_empty())
        .collect();
    body.join("\n") + "\n"
}

/// Runs the `rust` block's example against `servers`' gateway; returns its output.
fn run_rust(block: &Block, servers: &Servers) -> String {
    let path = block
        .attribute("example")
        .expect("a rust block names its example");
    assert_eq!(
        block.body,
        example_snippet(path),
        "README line {}: the snippet is not {path}",
        block.line
    );
    let (krate, name) = path
        .strip_prefix("crates/")
        .and_then(|rest| rest.split_once("/examples/"))
        .expect("crates/CRATE/examples/NAME.rs");
    let name = name.trim_end_matches(".rs");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    // The variables cargo set for this test (`CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`, ...) would
    // reach build scripts that watch them (ring's) and make both builds rebuild in turn.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let settings = [
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
            "CARGO_PROFILE_",
            "CARGO_BUILD_",
            "CARGO_NET_",
            "CARGO_HTTP_",
            "CARGO_REGISTRIES_",
            "CARGO_TERM_",
        ];
        let set_for_the_test = (name.starts_with("CARGO_") || name == "OUT_DIR")
            && !settings.iter().any(|setting| name.starts_with(setting));
        if set_for_the_test {
            command.env_remove(&*name);
        }
    }
    let output = command
        .args(["run", "--quiet", "-p", krate, "--example", name])
        .current_dir(repository())
        .env("CARMY_URL", servers.gateway())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the example {path} failed:\n{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn run_python(block: &Block, servers: &Servers) -> String {
    let output = Command::new(python())
        .args(["-c", &servers.localize(&block.body)])
        .env("PYTHONPATH", repository().join("clients/python/src"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "README line {}: the Python snippet failed:\n{stdout}{}",
        block.line,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Runs the group of blocks that begins with the server block containing `marker` (and not,
/// when given, `unless`).
async fn run_group(marker: &str, unless: Option<&str>) {
    let all = blocks(&readme());
    let start = all
        .iter()
        .position(|block| {
            block.is_server()
                && block.body.contains(marker)
                && unless.is_none_or(|unless| !block.body.contains(unless))
        })
        .unwrap_or_else(|| panic!("README has no server block with {marker}"));
    let mut servers = Servers::default();
    servers.start(&all[start]).await;
    let group = all[start + 1..]
        .iter()
        .take_while(|block| !block.is_server());
    let mut last_output: Option<(String, usize)> = None;
    let mut ran = 0;
    for block in group {
        let what = format!("README line {}", block.line);
        match (block.kind(), block.info.as_str()) {
            (_, "text output") => {
                let (output, line) = last_output
                    .take()
                    .unwrap_or_else(|| panic!("{what}: an output block follows no snippet"));
                assert_output(&block.body, &output, &format!("README line {line}"));
                continue;
            }
            ("console", _) => {
                for (command, expected) in console_commands(&block.body) {
                    let stdout = bash(&servers.localize(&command), &servers.env, &what);
                    if !expected.is_empty() {
                        assert_output(&expected, &stdout, &format!("{what}: {command}"));
                    }
                }
            }
            ("rust", _) => last_output = Some((run_rust(block, &servers), block.line)),
            ("python", _) => last_output = Some((run_python(block, &servers), block.line)),
            ("sh", "sh") => drop(bash(&servers.localize(&block.body), &servers.env, &what)),
            _ => continue, // checked without a server: every_block_is_checked
        }
        assert!(
            last_output.is_none() || matches!(block.kind(), "rust" | "python"),
            "{what}: the snippet before it has no output block"
        );
        ran += 1;
    }
    assert!(ran > 0, "the group of {marker} ran nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_the_http_and_mcp_doors_and_the_clients_run_as_written() {
    run_group("cargo run -p carmy-gateway", Some("CARMY_TOOLS_FILE")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_steps_replay_without_a_second_payment() {
    run_group("CARMY_TOOLS_FILE=examples/tools.toml", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_local_replicas_share_one_record() {
    run_group("scripts/replicas", None).await;
}

/// Every block has a known kind; the ones no group runs are checked here.
#[test]
fn every_block_is_checked() {
    let all = blocks(&readme());
    assert!(
        all.first().is_some_and(Block::is_server),
        "{:?}",
        all.first()
    );
    let mut no_run = 0;
    for (index, block) in all.iter().enumerate() {
        let what = format!("README line {}", block.line);
        match (block.kind(), block.info.as_str()) {
            (_, "sh server" | "sh" | "text output") | ("console" | "python", _) => {}
            ("rust", _) => {
                let next = all.get(index + 1).map(|block| block.info.as_str());
                assert_eq!(next, Some("text output"), "{what}");
                let path = block.attribute("example").expect("example=PATH");
                assert_eq!(block.body, example_snippet(path), "{what}");
            }
            ("json", _) => {
                serde_json::from_str::<serde_json::Value>(&block.body)
                    .unwrap_or_else(|error| panic!("{what}: {error}"));
            }
            ("toml", _) => {
                let path = block.attribute("from").expect("toml from=PATH");
                let file = std::fs::read_to_string(repository().join(path)).unwrap();
                assert!(file.contains(&block.body), "{what}: not in {path}");
            }
            ("sh", _) if block.is_no_run() => {
                let reason = block.info["sh no-run".len()..]
                    .trim_start_matches(':')
                    .trim();
                assert!(reason.len() > 10, "{what}: say why it cannot run");
                no_run += 1;
            }
            _ => panic!("{what}: unknown block kind `{}`", block.info),
        }
    }
    assert!(no_run <= 2, "{no_run} blocks are not run; keep them few");
}

/// The README's figures are the latest benchmark results, as the summary script prints them.
#[test]
fn the_figures_are_the_latest_results() {
    let text = readme();
    let table = text
        .split("<!-- figures:begin -->\n")
        .nth(1)
        .and_then(|rest| rest.split("<!-- figures:end -->").next())
        .expect("README has the figures markers");
    let printed = Command::new("python3")
        .args(["bench/results/summary.py", "--short"])
        .current_dir(repository())
        .output()
        .unwrap();
    assert!(printed.status.success(), "{printed:?}");
    assert_eq!(table, String::from_utf8_lossy(&printed.stdout));
}

#[test]
fn the_wildcard_matches_any_text_and_nothing_else() {
    assert!(matches("{\"a\":…,\"b\":2}", "{\"a\":[1],\"b\":2}"));
    assert!(matches("…", ""));
    assert!(!matches("{\"a\":…,\"b\":2}", "{\"a\":1,\"b\":3}"));
    assert!(!matches("x…y…z", "xzy"));
    assert!(!matches("abc", "abcd"));
}
