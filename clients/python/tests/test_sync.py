"""Every method of `Memory` against the real server."""

from __future__ import annotations

import time
import uuid

import grpc
import pytest
from google.rpc import error_details_pb2

from memmachine_grpc import (
    DeadlineExceeded,
    Feature,
    InvalidArgument,
    Memory,
    Message,
    NotFound,
)
from memmachine_grpc._proto import semantic_service_pb2 as semantic_pb

from .proxy import Proxy
from .server import Server


def test_add_search_list_delete(mem: Memory) -> None:
    uid = mem.add("the dog is a golden retriever", producer="alice", role="user",
                  metadata={"topic": "pets"})
    results = mem.add_many(["I like green tea", Message("the cat sleeps all day", producer="bob")])
    assert [r.duplicate for r in results] == [False, False]
    assert len({uid, *(r.uid for r in results)}) == 3

    found = mem.search("golden retriever dog", top_k=5)
    assert found.episodes[0].episode.uid == uid
    assert found.episodes[0].episode.producer == "alice"
    assert found.episodes[0].episode.metadata == {"topic": "pets"}
    assert found.episodes[0].score_parts is None
    assert [e.content for e in found.short_term][-1] == "the cat sleeps all day"
    assert list(found)[0] is found.episodes[0]

    explained = mem.search("golden retriever dog", explain=True)
    parts = explained.episodes[0].score_parts
    assert parts is not None and parts.lexical > 0

    filtered = mem.search("dog cat tea", filter="producer_id = 'bob'")
    assert [h.episode.content for h in filtered] == ["the cat sleeps all day"]

    assert mem.delete(uid) == 1
    assert [e.content for e in mem.list()] == ["I like green tea", "the cat sleeps all day"]
    with pytest.raises(NotFound):
        mem.delete(uid)  # all or none: a uid no longer stored


def test_list_follows_pages(mem: Memory) -> None:
    mem.add_many([f"message number {i}" for i in range(25)])
    episodes = list(mem.list(page_size=4))
    assert [e.content for e in episodes] == [f"message number {i}" for i in range(25)]
    assert [e.sequence_num for e in episodes] == sorted(e.sequence_num for e in episodes)
    assert [e.content for e in mem.list(filter="m.none = 'x'")] == []


def test_idempotency_key_makes_a_repeat_a_duplicate(mem: Memory) -> None:
    key = str(uuid.uuid4())
    first = mem.add_many([Message("remember once", idempotency_key=key)])
    again = mem.add_many([Message("remember once", idempotency_key=key)])
    assert first[0].duplicate is False and again[0].duplicate is True
    assert again[0].uid == first[0].uid
    # Without a key each add is a new message (the client's key is fresh each call).
    mem.add("no key given")
    mem.add("no key given")
    assert [e.content for e in mem.list()].count("no key given") == 2


def test_features_listed_and_searched(mem: Memory) -> None:
    set_id = mem.stubs.semantic.GetSetId(
        semantic_pb.GetSetIdRequest(org_id=mem.org, project_id=mem.project)
    ).set_id
    for feature, value in [("favourite tea", "green"), ("favourite food", "ramen")]:
        mem.stubs.semantic.AddFeature(semantic_pb.AddFeatureRequest(
            org_id=mem.org, project_id=mem.project, set_id=set_id,
            category_name="profile", tag="preferences", feature=feature, value=value,
        ))
    listed = list(mem.features(page_size=1))
    assert sorted((f.name, f.value) for f in listed) == [
        ("favourite food", "ramen"), ("favourite tea", "green")]
    assert all(isinstance(f, Feature) and f.set_id == set_id for f in listed)
    searched = list(mem.features("ramen"))
    assert searched and searched[0].value == "ramen"
    assert mem.delete_features([f.id for f in listed]) == 2
    assert list(mem.features()) == []


def test_forget_subject_returns_the_receipt(mem: Memory) -> None:
    mem.add_many([Message("carol's secret", producer="carol"), Message("dave's note", producer="dave")])
    dry = mem.forget_subject("carol", dry_run=True)
    assert dry.dry_run and dry.projects[0].episodes_deleted == 1
    receipt = mem.forget_subject("carol")
    assert receipt.subject == "carol" and receipt.receipt_id and receipt.completed_at
    assert [(p.project_id, p.episodes_deleted) for p in receipt.projects] == [(mem.project, 1)]
    assert [e.content for e in mem.list()] == ["dave's note"]


def test_import_stream_batches_and_counts_duplicates(mem: Memory) -> None:
    messages = [Message(f"imported {i}", idempotency_key=f"imp-{i}") for i in range(7)]
    summary = mem.import_stream(messages, batch_size=3)
    assert (summary.batches, summary.messages, summary.duplicates) == (3, 7, 0)
    assert summary.first_error is None
    again = mem.import_stream([messages[:2], ["a new one"]])  # lists are batches
    assert (again.batches, again.messages, again.duplicates) == (2, 3, 2)
    bad = mem.import_stream([["fine"], [Message("")], ["never sent"]])
    assert bad.batches == 1 and bad.first_error is not None
    assert bad.first_error.batch == 1 and bad.first_error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert len(list(mem.list())) == 9


def test_errors_carry_details(mem: Memory) -> None:
    with pytest.raises(InvalidArgument) as bad:
        mem.search("dog", filter="producer_id = ")
    err = bad.value
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "position" in err.message
    assert [f for f, _ in err.field_violations] == ["filter"]
    assert isinstance(err.detail(error_details_pb2.BadRequest), error_details_pb2.BadRequest)

    with pytest.raises(InvalidArgument) as top_k:
        mem.search("dog", top_k=0)
    assert [f for f, _ in top_k.value.field_violations] == ["top_k"]

    with Memory(mem.addr, mem.org, "no-such-project") as other, pytest.raises(NotFound):
        other.add("anyone?")


def test_a_passed_deadline_is_typed_and_not_retried(server: Server, project: str) -> None:
    proxy = Proxy(server.addr)
    try:
        proxy.stall_after(b"stalled query")  # the server answers; the answer never arrives
        with Memory(proxy.addr, "test", project, timeout=0.5) as slow:
            assert list(slow.list()) == []  # through the proxy, before it stalls
            started = time.monotonic()
            with pytest.raises(DeadlineExceeded):
                slow.search("stalled query")
            assert 0.4 < time.monotonic() - started < 2.0
            assert proxy.connections == 1
    finally:
        proxy.close()


def test_an_add_whose_answer_was_lost_is_retried_and_stored_once(
    server: Server, project: str
) -> None:
    proxy = Proxy(server.addr)
    try:
        marker = f"lost answer {uuid.uuid4()}"
        proxy.drop_after(marker.encode())
        with Memory(proxy.addr, "test", project) as mem:
            results = mem.add_many([marker])
            assert proxy.dropped.is_set()
            assert proxy.connections == 2, "the retry came over a new connection"
            assert results[0].duplicate is True, "the retry found the first attempt's message"
            stored = [e for e in mem.list() if e.content == marker]
            assert [e.uid for e in stored] == [results[0].uid]
    finally:
        proxy.close()
