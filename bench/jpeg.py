"""`python -m bench.jpeg`: JPEG decoders side by side on 720p and 1080p frames from `data/images/`.

Pillow (the fallback) against the libjpeg-turbo bindings that import here (simplejpeg,
PyTurboJPEG, torchvision's `decode_jpeg`); full size, straight into a reused buffer where the
binding allows it, and the DCT-domain 1/8 downscale a letterbox engine of 128x128 gets. Prints
ms per frame (median of rounds, interleaved); the machine may be shared: compare rows of one run.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
from PIL import Image

from tests import support

Decoder = Callable[[bytes], object]


def decoders() -> dict[str, Decoder]:
    """Name -> decode(body) for every decoder that imports on this machine."""
    out: dict[str, Decoder] = {
        "pillow (BytesIO + np.asarray)": lambda b: np.asarray(Image.open(io.BytesIO(b)).convert("RGB")),
    }
    try:
        import simplejpeg

        out["simplejpeg"] = lambda b: simplejpeg.decode_jpeg(b, "RGB")
        buffers: dict[int, np.ndarray] = {}

        def into(b: bytes) -> object:
            h, w, _, _ = simplejpeg.decode_jpeg_header(b)
            buf = buffers.setdefault(h * w * 3, np.empty(h * w * 3, np.uint8))
            return simplejpeg.decode_jpeg(b, "RGB", buffer=buf)

        out["simplejpeg into a reused buffer"] = into
        out["simplejpeg 1/8 (min 128x128)"] = lambda b: simplejpeg.decode_jpeg(
            b, "RGB", min_height=128, min_width=128)
    except ImportError:
        pass
    try:
        from turbojpeg import TJPF_RGB, TurboJPEG

        turbo = TurboJPEG()
        out["pyturbojpeg"] = lambda b: turbo.decode(b, pixel_format=TJPF_RGB)
    except (ImportError, OSError, RuntimeError) as exc:
        print(f"(pyturbojpeg unavailable: {str(exc).splitlines()[0]})", file=sys.stderr)
    try:
        import torch
        from torchvision.io import decode_jpeg

        out["torchvision decode_jpeg"] = lambda b: decode_jpeg(torch.frombuffer(bytearray(b), dtype=torch.uint8))
    except ImportError:
        print("(torchvision unavailable; torchcodec decodes video, not JPEG)", file=sys.stderr)
    return out


def bench(rounds: int = 7, per_round: int = 10) -> list[tuple[str, str, float]]:
    """(resolution, decoder, median ms per frame) for 720p and 1080p JPEGs (quality 85)."""
    bodies = {name: [support.jpeg(support.frame(h, w, seed)) for seed in range(3)]
              for name, (h, w) in (("720p", (720, 1280)), ("1080p", (1080, 1920)))}
    found = decoders()
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):  # interleaved, so load on a shared machine hits every decoder alike
        for res, items in bodies.items():
            for name, fn in found.items():
                fn(items[0])
                start = time.perf_counter()
                for i in range(per_round):
                    fn(items[i % len(items)])
                times.setdefault((res, name), []).append((time.perf_counter() - start) / per_round * 1000)
    return [(res, name, statistics.median(t)) for (res, name), t in times.items()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.jpeg", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    rows = bench(args.rounds)
    base = {res: ms for res, name, ms in rows if name.startswith("pillow")}
    print(f"{'frame':<6} {'decoder':<34} {'ms/frame':>9} {'vs pillow':>10}")
    for res, name, ms in rows:
        print(f"{res:<6} {name:<34} {ms:>9.2f} {base[res] / ms:>9.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
