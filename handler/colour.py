"""NV12 -> RGB on whatever device the planes are on (NVDEC's frames stay on the GPU).

Pure torch. The matrix comes from the frame's ITU-T H.273 `matrix_coefficients` (PyAV's
`frame.colorspace`), the range from its tag; an untagged frame is BT.601 in limited (MPEG) range,
as swscale takes it. Chroma is replicated over its 2x2 block and the result truncated, as
swscale's yuv420p -> rgb24 conversion (the CPU decoder's path) does.
"""

from __future__ import annotations

import enum
import functools

import torch

#: H.273 matrix_coefficients codes: BT.709, and BT.2020 non-constant and constant luminance.
_BT709 = 1
_BT2020 = (9, 10)


class Matrix(enum.Enum):
    """A YCbCr matrix, as its (Kr, Kb) luma weights."""

    BT601 = (0.299, 0.114)
    BT709 = (0.2126, 0.0722)
    BT2020 = (0.2627, 0.0593)

    @classmethod
    def of(cls, code: int) -> Matrix:
        """The matrix for an H.273 `matrix_coefficients` code (FFmpeg's `AVColorSpace`).

        Unspecified (2) and every code other than BT.709 (1) and BT.2020 (9, 10) is BT.601, as
        swscale reads them.
        """
        if code == _BT709:
            return cls.BT709
        return cls.BT2020 if code in _BT2020 else cls.BT601

    def coefficients(self, full_range: bool) -> torch.Tensor:
        """`Tensor[3, 3] float32`: (Y - y0, Cb - 128, Cr - 128) -> (R, G, B), scaled for the range."""
        kr, kb = self.value
        kg = 1.0 - kr - kb
        luma, chroma = (1.0, 1.0) if full_range else (255 / 219, 255 / 224)
        return torch.tensor([
            [luma, 0.0, 2 * (1 - kr) * chroma],
            [luma, -2 * kb * (1 - kb) / kg * chroma, -2 * kr * (1 - kr) / kg * chroma],
            [luma, 2 * (1 - kb) * chroma, 0.0],
        ])


def nv12_to_rgb(y: torch.Tensor, uv: torch.Tensor, matrix: Matrix, full_range: bool) -> torch.Tensor:
    """One NV12 picture as RGB, on the planes' device.

    Args:
        y: `Tensor[H, W] uint8`, the luma plane (any strides, e.g. a pitched hardware frame).
        uv: `Tensor[ceil(H/2), ceil(W/2), 2] uint8`, the interleaved Cb, Cr plane.
        matrix: the frame's YCbCr matrix (`Matrix.of(frame.colorspace)`).
        full_range: the frame is tagged full (JPEG) range; otherwise limited (MPEG) range.

    Returns:
        `Tensor[H, W, 3] uint8`, contiguous, on `y`'s device.

    Raises:
        ValueError: the planes' dtypes, shapes or devices do not make one NV12 picture.
    """
    _check(y, uv)
    height, width = y.shape
    chroma = uv.repeat_interleave(2, dim=0).repeat_interleave(2, dim=1)[:height, :width]
    offsets, coefficients = _constants(matrix, full_range, y.device)
    ycc = torch.cat([y.unsqueeze(-1), chroma], dim=-1).float() - offsets
    rgb = ycc @ coefficients
    # truncated, as swscale's fixed point does (rounding would put it a level above swscale)
    return rgb.floor_().clamp_(0, 255).to(torch.uint8)


@functools.lru_cache(maxsize=32)
def _constants(matrix: Matrix, full_range: bool, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The offsets and the transposed matrix on `device`, made once (a copy to a GPU from pageable
    memory waits for that stream's work)."""
    offsets = torch.tensor([0.0 if full_range else 16.0, 128.0, 128.0], device=device)
    return offsets, matrix.coefficients(full_range).to(device).T.contiguous()


def _check(y: torch.Tensor, uv: torch.Tensor) -> None:
    if y.dtype != torch.uint8 or uv.dtype != torch.uint8 or y.device != uv.device:
        raise ValueError(f"NV12 planes must be uint8 on one device, not {y.dtype} on {y.device} and "
                         f"{uv.dtype} on {uv.device}")
    if y.dim() != 2:
        raise ValueError(f"the luma plane must be [H, W], not {list(y.shape)}")
    height, width = y.shape
    want = [(height + 1) // 2, (width + 1) // 2, 2]
    if list(uv.shape) != want:
        raise ValueError(f"a {height}x{width} luma plane takes a {want} chroma plane, not {list(uv.shape)}")
