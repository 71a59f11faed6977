"""Motion first (issue 48) on the scripted scene of tests/scenes.py: a camera whose frames the model
looks at only where something moved (and whole every so often) gets exactly the track ids, events
and dwell of one whose every frame is looked at whole; a box standing unlooked at for a minute
keeps its id and its dwell; a box that vanished while nothing moved ends `lost_track_seconds`
after the next look; lines without `looked` are tracked as ever."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable

from prometheus_client import generate_latest

from ingest.analytics import scene
from ingest.analytics.analyse import Analytics
from ingest.cameras.units import Unit
from ingest.sinks.metrics import Metrics
from tests import scenes
from tests.e2e.tracks import STEADY_FILE_TALLY
from tsutil import prom

W, H = 320, 192  # tests/e2e/tracks.py's SMALL
FRAMES = 301  # the scene's 300 frames and one more of red standing in the door: frame 300, a full look
PAD = 2  # pixels a mover's region has around its boxes before and after the move
CLASSES = {"red": 0, "green": 1, "blue": 2}
SCENE = scene.parse({"track": True, "zones": [{"name": "door", "polygon": scenes.DOOR}],
                     "lines": [{"name": "gate", **scenes.GATE, "classes": ["red"]}]})

Box = tuple[int, int, int, int]
Line = dict
#: name -> its centre (fractions of the frame) at frame n, or None where it is not in the frame
Paths = dict[str, Callable[[int], tuple[float, float] | None]]

#: The scripted scene (red and blue moving in step, holding in step) and green parked in the door
#: (below red, above blue): in a frame where they move, green lies outside every region.
STEADY: Paths = {"red": lambda n: scenes.centre("red", n), "blue": lambda n: scenes.centre("blue", n),
                 "green": lambda n: (0.15, 0.55)}


def pixels(centre: tuple[float, float]) -> Box:
    """The box of `scenes.BOX` around `centre`, in pixels, as `scenes.frame` draws it."""
    cx, cy = centre
    return (round((cx - scenes.BOX[0] / 2) * W), round((cy - scenes.BOX[1] / 2) * H),
            round((cx + scenes.BOX[0] / 2) * W), round((cy + scenes.BOX[1] / 2) * H))


def boxes(paths: Paths, n: int) -> dict[str, Box]:
    return {name: pixels(c) for name, path in paths.items() if n >= 0 and (c := path(n)) is not None}


def detection(name: str, box: Box) -> dict:
    return {"box": [float(v) for v in box], "score": 0.9, "class_id": CLASSES[name], "label": name}


def base(n: int) -> Line:
    return {"camera": "c", "segment": n, "pts": round(n / scenes.FPS, 6), "capture_time": round(1000 + n / scenes.FPS, 6),
            "status": 200, "width": W, "height": H}


def whole(paths: Paths, n: int) -> Line:
    """Frame n answered as today (motion off): every box detected, no `looked`."""
    return {**base(n), "detections": [detection(name, box) for name, box in boxes(paths, n).items()]}


def inside(box: Box, region: list[int]) -> bool:
    return region[0] <= box[0] and region[1] <= box[1] and box[2] <= region[2] and box[3] <= region[3]


def by_motion(paths: Paths, n: int, full: Callable[[int], bool]) -> Line:
    """Frame n as the handler answers it with motion on: looked at whole when `full(n)`, else at
    a region around each box that moved since frame n-1 (or appeared; one that vanished leaves no
    motion), else not looked at (`looked: false`, no `detections`)."""
    now, before = boxes(paths, n), boxes(paths, n - 1)
    motion = [[min(a[0], b[0]) - PAD, min(a[1], b[1]) - PAD, max(a[2], b[2]) + PAD, max(a[3], b[3]) + PAD]
              for name, b in now.items() if (a := before.get(name, b)) != b or name not in before]
    if full(n):
        return {**whole(paths, n), "looked": True, "regions": [[0, 0, W, H]], "motion": motion}
    if not motion:
        return {**base(n), "looked": False, "regions": [], "motion": []}
    seen = [name for name, box in now.items() if any(inside(box, r) for r in motion)]
    # The scene keeps clear of the regions: a box partly inside one would be seen cut.
    assert all(not (box[0] < r[2] and r[0] < box[2] and box[1] < r[3] and r[1] < box[3])
               for name, box in now.items() if name not in seen for r in motion), n
    return {**base(n), "looked": True, "regions": motion, "motion": motion,
            "detections": [detection(name, now[name]) for name in seen]}


def start_and_every(frames: int) -> Callable[[int], bool]:
    """A full look at a stream's first two frames (a track's id takes two looks: what stands still
    at the start gets it at once) and every `frames` frames."""
    return lambda n: n < 2 or n % frames == 0


def run(lines: Iterable[Line], settings: scene.Scene = SCENE, end: bool = True) -> tuple[list[Line], Metrics]:
    """The lines through one camera's `Analytics`, in order (then the camera going down, `end`)."""
    metrics = Metrics()
    analytics = Analytics("c", settings, metrics)
    out: list[Line] = []
    for line in lines:
        unit = Unit(line["segment"], b"", "image/jpeg", line["capture_time"], line["pts"], 1, session=1)
        out += analytics.release(unit, [line], 0.0)
    return (out + analytics.end(0.0) if end else out), metrics


def events(out: list[Line]) -> list[Line]:
    return [e for e in out if "event" in e]


def tally(out: list[Line]) -> Counter:
    """(event, zone or line, label, direction) -> how many (tests/e2e/tracks.py's tally)."""
    return Counter((e["event"], e.get("zone") or e.get("line"), e["label"], e.get("direction")) for e in events(out))


def ids(out: list[Line]) -> dict[str, set[int]]:
    """label -> the track ids its boxes were written with."""
    found: dict[str, set[int]] = {}
    for line in out:
        for d in line.get("detections") or []:
            found.setdefault(d["label"], set()).add(d["track_id"])
    return found


def dwells(out: list[Line]) -> list[tuple[int, str, float, float]]:
    """(track, label, dwell, last sighting) of each `left`, in order."""
    return [(e["track_id"], e["label"], e["dwell_s"], e["capture_time"]) for e in events(out) if e["event"] == "left"]


def frame_before(out: list[Line], event: Line) -> int:
    """The frame whose line `event` follows."""
    return [line for line in out[:out.index(event)] if "event" not in line][-1]["segment"]


def test_looking_only_where_something_moved_counts_exactly_what_every_whole_look_counts():
    every, _ = run(whole(STEADY, n) for n in range(FRAMES))
    lines = [by_motion(STEADY, n, start_and_every(scenes.FPS)) for n in range(FRAMES)]
    motion, metrics = run(lines)
    # The schedule is what it says: most frames not looked at, green absent from frames where the others moved.
    skipped = sum(line["looked"] is False for line in lines)
    moved = [line for line in lines if line["looked"] and len(line["regions"]) == 2]
    assert skipped > 100 and len(moved) > 150
    assert all({d["label"] for d in line["detections"]} == {"red", "blue"} for line in moved)
    assert tally(motion) == tally(every) == {**STEADY_FILE_TALLY, ("entered", "door", "green", None): 1,
                                             ("left", "door", "green", None): 1}
    assert ids(motion) == ids(every) == {"red": {1}, "blue": {2}, "green": {3}}
    assert dwells(motion) == dwells(every)
    assert events(motion) == events(every)  # the same events on the same frames, in the same order
    exposition = generate_latest(metrics.registry).decode()
    assert prom.total(exposition, "video_ingest_motion_frames_total", camera="c", looked="false") == skipped
    assert prom.total(exposition, "video_ingest_motion_frames_total", camera="c", looked="true") == FRAMES - skipped
    assert prom.total(exposition, "video_ingest_motion_regions_total", camera="c") == sum(
        len(line["regions"]) for line in lines)
    assert not any("detections" in line for line in motion if line.get("looked") is False)  # not a frame without objects
    metrics.remove("c")
    assert not [s for s in prom.samples(generate_latest(metrics.registry).decode()) if s.name.startswith("video_ingest_motion")]


def test_a_full_look_only_every_second_still_counts_exactly():
    """Without the start's second look, what stands still at the start gets its id at the next
    full look: later entries (dwell from then), but the same ids and counts."""
    every, _ = run(whole(STEADY, n) for n in range(FRAMES))
    motion, _ = run(by_motion(STEADY, n, lambda n: n % scenes.FPS == 0) for n in range(FRAMES))
    assert tally(motion) == tally(every)
    assert ids(motion) == ids(every) == {"red": {1}, "blue": {2}, "green": {3}}


def test_a_track_out_of_view_is_still_an_active_track():
    """`video_ingest_tracks_active` after a frame where red and blue moved and green, standing in
    the door, was not looked at: 3 (green still tracked, still in the door)."""
    lines = [by_motion(STEADY, n, start_and_every(scenes.FPS)) for n in range(40)]
    assert lines[-1]["looked"] and {d["label"] for d in lines[-1]["detections"]} == {"red", "blue"}
    _, metrics = run(lines, end=False)
    exposition = generate_latest(metrics.registry).decode()
    assert prom.total(exposition, "video_ingest_tracks_active", camera="c") == 3
    assert prom.total(exposition, "video_ingest_zone_objects", camera="c", zone="door", label="green") == 1


WALK, STAND = 30, 60 * scenes.FPS  # frames: red walks into the door, stands a minute, walks out
VANISH = 400  # blue, parked in the door, is gone from this frame on, with no motion to show it
LOOK = 10 * scenes.FPS  # a full look every 10 s


def walker(n: int) -> tuple[float, float]:
    """Red walks in from x = 0.6 to 0.15 (the door; across the gate, `out`), stands there a minute,
    walks back out (`in`)."""
    if n < WALK:
        return 0.6 - 0.45 * n / WALK, 0.3
    if n < WALK + STAND:
        return 0.15, 0.3
    return 0.15 + 0.45 * min(n - WALK - STAND, WALK) / WALK, 0.3


STOPS: Paths = {"red": walker, "blue": lambda n: (0.15, 0.75) if n < VANISH else None}


def test_a_box_standing_a_minute_unlooked_at_keeps_its_id_and_dwell_and_one_that_vanished_ends():
    settings = dataclasses.replace(SCENE, lost_track_seconds=0.5)
    frames = WALK + STAND + 2 * WALK
    every, _ = run((whole(STOPS, n) for n in range(frames)), settings)
    lines = [by_motion(STOPS, n, start_and_every(LOOK)) for n in range(frames)]
    assert sum(line["looked"] is False for line in lines) > STAND - 10  # the minute, but its full looks
    motion, _ = run(lines, settings)
    assert ids(motion) == ids(every) == {"red": {1}, "blue": {2}}
    [red_every] = [e for e in dwells(every) if e[1] == "red"]
    [red_motion] = [e for e in dwells(motion) if e[1] == "red"]
    assert red_motion == red_every and red_motion[2] > 60  # left the door after its minute, its dwell exact
    assert tally(motion) == tally(every) == {("entered", "door", "red", None): 1, ("left", "door", "red", None): 1,
                                             ("entered", "door", "blue", None): 1, ("left", "door", "blue", None): 1,
                                             ("crossed", "gate", "red", "out"): 1, ("crossed", "gate", "red", "in"): 1}
    # Blue: last seen at the full look before it vanished; missed at the next one, it ends 0.5 s later.
    seen, missed = VANISH // LOOK * LOOK, (VANISH // LOOK + 1) * LOOK
    [blue] = [e for e in events(motion) if e["event"] == "left" and e["label"] == "blue"]
    assert blue["capture_time"] == base(seen)["capture_time"] and blue["dwell_s"] == round((seen - 1) / scenes.FPS, 6)
    assert frame_before(motion, blue) == missed + 7  # unseen 8 / 15 s > 0.5 s
    [blue_every] = [e for e in events(every) if e["event"] == "left" and e["label"] == "blue"]
    assert frame_before(every, blue_every) == VANISH - 1 + 8


def test_lines_without_looked_or_looked_at_whole_are_tracked_as_ever():
    """Motion off (no `looked`), or a whole look every frame: today's ids and events, frame for frame."""
    paths = {name: STEADY[name] for name in ("red", "blue")}
    today, _ = run(whole(paths, n) for n in range(300))
    whole_looks, _ = run(by_motion(paths, n, lambda n: True) for n in range(300))
    assert tally(today) == STEADY_FILE_TALLY and ids(today) == {"red": {1}, "blue": {2}}
    assert [(e["event"], e.get("zone") or e.get("line"), e["track_id"], e.get("direction"),
             round((e["capture_time"] - 1000) * scenes.FPS)) for e in events(today)] == [
        ("entered", "door", 1, None, 1), ("left", "door", 1, None, 40), ("crossed", "gate", 1, "in", 56),
        ("entered", "door", 2, None, 66), ("left", "door", 2, None, 100), ("crossed", "gate", 1, "out", 116),
        ("entered", "door", 1, None, 126), ("left", "door", 1, None, 160), ("crossed", "gate", 1, "in", 176),
        ("entered", "door", 2, None, 186), ("left", "door", 2, None, 220), ("crossed", "gate", 1, "out", 236),
        ("entered", "door", 1, None, 246), ("left", "door", 1, None, 299)]
    assert events(whole_looks) == events(today)
    assert [line["detections"] for line in whole_looks if "event" not in line] == [
        line["detections"] for line in today if "event" not in line]
