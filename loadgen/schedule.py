"""The open-loop arrival schedule: when each camera sends each request, whatever the answers do."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Resolution:
    """A frame size in pixels."""

    width: int
    height: int

    @classmethod
    def parse(cls, text: str) -> Resolution:
        """`"1280x720"` -> Resolution(1280, 720); a ValueError names the bad text."""
        try:
            width, height = (int(part) for part in text.lower().split("x"))
        except ValueError:
            raise ValueError(f"resolution {text!r} is not WIDTHxHEIGHT, e.g. 1280x720") from None
        if width <= 0 or height <= 0:
            raise ValueError(f"resolution {text!r} must be positive in both dimensions")
        return cls(width, height)

    def __str__(self) -> str:
        return f"{self.width}x{self.height}"


@dataclass(frozen=True, slots=True)
class Switch:
    """From `at_s` seconds into the run every stream sends `resolution`."""

    at_s: float
    resolution: Resolution

    @classmethod
    def parse(cls, text: str) -> Switch:
        """`"3:640x480"` -> Switch(3.0, Resolution(640, 480))."""
        at, sep, res = text.partition(":")
        try:
            seconds = float(at)
        except ValueError:
            seconds = -1.0
        if not sep or seconds < 0:
            raise ValueError(f"switch {text!r} is not SECONDS:WIDTHxHEIGHT, e.g. 3:640x480")
        return cls(seconds, Resolution.parse(res))


@dataclass(frozen=True, slots=True)
class StreamRate:
    """Camera `stream` sends `fps` frames per second for the whole run (bursts included)."""

    stream: int
    fps: float

    @classmethod
    def parse(cls, text: str) -> StreamRate:
        """`"0:300"` -> StreamRate(0, 300.0); a ValueError names the bad text."""
        stream, sep, fps = text.partition(":")
        try:
            rate = cls(int(stream), float(fps))
        except ValueError:
            rate = None
        if not sep or rate is None or rate.stream < 0 or not rate.fps > 0:
            raise ValueError(f"stream rate {text!r} is not STREAM:FPS with FPS above 0, e.g. 0:300")
        return rate


@dataclass(frozen=True, slots=True)
class Plan:
    """What the cameras do.

    Attributes:
        streams: number of cameras.
        fps: frames per second per camera outside the burst.
        duration_s: seconds of sending.
        resolutions: camera i sends resolutions[i % len(resolutions)].
        burst_fps: frames per second per camera inside the burst (None: no burst).
        burst_start_s, burst_duration_s: the burst window.
        clip: frames per request; a camera sends one request every clip / fps seconds.
        switches: mid-run resolution switches, applied to all cameras.
        stream_rates: cameras that send at their own rate instead (a flooding camera, say).
    """

    streams: int
    fps: float
    duration_s: float
    resolutions: tuple[Resolution, ...] = (Resolution(1280, 720),)
    burst_fps: float | None = None
    burst_start_s: float = 0.0
    burst_duration_s: float = 0.0
    clip: int = 1
    switches: tuple[Switch, ...] = ()
    stream_rates: tuple[StreamRate, ...] = ()

    def __post_init__(self) -> None:
        checks = [
            (self.streams >= 1, f"streams = {self.streams}: use 1 or more"),
            (self.fps > 0, f"fps = {self.fps}: use a rate above 0"),
            (self.duration_s > 0, f"duration = {self.duration_s}: use more than 0 seconds"),
            (self.clip >= 1, f"clip = {self.clip}: use 1 or more frames per request"),
            (len(self.resolutions) >= 1, "give at least one resolution"),
            (self.burst_fps is None or self.burst_fps > 0, f"burst_fps = {self.burst_fps}: use a rate above 0"),
            (self.burst_start_s >= 0 and self.burst_duration_s >= 0,
             f"burst window {self.burst_start_s}+{self.burst_duration_s} s: use non-negative seconds"),
        ]
        checks += [(r.stream < self.streams, f"stream rate {r.stream}:{r.fps:g}: there are only "
                    f"{self.streams} cameras (0 to {self.streams - 1})") for r in self.stream_rates]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def burst_window(self) -> tuple[float, float] | None:
        """(start, end) of the burst inside the run, or None."""
        if self.burst_fps is None or self.burst_duration_s == 0:
            return None
        start = min(self.burst_start_s, self.duration_s)
        return start, min(self.duration_s, start + self.burst_duration_s)

    def resolution(self, stream: int, t: float) -> Resolution:
        """The size camera `stream` sends at `t` seconds."""
        current = self.resolutions[stream % len(self.resolutions)]
        for switch in sorted(self.switches, key=lambda s: s.at_s):
            if t >= switch.at_s:
                current = switch.resolution
        return current

    def segments(self, stream: int | None = None) -> list[tuple[float, float, float]]:
        """(start, end, fps) pieces of the run, in order (for `stream`, its own rate if it has one)."""
        own = [r.fps for r in self.stream_rates if r.stream == stream]
        if own:
            return [(0.0, self.duration_s, own[-1])]
        window = self.burst_window
        if window is None:
            return [(0.0, self.duration_s, self.fps)]
        start, end = window
        pieces = [(0.0, start, self.fps), (start, end, self.burst_fps), (end, self.duration_s, self.fps)]
        return [p for p in pieces if p[1] > p[0]]


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request's send time, `t` seconds after the start."""

    t: float
    stream: int
    frame_id: int
    resolution: Resolution


def arrivals(plan: Plan) -> list[Arrival]:
    """Every request of the run, sorted by send time.

    Each camera sends at its own rate, phase-shifted by `stream / streams` of a period so cameras
    do not all fire on the same instant. Times come from an index (`start + (k + phase) * period`),
    not a running sum, so a long run does not drift: a piece of `L` seconds at `F` fps holds
    exactly `ceil(L * F / clip - phase)` requests per camera.
    """
    out: list[Arrival] = []
    for stream in range(plan.streams):
        phase = stream / plan.streams
        frame_id = 0
        for start, end, fps in plan.segments(stream):
            period = plan.clip / fps
            count = max(0, math.ceil((end - start) / period - phase - 1e-9))
            for k in range(count):
                t = start + (k + phase) * period
                out.append(Arrival(t, stream, frame_id, plan.resolution(stream, t)))
                frame_id += plan.clip
    out.sort(key=lambda a: (a.t, a.stream))
    return out


def offered_frames(plan: Plan, schedule: Sequence[Arrival]) -> int:
    """Frames the schedule offers (requests x clip)."""
    return len(schedule) * plan.clip
