"""Events and counts on MQTT (`--mqtt mqtt://[user:password@]host[:port][/prefix]`, docs/ingest.md).

One sink of the cameras' ordered event stream (DESIGN section 13): `offer` and the count calls
only queue, under a lock, and return; one thread owns the broker connection (paho-mqtt, driven by
hand so that reconnection uses the bridge's capped, jittered backoff) and publishes from the
queue. Events wait in a bounded queue while the broker is down or slow, the oldest dropped and
counted when it is full; at most `WINDOW` are with paho unacknowledged, and paho sends those
again after a reconnect (QoS 1: at least once; `event_id` tells a repeat). Counts and camera
states are retained topics, kept here and published again on every connection, so the broker's
state is right even after it lost its own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, quote, unquote, urlsplit

from ingest.cameras.backoff import Backoff
from ingest.config import ConfigError, expand
from ingest.sinks import topics
from ingest.sinks.metrics import Metrics
from ingest.sinks.redact import url_secrets
from ingest.sinks.topics import Discovery, Topics

logger = logging.getLogger(__name__)

SINK = "mqtt"
WINDOW = 200  # events handed to paho and not yet acknowledged
CONNACK_S = 10.0  # a connection without the broker's answer by then is given up
_EXAMPLE = "mqtt://user:${MQTT_PASSWORD}@host"
# scheme://[user]:${VAR}@rest: a password that is one variable, substituted after the URL is split.
_PASSWORD_VAR = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@]*:)\$\{(?P<var>[A-Za-z_][A-Za-z0-9_]*)\}"
                           r"(?P<tail>@.*)", re.DOTALL)
# OpenSSL's X509_V_ERR_* codes of `ssl.SSLCertVerificationError.verify_code`.
_CERT_HAS_EXPIRED, _HOSTNAME_MISMATCH, _IP_ADDRESS_MISMATCH = 10, 62, 64
_STATES = {"started": ("offline", "connecting"), "connected": ("online", None), "stopped": ("offline", "stopped")}
Report = Callable[..., None]


class MqttError(ConfigError):
    """A bad MQTT setting; the message names it and the fix (never the password)."""


@dataclass(frozen=True, slots=True)
class MqttSettings:
    """Where and how to publish. `url` holds the credentials: show `display` instead.

    Attributes:
        url: mqtt://[user:password@]host[:port][/prefix] (`mqtts://` for TLS).
        ca: the CA certificate file for `mqtts://` (default: the system's).
        queue: events kept while the broker is away (`mqtt_queue`).
        discovery: publish Home Assistant discovery messages.
        discovery_prefix: their topic prefix.
    """

    url: str
    ca: Path | None = None
    queue: int = 10_000
    discovery: bool = False
    discovery_prefix: str = "homeassistant"

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        _check_address(parts)
        try:
            for segment in self.prefix.split("/"):
                topics.check_level(segment, "mqtt url: the topic prefix's part")
            topics.check_level(self.discovery_prefix, "mqtt discovery_prefix")
        except ValueError as exc:
            raise MqttError(str(exc)) from None
        if self.queue < 1:
            raise MqttError(f"mqtt_queue = {self.queue}: keep at least 1 event (default 10000)")
        if self.ca is not None and not Path(self.ca).is_file():
            raise MqttError(f"mqtt ca = {str(self.ca)!r}: no such file: give the broker's CA certificate (PEM)")
        if self.ca is not None and parts.scheme != "mqtts":
            raise MqttError("a CA certificate is for TLS: write the broker's URL as mqtts://")

    @property
    def host(self) -> str:
        return str(urlsplit(self.url).hostname)

    @property
    def port(self) -> int:
        return urlsplit(self.url).port or (8883 if self.tls else 1883)

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme == "mqtts"

    @property
    def prefix(self) -> str:
        return urlsplit(self.url).path.strip("/") or "video-ingest"

    @property
    def login(self) -> tuple[str, str | None] | None:
        parts = urlsplit(self.url)
        if parts.username is None:
            return None
        return unquote(parts.username), None if parts.password is None else unquote(parts.password)

    @property
    def display(self) -> str:
        """The URL without its `user:password@`."""
        parts = urlsplit(self.url)
        return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()

    @property
    def secrets(self) -> list[str]:
        return url_secrets(self.url)


def _check_address(parts: SplitResult) -> None:
    """Raises MqttError naming what is wrong with the URL's scheme, host or port (never the
    password: a password cut short by a `/` shows up as the host or port)."""
    if "@" in parts.path + parts.query + parts.fragment:
        raise MqttError(f"mqtt url: an '@' comes after the host: the password (or user) holds '/', '?' or '#', "
                        f"which ends the host early: percent-encode them in the URL ('/' as %2F, '?' as %3F, "
                        f"'#' as %23), or write the password as one ${{VAR}} ({_EXAMPLE}): its value is then "
                        "taken as it is, any character allowed (a topic prefix may not hold '@')")
    if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
        raise MqttError("mqtt url: write mqtt://[user:password@]host[:port][/prefix] (mqtts:// for TLS)")
    try:
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        raise MqttError("mqtt url: the port is not a number from 1 to 65535 (a password holding ':' is fine "
                        f"after the user's ':'; written as one ${{VAR}}, {_EXAMPLE}, it may hold anything)") from None


def expand_url(raw: str, environ: Mapping[str, str]) -> str:
    """`raw` with its `${VAR}`s replaced by the environment's values; a password that is exactly
    one `${VAR}` is put in percent-encoded, so that it may hold any character (`/`, `@`, `:`,
    `%`) and `MqttSettings.login` gives it back as it is.

    Raises:
        MqttError: a variable is not set (named, never a value).
    """
    try:
        split = _PASSWORD_VAR.fullmatch(raw)
        if split is None:
            return expand(raw, "mqtt", environ)
        password = expand(f"${{{split['var']}}}", "mqtt", environ)
        return expand(split["head"], "mqtt", environ) + quote(password, safe="") + expand(split["tail"], "mqtt", environ)
    except ConfigError as exc:
        raise MqttError(str(exc)) from None


def settings_from(section: Any, given: Mapping[str, Any], environ: Mapping[str, str]) -> MqttSettings | None:
    """The settings of a camera list's `mqtt:` section, with the command line's (`given`, those
    not None) over them; None when neither names a broker.

    Raises:
        MqttError: naming the setting and the fix.
    """
    if section is not None and not isinstance(section, Mapping):
        raise MqttError("`mqtt` is a mapping: url, and optionally ca, queue, discovery, discovery_prefix")
    values = dict(section or {})
    unknown = set(values) - {"url", "ca", "queue", "discovery", "discovery_prefix"}
    if unknown:
        raise MqttError(f"mqtt: unknown setting(s) {', '.join(sorted(map(str, unknown)))}: "
                        "use url, ca, queue, discovery, discovery_prefix")
    values.update({k: v for k, v in given.items() if v is not None})
    if not values.get("url"):
        return None
    url = expand_url(str(values.pop("url")).strip(), environ)
    queue = values.get("queue", 10_000)
    if isinstance(queue, bool) or not isinstance(queue, int):
        raise MqttError(f"mqtt queue = {queue!r}: use a whole number of events, e.g. 10000")
    return MqttSettings(url=url, ca=Path(values["ca"]) if values.get("ca") else None, queue=queue,
                        discovery=bool(values.get("discovery", False)),
                        discovery_prefix=str(values.get("discovery_prefix", "homeassistant")))


def tls_problem(exc: ssl.SSLError, settings: MqttSettings) -> str:
    """What failed in the TLS handshake with the broker, and the fix."""
    if not isinstance(exc, ssl.SSLCertVerificationError):
        return (f"the TLS handshake failed ({exc.reason or exc}): is {settings.host}:{settings.port} a TLS "
                "listener? (mqtts://, usually port 8883; a plain listener is mqtt://)")
    failed = f"certificate verify failed: {exc.verify_message}"
    if exc.verify_code in (_HOSTNAME_MISMATCH, _IP_ADDRESS_MISMATCH):
        return f"{failed}: connect by a name the broker's certificate holds"
    if exc.verify_code == _CERT_HAS_EXPIRED:
        return f"{failed}: the broker's certificate must be renewed"
    trusted = f"the CA in {settings.ca}" if settings.ca else "the system's CAs"
    return (f"{failed}: the broker's certificate is not signed by {trusted}: give --mqtt-ca (or the `mqtt:` "
            "section's ca:) the broker's CA certificate (PEM)")


def check_names(cameras: Iterable[Any]) -> None:
    """Every camera, zone, line and class name of the list can be one topic level.

    Raises:
        MqttError: naming the camera, the name and the fix.
    """
    for camera in cameras:
        topics.check_level(camera.name, "camera name")
        for shape in (*camera.scene.zones, *camera.scene.lines):
            try:
                topics.check_level(shape.name, "name")
                for label in sorted(shape.classes):
                    topics.check_level(label, "class")
            except ValueError as exc:
                raise MqttError(f"camera {camera.name!r}: {exc}") from None


class MqttSink:
    """Publishes events, counts and camera states to one broker.

    Args:
        settings: the broker and the topics.
        metrics: the process's metrics (the sink's connection, queue, published and dropped).
        report: writes one of the process's events (`report(None, event, **fields)`): the
            connection's ups and downs. Never called with the sink's lock held.
    """

    def __init__(self, settings: MqttSettings, metrics: Metrics, report: Report) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        self.settings = settings
        self.topics = Topics(settings.prefix)
        self._discovery = Discovery(self.topics, settings.discovery_prefix) if settings.discovery else None
        self._metrics = metrics
        self._report = report
        self._lock = threading.Lock()
        self._events: deque[tuple[str, str]] = deque()  # (topic, payload) of events, oldest first
        self._retained: dict[str, str] = {}  # topic -> its latest payload
        self._changed: dict[str, None] = {}  # retained topics to publish (ordered)
        self._discovered: dict[str, str] = {}  # a state topic -> its discovery topic
        self._dropped = 0
        self._unacked: dict[int, bool] = {}  # paho's message id -> whether it is an event
        self._draining_until: float | None = None
        self._client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
        self._client.will_set(self.topics.available, "offline", qos=1, retain=True)
        # No limit of paho's own: WINDOW is the limit (paho's scans its messages at every
        # acknowledgement while any wait behind its limit).
        self._client.max_inflight_messages_set(0)
        if settings.login is not None:
            self._client.username_pw_set(*settings.login)
        if settings.tls:
            self._client.tls_set(ca_certs=str(settings.ca) if settings.ca else None)
        self._client.on_connect = self._on_connect
        self._client.on_disconnect = self._on_disconnect
        self._client.on_publish = self._on_publish
        self._state = "down"  # down, connecting, up
        self._since = 0.0
        self._backoff = Backoff()
        self._retry_at = 0.0
        self._failing: tuple[str, str] | None = None  # the last failure reported
        self._pending_reports: list[tuple[str, dict[str, Any]]] = []
        self._thread = threading.Thread(target=self._run, name="mqtt", daemon=True)
        metrics.mqtt_connected(False)
        metrics.events_queued(SINK, 0)

    def start(self) -> MqttSink:
        self._thread.start()
        return self

    # Called by the cameras' threads (through `Lines` and `Metrics`): queue and return.

    def offer(self, lines: Iterable[tuple[Mapping[str, Any], str]]) -> None:
        """Event lines (each with its JSON text as written to the results) to publish; the
        camera states among them update the retained status topics."""
        with self._lock:
            for line, text in lines:
                event = line.get("event")
                if event is None:
                    continue
                camera = line.get("camera")
                if len(self._events) >= self.settings.queue:
                    self._events.popleft()
                    self._drop()
                self._events.append((self.topics.events(camera), text))
                if camera is not None and (event in _STATES or event == "disconnected"):
                    shown = json.loads(text)  # the redacted line: a reason may quote a camera's URL
                    state, reason = _STATES.get(event, ("offline", shown.get("reason")))
                    self._retain(self.topics.status(camera), json.dumps(
                        {"state": state, "reason": reason, "time": shown.get("time")}, allow_nan=False),
                        lambda d: d.camera(camera))  # noqa: B023 (called at once)

    def zone(self, camera: str, zone: str, label: str, objects: int) -> None:
        with self._lock:
            self._retain(self.topics.zone(camera, zone, label), str(objects), lambda d: d.zone(camera, zone, label))

    def crossed(self, camera: str, line: str, direction: str, label: str) -> None:
        topic = self.topics.line(camera, line, direction, label)
        with self._lock:
            crossings = int(self._retained.get(topic, 0)) + 1
            self._retain(topic, str(crossings), lambda d: d.line(camera, line, direction, label))

    def zone_removed(self, camera: str, zone: str) -> None:
        """A reload removed the zone: its retained counts (and discovered sensors) are cleared."""
        gone = self.topics.zone_prefix(camera, zone)
        with self._lock:
            for topic in [t for t in self._retained if t.startswith(gone)]:
                for cleared in (topic, self._discovered.pop(topic, None)):
                    if cleared is not None:
                        self._retained[cleared] = ""  # an empty retained message deletes the broker's
                        self._changed[cleared] = None

    def _retain(self, topic: str, payload: str, describe: Callable[[Discovery], tuple[str, str]]) -> None:
        """`topic`'s new payload; with discovery on, first its description (once, built only then)."""
        if self._discovery is not None and topic not in self._discovered:
            config, body = describe(self._discovery)
            self._retained[config] = body
            self._changed[config] = None
            self._discovered[topic] = config
        self._retained[topic] = payload
        self._changed[topic] = None

    def _drop(self) -> None:
        self._dropped += 1
        self._metrics.events_dropped(SINK)
        if self._dropped in (1, 10, 100) or self._dropped % 1000 == 0:
            logger.warning("mqtt: %d events dropped so far: the broker %s is away or slower than the cameras "
                           "(mqtt_queue %d holds the newest)", self._dropped, self.settings.display,
                           self.settings.queue)

    def close(self, timeout: float = 3.0) -> None:
        """Publishes what is queued (for up to `timeout` s while connected), then says `offline`
        on the availability topic and disconnects."""
        self._draining_until = time.monotonic() + timeout
        self._thread.join(timeout + CONNACK_S)

    # The sink's thread: the connection and the publishing.

    def _run(self) -> None:
        while True:
            if self._draining_until is not None and (self._state != "up" or self._drained()
                                                     or time.monotonic() >= self._draining_until):
                return self._goodbye()
            try:
                self._step()
            except Exception as exc:  # a bug: logged, the connection started anew, the sink goes on
                logger.exception("mqtt: the sink failed (it reconnects and goes on): %s", exc)
                self._down(f"{type(exc).__name__}: {exc}")
            self._flush_reports()
            self._metrics.events_queued(SINK, len(self._events) + len(self._unacked))

    def _step(self) -> None:
        if self._state == "down":
            self._connect()
            return
        if self._client.loop(timeout=0.05) != 0:
            self._down()
        if self._state == "connecting" and time.monotonic() - self._since > CONNACK_S:
            self._failed("timeout", f"no answer from the broker in {CONNACK_S:g} s")
            self._down()
        if self._state == "up":
            self._publish()

    def _connect(self) -> None:
        if time.monotonic() < self._retry_at:
            time.sleep(min(0.1, self._retry_at - time.monotonic()))
            return
        try:
            self._client.connect(self.settings.host, self.settings.port, keepalive=30)
            self._state, self._since = "connecting", time.monotonic()
        except ssl.SSLError as exc:  # the handshake (paho's connect does it): its own reason and fix
            self._failed("tls", tls_problem(exc, self.settings))
            self._retry_at = time.monotonic() + self._backoff.next_delay(0.0)
        except Exception as exc:  # refused, unreachable: reported, retried with backoff
            self._failed("unreachable", f"{type(exc).__name__}: {exc}")
            self._retry_at = time.monotonic() + self._backoff.next_delay(0.0)

    def _down(self, reason: str = "the connection was lost") -> None:
        """The connection ended (or never came up): the next attempt after the backoff's delay."""
        if self._state == "down":
            return
        with contextlib.suppress(Exception):
            self._client.disconnect()
        if self._state == "up":
            self._pending_reports.append(("mqtt_disconnected", {"broker": self.settings.display, "reason": reason}))
        connected_for = time.monotonic() - self._since if self._state == "up" else 0.0
        self._state = "down"
        self._metrics.mqtt_connected(False)
        self._retry_at = time.monotonic() + self._backoff.next_delay(connected_for)

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        if reason.is_failure:
            self._failed("refused", str(reason))
            self._down()
            return
        self._state, self._since, self._failing = "up", time.monotonic(), None
        self._metrics.mqtt_connected(True)
        client.publish(self.topics.available, "online", qos=1, retain=True)
        with self._lock:
            self._changed = dict.fromkeys(self._retained)
        self._pending_reports.append(("mqtt_connected", {"broker": self.settings.display}))

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        if self._draining_until is None or self._state != "up":
            self._down(str(reason))

    def _on_publish(self, client: Any, userdata: Any, mid: int, reason: Any, properties: Any) -> None:
        if self._unacked.pop(mid, False):
            self._metrics.events_published(SINK)

    def _publish(self) -> None:
        with self._lock:
            room = max(0, WINDOW - len(self._unacked))
            events = [self._events.popleft() for _ in range(min(room, len(self._events)))]
            retained = [(topic, self._retained[topic]) for topic in self._changed]
            self._changed = {}
        for topic, payload in retained:
            self._client.publish(topic, payload, qos=1, retain=True)
        for topic, payload in events:
            self._unacked[self._client.publish(topic, payload, qos=1).mid] = True

    def _drained(self) -> bool:
        with self._lock:
            return not self._events and not self._changed and not self._unacked

    def _goodbye(self) -> None:
        if self._state == "up":
            said = self._client.publish(self.topics.available, "offline", qos=1, retain=True)
            end = time.monotonic() + 1.0
            while not said.is_published() and time.monotonic() < end and self._client.loop(timeout=0.05) == 0:
                pass
            self._client.disconnect()
        self._metrics.mqtt_connected(False)
        self._flush_reports()

    def _failed(self, reason: str, detail: str) -> None:
        """A connection attempt failed: counted; logged and reported as an event when the
        failure is new (the first since a connection, or another reason than the last)."""
        self._metrics.mqtt_connect_failure(reason)
        if self._failing == (reason, detail):
            return
        self._failing = (reason, detail)
        logger.warning("mqtt: cannot connect to %s (%s): %s; trying again with backoff (up to every %g s)",
                       self.settings.display, reason, detail, self._backoff.cap_s)
        self._pending_reports.append(("mqtt_error", {"broker": self.settings.display, "reason": reason,
                                                     "message": detail}))

    def _flush_reports(self) -> None:
        reports, self._pending_reports = self._pending_reports, []
        for event, fields in reports:
            self._report(None, event, **fields)
