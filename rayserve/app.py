"""The Ray Serve application: one deployment per archive, and the ingress in front of them.

`rayserve.app:build` is an application builder, so a Serve config (`serve deploy`, or KubeRay's
`serveConfigV2`) names it with its args:

    applications:
      - name: video
        route_prefix: /
        import_path: rayserve.app:build
        args: {config: config.properties, key_file: key_file.json}

Args: `config` (TorchServe's properties: `model_store`, `load_models`, `models=`,
`job_queue_size`, `max_request_size`), `models` (a subset of model names), `model_store` (overrides
the properties'), `key_file` (`key_file.json`; null turns token authorization off),
`replica_cpus` (Ray CPUs a model replica holds, default 1), `ingress_replicas` (default 1),
`ingress_resources` (Ray resources that pin the ingress to nodes, e.g. the head's), `autoscaling`
(Serve `autoscaling_config` keys, e.g. `upscale_delay_s`, for every model whose `minWorkers` and
`maxWorkers` differ). Batch settings change live through the config's `deployments` overrides
(`rayserve.deploy.tune`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ray import serve
from ray.serve import Application
from ray.serve.deployment import Deployment

from rayserve.archive import Archive, ArchiveError, Properties, Settings
from rayserve.ingress import Doors, Route
from rayserve.model import Model

logger = logging.getLogger(__name__)

_ARGS = frozenset({"config", "models", "model_store", "key_file", "replica_cpus", "ingress_replicas",
                   "ingress_resources", "autoscaling"})


def plan(args: Mapping[str, Any], warn: bool = True) -> list[tuple[Archive, Settings]]:
    """The archives to serve and their settings; each setting Serve ignores named in a warning.

    Raises:
        ArchiveError: an unknown arg, or an archive or setting that cannot be served.
    """
    unknown = sorted(set(args) - _ARGS)
    if unknown:
        raise ArchiveError(f"unknown args {unknown}: rayserve.app:build takes {sorted(_ARGS)}")
    props = _properties(args)
    models = args.get("models") or ()
    planned = [(a, a.settings(props.entries.get(a.name, {}))) for a in props.archives(tuple(models))]
    for archive, settings in planned if warn else ():
        for line in settings.warnings(archive.name):
            logger.warning(line)
    return planned


def build(args: Mapping[str, Any]) -> Application:
    """The application for `args` (see the module docstring)."""
    props = _properties(args)
    cpus = float(args.get("replica_cpus", 1))
    handles, routes = {}, {}
    for archive, settings in plan(args):
        options = settings.deployment_options(props.job_queue_size, cpus)
        if "autoscaling_config" in options:
            options["autoscaling_config"].update(args.get("autoscaling") or {})
        handles[archive.name] = _deployment(Model).options(name=archive.name, **options).bind(str(archive.path))
        routes[archive.name] = Route(archive.version, settings.response_timeout_s)
    ingress = _deployment(Doors).options(
        name="doors", num_replicas=int(args.get("ingress_replicas", 1)), max_ongoing_requests=1024,
        ray_actor_options={"num_cpus": 0, "resources": dict(args.get("ingress_resources") or {})})
    key_file = args.get("key_file", "key_file.json")
    app: Application = ingress.bind(handles, routes, str(Path(key_file).resolve()) if key_file else None, props.max_request_size)
    return app


def _deployment(cls: type) -> Deployment:
    """`serve.deployment` applied to a plain class (its stubs type only the decorator form)."""
    deployment: Deployment = serve.deployment(cls)  # type: ignore[assignment]
    return deployment


def _properties(args: Mapping[str, Any]) -> Properties:
    store = args.get("model_store")
    return Properties.read(Path(args.get("config", "config.properties")), Path(store) if store else None)
