"""Where `watch` keeps the cursor of the last change the caller has taken."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Protocol


class CursorStore(Protocol):
    def load(self) -> str | None: ...

    def save(self, cursor: str) -> None: ...


class FileCursorStore:
    """A cursor in a file, replaced atomically (temp file, fsync, rename), so a crash
    leaves the old cursor or the new one, never half of one."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> str | None:
        try:
            text = self.path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        return text or None

    def save(self, cursor: str) -> None:
        directory = self.path.parent
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(cursor + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


class MemoryCursorStore:
    """A cursor held in memory (resumes across reconnects, not across restarts)."""

    def __init__(self, cursor: str | None = None) -> None:
        self.cursor = cursor

    def load(self) -> str | None:
        return self.cursor

    def save(self, cursor: str) -> None:
        self.cursor = cursor
