"""`doors`, the application on `/`: TorchServe's inference routes besides a model's own
`/predictions/{model}` (which Serve's proxy hands straight to the model's replicas,
`rayserve.model`), the key checked on every request (`rayserve.gate`).

It hands each inference to the model's replicas by handle:
`POST /v2/models/{model}[/versions/{v}]/infer`, `/predictions/{unknown model}` (404),
`GET /v2/models/{model}[/versions/{v}]` (metadata) and `.../ready`, `GET /v2/health/live|ready`,
`GET|POST /ping`. Every one needs `Authorization: Bearer <inference key>` from the key file
(TorchServe's `key_file.json` shape, re-read when it changes), unless the app was built without
token authorization. Management has no route: models change by redeploying.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ray.serve.exceptions import BackPressureError
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request
from starlette.responses import Response

from rayserve import wire
from rayserve.gate import Keys, receive, respond
from rayserve.plan import app_name
from rayserve.wire import Answer

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Route:
    """What the ingress knows of one model: its version and TorchServe's `responseTimeout`."""

    version: str
    timeout_s: float


class Doors:
    """The ingress of everything but `/predictions/{model}` (which Serve's proxy hands straight to
    the model's own replicas): the Open Inference Protocol, `/ping`, metadata, and TorchServe's 404
    for unknown models and routes."""

    def __init__(self, routes: Mapping[str, Route], key_file: str | None, max_request_size: int) -> None:
        from ray import serve

        self.routes = dict(routes)
        # Each model is its own application (deploy.app_name), deployed beside this one.
        self.models: dict[str, DeploymentHandle[Any]] = {
            name: serve.get_deployment_handle(name, app_name(name), _check_exists=False) for name in routes}
        self.keys = Keys(key_file)
        self.max_request_size = max_request_size

    async def __call__(self, request: Request) -> Response:
        return await respond(request, self._answer, "the ingress")

    async def _answer(self, request: Request) -> Answer:
        if not self.keys.accepts(wire.bearer(request.headers)):
            return wire.invalid_key()
        path = request.url.path
        if path == "/ping":
            return wire.healthy()
        if path in ("/v2/health/live", "/v2/health/ready"):
            return Answer(200, "")
        # /predictions with any method, as TorchServe hands it to the handler; OIP with POST or PUT.
        inference = wire.PREDICTIONS.match(path) or (request.method in ("POST", "PUT") and wire.OIP_INFER.match(path))
        if inference:
            return await self._infer(request, inference.group(1), inference.group(2), inference.re is wire.PREDICTIONS)
        if request.method == "GET" and (found := wire.OIP_MODEL.match(path)):
            return self._metadata(*found.groups())
        return wire.not_found()

    def _route(self, model: str, version: str | None) -> Route | Answer:
        """The model's route, or TorchServe's 404 for an unknown model or version."""
        route = self.routes.get(model)
        if route is None or (version is not None and version != route.version):
            return wire.model_not_found(model, version if route else None)
        return route

    async def _infer(self, request: Request, model: str, version: str | None, predictions: bool) -> Answer:
        route = self._route(model, version)
        if isinstance(route, Answer):
            return route
        received = await receive(request, self.max_request_size, predictions)
        if isinstance(received, Answer):
            return received
        return await self._call(model, route, *received)

    async def _call(self, model: str, route: Route, item: Any, headers: Any) -> Answer:
        """The model's answer; a replica that died, a full queue or a timeout answered by type."""
        call = self.models[model].infer.remote(item, headers)
        try:
            answer: Answer = await asyncio.wait_for(call, route.timeout_s)
        except TimeoutError:
            call.cancel()  # type: ignore[no-untyped-call]
            return wire.timed_out(model, route.timeout_s)
        except BackPressureError:
            return wire.queue_full(model)
        except Exception as err:  # a replica or its node died mid-request (RayActorError and its kin)
            logger.warning("%s: the request failed in its replica: %s", model, type(err).__name__)
            return Answer.error(503, "ReplicaUnavailable", f"the {model} replica serving this request failed "
                                f"({type(err).__name__}); Serve restarts it: retry")
        return answer

    def _metadata(self, model: str, version: str | None, ready: str | None) -> Answer:
        route = self._route(model, version)
        if isinstance(route, Answer):
            return route
        if ready:
            return Answer(200, json.dumps({"name": model, "ready": True}))
        return Answer(200, json.dumps({
            "name": model, "versions": [route.version], "platform": "video-frame-handler",
            "inputs": [{"name": "frames", "datatype": "UINT8", "shape": [-1, -1, -1, 3]},
                       {"name": "images", "datatype": "BYTES", "shape": [-1]}],
        }))


