"""The pure parts of `python -m bench.engines`: a window's figures, the targets' verdicts, CPU sums."""

from __future__ import annotations

import pytest

from bench.engines import Row, Verdict, Window, cpu_delta, ratio, summarize, table, verdicts
from loadgen.metrics import Record


def record(scheduled: float, done: float, status: int | None = 200, stream: int = 0) -> Record:
    return Record(stream, 0, 1, "1280x720", scheduled, scheduled, done, status, None if status == 200 else "x")


def window(capacity: float) -> Window:
    return Window(offered_fps=96.0, frames_per_s=capacity, p50_ms=1.0, p99_ms=2.0, cpu_ms_per_frame=3.0,
                  cores_percent=4.0, statuses={"200": 1})


def test_summarize_counts_only_200s_and_the_server_cpu():
    records = [record(0.0, 0.1), record(0.5, 0.7), record(1.0, 1.3), record(1.5, 2.0, status=503),
               record(1.8, 2.0, status=None)]
    got = summarize(records, duration_s=2.0, cpu_s=0.6, cores=2, dropped=1)
    assert got.offered_fps == 3.0  # (5 sent + 1 dropped) / 2 s
    assert got.frames_per_s == 1.5  # 3 answered 200 over 0.0 .. 2.0 s
    assert got.p50_ms == pytest.approx(200.0)  # latencies 100, 200, 300 ms
    assert got.p99_ms == pytest.approx(298.0)  # NumPy's linear interpolation: 200 + 0.98 * 100
    assert got.cpu_ms_per_frame == pytest.approx(200.0)  # 600 ms / 3 frames
    assert got.cores_percent == pytest.approx(15.0)  # 0.6 s / 2 s wall / 2 cores
    assert got.statuses == {"200": 3, "503": 1, "error": 1}
    assert got.dropped == 1


def test_summarize_without_answers_or_cpu_has_no_figures():
    got = summarize([record(0.0, 1.0, status=503)], duration_s=1.0, cpu_s=None, cores=2)
    assert (got.frames_per_s, got.p50_ms, got.p99_ms, got.cpu_ms_per_frame, got.cores_percent) == (0.0, None, None,
                                                                                                     None, None)
    assert summarize([], duration_s=1.0, cpu_s=1.0, cores=1).frames_per_s == 0.0


@pytest.mark.parametrize("duration, cores", [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_summarize_refuses_a_bad_duration_or_core_count(duration, cores):
    with pytest.raises(ValueError, match="duration_s|cores"):
        summarize([], duration_s=duration, cpu_s=None, cores=cores)


def test_cpu_delta_counts_new_processes_from_zero_and_never_negative():
    assert cpu_delta({1: 2.0, 2: 5.0}, {1: 3.5, 2: 5.0, 3: 0.25}) == pytest.approx(1.75)
    assert cpu_delta({1: 2.0}, {1: 1.0}) == 0.0  # a recycled pid does not subtract


def test_ratio():
    assert ratio(9.0, 10.0) == 0.9
    assert ratio(None, 10.0) is None
    assert ratio(1.0, 0.0) is None


def test_verdicts_on_capacity_per_model():
    rows = [Row("torchserve", "m", overload=window(50.0)), Row("ray", "m", overload=window(44.0)),
            Row("pytriton", "m", overload=window(40.0)), Row("litserve", "m", overload=window(99.0))]
    got = {v.target: (v.measured, v.need, v.met) for v in verdicts(rows)}
    assert got == {"m: ray / torchserve": (pytest.approx(0.88), 0.9, False),
                   "m: torchserve / pytriton": (1.25, 1.0, True),
                   "m: ray / pytriton": (1.1, 1.0, True)}


def test_a_row_not_measured_leaves_its_targets_not_measured():
    rows = [Row("torchserve", "m", overload=window(50.0)), Row("ray", "m", note="rayserve has no CLI yet"),
            Row("pytriton", "m", overload=window(50.0))]
    got = {v.target: v.met for v in verdicts(rows)}
    assert got == {"m: ray / torchserve": None, "m: torchserve / pytriton": True, "m: ray / pytriton": None}
    assert Verdict("t", 0.9, 0.9).met is True  # the need itself is met
    assert "not measured: rayserve has no CLI yet" in table(rows)
