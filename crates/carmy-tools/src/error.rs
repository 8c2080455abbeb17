//! Why a tools file was refused: every message names the file, the line when known, the tool
//! (or MCP server) and the field (docs/semantics.md §10).

use std::fmt;
use std::path::{Path, PathBuf};

/// A mistake in the tools file, or a file that could not be read. Never contains a secret: the
/// messages quote names and template text, never expanded values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The tools file.
    pub file: PathBuf,
    /// The 1-based line of the mistake, when known.
    pub line: Option<usize>,
    /// The tool or MCP server the mistake is in, as `tool "name"` / `mcp server "name"`.
    pub entry: Option<String>,
    /// The field, e.g. `url` or `headers.Authorization`.
    pub field: Option<String>,
    /// What is wrong and what to write instead.
    pub message: String,
}

impl std::error::Error for ConfigError {}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tools file {}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ", line {line}")?;
        }
        if let Some(entry) = &self.entry {
            write!(f, ", {entry}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ", field `{field}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Builds [`ConfigError`]s for one file, turning byte offsets into line numbers.
pub(crate) struct Reporter<'a> {
    pub(crate) file: &'a Path,
    pub(crate) text: &'a str,
}

impl Reporter<'_> {
    /// The 1-based line holding byte `offset`.
    pub(crate) fn line_of(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    /// An error at `offset` (if known) in `entry`'s `field`.
    pub(crate) fn error(
        &self,
        offset: Option<usize>,
        entry: Option<&str>,
        field: Option<&str>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: self.file.to_owned(),
            line: offset.map(|offset| self.line_of(offset)),
            entry: entry.map(str::to_owned),
            field: field.map(str::to_owned),
            message: message.into(),
        }
    }
}
