"""The real memmachine binary as a child process on a loopback port, for the tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BIN = os.environ.get("MEMMACHINE_BIN", str(ROOT / "target" / "debug" / "memmachine"))

_LISTENING = re.compile(r"gRPC server listening.*?addr=(\S+)")
_READY = "ready: serving calls"


class Server:
    """`memmachine serve` on 127.0.0.1 (an ephemeral port unless `port`), SQLite in
    `data_dir`; in its own process group, killed by `kill()`/`stop()` or at exit."""

    def __init__(self, data_dir: Path, *extra: str, port: int = 0) -> None:
        self.data_dir = data_dir
        self.extra = extra
        self.log: list[str] = []
        self._ready = threading.Event()
        self._addr: str | None = None
        self.proc = subprocess.Popen(
            [BIN, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", str(data_dir), *extra],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "RUST_LOG": "info", "NO_COLOR": "1"},
            start_new_session=True,
        )
        _LIVE.add(self)
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 60
        while not self._ready.is_set():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("memmachine did not start:\n" + "\n".join(self.log[-30:]))
            self._ready.wait(0.05)
        assert self._addr is not None
        self.addr: str = self._addr
        self.port: int = int(self.addr.rsplit(":", 1)[1])

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line.rstrip())
            m = _LISTENING.search(line)
            if m:
                self._addr = m.group(1)
            if _READY in line and self._addr:
                self._ready.set()

    def kill(self) -> None:
        """SIGKILL to the process group: no drain, no goodbye to clients."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(10)
        _LIVE.discard(self)

    def restart(self) -> Server:
        """Killed, then started again on the same port and data directory."""
        self.kill()
        return Server(self.data_dir, *self.extra, port=self.port)


_LIVE: set[Server] = set()


def kill_all() -> None:
    for s in list(_LIVE):
        s.kill()


def create_key(data_dir: Path, org: str) -> str:
    """`memmachine keys create --org ORG` against the data directory: the new key."""
    out = subprocess.run(
        [BIN, "keys", "create", "--org", org, "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    assert isinstance(out, str)
    keys: list[str] = re.findall(r"mm_\S+", out)
    assert keys, out
    return keys[0]
