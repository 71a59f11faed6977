"""The layout owns chunk geometry: what is allocated, what the model sees, how outputs map back."""

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from handler.config import HandlerConfig
from handler.layout import LetterboxLayout, PadLayout, layout_for, resize_uint8
from handler.memory import ChunkPlanner
from tests import support
from tests.support import Answering


def _npy(pixels, frame_id=0):
    return support.request(support.npy(pixels), "application/x-npy", {"x-frame-id": str(frame_id)})


class LetterboxModel:
    """A held-out-style engine: fixed `[*, 3, 128, 128]` input, per-frame mean and a dense map at
    stride 4; records every input shape; raises CUDA OOM above `oom_above` rows."""

    def __init__(self, oom_above=None, size=(128, 128)):
        self.oom_above, self.size, self.shapes = oom_above, size, []

    def __call__(self, x):
        self.shapes.append(tuple(x.shape))
        assert tuple(x.shape[2:]) == self.size, x.shape
        if self.oom_above is not None and x.shape[0] > self.oom_above:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        mean = x.mean(dim=(1, 2, 3))
        dense = torch.nn.functional.avg_pool2d(x[:, :1], 4)  # [N, 1, 32, 32]
        return mean, dense


def test_layout_is_chosen_once_from_the_config():
    pad = layout_for(HandlerConfig.from_mapping({"size_divisor": 32}))
    box = layout_for(HandlerConfig.from_mapping(
        {"resize": "letterbox", "input_size": [128, 256], "static_batch": 8, "model_max_batch": 8}))
    assert isinstance(pad, PadLayout) and pad.slot(720, 1281) == (736, 1312)
    assert isinstance(box, LetterboxLayout) and box.slot(1080, 1920) == (128, 256)
    assert box.fitted(1080, 1920) == (128, 228) and box.rows(3) == 8 and pad.rows(3) == 3
    placement = box.place((128, 256), [(1080, 1920), (64, 64)])
    assert placement.slot == (128, 256) and placement.rows == 8
    assert placement.sizes == ((128, 228), (128, 128))
    assert placement.original == ((1080, 1920), (64, 64))
    assert placement.tensor_pixels == 8 * 128 * 256
    assert placement.padded_pixels == 8 * 128 * 256 - 128 * 228 - 128 * 128


def test_letterbox_budget_and_allocation_are_for_the_engine_input_not_the_source_frame():
    # 3 engine inputs of 128x128 at 64 bytes a pixel: the budget allows 3 frames per forward,
    # whatever the source resolution, because 3 x 128 x 128 x 3 is what is allocated.
    config = HandlerConfig.from_mapping({
        "resize": "letterbox", "input_size": [128, 128], "model_max_batch": 16,
        "memory_budget_bytes": 3 * 128 * 128 * 64, "bytes_per_pixel": 64, "output_names": ["mean", "map"]})
    model = LetterboxModel()
    pipeline = Answering(model, config)
    burst = [_npy(support.frame(1080, 1920, i), i) for i in range(7)]
    responses, stats = pipeline.run(burst)
    assert [r.status for r in responses] == [200] * 7
    assert model.shapes == [(3, 3, 128, 128), (3, 3, 128, 128), (1, 3, 128, 128)]
    assert pipeline._chunks._staging.allocated_bytes == 3 * 128 * 128 * 3 * 4  # float32 on the CPU
    assert stats.chunks == 3 and stats.tensor_pixels == 7 * 128 * 128
    assert stats.padded_pixels == 7 * (128 * 128 - 72 * 128)
    frame = json.loads(responses[0].body)["frames"][0]
    assert (frame["width"], frame["height"]) == (1920, 1080)
    # the dense map (stride 4) is cropped to the 72x128 letterboxed area, then resized back
    assert np.array(frame["outputs"]["map"]).shape == (1, 270, 480)


def test_letterbox_oom_limits_are_learned_for_the_engine_input():
    config = HandlerConfig.from_mapping({"resize": "letterbox", "input_size": [128, 128],
                                         "model_max_batch": 8, "output_names": ["mean", "map"]})
    model = LetterboxModel(oom_above=2)
    pipeline = Answering(model, config)
    responses, stats = pipeline.run([_npy(support.frame(720, 1280, i), i) for i in range(8)])
    assert [r.status for r in responses] == [200] * 8
    assert stats.oom_splits == 1 + 1 and stats.chunks == 4  # the second half goes at the learned size; counted after success
    assert stats.tensor_pixels == 8 * 128 * 128
    assert pipeline._planner.limit((128, 128)) == 2
    model.shapes.clear()
    pipeline.run([_npy(support.frame(480, 640, i), i) for i in range(4)])  # another source size
    assert model.shapes == [(2, 3, 128, 128), (2, 3, 128, 128)]


def test_oom_retry_counts_chunks_and_padding_once():
    def model(x, sizes):
        if x.shape[0] > 4:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return x.mean(dim=(1, 2, 3))

    config = HandlerConfig.from_mapping({"pass_sizes": True, "model_max_batch": 16})
    frames = [support.frame(60, 60, i) for i in range(16)]  # bucket 64x64
    responses, stats = Answering(model, config).run([_npy(f, i) for i, f in enumerate(frames)])
    assert [r.status for r in responses] == [200] * 16
    assert (stats.chunks, stats.oom_splits) == (4, 2)  # the second half goes at the learned size
    assert stats.tensor_pixels == 16 * 64 * 64
    assert stats.padded_pixels == 16 * (64 * 64 - 60 * 60)


@pytest.mark.parametrize("resize", [{"resize": "letterbox", "input_size": [128, 128]}, {}])
def test_a_fixed_batch_engine_out_of_memory_is_answered_at_once(resize):
    # 16 rows are allocated for 1 frame or 16: halving cannot help, so no recursion into 507s.
    model = LetterboxModel(oom_above=8, size=(128, 128) if resize else (64, 64))
    config = HandlerConfig.from_mapping({**resize, "static_batch": 16, "output_names": ["mean", "map"]})
    pipeline = Answering(model, config)
    frames = [support.frame(64, 64, i) for i in range(20)]
    responses, stats = pipeline.run([_npy(f, i) for i, f in enumerate(frames)])
    assert [r.status for r in responses] == [507] * 20
    assert json.loads(responses[0].body)["type"] == "DeviceOutOfMemory"
    assert "static_batch = 16" in json.loads(responses[0].body)["message"]
    assert len(model.shapes) == 2 and stats.oom_splits == 0 and stats.chunks == 0
    assert stats.rejected == {"oom": 20}
    assert pipeline._planner.limit((128, 128) if resize else (64, 64)) == 16


def test_a_static_batch_ignores_a_budget_it_cannot_meet():
    config = HandlerConfig.from_mapping({"static_batch": 16, "resize": "letterbox", "input_size": [128, 128],
                                         "memory_budget_bytes": 1, "bytes_per_pixel": 64})
    layout = layout_for(config)
    assert ChunkPlanner(config, layout).limit((128, 128)) == 16
    assert not layout.split_helps((128, 128), 16)
    pad = PadLayout(32)
    assert pad.split_helps((64, 64), 16) and not pad.split_helps((64, 64), 1)


def test_unpad_crops_dense_maps_with_exact_values():
    layout = PadLayout(4)
    placement = layout.place((4, 4), [(2, 3), (4, 4)])
    dense = torch.arange(2 * 4 * 4, dtype=torch.float32).view(2, 1, 4, 4)
    first, second = layout.unpad(dense, placement)
    assert first == [[[0.0, 1.0, 2.0], [4.0, 5.0, 6.0]]]
    assert second == dense[1].tolist()
    half = torch.arange(2 * 2 * 2, dtype=torch.float32).view(2, 2, 2)  # stride 2
    assert layout.unpad(half, placement)[0] == [[0.0, 1.0]]  # a 3-wide frame covers 2 columns
    assert layout.unpad(torch.tensor([1.0, 2.0]), placement) == [1.0, 2.0]
    assert layout.unpad(torch.tensor([[1, 2], [3, 4]]), placement) == [[1, 2], [3, 4]]


def test_dense_outputs_named_explicitly_keep_a_small_vector_output_whole():
    layout = PadLayout(4)
    placement = layout.place((4, 4), [(2, 3), (4, 4)])
    corners = torch.arange(2 * 2 * 2, dtype=torch.float32).view(2, 2, 2)  # [N, 2, 2] box corners
    # `auto` takes it for a stride-2 map and cuts the 2x3 frame's to one row: the known false positive
    assert layout.unpad(corners, placement)[0] == [[0.0, 1.0]]
    assert layout.unpad(corners, placement, dense=False) == [[[0.0, 1.0], [2.0, 3.0]], [[4.0, 5.0], [6.0, 7.0]]]
    with pytest.raises(ValueError, match=r"shape \[2, 3\], not a map of the 4x4 input"):
        layout.unpad(torch.zeros(2, 3), placement, dense=True)


def test_letterbox_resizes_dense_maps_back_with_exact_values():
    layout = LetterboxLayout((4, 4))
    placement = layout.place((4, 4), [(4, 8)])  # fitted (2, 4): the top half of the slot
    assert placement.sizes == ((2, 4),)
    dense = torch.tensor([[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 9.0, 9.0, 9.0],
                           [9.0, 9.0, 9.0, 9.0]]])
    [back] = layout.unpad(dense, placement)
    # cropped to 2x4, then nearest back to the frame's own 4x8
    assert back == [[1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]] * 2 + [[5.0, 5.0, 6.0, 6.0, 7.0, 7.0, 8.0, 8.0]] * 2


def test_unpad_turns_nan_and_inf_into_none():
    layout = PadLayout(1)
    placement = layout.place((1, 1), [(1, 1), (1, 1)])
    assert layout.unpad(torch.tensor([math.nan, 2.0]), placement) == [None, 2.0]
    assert layout.unpad(torch.tensor([[math.inf, 1.0], [-math.inf, 0.5]]), placement) == [[None, 1.0], [None, 0.5]]


def test_letterbox_fit_resizes_in_uint8_keeping_a_flat_frame_flat():
    frame = np.full((1080, 1920, 3), (10, 200, 77), np.uint8)
    out = LetterboxLayout((128, 128)).fit(frame, (1080, 1920))
    assert out.dtype == np.uint8 and out.shape == (72, 128, 3)
    assert (out == np.array([10, 200, 77], np.uint8)).all()
    small = resize_uint8(np.full((8, 8, 3), 3, np.uint8), (16, 16))
    assert small.shape == (16, 16, 3) and (small == 3).all()


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 300), st.integers(1, 300), st.integers(1, 700), st.integers(1, 700), st.integers(0, 2**32 - 1))
def test_resizing_without_antialias_is_opencvs_inter_linear_bit_for_bit(h, w, height, width, seed):
    """Any sizes up and down, noise (every pixel different from its neighbours)."""
    import cv2  # Ultralytics' letterbox resizes with it

    frame = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    ours = resize_uint8(frame, (height, width), antialias=False)
    assert np.array_equal(ours, cv2.resize(frame, (width, height), interpolation=cv2.INTER_LINEAR))


def test_resizing_photographs_without_antialias_is_opencvs_bit_for_bit():
    import cv2

    frame = support.frame(720, 1280, 3)
    for size in [(360, 640), (640, 1138), (1080, 1920), (384, 683), (360, 640)]:
        ours = resize_uint8(frame, size, antialias=False)
        assert np.array_equal(ours, cv2.resize(frame, (size[1], size[0]), interpolation=cv2.INTER_LINEAR)), size


def test_without_antialias_a_large_jpeg_is_decoded_whole_for_the_letterbox():
    from handler.clip import Meta
    from handler.config import HandlerConfig
    from handler.frames import decode
    from tests import support

    body = support.jpeg(support.frame(1280, 1920, 1))
    settings = {"resize": "letterbox", "input_size": [320, 320]}
    shrunk = decode(body, "image/jpeg", Meta(), HandlerConfig.from_mapping(settings), False)
    whole = decode(body, "image/jpeg", Meta(), HandlerConfig.from_mapping({**settings, "resize_antialias": False}), False)
    assert shrunk.frames[0].shape[:2] == (320, 480) and shrunk.own_sizes == [(1280, 1920)]
    assert whole.frames[0].shape[:2] == (1280, 1920)


@pytest.mark.parametrize("center, top", [(True, 18), (False, 0)])
def test_the_placement_takes_points_and_areas_back_for_centred_and_top_left_frames(center, top):
    """A 54x128 frame letterboxed into 64x64 at scale 1/2: 27x64, at row `top`. Points come back
    in its pixels, clipped; dense maps take every cell the frame touches, prototypes the cells
    mostly inside it (Ultralytics' scale_masks); a frame thinner than a cell keeps one."""
    placement = LetterboxLayout((64, 64), center=center).place((64, 64), [(54, 128), (1, 200)])
    assert placement.sizes[0] == (27, 64) and placement.offset(0) == (top, 0)
    geometry = placement.to_frame()[[0, 0]]
    x, y = placement.points_back(torch.tensor([[10.0], [64.0]]), torch.tensor([[top + 6.0], [top + 40.0]]), geometry)
    assert x.flatten().tolist() == [20.0, 128.0] and y.flatten().tolist() == [12.0, 54.0]
    below = 64 - top - 27
    assert placement.area(0, 4) == (top // 4, math.ceil((top + 27) / 4), 0, 16)
    assert placement.area(0, 4, cover=False) == (round(top / 4 - 0.1), 16 - round(below / 4 + 0.1), 0, 16)
    assert placement.area(0, 4, cover=False) == ((4, 11, 0, 16) if center else (0, 7, 0, 16))
    assert placement.crops(4)[0] == (slice(top // 4, math.ceil((top + 27) / 4)), slice(0, 16))
    first, last, _, _ = placement.area(1, 4, cover=False)  # 1 x 200 -> 0 rows of 64 (rounded): one cell
    assert last - first == 1


def test_rect_gives_each_frame_its_minimum_rectangle_and_takes_boxes_back_as_scale_boxes_does():
    """Ultralytics' predict on a dynamic export: 1080p and 720p into 640, borders up to 32 (384x640,
    12 rows above); 129x641 sits 255 rows down (its letterbox), and its boxes come back 256 up (its
    `scale_boxes`, from the unrounded 128.8 rows)."""
    rect = LetterboxLayout((640, 640), center=True, antialias=False, stride=32)
    assert rect.slot(1080, 1920) == rect.slot(720, 1280) == (384, 640) and rect.slot(640, 480) == (640, 480)
    placed = rect.place((384, 640), [(1080, 1920), (720, 1280)])
    assert placed.sizes == ((360, 640), (360, 640)) and placed.offsets == ((12, 0), (12, 0))
    geometry = placed.to_frame()
    assert geometry[:, [0, 1, 3, 4]].tolist() == [[0, 12, 1920, 1080], [0, 12, 1280, 720]]
    assert geometry[:, 2].tolist() == pytest.approx([1 / 3, 0.5])
    odd = LetterboxLayout((640, 640), center=True).place((640, 640), [(129, 641)])
    assert odd.sizes == ((129, 640),) and odd.offsets == ((255, 0),) and odd.back == ((256, 0),)
    assert odd.to_frame()[0, :2].tolist() == [0, 256]
    config = HandlerConfig.from_mapping({"resize": "rect", "input_size": [640, 640], "size_divisor": 32})
    assert isinstance(layout_for(config), LetterboxLayout) and layout_for(config).slot(1080, 1920) == (384, 640)
