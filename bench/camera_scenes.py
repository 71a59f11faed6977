"""The street scenes `bench.cameras` plays, made in code (numpy) and encoded by the ffmpeg CLI.

A fixed camera over a street: a static background with fine texture, sensor noise (temporal,
on luma), a clock overlay ticking every second (top left: `CLOCK`), a tree whose leaves sway
(top right: `BRANCH`), two lighting steps (the scene at 60% from 33% to 73% of the clip, within a
segment: a cloud) and movers crossing the street: present 10% of the clip (`quiet`: one car), 50%
(`busy`: two cyclists) or all of it (`crowd`: four pedestrians, always in view). Each clip is H.264 at a
camera's bitrate (CBR-like, 4 Mb/s at 1080p, 2 Mb/s at 720p: compression artefacts), a key frame a
second, no B-frames, MPEG-TS; movers, light and tree end where they start (clips of whole 5 s), so
a clip loops without a jump but for the clock. Made once per scene, size and length, cached (`clip`).
"""

from __future__ import annotations

import math
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

FPS = 15
VERSION = 4  # bump when a frame changes: the cached clips' names carry it
RESOLUTIONS = {"1080p": (1920, 1080), "720p": (1280, 720)}
BITRATES = {"1080p": "4M", "720p": "2M"}
#: The overlays' areas (polygons, fractions of the frame): the camera list's `motion: {mask: [...]}`.
CLOCK = [[0.0, 0.0], [0.36, 0.0], [0.36, 0.08], [0.0, 0.08]]
BRANCH = [[0.7, 0.0], [1.0, 0.0], [1.0, 0.42], [0.7, 0.42]]
MASK = [CLOCK, BRANCH]
NOISE_SIGMA = 2.5  # luma levels
DARK = (0.33, 0.73, 77)  # the lighting step: from, to (fractions of the clip, mid-segment), gain in 128ths (60%)
#: The tree's leaf clusters: rest centre (fractions of the frame) and phase.
LEAVES = [(0.76 + 0.04 * (k % 5), 0.08 + 0.07 * (k // 5) + 0.02 * (k % 2), k * 0.9) for k in range(15)]


@dataclass(frozen=True, slots=True)
class Mover:
    """A box crossing the frame: in view from `start` for `length` (fractions of the clip, wrapping)."""

    start: float
    length: float
    bottom: float  # its bottom edge, fraction of the height
    size: tuple[float, float]  # width, height, fractions of the frame
    colour: tuple[int, int, int]
    leftwards: bool = False

    def box(self, u: float, width: int, height: int) -> tuple[int, int, int, int] | None:
        """(x1, y1, x2, y2) in pixels at clip fraction `u`, None when not in view."""
        p = ((u - self.start) % 1.0) / self.length
        if p >= 1.0:
            return None
        w, h = round(self.size[0] * width), round(self.size[1] * height)
        x = round(-w + p * (width + w))
        x = width - w - x if self.leftwards else x
        y2 = round(self.bottom * height)
        return x, y2 - h, x + w, y2


_CAR, _BIKE, _WALKER = (0.16, 0.12), (0.05, 0.16), (0.04, 0.2)
#: Movers' colours stand out of the road by 40 luma levels or more (a grey road hides a car of its own luma).
SCENES: dict[str, tuple[Mover, ...]] = {
    "quiet": (Mover(0.45, 0.1, 0.86, _CAR, (215, 215, 225)),),
    "busy": (Mover(0.05, 0.25, 0.8, _BIKE, (90, 140, 230)),
             Mover(0.55, 0.25, 0.92, _BIKE, (230, 200, 60), leftwards=True)),
    "crowd": tuple(Mover(k / 4, 1.0, 0.7 + 0.08 * k, _WALKER, c, leftwards=k % 2 == 1)
                   for k, c in enumerate([(220, 80, 80), (60, 190, 90), (235, 235, 235), (25, 25, 30)])),
}

_GLYPHS = {"0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
           "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
           "8": "111101111101111", "9": "111101111001111", "-": "000000111000000", ":": "000010000010000",
           " ": "000000000000000"}


def text_bitmap(text: str, scale: int) -> np.ndarray:
    """`text` in a 3x5 pixel font, each font pixel `scale` pixels: `[5 * scale, 4 * len * scale]` bool."""
    cells = [np.array([int(b) for b in _GLYPHS[c]], dtype=bool).reshape(5, 3) for c in text]
    row = np.concatenate([np.pad(g, ((0, 0), (0, 1))) for g in cells], axis=1)
    return np.kron(row, np.ones((scale, scale), dtype=bool))


@cache
def background(width: int, height: int) -> np.ndarray:
    """The static street, `[height, width, 3]` int16: sky, buildings, pavement, road, markings, grain."""
    rng = np.random.default_rng(7)
    ys = np.linspace(0, 1, height)[:, None, None]
    out = np.broadcast_to(np.where(ys < 0.5, 170 + 40 * ys, 95 - 20 * ys), (height, width, 1)).repeat(3, 2)
    out = out * np.array([0.95, 1.0, 1.08])
    for k in range(9):  # buildings
        x1, w, top = int(k * width / 9), int(width / 9 * 0.9), 0.12 + 0.25 * ((k * 0.618) % 1)
        out[int(top * height):int(0.52 * height), x1:x1 + w] = 60 + 90 * ((k * 0.382) % 1)
    out[int(0.52 * height):int(0.6 * height)] = 120  # pavement
    dash = (np.arange(width) // (width // 16)) % 2 == 0
    out[int(0.79 * height):int(0.8 * height), dash] = 200  # lane markings
    grain = rng.normal(0, 5, (height, width))[:, :, None]
    return np.clip(out + grain, 0, 255).astype(np.int16)


def render(scene: str, width: int, height: int, n: int, frames: int, noise: np.random.Generator | None) -> np.ndarray:
    """Frame `n` of `frames` (the clip) of `scene`, `[height, width, 3]` uint8 RGB; no noise without `noise`."""
    u, t = n / frames, n / FPS
    out = background(width, height).copy()
    trunk_x = int(0.93 * width)
    out[:int(0.5 * height), trunk_x:trunk_x + max(2, width // 80)] = (70, 50, 35)
    r = max(2, round(0.035 * height))
    yy, xx = np.mgrid[-r:r + 1, -r:r + 1]
    disc = yy ** 2 + xx ** 2 <= r * r
    for cx, cy, phase in LEAVES:  # sway: 1.2% of the width, a 2.5 s period (a clip of whole 5 s loops smoothly)
        x = round((cx + 0.012 * math.sin(2 * math.pi * t / 2.5 + phase)) * width)
        y = round(cy * height)
        out[y - r:y + r + 1, x - r:x + r + 1][disc] = (40, 90 + int(20 * math.sin(phase)), 40)
    for mover in SCENES[scene]:
        box = mover.box(u, width, height)
        if box is not None:
            x1, y1, x2, y2 = box
            out[y1:y2, max(0, x1):max(0, x2)] = mover.colour
            out[y1:y1 + (y2 - y1) // 5, max(0, x1):max(0, x2)] = (60, 45, 40)  # a darker top: a head, a roof
    if DARK[0] <= u < DARK[1]:
        out = (out * DARK[2]) >> 7
    if noise is not None:
        out += np.rint(noise.normal(0, NOISE_SIGMA, (height, width))).astype(np.int16)[:, :, None]
    scale = max(2, height // 135)
    seconds = int(t)
    glyphs = text_bitmap(f"2025-06-01 12:{seconds // 60:02d}:{seconds % 60:02d}", scale)
    x0, y0 = round(0.02 * width), round(0.02 * height)
    out[y0:y0 + glyphs.shape[0], x0:x0 + glyphs.shape[1]][glyphs] = 235
    return np.clip(out, 0, 255).astype(np.uint8)


def presence(scene: str, frames: int) -> float:
    """The fraction of the clip's frames with a mover in view."""
    width, height = RESOLUTIONS["720p"]
    return sum(any(m.box(n / frames, width, height) is not None for m in SCENES[scene])
               for n in range(frames)) / frames


def clip(cache_dir: Path, scene: str, resolution: str, seconds: int) -> Path:
    """The scene's clip (H.264 MPEG-TS), made once into `cache_dir` and reused."""
    from tests.videos import ffmpeg

    out = cache_dir / f"{scene}-{resolution}-{seconds}s-v{VERSION}.ts"
    if out.exists():
        return out
    cache_dir.mkdir(parents=True, exist_ok=True)
    width, height = RESOLUTIONS[resolution]
    rate = BITRATES[resolution]
    part = out.with_suffix(".part")
    encoder = subprocess.Popen([ffmpeg(), "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s",
                                f"{width}x{height}", "-r", str(FPS), "-i", "-", "-c:v", "libx264", "-preset", "veryfast",
                                "-profile:v", "main", "-b:v", rate, "-maxrate", rate, "-bufsize", rate, "-g", str(FPS),
                                "-keyint_min", str(FPS), "-sc_threshold", "0", "-bf", "0", "-pix_fmt", "yuv420p",
                                "-f", "mpegts", str(part)], stdin=subprocess.PIPE)
    assert encoder.stdin is not None
    noise = np.random.default_rng(11)
    frames = seconds * FPS
    for n in range(frames):
        encoder.stdin.write(render(scene, width, height, n, frames, noise).tobytes())
    encoder.stdin.close()
    if encoder.wait() != 0:
        raise RuntimeError(f"ffmpeg could not encode {out.name}")
    part.replace(out)
    return out


def looped(source: Path, out: Path, seconds: float, offset: int) -> Path:
    """`source` played from `offset` s (a key frame) and looped to `seconds`, copied (no re-encoding)."""
    from tests.videos import ffmpeg

    subprocess.run([ffmpeg(), "-v", "error", "-y", "-stream_loop", "-1", "-ss", str(offset), "-i", str(source),
                    "-t", f"{seconds:g}", "-c", "copy", "-f", "mpegts", str(out)], check=True)
    return out
