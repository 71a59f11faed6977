"""A scripted scene for the tracking tests: a red and a blue box (the planted detector's classes
0 and 2) sliding across the frame on known paths, as H.264 in MPEG-TS (the ffmpeg CLI), with a
resolution change part-way. Positions are fractions of the frame, so the paths, the zone and the
line stay put whatever the size.

Red's centre holds at x = 0.15 for 2 s, then goes to 0.85 in 3 s, holds 1 s, comes back in 3 s,
holds 1 s (a period of 8 s), twice, then holds at 0.15 (300 frames, 20 s, in all); blue mirrors
it (x = 1 - red's x), lower down. The zone
`door` is x from 0.02 to 0.3 (red starts in it); the line `gate` is x = 0.5, top to bottom, for
red only. Crossing it left to right is `in` (supervision's LineZone, see ingest.counting).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

from tests.videos import ffmpeg

FPS = 15
LEAD, MOVE, HOLD = 30, 45, 15  # frames
PERIOD = 2 * (MOVE + HOLD)
BOX = (0.1, 0.15)  # width, height of each box, in fractions of the frame
ROWS = {"red": 0.3, "blue": 0.75}
COLOURS = {"red": (255, 0, 0), "blue": (0, 0, 255)}
BACKGROUND = 40

DOOR = [[0.02, 0.05], [0.3, 0.05], [0.3, 0.95], [0.02, 0.95]]
GATE = {"from": [0.5, 0], "to": [0.5, 1]}


def red_x(n: int) -> float:
    """Red's centre x (fraction) at frame `n`."""
    if n < LEAD or n >= LEAD + 2 * PERIOD:
        return 0.15
    t = (n - LEAD) % PERIOD
    if t < MOVE:
        return 0.15 + 0.7 * t / MOVE
    if t < MOVE + HOLD:
        return 0.85
    if t < 2 * MOVE + HOLD:
        return 0.85 - 0.7 * (t - MOVE - HOLD) / MOVE
    return 0.15


def centre(name: str, n: int) -> tuple[float, float]:
    x = red_x(n)
    return (x if name == "red" else 1 - x), ROWS[name]


def frame(width: int, height: int, n: int) -> np.ndarray:
    """Frame `n` as `[height, width, 3]` RGB."""
    out = np.full((height, width, 3), BACKGROUND, dtype=np.uint8)
    for name in ("red", "blue"):
        cx, cy = centre(name, n)
        x1, x2 = round((cx - BOX[0] / 2) * width), round((cx + BOX[0] / 2) * width)
        y1, y2 = round((cy - BOX[1] / 2) * height), round((cy + BOX[1] / 2) * height)
        out[y1:y2, x1:x2] = COLOURS[name]
    return out


def make(path: Path, parts: list[tuple[int, int, int]]) -> Path:
    """The scene as one MPEG-TS file: `parts` of (width, height, frames), frames numbered on
    across parts, a key frame every second (each part's frames a multiple of FPS)."""
    start = 0
    chunks = []
    for width, height, frames in parts:
        raw = b"".join(frame(width, height, n).tobytes() for n in range(start, start + frames))
        chunks.append(subprocess.run(
            [ffmpeg(), "-v", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}",
             "-r", str(FPS), "-i", "-", "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p",
             "-g", str(FPS), "-bf", "0", "-output_ts_offset", f"{start / FPS}", "-f", "mpegts", "-"],
            input=raw, check=True, capture_output=True).stdout)
        start += frames
    path.write_bytes(b"".join(chunks))
    return path
