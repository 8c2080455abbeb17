//! What a README `sh server` block starts (see `readme.rs`): the gateway binary, the demo
//! upstream or `scripts/replicas` on free ports, and the README's ports mapped to those.

use super::{repository, Block};
use carmy_test_support::replica::{gateway_binary, Replica};
use carmy_test_support::{eventually, TestDb};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A process stopped when dropped: SIGTERM first (so that `scripts/replicas` stops its replicas
/// through its trap), SIGKILL after 10 s. Only this process's own id is ever signalled: no
/// process groups and no negative ids (procps 4.0.2's `kill` mis-reads them).
struct Spawned(Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let pid = self.0.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..100 {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(command: &mut Command) -> Spawned {
    Spawned(command.spawn().expect("spawn"))
}

/// What a server block started, and the README's ports mapped to the real ones.
#[derive(Default)]
pub(super) struct Servers {
    /// The variables the blocks run with (`export NAME=VALUE` lines).
    pub(super) env: BTreeMap<String, String>,
    ports: Vec<(u16, u16)>,
    gateways: Vec<Replica>,
    processes: Vec<Spawned>,
    _databases: Vec<TestDb>,
}

impl Servers {
    /// `text` with the README's addresses replaced by the servers' own.
    pub(super) fn localize(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (readme, real) in &self.ports {
            for host in ["localhost", "127.0.0.1"] {
                text = text.replace(&format!("{host}:{readme}"), &format!("{host}:{real}"));
            }
        }
        text
    }

    /// The address of the gateway the README reaches on 8080.
    pub(super) fn gateway(&self) -> String {
        let (_, port) = self
            .ports
            .iter()
            .find(|(readme, _)| *readme == 8080)
            .expect("the group started a gateway on 8080");
        format!("http://127.0.0.1:{port}")
    }

    /// Starts what the server `block` says, line by line.
    pub(super) async fn start(&mut self, block: &Block) {
        for line in block.body.lines() {
            let line = line.split(" #").next().unwrap().trim();
            if line.is_empty() {
                continue;
            }
            if let Some(assignment) = line.strip_prefix("export ") {
                let (name, value) = assignment.split_once('=').expect("export NAME=VALUE");
                self.env.insert(name.to_owned(), value.to_owned());
                continue;
            }
            let mut env = self.env.clone();
            let mut words = line.split_whitespace().peekable();
            while let Some((name, value)) = words.peek().and_then(|word| word.split_once('=')) {
                env.insert(name.to_owned(), value.to_owned());
                words.next();
            }
            let command: Vec<&str> = words.collect();
            match command.join(" ").as_str() {
                "cargo run -p carmy-gateway" => self.start_gateway(env, block),
                "python3 examples/demo_upstream.py" => self.start_demo_upstream(env),
                "scripts/replicas" => self.start_replicas(env).await,
                other => panic!("README line {}: no way to start `{other}`", block.line),
            }
        }
    }

    fn start_gateway(&mut self, mut env: BTreeMap<String, String>, block: &Block) {
        if let Some(file) = env.get("CARMY_TOOLS_FILE") {
            let text = std::fs::read_to_string(repository().join(file)).unwrap();
            let copy = crate::tools_file::write_tools_file(&self.localize(&text));
            env.insert("CARMY_TOOLS_FILE".into(), copy.display().to_string());
        }
        let env: Vec<(&str, &str)> = env
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        let gateway = Replica::start(&format!("readme-{}", block.line), &env);
        let port = gateway.base.rsplit(':').next().unwrap().parse().unwrap();
        self.ports.push((8080, port));
        self.gateways.push(gateway);
    }

    fn start_demo_upstream(&mut self, env: BTreeMap<String, String>) {
        let port = free_port();
        let mut child = spawn(
            Command::new("python3")
                .arg("examples/demo_upstream.py")
                .current_dir(repository())
                .envs(&env)
                .env("DEMO_PORT", port.to_string())
                .stdout(Stdio::piped()),
        );
        let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
        let line = lines.next().unwrap().unwrap();
        assert!(line.contains("listening"), "{line}");
        // Keep reading: the upstream prints a line per payment, and a closed pipe would break it.
        std::thread::spawn(move || lines.for_each(drop));
        self.ports.push((9000, port));
        self.processes.push(child);
    }

    async fn start_replicas(&mut self, env: BTreeMap<String, String>) {
        let database = TestDb::create().await;
        let ports = [free_port(), free_port()];
        let script = spawn(
            Command::new("scripts/replicas")
                .current_dir(repository())
                .envs(&env)
                .env("DATABASE_URL", &database.url)
                .env("CARMY_GATEWAY_BIN", gateway_binary())
                .env("CARMY_REPLICA_PORTS", format!("{} {}", ports[0], ports[1]))
                .stdout(Stdio::null()),
        );
        self.processes.push(script);
        self._databases.push(database);
        let client = reqwest::Client::new();
        for port in ports {
            let url = format!("http://127.0.0.1:{port}/readyz");
            eventually(
                Duration::from_secs(120),
                "scripts/replicas is ready",
                || {
                    let (client, url) = (client.clone(), url.clone());
                    async move {
                        match client.get(&url).send().await {
                            Ok(answer) if answer.status().is_success() => Ok(()),
                            Ok(answer) => Err(answer.status().to_string()),
                            Err(error) => Err(error.to_string()),
                        }
                    }
                },
            )
            .await;
        }
        self.ports.extend([(8080, ports[0]), (8081, ports[1])]);
    }
}
