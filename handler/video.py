"""Encoded video segments (DESIGN section 4b) -> a Clip of decoded frames with their pts."""

from __future__ import annotations

from collections.abc import Mapping

from handler.config import HandlerConfig
from handler.errors import UnsupportedContentType
from handler.formats import Format
from handler.frames import Clip


def decode_segment(body: bytes | bytearray, fmt: Format, headers: Mapping[str, str],
                   config: HandlerConfig) -> Clip:
    """Decodes one MP4, MPEG-TS or Annex-B segment. Placeholder until issue 12 lands."""
    raise UnsupportedContentType(f"{fmt.value} video segments are not supported by this build")
