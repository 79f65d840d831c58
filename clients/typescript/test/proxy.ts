// A TCP proxy that forwards the first connection's request, then drops that connection
// just before the server's answer reaches the client ("drop"), or keeps the connection
// and withholds the answer ("hold", every connection): the server has done the work,
// the client never hears of it. After a drop, later connections pass untouched.
import { connect, createServer, type Server, type Socket } from "node:net";

export interface DroppingProxy {
  url: string;
  /** Connections dropped so far (1 once armed and triggered). */
  drops: number;
  close(): Promise<void>;
}

const H2_PREFACE = "PRI * HTTP/2.0";

export async function dropFirstAnswer(targetPort: number, mode: "drop" | "hold" = "drop"): Promise<DroppingProxy> {
  let armed = true;
  const sockets = new Set<Socket>();
  const state: DroppingProxy = { url: "", drops: 0, close: async () => {} };
  const server: Server = createServer((client) => {
    const upstream = connect(targetPort, "127.0.0.1");
    sockets.add(client).add(upstream);
    const dropThis = armed || mode === "hold";
    armed = false;
    let http2: boolean | undefined;
    let pending = Buffer.alloc(0);
    let held = false;
    const drop = () => {
      state.drops++;
      if (mode === "hold") return void (held = true);
      client.destroy();
      upstream.destroy();
    };
    client.on("data", (d) => {
      http2 ??= d.subarray(0, H2_PREFACE.length).toString("latin1") === H2_PREFACE;
      upstream.write(d);
    });
    upstream.on("data", (d) => {
      if (held) return;
      if (!dropThis || client.destroyed) return void (client.destroyed || client.write(d));
      if (!http2) return drop(); // HTTP/1.1 (gRPC-Web): the first byte back is the answer
      // HTTP/2: pass connection-level frames (SETTINGS, WINDOW_UPDATE, PING); drop at the
      // first HEADERS frame of a stream, which starts the answer.
      pending = Buffer.concat([pending, d]);
      while (pending.length >= 9) {
        const len = pending.readUIntBE(0, 3);
        const type = pending[3];
        const stream = pending.readUInt32BE(5) & 0x7fffffff;
        if (type === 0x1 && stream !== 0) return drop();
        if (pending.length < 9 + len) break;
        client.write(pending.subarray(0, 9 + len));
        pending = pending.subarray(9 + len);
      }
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on("error", end).on("close", end);
    upstream.on("error", end).on("close", end);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  if (addr === null || typeof addr === "string") throw new Error("no proxy address");
  state.url = `http://127.0.0.1:${addr.port}`;
  state.close = () =>
    new Promise<void>((r) => {
      for (const s of sockets) s.destroy();
      server.close(() => r());
    });
  return state;
}
