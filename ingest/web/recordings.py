"""`--record`'s events, snapshots, clips and recordings in the web view (docs/ingest.md,
"Recordings in the web view"): each request's outcome as a value (`ingest.web.answers`) that the
server writes.

A file is found only from an index row, and checked to lie inside the recordings' directory: a
request's path never reaches the file system. The snapshot, clip and export addresses in answers
are signed (`Token.sign`), because a `<video>` or `<img>` cannot send the token.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import math
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ingest.record import clips, retention
from ingest.record.index import Segment
from ingest.record.jobs import file_name
from ingest.record.recorder import inside
from ingest.web.access import SIGNED_S, Token
from ingest.web.answers import Answer, Media, Outcome, Refusal

if TYPE_CHECKING:
    from ingest.record.recorder import Recorder

logger = logging.getLogger(__name__)

#: Events a page holds unless `limit` says, and at most.
PAGE, MAX_PAGE = 50, 100
#: Seconds of a camera's timeline unless `since` says (the last day), and at most.
TIMELINE_S, MAX_TIMELINE_S = 86400.0, 7 * 86400.0
#: Events a timeline holds at most (the newest).
TIMELINE_EVENTS = 100
#: The longest export, in seconds.
MAX_EXPORT_S = 3600.0
#: Exports kept at once, each until `EXPORT_KEEP_S` after it was last asked for (a browser asks
#: again for each range it plays or seeks to).
MAX_EXPORTS, EXPORT_KEEP_S = 4, float(SIGNED_S)
#: The query parameters of a signed address (the server checks them).
SIGNATURE = frozenset({"exp", "sig"})

_EVENT = re.compile(r"^/api/events(?:/([A-Za-z0-9_.:-]{1,200})(?:/(snapshot|clip))?)?$")
_CAMERA = re.compile(r"^/api/cameras/([A-Za-z0-9_.-]{1,63})/(recordings|export)$")


@dataclass(frozen=True, slots=True)
class Route:
    """A recordings request: `what` (events, event, snapshot, clip, recordings, export) of
    `target` (an event id, a camera, or nothing for the list)."""

    what: str
    target: str

    @property
    def media(self) -> bool:
        """A file a `<video>` or `<img>` asks for: a signed address will do instead of the token."""
        return self.what in ("snapshot", "clip", "export")


def route(path: str) -> Route | None:
    """The recordings route of `path`, or None for another."""
    found = _EVENT.match(path)
    if found:
        return Route(found[2] or ("event" if found[1] else "events"), found[1] or "")
    found = _CAMERA.match(path)
    return Route(found[2], found[1]) if found else None


class BadParameter(ValueError):
    """A query parameter that does not parse; its message names the fix."""


def _text(name: str, raw: str) -> str:
    if len(raw) > 200:
        raise BadParameter(f"{name}: give at most 200 characters")
    return raw


def _time(name: str, raw: str) -> float:
    """Seconds since the epoch (`1796112191.5`), or ISO 8601 with its offset (`2026-12-01T08:00:00Z`)."""
    try:
        value = float(raw)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(raw)
        except ValueError:
            parsed = None
        value = parsed.timestamp() if parsed is not None and parsed.tzinfo is not None else math.nan
    if not math.isfinite(value) or value < 0:
        raise BadParameter(f"{name}={raw!r}: give seconds since the epoch (e.g. {int(time.time())}) or an ISO 8601 "
                           "time with its offset (e.g. 2026-12-01T08:00:00Z)")
    return value


def _limit(name: str, raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise BadParameter(f"{name}={raw!r}: give a whole number from 1 to {MAX_PAGE}")
    return int(raw)


def cursor(event: Mapping[str, Any]) -> str:
    """The `next` of a page ending with `event`: its (at, id), opaque to clients."""
    return base64.urlsafe_b64encode(json.dumps([event["at"], event["id"]]).encode()).decode().rstrip("=")


def _cursor(name: str, raw: str) -> tuple[float, str]:
    try:
        at, event_id = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        if isinstance(at, (int, float)) and isinstance(event_id, str):
            return float(at), event_id
    except (ValueError, TypeError, binascii.Error):
        pass
    raise BadParameter(f"{name}: give the `next` of the previous page, as it came")


Parameters = Mapping[str, Callable[[str, str], Any]]
EVENTS: Parameters = {"camera": _text, "label": _text, "place": _text, "since": _time, "until": _time,
                      "before": _cursor, "limit": _limit}
RANGE: Parameters = {"since": _time, "until": _time}


def parameters(query: Mapping[str, list[str]], table: Parameters) -> dict[str, Any] | Refusal:
    """`query` (`parse_qs`'s: an empty value is no value) parsed by `table`, each name once;
    `since` not after `until`. A signed address's `exp` and `sig` are left to the server."""
    unknown = set(query) - set(table) - SIGNATURE
    if unknown:
        return _bad(f"unknown parameter {', '.join(sorted(unknown))}: use {', '.join(table)}")
    out: dict[str, Any] = {}
    for name, values in query.items():
        if name in SIGNATURE:
            continue
        if len(values) != 1:
            return _bad(f"give {name} once")
        try:
            out[name] = table[name](name, values[0])
        except BadParameter as exc:
            return _bad(str(exc))
    if out.get("since", -math.inf) > out.get("until", math.inf):
        return _bad(f"since ({out['since']}) is after until ({out['until']}): swap them")
    return out


def _bad(message: str) -> Refusal:
    return Refusal(400, "BadRequest", message)


def _no_event(event_id: str) -> Refusal:
    return Refusal(404, "NotFound", f"no such event: {event_id} (deleted, or older than its camera's retain_days)")


class Recordings:
    """The recordings' API over `recorder`'s index.

    Args:
        recorder: `--record`'s recorder.
        token: signs the media addresses of answers.
        clock: the wall clock (the signatures' expiry, the timeline's end).
    """

    def __init__(self, recorder: Recorder, token: Token, clock: Callable[[], float] = time.time) -> None:
        self.recorder, self.index, self.token, self.clock = recorder, recorder.index, token, clock
        self.exports = Exports(recorder.directory)

    def close(self) -> None:
        self.exports.close()

    def get(self, found: Route, query: Mapping[str, list[str]]) -> Outcome:
        answer: Callable[[str, Mapping[str, list[str]]], Outcome] = {
            "events": self.events, "event": self.event, "snapshot": self.snapshot, "clip": self.clip,
            "recordings": self.recordings, "export": self.export}[found.what]
        return answer(found.target, query)

    def events(self, _: str, query: Mapping[str, list[str]]) -> Outcome:
        """Newest first, filtered, a page at a time: `next` is the `before` of the next page."""
        args = parameters(query, EVENTS)
        if isinstance(args, Refusal):
            return args
        limit = args.pop("limit", PAGE)
        found = self.index.events(**args, limit=limit + 1)
        page = found[:limit]
        return Answer(200, {"events": [self.described(e) for e in page],
                            "next": cursor(page[-1]) if len(found) > limit else None})

    def event(self, event_id: str, _: Mapping[str, list[str]]) -> Outcome:
        found = self.index.event(event_id)
        return Answer(200, self.described(found)) if found is not None else _no_event(event_id)

    def delete(self, found: Route) -> Outcome:
        """An event, its snapshot, and its clip unless another event shares it."""
        if found.what != "event":
            return Refusal(405, "MethodNotAllowed", "delete an event: DELETE /api/events/ID")
        if self.index.event(found.target) is None:
            return _no_event(found.target)
        freed = retention.delete_event(self.recorder, found.target, "deleted")
        logger.info("web view: event %s deleted (%d bytes)", found.target, freed)
        return Answer(200, {"deleted": found.target, "freed_bytes": freed})

    def snapshot(self, event_id: str, _: Mapping[str, list[str]]) -> Outcome:
        found = self.index.event(event_id)
        if found is None:
            return _no_event(event_id)
        if not found["snapshot"]:
            return Refusal(404, "NotFound", f"event {event_id} has no snapshot (made once its frame is recorded)")
        return Media(inside(self.recorder.directory, found["snapshot"]), "image/jpeg", f"{file_name(event_id)}.jpg")

    def clip(self, event_id: str, _: Mapping[str, list[str]]) -> Outcome:
        found = self.index.event(event_id)
        if found is None:
            return _no_event(event_id)
        made = self.index.clip(found["clip"]) if found["clip"] is not None else None
        if made is not None and made.state == "pending":
            return Refusal(404, "NotReady", f"event {event_id}'s clip is made once its post_seconds are recorded: "
                                            "ask again then")
        if made is None or made.state != "ready" or made.path is None:
            return Refusal(404, "NotFound", f"event {event_id} has no clip (its video was not recorded)")
        return Media(inside(self.recorder.directory, made.path), "video/mp4", f"{file_name(event_id)}.mp4")

    def recordings(self, camera: str, query: Mapping[str, list[str]]) -> Outcome:
        """A timeline: the camera's recorded time in [since, until] and its events then (newest
        first); `export_url` plays or saves that range, for one of at most `MAX_EXPORT_S` recorded."""
        args = parameters(query, RANGE)
        if isinstance(args, Refusal):
            return args
        until = args.get("until", self.clock())
        since = args.get("since", until - TIMELINE_S)
        if until - since > MAX_TIMELINE_S:
            return _bad(f"since to until is {(until - since) / 86400:.1f} days: ask at most {MAX_TIMELINE_S / 86400:g}")
        spans = [[max(a, since), min(b, until)] for a, b in self.index.spans(camera, since, until)]
        events = self.index.events(camera=camera, since=since, until=until, limit=TIMELINE_EVENTS + 1)
        export = (self.token.sign(f"/api/cameras/{camera}/export", {"since": repr(since), "until": repr(until)},
                                  self.clock()) if spans and until - since <= MAX_EXPORT_S else None)
        return Answer(200, {"camera": camera, "since": since, "until": until, "spans": spans,
                            "events": [self.described(e) for e in events[:TIMELINE_EVENTS]],
                            "more": len(events) > TIMELINE_EVENTS, "export_url": export})

    def export(self, camera: str, query: Mapping[str, list[str]]) -> Outcome:
        """One MP4 of the camera's video in [since, until] (at most `MAX_EXPORT_S`)."""
        args = parameters(query, RANGE)
        if isinstance(args, Refusal):
            return args
        if "since" not in args or "until" not in args or args["until"] <= args["since"]:
            return _bad("give since and until, until after since (seconds since the epoch, or ISO 8601)")
        since, until = args["since"], args["until"]
        if until - since > MAX_EXPORT_S:
            return _bad(f"since to until is {(until - since) / 60:.0f} minutes: export at most "
                        f"{MAX_EXPORT_S / 60:.0f} minutes at a time")
        segments = self.index.segments(camera, since, until)
        if not segments:
            return Refusal(404, "NoRecording", f"camera {camera} has no recording from {since} to {until}: "
                                               f"/api/cameras/{camera}/recordings shows what it has")
        return self.exports.get(camera, since, until, segments)

    def described(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """An event as the API gives it: its row, with signed addresses for its snapshot and clip
        (null: none, or not made yet) instead of its files' paths."""
        path, now = f"/api/events/{quote(event['id'], safe=':')}", self.clock()
        return {**{k: v for k, v in event.items() if k != "snapshot"},
                "snapshot_url": self.token.sign(f"{path}/snapshot", {}, now) if event["has_snapshot"] else None,
                "clip_url": self.token.sign(f"{path}/clip", {}, now) if event["has_clip"] else None}


@dataclass(slots=True)
class _Export:
    path: Path
    used: float


class Exports:
    """MP4s of a camera's time ranges, made on request (remuxed, never re-encoded) under
    `DIR/.exports/` and kept while they are asked for: removed `EXPORT_KEEP_S` after their last
    request, when `MAX_EXPORTS` newer ones came, and at close. One is made at a time."""

    def __init__(self, directory: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.directory, self.folder = directory, directory / ".exports"
        self._clock = clock
        self._made: dict[tuple[str, float, float], _Export] = {}
        self._lock = threading.Lock()
        shutil.rmtree(self.folder, ignore_errors=True)  # a crashed run's

    def get(self, camera: str, since: float, until: float, segments: list[Segment]) -> Media | Refusal:
        key = (camera, since, until)
        with self._lock:  # a browser's range requests for a new export wait for the first to make it
            self._sweep(self._clock() - EXPORT_KEEP_S)
            kept = self._made.get(key)
            made = kept if kept is not None and kept.path.is_file() else self._make(key, segments)
            if isinstance(made, Refusal):
                return made
            made.used = self._clock()
        stamp = "_".join(time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(t)) for t in (since, until))
        return Media(made.path, "video/mp4", f"{camera}_{stamp}.mp4")

    def _make(self, key: tuple[str, float, float], segments: list[Segment]) -> _Export | Refusal:
        needed = sum(s.bytes for s in segments)
        if shutil.disk_usage(self.directory).free < 2 * needed:
            return Refusal(507, "InsufficientStorage", f"an export of this range needs about {needed} bytes free in "
                                                       f"{self.directory}: free some, or export a shorter range")
        self.folder.mkdir(exist_ok=True)
        out = self.folder / f"{secrets.token_hex(8)}.mp4"
        try:
            clips.remux(self.directory, segments, key[1], key[2], out)
        except ValueError as exc:  # no frame of the range
            return Refusal(404, "NoRecording", f"camera {key[0]}: {exc}")
        finally:
            for partial in self.folder.glob(f".{out.name}*"):  # a failed remux's
                partial.unlink(missing_ok=True)
        while len(self._made) >= MAX_EXPORTS:
            self._drop(min(self._made, key=lambda k: self._made[k].used))
        made = self._made[key] = _Export(out, self._clock())
        timer = threading.Timer(EXPORT_KEEP_S + 1, self.sweep)
        timer.daemon = True
        timer.start()
        return made

    def sweep(self) -> None:
        """Removes the exports not asked for in `EXPORT_KEEP_S`."""
        with self._lock:
            self._sweep(self._clock() - EXPORT_KEEP_S)

    def _sweep(self, before: float) -> None:
        for key in [k for k, made in self._made.items() if made.used < before]:
            self._drop(key)

    def _drop(self, key: tuple[str, float, float]) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._made.pop(key).path.unlink()  # a response still sending it reads on (the file stays open)

    def close(self) -> None:
        with self._lock:
            self._made.clear()
            shutil.rmtree(self.folder, ignore_errors=True)
