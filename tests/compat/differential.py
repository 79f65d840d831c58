"""The differential comparison of this server's REST gateway with MemMachine 0.4's own
server: the same sequences of requests go to both, and each answer is reduced to what a
client can rely on (status code, the keys and JSON types of the body, list order where
MemMachine guarantees one, and the values named per step), never ids or timings.

    differential.py record  --base URL --out FILE     MemMachine's answers, to FILE
    differential.py compare --base URL --expect FILE  this server against FILE
    differential.py live    --memmachine URL --base URL   both at once

`compare` and `live` print one line per differing step and a table per sequence, and exit
1 when a step differs that is not a deliberate difference (DELIBERATE, listed with its
reason in the README's "Switching from MemMachine"). Standard library only, so CI runs it
with any Python 3.

MemMachine's baseline runs with `scripts/memmachine-py-server.sh compat-install` and
`compat-start` (semantic memory and its /config API on, models scripted by
tests/compat/fake_openai.py); this server is compared with an OpenAI-compatible model
configured the same way, so that both have semantic memory.
"""

import argparse
import json
import re
import sys
import time
import urllib.error
import urllib.request

# Steps where this server differs from MemMachine on purpose: the step's name and why.
# Each is one of the known upstream faults of CONTRACT.md, or a bound MemMachine lacks.
DELIBERATE = {
    # Known upstream faults (CONTRACT.md): isolation, implicit creation, no bounds.
    "add/unknown project": "MemMachine creates a project on add (upstream fault: add on "
    "an unknown project re-creates it); here 404",
    "search/unknown project": "MemMachine creates a project on search (same fault); "
    "here 404",
    "list/unknown project": "MemMachine creates a project on list (same fault); here 404",
    "projects/get after search on unknown": "follows: the project was never created here",
    "projects/delete auto-created": "follows: the project was never created here",
    "projects/count missing": "MemMachine counts 0 for a project that does not exist "
    "(a call on an unknown project answers as if it existed); here 404",
    "projects/count deleted": "same: a deleted project is 404 here",
    "search/top_k huge": "MemMachine accepts any top_k (upstream fault: unbounded top_k); "
    "here at most 1,000 (422)",
    "list/page_size huge": "MemMachine accepts any page_size (same fault); here at most "
    "1,000 (422)",
    "list/page_size zero": "MemMachine passes page_size 0 to the store (upstream fault: "
    "non-positive values reaching the store); here 422",
    "list/page_num negative": "same fault; here 422",
    "list/page_num huge": "a page_num walks the pages before it: beyond 10,000 is refused "
    "(422; page_token reads any page in one step), a bound MemMachine lacks",
    "search/expand context negative": "a negative expand_context reaches MemMachine's "
    "store (upstream fault: non-positive values reaching the store); here 422",
    "semantic/feature unknown citation": "a citation must name an episode of the project "
    "(404): a feature citing no stored episode would outlive every deletion of its "
    "sources; MemMachine stores it",
    "semantic/feature get foreign": "MemMachine reads a feature by a bare global id "
    "(upstream fault); here a feature of another project is 404",
    "semantic/feature update foreign": "same fault; here 404",
    "episodic/count after foreign delete": "MemMachine deletes an episode of another "
    "project by its bare id (upstream fault); here it is not touched",
    # CONTRACT.md: a message's content is required and non-empty.
    "add/empty content": "CONTRACT: content must not be empty (422); MemMachine stores it",
    "add/whitespace content": "same: blank content is refused",
    "add/count": "follows: the two blank messages were not stored",
    "episodic/count after delete": "follows: the two blank messages were not stored",
    "semantic/feature update missing": "an id that names no feature is 404, as feature "
    "get answers it; MemMachine's 422 comes from failing to find the feature's set",
    # Deletion is complete here: nothing remains to tell a deleted project from one that
    # never was.
    "projects/delete second again": "MemMachine answers 204 for a project it deleted "
    "before and 404 for one it never had; here both are 404",
}

# A step where MemMachine fails with a 5xx for a caller's mistake (a traceback in the
# answer) and this server answers a 4xx naming it, or succeeds, is deliberate too.
SERVER_FAULT = "MemMachine fails with a 5xx here; this server answers the caller"

# MemMachine's error answers carry a traceback and pydantic's list of errors; this
# server's carry {code, message}. Only the status and the `detail` key are compared.
ERROR_STATUS = 400


def sequences():
    """The request sequences: (sequence name, [step]). A step is a dict with `name`,
    `method`, `path`, `body` (strings may hold {var}), and optionally `save` ({var: key
    path} taken from the answer), `values` (key paths whose values must match), `loose`
    (lists compared as the set of their element shapes, for ranked results that depend
    on the embedder)."""
    P = {"org_id": "{org}", "project_id": "{p}"}

    def step(name, path, body=None, method="POST", **extra):
        return {"name": name, "method": method, "path": path, "body": body, **extra}

    def at(**fields):
        return {**P, **fields}

    msg = lambda content, **more: {"content": content, **more}  # noqa: E731
    return [
        ("health and metrics", [
            step("health", "/health", method="GET", values=["status", "service"]),
        ]),
        ("projects", [
            step("projects/create", "/projects", {**P, "description": "compare"},
                 values=["org_id", "project_id", "description"]),
            step("projects/create duplicate", "/projects", P,
                 values=["org_id", "project_id"]),
            step("projects/create duplicate with description", "/projects",
                 {**P, "description": "other"}, values=["org_id", "project_id"]),
            step("projects/create second", "/projects",
                 {"org_id": "{org}", "project_id": "{p2}"}),
            step("projects/create unicode description", "/projects",
                 {"org_id": "{org}", "project_id": "{p}_u", "description": "Zoë ✓ 日本"},
                 values=["description"]),
            step("projects/create empty project id", "/projects",
                 {"org_id": "{org}", "project_id": ""}),
            step("projects/create whitespace project id", "/projects",
                 {"org_id": "{org}", "project_id": "   "}),
            step("projects/create missing project id", "/projects", {"org_id": "{org}"}),
            step("projects/create unknown field", "/projects",
                 {"org_id": "{org}", "project_id": "{p}_x", "colour": "red"}),
            step("projects/create unicode project id", "/projects",
                 {"org_id": "{org}", "project_id": "{p}_café日本"}),
            step("projects/create slash in project id", "/projects",
                 {"org_id": "{org}", "project_id": "{p}/x"}),
            step("projects/create description not a string", "/projects",
                 {"org_id": "{org}", "project_id": "{p}_n", "description": 5}),
            step("projects/create not json object", "/projects", ["{org}", "{p}"]),
            step("projects/create config", "/projects",
                 {"org_id": "{org}", "project_id": "{p}_c",
                  "config": {"properties_schema": {"score": "int", "topic": "str"}}}),
            step("projects/get", "/projects/get", P,
                 values=["org_id", "project_id", "description"]),
            step("projects/get missing", "/projects/get",
                 {"org_id": "{org}", "project_id": "{p}_nothere"}),
            step("projects/get empty body", "/projects/get", {}),
            step("projects/list", "/projects/list", {}, loose=True),
            step("projects/count", "/projects/episode_count/get", P, values=["count"]),
            step("projects/count missing", "/projects/episode_count/get",
                 {"org_id": "{org}", "project_id": "{p}_nothere"}),
            step("projects/delete second", "/projects/delete",
                 {"org_id": "{org}", "project_id": "{p2}"}),
            step("projects/delete second again", "/projects/delete",
                 {"org_id": "{org}", "project_id": "{p2}"}),
            step("projects/get deleted", "/projects/get",
                 {"org_id": "{org}", "project_id": "{p2}"}),
        ]),
        ("add", [
            step("add/one", "/memories", at(messages=[msg("I adopted a golden retriever named Max")]),
                 save={"uid": "results.0.uid"}),
            step("add/batch", "/memories", at(types=["episodic"], messages=[
                msg("Max loves the beach", producer="alice", role="user",
                    metadata={"topic": "pets"}),
                msg("Noted: Max likes beaches", producer="assistant", role="assistant",
                    produced_for="alice"),
                msg("My sister lives in Lyon", producer="alice",
                    timestamp="2025-01-02T03:04:05Z"),
            ]), save={"uid2": "results.1.uid"}),
            step("add/unicode", "/memories", at(types=["episodic"],
                 messages=[msg("Ça va? 日本語のテキスト 🐕")])),
            step("add/empty messages", "/memories", at(messages=[])),
            step("add/empty content", "/memories", at(messages=[msg("")])),
            step("add/whitespace content", "/memories", at(messages=[msg("   ")])),
            step("add/missing content", "/memories", at(messages=[{"producer": "x"}])),
            step("add/unknown field in message", "/memories",
                 at(types=["episodic"], messages=[msg("with extra", mood="happy")])),
            step("add/unknown type", "/memories", at(types=["procedural"],
                 messages=[msg("x")])),
            step("add/empty types", "/memories", at(types=[], messages=[msg("types empty")])),
            step("add/unix timestamp", "/memories", at(types=["episodic"],
                 messages=[msg("at an instant", timestamp=1700000000)])),
            step("add/bad timestamp", "/memories", at(types=["episodic"],
                 messages=[msg("when?", timestamp="yesterday-ish")])),
            step("add/free role", "/memories", at(types=["episodic"],
                 messages=[msg("a tool said so", role="tool", producer="search")])),
            step("add/metadata number", "/memories", at(types=["episodic"],
                 messages=[msg("with a number", metadata={"n": 5})])),
            step("add/messages not a list", "/memories", at(messages="hello")),
            step("add/unknown project", "/memories",
                 {"org_id": "{org}", "project_id": "{p}_auto",
                  "messages": [msg("creates?")]}),
            step("add/count", "/projects/episode_count/get", P, values=["count"]),
        ]),
        ("search", [
            step("search/basic", "/memories/search", at(query="dog", top_k=3), loose=True),
            step("search/episodic only", "/memories/search",
                 at(query="beach", top_k=2, types=["episodic"]), loose=True),
            step("search/empty query", "/memories/search", at(query=""), loose=True),
            step("search/whitespace query", "/memories/search", at(query="   "), loose=True),
            step("search/missing query", "/memories/search", P),
            step("search/top_k zero", "/memories/search", at(query="dog", top_k=0)),
            step("search/top_k negative", "/memories/search", at(query="dog", top_k=-1)),
            step("search/expand context negative", "/memories/search",
                 at(query="dog", expand_context=-1, types=["episodic"])),
            step("search/score threshold huge", "/memories/search",
                 at(query="beach", score_threshold=1e9, types=["episodic"]), loose=True),
            step("search/semantic only", "/memories/search",
                 at(query="beach", types=["semantic"]), loose=True),
            step("search/unknown type", "/memories/search",
                 at(query="beach", types=["procedural"])),
            step("search/repeated", "/memories/search",
                 at(query="beach", top_k=2, types=["episodic"]), loose=True),
            step("search/top_k huge", "/memories/search",
                 at(query="dog", top_k=10_000_000)),
            step("search/expand context", "/memories/search",
                 at(query="beach", expand_context=2, types=["episodic"]), loose=True),
            step("search/score threshold", "/memories/search",
                 at(query="beach", score_threshold=0.0, types=["episodic"]), loose=True),
            step("search/filter producer", "/memories/search",
                 at(query="beach", filter="producer_id = 'alice'", types=["episodic"]),
                 loose=True),
            step("search/filter malformed", "/memories/search",
                 at(query="beach", filter="producer_id = ", types=["episodic"])),
            step("search/unicode", "/memories/search", at(query="日本語", types=["episodic"]),
                 loose=True),
            step("search/unknown field", "/memories/search",
                 at(query="dog", colour="red", types=["episodic"]), loose=True),
            step("search/unknown project", "/memories/search",
                 {"org_id": "{org}", "project_id": "{p}_auto2", "query": "x"}, loose=True),
            step("projects/get after search on unknown", "/projects/get",
                 {"org_id": "{org}", "project_id": "{p}_auto2"}),
            step("projects/delete auto-created", "/projects/delete",
                 {"org_id": "{org}", "project_id": "{p}_auto2"}),
        ]),
        ("list", [
            step("list/episodic", "/memories/list", at(type="episodic"), loose=True),
            step("list/default type", "/memories/list", P, loose=True),
            step("list/page", "/memories/list", at(type="episodic", page_size=2, page_num=1),
                 loose=True),
            step("list/page past end", "/memories/list",
                 at(type="episodic", page_size=2, page_num=50), loose=True),
            step("list/page_size zero", "/memories/list", at(type="episodic", page_size=0)),
            step("list/page_size huge", "/memories/list",
                 at(type="episodic", page_size=10_000_000)),
            step("list/page_num negative", "/memories/list",
                 at(type="episodic", page_num=-1)),
            step("list/page_num huge", "/memories/list",
                 at(type="episodic", page_size=5, page_num=1_000_000), loose=True),
            step("list/filter", "/memories/list",
                 at(type="episodic", filter="producer_id = 'alice'"), loose=True),
            step("list/semantic", "/memories/list", at(type="semantic"), loose=True),
            step("list/unknown type", "/memories/list", at(type="procedural")),
            step("list/unknown project", "/memories/list",
                 {"org_id": "{org}", "project_id": "{p}_auto3", "type": "episodic"},
                 loose=True),
        ]),
        ("episodic delete", [
            step("episodic/delete", "/memories/episodic/delete", at(episodic_id="{uid}")),
            step("episodic/delete again", "/memories/episodic/delete",
                 at(episodic_id="{uid}")),
            step("episodic/delete unknown uuid", "/memories/episodic/delete",
                 at(episodic_id="00000000-0000-4000-8000-000000000000")),
            step("episodic/delete not a uuid", "/memories/episodic/delete",
                 at(episodic_id="not-a-uuid")),
            step("episodic/delete no ids", "/memories/episodic/delete", P),
            step("episodic/delete duplicate ids", "/memories/episodic/delete",
                 at(episodic_ids=["00000000-0000-4000-8000-000000000001",
                                  "00000000-0000-4000-8000-000000000001"])),
            step("episodic/delete list", "/memories/episodic/delete",
                 at(episodic_ids=["{uid2}"])),
            step("episodic/count after delete", "/projects/episode_count/get", P,
                 values=["count"]),
            step("episodic/delete foreign", "/memories/episodic/delete",
                 {"org_id": "{org}", "project_id": "{p}_u", "episodic_ids": ["{uid_c}"]}),
            step("episodic/count after foreign delete", "/projects/episode_count/get",
                 {"org_id": "{org}", "project_id": "{p}_c"}, values=["count"]),
        ], [
            # Set-up: an episode in another project.
            step("setup/add foreign", "/memories",
                 {"org_id": "{org}", "project_id": "{p}_c", "types": ["episodic"],
                  "messages": [msg("in the config project")]},
                 save={"uid_c": "results.0.uid"}),
        ]),
        ("semantic", [
            step("semantic/set types", "/memories/semantic/set_type/list", P, loose=True),
            step("semantic/set_type create", "/memories/semantic/set_type",
                 at(metadata_tags=["team"], name="Teams", description="per team"),
                 save={"set_type": "set_type_id"}),
            step("semantic/set_type create empty tags", "/memories/semantic/set_type",
                 at(metadata_tags=[])),
            step("semantic/set_type list", "/memories/semantic/set_type/list", P, loose=True),
            step("semantic/set id project", "/memories/semantic/set_id/get",
                 at(metadata_tags=[]), save={"project_set": "set_id"}),
            step("semantic/set id user", "/memories/semantic/set_id/get",
                 at(metadata_tags=["producer_id"], set_metadata={"producer_id": "alice"})),
            step("semantic/set id org level", "/memories/semantic/set_id/get",
                 at(is_org_level=True, metadata_tags=[])),
            step("semantic/set id tag without value", "/memories/semantic/set_id/get",
                 at(metadata_tags=["team"])),
            step("semantic/set id list", "/memories/semantic/set_id/list", P, loose=True),
            step("semantic/feature", "/memories/semantic/feature",
                 at(set_id="{project_set}", category_name="profile", tag="pets",
                    feature="dog", value="golden retriever"),
                 save={"feature": "feature_id"}),
            step("semantic/feature named by convention", "/memories/semantic/feature",
                 at(set_id="mem_project_set_org_{org}_project_{p}_0_46b9dd2b0ba8__",
                    category_name="profile", tag="home", feature="city", value="Lyon")),
            step("semantic/feature in another org's set id", "/memories/semantic/feature",
                 at(set_id="mem_project_set_org_{org}x_project_zz_0_46b9dd2b0ba8__",
                    category_name="profile", tag="home", feature="city", value="Paris")),
            step("semantic/feature not a set id", "/memories/semantic/feature",
                 at(set_id="whatever", category_name="profile", tag="pets",
                    feature="dog", value="poodle")),
            step("semantic/feature unknown category", "/memories/semantic/feature",
                 at(set_id="{project_set}", category_name="nope", tag="t",
                    feature="f", value="v")),
            step("semantic/feature empty value", "/memories/semantic/feature",
                 at(set_id="{project_set}", category_name="profile", tag="t",
                    feature="f", value="")),
            step("semantic/feature get", "/memories/semantic/feature/get",
                 at(feature_id="{feature}"),
                 values=["feature_name", "value", "tag", "category"]),
            step("semantic/feature get missing", "/memories/semantic/feature/get",
                 at(feature_id="999999")),
            step("semantic/feature get with citations", "/memories/semantic/feature/get",
                 at(feature_id="{feature}", load_citations=True), values=["value"]),
            step("semantic/feature unknown citation", "/memories/semantic/feature",
                 at(set_id="{project_set}", category_name="profile", tag="t",
                    feature="f2", value="v",
                    citations=["00000000-0000-4000-8000-000000000002"])),
            step("semantic/feature update", "/memories/semantic/feature/update",
                 at(feature_id="{feature}", value="labrador")),
            step("semantic/feature get updated", "/memories/semantic/feature/get",
                 at(feature_id="{feature}"), values=["value"]),
            step("semantic/feature in a client-named set", "/memories/semantic/feature",
                 at(set_id="mem_project_set_{p}", category_name="profile", tag="hobby",
                    feature="favourite_sport", value="running"),
                 save={"own_feature": "feature_id"}),
            step("semantic/feature update every field", "/memories/semantic/feature/update",
                 at(feature_id="{own_feature}", category_name="profile", tag="leisure",
                    feature="favorite_activity", value="painting",
                    metadata={"updated": "true"})),
            step("semantic/feature get every field updated", "/memories/semantic/feature/get",
                 at(feature_id="{own_feature}"),
                 values=["category", "tag", "feature_name", "value", "metadata.other"]),
            step("semantic/feature update missing", "/memories/semantic/feature/update",
                 at(feature_id="999999", value="x")),
            step("semantic/feature get foreign", "/memories/semantic/feature/get",
                 {"org_id": "{org}", "project_id": "{p}_u", "feature_id": "{feature}"}),
            step("semantic/feature update foreign", "/memories/semantic/feature/update",
                 {"org_id": "{org}", "project_id": "{p}_u", "feature_id": "{feature}",
                  "value": "stolen"}),
            step("semantic/list", "/memories/list", at(type="semantic"), loose=True),
            step("semantic/search", "/memories/search",
                 at(query="dog", types=["semantic"]), loose=True),
            step("semantic/category add", "/memories/semantic/category",
                 at(set_id="{project_set}", category_name="hobbies",
                    prompt="What the user does for fun"),
                 save={"category": "category_id"}),
            step("semantic/category add duplicate", "/memories/semantic/category",
                 at(set_id="{project_set}", category_name="hobbies", prompt="again")),
            step("semantic/category get", "/memories/semantic/category/get",
                 at(category_id="{category}"), values=["name", "prompt"]),
            step("semantic/category get missing", "/memories/semantic/category/get",
                 at(category_id="999999")),
            step("semantic/category set ids", "/memories/semantic/category/set_ids/get",
                 at(category_id="{category}"), loose=True),
            step("semantic/tag add", "/memories/semantic/category/tag",
                 at(category_id="{category}", tag_name="sport",
                    tag_description="sports played"),
                 save={"tag": "tag_id"}),
            step("semantic/tag delete", "/memories/semantic/category/tag/delete",
                 at(tag_id="{tag}")),
            step("semantic/category disable", "/memories/semantic/category/disable",
                 at(set_id="{project_set}", category_name="profile")),
            step("semantic/category template", "/memories/semantic/category/template",
                 at(set_type_id="{set_type}", category_name="roles",
                    prompt="Who does what")),
            step("semantic/category template list",
                 "/memories/semantic/category/template/list", at(set_type_id="{set_type}"),
                 loose=True),
            step("semantic/category delete", "/memories/semantic/category/delete",
                 at(category_id="{category}")),
            step("semantic/set configure", "/memories/semantic/set/configure",
                 at(set_id="{project_set}")),
            step("semantic/delete", "/memories/semantic/delete", at(semantic_id="{feature}")),
            step("semantic/delete again", "/memories/semantic/delete",
                 at(semantic_id="{feature}")),
            step("semantic/set_type delete", "/memories/semantic/set_type/delete",
                 at(set_type_id="{set_type}")),
            step("semantic/set_type delete missing", "/memories/semantic/set_type/delete",
                 at(set_type_id="999999")),
        ]),
        ("project memory config", [
            step("memconfig/episodic get", "/memory/episodic/config/get", P),
            step("memconfig/episodic set", "/memory/episodic/config",
                 at(long_term_memory_enabled=True)),
            step("memconfig/short term get", "/memory/episodic/short_term/config/get", P),
            step("memconfig/short term set", "/memory/episodic/short_term/config",
                 at(enabled=True)),
            step("memconfig/long term get", "/memory/episodic/long_term/config/get", P),
            step("memconfig/long term set", "/memory/episodic/long_term/config",
                 at(enabled=True)),
            step("memconfig/episodic get missing project", "/memory/episodic/config/get",
                 {"org_id": "{org}", "project_id": "{p}_nothere"}),
        ]),
        ("server config", [
            step("config/get", "/config", method="GET", loose=True),
            step("config/resources", "/config/resources", method="GET", loose=True),
            step("config/episodic", "/config/memory/episodic", method="GET"),
            step("config/long term", "/config/memory/episodic/long_term", method="GET"),
            step("config/short term", "/config/memory/episodic/short_term", method="GET"),
            step("config/semantic", "/config/memory/semantic", method="GET"),
            step("config/update short term", "/config/memory/episodic/short_term",
                 {"message_capacity": 32000}, method="PUT"),
            step("config/update semantic", "/config/memory/semantic",
                 {"ingestion_trigger_messages": 7}, method="PUT"),
            step("config/update episodic", "/config/memory/episodic",
                 {"short_term_memory_enabled": True}, method="PUT"),
            step("config/update long term", "/config/memory/episodic/long_term",
                 {"enabled": True}, method="PUT"),
            step("config/update memory empty", "/config/memory", {}, method="PUT"),
        ]),
        ("cleanup", [
            step("projects/delete", "/projects/delete", P),
            step("projects/delete missing", "/projects/delete",
                 {"org_id": "{org}", "project_id": "{p}_never"}),
            step("projects/count deleted", "/projects/episode_count/get", P),
        ]),
    ]


def substitute(value, env):
    if isinstance(value, str):
        return re.sub(r"\{(\w+)\}", lambda m: str(env.get(m.group(1), m.group(0))), value)
    if isinstance(value, list):
        return [substitute(v, env) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, env) for k, v in value.items()}
    return value


def generic(value, names):
    """A value with the run's own names put back as their {var}."""
    if isinstance(value, str):
        for var, name in sorted(names.items(), key=lambda n: -len(n[1])):
            value = value.replace(name, "{" + var + "}")
    return value


def pick(body, path):
    for part in path.split("."):
        if isinstance(body, list) and part.isdigit() and int(part) < len(body):
            body = body[int(part)]
        elif isinstance(body, dict) and part in body:
            body = body[part]
        else:
            return None
    return body


# Keys whose values are the caller's data (any keys), not the answer's shape.
OPAQUE = {"metadata", "set_metadata", "properties_schema", "feature_metadata"}


def shape(value, loose, key=None):
    """The keys and JSON types of a value. Lists keep their order, or when loose (ranked
    results that depend on the embedder) are ["*", the union of their elements'
    shapes]."""
    if key in OPAQUE and isinstance(value, dict):
        return "object"
    if isinstance(value, dict):
        return {k: shape(v, loose, k) for k, v in sorted(value.items())}
    if isinstance(value, list):
        shapes = [shape(v, loose) for v in value]
        if loose:
            union = None
            for s in shapes:
                union = s if union is None else merge(union, s)
            return ["*"] if union is None else ["*", union]
        return shapes
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if value is None:
        return "null"
    return "string"


def merge(a, b):
    """One shape that both `a` and `b` have (a list's elements)."""
    if a == b or b == "null":
        return a
    if a == "null":
        return b
    if isinstance(a, dict) and isinstance(b, dict):
        # A key some elements lack is optional: "key?".
        a, b = ({k.rstrip("?"): v for k, v in d.items()} for d in (a, b))
        opt = {k for k in set(a) ^ set(b)} | {k for k, v in a.items() if k + "?" in a}
        merged = {}
        for k in sorted(set(a) | set(b)):
            value = merge(a[k], b[k]) if k in a and k in b else a.get(k, b.get(k))
            merged[k + "?" if k in opt else k] = value
        return merged
    if isinstance(a, list) and isinstance(b, list) and a[:1] == b[:1] == ["*"]:
        if len(a) == 1 or len(b) == 1:
            return a if len(a) > 1 else b
        return ["*", merge(a[1], b[1])]
    return a


def mismatches(want, got, path="$"):
    """Where `got` lacks what `want` has, or has more: [path: what]. A null on either side
    matches any type (a field the other side fills), and an empty loose list matches any
    loose list (the results depend on data and ranking)."""
    if want == got or "null" in (want, got):
        return []
    if isinstance(want, dict) and isinstance(got, dict):
        optional = {k.rstrip("?") for k in list(want) + list(got) if k.endswith("?")}
        want = {k.rstrip("?"): v for k, v in want.items()}
        got = {k.rstrip("?"): v for k, v in got.items()}
        out = [f"{path}.{k}: missing" for k in want if k not in got and k not in optional]
        out += [f"{path}.{k}: not in MemMachine" for k in got
                if k not in want and k not in optional]
        for k in want:
            if k in got:
                out += mismatches(want[k], got[k], f"{path}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if want[:1] == got[:1] == ["*"]:
            if len(want) == 1 or len(got) == 1:
                return []
            return mismatches(want[1], got[1], f"{path}[]")
        if len(want) != len(got):
            return [f"{path}: {len(got)} items (MemMachine {len(want)})"]
        out = []
        for i, (w, g) in enumerate(zip(want, got)):
            out += mismatches(w, g, f"{path}[{i}]")
        return out
    return [f"{path}: {json.dumps(got)[:80]} (MemMachine {json.dumps(want)[:80]})"]


def call(base, step, env, headers):
    body = substitute(step["body"], env)
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        base.rstrip("/") + "/api/v2" + step["path"], data=data, method=step["method"],
        headers={**headers, **({"content-type": "application/json"} if data else {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, text = response.status, response.read()
    except urllib.error.HTTPError as err:
        status, text = err.code, err.read()
    try:
        parsed = json.loads(text) if text else None
    except ValueError:
        parsed = text.decode(errors="replace")
    return status, parsed


def observe(base, run_id, headers):
    """Runs every sequence against `base`: {step name: observation}."""
    observed = {}
    env = {"org": f"cmp_{run_id}", "p": f"p_{run_id}", "p2": f"q_{run_id}"}
    names = dict(env)
    for name, steps, *setup in sequences():
        for s in (setup[0] if setup else []) + steps:
            status, body = call(base, s, env, headers)
            for var, path in s.get("save", {}).items():
                found = pick(body, path)
                if found is not None:
                    env[var] = found
            if s["name"].startswith("setup/"):
                continue
            if status >= ERROR_STATUS:
                seen = {"status": status,
                        "shape": {"detail": "*"} if isinstance(body, dict) and "detail" in body
                        else shape(body, True)}
            else:
                seen = {"status": status, "shape": shape(body, s.get("loose", False))}
            values = {v: generic(pick(body, v), names) for v in s.get("values", [])}
            if values:
                seen["values"] = values
            observed[f"{name} :: {s['name']}"] = seen
    return observed


def differences(expected, actual):
    """The step names that differ, with what differs."""
    out = {}
    for key, want in expected.items():
        got = actual.get(key)
        if got is None:
            out[key] = "not run"
            continue
        what = []
        if got["status"] != want["status"]:
            what.append(f"status {got['status']} (MemMachine {want['status']})")
        elif wrong := mismatches(want["shape"], got["shape"]):
            what.append(", ".join(wrong))
        if got.get("values") != want.get("values"):
            what.append(f"values {got.get('values')} (MemMachine {want.get('values')})")
        if what:
            out[key] = "; ".join(what)
    return out


def report(expected, actual):
    diff = differences(expected, actual)
    unexpected = 0
    per_sequence = {}
    for key in expected:
        sequence, step_name = key.split(" :: ", 1)
        row = per_sequence.setdefault(sequence, [0, 0, 0, 0])
        why = reason(key, expected, actual, diff)
        if key not in diff:
            row[0] += 1
        elif why == ADDITIVE:
            row[1] += 1
            print(f"additive    {key}: {diff[key]}")
        elif why:
            row[2] += 1
            print(f"deliberate  {key}: {diff[key]}\n            why: {why}")
        else:
            row[3] += 1
            unexpected += 1
            print(f"DIFFERS     {key}: {diff[key]}")
    print(f"\n{'sequence':<24}{'match':>7}{'additive':>10}{'deliberate':>12}{'differ':>8}")
    totals = [0, 0, 0, 0]
    for sequence, row in per_sequence.items():
        print(f"{sequence:<24}{row[0]:>7}{row[1]:>10}{row[2]:>12}{row[3]:>8}")
        totals = [a + b for a, b in zip(totals, row)]
    print(f"{'all ' + str(len(per_sequence)) + ' sequences':<24}{totals[0]:>7}"
          f"{totals[1]:>10}{totals[2]:>12}{totals[3]:>8}   ({len(expected)} steps)")
    return unexpected


ADDITIVE = "additive"


def reason(key, expected, actual, diff):
    """Why a differing step is allowed: ADDITIVE (only keys MemMachine lacks, which its
    client's models ignore), a deliberate difference's reason, or None."""
    if key not in diff:
        return None
    step_name = key.split(" :: ", 1)[1]
    if step_name in DELIBERATE:
        return DELIBERATE[step_name]
    want, got = expected[key], actual.get(key)
    if got is None:
        return None
    if want["status"] >= 500 and got["status"] < 500:
        return SERVER_FAULT
    if (got["status"] == want["status"] and got.get("values") == want.get("values")
            and all(m.endswith(": not in MemMachine")
                    for m in mismatches(want["shape"], got["shape"]))):
        return ADDITIVE
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["record", "compare", "live"])
    parser.add_argument("--base", required=True, help="the server compared (or recorded)")
    parser.add_argument("--memmachine", help="MemMachine's URL (live)")
    parser.add_argument("--out", help="where record writes")
    parser.add_argument("--expect", help="what compare reads")
    parser.add_argument("--api-key", help="a bearer key for --base")
    args = parser.parse_args()
    headers = {"authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    run_id = format(int(time.time() * 1000) % 10**9, "x")
    if args.mode == "record":
        observed = observe(args.base, run_id, headers)
        with open(args.out, "w") as out:
            json.dump({"memmachine": "0.4.0", "steps": observed}, out, indent=1,
                      sort_keys=True, ensure_ascii=False)
            out.write("\n")
        print(f"recorded {len(observed)} steps to {args.out}")
        return 0
    if args.mode == "live":
        expected = observe(args.memmachine, run_id, {})
    else:
        with open(args.expect) as recorded:
            expected = json.load(recorded)["steps"]
    actual = observe(args.base, run_id, headers)
    return 1 if report(expected, actual) else 0


if __name__ == "__main__":
    sys.exit(main())
