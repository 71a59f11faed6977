"""The detector `bench.cameras` serves: YOLOv8n's layers (widths 16..256, C2f, SPPF, PAN neck,
DFL head; `[N, 84, 8400]` at 640x640, YOLO11n's size and cost) with seeded weights, batch-norm
calibrated on photographs, whose outputs carry exactly `k` objects above the threshold (four
candidates each, which NMS reduces to one), exported to ONNX.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor, nn

INPUT = 640
WIDTH, HEIGHT = 640, 480  # where the planted objects lie: the top-left of the 640x640 input
CANDIDATES = 4  # anchors above the threshold per planted object: NMS keeps the best
DAMP = 0.2  # every other class score is sigmoid * DAMP, under the default threshold (0.25)
_COCO_NAMES = ("person bicycle car motorcycle airplane bus train truck boat traffic_light fire_hydrant "
               "stop_sign parking_meter bench bird cat dog horse sheep cow elephant bear zebra giraffe "
               "backpack umbrella handbag tie suitcase frisbee skis snowboard sports_ball kite baseball_bat "
               "baseball_glove skateboard surfboard tennis_racket bottle wine_glass cup fork knife spoon bowl "
               "banana apple sandwich orange broccoli carrot hot_dog pizza donut cake chair couch potted_plant "
               "bed dining_table toilet tv laptop mouse remote keyboard cell_phone microwave oven toaster sink "
               "refrigerator book clock vase scissors teddy_bear hair_drier toothbrush")
COCO = tuple(name.replace("_", " ") for name in _COCO_NAMES.split(" "))  # 80 names


class _Conv(nn.Module):
    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = nn.SiLU()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.bn(self.conv(x)))


class _Bottleneck(nn.Module):
    def __init__(self, c: int, shortcut: bool) -> None:
        super().__init__()
        self.cv1 = _Conv(c, c, 3)
        self.cv2 = _Conv(c, c, 3)
        self.add = shortcut

    def forward(self, x: Tensor) -> Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class _C2f(nn.Module):
    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = False) -> None:
        super().__init__()
        self.c = c2 // 2
        self.cv1 = _Conv(c1, 2 * self.c)
        self.cv2 = _Conv((2 + n) * self.c, c2)
        self.m = nn.ModuleList(_Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x: Tensor) -> Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class _SPPF(nn.Module):
    def __init__(self, c1: int, c2: int) -> None:
        super().__init__()
        self.cv1 = _Conv(c1, c1 // 2)
        self.cv2 = _Conv(c1 // 2 * 4, c2)
        self.pool = nn.MaxPool2d(5, 1, 2)

    def forward(self, x: Tensor) -> Tensor:
        y = [self.cv1(x)]
        for _ in range(3):
            y.append(self.pool(y[-1]))
        return self.cv2(torch.cat(y, 1))


class YoloNet(nn.Module):
    """YOLOv8n's architecture: `Tensor[N, 3, H, W]` (pixels / 255) -> `Tensor[N, 84, A]` of
    centre x, y, w, h (input pixels) and 80 class scores; A = 8400 at 640x640."""

    def __init__(self, classes: int = 80, reg_max: int = 16) -> None:
        super().__init__()
        self.stem = nn.Sequential(_Conv(3, 16, 3, 2), _Conv(16, 32, 3, 2), _C2f(32, 32, 1, True),
                                  _Conv(32, 64, 3, 2), _C2f(64, 64, 2, True))
        self.p4 = nn.Sequential(_Conv(64, 128, 3, 2), _C2f(128, 128, 2, True))
        self.p5 = nn.Sequential(_Conv(128, 256, 3, 2), _C2f(256, 256, 1, True), _SPPF(256, 256))
        self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
        self.top4, self.top3 = _C2f(384, 128), _C2f(192, 64)
        self.down3, self.out4 = _Conv(64, 64, 3, 2), _C2f(192, 128)
        self.down4, self.out5 = _Conv(128, 128, 3, 2), _C2f(384, 256)
        self.box = nn.ModuleList(nn.Sequential(_Conv(c, 64, 3), _Conv(64, 64, 3), nn.Conv2d(64, 4 * reg_max, 1))
                                 for c in (64, 128, 256))
        self.cls = nn.ModuleList(nn.Sequential(_Conv(c, 80, 3), _Conv(80, 80, 3), nn.Conv2d(80, classes, 1))
                                 for c in (64, 128, 256))
        self.register_buffer("bins", torch.arange(reg_max, dtype=torch.float32))
        self.reg_max = reg_max
        self.strides = [8, 16, 32]

    def forward(self, x: Tensor) -> Tensor:
        p3 = self.stem(x)
        p4 = self.p4(p3)
        p5 = self.p5(p4)
        t4 = self.top4(torch.cat([self.up(p5), p4], 1))
        n3 = self.top3(torch.cat([self.up(t4), p3], 1))
        n4 = self.out4(torch.cat([self.down3(n3), t4], 1))
        n5 = self.out5(torch.cat([self.down4(n4), p5], 1))
        boxes: list[Tensor] = []
        scores: list[Tensor] = []
        for i, (box, cls) in enumerate(zip(self.box, self.cls)):
            feature = [n3, n4, n5][i]
            n, _, h, w = feature.shape
            stride = float(self.strides[i])
            # DFL: each side's distance is the expectation over reg_max bins, in strides.
            dist = box(feature).view(n, 4, self.reg_max, h * w).softmax(2)
            dist = (dist * self.bins.view(1, 1, -1, 1)).sum(2)
            ys, xs = torch.meshgrid(torch.arange(h, device=x.device, dtype=x.dtype) + 0.5,
                                    torch.arange(w, device=x.device, dtype=x.dtype) + 0.5, indexing="ij")
            anchor = torch.stack([xs.reshape(-1), ys.reshape(-1)])[None]  # [1, 2, h*w]
            lt, rb = anchor - dist[:, :2], anchor + dist[:, 2:]
            boxes.append(torch.cat([(lt + rb) / 2, rb - lt], 1) * stride)
            scores.append(cls(feature).flatten(2).sigmoid())
        return torch.cat([torch.cat(boxes, 2), torch.cat(scores, 2)], 1)


class Planted(nn.Module):
    """A `YoloNet` whose outputs hold exactly `k` objects above 0.25, each with `CANDIDATES`
    anchors (boxes shifted by 2 px, IoU about 0.9; lower scores) that class-aware NMS removes; every
    other class score is damped under the threshold. The objects lie on a grid over the
    `WIDTH` x `HEIGHT` frame, at the top-left of the 640x640 input, class `i % 80`."""

    def __init__(self, net: YoloNet, k: int, side: int = INPUT) -> None:
        super().__init__()
        self.net = net
        plant, mask = _plants(k, side)
        self.register_buffer("plant", plant)
        self.register_buffer("mask", mask)
        self.damp = DAMP

    def forward(self, x: Tensor) -> Tensor:
        y = self.net(x)
        y = torch.cat([y[:, :4], y[:, 4:] * self.damp], 1)
        return torch.where(self.mask, self.plant, y)


def objects(k: int) -> list[tuple[float, float, float, float]]:
    """`k` non-overlapping boxes (x1, y1, x2, y2) on a grid over the frame, 20% margins."""
    cols = max(1, math.ceil(math.sqrt(k * WIDTH / HEIGHT)))
    rows = max(1, math.ceil(k / cols))
    cw, ch = WIDTH / cols, HEIGHT / rows
    return [(c * cw + 0.1 * cw, r * ch + 0.1 * ch, (c + 0.9) * cw, (r + 0.9) * ch)
            for r in range(rows) for c in range(cols)][:k]


def _plants(k: int, side: int) -> tuple[Tensor, Tensor]:
    """The planted rows `[1, 84, A]` and where they go `[1, 1, A]` bool (stride-8 anchors)."""
    grid = side // 8
    anchors = sum((side // s) ** 2 for s in (8, 16, 32))
    plant = torch.zeros(1, 84, anchors)
    mask = torch.zeros(1, 1, anchors, dtype=torch.bool)
    for i, (x1, y1, x2, y2) in enumerate(objects(k)):
        gx, gy = int((x1 + x2) / 16), int((y1 + y2) / 16)
        score = 0.5 + 0.4 * i / max(1, k)
        for j, (dx, dy) in enumerate([(0, 0), (1, 0), (0, 1), (1, 1)][:CANDIDATES]):
            a = (gy + dy) * grid + gx + dx
            if mask[0, 0, a]:
                raise ValueError(f"{k} objects are too many for distinct anchors")
            shift_x, shift_y = 2.0 * dx, 2.0 * dy
            plant[0, :4, a] = torch.tensor([(x1 + x2) / 2 + shift_x, (y1 + y2) / 2 + shift_y, x2 - x1, y2 - y1])
            plant[0, 4 + i % 80, a] = score - 0.05 * j
            mask[0, 0, a] = True
    return plant, mask


def yolo_net(seed: int = 0) -> YoloNet:
    """The seeded net, its batch-norm statistics taken from the photographs (so activations keep
    a trained net's scale: no runaway or subnormal values that would time differently)."""
    from tests.support import calibrated, frame

    torch.manual_seed(seed)
    net = YoloNet()
    photos = [torch.from_numpy(frame(INPUT, INPUT, s).copy()).permute(2, 0, 1).float() / 255 for s in range(4)]
    return calibrated(net, net, torch.stack(photos))


def export(work: Path, k: int = 10) -> Path | None:
    """The detector with `k` objects as `work/yolo.onnx` (symbolic batch, 640x640); None where
    onnxruntime or the exporter is not installed."""
    try:
        import onnxruntime  # noqa: F401

        from tests.onnx_export import export as to_onnx

        return to_onnx(Planted(yolo_net(), k).eval(), work / "yolo.onnx", None, (INPUT, INPUT))
    except ImportError:  # onnxruntime, onnx or onnxscript
        return None


COCO_LABELS = "\n".join(COCO) + "\n"
LETTERBOX = {"resize": "letterbox", "input_size": [INPUT, INPUT], "normalize": {"scale": 1 / 255}}
