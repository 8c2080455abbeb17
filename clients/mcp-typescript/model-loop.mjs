// The request id a model holds (docs/semantics.md §11), through the official MCP TypeScript SDK
// (@modelcontextprotocol/sdk from npm): a simulated model loop against a running gateway. The
// client gives up on the first attempt of create_order after 50 ms; the model retries with a new
// JSON-RPC id and a new claudecode/toolUseId but the same request_id and must get the first
// attempt's order, never a second one. Then: the same id for another sku is a conflict, "r1" is
// refused as not random, read-only tools show no request_id. Exits non-zero on any failure.
//
// Usage: node model-loop.mjs <gateway base URL> <API key>
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [base, key] = process.argv.slice(2);
assert.ok(base && key, "usage: node model-loop.mjs <gateway base URL> <API key>");

async function connect() {
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
  });
  const client = new Client({ name: "carmy-model-loop", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

const toolUse = () => ({ "claudecode/toolUseId": `toolu_${randomUUID()}` });
const execution = (result) => result._meta["io.carmy/execution"];
const text = (result) => result.content[0].text;
// structuredContent without Carmy's guidance member (docs/semantics.md §11): the tool's data.
const data = (result) => {
  const { "io.carmy/guidance": _guidance, ...fields } = result.structuredContent;
  return fields;
};

const client = await connect();
const listed = new Map((await client.listTools()).tools.map((tool) => [tool.name, tool]));
for (const [name, tool] of listed) {
  const hasKey = "request_id" in (tool.inputSchema.properties ?? {});
  assert.equal(hasKey, !["get_order", "find_orders"].includes(name), name);
}
assert.match(listed.get("create_order").inputSchema.properties.request_id.description, /same id/);
assert.match(client.getInstructions() ?? "", /request_id/);

const sku = `TS-${randomUUID()}`;
const requestId = randomUUID();
const args = { sku, request_id: requestId };
let first = null;
try {
  first = await client.callTool({ name: "create_order", arguments: args, _meta: toolUse() }, undefined, {
    signal: AbortSignal.timeout(50),
  });
} catch {
  // the client gave up after 50 ms, as a model's client does on a timeout
}

const again = await client.callTool({ name: "create_order", arguments: args, _meta: toolUse() });
assert.equal(again.isError, false, text(again));
assert.equal(execution(again).replayed, true);
assert.equal(execution(again).source, "argument");
const found = await client.callTool({ name: "find_orders", arguments: { sku } });
assert.equal(found.structuredContent.orders.length, 1, JSON.stringify(found.structuredContent));
assert.deepEqual(data(again), { order_id: found.structuredContent.orders[0].order_id });
assert.match(again.structuredContent["io.carmy/guidance"], /it was not done again/);
if (first !== null) {
  assert.deepEqual(data(first), data(again));
}

const conflict = await client.callTool({
  name: "create_order",
  arguments: { ...args, sku: `${sku}-other` },
  _meta: toolUse(),
});
assert.equal(conflict.isError, true);
assert.equal(conflict.structuredContent.code, "IDEMPOTENCY_CONFLICT");
assert.match(text(conflict), /belongs to a different action/);

const refused = await client.callTool({
  name: "create_order",
  arguments: { sku: `${sku}-weak`, request_id: "r1" },
  _meta: toolUse(),
});
assert.equal(refused.isError, true);
assert.equal(refused.structuredContent.code, "REQUEST_ID_INVALID");
assert.match(text(refused), /set to a new random UUID that you generate now/);

await client.close();
console.log("model-loop.mjs: ok (one order, replayed to the retry; conflict; r1 refused)");
