"""Zones and lines over one camera's tracks: `entered` / `left` (with dwell) and `crossed` events.

A line counts as supervision's `LineZone` does (it does the counting): a track crosses when all
of the line's anchors of its box (default: the four corners) are on the other side of the line
from the side it was last confirmed on, for `min_frames` frames in a row; a box on the line is on
neither side, and only boxes between the line's two ends (perpendicular to it) count. Direction
`in` is supervision's `crossed_in`: from the right of the line to its left, looking from `from`
to `to` on the picture (x to the right, y down), e.g. left to right across a line drawn top to
bottom. A zone holds a track while its anchor (default bottom centre, supervision's
`PolygonZone`) is inside the polygon; a track that ends inside (unseen for the tracker's
`lost_track_seconds`, or the tracker reset) leaves it then.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ingest.scene import Anchor, Line, Zone

if TYPE_CHECKING:
    import supervision as sv


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
    """A track in a zone: when it came in and was last seen (stream seconds), and that sighting's
    capture time."""

    label: str
    entered: float
    seen: float
    seen_capture: float


@dataclass(slots=True)
class _ZoneState:
    zone: Zone
    members: dict[int, _Member] = field(default_factory=dict)
    sized: tuple[tuple[int, int], sv.PolygonZone] | None = None


@dataclass(slots=True)
class _LineState:
    line: Line
    sized: tuple[tuple[int, int], sv.LineZone] | None = None


Event = dict[str, Any]
#: metrics sinks: zone gauge (zone, label, objects) and line counter (line, direction, label)
ZoneGauge = Callable[[str, str, int], None]
LineCounter = Callable[[str, str, str], None]


class Counting:
    """The zones and lines of one camera; fed each answered frame's tracks in capture order.

    Args:
        zones: the camera's zones.
        lines: the camera's lines.
        lost_track_seconds: a member unseen this long has left (its track ended).
        zone_gauge: sets the objects of a zone and label.
        line_counter: counts one crossing of a line, direction and label.
    """

    def __init__(self, zones: Sequence[Zone], lines: Sequence[Line], lost_track_seconds: float,
                 zone_gauge: ZoneGauge = lambda *_: None, line_counter: LineCounter = lambda *_: None) -> None:
        self._zones = [_ZoneState(z) for z in zones]
        self._lines = [_LineState(line) for line in lines]
        self._lost_s = lost_track_seconds
        self._gauge = zone_gauge
        self._count = line_counter
        self._shown: dict[str, set[str]] = {}  # zone -> labels whose gauge was set

    def reconfigure(self, zones: Sequence[Zone], lines: Sequence[Line], lost_track_seconds: float) -> list[str]:
        """New zones and lines: unchanged ones keep their members and crossing states; returns
        the names of the zones gone (their gauges are to be removed)."""
        zone_states = {s.zone: s for s in self._zones}
        line_states = {s.line: s for s in self._lines}
        self._zones = [zone_states.get(z) or _ZoneState(z) for z in zones]
        self._lines = [line_states.get(line) or _LineState(line) for line in lines]
        self._lost_s = lost_track_seconds
        kept = {z.name for z in zones}
        gone = [name for name in self._shown if name not in kept]
        for name in gone:
            del self._shown[name]
        for state in self._zones:  # a zone whose polygon moved is counted from the next frame
            self._shown.setdefault(state.zone.name, set())
        return gone

    def frame(self, tracked: Sequence[Tracked], size: tuple[int, int], capture_time: float,
              seconds: float | None = None) -> list[Event]:
        """The events of one answered frame (`size`: width, height), in zone then line order.

        Args:
            tracked: the frame's tracked boxes.
            size: the frame's width and height.
            capture_time: stamped on the events.
            seconds: the frame's stream time (default `capture_time`), the tracker's clock:
                dwell and a member's end are judged on it.
        """
        events: list[Event] = []
        now = capture_time if seconds is None else seconds
        for state in self._zones:
            events += self._zone(state, tracked, size, now, capture_time)
        for line_state in self._lines:
            events += self._line(line_state, tracked, size, capture_time)
        return events

    def end(self) -> list[Event]:
        """Every track ended (the tracker was reset): members leave at their last sighting."""
        events = []
        for state in self._zones:
            for track_id, member in sorted(state.members.items()):
                events.append(_left(state.zone, track_id, member))
            state.members.clear()
            self._show(state)
        for line_state in self._lines:
            line_state.sized = None  # crossing states belong to the tracks that ended
        return events

    def _zone(self, state: _ZoneState, tracked: Sequence[Tracked], size: tuple[int, int], now: float,
              capture_time: float) -> list[Event]:
        mine = [t for t in tracked if t.matches(state.zone.classes)]
        inside = _polygon(state, size).trigger(_detections(mine)) if mine else np.zeros(0, bool)
        events = []
        present = set()
        for t, is_in in zip(mine, inside):
            present.add(t.track_id)
            member = state.members.get(t.track_id)
            if is_in and member is None:
                state.members[t.track_id] = _Member(t.label, now, now, capture_time)
                events.append({"event": "entered", "zone": state.zone.name, "track_id": t.track_id, "label": t.label,
                               "capture_time": capture_time})
            elif member is not None:
                member.seen, member.seen_capture = now, capture_time
                if not is_in:
                    del state.members[t.track_id]
                    events.append(_left(state.zone, t.track_id, member))
        for track_id, member in sorted(state.members.items()):
            if track_id not in present and now - member.seen > self._lost_s:
                del state.members[track_id]
                events.append(_left(state.zone, track_id, member))
        self._show(state)
        return events

    def _show(self, state: _ZoneState) -> None:
        counts = Counter(m.label for m in state.members.values())
        shown = self._shown.setdefault(state.zone.name, set())
        for label in shown | set(counts):
            self._gauge(state.zone.name, label, counts.get(label, 0))
        shown |= set(counts)

    def _line(self, state: _LineState, tracked: Sequence[Tracked], size: tuple[int, int],
              capture_time: float) -> list[Event]:
        mine = [t for t in tracked if t.matches(state.line.classes)]
        zone = _segment(state, size)
        crossed_in, crossed_out = zone.trigger(_detections(mine))
        events = []
        for t, came_in, went_out in zip(mine, crossed_in, crossed_out):
            if came_in or went_out:
                direction = "in" if came_in else "out"
                self._count(state.line.name, direction, t.label)
                events.append({"event": "crossed", "line": state.line.name, "track_id": t.track_id,
                               "label": t.label, "direction": direction, "capture_time": capture_time})
        return events


def _left(zone: Zone, track_id: int, member: _Member) -> Event:
    return {"event": "left", "zone": zone.name, "track_id": track_id, "label": member.label,
            "capture_time": member.seen_capture, "dwell_s": round(member.seen - member.entered, 6)}


def _positions(anchors: Sequence[Anchor]) -> list[sv.Position]:
    import supervision as sv

    return [sv.Position[a.name] for a in anchors]


def _polygon(state: _ZoneState, size: tuple[int, int]) -> sv.PolygonZone:
    import supervision as sv

    if state.sized is None or state.sized[0] != size:
        points = np.round(np.array(state.zone.polygon.pixels(*size))).astype(np.int64)
        state.sized = (size, sv.PolygonZone(points, triggering_anchors=_positions(state.zone.anchors)))
    return state.sized[1]


def _segment(state: _LineState, size: tuple[int, int]) -> sv.LineZone:
    """The line in this size's pixels (a new size is a new tracker: crossing states start anew)."""
    import supervision as sv

    if state.sized is None or state.sized[0] != size:
        (x1, y1), (x2, y2) = state.line.segment.pixels(*size)
        state.sized = (size, sv.LineZone(sv.Point(x1, y1), sv.Point(x2, y2),
                                         triggering_anchors=_positions(state.line.anchors),
                                         minimum_crossing_threshold=state.line.min_frames))
    return state.sized[1]


def _detections(tracked: Sequence[Tracked]) -> sv.Detections:
    import supervision as sv

    if not tracked:
        return sv.Detections.empty()
    return sv.Detections(xyxy=np.array([t.box for t in tracked], dtype=np.float64),
                         tracker_id=np.array([t.track_id for t in tracked], dtype=np.int64))
