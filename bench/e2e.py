"""End-to-end bench: every handler in ONE TorchServe, loaded in interleaved rounds.

Six models are registered side by side with the shipped batching (`batchSize` 32,
`maxBatchDelay` 50 ms, one worker each): our handler with frame_quality (the shipped archive,
`archive.sh`), our handler with a trivial model (packaged with `archive.sh NAME MODEL YAML`, as
docs/models.md says), a decode-only handler (our decode step, nothing after it), a decode-only handler
in the stock style (Pillow / `np.load`), a stock-style handler and a no-op handler. Each round drives every (format, handler) pair in turn with the same closed
loop (`clients` threads, each sending its next request when the last is answered) for `seconds`;
the order rotates every round, so load from other processes on a shared machine hits all alike.
A model's figure is the median of its rounds.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import requests

from bench.torchserve import ROOT, archive
from bench.trivial_model import build as build_trivial
from loadgen.frames import Format, encode, frame
from loadgen.schedule import Resolution
from tsutil.server import TorchServe

#: bench name -> TorchServe model name
HANDLERS = {"ours": "frame_quality", "trivial": "trivial", "decode-only": "decode_only",
            "pil-decode": "pillow_decode", "stock": "stock", "no-op": "noop"}
FORMATS = ("jpeg", "npy")


@dataclass(slots=True)
class Result:
    """One handler on one format over all rounds."""

    handler: str
    fmt: str
    rounds: list[float] = field(default_factory=list)  # 200 answers per second, one per round
    answers: Counter = field(default_factory=Counter)  # status -> count, all rounds
    latency_ms: list[float] = field(default_factory=list)

    @property
    def requests_per_s(self) -> float | None:
        return statistics.median(self.rounds) if self.rounds else None

    @property
    def p50_ms(self) -> float | None:
        return statistics.median(self.latency_ms) if self.latency_ms else None


def build_archives(store: Path, model_dir: Path) -> dict[str, Path]:
    """The six archives: ours and trivial through `archive.sh`, the baselines through the archiver."""
    store.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MODEL_STORE": str(store)}
    subprocess.run(["bash", str(ROOT / "archive.sh")], check=True, stdout=subprocess.DEVNULL, env=env)
    trivial = build_trivial(model_dir / "trivial.pt")
    subprocess.run(["bash", str(ROOT / "archive.sh"), "trivial", str(trivial), str(ROOT / "bench" / "trivial.yaml")],
                   check=True, stdout=subprocess.DEVNULL, env=env)
    config = ROOT / "handler" / "models" / "frame_quality.yaml"
    stage = Path(tempfile.mkdtemp(prefix="bench-stage-"))
    try:
        (stage / "bench").mkdir()
        (stage / "handler").mkdir()
        for name in ("__init__.py", "stock.py"):
            shutil.copy(ROOT / "bench" / name, stage / "bench" / name)
        for path in (ROOT / "handler").rglob("*.py"):  # the package as archive.sh ships it (doors/ too)
            if "models" not in path.relative_to(ROOT / "handler").parts:
                (stage / path.relative_to(ROOT).parent).mkdir(parents=True, exist_ok=True)
                shutil.copy(path, stage / path.relative_to(ROOT))
        for name, handler in (("stock", "stock_handler.py"), ("noop", "noop_handler.py"),
                              ("decode_only", "decode_handler.py"), ("pillow_decode", "pillow_decode_handler.py")):
            archive(store, name, ROOT / "bench" / handler, model_dir / "frame_quality.pt", config, extra=stage)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return {bench_name: store / f"{model}.mar" for bench_name, model in HANDLERS.items()}


class MultiServer(TorchServe):
    """One TorchServe (shipped config.properties, ports moved) serving several archives."""

    def __init__(self, workdir: Path, mars: dict[str, Path], port_offset: int | None = None) -> None:
        models = {mar.stem: {"1.0": {"defaultVersion": True, "marName": mar.name, "minWorkers": 1,
                                     "maxWorkers": 1, "batchSize": 32, "maxBatchDelay": 50,
                                     "responseTimeout": 120}}
                  for mar in mars.values()}
        overlay = f"load_models={','.join(m.name for m in mars.values())}\nmodels={json.dumps(models)}\n"
        super().__init__(workdir, {mar.stem: mar for mar in mars.values()}, overlays=[overlay],
                         port_offset=port_offset)
        self.names = list(models)


def payloads(fmt: str, resolution: Resolution, distinct: int = 8) -> list[tuple[bytes, str]]:
    """`distinct` camera frames of `resolution` as (body, content type)."""
    kind = Format.JPEG if fmt == "jpeg" else Format.NPY
    out = []
    for i in range(distinct):
        payload = encode([frame(i % 4, i, resolution)], kind)
        out.append((payload.body, payload.content_type))
    return out


def closed_loop(url: str, token: str, bodies: list[tuple[bytes, str]], clients: int, seconds: float
                ) -> tuple[int, Counter, list[float]]:
    """`clients` threads, each sending its next request when the last is answered, for `seconds`.

    Returns:
        200 answers that completed in the window, every status seen, and the 200s' latencies (ms).
    """
    stop_at = time.monotonic() + seconds
    answers: Counter = Counter()
    latencies: list[float] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        session = requests.Session()
        i = k
        while True:
            body, content_type = bodies[i % len(bodies)]
            i += clients
            sent = time.monotonic()
            if sent >= stop_at:
                return
            try:
                status = session.post(url, data=body, timeout=120, headers={
                    "Authorization": f"Bearer {token}", "Content-Type": content_type}).status_code
            except requests.RequestException as exc:
                status = type(exc).__name__
            done = time.monotonic()
            with lock:
                if done <= stop_at:
                    answers[status] += 1
                    if status == 200:
                        latencies.append((done - sent) * 1000)

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers[200], answers, latencies


def bench(workdir: Path, model_dir: Path, rounds: int = 3, seconds: float = 8.0, clients: int = 16,
          resolution: Resolution = Resolution(1280, 720), handlers: tuple[str, ...] = tuple(HANDLERS),
          formats: tuple[str, ...] = FORMATS, port_offset: int | None = None,
          progress=None) -> list[Result]:
    """Every handler and format, `rounds` interleaved rounds of `seconds` each, in one TorchServe."""
    mars = build_archives(workdir / "store", model_dir)
    server = MultiServer(workdir / "ts", {h: mars[h] for h in handlers}, port_offset=port_offset)
    bodies = {fmt: payloads(fmt, resolution) for fmt in formats}
    results = {(h, f): Result(h, f) for f in formats for h in handlers}
    server.start(timeout_s=300)
    try:
        token = server.key()
        url = {h: f"{server.inference_url}/predictions/{HANDLERS[h]}" for h in handlers}
        for fmt in formats:  # warm-up: first batches pay one-off costs
            for h in handlers:
                closed_loop(url[h], token, bodies[fmt], clients, 1.0)
        for r in range(rounds):
            order = list(handlers[r % len(handlers):] + handlers[:r % len(handlers)])
            for fmt in formats:
                for h in order:
                    ok, answers, latencies = closed_loop(url[h], token, bodies[fmt], clients, seconds)
                    result = results[(h, fmt)]
                    result.rounds.append(ok / seconds)
                    result.answers.update(answers)
                    result.latency_ms.extend(latencies)
                    if progress is not None:
                        progress(f"round {r + 1}/{rounds} {fmt:<4} {h:<11} {ok / seconds:7.1f} req/s")
    finally:
        server.stop()
    return list(results.values())


def table(results: list[Result]) -> str:
    lines = [f"{'format':<6} {'handler':<11} {'req/s':>8} {'rounds (req/s)':<26} {'p50 ms':>7}  answers"]
    for r in results:
        rate = "FAILED" if r.requests_per_s is None else f"{r.requests_per_s:8.1f}"
        rounds = " ".join(f"{v:.1f}" for v in r.rounds)
        p50 = "-" if r.p50_ms is None else f"{r.p50_ms:7.0f}"
        answers = " ".join(f"{k}:{v}" for k, v in sorted(r.answers.items(), key=str))
        lines.append(f"{r.fmt:<6} {r.handler:<11} {rate:>8} {rounds:<26} {p50:>7}  {answers}")
    return "\n".join(lines)
