"""What the sync and async clients share: settings, metadata and request building."""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence

import grpc

from . import models
from ._proto import change_service_pb2 as change_pb
from ._proto import common_pb2 as common_pb
from ._proto import lifecycle_service_pb2 as lifecycle_pb
from ._proto import memory_service_pb2 as memory_pb
from ._proto import project_service_pb2 as project_pb
from ._proto import semantic_service_pb2 as semantic_pb
from .cursor import CursorStore, FileCursorStore, MemoryCursorStore
from .retry import RetryPolicy, policy

Tls = bool | grpc.ChannelCredentials

# Reconnect quickly after a server restart (gRPC's default first backoff is 1 s, growing
# to 120 s); calls fail fast meanwhile and the client's own retries wait instead.
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.keepalive_time_ms", 30000),
)

# Codes after which a watch reconnects: the server went away, or cut off a slow reader.
WATCH_RECONNECT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})


def credentials(tls: Tls) -> grpc.ChannelCredentials | None:
    if isinstance(tls, grpc.ChannelCredentials):
        return tls
    return grpc.ssl_channel_credentials() if tls else None


def cursor_store(
    cursor_file: str | os.PathLike[str] | None, cursor_store: CursorStore | None
) -> CursorStore:
    if cursor_store is not None:
        return cursor_store
    if cursor_file is not None:
        return FileCursorStore(cursor_file)
    return MemoryCursorStore()


def batches(
    items: Iterable[models.MessageLike | Sequence[models.MessageLike]], batch_size: int
) -> Iterator[list[common_pb.MemoryMessage]]:
    """Messages grouped into batches of at most `batch_size`; a list or tuple in the
    input is one batch of its own."""
    batch: list[common_pb.MemoryMessage] = []
    for item in items:
        if isinstance(item, (str, models.Message)):
            batch.append(models.to_proto_message(item))
            if len(batch) >= batch_size:
                yield batch
                batch = []
        else:
            if batch:
                yield batch
                batch = []
            yield [models.to_proto_message(m) for m in item]
    if batch:
        yield batch


class Base:
    def __init__(
        self,
        addr: str,
        org: str,
        project: str,
        *,
        api_key: str | None,
        timeout: float,
        retries: RetryPolicy | int,
    ) -> None:
        self.addr = addr
        self.org = org
        self.project = project
        self.timeout = timeout
        self.retry = policy(retries)
        # The project as a routing key, so a proxy may send each project to one replica.
        route = f"{urllib.parse.quote(org, safe='')}/{urllib.parse.quote(project, safe='')}"
        md: list[tuple[str, str]] = [("x-memmachine-project", route)]
        if api_key:
            md.append(("authorization", f"Bearer {api_key}"))
        self.metadata: tuple[tuple[str, str], ...] = tuple(md)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.addr!r}, {self.org!r}, {self.project!r})"

    # --- requests ------------------------------------------------------------------

    def _create_project(self, description: str) -> project_pb.CreateProjectRequest:
        return project_pb.CreateProjectRequest(
            org_id=self.org, project_id=self.project, description=description
        )

    def _add(self, messages: Iterable[models.MessageLike]) -> memory_pb.AddMemoriesRequest:
        return memory_pb.AddMemoriesRequest(
            org_id=self.org,
            project_id=self.project,
            messages=[models.to_proto_message(m) for m in messages],
        )

    def _search(
        self,
        query: str,
        top_k: int,
        filter: str,
        explain: bool,
        expand_context: int,
        score_threshold: float | None,
        set_metadata: Mapping[str, str] | None,
    ) -> memory_pb.SearchMemoriesRequest:
        req = memory_pb.SearchMemoriesRequest(
            org_id=self.org,
            project_id=self.project,
            query=query,
            top_k=top_k,
            filter=filter,
            explain=explain,
            expand_context=expand_context,
            set_metadata=dict(set_metadata or {}),
        )
        if score_threshold is not None:
            req.score_threshold = score_threshold
        return req

    def _list(
        self, semantic: bool, filter: str, page_size: int, token: str,
        set_metadata: Mapping[str, str] | None = None,
    ) -> memory_pb.ListMemoriesRequest:
        return memory_pb.ListMemoriesRequest(
            org_id=self.org,
            project_id=self.project,
            type=common_pb.MEMORY_TYPE_SEMANTIC if semantic else common_pb.MEMORY_TYPE_EPISODIC,
            page_size=page_size,
            page_token=token,
            filter=filter,
            set_metadata=dict(set_metadata or {}),
        )

    def _search_features(
        self, query: str, top_k: int, filter: str, set_metadata: Mapping[str, str] | None
    ) -> semantic_pb.SearchFeaturesRequest:
        return semantic_pb.SearchFeaturesRequest(
            org_id=self.org,
            project_id=self.project,
            query=query,
            top_k=top_k,
            filter=filter,
            set_metadata=dict(set_metadata or {}),
        )

    def _delete(self, uids: str | Iterable[str]) -> memory_pb.DeleteEpisodicMemoriesRequest:
        ids = [uids] if isinstance(uids, str) else list(uids)
        return memory_pb.DeleteEpisodicMemoriesRequest(
            org_id=self.org, project_id=self.project, episode_ids=ids
        )

    def _delete_features(self, ids: str | Iterable[str]) -> memory_pb.DeleteSemanticMemoriesRequest:
        ids = [ids] if isinstance(ids, str) else list(ids)
        return memory_pb.DeleteSemanticMemoriesRequest(
            org_id=self.org, project_id=self.project, feature_ids=ids
        )

    def _forget(
        self, subject: str, everywhere: bool, dry_run: bool
    ) -> lifecycle_pb.ForgetSubjectRequest:
        return lifecycle_pb.ForgetSubjectRequest(
            org_id=self.org,
            subject=subject,
            project_ids=[] if everywhere else [self.project],
            dry_run=dry_run,
        )

    def _watch(self, after: str) -> change_pb.WatchChangesRequest:
        return change_pb.WatchChangesRequest(org_id=self.org, project_id=self.project, after=after)

    def _imports(
        self, items: Iterable[models.MessageLike | Sequence[models.MessageLike]], batch_size: int
    ) -> Iterator[memory_pb.ImportMemoriesRequest]:
        for batch in batches(items, batch_size):
            yield memory_pb.ImportMemoriesRequest(
                org_id=self.org, project_id=self.project, messages=batch
            )
