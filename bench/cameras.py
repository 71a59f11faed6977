"""`python -m bench.cameras`: how many cameras one machine carries, per scene, with motion off and on.

    python -m bench.cameras --json cameras.json               # the whole matrix (an hour or more on 2 cores)
    python -m bench.cameras --scenes quiet --resolutions 720p --modes segments --seconds 15
    python -m bench.cameras --short                           # the test's form: 1 camera, 720p, quiet (~2 minutes)

N cameras (gst-rtsp-server, tests/rtsp_server.py) play street scenes made in code
(bench/camera_scenes.py: noise, compression, a clock and a swaying tree, both masked, a lighting
step, movers in view 10% of the time (`quiet`), 50% (`busy`) or always (`crowd`); H.264 at 15 fps,
camera i at phase i of 4). The real `video-ingest` carries them (segments, its default, and frames
at `sample_fps: 5`) into one real TorchServe serving a YOLO11n-sized ONNX detector (bench/yolo.py,
seeded weights, 640 letterbox) with `motion: off` and on (`camera_scenes.MASK` masked), and
bench/decode_handler.py (no model: the machine's limit). N doubles from 1, then is bisected, until
a camera falls behind in the `--seconds` window: lag p99 (`latency_ms`) over 2 s (`--lag-s`), a unit dropped,
an error, a silent camera, or under 90% of its frames answered (run again once if other processes
took half a core meanwhile). Cameras carried is the largest N kept up, or the fraction of one camera
answered. A row's numbers are that N's window: CPU a camera (bridge + TorchServe's frontend and
worker, /proc), model frames a camera-second (`looked: true`, and the regions they were looked at
in; every frame with motion off), lag p50/p99; the other processes' CPU is kept: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from bench import camera_scenes, harness, yolo
from bench.harness import ROOT
from bench.soak_bridge import Results
from tests.e2e.ingest_cli import Ingest
from tests.rtsp_server import RtspServer
from tsutil.server import TorchServe

DETECTOR, DECODE = "cameras_yolo", "cameras_decode"
SETTINGS = {"off": "detector, motion off", "on": "detector, motion on", "decode": "decode only (no model)"}
FRAMES_FPS = 5.0
ANSWERED = 0.9  # behind: fewer frames answered than this share (or lag p99 over `Plan.lag_s`)
OTHERS = 0.5  # a trial behind while other processes took this much of a core is run again once
PHASES = 4
PORT_OFFSET = 800
BATCHING = {"minWorkers": 1, "maxWorkers": 1, "batchSize": 8, "maxBatchDelay": 50, "responseTimeout": 120}


@dataclass(frozen=True)
class Plan:
    """The matrix and the timings (seconds)."""

    scenes: tuple[str, ...] = tuple(camera_scenes.SCENES)
    resolutions: tuple[str, ...] = tuple(camera_scenes.RESOLUTIONS)
    modes: tuple[str, ...] = ("segments", "frames")
    settings: tuple[str, ...] = tuple(SETTINGS)
    seconds: float = 20.0
    warmup: float = 5.0
    tail: float = 4.0
    clip: int = 20
    max_cameras: int = 32
    lag_s: float = 2.0


#: The test's form: one 720p camera on the quiet street, segments, motion off and on.
SHORT = Plan(("quiet",), ("720p",), ("segments",), ("off", "on"), seconds=8.0, warmup=3.0, tail=3.0, clip=10, max_cameras=1)


@dataclass(frozen=True)
class Trial:
    """One window with `cameras` cameras: what was answered, and the CPU each process group spent."""

    cameras: int
    seconds: float
    rate: float  # frames a camera should have answered a second
    answered: int = 0
    looked: int = 0
    regions: int = 0
    errors: int = 0
    dropped: int = 0
    silent: int = 0
    lag_p50_ms: float | None = None
    lag_p99_ms: float | None = None
    cpu_s: dict[str, float] = field(default_factory=dict)  # core-seconds: bridge, torchserve, cameras, others
    load: float | None = None
    lag_limit_ms: float = 2000.0

    @property
    def fraction(self) -> float:  # frames answered over those the cameras called for
        return self.answered / (self.cameras * self.seconds * self.rate)

    @property
    def behind(self) -> str | None:  # why a camera fell behind
        why = [f"{v} {k}" for k, v in (("silent", self.silent), ("dropped", self.dropped), ("errors", self.errors)) if v]
        if self.lag_p99_ms is None or self.lag_p99_ms > self.lag_limit_ms:
            why.append(f"lag p99 {'-' if self.lag_p99_ms is None else f'{self.lag_p99_ms / 1000:.1f} s'}")
        if self.fraction < ANSWERED:
            why.append(f"answered {self.fraction:.2f}")
        return ", ".join(why) or None

    @property
    def cpu_per_camera_pct(self) -> float:  # the bridge's and TorchServe's, % of one core
        return 100 * (self.cpu_s.get("bridge", 0) + self.cpu_s.get("torchserve", 0)) / self.seconds / self.cameras

    @property
    def model_frames(self) -> float:  # frames the model looked at a camera-second
        return self.looked / self.cameras / self.seconds


def summarise(lines: list[dict[str, Any]], names: list[str], t0: float, t1: float, tail: float, rate: float,
              frames_mode: bool = False) -> Trial:
    """The window [t0, t1) of a results file: frames by capture time, drops by event time (to `tail` after);
    lag over the frames the server answered (in frames mode the bridge writes the unsent ones itself)."""
    answers = [x for x in lines if "event" not in x and t0 <= x["capture_time"] < t1]
    ok = [x for x in answers if x.get("status") == 200]
    lags = [x["latency_ms"] for x in ok if "latency_ms" in x and not (frames_mode and x.get("looked") is False)]
    dropped = [x for x in lines if x.get("event") == "dropped" and x.get("reason") != "shutdown"
               and t0 <= x["time"] < t1 + tail]
    return Trial(len(names), t1 - t0, rate, answered=len(ok), looked=sum(x.get("looked", True) is True for x in ok),
                 regions=sum(len(x.get("regions") or ()) for x in ok), errors=len(answers) - len(ok),
                 dropped=len(dropped), silent=len(set(names) - {x["camera"] for x in ok}),
                 lag_p50_ms=harness.percentile(lags, 0.5), lag_p99_ms=harness.percentile(lags, 0.99))


def search(measure: Callable[[int], Trial], max_cameras: int) -> tuple[float, Trial, str | None, list[Trial]]:
    """Doubles N from 1 until a camera falls behind (or `max_cameras`), then bisects. Returns cameras
    carried (the fraction of one answered when even one falls behind), the trial the numbers come
    from, the smallest N behind and why (None: `max_cameras` kept up) and every trial."""
    trials: dict[int, Trial] = {}
    good, bad, n = 0, None, 1
    while bad is None and n <= max_cameras:
        trials[n] = measure(n)
        good, bad = (n, None) if trials[n].behind is None else (good, n)
        n = max_cameras + 1 if n == max_cameras else min(2 * n, max_cameras)
    while bad is not None and bad - good > 1:
        mid = (good + bad) // 2
        trials[mid] = measure(mid)
        good, bad = (mid, bad) if trials[mid].behind is None else (good, mid)
    ordered = [trials[k] for k in sorted(trials)]
    why = None if bad is None else f"N={bad}: {trials[bad].behind}"
    if good == 0:
        return round(min(1.0, trials[1].fraction), 2), trials[1], why, ordered
    return float(good), trials[good], why, ordered


@dataclass(frozen=True)
class Row:
    """One scene, video, mode and setting, searched."""

    scene: str
    resolution: str
    mode: str
    setting: str
    carried: float
    trial: Trial
    behind: str | None
    trials: list[Trial]

    def cells(self) -> list[str]:
        t = self.trial
        frames = {"off": f"{t.model_frames:.2f}", "decode": f"({t.model_frames:.2f} decoded)",
                  "on": f"{t.model_frames:.2f} ({t.regions / t.cameras / t.seconds:.2f} regions)"}[self.setting]
        carried = f"{self.carried:.2f} of 1" if t.behind else f"{self.carried:g}"
        return [self.scene, self.resolution, self.mode, SETTINGS[self.setting], carried,
                f"{t.cpu_per_camera_pct:.1f}", frames, *("" if v is None else f"{v:.0f}" for v in (t.lag_p50_ms, t.lag_p99_ms)),
                self.behind or ""]


HEAD = ["scene", "video", "mode", "setting", "cameras carried", "CPU/camera (% core)", "model frames/camera-s",
        "lag p50 ms", "lag p99 ms", "behind at"]


def table(rows: list[Row]) -> str:
    return harness.markdown(HEAD, [r.cells() for r in rows])


def targets(rows: list[Row]) -> list[str]:
    """The issue's targets: quiet, motion on >= 8x off and >= 0.7 of decode only; crowd, on >= off."""
    found = {(r.scene, r.resolution, r.mode, r.setting): r.carried for r in rows}
    decode = {(r.resolution, r.mode): r.carried for r in rows if r.setting == "decode"}
    out = []
    for (scene, res, mode, setting), on in found.items():
        off = found.get((scene, res, mode, "off"))
        if setting != "on" or off is None:
            continue
        need = [("off", off, 8.0 if scene == "quiet" else 1.0)] if scene in ("quiet", "crowd") else []
        if scene == "quiet" and (res, mode) in decode:
            need.append(("decode only", decode[(res, mode)], 0.7))
        ratios = [(name, base, on / base if base else float("inf"), k) for name, base, k in need]
        out += [f"{scene} {res} {mode}: motion on / {name} = {on:g} / {base:g} = {ratio:.2f} (target >= {k:g}): "
                f"{'MET' if ratio >= k else 'MISSED'}" for name, base, ratio, k in ratios]
    return out


# --- the real parts -------------------------------------------------------------------------------


def camera_entry(name: str, url: str, mode: str, setting: str) -> dict[str, Any]:
    """One camera of the list: motion on with the clock and the tree masked, or off."""
    entry = {"name": name, "url": url, "mode": mode, "motion": {"mask": camera_scenes.MASK} if setting == "on" else False}
    return entry | ({"sample_fps": FRAMES_FPS} if mode == "frames" else {})


def start_server(work: Path, port_offset: int) -> TorchServe:
    """One TorchServe serving the ONNX detector (`DETECTOR`) and the decode-only handler (`DECODE`)."""
    src, store = work / "src", work / "store"
    src.mkdir()
    onnx = yolo.export(src)
    if onnx is None:
        raise SystemExit("bench.cameras needs onnxruntime and onnxscript: pip install -e '.[onnx,test]'")
    (src / "coco.txt").write_text(yolo.COCO_LABELS)
    handler = {"task": "detection", "format": "yolo", "labels": "coco.txt", "model_max_batch": 8, **yolo.LETTERBOX}
    (src / "detector.yaml").write_text(yaml.safe_dump({**BATCHING, "handler": handler}))
    (src / "decode.yaml").write_text(yaml.safe_dump({**BATCHING, "handler": {}}))
    (src / "unused.pt").write_bytes(b"")  # the decode-only handler loads no model
    mars = {DETECTOR: harness.shipped(store, DETECTOR, onnx, src / "detector.yaml"),
            DECODE: harness.archive(store, DECODE, ROOT / "bench" / "decode_handler.py", src / "unused.pt",
                                    src / "decode.yaml", with_handler=True)}
    return harness.serve(work / "ts", mars, BATCHING, port_offset)


class Bench:
    """The server, the clips and the plan; `trial` runs N cameras once."""

    def __init__(self, work: Path, plan: Plan, server: TorchServe, cache: Path, progress: Callable[[str], None]) -> None:
        self.work, self.plan, self.server, self.cache, self.progress = work, plan, server, cache, progress
        self._loops: dict[tuple[str, str], dict[str, Path]] = {}

    def mounts(self, scene: str, resolution: str) -> dict[str, Path]:
        """The scene's clip at each phase, looped past a trial's length."""
        if (scene, resolution) not in self._loops:
            clip = camera_scenes.clip(self.cache, scene, resolution, self.plan.clip)
            total = self.plan.warmup + self.plan.seconds + self.plan.tail + 60
            self._loops[scene, resolution] = {f"p{k}": camera_scenes.looped(
                clip, self.work / f"{scene}-{resolution}-p{k}.ts", total, k * self.plan.clip // PHASES) for k in range(PHASES)}
        return self._loops[scene, resolution]

    def trial(self, scene: str, resolution: str, mode: str, setting: str, cameras: int, again: bool = False) -> Trial:
        work = self.work / f"{scene}-{resolution}-{mode}-{setting}-{cameras}{'-again' * again}"
        work.mkdir()
        names = [f"cam{i:02d}" for i in range(cameras)]
        model = DECODE if setting == "decode" else DETECTOR
        with RtspServer(self.mounts(scene, resolution), log=work / "gst.log") as rtsp:
            entries = [camera_entry(n, rtsp.url(f"p{i % PHASES}"), mode, setting) for i, n in enumerate(names)]
            (work / "cameras.yaml").write_text(yaml.safe_dump({"cameras": entries}))
            ingest = Ingest(work, self.server, ["--config", str(work / "cameras.yaml"), "--log-level", "WARNING"],
                            model=model)
            try:
                self._first_answers(ingest, cameras)
                time.sleep(self.plan.warmup)
                worker = self.server.worker_pids(model)[0]
                window = harness.Window({"bridge": [ingest.process.pid], "torchserve": [worker, harness.parent(worker)],
                                         "cameras": harness.children(os.getpid(), "gst_rtsp.py")}).start()
                time.sleep(self.plan.seconds)
                spent = window.stop()
                time.sleep(self.plan.tail)
                ingest.stop(timeout=30)
            finally:
                ingest.kill()
        rate = FRAMES_FPS if mode == "frames" else float(camera_scenes.FPS)
        found = summarise(ingest.lines(), names, window.t0, window.t1, self.plan.tail, rate, mode == "frames")
        done = replace(found, cpu_s=spent, load=round(os.getloadavg()[0], 2),
                       lag_limit_ms=1000 * self.plan.lag_s)
        self.progress(f"{scene} {resolution} {mode} {setting} N={cameras}: {done.fraction:.2f} answered, "
                      f"{done.model_frames:.2f} model frames/camera-s, lag {done.lag_p50_ms}/{done.lag_p99_ms} ms, CPU "
                      f"{done.cpu_per_camera_pct:.0f}%/camera, others {100 * spent['others'] / done.seconds:.0f}%: "
                      f"{done.behind or 'kept up'}")
        return done

    def _first_answers(self, ingest: Ingest, cameras: int) -> None:
        """Until every camera has an answer (at most 20 s + 2 s a camera: the window then says who is silent)."""
        results = Results(ingest.results)
        deadline = time.monotonic() + 20 + 2 * cameras
        while len(results.last_answer) < cameras and time.monotonic() < deadline:
            if ingest.process.poll() is not None:
                raise RuntimeError(f"video-ingest exited {ingest.process.returncode}: {ingest.log()[-2000:]}")
            time.sleep(0.5)
            results.read()

    def row(self, scene: str, resolution: str, mode: str, setting: str) -> Row:
        def measure(n: int) -> Trial:
            """A trial, run again once when it fell behind while other processes took half a core or more."""
            trial = self.trial(scene, resolution, mode, setting, n)
            crowded = trial.cpu_s.get("others", 0) >= OTHERS * trial.seconds
            return self.trial(scene, resolution, mode, setting, n, again=True) if trial.behind and crowded else trial

        carried, trial, behind, trials = search(measure, self.plan.max_cameras)
        return Row(scene, resolution, mode, setting, carried, trial, behind, trials)


def run(bench: Bench) -> list[Row]:
    """Per video and mode: decode only (on the first scene), then each scene with each detector setting."""
    plan, rows = bench.plan, []
    for resolution in plan.resolutions:
        for mode in plan.modes:
            if "decode" in plan.settings:
                rows.append(bench.row(plan.scenes[0], resolution, mode, "decode"))
            rows += [bench.row(scene, resolution, mode, s) for scene in plan.scenes for s in plan.settings if s != "decode"]
    return rows


def footer(rows: list[Row]) -> str:
    """The decode-only limits, the machine and its other load in the windows, the targets."""
    windows = [t for r in rows for t in r.trials]
    others = [100 * t.cpu_s.get("others", 0) / t.seconds for t in windows] or [0.0]
    loads = [t.load or 0.0 for t in windows] or [0.0]
    limits = "; ".join(f"{r.resolution} {r.mode}: {r.carried:g}" for r in rows if r.setting == "decode")
    return "\n".join([f"decode-only limit (cameras): {limits or 'not measured'}",
                      f"machine: {harness.machine()}; other processes' CPU in the windows: "
                      f"mean {statistics.fmean(others):.0f}%, max {max(others):.0f}% of a core; load average at the "
                      f"windows' ends {min(loads):.2f}-{max(loads):.2f}", *targets(rows)])


CHOICES = {"scenes": tuple(camera_scenes.SCENES), "resolutions": tuple(camera_scenes.RESOLUTIONS),
           "modes": ("segments", "frames"), "settings": tuple(SETTINGS)}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.cameras", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--short", action="store_true", help="the test's form (SHORT); the options below override it")
    for name, choices in CHOICES.items():
        p.add_argument(f"--{name}", type=lambda text: tuple(text.split(",")), help=f"of {','.join(choices)} (default all)")
    p.add_argument("--seconds", type=float, help="each window (default 20)")
    p.add_argument("--max-cameras", type=int, help="default 32")
    p.add_argument("--lag-s", type=float, help="behind: lag p99 over this (default 2)")
    p.add_argument("--port-offset", type=int, default=PORT_OFFSET, help=f"TorchServe's ports (default +{PORT_OFFSET})")
    p.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "bench-cameras",
                   help="where the scenes' clips are kept between runs")
    p.add_argument("--json", type=Path, help="write the rows, every trial and the machine's load here")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    for name, choices in CHOICES.items():
        if set(getattr(args, name) or ()) - set(choices):
            p.error(f"--{name} {getattr(args, name)}: choose from {', '.join(choices)}")
    given = {f.name: getattr(args, f.name) for f in fields(Plan) if getattr(args, f.name, None) is not None}
    plan = replace(SHORT if args.short else Plan(), **given)
    started = time.time()

    def scenario(progress: Callable[[str], None]) -> int:
        with tempfile.TemporaryDirectory(prefix="bench-cameras-") as tmp:
            server = start_server(Path(tmp), args.port_offset)
            try:
                rows = run(Bench(Path(tmp), plan, server, args.cache, progress))
            finally:
                server.stop()
        command = " ".join(sys.argv[1:] if argv is None else argv)
        print(f"{table(rows)}\n\n{footer(rows)}\n\n(`python -m bench.cameras {command}`, {time.time() - started:.0f} s)")
        harness.report(args.json, sys.argv[1:] if argv is None else argv, plan=asdict(plan),
                       presence={s: camera_scenes.presence(s, plan.clip * camera_scenes.FPS) for s in plan.scenes},
                       rows=[asdict(r) | {"cpu_per_camera_pct": r.trial.cpu_per_camera_pct,
                                          "model_frames_per_camera_s": r.trial.model_frames} for r in rows],
                       targets=targets(rows))
        return 0

    return harness.main(scenario)


if __name__ == "__main__":
    sys.exit(main())
