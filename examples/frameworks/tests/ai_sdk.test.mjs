// The Vercel AI SDK recipe (ai_sdk_agent.mjs: `ai` + `@ai-sdk/mcp`) with the SDK's mock model:
// what the model read of each answer (the tool message the SDK built) holds Carmy's guidance.
import assert from "node:assert/strict";
import { test } from "node:test";
import { MockLanguageModelV3 } from "ai/test";
import { carmyClient, runAgent } from "../ai_sdk_agent.mjs";
import { Script, checkEffects, metric } from "./scripted.mjs";

const base = process.env.CARMY_FW_GATEWAY;
const key = process.env.CARMY_FW_KEY;

/** The text of a tool result as the SDK hands it to the model. */
function viewOf(output) {
  if (output.type === "content") return output.value.map((part) => part.text ?? JSON.stringify(part)).join("\n");
  return typeof output.value === "string" ? output.value : JSON.stringify(output.value);
}

function scriptedModel(script) {
  const usage = { inputTokens: { total: 1 }, outputTokens: { total: 1 } };
  let step = 0;
  return new MockLanguageModelV3({
    doGenerate: async ({ prompt }) => {
      const last = prompt[prompt.length - 1];
      const view = last.role === "tool" ? viewOf(last.content[last.content.length - 1].output) : null;
      const call = script.nextCall(view);
      step += 1;
      if (call === null) {
        return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
      }
      const [toolName, args] = call;
      return {
        content: [{ type: "tool-call", toolCallId: `call_${step}`, toolName, input: JSON.stringify(args) }],
        finishReason: { unified: "tool-calls", raw: undefined },
        usage,
        warnings: [],
      };
    },
  });
}

test("the AI SDK's model reads Carmy's guidance", async () => {
  assert.ok(base && key, "CARMY_FW_GATEWAY and CARMY_FW_KEY: run examples/frameworks/run-tests.sh");
  const script = new Script();
  const sleeps = await metric(base, "carmy_tool_runs_total", "sleep");
  const client = await carmyClient(`${base}/mcp`, key);
  try {
    const tools = await client.tools();
    const model = scriptedModel(script);
    while (script.remaining()) {
      assert.equal((await runAgent(model, tools, "Next step.")).text, "done");
    }
  } finally {
    await client.close();
  }
  script.check("ai-sdk");
  await checkEffects(script, base, key, "ai-sdk", sleeps);
});
