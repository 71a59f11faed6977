"""Senders: one request to TorchServe over HTTP `/predictions`, gRPC `Predictions`, or the Open
Inference Protocol, answered the same way (`Answer`), with the retry-once rule for expired keys.

Every sender takes a `tskeys.keyfile.Key`; when TorchServe refuses the key (HTTP 400
`InvalidKeyException`, gRPC `PERMISSION_DENIED` "Token Authorization failed") it
re-reads `key_file.json` (`key.refresh`) and retries once.
"""

from __future__ import annotations

import enum
import json
import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol as Interface

import requests

from tskeys.keyfile import Key, is_grpc_invalid_key, is_invalid_key

OK = 200


class Door(enum.Enum):
    """Which door requests go through."""

    HTTP = "http"  # POST /predictions/{model}, headers of DESIGN section 4
    GRPC = "grpc"  # Predictions, options as input keys
    OIP = "oip"  # POST /v2/models/{model}/infer, one binary tensor per request (BYTES; raw: UINT8)
    GRPC_STREAM = "grpc-stream"  # StreamPredictions2: one persistent stream per camera (loadgen.stream)


@dataclass(frozen=True, slots=True)
class Answer:
    """What came back: the status (gRPC: the body's `code`), or None and the transport error."""

    status: int | None
    error: str | None = None


class Sender(Interface):
    """Sends one request and waits for its answer; safe to call from many threads."""

    def send(self, model: str, body: bytes, content_type: str, headers: Mapping[str, str]) -> Answer: ...

    def close(self) -> None: ...


#: gRPC input keys for the request headers the handler reads (DESIGN section 4a).
GRPC_KEYS = {"x-stream-id": "stream_id", "x-frame-id": "frame_id", "x-capture-time": "capture_time",
             "x-frame-width": "frame_width", "x-frame-height": "frame_height",
             "x-pixel-format": "pixel_format", "x-sample-fps": "sample_fps"}


class HttpSender:
    """`POST {url}/predictions/{model}` over one keep-alive session per thread."""

    def __init__(self, url: str, key: Key, timeout_s: float = 30.0) -> None:
        self._url, self._key, self._timeout = url.rstrip("/"), key, timeout_s
        self._local = threading.local()
        self._sessions: list[requests.Session] = []

    def _post(self, path: str, body: bytes, headers: Mapping[str, str]) -> requests.Response:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            self._sessions.append(session)
        return self._key.call(
            lambda value: session.post(self._url + path, data=body, timeout=self._timeout,
                                       headers={**self._key.headers(value), **headers}),
            lambda answer: is_invalid_key(answer.status_code, answer.content))

    def send(self, model: str, body: bytes, content_type: str, headers: Mapping[str, str]) -> Answer:
        try:
            answer = self._post(f"/predictions/{model}", body, {"Content-Type": content_type, **headers})
        except requests.RequestException as exc:
            return Answer(None, type(exc).__name__)
        return Answer(answer.status_code, None if answer.status_code == OK else _error_type(answer))

    def close(self) -> None:
        for session in self._sessions:
            session.close()


class OipSender(HttpSender):
    """`POST {url}/v2/models/{model}/infer` framed as `tritonclient.http` frames it (JSON header,
    `Inference-Header-Content-Length`, tensor data): the body as one binary BYTES element (an
    encoded image, an npy or a video segment), or raw pixels as a UINT8 tensor."""

    def send(self, model: str, body: bytes, content_type: str, headers: Mapping[str, str]) -> Answer:
        header, data = oip_request(body, content_type, headers)
        payload = header + data
        try:
            answer = self._post(f"/v2/models/{model}/infer", payload,
                                {"Inference-Header-Content-Length": str(len(header)), **headers})
        except requests.RequestException as exc:
            return Answer(None, type(exc).__name__)
        if answer.status_code == OK:
            return Answer(OK)
        try:
            error = str(answer.json()["error"]).split(":", 1)[0]
        except (ValueError, KeyError, TypeError):
            error = answer.reason or f"HTTP {answer.status_code}"
        return Answer(answer.status_code, error)


class GrpcSender:
    """TorchServe's gRPC `Predictions` on one channel (HTTP/2 multiplexes the threads' calls).

    TorchServe answers gRPC OK whatever the handler's status, so the status is the body's `code`.
    """

    def __init__(self, address: str, key: Key, timeout_s: float = 30.0) -> None:
        import grpc

        from loadgen import grpc_stubs

        self._grpc = grpc
        self._pb2, pb2_grpc = grpc_stubs.load()
        self._channel = grpc.insecure_channel(address, options=[
            ("grpc.max_send_message_length", 256 << 20), ("grpc.max_receive_message_length", 256 << 20)])
        self._stub = pb2_grpc.InferenceAPIsServiceStub(self._channel)
        self._key, self._timeout = key, timeout_s

    def send(self, model: str, body: bytes, content_type: str, headers: Mapping[str, str]) -> Answer:
        inputs = {"data": body, "content_type": content_type.encode()}
        for name, value in headers.items():
            key = GRPC_KEYS.get(name.lower())
            if key is not None:
                inputs[key] = value.encode()
        request = self._pb2.PredictionsRequest(model_name=model, input=inputs)
        for attempt in (0, 1):
            token = self._key.value()
            try:
                reply = self._stub.Predictions(request, timeout=self._timeout, metadata=self._key.metadata(token))
                break
            except self._grpc.RpcError as exc:
                if attempt or not is_grpc_invalid_key(exc.code(), exc.details()):
                    return Answer(None, exc.code().name)
                self._key.refresh(refused=token)
        return answer_of(reply.prediction)

    def close(self) -> None:
        self._channel.close()


def oip_request(body: bytes, content_type: str, headers: Mapping[str, str]) -> tuple[bytes, bytes]:
    """One request's body -> the OIP JSON header and binary tensor data after it.

    Raw rgb24 pixels (`application/octet-stream` with `X-Frame-Width`/`X-Frame-Height`) have no
    bytes to find their format from, so they go as UINT8 `[H, W, 3]` (`[N, H, W, 3]` for a clip);
    every other body is one BYTES element of shape `[1]` (4-byte little-endian length, bytes).
    """
    names = {name.lower(): value for name, value in headers.items()}
    width, height = names.get("x-frame-width"), names.get("x-frame-height")
    if content_type == "application/octet-stream" and width and height:
        if names.get("x-pixel-format", "rgb24") != "rgb24":
            raise ValueError("raw pixels over OIP are sent as rgb24 UINT8 tensors")
        frame = int(width) * int(height) * 3
        count = len(body) // frame
        shape = [int(height), int(width), 3] if count == 1 else [count, int(height), int(width), 3]
        tensor = {"name": "frames", "shape": shape, "datatype": "UINT8",
                  "parameters": {"binary_data_size": len(body)}}
        return json.dumps({"inputs": [tensor]}).encode(), body
    tensor = {"name": "frames", "shape": [1], "datatype": "BYTES",
              "parameters": {"binary_data_size": len(body) + 4}}
    return json.dumps({"inputs": [tensor]}).encode(), struct.pack("<I", len(body)) + body


def answer_of(prediction: bytes) -> Answer:
    """A gRPC body -> its status (`code`) and error `type`."""
    try:
        body = json.loads(prediction)
        status = int(body["code"])
    except (ValueError, KeyError, TypeError):
        return Answer(None, "UnreadableBody")
    return Answer(status, None if status == OK else str(body.get("type") or f"code {status}"))


def sender(protocol: Door, url: str, key: Key, timeout_s: float = 30.0,
           grpc_address: str = "127.0.0.1:7070") -> Sender:
    """The sender for `protocol`: HTTP and OIP to `url`, gRPC to `grpc_address`."""
    if protocol is Door.GRPC_STREAM:
        raise ValueError("grpc-stream sends on one stream per camera: use loadgen.stream, not a sender")
    if protocol is Door.GRPC:
        return GrpcSender(grpc_address, key, timeout_s)
    if protocol is Door.OIP:
        return OipSender(url, key, timeout_s)
    return HttpSender(url, key, timeout_s)


def _error_type(answer: requests.Response) -> str:
    """The handler's error `type`, TorchServe's reason phrase otherwise."""
    try:
        body = answer.json()
        if isinstance(body, dict) and isinstance(body.get("type"), str):
            return body["type"]
    except ValueError:
        pass
    return answer.reason or f"HTTP {answer.status_code}"
