// Entry point for Node: HTTP/2 gRPC by default (connect-node), gRPC-Web on request,
// and a cursor store in a file.
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { dirname } from "node:path";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { webTransport } from "./index.js";
import { bearer, Memory } from "./memory.js";
import type { CursorStore, MemoryOptions } from "./types.js";

export * from "./index.js";

/** An HTTP/2 gRPC transport (Node). */
export function grpcTransport(opts: Pick<MemoryOptions, "baseUrl" | "apiKey">) {
  return createGrpcTransport({ baseUrl: opts.baseUrl, interceptors: opts.apiKey ? [bearer(opts.apiKey)] : [] });
}

/** A client over gRPC (default) or gRPC-Web. */
export function createMemory(opts: MemoryOptions): Memory {
  const kind = opts.transport ?? "grpc";
  return new Memory(kind === "grpc" ? grpcTransport(opts) : webTransport(opts), opts, kind);
}

/** Keeps the cursor in a file, replaced atomically (write, then rename). */
export class FileCursorStore implements CursorStore {
  constructor(readonly path: string) {}
  async load(): Promise<string | undefined> {
    try {
      const text = (await readFile(this.path, "utf8")).trim();
      return text === "" ? undefined : text;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw e;
    }
  }
  async save(cursor: string): Promise<void> {
    await mkdir(dirname(this.path), { recursive: true });
    const tmp = `${this.path}.${process.pid}.tmp`;
    await writeFile(tmp, cursor + "\n");
    await rename(tmp, this.path);
  }
}
