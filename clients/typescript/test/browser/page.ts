// The page script of browser.test.ts: bundled (esbuild) with the web entry and run in
// Chromium. It calls the server over gRPC-Web from another origin and puts what it saw
// in window.__result for the test to assert. Query: ?server=URL&project=ID&mode=all|refused
// (the relative import is the file the package's "." export points to).
import { ChangeKind, createMemory, InvalidArgumentError, MemMachineError, WebStorageCursorStore } from "../../src/index.js";

declare global {
  interface Window {
    __result?: Record<string, unknown>;
  }
}

const params = new URLSearchParams(location.search);
const memory = createMemory({ baseUrl: params.get("server")!, org: "acme", project: params.get("project")!, timeoutMs: 10_000, retries: 0 });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function describeError(e: unknown): Record<string, unknown> {
  return {
    name: e instanceof Error ? e.name : typeof e,
    message: e instanceof Error ? e.message : String(e),
    memMachineError: e instanceof MemMachineError,
    codeName: e instanceof MemMachineError ? e.codeName : undefined,
  };
}

async function everything(): Promise<Record<string, unknown>> {
  const created = await memory.ensureProject("browser test");
  const createdAgain = await memory.ensureProject();

  // No key given: the client makes one; sending it again stores nothing.
  const first = await memory.add({ content: "Caroline adopted a golden retriever named Max", producer: "caroline" });
  const resent = await memory.add({ content: "resent", idempotencyKey: first.idempotencyKey });
  const many = await memory.addMany(["Melanie went to a pottery class", { content: "Max loves the beach", producer: "caroline" }]);

  const search = await memory.search("golden retriever", { topK: 3 });
  const listed: string[] = [];
  for await (const page of memory.list({ pageSize: 2 })) listed.push(...page.episodes.map((e) => e.content));

  const { setId } = await memory.raw.semantic.getSetId({ orgId: memory.org, projectId: memory.project });
  await memory.raw.semantic.addFeature({ orgId: memory.org, projectId: memory.project, setId, categoryName: "profile", tag: "pets", feature: "dog", value: "Max" });
  const features = await memory.features();

  // watch starts from now: keep adding until the open stream delivers one of ours.
  const store = new WebStorageCursorStore("mm-browser-test-cursor");
  const stop = new AbortController();
  let watched: { kind: string; content: string; cursor: string } | undefined;
  const watching = (async () => {
    for await (const ch of memory.watch({ store, signal: stop.signal })) {
      if (ch.kind === ChangeKind.EPISODE_ADDED && ch.episode?.content.startsWith("watched")) {
        watched = { kind: ChangeKind[ch.kind], content: ch.episode.content, cursor: ch.cursor };
        break;
      }
    }
  })();
  for (let i = 0; i < 40 && !watched; i++) {
    await sleep(250);
    if (!watched) await memory.add(`watched ${i}`);
  }
  stop.abort();
  await watching;

  const bad = await memory.search("x", { filter: "producer_id = " }).then(() => undefined, (e: unknown) => e);
  return {
    created,
    createdAgain,
    first: { uid: first.uid, duplicate: first.duplicate, keyLength: first.idempotencyKey.length },
    resent: { uid: resent.uid, duplicate: resent.duplicate },
    many: many.map((r) => r.duplicate),
    searchTop: search.hits[0] && { content: search.hits[0].content, producer: search.hits[0].producer, score: search.hits[0].score, createdAtIsDate: search.hits[0].createdAt instanceof Date },
    listed,
    features: features.map((f) => [f.featureName, f.value]),
    watched,
    storedCursor: localStorage.getItem("mm-browser-test-cursor"),
    error: {
      ...describeError(bad),
      invalidArgument: bad instanceof InvalidArgumentError,
      fieldViolations: bad instanceof MemMachineError ? bad.fieldViolations.map((v) => v.field) : [],
    },
  };
}

// From an origin the server does not allow: the first call must fail.
async function refused(): Promise<Record<string, unknown>> {
  return memory.ensureProject().then((created) => ({ created }), (e: unknown) => ({ error: describeError(e) }));
}

(params.get("mode") === "refused" ? refused() : everything()).then(
  (r) => (window.__result = { ok: true, ...r }),
  (e: unknown) => (window.__result = { ok: false, error: describeError(e), stack: e instanceof Error ? e.stack : undefined }),
);
