// The TypeScript client's held functions (docs/semantics.md §16) against a real gateway on a
// fresh PostgreSQL database (CARMY_TEST_DATABASE_URL, made by run-tests.sh) and a counting
// HTTP upstream: once and replay, conflict, failures, values JSON cannot carry, and a holder
// killed with SIGKILL mid-charge reconciled by its hook with exactly one charge.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import {
  CarmyClient,
  ConflictError,
  ExecutionInterrupted,
  Found,
  NotFound,
  NotJsonError,
  ToolFailedError,
  held,
} from "../index.js";

const here = new URL(".", import.meta.url).pathname;
let gateway;
let gatewayUrl;
let upstream;
let upstreamUrl;
const charges = [];

async function until(what, check, deadlineMs = 30_000) {
  const end = Date.now() + deadlineMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

before(async () => {
  upstream = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk) => (body += chunk));
    request.on("end", () => {
      if (request.method === "POST") {
        const charge = { charge_id: charges.length + 1, ...JSON.parse(body || "{}") };
        charges.push(charge);
        response.writeHead(201, { "content-type": "application/json" }).end(JSON.stringify(charge));
      } else {
        const key = request.url.split("/").pop();
        const found = charges.filter((charge) => charge.key === key);
        response.writeHead(found.length ? 200 : 404, { "content-type": "application/json" });
        response.end(JSON.stringify({ charges: found }));
      }
    });
  });
  await new Promise((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  upstreamUrl = `http://127.0.0.1:${upstream.address().port}`;

  const dir = mkdtempSync(join(tmpdir(), "carmy-ts-held-"));
  const tools = join(dir, "tools.toml");
  writeFileSync(tools, '[[client_tools]]\nname = "charge"\n\n[[client_tools]]\nname = "add"\n');
  const probe = createServer();
  await new Promise((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const port = probe.address().port;
  await new Promise((resolve) => probe.close(resolve));
  const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith("CARMY_")));
  gateway = spawn(process.env.CARMY_GATEWAY_BIN, [], {
    env: {
      ...env,
      DATABASE_URL: process.env.CARMY_TEST_DATABASE_URL,
      CARMY_TOOLS_FILE: tools,
      CARMY_LISTEN: `127.0.0.1:${port}`,
      RUST_LOG: "warn",
    },
    stdio: "ignore",
  });
  gatewayUrl = `http://127.0.0.1:${port}`;
  await until("the gateway", async () => {
    try {
      return (await fetch(`${gatewayUrl}/healthz`)).ok;
    } catch {
      return false;
    }
  });
});

after(() => {
  gateway?.kill();
  upstream?.close();
});

const count = (key) => charges.filter((charge) => charge.key === key).length;

test("a wrapped function runs once and its retries replay", async () => {
  const carmy = new CarmyClient(gatewayUrl);
  const runs = [];
  const add = held(carmy, "add", async ({ a, b }, { requestId }) => {
    runs.push(requestId);
    return { sum: a + b };
  });
  const key = `ts-${randomUUID()}`;
  assert.deepEqual(await add({ a: 2, b: 3 }, { requestId: key }), { sum: 5 });
  assert.deepEqual(await add({ a: 2, b: 3 }, { requestId: key }), { sum: 5 });
  assert.deepEqual(runs, [key]);
  await assert.rejects(add({ a: 2, b: 4 }, { requestId: key }), ConflictError);
  assert.deepEqual(runs, [key]);
});

test("a failure is recorded and replayed without running again", async () => {
  const carmy = new CarmyClient(gatewayUrl);
  let runs = 0;
  const boom = held(carmy, "add", async () => {
    runs += 1;
    throw new Error("the bank said no");
  });
  const key = `ts-${randomUUID()}`;
  await assert.rejects(boom({}, { requestId: key }), /the bank said no/);
  const replayed = await boom({}, { requestId: key }).catch((error) => error);
  assert.ok(replayed instanceof ToolFailedError);
  assert.equal(replayed.code, "CLIENT_ERROR");
  assert.equal(replayed.execution.error.effect, "unknown");
  assert.equal(runs, 1);
});

test("a reservation after a release names the released execution", async () => {
  const key = `ts-${randomUUID()}`;
  const post = (path, body) =>
    fetch(`${gatewayUrl}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const first = await (await post("/v1/held", { tool: "add", arguments: { a: 4 }, request_id: key, lease_ms: 500 })).json();
  assert.equal(first.rerun_of, undefined);
  await until("the holder's lease to lapse", async () => {
    const record = await (await fetch(`${gatewayUrl}/v1/executions?request_id=${key}`)).json();
    return record.status === "interrupted";
  });
  const released = await post(`/v1/executions/${first.execution_id}/release`, { note: "operator: nothing happened" });
  assert.equal(released.status, 200);
  const by = (await released.json()).resolution.by;
  const carmy = new CarmyClient(gatewayUrl);
  const holding = await carmy.hold("add", { a: 4 }, key);
  try {
    assert.deepEqual(holding.rerunOf, { execution_id: first.execution_id, ended: "released", by, note: "operator: nothing happened" });
  } finally {
    await holding.complete({ sum: 4 });
  }
});

test("values JSON cannot carry are refused before anything runs", async () => {
  const carmy = new CarmyClient(gatewayUrl);
  let runs = 0;
  const store = held(carmy, "add", async (args) => {
    runs += 1;
    return args;
  });
  for (const bad of [{ v: NaN }, { v: new Set([1]) }, { v: new Date() }, { v: undefined }, { v: 10n }]) {
    const key = `ts-${randomUUID()}`;
    await assert.rejects(store(bad, { requestId: key }), NotJsonError);
    const record = await fetch(`${gatewayUrl}/v1/executions?request_id=${key}`);
    assert.equal(record.status, 404);
  }
  assert.equal(runs, 0);
});

test("a holder killed mid-charge is reconciled by its hook: one charge", async () => {
  const key = `ts-${randomUUID()}`;
  const child = spawn(process.execPath, [join(here, "child.mjs"), gatewayUrl, upstreamUrl, key], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  try {
    await until("the child's charge", () => count(key) === 1);
  } finally {
    child.kill("SIGKILL");
  }
  const first = await fetch(`${gatewayUrl}/v1/held`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ tool: "charge", arguments: { customer: "cus_42", amount: 500 }, request_id: key }),
  });
  assert.equal(first.status, 409);
  assert.equal((await first.json()).state, "running");

  const carmy = new CarmyClient(gatewayUrl);
  let runs = 0;
  const reconciled = [];
  const charge = held(
    carmy,
    "charge",
    async () => {
      runs += 1;
      return { charge_id: -1 };
    },
    {
      leaseMs: 1000,
      reconcile: async (args, { requestId }) => {
        reconciled.push(requestId);
        const found = await fetch(`${upstreamUrl}/charges/${requestId}`);
        if (found.status === 404) return new NotFound();
        return new Found({ charge_id: (await found.json()).charges[0].charge_id });
      },
    },
  );
  const expected = { charge_id: charges.find((c) => c.key === key).charge_id };
  assert.deepEqual(await charge({ customer: "cus_42", amount: 500 }, { requestId: key }), expected);
  assert.deepEqual(await charge({ customer: "cus_42", amount: 500 }, { requestId: key }), expected);
  assert.equal(runs, 0);
  assert.deepEqual(reconciled, [key]);
  assert.equal(count(key), 1);
  const record = await (await fetch(`${gatewayUrl}/v1/executions?request_id=${key}`)).json();
  assert.match(record.resolution.note, /^reconciled by the client/);
});

test("without a hook an interrupted execution is a typed error", async () => {
  const key = `ts-${randomUUID()}`;
  const child = spawn(process.execPath, [join(here, "child.mjs"), gatewayUrl, upstreamUrl, key], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  try {
    await until("the child's charge", () => count(key) === 1);
  } finally {
    child.kill("SIGKILL");
  }
  const carmy = new CarmyClient(gatewayUrl);
  await assert.rejects(
    carmy.hold("charge", { customer: "cus_42", amount: 500 }, key),
    (error) => error instanceof ExecutionInterrupted && error.executionId !== null,
  );
  assert.equal(count(key), 1);
});
