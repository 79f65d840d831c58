// Following the change feed: resume from a stored cursor, reconnect with backoff.
//
// A change's cursor is saved once the caller's loop moves on to the next change or
// leaves the loop (break, return or throw), so a process that dies mid-change sees that
// change again: at least once, never skipped.
import type { Client } from "@connectrpc/connect";
import { toMemMachineError, type MemMachineError } from "./errors.js";
import { type Change, ChangeKind, type ChangeService } from "./gen/memmachine/v2/change_service_pb.js";
import { backoffMs, isTransient, sleep } from "./retry.js";
import type { CursorStore, WatchOptions } from "./types.js";

export async function* watchChanges(
  client: Client<typeof ChangeService>,
  ids: { orgId: string; projectId: string },
  opts: WatchOptions,
): AsyncGenerator<Change> {
  let cursor = opts.after ?? (await opts.store?.load()) ?? "";
  let pending: string | undefined; // yielded, not yet saved
  let attempt = 0;
  const maxBackoff = opts.maxBackoffMs ?? 2000;
  try {
    while (!opts.signal?.aborted) {
      let error: MemMachineError | undefined;
      try {
        const stream = client.watchChanges({ ...ids, after: cursor }, opts.signal ? { signal: opts.signal } : {});
        for await (const change of stream) {
          attempt = 0;
          pending = change.cursor;
          yield change;
          cursor = change.cursor;
          pending = undefined;
          await opts.store?.save(cursor);
          if (change.kind === ChangeKind.PROJECT_DELETED) return;
        }
      } catch (e) {
        if (opts.signal?.aborted) return;
        error = toMemMachineError(e);
        // OUT_OF_RANGE (cursor pruned), INVALID_ARGUMENT, auth errors: the caller decides.
        if (!isTransient(error)) throw error;
      }
      // A transient failure, or the stream ended without the project's deletion (the
      // server went away cleanly): reconnect after the last cursor processed.
      opts.onReconnect?.(error, attempt);
      await sleep(Math.min(maxBackoff, backoffMs(attempt++, error?.retryAfterMs)), opts.signal);
    }
  } finally {
    if (pending !== undefined) await opts.store?.save(pending);
  }
}

/** Keeps the cursor in memory (for one process's lifetime). */
export class MemoryCursorStore implements CursorStore {
  constructor(private cursor?: string) {}
  async load(): Promise<string | undefined> {
    return this.cursor;
  }
  async save(cursor: string): Promise<void> {
    this.cursor = cursor;
  }
}

/** Keeps the cursor in a browser's localStorage (or any Web Storage) under `key`. */
export class WebStorageCursorStore implements CursorStore {
  constructor(private readonly key: string, private readonly storage: Storage = globalThis.localStorage) {}
  async load(): Promise<string | undefined> {
    return this.storage.getItem(this.key) ?? undefined;
  }
  async save(cursor: string): Promise<void> {
    this.storage.setItem(this.key, cursor);
  }
}
