import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from handler.collate import bucket, collate, letterbox, letterbox_size, unpad

sizes = st.tuples(st.integers(1, 300), st.integers(1, 300))


@settings(max_examples=60, deadline=None)
@given(st.lists(sizes, min_size=1, max_size=12), st.integers(1, 64), st.integers(0, 4))
def test_pad_then_crop_is_the_identity(frame_sizes, divisor, extra_rows):
    rng = np.random.default_rng(len(frame_sizes))
    frames = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in frame_sizes]
    shape = tuple(max(d) for d in zip(*(bucket(h, w, divisor) for h, w in frame_sizes)))
    batch = collate(frames, shape, rows=len(frames) + extra_rows)
    assert batch.tensor.shape == (len(frames) + extra_rows, *shape, 3)
    for i, frame in enumerate(frames):
        np.testing.assert_array_equal(batch[i].numpy(), frame)
        h, w = frame.shape[:2]
        assert not batch.tensor[i, h:].any() and not batch.tensor[i, :, w:].any()
    assert not batch.tensor[len(frames):].any()
    valid = sum(h * w for h, w in frame_sizes)
    assert batch.padding_ratio == 1 - valid / ((len(frames) + extra_rows) * shape[0] * shape[1])


def test_collate_reuses_a_dirty_buffer():
    frames = [np.full((3, 4, 3), 7, np.uint8)]
    out = torch.full((2, 8, 8, 3), 255, dtype=torch.uint8)
    batch = collate(frames, (8, 8), rows=2, out=out)
    assert batch.tensor.data_ptr() == out.data_ptr()
    assert int(batch.tensor.sum()) == 7 * 3 * 4 * 3


@given(st.integers(1, 4000), st.integers(1, 4000), sizes)
def test_letterbox_keeps_aspect_and_fits(h, w, target):
    nh, nw = letterbox_size(h, w, target)
    assert 1 <= nh <= target[0] and 1 <= nw <= target[1]
    assert nh == target[0] or nw == target[1]
    assert abs(nh / nw - h / w) <= max(h / w, 1) * (1 / nw + 1 / nh) + 1e-9


def test_letterbox_places_each_frame_top_left_and_zero_pads():
    x = torch.zeros(2, 3, 64, 64)
    x[0, :, :32, :64] = 1.0
    x[1, :, :64, :16] = 2.0
    out, fitted = letterbox(x, ((32, 64), (64, 16)), (16, 16))
    assert fitted == ((8, 16), (16, 4))
    assert torch.allclose(out[0, :, :8, :16], torch.ones(3, 8, 16)) and not out[0, :, 8:].any()
    assert torch.allclose(out[1, :, :, :4], torch.full((3, 16, 4), 2.0)) and not out[1, :, :, 4:].any()


def test_unpad_scalars_vectors_and_dense_maps():
    sizes = ((2, 3), (4, 4))
    assert unpad(torch.tensor([1.0, 2.0, 9.0]), (4, 4), sizes) == [1.0, 2.0]
    assert unpad(torch.tensor([[1, 2], [3, 4], [0, 0]]), (4, 4), sizes) == [[1, 2], [3, 4]]
    dense = torch.arange(3 * 4 * 4).view(3, 1, 4, 4)
    first, second = unpad(dense, (4, 4), sizes)
    assert first == dense[0, :, :2, :3].tolist() and second == dense[1].tolist()
    half = torch.arange(2 * 2 * 2).view(2, 2, 2)  # stride 2: a 3-wide frame covers 2 output columns
    assert unpad(half, (4, 4), sizes)[0] == half[0, :1, :2].tolist()
