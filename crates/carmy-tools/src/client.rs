//! The one pooled HTTP client a gateway uses for every HTTP tool: rustls (on ring) for HTTPS
//! upstreams, redirects never followed (a redirect would send the call, and its idempotency
//! key, somewhere the tools file did not name), no automatic retries (docs/semantics.md §10).

use std::time::Duration;

/// How long establishing a connection may take before the call is refused as
/// `UPSTREAM_UNAVAILABLE` (nothing was sent). A tool's own deadline still applies.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The shared client's type (reqwest's pooled client; cheap to clone).
pub type UpstreamClient = reqwest::Client;

/// Why the client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the upstream HTTP client: {0}")]
pub struct ClientError(String);

/// Makes ring the process's rustls provider, unless one is installed already (by this or another
/// library). reqwest 0.13 is built without a provider of its own, so every reqwest client in the
/// process (this one, the MCP SDK's) needs one before it is built. Idempotent.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Builds the shared upstream client.
///
/// # Errors
/// [`ClientError`] when TLS cannot be set up (e.g. no usable root certificates).
pub fn upstream_client() -> Result<reqwest::Client, ClientError> {
    install_tls_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .map_err(|error| ClientError(error.to_string()))
}
