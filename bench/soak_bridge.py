"""A day unattended, shortened to hours (not CI): `video-ingest` for a fleet, disturbed on a schedule.

    python -m bench.soak_bridge --minutes 60 --json soak.json    # 16 cameras, about 70 minutes
    python -m bench.soak_bridge --minutes 1 --cameras 2 --short  # the CI test's form

Everything is real: 16 cameras, each its own gst-rtsp-server (tests/rtsp_server.py) playing the
scripted scene (tests/scenes.py: a red and a blue square crossing a zone and a line, 320x192 at
15 fps, looped to `--clip-s`: a session ends and the camera reconnects at each play's end), the
planted detector in a real TorchServe (as tests/e2e/conftest.py's `detector`), the real
`video-ingest` CLI (`--config`, tracked with a zone and a line, `sample_fps` 5, `--mqtt`, `--web`,
`--metrics-port`) and a real Mosquitto. Meanwhile, on a schedule (`Plan`): one camera's server is
killed and started again, round robin; the broker is stopped and started; a page is opened and
closed (an HTTP client doing what the page does: `GET /api/cameras`, each camera's scene, a few
`/api/live` long polls, with the token); a zone is added to or removed from one camera in the
YAML file (the bridge reloads it); and `video-keys`, beside TorchServe as `./serve.sh` runs it,
renews the keys (which live `Plan.key_min` minutes) at half their lifetime. The bridge runs with
jemalloc preloaded, as deploy/Dockerfile runs it (`--allocator glibc`: glibc's malloc).

Every `--sample-s` a row: the bridge process's resident memory, threads and open fds (from
/proc), the events written so far, and each camera's last answer's age. At the end: the slope of
RSS, threads and fds after the warm-up (least squares, per hour) beside their noise (the
residuals' standard deviation), and three verdicts: `flat` (each slope's growth over the window
within twice its noise), `mqtt_complete` (every event of the results file received by a
subscriber of our own, deduplicated by `event_id`: delivery is at least once) and `none_stuck`
(each camera answered within `stuck_s` at the end).
"""

from __future__ import annotations

import argparse
import json
import math
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import requests
import yaml

from bench import harness
from bench.harness import ROOT
from tests.e2e.ingest_cli import Ingest
from tests.mosquitto import Mosquitto, Subscriber
from tests.rtsp_server import RtspServer, free_port
from tsutil.server import TorchServe

MODEL = "planted_tracks"
SIZE = (320, 192)
#: Where the bench's TorchServe listens (above the tests' ports, which other runs may hold).
PORT_OFFSET = 700


@dataclass(frozen=True)
class Plan:
    """How long, how many cameras, and how often each disturbance comes (seconds)."""

    minutes: float = 60.0
    cameras: int = 16
    sample_s: float = 30.0
    warmup_s: float = 300.0
    camera_restart_s: float = 180.0
    broker_restart_s: float = 600.0
    broker_down_s: float = 5.0
    page_s: float = 60.0
    edit_s: float = 240.0
    stuck_s: float = 60.0
    clip_s: float = 300.0
    key_min: float = 10.0  # TorchServe's token_expiration_min: video-keys renews the keys at half of it
    allocator: str = "jemalloc"  # the bridge's malloc: jemalloc, preloaded as the image runs it, or glibc

    @classmethod
    def short(cls, minutes: float, cameras: int) -> Plan:
        """Every disturbance at least once in `minutes` (the CI test's form)."""
        s = minutes * 60
        return cls(minutes=minutes, cameras=cameras, sample_s=s / 8, warmup_s=s / 4, camera_restart_s=s / 3,
                   broker_restart_s=s / 2.5, broker_down_s=2.0, page_s=s / 3, edit_s=s / 4, stuck_s=30.0,
                   clip_s=90.0, key_min=minutes / 2)


# --- the setting: scene, detector, cameras, broker -------------------------------------------------


def scene_clip(path: Path, seconds: float) -> Path:
    """The scripted scene's 8 s period (red and blue to and fro) looped to `seconds`, as H.264 MPEG-TS."""
    from tests import scenes
    from tests.videos import ffmpeg

    raw = path.with_suffix(".rgb")
    with raw.open("wb") as out:
        for n in range(scenes.PERIOD):
            out.write(scenes.frame(*SIZE, scenes.LEAD + n).tobytes())
    loops = math.ceil(seconds * scenes.FPS / scenes.PERIOD)
    subprocess.run([ffmpeg(), "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{SIZE[0]}x{SIZE[1]}",
                    "-r", str(scenes.FPS), "-stream_loop", str(loops - 1), "-i", str(raw), "-c:v", "libx264",
                    "-preset", "veryfast", "-pix_fmt", "yuv420p", "-g", str(scenes.FPS), "-bf", "0",
                    "-f", "mpegts", str(path)], check=True)
    raw.unlink()
    return path


def planted_server(work: Path, port_offset: int, key_min: float) -> TorchServe:
    """TorchServe serving the planted detector as `planted_tracks` (tests/e2e/conftest.py's
    `planted_store` and `detector`, outside pytest), its keys living `key_min` minutes."""
    from tests import planted

    work.mkdir(parents=True, exist_ok=True)
    planted.script(planted.Yolo()).save(str(work / f"{MODEL}.pt"))
    handler = {"task": "detection", "resize": "letterbox", "input_size": [320, 320], "score_threshold": 0.1,
               "normalize": {"scale": 1 / 255}, "labels": "index_to_name.json"}
    workers = {"minWorkers": 1, "maxWorkers": 1, "batchSize": 8, "maxBatchDelay": 20, "responseTimeout": 120}
    (work / f"{MODEL}.yaml").write_text(yaml.safe_dump({**workers, "handler": handler}))
    (work / "index_to_name.json").write_text(json.dumps({"0": "red", "1": "green", "2": "blue"}))
    mar = harness.shipped(work / "store", MODEL, work / f"{MODEL}.pt", work / f"{MODEL}.yaml")
    return harness.serve(work / "ts", {MODEL: mar}, workers, port_offset, f"token_expiration_min={key_min:g}\n")


def start_keys(server: TorchServe, log: Path) -> subprocess.Popen:
    """`video-keys` beside TorchServe, as `./serve.sh` runs it: without it every key lapses after
    `token_expiration_min` and each camera is refused from then on (docs/keys.md)."""
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-m", "tskeys.rotate", "--config", str(server.workdir / "config.properties"),
                                 "--key-file", str(server.workdir / "key_file.json")],
                                stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


def key_renewals(log: Path) -> int:
    """The inference key's renewals `video-keys` logged."""
    return log.read_text().count("renewed the inference key") if log.exists() else 0


def camera_entry(name: str, url: str, extra_zone: bool) -> dict[str, Any]:
    """One camera of the list: tracked, the scene's zone `door` and line `gate` (and `edit` when toggled on)."""
    from tests import scenes

    zones = [{"name": "door", "polygon": scenes.DOOR}]
    if extra_zone:
        zones.append({"name": "edit", "polygon": [[0.6, 0.1], [0.95, 0.1], [0.95, 0.9], [0.6, 0.9]]})
    return {"name": name, "url": url, "track": True, "sample_fps": 5, "stall_seconds": 5, "zones": zones,
            "lines": [{"name": "gate", **scenes.GATE, "classes": ["red"]}],
            "motion": False}  # every frame looked at: the counts the soak checks (blue is not luma motion)


class Fleet:
    """The cameras: one gst-rtsp-server each (restarting one leaves the others up), and their YAML list."""

    def __init__(self, work: Path, count: int, clip: Path) -> None:
        self.names = [f"cam{i:02d}" for i in range(count)]
        self.servers = [RtspServer({"scene": clip}, log=work / "gst.log") for _ in self.names]
        self.config = work / "cameras.yaml"
        self.edited: set[str] = set()
        self.restarts = 0
        self.edits = 0

    def start(self) -> Fleet:
        for server in self.servers:
            server.start()
        self.write()
        return self

    def write(self) -> None:
        """The list, written whole and renamed over the old one (the bridge never reads half a file)."""
        cameras = [camera_entry(n, s.url("scene"), n in self.edited) for n, s in zip(self.names, self.servers)]
        part = self.config.with_suffix(".part")
        part.write_text(yaml.safe_dump({"cameras": cameras}))
        part.replace(self.config)

    def restart_next(self) -> None:
        """Kills the next camera's server (a camera losing power) and starts it again on its port."""
        server = self.servers[self.restarts % len(self.servers)]
        server.kill()
        server.start()
        self.restarts += 1

    def edit_next(self) -> None:
        """Adds the zone `edit` to the next camera, or removes it."""
        self.edited ^= {self.names[self.edits % len(self.names)]}
        self.edits += 1
        self.write()

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


class EventIds(Subscriber):
    """A subscriber that keeps only the `event_id`s of `.../events` messages (an hour's counts would pile up)."""

    def __init__(self, broker: Mosquitto) -> None:
        self.ids: set[str] = set()
        self.arrivals = 0
        super().__init__(broker, "video-ingest/#", client_id="soak-bridge")

    def _message(self, client: Any, userdata: object, message: Any) -> None:
        if message.topic.endswith("/events"):
            with self._lock:
                self.ids.add(json.loads(message.payload)["event_id"])
                self.arrivals += 1

    def seen(self) -> set[str]:
        with self._lock:
            return set(self.ids)


class Broker:
    """Mosquitto, stopped and started again on the schedule (its port and sessions kept)."""

    def __init__(self, work: Path, down_s: float) -> None:
        self.mosquitto = Mosquitto(work / "broker").start()
        self.down_s = down_s
        self.restarts = 0

    def restart(self) -> None:
        self.mosquitto.stop()
        time.sleep(self.down_s)
        self.mosquitto.start()
        self.restarts += 1


# --- what is read while it runs ------------------------------------------------------------------


class Results:
    """The results file read as it grows: event ids and kinds, and each camera's last 200 answer."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.event_ids: set[str] = set()
        self.kinds: Counter[str] = Counter()
        self.last_answer: dict[str, float] = {}

    def read(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        complete = chunk[:chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        for line in complete.splitlines():
            self._line(json.loads(line))

    def _line(self, line: dict[str, Any]) -> None:
        if "event" in line:
            self.event_ids.add(line["event_id"])
            self.kinds[line["event"]] += 1
        elif line.get("status") == 200:
            self.last_answer[line["camera"]] = line["capture_time"]

    def ages(self, names: list[str], now: float) -> list[float | None]:
        """Seconds since each camera's last answered frame was captured (None: never answered)."""
        return [round(now - self.last_answer[n], 1) if n in self.last_answer else None for n in names]


def live_pictures(body: bytes) -> list[dict[str, Any]]:
    """The headers of an `/api/live` answer's pictures (each: 4-byte header length, 4-byte payload length, ...)."""
    headers, at = [], 0
    while at + 8 <= len(body):
        head, payload = int.from_bytes(body[at:at + 4], "big"), int.from_bytes(body[at + 4:at + 8], "big")
        headers.append(json.loads(body[at + 8:at + 8 + head]))
        at += 8 + head + payload
    return headers


def page_visit(base: str, token: str, polls: int = 3) -> int:
    """What the page does when opened, then closed: the camera list, each scene, `polls` long polls
    for every camera (each after the last picture seen). Returns the pictures received."""
    with requests.Session() as page:
        page.headers["Authorization"] = f"Bearer {token}"
        cameras = page.get(f"{base}/api/cameras", timeout=30)
        cameras.raise_for_status()
        names = [c["name"] for c in cameras.json()["cameras"]]
        for name in names:
            page.get(f"{base}/api/cameras/{name}/scene", timeout=30).raise_for_status()
        after, pictures = dict.fromkeys(names, -1), 0
        for _ in range(polls):
            live = page.get(f"{base}/api/live", timeout=30, params={
                "cameras": ",".join(names), "after": ",".join(str(after[n]) for n in names)})
            live.raise_for_status()
            for header in live_pictures(live.content):
                after[header["camera"]] = max(after[header["camera"]], header["seq"])
                pictures += 1
        return pictures


# --- the schedule ---------------------------------------------------------------------------------


@dataclass
class Chores:
    """Each disturbance's count, and what went wrong while doing one (it does not stop the soak)."""

    done: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    pictures: int = 0

    def saw(self, pictures: int) -> None:
        self.pictures += pictures


def every(interval: float, name: str, work: Callable[[], Any], chores: Chores, stop: threading.Event) -> threading.Thread:
    """A thread doing `work` every `interval` seconds (first after one interval) until `stop`."""
    def loop() -> None:
        while not stop.wait(interval):
            try:
                work()
                chores.done[name] += 1
            except Exception as exc:  # a failed chore is a finding, not the end of the soak
                chores.problems.append(f"{time.strftime('%H:%M:%S')} {name}: {type(exc).__name__}: {exc}")

    thread = threading.Thread(target=loop, name=f"soak-{name}", daemon=True)
    thread.start()
    return thread


@dataclass
class Run:
    """What one soak holds while it runs."""

    plan: Plan
    fleet: Fleet
    broker: Broker
    ingest: Ingest
    subscriber: EventIds
    web: str
    token: str
    results: Results
    chores: Chores = field(default_factory=Chores)
    samples: list[dict[str, Any]] = field(default_factory=list)


def disturb(run: Run, stop: threading.Event) -> list[threading.Thread]:
    """Starts the four disturbances' threads."""
    plan = run.plan
    return [every(plan.camera_restart_s, "camera_restart", run.fleet.restart_next, run.chores, stop),
            every(plan.broker_restart_s, "broker_restart", run.broker.restart, run.chores, stop),
            every(plan.page_s, "page", lambda: run.chores.saw(page_visit(run.web, run.token)), run.chores, stop),
            every(plan.edit_s, "edit", run.fleet.edit_next, run.chores, stop)]


def take_sample(run: Run, started: float) -> dict[str, Any]:
    """One row: the bridge's memory, threads and fds, events so far, each camera's last answer's age."""
    run.results.read()
    rss, threads, fds = harness.memory(run.ingest.process.pid)
    row = {"t_s": round(time.monotonic() - started, 1), "rss_mb": round(rss, 1), "threads": threads, "fds": fds,
           "events": sum(run.results.kinds.values()), "ages_s": run.results.ages(run.fleet.names, time.time())}
    run.samples.append(row)
    return row


def row_text(row: dict[str, Any]) -> str:
    ages = " ".join("-" if a is None else f"{a:.0f}" for a in row["ages_s"])
    return (f"{row['t_s'] / 60:7.1f} {row['rss_mb']:8.1f} {row['threads']:7d} {row['fds']:5d} {row['events']:7d}"
            f"  {ages}")


HEADER = f"{'min':>7} {'RSS MB':>8} {'threads':>7} {'fds':>5} {'events':>7}  last answer's age per camera (s)"


def soak(run: Run) -> None:
    """Samples every `sample_s` for `minutes` while the disturbances run; prints the table as it goes."""
    stop = threading.Event()
    started = time.monotonic()
    threads = disturb(run, stop)
    print(HEADER, flush=True)
    try:
        end = started + run.plan.minutes * 60
        while time.monotonic() < end:
            time.sleep(min(run.plan.sample_s, max(0.0, end - time.monotonic())))
            assert run.ingest.process.poll() is None, f"video-ingest exited {run.ingest.process.returncode}"
            print(row_text(take_sample(run, started)), flush=True)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)


# --- the verdicts ---------------------------------------------------------------------------------


def trend(ts: list[float], ys: list[float]) -> dict[str, Any]:
    """Least-squares slope per hour, the residuals' standard deviation (the noise), the growth over
    the window the slope implies, and `flat`: that growth within twice the noise."""
    if len(ts) < 3:
        return {"per_hour": None, "noise": None, "growth": None, "flat": None, "samples": len(ts)}
    fit = statistics.linear_regression(ts, ys)
    noise = statistics.pstdev(y - (fit.slope * t + fit.intercept) for t, y in zip(ts, ys))
    growth = fit.slope * (ts[-1] - ts[0])
    return {"per_hour": round(fit.slope * 3600, 3), "noise": round(noise, 3), "growth": round(growth, 3),
            "flat": abs(growth) <= 2 * noise + 1e-9, "samples": len(ts)}


def trends(samples: list[dict[str, Any]], warmup_s: float) -> dict[str, dict[str, Any]]:
    """`trend` of RSS, threads and fds over the samples after the warm-up."""
    kept = [s for s in samples if s["t_s"] >= warmup_s]
    ts = [s["t_s"] for s in kept]
    return {key: trend(ts, [float(s[key]) for s in kept]) for key in ("rss_mb", "threads", "fds")}


def mqtt_missing(run: Run, wait_s: float = 20.0) -> list[str]:
    """The results file's event ids not (yet, after waiting up to `wait_s`) received on MQTT."""
    deadline = time.monotonic() + wait_s
    while True:
        run.results.read()
        missing = sorted(run.results.event_ids - run.subscriber.seen())
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(0.5)


def verdicts(run: Run, slopes: dict[str, dict[str, Any]], ages: list[float | None], missing: list[str]) -> dict[str, Any]:
    stuck = [n for n, a in zip(run.fleet.names, ages) if a is None or a > run.plan.stuck_s]
    return {"flat": all(s["flat"] for s in slopes.values()) if all(s["flat"] is not None for s in slopes.values())
            else None, "mqtt_complete": not missing, "none_stuck": not stuck, "stuck": stuck}


def finish(run: Run) -> dict[str, Any]:
    """Stops the bridge (SIGTERM), waits for the last events on MQTT, and makes the result."""
    run.results.read()
    ages = run.results.ages(run.fleet.names, time.time())
    code, _ = run.ingest.stop(timeout=60)
    missing = mqtt_missing(run)
    slopes = trends(run.samples, run.plan.warmup_s)
    return {"plan": asdict(run.plan), "commit": harness.commit(), "exit_status": code, "samples": run.samples,
            "slopes": slopes, "verdicts": verdicts(run, slopes, ages, missing), "final_ages_s": ages,
            "events": sum(run.results.kinds.values()), "events_by_kind": dict(run.results.kinds),
            "mqtt": {"unique": len(run.subscriber.seen()), "arrivals": run.subscriber.arrivals,
                     "missing": missing[:50], "missing_count": len(missing)},
            "chores": dict(run.chores.done), "pictures": run.chores.pictures, "problems": run.chores.problems}


def summary(result: dict[str, Any]) -> str:
    lines = [f"after warm-up ({result['plan']['warmup_s']:g} s), slope per hour ± noise (residual sd):"]
    for key, s in result["slopes"].items():
        lines.append(f"  {key:7} {s['per_hour']} /h, noise {s['noise']}, growth over the window {s['growth']}"
                     f" -> flat: {s['flat']}" if s["per_hour"] is not None else f"  {key:7} too few samples")
    v, m = result["verdicts"], result["mqtt"]
    lines += [f"events written: {result['events']} {result['events_by_kind']}",
              f"MQTT: {m['unique']} distinct event ids received ({m['arrivals']} arrivals), missing {m['missing_count']}",
              f"disturbances: {result['chores']}, pictures on the page: {result['pictures']}; problems: "
              f"{len(result['problems'])}", f"commit: {result['commit']}, video-ingest exit {result['exit_status']}",
              f"verdicts: flat={v['flat']} mqtt_complete={v['mqtt_complete']} none_stuck={v['none_stuck']}"
              + (f" (stuck: {v['stuck']})" if v["stuck"] else "")]
    return "\n".join(lines + [f"  problem: {p}" for p in result["problems"][:20]])


# --- the whole run --------------------------------------------------------------------------------


def start_bridge(work: Path, server: TorchServe, fleet: Fleet, broker: Broker,
                 allocator: str) -> tuple[Ingest, str, str]:
    """`video-ingest` on the fleet's list with --mqtt and --web (our token), with `allocator`; its
    web address and token."""
    token = secrets.token_urlsafe(24)
    token_file = work / "web-token.json"
    token_file.write_text(json.dumps({"web": {"key": token}}))
    token_file.chmod(0o600)
    port = free_port()
    ingest = Ingest(work, server, ["--config", str(fleet.config), "--mqtt", broker.mosquitto.url, "--web",
                                   f"127.0.0.1:{port}", "--web-token-file", str(token_file)], model=MODEL,
                    env={"LD_PRELOAD": "libjemalloc.so.2"} if allocator == "jemalloc" else None)
    return ingest, f"http://127.0.0.1:{port}", token


def run_soak(work: Path, plan: Plan, server: TorchServe) -> dict[str, Any]:
    """The soak against `server` (serving `planted_tracks`): starts the rest, runs, stops it all."""
    fleet = Fleet(work, plan.cameras, scene_clip(work / "scene.ts", plan.clip_s)).start()
    broker = Broker(work, plan.broker_down_s)
    subscriber = EventIds(broker.mosquitto)
    ingest, web, token = start_bridge(work, server, fleet, broker, plan.allocator)
    run = Run(plan, fleet, broker, ingest, subscriber, web, token, Results(ingest.results))
    try:
        ingest.wait("every camera's first answer", lambda: run.results.read() or
                    len(run.results.last_answer) == plan.cameras, timeout=120)
        if plan.allocator == "jemalloc" and "libjemalloc" not in Path(f"/proc/{ingest.process.pid}/maps").read_text():
            raise SystemExit("bench.soak_bridge: the bridge runs without jemalloc: install it (Debian: libjemalloc2) "
                             "or measure glibc's malloc with --allocator glibc")
        soak(run)
        result = finish(run)
        result["chores"]["key_renewal"] = key_renewals(work / "keys.log")
        return result
    finally:
        ingest.kill()
        fleet.stop()
        subscriber.close()
        broker.mosquitto.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soak_bridge", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--cameras", type=int, default=16)
    p.add_argument("--short", action="store_true", help="every disturbance within the minutes (Plan.short)")
    p.add_argument("--sample-s", type=float, help="seconds between rows (default 30)")
    p.add_argument("--warmup-s", type=float, help="seconds left out of the slopes (default 300)")
    p.add_argument("--camera-restart-s", type=float, help="seconds between two camera servers' restarts (default 180)")
    p.add_argument("--edit-s", type=float, help="seconds between two edits of the camera list (default 240)")
    p.add_argument("--allocator", choices=["jemalloc", "glibc"],
                   help="the bridge's malloc (default jemalloc, preloaded as deploy/Dockerfile runs it; glibc: "
                        "resident memory creeps 2-4 MB an hour, docs/ingest.md)")
    p.add_argument("--port-offset", type=int, default=PORT_OFFSET, help=f"TorchServe's ports (default +{PORT_OFFSET})")
    p.add_argument("--json", type=Path, help="write the result here")
    p.add_argument("--work", type=Path, help="keep the logs, results and lists here (default: a temporary folder)")
    args = p.parse_args(argv)
    plan = Plan.short(args.minutes, args.cameras) if args.short else Plan(minutes=args.minutes, cameras=args.cameras)
    given = {k: getattr(args, k) for k in ("sample_s", "warmup_s", "camera_restart_s", "edit_s", "allocator")}
    plan = replace(plan, **{k: v for k, v in given.items() if v})

    def scenario(progress: Callable[[str], None]) -> int:
        with tempfile.TemporaryDirectory(prefix="bench-soak-bridge-") as tmp:
            work = args.work or Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            server = planted_server(work / "detector", args.port_offset, plan.key_min)
            keys = start_keys(server, work / "keys.log")
            try:
                result = run_soak(work, plan, server)
            finally:
                keys.terminate()
                keys.wait(60)
                server.stop()
        print(summary(result))
        harness.report(args.json, sys.argv[1:] if argv is None else argv, **result)
        return 0 if all(result["verdicts"][k] is not False for k in ("flat", "mqtt_complete", "none_stuck")) else 1

    return harness.main(scenario)


if __name__ == "__main__":
    sys.exit(main())
