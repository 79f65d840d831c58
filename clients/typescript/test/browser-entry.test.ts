// The browser entry point ("@memmachine/client") must not reach Node modules: follow its
// compiled import graph and look at every bare specifier it imports.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

const SRC = resolve(dirname(fileURLToPath(import.meta.url)), "..", "src");

function importGraph(entry: string): { files: Set<string>; packages: Set<string> } {
  const files = new Set<string>();
  const packages = new Set<string>();
  const visit = (file: string) => {
    if (files.has(file)) return;
    files.add(file);
    const text = readFileSync(file, "utf8");
    for (const m of text.matchAll(/(?:import|export)\s[^;]*?from\s*"([^"]+)"|import\("([^"]+)"\)/g)) {
      const spec = m[1] ?? m[2]!;
      if (spec.startsWith(".")) visit(join(dirname(file), spec));
      else packages.add(spec);
    }
  };
  visit(entry);
  return { files, packages };
}

test("the web entry imports no Node module", () => {
  const web = importGraph(join(SRC, "index.js"));
  assert.ok(web.files.size > 5, `followed ${web.files.size} files`);
  const nodeOnly = [...web.packages].filter((p) => p.startsWith("node:") || p.includes("connect-node") || /^(fs|path|http2?|net|os)$/.test(p));
  assert.deepEqual(nodeOnly, [], `the web entry reaches ${nodeOnly.join(", ")}`);
  assert.ok(web.packages.has("@connectrpc/connect-web"));
  // The Node entry does use them: the check above would see them.
  const node = importGraph(join(SRC, "node.js"));
  assert.ok(node.packages.has("@connectrpc/connect-node") && node.packages.has("node:fs/promises"));
});
