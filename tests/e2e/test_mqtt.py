"""Events and counts on MQTT end to end: the scripted scene (tests/scenes.py) over a real
gst-rtsp-server, the planted detector in a real TorchServe, the real `video-ingest --mqtt`, a
real Mosquitto stopped for 10 s mid-scene and started again, and a paho-mqtt subscriber with a
persistent session. Every event of the results file arrives on its topic with the same text, and
the retained counts equal the metrics. (The sink's own cases: tests/unit/test_ingest_mqtt.py.)
"""

from __future__ import annotations

import json
import time

from tests.e2e.ingest_cli import Ingest
from tests.e2e.tracks import MODEL, all_left, camera, tally, write
from tests.mosquitto import Mosquitto, Subscriber
from tests.rtsp_server import RtspServer
from tsutil import prom


def counts_in_metrics(text: str) -> dict[str, bytes]:
    """The zone and line series of `/metrics`, as their MQTT topics and payloads."""
    topics = {}
    for sample in prom.samples(text):
        x = sample.labels
        if sample.name == "video_ingest_line_crossings_total":
            topics[f"video-ingest/{x['camera']}/lines/{x['line']}/{x['direction']}/{x['label']}"] = sample.value
        elif sample.name == "video_ingest_zone_objects":
            topics[f"video-ingest/{x['camera']}/zones/{x['zone']}/{x['label']}"] = sample.value
    return {topic: str(int(value)).encode() for topic, value in topics.items()}


def test_every_event_arrives_with_its_result_lines_text_through_a_broker_restart(detector, videos, tmp_path):
    broker = Mosquitto(tmp_path / "broker").start()
    subscriber = Subscriber(broker, "#")
    rtsp = RtspServer({"steady": videos["steady"]}, log=tmp_path / "gst.log").start()
    cameras = tmp_path / "cameras.yaml"
    write(cameras, camera("dock", rtsp.url("steady")))
    ingest = Ingest(tmp_path, detector, ["--config", str(cameras), "--mqtt", broker.url, "--mqtt-discovery"],
                    model=MODEL)
    try:
        ingest.wait("the first crossing", lambda: ingest.events("dock", "crossed"))
        broker.stop()
        time.sleep(10)
        broker.start()
        ingest.wait("the end of the play", lambda: ingest.events("dock", "disconnected") and all_left(ingest, "dock"),
                    timeout=60)
        # The retained counts catch up with the metrics (the scene may be playing again: compare
        # once the two agree, which they must while nothing moves, or fail naming both).
        ingest.wait("the retained counts to equal the metrics",
                    lambda: (wanted := counts_in_metrics(ingest.metrics()))
                    and all(subscriber.latest().get(t) == v for t, v in wanted.items()), timeout=20)
        assert ingest.metric("video_ingest_mqtt_connected") == 1
        assert ingest.metric("video_ingest_events_dropped_total", sink="mqtt") == 0
        code, _ = ingest.stop()
        assert code == 0
    finally:
        ingest.kill()
        rtsp.stop()
    time.sleep(1)
    subscriber.close()
    broker.stop()
    written = [line for line in ingest.results.read_text().splitlines() if '"event": ' in line]
    events = [json.loads(line) for line in written]
    arrived = {json.loads(p)["event_id"]: p.decode() for t, p, _ in subscriber.received("video-ingest/")
               if t.endswith("/events")}
    # Every event line, the camera's and the process's (mqtt_disconnected, mqtt_connected), as written.
    assert {e["event_id"]: text for e, text in zip(events, written)} == arrived
    assert {e["event"] for e in events} >= {"started", "connected", "entered", "left", "crossed", "disconnected",
                                           "mqtt_connected", "mqtt_disconnected", "stopped"}
    counts = tally(ingest, "dock", first_connection=True)
    assert counts[("crossed", "gate", "red", "in")] == 2 and counts[("crossed", "gate", "red", "out")] == 2
    latest = subscriber.latest()
    assert json.loads(latest["video-ingest/dock/status"])["state"] == "offline"  # stopped
    assert latest["video-ingest/available"] == b"offline"
    assert "homeassistant/binary_sensor/video-ingest/video-ingest_dock_status/config" in latest
