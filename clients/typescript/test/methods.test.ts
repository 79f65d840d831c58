// Every method of the client against the real server, on both transports.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  ChangeKind, createMemory, DeadlineExceededError, InvalidArgumentError, MemMachineError, Memory, MemoryType,
  NotFoundError, UnimplementedError, Code,
} from "../src/node.js";
import { projectId, Server } from "./harness.js";
import { dropFirstAnswer } from "./proxy.js";

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server?.kill();
});

async function fresh(transport: "grpc" | "grpc-web", name: string): Promise<Memory> {
  const m = createMemory({ baseUrl: server.url, org: "acme", project: projectId(name), transport, timeoutMs: 10_000 });
  assert.equal(await m.ensureProject("ts client test"), true);
  assert.equal(await m.ensureProject(), false, "a second ensureProject finds it");
  return m;
}

async function allEpisodes(m: Memory): Promise<string[]> {
  const out: string[] = [];
  for await (const page of m.list()) out.push(...page.episodes.map((e) => e.content));
  return out;
}

for (const transport of ["grpc", "grpc-web"] as const) {
  describe(`over ${transport}`, () => {
    test("add, addMany and duplicates", async () => {
      const m = await fresh(transport, "add");
      const one = await m.add({ content: "the dog is a golden retriever", producer: "alice", metadata: { topic: "pets" } });
      assert.match(one.uid, /^[0-9a-f-]{36}$/);
      assert.equal(one.duplicate, false);
      assert.ok(one.idempotencyKey.length > 0, "the client made an idempotency key");
      const many = await m.addMany(["first", { content: "second", idempotencyKey: "k-2" }]);
      assert.deepEqual(many.map((r) => r.duplicate), [false, false]);
      assert.equal(many[1]!.idempotencyKey, "k-2");
      // The same key again: nothing stored, the original uid answered.
      const again = await m.add({ content: "second (resent)", idempotencyKey: "k-2" });
      assert.deepEqual([again.uid, again.duplicate], [many[1]!.uid, true]);
      assert.deepEqual(await allEpisodes(m), ["the dog is a golden retriever", "first", "second"]);
    });

    test("search with typed hits and score parts", async () => {
      const m = await fresh(transport, "search");
      await m.addMany([
        { content: "Caroline adopted a golden retriever puppy", producer: "caroline" },
        { content: "Melanie went to a pottery class", producer: "melanie" },
      ]);
      const plain = await m.search("golden retriever", { topK: 5 });
      assert.equal(plain.hits[0]!.content, "Caroline adopted a golden retriever puppy");
      assert.equal(plain.hits[0]!.producer, "caroline");
      assert.ok(plain.hits[0]!.score > 0);
      assert.ok(plain.hits[0]!.createdAt instanceof Date);
      assert.equal(plain.hits[0]!.scoreParts, undefined, "no score parts unless asked");
      const explained = await m.search("golden retriever", { topK: 5, explain: true });
      const parts = explained.hits[0]!.scoreParts;
      assert.ok(parts, "explain fills scoreParts");
      assert.ok(parts.lexical > 0, `lexical part ${parts.lexical}`);
      const filtered = await m.search("pottery golden", { filter: "producer_id = 'melanie'" });
      assert.deepEqual(filtered.hits.map((h) => h.producer), ["melanie"]);
      assert.ok(plain.shortTerm.length >= 1, "short-term window answered");
    });

    test("list pages through the project in order", async () => {
      const m = await fresh(transport, "list");
      const contents = Array.from({ length: 7 }, (_, i) => `message ${i}`);
      await m.addMany(contents);
      const pages: number[] = [];
      const seen: string[] = [];
      for await (const page of m.list({ pageSize: 3 })) {
        pages.push(page.episodes.length);
        seen.push(...page.episodes.map((e) => e.content));
      }
      assert.deepEqual(pages, [3, 3, 1]);
      assert.deepEqual(seen, contents);
    });

    test("delete episodes", async () => {
      const m = await fresh(transport, "delete");
      const [a, b] = await m.addMany(["keep me", "delete me"]);
      assert.equal(await m.delete(b!.uid), 1);
      assert.deepEqual(await allEpisodes(m), ["keep me"]);
      // All or nothing: one id gone makes the call NOT_FOUND, and the other stays.
      await assert.rejects(m.delete([a!.uid, b!.uid]), NotFoundError);
      assert.deepEqual(await allEpisodes(m), ["keep me"]);
    });

    test("forgetSubject removes what a subject said, with a receipt", async () => {
      const m = await fresh(transport, "forget");
      await m.addMany([
        { content: "bob likes chess", producer: "bob" },
        { content: "carol likes tea", producer: "carol" },
      ]);
      const dry = await m.forgetSubject("bob", { dryRun: true });
      assert.equal(dry.dryRun, true);
      assert.equal(dry.projects[0]!.episodesDeleted, 1);
      assert.equal((await allEpisodes(m)).length, 2, "a dry run removes nothing");
      const receipt = await m.forgetSubject("bob");
      assert.ok(receipt.receiptId.length > 0);
      assert.deepEqual(receipt.projects.map((p) => [p.projectId, p.episodesDeleted]), [[m.project, 1]]);
      assert.deepEqual(await allEpisodes(m), ["carol likes tea"]);
    });

    test("features: searched and listed", async () => {
      const m = await fresh(transport, "features");
      const { setId } = await m.raw.semantic.getSetId({ orgId: m.org, projectId: m.project });
      for (const [feature, value] of [["food", "sushi"], ["pet", "a golden retriever"]] as const) {
        await m.raw.semantic.addFeature({ orgId: m.org, projectId: m.project, setId, categoryName: "profile", tag: "preferences", feature, value });
      }
      const all = await m.features();
      assert.deepEqual(all.map((f) => f.value).sort(), ["a golden retriever", "sushi"]);
      const found = await m.features({ query: "sushi", topK: 1 });
      assert.deepEqual(found.map((f) => [f.featureName, f.value]), [["food", "sushi"]]);
      assert.equal(await m.delete(found[0]!.id, { type: MemoryType.SEMANTIC }), 1);
      assert.deepEqual((await m.features()).map((f) => f.value), ["a golden retriever"]);
    });

    test("watch follows changes and saves its cursor", async () => {
      const m = await fresh(transport, "watch");
      await m.add("before the watch");
      const saved: string[] = [];
      const store = { load: async () => undefined, save: async (c: string) => void saved.push(c) };
      // No cursor anywhere: from the head, so "before the watch" is not seen.
      const ac = new AbortController();
      const seen: string[] = [];
      const watching = (async () => {
        for await (const ch of m.watch({ store, signal: ac.signal })) {
          if (ch.kind === ChangeKind.EPISODE_ADDED) seen.push(ch.episode?.content ?? "");
          if (seen.length === 2) break;
        }
      })();
      await new Promise((r) => setTimeout(r, 300)); // the stream is open
      await m.add("one");
      await m.add("two");
      await watching;
      ac.abort();
      assert.deepEqual(seen, ["one", "two"]);
      assert.equal(saved.length, 2, "both cursors saved (the last on leaving the loop)");
    });

    test("importStream streams batches (gRPC only)", async () => {
      const m = await fresh(transport, "import");
      async function* batches() {
        yield ["a1", "a2"];
        yield [{ content: "b1", idempotencyKey: "imp-b1" }];
        yield [{ content: "b1 again", idempotencyKey: "imp-b1" }];
      }
      if (transport === "grpc-web") {
        await assert.rejects(m.importStream(batches()), (e: unknown) => e instanceof UnimplementedError && /grpc transport/.test(e.message));
        return;
      }
      const r = await m.importStream(batches());
      assert.deepEqual([r.batches, r.messages, r.duplicates, r.firstError], [3, 4, 1, undefined]);
      assert.deepEqual(await allEpisodes(m), ["a1", "a2", "b1"]);
    });

    test("errors are typed and carry details", async () => {
      const m = await fresh(transport, "errors");
      // An empty message: INVALID_ARGUMENT with a BadRequest naming the field.
      const bad = await m.add({ content: "" }).then(() => undefined, (e: unknown) => e);
      assert.ok(bad instanceof InvalidArgumentError, String(bad));
      assert.equal(bad.code, Code.InvalidArgument);
      assert.equal(bad.codeName, "INVALID_ARGUMENT");
      assert.ok(bad.fieldViolations.some((v) => v.field === "messages[0].content"), JSON.stringify(bad.fieldViolations));
      // A malformed filter names its position.
      const filter = await m.search("x", { filter: "producer_id = " }).then(() => undefined, (e: unknown) => e);
      assert.ok(filter instanceof InvalidArgumentError);
      assert.match(filter.message, /position \d+/);
      assert.ok(filter.fieldViolations.some((v) => v.field === "filter"));
      // A project that does not exist.
      const ghost = createMemory({ baseUrl: server.url, org: "acme", project: "no-such-project", transport });
      const nf = await ghost.search("x").then(() => undefined, (e: unknown) => e);
      assert.ok(nf instanceof NotFoundError && nf instanceof MemMachineError, String(nf));
    });

    test("a deadline that passes is DeadlineExceeded, not retried", async () => {
      const m = await fresh(transport, "deadline");
      // The server answers, the proxy withholds the answer: the deadline must pass.
      const proxy = await dropFirstAnswer(server.port, "hold");
      try {
        const slow = createMemory({ baseUrl: proxy.url, org: m.org, project: m.project, transport, timeoutMs: 400 });
        const started = Date.now();
        const err = await slow.search("anything").then(() => undefined, (e: unknown) => e);
        const took = Date.now() - started;
        assert.ok(err instanceof DeadlineExceededError, String(err));
        assert.equal(err.code, Code.DeadlineExceeded);
        assert.ok(took >= 390 && took < 2000, `failed after ${took} ms`);
        assert.equal(proxy.drops, 1, "one attempt only");
        // A per-call deadline overrides the client's.
        const t2 = Date.now();
        await assert.rejects(slow.search("anything", { timeoutMs: 100 }), DeadlineExceededError);
        assert.ok(Date.now() - t2 < 390, "the call's own deadline applied");
      } finally {
        await proxy.close();
      }
    });
  });
}
