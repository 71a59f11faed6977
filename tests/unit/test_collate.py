import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from handler.clip import Meta
from handler.collate import Normalizer, collate
from handler.config import Normalize
from handler.layout import LetterboxLayout, PadLayout, letterbox_size

sizes = st.tuples(st.integers(1, 300), st.integers(1, 300))


@settings(max_examples=60, deadline=None)
@given(st.lists(sizes, min_size=1, max_size=12), st.integers(1, 64), st.integers(0, 4))
def test_pad_then_crop_is_the_identity(frame_sizes, divisor, extra_rows):
    rng = np.random.default_rng(len(frame_sizes))
    frames = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in frame_sizes]
    layout = PadLayout(divisor, static_batch=len(frames) + extra_rows)
    slot = tuple(max(d) for d in zip(*(layout.slot(h, w) for h, w in frame_sizes)))
    batch = collate(frames, layout.place(slot, frame_sizes))
    assert batch.tensor.shape == (len(frames) + extra_rows, *slot, 3)
    for i, frame in enumerate(frames):
        h, w = frame.shape[:2]
        np.testing.assert_array_equal(batch.tensor[i, :h, :w].numpy(), frame)
        assert not batch.tensor[i, h:].any() and not batch.tensor[i, :, w:].any()
    assert not batch.tensor[len(frames):].any()
    valid = sum(h * w for h, w in frame_sizes)
    total = (len(frames) + extra_rows) * slot[0] * slot[1]
    assert (batch.placement.tensor_pixels, batch.placement.padded_pixels) == (total, total - valid)


def test_collate_reuses_a_dirty_buffer_and_converts_into_float():
    frames = [np.full((3, 4, 3), 7, np.uint8)]
    placement = PadLayout(8, static_batch=2).place((8, 8), [(3, 4)])
    out = torch.full((2, 8, 8, 3), 255, dtype=torch.uint8)
    batch = collate(frames, placement, out=out)
    assert batch.tensor.data_ptr() == out.data_ptr()
    assert int(batch.tensor.sum()) == 7 * 3 * 4 * 3
    floats = torch.full((2, 8, 8, 3), -1.0)
    assert float(collate(frames, placement, out=floats).tensor.sum()) == 7.0 * 3 * 4 * 3


def test_collate_refuses_a_frame_its_placement_does_not_expect():
    placement = LetterboxLayout((16, 16)).place((16, 16), [(32, 64)])
    with pytest.raises(ValueError, match=r"frame of \(32, 64\) does not match its placement \(8, 16\)"):
        collate([np.zeros((32, 64, 3), np.uint8)], placement)


@given(st.integers(1, 4000), st.integers(1, 4000), sizes)
def test_letterbox_keeps_aspect_and_fits(h, w, target):
    nh, nw = letterbox_size(h, w, target)
    assert 1 <= nh <= target[0] and 1 <= nw <= target[1]
    assert nh == target[0] or nw == target[1]
    assert abs(nh / nw - h / w) <= max(h / w, 1) * (1 / nw + 1 / nh) + 1e-9


def test_normalisation_values():
    normalize = Normalize(scale=1 / 255, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    pixels = torch.tensor([[[[0, 128, 255], [255, 0, 51]]]], dtype=torch.uint8)  # [1, 1, 2, 3]
    x = Normalizer(normalize, torch.device("cpu"))(pixels)
    assert x.shape == (1, 3, 1, 2) and x.dtype == torch.float32
    assert x.is_contiguous(memory_format=torch.channels_last)
    expected = [[(0 / 255 - 0.485) / 0.229, (255 / 255 - 0.485) / 0.229],
                [(128 / 255 - 0.456) / 0.224, (0 / 255 - 0.456) / 0.224],
                [(255 / 255 - 0.406) / 0.225, (51 / 255 - 0.406) / 0.225]]
    np.testing.assert_allclose(x[0, :, 0, :].numpy(), np.array(expected), rtol=0, atol=1e-6)
    same = Normalizer(Normalize(), torch.device("cpu"))(pixels)
    assert same[0, :, 0, :].tolist() == [[0.0, 255.0], [128.0, 0.0], [255.0, 51.0]]


def test_a_deferred_jpeg_is_decoded_straight_into_a_full_width_uint8_slot(monkeypatch):
    from handler import jpeg
    from handler.config import HandlerConfig
    from handler.frames import decode
    from tests import support

    body = support.jpeg(support.frame(40, 64, 3))
    [frame] = decode(body, "image/jpeg", Meta(), HandlerConfig(), lazy=True).frames
    assert frame.shape == (40, 64, 3) and not isinstance(frame, np.ndarray)
    monkeypatch.setattr(jpeg, "decode", lambda *a: pytest.fail("decoded to an array, then copied"))
    batch = collate([frame], PadLayout(32).place((64, 64), [(40, 64)]))
    np.testing.assert_array_equal(batch.tensor[0, :40, :64].numpy(), support.decoded(body))
    assert not batch.tensor[0, 40:].any() and batch.failed == {}
