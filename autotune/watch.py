"""`video-autotune watch`: the sidecar that follows the traffic with the batch size."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import requests

from autotune.engines import Engine
from autotune.fit import LatencyFit
from autotune.management import ManagementError
from autotune.policy import LADDER, Hysteresis, batch_for
from autotune.prom import Traffic, traffic
from autotune.switch import Setting

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Policy:
    """How watch decides.

    Attributes:
        interval_s: seconds between scrapes (the traffic window).
        hold_s: a new batch size must be wanted this long before it is applied.
        cooldown_s: no change sooner than this after the last one.
        margin: capacity to keep spare above the measured frame rate (0.3 = 30 %).
        ladder: the batch sizes to choose from.
        max_batch_delay_ms: the delay to register with (None: keep the current one).
        fit: the batch latency model (from a sweep); None: size batches by the frames that
            arrive within one delay.
        queue_high_ms: mean queue wait above which the next larger rung is wanted whatever the rate.
        drain_s: how long the old version's queue must stay empty before it is unregistered
            (TorchServe's; Ray's replicas change in place).
    """

    interval_s: float = 5.0
    hold_s: float = 30.0
    cooldown_s: float = 60.0
    margin: float = 0.3
    ladder: Sequence[int] = LADDER
    max_batch_delay_ms: int | None = None
    fit: LatencyFit | None = None
    queue_high_ms: float = 100.0
    drain_s: float = 1.0


def fit_from_report(path: Path) -> LatencyFit:
    """The fit a `video-autotune sweep --report` wrote."""
    data = json.loads(path.read_text()).get("fit")
    if not data:
        raise ValueError(f"{path} has no latency fit: rerun the sweep with more than one batch size")
    return LatencyFit(**data)


def desired_batch(seen: Traffic, current: Setting, policy: Policy) -> int:
    """The batch size the traffic in `seen` calls for."""
    delay = current.max_batch_delay_ms if policy.max_batch_delay_ms is None else policy.max_batch_delay_ms
    want = batch_for(seen.demand_fps, policy.fit, delay, policy.ladder, policy.margin)
    if seen.queue_ms > policy.queue_high_ms:  # falling behind whatever the model says
        larger = [b for b in sorted(policy.ladder) if b > current.batch_size]
        want = max(want, larger[0] if larger else current.batch_size)
    return want


def watch(engine: Engine, policy: Policy, stop: threading.Event,
          on_switch: Callable[[Setting, Setting], None] | None = None) -> list[Setting]:
    """Follows the traffic until `stop` is set; returns the settings applied, in order.

    Errors talking to the engine are logged and retried next interval: the sidecar outlives
    restarts and key rotations (TorchServe's key file is re-read for every call).
    """
    hysteresis = Hysteresis(policy.hold_s, policy.cooldown_s)
    applied: list[Setting] = []
    previous = None
    while not stop.is_set():
        try:
            now = engine.scrape()
            if previous is None:
                previous = now
                stop.wait(policy.interval_s)
                continue
            seen, previous = traffic(previous, now), now
            current = engine.current()
            want = desired_batch(seen, current, policy)
            logger.info("%.1f frames/s (%.1f req/s), batch %.2f, fill %s, queue %.1f ms: want %d, serving %s",
                        seen.frame_rate, seen.request_rate, seen.mean_batch, seen.fill, seen.queue_ms, want, current)
            target = hysteresis.update(now.t, want, current.batch_size)
            if target is not None:
                delay = current.max_batch_delay_ms if policy.max_batch_delay_ms is None else policy.max_batch_delay_ms
                new = Setting(target, delay)
                logger.info("switching %s: %s -> %s", engine.model, current, new)
                engine.apply(new, policy.drain_s)
                hysteresis.switched(time.monotonic())
                applied.append(new)
                previous = None  # the switch's own window is not traffic
                if on_switch is not None:
                    on_switch(current, new)
        except (ManagementError, requests.RequestException, OSError, ValueError) as exc:
            logger.warning("watch: %s; retrying in %g s", exc, policy.interval_s)
        stop.wait(policy.interval_s)
    return applied
