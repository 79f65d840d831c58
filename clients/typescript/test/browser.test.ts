// The web entry in a real browser: test/browser/page.ts, bundled with esbuild, runs in
// headless Chromium (playwright-core) from a page on another origin than the server's,
// which allows that origin with --allowed-origin; a page on a third origin is refused.
// Needs /usr/bin/chromium (or CHROMIUM) and playwright-core under <repo>/.tools/playwright
// (or PLAYWRIGHT_PREFIX): scripts/setup-test-tools.sh. Under CI=true a missing one fails.
import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type Server as HttpServer } from "node:http";
import type { AddressInfo } from "node:net";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { build } from "esbuild";
import { createMemory } from "../src/node.js";
import { projectId, repoRoot, Server, tempDir } from "./harness.js";

const CHROMIUM = process.env["CHROMIUM"] ?? "/usr/bin/chromium";
const PLAYWRIGHT_PREFIX = process.env["PLAYWRIGHT_PREFIX"] ?? join(repoRoot(), ".tools", "playwright");

// The little of playwright-core's API used here (it is not a dependency of this package).
interface Page {
  goto(url: string): Promise<unknown>;
  waitForFunction(fn: string, arg: undefined, opts: { timeout: number }): Promise<unknown>;
  evaluate(fn: string): Promise<unknown>;
  on(event: "console", fn: (m: { type(): string; text(): string }) => void): void;
  on(event: "pageerror", fn: (e: Error) => void): void;
}
interface Browser {
  newPage(): Promise<Page>;
  close(): Promise<void>;
}
type Chromium = { launch(opts: object): Promise<Browser> };

function findTools(): { chromium: Chromium } | string {
  const missing: string[] = [];
  if (!existsSync(CHROMIUM)) missing.push(`Chromium (${CHROMIUM}; set CHROMIUM)`);
  let chromium: Chromium | undefined;
  try {
    chromium = createRequire(join(PLAYWRIGHT_PREFIX, "package.json"))("playwright-core").chromium as Chromium;
  } catch {
    missing.push(`playwright-core (under ${PLAYWRIGHT_PREFIX}; set PLAYWRIGHT_PREFIX or run scripts/setup-test-tools.sh)`);
  }
  return missing.length || !chromium ? `no ${missing.join(", no ")}` : { chromium };
}
const tools = findTools();
const skip = typeof tools === "string" && process.env["CI"] !== "true" ? `browser test skipped: ${tools}` : false;

/** Serves the files of `dir` on 127.0.0.1 (an origin of its own per port). */
async function staticServer(dir: string): Promise<{ http: HttpServer; origin: string }> {
  const types: Record<string, string> = { html: "text/html", js: "text/javascript" };
  const http = createServer((req, res) => {
    const name = new URL(req.url ?? "/", "http://x").pathname.slice(1) || "index.html";
    if (!/^[\w.-]+$/.test(name) || !existsSync(join(dir, name))) return void res.writeHead(404).end();
    res.writeHead(200, { "content-type": types[name.split(".").pop()!] ?? "application/octet-stream" });
    res.end(readFileSync(join(dir, name)));
  });
  await new Promise<void>((r) => http.listen(0, "127.0.0.1", r));
  return { http, origin: `http://127.0.0.1:${(http.address() as AddressInfo).port}` };
}

let allowed: { http: HttpServer; origin: string };
let foreign: { http: HttpServer; origin: string };
let server: Server;
let browser: Browser | undefined;

before(async () => {
  if (skip) return;
  if (typeof tools === "string") throw new Error(`CI=true and ${tools}`);
  const dir = tempDir("mm-ts-browser-");
  const here = dirname(fileURLToPath(import.meta.url));
  await build({ entryPoints: [join(here, "browser", "page.js")], bundle: true, format: "esm", platform: "browser", target: "chrome120", outfile: join(dir, "page.js"), logLevel: "warning" });
  writeFileSync(join(dir, "index.html"), '<!doctype html><meta charset="utf-8"><title>memmachine</title><script type="module" src="page.js"></script>\n');
  allowed = await staticServer(dir);
  foreign = await staticServer(dir);
  server = await Server.start({ args: ["--embedder", "none", "--allowed-origin", allowed.origin] });
  browser = await tools.chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
});

after(async () => {
  await browser?.close();
  allowed?.http.close();
  foreign?.http.close();
  await server?.kill();
});

/** Opens the page and waits for what it reports; console errors come back with it. */
async function run(origin: string, project: string, mode: string): Promise<{ result: Record<string, any>; console: string[] }> {
  const page = await browser!.newPage();
  const console: string[] = [];
  page.on("console", (m) => m.type() === "error" && console.push(m.text()));
  page.on("pageerror", (e) => console.push(`pageerror: ${e.message}`));
  const query = new URLSearchParams({ server: server.url, project, mode });
  await page.goto(`${origin}/?${query}`);
  await page.waitForFunction("window.__result !== undefined", undefined, { timeout: 60_000 });
  return { result: (await page.evaluate("window.__result")) as Record<string, any>, console };
}

test("the web entry works in Chromium from an allowed origin", { skip }, async () => {
  const { result: r, console } = await run(allowed.origin, projectId("browser"), "all");
  assert.equal(r["ok"], true, `the page failed: ${JSON.stringify(r)}\n${console.join("\n")}`);
  assert.deepEqual([r["created"], r["createdAgain"]], [true, false]);
  assert.match(r["first"].uid, /^[0-9a-f-]{36}$/);
  assert.equal(r["first"].duplicate, false);
  assert.ok(r["first"].keyLength > 0, "the client made an idempotency key");
  assert.deepEqual(r["resent"], { uid: r["first"].uid, duplicate: true }, "the same key again answers the original");
  assert.deepEqual(r["many"], [false, false]);
  assert.equal(r["searchTop"].content, "Caroline adopted a golden retriever named Max");
  assert.equal(r["searchTop"].producer, "caroline");
  assert.ok(r["searchTop"].score > 0 && r["searchTop"].createdAtIsDate);
  assert.deepEqual(r["listed"], ["Caroline adopted a golden retriever named Max", "Melanie went to a pottery class", "Max loves the beach"]);
  assert.deepEqual(r["features"], [["dog", "Max"]]);
  assert.equal(r["watched"]?.kind, "EPISODE_ADDED");
  assert.match(r["watched"].content, /^watched \d+$/);
  assert.equal(r["storedCursor"], r["watched"].cursor, "the cursor was saved in localStorage");
  // The details travel in grpc-status-details-bin, readable only if CORS exposes it.
  assert.equal(r["error"].invalidArgument, true, JSON.stringify(r["error"]));
  assert.deepEqual(r["error"].fieldViolations, ["filter"]);
  assert.match(r["error"].message, /position \d+/);
});

test("a page from an origin not allowed is refused by the browser", { skip }, async () => {
  const project = projectId("refused");
  const { result: r, console } = await run(foreign.origin, project, "refused");
  assert.equal(r["ok"], true);
  assert.equal(r["created"], undefined, "the call did not succeed");
  // fetch rejects (a network error, no status): the client reports UNAVAILABLE.
  assert.deepEqual([r["error"].name, r["error"].codeName], ["UnavailableError", "UNAVAILABLE"], JSON.stringify(r["error"]));
  assert.match(r["error"].message, /Failed to fetch/);
  assert.ok(console.some((line) => line.includes("blocked by CORS policy")), `no CORS error in the console:\n${console.join("\n")}`);
  // Nothing reached the server: the project is still to be made.
  const node = createMemory({ baseUrl: server.url, org: "acme", project, timeoutMs: 10_000 });
  assert.equal(await node.ensureProject(), true);
});
