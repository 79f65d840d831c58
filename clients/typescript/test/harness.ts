// Starts the real memmachine server for the tests: SQLite in a temp dir, an ephemeral
// loopback port, its own process group, killed when the test process ends.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "proto", "memmachine"))) {
    const up = dirname(dir);
    if (up === dir) throw new Error("repository root not found");
    dir = up;
  }
  return dir;
}

export const BIN = process.env["MEMMACHINE_BIN"] ?? join(repoRoot(), "target", "debug", "memmachine");

const live = new Set<ChildProcess>();
const tempDirs = new Set<string>();
// Whatever ends the test process, its servers go with it.
function cleanUp(): void {
  for (const p of live) killGroup(p, "SIGKILL");
  for (const d of tempDirs) rmSync(d, { recursive: true, force: true });
}
process.on("exit", cleanUp);
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    cleanUp();
    process.exit(128 + (signal === "SIGINT" ? 2 : 15));
  });
}

function killGroup(p: ChildProcess, signal: NodeJS.Signals): void {
  try {
    process.kill(-p.pid!, signal);
  } catch {
    // already gone
  }
}

export function tempDir(prefix = "mm-ts-"): string {
  const d = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.add(d);
  return d;
}

export interface ServerOptions {
  dataDir?: string;
  /** "127.0.0.1:0" by default; a fixed address to restart where clients reconnect. */
  listen?: string;
  args?: string[];
}

export class Server {
  readonly log: string[] = [];
  private constructor(
    readonly proc: ChildProcess,
    readonly addr: string,
    readonly dataDir: string,
    readonly args: string[],
  ) {}

  get url(): string {
    return `http://${this.addr}`;
  }

  get port(): number {
    return Number(this.addr.split(":").pop());
  }

  static async start(opts: ServerOptions = {}): Promise<Server> {
    if (!existsSync(BIN)) throw new Error(`no server binary at ${BIN} (set MEMMACHINE_BIN or cargo build)`);
    const dataDir = opts.dataDir ?? tempDir();
    const args = opts.args ?? ["--embedder", "none"];
    // A guard shell holds the server: when this process dies however it dies, the pipe on
    // the guard's stdin closes and the guard kills the server.
    const guard = 'exec 3<&0; "$0" "$@" </dev/null 3<&- & child=$!; (read _ <&3; kill -9 $child 2>/dev/null) & watcher=$!; wait $child; status=$?; kill $watcher 2>/dev/null; exit $status';
    const proc = spawn("sh", ["-c", guard, BIN, "serve", "--listen", opts.listen ?? "127.0.0.1:0", "--data-dir", dataDir, ...args], {
      detached: true, // its own process group: killed as one
      stdio: ["pipe", "ignore", "pipe"],
      env: { ...process.env, RUST_LOG: "info", NO_COLOR: "1" },
    });
    live.add(proc);
    proc.on("exit", () => live.delete(proc));
    const lines: string[] = [];
    const addr = await new Promise<string>((resolve, reject) => {
      let addr: string | undefined;
      let buf = "";
      const timer = setTimeout(() => fail(new Error("server not ready in 60 s:\n" + lines.join("\n"))), 60_000);
      const fail = (e: Error) => {
        clearTimeout(timer);
        killGroup(proc, "SIGKILL");
        reject(e);
      };
      proc.on("exit", (code) => fail(new Error(`server exited (${code}) before ready:\n${lines.join("\n")}`)));
      proc.stderr!.setEncoding("utf8");
      proc.stderr!.on("data", (chunk: string) => {
        buf += chunk;
        const parts = buf.split("\n");
        buf = parts.pop()!;
        for (const line of parts) {
          lines.push(line);
          const m = line.includes("gRPC server listening") ? /addr=(\S+)/.exec(line) : null;
          if (m) addr = m[1];
          if (line.includes("ready: serving calls") && addr) {
            clearTimeout(timer);
            proc.removeAllListeners("exit");
            proc.on("exit", () => live.delete(proc));
            resolve(addr);
          }
        }
      });
    });
    const server = new Server(proc, addr, dataDir, args);
    server.log.push(...lines);
    proc.stderr!.on("data", (chunk: string) => server.log.push(...chunk.split("\n")));
    return server;
  }

  /** SIGKILL: no drain, no goodbye to clients. */
  async kill(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = new Promise((r) => this.proc.once("exit", r));
    killGroup(this.proc, "SIGKILL");
    await exited;
  }

  /** The same data dir and address, after a SIGKILL. */
  async restart(): Promise<Server> {
    await this.kill();
    return Server.start({ dataDir: this.dataDir, listen: this.addr, args: this.args });
  }
}

/** `memmachine keys create --org ORG` (or --admin) against the server's data dir. */
export function createKey(dataDir: string, org: string | "admin"): string {
  const scope = org === "admin" ? ["--admin"] : ["--org", org];
  return execFileSync(BIN, ["keys", "create", ...scope, "--data-dir", dataDir], { encoding: "utf8", timeout: 30_000 }).trim();
}

let counter = 0;
/** A fresh project id per test, so tests do not see each other's memories. */
export function projectId(name: string): string {
  return `${name}-${process.pid}-${++counter}`;
}
