#!/usr/bin/env python3
"""The layering rules the compiler cannot see, over the `crate::` and `super::` paths in
each crate: no two modules with the same parent (the crate's top-level modules, or the
files of one folder such as `store/`) import each other (directly or in a circle), and
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
# `crate::a::b`, `super::super::a`, and the first names of a group (`crate::{a, b::c}`).
PATH = re.compile(r"\b((?:crate|super)(?:::super)*)::((?:[a-z_0-9]+::)*)(\{[^;]*?\}|[a-z_0-9]+)")
# Files that are not modules of the library (binaries, the crate root itself).
SKIP = {"lib.rs", "main.rs", "bin"}


def module_of(src: pathlib.Path, file: pathlib.Path) -> tuple:
    """`src/a/b.rs` is `(a, b)`, `src/a/mod.rs` is `(a,)`."""
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] == "mod":
        parts.pop()
    return tuple(parts)


def first_names(group: str) -> list:
    """The first name of each item of `{a, b::c, d::{e, f}}`."""
    names, depth, item = [], 0, ""
    for ch in group[1:-1] + ",":
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            name = item.strip().split("::", 1)[0].split(" ", 1)[0]
            if re.fullmatch(r"[a-z_0-9]+", name):
                names.append(name)
            item = ""
            continue
        item += ch
    return names


def references(module: tuple, text: str) -> list:
    """The absolute paths (as tuples of names) that `module`'s text names."""
    out = []
    for base, middle, last in PATH.findall(text):
        if base.startswith("crate"):
            start = ()
        else:
            # `super` of `a::b` is `a`; each further `super` one more up.
            ups = base.count("super")
            if ups > len(module):
                continue
            start = module[: len(module) - ups]
        middle = tuple(p for p in middle.split("::") if p)
        lasts = first_names(last) if last.startswith("{") else [last]
        out.extend(start + middle + (name,) for name in lasts)
    return out


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
        files = [
            f for f in sorted(src.rglob("*.rs")) if f.relative_to(src).parts[0] not in SKIP
        ]
        modules = {module_of(src, f) for f in files}
        # Per parent module, the edges between its children.
        graphs = {}
        for file in files:
            here = module_of(src, file)
            text = code(file)
            for path in references(here, text):
                # The longest prefix that is a module of the crate.
                while path and path not in modules:
                    path = path[:-1]
                common = 0
                while common < min(len(here), len(path)) and here[common] == path[common]:
                    common += 1
                if common < len(here) and common < len(path):
                    parent = here[:common]
                    graphs.setdefault(parent, {}).setdefault(here[common], set()).add(
                        path[common]
                    )
            top = here[0]
            if crate == "memmachine" and top in TRANSPORTS and BACKEND.search(text):
                problems.append(f"{file.relative_to(ROOT)}: a transport names a storage backend")
        for parent, graph in sorted(graphs.items()):
            inside = "".join(f"{p}::" for p in parent)
            for cycle in cycles(graph):
                names = " -> ".join(inside + c for c in cycle)
                problems.append(f"{crate}: modules import each other: {names}")
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print("layers: no module circles; transports name no backend")
    return 0


if __name__ == "__main__":
    sys.exit(main())
