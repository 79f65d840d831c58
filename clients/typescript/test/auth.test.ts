// A server with --auth: the API key goes as a Bearer header; another org's key is refused.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createMemory, PermissionDeniedError, UnauthenticatedError } from "../src/node.js";
import { createKey, projectId, Server } from "./harness.js";

let server: Server;
let acmeKey: string;
before(async () => {
  server = await Server.start({ args: ["--auth", "--embedder", "none"] });
  acmeKey = createKey(server.dataDir, "acme");
  createKey(server.dataDir, "globex");
});
after(async () => {
  await server?.kill();
});

for (const transport of ["grpc", "grpc-web"] as const) {
  describe(`auth over ${transport}`, () => {
    test("the org's key works; another org's is PERMISSION_DENIED; none is UNAUTHENTICATED", async () => {
      const project = projectId("auth");
      const mine = createMemory({ baseUrl: server.url, org: "acme", project, apiKey: acmeKey, transport });
      await mine.ensureProject();
      await mine.add("a secret of acme");
      assert.equal((await mine.search("secret")).hits.length, 1);

      const theirs = createMemory({ baseUrl: server.url, org: "globex", project, apiKey: acmeKey, transport });
      await assert.rejects(theirs.search("secret"), PermissionDeniedError);
      await assert.rejects(theirs.ensureProject(), PermissionDeniedError);

      const anonymous = createMemory({ baseUrl: server.url, org: "acme", project, transport });
      await assert.rejects(anonymous.search("secret"), UnauthenticatedError);
      const forged = createMemory({ baseUrl: server.url, org: "acme", project, apiKey: acmeKey + "x", transport });
      await assert.rejects(forged.search("secret"), UnauthenticatedError);
    });
  });
}
