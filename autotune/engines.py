"""What `video-autotune watch` reads and changes on each serving engine.

TorchServe: the metrics port's `video_*` and `ts_*` series; a new batch size is a new model
version made default while the old one drains (`autotune.switch`). Ray Serve (`video-ray`): each
node's metrics port (`ray_video_*` from the handler, `ray_serve_*` from Serve); a new batch size
is a new `user_config` that the live replicas take in `reconfigure`, no replica restarted
(`rayserve.deploy.tune`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import requests

from autotune.management import Management, ManagementError
from autotune.prom import Snapshot, ray_snapshot
from autotune.scrape import scrape
from autotune.sweep import Deployment
from autotune.switch import Setting, apply, setting_of


class Engine(Protocol):
    """A model on a serving engine, as the watcher sees it."""

    model: str

    def scrape(self) -> Snapshot: ...

    def current(self) -> Setting: ...

    def apply(self, setting: Setting, drain_s: float) -> None: ...


class TorchServe:
    """A TorchServe deployment with the model API on."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment, self.model = deployment, deployment.model
        self.management = Management(deployment.management_url, deployment.key_file)

    def scrape(self) -> Snapshot:
        return scrape(self.deployment.metrics_url, self.model)

    def current(self) -> Setting:
        return setting_of(self.management.default(self.model))

    def apply(self, setting: Setting, drain_s: float) -> None:
        d = self.deployment
        apply(self.management, d.inference_url, d.model, d.model_store, setting, drain_s, d.workers)


class RayServe:
    """A model of the application `video-ray start` deployed (`rayserve.deploy`), on a Ray cluster
    this process has joined (`ray.init`).

    Args:
        model: the model (its deployment's name).
        metrics_urls: every node's metrics port (`--metrics-export-port`): replicas on several
            nodes each export their own series.
        args: the application's args (`video-ray.json`'s `args`).
        tuning: the batch settings in force (`video-ray.json`'s `tuning`).
        state: where to keep args and tuning after each change (None: nowhere).
    """

    def __init__(self, model: str, metrics_urls: Sequence[str], args: Mapping[str, Any],
                 tuning: Mapping[str, Mapping[str, float]], state: Path | None = None) -> None:
        from rayserve.plan import plan

        self.model, self.metrics_urls, self.state = model, list(metrics_urls), state
        self.args, self.tuning = dict(args), {name: dict(v) for name, v in tuning.items()}
        planned = {archive.name: settings for archive, settings in plan(self.args, warn=False)}
        if model not in planned:
            raise ValueError(f"{model!r} is not served by this application (it serves {', '.join(sorted(planned))})")
        self._archive = planned[model]

    def scrape(self) -> Snapshot:
        text = "".join(requests.get(url.rstrip("/") + "/metrics", timeout=10).text + "\n"
                       for url in self.metrics_urls)
        return ray_snapshot(text, self.model, time.monotonic())

    def current(self) -> Setting:
        tuned = self.tuning.get(self.model, {})
        return Setting(int(tuned.get("batch_size", self._archive.batch_size)),
                       round(tuned.get("max_batch_delay_ms", self._archive.max_batch_delay_ms)))

    def apply(self, setting: Setting, drain_s: float) -> None:
        """Live: nothing to drain (`drain_s` is TorchServe's)."""
        from rayserve import deploy

        try:
            self.tuning = deploy.tune(self.args, self.tuning, self.model, {
                "batch_size": setting.batch_size, "max_batch_delay_ms": setting.max_batch_delay_ms})
        except RuntimeError as err:  # Serve refused the update or it did not finish
            raise ManagementError(f"Ray Serve: {err}") from None
        if self.state is not None:
            deploy.save(self.args, self.tuning, self.state)
