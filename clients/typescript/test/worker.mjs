// One worker process of the concurrency test (clients/python/tests/test_held_concurrency.py):
// `node worker.mjs GATEWAY UPSTREAM KEYS` runs the held function `charge` once per key of the
// comma-separated KEYS (repeats included), all at once, and prints [[key, charge_id], ...].
import { CarmyClient, held } from "../index.js";

const [gateway, upstream, keys] = process.argv.slice(2);
const carmy = new CarmyClient(gateway, { retry: { maxAttempts: 200, deadlineMs: 120_000, maxBackoffMs: 500 } });
const charge = held(carmy, "charge", async (args, { requestId }) => {
  const answer = await fetch(`${upstream}/charge`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ key: requestId }),
  });
  return (await answer.json()).charge_id;
});
const results = await Promise.all(
  keys.split(",").map(async (key) => [key, await charge({ customer: "cus_42", amount: 5 }, { requestId: key })]),
);
console.log(JSON.stringify(results));
