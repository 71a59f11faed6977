"""Builds the demo models' files: `python -m handler.models.build OUT_DIR`."""

from __future__ import annotations

import argparse
import pathlib

import torch

from handler.models import face_detector, fixed_batch_cnn, frame_quality


def build_all(out: pathlib.Path) -> None:
    """Writes `frame_quality.pt` and `face_detector.pt` (TorchScript) and `fixed_batch_cnn.pt2`
    (torch.export) to `out`."""
    out.mkdir(parents=True, exist_ok=True)
    frame_quality.build().save(str(out / "frame_quality.pt"))
    torch.export.save(fixed_batch_cnn.build(), str(out / "fixed_batch_cnn.pt2"))
    face_detector.build().save(str(out / "face_detector.pt"))


def main() -> None:
    """`python -m handler.models.build OUT_DIR`: writes every demo model's file into OUT_DIR."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir", type=pathlib.Path)
    build_all(parser.parse_args().out_dir)


if __name__ == "__main__":
    main()
