#!/usr/bin/env python3
"""End-to-end latency of MemMachine's own Python client (memmachine-client) against a
MemMachine v2 REST server: this crate's gateway (/api/v2) or MemMachine 0.4's server.

Uses only the client's public API (MemMachineClient -> Project -> Memory): creates a
project, adds N messages one `memory.add` call each (the client has no batch add), runs
M `memory.search` calls, deletes the project, and prints p50/p90/p99/max of each call as
seen by the caller, as a table and as JSON.

Messages are LoCoMo turns ("speaker: text", conversations in file order) and queries are
LoCoMo questions of categories 1-4 of the conversations used; without the data file
(--data), synthetic sentences and queries.

    python rest_client_latency.py --base-url http://127.0.0.1:8080 \
        [--messages 500] [--searches 200] [--limit 10] [--json-out FILE]

A bench, not a test: needs `pip install memmachine-client==0.4.0`; not run by CI.
"""

import argparse
import json
import math
import os
import platform
import random
import statistics
import sys
import time
import uuid
from datetime import datetime, timezone

DEFAULT_DATA = "/work/shared/data/locomo10.json"


def locomo_workload(path, n_messages, n_queries):
    """The first n_messages LoCoMo turns and the questions of their conversations."""
    with open(path, encoding="utf-8") as f:
        samples = json.load(f)
    messages, queries = [], []
    for sample in samples:
        conversation = sample["conversation"]
        sessions = sorted(
            (k for k in conversation if k.startswith("session_") and k.count("_") == 1),
            key=lambda k: int(k.split("_")[1]),
        )
        for key in sessions:
            when = parse_locomo_time(conversation.get(f"{key}_date_time", ""))
            for turn in conversation[key]:
                if len(messages) < n_messages:
                    messages.append((turn["speaker"], f"{turn['speaker']}: {turn['text']}", when))
        queries.extend(q["question"] for q in sample["qa"] if q.get("category") in (1, 2, 3, 4))
        if len(messages) >= n_messages:
            break
    return messages, cycle_to(queries, n_queries)


def parse_locomo_time(text):
    try:
        # Naive times are refused by MemMachine 0.4 (500): LoCoMo's are taken as UTC.
        return datetime.strptime(text, "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def synthetic_workload(n_messages, n_queries, seed=7):
    rng = random.Random(seed)
    people = ["alice", "bob", "carol", "dave"]
    things = ["ramen", "hiking", "the budget", "a lighthouse", "penguins", "sourdough",
              "the train", "a concert", "the garden", "chess", "a novel", "the marathon"]
    verbs = ["talked about", "planned", "worried about", "loved", "wrote about", "asked about"]
    messages = []
    for i in range(n_messages):
        who = rng.choice(people)
        text = f"{who}: on day {i} I {rng.choice(verbs)} {rng.choice(things)} with {rng.choice(people)}"
        messages.append((who, text, None))
    queries = [f"what did {rng.choice(people)} say about {rng.choice(things)}" for _ in range(n_queries)]
    return messages, queries


def cycle_to(items, n):
    if not items:
        return []
    return [items[i % len(items)] for i in range(n)]


def percentile(sorted_values, p):
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), math.ceil(p / 100 * len(sorted_values))))
    return sorted_values[rank - 1]


def summarize(seconds):
    ms = sorted(s * 1000 for s in seconds)
    return {
        "count": len(ms),
        "p50_ms": percentile(ms, 50),
        "p90_ms": percentile(ms, 90),
        "p99_ms": percentile(ms, 99),
        "max_ms": ms[-1] if ms else float("nan"),
        "mean_ms": statistics.fmean(ms) if ms else float("nan"),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8080")
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=5, help="searches run before timing")
    parser.add_argument("--limit", type=int, default=10, help="memory.search limit (top_k)")
    parser.add_argument("--data", default=DEFAULT_DATA, help="LoCoMo JSON (locomo10.json)")
    parser.add_argument("--synthetic", action="store_true", help="ignore --data")
    parser.add_argument("--org", default="bench-org")
    parser.add_argument("--project", default=None, help="default: a fresh bench-<hex>")
    parser.add_argument("--api-key", default=os.environ.get("MEMMACHINE_API_KEY"))
    parser.add_argument("--label", default="", help="a name for the server in the JSON")
    parser.add_argument("--keep", action="store_true", help="leave the project in place")
    parser.add_argument("--timeout", type=int, default=120, help="per-request seconds")
    parser.add_argument("--json-out", help="also write the JSON result here")
    parser.add_argument("--settle", type=float, default=0.0,
                        help="seconds to wait between adding and searching (a server that "
                             "embeds in the background finishes first)")
    args = parser.parse_args()

    from memmachine_client import MemMachineClient
    from memmachine_common.api import MemoryType

    if not args.synthetic and os.path.isfile(args.data):
        messages, queries = locomo_workload(args.data, args.messages, args.searches + args.warmup)
        workload = f"locomo:{os.path.basename(args.data)}"
    else:
        messages, queries = synthetic_workload(args.messages, args.searches + args.warmup)
        workload = "synthetic"
    project_id = args.project or f"bench-{uuid.uuid4().hex[:10]}"

    client = MemMachineClient(base_url=args.base_url, api_key=args.api_key,
                              timeout=args.timeout, max_retries=0)
    client.health_check()
    project = client.create_project(org_id=args.org, project_id=project_id,
                                    description="rest_client_latency bench")
    memory = project.memory()
    print(f"project {args.org}/{project_id} on {args.base_url}; workload {workload}: "
          f"{len(messages)} messages, {args.searches} searches (+{args.warmup} warm-up)",
          file=sys.stderr)

    add_times = []
    started = time.perf_counter()
    for producer, content, when in messages:
        t0 = time.perf_counter()
        memory.add(content, role="user", producer=producer, timestamp=when,
                   memory_types=[MemoryType.Episodic])
        add_times.append(time.perf_counter() - t0)
    add_wall = time.perf_counter() - started
    count = project.get_episode_count()
    print(f"added {len(messages)} in {add_wall:.1f}s; episode count {count}", file=sys.stderr)

    if args.settle > 0:
        time.sleep(args.settle)
    search_times, hits = [], []
    for i, query in enumerate(queries):
        t0 = time.perf_counter()
        result = memory.search(query, limit=args.limit)
        elapsed = time.perf_counter() - t0
        if i < args.warmup:
            continue
        search_times.append(elapsed)
        episodic = result.content.episodic_memory
        hits.append(len(episodic.long_term_memory.episodes) if episodic else 0)

    if not args.keep:
        project.delete()
    client.close()

    report = {
        "label": args.label,
        "base_url": args.base_url,
        "client": "memmachine-client " + client_version(),
        "workload": workload,
        "messages": len(messages),
        "episode_count_after_add": count,
        "searches": len(search_times),
        "limit": args.limit,
        # The first add builds the project's memory (embedder, indexes) on some servers;
        # it is reported on its own and left out of the distribution.
        "add_first_call_ms": add_times[0] * 1000 if add_times else None,
        "add_per_call_one_message": summarize(add_times[1:]),
        "add_wall_s": add_wall,
        "add_messages_per_s": len(messages) / add_wall if add_wall else None,
        "search": summarize(search_times),
        "search_mean_long_term_hits": statistics.fmean(hits) if hits else 0,
        "searches_without_hits": sum(1 for h in hits if h == 0),
        "host": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "finished_at": datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    print_table(report)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    # A run whose searches found nothing measured an empty index, not the server.
    if count != len(messages) or report["searches_without_hits"] == len(hits):
        print("WARNING: the episode count or the search hits look wrong", file=sys.stderr)
        return 1
    return 0


def client_version():
    try:
        from importlib.metadata import version

        return version("memmachine-client")
    except Exception:
        return "unknown"


def print_table(report):
    rows = [("memory.add (1 message)", report["add_per_call_one_message"]),
            ("memory.search", report["search"])]
    print(f"{'call':<24}{'n':>6}{'p50 ms':>10}{'p90 ms':>10}{'p99 ms':>10}{'max ms':>10}")
    for name, s in rows:
        print(f"{name:<24}{s['count']:>6}{s['p50_ms']:>10.1f}{s['p90_ms']:>10.1f}"
              f"{s['p99_ms']:>10.1f}{s['max_ms']:>10.1f}")
    print(f"first add (left out above) {report['add_first_call_ms']:.1f} ms; "
          f"add throughput {report['add_messages_per_s']:.1f} messages/s; "
          f"mean long-term hits per search {report['search_mean_long_term_hits']:.1f}")


if __name__ == "__main__":
    sys.exit(main())
