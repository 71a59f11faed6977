"""The tracking scene's parts shared by the end-to-end tests of tracks and counts (test_tracking)
and of their events on MQTT (test_mqtt): the cameras' settings, and the tallies of their events.
The planted detector's TorchServe and the scene videos are fixtures (conftest.py)."""

from __future__ import annotations

from collections import Counter

import yaml

from tests import scenes
from tests.e2e.ingest_cli import Ingest

MODEL = "planted_tracks"
SMALL, LARGE = (320, 192), (480, 288)
#: The counts of the `steady` scene read from a file, every frame answered (red is in the door when
#: the file ends: it leaves then), whichever engine answers.
STEADY_FILE_TALLY = {
    ("entered", "door", "red", None): 3, ("left", "door", "red", None): 3,
    ("entered", "door", "blue", None): 2, ("left", "door", "blue", None): 2,
    ("crossed", "gate", "red", "in"): 2, ("crossed", "gate", "red", "out"): 2}


def camera(name: str, url: str, gate_x: float = 0.5, **extra) -> dict:
    # motion off unless asked: every frame looked at, as these counts were first proven (test_motion)
    return {"name": name, "url": url, "track": True, "stall_seconds": 2, "snapshot_seconds": 1, "motion": False,
            "zones": [{"name": "door", "polygon": scenes.DOOR}],
            "lines": [{"name": "gate", "from": [gate_x, 0], "to": [gate_x, 1], "classes": ["red"]}], **extra}


def assert_steady_file_counted(ingest: Ingest, camera: str = "file") -> None:
    """The `steady` scene read from a file, whichever engine answered: every frame answered 200,
    one track id per colour, and `STEADY_FILE_TALLY`."""
    answers = ingest.answers(camera)
    assert len(answers) == 300 and {a["status"] for a in answers} == {200}
    assert len(set(track_ids(answers, "red"))) == 1 and len(set(track_ids(answers, "blue"))) == 1
    assert tally(ingest, camera) == STEADY_FILE_TALLY


def write(path, *cameras) -> None:
    path.write_text(yaml.safe_dump({"cameras": list(cameras)}))


def tally(ingest: Ingest, camera: str, first_connection: bool = False) -> Counter:
    """(event, zone or line, label, direction) -> how many (of the tracks of the camera's first
    connection only, with `first_connection`: a camera may be reading its source again)."""
    ids = first_ids(ingest, camera) if first_connection else None
    return Counter((e["event"], e.get("zone") or e.get("line"), e["label"], e.get("direction"))
                   for e in ingest.lines() if e["camera"] == camera and e.get("event") in ("entered", "left", "crossed")
                   and (ids is None or e["track_id"] in ids))


def first_ids(ingest: Ingest, camera: str) -> set[int]:
    runs = connections(ingest.answers(camera))
    return {d["track_id"] for a in runs[0] for d in a.get("detections", [])} if runs else set()


def all_left(ingest: Ingest, camera: str) -> bool:
    """Whether every zone entry of the camera's first connection has its exit (the camera went down)."""
    counts = tally(ingest, camera, first_connection=True)
    entered = {k[1:]: n for k, n in counts.items() if k[0] == "entered"}
    return bool(entered) and entered == {k[1:]: n for k, n in counts.items() if k[0] == "left"}


def track_ids(answers: list[dict], label: str) -> list[int]:
    """The track ids `label` got in the frames answered 200 (an error line, e.g. a frame the busy
    machine answered 504 StaleFrame, has no detections)."""
    return [d["track_id"] for a in answers if a["status"] == 200 for d in a.get("detections", []) if d["label"] == label]


def connections(answers: list[dict]) -> list[list[dict]]:
    """The answers split where pts start again (a new connection)."""
    runs: list[list[dict]] = []
    for answer in answers:
        if not runs or answer["pts"] < runs[-1][-1]["pts"]:
            runs.append([])
        runs[-1].append(answer)
    return runs
