"""Drives a memmachine server's REST gateway with MemMachine's own published client
(memmachine-client 0.4.0), through its public API only, unpatched.

Usage: python rest_client.py --base-url http://127.0.0.1:PORT [--api-key KEY]
Prints "OK: memmachine-client checks passed" at the end; any failed check raises.
"""

import argparse
import datetime
import sys
import time

import requests
from memmachine_client import MemMachineClient
from memmachine_common.api import MemoryType


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--org", default="client_org")
    args = parser.parse_args()

    client = MemMachineClient(base_url=args.base_url, api_key=args.api_key)

    health = client.health_check()
    check(health.get("status") == "healthy", f"health: {health}")

    # Projects: create, get, list (a duplicate answers the project as it is, as in
    # MemMachine 0.4).
    project = client.create_project(
        org_id=args.org, project_id="crm", description="client test"
    )
    check(project.project_id == "crm", f"created {project}")
    again = client.create_project(org_id=args.org, project_id="crm", description="new")
    check(again.description == "client test", f"duplicate: {again}")
    got = client.get_project(org_id=args.org, project_id="crm")
    check(got.description == "client test", f"get: {got.description!r}")
    listed = [(p.org_id, p.project_id) for p in client.list_projects()]
    check((args.org, "crm") in listed, f"list: {listed}")
    other = client.create_project(org_id=args.org, project_id="other")

    # Add messages with metadata (the memory's own metadata is merged in).
    alice = project.memory(metadata={"user_id": "alice"})
    when = datetime.datetime(2023, 5, 8, 13, 56, tzinfo=datetime.timezone.utc)
    added = alice.add(
        "I adopted a golden retriever named Max last week.",
        role="user",
        producer="alice",
        produced_for="assistant",
        memory_types=[MemoryType.Episodic],
        metadata={"topic": "pets", "vet": "O'Brien"},
        timestamp=when,
    )
    check(len(added) == 1 and added[0].uid, f"add: {added}")
    dog_uid = str(added[0].uid)
    alice.add(
        "Max loves playing fetch at the beach.",
        producer="alice",
        memory_types=[MemoryType.Episodic],
        metadata={"topic": "pets"},
    )
    alice.add(
        "I started painting sunsets again.",
        producer="alice",
        memory_types=[MemoryType.Episodic],
        metadata={"topic": "hobbies"},
    )
    bob = project.memory(metadata={"user_id": "bob"})
    bob.add(
        "My golden retriever is called Rex.",
        producer="bob",
        memory_types=[MemoryType.Episodic],
    )
    other.memory().add("Max the dog lives in another project.", memory_types=[MemoryType.Episodic])
    check(project.get_episode_count() == 4, f"count: {project.get_episode_count()}")

    # Search: the memory's metadata filter keeps bob out; filter_dict narrows by topic;
    # an apostrophe in a filter value is escaped the client's way ('').
    # Vectors are made after the add is answered: until they all are, hybrid ranking
    # weighs what it has, so the order settles within moments (polled, not slept).
    deadline = time.monotonic() + 20
    while True:
        found = alice.search("golden retriever dog", limit=5)
        episodes = found.content.episodic_memory.long_term_memory.episodes
        contents = [e.content for e in episodes]
        if (contents and contents[0].startswith("I adopted")) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    check(contents and contents[0].startswith("I adopted"), f"search: {contents}")
    check(all("Rex" not in c and "another project" not in c for c in contents), f"leak: {contents}")
    check(all(e.score is not None for e in episodes), "scores missing")
    check(episodes[0].metadata.get("vet") == "O'Brien", f"metadata: {episodes[0].metadata}")
    check(episodes[0].created_at == when, f"created_at: {episodes[0].created_at}")
    pets = alice.search("sunsets painting", limit=5, filter_dict={"metadata.topic": "hobbies"})
    got = [e.content for e in pets.content.episodic_memory.long_term_memory.episodes]
    check(got == ["I started painting sunsets again."], f"filter_dict: {got}")
    vet = alice.search("dog", limit=5, filter_dict={"metadata.vet": "O'Brien"})
    got = [str(e.uid) for e in vet.content.episodic_memory.long_term_memory.episodes]
    check(got == [dog_uid], f"quoted filter: {got}")
    explicit = bob.search("dog", limit=5, filter="producer_id='bob'")
    got = [e.content for e in explicit.content.episodic_memory.long_term_memory.episodes]
    check(got == ["My golden retriever is called Rex."], f"explicit filter: {got}")

    # List, paged by page number, in order (the memory's metadata keeps bob out).
    page0 = alice.list(page_size=2, page_num=0).content.episodic_memory
    page1 = alice.list(page_size=2, page_num=1).content.episodic_memory
    page2 = alice.list(page_size=2, page_num=2).content.episodic_memory
    check(len(page0) == 2 and len(page1) == 1 and not page2, f"pages: {page0} {page1} {page2}")
    check(page0[0].content.startswith("I adopted"), f"order: {page0[0].content}")
    check(page0[0].session_key == f"{args.org}/crm", f"session_key: {page0[0].session_key}")
    filtered = alice.list(filter="metadata.topic='pets'").content.episodic_memory
    check(len(filtered) == 2, f"list filter: {[e.content for e in filtered]}")

    # Semantic memory by hand: alice's user set (its default category is "profile"), a
    # feature with citations, get, update, list, delete.
    alice_set = {"producer_id": "alice"}
    set_id = alice.get_semantic_set_id(metadata_tags=["producer_id"], set_metadata=alice_set)
    check(set_id, "set id")
    feature_id = alice.add_feature(
        set_id=set_id,
        category_name="profile",
        tag="pets",
        feature="dog",
        value="a golden retriever named Max",
        feature_metadata={"source": "client test"},
        citations=[dog_uid],
    )
    check(feature_id, "feature id")
    feature = alice.get_feature(feature_id=feature_id, load_citations=True)
    check(feature is not None and feature.value == "a golden retriever named Max", f"get_feature: {feature}")
    check([str(c) for c in feature.metadata.citations] == [dog_uid], f"citations: {feature.metadata}")
    alice.update_feature(feature_id=feature_id, value="a golden retriever called Max")
    feature = alice.get_feature(feature_id=feature_id)
    check(feature.value == "a golden retriever called Max", f"update_feature: {feature}")
    # A set id named by MemMachine's convention, used before anything made it: the
    # project's own set, made on first use.
    named = f"mem_project_set_org_{args.org}_project_crm_0_46b9dd2b0ba8__"
    named_id = alice.add_feature(
        set_id=named, category_name="profile", tag="home", feature="city", value="Lyon"
    )
    check(alice.get_feature(feature_id=named_id).value == "Lyon", "named set feature")
    alice.delete_semantic(semantic_id=named_id)
    # A set the client names itself (mem_project_set_<project>): every field of its
    # feature is updated at once, as MemMachine does (here it once answered 404).
    own_id = alice.add_feature(
        set_id="mem_project_set_crm", category_name="profile", tag="hobby",
        feature="favourite_sport", value="running",
    )
    alice.update_feature(
        feature_id=own_id, category_name="profile", tag="leisure",
        feature="favorite_activity", value="painting", metadata={"updated": "true"},
    )
    own = alice.get_feature(feature_id=own_id)
    fields = (own.category, own.tag, own.feature_name, own.value, own.metadata.other)
    check(fields == ("profile", "leisure", "favorite_activity", "painting", {"updated": "true"}),
          f"update_feature of every field: {own}")
    alice.delete_semantic(semantic_id=own_id)
    # (alice's memory would filter features by its metadata.user_id, which they lack.)
    semantic = project.memory().list(memory_type=MemoryType.Semantic, set_metadata=alice_set)
    values = [f.value for f in semantic.content.semantic_memory or []]
    check(values == ["a golden retriever called Max"], f"semantic list: {values}")
    alice.delete_semantic(semantic_id=feature_id)
    check(alice.get_feature(feature_id=feature_id) is None, "a deleted feature is still there")

    # Delete episodic memory; the count follows. Deleting again succeeds (as in
    # MemMachine); an id of another project is left alone.
    alice.delete_episodic(episodic_id=dog_uid)
    alice.delete_episodic(episodic_id=dog_uid)
    check(project.get_episode_count() == 3, f"count after delete: {project.get_episode_count()}")
    other_uid = str(other.memory().list().content.episodic_memory[0].uid)
    alice.delete_episodic(episodic_id=other_uid)
    check(other.get_episode_count() == 1, "the other project's episode is gone")

    # An empty query answers normally (the recent window; nothing ranks).
    empty = alice.search(query="")
    check(empty.content is not None, f"empty query: {empty}")

    # The configuration API answers (MemMachine 0.4's own server does not).
    config = client.config().get_config()
    check(config.episodic_memory.enabled, f"config: {config}")
    check(len(config.resources.databases) == 1, f"resources: {config.resources}")

    # Runtime settings: the client's update_* calls take effect and read back; what the
    # server cannot change is refused with a reason (412).
    settings = client.config()
    done = settings.update_short_term_memory_config(message_capacity=7)
    check(done.success, f"update_short_term_memory_config: {done}")
    short = settings.get_short_term_memory_config()
    check(short.message_capacity == 7, f"short-term after update: {short}")
    done = settings.update_semantic_memory_config(ingestion_trigger_messages=9)
    check(done.success, f"update_semantic_memory_config: {done}")
    # The client's response model has no trigger fields: read the JSON itself.
    semantic = client.request("GET", f"{client.base_url}/api/v2/config/memory/semantic")
    semantic = semantic.json()
    check(semantic["ingestion_trigger_messages"] == 9, f"semantic after update: {semantic}")
    done = settings.update_long_term_memory_config(reranker="lexical")
    check(done.success, f"update_long_term_memory_config: {done}")
    check(settings.get_long_term_memory_config().reranker == "lexical", "reranker")
    done = settings.update_episodic_memory_config(short_term_memory_enabled=True)
    check(done.success, f"update_episodic_memory_config: {done}")
    try:
        settings.update_semantic_memory_config(database="elsewhere")
        raise AssertionError("the semantic database changed at run time")
    except requests.HTTPError as err:
        check(err.response.status_code == 412, f"database: {err.response.status_code}")
        check("semantic_memory.database" in err.response.text, err.response.text)

    # Projects go; later calls on them are 404.
    check(other.delete(), "delete project")
    check(project.delete(), "delete project")
    try:
        client.get_project(org_id=args.org, project_id="crm")
        raise AssertionError("a deleted project is still there")
    except requests.HTTPError as err:
        check(err.response.status_code == 404, f"deleted get: {err.response.status_code}")
    client.close()
    print("OK: memmachine-client checks passed")


if __name__ == "__main__":
    try:
        main()
    except Exception as err:  # one clear line for the test's output
        print(f"FAILED: {type(err).__name__}: {err}", file=sys.stderr)
        raise
