//! Carmy as an OAuth 2.1 resource server (docs/semantics.md §6.1; docs/operations.md
//! "OAuth access tokens"): the gateway's [`carmy::auth::TokenVerifier`] and the protected
//! resource metadata (RFC 9728) that tells clients where to get a token.
//!
//! - [`config`]: the settings ([`OAuthConfig`]) and their checks.
//! - [`issuer`]: one issuer's signing keys, discovered from its metadata (RFC 8414, OpenID
//!   Connect discovery), cached, refreshed on an unknown `kid` at a bounded rate.
//! - [`verifier`]: [`JwtVerifier`], the check of one access token (signature, `iss`, `aud`,
//!   `exp`/`nbf`, allowed algorithms) and the principal it names.
//! - [`metadata`]: `GET /.well-known/oauth-protected-resource` and its path-suffixed form.
//!
//! Crypto is `jsonwebtoken`'s; nothing here signs or verifies by hand.

pub mod config;
pub mod issuer;
pub mod metadata;
pub mod verifier;

pub use config::{OAuthConfig, OAuthConfigError, PrincipalPrefix};
pub use metadata::{resource_metadata_url, routes};
pub use verifier::JwtVerifier;
