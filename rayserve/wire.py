"""HTTP as TorchServe's frontend hands it to a handler, rebuilt from a Starlette request, and
TorchServe's own answers for what never reaches a handler (routes, keys, sizes).

The doors (`handler.doors`) read TorchServe's item dict and header map; this module makes the same
two from what Ray Serve's proxy delivers, so every door answers byte for byte as on TorchServe:

- a body: one key `body`, parsed as TorchServe's worker does (`application/json` -> the JSON value,
  `text/*` -> str, else bytes), its Content-Type as the `body` parameter's header;
- `multipart/form-data`: one key per field and file part, in the order sent (a repeated name keeps
  its last part, as on TorchServe, and the multipart door refuses the form that lost one); each
  part's Content-Type as its parameter's header, `''` for plain fields;
- `/predictions` adds the `url_path` header, the Open Inference Protocol does not.

What the frontend answers itself is written as it writes it: Gson's pretty printing, HTML-safe
escapes and a closing newline (`torchserve_json`), the same messages, and an empty 413.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request

#: `/predictions/{model}[/{version}]`, `/v2/models/{model}[/versions/{version}]/infer`.
PREDICTIONS = re.compile(r"^/predictions/([^/]+)(?:/([^/]+))?/?$")
OIP_INFER = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer/?$")
OIP_MODEL = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?(/ready)?/?$")


#: What Gson (TorchServe's JSON writer) escapes in strings beyond JSON's own, as `\u00XX`.
_GSON_ESCAPES = str.maketrans({c: f"\\u{ord(c):04x}" for c in "<>&='"})


def torchserve_json(value: Mapping[str, object]) -> str:
    """`value` as TorchServe's frontend writes its own answers (`JsonUtils.GSON_PRETTY` and a
    newline): two-space indents, non-ASCII as is, `<>&='` escaped."""
    return json.dumps(value, indent=2, ensure_ascii=False).translate(_GSON_ESCAPES) + "\n"


@dataclass(frozen=True, slots=True)
class Answer:
    """A status and a JSON body (what the model deployment returns, and the ingress's own)."""

    status: int
    body: str

    @classmethod
    def error(cls, status: int, kind: str, message: str) -> Answer:
        """TorchServe's shape and bytes for errors its frontend answers itself."""
        return cls(status, torchserve_json({"code": status, "type": kind, "message": message}))


def healthy() -> Answer:
    """`/ping`, as TorchServe answers it."""
    return Answer(200, torchserve_json({"status": "Healthy"}))


def invalid_key() -> Answer:
    """TorchServe's answer to a missing, wrong or replaced key (producers re-read the key file on it)."""
    return Answer.error(400, "InvalidKeyException",
                        "Token Authorization failed. Token either incorrect, expired, or not provided correctly")


def not_found() -> Answer:
    return Answer.error(404, "ResourceNotFoundException",
                        "Requested resource is not found, please refer to API document.")


def model_not_found(model: str, version: str | None = None) -> Answer:
    if version is None:
        return Answer.error(404, "ModelNotFoundException", f"Model not found: {model}")
    return Answer.error(404, "ModelVersionNotFoundException",
                        f"Model version: {version} does not exist for model: {model}")


def too_large() -> Answer:
    """TorchServe's 413 past `max_request_size`: no body at all."""
    return Answer(413, "")


def timed_out(model: str, timeout_s: float) -> Answer:
    return Answer.error(504, "ResponseTimeout", f"{model} did not answer within responseTimeout = "
                        f"{timeout_s:g} s; the request was cancelled")


def queue_full(model: str) -> Answer:
    """TorchServe's 503 when a model's job queue is full, word for word (its text is about workers:
    the replica logs what it means here)."""
    return Answer.error(503, "ServiceUnavailableException",
                        f'Model "{model}" has no worker to serve inference request. Please use scale workers API to '
                        "add workers. If this is a sequence inference, please check if it is closed, or expired; or "
                        "exceeds maxSequenceJobQueueSize")


async def item(request: Request, body: bytes, predictions: bool) -> tuple[dict[str, object], dict[str, object]]:
    """The request as TorchServe's worker hands it: the item dict and the header map (each
    parameter's Content-Type, then the request's headers, which win, as in ts/service.py)."""
    parameters: dict[str, object] = {}
    part_headers: dict[str, object] = {}
    content_type = request.headers.get("content-type", "")
    if content_type.split(";", 1)[0].strip().lower() == "multipart/form-data":
        form = await request.form(max_files=4096, max_fields=4096)
        # A repeated name keeps its first place and its last value, as TorchServe's worker's dict does.
        for name, value in form.multi_items():
            if isinstance(value, UploadFile):
                part_type = value.content_type or ""
                parameters[name] = _value(await value.read(), part_type)
            else:
                part_type, parameters[name] = "", value.encode()
            part_headers[name] = {"content-type": part_type}
    else:
        parameters["body"] = _value(body, content_type)
        part_headers["body"] = {"content-type": content_type}
    headers = {**part_headers, **request.headers}  # names in lower case, as Starlette keeps them
    if predictions:
        headers["url_path"] = request.url.path
    return parameters, headers


def _value(body: bytes, content_type: str) -> Any:
    """The body as TorchServe's worker parses it (ts/protocol/otf_message_handler.py)."""
    try:
        if content_type == "application/json":
            return json.loads(body.decode("utf-8"))
        if content_type.startswith("text"):
            return body.decode("utf-8")
    except ValueError:
        pass  # TorchServe forwards the bytes when they do not parse
    return body


def bearer(headers: Mapping[str, str]) -> str | None:
    """The token of `Authorization: Bearer <token>`."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None
