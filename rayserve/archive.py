"""A `.mar` as Ray Serve serves it: its manifest and model-config YAML read, TorchServe's settings
mapped to Serve's deployment options, and every setting without a Ray meaning named.

The archive is the one artifact of both engines (DESIGN section 14): what `archive.sh` wrote is
served as it is. TorchServe's own precedence holds: `config.properties`' `models=` entry of the
model (its default version), then the YAML inside the archive, which wins.
"""

from __future__ import annotations

import json
import logging
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import javaproperties
import yaml

logger = logging.getLogger(__name__)

#: TorchServe's defaults for what a model's entry leaves out.
_DEFAULTS = {"batchSize": 1, "maxBatchDelay": 100, "minWorkers": 1, "maxWorkers": 1, "responseTimeout": 120}
#: Settings that map to Serve (or that the handler reads itself).
MAPPED = frozenset({*_DEFAULTS, "deviceType", "handler", "marName", "defaultVersion"})
#: What each unmapped setting does on TorchServe, for the warning.
_NO_RAY_MEANING = {
    "sequenceBatching": "TorchServe's stream lane (gRPC StreamPredictions2); Ray batches requests only",
    "maxNumSequence": "sequence batching", "maxSequenceJobQueueSize": "sequence batching",
    "sequenceMaxIdleMSec": "sequence batching", "continuousBatching": "continuous batching",
    "deviceIds": "Ray assigns each replica its GPUs (num_gpus)",
    "parallelType": "TorchServe's model parallelism", "parallelLevel": "TorchServe's model parallelism",
    "startupTimeout": "Serve's health checks decide when a replica is up",
    "useJobTicket": "each replica bounds its queue by job_queue_size",
}


class ArchiveError(ValueError):
    """A `.mar` or `config.properties` that cannot be served; the message names the file and the fix."""


def replica_limit(batch_size: int, queue: int) -> int:
    """Requests one replica holds before it answers 503 itself: a running batch, one filling while
    it runs, and `job_queue_size` (`queue`) waiting, as a TorchServe worker's job queue."""
    return max(5, 2 * batch_size) + queue


def serve_limits(batch_size: int, queue: int) -> dict[str, int]:
    """Serve's own bounds, kept above the replica's (whose 503 is TorchServe's JSON, where Serve's
    proxy would answer plain text): `max_queued_requests` only backs it up."""
    return {"max_ongoing_requests": 2 * replica_limit(batch_size, queue), "max_queued_requests": queue}


@dataclass(frozen=True, slots=True)
class Settings:
    """One model's TorchServe settings, as Serve takes them.

    Attributes:
        batch_size: `batchSize`, requests per batch (`max_batch_size`).
        max_batch_delay_ms: `maxBatchDelay` (`batch_wait_timeout_s` = this / 1000).
        min_workers: `minWorkers` (replicas; autoscaled up to `max_workers` when they differ).
        max_workers: `maxWorkers`.
        response_timeout_s: `responseTimeout`: the ingress answers 504 past it.
        gpu: `deviceType: gpu` (one GPU per replica, `num_gpus`).
        ignored: the settings Serve has no meaning for, with what they do on TorchServe.
    """

    batch_size: int = 1
    max_batch_delay_ms: float = 100
    min_workers: int = 1
    max_workers: int = 1
    response_timeout_s: float = 120
    gpu: bool = False
    ignored: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, entry: Mapping[str, Any], where: str) -> Settings:
        """From a model's merged TorchServe settings.

        Raises:
            ArchiveError: a value that is not a number, naming the key and `where` it came from.
        """
        merged = {**_DEFAULTS, **entry}
        try:
            numbers = {key: float(merged[key]) for key in _DEFAULTS}
        except (TypeError, ValueError):
            bad = next(k for k in _DEFAULTS if not _is_number(merged[k]))
            raise ArchiveError(f"{where}: {bad} = {merged[bad]!r} is not a number") from None
        if numbers["batchSize"] < 1 or numbers["minWorkers"] < 0 or numbers["maxWorkers"] < max(1, numbers["minWorkers"]):
            raise ArchiveError(f"{where}: batchSize must be >= 1 and 0 <= minWorkers <= maxWorkers, maxWorkers >= 1 "
                               f"(got {int(numbers['batchSize'])}, {int(numbers['minWorkers'])}, "
                               f"{int(numbers['maxWorkers'])})")
        ignored = tuple((key, _NO_RAY_MEANING.get(key, "not a Ray Serve setting"))
                        for key in entry if key not in MAPPED)
        return cls(int(numbers["batchSize"]), numbers["maxBatchDelay"], int(numbers["minWorkers"]),
                   int(numbers["maxWorkers"]), numbers["responseTimeout"],
                   str(merged.get("deviceType", "")).lower() == "gpu", ignored)

    def deployment_options(self, queue: int, num_cpus: float) -> dict[str, Any]:
        """Serve's options for the model's deployment (`Deployment.options(**...)`); `queue` is
        `job_queue_size`."""
        options: dict[str, Any] = {
            **serve_limits(self.batch_size, queue),
            "ray_actor_options": {"num_cpus": num_cpus, "num_gpus": 1 if self.gpu else 0},
            "user_config": {"batch_size": self.batch_size, "max_batch_delay_ms": self.max_batch_delay_ms},
        }
        if self.min_workers == self.max_workers:
            options["num_replicas"] = self.max_workers
        else:
            options["autoscaling_config"] = {"min_replicas": self.min_workers, "max_replicas": self.max_workers,
                                             "target_ongoing_requests": self.batch_size}
        return options

    def warnings(self, model: str) -> list[str]:
        """One line per setting Serve ignores."""
        return [f"{model}: {key} has no Ray Serve meaning and is ignored ({why})" for key, why in self.ignored]


@dataclass(frozen=True, slots=True)
class Archive:
    """One `.mar`: where it is, its manifest's `model` object and its model-config YAML."""

    path: Path
    manifest: Mapping[str, Any]
    yaml_config: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.manifest["modelName"])

    @property
    def version(self) -> str:
        return str(self.manifest.get("modelVersion") or "1.0")

    @property
    def extras(self) -> tuple[str, ...]:
        """The project's extras a replica needs to load it (`onnx`: ONNX Runtime for an `.onnx` graph)."""
        return ("onnx",) if str(self.manifest.get("serializedFile", "")).endswith(".onnx") else ()

    @classmethod
    def read(cls, path: Path) -> Archive:
        """Reads the manifest and the YAML without unpacking the rest.

        Raises:
            ArchiveError: not a `.mar`, naming the file.
        """
        try:
            with zipfile.ZipFile(path) as mar:
                manifest = json.loads(mar.read("MAR-INF/MANIFEST.json"))["model"]
                config_file = manifest.get("configFile")
                config = yaml.safe_load(mar.read(config_file)) if config_file else {}
        except (OSError, KeyError, ValueError, zipfile.BadZipFile, yaml.YAMLError) as err:
            raise ArchiveError(f"{path}: not a model archive that archive.sh wrote ({err})") from None
        return cls(Path(path), manifest, config or {})

    def unpack(self) -> str:
        """Unpacks the archive into a new temporary folder (one per replica) and returns it."""
        folder = tempfile.mkdtemp(prefix=f"{self.name}-")
        with zipfile.ZipFile(self.path) as mar:
            mar.extractall(folder)
        return folder

    def settings(self, entry: Mapping[str, Any]) -> Settings:
        """TorchServe's settings for this model: `entry` (from `models=`), then the archive's YAML."""
        merged = {**entry, **{k: v for k, v in self.yaml_config.items() if k != "handler"}}
        return Settings.of(merged, f"{self.path.name} (its model-config YAML, then config.properties' models=)")


@dataclass(frozen=True, slots=True)
class Properties:
    """What Ray reads of TorchServe's `config.properties`.

    Attributes:
        store: the model store folder; a relative one is taken from the folder of the properties
            file (wherever Ray builds the application, a head or a KubeRay pod).
        load_models: the archives to serve (file names, or model names).
        entries: per model name, its default version's `models=` entry.
        job_queue_size: `job_queue_size` (requests waiting per replica, beyond its batches).
        max_request_size: `max_request_size` in bytes (413 above it).
    """

    store: Path
    load_models: tuple[str, ...]
    entries: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    job_queue_size: int = 100
    max_request_size: int = 6553500

    @classmethod
    def read(cls, path: Path, model_store: Path | None = None) -> Properties:
        """`model_store` (absolute, or from the working directory) overrides the file's.

        Raises:
            ArchiveError: naming the file and the key.
        """
        try:
            with open(path, encoding="utf-8") as f:
                props = javaproperties.load(f)
            models = json.loads(props.get("models") or "{}")
        except (OSError, ValueError) as err:
            raise ArchiveError(f"{path}: cannot read TorchServe's properties ({err})") from None
        store = (model_store or path.parent / props.get("model_store", "model_store")).resolve()
        load = tuple(n.strip() for n in props.get("load_models", "all").split(",") if n.strip())
        entries = {name: _default_version(versions) for name, versions in models.items()}
        return cls(store, load, entries, int(props.get("job_queue_size", 100)),
                   int(props.get("max_request_size", 6553500)))

    def archives(self, only: tuple[str, ...] = ()) -> list[Archive]:
        """The archives to serve: `only` (model names) or `load_models` (`all`: every `.mar`).

        Raises:
            ArchiveError: a named model with no archive in the store, naming the ones there are.
        """
        found = {a.name: a for a in map(Archive.read, sorted(self.store.glob("*.mar")))}
        by_file = {a.path.name: a for a in found.values()}
        wanted = only or (tuple(found) if self.load_models in ((), ("all",)) else self.load_models)
        missing = [n for n in wanted if n not in found and n not in by_file]
        if missing:
            raise ArchiveError(f"no archive for {', '.join(missing)} in {self.store} (it holds "
                               f"{', '.join(sorted(found)) or 'none'}): run ./archive.sh, or name a model it holds")
        return [found.get(n) or by_file[n] for n in wanted]


def _default_version(versions: Mapping[str, Any]) -> Mapping[str, Any]:
    entries = [v for v in versions.values() if isinstance(v, Mapping)]
    return next((v for v in entries if v.get("defaultVersion")), entries[0] if entries else {})


def _is_number(value: object) -> bool:
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True
