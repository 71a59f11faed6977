"""Recordings and event clips (issue 50): one real `Recorder` in this process, fed as the bridge feeds it:
`bench.cameras`' busy street cut by the bridge's `Segmenter`, a segment a second a camera, an event every `EVENT_S`.

    python -m bench.record --json record.json   # 16 cameras at 1080p15, then 720p15, 60 s each; 1M rows
    python -m bench.record --short              # the test's form (about 20 s)
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import av
from prometheus_client import CollectorRegistry

from bench import camera_scenes, harness
from ingest import config
from ingest.cameras.clock import CaptureClock, WallClock
from ingest.cameras.segments import Segmenter, pts_seconds
from ingest.cameras.units import Recorded
from ingest.record.index import Index
from ingest.record.metrics import RecordMetrics
from ingest.record.recorder import Recorder
from ingest.sinks.output import Lines
from ingest.sinks.redact import Redactor

EVENT_S, PRE_S, QUERIES, Q = 2.0, 5.0, 200, (0.5, 0.99)
DONE = "SELECT e.at, c.built FROM events e JOIN clips c ON c.id = e.clip AND c.state = 'ready'"
NUMBERS = "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :rows)"


def record(work: Path, size: str, args: argparse.Namespace, progress: Any) -> dict[str, Any]:
    """`args.cameras` cameras of `size` (mode continuous) for `args.seconds`. CPU: the recorder's threads (writer:
    files, index, retention; clips: snapshots, clips) and the process; ready: an event's capture to its clip built."""
    progress(f"{size}: {args.cameras} cameras for {args.seconds:g} s")
    clip = camera_scenes.clip(Path(tempfile.gettempdir()) / "bench-cameras", "busy", size, args.clip_s)  # cached
    names, registry, builds = [f"c{i}" for i in range(args.cameras)], CollectorRegistry(), []
    now, units, results, post_s = [0.0], [], work / f"{size}.jsonl", args.post_s
    with av.open(str(clip)) as container:  # cut once as a camera's reader cuts it; capture times: its stream times
        cutter = Segmenter(container.streams.video[0], 1.0, CaptureClock(lambda: now[0]), lambda: 0)
        for packet in container.demux(video=0):
            now[0] = pts_seconds(packet) or now[0]
            units += cutter.push(packet)
        units += cutter.flush()
    lines, metrics = Lines(results, Redactor(), WallClock()), RecordMetrics(registry)
    metrics.build.observe = builds.append  # every build kept (the histogram keeps buckets only)
    recorder = Recorder(work / size, None, lines, metrics, results)
    recorder.configure(config.parse({"cameras": [{"name": name, "url": str(clip), "record": {
        "mode": "continuous", "pre_seconds": PRE_S, "post_seconds": post_s}} for name in names]}))
    lines.annotate(recorder.stamp)  # as ingest.cli wires it
    lines.add_sink(recorder)
    recorder.start()
    window = harness.Window({t.name: [f"{os.getpid()}/task/{t.native_id}"] for t in threading.enumerate()
                             if t.name.startswith("recorder")} | {"process": [os.getpid()]}).start()
    t0, handed, j = time.time(), dict.fromkeys(names, 0), 0
    for s, c in itertools.product(range(round(args.seconds)), range(len(names))):  # 1 s segments, staggered
        unit, shift = units[s % len(units)], t0 + s - s % len(units) + c / len(names) - units[0].frame_times[0][1]
        times = tuple((pts, at + shift) for pts, at in unit.frame_times)
        time.sleep(max(0.0, times[-1][1] + 1 / camera_scenes.FPS - time.time()))  # cut at its end
        recorder.segment(names[c], replace(unit, seq=s + 1, capture_time=times[0][1], frame_times=times),
                         Recorded("h264", *camera_scenes.RESOLUTIONS[size]))
        handed[names[c]] += len(unit.body)
        out = [{"camera": names[c], "segment": s + 1, "capture_time": times[0][1], "status": 200, "detections": []}]
        if c == j % len(names) and (j + 1) * EVENT_S <= s < args.seconds - post_s - 2:
            j += 1
            out.append({"camera": names[c], "event": "crossed", "time": time.time(), "line": "gate", "label": "person",
                        "capture_time": times[len(times) // 2][1], "direction": "in", "track_id": j})
        lines.write(out)
    cpu, deadline, share = window.stop(), time.monotonic() + post_s + 30, 100 / len(names) / window.seconds
    while len(made := recorder.index.read(DONE)) < j and time.monotonic() < deadline:  # clips after the window
        time.sleep(0.2)
    recorder.close()
    lines.close()
    written = {c: registry.get_sample_value("video_ingest_record_bytes_written_total", {"camera": c}) for c in names}
    files = {c: sum(p.stat().st_size for p in (work / size / c).rglob("*.ts")) for c in names}
    return {"size": size, "cameras": len(names), "seconds": round(window.seconds, 1), "% core a camera: writer / "
            "clips / process": [round(cpu[g] * share, 2) for g in ("recorder", "recorder-clips", "process")],
            "kB/s a camera": round(sum(handed.values()) / len(names) / round(args.seconds) / 1e3, 1),
            "bytes match": handed == written == files, "events / clips / lines": [j, len(made), results.read_text()
                                                                               .count('"event": "clip"')],
            f"ready p50 / p99 s (<= {post_s + 2:g})": [harness.percentile([b - a for a, b in made], q) for q in Q],
            "build p50 / p99 ms": [harness.percentile([b * 1000 for b in builds], q) for q in Q],
            "the machine's other CPU s": round(cpu["others"] + cpu["recorder"] + cpu["recorder-clips"], 1)}


def index_queries(path: Path, rows: int) -> dict[str, Any]:
    """A fresh index of `rows` segments and events (16 cameras, a segment a second each), its queries timed."""
    index, t0, began = Index(path), 1.7e9, time.monotonic()
    with index.writing() as db:  # one statement each, so that the fill time is SQLite's (tables and indexes)
        db.execute(f"{NUMBERS} INSERT INTO segments (camera, start, end, path, offset, bytes, pts, codec, width, "
                   "height) SELECT 'c' || (i % 16), :t0 + i / 16, :t0 + i / 16 + 1, 'c' || (i % 16) || '/' || (i / 960)"
                   " || '.ts', 0, 500000, 0, 'h264', 1920, 1080 FROM n", {"rows": rows, "t0": t0})
        db.execute(f"{NUMBERS} INSERT INTO events (id, camera, type, label, place, track_id, at, start, end) SELECT "
                   "printf('%07d', i), 'c' || (i % 16), 'crossed', CASE i % 100 WHEN 42 THEN 'bicycle' ELSE 'person' "
                   "END, 'gate', i, :t0 + i / 16.0, :t0 + i / 16.0, :t0 + i / 16.0 FROM n", {"rows": rows, "t0": t0})
    fill_s, last, page = time.monotonic() - began, t0 + (rows - 1) // 16, index.events()
    cases = {"events: newest 50 (under 50 ms)": index.events,
             "events: the next 50 (before=)": lambda: index.events(before=(page[-1]["at"], page[-1]["id"])),
             "events: a camera's newest 50": lambda: index.events(camera="c7"),
             "events: a label's newest 50 (1% of events)": lambda: index.events(label="bicycle"),
             "segments: a clip's 60 s, the newest": lambda: index.segments("c7", last - 60, last),
             "segments: a clip's 60 s, the oldest": lambda: index.segments("c7", t0 + 60, t0 + 120)}
    queries = []
    for name, query in cases.items():
        took = [(time.perf_counter(), len(query()), time.perf_counter()) for _ in range(QUERIES)]  # before, rows, after
        ms = [(after - before) * 1000 for before, _, after in took]
        queries.append({"query": name, "rows": took[0][1], "p50 / p99 ms": [harness.percentile(ms, q) for q in Q]})
    return {"rows": rows, "fill_s": round(fill_s, 1), "mb": round(path.stat().st_size / 1e6), "queries": queries}


def table(rows: list[dict[str, Any]]) -> str:
    cells = [[" / ".join(map(str, v)) if isinstance(v, list) else str(v) for v in row.values()] for row in rows]
    return harness.markdown(list(rows[0]), cells)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.record", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", nargs="+", choices=camera_scenes.RESOLUTIONS, default=["1080p", "720p"])
    for flag, default in ("--cameras", 16), ("--seconds", 60.0), ("--post-s", 5.0), ("--rows", 10**6), ("--clip-s", 10):
        p.add_argument(flag, type=type(default), default=default)
    p.add_argument("--short", action="store_true", help="the test's: 720p, 2 cameras, 12 s, post 2 s, 20,000 rows")
    p.add_argument("--json", type=Path, help="write the result here")
    args = p.parse_args(argv)
    if args.short:
        args.sizes, args.cameras, args.seconds, args.post_s, args.rows, args.clip_s = ["720p"], 2, 12.0, 2.0, 20_000, 4

    def scenario(progress: Any) -> int:
        with tempfile.TemporaryDirectory(prefix="bench-record-") as tmp:
            runs = [record(Path(tmp), size, args, progress) for size in args.sizes]
            found = index_queries(Path(tmp) / "index.sqlite3", args.rows)
        print(f"{table(runs)}\n\nIndex: {args.rows:,} segments and events, {found['mb']} MB, filled in "
              f"{found['fill_s']} s\n\n{table(found['queries'])}")
        harness.report(args.json, sys.argv[1:] if argv is None else argv, recording=runs, index=found)
        counts = [r["events / clips / lines"] for r in runs]  # every event has its clip and its clip line
        return 0 if all(r["bytes match"] for r in runs) and all(min(n) == max(n) > 0 for n in counts) else 1

    return harness.main(scenario)


if __name__ == "__main__":
    sys.exit(main())
