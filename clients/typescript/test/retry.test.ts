// An add whose answer is lost (the connection drops after the server stored it) is
// retried with the same idempotency key and stored once.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createMemory, type Memory, UnavailableError } from "../src/node.js";
import { projectId, Server } from "./harness.js";
import { dropFirstAnswer } from "./proxy.js";

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server?.kill();
});

async function contents(m: Memory): Promise<string[]> {
  const out: string[] = [];
  for await (const page of m.list()) out.push(...page.episodes.map((e) => e.content));
  return out;
}

for (const transport of ["grpc", "grpc-web"] as const) {
  describe(`over ${transport}`, () => {
    test("a retried add after a dropped connection is stored once", async () => {
      const project = projectId("retry");
      const direct = createMemory({ baseUrl: server.url, org: "acme", project, transport });
      await direct.ensureProject();
      const proxy = await dropFirstAnswer(server.port);
      try {
        const m = createMemory({ baseUrl: proxy.url, org: "acme", project, transport, timeoutMs: 10_000 });
        const r = await m.add({ content: "stored once" });
        assert.equal(proxy.drops, 1, "the first answer was dropped");
        assert.equal(r.duplicate, true, "the retry found the first attempt's episode");
        assert.deepEqual(await contents(direct), ["stored once"]);
      } finally {
        await proxy.close();
      }
    });

    test("without retries the dropped answer is a typed transient error", async () => {
      const project = projectId("noretry");
      const direct = createMemory({ baseUrl: server.url, org: "acme", project, transport });
      await direct.ensureProject();
      const proxy = await dropFirstAnswer(server.port);
      try {
        const m = createMemory({ baseUrl: proxy.url, org: "acme", project, transport, retries: 0 });
        const err = await m.add("lost answer").then(() => undefined, (e: unknown) => e);
        assert.ok(err instanceof UnavailableError, `got ${String(err)}`);
        assert.deepEqual(await contents(direct), ["lost answer"], "the server stored it all the same");
      } finally {
        await proxy.close();
      }
    });
  });
}
