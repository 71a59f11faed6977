"""One persistent gRPC `StreamPredictions2` call per camera (`--protocol grpc-stream`).

Each simulated camera opens one bidirectional stream with `sequence_id` = its stream id, sends its
frames on it as the schedule says (open loop: a frame leaves on its time, whatever the answers
do) and reads the answers, which TorchServe's sequence batching returns in order on the same
stream. TorchServe checks the key once, when the stream opens: a refused stream (gRPC
`PERMISSION_DENIED` "Token Authorization failed") re-reads key_file.json and opens once more,
resending the frames it held; an open stream outlives key renewals.

TorchServe 0.12 completes the answer stream as soon as the client half-closes its side, and the
worker then fails (`IllegalStateException: Stream is already completed`) on the answers still due
and is restarted, which fails every camera of the lane: so a camera closes its side only after
its last answer came (or `timeout_s` passed).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from loadgen.frames import FrameSource
from loadgen.metrics import Record
from loadgen.schedule import Arrival, Plan, arrivals
from loadgen.target import Run, Target
from tskeys import Key, is_grpc_invalid_key

# gRPC codes TorchServe puts in an in-stream error's `status` -> the HTTP status it stands for.
_STATUS_OF_GRPC = {13: 503, 5: 404, 3: 400}
_END = object()


@dataclass(frozen=True, slots=True)
class StreamTarget:
    """Where the streams go.

    Attributes:
        address: gRPC inference address, `host:port` (TorchServe's `grpc_inference_port`).
        model: the stream lane's model, e.g. `frame_quality_stream`.
        token: a fixed inference key, or None.
        key_file: TorchServe's key_file.json instead of `token` (re-read when a stream is refused).
        timeout_s: how long after its last frame a camera waits for the remaining answers.
    """

    address: str
    model: str
    token: str | None = None
    key_file: Path | None = None
    timeout_s: float = 30.0

    def key(self) -> Key:
        return Key(self.key_file, self.token)


@dataclass(slots=True)
class _Pending:
    index: int
    arrival: Arrival
    frames: int
    request: object
    pos: int = 0  # place in the camera's frame list
    sent: float | None = None


def grpc_input(payload_body: bytes, content_type: str, headers: dict[str, str], arrival: Arrival,
               capture_time: float) -> dict[str, bytes]:
    """The `input` map of one frame: `data` plus the HTTP headers as lower snake case keys."""
    out = {"data": payload_body, "content_type": content_type.encode(),
           "stream_id": f"cam-{arrival.stream}".encode(), "frame_id": str(arrival.frame_id).encode(),
           "capture_time": f"{capture_time:.6f}".encode()}
    for name, value in headers.items():
        out[name.lower().removeprefix("x-").replace("-", "_")] = str(value).encode()
    return out


def parse_answer(response) -> tuple[int | None, str | None, dict | None]:
    """(status, error type, body) of one `PredictionResponse` of the stream."""
    if response.HasField("status") and response.status.code != 0:
        status = _STATUS_OF_GRPC.get(response.status.code, 500)
        return status, response.status.message[:80] or f"gRPC {response.status.code}", None
    try:
        body = json.loads(response.prediction)
    except ValueError:
        return 500, "UnparsableAnswer", None
    code = body.get("code", 200) if isinstance(body, dict) else 200
    return int(code), None if code == 200 else str(body.get("type", f"HTTP {code}")), body


class CameraStream:
    """One camera's stream: `put` frames in schedule order, answers are matched in order."""

    def __init__(self, stub, pb2, target: StreamTarget, key: Key, camera: int, start: float,
                 wall_start: float, source: FrameSource, finish: Callable[[_Pending, float, int | None,
                                                                               str | None, dict | None], None]) -> None:
        self._stub, self._pb2, self._target, self._key = stub, pb2, target, key
        self.camera = camera
        self._start, self._wall_start, self._source, self._finish = start, wall_start, source, finish
        self._frames: list = []  # every frame put, in order, then _END
        self._cursor = 0  # the next frame to send
        self._pending: deque[_Pending] = deque()
        self._lock = threading.Condition()
        self._failed: str | None = None
        self._epoch = 0
        self.answers: list[dict | None] = []  # bodies in answer order (for order checks)
        self._thread = threading.Thread(target=self._serve, name=f"stream-{camera}", daemon=True)
        self._thread.start()

    def put(self, index: int, arrival: Arrival) -> None:
        payload = self._source.payload(arrival.stream, arrival.frame_id, arrival.resolution)
        request = self._pb2.PredictionsRequest(
            model_name=self._target.model, sequence_id=f"cam-{self.camera}",
            input=grpc_input(payload.body, payload.content_type, payload.headers, arrival,
                             self._wall_start + arrival.t))
        pending = _Pending(index, arrival, payload.frames, request)
        with self._lock:
            if self._failed is None:
                pending.pos = len(self._frames)
                self._frames.append(pending)
                self._lock.notify_all()
                return
        # The stream is gone: the frame is lost, as over a camera's broken uplink.
        self._done(pending, time.perf_counter() - self._start, None, self._failed, None)

    def close(self) -> None:
        with self._lock:
            self._frames.append(_END)
            self._lock.notify_all()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def _requests(self, epoch: int) -> Iterator:
        """The frames of one call; a call that failed (epoch moved on) takes no further frame."""
        while True:
            with self._lock:
                self._lock.wait_for(lambda: epoch != self._epoch or self._cursor < len(self._frames))
                if epoch != self._epoch:
                    return
                pending = self._frames[self._cursor]
                if pending is _END:
                    break
                self._cursor += 1
                pending.sent = time.perf_counter() - self._start
                self._pending.append(pending)
            yield pending.request
        with self._lock:  # half-close only once every answer came (see the module's note)
            self._lock.wait_for(lambda: not self._pending or epoch != self._epoch, timeout=self._target.timeout_s)

    def _serve(self) -> None:
        import grpc

        value = self._key.value()
        for attempt in range(2):
            call = self._stub.StreamPredictions2(self._requests(attempt), metadata=self._key.metadata(value))
            try:
                for response in call:
                    status, error, body = parse_answer(response)
                    with self._lock:
                        pending = self._pending.popleft() if self._pending else None
                        self._lock.notify_all()
                    self.answers.append(body)
                    if pending is not None:
                        self._done(pending, time.perf_counter() - self._start, status, error, body)
                with self._lock:
                    self._failed = "StreamEnded"
                    self._epoch += 1
                    self._lock.notify_all()
                self.fail_pending("StreamEnded")
                self._drain("StreamEnded")
                return
            except grpc.RpcError as exc:
                if attempt == 0 and is_grpc_invalid_key(exc.code(), exc.details()):
                    # Refused when it opened: nothing sent on it reached the model; send it again.
                    value = self._key.refresh(refused=value)
                    with self._lock:
                        self._epoch += 1
                        if self._pending:
                            self._cursor = self._pending[0].pos
                        self._pending.clear()
                        self._lock.notify_all()
                    continue
                with self._lock:
                    self._failed = exc.code().name
                    self._epoch += 1
                    self._lock.notify_all()
                self.fail_pending(self._failed)
                self._drain(self._failed)
                return

    def _drain(self, error: str) -> None:
        """Frames put for a stream that failed and not sent are lost."""
        with self._lock:
            lost = [p for p in self._frames[self._cursor:] if p is not _END]
            self._cursor = len(self._frames)
        for pending in lost:
            self._done(pending, time.perf_counter() - self._start, None, error, None)

    def _done(self, pending: _Pending, done: float, status: int | None, error: str | None, body) -> None:
        pending.request = None  # a long run keeps its bookkeeping, not every frame's bytes
        self._finish(pending, done, status, error, body)

    def fail_pending(self, error: str) -> None:
        """Every frame sent and not answered is lost (no answer: status None)."""
        with self._lock:
            lost, self._pending = list(self._pending), deque()
            self._lock.notify_all()
        for pending in lost:
            self._done(pending, time.perf_counter() - self._start, None, error, None)


def run_streams(plan: Plan, target: StreamTarget, source: FrameSource,
                on_record: Callable[[Record | None], None] | None = None,
                schedule: list[Arrival] | None = None,
                key: Key | None = None) -> tuple[Run, dict[int, list[dict | None]]]:
    """Sends every frame of `plan` on one stream per camera and waits for the answers.

    Returns:
        the run (one record per frame) and each camera's answer bodies in the order they came.
    """
    import grpc

    from loadgen import grpc_stubs

    pb2, pb2_grpc = grpc_stubs.load()
    schedule = arrivals(plan) if schedule is None else schedule
    for a in schedule:
        source.prepare(a.stream, a.resolution)
    key = target.key() if key is None else key
    records: list[Record | None] = [None] * len(schedule)

    def finish(pending: _Pending, done: float, status: int | None, error: str | None, _body) -> None:
        a = pending.arrival
        sent = pending.sent if pending.sent is not None else done
        record = Record(a.stream, a.frame_id, pending.frames, str(a.resolution), round(a.t, 6),
                        round(sent, 6), round(done, 6), status, error)
        records[pending.index] = record
        if on_record is not None:
            on_record(record)

    limit = 256 * 1024 * 1024
    with grpc.insecure_channel(target.address, options=[("grpc.max_send_message_length", limit),
                                                         ("grpc.max_receive_message_length", limit)]) as channel:
        stub = pb2_grpc.InferenceAPIsServiceStub(channel)
        start = time.perf_counter()
        wall_start = time.time()
        cameras = {s: CameraStream(stub, pb2, target, key, s, start, wall_start, source, finish)
                   for s in sorted({a.stream for a in schedule})}
        for index, arrival in enumerate(schedule):
            delay = start + arrival.t - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            cameras[arrival.stream].put(index, arrival)
        for camera in cameras.values():
            camera.close()
        deadline = time.monotonic() + target.timeout_s
        for camera in cameras.values():
            camera.join(max(0.0, deadline - time.monotonic()))
        # Whatever is still unanswered when the channel closes counts as lost.
    for camera in cameras.values():
        camera.join(10.0)
        camera.fail_pending("Timeout")
    now = time.perf_counter() - start
    for index, record in enumerate(records):
        if record is None:  # never handed to gRPC (the stream had failed)
            a = schedule[index]
            records[index] = Record(a.stream, a.frame_id, plan.clip, str(a.resolution), round(a.t, 6),
                                    round(now, 6), round(now, 6), None, "NotSent")
    return Run(schedule, [r for r in records if r is not None], []), {s: c.answers for s, c in cameras.items()}


def run_target(plan: Plan, target: Target, source: FrameSource,
               on_record: Callable[[Record | None], None] | None = None) -> Run:
    """`run_streams` for a `video-loadgen` target (`--protocol grpc-stream`): its gRPC address,
    model and key; every camera streams to `target.model`."""
    stream_target = StreamTarget(target.grpc_address, target.model, target.token, None, target.timeout_s)
    key = target.key or Key(token=target.token)
    run, _ = run_streams(plan, stream_target, source, on_record, key=key)
    return run
