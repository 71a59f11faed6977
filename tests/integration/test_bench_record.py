"""`python -m bench.record --short` (issue 50's bench, bench/record.py) end to end: a real recorder fed
two 720p cameras for 12 s, three events and their clips, then an index of 20,000 segments and events.
What it reports must hold on any machine: every byte handed over written (counter and files), every
event given a clip and a `clip` line, each query's page full. No timing is asserted (machines are noisy)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import ROOT


def test_the_short_record_bench_reports_every_byte_written_every_clip_made_and_full_pages(tmp_path):
    report = tmp_path / "record.json"
    done = subprocess.run([sys.executable, "-m", "bench.record", "--short", "--json", str(report)], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    result = json.loads(report.read_text())
    assert result["command"] == f"--short --json {report}" and result["machine"] and result["commit"]
    [run] = result["recording"]
    assert (run["size"], run["cameras"], run["bytes match"]) == ("720p", 2, True), run
    events, clips, lines = run["events / clips / lines"]
    assert events == clips == lines == 3, run  # at 2, 4 and 6 s (none past 12 - post 2 - 2 s): clips due by 8 s
    assert len(run["% core a camera: writer / clips / process"]) == 3
    assert all(v >= 0 for v in run["% core a camera: writer / clips / process"]), run
    assert 150 < run["kB/s a camera"] < 400, run  # bench.cameras' 720p: 2 Mbit/s
    assert all(v is not None for v in run["ready p50 / p99 s (<= 4)"] + run["build p50 / p99 ms"]), run
    queries = {q["query"]: q for q in result["index"]["queries"]}
    assert result["index"]["rows"] == 20_000 and len(queries) == 6
    assert all(q["rows"] == 50 for name, q in queries.items() if name.startswith("events")), queries
    segments = [q["rows"] for name, q in queries.items() if name.startswith("segments")]
    assert segments == [61, 61], queries  # 60 s of 1 s segments and the one holding the start
    table = done.stdout.splitlines()
    assert table[0].startswith("| size | cameras |") and table[2].startswith("| 720p | 2 |"), done.stdout
    assert "| events: newest 50 (under 50 ms) | 50 |" in done.stdout, done.stdout
