"""Builds the demo models' files: `python -m handler.models.build OUT_DIR`."""

from __future__ import annotations

import argparse
import pathlib

import torch

from handler.models import face_detector, fixed_batch_cnn, frame_quality


def _save_frame_quality(path: pathlib.Path) -> None:
    frame_quality.build().save(str(path))


def _save_fixed_batch_cnn(path: pathlib.Path) -> None:
    torch.export.save(fixed_batch_cnn.build(), str(path))


def _save_face_detector(path: pathlib.Path) -> None:
    face_detector.build().save(str(path))


#: Each demo model's file and what writes it.
FILES = {"frame_quality": ("frame_quality.pt", _save_frame_quality),
         "fixed_batch_cnn": ("fixed_batch_cnn.pt2", _save_fixed_batch_cnn),
         "face_detector": ("face_detector.pt", _save_face_detector)}


def build(name: str, out: pathlib.Path) -> pathlib.Path:
    """Writes demo model `name`'s file (`FILES`) into `out` and returns its path."""
    out.mkdir(parents=True, exist_ok=True)
    file, save = FILES[name]
    save(out / file)
    return out / file


def build_all(out: pathlib.Path) -> None:
    """Writes every demo model's file to `out`: `frame_quality.pt` and `face_detector.pt`
    (TorchScript), `fixed_batch_cnn.pt2` (torch.export)."""
    for name in FILES:
        build(name, out)


def main() -> None:
    """`python -m handler.models.build OUT_DIR`: writes every demo model's file into OUT_DIR."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir", type=pathlib.Path)
    build_all(parser.parse_args().out_dir)


if __name__ == "__main__":
    main()
