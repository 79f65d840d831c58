// watch across a server restart (SIGKILL, started again on the same data and port) and
// a client restart (a new client reading the same cursor file): nothing missed, nothing twice.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { ChangeKind, createMemory, FileCursorStore, type Memory, OutOfRangeError } from "../src/node.js";
import { projectId, Server, tempDir } from "./harness.js";

let server: Server | undefined;
after(async () => {
  await server?.kill();
});

/** Follows `m`'s episodes into `seen` until `stop` aborts; resolves when the loop ends. */
function follow(m: Memory, store: FileCursorStore, seen: string[], stop: AbortSignal, reconnects: Error[] = []) {
  return (async () => {
    const opts = { store, signal: stop, maxBackoffMs: 300, onReconnect: (e: Error | undefined) => void (e && reconnects.push(e)) };
    for await (const ch of m.watch(opts)) {
      if (ch.kind === ChangeKind.EPISODE_ADDED) seen.push(ch.episode?.content ?? "?");
    }
  })();
}

async function until(what: string, cond: () => boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

for (const transport of ["grpc", "grpc-web"] as const) {
  describe(`watch over ${transport}`, () => {
    test("resumes after a server restart and after a client restart", async () => {
      server = await Server.start();
      const project = projectId("watch");
      const opts = { org: "acme", project, transport, timeoutMs: 10_000 };
      const m = createMemory({ baseUrl: server.url, ...opts });
      await m.ensureProject();
      const cursorFile = join(tempDir(), "cursor");
      const store = new FileCursorStore(cursorFile);
      // An empty cursor file: from now on.
      const seen: string[] = [];
      const reconnects: Error[] = [];
      const stopA = new AbortController();
      const a = follow(m, store, seen, stopA.signal, reconnects);
      await new Promise((r) => setTimeout(r, 300));
      await m.addMany(["m1", "m2"]);
      await until("m1, m2", () => seen.length >= 2);

      // The server dies; writes resume on its successor before the watcher is back.
      server = await server.restart();
      await m.add("m3");
      await m.add("m4");
      await until("m3, m4 after the restart", () => seen.length >= 4);
      assert.ok(reconnects.length >= 1, "the watcher saw its stream drop");
      assert.deepEqual(seen, ["m1", "m2", "m3", "m4"]);

      // The watching client goes away; changes go on; a new client resumes from the file.
      stopA.abort();
      await a;
      await m.addMany(["m5", "m6"]);
      const b = createMemory({ baseUrl: server.url, ...opts });
      const seenB: string[] = [];
      const stopB = new AbortController();
      const followB = follow(b, new FileCursorStore(cursorFile), seenB, stopB.signal);
      await until("m5, m6 by the new client", () => seenB.length >= 2);
      await m.add("m7");
      await until("m7", () => seenB.length >= 3);
      stopB.abort();
      await followB;
      assert.deepEqual(seenB, ["m5", "m6", "m7"]);
      await server.kill();
    });
  });
}

test("a pruned cursor is OutOfRangeError naming the oldest kept (ErrorInfo), on both transports", async () => {
  const pruning = await Server.start({ args: ["--embedder", "none", "--change-feed-retention", "1"] });
  try {
    const project = projectId("pruned");
    const m = createMemory({ baseUrl: pruning.url, org: "acme", project });
    await m.ensureProject();
    const cursors: string[] = [];
    const stop = new AbortController();
    const watching = (async () => {
      for await (const ch of m.watch({ signal: stop.signal })) if (cursors.push(ch.cursor) === 3) break;
    })();
    await new Promise((r) => setTimeout(r, 300));
    await m.addMany(["a", "b", "c"]);
    await watching;
    await new Promise((r) => setTimeout(r, 4000)); // past the retention and a pruning or two
    for (const transport of ["grpc", "grpc-web"] as const) {
      const c = createMemory({ baseUrl: pruning.url, org: "acme", project, transport });
      const err = await (async () => {
        for await (const _ of c.watch({ after: cursors[0]! })) return undefined;
      })().then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof OutOfRangeError, `${transport}: ${String(err)}`);
      assert.equal(err.errorInfo?.reason, "CURSOR_PRUNED");
      const oldest = err.resumeAfter!;
      assert.ok(oldest > cursors[0]! && err.message.includes(oldest), err.message);
      // Resuming from the cursor it names works.
      const d = await c.add(`d over ${transport}`);
      for await (const ch of c.watch({ after: oldest })) if (ch.episodeUid === d.uid) break;
    }
  } finally {
    await pruning.kill();
  }
});
