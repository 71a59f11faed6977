"""Recordings, event clips and snapshots end to end (issue 50): the scripted scene (tests/scenes.py)
from a real gst-rtsp-server, the planted detector in a real TorchServe, the real `video-ingest
--record`, its SQLite index read as it is on disk, every clip checked by ffprobe and decoded."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from ingest.analytics.snapshot import BOX_COLOUR
from tests import scenes
from tests.e2e.ingest_cli import Ingest
from tests.e2e.tracks import MODEL, camera, write
from tests.mosquitto import Mosquitto, Subscriber
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


def clip_lines(ingest: Ingest, camera: str = "gate") -> dict[str, dict]:
    return {line["of"]: line for line in ingest.events(camera, "clip")}


def test_each_crossing_has_a_clip_and_a_snapshot_that_show_it(detector, videos, tmp_path):
    """`gate` sends segments; `lobby`, the same scene, sends 5 JPEG frames a second and records
    the whole 15 fps stream it reads."""
    rtsp = RtspServer({"steady": videos["steady"], "copy": videos["steady"]}, log=tmp_path / "gst.log").start()
    cameras = tmp_path / "cameras.yaml"
    write(cameras, camera("gate", rtsp.url("steady"), record=RECORD),
          camera("lobby", rtsp.url("copy"), record=RECORD, mode="frames", sample_fps=5))
    recordings = tmp_path / "rec"
    ingest = Ingest(tmp_path, detector, ["--config", str(cameras), "--record", str(recordings)], model=MODEL)
    try:
        crossings = ingest.wait("the four crossings", lambda: ingest.events("gate", "crossed")[3:] and
                                ingest.events("gate", "crossed")[:4], timeout=60)
        wanted = {c["event_id"] for c in crossings}
        made = ingest.wait("their clips", lambda: wanted <= (done := clip_lines(ingest)).keys() and done, timeout=40)
        lobby = ingest.wait("a clip of lobby's", lambda: clip_lines(ingest, "lobby"), timeout=40)
    finally:
        ingest.stop()
        rtsp.stop()
    boxes = {a["capture_time"]: d["box"] for a in ingest.answers("gate") for d in a.get("detections", [])
             if d["label"] == "red"}
    began, ended = rows(recordings, "SELECT min(start) AS a, max(end) AS b FROM segments WHERE camera = 'gate'")[0].values()
    assert rows(recordings, "SELECT * FROM clips WHERE state != 'ready'") == []
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
        # too), from the key frame at or before: at most a GOP more (none before the recording
        # began, nor after it ended: a stopping bridge makes its clips with what is recorded).
        times = [e["at"] for e in rows(recordings, "SELECT at FROM events WHERE clip = ?", event["clip"])]
        wanted = min(max(times) + POST, ended) - max(min(times) - PRE, began)
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
    for event_id in lobby:
        [clip] = rows(recordings, "SELECT c.* FROM events e JOIN clips c ON c.id = e.clip WHERE e.id = ?", event_id)
        info = probe(recordings / clip["path"])
        assert info["frames"][0]["key_frame"] == 1 and info["streams"][0]["codec_name"] == "h264"
        assert float(Fraction(info["streams"][0]["avg_frame_rate"])) == pytest.approx(scenes.FPS, abs=0.01)  # not 5


def agrees_with_disk(recordings: Path) -> None:
    """Every recording file on disk has its row and the bytes its segments' rows say, and back."""
    files = {row["path"]: row["bytes"] for row in rows(recordings, "SELECT path, bytes FROM files")}
    on_disk = {p.relative_to(recordings).as_posix(): p.stat().st_size for p in recordings.rglob("*.ts")}
    assert on_disk == files
    for path, size in files.items():
        [total] = rows(recordings, "SELECT sum(bytes) AS b, count(*) AS n, max(offset + bytes) AS e FROM segments "
                       "WHERE path = ?", path)
        assert total["b"] == size == total["e"], (path, total, size)
    for clip in rows(recordings, "SELECT path FROM clips WHERE state = 'ready'"):
        assert (recordings / clip["path"]).is_file()


def crashed(recordings: Path, ingest: Ingest) -> tuple:
    """The recordings as a crash leaves them: a segment's row committed and half its bytes written;
    a file no row names; a row whose file is gone; the last events written to the results file
    after the recorder's last checkpoint and not yet indexed."""
    b_newline = b"\n"
    last = rows(recordings, "SELECT * FROM segments ORDER BY start DESC LIMIT 1")[0]
    path = recordings / last["path"]
    with path.open("rb") as file:
        file.seek(last["offset"])
        body = file.read(last["bytes"])
    size = path.stat().st_size
    with path.open("ab") as file:
        file.write(body[: len(body) // 2])
    half = len(body) // 2
    with sqlite3.connect(recordings / "index.sqlite3") as db:
        db.execute("INSERT INTO segments (camera, start, end, path, offset, bytes, pts, codec, width, height) "
                   "VALUES ('gate', ?, ?, ?, ?, ?, 0, 'h264', 320, 192)",
                   (last["end"], last["end"] + 1, last["path"], size, len(body)))
    orphan = path.with_name("orphan.ts")
    orphan.write_bytes(body)
    oldest = rows(recordings, "SELECT path FROM files ORDER BY start LIMIT 1")[0]["path"]
    (recordings / oldest).unlink()
    text = ingest.results.read_bytes()
    events = [json.loads(line) for line in text.splitlines() if b'"event_id"' in line]
    recorded = [e for e in events if e.get("event") in ("entered", "left", "crossed")]
    lost = recorded[-2:]
    with sqlite3.connect(recordings / "index.sqlite3") as db:
        db.executemany("DELETE FROM events WHERE id = ?", [(e["event_id"],) for e in lost])
        checkpoint = text.index(json.dumps(lost[0]["event_id"]).encode())
        db.execute("UPDATE meta SET value = ? WHERE key = 'results'",
                   (f"{ingest.results}\t{text.rfind(b_newline, 0, checkpoint) + 1}",))
    return last, size, half, orphan, oldest, recorded, lost


def test_a_small_cap_deletes_oldest_first_and_a_sigkill_loses_nothing(detector, videos, tmp_path):
    rtsp = RtspServer({"steady": videos["steady"]}, log=tmp_path / "gst.log").start()
    cameras = tmp_path / "cameras.yaml"
    write(cameras, camera("gate", rtsp.url("steady"), record=RECORD))
    recordings = tmp_path / "rec"
    cap = 64 * 1024  # about 10 s of the scene
    ingest = Ingest(tmp_path, detector, ["--config", str(cameras), "--record", str(recordings), "--record-cap", "64K"],
                    model=MODEL)
    try:
        ingest.wait("two clips, and recordings deleted under the cap", lambda: len(clip_lines(ingest)) >= 2
                    and ingest.metric("video_ingest_record_bytes_deleted_total", camera="gate", reason="cap") > 0,
                    timeout=60)
        # Held after each segment written, and at once after a clip or snapshot went over it.
        ingest.wait("the cap held", lambda: ingest.metric("video_ingest_record_bytes") <= cap, timeout=2)
        ingest.process.kill()  # mid-recording
        ingest.process.wait(timeout=30)
    finally:
        ingest.kill()
        rtsp.stop()
    # Oldest first: what is left is one unbroken run of the newest recordings.
    first_seen = min(a["capture_time"] for a in ingest.answers("gate"))
    kept = rows(recordings, "SELECT start, end FROM segments ORDER BY start")
    assert kept[0]["start"] > first_seen + 0.5  # at least the first second went
    assert all(b["start"] - a["end"] < 0.2 for a, b in zip(kept, kept[1:]))
    complete = {(r["path"], r["offset"], r["bytes"]) for r in rows(recordings, "SELECT * FROM segments")
                if (recordings / r["path"]).stat().st_size >= r["offset"] + r["bytes"]}
    last, size, half, orphan, oldest, recorded, lost = crashed(recordings, ingest)
    complete = {c for c in complete if c[0] != oldest}
    again = Ingest(tmp_path, detector, ["--config", str(cameras), "--record", str(recordings), "--duration", "2"],
                   model=MODEL)
    assert again.process.wait(timeout=60) == 0, again.log()[-2000:]
    again.kill()
    assert "did not agree with the index" in again.log()
    left = {(r["path"], r["offset"], r["bytes"]) for r in rows(recordings, "SELECT * FROM segments")}
    assert complete <= left  # no complete segment lost
    [cut] = rows(recordings, "SELECT * FROM segments WHERE path = ? AND offset = ?", last["path"], size)
    assert cut["bytes"] == half // 188 * 188 > 0  # cut to its last whole packet
    assert not orphan.exists()
    assert rows(recordings, "SELECT * FROM files WHERE path = ?", oldest) == []
    indexed = {r["id"] for r in rows(recordings, "SELECT id FROM events")}
    assert {e["event_id"] for e in recorded} <= indexed  # every event of the results file
    assert {r["clip_state"] for r in rows(recordings, "SELECT c.state AS clip_state FROM events e JOIN clips c "
                                          "ON c.id = e.clip WHERE e.id IN (?, ?)", *[e["event_id"] for e in lost])}
    agrees_with_disk(recordings)


def test_a_full_disk_keeps_detection_and_mqtt_going(detector, videos, tmp_path):
    recordings = tmp_path / "rec"
    recordings.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(recordings)], check=True)
    broker = Mosquitto(tmp_path / "broker").start()
    subscriber = Subscriber(broker, "video-ingest/gate/events")
    rtsp = RtspServer({"steady": videos["steady"]}, log=tmp_path / "gst.log").start()
    cameras = tmp_path / "cameras.yaml"
    write(cameras, camera("gate", rtsp.url("steady"), record=RECORD))
    # A cap the disk cannot hold once another program filled it; files of about 3 s (a 20th of it).
    ingest = Ingest(tmp_path, detector, ["--config", str(cameras), "--record", str(recordings), "--record-cap", "400K",
                                         "--mqtt", broker.url], model=MODEL)
    try:
        ingest.wait("the first clip", lambda: clip_lines(ingest))
        filler = recordings / "another-program"
        with contextlib.suppress(OSError), filler.open("wb") as file:  # until the disk is full
            while True:
                file.write(b"\0" * 65536)
                file.flush()
        full_at = time.time()
        ingest.wait("the four crossings on MQTT", lambda: len(published(subscriber, "crossed")) >= 4, timeout=60)
        assert ingest.metric("video_ingest_record_bytes_deleted_total", camera="gate", reason="disk_full") > 0
        code, _ = ingest.stop()
        assert code == 0
    finally:
        ingest.kill()
        rtsp.stop()
        subscriber.close()
        broker.stop()
        subprocess.run(["umount", "-l", str(recordings)], check=False)
    answers = ingest.answers("gate")
    assert {a["status"] for a in answers} == {200} and max(a["capture_time"] for a in answers) > full_at + 5
    assert len(ingest.events("gate", "crossed")) == 4
    assert [e["event_id"] for e in ingest.events("gate", "crossed")] == published(subscriber, "crossed")
    # On MQTT as in the results: each event says a snapshot comes and no clip yet; a `clip` line
    # follows when its clip is ready (the first, made before the disk filled).
    sent = {e["event_id"]: e for e in (json.loads(p) for _, p, _ in subscriber.received())}
    events = [e for e in sent.values() if e["event"] == "crossed"]
    assert events and all(e["has_snapshot"] is True and e["has_clip"] is False for e in events)
    updates = [e for e in sent.values() if e["event"] == "clip"]
    assert updates and all(u["of"] in sent and u["has_clip"] is True for u in updates)
    assert ingest.log().count("is full") == 1
    assert "Traceback" not in ingest.log()


def published(subscriber: Subscriber, event: str) -> list[str]:
    found = [json.loads(payload) for _, payload, _ in subscriber.received()]
    return [e["event_id"] for e in found if e.get("event") == event]
