"""A real MQTT broker for the tests (Debian's `mosquitto`, on a free loopback port, persistent so
that a restart keeps sessions and retained messages) and a paho-mqtt subscriber that records
what arrives."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from tests.rtsp_server import free_port


class Mosquitto:
    """`mosquitto -c` with its own configuration, data and log in `work`.

    Args:
        work: a directory of its own (made if missing).
        users: user -> password; when given, anonymous clients are refused.
        tls: the server's certificate: a second listener, on `tls_port`, speaks TLS with it.
    """

    def __init__(self, work: Path, users: dict[str, str] | None = None, tls: Certificates | None = None) -> None:
        # Debian installs it in /usr/sbin, which a user's PATH may not hold.
        self.program = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin")
        if self.program is None:
            pytest.fail("the MQTT tests need Mosquitto: apt-get install mosquitto mosquitto-clients")
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        lines = [f"listener {self.port} 127.0.0.1", "persistence true", f"persistence_location {work}/",
                 "autosave_interval 1", f"log_dest file {work}/mosquitto.log", "log_type all"]
        if os.geteuid() == 0:  # else it runs as the user `mosquitto`, who cannot write to `work`
            lines.append("user root")
        if users:
            passwords = work / "passwords"
            passwords.write_text("")
            for user, password in users.items():
                subprocess.run(["mosquitto_passwd", "-b", str(passwords), user, password], check=True)
            passwords.chmod(0o600)
            lines += [f"password_file {passwords}", "allow_anonymous false"]
        else:
            lines.append("allow_anonymous true")
        self.tls_port = free_port() if tls else None
        if tls:  # after the plain listener (the start's probe uses that one): these apply to this one
            lines += [f"listener {self.tls_port} 127.0.0.1", f"cafile {tls.ca}", f"certfile {tls.certificate}",
                      f"keyfile {tls.key}"]
        self.config = work / "mosquitto.conf"
        self.config.write_text("\n".join(lines) + "\n")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Mosquitto:
        self.process = subprocess.Popen([self.program, "-c", str(self.config)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if "Opening ipv4 listen socket" in self.log() or "mosquitto version" in self.log():
                probe = mqtt.Client(CallbackAPIVersion.VERSION2)
                try:
                    probe.connect("127.0.0.1", self.port)
                    probe.disconnect()
                    return self
                except OSError:
                    pass
            time.sleep(0.1)
        pytest.fail(f"mosquitto did not start: {self.log()[-1000:]}")

    def stop(self) -> None:
        """SIGTERM: mosquitto saves its sessions and retained messages, then exits."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None

    def log(self) -> str:
        path = self.work / "mosquitto.log"
        return path.read_text(errors="replace") if path.exists() else ""

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"


@dataclass(frozen=True)
class Certificates:
    """A CA of its own (`ca`, PEM) and a server certificate it signed for 127.0.0.1 (`certificate`, `key`)."""

    ca: Path
    certificate: Path
    key: Path


def certificates(work: Path, name: str = "test") -> Certificates:
    """Makes a new CA and a server certificate for 127.0.0.1 in `work` with the `openssl` CLI."""
    work.mkdir(parents=True, exist_ok=True)
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca, ca_key, csr = work / f"{name}-ca.pem", work / f"{name}-ca.key", work / f"{name}-server.csr"
    made = Certificates(ca, work / f"{name}-server.pem", work / f"{name}-server.key")
    (work / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for command in (["req", "-x509", *key, "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", f"/CN={name} CA"],
                    ["req", *key, "-keyout", made.key, "-out", csr, "-subj", "/CN=127.0.0.1"],
                    ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "2",
                     "-out", made.certificate, "-extfile", work / "san.ext"]):
        subprocess.run(["openssl", *map(str, command)], check=True, capture_output=True)
    made.key.chmod(0o644)  # mosquitto may run as its own user
    return made


class Subscriber:
    """A paho-mqtt client subscribed at QoS 1 to `topic`, with a persistent session
    (clean_session false: what arrives while it is away is kept by the broker for it).

    Made, it is subscribed: the constructor returns once the broker's SUBACK has come. (The
    SUBSCRIBE goes from paho's thread after the CONNACK; a test that published as soon as the
    constructor returned lost, on a loaded machine, whatever the broker routed before it: a
    subscription receives only what is published after it.)
    """

    def __init__(self, broker: Mosquitto, topic: str = "#", client_id: str = "test-subscriber",
                 login: tuple[str, str] | None = None, timeout: float = 15.0) -> None:
        self.messages: list[tuple[str, bytes, bool]] = []  # (topic, payload, retained)
        self._lock = threading.Lock()
        self._topic = topic
        self._subscribed = threading.Event()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=False)
        if login:
            self.client.username_pw_set(*login)
        self.client.on_connect = lambda c, *_: c.subscribe(self._topic, qos=1)
        self.client.on_subscribe = lambda *_: self._subscribed.set()
        self.client.on_message = self._message
        self.client.reconnect_delay_set(0.2, 1)
        self.client.connect("127.0.0.1", broker.port)
        self.client.loop_start()
        if not self._subscribed.wait(timeout):
            self.close()
            pytest.fail(f"the test's subscriber got no SUBACK for {topic!r} in {timeout:g} s: {broker.log()[-1000:]}")

    def _message(self, client: mqtt.Client, userdata: object, message: mqtt.MQTTMessage) -> None:
        with self._lock:
            self.messages.append((message.topic, message.payload, bool(message.retain)))

    def received(self, prefix: str = "") -> list[tuple[str, bytes, bool]]:
        with self._lock:
            return [m for m in self.messages if m[0].startswith(prefix)]

    def latest(self) -> dict[str, bytes]:
        """Each topic's last payload."""
        with self._lock:
            return {topic: payload for topic, payload, _ in self.messages}

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()
