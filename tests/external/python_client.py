#!/usr/bin/env python3
"""Drives a running memmachine server with the stock Python gRPC client (grpcio).

Stubs are generated at run time from ../../proto with grpc_tools.protoc into a temporary
directory, so this proves that the .proto files alone are enough for a foreign client.

Usage: python_client.py --addr HOST:PORT

Exits 0 when every check passes; otherwise prints what failed and exits 1.
Run by tests/it/external_clients.rs; install the interpreter with scripts/setup-test-tools.sh.
"""

import argparse
import importlib
import os
import sys
import tempfile
import traceback
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
PROTO_FILES = [
    "memmachine/v2/common.proto",
    "memmachine/v2/project_service.proto",
    "memmachine/v2/memory_service.proto",
    "memmachine/v2/semantic_service.proto",
]


class CheckFailed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def generate_stubs(out_dir):
    """Runs protoc (from grpcio-tools) over the repository's protos into out_dir."""
    import grpc_tools
    from grpc_tools import protoc

    # The well-known types (google/protobuf/*.proto) ship inside grpcio-tools.
    wkt = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{wkt}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *PROTO_FILES,
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise CheckFailed(f"grpc_tools.protoc failed with exit code {rc}: {' '.join(args)}")
    # Make the generated tree importable as packages (memmachine.v2.*).
    for pkg in ("memmachine", os.path.join("memmachine", "v2")):
        open(os.path.join(out_dir, pkg, "__init__.py"), "a").close()
    sys.path.insert(0, out_dir)
    modules = {}
    for name in (
        "common_pb2",
        "project_service_pb2",
        "project_service_pb2_grpc",
        "memory_service_pb2",
        "memory_service_pb2_grpc",
        "semantic_service_pb2",
        "semantic_service_pb2_grpc",
    ):
        modules[name] = importlib.import_module(f"memmachine.v2.{name}")
    return modules


def expect_rpc_error(call, code, what):
    """Calls `call()`, expects it to fail with `code`; returns the grpc.RpcError."""
    import grpc

    try:
        call()
    except grpc.RpcError as e:
        check(
            e.code() == code,
            f"{what}: expected {code}, got {e.code()} ({e.details()!r})",
        )
        return e
    raise CheckFailed(f"{what}: expected {code}, but the call succeeded")


def bad_request_violations(err, what):
    """Decodes grpc-status-details-bin from the trailers as google.rpc.Status and returns
    the field violations of its google.rpc.BadRequest detail."""
    from google.rpc import error_details_pb2, status_pb2

    raw = None
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            raw = value
    check(raw is not None, f"{what}: no grpc-status-details-bin in the trailing metadata")
    status = status_pb2.Status()
    status.ParseFromString(raw)
    check(
        status.code == err.code().value[0],
        f"{what}: google.rpc.Status code {status.code} differs from the gRPC status {err.code()}",
    )
    violations = []
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations.extend(bad.field_violations)
    check(violations, f"{what}: google.rpc.Status carries no BadRequest field violation: {status}")
    for v in violations:
        check(v.field and v.description, f"{what}: incomplete field violation {v}")
    return violations


def run(addr, stubs_dir):
    import grpc

    m = generate_stubs(stubs_dir)
    common = m["common_pb2"]
    ps = m["project_service_pb2"]
    ms = m["memory_service_pb2"]
    print(f"stubs generated from {PROTO_ROOT} into {stubs_dir}")

    channel = grpc.insecure_channel(addr)
    grpc.channel_ready_future(channel).result(timeout=30)
    projects = m["project_service_pb2_grpc"].ProjectServiceStub(channel)
    memory = m["memory_service_pb2_grpc"].MemoryServiceStub(channel)
    semantic = m["semantic_service_pb2_grpc"].SemanticServiceStub(channel)
    ss = m["semantic_service_pb2"]
    timeout = 30

    # Empty ids mean "universal"; universal/universal always exists.
    universal = projects.GetProject(ps.GetProjectRequest(), timeout=timeout).project
    check(
        (universal.org_id, universal.project_id) == ("universal", "universal"),
        f"GetProject() returned {universal.org_id}/{universal.project_id}, expected universal/universal",
    )

    org = "py-org"
    project = f"py-{uuid.uuid4().hex[:12]}"

    # --- CreateProject / GetProject ---------------------------------------------------
    created = projects.CreateProject(
        ps.CreateProjectRequest(org_id=org, project_id=project, description="python client"),
        timeout=timeout,
    ).project
    check(
        (created.org_id, created.project_id) == (org, project),
        f"CreateProject returned {created.org_id}/{created.project_id}",
    )
    check(created.description == "python client", f"description {created.description!r}")
    got = projects.GetProject(ps.GetProjectRequest(org_id=org, project_id=project), timeout=timeout)
    check(got.project.project_id == project, f"GetProject returned {got.project}")
    print(f"created project {org}/{project}")

    # --- AddMemories ------------------------------------------------------------------
    texts = [
        ("alice", "user", "I went hiking in the Swiss mountains last weekend", "travel"),
        ("bob", "assistant", "My favourite dish is spicy ramen with a soft boiled egg", "food"),
        ("alice", "user", "The quarterly budget review meeting moved to Tuesday", "work"),
    ]
    messages = [
        common.MemoryMessage(
            content=content,
            producer=producer,
            produced_for="agent",
            role=role,
            metadata={"topic": topic},
        )
        for producer, role, content, topic in texts
    ]
    added = memory.AddMemories(
        ms.AddMemoriesRequest(
            org_id=org,
            project_id=project,
            types=[common.MEMORY_TYPE_EPISODIC],
            messages=messages,
        ),
        timeout=timeout,
    )
    uids = [r.uid for r in added.results]
    check(len(uids) == 3, f"AddMemories returned {len(uids)} results, expected 3")
    check(all(uids) and len(set(uids)) == 3, f"AddMemories uids not unique and non-empty: {uids}")
    print(f"added 3 messages: {uids}")

    # --- SearchMemories ---------------------------------------------------------------
    found = memory.SearchMemories(
        ms.SearchMemoriesRequest(
            org_id=org,
            project_id=project,
            query="spicy ramen",
            top_k=5,
            types=[common.MEMORY_TYPE_EPISODIC],
        ),
        timeout=timeout,
    )
    ltm = list(found.episodic_memory.long_term_memory)
    check(ltm, "SearchMemories('spicy ramen') returned no long-term hits")
    top = ltm[0].episode
    check(
        top.uid == uids[1],
        f"SearchMemories('spicy ramen') ranked {top.uid} ({top.content!r}) first, expected {uids[1]}",
    )
    check(top.content == texts[1][2], f"top hit content {top.content!r}")
    check(top.producer_id == "bob", f"top hit producer_id {top.producer_id!r}")
    check(top.producer_role == "assistant", f"top hit producer_role {top.producer_role!r}")
    check(top.produced_for_id == "agent", f"top hit produced_for_id {top.produced_for_id!r}")
    check(dict(top.metadata) == {"topic": "food"}, f"top hit metadata {dict(top.metadata)}")
    check(top.session_key == f"{org}/{project}", f"top hit session_key {top.session_key!r}")
    check(ltm[0].score > 0, f"top hit score {ltm[0].score}")
    scores = [s.score for s in ltm]
    check(scores == sorted(scores, reverse=True), f"scores not in descending order: {scores}")
    stm = [e.uid for e in found.episodic_memory.short_term_memory]
    check(stm == uids, f"short_term_memory {stm}, expected the 3 episodes oldest first {uids}")
    print(f"search ranked the ramen message first (score {ltm[0].score:.4f}, {len(ltm)} hits)")

    # A filtered search: only alice's messages may come back.
    filtered = memory.SearchMemories(
        ms.SearchMemoriesRequest(
            org_id=org,
            project_id=project,
            query="hiking mountains ramen budget",
            top_k=10,
            filter="producer_id = 'alice' AND m.topic IN ('travel', 'work')",
        ),
        timeout=timeout,
    )
    hits = {s.episode.uid for s in filtered.episodic_memory.long_term_memory}
    check(
        hits and hits <= {uids[0], uids[2]},
        f"filtered search returned {hits}, expected a subset of {{{uids[0]}, {uids[2]}}}",
    )
    print(f"filtered search returned only alice's messages ({len(hits)})")

    # --- ListMemories (paged) ----------------------------------------------------------
    listed = []
    token = ""
    pages = 0
    while True:
        page = memory.ListMemories(
            ms.ListMemoriesRequest(org_id=org, project_id=project, page_size=2, page_token=token),
            timeout=timeout,
        )
        pages += 1
        check(len(page.episodes) <= 2, f"ListMemories page of {len(page.episodes)} > page_size 2")
        listed.extend(page.episodes)
        token = page.next_page_token
        if not token:
            break
        check(pages < 10, "ListMemories keeps returning a next_page_token")
    check(len(listed) == 3, f"ListMemories returned {len(listed)} episodes, expected 3")
    seqs = [e.sequence_num for e in listed]
    check(seqs == sorted(seqs) and len(set(seqs)) == 3, f"sequence_nums not increasing: {seqs}")
    check([e.uid for e in listed] == uids, f"ListMemories order {[e.uid for e in listed]} != {uids}")
    check(all(e.created_at.seconds > 0 for e in listed), "an episode has no created_at")
    print(f"listed 3 episodes over {pages} pages in sequence_num order {seqs}")

    # --- DeleteEpisodicMemories / GetEpisodeCount --------------------------------------
    deleted = memory.DeleteEpisodicMemories(
        ms.DeleteEpisodicMemoriesRequest(org_id=org, project_id=project, episode_ids=[uids[0]]),
        timeout=timeout,
    )
    check(deleted.deleted_count == 1, f"deleted_count {deleted.deleted_count}, expected 1")
    count = projects.GetEpisodeCount(
        ps.GetEpisodeCountRequest(org_id=org, project_id=project), timeout=timeout
    ).count
    check(count == 2, f"GetEpisodeCount {count} after deleting one of 3, expected 2")
    remaining = memory.ListMemories(
        ms.ListMemoriesRequest(org_id=org, project_id=project), timeout=timeout
    )
    check(
        [e.uid for e in remaining.episodes] == uids[1:],
        f"after the delete ListMemories has {[e.uid for e in remaining.episodes]}",
    )
    print("deleted one episode; count is 2")

    # --- SemanticService: a manual feature (no language model needed) -----------------
    set_id = semantic.GetSetId(
        ss.GetSetIdRequest(org_id=org, project_id=project), timeout=timeout
    ).set_id
    check(set_id.startswith("mem_project_set_"), f"GetSetId returned {set_id!r}")
    category_id = semantic.AddCategory(
        ss.AddCategoryRequest(
            org_id=org,
            project_id=project,
            set_id=set_id,
            category_name="tastes",
            prompt="What the user likes to eat",
            description="food preferences",
        ),
        timeout=timeout,
    ).category_id
    check(category_id, "AddCategory returned an empty category_id")
    from google.protobuf import struct_pb2

    feature_metadata = struct_pb2.Struct()
    feature_metadata.update({"source": "python"})
    feature_id = semantic.AddFeature(
        ss.AddFeatureRequest(
            org_id=org,
            project_id=project,
            set_id=set_id,
            category_name="tastes",
            tag="food",
            feature="favourite dish",
            value="spicy ramen",
            feature_metadata=feature_metadata,
            citations=[uids[1]],
        ),
        timeout=timeout,
    ).feature_id
    check(feature_id, "AddFeature returned an empty feature_id")
    got = semantic.GetFeature(
        ss.GetFeatureRequest(
            org_id=org, project_id=project, feature_id=feature_id, load_citations=True
        ),
        timeout=timeout,
    ).feature
    want = {
        "id": feature_id,
        "set_id": set_id,
        "category": "tastes",
        "category_id": category_id,
        "tag": "food",
        "feature_name": "favourite dish",
        "value": "spicy ramen",
    }
    have = {k: getattr(got, k) for k in want}
    check(have == want, f"GetFeature returned {have}, expected {want}")
    check(list(got.citations) == [uids[1]], f"GetFeature citations {list(got.citations)}")
    check(dict(got.metadata) == {"source": "python"}, f"GetFeature metadata {dict(got.metadata)}")
    check(
        got.created_at.seconds > 0 and got.updated_at.seconds > 0,
        f"GetFeature timestamps {got.created_at} / {got.updated_at}",
    )
    bare = semantic.GetFeature(
        ss.GetFeatureRequest(org_id=org, project_id=project, feature_id=feature_id),
        timeout=timeout,
    ).feature
    check(
        bare.id == feature_id and not bare.citations,
        f"GetFeature without load_citations returned citations {list(bare.citations)}",
    )
    missing_feature = str(uuid.uuid4())
    expect_rpc_error(
        lambda: semantic.GetFeature(
            ss.GetFeatureRequest(org_id=org, project_id=project, feature_id=missing_feature),
            timeout=timeout,
        ),
        grpc.StatusCode.NOT_FOUND,
        f"GetFeature of unknown feature {missing_feature}",
    )
    print(f"semantic feature {feature_id} added to {set_id} and read back; unknown id NOT_FOUND")

    # --- INVALID_ARGUMENT with google.rpc.BadRequest -----------------------------------
    err = expect_rpc_error(
        lambda: projects.CreateProject(
            ps.CreateProjectRequest(org_id=org, project_id="bad id!"), timeout=timeout
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "CreateProject(project_id='bad id!')",
    )
    violations = bad_request_violations(err, "CreateProject(project_id='bad id!')")
    check(
        any(v.field == "project_id" for v in violations),
        f"no violation names project_id: {[(v.field, v.description) for v in violations]}",
    )
    print(f"bad project id rejected: {[(v.field, v.description) for v in violations]}")

    err = expect_rpc_error(
        lambda: memory.SearchMemories(
            ms.SearchMemoriesRequest(
                org_id=org, project_id=project, query="ramen", filter="producer_id = "
            ),
            timeout=timeout,
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "SearchMemories(filter='producer_id = ')",
    )
    violations = bad_request_violations(err, "SearchMemories(filter='producer_id = ')")
    check(
        any(v.field == "filter" for v in violations),
        f"no violation names filter: {[(v.field, v.description) for v in violations]}",
    )
    print(f"malformed filter rejected: {[(v.field, v.description) for v in violations]}")

    # --- NOT_FOUND for an unknown project ----------------------------------------------
    unknown = f"missing-{uuid.uuid4().hex[:12]}"
    expect_rpc_error(
        lambda: memory.AddMemories(
            ms.AddMemoriesRequest(
                org_id=org,
                project_id=unknown,
                messages=[common.MemoryMessage(content="nobody home")],
            ),
            timeout=timeout,
        ),
        grpc.StatusCode.NOT_FOUND,
        f"AddMemories to unknown project {unknown}",
    )
    expect_rpc_error(
        lambda: projects.GetProject(
            ps.GetProjectRequest(org_id=org, project_id=unknown), timeout=timeout
        ),
        grpc.StatusCode.NOT_FOUND,
        f"GetProject of unknown project {unknown}",
    )
    print("unknown project answers NOT_FOUND")

    # --- ImportMemories (client streaming) ----------------------------------------------
    def batches():
        for b in range(5):
            named = b == 0
            yield ms.ImportMemoriesRequest(
                org_id=org if named else "",
                project_id=project if named else "",
                messages=[
                    common.MemoryMessage(content=f"imported {b}-{i}", producer="py")
                    for i in range(20)
                ],
            )
        # An empty content stops the import here; the batch after it is never stored.
        yield ms.ImportMemoriesRequest(messages=[common.MemoryMessage(content="")])
        yield ms.ImportMemoriesRequest(messages=[common.MemoryMessage(content="never")])

    imported = memory.ImportMemories(batches(), timeout=timeout)
    check(
        (imported.batches, imported.messages, imported.duplicates) == (5, 100, 0),
        f"ImportMemories counts {imported}",
    )
    check(
        imported.HasField("first_error")
        and imported.first_error.batch == 5
        and imported.first_error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0],
        f"ImportMemories first_error {imported.first_error}",
    )
    print(f"imported 100 messages in 5 batches; batch 5 refused: {imported.first_error.message}")

    # --- DeleteProject ----------------------------------------------------------------
    projects.DeleteProject(ps.DeleteProjectRequest(org_id=org, project_id=project), timeout=timeout)
    expect_rpc_error(
        lambda: projects.GetProject(
            ps.GetProjectRequest(org_id=org, project_id=project), timeout=timeout
        ),
        grpc.StatusCode.NOT_FOUND,
        "GetProject after DeleteProject",
    )
    print(f"deleted project {org}/{project}")
    channel.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", help="HOST:PORT of a running memmachine")
    parser.add_argument(
        "--stubs-only",
        action="store_true",
        help="only generate and import the stubs (checks the protos; needs no server)",
    )
    args = parser.parse_args()
    if not args.addr and not args.stubs_only:
        parser.error("--addr is required")
    try:
        with tempfile.TemporaryDirectory(prefix="memmachine-pystubs-") as stubs_dir:
            if args.stubs_only:
                generate_stubs(stubs_dir)
                print(f"OK: stubs generated from {PROTO_ROOT} and imported")
                return 0
            run(args.addr, stubs_dir)
    except ImportError as e:
        print(
            f"FAIL: {e}; run scripts/setup-test-tools.sh for a Python with grpcio, "
            "grpcio-tools and grpcio-status (.tools/venv)",
            file=sys.stderr,
        )
        return 1
    except CheckFailed as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    except Exception:  # an unexpected RPC error or a broken environment
        print("FAIL: unexpected error", file=sys.stderr)
        traceback.print_exc()
        return 1
    print("OK: python grpcio client checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
