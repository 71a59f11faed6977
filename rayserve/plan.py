"""What to deploy, read once and shared by every room above: the archives a Serve config's args
name, their TorchServe settings, the applications' names, and what the replicas ask of the cluster.

Nothing here imports Ray: the CLI checks a plan before Ray starts, and the application builders
(`rayserve.app`), the ingress and `rayserve.deploy` all read it the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rayserve.archive import Archive, ArchiveError, Properties, Settings

logger = logging.getLogger(__name__)

#: The application on `/` (`doors`); each model's is `app_name(model)`.
APP = "video"
#: The args `rayserve.app:model` and `:doors` take.
ARGS = frozenset({"config", "model", "models", "model_store", "key_file", "replica_cpus", "ingress_replicas",
                  "ingress_resources", "autoscaling"})


def app_name(model: str) -> str:
    """The application of one model (`ServeReplica:video.<model>:<model>` in Ray's actor table)."""
    return f"{APP}.{model}"


def properties(args: Mapping[str, Any]) -> Properties:
    """`config.properties` as the args name it (`model_store` overriding the file's)."""
    store = args.get("model_store")
    return Properties.read(Path(args.get("config", "config.properties")), Path(store) if store else None)


def plan(args: Mapping[str, Any], warn: bool = True) -> list[tuple[Archive, Settings]]:
    """The archives to serve and their settings; each setting Serve ignores named in a warning.

    Raises:
        ArchiveError: an unknown arg, or an archive or setting that cannot be served.
    """
    unknown = sorted(set(args) - ARGS)
    if unknown:
        raise ArchiveError(f"unknown args {unknown}: rayserve.app:model and :doors take {sorted(ARGS)}")
    props = properties(args)
    planned = [(a, a.settings(props.entries.get(a.name, {}))) for a in props.archives(tuple(args.get("models") or ()))]
    for archive, settings in planned if warn else ():
        for line in settings.warnings(archive.name):
            logger.warning(line)
    return planned


@dataclass(frozen=True, slots=True)
class Demand:
    """What one deployment asks of the cluster when it starts.

    Attributes:
        name: the deployment (the model's name, or `doors`).
        replicas: replicas at start (`minWorkers`, or `ingress_replicas`).
        resources: what each replica holds (`CPU`, `GPU`, custom resources), zeros left out.
    """

    name: str
    replicas: int
    resources: Mapping[str, float]


def demands(args: Mapping[str, Any]) -> list[Demand]:
    """Each deployment's replicas and resources, as `rayserve.app` builds them."""
    props = properties(args)
    found = []
    for archive, settings in plan(args, warn=False):
        options = settings.deployment_options(props.job_queue_size, float(args.get("replica_cpus", 1)))
        actor = options["ray_actor_options"]
        replicas = options.get("num_replicas", options.get("autoscaling_config", {}).get("min_replicas", 1))
        found.append(Demand(archive.name, int(replicas), _nonzero({"CPU": actor["num_cpus"], "GPU": actor["num_gpus"]})))
    doors = dict(args.get("ingress_resources") or {})
    found.append(Demand("doors", int(args.get("ingress_replicas", 1)), _nonzero(doors)))
    return found


def extras(args: Mapping[str, Any]) -> list[str]:
    """The project's extras the served archives need besides `ray` (`onnx` for an ONNX graph)."""
    return sorted({extra for archive, _ in plan(args, warn=False) for extra in archive.extras})


def _nonzero(resources: Mapping[str, float]) -> dict[str, float]:
    return {name: float(amount) for name, amount in resources.items() if amount}
