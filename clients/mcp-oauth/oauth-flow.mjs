// Carmy as an OAuth 2.1 resource server (docs/semantics.md §6.1), with peers we did not
// write: oidc-provider (npm, a certified OpenID provider) as the authorization server, with
// dynamic client registration, PKCE (required) and resource indicators (RFC 8707, JWT access
// tokens for Carmy's resource identifier), and the official MCP TypeScript SDK's OAuth client
// (@modelcontextprotocol/sdk, client/auth) doing the whole MCP authorization flow against a
// running carmy-gateway's /mcp:
//   401 → protected resource metadata → authorization server metadata → registration →
//   authorization code with PKCE (this script answers login and consent as the user) → token →
//   tools/list → create_order, replayed for the same user and not for another user of the same
//   client.
// Exits non-zero on any failure.
//
// Usage: node oauth-flow.mjs start-issuer <port>   (prints "ready" once listening)
//        node oauth-flow.mjs flow <gateway base URL> <issuer URL>
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

/// A tiny user agent: follows redirects by hand, keeping the issuer's cookies, until it reaches
/// the client's redirect URI; returns the authorization code found there.
async function userAgent(start, redirectUri, login) {
  const cookies = new Map();
  let url = new URL(start);
  for (let hop = 0; hop < 20; hop += 1) {
    if (url.href.startsWith(redirectUri)) {
      assert.equal(url.searchParams.get("error"), null, url.href);
      return url.searchParams.get("code");
    }
    const headers = { cookie: [...cookies].map(([k, v]) => `${k}=${v}`).join("; ") };
    if (url.pathname.startsWith("/interaction/")) {
      headers["x-test-user"] = login;
    }
    const response = await fetch(url, { redirect: "manual", headers });
    for (const line of response.headers.getSetCookie()) {
      const [pair] = line.split(";");
      const at = pair.indexOf("=");
      cookies.set(pair.slice(0, at), pair.slice(at + 1));
    }
    const location = response.headers.get("location");
    assert.ok(location, `${url.pathname}: HTTP ${response.status}: ${await response.text()}`);
    url = new URL(location, url);
  }
  throw new Error("too many redirects");
}

/// An OAuthClientProvider that keeps everything in memory and plays `login` as the user.
class TestProvider {
  constructor(redirectUri, login, shared) {
    this.redirect = redirectUri;
    this.login = login;
    this.shared = shared; // client information shared by the users of one client
    this.saved = undefined;
    this.verifier = undefined;
    this.code = undefined;
  }
  get redirectUrl() {
    return this.redirect;
  }
  get clientMetadata() {
    return {
      client_name: "carmy-oauth-test-agent",
      redirect_uris: [this.redirect],
      grant_types: ["authorization_code"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  clientInformation() {
    return this.shared.client;
  }
  saveClientInformation(info) {
    this.shared.registrations += 1;
    this.shared.client = info;
  }
  tokens() {
    return this.saved;
  }
  saveTokens(tokens) {
    this.saved = tokens;
  }
  async redirectToAuthorization(url) {
    assert.equal(url.searchParams.get("code_challenge_method"), "S256");
    assert.ok(url.searchParams.get("resource"), "the SDK sends the resource indicator");
    this.code = await userAgent(url, this.redirect, this.login);
  }
  saveCodeVerifier(verifier) {
    this.verifier = verifier;
  }
  codeVerifier() {
    return this.verifier;
  }
}

/// Authorizes `login` through the SDK and returns a connected client.
async function authorize(base, login, shared) {
  const provider = new TestProvider("http://127.0.0.1:1/callback", login, shared);
  const endpoint = new URL(`${base}/mcp`);
  let transport = new StreamableHTTPClientTransport(endpoint, { authProvider: provider });
  let client = new Client({ name: "carmy-oauth-test", version: "1.0.0" });
  await assert.rejects(client.connect(transport), UnauthorizedError);
  assert.ok(provider.code, "the user agent reached the redirect URI with a code");
  await transport.finishAuth(provider.code);
  assert.ok(provider.saved?.access_token, "the SDK exchanged the code for a token");
  transport = new StreamableHTTPClientTransport(endpoint, { authProvider: provider });
  client = new Client({ name: "carmy-oauth-test", version: "1.0.0" });
  await client.connect(transport);
  return { client, token: provider.saved.access_token };
}

async function flow(base, issuer) {
  // The 401 names the metadata, which names the issuer.
  const unauthorized = await fetch(`${base}/mcp`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
  });
  assert.equal(unauthorized.status, 401);
  const challenge = unauthorized.headers.get("www-authenticate");
  assert.equal(challenge, `Bearer resource_metadata="${base}/.well-known/oauth-protected-resource"`);
  const metadata = await (await fetch(`${base}/.well-known/oauth-protected-resource/mcp`)).json();
  assert.deepEqual(metadata.authorization_servers, [issuer]);

  const shared = { client: undefined, registrations: 0 };
  const alice = await authorize(base, "alice", shared);
  const bob = await authorize(base, "bob", shared);
  assert.equal(shared.registrations, 1, "one registration, two users of the same client");
  const claims = (token) => JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString());
  assert.equal(claims(alice.token).sub, "alice");
  assert.equal(claims(alice.token).aud, `${base}/`);
  assert.equal(claims(bob.token).sub, "bob");

  const tools = (await alice.client.listTools()).tools.map((tool) => tool.name);
  assert.ok(tools.includes("create_order"), tools.join(","));
  const execution = (result) => result._meta["io.carmy/execution"];
  const args = { sku: `OAUTH-${randomUUID()}`, request_id: randomUUID() };
  const first = await alice.client.callTool({ name: "create_order", arguments: args });
  assert.equal(first.isError, false, JSON.stringify(first));
  assert.equal(execution(first).replayed, false);
  const again = await alice.client.callTool({ name: "create_order", arguments: args });
  assert.equal(execution(again).replayed, true, "the same user's retry replays");
  assert.deepEqual(again.structuredContent.order_id, first.structuredContent.order_id);
  const other = await bob.client.callTool({ name: "create_order", arguments: args });
  assert.equal(other.isError, false, JSON.stringify(other));
  assert.equal(execution(other).replayed, false, "another user's call with the same id runs");
  assert.notEqual(other.structuredContent.order_id, first.structuredContent.order_id);
  // Each user sees only its own orders.
  for (const [user, expected] of [[alice, first], [bob, other]]) {
    const found = await user.client.callTool({ name: "find_orders", arguments: { sku: args.sku } });
    const ids = found.structuredContent.orders.map((order) => order.order_id);
    assert.deepEqual(ids, [expected.structuredContent.order_id]);
  }
  await alice.client.close();
  await bob.client.close();
}

const [mode, ...rest] = process.argv.slice(2);
if (mode === "start-issuer") {
  const { startIssuer } = await import("./issuer.mjs");
  await startIssuer(Number(rest[0]), rest[1]);
  console.log("ready");
} else if (mode === "flow") {
  await flow(rest[0], rest[1]);
  console.log("oauth-flow.mjs: ok");
} else {
  console.error("usage: node oauth-flow.mjs start-issuer <port> <resource> | flow <gateway> <issuer>");
  process.exit(2);
}
