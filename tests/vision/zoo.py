"""Real torchvision architectures, seeded (no downloads): SSDlite, Faster R-CNN, ResNet-18, LRASPP.

Random weights answer nothing a test can tell apart (every score the same), so each backbone's
batch-norm statistics are set from the project's photographs first: then scores spread, and a
threshold keeps a handful of boxes per frame, as a trained model's would.
"""

from __future__ import annotations

import warnings
from functools import cache

import numpy as np
import torch
import torchvision
from torch import nn

from tests import support

CLASSES = 5  # small heads: quick on the CPU
EAGER_DETECTOR = '''
import torch
import torchvision


class FasterRCNN320(torch.nn.Module):
    """torchvision's Faster R-CNN (MobileNetV3 320 FPN) as TorchServe's eager mode loads it."""

    def __init__(self):
        super().__init__()
        self.model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
            weights=None, weights_backbone=None, num_classes=5, box_score_thresh=0.05)

    def forward(self, images):
        return self.model(images)
'''


def photos() -> list[torch.Tensor]:
    """The photographs as `[3, H, W]` float 0..1."""
    return [torch.from_numpy(support.frame(h, w, seed).copy()).permute(2, 0, 1).float() / 255
            for seed, (h, w) in enumerate([(300, 451), (512, 512), (400, 600)])]


@cache
def ssdlite() -> nn.Module:
    torch.manual_seed(0)
    model = torchvision.models.detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                       num_classes=CLASSES)
    images, _ = model.eval().transform(photos())
    return support.calibrated(model, model.backbone, images.tensors)


@cache
def faster_rcnn() -> nn.Module:
    torch.manual_seed(1)
    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=CLASSES, box_score_thresh=0.05)
    images, _ = model.eval().transform(photos())
    return support.calibrated(model, model.backbone, images.tensors)


@cache
def resnet18() -> nn.Module:
    torch.manual_seed(2)
    model = torchvision.models.resnet18(weights=None, num_classes=10)
    batch = torch.stack([torch.nn.functional.interpolate(p[None], size=(224, 224))[0] for p in photos()])
    return support.calibrated(model, model, (batch - 0.45) / 0.225)


@cache
def lraspp() -> nn.Module:
    torch.manual_seed(3)
    model = torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                      num_classes=CLASSES)
    batch = torch.stack([torch.nn.functional.interpolate(p[None], size=(256, 256))[0] for p in photos()])
    return support.calibrated(model, model.backbone, (batch - 0.45) / 0.225)


def script(model: nn.Module) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "always returns a (Losses, Detections) tuple in scripting"
        return torch.jit.script(model)


def frame(h: int, w: int, seed: int) -> np.ndarray:
    return support.frame(h, w, seed)


def tensor(frame: np.ndarray) -> torch.Tensor:
    """A frame as torchvision's models take it: `[3, H, W]` float 0..1."""
    return torch.from_numpy(frame.copy()).permute(2, 0, 1).float() / 255
