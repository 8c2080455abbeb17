// A Vercel AI SDK tool that runs in the agent's process, protected by Carmy (docs/held.md): the
// tool-call id the SDK passes to `execute` is the request id. The gateway declares the tool as a
// `[[client_tools]]` entry named `charge`. Outside this repository, import from "@carmy/client"
// (`npm install ./clients/typescript`).
import { jsonSchema, tool } from "ai";
import { held } from "../../clients/typescript/index.js";

/** The tool `charge`, charging through `bank`'s API at most once per tool call. */
export function chargeTool(carmy, bank) {
  const chargeOnce = held(carmy, "charge", async ({ customer, amount }, { requestId }) => {
    const answer = await fetch(`${bank}/charge`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ key: requestId, customer, amount }),
    });
    return answer.json();
  });
  return tool({
    description: "Charge a customer's card; amount in cents.",
    inputSchema: jsonSchema({
      type: "object",
      properties: { customer: { type: "string" }, amount: { type: "integer" } },
      required: ["customer", "amount"],
    }),
    execute: async (input, { toolCallId }) => chargeOnce(input, { requestId: toolCallId }),
  });
}
