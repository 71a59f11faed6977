"""`face_detector` against facenet-pytorch's own `MTCNN(keep_all=True).detect(img, landmarks=True)`.

Runs in .venv-vision (`scripts/vision.sh`: torch + torchvision, which facenet-pytorch's
`detect_face` imports), with the wheel installed without its pins.

Our scripted model sees every frame in one padded batch of mixed sizes; facenet-pytorch sees each
image alone. Same faces, scores to 1e-3 relative, boxes and landmarks to 0.5 px.
"""

from __future__ import annotations

import importlib
import importlib.util
import pathlib
import sys
import types
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from PIL import Image

from handler.models import face_detector

IMAGES = pathlib.Path(__file__).resolve().parents[2] / "data" / "images"
THRESHOLDS = {"default": (0.6, 0.7, 0.7), "loose": (0.3, 0.4, 0.4)}  # loose: more boxes through every NMS
SCORE_RTOL = 1e-3
PIXEL_ATOL = 0.5


@pytest.fixture(scope="module")
def mtcnn_class() -> Iterator[type]:
    """`facenet_pytorch.models.mtcnn.MTCNN`, loaded without the package's `__init__`.

    That `__init__` imports InceptionResnetV1, whose weight download needs `requests`: one of the
    pins this project never installs. MTCNN itself needs torch, torchvision, numpy and Pillow only.
    """
    spec = importlib.util.find_spec("facenet_pytorch")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"facenet-pytorch is not installed here: {sys.executable} -m {face_detector.INSTALL}")
    before = set(sys.modules)
    package = types.ModuleType("facenet_pytorch")
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = spec
    sys.modules["facenet_pytorch"] = package
    try:
        yield importlib.import_module("facenet_pytorch.models.mtcnn").MTCNN
    finally:
        for name in set(sys.modules) - before:
            if name.startswith("facenet_pytorch"):
                del sys.modules[name]


def _mosaic(astronaut: Image.Image) -> Image.Image:
    """Five faces at several scales on a grey 640x480 canvas (as tests/unit/test_face_detector.py)."""
    canvas = Image.new("RGB", (640, 480), (90, 90, 90))
    for left, top, width, height in ((0, 0, 320, 320), (330, 10, 200, 200), (30, 330, 140, 140), (540, 20, 96, 96)):
        canvas.paste(astronaut.resize((width, height), Image.BICUBIC), (left, top))
    canvas.paste(astronaut.crop((150, 40, 300, 200)), (340, 250))
    return canvas


def _frames() -> dict[str, Image.Image]:
    """Every data/images/*.png, then resized, cropped and composed variants."""
    frames = {path.stem: Image.open(path).convert("RGB") for path in sorted(IMAGES.glob("*.png"))}
    astronaut, coffee = frames["astronaut"], frames["coffee"]
    frames["astronaut_300"] = astronaut.resize((300, 300), Image.BICUBIC)
    frames["astronaut_768x640"] = astronaut.resize((768, 640), Image.BILINEAR)
    frames["astronaut_crop"] = astronaut.crop((100, 30, 400, 260))
    frames["coffee_300x200"] = coffee.resize((300, 200), Image.BICUBIC)
    frames["chelsea_crop"] = frames["chelsea"].crop((50, 20, 400, 280))
    frames["mosaic"] = _mosaic(astronaut)
    return frames


def _batch(images: list[Image.Image], divisor: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """One padded batch, as the handler builds it: top-left corners, slots rounded up, noise around."""
    height = -(-max(image.height for image in images) // divisor) * divisor
    width = -(-max(image.width for image in images) // divisor) * divisor
    x = torch.rand(len(images), 3, height, width, generator=torch.Generator().manual_seed(0)) * 255
    for i, image in enumerate(images):
        x[i, :, :image.height, :image.width] = torch.from_numpy(np.array(image)).permute(2, 0, 1).float()
    return x, torch.tensor([[image.height, image.width] for image in images])


def _reference(mtcnn: object, image: Image.Image) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """facenet-pytorch's boxes `[F, 4]`, scores `[F]`, landmarks `[F, 5, 2]` (float64; F may be 0)."""
    boxes, probs, points = mtcnn.detect(image, landmarks=True)  # type: ignore[attr-defined]
    if boxes is None:
        return np.zeros((0, 4)), np.zeros(0), np.zeros((0, 5, 2))
    return boxes.astype(np.float64), probs.astype(np.float64), points.astype(np.float64)


@pytest.mark.parametrize("thresholds", list(THRESHOLDS), ids=list(THRESHOLDS))
def test_the_scripted_model_agrees_with_facenet_pytorch(mtcnn_class, thresholds):
    frames = _frames()
    base = face_detector.pretrained()
    model = torch.jit.script(face_detector.FaceDetector(base.pnet, base.rnet, base.onet,
                                                        thresholds=THRESHOLDS[thresholds]).eval())
    mtcnn = mtcnn_class(keep_all=True, device="cpu", thresholds=list(THRESHOLDS[thresholds]))
    with torch.no_grad():
        out = model(*_batch(list(frames.values()))).double().numpy()
    worst = {"box": 0.0, "score": 0.0, "landmark": 0.0}
    faces = 0
    for rows, (name, image) in zip(out, frames.items()):
        boxes, scores, points = _reference(mtcnn, image)
        ours = rows[rows[:, 4] > 0]
        assert ours.shape[0] == scores.shape[0], f"{name}: {ours.shape[0]} faces, facenet-pytorch {scores.shape[0]}"
        assert np.all(ours[:-1, 4] >= ours[1:, 4]), name
        assert np.all(rows[ours.shape[0]:] == 0), name
        # facenet-pytorch orders by area (select_largest): pair each of our rows with its nearest box.
        match = [int(np.abs(boxes - row[:4]).max(axis=1).argmin()) for row in ours]
        assert sorted(match) == list(range(len(match))), f"{name}: rows {match} do not pair one to one"
        for row, k in zip(ours, match):
            worst["box"] = max(worst["box"], float(np.abs(row[:4] - boxes[k]).max()))
            worst["score"] = max(worst["score"], float(abs(row[4] - scores[k]) / scores[k]))
            worst["landmark"] = max(worst["landmark"], float(np.abs(row[6:].reshape(5, 3)[:, :2] - points[k]).max()))
            assert row[5] == face_detector.FACE and np.all(row[8::3] == 1.0), name
        faces += ours.shape[0]
    print(f"{thresholds}: {faces} faces in {len(frames)} frames; worst |box| {worst['box']:.2e} px, "
          f"relative score {worst['score']:.2e}, |landmark| {worst['landmark']:.2e} px")
    assert faces >= 9  # astronaut, her 300, 768x640 and crop variants, the mosaic's five: not a vacuous pass
    assert worst["box"] <= PIXEL_ATOL and worst["landmark"] <= PIXEL_ATOL and worst["score"] <= SCORE_RTOL
