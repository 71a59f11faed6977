"""`video-ingest`: camera streams in, TorchServe answers out (docs/ingest.md).

    video-ingest --camera gate-1=rtsp://gate-1.example/stream1
    video-ingest --config cameras.yaml --results results.jsonl --metrics-port 9108
    video-ingest --config cameras.yaml --web 127.0.0.1:8095    # the live view and the zone editor

Runs until SIGTERM or SIGINT (then exits within 10 s, everything in flight answered or counted),
`--duration` seconds, or the end of every file source that does not loop. SIGHUP, or a change of
the `--config` file, reloads the camera list.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ingest import config
from ingest.camera import CameraWorker
from ingest.cameras.client import Keys
from ingest.cameras.clock import WallClock
from ingest.cameras.watch import FileWatch
from ingest.config import Camera, ConfigError, Mode, Transport
from ingest.fleet import DRAIN_S, Fleet
from ingest.record.metrics import RecordMetrics
from ingest.record.recorder import Recorder
from ingest.record.settings import parse_size
from ingest.shard import Shard
from ingest.shared import Shared
from ingest.sinks import mqtt
from ingest.sinks.metrics import Metrics
from ingest.sinks.output import Lines
from ingest.sinks.redact import RedactingFilter, Redactor
from ingest.web import access
from ingest.web.editor import Editor
from ingest.web.server import WebServer, parse_address
from ingest.web.view import View

logger = logging.getLogger("ingest")

WATCH_S = 1.0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="video-ingest", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, help="YAML camera list (reloaded on change and on SIGHUP)")
    p.add_argument("--camera", action="append", default=[], metavar="NAME=URL", help="a camera (repeatable)")
    p.add_argument("--mode", choices=[m.value for m in Mode], default="segments", help="for --camera cameras")
    p.add_argument("--sample-fps", type=float, help="for --camera cameras (frames mode: default 5)")
    p.add_argument("--transport", choices=[t.value for t in Transport], default="tcp", help="RTSP, --camera")
    p.add_argument("--loop", action="store_true", help="file --camera sources start again at their end")
    p.add_argument("--motion", choices=["on", "off"], help="for --camera cameras: look only where something moved "
                   "(default: on for live cameras, off for files; docs/motion.md)")
    p.add_argument("--track", action="store_true", help="track the --camera cameras' detections (ByteTrack)")
    p.add_argument("--snapshot", type=Path, metavar="DIR",
                   help="every snapshot_seconds, DIR/CAMERA.jpg: the last answered frame, tracks, zones, lines drawn")
    p.add_argument("--record", type=Path, metavar="DIR",
                   help="keep video: recordings, and a clip and a snapshot per event, under DIR (each camera's "
                        "`record:` settings; docs/ingest.md, Recordings)")
    p.add_argument("--record-cap", metavar="SIZE", help="the most DIR may hold, e.g. 200G (default: 90%% of its disk)")
    p.add_argument("--url", default="http://127.0.0.1:8080", help="TorchServe's inference address")
    p.add_argument("--model", default="frame_quality")
    p.add_argument("--token-file", type=Path, default=Path("key_file.json"),
                   help="TorchServe's key_file.json (re-read when a key is refused)")
    p.add_argument("--results", type=Path, help="JSON lines file (default: standard output)")
    p.add_argument("--metrics-port", type=int, help="Prometheus /metrics on PORT of --metrics-address")
    p.add_argument("--metrics-address", default="127.0.0.1", help="default 127.0.0.1 (a pod: 0.0.0.0)")
    p.add_argument("--mqtt", metavar="URL", help="publish events and counts: mqtt://[user:password@]host[:port][/prefix]"
                   " (mqtts:// for TLS; default prefix video-ingest)")
    p.add_argument("--mqtt-ca", type=Path, metavar="FILE", help="the broker's CA certificate, for mqtts://")
    p.add_argument("--mqtt-queue", type=int, metavar="N", help="events kept while the broker is away (default 10000)")
    p.add_argument("--mqtt-discovery", action="store_const", const=True,
                   help="publish Home Assistant MQTT discovery messages (a sensor per count, one per camera)")
    p.add_argument("--web", metavar="HOST:PORT", help="serve the live view and the zone editor (e.g. 127.0.0.1:8095)")
    p.add_argument("--web-token-file", type=Path, metavar="FILE",
                   help='the web view\'s token, {"web": {"key": ...}} (made there if missing; default: a new one, printed)')
    p.add_argument("--duration", type=float, help="seconds to run (default: until SIGTERM/SIGINT)")
    p.add_argument("--shard", type=Shard.parse, default=Shard(), metavar="K/N", help="a stable share of the list")
    p.add_argument("--log-level", default="INFO")
    return p


def runnable(data: Any, args: argparse.Namespace, mqtt_on: bool = False) -> list[Camera]:
    """Whether a camera list can run, as start, reload and the web editor ask it: the cameras of
    the parsed `--config` file `data` (None without one) and of `--camera`, their names checked
    as topics when `mqtt_on`.

    Raises:
        ConfigError: naming the camera and the fix.
    """
    listed = config.parse(data, str(args.config)) if args.config else []
    settings = {"mode": args.mode, "transport": args.transport, "loop": args.loop, "sample_fps": args.sample_fps,
                "track": args.track, **({"motion": args.motion} if args.motion else {})}
    given = [config.from_argument(text, **settings) for text in args.camera]
    found = config.unique([*listed, *given], "--config and --camera")
    if mqtt_on:
        mqtt.check_names(found)
    return found


def cameras(args: argparse.Namespace, mqtt_on: bool = False) -> list[Camera]:
    """The cameras of `--config` (read now) and `--camera`, checked by `runnable`.

    Raises:
        ConfigError: naming the camera and the fix.
    """
    return runnable(config.read(args.config) if args.config else None, args, mqtt_on)


def mqtt_settings(args: argparse.Namespace) -> mqtt.MqttSettings | None:
    """`--mqtt` and its options over the camera list's `mqtt:` section.

    Raises:
        ConfigError: naming the setting and the fix.
    """
    data = config.read(args.config) if args.config else None
    section = data.get("mqtt") if isinstance(data, dict) else None
    given = {"url": args.mqtt, "ca": args.mqtt_ca, "queue": args.mqtt_queue, "discovery": args.mqtt_discovery}
    return mqtt.settings_from(section, given, os.environ)


class Signals:
    """SIGTERM/SIGINT set `stop`, SIGHUP sets `reload`."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.reload = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: self.stop.set())
        signal.signal(signal.SIGINT, lambda *_: self.stop.set())
        signal.signal(signal.SIGHUP, lambda *_: self.reload.set())


def _logging(level: str, redact: Redactor) -> None:
    import av.logging

    # FFmpeg's own log lines go straight to stderr and name the URL, credentials included: off
    # (PyAV's default; said here so that no upgrade turns them on). Errors still come as exceptions.
    av.logging.set_level(None)
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RedactingFilter(redact))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    redact = Redactor()
    _logging(args.log_level, redact)
    if not args.config and not args.camera:
        parser().error("give --config cameras.yaml or at least one --camera NAME=URL")
    try:
        broker = mqtt_settings(args)
        listed = cameras(args, mqtt_on=broker is not None)
        web = (parse_address(args.web), access.load(args.web_token_file)) if args.web else None
        cap = record_cap(args)
    except ConfigError as exc:
        print(f"video-ingest: {redact(str(exc))}", file=sys.stderr)
        return 2
    redact.update(s for c in listed for s in c.secrets)
    redact.update(broker.secrets if broker else [])
    signals = Signals()
    now = WallClock()
    lines = Lines(args.results, redact, now)
    metrics = Metrics()
    if args.metrics_port is not None:
        metrics.serve(args.metrics_port, args.metrics_address)
    sink = _sink(broker, lines, metrics)
    view = _view(lines, metrics) if web else None
    try:
        recorder = _recorder(args, cap, listed, lines, metrics)
    except OSError as exc:
        print(f"video-ingest: --record {args.record}: cannot record there ({exc.strerror or exc}): give a writable "
              "directory", file=sys.stderr)
        return 2
    shared = Shared(args.url, args.model, Keys(args.token_file), lines, metrics, redact, now, args.snapshot, view,
                    recorder)
    fleet = Fleet(lambda camera: CameraWorker(camera, shared).start(), args.shard)
    fleet.apply(listed)
    try:
        server = _serve(web, view, fleet, _editor(args, broker), recorder) if web and view else None
    except OSError as exc:
        print(f"video-ingest: --web {args.web}: cannot listen there ({exc.strerror}): choose a free port",
              file=sys.stderr)
        fleet.stop_all(time.monotonic() + DRAIN_S)
        return 2
    try:
        _run(args, fleet, signals, redact, lines, broker, server.editor if server else None, recorder)
    finally:
        if server is not None:
            server.close()
        fleet.stop_all(time.monotonic() + DRAIN_S)
        if recorder is not None:
            recorder.close()
        if sink is not None:
            sink.close()
        lines.close()
    return 0


def record_cap(args: argparse.Namespace) -> int | None:
    """`--record-cap` in bytes (None: the default).

    Raises:
        ConfigError: naming the fix.
    """
    if args.record_cap is None:
        return None
    if args.record is None:
        raise ConfigError("--record-cap is the most --record DIR may hold: give --record DIR too")
    try:
        return parse_size(args.record_cap)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _recorder(args: argparse.Namespace, cap: int | None, listed: list[Camera], lines: Lines,
              metrics: Metrics) -> Recorder | None:
    """`--record DIR`'s recorder, its index reconciled with the disk, writing (None without it)."""
    if args.record is None:
        return None
    recorder = Recorder(args.record, cap, lines, RecordMetrics(metrics.registry), args.results)
    recorder.configure(listed)
    lines.annotate(recorder.stamp)
    lines.add_sink(recorder)
    logger.info("recording to %s (at most %.1f MB)", recorder.directory, recorder.cap / 1e6)
    return recorder.start()


def _view(lines: Lines, metrics: Metrics) -> View:
    """The web view's data, reading every line and count from now on."""
    view = View()
    lines.add_sink(view)
    metrics.watch(view)
    return view


def _editor(args: argparse.Namespace, broker: mqtt.MqttSettings | None) -> Editor:
    """The web view's editor of `--config`: it refuses what `runnable` refuses, as start and reload do."""
    return Editor(args.config, check=functools.partial(runnable, args=args, mqtt_on=broker is not None))


def _serve(web: tuple[tuple[str, int], access.Token], view: View, fleet: Fleet, editor: Editor,
           recorder: Recorder | None = None) -> WebServer:
    """Starts the web view; prints its address (and a new token, once)."""
    (host, port), token = web
    fleet.view = view
    view.configure(fleet.cameras())
    server = WebServer((host, port), token, view, editor, recorder).start()
    shown = f"[{host}]" if ":" in host else host
    if not server.loopback:
        logger.warning("the web view listens on %s, beyond this machine, over plain HTTP: its token crosses the "
                       "network in the clear; put it behind a TLS proxy (or use 127.0.0.1 and an SSH tunnel)", host)
    if token.made and token.path is None:
        print(f"video-ingest: the web view is on http://{shown}:{server.port}/#token={token.value} "
              "(the token is shown only now; --web-token-file keeps one)", file=sys.stderr, flush=True)
    else:
        print(f"video-ingest: the web view is on http://{shown}:{server.port}/ (its token is in "
              f"{token.path}{', made now' if token.made else ''})", file=sys.stderr, flush=True)
    return server


def _sink(broker: mqtt.MqttSettings | None, lines: Lines, metrics: Metrics) -> mqtt.MqttSink | None:
    """The MQTT sink, reading every line and count from now on (None without a broker)."""
    if broker is None:
        return None
    sink = mqtt.MqttSink(broker, metrics, lines.event)
    lines.add_sink(sink)
    metrics.watch(sink)
    logger.info("publishing events and counts to %s under %s/", broker.display, broker.prefix)
    return sink.start()


def _run(args: argparse.Namespace, fleet: Fleet, signals: Signals, redact: Redactor, lines: Lines,
         broker: mqtt.MqttSettings | None = None, editor: Editor | None = None, recorder: Recorder | None = None) -> None:
    """Waits for the end (signal, duration, files done), reloading the list (and the web editor's
    reading of it) when it changes."""
    end = None if args.duration is None else time.monotonic() + args.duration
    watch = FileWatch(args.config) if args.config else None
    while not signals.stop.wait(min(WATCH_S, max(0.0, end - time.monotonic())) if end else WATCH_S):
        if end is not None and time.monotonic() >= end:
            return
        if fleet.finished:
            return
        if watch is not None and (watch.changed() or signals.reload.is_set()):
            signals.reload.clear()
            _reload(args, fleet, redact, lines, broker, recorder)
            if editor is not None:
                editor.refresh()


def _reload(args: argparse.Namespace, fleet: Fleet, redact: Redactor, lines: Lines,
            broker: mqtt.MqttSettings | None, recorder: Recorder | None = None) -> None:
    try:
        listed = cameras(args, mqtt_on=broker is not None)
        if mqtt_settings(args) != broker:
            logger.warning("the camera list's `mqtt` section changed: it applies at the next start "
                           "(the bridge goes on with %s)", broker.display if broker else "no broker")
    except ConfigError as exc:
        message = redact(str(exc))
        logger.error("camera list not reloaded, the running cameras go on: %s", message)
        lines.event(None, "config_error", message=message)
        return
    redact.update(s for c in listed for s in c.secrets)
    lines.event(None, "reloaded", cameras=sorted(c.name for c in listed if args.shard.includes(c.name)))
    if recorder is not None:
        recorder.configure(listed)
    fleet.apply(listed)
    if fleet.view is not None:
        fleet.view.configure(fleet.cameras())


if __name__ == "__main__":
    sys.exit(main())
