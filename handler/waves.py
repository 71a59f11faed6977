"""Decoding a batch's requests: in parallel threads, in order, in waves of bounded pixels.

A batch of large clips is served wave by wave instead of all held decoded at once: a wave holds
at most `max_batch_pixels` decoded pixels (and at least one request), and the next requests are
decoded only `decode_threads` ahead. Lazy JPEG frames hold none (the collating threads decode
them into their staging slot).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from handler.clip import Clip, Frame, Request, Size
from handler.config import HandlerConfig
from handler.errors import FrameError, InternalError, StaleFrame
from handler.layout import Layout
from handler.looks import Watch, images, region_side

logger = logging.getLogger(__name__)

Decoded = Clip | FrameError


class Waves:
    """Decodes requests with the worker's decode threads (Pillow, simplejpeg, NumPy and FFmpeg
    release the GIL)."""

    def __init__(self, config: HandlerConfig, layout: Layout, pool: ThreadPoolExecutor) -> None:
        self._config = config
        self._layout = layout
        self._pool = pool
        self._side = region_side(config)

    def decode(self, requests: Sequence[Request], started: float) -> Iterator[list[Decoded]]:
        """The requests decoded in order (a clip, or the error that answers the request), in waves.

        Args:
            requests: the batch.
            started: when the batch started (Unix seconds), for stale frames.
        """
        pending: deque[Future[Decoded]] = deque()
        queued = iter(requests)

        def submit(request: Request) -> Future[Decoded]:
            return self._pool.submit(self._decode, request, started)

        pending.extend(map(submit, itertools.islice(queued, self._config.threads)))
        wave: list[Decoded] = []
        held = 0
        while pending:
            clip = pending.popleft().result()
            following = next(queued, None)
            if following is not None:
                pending.append(submit(following))
            pixels = 0 if isinstance(clip, FrameError) else clip.decoded_pixels
            if wave and held + pixels > self._config.max_batch_pixels:
                yield wave
                wave, held = [], 0
            wave.append(clip)
            held += pixels
        if wave:
            yield wave

    def _decode(self, request: Request, started: float) -> Decoded:
        try:
            self._check_age(request, started)
            # JPEG is decoded later, by the collating threads: straight into its uint8 staging slot
            # (CUDA), or converted into its float32 one right after decoding (CPU).
            clip = request.decode(self._config, lazy=True)
            watch = Watch.of(request.meta) if clip.looks is None else None  # a segment's was read decoding it
            if watch is not None:  # images: their producer found the motion
                clip = images(clip, watch, self._side)
            return self._fit(clip)
        except FrameError as err:
            return err.detached()
        except Exception:  # a decoder bug must not sink the batch-mates
            logger.exception("decoding a request failed")
            return InternalError("the handler failed on this request; see the worker log")

    def _check_age(self, request: Request, started: float) -> None:
        limit = self._config.max_frame_age_ms
        if limit is None:
            return
        captured = request.meta.capture_time
        if captured is None:
            return
        age_ms = (started - captured) * 1000.0
        if age_ms > limit:
            raise StaleFrame(f"frame was {age_ms:.0f} ms old at batch start (limit {limit:.0f} ms)")

    def _fit(self, clip: Clip) -> Clip:
        """The clip's frames as their slots take them (letterbox: resized, in uint8, here in the
        decode threads); `sizes` keeps each frame's own size."""
        original = clip.own_sizes
        return dataclasses.replace(clip, frames=self.fit(clip.frames, original), sizes=original)

    def fit(self, frames: Sequence[Frame], sizes: Sequence[Size]) -> list[Frame]:
        """Frames of these own sizes as their slots take them."""
        return [self._layout.fit(f, size) for f, size in zip(frames, sizes)]
