//! The crate diagram of `docs/architecture.md` ("The crates", a `mermaid` flowchart) is the
//! workspace as `cargo metadata` describes it: every member is a node, and its arrows are exactly
//! the normal dependencies (optional ones included; dev- and build-dependencies not) between the
//! workspace's crates. A crate added, or a dependency between two of them added or dropped,
//! without the diagram following fails here.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A crate's name, or `(from, to)` for an arrow: `from` depends on `to`.
type Arrow = (String, String);

/// The nodes and arrows of the first `mermaid` block of `markdown`. A node is written
/// `id[crate-name]` once and `id` after that; an arrow is `a --> b`.
fn diagram(markdown: &str) -> (BTreeSet<String>, BTreeSet<Arrow>) {
    let block: Vec<&str> = markdown
        .lines()
        .skip_while(|line| line.trim() != "```mermaid")
        .skip(1)
        .take_while(|line| line.trim() != "```")
        .collect();
    assert!(
        !block.is_empty(),
        "docs/architecture.md has no ```mermaid block"
    );
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut node = |text: &str| -> String {
        let text = text.trim();
        match text.split_once('[') {
            Some((id, label)) => {
                let label = label.strip_suffix(']').unwrap_or_else(|| {
                    panic!("docs/architecture.md: unclosed node label {text:?}")
                });
                names.insert(id.trim().to_owned(), label.to_owned());
                id.trim().to_owned()
            }
            None => text.to_owned(),
        }
    };
    let mut ids = BTreeSet::new();
    let mut arrows = BTreeSet::new();
    for line in block.iter().map(|line| line.trim()) {
        if line.is_empty() || line.starts_with("flowchart") || line.starts_with("%%") {
            continue;
        }
        if let Some((from, to)) = line.split_once("-->") {
            let (from, to) = (node(from), node(to));
            ids.insert(from.clone());
            ids.insert(to.clone());
            arrows.insert((from, to));
        } else {
            ids.insert(node(line));
        }
    }
    let name = |id: &String| {
        names
            .get(id)
            .unwrap_or_else(|| panic!("docs/architecture.md: node {id:?} has no [crate-name]"))
            .clone()
    };
    (
        ids.iter().map(name).collect(),
        arrows
            .iter()
            .map(|(from, to)| (name(from), name(to)))
            .collect(),
    )
}

/// The workspace's members and the normal dependencies between them, from `cargo metadata`.
fn workspace() -> (BTreeSet<String>, BTreeSet<Arrow>) {
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--offline",
            "--format-version",
            "1",
        ])
        .current_dir(repository())
        .output()
        .unwrap();
    assert!(output.status.success(), "cargo metadata: {output:?}");
    let metadata: Value = serde_json::from_slice(&output.stdout).unwrap();
    let packages = metadata["packages"].as_array().unwrap();
    let members: BTreeSet<String> = packages
        .iter()
        .map(|package| package["name"].as_str().unwrap().to_owned())
        .collect();
    let mut arrows = BTreeSet::new();
    for package in packages {
        for dependency in package["dependencies"].as_array().unwrap() {
            let to = dependency["name"].as_str().unwrap();
            // `kind` is null for a normal dependency, "dev" or "build" otherwise.
            if dependency["kind"].is_null() && members.contains(to) {
                let from = package["name"].as_str().unwrap().to_owned();
                arrows.insert((from, to.to_owned()));
            }
        }
    }
    (members, arrows)
}

#[test]
fn the_crate_diagram_is_the_workspace() {
    let markdown = std::fs::read_to_string(repository().join("docs/architecture.md")).unwrap();
    let (nodes, drawn) = diagram(&markdown);
    let (members, depends) = workspace();
    assert_eq!(
        nodes, members,
        "docs/architecture.md's crate diagram and the workspace's members differ"
    );
    let missing: Vec<_> = depends.difference(&drawn).collect();
    let extra: Vec<_> = drawn.difference(&depends).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/architecture.md's crate diagram disagrees with cargo metadata: arrows missing \
         (add `a --> b`): {missing:?}; arrows no dependency backs: {extra:?}"
    );
}

#[test]
fn the_diagram_reader_sees_labels_and_arrows() {
    let (nodes, arrows) = diagram(
        "text\n```mermaid\nflowchart TD\n    a[one] --> b[two]\n    a --> c[three]\n    d[four]\n```\n",
    );
    assert_eq!(
        nodes,
        ["four", "one", "three", "two"]
            .map(str::to_owned)
            .into_iter()
            .collect()
    );
    assert_eq!(
        arrows,
        [("one", "two"), ("one", "three")]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .into_iter()
            .collect()
    );
}
