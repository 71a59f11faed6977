"""Detections in each frame's own pixels: every format, both layouts, whatever the batch mixes."""

import json

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handler.config import HandlerConfig
from handler.errors import ConfigError
from handler.tasks import rle
from handler.tasks.labels import Labels
from tests import planted, support
from tests.support import Answering

SCALE = {"normalize": {"scale": 1 / 255}}
LABELS = Labels({0: "red", 1: "green", 2: "blue"})


def config(**settings):
    return HandlerConfig.from_mapping({"task": "detection", **SCALE, **settings})


def answers(model, settings, frames, labels=LABELS, ooms=None):
    """Each frame's detections, one request per frame, all in one batch."""
    pipeline = Answering(model, config(**settings), labels=labels, ooms=ooms)
    pipeline.check()
    requests = [support.request(support.npy(f), "application/x-npy") for f in frames]
    responses, _ = pipeline.run(requests)
    bodies = [json.loads(r.body) for r in responses]
    assert [r.status for r in responses] == [200] * len(frames), bodies
    return [body["frames"][0]["detections"] for body in bodies]


def boxes(detections):
    return [(d["label"], d["box"], d["score"]) for d in detections]


@pytest.fixture(scope="module")
def yolo():
    return planted.script(planted.Yolo())


def test_yolo_boxes_are_the_planted_rectangles_at_mixed_resolutions_in_one_batch(yolo):
    frames = [planted.scene(120, 200, {0: (10, 20, 50, 60), 2: (100, 10, 190, 90)}),
              planted.scene(333, 517, {1: (300, 100, 517, 333)}),
              planted.scene(64, 64, {})]
    got = answers(yolo, {}, frames)
    assert boxes(got[0]) == [("red", [10, 20, 50, 60], 0.9), ("blue", [100, 10, 190, 90], 0.8)]
    assert boxes(got[1]) == [("green", [300, 100, 517, 333], 0.85)]  # touching the frame's edge
    assert got[2] == []
    assert [d["class_id"] for d in got[0]] == [0, 2]


@pytest.mark.parametrize("pad, value", [("top_left", 0), ("center", 114)])
def test_letterbox_boxes_come_back_through_each_frames_own_scale_and_offsets(yolo, pad, value):
    settings = {"resize": "letterbox", "input_size": [320, 320], "letterbox_pad": pad, "pad_value": value}
    # Scales 1/2 (640x320, landscape) and 1/3 (portrait 960x480): even rectangles map back exactly.
    frames = [planted.scene(320, 640, {0: (40, 20, 200, 100), 1: (400, 200, 640, 320)}),
              planted.scene(960, 480, {2: (30, 60, 270, 300)})]
    got = answers(yolo, settings, frames)
    assert boxes(got[0]) == [("red", [40, 20, 200, 100], 0.9), ("green", [400, 200, 640, 320], 0.85)]
    assert boxes(got[1]) == [("blue", [30, 60, 270, 300], 0.8)]


def test_a_batch_mate_splits_or_fixed_batch_padding_never_change_an_answer(yolo):
    frame = planted.scene(240, 320, {0: (16, 32, 48, 96), 1: (200, 100, 300, 220)})
    alone = answers(yolo, {}, [frame])[0]
    others = [planted.scene(240 + 32 * i, 320, {2: (0, 0, 10 + i, 10)}) for i in range(9)]
    mixed = answers(yolo, {"model_max_batch": 4}, [*others[:5], frame, *others[5:]])
    assert mixed[5] == alone
    fixed = answers(yolo, {"static_batch": 8, "size_divisor": 64}, [frame, *others[:2]])
    assert fixed[0] == alone
    small = OutOfMemoryAbove(yolo, 2)
    split = answers(small, {"model_max_batch": 16}, [frame] * 6, ooms=lambda: small.ooms)
    assert split == [alone] * 6
    assert small.ooms == 2  # 6 -> 3 + 3 -> (1 + 2) + ...: every frame still answered exactly


class OutOfMemoryAbove:
    """A model that runs out of memory on more than `frames` frames, as the allocator counts it."""

    def __init__(self, model, frames):
        self.model, self.frames, self.ooms = model, frames, 0

    def __call__(self, x, *args):
        if x.shape[0] > self.frames:
            self.ooms += 1
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.model(x, *args)


def test_nms_is_class_aware_unless_told_otherwise(yolo):
    # A red ring around a green block: their boxes overlap with IoU above 0.7.
    frame = planted.scene(200, 200, {0: (10, 10, 190, 190)})
    frame[14:186, 14:186] = planted.COLOURS[1]
    assert [d["label"] for d in answers(yolo, {}, [frame])[0]] == ["red", "green"]
    assert [d["label"] for d in answers(yolo, {"class_agnostic": True}, [frame])[0]] == ["red"]


def test_thresholds_per_class_allow_list_min_size_and_cap(yolo):
    frame = planted.scene(200, 300, {0: (0, 0, 100, 100), 1: (120, 0, 160, 8), 2: (200, 100, 300, 200)})
    assert [d["label"] for d in answers(yolo, {}, [frame])[0]] == ["red", "green", "blue"]
    assert [d["label"] for d in answers(yolo, {"class_thresholds": {"green": 0.86, 2: 0.1}}, [frame])[0]] == \
        ["red", "blue"]
    assert [d["label"] for d in answers(yolo, {"classes": ["blue", 1]}, [frame])[0]] == ["green", "blue"]
    assert [d["label"] for d in answers(yolo, {"min_box_size": 10}, [frame])[0]] == ["red", "blue"]
    assert [d["label"] for d in answers(yolo, {"max_detections": 2}, [frame])[0]] == ["red", "green"]


def test_thresholds_per_class_below_the_duplicates_still_get_nms(yolo):
    frame = planted.scene(200, 300, {2: (200, 100, 300, 200)})
    got = answers(yolo, {"class_thresholds": {"blue": 0.1}}, [frame])[0]
    assert boxes(got) == [("blue", [200, 100, 300, 200], 0.8)]  # shifted (IoU 0.9) and low (IoU 1) suppressed


def test_an_id_without_a_label_is_answered_by_its_number_and_a_label_no_class_has_fails_at_load(yolo):
    frame = planted.scene(100, 100, {2: (10, 10, 20, 20)})
    [got] = answers(yolo, {}, [frame], labels=Labels({0: "red"}))
    assert (got[0]["class_id"], got[0]["label"]) == (2, "2")
    with pytest.raises(ConfigError, match="no class is labelled 'purple'"):
        answers(yolo, {"classes": ["purple"]}, [frame])


def test_pose_keypoints_come_back_to_the_frame_and_are_clipped(yolo):
    pose = planted.script(planted.Yolo(pose=True))
    settings = {"resize": "letterbox", "input_size": [320, 320], "letterbox_pad": "center", "num_classes": 3}
    frame = planted.scene(320, 640, {0: (40, 20, 200, 100)})
    [got] = answers(pose, settings, [frame])
    assert got[0]["box"] == [40, 20, 200, 100]
    assert got[0]["keypoints"] == [[40, 20, 0.9], [200, 100, 0.8]]


def test_end2end_and_efficient_nms_formats(yolo):
    frames = [planted.scene(120, 200, {0: (10, 20, 50, 60), 2: (100, 10, 190, 90)}), planted.scene(50, 60, {})]
    expected = answers(yolo, {}, frames)
    for model in (planted.End2End(), planted.EfficientNms()):
        assert answers(planted.script(model), {}, frames) == expected, type(model).__name__


def test_formats_are_found_from_the_outputs_and_a_wrong_one_fails_at_load_naming_both(yolo, caplog):
    for model, name in ((planted.Yolo(), "yolo"), (planted.End2End(), "end2end"), (planted.EfficientNms(), "efficient_nms")):
        pipeline = Answering(planted.script(model), config(), labels=LABELS)
        assert pipeline.check() == f"detection (format {name})"
    with pytest.raises(ConfigError, match=r"handler.format = end2end: the model's outputs Tensor\[1, 7, 64\]"):
        Answering(yolo, config(format="end2end"), labels=LABELS).check()
    with pytest.raises(ConfigError, match=r"handler.task = classification takes .* Tensor\[1, 4, 256, 256\]"):
        Answering(planted.script(planted.Segmenter()), HandlerConfig.from_mapping(
            {"task": "classification", **SCALE})).check()
    with pytest.raises(ConfigError, match=r"outputs Tensor\[1, 3\] are no detector format"):
        Answering(planted.script(planted.Classifier()), config()).check()


def test_a_box_past_the_letterbox_edge_by_a_fraction_survives_and_one_in_the_padding_is_dropped():
    class Edges(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n = x.shape[0]
            out = torch.zeros(n, 7, 16)
            # 1000x333 into 320x320 (centre): r = 0.32, active 320x107 at top 106; the box reaches
            # 0.4 px into the bottom padding; the second lies wholly in the top padding.
            out[:, :4, 0] = torch.tensor([160.0, 160.0, 100.0, 107.8])
            out[:, 4, 0] = 0.9
            out[:, :4, 1] = torch.tensor([160.0, 50.0, 100.0, 40.0])
            out[:, 5, 1] = 0.9
            return out

    got = answers(torch.jit.script(Edges()), {"resize": "letterbox", "input_size": [320, 320],
                                               "letterbox_pad": "center"}, [planted.scene(333, 1000, {})])[0]
    r = 0.32
    # Taken back as Ultralytics' scale_boxes does: the border from the unrounded 106.56 rows (107),
    # not the 106 rows the letterbox put above the frame's 107.
    top = round((320 - 333 * r) / 2 - 0.1)
    assert (top, round((320 - 107) / 2 - 0.1)) == (107, 106)
    assert boxes(got) == [("red", [round((160 - 50) / r, 2), max(0.0, round((160 - 53.9 - top) / r, 2)),
                                   round((160 + 50) / r, 2), 333.0], 0.9)]
    assert (160 + 53.9 - top) / r > 333  # it did cross the frame's edge


def test_classification_top_k_with_softmax_sigmoid_and_labels():
    model = planted.script(planted.Classifier())
    frame = planted.scene(64, 96, {0: (0, 0, 30, 40)})  # a whole slot: no padding in the mean
    x = torch.from_numpy(frame).permute(2, 0, 1)[None].double() / 255
    logits = 10 * x.mean(dim=(2, 3))[0]
    for activation, scores in (("softmax", logits.softmax(0)), ("sigmoid", logits.sigmoid()), ("none", logits)):
        pipeline = Answering(model, HandlerConfig.from_mapping(
            {"task": "classification", "top_k": 2, "activation": activation, **SCALE}), labels=LABELS)
        pipeline.check()
        [response], _ = pipeline.run([support.request(support.npy(frame), "application/x-npy")])
        got = json.loads(response.body)["frames"][0]["classes"]
        order = scores.argsort(descending=True)[:2].tolist()
        assert [c["class_id"] for c in got] == order
        assert [c["label"] for c in got] == [LABELS.name(i) for i in order]
        assert [c["score"] for c in got] == pytest.approx([scores[i].item() for i in order], abs=1e-6)


@pytest.mark.parametrize("settings", [{}, {"resize": "letterbox", "input_size": [128, 128], "letterbox_pad": "center"}])
def test_segmentation_masks_are_rle_in_the_frames_pixels(settings):
    model = planted.script(planted.Segmenter())
    # Letterbox scales 1 and 4: the class map comes back exactly.
    frames = [planted.scene(64, 128, {0: (8, 8, 40, 32), 2: (64, 0, 128, 64)}), planted.scene(32, 16, {1: (0, 0, 8, 12)})]
    pipeline = Answering(model, HandlerConfig.from_mapping({"task": "segmentation", **SCALE, **settings}),
                         labels=Labels({0: "background", 1: "red", 2: "green", 3: "blue"}))
    pipeline.check()
    responses, _ = pipeline.run([support.request(support.npy(f), "application/x-npy") for f in frames])
    for response, frame in zip(responses, frames):
        segments = json.loads(response.body)["frames"][0]["segments"]
        classes = np.zeros(frame.shape[:2], dtype=np.int64)
        for c, colour in enumerate(planted.COLOURS):
            classes[(frame == colour).all(axis=2)] = c + 1
        present = sorted(set(classes.ravel().tolist()))
        assert [s["class_id"] for s in segments] == present
        for segment in segments:
            mask = rle.decode(segment["mask"])
            assert segment["mask"]["size"] == list(frame.shape[:2])
            assert segment["area"] == int((classes == segment["class_id"]).sum())
            assert (mask == (classes == segment["class_id"])).all()


side = st.integers(8, 300)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(side, side, st.integers(0, 2)), min_size=1, max_size=12), st.data())
def test_any_mix_of_resolutions_answers_each_frame_its_own_rectangle(yolo, frames, data):
    scenes, expected = [], []
    for h, w, c in frames:
        x1, y1 = data.draw(st.integers(0, w - 2)), data.draw(st.integers(0, h - 2))
        x2, y2 = data.draw(st.integers(x1 + 1, w)), data.draw(st.integers(y1 + 1, h))
        scenes.append(planted.scene(h, w, {c: (x1, y1, x2, y2)}))
        expected.append([(LABELS.name(c), [x1, y1, x2, y2], planted.SCORES[c])])
    got = answers(yolo, {"model_max_batch": 5}, scenes)
    assert [boxes(d) for d in got] == expected


def test_torchvision_style_detectors_get_each_frame_alone_with_masks_and_keypoints():
    model = planted.script(planted.TorchvisionStyle())
    frames = [planted.scene(60, 90, {0: (5, 6, 30, 40), 2: (50, 10, 90, 60)}), planted.scene(70, 64, {1: (0, 0, 8, 9)})]
    labels = Labels({1: "red", 2: "green", 3: "blue"})
    pipeline = Answering(model, config(), labels=labels)
    assert pipeline.check() == "detection (format torchvision)"
    responses, _ = pipeline.run([support.request(support.npy(f), "application/x-npy") for f in frames])
    got = [json.loads(r.body)["frames"][0]["detections"] for r in responses]
    assert boxes(got[0]) == [("red", [5, 6, 30, 40], 0.9), ("blue", [50, 10, 90, 60], 0.8)]
    assert boxes(got[1]) == [("green", [0, 0, 8, 9], 0.85)]
    assert got[0][1]["keypoints"] == [[50, 10, 3.5], [90, 60, 3.5]]
    for detections, frame in zip(got, frames):
        for d in detections:
            mask = rle.decode(d["mask"])
            assert mask.shape == frame.shape[:2]  # the frame's own pixels, not the padded slot's
            x1, y1, x2, y2 = (int(v) for v in d["box"])
            assert mask.sum() == (x2 - x1) * (y2 - y1) and mask[y1:y2, x1:x2].all()


@pytest.mark.parametrize("settings", [{}, {"resize": "letterbox", "input_size": [320, 320], "letterbox_pad": "center",
                                           "pad_value": 114}])
def test_yolo_segment_masks_come_back_in_the_frames_pixels(settings):
    model = planted.script(planted.YoloSeg())
    # On the prototypes' 4-pixel grid (8 in the 640x320 frame, letterboxed at 1/2).
    frames = [planted.scene(320, 640, {0: (40, 24, 200, 104), 2: (400, 200, 640, 320)}),
              planted.scene(96, 128, {1: (8, 16, 64, 96)})]
    if settings:
        frames = frames[:1]
    got = answers(model, settings, frames)
    for detections, frame in zip(got, frames):
        assert detections and all("mask" in d for d in detections)
        for d in detections:
            rectangle = (frame == planted.COLOURS[d["class_id"]]).all(axis=2)
            mask = rle.decode(d["mask"])
            assert mask.shape == frame.shape[:2]
            assert (mask == _native_mask(rectangle, d["box"], 8 if settings else 4)).all(), d["label"]
            assert (mask & rectangle).sum() == mask.sum() >= 0.99 * rectangle.sum()  # bilinear rounds corners


def _native_mask(rectangle, box, cell):
    """Ultralytics' `process_mask_native` for the planted prototype, written out whole: the
    rectangle's cells (4x4 input pixels: `cell` of the frame's) as +1/-1 logits, resized
    bilinearly to the frame, kept in the box, > 0."""
    h, w = rectangle.shape
    cells = torch.nn.functional.avg_pool2d(torch.from_numpy(rectangle).float()[None, None], cell)
    logits = torch.nn.functional.interpolate((cells == 1).float() * 2 - 1, size=(h, w), mode="bilinear",
                                             align_corners=False)[0, 0]
    rows, cols = torch.arange(h)[:, None], torch.arange(w)[None, :]
    inside = (cols >= box[0]) & (cols < box[2]) & (rows >= box[1]) & (rows < box[3])
    return ((logits > 0) & inside).numpy()


def _reference_nms(boxes, scores, groups, iou):
    """Greedy NMS group by group, box by box, in float64."""
    kept = []
    for group in sorted(set(groups)):
        members = sorted((i for i, g in enumerate(groups) if g == group), key=lambda i: -scores[i])
        chosen = []
        for i in members:
            if all(_iou(boxes[i], boxes[j]) <= iou for j in chosen):
                chosen.append(i)
        kept += chosen
    return sorted(kept)


def _iou(a, b):
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 600), st.integers(0, 600), st.integers(2, 80), st.integers(2, 80),
                          st.integers(0, 15), st.integers(0, 79)), min_size=1, max_size=60), st.randoms())
def test_chunk_nms_keeps_what_nms_frame_by_frame_and_class_by_class_keeps(rows, rng):
    """Whichever NMS is installed (torchvision's in .venv-vision, the pure-torch one in .venv), and
    group ids as large as a chunk's frame * 2**20 + class."""
    from handler.tasks.nms import batched_nms

    boxes = [[x, y, x + w, y + h] for x, y, w, h, _, _ in rows]
    # Near-duplicates of some boxes, so that suppression happens in most examples.
    boxes += [[v + 1 for v in box] for box in boxes[: len(boxes) // 2]]
    groups = [frame * 2**20 + c for *_, frame, c in rows] + [frame * 2**20 + c for *_, frame, c in rows[: len(rows) // 2]]
    scores = [v / 2**20 for v in rng.sample(range(1, 2**20), len(boxes))]  # distinct, exact in float32
    kept = batched_nms(torch.tensor(boxes, dtype=torch.float32), torch.tensor(scores, dtype=torch.float32),
                       torch.tensor(groups), 0.7)
    assert sorted(kept.tolist()) == _reference_nms(boxes, scores, groups, 0.7)
    assert [scores[i] for i in kept.tolist()] == sorted((scores[i] for i in kept.tolist()), reverse=True)


def test_a_model_traced_at_a_batch_of_one_fails_at_load_saying_what_to_set():
    class Flat(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.mean(dim=(2, 3)).view(1, 3)  # a batch of one baked in, as a trace bakes it

    traced = torch.jit.trace(Flat(), torch.zeros(1, 3, 64, 64))
    settings = {"task": "classification", **SCALE}
    with pytest.raises(ConfigError, match=r"answers one frame but fails on a chunk of two .* set handler.model_max_batch: 1"):
        Answering(traced, HandlerConfig.from_mapping(settings)).check()
    pipeline = Answering(traced, HandlerConfig.from_mapping({**settings, "model_max_batch": 1}))
    assert pipeline.check() == "classification"
    frames = [planted.scene(64, 64, {0: (0, 0, 64, 32)}), planted.scene(64, 64, {})]
    responses, _ = pipeline.run([support.request(support.npy(f), "application/x-npy") for f in frames])
    assert [r.status for r in responses] == [200, 200]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 600), st.integers(0, 600), st.integers(2, 80), st.integers(2, 80),
                          st.integers(0, 7), st.integers(0, 5)), min_size=1, max_size=60), st.randoms())
def test_nms_frame_by_frame_keeps_what_reference_nms_keeps_whatever_the_rows_order(rows, rng):
    """`per_frame_nms` (what a chunk runs): one NMS per frame, classes apart within it; the rows
    shuffled (frames interleaved), the same boxes kept as the reference frame by frame and class
    by class."""
    from handler.tasks.nms import per_frame_nms

    boxes = [[x, y, x + w, y + h] for x, y, w, h, _, _ in rows]
    boxes += [[v + 1 for v in box] for box in boxes[: len(boxes) // 2]]
    frames = [f for *_, f, _ in rows] + [f for *_, f, _ in rows[: len(rows) // 2]]
    classes = [c for *_, c in rows] + [c for *_, c in rows[: len(rows) // 2]]
    scores = [v / 2**20 for v in rng.sample(range(1, 2**20), len(boxes))]
    order = list(range(len(boxes)))
    rng.shuffle(order)
    pick = torch.tensor(order)
    kept = per_frame_nms(torch.tensor(boxes, dtype=torch.float32)[pick], torch.tensor(scores, dtype=torch.float32)[pick],
                         torch.tensor(classes)[pick], torch.tensor(frames)[pick], 8, 0.7)
    groups = [f * 100 + c for f, c in zip(frames, classes)]
    assert sorted(order[i] for i in kept.tolist()) == _reference_nms(boxes, scores, groups, 0.7)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_masks_from_column_crossings_are_ultralytics_native_masks_encoded_by_pycocotools(data):
    """Every detection of a chunk (frames of odd sizes, letterboxed centred or top-left, boxes
    anywhere, some empty or at the frame's edges): its RLE is pycocotools' of the mask written
    out whole (the frame's prototype area mixed, `F.interpolate` bilinear to the frame, in the
    window, > 0), but for pixels whose logit is within rounding of 0."""
    from pycocotools import mask as coco

    from handler.layout import LetterboxLayout
    from handler.tasks.masks import mask_changes, windows

    centre = data.draw(st.booleans())
    sizes = data.draw(st.lists(st.tuples(st.integers(1, 70), st.integers(1, 70)), min_size=1, max_size=3))
    placement = LetterboxLayout((64, 64), center=centre).place((64, 64), sizes)
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    protos = torch.randn(len(sizes), 3, 16, 16, generator=g)
    picks = data.draw(st.lists(st.integers(0, len(sizes) - 1), min_size=0, max_size=6))
    frames = torch.tensor(sorted(picks), dtype=torch.int64)
    corners = torch.rand(len(frames), 4, generator=g)
    size = torch.tensor([[w, h, w, h] for h, w in sizes], dtype=torch.float32)[frames].reshape(-1, 4)
    boxes = torch.cat([corners[:, :2].minimum(corners[:, 2:]), corners[:, :2].maximum(corners[:, 2:])], 1) * size
    coefficients = torch.randn(len(frames), 3, generator=g)
    changes, counts = mask_changes(coefficients, frames, boxes, protos, placement)
    got = rle.from_changes(changes.numpy(), counts.numpy(), [sizes[f] for f in frames.tolist()])
    for i, (frame, window) in enumerate(zip(frames.tolist(), windows(boxes).tolist())):
        top, bottom, left, right = placement.area(frame, 4, cover=False)
        logits = torch.einsum("k,khw->hw", coefficients[i], protos[frame, :, top:bottom, left:right])
        logits = torch.nn.functional.interpolate(logits[None, None], size=sizes[frame], mode="bilinear",
                                                 align_corners=False)[0, 0]
        x0, y0, x1, y1 = window
        inside = torch.zeros_like(logits, dtype=torch.bool)
        inside[y0:y1, x0:x1] = True
        want = ((logits > 0) & inside).numpy()
        mask = rle.decode(got[i])
        assert mask.shape == want.shape
        assert (logits.abs().numpy()[mask != want] < 1e-5).all()
        if (mask == want).all():
            assert got[i]["counts"] == coco.encode(np.asfortranarray(want.astype(np.uint8)))["counts"].decode()


def test_masks_of_many_detections_are_encoded_in_one_call_each_as_pycocotools_would():
    from pycocotools import mask as coco

    rng = np.random.default_rng(3)
    masks = [rng.random((h, w)) < p for h, w, p in [(5, 7, 0.5), (1, 1, 1.0), (9, 4, 0.0), (6, 6, 1.0), (3, 8, 0.3)]]
    changes = [np.flatnonzero(np.diff(np.concatenate(([False], m.ravel(order="F"))))) for m in masks]
    got = rle.from_changes(np.concatenate(changes), np.array([c.size for c in changes]), [m.shape for m in masks])
    for mask, encoded in zip(masks, got):
        assert encoded == {"size": list(mask.shape),
                           "counts": coco.encode(np.asfortranarray(mask.astype(np.uint8)))["counts"].decode()}
    # A change after the last pixel is no change; equal neighbours cancel (a run of no pixels).
    assert rle.from_changes(np.array([2, 4, 4, 6]), np.array([4]), [(2, 3)]) == [
        rle.encode(np.array([[0, 1, 1], [0, 1, 1]]))]
    # Among several masks: a run of three equal changes keeps one, equal changes of two masks
    # side by side do not cancel, an empty mask, changes past the end of a mask in the middle.
    given = [[2, 4, 4, 6], [2, 5, 5, 5], [5], [], [0, 6, 7], [1, 3, 3]]
    real = [[2], [2, 5], [5], [], [0], [1]]
    got = rle.from_changes(np.array([c for g in given for c in g]), np.array([len(g) for g in given]), [(2, 3)] * 6)
    flats = [np.cumsum(np.bincount(np.array(r, dtype=int), minlength=6)[:6]) % 2 == 1 for r in real]
    assert got == [rle.encode(flat.reshape(3, 2).T) for flat in flats]
