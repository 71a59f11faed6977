"""The load generator's pure metrics: exact values on known inputs, properties on any input."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen import report
from loadgen.metrics import Latency, Record, calculate_metrics


def _record(stream=0, latency_ms=10.0, status=200, at=0.0, frames=1, lag_ms=0.0):
    return Record(stream, 0, frames, "1280x720", at, at + lag_ms / 1000, at + latency_ms / 1000, status,
                  None if status == 200 else "X")


def test_percentiles_are_numpys_linear_ones_on_known_values():
    # 1..100 ms: linear interpolation puts p50 at 50.5, p95 at 95.05, p99 at 99.01
    records = [_record(latency_ms=float(v), at=v / 100) for v in range(1, 101)]
    m = calculate_metrics(records, duration_s=1.0, sla_ms=100.0)
    assert m.latency_ms.p50 == pytest.approx(50.5)
    assert m.latency_ms.p95 == pytest.approx(95.05)
    assert m.latency_ms.p99 == pytest.approx(99.01)
    assert m.latency_ms.max == pytest.approx(100.0)
    assert m.latency_ms.mean == pytest.approx(50.5)
    assert m.sla_met and m.all_ok


def test_one_value_is_every_percentile_and_nothing_is_zero():
    assert Latency.of([7.0]) == Latency(7.0, 7.0, 7.0, 7.0, 7.0)
    assert Latency.of([]) == Latency()


def test_counts_rates_and_verdict():
    records = [_record(0, 20, 200, 0.0), _record(0, 30, 200, 0.5), _record(1, 40, 503, 0.25),
               _record(1, 50, None, 0.75, frames=1), _record(1, 25, 200, 0.9, frames=4)]
    m = calculate_metrics(records, duration_s=1.0, sla_ms=1000.0, offered_frames=8)
    assert (m.requests_sent, m.frames_sent) == (5, 8)
    assert m.responses == {"200": 3, "503": 1, "error": 1}
    assert m.offered_fps == 8.0
    # 6 frames answered 200 from t=0 to the last answer at 0.925 s
    assert m.wall_s == pytest.approx(0.925)
    assert m.achieved_fps == pytest.approx(6 / 0.925)
    # the unanswered request has no latency: p-values over 20, 30, 40, 25
    assert m.latency_ms.max == pytest.approx(40.0)
    assert not m.all_ok and not m.sla_met
    assert m.per_stream[0].responses == {"200": 2}
    assert m.per_stream[1].responses == {"200": 1, "503": 1, "error": 1}
    assert m.per_stream[1].frames_sent == 6


def test_the_sla_is_on_p99():
    records = [_record(latency_ms=10.0, at=i / 100) for i in range(99)] + [_record(latency_ms=1000.0, at=1.0)]
    p99 = float(np.percentile([r.latency_ms for r in records], 99))
    assert p99 == pytest.approx(19.9)
    assert calculate_metrics(records, 1.0, sla_ms=p99).sla_met is True
    assert calculate_metrics(records, 1.0, sla_ms=p99 - 0.01).sla_met is False


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="duration_s = 0"):
        calculate_metrics([], 0, 10)
    with pytest.raises(ValueError, match="sla_ms = -1"):
        calculate_metrics([], 1, -1)


def test_an_empty_run_meets_nothing():
    m = calculate_metrics([], 1.0, 100.0)
    assert (m.frames_sent, m.achieved_fps, m.sla_met) == (0, 0.0, False)


records_strategy = st.lists(
    st.builds(_record, stream=st.integers(0, 3), latency_ms=st.floats(0.1, 1e5),
              status=st.sampled_from([200, 200, 200, 400, 503, None]), at=st.floats(0, 100),
              frames=st.integers(1, 4), lag_ms=st.floats(0, 50)),
    min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(records_strategy, st.floats(0.5, 100), st.floats(0, 1e5))
def test_properties(records, duration, sla):
    m = calculate_metrics(records, duration, sla)
    lat = m.latency_ms
    assert lat.p50 <= lat.p95 <= lat.p99 <= lat.max
    assert sum(m.responses.values()) == m.requests_sent == len(records)
    assert m.frames_sent == sum(r.frames for r in records)
    assert sum(s.requests_sent for s in m.per_stream.values()) == m.requests_sent
    assert m.sla_met == (all(r.status == 200 for r in records) and lat.p99 <= sla)
    answered = [r.latency_ms for r in records if r.status is not None]
    if answered:
        assert lat.max == max(answered) and min(answered) <= lat.p50
    assert m.achieved_fps >= 0 and math.isfinite(m.achieved_fps)


@settings(max_examples=50, deadline=None)
@given(records_strategy)
def test_percentiles_recompute_from_the_json_report(records):
    m = calculate_metrics(records, 1.0, 100.0)
    data = json.loads(json.dumps(report.to_json(m, records, {}, None)))
    answered = [r["latency_ms"] for r in data["records"] if r["status"] is not None]
    if answered:
        p50, p95, p99 = np.percentile(answered, [50, 95, 99])
        assert (data["latency_ms"]["p50"], data["latency_ms"]["p95"], data["latency_ms"]["p99"]) == (p50, p95, p99)
    statuses = {}
    for r in data["records"]:
        key = "error" if r["status"] is None else str(r["status"])
        statuses[key] = statuses.get(key, 0) + 1
    assert data["responses"] == statuses
    assert data["frames_sent"] == sum(r["frames"] for r in data["records"])


def test_table_names_every_stream_and_the_verdict():
    m = calculate_metrics([_record(0, 10), _record(1, 300, 503, 0.5)], 1.0, 100.0)
    text = report.table(m)
    assert "cam-0" in text and "cam-1" in text and "all" in text
    assert "SLA MISSED" in text and "1 of 2 requests not answered 200" in text and "p99" in text
    assert "SLA MET" in report.table(calculate_metrics([_record(0, 10)], 1.0, 100.0))


def test_plot_writes_a_png(tmp_path):
    records = [_record(i % 2, 10 + i, 200 if i % 5 else 503, i / 10) for i in range(30)]
    m = calculate_metrics(records, 3.0, 50.0)
    report.plot(tmp_path / "p.png", records, m, (1.0, 2.0))
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
