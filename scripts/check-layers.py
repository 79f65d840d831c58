#!/usr/bin/env python3
"""The layering rules the compiler cannot see, over `crate::` paths in each crate:
no two top-level modules of a crate import each other (directly or in a circle), and
the transports (grpc, rest, mcp, cli, admission) never name a storage backend.
Crate boundaries (memmachine-core, -domain, -store-*, -proto, -testkit, -bench) are enforced by Cargo itself."""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRATES = {
    "memmachine": ROOT / "src",
    "memmachine-core": ROOT / "crates/core/src",
    "memmachine-domain": ROOT / "crates/domain/src",
    "memmachine-store-sqlite": ROOT / "crates/store-sqlite/src",
    "memmachine-store-postgres": ROOT / "crates/store-postgres/src",
    "memmachine-proto": ROOT / "crates/proto/src",
    "memmachine-testkit": ROOT / "crates/testkit/src",
    "memmachine-bench": ROOT / "crates/bench/src",
}
TRANSPORTS = ("grpc", "rest", "mcp", "cli", "admission")
BACKEND = re.compile(r"\b(store::(sqlite|postgres)|memmachine_store_(sqlite|postgres))\b")
PATH = re.compile(r"\bcrate::([a-z_0-9]+)")
# Files that are not modules of the library (binaries, the crate root itself).
SKIP = {"lib.rs", "main.rs", "bin"}


def top_module(src: pathlib.Path, file: pathlib.Path) -> str:
    first = file.relative_to(src).parts[0]
    return first[:-3] if first.endswith(".rs") else first


def code(file: pathlib.Path) -> str:
    """The file without comments and without its `#[cfg(test)]` module (tests may
    reach anywhere)."""
    text = file.read_text()
    text = text.split("#[cfg(test)]\nmod tests", 1)[0]
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def cycles(graph: dict) -> list:
    found, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return found


def main() -> int:
    problems = []
    for crate, src in CRATES.items():
        graph = {}
        for file in sorted(src.rglob("*.rs")):
            if file.relative_to(src).parts[0] in SKIP:
                continue
            here = top_module(src, file)
            text = code(file)
            for target in PATH.findall(text):
                local = (src / f"{target}.rs").exists() or (src / target).is_dir()
                if local and target != here:
                    graph.setdefault(here, set()).add(target)
            if crate == "memmachine" and here in TRANSPORTS and BACKEND.search(text):
                problems.append(f"{file.relative_to(ROOT)}: a transport names a storage backend")
        for cycle in cycles(graph):
            problems.append(f"{crate}: modules import each other: {' -> '.join(cycle)}")
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print("layers: no module circles; transports name no backend")
    return 0


if __name__ == "__main__":
    sys.exit(main())
