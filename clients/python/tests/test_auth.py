"""API keys: the bearer token is sent, another org's key is refused (typed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memmachine_grpc import Memory, PermissionDenied, Unauthenticated

from .server import Server, create_key


def test_keys_are_sent_and_another_orgs_key_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    key_a = create_key(data, "org-a")
    create_key(data, "org-b")
    server = Server(data, "--auth")
    try:
        with Memory(server.addr, "org-a", "notes", api_key=key_a) as mine:
            mine.create_project()
            uid = mine.add("only org-a may read this")
            assert [e.uid for e in mine.list()] == [uid]
        with Memory(server.addr, "org-b", "notes", api_key=key_a) as theirs:
            with pytest.raises(PermissionDenied) as denied:
                theirs.create_project()
            # The server's answer names no detail, only the refusal.
            assert "does not grant access" in denied.value.message
            assert denied.value.details == ()
            with pytest.raises(PermissionDenied):
                list(theirs.list())
        with Memory(server.addr, "org-a", "notes") as keyless, pytest.raises(Unauthenticated):
            keyless.search("anything")
        with Memory(server.addr, "org-a", "notes", api_key="mm_wrong_key") as wrong:
            with pytest.raises(Unauthenticated):
                wrong.search("anything")
    finally:
        server.kill()
