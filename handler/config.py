"""The `handler:` section of the archive's model-config YAML, parsed once into a frozen dataclass."""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from handler.errors import ConfigError

_MAX_SIDE = 16384
#: A parser's answer for "keep the field's default" (`null`, or `dense_outputs: auto`).
_DEFAULT = object()
Parse = Callable[[str, Any], Any]


def round_up(height: int, width: int, divisor: int) -> tuple[int, int]:
    """Rounds a frame size up to the size divisor, so few shapes reach the model."""
    return -(-height // divisor) * divisor, -(-width // divisor) * divisor


class Resize(enum.Enum):
    """How frames meet the model's input."""

    PAD = "pad"  # keep each frame's resolution; pad to its slot (the size rounded up to size_divisor)
    LETTERBOX = "letterbox"  # fixed-input engines: aspect-preserving resize + pad to `input_size`
    # Ultralytics' minimum rectangle (`predict` on a dynamic export): the letterbox's resize into
    # `input_size`, padded only up to a multiple of `size_divisor` (each frame size its own slot).
    RECT = "rect"


class LetterboxPad(enum.Enum):
    """Where a letterboxed frame sits in the engine's input."""

    TOP_LEFT = "top_left"  # DeepStream's default
    CENTER = "center"  # Ultralytics' (and DeepStream's `symmetric-padding`): the borders split evenly


class Task(enum.Enum):
    """What a frame's answer is (DESIGN section 12)."""

    RAW = "raw"  # the model's named outputs per frame
    DETECTION = "detection"  # boxes, scores, labels (keypoints, masks) in the frame's pixels
    CLASSIFICATION = "classification"  # the top-k classes
    SEGMENTATION = "segmentation"  # one mask (COCO RLE) per class present


class DetectionFormat(enum.Enum):
    """How a detector's outputs are laid out (`auto`: from their shapes and types)."""

    AUTO = "auto"
    YOLO = "yolo"  # [N, 4 + nc (+ extra), A]: cx, cy, w, h, class scores; no NMS (Ultralytics v8/11)
    END2END = "end2end"  # [N, K, 6 (+ extra)]: x1, y1, x2, y2, score, class (YOLOv10, nms=True exports)
    EFFICIENT_NMS = "efficient_nms"  # num_detections, detection_boxes/scores/classes (TensorRT)
    TORCHVISION = "torchvision"  # List[Dict[str, Tensor]] (or the scripted (losses, detections))


class Activation(enum.Enum):
    """What turns a classifier's outputs into scores."""

    SOFTMAX = "softmax"
    SIGMOID = "sigmoid"
    NONE = "none"  # the outputs already are scores


class JpegDecoder(enum.Enum):
    """Where JPEG frames are decoded on a CUDA worker."""

    CPU = "cpu"  # libjpeg-turbo (simplejpeg) into the pinned staging slot, Pillow as the fallback
    NVJPEG = "nvjpeg"  # torchvision's batched nvJPEG into the chunk on the device; CPU per frame as the fallback


@dataclass(frozen=True, slots=True)
class Normalize:
    """`x = (pixel * scale - mean[c]) / std[c]`, applied on the device."""

    scale: float = 1.0
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)

    @property
    def is_identity(self) -> bool:
        return self.scale == 1.0 and self.mean == (0.0, 0.0, 0.0) and self.std == (1.0, 1.0, 1.0)


def _whole(low: int, high: int) -> Parse:
    def parse(key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"handler.{key} = {value!r}: use a whole number from {low} to {high}")
        return value

    return parse


def _optional(parse: Parse) -> Parse:
    """`null` (or no key) keeps the default."""
    def optional(key: str, value: Any) -> Any:
        return _DEFAULT if value is None else parse(key, value)

    return optional


def _positive(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"handler.{key} = {value!r}: use a positive number (or omit it)")
    return float(value)


def host_cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0))


def _threads(key: str, value: Any) -> int | None:
    """`auto` (None: resolved per worker, `HandlerConfig.resolved`) or a whole number."""
    if value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
        raise ConfigError(f"handler.{key} = {value!r}: use auto (one per CPU) or a whole number from 1 to 4096")
    return value


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"handler.{key} = {value!r}: use true or false")
    return value


def _choice(kind: type[enum.Enum]) -> Parse:
    def parse(key: str, value: Any) -> enum.Enum:
        try:
            return kind(value)
        except ValueError:
            raise ConfigError(f"handler.{key} = {value!r}: use one of {[c.value for c in kind]}") from None

    return parse


def _names(key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(n, str) for n in value):
        raise ConfigError(f"handler.{key} = {value!r}: use a list of names")
    return tuple(value)


def _dense(key: str, value: Any) -> tuple[str, ...] | object:
    if value == "auto":
        return _DEFAULT
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise ConfigError(f"handler.{key} = {value!r}: use auto or a list of output names ([] for none)")
    return tuple(value)


def _codecs(key: str, value: Any) -> tuple[str, ...]:
    """FFmpeg decoder names, e.g. `[h264, hevc, mjpeg]`; `[]` turns video segments off."""
    ok = isinstance(value, list) and all(
        isinstance(v, str) and v and v.replace("_", "").isalnum() and v == v.lower() for v in value
    )
    if not ok:
        raise ConfigError(
            f"handler.video_codecs = {value!r}: use a list of FFmpeg codec names in lower case, "
            "e.g. [h264, hevc, mjpeg]"
        )
    aliases = {"h265": "hevc", "avc": "h264", "x264": "h264", "x265": "hevc", "jpeg": "mjpeg"}
    wrong = [v for v in value if v in aliases]
    if wrong:
        fixes = ", ".join(f"{v} -> {aliases[v]}" for v in wrong)
        raise ConfigError(f"handler.video_codecs = {value!r}: use FFmpeg's codec names ({fixes})")
    return tuple(value)


def _size(key: str, value: Any) -> tuple[int, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise ConfigError(f"handler.input_size = {value!r}: use [height, width]")
    side = _whole(1, _MAX_SIDE)
    return side("input_size[0]", value[0]), side("input_size[1]", value[1])


def _normalize(key: str, value: Any) -> Normalize:
    if not isinstance(value, Mapping) or set(value) - {"scale", "mean", "std"}:
        raise ConfigError(f"handler.normalize = {value!r}: use a mapping with scale, mean, std")
    scale = value.get("scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0:
        raise ConfigError(f"handler.normalize.scale = {scale!r}: use a positive number, e.g. 0.00392156 (1/255)")
    triples: dict[str, tuple[float, float, float]] = {}
    for name, default in (("mean", 0.0), ("std", 1.0)):
        triple = value.get(name, [default] * 3)
        ok = isinstance(triple, list) and len(triple) == 3 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in triple
        )
        if not ok or (name == "std" and min(triple) <= 0):
            raise ConfigError(f"handler.{key}.{name} = {triple!r}: use three numbers (R, G, B)"
                              + (", all positive" if name == "std" else ""))
        triples[name] = (float(triple[0]), float(triple[1]), float(triple[2]))
    return Normalize(float(scale), triples["mean"], triples["std"])


def _fraction(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigError(f"handler.{key} = {value!r}: use a number from 0 to 1")
    return float(value)


def _pixels(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= _MAX_SIDE:
        raise ConfigError(f"handler.{key} = {value!r}: use a number of pixels from 0 to {_MAX_SIDE}")
    return float(value)


ClassKey = int | str  # a class id, or a label from the labels file


#: A torchvision detector letterboxed would see the padding and have its boxes shifted twice.
TORCHVISION_LETTERBOX = ("handler.format = torchvision (set, or found by format: auto): a torchvision detector "
                         "resizes each frame itself; use resize: pad (the default), not letterbox")


def _class_key(key: str, value: Any) -> ClassKey:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "":
        raise ConfigError(f"handler.{key}: {value!r} is neither a class id nor a label")
    if isinstance(value, int) and value < 0:
        raise ConfigError(f"handler.{key}: {value} is no class id: ids count from 0 (the model's first class); "
                          "use an id from 0 or a label")
    return value


def _class_thresholds(key: str, value: Any) -> tuple[tuple[ClassKey, float], ...]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"handler.{key} = {value!r}: use a mapping of class id or label to a "
                          "score threshold, e.g. {person: 0.5, 2: 0.4}")
    return tuple((_class_key(key, name), _fraction(f"{key}[{name!r}]", threshold))
                 for name, threshold in value.items())


def _class_list(key: str, value: Any) -> tuple[ClassKey, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"handler.{key} = {value!r}: use a list of class ids or labels, e.g. [person, car]")
    return tuple(_class_key(key, v) for v in value)


def _file_name(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value or "/" in value or "\\" in value or value.startswith("."):
        raise ConfigError(f"handler.{key} = {value!r}: use the name of a file beside the model-config "
                          "YAML (index_to_name.json or labels.txt); ./archive.sh packs it")
    return value


def _setting(default: Any, parse: Parse, factory: Callable[[], Any] | None = None,
             shown: str | None = None) -> Any:
    """A field with its default and the parser that checks a YAML value for it; `shown` is how
    the README writes a default computed from the host (`auto`)."""
    metadata = {"parse": parse, "shown": shown}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True, slots=True)
class HandlerConfig:
    """Settings of one model's handler, each with its default and its check. See the README's
    settings table (docs/configuration.md); `from_mapping` reads them from the `handler:` section."""

    model_max_batch: int = _setting(16, _whole(1, 4096))
    static_batch: int | None = _setting(None, _optional(_whole(1, 4096)))
    size_divisor: int = _setting(32, _whole(1, 4096))
    max_width: int = _setting(3840, _whole(1, _MAX_SIDE))
    max_height: int = _setting(2160, _whole(1, _MAX_SIDE))
    max_clip_frames: int = _setting(32, _whole(1, 4096))
    max_clip_pixels: int = _setting(32 * 1920 * 1080, _whole(1, 2**40))
    max_batch_pixels: int = _setting(4 * 32 * 1920 * 1080, _whole(1, 2**40))
    memory_budget_bytes: int | None = _setting(None, _optional(_whole(1, 2**50)))
    bytes_per_pixel: int = _setting(64, _whole(1, 2**40))
    max_frame_age_ms: float | None = _setting(None, _optional(_positive))
    pass_sizes: bool = _setting(False, _flag)
    resize: Resize = _setting(Resize.PAD, _choice(Resize))
    input_size: tuple[int, int] | None = _setting(None, _optional(_size))
    normalize: Normalize = _setting(None, _optional(_normalize), factory=Normalize)
    output_names: tuple[str, ...] | None = _setting(None, _optional(_names))
    dense_outputs: tuple[str, ...] | None = _setting(None, _dense)  # None: "auto"
    decode_threads: int | None = _setting(None, _threads, shown="auto")  # None: auto
    max_video_frames: int = _setting(120, _whole(1, 4096))
    video_codecs: tuple[str, ...] = _setting(("h264", "hevc", "mjpeg"), _codecs)
    video_hw_decode: bool = _setting(True, _flag)
    jpeg_decoder: JpegDecoder = _setting(JpegDecoder.CPU, _choice(JpegDecoder))
    max_response_bytes: int = _setting(6553500, _whole(1, 2**40))
    letterbox_pad: LetterboxPad = _setting(LetterboxPad.TOP_LEFT, _choice(LetterboxPad))
    resize_antialias: bool = _setting(True, _flag)
    pad_value: int = _setting(0, _whole(0, 255))
    # Vision tasks (DESIGN section 12, docs/models.md).
    task: Task = _setting(Task.RAW, _choice(Task))
    format: DetectionFormat = _setting(DetectionFormat.AUTO, _choice(DetectionFormat))
    labels: str | None = _setting(None, _optional(_file_name))
    num_classes: int | None = _setting(None, _optional(_whole(1, 100000)))
    score_threshold: float = _setting(0.25, _fraction)
    iou_threshold: float = _setting(0.7, _fraction)
    max_detections: int = _setting(300, _whole(1, 100000))
    pre_nms_topk: int = _setting(30000, _whole(1, 1000000))
    class_agnostic: bool = _setting(False, _flag)
    class_thresholds: tuple[tuple[ClassKey, float], ...] | None = _setting(None, _optional(_class_thresholds))
    classes: tuple[ClassKey, ...] | None = _setting(None, _optional(_class_list))
    min_box_size: float = _setting(0.0, _pixels)
    mask_threshold: float = _setting(0.5, _fraction)
    top_k: int = _setting(5, _whole(1, 100000))
    activation: Activation = _setting(Activation.SOFTMAX, _choice(Activation))

    @property
    def threads(self) -> int:
        """`decode_threads`; `auto` not yet `resolved` for a worker counts as a CPU worker's."""
        return self.resolved(cuda=False).decode_threads or 1

    def resolved(self, cuda: bool) -> HandlerConfig:
        """This config for a worker on CUDA or the CPU: `decode_threads: auto` is one thread per
        CPU on CUDA (the host only decodes and collates); on the CPU it is 2, so that the model's
        own intra-op threads (CPUs / decode_threads) keep the rest (docs/performance.md)."""
        if self.decode_threads is not None:
            return self
        return dataclasses.replace(self, decode_threads=host_cpus() if cuda else min(2, host_cpus()))

    @property
    def letterboxed(self) -> bool:
        """Frames are resized into `input_size` (`letterbox`, `rect`), not kept at their resolution."""
        return self.resize is not Resize.PAD

    @property
    def max_chunk(self) -> int:
        """Most frames one forward may take."""
        return self.static_batch or self.model_max_batch

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> HandlerConfig:
        """Parses and checks the `handler:` section.

        Raises:
            ConfigError: naming the key, the bad value and what to set instead.
        """
        raw = dict(raw or {})
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - set(fields))
        if unknown:
            raise ConfigError(f"handler: unknown key(s) {unknown}; known keys are {sorted(fields)}")
        values = {key: fields[key].metadata["parse"](key, value) for key, value in raw.items()}
        values = {key: value for key, value in values.items() if value is not _DEFAULT}
        if values.get("static_batch") is not None:
            values.setdefault("model_max_batch", values["static_batch"])  # unset: the engine's batch
        if values.get("task") is Task.CLASSIFICATION:  # a global pool would average the padding in
            values.setdefault("size_divisor", 1)
        config = cls(**values)
        config._check()
        return config

    def _check(self) -> None:
        if self.static_batch is not None and self.model_max_batch > self.static_batch:
            raise ConfigError(
                f"handler.model_max_batch = {self.model_max_batch} exceeds static_batch = "
                f"{self.static_batch}: a fixed-batch engine takes exactly static_batch frames; "
                "drop model_max_batch or set it to static_batch"
            )
        if self.letterboxed != (self.input_size is not None):
            raise ConfigError(
                "handler.resize = letterbox (or rect) needs handler.input_size = [height, width] "
                "(the engine's fixed input, or rect's fit), and input_size is only used with them"
            )
        if self.resize is Resize.RECT and self.input_size and any(side % self.size_divisor for side in self.input_size):
            raise ConfigError(
                f"handler.input_size = {list(self.input_size)} is not a multiple of size_divisor = "
                f"{self.size_divisor} (rect's stride): use {list(round_up(*self.input_size, self.size_divisor))}"
            )
        self._check_task()
        if self.max_batch_pixels < self.max_clip_pixels:
            raise ConfigError(
                f"handler.max_batch_pixels = {self.max_batch_pixels} is below max_clip_pixels = "
                f"{self.max_clip_pixels}: one clip could never be held; raise it to at least "
                f"{self.max_clip_pixels}"
            )
        if self.max_clip_pixels < self.max_width * self.max_height:
            raise ConfigError(
                f"handler.max_clip_pixels = {self.max_clip_pixels} is below one frame of "
                f"max_width x max_height; raise it to at least {self.max_width * self.max_height}"
            )

    def _check_task(self) -> None:
        if self.task is not Task.DETECTION and self.format is not DetectionFormat.AUTO:
            raise ConfigError(f"handler.format = {self.format.value} is a detector's output format, "
                              f"but handler.task = {self.task.value}: set task: detection or drop format")
        if self.format is DetectionFormat.TORCHVISION and self.letterboxed:
            raise ConfigError(TORCHVISION_LETTERBOX)
        if self.task is Task.RAW and self.labels is not None:
            raise ConfigError("handler.labels is for task: detection, classification or segmentation; "
                              "task: raw answers the model's outputs as they are")
