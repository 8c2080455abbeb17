#!/usr/bin/env bash
# Carmy as an OAuth 2.1 resource server, with peers we did not write (docs/operations.md "OAuth
# access tokens"): oidc-provider (npm) as the authorization server and the official MCP
# TypeScript SDK's OAuth client (@modelcontextprotocol/sdk) against a real carmy-gateway process
# on the in-memory store. See oauth-flow.mjs for the steps.
#
# 1. node_modules from package.json, cached in CARMY_OAUTH_NODE_CACHE (default
#    ${TMPDIR:-/tmp}/carmy-mcp-oauth-node) and linked here; reused while package.json is unchanged.
# 2. Uses the gateway binary CARMY_GATEWAY_BIN if set; otherwise builds it.
# 3. Starts the issuer and the gateway on free ports, runs the flow, stops both.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$HERE"
echo "run-tests.sh: node $(node --version)"

NODE_CACHE="${CARMY_OAUTH_NODE_CACHE:-${TMPDIR:-/tmp}/carmy-mcp-oauth-node}"
stamp="$(sha256sum "$HERE/package.json" | cut -d' ' -f1)"
if [[ "$(cat "$NODE_CACHE/.carmy-package" 2>/dev/null)" != "$stamp" ]]; then
  echo "run-tests.sh: npm install into $NODE_CACHE" >&2
  mkdir -p "$NODE_CACHE"
  cp "$HERE/package.json" "$NODE_CACHE/package.json"
  (cd "$NODE_CACHE" && npm install --no-audit --no-fund --silent)
  echo "$stamp" >"$NODE_CACHE/.carmy-package"
fi
if [[ ! -L "$HERE/node_modules" ]]; then
  rm -rf "$HERE/node_modules"
fi
ln -sfn "$NODE_CACHE/node_modules" "$HERE/node_modules"

if [[ -z "${CARMY_GATEWAY_BIN:-}" ]]; then
  (cd "$ROOT" && cargo build --quiet -p carmy-gateway)
  target_dir="${CARGO_TARGET_DIR:-target}"
  [[ "$target_dir" = /* ]] || target_dir="$ROOT/$target_dir"
  CARMY_GATEWAY_BIN="$target_dir/debug/carmy-gateway"
fi

free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}
issuer_port="$(free_port)"
gateway_port="$(free_port)"
issuer="http://127.0.0.1:$issuer_port"
resource="http://127.0.0.1:$gateway_port/"

issuer_log="$(mktemp)"
node oauth-flow.mjs start-issuer "$issuer_port" "$resource" >"$issuer_log" 2>&1 &
issuer_pid=$!
# shellcheck source=scripts/test-gateway.sh
source "$ROOT/scripts/test-gateway.sh"
stop_all() {
  test_gateway_stop
  kill "$issuer_pid" 2>/dev/null || true
  wait "$issuer_pid" 2>/dev/null || true
  rm -f "$issuer_log"
}
trap stop_all EXIT
for _ in $(seq 1 300); do
  if curl -fsS "$issuer/.well-known/openid-configuration" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$issuer_pid" 2>/dev/null; then cat "$issuer_log" >&2; exit 1; fi
  sleep 0.1
done

test_gateway_start "$CARMY_GATEWAY_BIN" "$gateway_port" \
  CARMY_OAUTH_ISSUERS="$issuer" CARMY_OAUTH_RESOURCE="$resource" CARMY_OAUTH_REQUIRED_SCOPE=carmy
if ! node oauth-flow.mjs flow "http://127.0.0.1:$gateway_port" "$issuer"; then
  echo "--- issuer log" >&2; cat "$issuer_log" >&2
  echo "--- gateway log" >&2; cat "$TEST_GATEWAY_LOG" >&2
  exit 1
fi
