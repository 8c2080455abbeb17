//! The tools an engine serves, by name, with their compiled argument schemas; replaceable at
//! run time in groups (e.g. the tools an upstream MCP server announced), so a tool set can
//! change while calls run (docs/semantics.md §10).
//!
//! Readers take a snapshot (`Arc<ToolRegistry>`) and never wait on a writer for longer than a
//! pointer copy; a writer builds the next registry aside and swaps it in, so every call sees
//! one consistent set.

use crate::tool::{OnInterrupted, Tool};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

/// A tool together with its compiled argument schema.
pub(crate) struct RegisteredTool {
    pub(crate) tool: Arc<dyn Tool>,
    validator: jsonschema::Validator,
}

impl RegisteredTool {
    fn new(tool: Arc<dyn Tool>) -> Result<Self, ToolRegistryError> {
        if tool.on_interrupted() == OnInterrupted::Rerun && !may_rerun(tool.as_ref()) {
            return Err(ToolRegistryError::RerunNotSafe(tool.name().to_owned()));
        }
        let validator = jsonschema::validator_for(tool.input_schema()).map_err(|error| {
            ToolRegistryError::InvalidSchema {
                name: tool.name().to_owned(),
                reason: error.to_string(),
            }
        })?;
        Ok(Self { tool, validator })
    }

    /// Checks `arguments` against the schema; the error lists the first few violations.
    pub(crate) fn validate(&self, arguments: &serde_json::Value) -> Result<(), String> {
        let problems: Vec<String> = self
            .validator
            .iter_errors(arguments)
            .take(5)
            .map(|error| {
                let at = error.instance_path().to_string();
                if at.is_empty() {
                    error.to_string()
                } else {
                    format!("{at}: {error}")
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

/// Whether running `tool` a second time for one execution is harmless (docs/semantics.md §12.7):
/// its annotations say read-only or idempotent, or it sends the execution id to its upstream
/// as an idempotency key.
fn may_rerun(tool: &dyn Tool) -> bool {
    let hinted = tool.annotations().is_some_and(|hints| {
        hints.read_only_hint == Some(true) || hints.idempotent_hint == Some(true)
    });
    hinted || tool.sends_idempotency_key()
}

/// Why a tool could not be registered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolRegistryError {
    /// Two tools share a name.
    #[error("tool {0:?} is registered twice")]
    Duplicate(String),
    /// `on_interrupted = "rerun"` for a tool that is not declared read-only or idempotent and
    /// sends no idempotency key: a second run could repeat its effect.
    #[error(
        "tool {0:?} has on_interrupted = \"rerun\" but is neither read-only nor idempotent \
         (annotations readOnlyHint or idempotentHint) and sends no idempotency key: a second \
         run could repeat its effect; declare the hint if it holds, or keep the default \
         \"uncertain\""
    )]
    RerunNotSafe(String),
    /// A tool's schema is not a valid JSON Schema.
    #[error("tool {name:?} has an invalid argument schema: {reason}")]
    InvalidSchema {
        /// The tool.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

/// One consistent set of tools, by name.
#[derive(Clone, Default)]
pub(crate) struct ToolRegistry {
    tools: BTreeMap<String, Arc<RegisteredTool>>,
    /// The names registered under each group (tools outside any group are fixed).
    groups: BTreeMap<String, BTreeSet<String>>,
}

impl ToolRegistry {
    pub(crate) fn insert(&mut self, tool: Arc<dyn Tool>) -> Result<(), ToolRegistryError> {
        let name = tool.name().to_owned();
        if self.tools.contains_key(&name) {
            return Err(ToolRegistryError::Duplicate(name));
        }
        self.tools
            .insert(name, Arc::new(RegisteredTool::new(tool)?));
        Ok(())
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Arc<RegisteredTool>> {
        self.tools.get(name)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.values().map(|registered| &registered.tool)
    }

    /// A copy with `group`'s tools replaced by `tools`.
    fn with_group(
        &self,
        group: &str,
        tools: Vec<Arc<dyn Tool>>,
    ) -> Result<Self, ToolRegistryError> {
        let mut next = self.clone();
        for name in next.groups.remove(group).unwrap_or_default() {
            next.tools.remove(&name);
        }
        let mut names = BTreeSet::new();
        for tool in tools {
            names.insert(tool.name().to_owned());
            next.insert(tool)?;
        }
        next.groups.insert(group.to_owned(), names);
        Ok(next)
    }
}

/// The engine's registry behind a lock: snapshots for readers, whole-group swaps for writers.
pub(crate) struct SharedRegistry(RwLock<Arc<ToolRegistry>>);

impl SharedRegistry {
    pub(crate) fn new(registry: ToolRegistry) -> Self {
        Self(RwLock::new(Arc::new(registry)))
    }

    /// The current set.
    pub(crate) fn snapshot(&self) -> Arc<ToolRegistry> {
        Arc::clone(
            &self
                .0
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Replaces the tools of `group` with `tools` in one step; on error nothing changes.
    pub(crate) fn replace_group(
        &self,
        group: &str,
        tools: Vec<Arc<dyn Tool>>,
    ) -> Result<(), ToolRegistryError> {
        let mut current = self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *current = Arc::new(current.with_group(group, tools)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::FnTool;
    use serde_json::json;

    fn tool(name: &str) -> Arc<dyn Tool> {
        Arc::new(FnTool::new(
            name,
            json!({"type": "object"}),
            |_c, a| async move { Ok(a) },
        ))
    }

    fn names(shared: &SharedRegistry) -> Vec<String> {
        shared
            .snapshot()
            .iter()
            .map(|t| t.name().to_owned())
            .collect()
    }

    #[test]
    fn groups_are_replaced_whole_and_a_clash_changes_nothing() {
        let mut fixed = ToolRegistry::default();
        fixed.insert(tool("echo")).unwrap();
        let shared = SharedRegistry::new(fixed);
        shared
            .replace_group("files", vec![tool("files.read"), tool("files.write")])
            .unwrap();
        let before = shared.snapshot();
        shared
            .replace_group("files", vec![tool("files.read")])
            .unwrap();
        assert_eq!(names(&shared), ["echo", "files.read"]);
        // A snapshot taken before keeps its own set.
        assert_eq!(before.iter().count(), 3);
        let clash = shared.replace_group("other", vec![tool("echo")]);
        assert!(matches!(clash, Err(ToolRegistryError::Duplicate(name)) if name == "echo"));
        assert_eq!(names(&shared), ["echo", "files.read"]);
        shared.replace_group("files", Vec::new()).unwrap();
        assert_eq!(names(&shared), ["echo"]);
    }

    #[test]
    fn rerun_is_accepted_only_for_a_tool_that_may_run_twice() {
        use crate::tool::{OnInterrupted, ToolAnnotations};
        let rerun = |annotations: Option<ToolAnnotations>| {
            let tool = FnTool::new(
                "charge",
                json!({"type": "object"}),
                |_c, a| async move { Ok(a) },
            )
            .with_on_interrupted(OnInterrupted::Rerun);
            let tool = match annotations {
                Some(hints) => tool.with_annotations(hints),
                None => tool,
            };
            ToolRegistry::default().insert(Arc::new(tool))
        };
        let refused = rerun(None).unwrap_err();
        assert!(matches!(&refused, ToolRegistryError::RerunNotSafe(name) if name == "charge"));
        assert!(refused.to_string().starts_with(
            "tool \"charge\" has on_interrupted = \"rerun\" but is neither read-only nor idempotent"
        ));
        let not_idempotent = ToolAnnotations {
            idempotent_hint: Some(false),
            ..ToolAnnotations::default()
        };
        assert!(rerun(Some(not_idempotent)).is_err());
        for hints in [
            ToolAnnotations {
                read_only_hint: Some(true),
                ..ToolAnnotations::default()
            },
            ToolAnnotations {
                idempotent_hint: Some(true),
                ..ToolAnnotations::default()
            },
        ] {
            rerun(Some(hints)).unwrap();
        }
    }
}
