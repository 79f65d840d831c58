// The client layer's cost per search over the raw Connect client, on one transport and
// one server of ~1,000 episodes: N searches each way, interleaved, p50 of each.
// Run: npm run bench (MEMMACHINE_BIN as for the tests; N=2000 by default).
import { createClient } from "@connectrpc/connect";
import { MemoryService } from "../src/gen/memmachine/v2/memory_service_pb.js";
import { grpcTransport, Memory } from "../src/node.js";
import { Server } from "../test/harness.js";

const N = Number(process.env["N"] ?? 2000);
const WORDS = ["dog", "garden", "music", "travel", "coffee", "work", "family", "book", "movie", "sport"];

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

const server = await Server.start();
try {
  const opts = { baseUrl: server.url, org: "acme", project: "bench" };
  const transport = grpcTransport(opts);
  const memory = new Memory(transport, opts, "grpc");
  const raw = createClient(MemoryService, transport);
  await memory.ensureProject();
  for (let b = 0; b < 10; b++) {
    await memory.addMany(Array.from({ length: 100 }, (_, i) => {
      const n = b * 100 + i;
      return `message ${n} about ${WORDS[n % 10]} and ${WORDS[(n * 7) % 10]}, said on day ${n % 31}`;
    }));
  }
  const timed = async (f: () => Promise<unknown>) => {
    const t = performance.now();
    await f();
    return performance.now() - t;
  };
  const client: number[] = [];
  const direct: number[] = [];
  for (let i = 0; i < 200; i++) await memory.search(WORDS[i % 10]!); // warm up
  for (let i = 0; i < N; i++) {
    const q = WORDS[i % 10]!;
    const viaClient = () => memory.search(q, { topK: 10 });
    const viaRaw = () => raw.searchMemories({ orgId: "acme", projectId: "bench", query: q, topK: 10 }, { timeoutMs: 30_000 });
    // Alternate which goes first, so neither always meets a warmer cache.
    if (i % 2 === 0) {
      client.push(await timed(viaClient));
      direct.push(await timed(viaRaw));
    } else {
      direct.push(await timed(viaRaw));
      client.push(await timed(viaClient));
    }
  }
  const [c50, r50] = [pct(client, 50), pct(direct, 50)];
  console.log(`searches: ${N} each way over gRPC, 1,000 episodes`);
  console.log(`client  p50 ${c50.toFixed(3)} ms  p90 ${pct(client, 90).toFixed(3)} ms`);
  console.log(`raw     p50 ${r50.toFixed(3)} ms  p90 ${pct(direct, 90).toFixed(3)} ms`);
  console.log(`overhead p50 ${(c50 - r50).toFixed(3)} ms (${(((c50 - r50) / r50) * 100).toFixed(1)}%)`);
} finally {
  await server.kill();
}
