"""One model's Ray Serve deployment: a replica loads the archive like a TorchServe worker, and
`@serve.batch` hands it the requests TorchServe's batching would have (DESIGN section 14).

The deployment is its model's own application on `/predictions/{model}`: Serve's proxy hands it
HTTP requests directly (`__call__`), and `doors` hands it the Open Inference Protocol's by handle
(`infer`). Either way a request is refused with TorchServe's JSON when the replica already holds
its limit (`archive.replica_limit`), and answered 504 past `responseTimeout`.

The batch method never raises: `handler.engine.handle` answers every request with its own status
(a bug becomes 500 `InternalError` for its own batch). Metrics are the handler's own `video_*`
samples through `ray.serve.metrics` (exported as `ray_video_*`), with TorchServe's tag keys.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ray import serve
from ray.serve import metrics
from starlette.requests import Request
from starlette.responses import Response

from handler import engine
from handler.metrics import Kind, Sample, samples
from rayserve import wire
from rayserve.archive import Archive, replica_limit
from rayserve.gate import Gate, Keys, receive, respond
from rayserve.wire import Answer

logger = logging.getLogger(__name__)

#: Ray's own gauge (`ray_video_replica_waiting`, alert RayServeQueueFilling): requests a replica
#: holds beyond a running batch and a filling one when a batch starts; 503 past `job_queue_size`.
WAITING = "video_replica_waiting"
#: The longest `batch_wait_timeout_s` a tuning may ask for (TorchServe takes any; 10 s is absurd for video).
MAX_DELAY_MS = 10_000


class Model:
    """A replica of one model: its archive unpacked, the core loaded on its device."""

    def __init__(self, mar: str, gate: Gate) -> None:
        _log_to_replica_file()
        archive = Archive.read(Path(mar))
        folder = archive.unpack()
        gpus = _assigned_gpus()
        self.name, self.version = archive.name, archive.version
        self.served = engine.load(folder, archive.manifest, archive.yaml_config,
                                  engine.device_for(0 if gpus else None))
        self.gate, self.keys = gate, Keys(gate.key_file)
        self.batch_size = 1
        self.held = 0  # requests in this replica: waiting, batching or running
        self._refusing = False  # answering 503 since the last request it took (logged once a spell)
        self._metrics: dict[str, metrics.Counter | metrics.Gauge] = {}

    def reconfigure(self, user_config: Mapping[str, Any]) -> None:
        """Batch size and delay from the deployment's `user_config` (at start, and live from
        `video-autotune` or a redeploy: the replica keeps serving)."""
        size = int(user_config.get("batch_size", 1))
        delay_ms = float(user_config.get("max_batch_delay_ms", 100))
        if size < 1 or not 0 <= delay_ms <= MAX_DELAY_MS:
            raise ValueError(f"{self.name}: batch_size must be >= 1 and max_batch_delay_ms within "
                             f"0..{MAX_DELAY_MS} (got {size}, {delay_ms})")
        self.batch_size = size
        batcher: Any = self.run_batch  # serve.batch's wrapper: its setters apply to the live queue
        batcher.set_max_batch_size(size)
        batcher.set_batch_wait_timeout_s(delay_ms / 1000)
        logger.info("%s: batches of up to %d requests, %.0f ms delay", self.name, size, delay_ms)

    async def __call__(self, request: Request) -> Response:
        """`/predictions/{model}[/{version}]`, any method (TorchServe hands each to the handler),
        straight from Serve's proxy."""
        return await respond(request, self._http, f"the {self.name} replica")

    async def _http(self, request: Request) -> Answer:
        if not self.keys.accepts(wire.bearer(request.headers)):
            return wire.invalid_key()
        found = wire.PREDICTIONS.match(request.url.path)
        if found is None or found.group(1) != self.name:
            return wire.not_found()
        if found.group(2) is not None and found.group(2) != self.version:
            return wire.model_not_found(self.name, found.group(2))
        received = await receive(request, self.gate.max_request_size, predictions=True)
        if isinstance(received, Answer):
            return received
        return await self.infer(*received)

    async def infer(self, item: Mapping[str, object], headers: Mapping[str, object]) -> Answer:
        """One request's answer (also `doors`' call by handle): 503 when the replica is full, 504
        past `responseTimeout` (the request leaves the batch queue)."""
        limit = replica_limit(self.batch_size, self.gate.queue)
        if self.held >= limit:
            if not self._refusing:
                logger.warning("%s: this replica holds %d requests, its limit (a running batch, a filling one and "
                               "job_queue_size in config.properties): answering 503 until one is done; add "
                               "replicas (maxWorkers) if this lasts", self.name, limit)
            self._refusing = True
            return wire.queue_full(self.name)
        self._refusing = False
        self.held += 1
        try:
            answer: Answer = await asyncio.wait_for(self.run_batch((item, headers)), self.gate.timeout_s)
        except TimeoutError:
            return wire.timed_out(self.name, self.gate.timeout_s)
        finally:
            self.held -= 1
        return answer

    @serve.batch(max_batch_size=1, batch_wait_timeout_s=0.0)
    async def run_batch(self, requests: list[engine.Item]) -> list[Answer]:
        # The replica's own queue when a batch starts: what it holds beyond this batch and the next.
        waiting = Sample(WAITING, Kind.GAUGE, max(0, self.held - 2 * self.batch_size))
        # In a thread: the replica's event loop keeps taking requests (and health checks) meanwhile.
        responses, stats = await asyncio.to_thread(engine.handle, self.served, requests, self.name)
        self._emit([waiting, *samples(stats, self.batch_size)])
        return [Answer(response.status, response.body) for response in responses]

    def _emit(self, updates: list[Sample]) -> None:
        """Never fails a request: an emission error is logged and dropped."""
        try:
            for sample in updates:
                tags = {"ModelName": self.name, "Level": "Model", **dict(sample.dimensions)}
                metric = self._metric(sample)
                if isinstance(metric, metrics.Gauge):
                    metric.set(sample.value, tags=tags)
                elif sample.value > 0:  # Ray's counters refuse 0
                    metric.inc(sample.value, tags=tags)
        except Exception:
            logger.exception("emitting batch metrics failed; requests are unaffected")

    def _metric(self, sample: Sample) -> metrics.Counter | metrics.Gauge:
        found = self._metrics.get(sample.name)
        if found is None:
            keys: Any = ("ModelName", "Level", *(name for name, _ in sample.dimensions))  # Ray types it tuple[str]
            kind = metrics.Counter if sample.kind is Kind.COUNTER else metrics.Gauge
            where = "rayserve/model.py" if sample.name == WAITING else "handler/metrics.yaml"
            found = self._metrics[sample.name] = kind(sample.name, description=f"{sample.name} ({where})",
                                                      tag_keys=keys)
        return found


def _log_to_replica_file() -> None:
    """The handler's INFO lines (one per batch, as in TorchServe's model_log) go to this replica's
    Serve log file (`logs/serve/replica_<app>_<model>_<id>.log`), beside Serve's own."""
    serve_logger = logging.getLogger("ray.serve")
    for name in ("handler", "rayserve"):
        ours = logging.getLogger(name)
        ours.setLevel(logging.INFO)
        for handler in serve_logger.handlers:
            if handler not in ours.handlers:
                ours.addHandler(handler)
        ours.propagate = False


def _assigned_gpus() -> list[str]:
    """The GPUs Ray gave this replica (it sets CUDA_VISIBLE_DEVICES: the first is `cuda:0`)."""
    import ray

    try:
        return [str(g) for g in ray.get_gpu_ids()]
    except Exception:  # outside a Ray worker (tests that build a replica by hand)
        return [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
