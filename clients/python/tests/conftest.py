from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memmachine_grpc import Memory

from .server import Server, kill_all


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("shared-server"))
    try:
        yield s
    finally:
        kill_all()


@pytest.fixture
def project(server: Server) -> str:
    """A new project of org `test` on the shared server."""
    name = f"p-{uuid.uuid4().hex[:12]}"
    with Memory(server.addr, "test", name) as mem:
        mem.create_project("a test project")
    return name


@pytest.fixture
def mem(server: Server, project: str) -> Iterator[Memory]:
    with Memory(server.addr, "test", project) as m:
        yield m


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"
