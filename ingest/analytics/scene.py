"""What a camera looks for in its detections: tracking, zones and lines (docs/ingest.md, "Tracks").

    cameras:
      - name: door-1
        url: rtsp://door-1.example/stream1
        track: true
        zones: [{name: door, polygon: [[0.1, 0.2], [0.4, 0.2], [0.4, 0.9], [0.1, 0.9]], classes: [person]}]
        lines: [{name: gate, from: [0.5, 0], to: [0.5, 1], classes: [car, truck]}]

A shape whose coordinates all lie within 0 to 1 is in fractions of the frame (it follows a
resolution change); any coordinate above 1 makes it frame pixels. Read by `ingest.config`; a
change of these settings applies to the running camera without reconnecting it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

NAME_CHARS = "letters, digits, `_`, `.` or `-`"


class Anchor(enum.Enum):
    """The point of a box that decides where it is (supervision's `Position`)."""

    CENTER = "center"
    BOTTOM_CENTER = "bottom_center"
    TOP_CENTER = "top_center"
    CENTER_LEFT = "center_left"
    CENTER_RIGHT = "center_right"
    TOP_LEFT = "top_left"
    TOP_RIGHT = "top_right"
    BOTTOM_LEFT = "bottom_left"
    BOTTOM_RIGHT = "bottom_right"

    @property
    def fraction(self) -> tuple[float, float]:
        """Where it lies in a box, as fractions of its width and height from the top left."""
        return _FRACTIONS[self]


_FRACTIONS = {Anchor.CENTER: (0.5, 0.5), Anchor.BOTTOM_CENTER: (0.5, 1.0), Anchor.TOP_CENTER: (0.5, 0.0),
              Anchor.CENTER_LEFT: (0.0, 0.5), Anchor.CENTER_RIGHT: (1.0, 0.5), Anchor.TOP_LEFT: (0.0, 0.0),
              Anchor.TOP_RIGHT: (1.0, 0.0), Anchor.BOTTOM_LEFT: (0.0, 1.0), Anchor.BOTTOM_RIGHT: (1.0, 1.0)}


#: A line's default: all four corners must have crossed (supervision's LineZone default).
CORNERS = (Anchor.TOP_LEFT, Anchor.TOP_RIGHT, Anchor.BOTTOM_LEFT, Anchor.BOTTOM_RIGHT)

Point = tuple[float, float]
#: No frame is wider or taller (the handler's own limit is lower): a coordinate past it is a typo.
MAX_PIXELS = 16384
#: A camera's zones and lines, each at most: every one is judged on every frame (docs/ingest.md).
MAX_SHAPES = 64


@dataclass(frozen=True, slots=True)
class Shape:
    """Points in fractions of the frame (`fractions`) or in frame pixels."""

    points: tuple[Point, ...]
    fractions: bool

    def pixels(self, width: int, height: int) -> tuple[Point, ...]:
        """The points in pixels of a `width` x `height` frame."""
        if not self.fractions:
            return self.points
        return tuple((x * width, y * height) for x, y in self.points)


@dataclass(frozen=True, slots=True)
class Zone:
    """A polygon: tracks whose anchor is inside are in it (`entered`, `left`, dwell).

    Attributes:
        name: the events' `zone` and the metrics' label.
        polygon: three or more points.
        classes: labels (or class ids) that count; empty: every class.
        anchors: every one of them must be inside.
    """

    name: str
    polygon: Shape
    classes: frozenset[str] = frozenset()
    anchors: tuple[Anchor, ...] = (Anchor.BOTTOM_CENTER,)


@dataclass(frozen=True, slots=True)
class Line:
    """A segment that tracks cross (`crossed`, direction `in` or `out`).

    Attributes:
        name: the events' `line` and the metrics' label.
        segment: its two points, `from` then `to`.
        classes: labels (or class ids) that count; empty: every class.
        anchors: all of them must be on the new side (a box on the line is on neither).
        min_frames: frames in a row on the new side before a crossing counts (hysteresis).
    """

    name: str
    segment: Shape
    classes: frozenset[str] = frozenset()
    anchors: tuple[Anchor, ...] = CORNERS
    min_frames: int = 1


@dataclass(frozen=True, slots=True)
class Scene:
    """A camera's tracking, zones and lines.

    Attributes:
        track: run a tracker over the camera's detections.
        track_threshold: boxes scoring at least this start tracks and are matched first (ByteTrack's
            high-score boxes); lower ones only keep tracks alive (its second association).
        display_threshold: tracked boxes scoring below it are followed but not written.
        lost_track_seconds: a track unseen this long ends.
        zones: the camera's zones.
        lines: the camera's lines.
        snapshot_seconds: how often `--snapshot DIR` writes the camera's picture.
    """

    track: bool = False
    track_threshold: float = 0.5
    display_threshold: float = 0.25
    lost_track_seconds: float = 1.0
    zones: tuple[Zone, ...] = ()
    lines: tuple[Line, ...] = ()
    snapshot_seconds: float = 10.0


KEYS = tuple(f.name for f in fields(Scene))


class SceneError(ValueError):
    """A bad scene setting; the message names the field and the fix (the caller adds the camera)."""


def parse(settings: Mapping[str, Any]) -> Scene:
    """The scene of a camera's merged settings (only the keys of `KEYS` are read).

    Raises:
        SceneError: naming the setting, the value and the fix.
    """
    values: dict[str, Any] = {}
    if "track" in settings:
        if not isinstance(settings["track"], bool):
            raise SceneError(f"track = {settings['track']!r}: use true or false")
        values["track"] = settings["track"]
    for key, low, high in (("track_threshold", 0.0, 1.0), ("display_threshold", 0.0, 1.0), ("lost_track_seconds", 0.0, 3600.0),
                           ("snapshot_seconds", 0.0, 86400.0)):
        if key in settings:
            values[key] = _number(key, settings[key], low, high)
    values["zones"] = _named(settings.get("zones"), "zones", _zone)
    values["lines"] = _named(settings.get("lines"), "lines", _line)
    scene = Scene(**values)
    if (scene.zones or scene.lines) and not scene.track:
        raise SceneError("zones and lines follow tracks: add `track: true` to the camera (or its defaults)")
    return scene


def _number(key: str, raw: Any, low: float, high: float) -> float:
    closed = key.endswith("_threshold")  # 0: every box
    if (isinstance(raw, bool) or not isinstance(raw, (int, float))
            or not (low <= raw if closed else low < raw) or raw > high):
        above = f"from {low:g}" if closed else f"above {low:g}"
        raise SceneError(f"{key} = {raw!r}: use a number {above} to {high:g}")
    return float(raw)


_JOIN = {"zones": ", or join neighbouring zones that count the same classes into one polygon"}


def _named(raw: Any, key: str, build: Callable[[Mapping[str, Any], str], Any]) -> tuple[Any, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SceneError(f"{key} must be a list of mappings, each with a `name`")
    if len(raw) > MAX_SHAPES:
        raise SceneError(f"{key}: {len(raw)} given, a camera takes at most {MAX_SHAPES} (each is judged on every "
                         f"frame): remove the {key} not needed{_JOIN.get(key, '')}")
    built, names = [], set()
    for i, entry in enumerate(raw):
        where = f"{key}[{i}]"
        if not isinstance(entry, Mapping):
            raise SceneError(f"{where}: write a mapping with `name` and its points")
        name = entry.get("name")
        if not isinstance(name, str) or not name or len(name) > 63 or not all(c.isalnum() or c in "_.-" for c in name):
            raise SceneError(f"{where}: name = {name!r}: use 1 to 63 {NAME_CHARS}")
        if name in names:
            raise SceneError(f"{where}: name {name!r} is used twice: give each its own name")
        names.add(name)
        built.append(build(entry, f"{key[:-1]} {name!r}"))
    return tuple(built)


def _zone(entry: Mapping[str, Any], where: str) -> Zone:
    _known(entry, where, ("name", "polygon", "classes", "anchor"))
    polygon = _shape(entry.get("polygon"), f"{where}: polygon", 3, None)
    if _area(polygon.points) <= (1e-9 if polygon.fractions else 1e-3):
        raise SceneError(f"{where}: polygon {[list(p) for p in polygon.points]} has no area (its points are on "
                         "one line): give three or more corners that enclose the zone")
    anchor = _anchors(entry.get("anchor", Anchor.BOTTOM_CENTER.value), where, "anchor")
    return Zone(entry["name"], polygon, _classes(entry.get("classes"), where), anchor)


def _line(entry: Mapping[str, Any], where: str) -> Line:
    _known(entry, where, ("name", "from", "to", "classes", "anchors", "min_frames"))
    if "from" not in entry or "to" not in entry:
        raise SceneError(f"{where}: give `from: [x, y]` and `to: [x, y]`")
    segment = _shape([entry["from"], entry["to"]], f"{where}: from/to", 2, 2)
    if segment.points[0] == segment.points[1]:
        raise SceneError(f"{where}: `from` and `to` are the same point: a line of zero length counts nothing; "
                         "give it two ends")
    anchors = _anchors(entry["anchors"], where, "anchors") if "anchors" in entry else CORNERS
    min_frames = entry.get("min_frames", 1)
    if isinstance(min_frames, bool) or not isinstance(min_frames, int) or not 1 <= min_frames <= 1000:
        raise SceneError(f"{where}: min_frames = {min_frames!r}: use a whole number from 1 to 1000")
    return Line(entry["name"], segment, _classes(entry.get("classes"), where), anchors, min_frames)


def _known(entry: Mapping[str, Any], where: str, keys: tuple[str, ...]) -> None:
    unknown = set(entry) - set(keys)
    if unknown:
        raise SceneError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}: use {', '.join(keys)}")


def _shape(raw: Any, where: str, least: int, most: int | None) -> Shape:
    count = f"{least}" if most == least else f"at least {least}"
    if not isinstance(raw, list) or not least <= len(raw) <= (most or len(raw)):
        raise SceneError(f"{where}: give {count} points [x, y], in pixels or fractions of the frame")
    points = []
    for point in raw:
        if (not isinstance(point, list) or len(point) != 2
                or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in point)):
            raise SceneError(f"{where}: {point!r} is not a point: write [x, y] with two numbers")
        if not all(math.isfinite(v) and 0 <= v <= MAX_PIXELS for v in point):
            raise SceneError(f"{where}: {point!r} is off any frame: write coordinates from 0 to 1 (fractions of "
                             f"the frame) or from 0 to {MAX_PIXELS} (pixels)")
        points.append((float(point[0]), float(point[1])))
    values = [v for p in points for v in p]
    fractions = all(v <= 1 for v in values)
    mixed = [v for v in values if 0 < v < 1]
    if not fractions and mixed:
        raise SceneError(f"{where}: {mixed[0]:g} is a fraction of the frame but {max(values):g} is pixels: write "
                         "every point of the shape in fractions (0 to 1) or every one in pixels")
    return Shape(tuple(points), fractions)


def _area(points: tuple[Point, ...]) -> float:
    """The polygon's area (shoelace), in the squared units of its points."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return abs(sum(xs[i] * ys[i - 1] - xs[i - 1] * ys[i] for i in range(len(points)))) / 2


def _anchors(raw: Any, where: str, key: str) -> tuple[Anchor, ...]:
    names = raw if isinstance(raw, list) else [raw]
    choices = ", ".join(a.value for a in Anchor)
    if not names:
        raise SceneError(f"{where}: {key} = []: name at least one of {choices}")
    try:
        return tuple(Anchor(str(n).lower()) for n in names)
    except ValueError:
        raise SceneError(f"{where}: {key} = {raw!r}: use {choices}") from None


def _classes(raw: Any, where: str) -> frozenset[str]:
    if raw is None:
        return frozenset()
    if not isinstance(raw, list) or not raw or any(isinstance(c, bool) or not isinstance(c, (str, int)) for c in raw):
        raise SceneError(f"{where}: classes = {raw!r}: give a list of labels (or class ids), e.g. [person, car]")
    return frozenset(str(c) for c in raw)
