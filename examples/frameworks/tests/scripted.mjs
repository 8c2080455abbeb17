// The scripted model of the JavaScript framework tests: the same conversation as scripted.py
// (read it for the why), step by step, each step a run of its own.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";

export const SLOW_MS = 4000;
const CALL_AGAIN = "Call the tool again now with the same arguments and the same `request_id`";
export const EXPECTED = {
  success: ["Nothing more is needed for this action", "order_id"],
  replay: ["it was not done again", "order_id"],
  conflict: ["already belongs to a different action", "Do not repeat this call as it is"],
  input_error: ["Carmy refused this call before running it", "Correct what the message names"],
  uncertain: ["is still running as execution", CALL_AGAIN, "this answer is not an error"],
  unprotected: ["This call carried no `request_id`", "random id you generate"],
};
const MOST_REPEATS = 15;

export class Script {
  constructor() {
    this.sku = `FW-${randomUUID().slice(0, 10)}`;
    this.views = {};
    this.current = null;
    this.repeats = 0;
    const order = { sku: this.sku, request_id: randomUUID() };
    this.plan = [
      ["success", "create_order", order],
      ["replay", "create_order", { ...order }],
      ["conflict", "create_order", { ...order, sku: `${this.sku}-other` }],
      ["input_error", "sleep", { ms: "soon", request_id: randomUUID() }],
      ["uncertain", "sleep", { ms: SLOW_MS, request_id: randomUUID() }],
      ["unprotected", "create_order", { sku: `${this.sku}-bare` }],
    ];
  }

  /** The next tool call ([name, arguments]) after reading `view`, or null to end the run. */
  nextCall(view) {
    if (view != null && this.current != null) {
      const label = this.current[0];
      (this.views[label] ??= []).push(view);
      if (view.includes("Call the tool again now with the same arguments")) {
        this.repeats += 1;
        assert.ok(this.repeats <= MOST_REPEATS, `still not done: ${view}`);
        return [this.current[1], { ...this.current[2] }];
      }
      this.current = null;
      return null;
    }
    if (this.plan.length === 0) return null;
    this.current = this.plan.shift();
    return [this.current[1], { ...this.current[2] }];
  }

  remaining() {
    return this.plan.length > 0;
  }

  check(framework) {
    for (const [label, phrases] of Object.entries(EXPECTED)) {
      assert.ok(this.views[label], `${framework}: no ${label} view: ${JSON.stringify(this.views)}`);
      for (const phrase of phrases) {
        assert.ok(this.views[label][0].includes(phrase), `${framework}: ${label} lacks ${phrase}: ${this.views[label][0]}`);
      }
    }
    const slow = this.views.uncertain;
    assert.ok(slow.length >= 2, `${framework}: the slow call was answered at once`);
    const last = slow[slow.length - 1].replaceAll(" ", "").replaceAll("\\", "");
    assert.ok(last.includes(`"slept_ms":${SLOW_MS}`), `${framework}: ${last}`);
    assert.ok(slow[slow.length - 1].includes("it was not done again"), framework);
  }
}

async function gatewayCall(base, key, tool, args) {
  const answer = await fetch(`${base}/v1/executions`, {
    method: "POST",
    headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
    body: JSON.stringify({ tool, arguments: args }),
  });
  assert.equal(answer.status, 200);
  return (await answer.json()).data;
}

export async function metric(base, name, tool) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name}{tool="${tool}"} `));
  return line ? Number(line.split(" ")[1]) : 0;
}

/** The same request_id twice made one order; the slow call ran once. */
export async function checkEffects(script, base, key, framework, sleepsBefore) {
  const orders = async (sku) => (await gatewayCall(base, key, "find_orders", { sku })).orders.length;
  assert.equal(await orders(script.sku), 1, framework);
  assert.equal(await orders(`${script.sku}-other`), 0, framework);
  assert.equal(await orders(`${script.sku}-bare`), 1, framework);
  assert.equal(await metric(base, "carmy_tool_runs_total", "sleep"), sleepsBefore + 1, framework);
}
