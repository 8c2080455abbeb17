// A Vercel AI SDK agent with Carmy's tools over MCP (docs/mcp.md, "Vercel AI SDK"): `ai` and
// `@ai-sdk/mcp`. The model reads the text blocks of every answer; the client sets no timeout on
// a tool call, so Carmy's answer within CARMY_MCP_ANSWER_WITHIN_MS (45 s) always arrives. The one
// setting to choose: `stopWhen`, since generateText stops after one step by default and a model
// that follows Carmy's "call again" needs a step per call.
//
// Run with a real model (e.g. `@ai-sdk/openai`'s `openai("gpt-4o")`) against a gateway on
// 127.0.0.1:8080: node ai_sdk_agent.mjs "Order one A1, then tell me its order id."
import { generateText, stepCountIs } from "ai";
import { createMCPClient } from "@ai-sdk/mcp";

export const GATEWAY_MCP = process.env.CARMY_MCP_URL ?? "http://127.0.0.1:8080/mcp";

// How many steps (model calls) a run may take: enough for a slow call's repeats.
export const MAX_STEPS = 20;

/** An MCP client of Carmy; `apiKey` when the gateway has keys (CARMY_API_KEYS). */
export async function carmyClient(url = GATEWAY_MCP, apiKey = undefined) {
  const headers = apiKey ? { Authorization: `Bearer ${apiKey}` } : undefined;
  return createMCPClient({ transport: { type: "http", url, headers } });
}

/** Runs `prompt` on `model` with `tools` (from `client.tools()`). */
export async function runAgent(model, tools, prompt) {
  return generateText({ model, tools, prompt, stopWhen: stepCountIs(MAX_STEPS) });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { openai } = await import("@ai-sdk/openai");
  const client = await carmyClient(GATEWAY_MCP, process.env.CARMY_API_KEY);
  try {
    const result = await runAgent(openai("gpt-4o"), await client.tools(), process.argv[2]);
    console.log(result.text);
  } finally {
    await client.close();
  }
}
