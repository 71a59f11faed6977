"""A real recorder (`ingest.record`) for the tests, on a temporary directory, fed as the bridge feeds
it: a video (tests/scenes.py) cut by the bridge's own `Segmenter` into segments handed to
`Recorder.segment`, and answer and event lines written through a real `Lines` with the recorder as
its annotator and sink (as `ingest.cli` wires it).

A frame's capture time is `start` plus its time into the video (the camera's clock fed the
stream's own times), so a test knows where each frame lies.
"""

from __future__ import annotations

import functools
import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av

from ingest.cameras.clock import CaptureClock, WallClock
from ingest.cameras.segments import Segmenter, pts_seconds
from ingest.config import Camera
from ingest.record.metrics import RecordMetrics
from ingest.record.recorder import Recorded, Recorder
from ingest.record.settings import RecordSettings
from ingest.sinks.output import Lines
from ingest.sinks.redact import Redactor

FPS = 15


@dataclass
class Feed:
    """The recorder, its lines, and each camera's first frame's capture time."""

    recorder: Recorder
    lines: Lines
    start: dict[str, float]

    def event(self, camera: str, at_s: float, kind: str, place: str, label: str = "person", track_id: int = 1,
              box: tuple[float, float, float, float] = (40, 40, 120, 120), size: tuple[int, int] = (320, 240),
              **fields: Any) -> str:
        """An answered frame with the track's box, then its event `at_s` seconds into `camera`'s
        video (`kind`: entered, left, crossed; `place`: the zone or line); returns the event's id."""
        at = self.start[camera] + at_s
        answer = {"camera": camera, "segment": 1, "pts": at_s, "capture_time": at, "status": 200, "width": size[0],
                  "height": size[1], "detections": [{"box": list(box), "label": label, "track_id": track_id,
                                                     "score": 0.9}]}
        where = "line" if kind == "crossed" else "zone"
        event = {"camera": camera, "event": kind, "time": at, "capture_time": at, where: place, "label": label,
                 "track_id": track_id, **fields}
        self.lines.write([answer, event])
        return str(event["event_id"])

    def made(self, *event_ids: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The events once each has its snapshot and its clip."""
        deadline = time.monotonic() + timeout
        while True:
            found = [self.recorder.index.event(e) for e in event_ids]
            if all(e is not None and e["has_snapshot"] and e["clip_state"] == "ready" for e in found):
                return [e for e in found if e is not None]
            assert time.monotonic() < deadline, f"no snapshot or clip in {timeout} s: {found}"
            time.sleep(0.05)


def record(directory: Path, videos: dict[str, Path], start: float, settings: RecordSettings) -> Feed:
    """A started recorder under `directory` holding each camera's video (camera -> file), its first
    frame captured at `start`; the caller closes `feed.recorder`."""
    results = directory / "results.jsonl"
    lines = Lines(results, Redactor(), WallClock())
    recorder = Recorder(directory / "recordings", None, lines, RecordMetrics(), results)
    recorder.configure([Camera(name, f"rtsp://{name}.example/s", record=settings) for name in videos])
    lines.annotate(recorder.stamp)
    lines.add_sink(recorder)
    recorder.start()
    feed = Feed(recorder, lines, {})
    for name, video in videos.items():
        feed.start[name], end = _segments(recorder, name, video, start)
        deadline = time.monotonic() + 30
        while recorder.recorded_to.get(name, 0.0) < end - 0.01:  # the writer's thread has it all
            assert time.monotonic() < deadline, f"camera {name}: not recorded in 30 s"
            time.sleep(0.02)
    return feed


def _segments(recorder: Recorder, camera: str, video: Path, start: float) -> tuple[float, float]:
    """Cuts `video` as the camera reader does, each segment to the recorder; returns the first
    frame's capture time and the last segment's end."""
    now = {"t": start}
    first: float | None = None
    with av.open(str(video)) as container:
        stream = container.streams.video[0]
        context = stream.codec_context
        counter = itertools.count(1)
        cutter = Segmenter(stream, 1.0, CaptureClock(lambda: now["t"]), lambda: next(counter))
        cutter.recorded = functools.partial(recorder.segment, camera,
                                            stream=Recorded(context.name, context.width, context.height))
        for packet in container.demux(stream):
            pts = pts_seconds(packet)
            if pts is not None:
                first = pts if first is None else first
                now["t"] = start + pts - first  # arrives as it was captured: capture time = stream time
            cutter.push(packet)
        last = cutter.flush()
    assert first is not None and last, f"{video}: no video"
    return start, last[0].frame_times[-1][1] + 1 / FPS
