"""`face_detector`: MTCNN face detection (Zhang et al., 2016) as one pure-torch TorchScript module.

The weights are the P-, R- and O-Net state dicts that the `facenet-pytorch` wheel (MIT) ships in
`facenet_pytorch/data/`; nothing else of that package runs: it is found with `find_spec`, never
imported (importing it pulls torchvision). Install it with
`pip install --no-deps facenet-pytorch==2.6.0`: its pins (torch < 2.3, torchvision, Pillow < 10.3)
must not reach this environment.

The pipeline is facenet-pytorch's `detect_face` with its defaults (`MTCNN(keep_all=True)`):
minimum face 20 px, thresholds 0.6 / 0.7 / 0.7, pyramid factor 0.709, area resampling, NMS at IoU
0.5 per scale then 0.7 across scales (P-Net), 0.7 (R-Net) and 0.7 over the smaller box ("Min", the
O-Net stage), box regression and squaring between stages, and the same float32 arithmetic in the
same order (on a channels-last frame, as facenet-pytorch's own), so boxes, scores and landmarks
agree with it to float rounding. Each frame is detected alone, on a channels-last copy of its own
area (`x[i, :, :h, :w]`), so neither padding nor a batch-mate can change its answer.

Where facenet-pytorch would fail, this module answers instead: a box whose crop, clipped to the
frame, is empty is dropped (facenet-pytorch leaves it out of its crops but not of its boxes and
then fails on a mask of the wrong length), and a frame under `min_face_size` on its short side has
no faces (facenet-pytorch fails on an empty pyramid). At most `max_faces` rows are kept, the best.
NMS is written here (no torchvision) and keeps what torchvision's `nms` and facenet-pytorch's
numpy "Min" NMS keep; score ties, which float scores make rare, go to the earlier box.
"""

from __future__ import annotations

import importlib.util
import pathlib
from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

MAX_FACES = 100
ROW = 21  # x1, y1, x2, y2, score, class, then 5 landmarks as (x, y, 1.0)
FACE = 0.0  # the class of every row: `face_detector_labels.txt` line 0
INSTALL = "pip install --no-deps facenet-pytorch==2.6.0"
WEIGHTS = ("pnet", "rnet", "onet")


class PNet(nn.Module):
    """The proposal network: fully convolutional, one 12x12 window per output cell (stride 2).

    `forward(x: Tensor[N, 3, H, W] float normalised)` returns `(reg: Tensor[N, 4, H', W'],
    prob: Tensor[N, H', W'])` with `H' = ceil((H - 2) / 2) - 4`, `prob` the face probability.
    """

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 10, kernel_size=3)
        self.prelu1 = nn.PReLU(10)
        self.pool1 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv2 = nn.Conv2d(10, 16, kernel_size=3)
        self.prelu2 = nn.PReLU(16)
        self.conv3 = nn.Conv2d(16, 32, kernel_size=3)
        self.prelu3 = nn.PReLU(32)
        self.conv4_1 = nn.Conv2d(32, 2, kernel_size=1)
        self.conv4_2 = nn.Conv2d(32, 4, kernel_size=1)

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.prelu3(self.conv3(self.prelu2(self.conv2(x))))
        prob = torch.softmax(self.conv4_1(x), dim=1)[:, 1]
        reg: Tensor = self.conv4_2(x)
        return reg, prob


class RNet(nn.Module):
    """The refinement network: `forward(x: Tensor[N, 3, 24, 24] float normalised)` returns
    `(reg: Tensor[N, 4], prob: Tensor[N])`."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 28, kernel_size=3)
        self.prelu1 = nn.PReLU(28)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2 = nn.Conv2d(28, 48, kernel_size=3)
        self.prelu2 = nn.PReLU(48)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3 = nn.Conv2d(48, 64, kernel_size=2)
        self.prelu3 = nn.PReLU(64)
        self.dense4 = nn.Linear(576, 128)
        self.prelu4 = nn.PReLU(128)
        self.dense5_1 = nn.Linear(128, 2)
        self.dense5_2 = nn.Linear(128, 4)

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.prelu3(self.conv3(x))
        # The dense layer was trained (in Caffe, then TensorFlow) on [N, W, H, C] order.
        x = self.prelu4(self.dense4(x.permute(0, 3, 2, 1).reshape(x.shape[0], -1)))
        prob = torch.softmax(self.dense5_1(x), dim=1)[:, 1]
        reg: Tensor = self.dense5_2(x)
        return reg, prob


class ONet(nn.Module):
    """The output network: `forward(x: Tensor[N, 3, 48, 48] float normalised)` returns
    `(reg: Tensor[N, 4], landmarks: Tensor[N, 10], prob: Tensor[N])`, landmarks as 5 x then 5 y,
    relative to the box."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, kernel_size=3)
        self.prelu1 = nn.PReLU(32)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3)
        self.prelu2 = nn.PReLU(64)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3 = nn.Conv2d(64, 64, kernel_size=3)
        self.prelu3 = nn.PReLU(64)
        self.pool3 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv4 = nn.Conv2d(64, 128, kernel_size=2)
        self.prelu4 = nn.PReLU(128)
        self.dense5 = nn.Linear(1152, 256)
        self.prelu5 = nn.PReLU(256)
        self.dense6_1 = nn.Linear(256, 2)
        self.dense6_2 = nn.Linear(256, 4)
        self.dense6_3 = nn.Linear(256, 10)

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.pool3(self.prelu3(self.conv3(x)))
        x = self.prelu4(self.conv4(x))
        x = self.prelu5(self.dense5(x.permute(0, 3, 2, 1).reshape(x.shape[0], -1)))
        prob = torch.softmax(self.dense6_1(x), dim=1)[:, 1]
        reg: Tensor = self.dense6_2(x)
        landmarks: Tensor = self.dense6_3(x)
        return reg, landmarks, prob


class FaceDetector(nn.Module):
    """MTCNN over a padded batch, each frame alone.

    `forward(x: Tensor[N, 3, H, W] float32 RGB 0..255, sizes: Tensor[N, 2] int64 (h, w))`, each
    frame in the top-left corner of its slot, returns `Tensor[N, max_faces, 21] float32`: per row
    `x1, y1, x2, y2, score, class (0.0 = face)`, then the 5 landmarks (eyes, nose, mouth corners)
    as `(x, y, 1.0)`, in the frame's pixels; rows sorted by score, descending, and all zero past
    the frame's faces. The crops are cut on the host, so reading `sizes` and each stage's boxes
    waits for the device.
    """

    def __init__(self, pnet: PNet, rnet: RNet, onet: ONet, min_face_size: float = 20.0,
                 thresholds: Tuple[float, float, float] = (0.6, 0.7, 0.7), factor: float = 0.709,
                 max_faces: int = MAX_FACES) -> None:
        super().__init__()
        if min_face_size <= 0 or not 0 < factor < 1 or max_faces < 1:
            raise ValueError(f"min_face_size {min_face_size} must be > 0, factor {factor} in (0, 1), "
                             f"max_faces {max_faces} >= 1")
        self.pnet = pnet
        self.rnet = rnet
        self.onet = onet
        self.min_face_size = float(min_face_size)
        self.thresholds: List[float] = [float(t) for t in thresholds]
        self.factor = float(factor)
        self.max_faces = max_faces
        self.row = ROW  # TorchScript reads attributes, not module globals
        self.face = FACE

    def forward(self, x: Tensor, sizes: Tensor) -> Tensor:
        if x.dim() != 4 or x.shape[1] != 3:
            raise ValueError(f"x must be [N, 3, H, W], got {x.shape}")
        if sizes.dim() != 2 or sizes.shape[0] != x.shape[0] or sizes.shape[1] != 2:
            raise ValueError(f"sizes must be [N, 2] = [{x.shape[0]}, 2], got {sizes.shape}")
        height, width = x.shape[2], x.shape[3]
        out = torch.zeros(x.shape[0], self.max_faces, self.row, dtype=torch.float32, device=x.device)
        hw: List[List[int]] = sizes.tolist()
        for i in range(x.shape[0]):
            h, w = min(max(hw[i][0], 0), height), min(max(hw[i][1], 0), width)
            if h == 0 or w == 0:
                continue
            frame = x[i:i + 1, :, :h, :w].to(torch.float32)
            faces = self.detect(frame.contiguous(memory_format=torch.channels_last))
            count = min(faces.shape[0], self.max_faces)
            out[i, :count] = faces[:count]
        return out

    def detect(self, image: Tensor) -> Tensor:
        """All faces of one frame: `image` `Tensor[1, 3, h, w] float32 0..255` (channels-last is
        fastest on the CPU) -> `Tensor[F, 21]` rows as in `forward`, best first."""
        boxes = self._propose(image)
        if boxes.shape[0] > 0:
            boxes = self._refine(image, boxes)
        if boxes.shape[0] == 0:
            return torch.zeros(0, self.row, dtype=torch.float32, device=image.device)
        return self._output(image, boxes)

    def _propose(self, image: Tensor) -> Tensor:
        """Stage 1: P-Net over the pyramid -> squared candidates `Tensor[B, 5]` (box, score)."""
        h, w = image.shape[2], image.shape[3]
        scale = 12.0 / self.min_face_size
        side = min(h, w) * scale
        per_scale: List[Tensor] = []
        while side >= 12:
            level = F.interpolate(image, size=[int(h * scale + 1), int(w * scale + 1)], mode="area")
            reg, prob = self.pnet((level - 127.5) * 0.0078125)
            found = _windows(reg[0], prob[0], scale, self.thresholds[0])
            per_scale.append(found[_nms(found[:, :4], found[:, 4], 0.5, False)])
            scale = scale * self.factor
            side = side * self.factor
        if len(per_scale) == 0:
            return torch.zeros(0, 5, dtype=torch.float32, device=image.device)
        found = torch.cat(per_scale)
        found = found[_nms(found[:, :4], found[:, 4], 0.7, False)]
        # P-Net's offsets are relative to the window's size without MTCNN's usual + 1.
        width, height = found[:, 2] - found[:, 0], found[:, 3] - found[:, 1]
        boxes = torch.stack([found[:, 0] + found[:, 5] * width, found[:, 1] + found[:, 6] * height,
                             found[:, 2] + found[:, 7] * width, found[:, 3] + found[:, 8] * height,
                             found[:, 4]], dim=1)
        return _square(boxes)

    def _refine(self, image: Tensor, boxes: Tensor) -> Tensor:
        """Stage 2: R-Net on 24x24 crops -> regressed, squared boxes `Tensor[B', 5]`."""
        crops, kept = _crops(image, boxes, 24)
        if kept.shape[0] == 0:
            return boxes[:0]
        reg, prob = self.rnet(crops)
        passed = prob > self.thresholds[1]
        boxes = torch.cat([boxes[kept][passed, :4], prob[passed].unsqueeze(1)], dim=1)
        reg = reg[passed]
        best = _nms(boxes[:, :4], boxes[:, 4], 0.7, False)
        return _square(_regress(boxes[best], reg[best]))

    def _output(self, image: Tensor, boxes: Tensor) -> Tensor:
        """Stage 3: O-Net on 48x48 crops -> final rows `Tensor[F, 21]`, best first."""
        crops, kept = _crops(image, boxes, 48)
        if kept.shape[0] == 0:
            return torch.zeros(0, self.row, dtype=torch.float32, device=image.device)
        reg, landmarks, prob = self.onet(crops)
        passed = prob > self.thresholds[2]
        boxes = torch.cat([boxes[kept][passed, :4], prob[passed].unsqueeze(1)], dim=1)
        reg, landmarks = reg[passed], landmarks[passed]
        # Landmarks are placed in the box O-Net saw, before its own regression moves it.
        width = (boxes[:, 2] - boxes[:, 0] + 1).unsqueeze(1)
        height = (boxes[:, 3] - boxes[:, 1] + 1).unsqueeze(1)
        points_x = width * landmarks[:, :5] + boxes[:, 0:1] - 1
        points_y = height * landmarks[:, 5:] + boxes[:, 1:2] - 1
        boxes = _regress(boxes, reg)
        best = _nms(boxes[:, :4], boxes[:, 4], 0.7, True)
        rows = torch.zeros(best.shape[0], self.row, dtype=torch.float32, device=image.device)
        rows[:, :5] = boxes[best]
        rows[:, 5] = self.face
        rows[:, 6::3] = points_x[best]
        rows[:, 7::3] = points_y[best]
        rows[:, 8::3] = 1.0
        return rows


def _windows(reg: Tensor, prob: Tensor, scale: float, threshold: float) -> Tensor:
    """P-Net cells at or above `threshold` as boxes in frame pixels: `reg` `Tensor[4, H', W']`,
    `prob` `Tensor[H', W']` -> `Tensor[B, 9]` (x1, y1, x2, y2, score, 4 offsets)."""
    hit = prob >= threshold
    xy = hit.nonzero().flip(1).to(reg.dtype)  # row-major order, as (x, y)
    start = ((2 * xy + 1) / scale).floor()
    end = ((2 * xy + 12) / scale).floor()
    return torch.cat([start, end, prob[hit].unsqueeze(1), reg[:, hit].t()], dim=1)


def _nms(boxes: Tensor, scores: Tensor, threshold: float, over_min: bool, block_size: int = 512) -> Tensor:
    """Greedy non-maximum suppression: `boxes` `Tensor[B, 4]` (x1, y1, x2, y2), `scores`
    `Tensor[B]` -> kept indices `Tensor[K] int64`, best first (ties in index order).

    `over_min=False` is torchvision's `nms` (IoU of continuous boxes; a box goes when its overlap
    with a better kept one is above `threshold`); `over_min=True` is MTCNN's "Min" (pixel boxes,
    `+ 1` on each side, intersection over the smaller area; a box stays when it is at most
    `threshold`). The same answer as the box-by-box loop, in blocks of `block_size` boxes: each block
    is first cut by the boxes kept before it, then settles its own greedy order by fixed-point
    iteration (entry j of a pass depends on entries before j only, so pass t fixes the first t
    entries and the fixed point is the greedy answer; real boxes settle in a few passes). Memory
    stays `O(K * block_size)` and no box costs its own loop.
    """
    if boxes.shape[0] == 0:
        return torch.zeros(0, dtype=torch.int64, device=boxes.device)
    order = torch.argsort(scores, dim=0, descending=True, stable=True)
    ranked = boxes[order]
    kept = ranked[:0]
    picks: List[Tensor] = []
    for start in range(0, ranked.shape[0], block_size):
        block = ranked[start:start + block_size]
        alive = ~_suppresses(kept, block, threshold, over_min).any(dim=0)
        # over[i, j]: an earlier box i of the block suppresses box j if i is kept.
        over = _suppresses(block, block, threshold, over_min).triu(diagonal=1)
        keep = alive
        while True:
            settled = alive & ~(over & keep.unsqueeze(1)).any(dim=0)
            if torch.equal(settled, keep):
                break
            keep = settled
        picks.append(keep.nonzero().squeeze(1) + start)
        kept = torch.cat([kept, block[keep]])
    return order[torch.cat(picks)]


def _suppresses(better: Tensor, boxes: Tensor, threshold: float, over_min: bool) -> Tensor:
    """`Tensor[P, Q] bool`: box `better[p]` suppresses `boxes[q]` (`Tensor[P, 4]`, `Tensor[Q, 4]`)."""
    one = 1.0 if over_min else 0.0
    a = better.unsqueeze(1)  # [P, 1, 4]
    b = boxes.unsqueeze(0)  # [1, Q, 4]
    size = (torch.minimum(a[..., 2:], b[..., 2:]) - torch.maximum(a[..., :2], b[..., :2]) + one).clamp(min=0)
    inter = size[..., 0] * size[..., 1]
    area_a = (a[..., 2] - a[..., 0] + one) * (a[..., 3] - a[..., 1] + one)
    area_b = (b[..., 2] - b[..., 0] + one) * (b[..., 3] - b[..., 1] + one)
    if over_min:
        return ~(inter / torch.minimum(area_a, area_b) <= threshold)
    return inter / (area_a + area_b - inter) > threshold


def _regress(boxes: Tensor, reg: Tensor) -> Tensor:
    """Moves pixel boxes `Tensor[B, 5]` by offsets `Tensor[B, 4]` relative to their size (+ 1)."""
    width = boxes[:, 2] - boxes[:, 0] + 1
    height = boxes[:, 3] - boxes[:, 1] + 1
    moved = torch.stack([boxes[:, 0] + reg[:, 0] * width, boxes[:, 1] + reg[:, 1] * height,
                         boxes[:, 2] + reg[:, 2] * width, boxes[:, 3] + reg[:, 3] * height], dim=1)
    return torch.cat([moved, boxes[:, 4:]], dim=1)


def _square(boxes: Tensor) -> Tensor:
    """Each box `Tensor[B, 5]` grown to a square about its centre, side = its longer side."""
    width = boxes[:, 2] - boxes[:, 0]
    height = boxes[:, 3] - boxes[:, 1]
    side = torch.maximum(width, height)
    x1 = boxes[:, 0] + width * 0.5 - side * 0.5
    y1 = boxes[:, 1] + height * 0.5 - side * 0.5
    return torch.stack([x1, y1, x1 + side, y1 + side, boxes[:, 4]], dim=1)


def _crops(image: Tensor, boxes: Tensor, size: int) -> Tuple[Tensor, Tensor]:
    """The frame's pixels under each box, clipped to the frame, resampled (area) to `size` and
    normalised: `image` `Tensor[1, 3, h, w]`, `boxes` `Tensor[B, 5]` -> (`Tensor[B', 3, size,
    size]`, indices `Tensor[B'] int64` of the boxes whose clipped crop is not empty)."""
    h, w = image.shape[2], image.shape[3]
    # MTCNN's 1-based pixel boxes: columns x1 - 1 .. x2 - 1 (truncated toward zero) inside the frame.
    corners: List[List[int]] = boxes[:, :4].trunc().to(torch.int64).tolist()
    crops: List[Tensor] = []
    kept: List[int] = []
    for k, corner in enumerate(corners):
        x1, y1, x2, y2 = max(corner[0], 1), max(corner[1], 1), min(corner[2], w), min(corner[3], h)
        if y2 > y1 - 1 and x2 > x1 - 1:
            crops.append(F.interpolate(image[:, :, y1 - 1:y2, x1 - 1:x2], size=[size, size], mode="area"))
            kept.append(k)
    if len(crops) == 0:
        return image.new_zeros(0, 3, size, size), torch.zeros(0, dtype=torch.int64, device=image.device)
    indices = torch.tensor(kept, dtype=torch.int64, device=image.device)
    return (torch.cat(crops) - 127.5) * 0.0078125, indices


def weights_dir() -> pathlib.Path:
    """`facenet_pytorch/data` of the installed wheel, found without importing the package.

    Raises:
        ModuleNotFoundError: facenet-pytorch is not installed (the message says how to install it).
        FileNotFoundError: it is installed but a state dict is missing.
    """
    spec = importlib.util.find_spec("facenet_pytorch")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"face_detector needs the MTCNN weights that facenet-pytorch ships: {INSTALL}")
    data = pathlib.Path(list(spec.submodule_search_locations)[0]) / "data"
    missing = [str(data / f"{name}.pt") for name in WEIGHTS if not (data / f"{name}.pt").is_file()]
    if missing:
        raise FileNotFoundError(f"facenet-pytorch is installed without {', '.join(missing)}: "
                                f"reinstall it with {INSTALL} --force-reinstall")
    return data


def pretrained(max_faces: int = MAX_FACES) -> FaceDetector:
    """A `FaceDetector` (eval mode) with facenet-pytorch's MTCNN weights and defaults."""
    data = weights_dir()
    pnet, rnet, onet = PNet(), RNet(), ONet()
    for name, net in zip(WEIGHTS, (pnet, rnet, onet)):
        net.load_state_dict(torch.load(data / f"{name}.pt", map_location="cpu", weights_only=True))
    return FaceDetector(pnet, rnet, onet, max_faces=max_faces).eval()


def build() -> torch.jit.ScriptModule:
    """The TorchScript module shipped in `face_detector.mar` (weights from facenet-pytorch)."""
    return torch.jit.script(pretrained())
