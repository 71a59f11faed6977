"""The Ray Serve applications: one per archive, its model's deployment on `/predictions/{model}`
(Serve's proxy hands it requests directly: one hop), and `doors` on `/` for the rest.

`model` and `doors` are application builders, so a Serve config (`serve deploy`, or KubeRay's
`serveConfigV2`; `rayserve.deploy.config` writes one) names them with their args:

    applications:
      - name: video.frame_quality          # deploy.app_name(model)
        route_prefix: /predictions/frame_quality
        import_path: rayserve.app:model
        args: {config: config.properties, key_file: key_file.json, model: frame_quality}
      - name: video
        route_prefix: /
        import_path: rayserve.app:doors
        args: {config: config.properties, key_file: key_file.json}

Args: `model` (the model a `model` application serves), `config` (TorchServe's properties:
`model_store` (a relative one from the properties file's folder), `load_models`, `models=`,
`job_queue_size`, `max_request_size`), `models` (a subset of model names), `model_store` (overrides
the properties'), `key_file` (`key_file.json`; null turns token authorization off),
`replica_cpus` (Ray CPUs a model replica holds, default 1), `ingress_replicas` (default 1),
`ingress_resources` (Ray resources that pin the ingress to nodes, e.g. the head's), `autoscaling`
(Serve `autoscaling_config` keys, e.g. `upscale_delay_s`, for every model whose `minWorkers` and
`maxWorkers` differ). Batch settings change live through the config's `deployments` overrides
(`rayserve.deploy.tune`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ray import serve
from ray.serve import Application
from ray.serve.deployment import Deployment

from rayserve.archive import ArchiveError
from rayserve.gate import Gate
from rayserve.ingress import Doors, Route
from rayserve.model import Model
from rayserve.plan import plan, properties


def model(args: Mapping[str, Any]) -> Application:
    """The application of the model named by `args["model"]`: its deployment, on
    `/predictions/{model}` (see the module docstring)."""
    name = args.get("model")
    if not isinstance(name, str) or not name:
        raise ArchiveError("rayserve.app:model needs args.model, the name of the model it serves")
    props = properties(args)
    [(archive, settings)] = plan({**args, "models": [name]})
    options = settings.deployment_options(props.job_queue_size, float(args.get("replica_cpus", 1)))
    if "autoscaling_config" in options:
        options["autoscaling_config"].update(args.get("autoscaling") or {})
    gate = Gate(_key_file(args), props.max_request_size, settings.response_timeout_s, props.job_queue_size)
    app: Application = _deployment(Model).options(name=archive.name, **options).bind(str(archive.path), gate)
    return app


def doors(args: Mapping[str, Any]) -> Application:
    """The application on `/`: the Open Inference Protocol, `/ping`, metadata, 404s."""
    props = properties(args)
    routes = {archive.name: Route(archive.version, settings.response_timeout_s)
              for archive, settings in plan(args, warn=False)}
    ingress = _deployment(Doors).options(
        name="doors", num_replicas=int(args.get("ingress_replicas", 1)), max_ongoing_requests=1024,
        ray_actor_options={"num_cpus": 0, "resources": dict(args.get("ingress_resources") or {})})
    app: Application = ingress.bind(routes, _key_file(args), props.max_request_size)
    return app


def _key_file(args: Mapping[str, Any]) -> str | None:
    key_file = args.get("key_file", "key_file.json")
    return str(Path(key_file).resolve()) if key_file else None


def _deployment(cls: type) -> Deployment:
    """`serve.deployment` applied to a plain class (its stubs type only the decorator form)."""
    deployment: Deployment = serve.deployment(cls)  # type: ignore[assignment]
    return deployment
