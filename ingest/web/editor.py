"""The web view's zone and line editor: a camera's `zones` and `lines` written into the camera list.

The file is edited as a round trip (ruamel.yaml): its comments, order and quoting stay; a shape
that did not change keeps its own text. The new text is checked by the same code as at start
(`ingest.config.parse`) before it replaces the file (a temporary file renamed over it), so an
invalid shape changes nothing and answers the bridge's own message. The running bridge notices
the new content within a second and applies it without reconnecting the camera (`ingest.cli`).
"""

from __future__ import annotations

import io
import os
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ingest import config
from ingest.analytics import scene
from ingest.config import ConfigError


class EditError(ValueError):
    """A save that was refused; `status` is its HTTP status (400 invalid, 409 read-only)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Editor:
    """Edits the scenes of the cameras of one camera list file (None: every camera is read-only).

    Args:
        path: the `--config` file.
        environ: the environment `${VAR}`s are checked against (the bridge's own).
    """

    def __init__(self, path: Path | None, environ: Mapping[str, str] | None = None) -> None:
        self.path = path
        self._environ = os.environ if environ is None else environ
        self._lock = threading.Lock()

    def read_only(self, camera: str) -> str | None:
        """Why `camera`'s zones and lines cannot be edited here, or None if they can."""
        if self.path is None:
            return "given with --camera: there is no camera list to save to (start with --config cameras.yaml)"
        try:
            self._entry(self._load()[0], camera)
        except EditError as exc:
            return str(exc)
        return None

    def save(self, camera: str, zones: Any, lines: Any) -> None:
        """Makes `zones` and `lines` (lists of mappings, as in the YAML) the camera's own.

        Raises:
            EditError: 409 for a read-only camera; 400, with the bridge's message, for a list
                that would not start.
        """
        if self.path is None:
            raise EditError(409, str(self.read_only(camera)))
        for key, value in (("zones", zones), ("lines", lines)):
            if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
                raise EditError(400, f"{key} must be a list of mappings, each with a `name`")
        with self._lock:
            document, indent, offset = self._load()
            entry = self._entry(document, camera)  # 409 for a camera not in the file
            for key, value in (("zones", zones), ("lines", lines)):
                _put(entry, key, value)
            text = _dump(document, indent or 2, offset or 0)
            try:
                config.parse(yaml.safe_load(text), str(self.path), self._environ)
            except (ConfigError, yaml.YAMLError) as exc:
                raise EditError(400, str(exc)) from None
            _replace(self.path, text)

    def _load(self) -> tuple[Any, int | None, int | None]:
        """The file's document, and its list indentation and dash offset (ruamel's guess)."""
        from ruamel.yaml.util import load_yaml_guess_indent

        assert self.path is not None
        try:
            text = self.path.read_text()
            _, indent, offset = load_yaml_guess_indent(text)
            return _yaml(2, 0).load(text), indent, offset
        except OSError as exc:
            raise EditError(409, f"cannot read the camera list {self.path}: {exc.strerror}") from None
        except Exception as exc:  # ruamel's errors: the file is being edited by hand
            raise EditError(409, f"{self.path} is not valid YAML now ({type(exc).__name__}): fix it first") from None

    def _entry(self, document: Any, camera: str) -> Any:
        cameras = document.get("cameras") if isinstance(document, Mapping) else None
        for entry in cameras if isinstance(cameras, list) else []:
            if isinstance(entry, Mapping) and entry.get("name") == camera:
                return entry
        raise EditError(409, f"camera {camera!r} is not in {self.path} (given with --camera): edit its "
                             "zones and lines there, or on the command line")


def _put(entry: Any, key: str, shapes: list[Mapping[str, Any]]) -> None:
    """`entry[key] = shapes`, keeping the node of each shape that means the same as before."""
    from ruamel.yaml.comments import CommentedSeq

    old = {s.get("name"): s for s in entry.get(key) or [] if isinstance(s, Mapping)}
    if not shapes:
        entry.pop(key, None)  # none left: the key goes (an empty block list would take its comments along)
        return
    seq = CommentedSeq()
    if isinstance(entry.get(key), CommentedSeq) and entry[key].fa.flow_style():
        seq.fa.set_flow_style()  # written on one line before: so it stays
    for shape in shapes:
        before = old.get(shape.get("name"))
        seq.append(before if before is not None and _same(key, before, shape) else _node(shape))
    entry[key] = seq


def _same(key: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether two shapes mean the same (parsed by the bridge's own code)."""
    try:
        return bool(scene.parse({"track": True, key: [_plain(before)]}) == scene.parse({"track": True, key: [after]}))
    except scene.SceneError:
        return False


def _plain(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {k: _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def _node(shape: Mapping[str, Any]) -> Any:
    """A new shape as YAML: its points and lists on one line each."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    def flow(value: Any) -> Any:
        if not isinstance(value, list):
            return value
        seq = CommentedSeq(flow(v) for v in value)
        seq.fa.set_flow_style()
        return seq

    return CommentedMap((k, flow(v)) for k, v in shape.items())


def _yaml(indent: int, offset: int) -> Any:
    """ruamel's round trip, quotes kept, with the file's list indentation (`- ` at `offset`)."""
    from ruamel.yaml import YAML

    handler = YAML()
    handler.preserve_quotes = True
    handler.width = 4096  # a long line stays one line
    handler.indent(mapping=indent - offset if offset else indent, sequence=indent, offset=offset)
    return handler


def _dump(document: Any, indent: int, offset: int) -> str:
    out = io.StringIO()
    _yaml(indent, offset).dump(document, out)
    return out.getvalue()


def _replace(path: Path, text: str) -> None:
    """Writes `text` to a temporary file beside `path`, with its mode, and renames it over `path`."""
    mode = path.stat().st_mode & 0o777
    handle, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(partial, mode)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
