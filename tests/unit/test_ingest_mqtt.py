"""video-ingest's MQTT sink against a real broker (Debian's Mosquitto on a free port): settings
checked with the fix named, every event delivered once in order through a broker restart, a
bounded queue that drops the oldest and counts it, a refused login reported and retried, the
will, and Home Assistant discovery. The end-to-end scene: tests/e2e/test_mqtt.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ingest import config
from ingest.cameras.clock import WallClock
from ingest.sinks.metrics import Metrics
from ingest.sinks.mqtt import MqttError, MqttSettings, MqttSink, check_names, settings_from
from ingest.sinks.output import Lines
from ingest.sinks.redact import Redactor
from tests.mosquitto import Mosquitto, Subscriber, certificates
from tests.support import ROOT
from tsutil import prom


def wait(what, condition, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def metric(metrics: Metrics, name: str, **labels: str) -> float:
    from prometheus_client import generate_latest

    return prom.total(generate_latest(metrics.registry).decode(), name, **labels)


class Bridge:
    """A `Lines` with the MQTT sink on it, as `video-ingest` wires them."""

    def __init__(self, tmp_path, settings: MqttSettings) -> None:
        self.metrics = Metrics()
        self.results = tmp_path / "results.jsonl"
        self.redact = Redactor(settings.secrets)
        self.lines = Lines(self.results, self.redact, WallClock())
        self.sink = MqttSink(settings, self.metrics, self.lines.event)
        self.lines.add_sink(self.sink)
        self.metrics.watch(self.sink)
        self.closed = False
        self.sink.start()

    def written(self, event: str | None = None) -> list[dict]:
        text = self.results.read_text() if self.results.exists() else ""
        return [x for x in map(json.loads, text.splitlines()) if event is None or x.get("event") == event]

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.sink.close()
            self.lines.close()


def test_settings_name_the_fix_and_keep_the_password_out_of_the_display():
    s = MqttSettings("mqtt://cam%40ops:s3cr%2Ft@broker.lan:1884/site/a")
    assert (s.host, s.port, s.prefix, s.login, s.tls) == ("broker.lan", 1884, "site/a", ("cam@ops", "s3cr/t"), False)
    assert s.display == "mqtt://broker.lan:1884/site/a"
    assert "s3cr/t" in s.secrets and "s3cr%2Ft" in s.secrets
    assert (MqttSettings("mqtts://b").port, MqttSettings("mqtt://b").port, MqttSettings("mqtt://b").prefix) == (
        8883, 1883, "video-ingest")
    for url, fix in (("http://b", "mqtt://[user:password@]host"), ("mqtt://b:99999", "port"),
                     ("mqtt://b/site/+", "cannot be an MQTT topic level"), ("mqtt://b/$SYS", "leading '$'")):
        with pytest.raises(MqttError, match=fix.replace("[", r"\[").replace("$", r"\$").replace("+", r"\+")):
            MqttSettings(url)
    with pytest.raises(MqttError, match="keep at least 1 event"):
        MqttSettings("mqtt://b", queue=0)
    with pytest.raises(MqttError, match="mqtts://"):
        MqttSettings("mqtt://b", ca=ROOT / "pyproject.toml")


def test_the_command_line_wins_over_the_camera_lists_section_and_variables_come_from_the_environment():
    section = {"url": "mqtt://u:${MQTT_PASSWORD}@b/site", "queue": 50, "discovery": True}
    s = settings_from(section, {"queue": 7, "url": None}, {"MQTT_PASSWORD": "pw-from-env"})
    assert (s.login, s.queue, s.discovery, s.prefix) == (("u", "pw-from-env"), 7, True, "site")
    assert settings_from(None, {"url": None}, {}) is None
    with pytest.raises(MqttError, match=r"export MQTT_PASSWORD="):
        settings_from(section, {}, {})
    with pytest.raises(MqttError, match="unknown setting.*topic.*use url, ca"):
        settings_from({"url": "mqtt://b", "topic": "x"}, {}, {})
    with pytest.raises(MqttError, match="whole number"):
        settings_from({"url": "mqtt://b", "queue": "many"}, {}, {})


def test_a_class_name_mqtt_cannot_carry_is_refused_naming_the_camera_and_the_fix(tmp_path):
    cameras = config.parse({"cameras": [{"name": "dock", "url": "rtsp://x/", "track": True,
                                         "lines": [{"name": "gate", "from": [0, 0], "to": [1, 1],
                                                    "classes": ["car/truck"]}]}]})
    with pytest.raises(MqttError, match=r"camera 'dock': class 'car/truck' cannot be an MQTT topic level "
                                        r"\(it holds '/'\): rename it"):
        check_names(cameras)
    # The same list without MQTT is fine, and a list with an `mqtt:` section parses.
    assert config.parse({"cameras": [{"name": "dock", "url": "rtsp://x/"}], "mqtt": {"url": "mqtt://b"}})


def test_every_event_arrives_in_order_through_a_broker_restart_repeats_keep_their_id_and_the_counts_are_retained(tmp_path):
    broker = Mosquitto(tmp_path / "broker").start()
    subscriber = Subscriber(broker, "video-ingest/#")
    bridge = Bridge(tmp_path, MqttSettings(broker.url))
    try:
        bridge.lines.event("dock", "connected", codec="h264")
        for n in range(20):
            bridge.lines.event("dock", "crossed", line="gate", n=n)
            bridge.metrics.crossed("dock", "gate", "in", "car")
        bridge.metrics.zone_objects("dock", "door", "person", 3)
        wait("the first events", lambda: len(subscriber.received("video-ingest/dock/events")) == 21)
        broker.stop()
        wait("the sink to notice", lambda: metric(bridge.metrics, "video_ingest_mqtt_connected") == 0)
        for n in range(20, 50):  # while the broker is away: queued
            bridge.lines.event("dock", "crossed", line="gate", n=n)
            bridge.metrics.crossed("dock", "gate", "in", "car")
        wait("the queue's depth (refreshed by the sink's thread)",
             lambda: metric(bridge.metrics, "video_ingest_events_queued", sink="mqtt") >= 30)
        broker.start()
        # Counted by event_id, not by message: a repeat (below) is not one more event, and counting
        # it could end this wait with the last events still on their way to the subscriber.
        wait("every event", lambda: len({json.loads(p)["event_id"] for _, p, _ in
                                         subscriber.received("video-ingest/dock/events")}) >= 51, timeout=40)
        wait("the acknowledgements", lambda: metric(bridge.metrics, "video_ingest_events_queued", sink="mqtt") == 0)
        received = [json.loads(p) for _, p, _ in subscriber.received("video-ingest/dock/events")]
        # At least once (QoS 1): an event whose acknowledgement the broker's stop lost is sent again,
        # with its own event_id; a consumer drops the repeat, as docs/ingest.md says.
        firsts = {}
        for at, p in enumerate(received):
            firsts.setdefault(p["event_id"], at)
        payloads = [received[at] for at in sorted(firsts.values())]
        assert len(payloads) == 51 and [p.get("n") for p in payloads if "n" in p] == list(range(50))
        assert payloads == [x for x in bridge.written() if x["camera"] == "dock"]  # as written to the results
        repeats = [p for at, p in enumerate(received) if at not in firsts.values()]
        assert all(p in payloads[:21] for p in repeats), "only events sent before the stop are sent again"
        latest = subscriber.latest()
        assert latest["video-ingest/dock/lines/gate/in/car"] == b"50"
        assert latest["video-ingest/dock/zones/door/person"] == b"3"
        assert json.loads(latest["video-ingest/dock/status"])["state"] == "online"
        assert metric(bridge.metrics, "video_ingest_events_published_total", sink="mqtt") >= 51
        assert metric(bridge.metrics, "video_ingest_events_dropped_total", sink="mqtt") == 0
        assert [e["event"] for e in bridge.written() if e["camera"] is None][:1] == ["mqtt_connected"]
        assert bridge.written("mqtt_disconnected")
        bridge.close()
        # A clean stop says goodbye: the availability topic is `offline`, retained. (The sink
        # returns once the broker acknowledged it, maybe before the subscriber has read it.)
        wait("offline", lambda: subscriber.latest().get("video-ingest/available") == b"offline")
    finally:
        bridge.close()
        subscriber.close()
        broker.stop()


def test_a_full_queue_drops_the_oldest_and_counts_them(tmp_path):
    broker = Mosquitto(tmp_path / "broker").start()
    subscriber = Subscriber(broker, "video-ingest/dock/events")  # a persistent session, kept while the broker is away
    broker.stop()
    bridge = Bridge(tmp_path, MqttSettings(broker.url, queue=10))
    try:
        wait("the sink's own report", lambda: bridge.written("mqtt_error"))  # an event queued too
        for n in range(25):
            bridge.lines.event("dock", "crossed", n=n)
        assert metric(bridge.metrics, "video_ingest_events_dropped_total", sink="mqtt") == 16
        wait("the queue's depth", lambda: metric(bridge.metrics, "video_ingest_events_queued", sink="mqtt") == 10)
        broker.start()
        wait("the kept events", lambda: len(subscriber.received()) >= 10, timeout=30)
        time.sleep(0.5)
    finally:
        bridge.close()
        subscriber.close()
        broker.stop()
    assert [json.loads(p)["n"] for _, p, _ in subscriber.received()] == list(range(15, 25))  # the newest
    assert len(bridge.written("crossed")) == 25  # the results file keeps everything


def test_a_refused_login_is_reported_retried_and_never_shown(tmp_path):
    broker = Mosquitto(tmp_path / "broker", users={"bridge": "right-password"}).start()
    bridge = Bridge(tmp_path, MqttSettings(f"mqtt://bridge:wrong-password@127.0.0.1:{broker.port}/site"))
    try:
        [error] = wait("the refusal", lambda: bridge.written("mqtt_error"))
        assert error["reason"] == "refused" and "authori" in error["message"].lower()
        wait("a retry", lambda: metric(bridge.metrics, "video_ingest_mqtt_connect_failures_total",
                                       reason="refused") >= 2, timeout=10)
        assert len(bridge.written("mqtt_error")) == 1  # reported once, not at every retry
        bridge.lines.event("dock", "crossed", n=1)  # the rest goes on
        assert bridge.written("crossed")
        assert metric(bridge.metrics, "video_ingest_mqtt_connected") == 0
    finally:
        bridge.close()
        broker.stop()
    assert "wrong-password" not in bridge.results.read_text()


def test_home_assistant_discovery_describes_each_count_and_camera(tmp_path):
    broker = Mosquitto(tmp_path / "broker").start()
    subscriber = Subscriber(broker, "homeassistant/#")
    bridge = Bridge(tmp_path, MqttSettings(broker.url, discovery=True))
    try:
        bridge.lines.event("dock", "connected")
        bridge.metrics.zone_objects("dock", "door", "person", 1)
        bridge.metrics.crossed("dock", "gate", "out", "car")
        wait("three configs", lambda: len(subscriber.latest()) == 3)
        configs = {topic: json.loads(p) for topic, p in subscriber.latest().items()}
        bridge.metrics.remove_zone("dock", "door")  # a reload removed the zone: its sensor goes
        wait("the zone's config cleared", lambda: b"" in subscriber.latest().values())
    finally:
        bridge.close()
        subscriber.close()
        broker.stop()
    assert [t for t, p in subscriber.latest().items() if p == b""] == [
        "homeassistant/sensor/video-ingest/video-ingest_dock_zone_door_person/config"]
    camera = configs["homeassistant/binary_sensor/video-ingest/video-ingest_dock_status/config"]
    assert camera["state_topic"] == "video-ingest/dock/status" and camera["payload_on"] == "online"
    assert camera["availability_topic"] == "video-ingest/available"
    line = configs["homeassistant/sensor/video-ingest/video-ingest_dock_line_gate_out_car/config"]
    assert (line["state_topic"], line["state_class"]) == ("video-ingest/dock/lines/gate/out/car", "total_increasing")
    zone = configs["homeassistant/sensor/video-ingest/video-ingest_dock_zone_door_person/config"]
    assert zone["device"] == camera["device"] == line["device"]


def test_the_will_says_offline_when_video_ingest_is_killed(tmp_path):
    """The real CLI (its camera points where nothing listens: no TorchServe is needed), killed
    with SIGKILL: the broker publishes its will."""
    broker = Mosquitto(tmp_path / "broker").start()
    subscriber = Subscriber(broker, "video-ingest/available")
    process = subprocess.Popen([sys.executable, "-m", "ingest.cli", "--camera", "dock=rtsp://127.0.0.1:9/x",
                                "--mqtt", broker.url, "--results", str(tmp_path / "r.jsonl")],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        wait("online", lambda: subscriber.latest().get("video-ingest/available") == b"online", timeout=30)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        wait("the will", lambda: subscriber.latest().get("video-ingest/available") == b"offline", timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
        subscriber.close()
        broker.stop()


def test_a_wrong_password_on_the_command_line_is_reported_and_the_cameras_go_on(tmp_path):
    """The real CLI with a wrong password: one `mqtt_error` event, the camera's own events go on
    (its source is where nothing listens), a clean exit, and the password in no output."""
    broker = Mosquitto(tmp_path / "broker", users={"bridge": "right-password"}).start()
    results = tmp_path / "r.jsonl"
    try:
        done = subprocess.run([sys.executable, "-m", "ingest.cli", "--camera", "dock=rtsp://127.0.0.1:9/x",
                               "--mqtt", f"mqtt://bridge:wrong-password@127.0.0.1:{broker.port}",
                               "--results", str(results), "--duration", "6"],
                              cwd=ROOT, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        broker.stop()
    assert done.returncode == 0, done.stderr[-2000:]
    events = [json.loads(line) for line in results.read_text().splitlines()]
    assert [e["reason"] for e in events if e["event"] == "mqtt_error"] == ["refused"]
    assert [e["event"] for e in events if e["camera"] == "dock"][:2] == ["started", "disconnected"]
    assert "reconnecting" in {e["event"] for e in events} and "stopped" in {e["event"] for e in events}
    assert "not authorised" in done.stderr.lower() or "not authorized" in done.stderr.lower()
    for text in (done.stderr, results.read_text()):
        assert "wrong-password" not in text


def test_a_user_named_like_a_key_keeps_every_key_and_the_password_is_shown_nowhere(tmp_path):
    """Users `camera` and `event` (the keys of every line) log in to a real Mosquitto through the
    real CLI: the lines and payloads keep their keys, and the passwords are in no output."""
    users = {"camera": "pw-Camera-4471", "event": "pw-Event-9923", "watcher": "pw-Watcher-1"}
    broker = Mosquitto(tmp_path / "broker", users=users).start()
    subscriber = Subscriber(broker, "#", login=("watcher", users["watcher"]))
    runs = {}
    try:
        for user in ("camera", "event"):  # side by side, each under its own prefix
            runs[user] = subprocess.Popen(
                [sys.executable, "-m", "ingest.cli", "--camera", "dock=rtsp://127.0.0.1:9/x", "--mqtt",
                 f"mqtt://{user}:{users[user]}@127.0.0.1:{broker.port}/site-{user}",
                 "--results", str(tmp_path / f"{user}.jsonl"), "--duration", "3"],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)})
        logs = {user: run.communicate(timeout=60)[1] for user, run in runs.items()}
        wait("the goodbyes", lambda: all(subscriber.latest().get(f"site-{u}/available") == b"offline" for u in runs))
    finally:
        for run in runs.values():
            if run.poll() is None:
                run.kill()
        subscriber.close()
        broker.stop()
    for user in ("camera", "event"):
        assert runs[user].returncode == 0, logs[user][-2000:]
        written = (tmp_path / f"{user}.jsonl").read_text().splitlines()
        events = [json.loads(text) for text in written]
        # (in either order: the camera starting and the broker's answer are two threads' news)
        assert sorted((e["event"], str(e["camera"])) for e in events if e["event"] in ("started", "mqtt_connected")
                      ) == [("mqtt_connected", "None"), ("started", "dock")]
        assert all(set(e) >= {"camera", "event", "time", "event_id"} and "***" not in e for e in events)
        published = [p.decode() for t, p, _ in subscriber.received(f"site-{user}/") if t.endswith("/events")]
        assert published == written  # every event, the same text as its line
        status = json.loads(subscriber.latest()[f"site-{user}/dock/status"])
        assert set(status) == {"state", "reason", "time"}
        everything = "\n".join([logs[user], *written, *(p.decode() for _, p, _ in subscriber.received())])
        assert users["camera"] not in everything and users["event"] not in everything


def test_a_password_that_is_one_variable_may_hold_any_character(tmp_path):
    """`${MQTT_PASSWORD}` as the whole password is taken as it is (`a/b@c:d%2F`), against a real
    Mosquitto with that password; written in the URL, a `/` is named as the problem with the fix."""
    password = "a/b@c:d%2F"
    broker = Mosquitto(tmp_path / "broker", users={"bridge": password}).start()
    settings = settings_from({"url": f"mqtt://bridge:${{MQTT_PASSWORD}}@127.0.0.1:{broker.port}/site"}, {},
                             {"MQTT_PASSWORD": password})
    assert (settings.login, settings.host, settings.port, settings.prefix) == (
        ("bridge", password), "127.0.0.1", broker.port, "site")
    bridge = Bridge(tmp_path, settings)
    try:
        wait("the connection", lambda: bridge.written("mqtt_connected"))
        bridge.lines.event(None, "note", text=f"the password is {password}")
    finally:
        bridge.close()
        broker.stop()
    assert bridge.written("mqtt_connected")[0]["broker"] == f"mqtt://127.0.0.1:{broker.port}/site"
    assert bridge.written("note")[0]["text"] == "the password is ***"
    assert not bridge.written("mqtt_error")
    with pytest.raises(MqttError) as refused:
        settings_from({"url": f"mqtt://bridge:{password}@127.0.0.1:1883"}, {}, {})
    assert str(refused.value) == (
        "mqtt url: an '@' comes after the host: the password (or user) holds '/', '?' or '#', which ends the "
        "host early: percent-encode them in the URL ('/' as %2F, '?' as %3F, '#' as %23), or write the password "
        "as one ${VAR} (mqtt://user:${MQTT_PASSWORD}@host): its value is then taken as it is, any character allowed "
        "(a topic prefix may not hold '@')")
    with pytest.raises(MqttError, match=r"^mqtt url: the port is not a number from 1 to 65535 \(a password"):
        MqttSettings("mqtt://bridge@127.0.0.1:x1883")
    with pytest.raises(MqttError, match=r"url uses \$\{MQTT_PASSWORD\}, which is not set"):
        settings_from({"url": "mqtt://bridge:${MQTT_PASSWORD}@b"}, {}, {})


def handshake_failure(port: int, ca) -> str:
    """OpenSSL's reason for refusing the broker's certificate, from a handshake of the test's own."""
    import socket
    import ssl

    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            pytest.raises(ssl.SSLCertVerificationError) as refused:
        context.wrap_socket(raw, server_hostname="127.0.0.1")
    return refused.value.verify_message


def test_a_wrong_ca_is_reported_as_tls_with_the_fix_and_the_right_one_connects(tmp_path, caplog):
    """A real Mosquitto TLS listener (a CA of the test's own, made with `openssl`): the bridge
    given another CA reports `tls`, the verification's reason and the fix, once."""
    right, wrong = certificates(tmp_path / "pki", "right"), certificates(tmp_path / "pki", "wrong")
    broker = Mosquitto(tmp_path / "broker", tls=right).start()
    url = f"mqtts://127.0.0.1:{broker.tls_port}"
    for run in ("wrong", "right"):
        (tmp_path / run).mkdir()
    bridge = Bridge(tmp_path / "wrong", MqttSettings(url, ca=wrong.ca))
    try:
        [error] = wait("the refusal", lambda: bridge.written("mqtt_error"))
        wait("a retry", lambda: metric(bridge.metrics, "video_ingest_mqtt_connect_failures_total", reason="tls") >= 2)
        assert metric(bridge.metrics, "video_ingest_mqtt_connect_failures_total", reason="unreachable") == 0
    finally:
        bridge.close()
    why = (f"certificate verify failed: {handshake_failure(broker.tls_port, wrong.ca)}: the broker's certificate "
           f"is not signed by the CA in {wrong.ca}: give --mqtt-ca (or the `mqtt:` section's ca:) the broker's CA "
           "certificate (PEM)")
    assert (error["reason"], error["message"], error["broker"]) == ("tls", why, url)
    assert len(bridge.written("mqtt_error")) == 1  # once, not at every retry
    assert [r.getMessage() for r in caplog.records if r.name == "ingest.sinks.mqtt"] == [
        f"mqtt: cannot connect to {url} (tls): {why}; trying again with backoff (up to every 30 s)"]
    bridge = Bridge(tmp_path / "right", MqttSettings(url, ca=right.ca))
    try:
        wait("the connection", lambda: bridge.written("mqtt_connected"))
    finally:
        bridge.close()
        broker.stop()
    assert not bridge.written("mqtt_error")


def test_names_that_slug_alike_get_their_own_discovery_ids_and_removing_one_keeps_the_other(tmp_path):
    """`door.1` and `door_1` (the same slug): two sensors with their own ids and topics; a reload
    removing `door.1` clears only its config and count on the real broker."""
    broker = Mosquitto(tmp_path / "broker").start()
    subscriber = Subscriber(broker, "#")
    bridge = Bridge(tmp_path, MqttSettings(broker.url, discovery=True))
    try:
        bridge.metrics.zone_objects("dock", "door.1", "person", 1)
        bridge.metrics.zone_objects("dock", "door_1", "person", 2)
        bridge.metrics.zone_objects("dock", "gate", "person", 3)
        wait("three configs", lambda: len(subscriber.received("homeassistant/")) == 3)
        configs = {topic: json.loads(p) for topic, p, _ in subscriber.received("homeassistant/")}
        bridge.metrics.remove_zone("dock", "door.1")
        wait("door.1 cleared", lambda: subscriber.latest()[ZONES["door.1"]] == b"")
    finally:
        bridge.close()
        subscriber.close()
    assert {t: (c["unique_id"], c["state_topic"]) for t, c in configs.items()} == {
        ZONES["door.1"]: ("video-ingest_dock_zone_door_1_person__6456d59519", "video-ingest/dock/zones/door.1/person"),
        ZONES["door_1"]: ("video-ingest_dock_zone_door_1_person__a8dda676c4", "video-ingest/dock/zones/door_1/person"),
        ZONES["gate"]: ("video-ingest_dock_zone_gate_person", "video-ingest/dock/zones/gate/person")}
    retained = Subscriber(broker, "#", client_id="after-the-reload")  # what the broker keeps now
    try:
        wait("the retained messages", lambda: len(retained.received()) == 5)
    finally:
        retained.close()
        broker.stop()
    assert {t: p for t, p, _ in retained.received() if "door" in t or "gate" in t} == {
        ZONES["door_1"]: subscriber.latest()[ZONES["door_1"]], ZONES["gate"]: subscriber.latest()[ZONES["gate"]],
        "video-ingest/dock/zones/door_1/person": b"2", "video-ingest/dock/zones/gate/person": b"3"}


ZONES = {"door.1": "homeassistant/sensor/video-ingest/video-ingest_dock_zone_door_1_person__6456d59519/config",
         "door_1": "homeassistant/sensor/video-ingest/video-ingest_dock_zone_door_1_person__a8dda676c4/config",
         "gate": "homeassistant/sensor/video-ingest/video-ingest_dock_zone_gate_person/config"}


def test_discovery_ids_are_the_same_in_every_process():
    """A hash of the exact names (not Python's per-process `hash`): two processes, two hash seeds."""
    script = ("from ingest.sinks.topics import Discovery, Topics; d = Discovery(Topics('site/a')); "
              "print(d.zone('dock', 'door.1', 'person')[0], d.line('dock', 'gate_2', 'in', 'car')[0])")
    seen = {subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": seed}).stdout
            for seed in ("1", "2")}
    assert seen == {"homeassistant/sensor/site_a__5321b692b5/site_a_dock_zone_door_1_person__59490075c5/config "
                    "homeassistant/sensor/site_a__5321b692b5/site_a_dock_line_gate_2_in_car__5675012acb/config\n"}
