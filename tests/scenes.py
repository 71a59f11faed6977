"""A scripted scene for the tracking tests: a red and a blue box (the planted detector's classes
0 and 2) sliding across the frame on known paths, as H.264 in MPEG-TS (the ffmpeg CLI), with a
resolution change part-way. Positions are fractions of the frame, so the paths, the zone and the
line stay put whatever the size.

Red's centre holds at x = 0.15 for 2 s, then goes to 0.85 in 3 s, holds 1 s, comes back in 3 s,
holds 1 s (a period of 8 s), twice, then holds at 0.15 (300 frames, 20 s, in all); blue mirrors
it (x = 1 - red's x), lower down. The zone
`door` is x from 0.02 to 0.3 (red starts in it); the line `gate` is x = 0.5, top to bottom, for
red only. Crossing it left to right is `in` (supervision's LineZone, see ingest.analytics.counting).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
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


def make(path: Path, parts: list[tuple[int, int, int]], draw: Callable[[int, int, int], np.ndarray] | None = None) -> Path:
    """The scene as one MPEG-TS file: `parts` of (width, height, frames), frames numbered on
    across parts, a key frame every second (each part's frames a multiple of FPS); `draw`
    (default `frame`) makes frame n at a size."""
    draw = draw or frame
    start = 0
    chunks = []
    for width, height, frames in parts:
        raw = b"".join(draw(width, height, n).tobytes() for n in range(start, start + frames))
        chunks.append(subprocess.run(
            [ffmpeg(), "-v", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}",
             "-r", str(FPS), "-i", "-", "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p",
             "-g", str(FPS), "-bf", "0", "-output_ts_offset", f"{start / FPS}", "-f", "mpegts", "-"],
            input=raw, check=True, capture_output=True).stdout)
        start += frames
    path.write_bytes(b"".join(chunks))
    return path


# A second scene, of a detector's misses (test_tracking's misses test): red walks out of the door,
# across the gate (x = 0.5, for every class) and back, three times; in cycle k the detector misses
# it for MISSES[k] frames in a row while it stands in the door and again while it crosses the gate
# (drawn dark: the planted detector sees only pure colours), the 10-frame miss longer than its
# whole crossing. Then it stands in the door until the end. Blue, lower down, crosses the gate
# once, turning green on the line (a class flip mid-crossing), and stays right of it.
MISSES = (2, 5, 10)
M_HOLD, M_MOVE, M_AWAY = 20, 30, 6  # frames: in the door, from 0.15 to 0.85 (and back), right of the gate
M_CYCLE = M_HOLD + 2 * M_MOVE + M_AWAY
M_FRAMES = 3 * M_CYCLE + 57  # then 3.8 s in the door: 315 frames (whole seconds), 21 s
DARK = {"red": (110, 0, 0), "blue": (0, 0, 110)}


def misses_red(n: int) -> tuple[float, bool]:
    """Red's centre x at frame `n`, and whether the detector sees it."""
    cycle, t = divmod(n, M_CYCLE)
    if cycle >= len(MISSES):
        return 0.15, True
    k = MISSES[cycle]
    if t < M_HOLD:
        return 0.15, not M_HOLD // 2 - k // 2 <= t < M_HOLD // 2 - k // 2 + k
    t -= M_HOLD
    if t < M_MOVE:
        crossing = M_MOVE / 2  # centre on the gate at 0.15 + 0.7 t / M_MOVE = 0.5
        return 0.15 + 0.7 * t / M_MOVE, not crossing - k / 2 <= t < crossing + k / 2
    t -= M_MOVE
    if t < M_AWAY:
        return 0.85, True
    return 0.85 - 0.7 * (t - M_AWAY) / M_MOVE, True


def misses_blue(n: int) -> tuple[float, str]:
    """Blue's centre x at frame `n`, and its colour (blue until its centre passes the gate)."""
    x = 0.35 + 0.3 * min(max(n - 10, 0), M_MOVE) / M_MOVE
    return x, "blue" if x < 0.5 else "green"


def misses_frame(width: int, height: int, n: int) -> np.ndarray:
    """Frame `n` of the misses scene as `[height, width, 3]` RGB."""
    out = np.full((height, width, 3), BACKGROUND, dtype=np.uint8)
    red_x, seen = misses_red(n)
    blue_x, colour = misses_blue(n)
    for cx, cy, rgb in ((red_x, ROWS["red"], COLOURS["red"] if seen else DARK["red"]),
                        (blue_x, ROWS["blue"], (0, 255, 0) if colour == "green" else COLOURS["blue"])):
        x1, x2 = round((cx - BOX[0] / 2) * width), round((cx + BOX[0] / 2) * width)
        y1, y2 = round((cy - BOX[1] / 2) * height), round((cy + BOX[1] / 2) * height)
        out[y1:y2, x1:x2] = rgb
    return out


#: Scene settings a camera list may get wrong, each with the start of the bridge's message after
#: "camera 'NAME': " (test_ingest_cli at start, test_tracking on reload): the shape and the fix.
BAD_SCENES: list[tuple[dict, str]] = [
    ({"zones": [{"name": "door", "polygon": [[0.02, 0.05], [float("nan"), 0.05], [0.3, 0.95]]}]},
     "zone 'door': polygon: [nan, 0.05] is off any frame: write coordinates from 0 to 1 (fractions of the frame) "
     "or from 0 to 16384 (pixels)"),
    ({"lines": [{"name": "gate", "from": [0.5, 0], "to": [float("inf"), 1]}]}, "line 'gate': from/to: [inf, 1] is off any frame"),
    ({"zones": [{"name": "door", "polygon": [[10, 10], [20000, 10], [10, 100]]}]},
     "zone 'door': polygon: [20000, 10] is off any frame"),
    ({"zones": [{"name": "door", "polygon": [[0.5, 0], [100, 200], [150, 20]]}]},
     "zone 'door': polygon: 0.5 is a fraction of the frame but 200 is pixels: write every point of the shape in "
     "fractions (0 to 1) or every one in pixels"),
    ({"zones": [{"name": "door", "polygon": [[0, 0], [0.5, 0.5], [1, 1]]}]},
     "zone 'door': polygon [[0.0, 0.0], [0.5, 0.5], [1.0, 1.0]] has no area (its points are on one line): give "
     "three or more corners that enclose the zone"),
    ({"lines": [{"name": "gate", "from": [0.5, 0.2], "to": [0.5, 0.2]}]},
     "line 'gate': `from` and `to` are the same point: a line of zero length counts nothing; give it two ends"),
    ({"lines": [{"name": "gate", "from": [0.5, 0], "to": [0.5, 1], "anchors": []}]},
     "line 'gate': anchors = []: name at least one of center, bottom_center"),
    ({"lines": [{"name": "gate", "from": [0.5, 0], "to": [0.5, 1], "anchors": ["middle"]}]},
     "line 'gate': anchors = ['middle']: use center, bottom_center, top_center"),
]
