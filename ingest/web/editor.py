"""The web view's zone and line editor: a camera's `zones`, `lines` and motion masks (`motion: {mask:
...}`, its other motion settings kept) written into the camera list.

The file is edited as a round trip (ruamel.yaml): its comments, order and quoting stay; a shape
that did not change keeps its own text. The new text is checked by the bridge's own check of a
camera list (the one function that start and reload call, `--mqtt`'s topic names included) before
it replaces the file's target (a temporary file beside it renamed over it, its owner and mode
kept), so an invalid shape changes nothing and answers the bridge's own message. A save made from
an older version of the file (another tab, a hand edit) is refused. The running bridge notices the
new content within a second and applies it without reconnecting the camera (`ingest.cli`).

The file is parsed when it is saved and when it changes on disk (`refresh`, called by the bridge's
watch of the file), never to show a scene: `read_only` and `version` answer from what was read.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ingest import config
from ingest.analytics import scene
from ingest.config import Camera, ConfigError

logger = logging.getLogger(__name__)

#: The bridge's check of a parsed camera list: its cameras, or ConfigError with its message.
Check = Callable[[Any], Sequence[Camera]]
_KINDS = {400: "InvalidScene", 403: "NotWritable", 409: "ReadOnly", 500: "WriteFailed"}


class EditError(ValueError):
    """A save that was refused: `status` is its HTTP status (400 invalid, 403 an unwritable file,
    409 read-only or changed since it was read), `kind` the answer's `type`."""

    def __init__(self, status: int, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind or _KINDS.get(status, "InternalError")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The camera list as last read: its `version` (a hash of its content), the cameras it holds,
    or why none can be edited now (unreadable, or not YAML while being edited by hand)."""

    version: str
    names: frozenset[str] = frozenset()
    problem: str | None = None


def version_of(text: str | bytes) -> str:
    """The version of a camera list's content, as the page gets it with a scene and sends it back."""
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()[:16]


class Editor:
    """Edits the scenes of the cameras of one camera list file (None: every camera is read-only).

    Args:
        path: the `--config` file.
        environ: the environment `${VAR}`s are checked against (the bridge's own).
        check: the bridge's check of a parsed camera list (default: `ingest.config.parse`).
    """

    def __init__(self, path: Path | None, environ: Mapping[str, str] | None = None, check: Check | None = None) -> None:
        self.path = path
        environ = os.environ if environ is None else environ
        self._check = check or (lambda data: config.parse(data, str(path), environ))
        self._lock = threading.Lock()
        self.parses = 0  # ruamel parses of the file: at a save or a change on disk, never per view
        self._seen = Snapshot("")
        self.refresh()

    @property
    def version(self) -> str | None:
        """The version of the file as last read (None without a file)."""
        return self._seen.version if self.path is not None else None

    def refresh(self) -> bool:
        """Reads the file again if its content changed since it was last read; whether it had."""
        if self.path is None:
            return False
        with self._lock:
            try:
                text = self.path.read_text()
            except OSError as exc:
                self._seen = Snapshot("", problem=f"cannot read the camera list {self.path}: {exc.strerror}")
                return True
            if version_of(text) == self._seen.version:
                return False
            self._seen = self._reading(text)
            return True

    def _reading(self, text: str) -> Snapshot:
        try:
            return _snapshot(self._parse(text), text)
        except EditError as exc:
            return Snapshot(version_of(text), problem=str(exc))

    def read_only(self, camera: str) -> str | None:
        """Why `camera`'s zones and lines cannot be edited here, or None if they can (no file read)."""
        if self.path is None:
            return "given with --camera: there is no camera list to save to (start with --config cameras.yaml)"
        seen = self._seen
        if seen.problem is not None:
            return seen.problem
        return None if camera in seen.names else self._not_listed(camera)

    def save(self, camera: str, zones: Any, lines: Any, version: str | None = None, mask: Any = None) -> str:
        """Makes `zones` and `lines` (lists of mappings, as in the YAML) the camera's own, and
        `mask` its motion masks (its other motion settings kept).

        Args:
            version: the file's version the change was made from (None: not checked).
            mask: polygons of [x, y] fractions of the frame, as `motion: {mask: ...}` holds them
                (None: the camera's masks stay as they are).

        Returns:
            The file's new version.

        Raises:
            EditError: 409 for a read-only camera or a file changed since `version`; 400, with the
                bridge's message, for a list that would not start or masks for a camera with motion
                off; 403 for a file that cannot be written.
        """
        if self.path is None:
            raise EditError(409, str(self.read_only(camera)))
        for key, value in (("zones", zones), ("lines", lines)):
            if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
                raise EditError(400, f"{key} must be a list of mappings, each with a `name`")
        if mask is not None and not (isinstance(mask, list) and all(isinstance(p, list) for p in mask)):
            raise EditError(400, "motion_mask must be a list of polygons, each a list of [x, y] fractions of the frame")
        with self._lock:
            text = self._text()
            if version is not None and version != version_of(text):
                if version_of(text) != self._seen.version:
                    self._seen = self._reading(text)  # the page reloads now: it gets this version
                raise EditError(409, f"{self.path} changed since this page read it (another tab or a hand edit): "
                                     "reload the camera's scene and make the change again", "Conflict")
            document, indent, offset = self._parse(text)
            entry = self._entry(document, camera)
            if mask:
                self._motion_on(camera, text)
            new = _edited(document, entry, zones, lines, indent, offset, mask)
            self._checked(new)
            _replace(self.path, new)
            self._seen = _snapshot((document, indent, offset), new)
            return self._seen.version

    def _checked(self, text: str) -> Sequence[Camera]:
        """The cameras of `text`, as the bridge would run them.

        Raises:
            EditError: 400 with the bridge's message.
        """
        try:
            return self._check(yaml.safe_load(text))
        except (ConfigError, yaml.YAMLError) as exc:
            raise EditError(400, str(exc)) from None

    def _motion_on(self, camera: str, text: str) -> None:
        """Refuses masks for a camera whose motion is off now: a mask written there would turn
        motion on (a `motion:` mapping is on), which is a choice for the camera list, not the editor.

        Raises:
            EditError: 400 naming the setting to change.
        """
        if any(c.name == camera and c.effective_motion is None for c in self._checked(text)):
            raise EditError(400, f"camera {camera!r}: motion is off (`motion: off`, or a file's default): masks "
                                 f"apply when motion is on: set `motion: on` for it in {self.path} first")

    def _text(self) -> str:
        assert self.path is not None
        try:
            return self.path.read_text()
        except OSError as exc:
            raise EditError(409, f"cannot read the camera list {self.path}: {exc.strerror}") from None

    def _parse(self, text: str) -> tuple[Any, int | None, int | None]:
        """The document of `text`, and its list indentation and dash offset (ruamel's guess)."""
        from ruamel.yaml.util import load_yaml_guess_indent

        self.parses += 1
        logger.debug("editor: parsing the camera list %s (version %s, parse %d)", self.path, version_of(text),
                     self.parses)
        try:
            _, indent, offset = load_yaml_guess_indent(text)
            return _yaml(2, 0).load(text), indent, offset
        except Exception as exc:  # ruamel's errors: the file is being edited by hand
            raise EditError(409, f"{self.path} is not valid YAML now ({type(exc).__name__}): fix it first") from None

    def _entry(self, document: Any, camera: str) -> Any:
        for entry in _entries(document):
            if entry.get("name") == camera:
                return entry
        raise EditError(409, self._not_listed(camera))

    def _not_listed(self, camera: str) -> str:
        return (f"camera {camera!r} is not in {self.path} (given with --camera): edit its "
                "zones and lines there, or on the command line")


def _entries(document: Any) -> list[Any]:
    cameras = document.get("cameras") if isinstance(document, Mapping) else None
    return [e for e in cameras if isinstance(e, Mapping)] if isinstance(cameras, list) else []


def _snapshot(parsed: tuple[Any, int | None, int | None], text: str) -> Snapshot:
    return Snapshot(version_of(text), frozenset(str(e.get("name")) for e in _entries(parsed[0])))


def _edited(document: Any, entry: Any, zones: list[Any], lines: list[Any], indent: int | None,
            offset: int | None, mask: list[list[Any]] | None = None) -> str:
    """The file's new text: the entry's zones and lines replaced (an empty list kept where the
    `defaults:` would otherwise give the camera theirs), and its motion masks (None: kept)."""
    defaults = document.get("defaults") if isinstance(document, Mapping) else None
    for key, value in (("zones", zones), ("lines", lines)):
        inherited = isinstance(defaults, Mapping) and bool(defaults.get(key))
        _put(entry, key, value, inherited)
    if mask is not None:
        _put_mask(entry, defaults, mask)
    return _dump(document, indent or 2, offset or 0)


def _put(entry: Any, key: str, shapes: list[Mapping[str, Any]], inherited: bool = False) -> None:
    """`entry[key] = shapes`, keeping the node of each shape that means the same as before
    (`inherited`: the list's `defaults:` give the camera shapes when it has no key of its own)."""
    from ruamel.yaml.comments import CommentedSeq

    old = {s.get("name"): s for s in entry.get(key) or [] if isinstance(s, Mapping)}
    if not shapes and not inherited:
        entry.pop(key, None)  # none left: the key goes (an empty block list would take its comments along)
        return
    seq = CommentedSeq()
    if not shapes or isinstance(entry.get(key), CommentedSeq) and entry[key].fa.flow_style():
        seq.fa.set_flow_style()  # written on one line before (or `[]`, none over the defaults): so it stays
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
    from ruamel.yaml.comments import CommentedMap

    return CommentedMap((k, _flow(v)) for k, v in shape.items())


def _flow(value: Any) -> Any:
    """A list as YAML on one line (its lists inside it too)."""
    from ruamel.yaml.comments import CommentedSeq

    if not isinstance(value, list):
        return value
    seq = CommentedSeq(_flow(v) for v in value)
    seq.fa.set_flow_style()
    return seq


def _put_mask(entry: Any, defaults: Any, mask: list[list[Any]]) -> None:
    """The camera's motion masks made `mask` (a polygon a line), its other motion settings kept:
    its own `motion:` mapping edited in place, or one made from the `defaults:`' mapping (a
    camera's own `motion:` replaces theirs whole); masks unchanged keep their text."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    own = entry.get("motion")
    if not isinstance(own, Mapping):
        if not mask:
            return  # nothing to write: `motion: on`, or no key, stays as it is
        inherited = defaults.get("motion") if isinstance(defaults, Mapping) and own is None else None
        own = _node(_plain(inherited)) if isinstance(inherited, Mapping) else CommentedMap()
        entry["motion"] = own
    if _same_mask(own.get("mask"), mask):
        return
    if mask:
        own["mask"] = CommentedSeq(_flow(polygon) for polygon in mask)
        return
    own.pop("mask", None)
    if not own:
        entry["motion"] = True  # `motion: {mask: ...}` less its masks: on, with every default


def _same_mask(before: Any, after: list[list[Any]]) -> bool:
    def numbers(mask: Any) -> Any:
        return [[[float(x), float(y)] for x, y in polygon] for polygon in mask]

    try:
        return bool(before is not None and numbers(before) == numbers(after))
    except (TypeError, ValueError):
        return False


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
    """Writes `text` over the file `path` names (a link's target: the link stays) atomically: a
    temporary file beside it, with its owner (where permitted) and mode, renamed over it.

    Raises:
        EditError: 403 naming the file or folder that cannot be written, and the fix; nothing changed.
    """
    target = path.resolve()
    before = target.stat()
    _writable(target, before.st_mode)
    try:
        handle, partial = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    except OSError as exc:
        raise _unwritable(target.parent, exc, "the camera list's folder") from None
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(PermissionError):  # another user's file: only root may keep its owner
            os.chown(partial, before.st_uid, before.st_gid)
        os.chmod(partial, before.st_mode & 0o7777)  # after chown, which may clear set-id bits
        os.replace(partial, target)
    except BaseException as exc:
        Path(partial).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _unwritable(target, exc, "the camera list") from None
        raise


def _writable(target: Path, mode: int) -> None:
    """Refuses a camera list that is read-only (no write permission, for this user or anyone)."""
    if not mode & 0o222 or not os.access(target, os.W_OK):
        raise EditError(403, f"the camera list {target} is read-only (mode {mode & 0o7777:04o}): make it writable "
                             f"(chmod u+w {target}) to save from the page, or edit it by hand")


def _unwritable(where: Path, exc: OSError, what: str) -> EditError:
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return EditError(403, f"cannot write {what} {where} ({exc.strerror}): make it writable "
                              f"(chmod u+w {where}) to save from the page; nothing was changed")
    return EditError(500, f"cannot write {what} {where} ({exc.strerror}); nothing was changed")
