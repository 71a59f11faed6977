"""MQTT topic names of video-ingest (docs/ingest.md, "Events on MQTT") and the Home Assistant
discovery messages that describe them. Stable: consumers wire alarms to them.

    <prefix>/available                             online / offline (the process's will)
    <prefix>/events                                the process's own events (reloaded, config_error)
    <prefix>/<camera>/events                       every event line of the camera (QoS 1)
    <prefix>/<camera>/status                       {"state": "online" | "offline", "reason": ...} (retained)
    <prefix>/<camera>/zones/<zone>/<label>         objects in the zone now (retained)
    <prefix>/<camera>/lines/<line>/<direction>/<label>   crossings since start (retained)
"""

from __future__ import annotations

import hashlib
import json
import re

#: Characters no topic level may hold: the level separator, the wildcards and NUL.
FORBIDDEN = ("/", "+", "#", "\0")
_SLUG = re.compile(r"[^A-Za-z0-9_-]+")
_PLAIN = re.compile(r"[A-Za-z0-9-]+")


def check_level(text: str, what: str) -> None:
    """Raises ValueError naming `what` and the fix when `text` cannot be one topic level."""
    bad = [c for c in FORBIDDEN if c in text]
    if not text or bad or text.startswith("$"):
        shown = ", ".join(repr(c) for c in bad) or ("a leading '$'" if text else "nothing")
        raise ValueError(f"{what} {text!r} cannot be an MQTT topic level (it holds {shown}): "
                         "rename it with letters, digits, '_', '.' or '-'")


def level(text: str) -> str:
    """A label from the model as one topic level: forbidden characters become `_`."""
    for c in FORBIDDEN:
        text = text.replace(c, "_")
    return "_" + text if not text or text.startswith("$") else text


class Topics:
    """The topics under one prefix (`video-ingest` unless the URL's path names another)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.available = f"{prefix}/available"
        self.events_of_process = f"{prefix}/events"

    def events(self, camera: str | None) -> str:
        return self.events_of_process if camera is None else f"{self.prefix}/{camera}/events"

    def status(self, camera: str) -> str:
        return f"{self.prefix}/{camera}/status"

    def zone(self, camera: str, zone: str, label: str) -> str:
        return f"{self.zone_prefix(camera, zone)}{level(label)}"

    def zone_prefix(self, camera: str, zone: str) -> str:
        """What every topic of a zone's counts starts with."""
        return f"{self.prefix}/{camera}/zones/{zone}/"

    def line(self, camera: str, line: str, direction: str, label: str) -> str:
        return f"{self.prefix}/{camera}/lines/{line}/{direction}/{level(label)}"


class Discovery:
    """Home Assistant MQTT discovery (`<discovery prefix>/<component>/<node>/<object>/config`,
    retained): a sensor per zone and line count, a binary sensor per camera, each on the
    process's availability topic, grouped as one device per camera."""

    def __init__(self, topics: Topics, prefix: str = "homeassistant") -> None:
        self._topics = topics
        self._prefix = prefix
        self._node = ident([topics.prefix])

    def camera(self, camera: str) -> tuple[str, str]:
        """The binary sensor of a camera's status."""
        return self._config("binary_sensor", [camera, "status"], camera, {
            "name": "connected", "state_topic": self._topics.status(camera), "device_class": "connectivity",
            "value_template": "{{ value_json.state }}", "payload_on": "online", "payload_off": "offline"})

    def zone(self, camera: str, zone: str, label: str) -> tuple[str, str]:
        return self._config("sensor", [camera, "zone", zone, label], camera, {
            "name": f"{zone} {label}", "state_topic": self._topics.zone(camera, zone, label),
            "state_class": "measurement", "unit_of_measurement": "objects"})

    def line(self, camera: str, line: str, direction: str, label: str) -> tuple[str, str]:
        return self._config("sensor", [camera, "line", line, direction, label], camera, {
            "name": f"{line} {direction} {label}", "state_topic": self._topics.line(camera, line, direction, label),
            "state_class": "total_increasing", "unit_of_measurement": "crossings"})

    def _config(self, component: str, parts: list[str], camera: str, fields: dict[str, str]) -> tuple[str, str]:
        unique = ident([self._topics.prefix, *parts])
        payload = {**fields, "unique_id": unique, "availability_topic": self._topics.available,
                   "device": {"identifiers": [ident([self._topics.prefix, camera])], "name": camera,
                              "manufacturer": "video-ingest"}}
        return f"{self._prefix}/{component}/{self._node}/{unique}/config", json.dumps(payload, allow_nan=False)


def ident(parts: list[str]) -> str:
    """The discovery id of `parts` (the topic prefix, then the camera, kind and names): letters,
    digits, `_` and `-` only, one id per list, the same in every process.

    Parts of letters, digits and `-` alone are joined by `_` (`video-ingest_dock_zone_door_person`:
    unambiguous, since no part holds `_`). Any other part (`door_1`, `door.1`) makes the id its
    slug, `__` (which the joined form never holds) and a hash of the exact parts, so that `door.1`
    and `door_1` (or zone `a_b`, label `c` and zone `a`, label `b_c`) never share an id.
    """
    joined = "_".join(parts)
    if all(_PLAIN.fullmatch(part) for part in parts):
        return joined
    digest = hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:10]
    return f"{_SLUG.sub('_', joined).strip('_')}__{digest}"
