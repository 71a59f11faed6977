"""What each recording mode keeps, and what retention deletes: a real recorder (tests/recordings.py)
fed a real H.264 scene cut by the bridge's own Segmenter, its SQLite index and files read back."""

from __future__ import annotations

import sqlite3
import subprocess
import time

import pytest

from ingest.record import recorder as recorder_module
from ingest.record import retention
from ingest.record.recorder import BUFFER_S
from ingest.record.settings import RecordMode, RecordSettings
from tests import scenes
from tests.recordings import record

DAY = 86400.0


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    return scenes.make(tmp_path_factory.mktemp("scene") / "steady.ts", [(320, 192, 300)])


def files(recorder) -> list[dict]:
    return [dict(r) for r in recorder.index.read("SELECT * FROM files ORDER BY start")]


def plays(path) -> int:
    """Frames ffmpeg decodes from `path`, without an error."""
    run = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                          "stream=nb_read_frames", "-of", "csv=p=0", str(path)], capture_output=True, text=True)
    assert run.returncode == 0 and not run.stderr, run.stderr
    return int(run.stdout)


def test_events_mode_keeps_video_until_its_clips_are_made_and_merges_a_tracks_clips(video, tmp_path, monkeypatch):
    monkeypatch.setattr(recorder_module, "FILE_SECONDS", 5.0)  # the 20 s scene in 4 files
    settings = RecordSettings(RecordMode.EVENTS, pre_seconds=2, post_seconds=2)
    feed = record(tmp_path, {"gate": video}, time.time() - 60, settings)
    recorder = feed.recorder
    try:
        recordings = files(recorder)
        assert [round(f["end"] - f["start"]) for f in recordings] == [5, 5, 5, 5]
        assert all(f["keep_until"] == pytest.approx(f["start"] + 2 + 2 + BUFFER_S) for f in recordings)
        first = feed.event("gate", 5.0, "entered", "door", track_id=1)
        second = feed.event("gate", 7.0, "left", "door", track_id=1, dwell_s=2.0)  # overlaps: the same clip
        other = feed.event("gate", 7.5, "entered", "door", track_id=2)  # another track: its own clip
        late = feed.event("gate", 15.0, "crossed", "gate", track_id=1, direction="in")  # apart: its own
        made = {e["id"]: e for e in feed.made(first, second, other, late)}
        assert made[first]["clip"] == made[second]["clip"]
        assert len({made[e]["clip"] for e in (first, other, late)}) == 3
        merged = recorder.index.clip(made[first]["clip"])
        assert merged is not None and merged.end == pytest.approx(feed.start["gate"] + 7.0 + 2)
        # Past its buffer, the recording goes (but the file still being written); the clips,
        # snapshots and events stay.
        retention.by_age(recorder, recordings[-1]["start"] + 2 + 2 + BUFFER_S + 1)
        assert files(recorder) == recordings[-1:]
        assert [p.relative_to(recorder.directory).as_posix() for p in recorder.directory.rglob("*.ts")] == [
            recordings[-1]["path"]]
        for event in made.values():
            assert recorder.index.event(event["id"])["has_clip"]
            clip = recorder.index.clip(event["clip"])
            assert plays(recorder.directory / clip.path) >= 4 * scenes.FPS
        assert recorder.metrics.deleted.labels("gate", "age")._value.get() == sum(f["bytes"] for f in recordings[:-1])
    finally:
        recorder.close()


def test_motion_mode_keeps_what_moved_for_retain_days(video, tmp_path):
    settings = RecordSettings(RecordMode.MOTION, pre_seconds=2, post_seconds=2, retain_motion=3)
    feed = record(tmp_path, {"still": video, "moving": video}, time.time() - 60, settings)
    recorder = feed.recorder
    for camera, looked in (("still", [False] * 20), ("moving", [False] * 9 + [True] + [False] * 10)):
        feed.lines.write([{"camera": camera, "segment": 1, "pts": float(s), "capture_time": feed.start[camera] + s,
                           "status": 200, "width": 320, "height": 192, "looked": seen}
                          for s, seen in enumerate(looked)])
    recorder.close()  # writes what is queued, the motion windows too
    with sqlite3.connect(recorder.directory / "index.sqlite3") as db:
        kept = dict(db.execute("SELECT camera, keep_until FROM files"))
        last = dict(db.execute("SELECT camera, max(start) FROM segments GROUP BY camera"))
    assert kept["still"] == pytest.approx(last["still"] + 2 + 2 + BUFFER_S)  # its newest segment's buffer
    assert kept["moving"] == pytest.approx(feed.start["moving"] + 9 + 3 * DAY)


def test_events_past_retain_days_go_with_their_snapshot_and_clip(video, tmp_path):
    settings = RecordSettings(RecordMode.CONTINUOUS, pre_seconds=1, post_seconds=1, retain_events=1,
                              retain_continuous=2)
    feed = record(tmp_path, {"gate": video}, time.time() - 60, settings)
    recorder = feed.recorder
    try:
        [event] = feed.made(feed.event("gate", 5.0, "entered", "door"))
        clip = recorder.index.clip(event["clip"])
        held = [recorder.directory / event["snapshot"], recorder.directory / clip.path]
        assert all(p.is_file() for p in held)
        used = recorder.used
        retention.by_age(recorder, event["at"] + DAY - 1)
        assert recorder.index.event(event["id"]) is not None
        retention.by_age(recorder, event["at"] + DAY + 1)
        assert recorder.index.event(event["id"]) is None and not any(p.exists() for p in held)
        assert recorder.used == used - recorder.metrics.deleted.labels("gate", "age")._value.get()
        assert len(files(recorder)) == 1  # the recording itself is kept 2 days
    finally:
        recorder.close()
