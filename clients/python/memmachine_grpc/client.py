"""`Memory`: the synchronous client of one project."""

from __future__ import annotations

import builtins
import datetime as dt
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

import grpc

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


@dataclass(frozen=True)
class Stubs:
    """The generated stubs on the client's channel, for what the client does not wrap."""

    memory: memory_grpc.MemoryServiceStub
    changes: change_grpc.ChangeServiceStub
    semantic: semantic_grpc.SemanticServiceStub
    lifecycle: lifecycle_grpc.LifecycleServiceStub
    usage: lifecycle_grpc.UsageServiceStub
    projects: project_grpc.ProjectServiceStub


class Memory(_base.Base):
    """One project's memory over gRPC.

    >>> with Memory("127.0.0.1:50051", "acme", "support") as mem:
    ...     mem.add("the dog is a golden retriever", producer="alice")
    ...     for hit in mem.search("what dog?"):
    ...         print(hit.score, hit.episode.content)

    Unary calls have a deadline (`timeout`, seconds, overall across retries). Reads and
    adds are retried on UNAVAILABLE and RESOURCE_EXHAUSTED (`retries`); deletes and
    forgets never are.
    """

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
        self.channel: grpc.Channel = (
            grpc.secure_channel(addr, creds, opts) if creds else grpc.insecure_channel(addr, opts)
        )
        self.stubs = Stubs(
            memory=memory_grpc.MemoryServiceStub(self.channel),
            changes=change_grpc.ChangeServiceStub(self.channel),
            semantic=semantic_grpc.SemanticServiceStub(self.channel),
            lifecycle=lifecycle_grpc.LifecycleServiceStub(self.channel),
            usage=lifecycle_grpc.UsageServiceStub(self.channel),
            projects=project_grpc.ProjectServiceStub(self.channel),
        )

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _unary(
        self,
        method: grpc.UnaryUnaryMultiCallable[_Req, _Resp],
        request: _Req,
        *,
        retry: bool,
        timeout: float | None,
    ) -> _Resp:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        attempt = 0
        while True:
            try:
                return method(
                    request,
                    timeout=max(deadline - time.monotonic(), 0.0),
                    metadata=self.metadata,
                )
            except grpc.RpcError as e:
                error = from_rpc_error(e)
                wait = self.retry.delay(attempt, error) if retry else None
                if wait is None or time.monotonic() + wait >= deadline:
                    raise error from e
            time.sleep(wait)
            attempt += 1

    # --- projects ------------------------------------------------------------------

    def create_project(
        self, description: str = "", *, exist_ok: bool = True, timeout: float | None = None
    ) -> None:
        """Creates the client's project (calls on an unknown project are NOT_FOUND)."""
        try:
            self._unary(
                self.stubs.projects.CreateProject,
                self._create_project(description),
                retry=exist_ok,
                timeout=timeout,
            )
        except AlreadyExists:
            if not exist_ok:
                raise

    # --- episodic memory -------------------------------------------------------------

    def add(
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
        """Stores one message; returns its episode's uid (the original's, for a repeat)."""
        message = models.Message(
            content, producer, role, produced_for, metadata or {}, timestamp, expires_at,
            idempotency_key,
        )
        return self.add_many([message], timeout=timeout)[0].uid

    def add_many(
        self, messages: Iterable[models.MessageLike], *, timeout: float | None = None
    ) -> builtins.list[models.AddResult]:
        """Stores the messages atomically; results in input order. Every message gets an
        idempotency key first, so the retries of this call store each message once."""
        request = self._add(messages)
        response = self._unary(self.stubs.memory.AddMemories, request, retry=True, timeout=timeout)
        return [models.AddResult(r.uid, r.duplicate) for r in response.results]

    def search(
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
        """Long-term hits (with `score_parts` when `explain`), the short-term window,
        the summary and semantic features."""
        request = self._search(
            query, top_k, filter, explain, expand_context, score_threshold, set_metadata
        )
        response = self._unary(
            self.stubs.memory.SearchMemories, request, retry=True, timeout=timeout
        )
        return models.search_result(response)

    def list(
        self, *, filter: str = "", page_size: int = 100, timeout: float | None = None
    ) -> Iterator[models.Episode]:
        """Every episode (matching `filter`) in sequence order, page after page."""
        token = ""
        while True:
            request = self._list(False, filter, page_size, token)
            page = self._unary(self.stubs.memory.ListMemories, request, retry=True, timeout=timeout)
            yield from (models.episode(e) for e in page.episodes)
            token = page.next_page_token
            if not token:
                return

    def delete(self, uids: str | Iterable[str], *, timeout: float | None = None) -> int:
        """Deletes episodes of the project, all or none; returns how many. Not retried."""
        request = self._delete(uids)
        return self._unary(
            self.stubs.memory.DeleteEpisodicMemories, request, retry=False, timeout=timeout
        ).deleted_count

    # --- semantic memory -------------------------------------------------------------

    def features(
        self,
        query: str | None = None,
        *,
        top_k: int = 10,
        filter: str = "",
        set_metadata: Mapping[str, str] | None = None,
        page_size: int = 100,
        timeout: float | None = None,
    ) -> Iterator[models.Feature]:
        """The project's semantic features: all of them page after page, or with a
        query the `top_k` best (SearchFeatures)."""
        if query is not None:
            request = self._search_features(query, top_k, filter, set_metadata)
            found = self._unary(
                self.stubs.semantic.SearchFeatures, request, retry=True, timeout=timeout
            )
            yield from (models.feature(f) for f in found.features)
            return
        token = ""
        while True:
            page = self._unary(
                self.stubs.memory.ListMemories,
                self._list(True, filter, page_size, token, set_metadata),
                retry=True,
                timeout=timeout,
            )
            yield from (models.feature(f) for f in page.features)
            token = page.next_page_token
            if not token:
                return

    def delete_features(self, ids: str | Iterable[str], *, timeout: float | None = None) -> int:
        request = self._delete_features(ids)
        return self._unary(
            self.stubs.memory.DeleteSemanticMemories, request, retry=False, timeout=timeout
        ).deleted_count

    def forget_subject(
        self,
        subject: str,
        *,
        everywhere: bool = False,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> models.ForgetReceipt:
        """Removes what `subject` produced or was told, in this project (or every project
        of the org with `everywhere`); returns the receipt. Not retried."""
        request = self._forget(subject, everywhere, dry_run)
        response = self._unary(
            self.stubs.lifecycle.ForgetSubject, request, retry=False, timeout=timeout
        )
        return models.receipt(response.receipt)

    # --- streams ---------------------------------------------------------------------

    def import_stream(
        self,
        messages: Iterable[models.MessageLike | Sequence[models.MessageLike]],
        *,
        batch_size: int = 500,
        timeout: float | None = None,
    ) -> models.ImportSummary:
        """Loads many messages over one ImportMemories stream, `batch_size` per batch (a
        list in `messages` is a batch of its own). The first failing batch stops it and
        is named in `first_error`; the call itself succeeds. Not retried, but every
        message has an idempotency key: run it again and the stored ones are duplicates."""
        try:
            response = self.stubs.memory.ImportMemories(
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
    ) -> Watch:
        """Changes of the project as they commit, after the stored cursor (or from now).
        See `Watch` for when the cursor is saved."""
        store = _base.cursor_store(cursor_file, cursor_store)
        return Watch(self, store, max_reconnects)


class Watch(Iterator[models.Change]):
    """An iterator of changes that resumes where the caller stopped.

    At-least-once: a change's cursor is saved when the caller asks for the next change
    (or calls `ack()`), i.e. after it has been handled. A crash while handling a change
    delivers that change again after the restart; nothing is skipped. On UNAVAILABLE,
    RESOURCE_EXHAUSTED or a stream the server ended, it reconnects with backoff from the
    last saved cursor (forever, unless `max_reconnects`).
    """

    def __init__(self, client: Memory, store: CursorStore, max_reconnects: int | None) -> None:
        self._client = client
        self._store = store
        self._max_reconnects = max_reconnects
        self.cursor: str = store.load() or ""
        self._pending: str | None = None
        self._call: Iterator[change_pb.Change] | None = None
        self._ended = False
        self._closed = threading.Event()
        self.reconnects = 0

    def __iter__(self) -> Watch:
        return self

    def ack(self) -> None:
        """Saves the cursor of the change last returned."""
        if self._pending is not None:
            self._store.save(self._pending)
            self.cursor = self._pending
            self._pending = None

    def close(self) -> None:
        self._closed.set()
        call = self._call
        if isinstance(call, grpc.Future):
            call.cancel()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __next__(self) -> models.Change:
        self.ack()
        attempt = 0
        while not self._ended and not self._closed.is_set():
            if self._call is None:
                self._call = self._client.stubs.changes.WatchChanges(
                    self._client._watch(self.cursor), metadata=self._client.metadata
                )
            try:
                raw = next(self._call)
            except StopIteration:
                self._call = None
                error: MemMachineError = Unavailable("the server ended the stream")
            except grpc.RpcError as e:
                self._call = None
                if self._closed.is_set():
                    break
                error = from_rpc_error(e)
                if error.code not in _base.WATCH_RECONNECT:
                    raise error from e
            else:
                change = models.change(raw)
                self._pending = change.cursor
                self._ended = change.kind is models.ChangeKind.PROJECT_DELETED
                return change
            if self._max_reconnects is not None and self.reconnects >= self._max_reconnects:
                raise error
            self._wait(self._client.retry.backoff(min(attempt, 8), error))
            attempt += 1
            self.reconnects += 1
        raise StopIteration

    def _wait(self, seconds: float) -> None:
        self._closed.wait(seconds)
