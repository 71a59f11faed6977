"""The application deployed from a Serve config, as `serve run config.yaml` and KubeRay's
`serveConfigV2` deploy it: `import_path: rayserve.app:build` with its args, and per model a
`user_config` override for live batch settings.

A config deploy is what makes tuning live: Serve versions a config's application by its import
path, so a new `user_config` alone is a lightweight update that each running replica takes in
`reconfigure` (`serve.batch`'s `set_max_batch_size` and `set_batch_wait_timeout_s`), with no
replica restarted and no request dropped. `video-ray tune` and `video-autotune --engine ray` use
`tune`; `video-ray start` leaves the args in `video-ray.json` for them.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

APP = "video"
#: Where `video-ray start` leaves the args and tuning it deployed with.
STATE = Path("video-ray.json")


def config(args: Mapping[str, Any], tuning: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Any]:
    """The Serve config (`ServeDeploySchema`'s shape) of the application."""
    overrides = [{"name": model, "user_config": dict(values)} for model, values in (tuning or {}).items()]
    return {"applications": [{"name": APP, "route_prefix": "/", "import_path": "rayserve.app:build",
                              "args": dict(args), "deployments": overrides}]}


def deploy(args: Mapping[str, Any], tuning: Mapping[str, Mapping[str, float]] | None = None,
           http: Mapping[str, Any] | None = None, proxy_location: str = "HeadOnly", timeout_s: float = 300) -> None:
    """Deploys (or updates) the application on the connected Ray cluster and waits until it runs.

    Raises:
        RuntimeError: the deploy failed (Serve's message) or did not finish within `timeout_s`.
    """
    from ray.serve._private import api  # what `serve run config.yaml` calls
    from ray.serve.schema import ServeDeploySchema

    client = api.serve_start(http_options=dict(http or {}), proxy_location=proxy_location)
    client.deploy_apps(ServeDeploySchema.model_validate(config(args, tuning)), _blocking=False)
    wait_running(timeout_s)


def wait_running(timeout_s: float) -> None:
    from ray import serve

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = serve.status().applications.get(APP)
        if status is not None and status.status == "RUNNING" and all(
                d.status == "HEALTHY" for d in status.deployments.values()):
            return
        if status is not None and status.status == "DEPLOY_FAILED":
            raise RuntimeError(f"the deployment failed: {status.message}")
        time.sleep(0.5)
    raise RuntimeError(f"the models were not ready within {timeout_s:g} s: see `serve status` and the Ray logs")


def tune(args: Mapping[str, Any], tuning: Mapping[str, Mapping[str, float]], model: str,
         values: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """New batch settings (`batch_size`, `max_batch_delay_ms`) for `model`'s live replicas, the
    other models' earlier tuning kept; returns the tuning now in force."""
    from ray import serve

    status = serve.status().applications.get(APP)
    known = sorted(set(status.deployments) - {"doors"}) if status else []
    if model not in known:
        raise RuntimeError(f"no model {model!r} is deployed (there are {', '.join(known) or 'none'})")
    merged = {name: dict(v) for name, v in tuning.items()}
    merged[model] = {**merged.get(model, {}), **values}
    deploy(args, merged)
    return merged


def save(args: Mapping[str, Any], tuning: Mapping[str, Mapping[str, float]], path: Path = STATE,
         node: Mapping[str, str] | None = None) -> None:
    """Writes args and tuning; `node` (the Ray session and GCS address `video-ray start` started)
    is kept from the file when not given."""
    if node is None and path.exists():
        with contextlib.suppress(OSError, ValueError):
            node = json.loads(path.read_text()).get("node")
    state: dict[str, Any] = {"args": dict(args), "tuning": dict(tuning)}
    if node:
        state["node"] = dict(node)
    path.write_text(json.dumps(state, indent=2))


def started_node(path: Path = STATE) -> dict[str, str] | None:
    """The Ray node `video-ray start` started from this folder, `{"session", "address"}` (None: it
    joined a cluster, or no start ran here)."""
    try:
        node = json.loads(path.read_text()).get("node")
    except (OSError, ValueError):
        return None
    return dict(node) if isinstance(node, dict) and node.get("session") and node.get("address") else None


def load(path: Path = STATE) -> tuple[dict[str, Any], dict[str, dict[str, float]]]:
    """The args and tuning `video-ray start` (and each tune) left.

    Raises:
        FileNotFoundError: naming the file and how it is made.
    """
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found: run `video-ray start` in this folder first") from None
    return dict(state["args"]), dict(state.get("tuning") or {})
