"""`AsyncMemory`: the client of one project over grpc.aio, with `Memory`'s surface."""

from __future__ import annotations

import asyncio
import builtins
import datetime as dt
import os
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TypeVar

import grpc
import grpc.aio

from . import _base, models
from ._proto import change_service_pb2 as change_pb
from ._proto import change_service_pb2_grpc as change_grpc
from ._proto import lifecycle_service_pb2_grpc as lifecycle_grpc
from ._proto import memory_service_pb2_grpc as memory_grpc
from ._proto import project_service_pb2_grpc as project_grpc
from ._proto import semantic_service_pb2_grpc as semantic_grpc
from .cursor import CursorStore
from .errors import AlreadyExists, MemMachineError, Unavailable, from_rpc_error
from .retry import RetryPolicy

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")


class AsyncStubs:
    """The generated stubs on the client's aio channel."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        # The stub classes, given an aio channel, are typed as their *AsyncStub (which
        # exist only for type checkers).
        self.memory: memory_grpc.MemoryServiceAsyncStub = memory_grpc.MemoryServiceStub(channel)
        self.changes: change_grpc.ChangeServiceAsyncStub = change_grpc.ChangeServiceStub(channel)
        self.semantic: semantic_grpc.SemanticServiceAsyncStub = semantic_grpc.SemanticServiceStub(
            channel
        )
        self.lifecycle: lifecycle_grpc.LifecycleServiceAsyncStub = (
            lifecycle_grpc.LifecycleServiceStub(channel)
        )
        self.usage: lifecycle_grpc.UsageServiceAsyncStub = lifecycle_grpc.UsageServiceStub(channel)
        self.projects: project_grpc.ProjectServiceAsyncStub = project_grpc.ProjectServiceStub(
            channel
        )


class AsyncMemory(_base.Base):
    """`Memory` for asyncio: the same methods, awaited (`list`, `features` and `watch`
    are async iterators). Create it inside the running event loop."""

    def __init__(
        self,
        addr: str,
        org: str,
        project: str,
        *,
        api_key: str | None = None,
        tls: _base.Tls = False,
        timeout: float = 10.0,
        retries: RetryPolicy | int = RetryPolicy(),
        options: Sequence[tuple[str, int | str]] = (),
    ) -> None:
        super().__init__(addr, org, project, api_key=api_key, timeout=timeout, retries=retries)
        opts = [*_base.CHANNEL_OPTIONS, *options]
        creds = _base.credentials(tls)
        self.channel: grpc.aio.Channel = (
            grpc.aio.secure_channel(addr, creds, opts)
            if creds
            else grpc.aio.insecure_channel(addr, opts)
        )
        self.stubs = AsyncStubs(self.channel)

    async def close(self) -> None:
        await self.channel.close()

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _unary(
        self,
        method: grpc.aio.UnaryUnaryMultiCallable[_Req, _Resp],
        request: _Req,
        *,
        retry: bool,
        timeout: float | None,
    ) -> _Resp:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        attempt = 0
        while True:
            try:
                return await method(
                    request,
                    timeout=max(deadline - time.monotonic(), 0.0),
                    metadata=self.metadata,
                )
            except grpc.RpcError as e:
                error = from_rpc_error(e)
                wait = self.retry.delay(attempt, error) if retry else None
                if wait is None or time.monotonic() + wait >= deadline:
                    raise error from e
            await asyncio.sleep(wait)
            attempt += 1

    async def create_project(
        self, description: str = "", *, exist_ok: bool = True, timeout: float | None = None
    ) -> None:
        try:
            await self._unary(
                self.stubs.projects.CreateProject,
                self._create_project(description),
                retry=exist_ok,
                timeout=timeout,
            )
        except AlreadyExists:
            if not exist_ok:
                raise

    async def add(
        self,
        content: str,
        *,
        producer: str = "",
        role: str = "",
        produced_for: str = "",
        metadata: Mapping[str, str] | None = None,
        timestamp: dt.datetime | None = None,
        expires_at: dt.datetime | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> str:
        message = models.Message(
            content, producer, role, produced_for, metadata or {}, timestamp, expires_at,
            idempotency_key,
        )
        return (await self.add_many([message], timeout=timeout))[0].uid

    async def add_many(
        self, messages: Iterable[models.MessageLike], *, timeout: float | None = None
    ) -> builtins.list[models.AddResult]:
        request = self._add(messages)
        response = await self._unary(
            self.stubs.memory.AddMemories, request, retry=True, timeout=timeout
        )
        return [models.AddResult(r.uid, r.duplicate) for r in response.results]

    async def search(
        self,
        query: str,
        *,
        top_k: int = 10,
        filter: str = "",
        explain: bool = False,
        expand_context: int = 0,
        score_threshold: float | None = None,
        set_metadata: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> models.SearchResult:
        request = self._search(
            query, top_k, filter, explain, expand_context, score_threshold, set_metadata
        )
        response = await self._unary(
            self.stubs.memory.SearchMemories, request, retry=True, timeout=timeout
        )
        return models.search_result(response)

    async def list(
        self, *, filter: str = "", page_size: int = 100, timeout: float | None = None
    ) -> AsyncIterator[models.Episode]:
        token = ""
        while True:
            request = self._list(False, filter, page_size, token)
            page = await self._unary(
                self.stubs.memory.ListMemories, request, retry=True, timeout=timeout
            )
            for e in page.episodes:
                yield models.episode(e)
            token = page.next_page_token
            if not token:
                return

    async def delete(self, uids: str | Iterable[str], *, timeout: float | None = None) -> int:
        request = self._delete(uids)
        response = await self._unary(
            self.stubs.memory.DeleteEpisodicMemories, request, retry=False, timeout=timeout
        )
        return response.deleted_count

    async def features(
        self,
        query: str | None = None,
        *,
        top_k: int = 10,
        filter: str = "",
        set_metadata: Mapping[str, str] | None = None,
        page_size: int = 100,
        timeout: float | None = None,
    ) -> AsyncIterator[models.Feature]:
        if query is not None:
            request = self._search_features(query, top_k, filter, set_metadata)
            found = await self._unary(
                self.stubs.semantic.SearchFeatures, request, retry=True, timeout=timeout
            )
            for f in found.features:
                yield models.feature(f)
            return
        token = ""
        while True:
            page = await self._unary(
                self.stubs.memory.ListMemories,
                self._list(True, filter, page_size, token, set_metadata),
                retry=True,
                timeout=timeout,
            )
            for f in page.features:
                yield models.feature(f)
            token = page.next_page_token
            if not token:
                return

    async def delete_features(
        self, ids: str | Iterable[str], *, timeout: float | None = None
    ) -> int:
        request = self._delete_features(ids)
        response = await self._unary(
            self.stubs.memory.DeleteSemanticMemories, request, retry=False, timeout=timeout
        )
        return response.deleted_count

    async def forget_subject(
        self,
        subject: str,
        *,
        everywhere: bool = False,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> models.ForgetReceipt:
        request = self._forget(subject, everywhere, dry_run)
        response = await self._unary(
            self.stubs.lifecycle.ForgetSubject, request, retry=False, timeout=timeout
        )
        return models.receipt(response.receipt)

    async def import_stream(
        self,
        messages: Iterable[models.MessageLike | Sequence[models.MessageLike]],
        *,
        batch_size: int = 500,
        timeout: float | None = None,
    ) -> models.ImportSummary:
        try:
            response = await self.stubs.memory.ImportMemories(
                self._imports(messages, batch_size), timeout=timeout, metadata=self.metadata
            )
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e
        return models.import_summary(response)

    def watch(
        self,
        *,
        cursor_file: str | os.PathLike[str] | None = None,
        cursor_store: CursorStore | None = None,
        max_reconnects: int | None = None,
    ) -> AsyncWatch:
        """As `Memory.watch`: `async for change in mem.watch(cursor_file=...)`."""
        store = _base.cursor_store(cursor_file, cursor_store)
        return AsyncWatch(self, store, max_reconnects)


class AsyncWatch(AsyncIterator[models.Change]):
    """`Watch` for asyncio; the same at-least-once contract (see `Watch`)."""

    def __init__(
        self, client: AsyncMemory, store: CursorStore, max_reconnects: int | None
    ) -> None:
        self._client = client
        self._store = store
        self._max_reconnects = max_reconnects
        self.cursor: str = store.load() or ""
        self._pending: str | None = None
        self._call: grpc.aio.UnaryStreamCall[change_pb.WatchChangesRequest, change_pb.Change] | None = None
        self._ended = False
        self._closed = False
        self.reconnects = 0

    def __aiter__(self) -> AsyncWatch:
        return self

    def ack(self) -> None:
        if self._pending is not None:
            self._store.save(self._pending)
            self.cursor = self._pending
            self._pending = None

    def close(self) -> None:
        self._closed = True
        if self._call is not None:
            self._call.cancel()

    async def __aenter__(self) -> AsyncWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def __anext__(self) -> models.Change:
        self.ack()
        attempt = 0
        while not self._ended and not self._closed:
            if self._call is None:
                self._call = self._client.stubs.changes.WatchChanges(
                    self._client._watch(self.cursor), metadata=self._client.metadata
                )
            error: MemMachineError
            try:
                raw = await self._call.read()
            except grpc.RpcError as e:
                self._call = None
                if self._closed:
                    break
                error = from_rpc_error(e)
                if error.code not in _base.WATCH_RECONNECT:
                    raise error from e
            except asyncio.CancelledError:
                self.close()
                raise
            else:
                if isinstance(raw, change_pb.Change):
                    change = models.change(raw)
                    self._pending = change.cursor
                    self._ended = change.kind is models.ChangeKind.PROJECT_DELETED
                    return change
                self._call = None  # EOF: the server ended the stream
                error = Unavailable("the server ended the stream")
            if self._max_reconnects is not None and self.reconnects >= self._max_reconnects:
                raise error
            await asyncio.sleep(self._client.retry.backoff(min(attempt, 8), error))
            attempt += 1
            self.reconnects += 1
        raise StopAsyncIteration
