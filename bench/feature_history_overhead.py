#!/usr/bin/env python3
"""Fact history's storage overhead (issue 29): a real server on SQLite, N features added
and each updated K times through the REST gateway; then the database's size with the
history and, on a copy, without it (feature_versions emptied, VACUUMed), and the bytes
per kept version. Usage: bench/feature_history_overhead.py [N] [K] (default 1000 10);
needs target/debug/memmachine (or MEMMACHINE_BIN)."""

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
K = int(sys.argv[2]) if len(sys.argv) > 2 else 10
BIN = os.environ.get("MEMMACHINE_BIN", "target/debug/memmachine")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(base, path, body):
    request = urllib.request.Request(
        base + path, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request) as response:
        text = response.read()
        return json.loads(text) if text else None


def size(path):
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("VACUUM")
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    return pages * page


def main():
    data = tempfile.mkdtemp()
    grpc, rest = free_port(), free_port()
    server = subprocess.Popen(
        [BIN, "serve", "--data-dir", data, "--listen", f"127.0.0.1:{grpc}",
         "--rest-listen", f"127.0.0.1:{rest}", "--embedder", "none",
         "--feature-history-limit", str(K + 1)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{rest}/api/v2"
    try:
        for _ in range(200):
            try:
                post(base, "/projects", {"org_id": "bench", "project_id": "p"})
                break
            except OSError:
                time.sleep(0.1)
        at = {"org_id": "bench", "project_id": "p"}
        set_id = post(base, "/memories/semantic/set_id/get", at)["set_id"]
        started = time.time()
        ids = []
        for i in range(N):
            added = post(base, "/memories/semantic/feature", {
                **at, "set_id": set_id, "category_name": "profile", "tag": "preferences",
                "feature": f"favourite thing {i}", "value": f"value {i} version 0 " + "x" * 40,
            })
            ids.append(added["feature_id"])
        for k in range(1, K + 1):
            for i, fid in enumerate(ids):
                post(base, "/memories/semantic/feature/update", {
                    **at, "feature_id": fid,
                    "value": f"value {i} version {k} " + "x" * 40,
                })
        elapsed = time.time() - started
    finally:
        server.terminate()
        server.wait()
    db = os.path.join(data, "memmachine.db")
    with_history = size(db)
    conn = sqlite3.connect(db)
    versions = conn.execute("SELECT count(*) FROM feature_versions").fetchone()[0]
    payload = conn.execute(
        "SELECT sum(length(category) + length(category_id) + length(tag) + "
        "length(feature_name) + length(value) + length(metadata)) FROM feature_versions"
    ).fetchone()[0] or 0
    conn.close()
    copy = os.path.join(data, "without.db")
    shutil.copy(db, copy)
    conn = sqlite3.connect(copy)
    conn.execute("DELETE FROM feature_versions")
    conn.commit()
    conn.close()
    without = size(copy)
    shutil.rmtree(data)
    print(json.dumps({
        "features": N, "updates_each": K, "versions_kept": versions,
        "db_bytes_with_history": with_history, "db_bytes_without_history": without,
        "overhead_bytes": with_history - without,
        "bytes_per_version": round((with_history - without) / max(versions, 1), 1),
        "text_bytes_per_version": round(payload / max(versions, 1), 1),
        "seconds_for_adds_and_updates_over_rest": round(elapsed, 1),
    }, indent=2))


if __name__ == "__main__":
    main()
