// A holder in a process of its own (the SIGKILL test): charges the counting upstream inside a
// held execution of the client tool `charge` (lease 1 s), prints `charged`, and hangs.
import { CarmyClient, held } from "../index.js";

const [gateway, upstream, requestId] = process.argv.slice(2);
const carmy = new CarmyClient(gateway);
const charge = held(
  carmy,
  "charge",
  async (args, { requestId: key }) => {
    const answer = await fetch(`${upstream}/charge`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ key, ...args }),
    });
    console.log("charged");
    await new Promise((resolve) => setTimeout(resolve, 600_000));
    return { charge_id: (await answer.json()).charge_id };
  },
  { leaseMs: 1000 },
);
await charge({ customer: "cus_42", amount: 500 }, { requestId });
