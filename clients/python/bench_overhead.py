#!/usr/bin/env python3
"""What Memory.search costs over the raw generated stub: one server with ~1,000
episodes, N searches through each (the client's hits read, so converted), interleaved
in one run; prints the p50 of each and the difference.

    .tools/pyclient-venv/bin/python clients/python/bench_overhead.py [-n 2000] [--bin PATH]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from memmachine_grpc import Memory
from memmachine_grpc._proto import memory_service_pb2 as memory_pb

ROOT = Path(__file__).resolve().parents[2]
WORDS = ("dog cat tea coffee garden river mountain book music travel dinner school "
         "friend sister brother painting camping beach city train bicycle").split()


def start(binary: str, data: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", data],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        env={**os.environ, "RUST_LOG": "info", "NO_COLOR": "1"}, start_new_session=True,
    )
    assert proc.stderr is not None
    addr = None
    for line in proc.stderr:
        m = re.search(r"gRPC server listening.*?addr=(\S+)", line)
        if m:
            addr = m.group(1)
        if "ready: serving calls" in line and addr:
            return proc, addr
    raise SystemExit("the server did not start")


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--bin", default=os.environ.get(
        "MEMMACHINE_BIN", str(ROOT / "target" / "debug" / "memmachine")))
    args = ap.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as data:
        proc, addr = start(args.bin, data)
        try:
            with Memory(addr, "bench", "overhead") as mem:
                mem.create_project()
                for start_at in range(0, args.episodes, 100):
                    mem.add_many(
                        " ".join(rng.choices(WORDS, k=12)) + f" #{i}"
                        for i in range(start_at, min(start_at + 100, args.episodes))
                    )
                stub = mem.stubs.memory.SearchMemories
                queries = [" ".join(rng.choices(WORDS, k=3)) for _ in range(args.n)]
                for q in queries[:100]:  # warm up both paths
                    mem.search(q)
                    stub(memory_pb.SearchMemoriesRequest(org_id="bench", project_id="overhead",
                                                         query=q, top_k=10),
                         timeout=10.0, metadata=mem.metadata)
                client_ms: list[float] = []
                raw_ms: list[float] = []
                for q in queries:
                    t0 = time.perf_counter()
                    mem.search(q, top_k=10).episodes  # the hits, converted
                    t1 = time.perf_counter()
                    stub(memory_pb.SearchMemoriesRequest(org_id="bench", project_id="overhead",
                                                         query=q, top_k=10),
                         timeout=10.0, metadata=mem.metadata)
                    t2 = time.perf_counter()
                    client_ms.append((t1 - t0) * 1e3)
                    raw_ms.append((t2 - t1) * 1e3)
        finally:
            proc.kill()
            proc.wait()
    c50, r50 = statistics.median(client_ms), statistics.median(raw_ms)
    print(f"searches: {args.n} each, {args.episodes} episodes, interleaved")
    print(f"Memory.search   p50 {c50:.3f} ms  p90 {p(client_ms, 90):.3f} ms")
    print(f"raw stub        p50 {r50:.3f} ms  p90 {p(raw_ms, 90):.3f} ms")
    print(f"difference      p50 {c50 - r50:+.3f} ms ({(c50 / r50 - 1) * 100:+.1f}%)")


if __name__ == "__main__":
    main()
