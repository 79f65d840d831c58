// Retries with exponential backoff for the calls that are safe to repeat, all within
// one overall deadline.
import { Code } from "@connectrpc/connect";
import { DeadlineExceededError, type MemMachineError, toMemMachineError } from "./errors.js";

/** Codes worth another attempt: the server or the connection was not there (a
 * dropped connection is UNAVAILABLE, see errors.ts), or it asked to be called later. */
export function isTransient(err: MemMachineError): boolean {
  if (err.retryAfterMs === -1) return false; // the server said waiting does not help
  return err.code === Code.Unavailable || err.code === Code.ResourceExhausted || err.code === Code.Aborted;
}

/** 100 ms doubling to 2 s, with full jitter on the upper half. */
export function backoffMs(attempt: number, server?: number): number {
  const base = Math.min(2000, 100 * 2 ** attempt);
  const wait = base / 2 + Math.random() * (base / 2);
  return server !== undefined && server > wait ? server : wait;
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

export interface RetryPolicy {
  /** Attempts after the first. */
  retries: number;
  /** Overall budget for all attempts, in ms; 0 means none. */
  timeoutMs: number;
}

/** Runs `attempt(timeoutMs)` until it succeeds, fails for good, or the budget is spent.
 * Each attempt gets the time left as its own deadline. */
export async function withRetries<T>(
  policy: RetryPolicy,
  retryable: boolean,
  attempt: (timeoutMs: number | undefined) => Promise<T>,
): Promise<T> {
  const deadline = policy.timeoutMs > 0 ? Date.now() + policy.timeoutMs : Infinity;
  for (let n = 0; ; n++) {
    const left = deadline - Date.now();
    try {
      return await attempt(Number.isFinite(left) ? Math.max(1, left) : undefined);
    } catch (e) {
      const err = toMemMachineError(e);
      if (!retryable || n >= policy.retries || !isTransient(err)) throw err;
      const wait = backoffMs(n, err.retryAfterMs);
      if (Date.now() + wait >= deadline) {
        throw new DeadlineExceededError(Code.DeadlineExceeded, `deadline reached while retrying: ${err.rawMessage}`, err.details, err.metadata, err);
      }
      await sleep(wait);
    }
  }
}
