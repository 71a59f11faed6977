"""`python -m bench.engines`: the same TorchScript model and decode on five serving engines, one run.

Rows (each its own server on 127.0.0.1, started, measured and stopped in turn):

1. `torchserve`: ours, the shipped archive (`archive.sh`) in TorchServe (`tsutil.server`).
2. `ray`: ours on Ray Serve, one node (`python -m rayserve start ...`); skipped with a message
   while `rayserve` cannot be imported or started.
   `ray-handle`: the same Ray deployment driven through a `DeploymentHandle` from this process,
   no HTTP proxy and no ingress: what the model replica alone serves (not a door a client has;
   it shows what Ray's HTTP path costs).
3. `stock`: the stock-style TorchServe handler (`bench/stock_handler.py`), frame_quality only.
4. `pytriton`: NVIDIA PyTriton 0.7 (Triton's dynamic batching), in `.venv-pytriton`
   (`bash bench/peers/setup.sh pytriton`), fed the Open Inference Protocol with `tritonclient.http`
   (BYTES input of encoded JPEGs).
5. `litserve`: LitServe 0.2 with batching, in `.venv-litserve` (`bash bench/peers/setup.sh litserve`),
   fed multipart forms.

The peers run `bench.peers.core`: our decode (libjpeg-turbo), padding to a multiple of 32 into one
float32 batch, and the same TorchScript file (taken out of our archive) with the frame sizes, with
the same batch settings (32 requests, 50 ms, 16 frames a forward, 2 decode threads).

Load: 16 open-loop cameras (`loadgen.schedule`), 720p JPEG frames of data/images
(`loadgen.frames`); each row gets a warm-up, a window at the `nominal` rate (below every engine's
capacity: latency and CPU per frame at equal work) and a window at the `overload` rate (above
it; requests that cannot leave within `max_lag_s` are dropped unsent: frames/s is the capacity).
CPU is the server's processes' CPU seconds (every process that carries this row's tag in its
environment) over the window: ms per answered frame, and percent of the machine's cores.
The machine may be shared: compare rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from loadgen.metrics import Latency, Record
from loadgen.schedule import Plan, Resolution, arrivals

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("torchserve", "ray", "ray-handle", "stock", "pytriton", "litserve")
MODELS = ("frame_quality", "face_detector")
#: Engines that run our handler (the targets' numerators).
OURS = ("torchserve", "ray")
CLIENTS = 16
RESOLUTION = Resolution(1280, 720)
TAG_ENV = "BENCH_ENGINES_TAG"
PEER_VENVS = {"pytriton": ROOT / ".venv-pytriton", "litserve": ROOT / ".venv-litserve"}
SETUP = {peer: f"bash bench/peers/setup.sh {peer}" for peer in ("pytriton", "litserve")}


@dataclass(frozen=True, slots=True)
class Load:
    """Frames/s per camera: `nominal` below every engine's capacity, `overload` above it."""

    nominal: float
    overload: float


#: frame_quality: the engines served 40-90 frames/s of 720p JPEG on 2 shared cores (overload: 160
#: offered); face_detector (MTCNN, about 0.23 s a 720p frame on one core) about 4 (overload: 8).
LOADS = {"frame_quality": Load(2.0, 10.0), "face_detector": Load(0.125, 0.5)}


# ---------------------------------------------------------------------------------------------
# Results: pure, so the metrics and the verdicts are unit-tested (tests/unit/test_bench_engines.py).

@dataclass(frozen=True, slots=True)
class Window:
    """One measured load on one row.

    Attributes:
        offered_fps: frames/s the schedule offered.
        frames_per_s: frames answered 200 per second, first scheduled send to last answer.
        p50_ms, p99_ms: latency of the 200 answers, from each request's scheduled send.
        cpu_ms_per_frame: the server's CPU ms per frame answered 200 (None: no 200 or no CPU seen).
        cores_percent: the server's CPU seconds over the wall time, as a percentage of `cores`.
        statuses: status (`"error"` for no answer) -> requests.
        dropped: requests dropped unsent (later than `max_lag_s`).
    """

    offered_fps: float
    frames_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    cpu_ms_per_frame: float | None
    cores_percent: float | None
    statuses: dict[str, int]
    dropped: int = 0


def summarize(records: Sequence[Record], duration_s: float, cpu_s: float | None, cores: int,
              dropped: int = 0) -> Window:
    """A window's figures from its records and the server's CPU seconds over it.

    Args:
        records: one per request sent.
        duration_s: the schedule's length (offered = (sent + dropped) frames / duration_s).
        cpu_s: the server processes' CPU seconds over the window; None when not measured.
        cores: the machine's cores (for `cores_percent`).
        dropped: requests dropped unsent.

    Raises:
        ValueError: a non-positive duration or core count.
    """
    if duration_s <= 0:
        raise ValueError(f"duration_s = {duration_s}: use more than 0 seconds")
    if cores < 1:
        raise ValueError(f"cores = {cores}: use 1 or more")
    ok = [r for r in records if r.status == 200]
    ok_frames = sum(r.frames for r in ok)
    wall = (max(r.done for r in records) - min(r.scheduled for r in records)) if records else 0.0
    latency = Latency.of([r.latency_ms for r in ok])
    statuses = Counter("error" if r.status is None else str(r.status) for r in records)
    return Window(
        offered_fps=(sum(r.frames for r in records) + dropped) / duration_s,
        frames_per_s=ok_frames / wall if wall > 0 else 0.0,
        p50_ms=latency.p50 if ok else None,
        p99_ms=latency.p99 if ok else None,
        cpu_ms_per_frame=cpu_s * 1000.0 / ok_frames if cpu_s is not None and ok_frames else None,
        cores_percent=cpu_s / wall / cores * 100.0 if cpu_s is not None and wall > 0 else None,
        statuses=dict(sorted(statuses.items())),
        dropped=dropped,
    )


@dataclass(slots=True)
class Row:
    """One engine serving one model: its two windows, or why it was not measured."""

    engine: str
    model: str
    nominal: Window | None = None
    overload: Window | None = None
    note: str | None = None

    @property
    def capacity(self) -> float | None:
        """Frames/s under overload (None: not measured)."""
        return self.overload.frames_per_s if self.overload is not None else None


@dataclass(frozen=True, slots=True)
class Verdict:
    """One target: measured ratio (None: a side not measured), required ratio, met."""

    target: str
    measured: float | None
    need: float

    @property
    def met(self) -> bool | None:
        return None if self.measured is None else self.measured >= self.need


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is not positive."""
    return a / b if a is not None and b is not None and b > 0 else None


def verdicts(rows: Sequence[Row]) -> list[Verdict]:
    """The targets, per model, on capacity (frames/s under overload): ours on Ray >= 0.9x ours on
    TorchServe; ours on each engine >= 1.0x PyTriton on the same model and decode."""
    capacity = {(r.engine, r.model): r.capacity for r in rows}
    out: list[Verdict] = []
    for model in dict.fromkeys(r.model for r in rows):
        out.append(Verdict(f"{model}: ray / torchserve", ratio(capacity.get(("ray", model)),
                                                                capacity.get(("torchserve", model))), 0.9))
        for engine in OURS:
            out.append(Verdict(f"{model}: {engine} / pytriton", ratio(capacity.get((engine, model)),
                                                                       capacity.get(("pytriton", model))), 1.0))
    return out


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def table(rows: Sequence[Row]) -> str:
    """The people's table: one line per row, nominal then overload figures."""
    head = (f"{'model':<14} {'engine':<11} | {'offered':>7} {'frames/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
            f"{'CPU ms/fr':>9} {'cores %':>7} | {'offered':>7} {'frames/s':>8} {'p99 ms':>7} {'CPU ms/fr':>9} "
            f"{'cores %':>7} | answers (nominal; overload)")
    lines = [f"{'':<27}| {'nominal load':<50}| {'overload (capacity)':<43}|", head]
    for r in rows:
        if r.nominal is None and r.overload is None:
            lines.append(f"{r.model:<14} {r.engine:<11} | not measured: {r.note or 'unknown'}")
            continue
        n, o = r.nominal, r.overload
        left = (f"{_num(n.offered_fps):>7} {_num(n.frames_per_s):>8} {_num(n.p50_ms, 0):>7} {_num(n.p99_ms, 0):>7} "
                f"{_num(n.cpu_ms_per_frame):>9} {_num(n.cores_percent, 0):>7}" if n else f"{'-':>51}")
        right = (f"{_num(o.offered_fps):>7} {_num(o.frames_per_s):>8} {_num(o.p99_ms, 0):>7} "
                 f"{_num(o.cpu_ms_per_frame):>9} {_num(o.cores_percent, 0):>7}" if o else f"{'-':>43}")
        answers = "; ".join(" ".join(f"{k}:{v}" for k, v in w.statuses.items()) + (f" dropped:{w.dropped}" if w.dropped
                                                                                    else "")
                            for w in (n, o) if w is not None)
        note = f"  ({r.note})" if r.note else ""
        lines.append(f"{r.model:<14} {r.engine:<11} | {left} | {right} | {answers}{note}")
    return "\n".join(lines)


def verdict_table(found: Sequence[Verdict]) -> str:
    lines = [f"{'target (capacity, frames/s)':<40} {'measured':>9} {'need':>6}  verdict"]
    for v in found:
        shown = "n/a" if v.measured is None else f"{v.measured:.2f}x"
        verdict = "not measured" if v.met is None else ("MET" if v.met else "MISSED")
        lines.append(f"{v.target:<40} {shown:>9} {v.need:>5.2f}x  {verdict}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Load: an open-loop schedule (loadgen.schedule) sent through one engine's client.

#: Sends one JPEG; returns (status or None, error type or None). Called from many threads.
Send = Callable[[bytes], tuple[int | None, str | None]]


def drive(plan: Plan, bodies: Callable[[int, int], bytes], send: Send, concurrency: int = 64,
          max_lag_s: float = 2.0, timeout_s: float = 60.0) -> tuple[list[Record], int]:
    """Sends every request of `plan` on its schedule, whatever the answers do.

    At most `concurrency` requests are in flight; a request that cannot leave within `max_lag_s`
    of its schedule is dropped unsent. Bounded: the schedule is finite and each request has the
    sender's own timeout; waiting for stragglers ends `timeout_s` after the schedule.

    Returns:
        the records of the requests sent, and the number dropped.
    """
    schedule = arrivals(plan)
    records: list[Record] = []
    dropped = [0]
    lock = threading.Lock()

    def one(index: int, start: float) -> None:
        arrival = schedule[index]
        if time.perf_counter() - start - arrival.t > max_lag_s:
            with lock:
                dropped[0] += 1
            return
        body = bodies(arrival.stream, arrival.frame_id)
        sent = time.perf_counter() - start
        status, error = send(body)
        record = Record(arrival.stream, arrival.frame_id, 1, str(arrival.resolution), arrival.t, sent,
                        time.perf_counter() - start, status, error)
        with lock:
            records.append(record)

    pool = ThreadPoolExecutor(concurrency, thread_name_prefix="camera")
    try:
        start = time.perf_counter()
        futures = []
        for index, arrival in enumerate(schedule):
            delay = start + arrival.t - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(one, index, start))
        deadline = time.perf_counter() + timeout_s
        for f in futures:
            f.result(timeout=max(0.0, deadline - time.perf_counter()))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return records, dropped[0]


def http_sender(url: str, token: str | None, timeout_s: float = 30.0) -> Send:
    """`POST url` with the JPEG as the body (`/predictions/{model}`, TorchServe's door and Ray's)."""
    import requests

    local = threading.local()
    headers = {"Content-Type": "image/jpeg", **({"Authorization": f"Bearer {token}"} if token else {})}

    def send(body: bytes) -> tuple[int | None, str | None]:
        session = getattr(local, "session", None) or _set(local, "session", requests.Session())
        try:
            answer = session.post(url, data=body, headers=headers, timeout=timeout_s)
        except requests.RequestException as exc:
            return None, type(exc).__name__
        return answer.status_code, None if answer.status_code == 200 else answer.text[:80]

    return send


def multipart_sender(url: str, timeout_s: float = 30.0) -> Send:
    """`POST url` with a multipart form whose `data` part is the JPEG (LitServe's way in)."""
    import requests

    local = threading.local()

    def send(body: bytes) -> tuple[int | None, str | None]:
        session = getattr(local, "session", None) or _set(local, "session", requests.Session())
        try:
            answer = session.post(url, files={"data": ("frame.jpg", body, "image/jpeg")}, timeout=timeout_s)
        except requests.RequestException as exc:
            return None, type(exc).__name__
        if answer.status_code == 200 and answer.json().get("code") != 200:
            return int(answer.json().get("code") or 500), str(answer.json().get("type"))
        return answer.status_code, None if answer.status_code == 200 else answer.text[:80]

    return send


def triton_sender(address: str, model: str, timeout_s: float = 30.0) -> Send:
    """`tritonclient.http` `infer`: input `frames`, BYTES `[1, 1]` (one encoded JPEG), binary data."""
    import numpy as np
    import tritonclient.http as triton
    from tritonclient.utils import InferenceServerException

    local = threading.local()

    def send(body: bytes) -> tuple[int | None, str | None]:
        client = getattr(local, "client", None) or _set(local, "client", triton.InferenceServerClient(
            address, connection_timeout=timeout_s, network_timeout=timeout_s))
        frames = triton.InferInput("frames", [1, 1], "BYTES")
        frames.set_data_from_numpy(np.array([[body]], dtype=object))
        try:
            client.infer(model, [frames])
        except InferenceServerException as exc:
            return (int(exc.status()) if str(exc.status() or "").isdigit() else 500), str(exc)[:80]
        except Exception as exc:  # noqa: BLE001 - geventhttpclient's socket errors: no answer
            return None, type(exc).__name__
        return 200, None

    return send


def _set(local: threading.local, name: str, value):
    setattr(local, name, value)
    return value


# ---------------------------------------------------------------------------------------------
# CPU of a server: every process that carries its tag in its environment.

def tagged(tag: str) -> list[int]:
    """Process ids whose environment holds `TAG_ENV=tag` (this row's servers and their children)."""
    import psutil

    found = []
    for process in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error, OSError):
            if process.environ().get(TAG_ENV) == tag:
                found.append(process.pid)
    return found


def cpu_seconds(pids: Sequence[int]) -> dict[int, float]:
    """user + system CPU seconds of each live process of `pids`."""
    import psutil

    out = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(pid).cpu_times()
            out[pid] = times.user + times.system
    return out


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two readings (a process new in `after` counts from 0)."""
    return sum(max(0.0, value - before.get(pid, 0.0)) for pid, value in after.items())


def cpu_split(before: dict[int, float], after: dict[int, float], top: int = 5) -> dict[str, float]:
    """`cpu_delta` by process (the `top` largest): where an engine's CPU goes, e.g. Ray's proxy,
    ingress and model replica, or TorchServe's frontend and worker."""
    import psutil

    spent: dict[str, float] = {}
    for pid, value in after.items():
        with contextlib.suppress(psutil.Error, IndexError):
            line = psutil.Process(pid).cmdline()
            name = line[0] if line[0].startswith("ray::") else Path(line[1 if "python" in line[0] else 0]).name
            spent[name] = spent.get(name, 0.0) + max(0.0, value - before.get(pid, 0.0))
    return dict(sorted(spent.items(), key=lambda kv: -kv[1])[:top])


# ---------------------------------------------------------------------------------------------
# The servers.

class Skip(Exception):
    """A row cannot run here (an engine not installed, not written yet, or failing to start)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Callable[[], bool], timeout_s: float, alive: Callable[[], bool] = lambda: True,
             what: str = "server") -> None:
    """Polls `check` until true; raises Skip when `alive` turns false or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        if not alive():
            raise Skip(f"{what} exited before it was ready")
        time.sleep(0.5)
    raise Skip(f"{what} not ready in {timeout_s:g} s")


def stop_tagged(tag: str, grace_s: float = 15.0) -> None:
    """SIGTERM, then SIGKILL, each process still carrying `tag` (only what this bench started)."""
    pids = tagged(tag)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        time.sleep(0.5)
        pids = tagged(tag)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class Server:
    """One engine serving one model; `start` raises Skip when it cannot run here."""

    def __init__(self, work: Path, tag: str) -> None:
        self.work, self.tag = work, tag
        self.env = {**os.environ, TAG_ENV: tag}
        self.process: subprocess.Popen | None = None
        self.log = work / "server.log"

    def start(self) -> None:
        raise NotImplementedError

    def sender(self) -> Send:
        raise NotImplementedError

    def stop(self) -> None:
        """Stops the process it started (SIGTERM to its group, then SIGKILL), then anything tagged."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        stop_tagged(self.tag)

    def _spawn(self, command: Sequence[str], env: dict[str, str] | None = None, cwd: Path = ROOT) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(command, cwd=cwd, env=env or self.env, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)

    def _alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tail(self, lines: int = 5) -> str:
        with contextlib.suppress(OSError):
            return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-lines:])
        return ""

    def _wait_http(self, url: str, what: str) -> None:
        """Until GET `url` answers 2xx; Skip, with the log's tail, when the server dies or 180 s pass."""
        def ready() -> bool:
            import requests

            return requests.get(url, timeout=5).ok

        try:
            wait_for(ready, 180, self._alive, what)
        except Skip as exc:
            raise Skip(f"{exc}: {self.tail()}") from exc


class TorchServeServer(Server):
    """TorchServe (shipped config.properties, one model, its batch settings) from `work`."""

    def __init__(self, work: Path, tag: str, mar: Path, name: str, port_offset: int) -> None:
        super().__init__(work, tag)
        from bench.torchserve import Server as Ts

        self.ts = Ts(work / "ts", mar, name, port_offset=port_offset)
        self.ts.env[TAG_ENV] = tag
        self.name = name

    def start(self) -> None:
        try:
            self.ts.start(timeout_s=300)
        except (TimeoutError, subprocess.CalledProcessError) as exc:
            raise Skip(f"TorchServe did not start: {exc}") from exc

    def sender(self) -> Send:
        return http_sender(f"{self.ts.inference_url}/predictions/{self.name}", self.ts.key())

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.ts.stop()
        stop_tagged(self.tag)


def rayserve_missing() -> str | None:
    """Why `python -m rayserve` cannot run here, or None."""
    import importlib.util

    try:
        if importlib.util.find_spec("rayserve.__main__") is None:
            return "rayserve has no CLI yet (no rayserve/__main__.py)"
    except ImportError as exc:
        return f"rayserve cannot be imported: {exc}"
    return None


def other_ray(tag: str) -> str | None:
    """Why this row must not start Ray here: a Ray cluster this bench did not start is running
    (`rayserve start` takes a fixed GCS port and would deploy into a cluster already there, and a
    second cluster's work on the same cores would be in the row's figures), or None."""
    import psutil

    for process in psutil.process_iter(["pid", "name"]):
        with contextlib.suppress(psutil.Error, OSError):
            if process.info["name"] == "gcs_server" and process.environ().get(TAG_ENV) != tag:
                return (f"another Ray cluster runs on this machine (gcs_server pid {process.pid}); "
                        "its work would be in this row's figures: run this row when it is gone")
    return None


class RayServer(Server):
    """Ours on Ray Serve, one node: `python -m rayserve start --config ... --models NAME --port PORT`
    from `work` (where it writes key_file.json), stopped with `python -m rayserve stop` there."""

    def __init__(self, work: Path, tag: str, store: Path, name: str) -> None:
        super().__init__(work, tag)
        from tsutil import properties

        self.name, self.port = name, free_port()
        work.mkdir(parents=True, exist_ok=True)
        self.config = work / "config.properties"
        self.config.write_text(properties.overlay(properties.SHIPPED.read_text(), properties.only(name),
                                                  f"model_store={store}\n"))

    def start(self) -> None:
        missing = rayserve_missing() or other_ray(self.tag)
        if missing:
            raise Skip(missing)
        self._spawn([sys.executable, "-m", "rayserve", "start", "--config", str(self.config), "--models", self.name,
                     "--port", str(self.port)], env={**self.env, "PYTHONPATH": str(ROOT)}, cwd=self.work)
        key_file = self.work / "key_file.json"
        probe = self._probe_body()

        def ready() -> bool:
            import requests

            if not key_file.exists():
                return False
            token = json.loads(key_file.read_text())["inference"]["key"]
            return requests.post(self._url(), data=probe, timeout=30, headers={
                "Authorization": f"Bearer {token}", "Content-Type": "image/jpeg"}).status_code == 200

        # `start` may return once it has launched Ray (like `torchserve --start`) or stay up.
        def alive() -> bool:
            return self._alive() or self.process is None or self.process.returncode == 0

        try:
            wait_for(ready, 300, alive, "python -m rayserve start")
        except Skip as exc:
            raise Skip(f"{exc}: {self.tail()}") from exc

    def _url(self) -> str:
        return f"http://127.0.0.1:{self.port}/predictions/{self.name}"

    @staticmethod
    def _probe_body() -> bytes:
        from loadgen.frames import Format, encode, frame

        return encode([frame(0, 0, Resolution(320, 240))], Format.JPEG).body

    def sender(self) -> Send:
        token = json.loads((self.work / "key_file.json").read_text())["inference"]["key"]
        return http_sender(self._url(), token)

    def stop(self) -> None:
        if self.process is None:  # never started (skipped): another Ray may be running; leave it be
            return
        with contextlib.suppress(Exception):
            subprocess.run([sys.executable, "-m", "rayserve", "stop"], cwd=self.work, env=self.env, timeout=120,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        super().stop()


class RayHandleServer(RayServer):
    """`RayServer`'s deployment, each frame sent by `DeploymentHandle.remote` from this process
    (joined to the node as a driver): the model replica without Ray's HTTP proxy and ingress."""

    def sender(self) -> Send:
        from rayserve.node import keep_loopback

        keep_loopback()
        from ray import serve

        from rayserve import cluster
        from rayserve.cli import GCS_PORT
        from rayserve.plan import app_name

        cluster.join(f"127.0.0.1:{GCS_PORT}", log_to_driver=False)
        handle = serve.get_deployment_handle(self.name, app_name(self.name)).infer
        headers = {"body": {"content-type": "image/jpeg"}, "content-type": "image/jpeg"}

        def send(body: bytes) -> tuple[int | None, str | None]:
            try:
                answer = handle.remote({"body": body}, headers).result(timeout_s=30)
            except Exception as exc:  # a replica gone, a full queue, a timeout: the row counts it
                return None, type(exc).__name__
            return answer.status, None if answer.status == 200 else answer.body[:80]

        return send

    def stop(self) -> None:
        import ray
        from ray.serve import context

        if ray.is_initialized():
            ray.shutdown()
        context._set_global_client(None)  # Serve's client names this cluster's controller: the next row's is new
        super().stop()


def peer_python(engine: str) -> Path:
    """The peer's own interpreter; Skip when its venv is not made."""
    python = PEER_VENVS[engine] / "bin" / "python"
    if not python.exists():
        raise Skip(f"{python} missing: run `{SETUP[engine]}`")
    return python


class PyTritonServer(Server):
    """`bench.peers.pytriton_server` in `.venv-pytriton`, HTTP on a free loopback port."""

    def __init__(self, work: Path, tag: str, model_file: Path, name: str, detector: bool) -> None:
        super().__init__(work, tag)
        self.model_file, self.name, self.detector, self.port = model_file, name, detector, free_port()

    def start(self) -> None:
        python = peer_python("pytriton")
        libdir = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
                                capture_output=True, text=True, check=True).stdout.strip()
        env = {**self.env, "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [libdir, os.environ.get("LD_LIBRARY_PATH")])),
               "PYTHONPATH": str(ROOT)}
        self.work.mkdir(parents=True, exist_ok=True)
        self._spawn([str(python), "-m", "bench.peers.pytriton_server", str(self.model_file), "--http-port",
                     str(self.port), "--name", self.name, "--workspace", str(self.work / "pytriton"),
                     *(["--detector"] if self.detector else [])], env=env)
        self._wait_http(f"http://127.0.0.1:{self.port}/v2/models/{self.name}/ready", "PyTriton")

    def sender(self) -> Send:
        return triton_sender(f"127.0.0.1:{self.port}", self.name)


class LitServeServer(Server):
    """`bench.peers.litserve_server` in `.venv-litserve` on a free loopback port."""

    def __init__(self, work: Path, tag: str, model_file: Path) -> None:
        super().__init__(work, tag)
        self.model_file, self.port = model_file, free_port()

    def start(self) -> None:
        python = peer_python("litserve")
        self.work.mkdir(parents=True, exist_ok=True)
        self._spawn([str(python), "-m", "bench.peers.litserve_server", str(self.model_file), "--port", str(self.port)],
                    env={**self.env, "PYTHONPATH": str(ROOT)})
        self._wait_http(f"http://127.0.0.1:{self.port}/health", "LitServe")

    def sender(self) -> Send:
        return multipart_sender(f"http://127.0.0.1:{self.port}/predict")


# ---------------------------------------------------------------------------------------------
# Archives and model files.

def build_archives(work: Path, models: Sequence[str], stock: bool) -> tuple[dict[str, Path], dict[str, Path]]:
    """Our archives (`archive.sh`, the demo set), the stock-style one on frame_quality.pt, and each
    model's TorchScript file taken out of our archive (the very file every engine loads).

    Returns:
        {TorchServe model name: .mar} (ours under the model's name, the stock one as `stock`), and
        {model: .pt}.
    """
    from bench.torchserve import archive

    store = work / "store"
    store.mkdir(parents=True, exist_ok=True)
    subprocess.run(["bash", str(ROOT / "archive.sh")], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "MODEL_STORE": str(store)})
    files: dict[str, Path] = {}
    for model in models:
        with zipfile.ZipFile(store / f"{model}.mar") as mar:
            serialized = json.loads(mar.read("MAR-INF/MANIFEST.json"))["model"]["serializedFile"]
            (work / "models").mkdir(exist_ok=True)
            files[model] = work / "models" / f"{model}.pt"
            files[model].write_bytes(mar.read(serialized))
    mars = {model: store / f"{model}.mar" for model in models}
    if stock and "frame_quality" in models:
        stage = work / "stock-stage"
        (work / "stock-store").mkdir(exist_ok=True)
        (stage / "bench").mkdir(parents=True, exist_ok=True)
        for name in ("__init__.py", "stock.py"):
            (stage / "bench" / name).write_bytes((ROOT / "bench" / name).read_bytes())
        mars["stock"] = archive(work / "stock-store", "stock", ROOT / "bench" / "stock_handler.py",
                                files["frame_quality"], ROOT / "handler" / "models" / "frame_quality.yaml", extra=stage)
    return mars, files


def make_server(engine: str, model: str, work: Path, tag: str, mars: dict[str, Path], files: dict[str, Path],
                port_offset: int) -> Server:
    if engine == "torchserve":
        return TorchServeServer(work, tag, mars[model], model, port_offset)
    if engine == "stock":
        if model != "frame_quality":
            raise Skip("the stock-style handler answers named [N] outputs only (frame_quality)")
        return TorchServeServer(work, tag, mars["stock"], "stock", port_offset)
    if engine == "ray":
        return RayServer(work, tag, mars[model].parent, model)
    if engine == "ray-handle":
        return RayHandleServer(work, tag, mars[model].parent, model)
    if engine == "pytriton":
        return PyTritonServer(work, tag, files[model], model, detector=model != "frame_quality")
    if engine == "litserve":
        return LitServeServer(work, tag, files[model])
    raise ValueError(f"engine {engine!r}: choose from {list(ENGINES)}")


# ---------------------------------------------------------------------------------------------
# The run.

@dataclass(slots=True)
class Settings:
    engines: tuple[str, ...] = ENGINES
    models: tuple[str, ...] = MODELS
    seconds: float = 15.0  # each measured window
    warmup_s: float = 4.0
    clients: int = CLIENTS
    concurrency: int = 64
    max_lag_s: float = 2.0
    port_offset: int = 3300
    loads: dict[str, Load] = field(default_factory=lambda: dict(LOADS))


def measure(server: Server, model: str, settings: Settings, bodies: Callable[[int, int], bytes],
            progress: Callable[[str], None]) -> tuple[Window, Window]:
    """Warm-up, then the nominal and the overload window, each with the server's CPU around it."""
    send = server.sender()
    cores = os.cpu_count() or 1
    load = settings.loads[model]
    drive(Plan(settings.clients, load.nominal, settings.warmup_s), bodies, send, settings.concurrency,
          settings.max_lag_s)
    progress(f"    warmed up; {len(tagged(server.tag))} server processes")
    windows = []
    for name, fps in (("nominal", load.nominal), ("overload", load.overload)):
        plan = Plan(settings.clients, fps, settings.seconds)
        before = cpu_seconds(tagged(server.tag))
        records, dropped = drive(plan, bodies, send, settings.concurrency, settings.max_lag_s)
        after = cpu_seconds(tagged(server.tag))
        window = summarize(records, settings.seconds, cpu_delta(before, after) if after else None, cores, dropped)
        progress(f"    {name:<8} offered {window.offered_fps:6.1f}  served {window.frames_per_s:6.1f} frames/s  "
                 f"p99 {_num(window.p99_ms, 0)} ms  CPU {_num(window.cpu_ms_per_frame)} ms/frame  {window.statuses}")
        progress("      CPU s by process: " + ", ".join(f"{k} {v:.1f}" for k, v in cpu_split(before, after).items()))
        windows.append(window)
    return windows[0], windows[1]


def run(work: Path, settings: Settings, progress: Callable[[str], None] = lambda line: None) -> list[Row]:
    """Builds the archives, then for each engine and model: start, measure, stop."""
    from loadgen.frames import Format as Wire
    from loadgen.frames import FrameSource

    unknown = sorted(set(settings.engines) - set(ENGINES)) + sorted(set(settings.models) - set(MODELS))
    if unknown:
        raise ValueError(f"unknown {unknown}: engines are {list(ENGINES)}, models {list(MODELS)}")
    progress("building the archives (archive.sh) and the stock-style one")
    mars, files = build_archives(work, settings.models, "stock" in settings.engines)
    source = FrameSource(Wire.JPEG, distinct=8)
    for stream in range(settings.clients):
        source.prepare(stream, RESOLUTION)

    def bodies(stream: int, frame_id: int) -> bytes:
        return source.payload(stream, frame_id, RESOLUTION).body

    rows: list[Row] = []
    for model in settings.models:
        for engine in settings.engines:
            row = Row(engine, model)
            rows.append(row)
            tag = f"{uuid.uuid4().hex[:12]}-{engine}"
            server: Server | None = None
            started = time.monotonic()
            try:
                server = make_server(engine, model, work / f"{engine}-{model}", tag, mars, files, settings.port_offset)
                server.start()
                progress(f"  {model} on {engine}: ready in {time.monotonic() - started:.0f} s")
                row.nominal, row.overload = measure(server, model, settings, bodies, progress)
            except Skip as exc:
                row.note = str(exc)
                progress(f"  {model} on {engine}: skipped: {exc}")
            finally:
                if server is not None:
                    server.stop()
    return rows


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.engines", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default=",".join(ENGINES), help=f"comma-separated engines: {', '.join(ENGINES)}")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated: {', '.join(MODELS)}")
    p.add_argument("--seconds", type=float, default=15.0, help="each measured window (nominal, overload)")
    p.add_argument("--quick", action="store_true", help="a smoke run: frame_quality, 3 s windows, 1 s warm-up")
    p.add_argument("--port-offset", type=int, default=int(os.environ.get("VIDEO_TS_PORT_OFFSET") or 3300),
                   help="moves TorchServe's ports (default $VIDEO_TS_PORT_OFFSET, else 3300)")
    p.add_argument("--json", type=Path, help="write all results here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    settings = Settings(engines=tuple(e.strip() for e in args.rows.split(",") if e.strip()),
                        models=tuple(m.strip() for m in args.models.split(",") if m.strip()),
                        seconds=args.seconds, port_offset=args.port_offset)
    if args.quick:
        settings.models, settings.seconds, settings.warmup_s = ("frame_quality",), 3.0, 1.0
    started = time.time()

    def progress(line: str) -> None:
        print(f"[{time.time() - started:4.0f} s] {line}", flush=True)

    def terminate(signum, frame) -> None:  # SIGTERM: unwind like Ctrl-C, so every server is stopped
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        rows = run(Path(tmp), settings, progress)
    found = verdicts(rows)
    print()
    print(f"{settings.clients} open-loop cameras, 720p JPEG; per model, frames/s a camera: "
          + ", ".join(f"{m} nominal {settings.loads[m].nominal:g} / overload {settings.loads[m].overload:g}"
                      for m in settings.models) + f"; windows of {settings.seconds:g} s")
    print(table(rows))
    print()
    print(verdict_table(found))
    load_after = os.getloadavg()
    print(f"\n({time.time() - started:.0f} s; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after; "
          "CPU = the server's processes; a shared 2-core machine is noisy: compare rows of one run)")
    if args.json:
        args.json.write_text(json.dumps({
            "argv": sys.argv, "settings": asdict(settings), "rows": [asdict(r) for r in rows],
            "targets": [{"target": v.target, "measured": v.measured, "need": v.need, "met": v.met} for v in found],
        }, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
