"""`AsyncMemory`: the same surface over grpc.aio, against the real server."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from memmachine_grpc import (
    AsyncMemory,
    ChangeKind,
    DeadlineExceeded,
    InvalidArgument,
    Message,
    MemoryCursorStore,
    NotFound,
)
from memmachine_grpc._proto import semantic_service_pb2 as semantic_pb

from .proxy import Proxy
from .server import Server


async def test_async_surface(server: Server, project: str) -> None:
    async with AsyncMemory(server.addr, "test", project) as mem:
        uid = await mem.add("the dog is a golden retriever", producer="alice")
        results = await mem.add_many(["green tea", Message("cat naps", idempotency_key="k1")])
        again = await mem.add_many([Message("cat naps", idempotency_key="k1")])
        assert again[0].duplicate and again[0].uid == results[1].uid

        found = await mem.search("golden retriever", explain=True)
        assert found.episodes[0].episode.uid == uid
        assert found.episodes[0].score_parts is not None
        assert [e.content async for e in mem.list(page_size=2)] == [
            "the dog is a golden retriever", "green tea", "cat naps"]

        set_id = (await mem.stubs.semantic.GetSetId(
            semantic_pb.GetSetIdRequest(org_id="test", project_id=project))).set_id
        await mem.stubs.semantic.AddFeature(semantic_pb.AddFeatureRequest(
            org_id="test", project_id=project, set_id=set_id, category_name="profile",
            tag="pets", feature="dog", value="golden retriever"))
        assert [f.value async for f in mem.features()] == ["golden retriever"]
        assert [f.name async for f in mem.features("retriever")] == ["dog"]

        summary = await mem.import_stream((f"bulk {i}" for i in range(5)), batch_size=2)
        assert (summary.batches, summary.messages, summary.first_error) == (3, 5, None)

        receipt = await mem.forget_subject("alice")
        assert receipt.projects[0].episodes_deleted == 1
        assert await mem.delete(results[0].uid) == 1
        with pytest.raises(NotFound):
            await mem.delete(results[0].uid)
        with pytest.raises(InvalidArgument) as bad:
            await mem.search("x", filter="m.a = ")
        assert [f for f, _ in bad.value.field_violations] == ["filter"]

    proxy = Proxy(server.addr)
    try:
        proxy.stall_after(b"stalled query")
        async with AsyncMemory(proxy.addr, "test", project, timeout=0.5) as slow:
            assert [e async for e in slow.list(filter="m.none = 'x'")] == []
            started = time.monotonic()
            with pytest.raises(DeadlineExceeded):
                await slow.search("stalled query")
            assert 0.4 < time.monotonic() - started < 2.0
    finally:
        proxy.close()


async def test_async_watch_resumes_after_a_server_restart(tmp_path: Path) -> None:
    server = Server(tmp_path / "data")
    try:
        store = MemoryCursorStore()
        async with AsyncMemory(server.addr, "test", "w") as mem:
            await mem.create_project()
            first = await mem.add(f"seed {uuid.uuid4()}")
            changes = mem.watch(cursor_store=store)
            # From the head: the stream opens on the first read; add until one arrives.
            reader = asyncio.ensure_future(changes.__anext__())
            while not reader.done():
                await mem.add("warm-up")
                await asyncio.wait([reader], timeout=0.2)
            assert reader.result().kind is ChangeKind.EPISODE_ADDED
            assert first  # the seed came before the stream: never seen
            await mem.add("one")
            got = await changes.__anext__()
            while got.episode is not None and got.episode.content == "warm-up":
                got = await changes.__anext__()
            assert got.episode is not None and got.episode.content == "one"
            server = server.restart()
            await mem.add("two")
            nxt = await asyncio.wait_for(changes.__anext__(), 30)
            assert store.cursor == got.cursor  # saved when the next was asked for
            assert nxt.episode is not None and nxt.episode.content == "two"
            assert changes.reconnects >= 1
            changes.close()
    finally:
        server.kill()
