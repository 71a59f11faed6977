"""Video segments for the tests, made at test time by the `ffmpeg` CLI from the repo's photographs.

Also the independent reference: the same segment decoded by the `ffmpeg` CLI to rgb24 frames, and
where each packet lies in the file (`ffprobe`), to damage segments at known places.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np

from tests.support import IMAGES

#: container -> (ffmpeg muxer/demuxer name, file suffix)
CONTAINERS = {
    "mp4": ("mp4", ".mp4"),
    "fmp4": ("mp4", ".mp4"),
    "mpegts": ("mpegts", ".ts"),
    "h264": ("h264", ".h264"),
    "hevc": ("hevc", ".h265"),
}
CONTENT_TYPES = {"mp4": "video/mp4", "fmp4": "video/mp4", "mpegts": "video/mp2t",
                 "h264": "video/h264", "hevc": "video/h265"}
_CODEC_ARGS = {
    "libx264": ["-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p"],
    "libx265": ["-c:v", "libx265", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
                "-x265-params", "log-level=none"],
    "libx265-main10": ["-c:v", "libx265", "-preset", "ultrafast", "-pix_fmt", "yuv420p10le",
                       "-x265-params", "log-level=none"],
    "libx264-444": ["-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv444p"],
    "libx264-bt601": ["-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", "-colorspace", "bt470bg",
                      "-color_primaries", "bt470bg", "-color_trc", "gamma28"],
    "libx264-bt709": ["-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", "-colorspace", "bt709",
                      "-color_primaries", "bt709", "-color_trc", "bt709"],
    "libx264-full": ["-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuvj420p", "-color_range", "pc"],
    "libvpx-vp9": ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8"],
    "mpeg4": ["-c:v", "mpeg4"],
    "mjpeg": ["-c:v", "mjpeg", "-pix_fmt", "yuvj420p"],
}


def ffmpeg() -> str:
    path = shutil.which("ffmpeg")
    assert path, "the video tests need the ffmpeg CLI: apt-get install ffmpeg (.ci/run does)"
    return path


def _run(args: list[str]) -> bytes:
    return subprocess.run(args, check=True, capture_output=True).stdout


@lru_cache(maxsize=64)
def segment(container: str = "mp4", *, width: int = 160, height: int = 96, frames: int = 12,
            fps: int = 30, codec: str = "libx264", gop: int = 6, photo: str = "astronaut.png",
            bframes: int = 2) -> bytes:
    """A zoom into one photograph, `frames` frames at `fps`, encoded and muxed by `ffmpeg`.

    Every frame differs (the zoom grows by 2% a frame); `gop` frames between key frames.
    """
    muxer, suffix = CONTAINERS[container]
    zoom = (f"scale={2 * width}:{2 * height},zoompan=z='1+0.02*on':x='iw/2-iw/zoom/2':"
            f"y='ih/2-ih/zoom/2':d=1:s={width}x{height}:fps={fps}")
    codec_args = list(_CODEC_ARGS[codec]) + ["-g", str(gop)]
    if codec.startswith(("libx264", "libx265")):
        codec_args += ["-bf", str(bframes)]
    flags = {"mp4": ["-movflags", "+faststart"],
             "fmp4": ["-movflags", "frag_keyframe+empty_moov+default_base_moof"]}.get(container, [])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"segment{suffix}"
        _run([ffmpeg(), "-v", "error", "-y", "-loop", "1", "-framerate", str(fps),
              "-i", str(IMAGES / photo), "-vf", zoom, "-frames:v", str(frames), *codec_args,
              *flags, "-f", muxer, str(out)])
        return out.read_bytes()


def reference_frames(body: bytes, container: str) -> np.ndarray:
    """`[N, H, W, 3]` uint8: every frame of the segment as the `ffmpeg` CLI decodes it to rgb24."""
    muxer, suffix = CONTAINERS[container]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"in{suffix}"
        path.write_bytes(body)
        width, height = _size(path)
        raw = _run([ffmpeg(), "-v", "error", "-f", muxer, "-i", str(path), "-fps_mode", "passthrough",
                    "-f", "rawvideo", "-pix_fmt", "rgb24", "-"])
    return np.frombuffer(raw, np.uint8).reshape(-1, height, width, 3)


def _size(path: Path) -> tuple[int, int]:
    out = _run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                "stream=width,height", "-of", "json", str(path)])
    stream = json.loads(out)["streams"][0]
    return int(stream["width"]), int(stream["height"])


def packets(body: bytes, container: str) -> list[tuple[int, int, bool]]:
    """(byte offset, size, key frame) of each video packet, in file order, by `ffprobe`."""
    muxer, suffix = CONTAINERS[container]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"in{suffix}"
        path.write_bytes(body)
        out = _run(["ffprobe", "-v", "error", "-f", muxer, "-select_streams", "v:0",
                    "-show_entries", "packet=pos,size,flags", "-of", "json", str(path)])
    found = [(int(p["pos"]), int(p["size"]), "K" in p["flags"])
             for p in json.loads(out)["packets"] if p.get("pos", "N/A") != "N/A"]
    return sorted(found)


def cut_inside_last_key_frame(body: bytes, container: str) -> bytes:
    """The segment cut in the middle of its last key frame's data (a transfer that broke off)."""
    pos, size, _ = [p for p in packets(body, container) if p[2]][-1]
    return body[: pos + size // 2]


def damage_slices(body: bytes, container: str, every: int = 5) -> bytes:
    """The segment with bytes inside the second half of each non-first packet flipped."""
    damaged = bytearray(body)
    for pos, size, _ in packets(body, container)[1:]:
        for at in range(pos + size // 2, pos + size, every):
            damaged[at] ^= 0x5A
    return bytes(damaged)


def without_first_key_frame(annex_b: bytes) -> bytes:
    """An H.264 Annex-B stream without its first key frame (IDR slices and SEI before the first
    predicted slice), parameter sets kept: it starts with a predicted frame."""
    units = _nal_units(annex_b)
    first_p = next(i for i, u in enumerate(units) if u[3] & 0x1F == 1)
    head = [u for u in units[:first_p] if u[3] & 0x1F in (7, 8)]
    return b"".join(head + units[first_p:])


def _nal_units(annex_b: bytes) -> list[bytes]:
    """NAL units, each with a 3-byte start code `00 00 01`."""
    starts = []
    at = annex_b.find(b"\x00\x00\x01")
    while at >= 0:
        starts.append(at)
        at = annex_b.find(b"\x00\x00\x01", at + 3)
    ends = starts[1:] + [len(annex_b)]
    return [annex_b[s:e].rstrip(b"\x00") for s, e in zip(starts, ends)]


def init_segment_only(fragmented_mp4: bytes) -> bytes:
    """A fragmented MP4's header (ftyp + moov, a video track of zero samples) without fragments."""
    return fragmented_mp4[: fragmented_mp4.index(b"moof") - 4]


def tables_only(transport_stream: bytes) -> bytes:
    """A transport stream's packets that carry no video (PAT, PMT, SDT): a zero-length stream."""
    packets_ = [transport_stream[i:i + 188] for i in range(0, len(transport_stream), 188)]
    pids = [((p[1] & 0x1F) << 8) | p[2] for p in packets_]
    return b"".join(p for p, pid in zip(packets_, pids) if pid in (0x0000, 0x0011, 0x1000))


def with_sps_size(annex_b: bytes, width: int, height: int) -> bytes:
    """The H.264 Annex-B stream with its sequence parameter sets declaring `width`x`height`
    (multiples of 16), the slices left as they are: a stream that claims a huge picture."""
    out = []
    for unit in _nal_units(annex_b):
        sps = unit[3] & 0x1F == 7
        out.append(unit[:4] + _escape(_resize_sps(_unescape(unit[4:]), width // 16, height // 16)) if sps else unit)
    return b"".join(out)


def _unescape(payload: bytes) -> bytes:
    return payload.replace(b"\x00\x00\x03", b"\x00\x00")


def _escape(payload: bytes) -> bytes:
    out = bytearray()
    zeros = 0
    for byte in payload:
        if zeros >= 2 and byte <= 3:
            out.append(3)
            zeros = 0
        out.append(byte)
        zeros = zeros + 1 if byte == 0 else 0
    return bytes(out)


def _resize_sps(rbsp: bytes, width_mbs: int, height_mbs: int) -> bytes:
    """Rewrites pic_width_in_mbs_minus1 and pic_height_in_map_units_minus1 (H.264 7.3.2.1.1)."""
    bits = "".join(f"{b:08b}" for b in rbsp)
    at = 24  # profile_idc, constraint flags, level_idc
    out = [bits[:at]]

    def ue() -> int:
        nonlocal at
        zeros = 0
        while bits[at + zeros] == "0":
            zeros += 1
        value = int(bits[at + zeros: at + 2 * zeros + 1], 2) - 1
        out.append(bits[at: at + 2 * zeros + 1])
        at += 2 * zeros + 1
        return value

    def flag() -> int:
        nonlocal at
        out.append(bits[at])
        at += 1
        return int(bits[at - 1])

    ue()  # seq_parameter_set_id
    if rbsp[0] in (100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135):
        if ue() == 3:  # chroma_format_idc
            flag()
        ue()
        ue()
        flag()
        assert flag() == 0, "scaling matrices are not handled"
    ue()  # log2_max_frame_num_minus4
    poc_type = ue()
    assert poc_type in (0, 2), "pic_order_cnt_type 1 is not handled"
    if poc_type == 0:
        ue()
    ue()  # max_num_ref_frames
    flag()  # gaps_in_frame_num_value_allowed_flag
    for value in (width_mbs - 1, height_mbs - 1):
        ue()  # the old value, dropped below
        out.pop()
        code = f"{value + 1:b}"
        out.append("0" * (len(code) - 1) + code)
    rest = bits[at:].rstrip("0")  # frame_mbs_only_flag ... rbsp_stop_one_bit
    body = "".join(out) + rest
    body += "0" * (-len(body) % 8)
    return int(body, 2).to_bytes(len(body) // 8, "big")
