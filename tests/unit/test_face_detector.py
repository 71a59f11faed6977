"""`face_detector` (handler/models/face_detector.py): MTCNN with facenet-pytorch's weights, scripted.

Needs the wheel's weights (`pip install --no-deps facenet-pytorch==2.6.0`, which scripts/setup.sh
does); without them these tests fail with that command. Agreement with facenet-pytorch itself is
checked in tests/vision (it needs torchvision).
"""

from __future__ import annotations

import importlib.util
import io
import pathlib
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from handler.models import face_detector

IMAGES = pathlib.Path(__file__).resolve().parents[2] / "data" / "images"

# Measured on astronaut.png (512x512, Eileen Collins' portrait), torch 2.13 CPU; facenet-pytorch
# 2.6.0 gives the same to 1e-4 px (tests/vision).
ASTRONAUT_BOX = (181.05, 62.16, 267.75, 172.05)
ASTRONAUT_LANDMARKS = ((205.01, 101.73), (246.76, 103.71), (224.67, 128.97), (201.72, 139.25), (245.27, 141.86))

# A grey 640x480 canvas with five faces pasted at several scales, (left, top, width, height): the
# astronaut resized to each tile, but the 150x160 tile is her face cropped at full scale.
MOSAIC_TILES = ((0, 0, 320, 320), (330, 10, 200, 200), (340, 250, 150, 160), (30, 330, 140, 140), (540, 20, 96, 96))


@pytest.fixture(scope="module")
def model() -> torch.jit.ScriptModule:
    return face_detector.build()  # no facenet-pytorch: fails with the install command


def _image(name: str) -> Image.Image:
    return Image.open(IMAGES / name).convert("RGB")


def _pixels(image: Image.Image) -> torch.Tensor:
    """`Tensor[3, h, w] float32` RGB 0..255."""
    return torch.from_numpy(np.array(image)).permute(2, 0, 1).float()


def _mosaic() -> Image.Image:
    astronaut = _image("astronaut.png")
    canvas = Image.new("RGB", (640, 480), (90, 90, 90))
    for left, top, width, height in MOSAIC_TILES:
        tile = (astronaut.crop((150, 40, 300, 200)) if (width, height) == (150, 160)
                else astronaut.resize((width, height), Image.BICUBIC))
        canvas.paste(tile, (left, top))
    return canvas


def _batch(frames: list[torch.Tensor], slot: tuple[int, int] | None = None,
           seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Frames in the top-left corner of equal slots, noise in the padding: `(x, sizes)`."""
    height = slot[0] if slot else max(f.shape[1] for f in frames)
    width = slot[1] if slot else max(f.shape[2] for f in frames)
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(len(frames), 3, height, width, generator=generator) * 255
    for i, frame in enumerate(frames):
        x[i, :, :frame.shape[1], :frame.shape[2]] = frame
    return x, torch.tensor([[f.shape[1], f.shape[2]] for f in frames])


def _faces(rows: torch.Tensor) -> torch.Tensor:
    """The rows of one frame's answer that hold a face."""
    return rows[rows[:, 4] > 0]


def test_the_weights_are_the_wheels_state_dicts():
    data = face_detector.weights_dir()
    assert data.name == "data" and data.parent.name == "facenet_pytorch"
    nets = {"pnet": face_detector.PNet(), "rnet": face_detector.RNet(), "onet": face_detector.ONet()}
    for name, net in nets.items():
        state = torch.load(data / f"{name}.pt", map_location="cpu", weights_only=True)
        assert list(state) == list(net.state_dict()), name
        net.load_state_dict(state)  # strict: every key and shape


def test_a_missing_wheel_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: None)
    with pytest.raises(ModuleNotFoundError, match=re.escape("pip install --no-deps facenet-pytorch==2.6.0")):
        face_detector.build()


@pytest.mark.filterwarnings("ignore:`torch.jit.(save|load)` is deprecated:DeprecationWarning")
def test_it_scripts_and_survives_a_save_and_load(model):
    assert isinstance(model, torch.jit.ScriptModule)
    buffer = io.BytesIO()
    torch.jit.save(model, buffer)
    buffer.seek(0)
    loaded = torch.jit.load(buffer)
    x, sizes = _batch([_pixels(_image("astronaut.png"))])
    with torch.no_grad():
        assert torch.equal(loaded(x, sizes), model(x, sizes))
        assert torch.equal(face_detector.pretrained()(x, sizes), model(x, sizes))


def test_the_astronaut_has_one_face_where_it_is(model):
    x, sizes = _batch([_pixels(_image("astronaut.png"))])
    with torch.no_grad():
        out = model(x, sizes)
    assert out.shape == (1, face_detector.MAX_FACES, face_detector.ROW) and out.dtype == torch.float32
    confident = out[0][out[0, :, 4] > 0.9]
    assert confident.shape[0] == 1
    face = confident[0]
    assert face[:4].tolist() == pytest.approx(ASTRONAUT_BOX, abs=2.0)
    assert face[4].item() > 0.999 and face[5].item() == face_detector.FACE
    points = face[6:].view(5, 3)
    assert points[:, :2].flatten().tolist() == pytest.approx(np.ravel(ASTRONAUT_LANDMARKS).tolist(), abs=2.0)
    assert points[:, 2].tolist() == [1.0] * 5
    count = _faces(out[0]).shape[0]
    assert torch.count_nonzero(out[0, count:]) == 0


def test_a_frames_answer_is_the_same_alone_and_batched(model):
    astronaut = _pixels(_image("astronaut.png"))
    mosaic = _pixels(_mosaic())
    chelsea = _pixels(_image("chelsea.png"))
    with torch.no_grad():
        alone = [model(*_batch([frame]))[0] for frame in (astronaut, mosaic, chelsea)]
        x, sizes = _batch([chelsea, astronaut, mosaic], slot=(544, 672), seed=1)
        batched = model(x, sizes)
        channels_last = model(x.contiguous(memory_format=torch.channels_last), sizes)
    for got in (batched, channels_last):
        assert torch.equal(got[0], alone[2])
        assert torch.equal(got[1], alone[0])
        assert torch.equal(got[2], alone[1])
    assert _faces(alone[0]).shape[0] == 1 and _faces(alone[1]).shape[0] == len(MOSAIC_TILES)


def test_every_face_of_the_mosaic_sorted_then_zero_rows(model):
    x, sizes = _batch([_pixels(_mosaic())])
    with torch.no_grad():
        rows = model(x, sizes)[0]
    faces = _faces(rows)
    assert faces.shape[0] == len(MOSAIC_TILES)
    assert torch.all(faces[:-1, 4] >= faces[1:, 4]) and faces[:, 4].min() > 0.99
    assert torch.count_nonzero(rows[faces.shape[0]:]) == 0
    centres = ((faces[:, 0] + faces[:, 2]) / 2, (faces[:, 1] + faces[:, 3]) / 2)
    for left, top, width, height in MOSAIC_TILES:
        inside = ((centres[0] > left) & (centres[0] < left + width)
                  & (centres[1] > top) & (centres[1] < top + height))
        assert int(inside.sum()) == 1, (left, top)
    # max_faces keeps the best rows.
    top2 = torch.jit.script(face_detector.pretrained(max_faces=2))
    with torch.no_grad():
        assert torch.equal(top2(x, sizes)[0], rows[:2])


def test_empty_tiny_and_oversized_sizes_are_answers(model):
    astronaut = _pixels(_image("astronaut.png"))
    x, _ = _batch([astronaut, astronaut, astronaut])
    sizes = torch.tensor([[0, 0], [19, 512], [900, 900]])  # 900: clamped to the slot
    with torch.no_grad():
        out = model(x, sizes)
        full = model(x[:1], torch.tensor([[512, 512]]))
    assert torch.count_nonzero(out[:2]) == 0
    assert torch.equal(out[2], full[0])


def test_bad_shapes_name_the_shape(model):
    with pytest.raises(torch.jit.Error, match=re.escape("sizes must be [N, 2] = [2, 2], got [3, 2]")):
        model(torch.zeros(2, 3, 32, 32), torch.zeros(3, 2, dtype=torch.int64))
    with pytest.raises(torch.jit.Error, match=re.escape("x must be [N, 3, H, W], got [2, 1, 32, 32]")):
        model(torch.zeros(2, 1, 32, 32), torch.zeros(2, 2, dtype=torch.int64))


def _greedy(boxes: np.ndarray, scores: np.ndarray, threshold: float, over_min: bool) -> list[int]:
    """Box-by-box greedy NMS in float32: torchvision's `nms` loop, or facenet-pytorch's numpy 'Min'."""
    one = np.float32(1.0 if over_min else 0.0)
    x1, y1, x2, y2 = (boxes[:, k] for k in range(4))
    area = (x2 - x1 + one) * (y2 - y1 + one)
    order = list(np.argsort(-scores, kind="stable"))
    keep = []
    while order:
        best, order = order[0], np.array(order[1:], dtype=np.int64)
        keep.append(int(best))
        if order.size == 0:
            break
        w = np.maximum(np.float32(0), np.minimum(x2[best], x2[order]) - np.maximum(x1[best], x1[order]) + one)
        h = np.maximum(np.float32(0), np.minimum(y2[best], y2[order]) - np.maximum(y1[best], y1[order]) + one)
        inter = w * h
        if over_min:
            order = order[inter / np.minimum(area[best], area[order]) <= np.float32(threshold)]
        else:
            with np.errstate(invalid="ignore"):  # 0 / 0 for two boxes of no area: NaN, not above
                order = order[~(inter / (area[best] + area[order] - inter) > np.float32(threshold))]
        order = list(order)
    return keep


_coordinate = st.integers(0, 24).map(lambda v: v / 2)


@settings(max_examples=150, deadline=None)
@given(corners=st.lists(st.tuples(_coordinate, _coordinate, _coordinate, _coordinate), min_size=0, max_size=40),
       scores=st.lists(st.integers(0, 20), min_size=40, max_size=40),
       threshold=st.sampled_from([0.3, 0.5, 0.7]), over_min=st.booleans(), block_size=st.sampled_from([1, 3, 7, 512]))
def test_nms_keeps_what_the_box_by_box_loop_keeps(corners, scores, threshold, over_min, block_size):
    boxes = np.array([(min(a, c), min(b, d), max(a, c), max(b, d)) for a, b, c, d in corners],
                     dtype=np.float32).reshape(-1, 4)
    score = np.array(scores[:len(corners)], dtype=np.float32) / 20  # ties on purpose: the earlier box wins
    kept = face_detector._nms(torch.from_numpy(boxes), torch.from_numpy(score), threshold, over_min, block_size)
    assert kept.tolist() == _greedy(boxes, score, threshold, over_min)
