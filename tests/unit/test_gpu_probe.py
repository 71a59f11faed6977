"""`python -m bench.gpu_probe`: the dry run on the CPU reaches every section, and the runner turns
a broken section into a failed row (exit status 1) without stopping the others."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from bench.gpu_probe import core, decode, tasks
from bench.gpu_probe.__main__ import main
from bench.gpu_probe.probe import Deadline, Probe, Row, Section, exit_status, run_sections, table, throughput
from tests.support import ROOT


def test_the_dry_run_reaches_every_section_and_gpu_rows_do_not_apply(tmp_path):
    out = tmp_path / "probe.json"
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    done = subprocess.run([sys.executable, "-m", "bench.gpu_probe", "--dry-run", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| check | measured | target | verdict |" in done.stdout
    report = json.loads(out.read_text())
    assert report["complete"] and report["ok"] and report["dry_run"]
    names = [s.name for s in (*core.SECTIONS, *decode.SECTIONS, *tasks.SECTIONS)]
    assert [s["name"] for s in report["sections"]] == names
    for section in report["sections"]:
        assert section["rows"], f"section {section['name']} reported no row"
        for row in section["rows"]:
            assert row["ok"] is not False, row
            if row["cuda_only"] and report["device"] == "cpu":
                assert row["ok"] is None and row["verdict"] == "n/a", row
    rows = {r["check"]: r for s in report["sections"] for r in s["rows"]}
    assert any("CPU 2 threads" in check and r["value"] > 0 for check, r in rows.items())
    assert any("CPU decode (FFmpeg" in check and r["value"] > 0 for check, r in rows.items())
    nvdec = [r["check"] for s in report["sections"] if s["name"] == "nvdec" for r in s["rows"]]
    assert sum("NVDEC" in check for check in nvdec) == 3 and any("nvJPEG" in check for check in rows)
    assert any("jpeg_decoder: cpu" in check and r["value"] is None for check, r in rows.items())
    assert rows["detection on cpu: planted boxes exact through a centred letterbox"]["ok"] is True


def _fine(probe: Probe) -> list[Row]:
    return [Row("fine", "1 thing/s", 1.0, "thing/s", "", None, "", False)]


def _boom(probe: Probe) -> list[Row]:
    raise ValueError("the device caught fire")


def test_a_section_that_raises_is_a_failed_row_and_the_others_still_run(capsys):
    report = run_sections([Section("boom", _boom), Section("fine", _fine)], torch.device("cpu"), True, 2.0)
    assert [s.name for s in report.sections] == ["boom", "fine"]
    (failed,) = report.sections[0].rows
    assert failed.ok is False and failed.measured == "raised ValueError" and failed.note == "the device caught fire"
    assert report.sections[1].rows[0].verdict == "info"
    assert exit_status(report) == 1 and not report.to_json()["ok"]
    assert "| boom: section runs | raised ValueError | runs | FAIL |" in table(report)
    good = run_sections([Section("fine", _fine)], torch.device("cpu"), True, 2.0)
    assert exit_status(good) == 0


def test_sections_share_the_budget_and_measure_for_a_duration():
    seen: list[float] = []

    def record(probe: Probe) -> list[Row]:
        seen.append(probe.end.left())
        return []

    run_sections([Section("a", record, share=3.0), Section("b", record)], torch.device("cpu"), True, 4.0)
    assert 2.5 < seen[0] <= 3.0 and seen[1] > seen[0]  # b gets what a left unused
    calls = []
    rate = throughput(lambda: calls.append(1) or 4, Deadline.after(0.0), warmup=2)
    assert (rate.units, rate.runs, len(calls)) == (4, 1, 3)  # warm-ups untimed, then at least once


def test_an_unknown_section_name_is_refused():
    with pytest.raises(SystemExit) as exited:
        main(["--dry-run", "--only", "no-such-section"])
    assert exited.value.code == 2
