"""A stock MCP client (the `mcp` package from PyPI) against `memmachine mcp` (stdio) and
`/mcp` on the REST listener (Streamable HTTP), driven by tests/it/mcp.rs.

Each run needs the projects ORG/notes and ORG/other to exist. It lists the tools, calls
each in ORG/notes as user alice (add, search finds it, list, profile, delete), then
checks the scope: an episode of ORG/other cannot be deleted from ORG/notes and is still
listed in its own project afterwards. With --key and --other-org (HTTP with --auth), a
URL for another org is refused and the key's own org works.

Exits 0 after printing "OK: mcp client checks passed"; any failed check raises.
"""

import argparse
import asyncio
import json
import sys

try:
    import httpx2 as httpx
    from mcp import Client, MCPError, StdioServerParameters
    from mcp.shared._httpx_utils import create_mcp_http_client
    from mcp.client.streamable_http import streamable_http_client
except ImportError as err:  # the test reports the setup hint
    sys.exit(f"the mcp package is missing ({err}): run `bash scripts/setup-test-tools.sh`")

TOOLS = {"add_memory", "search_memory", "list_memories", "delete_memory", "get_user_profile"}


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def text_of(result):
    return "".join(getattr(c, "text", "") for c in result.content)


def payload(result, what):
    check(not result.is_error, f"{what} failed: {text_of(result)}")
    return json.loads(text_of(result))


def refusal(result, what):
    check(result.is_error, f"{what} should have been refused, got {text_of(result)}")
    return text_of(result)


class Target:
    """How to open a session for a scope: a stdio command line or an HTTP base URL."""

    def __init__(self, args):
        self.args = args

    def client(self, org, project, user, key=None, mode="auto"):
        a = self.args
        if a.transport == "stdio":
            params = StdioServerParameters(
                command=a.command,
                args=["mcp", *a.command_args, "--org", org, "--project", project, "--user", user],
                env={"RUST_LOG": "warn", "NO_COLOR": "1"},
            )
            return Client(params, mode=mode, read_timeout_seconds=60)
        url = f"{a.url}/mcp?org={org}&project={project}&user={user}"
        headers = {"authorization": f"Bearer {key}"} if key else None
        http = create_mcp_http_client(headers=headers)
        return Client(streamable_http_client(url, http_client=http), mode=mode, read_timeout_seconds=60)


async def in_scope(target, org, key, mode):
    async with target.client(org, "notes", "alice", key, mode) as c:
        tools = await c.list_tools()
        names = {t.name for t in tools.tools}
        check(TOOLS <= names, f"tools listed: {sorted(names)}")
        for t in tools.tools:
            check(t.input_schema.get("type") == "object", f"{t.name} has an object schema")
            props = t.input_schema.get("properties", {})
            check("org" not in props and "project" not in props, f"{t.name} takes no scope")
        add = await c.call_tool(
            "add_memory", {"content": "Alice's favourite food is sushi", "metadata": {"topic": "food"}}
        )
        ids = payload(add, "add_memory")["ids"]
        check(len(ids) == 1, f"one episode added: {ids}")
        found = payload(await c.call_tool("search_memory", {"query": "favourite food sushi"}), "search")
        hits = [e for e in found["episodes"] + found["recent_episodes"] if e["id"] == ids[0]]
        check(hits, f"search finds the new episode: {found}")
        check(hits[0]["producer"] == "alice", f"the producer is the scoped user: {hits[0]}")
        check(isinstance(found["features"], list), "semantic features are part of the answer")
        only = payload(await c.call_tool("search_memory", {"query": "sushi", "types": ["semantic"]}), "semantic")
        check(only["episodes"] == [] and only["features"] == [], f"a semantic-only search: {only}")
        no_model = refusal(await c.call_tool("add_memory", {"content": "x", "types": ["semantic"]}), "semantic add")
        check("--llm-base-url" in no_model, f"semantic memory needs a model: {no_model}")
        listed = payload(await c.call_tool("list_memories", {}), "list_memories")
        check(ids[0] in [e["id"] for e in listed["episodes"]], f"listed: {listed}")
        semantic = payload(await c.call_tool("list_memories", {"memory_type": "semantic"}), "list semantic")
        check(semantic["features"] == [], f"no features without a language model: {semantic}")
        profile = payload(await c.call_tool("get_user_profile", {}), "get_user_profile")
        check(profile["user"] == "alice" and profile["set_id"].startswith("mem_user_set_"), f"{profile}")
        check(profile["features"] == [], f"an empty profile: {profile}")
        bad = refusal(await c.call_tool("list_memories", {"filter": "m.topic = "}), "a malformed filter")
        check("filter" in bad, f"the error names the filter: {bad}")
        deleted = payload(await c.call_tool("delete_memory", {"ids": ids}), "delete_memory")
        check(deleted["deleted"] == 1, f"deleted: {deleted}")
        again = payload(await c.call_tool("list_memories", {}), "list after delete")
        check(ids[0] not in [e["id"] for e in again["episodes"]], "the deleted episode is gone")
    print(f"ok: tools in scope {org}/notes ({mode})")


async def out_of_scope(target, org, key, mode):
    # An episode of ORG/other, by bob.
    async with target.client(org, "other", "bob", key, mode) as c:
        other = payload(await c.call_tool("add_memory", {"content": "bob's secret plan"}), "add in other")["ids"][0]
    # Another user of the same project cannot delete it either.
    async with target.client(org, "other", "carol", key, mode) as c:
        message = refusal(await c.call_tool("delete_memory", {"ids": [other]}), "delete of another user's episode")
        check(other in message and "carol" in message, f"refused as not carol's: {message}")
    async with target.client(org, "notes", "alice", key, mode) as c:
        message = refusal(await c.call_tool("delete_memory", {"ids": [other]}), "delete of another project's episode")
        check(other in message and f"{org}/notes" in message, f"refused as not in acme/notes: {message}")
        found = payload(await c.call_tool("search_memory", {"query": "secret plan"}), "search in notes")
        check(all(e["id"] != other for e in found["episodes"] + found["recent_episodes"]), f"{found}")
    async with target.client(org, "other", "bob", key, mode) as c:
        listed = payload(await c.call_tool("list_memories", {}), "list in other")
        check(other in [e["id"] for e in listed["episodes"]], "the episode survives in its project")
    async with target.client(org, "missing", "alice", key, mode) as c:
        message = refusal(await c.call_tool("add_memory", {"content": "x"}), "a project that does not exist")
        check("not found" in message.lower() or "does not exist" in message.lower(), message)
    print(f"ok: calls outside the scope refused ({mode})")
    return other


async def other_org(target, org, other_org, key):
    opened = None
    try:
        async with target.client(other_org, "notes", "alice", key) as c:
            opened = text_of(await c.call_tool("list_memories", {}))
    except Exception as err:  # noqa: BLE001 - the client surfaces the 403 in its own way
        print(f"ok: org {other_org} refused ({type(err).__name__})")
    # Checked outside: the client's context would wrap an assertion raised inside it.
    check(opened is None, f"a session for org {other_org} was opened: {opened}")
    # The refusal comes from the server: a plain POST sees 403.
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"authorization": f"Bearer {key}", "accept": "application/json, text/event-stream"}
    # Its own connection: a server may close one whose request it refused unread, and
    # a client reusing it at that moment sees "disconnected" (seen once under CI load).
    async with httpx.AsyncClient() as http:
        answer = await http.post(f"{target.args.url}/mcp?org={other_org}", json=init, headers=headers)
        check(answer.status_code == 403, f"HTTP {answer.status_code}: {answer.text}")
    async with httpx.AsyncClient() as http:
        answer = await http.post(f"{target.args.url}/mcp?org={org}&project=notes", json=init, headers=headers)
        check(answer.status_code == 200, f"own org: HTTP {answer.status_code}: {answer.text}")
        plain = {"accept": headers["accept"]}
        answer = await http.post(f"{target.args.url}/mcp?org={org}&project=notes", json=init, headers=plain)
        check(answer.status_code == 401, f"no key: HTTP {answer.status_code}: {answer.text}")
    print(f"ok: a URL for org {other_org} is HTTP 403 for an org key of {org}")


async def session_bound(target, org, key):
    """A legacy session stays in the scope of its initialize."""
    async with httpx.AsyncClient() as http:
        base = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        if key:
            base["authorization"] = f"Bearer {key}"
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
        answer = await http.post(f"{target.args.url}/mcp?org={org}&project=notes&user=alice", json=init, headers=base)
        check(answer.status_code == 200, f"initialize: HTTP {answer.status_code} {answer.text}")
        session = answer.headers.get("mcp-session-id")
        check(session, "a session id")
        headers = {**base, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
        await http.post(f"{target.args.url}/mcp?org={org}&project=notes&user=alice",
                        json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "list_memories", "arguments": {}}}
        answer = await http.post(f"{target.args.url}/mcp?org={org}&project=other&user=bob", json=call, headers=headers)
        body = answer.text
        check("refused: this session is bound to" in body, f"another scope in the session: {body}")
        answer = await http.post(f"{target.args.url}/mcp?org={org}&project=notes&user=alice", json=call, headers=headers)
        check('"isError":false' in answer.text, f"its own scope: {answer.text}")
    print("ok: a session stays in the scope of its initialize")


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=["stdio", "http"], required=True)
    parser.add_argument("--command", help="the memmachine binary (stdio)")
    parser.add_argument("--command-arg", dest="command_args", action="append", default=[],
                        help="store flags passed to `memmachine mcp` (repeat)")
    parser.add_argument("--url", help="the REST listener's base URL (http)")
    parser.add_argument("--org", default="acme")
    parser.add_argument("--key", help="an API key of --org (http with --auth)")
    parser.add_argument("--other-org", help="an org the key does not reach")
    args = parser.parse_args()
    target = Target(args)
    await in_scope(target, args.org, args.key, "auto")
    await out_of_scope(target, args.org, args.key, "auto")
    if args.transport == "http":
        # The handshake-era protocol too (sessions), which agent hosts still speak.
        await in_scope(target, args.org, args.key, "legacy")
        await session_bound(target, args.org, args.key)
    if args.other_org:
        await other_org(target, args.org, args.other_org, args.key)
    print("OK: mcp client checks passed")


if __name__ == "__main__":
    asyncio.run(main())
