"""Changing a live model's batch settings the only way TorchServe 0.12 allows: register a new
version with the new settings, make it the default, let the old one drain, unregister it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from autotune.archive import derive
from autotune.management import Management, Version, flush

logger = logging.getLogger(__name__)

_MARK = "-at"  # versions this tool registers: "<original>-at<batch>x<delay>"


@dataclass(frozen=True, slots=True)
class Setting:
    """TorchServe's batching settings for one model."""

    batch_size: int
    max_batch_delay_ms: int

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.max_batch_delay_ms < 0:
            raise ValueError(f"batchSize {self.batch_size}, maxBatchDelay {self.max_batch_delay_ms} ms: "
                             "use a batch of 1 or more and a delay of 0 ms or more")

    def __str__(self) -> str:
        return f"batchSize {self.batch_size}, maxBatchDelay {self.max_batch_delay_ms} ms"


def version_for(current: str, setting: Setting) -> str:
    """The version name for `setting`, derived from the version it replaces."""
    base = current.split(_MARK, 1)[0]
    return f"{base}{_MARK}{setting.batch_size}x{setting.max_batch_delay_ms}"


def setting_of(version: Version) -> Setting:
    return Setting(version.batch_size, version.max_batch_delay_ms)


def apply(management: Management, inference_url: str, model: str, store: Path, setting: Setting,
          drain_s: float = 1.0, workers: int = 1) -> Version:
    """Makes `setting` the default of `model` with no request lost; returns the new default.

    Args:
        management: the management API client.
        model: the model name.
        store: the deployment's model store folder (this process writes the new archive there).
        setting: the batching to serve with.
        inference_url: where drain sentinels go (the same key_file gives their key).
        drain_s: how long the old version's queue must stay empty before the sentinels.
        workers: workers of the new version.
    """
    current = management.default(model)
    if setting_of(current) == setting:
        return current
    version = version_for(current.version, setting)
    registered = {v.version: v for v in management.versions(model)}
    if version not in registered:
        mar = f"{model}-{version}.mar"
        derive(store / current.url, store / mar, version, setting.batch_size, setting.max_batch_delay_ms)
        logger.info("registering %s %s (%s)", model, version, setting)
        management.register(mar, model, setting.batch_size, setting.max_batch_delay_ms, workers)
    management.set_default(model, version)
    logger.info("%s default is now %s; draining %s", model, version, current.version)
    management.wait_queue_empty(model, current.version, drain_s)
    flush(inference_url, management.key_file, model, current.version, current.workers)
    management.wait_queue_empty(model, current.version, 0.0)
    management.unregister(model, current.version)
    if _MARK in current.version and (store / current.url).is_file():
        (store / current.url).unlink()  # an archive this tool wrote
    logger.info("%s: unregistered %s", model, current.version)
    return management.default(model)
