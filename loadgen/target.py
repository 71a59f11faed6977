"""Where a run sends its frames (`Target`) and what came back (`Run`): the values the runner and the streams share."""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.metrics import Record
from loadgen.schedule import Arrival
from loadgen.transport import Door
from tskeys.keyfile import Key


@dataclass(frozen=True, slots=True)
class Target:
    """Where frames go.

    Attributes:
        url: the inference address, e.g. `http://127.0.0.1:8080`.
        model: the model name (`/predictions/{model}`).
        token: the inference key (sent as `Authorization: Bearer ...`), or None.
        timeout_s: how long one request may take before it counts as unanswered.
        realtime_model: the low-latency lane's model; cameras below `realtime_streams` use it.
        realtime_streams: how many cameras (the first ones) go to `realtime_model`.
        protocol: the door requests go through (HTTP `/predictions`, gRPC `Predictions`, OIP).
        grpc_address: `host:port` of TorchServe's gRPC inference API.
        key: the key to send, re-read from `key_file.json` on InvalidKeyException (overrides `token`).
    """

    url: str
    model: str
    token: str | None = None
    timeout_s: float = 30.0
    realtime_model: str | None = None
    realtime_streams: int = 0
    protocol: Door = Door.HTTP
    grpc_address: str = "127.0.0.1:7070"
    key: Key | None = None

    def model_for(self, stream: int) -> str:
        """The model camera `stream` sends to."""
        if self.realtime_model is not None and stream < self.realtime_streams:
            return self.realtime_model
        return self.model

    def endpoint(self, stream: int = 0) -> str:
        return f"{self.url.rstrip('/')}/predictions/{self.model_for(stream)}"


@dataclass(frozen=True, slots=True)
class Run:
    """What happened: the schedule, one record per request sent, and the requests dropped."""

    schedule: list[Arrival]
    records: list[Record]
    dropped: list[Arrival]
