// MCP tasks (the io.modelcontextprotocol/tasks extension, protocol 2026-07-28) answered from
// Carmy's records (docs/semantics.md §11, "Tasks"), through the official MCP TypeScript SDK's
// 2026-07-28 client (@modelcontextprotocol/client from npm), on two gateway processes sharing one
// PostgreSQL database. The SDK (2.4.0) has no tasks support: the client declares the extension
// in its capabilities and sends tools/call, tasks/get and tasks/cancel through `client.request`
// with a pass-through result schema; its codec refuses the task result of tools/call, which is
// then read from the body its own transport received. Checks: a 3 s sleep gets a task; tasks/get on the other replica
// says working, then completed with the result; another principal's tasks/get is refused;
// tasks/cancel cancels and the record says so; the owner killed mid-task: failed/uncertain, never
// completed. Exits non-zero on any failure.
//
// Usage: node tasks.mjs <carmy-gateway binary> <PostgreSQL URL of an empty database>
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createServer } from "node:net";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const [binary, databaseUrl] = process.argv.slice(2);
assert.ok(binary && databaseUrl, "usage: node tasks.mjs <carmy-gateway binary> <database URL>");
const KEY = "mcp-ts-key";
const OTHER = "mcp-ts-other-key";
const TASKS = "io.modelcontextprotocol/tasks";
const DEADLINE_MS = 20000;

/** A Standard Schema that accepts any result as it came. */
const anything = { "~standard": { version: 1, vendor: "carmy-test", validate: (value) => ({ value }) } };

function freePort() {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function startGateway() {
  const port = await freePort();
  const child = spawn(binary, [], {
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      CARMY_LISTEN: `127.0.0.1:${port}`,
      CARMY_API_KEYS: `${KEY}=typescript,${OTHER}=other`,
      CARMY_LEASE_TTL_MS: "1500",
      RUST_LOG: "error",
    },
    stdio: ["ignore", "ignore", "inherit"],
  });
  const url = `http://127.0.0.1:${port}`;
  await until("the gateway answers /healthz", async () => {
    try {
      return (await fetch(`${url}/healthz`)).ok;
    } catch {
      return false;
    }
  });
  return { url, child };
}

async function until(what, condition) {
  const deadline = Date.now() + DEADLINE_MS;
  for (;;) {
    const seen = await condition();
    if (seen) return seen;
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** The body of the last response the SDK's transport received (see `callSleep`). */
let lastBody = null;

async function connect(gateway, key = KEY) {
  const transport = new StreamableHTTPClientTransport(new URL(`${gateway.url}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
    fetch: async (url, init) => {
      const response = await fetch(url, init);
      lastBody = await response.clone().text();
      return response;
    },
  });
  const client = new Client(
    { name: "carmy-tasks-test", version: "1.0.0" },
    { capabilities: { extensions: { [TASKS]: {} } }, versionNegotiation: { mode: { pin: "2026-07-28" } } },
  );
  await client.connect(transport);
  return client;
}

// The SDK's 2026-07-28 codec refuses a `tools/call` result whose resultType is "task" (it knows
// only "complete" and "input_required"): the task is read from the body its transport received.
async function callSleep(client, ms, requestId) {
  try {
    return await client.request(
      {
        method: "tools/call",
        params: { name: "sleep", arguments: { ms }, _meta: { "io.carmy/request_id": requestId } },
      },
      anything,
    );
  } catch (error) {
    if (error.code !== "UNSUPPORTED_RESULT_TYPE" || error.data?.resultType !== "task") throw error;
    return JSON.parse(lastBody).result;
  }
}
const getTask = (client, taskId) => client.request({ method: "tasks/get", params: { taskId } }, anything);
const cancelTask = (client, taskId) => client.request({ method: "tasks/cancel", params: { taskId } }, anything);

async function refused(promise) {
  try {
    const result = await promise;
    assert.fail(`expected a refusal, got ${JSON.stringify(result)}`);
  } catch (error) {
    if (error instanceof assert.AssertionError) throw error;
    return error;
  }
}

async function record(gateway, executionId) {
  const response = await fetch(`${gateway.url}/v1/executions/${executionId}`, {
    headers: { Authorization: `Bearer ${KEY}` },
  });
  assert.equal(response.status, 200);
  return response.json();
}

const a = await startGateway();
const b = await startGateway();
try {
  const onA = await connect(a);
  const onB = await connect(b);
  const otherOnB = await connect(b, OTHER);

  // A 3 s sleep gets a task; the other replica answers working, then completed.
  const created = await callSleep(onA, 3000, `ts-task-${randomUUID()}`);
  assert.equal(created.resultType, "task", JSON.stringify(created));
  assert.equal(created.status, "working");
  const taskId = created.taskId;
  assert.match(taskId, /^exec_[0-9a-f]{32}$/);
  assert.equal((await getTask(onB, taskId)).status, "working");
  const otherError = await refused(getTask(otherOnB, taskId));
  assert.equal(otherError.code, -32602, String(otherError));
  const done = await until("the task completed on B", async () => {
    const task = await getTask(onB, taskId);
    return task.status === "completed" && task;
  });
  assert.equal(done.result.isError, false);
  const { "io.carmy/guidance": note, ...slept } = done.result.structuredContent;
  assert.deepEqual(slept, { slept_ms: 3000 });
  assert.match(note, /it was not done again/);
  assert.equal(done.result._meta["io.carmy/execution"].execution_id, taskId);

  // tasks/cancel on B cancels A's execution; the record says so.
  const long = await callSleep(onA, 10000, `ts-task-cancel-${randomUUID()}`);
  assert.equal(long.resultType, "task");
  await cancelTask(onB, long.taskId);
  await until("the task cancelled", async () => (await getTask(onB, long.taskId)).status === "cancelled");
  const cancelled = await record(b, long.taskId);
  assert.equal(cancelled.status, "cancelled");
  assert.equal(cancelled.error.code, "CANCELLED");

  // The owner killed mid-task: failed with the uncertain text, never completed.
  const doomed = await callSleep(onA, 10000, `ts-task-killed-${randomUUID()}`);
  assert.equal(doomed.resultType, "task");
  a.child.kill("SIGKILL");
  const statuses = [];
  const failed = await until("A's lease to lapse", async () => {
    const task = await getTask(onB, doomed.taskId);
    statuses.push(task.status);
    return task.status === "failed" && task;
  });
  assert.ok(!statuses.includes("completed"), statuses.join(","));
  assert.equal(failed.error.code, -32001);
  assert.equal(failed.error.data.code, "EXECUTION_UNCERTAIN");
  assert.equal(failed.error.data.execution_id, doomed.taskId);
  assert.match(failed.error.message, new RegExp(doomed.taskId));
  console.log("tasks.mjs: 5 passed, 0 failed");
} finally {
  a.child.kill("SIGKILL");
  b.child.kill("SIGKILL");
}
