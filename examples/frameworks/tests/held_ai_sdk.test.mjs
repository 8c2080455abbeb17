// The held Vercel AI SDK recipe of docs/held.md (held_ai_sdk.mjs) with the SDK's mock model: the
// model calls `charge` under one tool-call id and the run is retried: one charge, same result.
import assert from "node:assert/strict";
import { test } from "node:test";
import { createServer } from "node:http";
import { randomUUID } from "node:crypto";
import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { CarmyClient } from "../../../clients/typescript/index.js";
import { chargeTool } from "../held_ai_sdk.mjs";

test("an AI SDK tool charges once across a retried run", async () => {
  const gateway = process.env.CARMY_FW_HELD_GATEWAY;
  assert.ok(gateway, "CARMY_FW_HELD_GATEWAY: run examples/frameworks/run-tests.sh");
  const charges = [];
  const bank = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk) => (body += chunk));
    request.on("end", () => {
      const charge = { charge_id: charges.length + 1, ...JSON.parse(body) };
      charges.push(charge);
      response.writeHead(201, { "content-type": "application/json" }).end(JSON.stringify(charge));
    });
  });
  await new Promise((resolve) => bank.listen(0, "127.0.0.1", resolve));
  const callId = `call_${randomUUID()}`;
  const returned = [];
  const usage = { inputTokens: { total: 1 }, outputTokens: { total: 1 } };
  const model = new MockLanguageModelV3({
    doGenerate: async ({ prompt }) => {
      const last = prompt[prompt.length - 1];
      if (last.role === "tool") {
        returned.push(JSON.stringify(last.content[last.content.length - 1].output));
        return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
      }
      return {
        content: [{ type: "tool-call", toolCallId: callId, toolName: "charge", input: JSON.stringify({ customer: "cus_42", amount: 500 }) }],
        finishReason: { unified: "tool-calls", raw: undefined },
        usage,
        warnings: [],
      };
    },
  });
  try {
    const tools = { charge: chargeTool(new CarmyClient(gateway), `http://127.0.0.1:${bank.address().port}`) };
    for (let run = 0; run < 2; run += 1) {
      const result = await generateText({ model, tools, prompt: "Charge cus_42 five dollars.", stopWhen: stepCountIs(5) });
      assert.equal(result.text, "done");
    }
  } finally {
    bank.close();
  }
  assert.equal(charges.filter((charge) => charge.key === callId).length, 1);
  assert.equal(returned.length, 2);
  assert.equal(returned[0], returned[1]);
  assert.match(returned[0], /"charge_id":1/);
});
