//! Executions held by a client (docs/semantics.md §16): tools a caller runs itself (a Python or
//! TypeScript function) while Carmy keeps the identity, the lease and the record.
//!
//! A client-held tool is declared like any other ([`ClientTool`]: name, description, schema,
//! `on_interrupted`), listed by `GET /v1/tools`, and never run by the gateway. A caller
//! reserves its identity ([`crate::engine::Engine::hold`]) and gets the same answers as a
//! gateway-run call (replay, conflict, uncertain), or a reservation with a fencing token
//! ([`HoldToken`]) and a lease ([`Hold`]) that it renews while it works and presents when it
//! records the outcome. The token names the holder's own lease row: a holder that stops
//! renewing leaves the execution interrupted, like a replica that died.

use crate::tool::{OnInterrupted, Tool, ToolAnnotations, ToolContext, ToolError, ToolFuture};
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::time::Duration;

/// Shortest lease a holder may ask for (docs/semantics.md §16).
pub const MIN_LEASE: Duration = Duration::from_millis(500);
/// Longest lease a holder may ask for.
pub const MAX_LEASE: Duration = Duration::from_secs(600);
/// The lease when the holder asks for none.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// A holder's fencing token: `hold_` and 32 lowercase hex digits (a random UUID). It is the
/// owner of the execution's reservation (PostgreSQL: `carmy.reservations.owner_instance`, with
/// its lease row in `carmy.instances`), so it is as hard to guess as an execution id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HoldToken(String);

impl HoldToken {
    /// A new random token.
    pub fn generate() -> Self {
        Self(format!("hold_{}", uuid::Uuid::new_v4().simple()))
    }

    /// A token as a holder sent it; `None` unless it has the shape of one.
    pub fn parse(text: &str) -> Option<Self> {
        let hex = text.strip_prefix("hold_")?;
        (hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| Self(text.to_owned()))
    }

    /// The token's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for HoldToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A holder's lease: its token and how long each reservation or renewal keeps it live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// The fencing token.
    pub token: HoldToken,
    /// How long the lease lasts from the store's clock at each reservation or renewal.
    pub lease: Duration,
}

/// Who holds (or held) an execution, as a store keeps it: what recording with a token needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldOwner {
    /// The owner of the reservation (a [`HoldToken`]'s text for a client-held execution, a
    /// replica's instance id otherwise); `None` when the store kept none.
    pub owner: Option<String>,
    /// The attempt that holds it (docs/semantics.md §12.7).
    pub attempt: u32,
    /// When the reservation was made.
    pub started_at: DateTime<Utc>,
}

/// A client-held reservation as the engine answers it (docs/semantics.md §16).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reserved {
    /// The execution the holder runs.
    pub execution_id: crate::outcome::ExecutionId,
    /// The token to renew and record with.
    pub token: HoldToken,
    /// The lease, as granted.
    pub lease: Duration,
    /// Until when the lease is surely live (this process's clock, taken before the store
    /// granted it): renew well before.
    pub lease_expires_at: DateTime<Utc>,
    /// The released execution this reservation replaced, as a gateway-run call's first answer
    /// names it (docs/semantics.md §12.1, "A rerun says so"); `None` for a first reservation.
    pub rerun_of: Option<crate::store::Replaced>,
}

/// A tool the caller runs itself (the tools file's `[[client_tools]]`, docs/semantics.md §16):
/// declared for its schema, listing and policies, never run by the gateway. A call of it
/// through `POST /v1/executions` or MCP is refused before anything is reserved.
#[derive(Debug)]
pub struct ClientTool {
    name: String,
    description: String,
    schema: Value,
    annotations: Option<ToolAnnotations>,
    redaction: Option<crate::arguments::Redaction>,
}

impl ClientTool {
    /// A client-held tool with `schema` for its arguments.
    pub fn new(name: impl Into<String>, description: impl Into<String>, schema: Value) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            schema,
            annotations: None,
            redaction: None,
        }
    }

    /// With what of its arguments is hidden before they are kept (the tools file's
    /// `redact_arguments`, docs/semantics.md §8.5).
    #[must_use]
    pub fn with_redaction(mut self, redaction: Option<crate::arguments::Redaction>) -> Self {
        self.redaction = redaction;
        self
    }

    /// With MCP-style behaviour hints, shown by `GET /v1/tools`.
    #[must_use]
    pub fn with_annotations(mut self, annotations: Option<ToolAnnotations>) -> Self {
        self.annotations = annotations;
        self
    }
}

impl Tool for ClientTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> &Value {
        &self.schema
    }

    fn annotations(&self) -> Option<&ToolAnnotations> {
        self.annotations.as_ref()
    }

    fn on_interrupted(&self) -> OnInterrupted {
        OnInterrupted::Uncertain
    }

    fn held_by_client(&self) -> bool {
        true
    }

    fn redaction(&self) -> Option<&crate::arguments::Redaction> {
        self.redaction.as_ref()
    }

    fn call(&self, _context: ToolContext, _arguments: Value) -> ToolFuture<'_> {
        // Never reached: the engine refuses calls of a client-held tool before reserving.
        Box::pin(async {
            Err(ToolError::not_executed(
                "HELD_BY_CLIENT",
                "this tool is run by its client (POST /v1/held), not by the gateway",
            ))
        })
    }
}

/// Checks a lease a holder asked for (milliseconds), or the default.
///
/// # Errors
/// A sentence naming the bounds.
pub fn check_lease(lease_ms: Option<u64>) -> Result<Duration, String> {
    let Some(ms) = lease_ms else {
        return Ok(DEFAULT_LEASE);
    };
    let lease = Duration::from_millis(ms);
    if lease < MIN_LEASE || lease > MAX_LEASE {
        return Err(format!(
            "lease_ms must be between {} and {} (got {ms})",
            MIN_LEASE.as_millis(),
            MAX_LEASE.as_millis()
        ));
    }
    Ok(lease)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_only_their_own_shape() {
        let token = HoldToken::generate();
        assert_eq!(HoldToken::parse(token.as_str()), Some(token.clone()));
        assert_eq!(HoldToken::parse("hold_"), None);
        assert_eq!(HoldToken::parse(&token.as_str().to_uppercase()), None);
        assert_eq!(
            HoldToken::parse("inst_0123456789abcdef0123456789abcdef"),
            None
        );
    }

    #[test]
    fn leases_are_bounded() {
        assert_eq!(check_lease(None), Ok(DEFAULT_LEASE));
        assert_eq!(check_lease(Some(500)), Ok(Duration::from_millis(500)));
        assert!(check_lease(Some(499)).is_err());
        assert!(check_lease(Some(600_001)).is_err());
    }
}
