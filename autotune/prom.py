"""The few series the tuner needs, from TorchServe's Prometheus text (the metrics port)."""

from __future__ import annotations

from dataclasses import dataclass

from tsutil.prom import samples


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One scrape of one model's series.

    Counters are summed over versions and hosts; gauges hold the last batch's value (None before
    the first batch). `t` is the scrape time in seconds on the caller's clock.
    """

    t: float
    frames_total: float = 0.0
    batches_total: float = 0.0
    batch_size: float | None = None
    fill_ratio: float | None = None
    prediction_ms: float | None = None
    requests_total: float = 0.0
    queue_latency_us: float = 0.0


def snapshot(text: str, model: str, t: float) -> Snapshot:
    """The model's series from one scrape. Handler metrics carry `ModelName`, TorchServe's
    frontend metrics `model_name`."""
    values: dict[str, float] = {}
    for sample in samples(text):
        if sample.model() != model:
            continue
        name, value = sample.name, sample.value
        if name in ("video_frames_total", "video_batches_total", "ts_inference_requests_total",
                    "ts_queue_latency_microseconds"):
            values[name] = values.get(name, 0.0) + value
        elif name in ("video_batch_size", "video_batch_fill_ratio", "PredictionTime"):
            values[name] = value
    return Snapshot(t, values.get("video_frames_total", 0.0), values.get("video_batches_total", 0.0),
                    values.get("video_batch_size"), values.get("video_batch_fill_ratio"),
                    values.get("PredictionTime"), values.get("ts_inference_requests_total", 0.0),
                    values.get("ts_queue_latency_microseconds", 0.0))


#: Ray Serve's names (`video-ray`) for the series `snapshot` reads: the handler's own, prefixed
#: `ray_`, and Serve's router counters for requests and their wait (by `deployment`, the model).
_RAY_SUMS = {"ray_video_frames_total": "video_frames_total", "ray_video_batches_total": "video_batches_total",
             "ray_serve_num_router_requests_total": "ts_inference_requests_total"}
_RAY_GAUGES = {"ray_video_batch_size": "video_batch_size", "ray_video_batch_fill_ratio": "video_batch_fill_ratio"}
_RAY_WAIT = "ray_serve_request_router_fulfillment_time_ms_sum"


def ray_snapshot(text: str, model: str, t: float) -> Snapshot:
    """`snapshot` for Ray Serve's metrics ports (one scrape of each node, concatenated): requests
    are the ones its routers took, their queue wait the time until a replica took them."""
    values: dict[str, float] = {}
    for sample in samples(text):
        name, value = sample.name, sample.value
        if (sample.model() or sample.labels.get("deployment")) != model:
            continue
        if name in _RAY_SUMS:
            values[_RAY_SUMS[name]] = values.get(_RAY_SUMS[name], 0.0) + value
        elif name in _RAY_GAUGES:
            values[_RAY_GAUGES[name]] = value
        elif name == _RAY_WAIT:
            values["wait_us"] = values.get("wait_us", 0.0) + value * 1000.0
    return Snapshot(t, values.get("video_frames_total", 0.0), values.get("video_batches_total", 0.0),
                    values.get("video_batch_size"), values.get("video_batch_fill_ratio"), None,
                    values.get("ts_inference_requests_total", 0.0), values.get("wait_us", 0.0))


def batch_samples(snapshots: list[Snapshot]) -> list[tuple[float, float]]:
    """(frames, ms) of single batches, read from consecutive scrapes.

    The gauges only hold the last batch, so a batch is sampled when exactly one batch happened
    between two scrapes and its PredictionTime (emitted after the handler's own metrics) has
    already replaced the previous batch's value. Scraping faster than batches arrive samples most.
    """
    out = []
    for before, after in zip(snapshots, snapshots[1:]):
        if (after.batches_total - before.batches_total == 1 and after.batch_size is not None
                and after.prediction_ms is not None and after.prediction_ms != before.prediction_ms):
            out.append((after.batch_size, after.prediction_ms))
    return out


@dataclass(frozen=True, slots=True)
class Traffic:
    """What the model saw between two scrapes.

    Attributes:
        seconds: the window.
        frame_rate: frames per second reaching the handler (capped by what it can serve).
        request_rate: requests per second arriving at TorchServe (503s included): the demand.
        mean_batch: frames per batch (0 without batches).
        fill: the last batch's fill ratio (requests / batchSize), None before any batch.
        queue_ms: mean time a request waited in TorchServe's queue (0 without requests).
    """

    seconds: float
    frame_rate: float
    request_rate: float
    mean_batch: float
    fill: float | None
    queue_ms: float

    @property
    def demand_fps(self) -> float:
        """Frames per second asked for: what reached the handler, or the requests that arrived
        when the handler is saturated and the queue holds (or refuses) the rest."""
        return max(self.frame_rate, self.request_rate)


def traffic(before: Snapshot, after: Snapshot) -> Traffic:
    """Rates between two scrapes; a counter reset (restart) counts as no traffic."""
    seconds = after.t - before.t
    if seconds <= 0:
        raise ValueError(f"scrapes {before.t} and {after.t}: the second must be later")
    frames = max(0.0, after.frames_total - before.frames_total)
    batches = max(0.0, after.batches_total - before.batches_total)
    requests = max(0.0, after.requests_total - before.requests_total)
    queue_us = max(0.0, after.queue_latency_us - before.queue_latency_us)
    return Traffic(seconds, frames / seconds, requests / seconds, frames / batches if batches else 0.0,
                   after.fill_ratio,
                   queue_us / requests / 1000.0 if requests else 0.0)
