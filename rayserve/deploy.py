"""The applications deployed from a Serve config, as `serve run config.yaml` and KubeRay's
`serveConfigV2` deploy them: per model `import_path: rayserve.app:model` on `/predictions/{model}`
with a `user_config` override for live batch settings, and `rayserve.app:doors` on `/`.

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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rayserve.archive import serve_limits
from rayserve.plan import APP, app_name, plan, properties

#: Where `video-ray start` leaves the args and tuning it deployed with.
STATE = Path("video-ray.json")
#: Seconds between two progress lines that say nothing new while `wait_running` waits.
PROGRESS_EVERY_S = 15.0


def config(args: Mapping[str, Any], tuning: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Any]:
    """The Serve config (`ServeDeploySchema`'s shape): an application per model the args name, its
    tuning as a `user_config` override (with Serve's bounds for its batch size), then `doors`."""
    queue = properties(args).job_queue_size
    apps = []
    for archive, _ in plan(args, warn=False):
        name, values = archive.name, dict((tuning or {}).get(archive.name) or {})
        override: dict[str, Any] = {"name": name, "user_config": values}
        own: dict[str, Any] = {**args, "model": name}
        if "batch_size" in values:
            override.update(serve_limits(int(values["batch_size"]), queue))
        apps.append({"name": app_name(name), "route_prefix": f"/predictions/{name}", "import_path": "rayserve.app:model",
                     "args": own, "deployments": [override] if values else []})
    apps.append({"name": APP, "route_prefix": "/", "import_path": "rayserve.app:doors", "args": dict(args)})
    return {"applications": apps}


def deploy(args: Mapping[str, Any], tuning: Mapping[str, Mapping[str, float]] | None = None,
           http: Mapping[str, Any] | None = None, proxy_location: str = "HeadOnly", timeout_s: float = 300,
           progress: Callable[[str], None] | None = None) -> None:
    """Deploys (or updates) the applications on the connected Ray cluster and waits until they run.

    Raises:
        RuntimeError: the deploy failed (Serve's message) or did not finish within `timeout_s`.
    """
    from ray.serve._private import api  # what `serve run config.yaml` calls
    from ray.serve.schema import ServeDeploySchema

    wanted = config(args, tuning)
    client = api.serve_start(http_options=dict(http or {}), proxy_location=proxy_location)
    client.deploy_apps(ServeDeploySchema.model_validate(wanted), _blocking=False)
    wait_running([app["name"] for app in wanted["applications"]], timeout_s, progress)


def wait_running(apps: list[str], timeout_s: float, progress: Callable[[str], None] | None = None) -> None:
    """Waits until every application of `apps` runs with every deployment healthy; `progress` gets
    a line when that changes, and every `PROGRESS_EVERY_S` while nothing does.

    Raises:
        RuntimeError: an application failed to deploy (Serve's message), or the wait ran out,
            naming what was still waiting and on what.
    """
    from ray import serve

    deadline = time.monotonic() + timeout_s
    said, said_at = "", 0.0
    while True:
        found = serve.status().applications
        failed = [f"{name}: {found[name].message}" for name in apps
                  if name in found and found[name].status == "DEPLOY_FAILED"]
        if failed:
            raise RuntimeError(f"the deployment failed: {'; '.join(failed)}")
        waiting = {name: _waiting_for(found.get(name)) for name in apps}
        waiting = {name: why for name, why in waiting.items() if why}
        if not waiting:
            return
        line = f"{len(apps) - len(waiting)} of {len(apps)} applications running; waiting for " + \
            ", ".join(f"{name} ({why})" for name, why in waiting.items())
        if time.monotonic() >= deadline:
            raise RuntimeError(f"not ready within {timeout_s:g} s: {line}. `ray status` shows what the cluster "
                               "holds; `serve status` and the Ray logs say why a replica did not start")
        if progress is not None and (line != said or time.monotonic() - said_at >= PROGRESS_EVERY_S):
            progress(line)
            said, said_at = line, time.monotonic()
        time.sleep(0.5)


def _waiting_for(app: Any) -> str:
    """What an application still waits for ("" when it runs): its status, and each unhealthy
    deployment's replicas by state (`PENDING_ALLOCATION`: no node has the resources yet)."""
    if app is None:
        return "not deployed yet"
    unhealthy = {name: d for name, d in app.deployments.items() if d.status != "HEALTHY"}
    if app.status == "RUNNING" and not unhealthy:
        return ""
    states = [f"{name}: " + ", ".join(f"{count} {_text(state)}" for state, count in d.replica_states.items())
              for name, d in unhealthy.items() if d.replica_states]
    return _text(app.status) + (f"; replicas {'; '.join(states)}" if states else "")


def _text(state: Any) -> str:
    """A Serve status enum's own word (`DEPLOYING`)."""
    return str(getattr(state, "value", state))


def models() -> list[str]:
    """The models deployed on the connected cluster."""
    from ray import serve

    prefix = app_name("")
    return sorted(name[len(prefix):] for name in serve.status().applications if name.startswith(prefix))


def tune(args: Mapping[str, Any], tuning: Mapping[str, Mapping[str, float]], model: str,
         values: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """New batch settings (`batch_size`, `max_batch_delay_ms`) for `model`'s live replicas, the
    other models' earlier tuning kept; returns the tuning now in force."""
    known = models()
    if model not in known:
        raise RuntimeError(f"no model {model!r} is deployed (there are {', '.join(known) or 'none'})")
    merged = {name: dict(v) for name, v in tuning.items()}
    merged[model] = {**merged.get(model, {}), **values}
    deploy(args, merged)
    return merged


def save(args: Mapping[str, Any], tuning: Mapping[str, Mapping[str, float]], path: Path = STATE,
         node: Mapping[str, str] | None = None, address: str | None = None) -> None:
    """Writes args and tuning; `node` (the Ray session and GCS address `video-ray start` started)
    and `address` (the cluster it deployed to) are kept from the file when not given."""
    kept: dict[str, Any] = {}
    if path.exists():
        with contextlib.suppress(OSError, ValueError):
            kept = json.loads(path.read_text())
    state: dict[str, Any] = {"args": dict(args), "tuning": dict(tuning)}
    node, address = node or kept.get("node"), address or kept.get("address")
    if node:
        state["node"] = dict(node)
    if address:
        state["address"] = address
    path.write_text(json.dumps(state, indent=2))


def _state(path: Path) -> dict[str, Any]:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def started_node(path: Path = STATE) -> dict[str, str] | None:
    """The Ray node `video-ray start` started from this folder, `{"session", "address"}` (None: it
    joined a cluster, or no start ran here)."""
    node = _state(path).get("node")
    return dict(node) if isinstance(node, dict) and node.get("session") and node.get("address") else None


def deployed_to(path: Path = STATE) -> str | None:
    """The address of the cluster `video-ray start` deployed to from this folder (None: none ran)."""
    address = _state(path).get("address")
    return address if isinstance(address, str) and address else None


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
