"""`watch`: resumes from its saved cursor across a server restart and a client restart."""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

import pytest

from memmachine_grpc import Change, ChangeKind, InvalidArgument, Memory, MemoryCursorStore, OutOfRange

from .server import Server


def _follow(
    mem: Memory, cursor_file: Path, out: queue.Queue[Change], stop: threading.Event,
    reconnects: list[int],
) -> None:
    with mem.watch(cursor_file=cursor_file) as changes:
        for change in changes:
            out.put(change)
            if stop.is_set():
                changes.ack()
                reconnects.append(changes.reconnects)
                return


def _contents(out: queue.Queue[Change], n: int, timeout: float = 30) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        change = out.get(timeout=max(deadline - time.monotonic(), 0.01))
        episode = change.episode
        if change.kind is ChangeKind.EPISODE_ADDED and episode and episode.content != "warm-up":
            got.append(episode.content)
    return got


def test_watch_survives_a_server_restart_and_a_client_restart(tmp_path: Path) -> None:
    server = Server(tmp_path / "data")
    cursor_file = tmp_path / "cursor"
    try:
        with Memory(server.addr, "test", "watched") as writer:
            writer.create_project()
            out: queue.Queue[Change] = queue.Queue()
            stop = threading.Event()
            reconnects: list[int] = []
            reader = Memory(server.addr, "test", "watched")
            follower = threading.Thread(target=_follow, args=(reader, cursor_file, out, stop, reconnects), daemon=True)
            follower.start()
            # From the head: add until the stream is surely open, then the real ones.
            while out.empty():
                writer.add("warm-up")
                time.sleep(0.2)
            while not out.empty():
                out.get()
            writer.add_many([f"before {i}" for i in range(5)])
            assert _contents(out, 5) == [f"before {i}" for i in range(5)]

            server = server.restart()  # SIGKILL, then the same port and data
            writer.add_many([f"after {i}" for i in range(5)])
            # At least once: the change taken last before the kill may come again.
            seen = _contents(out, 5)
            if seen[0] == "before 4":
                seen = seen[1:] + _contents(out, 1)
            assert seen == [f"after {i}" for i in range(5)]

            stop.set()
            writer.add("stops the first follower")
            follower.join(30)
            assert not follower.is_alive()
            assert reconnects and reconnects[0] >= 1, "it reconnected after the kill"
            reader.close()
            saved = cursor_file.read_text().strip()
            assert saved.startswith("c1.")

            # A new client with the same cursor file resumes right after that change.
            writer.add_many(["while no one watched 1", "while no one watched 2"])
            with Memory(server.addr, "test", "watched") as again:
                changes = again.watch(cursor_file=cursor_file)
                first = next(changes)
                assert cursor_file.read_text().strip() == saved, "not saved before it is handled"
                assert first.episode is not None
                assert first.episode.content == "while no one watched 1"
                second = next(changes)  # saves `first`'s cursor
                assert cursor_file.read_text().strip() == first.cursor
                assert second.episode is not None and second.episode.content == "while no one watched 2"
                changes.close()
    finally:
        server.kill()


def test_a_garbage_cursor_is_an_error_not_a_reconnect(mem: Memory, tmp_path: Path) -> None:
    cursor_file = tmp_path / "cursor"
    cursor_file.write_text("not-a-cursor\n")
    with pytest.raises(InvalidArgument):
        next(mem.watch(cursor_file=cursor_file))


def test_a_pruned_cursor_is_out_of_range_naming_where_to_resume(tmp_path: Path) -> None:
    server = Server(tmp_path / "data", "--change-feed-retention", "1",
                    "--retention-sweep-interval", "1")
    try:
        with Memory(server.addr, "test", "pruned") as mem:
            mem.create_project()
            store = MemoryCursorStore()
            out: queue.Queue[Change] = queue.Queue()
            follower = threading.Thread(
                target=lambda: _follow_store(mem, store, out), daemon=True)
            follower.start()
            while out.empty():
                mem.add("warm-up")
                time.sleep(0.2)
            follower.join(10)
            old = store.cursor
            assert old is not None
            # Newer changes for longer than the retention, then the old cursor is pruned.
            for _ in range(4):
                mem.add("newer")
                time.sleep(1)
            deadline = time.monotonic() + 20
            while True:
                try:
                    with mem.watch(cursor_store=MemoryCursorStore(old)) as changes:
                        next(changes)
                except OutOfRange as e:
                    assert e.reason == "CURSOR_PRUNED"
                    assert e.error_metadata["resume_after"] > old
                    assert e.error_metadata["resume_after"] in e.message
                    break
                assert time.monotonic() < deadline, "the feed was never pruned"
                mem.add("newer")
                time.sleep(1)
    finally:
        server.kill()


def _follow_store(mem: Memory, store: MemoryCursorStore, out: queue.Queue[Change]) -> None:
    with mem.watch(cursor_store=store) as changes:
        for change in changes:
            out.put(change)
            changes.ack()
            return
