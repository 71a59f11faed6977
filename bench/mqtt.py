"""MQTT bench: what publishing events to a broker costs video-ingest, one run (about 1 minute).

    python -m bench.mqtt
    python -m bench.mqtt --seconds 30 --cameras 32 --rate 10

Against a real Mosquitto (Debian's, started on a free loopback port) and in this process, the
bridge's own parts (`ingest.sinks.output.Lines` writing a results file, `ingest.sinks.mqtt.MqttSink` on it)
fed by one thread as the cameras' sequencers feed them:
1. Throughput: 20,000 events written at once; events a second from the first write to the last
   acknowledgement (QoS 1) by the broker.
2. CPU: 32 cameras at 10 events a second each (an event line of the size of a `crossed`), for
   `--seconds`, with the sink and without it (the baseline: the results file alone); this
   process's CPU (user + system, all threads), in % of one core. The MQTT sink's cost per camera
   is the difference over the cameras. Target: under 0.1% of a core per camera at 10 events a
   second. (The broker's own CPU is another process's, and not counted.)
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from ingest.cameras.clock import WallClock
from ingest.sinks.metrics import Metrics
from ingest.sinks.mqtt import MqttSettings, MqttSink
from ingest.sinks.output import Lines
from ingest.sinks.redact import Redactor
from tests.mosquitto import Mosquitto

TARGET_PER_CAMERA = 0.1  # % of a core, at 10 events a second


def _published(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value("video_ingest_events_published_total", {"sink": "mqtt"}) or 0.0


def _bridge(work: Path, broker: Mosquitto | None) -> tuple[Lines, Metrics, MqttSink | None]:
    metrics, lines = Metrics(), Lines(work / f"results-{time.monotonic_ns()}.jsonl", Redactor(), WallClock())
    if broker is None:
        return lines, metrics, None
    sink = MqttSink(MqttSettings(broker.url, queue=100_000), metrics, lines.event)
    lines.add_sink(sink)
    metrics.watch(sink)
    sink.start()
    deadline = time.monotonic() + 10
    while _published(metrics) < 1 and time.monotonic() < deadline:  # its own mqtt_connected event
        time.sleep(0.05)
    return lines, metrics, sink


def _event(n: int, camera: str) -> tuple[str, str, dict[str, object]]:
    return camera, "crossed", {"line": "gate", "track_id": n, "label": "person", "direction": "in",
                               "capture_time": 1796112203.5 + n / 30}


def throughput(work: Path, broker: Mosquitto, events: int = 20_000) -> float:
    """Events a second from the first write to the broker's last acknowledgement."""
    lines, metrics, sink = _bridge(work, broker)
    assert sink is not None
    before = _published(metrics)
    started = time.perf_counter()
    for n in range(events):
        camera, event, fields = _event(n, "dock")
        lines.event(camera, event, **fields)
    while _published(metrics) - before < events:
        if time.perf_counter() - started > 120:
            raise RuntimeError(f"only {_published(metrics) - before:.0f} of {events} events acknowledged in 120 s")
        time.sleep(0.01)
    rate = events / (time.perf_counter() - started)
    sink.close()
    lines.close()
    return rate


def cpu(work: Path, broker: Mosquitto | None, cameras: int, rate: float, seconds: float) -> float:
    """This process's CPU, % of one core, while `cameras` x `rate` events a second are written."""
    lines, metrics, sink = _bridge(work, broker)
    stop = threading.Event()

    def feed() -> None:
        n, start = 0, time.perf_counter()
        while not stop.is_set():
            for c in range(cameras):
                camera, event, fields = _event(n, f"cam-{c}")
                lines.event(camera, event, **fields)
            n += 1
            time.sleep(max(0.0, start + n / rate - time.perf_counter()))

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    time.sleep(1.0)  # warm-up
    cpu0, wall0 = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    used = (time.process_time() - cpu0) / (time.perf_counter() - wall0) * 100
    stop.set()
    feeder.join()
    if sink is not None:
        sink.close()
    lines.close()
    return used


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.mqtt", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=20.0, help="the CPU window of each row")
    p.add_argument("--cameras", type=int, default=32)
    p.add_argument("--rate", type=float, default=10.0, help="events a second per camera")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        broker = Mosquitto(work / "broker").start()
        try:
            rate = throughput(work, broker)
            base = cpu(work, None, args.cameras, args.rate, args.seconds)
            with_mqtt = cpu(work, broker, args.cameras, args.rate, args.seconds)
        finally:
            broker.stop()
    per_camera = (with_mqtt - base) / args.cameras
    events = args.cameras * args.rate
    print("| row | value |\n| --- | --- |")
    print(f"| events a second one bridge publishes (QoS 1, acknowledged) | {rate:,.0f} |")
    print(f"| CPU, {args.cameras} cameras x {args.rate:g} events/s, results file only (baseline) | {base:.2f}% of a core |")
    print(f"| CPU, the same with MQTT | {with_mqtt:.2f}% of a core |")
    print(f"| MQTT adds, per camera | {per_camera:.3f}% of a core ({per_camera * 1e4 / args.rate:.1f} us an event) |")
    verdict = "PASS" if per_camera < TARGET_PER_CAMERA else "FAIL"
    print(f"\nMQTT at {events:g} events/s: {per_camera:.3f}% of a core per camera (target < {TARGET_PER_CAMERA}): {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
