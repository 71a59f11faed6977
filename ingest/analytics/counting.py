"""Zones and lines over one camera's tracks: `entered` / `left` (with dwell) and `crossed` events.

Counting owns its memory (DESIGN section 13): a track's side of each line and its membership of
each zone are kept, keyed by track id, for as long as the tracker keeps the track, whatever the
detector missed in between; they end when the tracker ends the track (`end_tracks`), starts
anew or the camera goes down (`end`). The geometry is supervision's (0.31): its `PolygonZone`
mask decides what is inside a zone (kept as runs over the polygon's box, `ingest.analytics.polygon`:
a zone costs its own size, not the frame's), and its `LineZone` rule which side of a line a box is on.

A line: a box is on a side when every one of the line's anchors (default: the four corners) is
on it and between the line's two ends (perpendicular to it); a box on the line is on neither. A
track's first side seeds it; it crosses when it is on the other side for `min_frames` of its
sightings in a row (frames it is unseen, on the line or past an end neither extend nor break the
run), and is counted then, once, even if it was never seen on the line. `in` is supervision's
`crossed_in`: from the right of the line to its left, looking from `from` to `to` on the picture
(x to the right, y down), e.g. left to right across a line drawn top to bottom.

A zone holds a track from the frame its anchor (default bottom centre) is seen inside to the
frame it is seen outside, or its track ends (then it leaves at its last sighting).

Classes are judged by the label a track has when it counts: a track whose class flips (car to
truck) keeps its sides and its membership; a crossing or an entry is counted only if the label
it has then is one of the shape's `classes`, and events carry that label.

Each zone and line is judged on its own: one that fails (a bug) leaves its state as it was, and
the others' events and state are unaffected; the failure goes to `failed`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ingest.analytics.polygon import Region
from ingest.analytics.scene import Anchor, Line, Zone

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Tracked:
    """One tracked box of a frame: `box` (x1, y1, x2, y2) in frame pixels."""

    track_id: int
    box: tuple[float, float, float, float]
    label: str
    class_id: int | None = None

    def matches(self, classes: frozenset[str]) -> bool:
        return not classes or self.label in classes or str(self.class_id) in classes


@dataclass(slots=True)
class _Member:
    """A track in a zone: its label, when it came in and was last seen (stream seconds), and
    that sighting's capture time."""

    label: str
    entered: float
    seen: float
    seen_capture: float


@dataclass(slots=True)
class _Side:
    """A track's place relative to a line: the side it was last confirmed on (True: the `in`
    side) and its sightings in a row on the other one."""

    confirmed: bool
    run: int = 0


Event = dict[str, Any]
Bools = npt.NDArray[np.bool_]
#: metrics sinks: zone gauge (zone, label, objects) and line counter (line, direction, label)
ZoneGauge = Callable[[str, str, int], None]
LineCounter = Callable[[str, str, str], None]
#: told of a zone or line that failed on a frame: ("zone" or "line", its name, the error)
Failed = Callable[[str, str, Exception], None]


def _every(values: Bools) -> Bools:
    """`[n, k]` -> `[n]`: all of each row."""
    return cast(Bools, values.all(axis=1))


Floats = npt.NDArray[np.float64]


def _anchor_matrix(anchors: Sequence[Anchor]) -> Floats:
    """`[4, 2k]`: boxes `[n, 4]` times it are their anchors, x of each then y of each (an anchor
    is a fixed mix of a box's corners)."""
    k = len(anchors)
    matrix = np.zeros((4, 2 * k))
    for j, anchor in enumerate(anchors):
        fx, fy = anchor.fraction
        matrix[0, j], matrix[2, j] = 1 - fx, fx
        matrix[1, k + j], matrix[3, k + j] = 1 - fy, fy
    return matrix


@dataclass(slots=True)
class _ZoneState:
    zone: Zone
    members: dict[int, _Member] = field(default_factory=dict)
    shown: Counter[str] = field(default_factory=Counter)  # what the gauges say now
    sized: tuple[tuple[int, int], Region, Floats] | None = None  # the frame size it is for, its pixels, anchors

    def inside(self, boxes: Floats, size: tuple[int, int]) -> Bools:
        """Whether every anchor of each box is inside the polygon: supervision's `PolygonZone`
        mask at the anchor's nearest pixel (off the mask: outside), kept at the cost of the
        polygon's outline (`ingest.analytics.polygon`), not of the frame."""
        k = len(self.zone.anchors)
        if self.sized is None or self.sized[0] != size:
            points = np.round(np.array(self.zone.polygon.pixels(*size))).astype(np.int64)
            # x and y of each anchor in turn: boxes `[n, 4]` times it are `[n, 2k]`, a view of `[n k, 2]` points
            anchors = _anchor_matrix(self.zone.anchors)[:, [c for j in range(k) for c in (j, k + j)]]
            self.sized = (size, Region(points), anchors)
        _, region, anchors = self.sized
        return _every(region.inside((boxes @ anchors).reshape(-1, 2)).reshape(-1, k))


@dataclass(slots=True)
class _LineState:
    line: Line
    sides: dict[int, _Side] = field(default_factory=dict)
    sized: tuple[tuple[int, int], Floats, Floats, float] | None = None  # size, weights, bias, |d|^2

    def sides_of(self, boxes: Floats, size: tuple[int, int]) -> tuple[Bools, Bools]:
        """(on a side, on the `in` side) of each box: all anchors between the line's ends and on
        one side (supervision's `LineZone` rule: the cross product of the line (`from` to `to`)
        and the anchor is negative on the `in` side)."""
        if self.sized is None or self.sized[0] != size:
            (x1, y1), (x2, y2) = self.line.segment.pixels(*size)
            dx, dy = x2 - x1, y2 - y1
            k = len(self.line.anchors)
            anchors = _anchor_matrix(self.line.anchors)  # -> x of each anchor, then y
            # Both tests are linear in the anchors, so in the box: cross = dx (y - y1) - dy (x - x1),
            # along = dx (x - x1) + dy (y - y1), one product for both.
            weights = np.concatenate([dx * anchors[:, k:] - dy * anchors[:, :k], dx * anchors[:, :k] + dy * anchors[:, k:]],
                                     axis=1)
            bias = np.concatenate([np.full(k, dy * x1 - dx * y1), np.full(k, -dx * x1 - dy * y1)])
            self.sized = (size, weights, bias, dx * dx + dy * dy)
        _, weights, bias, length2 = self.sized
        k = len(self.line.anchors)
        values = boxes @ weights + bias
        cross, along = values[:, :k], values[:, k:]
        between = _every((along >= 0) & (along <= length2))
        left = cross < 0
        inward, outward = _every(left), _every(~left)
        return between & (inward | outward), inward


class Counting:
    """The zones and lines of one camera; fed each answered frame's tracks in capture order.

    Args:
        zones: the camera's zones.
        lines: the camera's lines.
        zone_gauge: sets the objects of a zone and label (called on a change only).
        line_counter: counts one crossing of a line, direction and label.
        failed: told of a zone or line that failed on a frame (its state stays as it was).
    """

    def __init__(self, zones: Sequence[Zone], lines: Sequence[Line], zone_gauge: ZoneGauge = lambda *_: None,
                 line_counter: LineCounter = lambda *_: None, failed: Failed | None = None) -> None:
        self._zones = [_ZoneState(z) for z in zones]
        self._lines = [_LineState(line) for line in lines]
        self._gauge = zone_gauge
        self._count = line_counter
        self._failed = failed or _log_failure

    def reconfigure(self, zones: Sequence[Zone], lines: Sequence[Line]) -> list[str]:
        """New zones and lines, matched to the old by name: a zone keeps its members (judged
        again where they are next seen), a line its tracks' sides unless it moved (its ends or
        anchors changed: the sides start anew). Returns the names of the zones gone (their
        gauges are to be removed)."""
        zone_states = {s.zone.name: s for s in self._zones}
        line_states = {s.line.name: s for s in self._lines}
        self._zones = []
        for zone in zones:
            state = zone_states.pop(zone.name, None) or _ZoneState(zone)
            if state.zone != zone:
                state.zone, state.sized = zone, None
            self._zones.append(state)
        self._lines = []
        for line in lines:
            old = line_states.get(line.name)
            if old is None or (old.line.segment, old.line.anchors) != (line.segment, line.anchors):
                old = _LineState(line)  # a moved line: the tracks' sides of the old one mean nothing
            old.line = line
            self._lines.append(old)
        return list(zone_states)

    def frame(self, tracked: Sequence[Tracked], size: tuple[int, int], capture_time: float,
              seconds: float | None = None) -> list[Event]:
        """The events of one answered frame (`size`: width, height), in zone then line order.

        Args:
            tracked: the frame's tracked (confirmed) boxes.
            size: the frame's width and height.
            capture_time: stamped on the events.
            seconds: the frame's stream time (default `capture_time`), the tracker's clock: a
                member's dwell is judged on it.
        """
        if not tracked:
            return []
        now = capture_time if seconds is None else seconds
        boxes = np.array([t.box for t in tracked], dtype=np.float64)
        events: list[Event] = []
        for state in self._zones:
            try:
                events += self._zone(state, tracked, boxes, size, now, capture_time)
            except Exception as exc:
                self._failed("zone", state.zone.name, exc)
        for line_state in self._lines:
            try:
                events += self._line(line_state, tracked, boxes, size, capture_time)
            except Exception as exc:
                self._failed("line", line_state.line.name, exc)
        return events

    def end_tracks(self, track_ids: Sequence[int]) -> list[Event]:
        """These tracks ended (the tracker ended them): they leave their zones at their last
        sighting, and their sides of lines are forgotten."""
        if not track_ids:
            return []
        events = []
        for state in self._zones:
            gone = [(t, state.members.pop(t)) for t in sorted(track_ids) if t in state.members]
            events += [_left(state.zone, t, member) for t, member in gone]
            if gone:
                self._show(state)
        for line_state in self._lines:
            for t in track_ids:
                line_state.sides.pop(t, None)
        return events

    def end(self) -> list[Event]:
        """Every track ended (the tracker started anew, the camera went down): every member
        leaves at its last sighting, every side is forgotten, the gauges go to 0."""
        events = []
        for state in self._zones:
            events += [_left(state.zone, t, member) for t, member in sorted(state.members.items())]
            state.members.clear()
            self._show(state)
        for line_state in self._lines:
            line_state.sides.clear()
        return events

    def _zone(self, state: _ZoneState, tracked: Sequence[Tracked], boxes: npt.NDArray[np.float64],
              size: tuple[int, int], now: float, capture_time: float) -> list[Event]:
        inside = state.inside(boxes, size).tolist()
        came: list[tuple[int, _Member]] = []
        went: list[int] = []
        seen: list[tuple[_Member, str]] = []
        events = []
        for t, is_in in zip(tracked, inside):
            member = state.members.get(t.track_id)
            if member is not None:
                seen.append((member, t.label))
                if not is_in:
                    went.append(t.track_id)
            elif is_in and t.matches(state.zone.classes):
                came.append((t.track_id, _Member(t.label, now, now, capture_time)))
                events.append({"event": "entered", "zone": state.zone.name, "track_id": t.track_id, "label": t.label,
                               "capture_time": capture_time})
        # Everything judged: now the state changes.
        for member, label in seen:
            member.seen, member.seen_capture, member.label = now, capture_time, label
        for track_id in went:
            events.append(_left(state.zone, track_id, state.members.pop(track_id)))
        state.members.update(came)
        if came or went or seen:
            self._show(state)
        return events

    def _show(self, state: _ZoneState) -> None:
        counts = Counter(m.label for m in state.members.values())
        for label in state.shown.keys() | counts.keys():
            if state.shown.get(label) != counts.get(label, 0):
                self._gauge(state.zone.name, label, counts.get(label, 0))
                state.shown[label] = counts.get(label, 0)

    def _line(self, state: _LineState, tracked: Sequence[Tracked], boxes: npt.NDArray[np.float64],
              size: tuple[int, int], capture_time: float) -> list[Event]:
        on_side, inward = state.sides_of(boxes, size)
        changes: list[tuple[int, _Side]] = []
        events = []
        for i in np.flatnonzero(on_side).tolist():
            t, side = tracked[i], bool(inward[i])
            known = state.sides.get(t.track_id)
            if known is None:
                changes.append((t.track_id, _Side(side)))
            elif side == known.confirmed:
                if known.run:
                    changes.append((t.track_id, _Side(side)))
            elif known.run + 1 < state.line.min_frames:
                changes.append((t.track_id, _Side(known.confirmed, known.run + 1)))
            else:
                changes.append((t.track_id, _Side(side)))
                if t.matches(state.line.classes):
                    direction = "in" if side else "out"
                    events.append({"event": "crossed", "line": state.line.name, "track_id": t.track_id,
                                   "label": t.label, "direction": direction, "capture_time": capture_time})
        state.sides.update(changes)
        for event in events:
            self._count(state.line.name, event["direction"], event["label"])
        return events


def _left(zone: Zone, track_id: int, member: _Member) -> Event:
    return {"event": "left", "zone": zone.name, "track_id": track_id, "label": member.label,
            "capture_time": member.seen_capture, "dwell_s": round(member.seen - member.entered, 6)}


def _log_failure(kind: str, name: str, exc: Exception) -> None:
    logger.error("%s %r failed on a frame (its state is kept as it was): %s: %s", kind, name, type(exc).__name__, exc)
