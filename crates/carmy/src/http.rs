//! The request limits shared by the fronts Carmy serves over HTTP: the HTTP API (crate
//! `carmy-http`, docs/semantics.md §7) and the MCP front (crate `carmy-mcp`, §11). The fronts
//! themselves are crates of their own above the engine; the gateway sets both limits from one
//! pair of settings (`CARMY_MAX_BODY_BYTES`, `CARMY_BODY_TIMEOUT_MS`).

/// Default limit of a request body, in bytes (2 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// Default limit on receiving a request body once its headers arrived (30 s): a client that
/// trickles or stalls its body gets 408 instead of holding a connection (and shutdown) forever.
pub const DEFAULT_BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
