"""A run's metrics as a table for people, JSON for machines and a latency-over-time PNG."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadgen.metrics import Latency, Metrics, Record


def to_json(metrics: Metrics, records: Sequence[Record], config: dict[str, Any],
            burst: tuple[float, float] | None) -> dict[str, Any]:
    """The JSON report: the headline numbers, per camera, the run's settings and every request."""
    out = dataclasses.asdict(metrics)
    out["per_stream"] = {str(k): v for k, v in out["per_stream"].items()}
    out["burst_s"] = list(burst) if burst else None
    out["config"] = config
    out["latency_basis"] = ("ms from the scheduled send (X-Capture-Time) to the answer, over requests "
                            "with an HTTP answer; numpy.percentile, linear interpolation")
    out["records"] = [
        {"stream": r.stream, "frame_id": r.frame_id, "frames": r.frames, "resolution": r.resolution,
         "scheduled_s": r.scheduled, "sent_s": r.sent, "done_s": r.done,
         "status": r.status, "error": r.error, "latency_ms": r.latency_ms}
        for r in records]
    return out


def write_json(path: Path, report: dict[str, Any]) -> None:
    path.write_text(json.dumps(report, indent=1) + "\n")


def _row(name: str, requests: int, frames: int, responses: dict[str, int], lat: Latency) -> str:
    answers = " ".join(f"{k}:{v}" for k, v in responses.items())
    return (f"{name:<8} {requests:>8} {frames:>8}  {lat.p50:>8.1f} {lat.p95:>8.1f} {lat.p99:>8.1f} "
            f"{lat.max:>8.1f}  {answers}")


def table(metrics: Metrics) -> str:
    """The end-of-run summary: rates, answers by status, latency per camera and overall, verdict."""
    lines = [
        f"offered {metrics.offered_fps:.1f} fps, achieved {metrics.achieved_fps:.1f} fps (frames answered 200 "
        f"per second over {metrics.wall_s:.1f} s); send lag p99 {metrics.send_lag_ms.p99:.1f} ms"
        + (f"; {metrics.frames_dropped} frames dropped unsent" if metrics.frames_dropped else ""),
        f"{'stream':<8} {'requests':>8} {'frames':>8}  {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
        f"{'max ms':>8}  answers",
    ]
    for stream, s in metrics.per_stream.items():
        lines.append(_row(f"cam-{stream}", s.requests_sent, s.frames_sent, s.responses, s.latency_ms))
    lines.append(_row("all", metrics.requests_sent, metrics.frames_sent, metrics.responses, metrics.latency_ms))
    if metrics.sla_met:
        verdict = f"SLA MET: every request answered 200, p99 {metrics.latency_ms.p99:.1f} ms <= {metrics.sla_ms:g} ms"
    else:
        why = []
        if not metrics.all_ok:
            bad = sum(v for k, v in metrics.responses.items() if k != "200")
            if bad or not metrics.requests_sent:
                why.append(f"{bad} of {metrics.requests_sent} requests not answered 200")
            if metrics.frames_dropped:
                why.append(f"{metrics.frames_dropped} frames dropped unsent (client too far behind)")
        if metrics.latency_ms.p99 > metrics.sla_ms:
            why.append(f"p99 {metrics.latency_ms.p99:.1f} ms > {metrics.sla_ms:g} ms")
        verdict = "SLA MISSED: " + "; ".join(why)
    lines.append(verdict)
    return "\n".join(lines)


def plot(path: Path, records: Sequence[Record], metrics: Metrics,
         burst: tuple[float, float] | None, title: str = "") -> None:
    """Latency of each request over its send time (200 and errors apart), the SLA line and the
    burst shaded; below it, offered and answered frames per second."""
    import matplotlib  # heavy and optional until a plot is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1.3]})
    for ax in (top, bottom):
        if burst:
            ax.axvspan(*burst, color="tab:orange", alpha=0.15, label="burst" if ax is top else None)
    ok = [r for r in records if r.status == 200]
    bad = [r for r in records if r.status != 200]
    top.scatter([r.scheduled for r in ok], [r.latency_ms for r in ok], s=4, color="tab:blue", label="200")
    if bad:
        top.scatter([r.scheduled for r in bad], [r.latency_ms for r in bad], s=8, color="tab:red",
                    marker="x", label="not 200")
    top.axhline(metrics.sla_ms, color="black", linestyle="--", linewidth=1, label=f"SLA {metrics.sla_ms:g} ms")
    top.set_ylabel("latency (ms)")
    top.set_yscale("log")
    top.legend(loc="upper left", fontsize=8)
    top.set_title(title or f"p50 {metrics.latency_ms.p50:.0f} ms, p99 {metrics.latency_ms.p99:.0f} ms, "
                           f"{metrics.achieved_fps:.0f}/{metrics.offered_fps:.0f} fps")
    if records:
        end = max(r.done for r in records)
        width = 0.5
        bins = [i * width for i in range(int(end / width) + 2)]
        bottom.hist([r.scheduled for r in records], bins=bins, weights=[r.frames / width for r in records],
                    histtype="step", color="gray", label="offered")
        bottom.hist([r.done for r in ok], bins=bins, weights=[r.frames / width for r in ok],
                    histtype="step", color="tab:blue", label="answered 200")
        bottom.legend(loc="upper left", fontsize=8)
    bottom.set_ylabel("frames/s")
    bottom.set_xlabel("seconds since start")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
