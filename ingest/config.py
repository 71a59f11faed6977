"""Camera settings: the YAML (`--config`) and `--camera NAME=URL`, checked once, with fixes named.

    cameras:
      - name: gate-1
        url: rtsp://viewer:${GATE1_PASSWORD}@gate-1.cameras.example/stream1
      - name: lobby
        url: rtsp://lobby.cameras.example/h264
        mode: frames
        sample_fps: 5

An optional top-level `defaults:` mapping holds settings for every camera. `${VAR}` anywhere in a
URL is taken from the environment, and the value is a secret (see `ingest.sinks.redact`).
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from handler.motion import MotionSettings
from ingest.analytics import scene
from ingest.analytics.scene import Scene, SceneError
from ingest.record import settings as record_settings
from ingest.record.settings import RecordSettings
from ingest.sinks.redact import url_secrets

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
LIVE_SCHEMES = ("rtsp", "rtsps", "http", "https")


class ConfigError(ValueError):
    """The camera list is invalid; the message names the camera, the field and the fix."""


class Mode(enum.Enum):
    """What is sent: remuxed MPEG-TS segments (no decoding here) or sampled JPEG frames."""

    SEGMENTS = "segments"
    FRAMES = "frames"


class Policy(enum.Enum):
    """When the camera is ahead of the server: drop the oldest unsent (`latest`) or wait (`every`)."""

    LATEST = "latest"
    EVERY = "every"


class Transport(enum.Enum):
    """RTSP's transport for RTP: interleaved in the TCP connection (default) or UDP."""

    TCP = "tcp"
    UDP = "udp"


def _positive(value: float) -> str | None:
    return None if value > 0 else "use a number above 0"


def _in_flight(value: int) -> str | None:
    return None if 1 <= value <= 64 else "use a whole number from 1 to 64"


@dataclass(frozen=True, slots=True)
class Camera:
    """One camera, as configured. `url` is the real one (secrets expanded): never print it.

    Attributes:
        name: the camera's name: `X-Stream-Id`, the results' `camera`, the metrics' label.
        url: rtsp://, rtsps://, http(s):// (MJPEG) or a local file path (file:// too).
        display_url: the URL as written, `${VAR}` unexpanded and `user:password@` removed.
        mode: segments (default) or frames.
        sample_fps: frames per second kept (frames mode: default 5; segments: all unless set).
        segment_seconds: a segment is cut at the first key frame after this many seconds.
        max_in_flight: requests at once for this camera.
        policy: latest (live sources) or every (files) unless set.
        stall_seconds: no packet for this long: reconnect.
        transport: tcp or udp (RTSP only).
        loop: a file starts again at its end (demos).
        env_values: the values `${VAR}`s of the URL took (secrets).
        motion: motion first (DESIGN section 15): the model looks only where something moved;
            None: the default (on for live cameras, off for files), False: off.
        record: `record:` (ingest.record.settings), used with `--record DIR`; None: the defaults.
        scene: tracking, zones and lines (`ingest.analytics.scene`); not part of the camera's identity: a
            change applies to the running camera, which keeps its connection and its tracks.
    """

    name: str
    url: str = field(repr=False)
    display_url: str = ""
    mode: Mode = Mode.SEGMENTS
    sample_fps: float | None = field(default=None, metadata={"check": _positive})
    segment_seconds: float = field(default=1.0, metadata={"check": _positive})
    max_in_flight: int = field(default=2, metadata={"check": _in_flight})
    policy: Policy | None = None
    stall_seconds: float = field(default=5.0, metadata={"check": _positive})
    transport: Transport = Transport.TCP
    loop: bool = False
    motion: MotionSettings | bool | None = None
    record: RecordSettings | None = None
    env_values: tuple[str, ...] = field(default=(), repr=False)
    scene: Scene = field(default=Scene(), compare=False)

    @property
    def is_file(self) -> bool:
        """Whether the source is a local file (paced at its own frame rate)."""
        return urlsplit(self.url).scheme.lower() not in LIVE_SCHEMES

    @property
    def effective_policy(self) -> Policy:
        return self.policy or (Policy.EVERY if self.is_file else Policy.LATEST)

    @property
    def effective_sample_fps(self) -> float | None:
        return self.sample_fps if self.sample_fps or self.mode is Mode.SEGMENTS else 5.0

    @property
    def effective_motion(self) -> MotionSettings | None:
        """The motion settings, or None when off (`motion: off`; files unless set)."""
        if isinstance(self.motion, MotionSettings):
            return self.motion
        return MotionSettings() if self.motion is None and not self.is_file else None

    @property
    def secrets(self) -> list[str]:
        """Everything of the URL that must never be shown."""
        return [s for s in [*url_secrets(self.url), *self.env_values] if s]


SETTINGS = {f.name: f for f in fields(Camera) if f.name not in ("name", "url", "display_url", "env_values", "scene")}


def load(path: Path, environ: Mapping[str, str] | None = None) -> list[Camera]:
    """The cameras of a YAML file.

    Raises:
        ConfigError: unreadable file, bad YAML, or a bad camera (named, with the fix).
    """
    return parse(read(path), str(path), environ)


def read(path: Path) -> Any:
    """The parsed YAML of a camera list (its `mqtt:` section is read by `ingest.sinks.mqtt`).

    Raises:
        ConfigError: unreadable file or bad YAML, with the line and column.
    """
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the camera list {path}: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None


def parse(data: Any, source: str = "the camera list", environ: Mapping[str, str] | None = None) -> list[Camera]:
    """The cameras of parsed YAML: `{"cameras": [...], "defaults": {...}}`.

    Raises:
        ConfigError: naming the camera and the field.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("cameras"), list):
        raise ConfigError(f"{source}: write a top-level `cameras:` list, each entry a `name` and a `url`")
    unknown = set(data) - {"cameras", "defaults", "mqtt"}
    if unknown:
        raise ConfigError(f"{source}: unknown top-level key(s) {', '.join(sorted(map(str, unknown)))}: "
                          "use `cameras` and optionally `defaults` and `mqtt`")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise ConfigError(f"{source}: `defaults` must be a mapping of camera settings")
    cameras = [_camera(entry, defaults, f"{source}: camera #{i + 1}", environ)
               for i, entry in enumerate(data["cameras"])]
    return unique(cameras, source)


def unique(cameras: Sequence[Camera], source: str) -> list[Camera]:
    """`cameras`, checked for names used twice.

    Raises:
        ConfigError: naming the duplicate.
    """
    seen: set[str] = set()
    for camera in cameras:
        if camera.name in seen:
            raise ConfigError(f"{source}: camera name {camera.name!r} is used twice: give each camera its own name")
        seen.add(camera.name)
    return list(cameras)


def from_argument(text: str, environ: Mapping[str, str] | None = None, **settings: Any) -> Camera:
    """`--camera NAME=URL`, with settings for it.

    Raises:
        ConfigError: naming the argument (never its URL) and the fix.
    """
    name, eq, url = text.partition("=")
    if not eq or not url:
        raise ConfigError(f"--camera {name[:64]!r}...: write --camera NAME=URL, e.g. "
                          "--camera gate-1=rtsp://gate-1.example/stream1")
    return _camera({"name": name, "url": url, **settings}, {}, f"--camera {name}", environ)


def _camera(entry: Any, defaults: Mapping[str, Any], where: str, environ: Mapping[str, str] | None) -> Camera:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: each camera is a mapping with `name` and `url`")
    name = entry.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise ConfigError(f"{where}: name = {name!r}: use 1 to 63 letters, digits, `_`, `.` or `-`, "
                          "starting with a letter or digit")
    where = f"camera {name!r}"
    merged = {**defaults, **entry}
    unknown = set(merged) - {"name", "url", *SETTINGS, *scene.KEYS}
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {', '.join(sorted(map(str, unknown)))}: "
                          f"use {', '.join(['url', *SETTINGS, *scene.KEYS])}")
    raw_url = merged.get("url")
    if not isinstance(raw_url, str) or not raw_url.strip():
        raise ConfigError(f"{where}: url is missing: give the camera's rtsp://, http:// or file URL")
    environ = os.environ if environ is None else environ
    url = expand(raw_url.strip(), where, environ)
    values = {key: _value(key, merged[key], where) for key in SETTINGS if key in merged}
    used = tuple(environ[v] for v in _ENV.findall(_without_user(raw_url.strip())))
    try:
        looks = scene.parse(merged)
    except SceneError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    camera = Camera(name=name, url=url, display_url=display(raw_url.strip()), env_values=used, scene=looks, **values)
    return _checked(camera, where)


def _without_user(raw_url: str) -> str:
    """`raw_url` less its user name: a `${VAR}` there is no secret (the user is masked inside URLs
    only, never as a bare word; a variable holding `user:password` is masked by `url_secrets`)."""
    scheme, sep, rest = raw_url.partition("://")
    userinfo, at, _ = rest.partition("/")[0].rpartition("@")
    if not sep or not at:
        return raw_url
    _, colon, password = userinfo.partition(":")
    return raw_url.replace(f"{scheme}://{userinfo}@", f"{scheme}://{':' + password if colon else ''}@", 1)


def _checked(camera: Camera, where: str) -> Camera:
    scheme = urlsplit(camera.url).scheme.lower()
    if camera.is_file and scheme not in ("", "file") and len(scheme) > 1:  # "C:" is a path
        raise ConfigError(f"{where}: url scheme {scheme!r}: use rtsp://, rtsps://, http(s):// (MJPEG) or a file")
    if camera.is_file:
        path = Path(urlsplit(camera.url).path if scheme == "file" else camera.url)
        if not path.is_file():
            raise ConfigError(f"{where}: file {camera.display_url!r} does not exist: give the path of a video file")
    if camera.loop and not camera.is_file:
        raise ConfigError(f"{where}: loop = true is for files only: remove it for a live camera")
    return camera


def _value(key: str, raw: Any, where: str) -> Any:
    """One setting, converted to its field's type and checked against its range."""
    spec = SETTINGS[key]
    convert = _CONVERTERS[key]
    try:
        value = convert(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {key} = {raw!r}: {exc}") from None
    check: Callable[[Any], str | None] | None = spec.metadata.get("check")
    problem = check(value) if check and value is not None else None
    if problem:
        raise ConfigError(f"{where}: {key} = {raw!r}: {problem}")
    return value


def _enum(kind: type[enum.Enum]) -> Callable[[Any], Any]:
    def convert(raw: Any) -> Any:
        try:
            return kind(str(raw).lower())
        except ValueError:
            raise ValueError(f"use one of {', '.join(m.value for m in kind)}") from None
    return convert


def _number(raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise ValueError("use a number, e.g. 5")
    return float(raw)


def _whole(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ValueError("use a whole number, e.g. 2")
    return raw


def _flag(raw: Any) -> bool:
    if not isinstance(raw, bool):
        raise ValueError("use true or false")
    return raw


def _motion(raw: Any) -> MotionSettings | bool:
    """`off` / `false`, `on` / `true`, or a mapping of `handler.motion.MotionSettings` (with
    `enabled: false` for off, as Frigate writes it)."""
    if raw is False or raw == "off":
        return False
    if raw is True or raw == "on":
        return MotionSettings()
    if isinstance(raw, Mapping):
        settings = dict(raw)
        enabled = settings.pop("enabled", True)
        if not isinstance(enabled, bool):
            raise ValueError("enabled: use true or false")
        return MotionSettings.parse(settings, "") if enabled else False
    raise ValueError("use off, on, or a mapping of motion settings (threshold, contour_area, lightning_threshold, "
                     "frame_height, frame_alpha, refresh_seconds, max_regions, mask): docs/motion.md")


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "mode": _enum(Mode), "policy": _enum(Policy), "transport": _enum(Transport),
    "sample_fps": lambda raw: None if raw is None else _number(raw),
    "segment_seconds": _number, "stall_seconds": _number, "max_in_flight": _whole, "loop": _flag,
    "motion": _motion, "record": record_settings.parse,
}


def expand(url: str, where: str, environ: Mapping[str, str]) -> str:
    """`url` with each `${VAR}` replaced by the environment's value.

    Raises:
        ConfigError: naming the variable (never a value).
    """
    def value(match: re.Match[str]) -> str:
        if match[1] not in environ:
            raise ConfigError(f"{where}: url uses ${{{match[1]}}}, which is not set in the environment: "
                              f"export {match[1]}=... (or a Kubernetes Secret) before starting")
        return environ[match[1]]
    return _ENV.sub(value, url)


def display(raw_url: str) -> str:
    """The URL as written, without its `user:password@`: safe to show."""
    parts = urlsplit(raw_url)
    if "@" not in parts.netloc:
        return raw_url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def with_settings(camera: Camera, **settings: Any) -> Camera:
    """`camera` with some settings replaced (already typed)."""
    return replace(camera, **settings)
