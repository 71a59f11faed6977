"""Noticing that the camera list changed: its file's content, checked every second, or SIGHUP."""

from __future__ import annotations

import hashlib
from pathlib import Path


class FileWatch:
    """Tells whether a file's content differs from the last time it was looked at."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._digest = self._read()

    def _read(self) -> bytes | None:
        try:
            return hashlib.sha256(self._path.read_bytes()).digest()
        except OSError:
            return None

    def changed(self) -> bool:
        """True once per change of the content (a missing file is not a change: it is waited out)."""
        digest = self._read()
        if digest is None or digest == self._digest:
            return False
        self._digest = digest
        return True
