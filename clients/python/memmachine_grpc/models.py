"""What the client returns and takes: plain dataclasses, converted from and to protobuf."""

from __future__ import annotations

import datetime as dt
import enum
import functools
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from google.protobuf import json_format, timestamp_pb2

from ._proto import change_service_pb2 as change_pb
from ._proto import common_pb2 as common_pb
from ._proto import lifecycle_service_pb2 as lifecycle_pb
from ._proto import memory_service_pb2 as memory_pb


@dataclass(frozen=True)
class Message:
    """One message to remember. A message without `idempotency_key` is given a uuid4
    by the client, so that a retried add stores it once."""

    content: str
    producer: str = ""
    role: str = ""
    produced_for: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    timestamp: dt.datetime | None = None
    expires_at: dt.datetime | None = None
    idempotency_key: str | None = None


MessageLike = str | Message


@dataclass(frozen=True)
class AddResult:
    uid: str
    # The message's idempotency key was already stored: `uid` is the original episode's.
    duplicate: bool


@dataclass(frozen=True)
class Episode:
    uid: str
    content: str
    producer: str
    role: str
    produced_for: str
    sequence_num: int
    created_at: dt.datetime | None
    metadata: dict[str, str]
    expires_at: dt.datetime | None = None


@dataclass(frozen=True)
class ScoreParts:
    lexical: float
    dense: float
    context: float
    session: float
    time: float
    participant: float


@dataclass(frozen=True)
class ScoredEpisode:
    episode: Episode
    score: float
    # Set when the search asked to explain.
    score_parts: ScoreParts | None = None


@dataclass(frozen=True)
class Feature:
    """A semantic fact distilled from conversations, citing its episodes."""

    id: str
    set_id: str
    category: str
    tag: str
    name: str
    value: str
    citations: list[str]
    metadata: dict[str, object]
    score: float
    created_at: dt.datetime | None
    updated_at: dt.datetime | None


class SearchResult:
    """Long-term hits best first; iterating a result iterates them. Each part is
    converted from the answer when first read: a caller that reads only the hits does
    not pay for the short-term window (most of a search's conversion)."""

    def __init__(self, response: memory_pb.SearchMemoriesResponse) -> None:
        self._response = response

    @functools.cached_property
    def episodes(self) -> list[ScoredEpisode]:
        return [scored(s) for s in self._response.episodic_memory.long_term_memory]

    @functools.cached_property
    def short_term(self) -> list[Episode]:
        return [episode(e) for e in self._response.episodic_memory.short_term_memory]

    @functools.cached_property
    def summary(self) -> list[str]:
        return list(self._response.episodic_memory.episode_summary)

    @functools.cached_property
    def features(self) -> list[Feature]:
        return [feature(f) for f in self._response.semantic_memory]

    def __iter__(self) -> Iterator[ScoredEpisode]:
        return iter(self.episodes)

    def __len__(self) -> int:
        return len(self._response.episodic_memory.long_term_memory)

    def __repr__(self) -> str:
        return (
            f"SearchResult(episodes={self.episodes!r}, short_term={self.short_term!r}, "
            f"summary={self.summary!r}, features={self.features!r})"
        )


class ChangeKind(enum.Enum):
    UNSPECIFIED = 0
    EPISODE_ADDED = 1
    EPISODE_DELETED = 2
    FEATURE_ADDED = 3
    FEATURE_UPDATED = 4
    FEATURE_DELETED = 5
    SUMMARY_REPLACED = 6
    PROJECT_DELETED = 7


@dataclass(frozen=True)
class Change:
    cursor: str
    kind: ChangeKind
    at: dt.datetime | None
    episode_uid: str
    episode: Episode | None
    feature_id: str
    feature: Feature | None
    summary: str


@dataclass(frozen=True)
class ForgetProject:
    project_id: str
    episodes_deleted: int
    features_deleted: int
    citations_removed: int
    summaries_deleted: int
    sets_deleted: int


@dataclass(frozen=True)
class ForgetReceipt:
    receipt_id: str
    org_id: str
    subject: str
    dry_run: bool
    completed_at: dt.datetime | None
    projects: list[ForgetProject]


@dataclass(frozen=True)
class ImportFailure:
    batch: int
    code: int
    message: str


@dataclass(frozen=True)
class ImportSummary:
    batches: int
    messages: int
    duplicates: int
    first_error: ImportFailure | None


# --- conversions -------------------------------------------------------------------


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _time(msg: timestamp_pb2.Timestamp, present: bool) -> dt.datetime | None:
    # What Timestamp.ToDatetime(tzinfo=utc) gives, in half its time.
    if not present:
        return None
    return _EPOCH + dt.timedelta(seconds=msg.seconds, microseconds=msg.nanos // 1000)


def _stamp(when: dt.datetime) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(when)
    return out


def to_proto_message(m: MessageLike) -> common_pb.MemoryMessage:
    """The wire message, with a fresh idempotency key when it has none."""
    if isinstance(m, str):
        m = Message(m)
    out = common_pb.MemoryMessage(
        content=m.content,
        producer=m.producer,
        role=m.role,
        produced_for=m.produced_for,
        metadata=dict(m.metadata),
        idempotency_key=m.idempotency_key or str(uuid.uuid4()),
    )
    if m.timestamp is not None:
        out.timestamp.CopyFrom(_stamp(m.timestamp))
    if m.expires_at is not None:
        out.expires_at.CopyFrom(_stamp(m.expires_at))
    return out


def episode(e: common_pb.Episode) -> Episode:
    return Episode(
        uid=e.uid,
        content=e.content,
        producer=e.producer_id,
        role=e.producer_role,
        produced_for=e.produced_for_id,
        sequence_num=e.sequence_num,
        created_at=_time(e.created_at, e.HasField("created_at")),
        metadata=dict(e.metadata),
        expires_at=_time(e.expires_at, e.HasField("expires_at")),
    )


def scored(s: common_pb.ScoredEpisode) -> ScoredEpisode:
    parts = None
    if s.HasField("score_parts"):
        p = s.score_parts
        parts = ScoreParts(p.lexical, p.dense, p.context, p.session, p.time, p.participant)
    return ScoredEpisode(episode(s.episode), s.score, parts)


def feature(f: common_pb.SemanticFeature) -> Feature:
    return Feature(
        id=f.id,
        set_id=f.set_id,
        category=f.category,
        tag=f.tag,
        name=f.feature_name,
        value=f.value,
        citations=list(f.citations),
        metadata=dict(json_format.MessageToDict(f.metadata)),
        score=f.score,
        created_at=_time(f.created_at, f.HasField("created_at")),
        updated_at=_time(f.updated_at, f.HasField("updated_at")),
    )


def search_result(r: memory_pb.SearchMemoriesResponse) -> SearchResult:
    return SearchResult(r)


def change(c: change_pb.Change) -> Change:
    return Change(
        cursor=c.cursor,
        kind=ChangeKind(c.kind) if c.kind in ChangeKind._value2member_map_ else ChangeKind.UNSPECIFIED,
        at=_time(c.at, c.HasField("at")),
        episode_uid=c.episode_uid,
        episode=episode(c.episode) if c.HasField("episode") else None,
        feature_id=c.feature_id,
        feature=feature(c.feature) if c.HasField("feature") else None,
        summary=c.summary,
    )


def receipt(r: lifecycle_pb.ForgetReceipt) -> ForgetReceipt:
    return ForgetReceipt(
        receipt_id=r.receipt_id,
        org_id=r.org_id,
        subject=r.subject,
        dry_run=r.dry_run,
        completed_at=_time(r.completed_at, r.HasField("completed_at")),
        projects=[
            ForgetProject(
                p.project_id, p.episodes_deleted, p.features_deleted,
                p.citations_removed, p.summaries_deleted, p.sets_deleted,
            )
            for p in r.projects
        ],
    )


def import_summary(r: memory_pb.ImportMemoriesResponse) -> ImportSummary:
    err = None
    if r.HasField("first_error"):
        e = r.first_error
        err = ImportFailure(e.batch, e.code, e.message)
    return ImportSummary(r.batches, r.messages, r.duplicates, err)
