#!/usr/bin/env python3
"""Follows a memmachine project's changes and prints them, one line each.

The cursor of the last change printed is kept in a file, so the follower resumes where it
stopped after it or the server restarts: nothing is missed and nothing printed twice
(unless it is killed between printing a change and saving its cursor). When the server
has pruned its feed past the saved cursor, it re-reads the project with ListMemories,
prints that as a snapshot, and resumes from the oldest change the server still keeps.

    python3 follow_changes.py --addr 127.0.0.1:50051 --org acme --project support \
        --cursor-file support.cursor [--api-key KEY]

Needs `grpcio`, `grpcio-tools` and `grpcio-status` (pip install grpcio grpcio-tools
grpcio-status). Client stubs are
generated at start from the repository's `proto/` directory (--proto-root), so the .proto
files are all it needs from the server's side.

Printed lines:
    following ORG/PROJECT from the head | after CURSOR
    CHANGE CURSOR KIND ID TEXT       KIND is EPISODE_ADDED, FEATURE_UPDATED, ...
    SNAPSHOT UID TEXT                after the feed was pruned past the cursor
    reconnecting in N s: WHY         the server went away; it retries until it is back
    project deleted                  then it exits 0
"""

import argparse
import importlib
import os
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_FILES = [
    "memmachine/v2/common.proto",
    "memmachine/v2/memory_service.proto",
    "memmachine/v2/change_service.proto",
]


def load_stubs(proto_root, out_dir):
    """Generates the Python modules for the protos with grpcio-tools' protoc."""
    import grpc_tools
    from grpc_tools import protoc

    wkt = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    args = ["protoc", f"-I{proto_root}", f"-I{wkt}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}", *PROTO_FILES]
    if protoc.main(args) != 0:
        sys.exit(f"protoc failed on {proto_root}")
    for pkg in ("memmachine", os.path.join("memmachine", "v2")):
        open(os.path.join(out_dir, pkg, "__init__.py"), "a").close()
    sys.path.insert(0, out_dir)
    return {name: importlib.import_module(f"memmachine.v2.{name}") for name in (
        "common_pb2", "memory_service_pb2", "memory_service_pb2_grpc",
        "change_service_pb2", "change_service_pb2_grpc")}


def read_cursor(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def save_cursor(path, cursor):
    """Written aside and renamed, so a crash leaves the old cursor or the new one."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(cursor)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def oldest_cursor(err):
    """The cursor an OUT_OF_RANGE answer says to resume after: its google.rpc.ErrorInfo
    (reason CURSOR_PRUNED, metadata resume_after), read with grpcio-status."""
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    status = rpc_status.from_call(err)
    for detail in status.details if status else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info) and info.reason == "CURSOR_PRUNED":
            return info.metadata.get("resume_after")
    return None


def describe(pb, change):
    kind = pb["change_service_pb2"].ChangeKind.Name(change.kind).removeprefix("CHANGE_KIND_")
    if change.episode_uid:
        ident, text = change.episode_uid, change.episode.content
    elif change.feature_id:
        ident = change.feature_id
        text = f"{change.feature.feature_name}={change.feature.value}" if change.HasField("feature") else ""
    else:
        ident, text = "-", change.summary
    return kind, f"CHANGE {change.cursor} {kind} {ident} {text}".rstrip()


def snapshot(pb, channel, args, metadata):
    """Prints the project's episodes as they are now (the feed no longer reaches back)."""
    stub = pb["memory_service_pb2_grpc"].MemoryServiceStub(channel)
    token = ""
    while True:
        page = stub.ListMemories(pb["memory_service_pb2"].ListMemoriesRequest(
            org_id=args.org, project_id=args.project, page_size=1000, page_token=token),
            metadata=metadata)
        for episode in page.episodes:
            print(f"SNAPSHOT {episode.uid} {episode.content}", flush=True)
        token = page.next_page_token
        if not token:
            return


def follow(pb, args):
    import grpc

    metadata = [("authorization", f"Bearer {args.api_key}")] if args.api_key else []
    # The routing key: a proxy with project affinity sends every call for this project
    # to the replica that holds its index (the server checks it names this project).
    route = "/".join(urllib.parse.quote(part, safe="") for part in (args.org, args.project))
    metadata.append(("x-memmachine-project", route))
    backoff = 0.2
    while True:
        channel = grpc.insecure_channel(args.addr)
        stub = pb["change_service_pb2_grpc"].ChangeServiceStub(channel)
        after = read_cursor(args.cursor_file)
        try:
            stream = stub.WatchChanges(pb["change_service_pb2"].WatchChangesRequest(
                org_id=args.org, project_id=args.project, after=after), metadata=metadata)
            stream.initial_metadata()  # the server has placed the watch
            print(f"following {args.org}/{args.project} "
                  + (f"after {after}" if after else "from the head"), flush=True)
            backoff = 0.2
            for change in stream:
                kind, line = describe(pb, change)
                print(line, flush=True)
                save_cursor(args.cursor_file, change.cursor)
                if kind == "PROJECT_DELETED":
                    print("project deleted", flush=True)
                    return 0
            why = "the server ended the stream"
        except grpc.RpcError as err:
            code = err.code()
            if code == grpc.StatusCode.OUT_OF_RANGE:
                oldest = oldest_cursor(err)
                if oldest is None:
                    sys.exit(f"OUT_OF_RANGE without an oldest cursor: {err.details()}")
                snapshot(pb, channel, args, metadata)
                save_cursor(args.cursor_file, oldest)
                continue
            if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
                            grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED):
                sys.exit(f"{code.name}: {err.details()}")
            why = f"{code.name}: {err.details()}"
        finally:
            channel.close()
        print(f"reconnecting in {backoff:.1f} s: {why}", flush=True)
        time.sleep(backoff)
        backoff = min(backoff * 2, 5.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--addr", default="127.0.0.1:50051")
    parser.add_argument("--org", required=True)
    parser.add_argument("--project", required=True)
    parser.add_argument("--cursor-file", required=True)
    parser.add_argument("--api-key", default=os.environ.get("MEMMACHINE_API_KEY", ""))
    parser.add_argument("--proto-root", default=os.path.join(HERE, "..", "..", "proto"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        pb = load_stubs(os.path.normpath(args.proto_root), out)
        try:
            return follow(pb, args)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
