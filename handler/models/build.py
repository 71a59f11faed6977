"""Builds the demo models' files: `python -m handler.models.build OUT_DIR`."""

from __future__ import annotations

import argparse
import pathlib

import torch

from handler.models import fixed_batch_cnn, frame_quality


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir", type=pathlib.Path)
    out = parser.parse_args().out_dir
    out.mkdir(parents=True, exist_ok=True)
    frame_quality.build().save(str(out / "frame_quality.pt"))
    torch.export.save(fixed_batch_cnn.build(), str(out / "fixed_batch_cnn.pt2"))


if __name__ == "__main__":
    main()
