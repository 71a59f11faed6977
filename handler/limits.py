"""The frame, clip and segment limits, said once and checked before work (DESIGN section 3).

Every decoder asks a `Limits` before it allocates anything of a size it read from a header:
the frame's width and height, then the clip's frames and pixels. Each message names what was
seen, the limit, and the `handler:` setting that sets it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from handler.errors import ClipTooLarge, EmptyFrame, FrameTooLarge

if TYPE_CHECKING:
    from handler.config import HandlerConfig


@dataclass(frozen=True, slots=True)
class Limits:
    """What one request may hold (the README's settings of the same names)."""

    max_width: int
    max_height: int
    max_clip_frames: int
    max_clip_pixels: int
    max_video_frames: int

    @staticmethod
    @functools.lru_cache(maxsize=16)
    def of(config: HandlerConfig) -> Limits:
        """The config's limits: one object per config (frozen and hashable), not one per frame."""
        return Limits(config.max_width, config.max_height, config.max_clip_frames, config.max_clip_pixels,
                      config.max_video_frames)

    def frame(self, width: int, height: int, what: str = "frame", verb: str = " is") -> None:
        """One frame's size.

        Raises:
            EmptyFrame: a side is zero. FrameTooLarge: a side is above its maximum.
        """
        if width <= 0 or height <= 0:
            raise EmptyFrame(f"zero-sized frame: {what} {width}x{height}")
        self.size(width, height, what, verb)

    def size(self, width: int, height: int, what: str = "frame", verb: str = " is") -> None:
        """A frame's width and height against their maxima (a size a header may leave at zero).

        Raises:
            FrameTooLarge: a side is above its maximum.
        """
        if width > self.max_width or height > self.max_height:
            raise FrameTooLarge(f"{what} {width}x{height}{verb} above the maximum "
                                f"{self.max_width}x{self.max_height} (max_width x max_height)")

    def clip(self, frames: int, height: int, width: int) -> None:
        """A clip of `frames` frames of one size (npy, raw pixels, OIP UINT8), before any allocation.

        Raises:
            EmptyFrame, FrameTooLarge, ClipTooLarge.
        """
        if frames <= 0:
            raise EmptyFrame(f"zero-sized frame: {frames} frame(s) of {width}x{height}")
        self.frame(width, height)
        self.held(frames, frames * height * width, f"a clip of {width}x{height} frames")

    def held(self, frames: int, pixels: int, what: str, verb: str = "holds") -> None:
        """A clip's frames and pixels so far (checked as parts are decoded, one after another).

        Raises:
            ClipTooLarge: naming `what` and the limit it is over.
        """
        if frames > self.max_clip_frames:
            raise ClipTooLarge(f"{what} {verb} {frames} frames, above the maximum "
                               f"max_clip_frames = {self.max_clip_frames} frames per clip")
        if pixels > self.max_clip_pixels:
            raise ClipTooLarge(f"{what} {verb} {pixels} pixels, above the maximum "
                               f"max_clip_pixels = {self.max_clip_pixels} pixels per clip")

    def parts(self, count: int, what: str) -> None:
        """How many encoded images a clip is sent as (form parts, OIP BYTES elements).

        Raises:
            ClipTooLarge: more than `max_clip_frames`.
        """
        if count > self.max_clip_frames:
            raise ClipTooLarge(f"{what} is above the maximum max_clip_frames = "
                               f"{self.max_clip_frames} frames per clip")

    def segment(self, frames: int, pixels: int, verb: str) -> None:
        """A video segment's kept frames and their pixels (counted after `X-Sample-Fps`).

        Raises:
            ClipTooLarge: naming the limit and how to stay under it.
        """
        if frames > self.max_video_frames:
            raise ClipTooLarge(
                f"the segment {verb} {frames} frames to keep, above max_video_frames = "
                f"{self.max_video_frames} (counted after X-Sample-Fps); send shorter segments or "
                "set X-Sample-Fps")
        if pixels > self.max_clip_pixels:
            raise ClipTooLarge(
                f"the segment {verb} {frames} frames of {pixels} pixels in all, above "
                f"max_clip_pixels = {self.max_clip_pixels}; send shorter segments or set X-Sample-Fps")
