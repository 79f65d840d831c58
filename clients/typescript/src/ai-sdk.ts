// Vercel AI SDK tools over a Memory: `remember` and `recall`, for generateText /
// streamText({ tools: memoryTools(memory) }). Import from "@memmachine/client/ai-sdk"
// (needs the optional peers `ai` and `zod`).
import { tool } from "ai";
import { z } from "zod";
import type { Memory } from "./memory.js";

export interface MemoryToolsOptions {
  /** Recorded as the producer of what the model remembers (default "assistant"). */
  producer?: string;
  /** Hits `recall` returns unless the model asks for another number (default 5). */
  topK?: number;
}

export function memoryTools(memory: Memory, opts: MemoryToolsOptions = {}) {
  return {
    remember: tool({
      description: "Store a fact or a message in long-term memory, to recall in later conversations.",
      inputSchema: z.object({
        content: z.string().min(1).describe("What to remember, as a full sentence."),
        about: z.string().optional().describe("Whom it is about (a user id), if anyone."),
      }),
      execute: async ({ content, about }) => {
        const r = await memory.add({ content, producer: opts.producer ?? "assistant", role: "assistant", ...(about ? { producedFor: about } : {}) });
        return { uid: r.uid, duplicate: r.duplicate };
      },
    }),
    recall: tool({
      description: "Search long-term memory for what is relevant to a question. Returns the best matches first.",
      inputSchema: z.object({
        query: z.string().min(1),
        topK: z.number().int().min(1).max(50).optional(),
      }),
      execute: async ({ query, topK }) => {
        const r = await memory.search(query, { topK: topK ?? opts.topK ?? 5 });
        return r.hits.map((h) => ({ content: h.content, producer: h.producer, score: h.score, at: h.createdAt?.toISOString() }));
      },
    }),
  };
}
