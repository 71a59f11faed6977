"""TorchServe's inference routes on Ray Serve's HTTP proxy, the key checked on every request.

`/predictions/{model}` is its model's own application: Serve's proxy hands it straight to a replica
(`rayserve.model`, one hop), which checks the key, the size, its queue and `responseTimeout` with
this module's `Gate`, `receive` and `respond`. `Doors`, the application on `/`, serves the rest and
hands each inference to the model's replicas by handle:
`POST /v2/models/{model}[/versions/{v}]/infer`, `POST /predictions/{unknown model}` (404),
`GET /v2/models/{model}[/versions/{v}]` (metadata) and `.../ready`, `GET /v2/health/live|ready`,
`GET|POST /ping`. Every one needs `Authorization: Bearer <inference key>` from the key file
(TorchServe's `key_file.json` shape, re-read when it changes), unless the app was built without
token authorization. Management has no route: models change by redeploying.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ray.serve.exceptions import BackPressureError
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request
from starlette.responses import Response

from rayserve import wire
from rayserve.deploy import app_name
from rayserve.wire import Answer

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Route:
    """What the ingress knows of one model: its version and TorchServe's `responseTimeout`."""

    version: str
    timeout_s: float


@dataclass(frozen=True, slots=True)
class Gate:
    """What a model's replica checks on the requests Serve's proxy hands it directly: the key file
    (None: token authorization off), `max_request_size`, the model's `responseTimeout` and
    `job_queue_size` (config.properties)."""

    key_file: str | None
    max_request_size: int
    timeout_s: float
    queue: int


class Keys:
    """The inference key of a `key_file.json`, re-read when the file changes (a rotation)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._key: str | None = None

    def accepts(self, token: str | None) -> bool:
        if self.path is None:
            return True  # token authorization turned off by the operator
        key = self._current()
        return token is not None and key is not None and hmac.compare_digest(token, key)

    def _current(self) -> str | None:
        try:
            stat = os.stat(self.path)  # type: ignore[arg-type]
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp != self._stamp:
                with open(self.path, encoding="utf-8") as f:  # type: ignore[arg-type]
                    self._key = str(json.load(f)["inference"]["key"])
                self._stamp = stamp
        except (OSError, ValueError, KeyError, TypeError):
            logger.warning("cannot read the inference key from %s: every request is refused until it can be",
                           self.path)
            self._stamp, self._key = None, None
        return self._key


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
            return Answer(200, json.dumps({"status": "Healthy"}))
        if path in ("/v2/health/live", "/v2/health/ready"):
            return Answer(200, "")
        if request.method in ("POST", "PUT"):
            for pattern, predictions in ((wire.PREDICTIONS, True), (wire.OIP_INFER, False)):
                if found := pattern.match(path):
                    return await self._infer(request, found.group(1), found.group(2), predictions)
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
            return Answer.error(503, "ServiceUnavailableException",
                                f"{model}'s queue is full (max_queued_requests, from job_queue_size): retry later")
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


async def respond(request: Request, answer: Callable[[Request], Awaitable[Answer]], who: str) -> Response:
    """`answer`'s Answer as an HTTP response; a bug in it becomes 500 `InternalError`, logged."""
    try:
        found = await answer(request)
    except Exception:
        logger.exception("%s failed on %s %s", who, request.method, request.url.path)
        found = Answer.error(500, "InternalError", f"{who} failed on this request; see the replica log")
    return Response(found.body, found.status, media_type="application/json")


async def receive(request: Request, limit: int, predictions: bool) -> tuple[dict[str, object], dict[str, object]] | Answer:
    """The request as TorchServe's worker hands it (`wire.item`), or 413 past `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return wire.too_large(int(declared), limit)
    body = await _body(request, limit)
    if body is None:
        return wire.too_large(limit + 1, limit)
    return await wire.item(request, body, predictions)


async def _body(request: Request, limit: int) -> bytes | None:
    """The whole body, or None once it passes `limit` (a chunked body declares no length)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # Starlette's own cache: request.form() parses it from here
    return body
