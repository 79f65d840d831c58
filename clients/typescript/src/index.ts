// Entry point for browsers and shared code: gRPC-Web over fetch. No Node modules here;
// Node programs import "@memmachine/client/node" for the HTTP/2 gRPC transport.
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import { Code } from "@connectrpc/connect";
import { makeError } from "./errors.js";
import { bearer, Memory } from "./memory.js";
import type { MemoryOptions } from "./types.js";

export * from "./errors.js";
export * from "./types.js";
export { bearer, Memory, type RawClients } from "./memory.js";
export { MemoryCursorStore, WebStorageCursorStore } from "./watch.js";
export { ChangeKind } from "./gen/memmachine/v2/change_service_pb.js";
export { MemoryType } from "./gen/memmachine/v2/common_pb.js";
export { RankedSource } from "./gen/memmachine/v2/memory_service_pb.js";

/** A gRPC-Web transport (fetch): browsers, Deno, Bun, Node. */
export function webTransport(opts: Pick<MemoryOptions, "baseUrl" | "apiKey">) {
  return createGrpcWebTransport({ baseUrl: opts.baseUrl, interceptors: opts.apiKey ? [bearer(opts.apiKey)] : [] });
}

/** A client over gRPC-Web. The "grpc" transport lives in "@memmachine/client/node". */
export function createMemory(opts: MemoryOptions): Memory {
  if (opts.transport === "grpc") {
    throw makeError(Code.Unimplemented, 'the "grpc" transport needs Node: import createMemory from "@memmachine/client/node"');
  }
  return new Memory(webTransport(opts), opts, "grpc-web");
}
