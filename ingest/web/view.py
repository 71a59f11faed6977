"""The live view's data (`--web`, docs/ingest.md "Live view"): each camera's state, counts, last
events, and its newest pictures with their answers, for the page to fetch.

The cameras never wait for it: `released` (on a camera's result path) and `offer` (inside the
results' lock) only update a few fields and append to bounded deques. One thread per watched
camera makes what viewers fetch: the segment's MP4 preview (remuxed by the segmenter while
someone watches, `ingest.cameras.segments`), a frames-mode JPEG as it was sent, and a decoded still for
a codec the browser cannot play. A viewer is one long poll for all the cameras it shows
(`View.live`): it gets each camera's next fragment it has not seen, or the newest when it fell
behind; nothing is kept per viewer, so a stalled browser holds nothing but its own socket. The
page makes the events' thumbnails itself, from the frames it shows: the bridge decodes only for
stills.
"""

from __future__ import annotations

import io
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ingest.analytics.scene import Scene
from ingest.cameras.units import END_OF_STREAM, Unit
from ingest.config import Camera
from ingest.sinks.output import strict_json

logger = logging.getLogger(__name__)

#: Fragments kept per camera (seconds of video, at one segment a second).
RING = 6
#: Units waiting for the camera's view thread; when full the oldest is skipped.
WORK = 3
#: A camera is watched this long after a viewer last asked for its pictures.
WATCH_S = 15.0
#: A viewer this many fragments behind jumps to the newest.
BEHIND = 2
#: The MP4 init segment (ftyp, moov) is within this many bytes of a preview's start.
INIT_BYTES = 1 << 16
#: Once one camera has a picture for a long poll, this long for the others' (fewer responses).
GATHER_S = 0.05
EVENTS = 30
FPS_WINDOW_S = 5.0
KINDS_PLAYED = frozenset({"mp4", "jpeg"})
KINDS_STILL = frozenset({"still", "jpeg"})
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")
_COUNTED = ("entered", "left", "crossed")
_EVENT_FIELDS = ("event", "event_id", "time", "zone", "line", "track_id", "label", "direction", "dwell_s")
_BOX_FIELDS = ("box", "label", "track_id", "score", "class_id")
#: What a line says of motion (issue 48), copied to the page only when the line has it: lines of a
#: camera with motion off stay as small as before.
_MOTION_FIELDS = ("looked", "lighting")
_MOTION_BOXES = ("regions", "motion")
#: Motion boxes and regions a frame sends the page at most: a header stays small whatever a
#: noisy picture finds (the page draws them; the results file keeps them all).
MOTION_BOXES = 64

Line = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Fragment:
    """One thing a viewer fetches: `header` (JSON) and `payload` (MP4 or JPEG), encoded once for
    every viewer: the header's length and the payload's (4 bytes each, big-endian), the header,
    the payload."""

    seq: int
    kind: str
    header: dict[str, Any]
    data: bytes

    @classmethod
    def make(cls, seq: int, kind: str, header: dict[str, Any], payload: bytes) -> Fragment:
        head = strict_json({"seq": seq, "kind": kind, **header}, separators=(",", ":"))[0].encode()
        return cls(seq, kind, header, len(head).to_bytes(4, "big") + len(payload).to_bytes(4, "big") + head + payload)


class Pulse:
    """A count of the fragments made by every camera, to wait on (one long poll for many cameras)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.count = 0

    def bump(self) -> None:
        with self._changed:
            self.count += 1
            self._changed.notify_all()

    def wait(self, seen: int, timeout: float) -> None:
        """Returns once the count is past `seen`, or after `timeout`."""
        with self._changed:
            self._changed.wait_for(lambda: self.count != seen, timeout)


def scrub(text: str) -> str:
    """`text` without any URL in it (a camera's, credentials or not, never reaches the page)."""
    return _URL.sub("(the camera's URL)", text)


def mp4_codec(preview: bytes) -> str:
    """The MIME type with codecs of an MP4 preview, as `MediaSource.isTypeSupported` reads it."""
    at = preview.find(b"avcC", 0, INIT_BYTES)
    if at >= 0 and len(preview) >= at + 8:
        return f'video/mp4; codecs="avc1.{preview[at + 5:at + 8].hex()}"'
    if preview.find(b"hvcC", 0, INIT_BYTES) >= 0:
        return 'video/mp4; codecs="hvc1.1.6.L120.90"'
    return "video/mp4"


def _frames(lines: Sequence[Line]) -> list[dict[str, Any]]:
    """The answered frames of a unit's lines, with only what the page draws."""
    return [{"pts": line["pts"], "width": line.get("width"), "height": line.get("height"),
             "detections": [{k: d[k] for k in _BOX_FIELDS if k in d} for d in line.get("detections") or []],
             **_motion(line)}
            for line in lines if "event" not in line and line.get("status") == 200]


def _motion(line: Line) -> dict[str, Any]:
    """What a line says of motion, for the page's motion overlay: `looked`, `lighting`, and its
    `regions` and `motion` boxes (at most `MOTION_BOXES` each); nothing for a line without them."""
    out: dict[str, Any] = {k: line[k] for k in _MOTION_FIELDS if k in line}
    for key in _MOTION_BOXES:
        if isinstance(line.get(key), list):
            out[key] = line[key][:MOTION_BOXES]
    return out


def _events(lines: Sequence[Line]) -> list[dict[str, Any]]:
    """The counted events of a unit's lines, each with its frame's pts: the page makes their
    thumbnails from the frames it shows (the bridge never decodes for them)."""
    out, pts = [], None
    for line in lines:
        if "event" not in line:
            pts = line.get("pts")
        elif line.get("event") in _COUNTED and line.get("event_id") and pts is not None:
            out.append({"event_id": line["event_id"], "pts": pts})
    return out


@dataclass(slots=True)
class _State:
    up: bool = False
    codec: str | None = None
    width: int | None = None
    height: int | None = None
    lag_s: float | None = None
    dropped: int = 0
    last_error: str | None = None
    reconnect_at: float | None = None
    answers: deque[float] = field(default_factory=lambda: deque(maxlen=4096))


class CameraView:
    """One camera's view. Thread-safe.

    Args:
        name: the camera's name.
    """

    def __init__(self, name: str, pulse: Pulse | None = None) -> None:
        self.name = name
        self._pulse = pulse or Pulse()
        self.camera: Camera | None = None
        self.skipped = 0  # units the view thread was too busy for
        self._lock = threading.Condition()
        self._state = _State()
        self._zones: dict[str, dict[str, int]] = {}
        self._lines: dict[str, dict[str, dict[str, int]]] = {}
        self._events: deque[dict[str, Any]] = deque(maxlen=EVENTS)
        self._fragments: deque[Fragment] = deque(maxlen=RING)
        self._made = 0
        self._work: deque[tuple[Unit, list[Line]]] = deque()
        self._watched_until = 0.0
        self._stills_until = 0.0
        self._still_due = 0.0
        self._thread: threading.Thread | None = None
        self._closed = False

    # What the cameras tell (never waits).

    def released(self, unit: Unit | None, lines: Sequence[Line]) -> None:
        """A unit's lines in order (frames, then their events), and the unit (None: dropped)."""
        now = time.monotonic()
        with self._lock:
            state = self._state
            for line in lines:
                if "event" in line:
                    continue
                if line.get("status") == 200:
                    state.answers.append(now)
                    state.lag_s = float(line.get("latency_ms") or 0) / 1000
                    state.width, state.height = line.get("width"), line.get("height")
                else:
                    state.last_error = scrub(f"{line.get('status')} {line.get('type')}: {line.get('message')}")
            if unit is None or now >= self._watched_until or self._closed:
                return
            if len(self._work) >= WORK:
                self._work.popleft()
                self.skipped += 1
            self._work.append((unit, list(lines)))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"view-{self.name}", daemon=True)
                self._thread.start()
            self._lock.notify_all()

    def event(self, line: Mapping[str, Any]) -> None:
        """One of the camera's event lines."""
        kind = line.get("event")
        with self._lock:
            state = self._state
            if kind == "started":  # a new worker (a start, or a restart by a reload): its metrics start at 0
                self._zones, self._lines = {}, {}
            elif kind == "connected":
                state.up, state.reconnect_at, state.codec = True, None, line.get("codec")
                state.width, state.height = line.get("width"), line.get("height")
            elif kind in ("disconnected", "stopped"):
                state.up = False
                if line.get("reason") and line["reason"] != END_OF_STREAM:  # a looping file's end is no error
                    state.last_error = scrub(str(line["reason"]))
            elif kind == "reconnecting":
                state.reconnect_at = time.monotonic() + float(line.get("delay_s") or 0)
            elif kind == "dropped":
                state.dropped += 1
            elif kind in _COUNTED:
                self._events.appendleft({k: line[k] for k in _EVENT_FIELDS if k in line})

    def zone(self, zone: str, label: str, objects: int) -> None:
        with self._lock:
            self._zones.setdefault(zone, {})[label] = objects

    def crossed(self, line: str, direction: str, label: str) -> None:
        with self._lock:
            counts = self._lines.setdefault(line, {"in": {}, "out": {}}).setdefault(direction, {})
            counts[label] = counts.get(label, 0) + 1

    def zone_removed(self, zone: str) -> None:
        with self._lock:
            self._zones.pop(zone, None)

    # What the page reads.

    def state(self) -> dict[str, Any]:
        """Up, answered fps (the last 5 s), lag, dropped, last error, reconnecting in N s."""
        now = time.monotonic()
        with self._lock:
            s = self._state
            while s.answers and s.answers[0] < now - FPS_WINDOW_S:
                s.answers.popleft()
            reconnect = None if s.up or s.reconnect_at is None else round(max(0.0, s.reconnect_at - now), 1)
            return {"up": s.up, "fps": round(len(s.answers) / FPS_WINDOW_S, 2),
                    "lag_s": None if s.lag_s is None else round(s.lag_s, 3), "dropped": s.dropped,
                    "last_error": s.last_error, "reconnect_in_s": reconnect, "codec": s.codec,
                    "width": s.width, "height": s.height}

    def counts(self) -> dict[str, Any]:
        """Per zone the objects in it now by label; per line crossings `in` and `out` by label."""
        with self._lock:
            return {"zones": {z: dict(labels) for z, labels in self._zones.items()},
                    "lines": {n: {d: dict(c) for d, c in dirs.items()} for n, dirs in self._lines.items()}}

    def events(self) -> list[dict[str, Any]]:
        """The last events (entered, left with dwell, crossed), newest first."""
        with self._lock:
            return list(self._events)

    def next(self, after: int, stills: bool) -> Fragment | None:
        """The first fragment after `after` that a viewer can show (`stills`: the browser cannot
        play the camera's codec), or the newest when it is `BEHIND`; None yet. Asking makes the
        camera watched for `WATCH_S`."""
        kinds = KINDS_STILL if stills else KINDS_PLAYED
        now = time.monotonic()
        with self._lock:
            self._watched_until = max(self._watched_until, now + WATCH_S)
            if stills:
                self._stills_until = now + WATCH_S
            newer = [f for f in self._fragments if f.seq > after and f.kind in kinds]
            if not newer:
                return None
            return newer[-1] if len(newer) > BEHIND or after < 0 else newer[0]

    def watched(self) -> bool:
        return time.monotonic() < self._watched_until

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._pulse.bump()

    # The view thread.

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._work and not self._closed:
                    self._lock.wait()
                if self._closed:
                    return
                unit, lines = self._work.popleft()
            try:
                self._make(unit, lines)
            except Exception as exc:  # a picture must never stop the view
                logger.warning("web view of camera %s: %s: %s", self.name, type(exc).__name__, exc)

    def _make(self, unit: Unit, lines: list[Line]) -> None:
        frames = _frames(lines)
        header = {"session": unit.session, "pts": unit.pts, "frames": frames, "events": _events(lines)}
        made: list[tuple[str, dict[str, Any], bytes]] = []
        if unit.content_type == "image/jpeg":
            made.append(("jpeg", header, unit.body))
        elif unit.preview is not None:
            made.append(("mp4", {**header, "codec": mp4_codec(unit.preview)}, unit.preview))
        now = time.monotonic()
        if unit.content_type != "image/jpeg" and now < self._stills_until and now >= self._still_due:
            self._still_due = now + (self.camera.scene.snapshot_seconds if self.camera else Scene().snapshot_seconds)
            still = _still(unit)
            if still is not None:
                made.append(("still", {**header, "frames": frames[:1]}, still))
        with self._lock:
            for kind, head, payload in made:
                self._made += 1
                self._fragments.append(Fragment.make(self._made, kind, {"camera": self.name, **head}, payload))
        if made:
            self._pulse.bump()


def _still(unit: Unit) -> bytes | None:
    from ingest.analytics.snapshot import first_frame

    image = first_frame(unit)
    if image is None:
        return None
    out = io.BytesIO()
    image.save(out, "JPEG", quality=80)
    return out.getvalue()


class View:
    """Every camera's view: a sink of the results' lines (`ingest.sinks.output`) and a watcher of the
    counts (`ingest.sinks.metrics`), told of every answered unit by the cameras. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._views: dict[str, CameraView] = {}
        self._order: list[str] = []
        self._pulse = Pulse()

    def live(self, wanted: Sequence[tuple[CameraView, int, bool]], timeout: float) -> list[Fragment]:
        """A long poll for many cameras: for each (camera, after, stills) its next fragment
        (`CameraView.next`), as soon as one camera has one; waits up to `timeout` (then [])."""
        deadline = time.monotonic() + timeout
        while True:
            seen = self._pulse.count
            found = [f for camera, after, stills in wanted if (f := camera.next(after, stills)) is not None]
            left = deadline - time.monotonic()
            if found and len(found) < len(wanted) and left > GATHER_S:
                time.sleep(GATHER_S)  # the other cameras' segments are often a moment behind
                found = [f for camera, after, stills in wanted if (f := camera.next(after, stills)) is not None]
            if found or left <= 0:
                return found
            self._pulse.wait(seen, left)

    def configure(self, cameras: Iterable[Camera]) -> None:
        """The cameras running now (after a start or a reload), in the list's order."""
        cameras = list(cameras)
        with self._lock:
            for camera in cameras:
                self._get(camera.name).camera = camera
            names = {c.name for c in cameras}
            for name in [n for n in self._views if n not in names]:
                self._views.pop(name).close()
            self._order = [c.name for c in cameras]

    def _get(self, name: str) -> CameraView:
        view = self._views.get(name)
        if view is None:
            view = self._views[name] = CameraView(name, self._pulse)
        return view

    def camera(self, name: str) -> CameraView | None:
        with self._lock:
            view = self._views.get(name)
            return view if view is not None and view.camera is not None else None

    def cameras(self) -> list[CameraView]:
        with self._lock:
            return [self._views[n] for n in self._order if n in self._views]

    def watched(self, name: str) -> bool:
        view = self._views.get(name)
        return view is not None and view.watched()

    def released(self, name: str, unit: Unit | None, lines: Sequence[Line]) -> None:
        with self._lock:
            view = self._get(name)
        view.released(unit, lines)

    def offer(self, lines: Iterable[tuple[Mapping[str, Any], str]]) -> None:
        for line, _ in lines:
            name = line.get("camera")
            if name and "event" in line:
                with self._lock:
                    view = self._get(name)
                view.event(line)

    def zone(self, camera: str, zone: str, label: str, objects: int) -> None:
        with self._lock:
            view = self._get(camera)
        view.zone(zone, label, objects)

    def crossed(self, camera: str, line: str, direction: str, label: str) -> None:
        with self._lock:
            view = self._get(camera)
        view.crossed(line, direction, label)

    def zone_removed(self, camera: str, zone: str) -> None:
        with self._lock:
            view = self._get(camera)
        view.zone_removed(zone)

    def close(self) -> None:
        with self._lock:
            for view in self._views.values():
                view.close()
