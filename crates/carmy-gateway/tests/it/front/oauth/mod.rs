//! OAuth access tokens beside API keys (docs/semantics.md §6.1), against a real gateway
//! served over TCP and a real HTTP issuer ([`harness`]). Every refusal is checked with its
//! status, code and challenge. The whole flow with an authorization server and an MCP client we
//! did not write is `clients/mcp-oauth/run-tests.sh`.

mod harness;
mod principals;
mod refusals;
