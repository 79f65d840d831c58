// The AI SDK tools driven by generateText: a scripted model (ai/test) calls them, the AI
// SDK executes them against the real server.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { memoryTools } from "../src/ai-sdk.js";
import { createMemory } from "../src/node.js";
import { projectId, Server } from "./harness.js";

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server?.kill();
});

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

/** A model that makes the given tool calls, one per step, then answers "done". */
function scripted(calls: { toolName: string; input: unknown }[]) {
  let step = 0;
  return new MockLanguageModelV3({
    doGenerate: async () => {
      const call = calls[step++];
      if (!call) return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
      return {
        content: [{ type: "tool-call", toolCallId: `call-${step}`, toolName: call.toolName, input: JSON.stringify(call.input) }],
        finishReason: { unified: "tool-calls", raw: undefined },
        usage,
        warnings: [],
      };
    },
  });
}

test("remember then recall through generateText", async () => {
  const memory = createMemory({ baseUrl: server.url, org: "acme", project: projectId("ai") });
  await memory.ensureProject();
  const result = await generateText({
    model: scripted([
      { toolName: "remember", input: { content: "Alice's favourite food is sushi", about: "alice" } },
      { toolName: "recall", input: { query: "favourite food", topK: 3 } },
    ]),
    tools: memoryTools(memory),
    stopWhen: stepCountIs(5),
    prompt: "remember and recall",
  });
  const outputs = result.steps.flatMap((s) => s.toolResults.map((r) => [r.toolName, r.output] as const));
  assert.equal(outputs.length, 2);
  const [remembered, recalled] = outputs;
  assert.equal(remembered![0], "remember");
  assert.equal((remembered![1] as { duplicate: boolean }).duplicate, false);
  assert.equal(recalled![0], "recall");
  const hits = recalled![1] as { content: string; producer: string }[];
  assert.deepEqual(hits.map((h) => [h.content, h.producer]), [["Alice's favourite food is sushi", "assistant"]]);
  // Stored in the project as the server sees it.
  const pages = [];
  for await (const p of memory.list()) pages.push(...p.episodes);
  assert.deepEqual(pages.map((e) => [e.content, e.producedForId]), [["Alice's favourite food is sushi", "alice"]]);
  assert.equal(result.text, "done");
});
