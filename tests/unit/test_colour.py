"""NV12 -> RGB with torch (`handler.colour`) against swscale, the CPU decoder's conversion, and
against a float64 oracle.

The reference is what the handler's CPU path gives for the same picture: FFmpeg's software
H.264 decoder's yuv420p frame converted by swscale (`to_ndarray(format="rgb24")`). NVDEC hands
out the same samples as NV12; the NV12 planes here come through the same DLPack export as a
CUDA frame's (`handler.video._nv12_planes`), from the CPU frame.
"""

from __future__ import annotations

import io

import av
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from handler import video
from handler.colour import Matrix, nv12_to_rgb
from tests import videos

#: codec variant -> (H.273 matrix code the decoder reports, full range)
TAGGED = {"libx264": (2, False), "libx264-bt601": (5, False), "libx264-bt709": (1, False),
          "libx264-full": (2, True)}
PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png")
#: Measured here (PyAV 18.1.0, FFmpeg 8.1, 320x240, the three photos): limited range max 2 levels,
#: mean 0.56-0.75; full range max 1, mean 0.11-0.13. swscale's fixed point truncates slightly
#: below the exact value; the wrong matrix is off by a mean of 2.1-5.1 levels.
MAX_LEVELS = 2
MEAN_LEVELS = 0.8


def _first_frame(codec: str, photo: str) -> av.VideoFrame:
    body = videos.segment("mp4", width=320, height=240, frames=2, codec=codec, photo=photo)
    with av.open(io.BytesIO(body), "r", format="mp4") as container:
        return next(container.decode(video=0))


def _diff(frame: av.VideoFrame, matrix: Matrix) -> np.ndarray:
    """|ours - swscale's| per sample, the NV12 planes exported through DLPack."""
    y, uv = video._nv12_planes(frame.reformat(format="nv12"))
    rgb = nv12_to_rgb(y, uv, matrix, frame.color_range == 2).numpy()
    return np.abs(rgb.astype(int) - frame.to_ndarray(format="rgb24").astype(int))


@pytest.mark.parametrize("photo", PHOTOS)
@pytest.mark.parametrize("codec", sorted(TAGGED))
def test_decoded_h264_converts_within_two_levels_of_swscale(codec, photo):
    frame = _first_frame(codec, photo)
    assert (frame.colorspace, frame.color_range == 2) == TAGGED[codec]
    diff = _diff(frame, Matrix.of(frame.colorspace))
    assert diff.max() <= MAX_LEVELS and diff.mean() < MEAN_LEVELS


@pytest.mark.parametrize("photo", PHOTOS)
@pytest.mark.parametrize(("codec", "wrong"), [("libx264-bt709", Matrix.BT601), ("libx264-bt601", Matrix.BT709)])
def test_the_other_matrix_is_far_from_swscale(codec, wrong, photo):
    """So the bound above does check that the frame's tag picked the matrix."""
    assert _diff(_first_frame(codec, photo), wrong).mean() > 2


def _oracle(y: np.ndarray, uv: np.ndarray, matrix: Matrix, full_range: bool) -> np.ndarray:
    """float64, chroma sample (i // 2, j // 2) for pixel (i, j), truncated like the function."""
    height, width = y.shape
    chroma = uv.astype(np.float64).repeat(2, 0).repeat(2, 1)[:height, :width]
    ycc = np.stack([y - (0.0 if full_range else 16.0), chroma[..., 0] - 128, chroma[..., 1] - 128], -1)
    return np.clip(np.floor(ycc @ matrix.coefficients(full_range).double().numpy().T), 0, 255)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 23), st.integers(1, 23), st.sampled_from(list(Matrix)), st.booleans(),
       st.integers(0, 2**32 - 1))
def test_any_size_odd_or_even_matches_a_float64_oracle(height, width, matrix, full_range, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 256, (height, width), dtype=np.uint8)
    uv = rng.integers(0, 256, ((height + 1) // 2, (width + 1) // 2, 2), dtype=np.uint8)
    rgb = nv12_to_rgb(torch.from_numpy(y), torch.from_numpy(uv), matrix, full_range)
    assert rgb.shape == (height, width, 3) and rgb.dtype == torch.uint8 and rgb.is_contiguous()
    # float32 against float64: a value within 1e-4 of a whole level may truncate either way
    assert np.abs(rgb.numpy().astype(int) - _oracle(y, uv, matrix, full_range)).max() <= 1


def test_strided_planes_convert_like_contiguous_ones():
    """A hardware frame's planes are pitched (line size > width)."""
    pitched = torch.randint(0, 256, (6, 16), dtype=torch.uint8)
    chroma = torch.randint(0, 256, (3, 8, 2), dtype=torch.uint8)
    y, uv = pitched[:, :10], chroma[:, :5]
    assert torch.equal(nv12_to_rgb(y, uv, Matrix.BT709, False),
                       nv12_to_rgb(y.contiguous(), uv.contiguous(), Matrix.BT709, False))


@pytest.mark.parametrize(("y", "uv", "message"), [
    (torch.zeros(4, 6, dtype=torch.uint8), torch.zeros(2, 2, 2, dtype=torch.uint8),
     r"a 4x6 luma plane takes a \[2, 3, 2\] chroma plane, not \[2, 2, 2\]"),
    (torch.zeros(4, 6, 1, dtype=torch.uint8), torch.zeros(2, 3, 2, dtype=torch.uint8),
     r"the luma plane must be \[H, W\], not \[4, 6, 1\]"),
    (torch.zeros(4, 6), torch.zeros(2, 3, 2, dtype=torch.uint8),
     "NV12 planes must be uint8 on one device, not torch.float32 on cpu and torch.uint8 on cpu"),
])
def test_planes_that_are_not_one_nv12_picture_are_refused(y, uv, message):
    with pytest.raises(ValueError, match=message):
        nv12_to_rgb(y, uv, Matrix.BT601, False)


@pytest.mark.parametrize(("code", "matrix"), [(1, Matrix.BT709), (5, Matrix.BT601), (6, Matrix.BT601),
                                              (2, Matrix.BT601), (0, Matrix.BT601), (9, Matrix.BT2020),
                                              (10, Matrix.BT2020)])
def test_h273_codes_pick_the_matrix_swscale_picks(code, matrix):
    assert Matrix.of(code) is matrix
