"""Recordings, event clips and snapshots end to end (issue 50): the scripted scene (tests/scenes.py)
from a real gst-rtsp-server, the planted detector in a real TorchServe, the real `video-ingest
--record`, its SQLite index read as it is on disk, every clip checked by ffprobe and decoded."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from ingest.analytics.snapshot import BOX_COLOUR
from tests import scenes
from tests.e2e.ingest_cli import Ingest
from tests.e2e.tracks import MODEL, camera, write
from tests.rtsp_server import RtspServer

PRE, POST = 2.0, 2.0
GOP_S = 1.0  # the scene has a key frame every second
RECORD = {"mode": "continuous", "pre_seconds": PRE, "post_seconds": POST}


def rows(directory: Path, sql: str, *args) -> list[dict]:
    with sqlite3.connect(directory / "index.sqlite3") as db:
        db.row_factory = sqlite3.Row
        return [dict(row) for row in db.execute(sql, args)]


def probe(path: Path) -> dict:
    out = subprocess.run(["ffprobe", "-v", "error", "-show_format", "-show_streams", "-show_frames", "-of", "json",
                          str(path)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def red_box(image: np.ndarray) -> tuple[int, int, int, int]:
    """The red square's pixel box in an RGB frame (the planted detector's red)."""
    red = (image[..., 0] > 180) & (image[..., 1] < 80) & (image[..., 2] < 80)
    ys, xs = np.nonzero(red)
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


def frame_at(path: Path, seconds: float) -> np.ndarray:
    with av.open(str(path)) as clip:
        frames = [(abs(float(f.time) - seconds), f.to_ndarray(format="rgb24")) for f in clip.decode(video=0)]
    return min(frames, key=lambda f: f[0])[1]


def clip_lines(ingest: Ingest) -> dict[str, dict]:
    return {line["of"]: line for line in ingest.events("gate", "clip")}


def test_each_crossing_has_a_clip_and_a_snapshot_that_show_it(detector, videos, tmp_path):
    rtsp = RtspServer({"steady": videos["steady"]}, log=tmp_path / "gst.log").start()
    cameras = tmp_path / "cameras.yaml"
    write(cameras, camera("gate", rtsp.url("steady"), record=RECORD))
    recordings = tmp_path / "rec"
    ingest = Ingest(tmp_path, detector, ["--config", str(cameras), "--record", str(recordings)], model=MODEL)
    try:
        crossings = ingest.wait("the four crossings", lambda: ingest.events("gate", "crossed")[3:] and
                                ingest.events("gate", "crossed")[:4], timeout=60)
        wanted = {c["event_id"] for c in crossings}
        made = ingest.wait("their clips", lambda: wanted <= (done := clip_lines(ingest)).keys() and done, timeout=40)
    finally:
        ingest.stop()
        rtsp.stop()
    boxes = {a["capture_time"]: d["box"] for a in ingest.answers("gate") for d in a.get("detections", [])
             if d["label"] == "red"}
    [began] = rows(recordings, "SELECT min(start) AS began FROM segments")[0].values()
    for crossing in crossings:
        assert crossing["has_snapshot"] is True and crossing["has_clip"] is False
        update = made[crossing["event_id"]]
        assert update["has_clip"] is True and update["has_snapshot"] is True
        [event] = rows(recordings, "SELECT e.*, c.path AS clip_path, c.start AS clip_start FROM events e "
                       "JOIN clips c ON c.id = e.clip WHERE e.id = ?", crossing["event_id"])
        assert (event["type"], event["place"], event["label"]) == ("crossed", "gate", "red")
        clip = recordings / event["clip_path"]
        info = probe(clip)
        [stream] = info["streams"]
        assert stream["codec_name"] == "h264" and info["format"]["format_name"].startswith("mov")
        frames = info["frames"]
        assert frames[0]["key_frame"] == 1 and frames[0]["pict_type"] == "I"
        # pre + post around its events (a clip of the same track's overlapping events is theirs
        # too), from the key frame at or before: at most a GOP more (none before the recording began).
        times = [e["at"] for e in rows(recordings, "SELECT at FROM events WHERE clip = ?", event["clip"])]
        wanted = max(times) + POST - max(min(times) - PRE, began)
        duration = float(info["format"]["duration"])
        assert wanted - 1 / scenes.FPS <= duration <= wanted + GOP_S + 1 / scenes.FPS, (duration, wanted)
        assert update["clip_start"] == pytest.approx(event["clip_start"])
        assert event["clip_start"] <= crossing["capture_time"] - PRE + 1e-6
        # The clip's frame at the crossing's time shows red where the detector saw it cross.
        shown = frame_at(clip, crossing["capture_time"] - event["clip_start"])
        expected = boxes[crossing["capture_time"]]
        assert red_box(shown) == pytest.approx(expected, abs=3)
        # The snapshot is that frame with the box drawn.
        snapshot = np.asarray(Image.open(recordings / event["snapshot"]).convert("RGB")).astype(int)
        x1, y1, x2, y2 = (round(v) for v in expected)
        edge = snapshot[y1 + (y2 - y1) // 2, x1 - 1:x1 + 2]  # the box's left edge, half-way down
        assert (np.abs(edge - BOX_COLOUR).max(axis=1) < 60).any(), edge
