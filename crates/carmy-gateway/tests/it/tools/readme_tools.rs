//! The README's "Put your own tools behind Carmy" steps, run as written: the demo upstream
//! (`examples/demo_upstream.py`, Python standard library) behind the gateway binary with
//! `examples/tools.toml`, then the section's shell block of calls. Only the ports differ
//! (ephemeral ones instead of 8080 and 9000). The retry replays without a second payment, and a
//! late delivery with the same key is deduplicated by the upstream itself.

use crate::http_tools::replica;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `sh` code blocks of the README section `heading`.
fn section_blocks(heading: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(repository().join("README.md")).unwrap();
    let start = readme
        .find(heading)
        .unwrap_or_else(|| panic!("README has no {heading}"));
    let section = &readme[start + heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .split("```sh\n")
        .skip(1)
        .map(|block| block[..block.find("```").unwrap()].to_owned())
        .collect()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the demo upstream on a free port and waits for its "listening" line.
fn demo_upstream(token: &str) -> (Killed, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new("python3")
        .arg(repository().join("examples/demo_upstream.py"))
        .env("DEMO_PORT", port.to_string())
        .env("DEMO_TOKEN", token)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs the demo upstream");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next().unwrap().unwrap();
    assert!(line.contains("listening"), "{line}");
    // Keep reading: the upstream prints a line per payment, and a closed pipe would break it.
    std::thread::spawn(move || lines.for_each(drop));
    (Killed(child), port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_steps_replay_without_a_second_payment() {
    let blocks = section_blocks("## Put your own tools behind Carmy");
    assert!(blocks.len() >= 2, "{blocks:?}");
    let start = &blocks[0];
    assert!(
        start.contains("python3 examples/demo_upstream.py"),
        "{start}"
    );
    assert!(
        start.contains("CARMY_TOOLS_FILE=examples/tools.toml cargo run -p carmy-gateway"),
        "{start}"
    );
    let token = start
        .lines()
        .find_map(|line| line.strip_prefix("export DEMO_TOKEN="))
        .expect("the steps export DEMO_TOKEN")
        .trim()
        .to_owned();
    let (_upstream, port) = demo_upstream(&token);
    let tools = std::fs::read_to_string(repository().join("examples/tools.toml"))
        .unwrap()
        .replace("127.0.0.1:9000", &format!("127.0.0.1:{port}"));
    let file = crate::tools_file::write_tools_file(&tools);
    let gateway = replica("readme-tools", &file, &[("DEMO_TOKEN", &token)]);
    let script = blocks[1]
        .replace("localhost:8080", gateway.base.trim_start_matches("http://"))
        .replace("localhost:9000", &format!("127.0.0.1:{port}"));
    let output = Command::new("bash")
        .args([
            "-euo",
            "pipefail",
            "-c",
            &format!("export DEMO_TOKEN={token}\n{script}"),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answers: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(answers.len(), 5, "{stdout}");
    let (first, retry, listed, late, after) = (
        &answers[0],
        &answers[1],
        &answers[2],
        &answers[3],
        &answers[4],
    );
    assert_eq!(
        (first["status"].as_str(), first["replayed"].as_bool()),
        (Some("completed"), Some(false)),
        "{first}"
    );
    assert_eq!(
        (retry["replayed"].as_bool(), &retry["execution_id"]),
        (Some(true), &first["execution_id"])
    );
    assert_eq!(retry["data"], first["data"]);
    assert_eq!(listed["payments"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(
        listed["payments"][0]["idempotency_key"],
        first["execution_id"]
    );
    assert_eq!(late["payment_id"], first["data"]["payment_id"], "{late}");
    assert_eq!(after, listed, "the late delivery created nothing");
}
