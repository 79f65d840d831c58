"""A TCP proxy between a client and the server, that can lose an answer or stall."""

from __future__ import annotations

import socket
import threading


class Proxy:
    """Forwards 127.0.0.1:port to `target`. `drop_after(marker)`: on the connection whose
    request carries `marker`, the request reaches the server but the answer is thrown
    away and the connection closed (once). `stall_after(marker)`: from the request carrying
    `marker` on, nothing more reaches the client (the connection stays open)."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.marker: bytes | None = None
        self.dropped = threading.Event()
        self.stall_marker: bytes | None = None
        self.connections = 0
        self._sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def drop_after(self, marker: bytes) -> None:
        self.marker = marker

    def stall_after(self, marker: bytes) -> None:
        self.stall_marker = marker

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.connections += 1
            self._sockets += [client, upstream]
            state = {"cut": False, "stall": False}
            threading.Thread(target=self._up, args=(client, upstream, state), daemon=True).start()
            threading.Thread(target=self._down, args=(upstream, client, state), daemon=True).start()

    def _up(self, client: socket.socket, upstream: socket.socket, state: dict[str, bool]) -> None:
        seen = b""
        while True:
            try:
                data = client.recv(65536)
                if not data:
                    break
                upstream.sendall(data)
            except OSError:
                break
            seen = (seen + data)[-65536:]
            if self.stall_marker is not None and self.stall_marker in seen:
                state["stall"] = True
            if self.marker is not None and self.marker in seen:
                # The request is with the server: lose its answer, then hang up.
                self.marker = None
                state["cut"] = True
                threading.Timer(1.0, self._cut, args=(client, upstream)).start()
        _close(upstream)

    def _cut(self, client: socket.socket, upstream: socket.socket) -> None:
        _close(client)
        _close(upstream)
        self.dropped.set()

    def _down(self, upstream: socket.socket, client: socket.socket, state: dict[str, bool]) -> None:
        while True:
            try:
                data = upstream.recv(65536)
                if not data:
                    break
                if not state["cut"] and not state["stall"]:
                    client.sendall(data)
            except OSError:
                break
        _close(client)

    def close(self) -> None:
        for s in self._sockets:
            _close(s)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
