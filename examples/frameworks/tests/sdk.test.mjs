// The official MCP TypeScript SDK (@modelcontextprotocol/sdk, protocol 2025-11-25) as a host
// that shows the model a result's text blocks, and Claude Code's JSON configuration
// (claude-code.mcp.json) as written, with the `_meta` Claude Code sends.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { Script, checkEffects, metric } from "./scripted.mjs";

const base = process.env.CARMY_FW_GATEWAY;
const key = process.env.CARMY_FW_KEY;

async function connect(url, headers) {
  const client = new Client({ name: "carmy-framework-tests", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return client;
}

const viewOf = (result) => result.content.map((block) => block.text).join("\n");

test("the official TypeScript SDK's text blocks carry Carmy's guidance", async () => {
  assert.ok(base && key, "CARMY_FW_GATEWAY and CARMY_FW_KEY: run examples/frameworks/run-tests.sh");
  const script = new Script();
  const sleeps = await metric(base, "carmy_tool_runs_total", "sleep");
  const client = await connect(`${base}/mcp`, { Authorization: `Bearer ${key}` });
  try {
    while (script.remaining()) {
      let call = script.nextCall(null);
      while (call !== null) {
        const result = await client.callTool({ name: call[0], arguments: call[1] });
        call = script.nextCall(viewOf(result));
      }
    }
  } finally {
    await client.close();
  }
  script.check("typescript-sdk");
  await checkEffects(script, base, key, "typescript-sdk", sleeps);
});

test("Claude Code's JSON configuration connects as written", async () => {
  const config = JSON.parse(readFileSync(new URL("../claude-code.mcp.json", import.meta.url), "utf8"));
  const server = config.mcpServers.carmy;
  assert.equal(server.type, "http");
  // The gateway of the test instead of 127.0.0.1:8080; the key as Claude Code expands ${VAR}.
  const url = server.url.replace("http://127.0.0.1:8080", base);
  const headers = Object.fromEntries(
    Object.entries(server.headers).map(([name, value]) => [name, value.replace("${CARMY_API_KEY}", key)]),
  );
  const client = await connect(url, headers);
  try {
    const toolUse = `toolu_${randomUUID().replaceAll("-", "")}`;
    const sku = `CC-${randomUUID().slice(0, 8)}`;
    // Claude Code sends its tool-use id in _meta with every call; the model wrote no request_id.
    const done = await client.callTool({ name: "create_order", arguments: { sku }, _meta: { "claudecode/toolUseId": toolUse } });
    assert.equal(done.isError, false);
    assert.equal(done._meta["io.carmy/execution"].source, "client_meta");
    assert.ok(viewOf(done).includes(`calling again with \`request_id\` set to "${toolUse}" returns this same result`), viewOf(done));
    // The model's repeat that adds that id is the same action.
    const again = await client.callTool({
      name: "create_order",
      arguments: { sku, request_id: toolUse },
      _meta: { "claudecode/toolUseId": `toolu_${randomUUID().replaceAll("-", "")}` },
    });
    assert.equal(again._meta["io.carmy/execution"].replayed, true);
    assert.equal(again._meta["io.carmy/execution"].execution_id, done._meta["io.carmy/execution"].execution_id);
  } finally {
    await client.close();
  }
});
