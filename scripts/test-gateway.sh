# Sourced by test scripts that run their suites against one gateway process
# (clients/mcp-typescript/run-tests.sh, examples/frameworks/run-tests.sh).
#
# test_gateway_start BIN PORT [NAME=VALUE ...]: starts the gateway binary BIN on 127.0.0.1:PORT
# on the in-memory store (DATABASE_URL and CARMY_API_KEYS_FILE unset) with RUST_LOG=warn and the
# given environment, and waits up to 30 s for its /healthz. Sets TEST_GATEWAY_PID and
# TEST_GATEWAY_LOG (a temporary file with its output); prints the log and returns 1 when the
# gateway did not come up. test_gateway_stop stops it and removes the log.

test_gateway_start() {
  local bin="$1" port="$2"
  shift 2
  TEST_GATEWAY_LOG="$(mktemp)"
  env -u DATABASE_URL -u CARMY_API_KEYS_FILE CARMY_LISTEN="127.0.0.1:$port" RUST_LOG=warn "$@" \
    "$bin" >"$TEST_GATEWAY_LOG" 2>&1 &
  TEST_GATEWAY_PID=$!
  for _ in $(seq 1 300); do
    if curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$TEST_GATEWAY_PID" 2>/dev/null; then break; fi
    sleep 0.1
  done
  cat "$TEST_GATEWAY_LOG" >&2
  return 1
}

test_gateway_stop() {
  if [[ -n "${TEST_GATEWAY_PID:-}" ]]; then
    kill "$TEST_GATEWAY_PID" 2>/dev/null || true
    wait "$TEST_GATEWAY_PID" 2>/dev/null || true
  fi
  rm -f "${TEST_GATEWAY_LOG:-}"
}
