"""Makes `data/demo.ts`, the live view's demo clip: the astronaut photograph (data/images/,
public domain) panned and zoomed, 8 s of 640x360 H.264 at 15 fps in MPEG-TS, a key frame every
second. `serve.sh` runs it once; `video-ingest --camera demo=data/demo.ts --loop --track
--model face_detector --web 127.0.0.1:8095` then shows the tracked face (docs/ingest.md).

    python scripts/demo_clip.py [OUT]
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import av
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
SIZE = (640, 360)
FPS = 15
SECONDS = 8


def window(t: float, width: int, height: int) -> tuple[float, float, float, float]:
    """The crop of the photograph at `t` (0 to 1): a 16:9 window that pans left to right and back
    while it zooms in and out, the face always inside it."""
    zoom = 0.62 + 0.3 * (0.5 + 0.5 * math.cos(2 * math.pi * t))  # of the width: 0.62 to 0.92
    w = width * zoom
    h = w * SIZE[1] / SIZE[0]
    x = (width - w) * (0.5 - 0.5 * math.cos(2 * math.pi * t)) * 0.9
    y = min(height - h, height * 0.02)
    return x, y, x + w, y + h


def make(out: Path) -> Path:
    photo = Image.open(ROOT / "data" / "images" / "astronaut.png").convert("RGB")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.part")
    with av.open(str(partial), "w", format="mpegts") as container:
        stream = container.add_stream("libx264", rate=FPS, options={"g": str(FPS), "bf": "0", "preset": "veryfast"})
        stream.width, stream.height, stream.pix_fmt = *SIZE, "yuv420p"
        frames = FPS * SECONDS
        for n in range(frames):
            crop = photo.resize(SIZE, Image.Resampling.BILINEAR, box=window(n / frames, *photo.size))
            for packet in stream.encode(av.VideoFrame.from_image(crop)):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    partial.replace(out)
    return out


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "data" / "demo.ts"
    print(f"made {make(target)}")
