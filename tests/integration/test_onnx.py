"""ONNX graphs through the handler's core (`handler.engine`, ONNX Runtime on the CPU): the graph's
declared batch and size decide the chunks and the letterbox, every task reads its outputs, answers
equal ONNX Runtime run on each frame alone, and each load failure names its fix."""

from __future__ import annotations

import json
import logging
import sys

import cv2
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from handler import engine
from handler.config import Resize
from handler.errors import ConfigError
from tests import planted, support
from tests.onnx_export import export

CPU = torch.device("cpu")
SCALE = {"normalize": {"scale": 1 / 255}}
ULTRALYTICS = {"task": "detect", "stride": 32, "imgsz": [640, 640], "names": {0: "person", 1: "bicycle", 2: "car"}}
#: Frames of four sizes; letterboxed into 640x640 they are at scales 1, 1, 1/2 and 4.
SCENES = [
    (planted.scene(480, 640, {0: (10, 20, 50, 60)}), [("person", [10, 20, 50, 60], 0.9)]),
    (planted.scene(320, 640, {0: (40, 20, 200, 100), 2: (400, 200, 640, 320)}),
     [("person", [40, 20, 200, 100], 0.9), ("car", [400, 200, 640, 320], 0.8)]),
    (planted.scene(720, 1280, {2: (100, 10, 150, 90)}), [("car", [100, 10, 150, 90], 0.8)]),
    (planted.scene(160, 120, {1: (5, 5, 40, 40)}), [("bicycle", [5, 5, 40, 40], 0.85)]),
]
SHAPES = {"batch 1, 640x640": (1, (640, 640)), "batch 16, 640x640": (16, (640, 640)), "dynamic": (None, None)}


def _load(folder, name, handler):
    return engine.load(str(folder), {"serializedFile": name}, {"handler": handler}, CPU)


def _items(frames):
    return [({"body": bytearray(support.npy(f))}, {"Content-Type": "application/x-npy"}) for f in frames]


def _serve(served, frames):
    responses, stats = engine.handle(served, _items(frames), "m")
    return [(r.status, json.loads(r.body)) for r in responses], stats


def _boxes(answer):
    return [(d["label"], d["box"], d["score"]) for d in answer["frames"][0]["detections"]]


@pytest.mark.parametrize("shape", SHAPES)
def test_the_graph_decides_the_chunks_and_the_letterbox_and_a_burst_of_32_mixed_frames_is_exact(tmp_path, shape):
    batch, size = SHAPES[shape]
    export(planted.Yolo(), tmp_path / "yolo.onnx", batch, size, metadata=ULTRALYTICS)
    served = _load(tmp_path, "yolo.onnx", {"task": "detection", "letterbox_pad": "center", "pad_value": 114, **SCALE})
    config = served.config
    # A dynamic export is letterboxed as predict does it: into its imgsz, borders up to its stride.
    assert (config.static_batch, config.input_size) == (batch, size or (640, 640))
    assert config.resize is (Resize.RECT if batch is None else Resize.LETTERBOX) and config.model_max_batch == (batch or 16)
    frames = [SCENES[i % 4][0] for i in range(32)]
    answers, stats = _serve(served, frames)
    for i, (status, answer) in enumerate(answers):
        assert status == 200, answer
        assert _boxes(answer) == SCENES[i % 4][1]  # the labels are the graph's `names`
    if batch == 1:
        assert stats.chunks == 32
    elif batch == 16:
        assert stats.chunks == 2 and stats.tensor_pixels == 32 * 640 * 640
    else:  # one chunk per size, each in its minimum rectangle: 480x640, 320x640, 384x640 (720p at 1/2), 640x480
        assert stats.chunks == 4
        assert stats.tensor_pixels == 8 * (480 * 640 + 320 * 640 + 384 * 640 + 640 * 480)


def test_a_fixed_batch_graph_answers_as_onnx_runtime_on_each_frame_alone(tmp_path):
    """Raw outputs of a 16-frame graph for 3 frames (13 padded rows) against the graph run by
    hand: the frame pasted in the middle of a 640x640 canvas of 114, as Ultralytics' letterbox
    does at scale 1; the 720p batch-mate is resized in the same chunk."""
    export(planted.Classifier(), tmp_path / "cls.onnx", 16, (640, 640), output_names=["logits"])
    served = _load(tmp_path, "cls.onnx", {"letterbox_pad": "center", "pad_value": 114, **SCALE})
    frames = [support.frame(480, 640, seed=1), support.frame(720, 1280, seed=2), support.frame(320, 640, seed=3)]
    answers, stats = _serve(served, frames)
    assert stats.chunks == 1
    session = ort.InferenceSession(str(tmp_path / "cls.onnx"))
    for frame, (status, answer) in zip([frames[0], frames[2]], [answers[0], answers[2]]):
        assert status == 200
        canvas = np.full((640, 640, 3), 114, np.uint8)
        top = (640 - frame.shape[0]) // 2
        canvas[top:top + frame.shape[0]] = frame
        x = np.repeat((canvas.transpose(2, 0, 1)[None] / 255).astype(np.float32), 16, axis=0)
        [own] = session.run(None, {"images": x})
        assert answer["frames"][0]["outputs"]["logits"] == pytest.approx(own[0].tolist(), abs=1e-5)


def test_a_dynamic_graph_answers_as_onnx_runtime_on_each_frame_alone_at_its_own_size(tmp_path):
    export(planted.Segmenter(), tmp_path / "seg.onnx", None, None, output_names=["scores"])
    served = _load(tmp_path, "seg.onnx", {**SCALE, "dense_outputs": ["scores"]})
    frames = [planted.scene(200, 300, {0: (10, 10, 90, 60)}), planted.scene(480, 640, {2: (300, 100, 500, 400)})]
    answers, _ = _serve(served, frames)
    session = ort.InferenceSession(str(tmp_path / "seg.onnx"))
    for frame, (status, answer) in zip(frames, answers):
        assert status == 200
        [own] = session.run(None, {"images": (frame.transpose(2, 0, 1)[None] / 255).astype(np.float32)})
        assert np.array_equal(np.array(answer["frames"][0]["outputs"]["scores"]), own[0])


def _efficient_nms(tmp_path):
    return export(planted.EfficientNms(), tmp_path / "m.onnx", None, None,
                  output_names=["num_detections", "detection_boxes", "detection_scores", "detection_classes"])


TASKS = {
    # An export at imgsz 128x192, the frame's own size: predict's letterbox leaves it as it is.
    "yolo pose": (lambda p: export(planted.Yolo(pose=True), p / "m.onnx", None, None,
                                   metadata={**ULTRALYTICS, "task": "pose", "kpt_shape": [2, 3], "imgsz": [128, 192]}),
                  {"task": "detection"}),
    "end2end": (lambda p: export(planted.End2End(), p / "m.onnx", None, None), {"task": "detection"}),
    "efficient_nms": (_efficient_nms, {"task": "detection"}),
    "yolo segment": (lambda p: export(planted.YoloSeg(), p / "m.onnx", None, None, output_names=["output0", "output1"]),
                     {"task": "detection"}),
    "classification": (lambda p: export(planted.Classifier(), p / "m.onnx", None, None), {"task": "classification"}),
    "segmentation": (lambda p: export(planted.Segmenter(), p / "m.onnx", None, None), {"task": "segmentation"}),
}


@pytest.mark.parametrize("task", TASKS)
def test_every_task_reads_an_onnx_graphs_outputs(tmp_path, task):
    make, handler = TASKS[task]
    make(tmp_path)
    served = _load(tmp_path, "m.onnx", {**handler, **SCALE})
    frame = planted.scene(128, 192, {0: (8, 16, 72, 64), 2: (120, 40, 184, 120)})
    [(status, answer)] = _serve(served, [frame])[0]
    assert status == 200, answer
    got = answer["frames"][0]
    if task == "classification":
        assert [c["class_id"] for c in got["classes"]] == [2, 0, 1]  # the channel means, blue's area the largest
    elif task == "segmentation":
        assert [(s["class_id"], s["area"]) for s in got["segments"]] == [
            (0, 128 * 192 - 64 * 48 - 64 * 80), (1, 64 * 48), (3, 64 * 80)]
    else:
        found = [(d["class_id"], d["box"]) for d in got["detections"]]
        assert found == [(0, [8, 16, 72, 64]), (2, [120, 40, 184, 120])]
        if task == "yolo pose":
            assert got["detections"][0]["keypoints"] == [[8, 16, 0.9], [72, 64, 0.8]]
        if task == "yolo segment":
            assert [d["mask"]["size"] for d in got["detections"]] == [[128, 192]] * 2


class _Uint8ChannelsLast(torch.nn.Module):
    """`[N, H, W, 3]` uint8 in, normalised by the graph itself: a classifier's logits."""

    def forward(self, x):
        return planted.Classifier()(x.permute(0, 3, 1, 2).to(torch.float32) / 255)


def test_a_uint8_channels_last_graph_gets_pixels_as_they_are(tmp_path):
    export(_Uint8ChannelsLast(), tmp_path / "u8.onnx", None, None, channels_last=True, dtype=torch.uint8)
    served = _load(tmp_path, "u8.onnx", {"task": "classification", "activation": "none"})
    frame = planted.scene(64, 96, {0: (0, 0, 48, 64)})  # red over half the frame, grey (40) elsewhere
    [(status, answer)] = _serve(served, [frame])[0]
    assert status == 200
    red = 10 * (0.5 * 255 + 0.5 * 40) / 255
    assert answer["frames"][0]["classes"][0] == {"class_id": 0, "label": "0", "score": pytest.approx(red, abs=1e-5)}
    with pytest.raises(ConfigError, match=r"handler.normalize = .* contradicts the ONNX graph's input 'images' "
                                          r"\['batch', 'height', 'width', 3\] uint8: it takes uint8 pixels"):
        _load(tmp_path, "u8.onnx", {"task": "classification", **SCALE})


class _Float16(torch.nn.Module):
    """A float16 input (as a half-precision export takes), cast up for the CPU's kernels."""

    def forward(self, x):
        return planted.Classifier()(x.to(torch.float32))


def test_a_float16_graph_gets_the_normalised_chunk_in_float16(tmp_path):
    export(_Float16(), tmp_path / "f16.onnx", None, None, dtype=torch.float16)
    assert ort.InferenceSession(str(tmp_path / "f16.onnx")).get_inputs()[0].type == "tensor(float16)"
    served = _load(tmp_path, "f16.onnx", {"task": "classification", "activation": "none", **SCALE})
    frame = planted.scene(64, 96, {2: (0, 0, 96, 32)})  # blue over the top half
    [(status, answer)] = _serve(served, [frame])[0]
    assert status == 200
    blue = 10 * (0.5 * 255 + 0.5 * 40) / 255
    assert answer["frames"][0]["classes"][0]["class_id"] == 2
    assert answer["frames"][0]["classes"][0]["score"] == pytest.approx(blue, abs=1e-2)  # float16's precision


@pytest.mark.parametrize(("setting", "message"), [
    ({"static_batch": 8}, r"handler.static_batch = 8 contradicts the ONNX graph's input 'images' \[16, 3, 640, 640\] "
                          r"float32: it takes exactly 16 frames"),
    ({"model_max_batch": 32}, r"handler.model_max_batch = 32 contradicts .* it takes exactly 16 frames"),
    ({"resize": "pad"}, r"handler.resize = 'pad' contradicts .* its input is a fixed 640x640"),
    ({"resize": "letterbox", "input_size": [320, 320]}, r"handler.input_size = \[320, 320\] contradicts"),
])
def test_a_setting_that_contradicts_the_graph_fails_at_load_naming_both(tmp_path, setting, message):
    export(planted.Classifier(), tmp_path / "b16.onnx", 16, (640, 640))
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, "b16.onnx", setting)


def _graph(tmp_path, inputs, opset=17):
    """A graph by hand: `Identity` of its first input."""
    graph = helper.make_graph([helper.make_node("Identity", [inputs[0].name], ["y"])], "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "g.onnx"))


def _refused(tmp_path, caplog):
    with caplog.at_level(logging.ERROR):
        served = _load(tmp_path, "g.onnx" if (tmp_path / "g.onnx").exists() else "m.onnx", {})
    [(status, answer)] = _serve(served, [support.frame(32, 32)])[0]
    assert (status, answer["type"]) == (500, "ModelNotLoaded")
    assert "Every request is answered 500 ModelNotLoaded until this is fixed" in caplog.text
    return answer["message"]


def test_an_input_that_is_not_an_image_answers_every_request_naming_it(tmp_path, caplog):
    _graph(tmp_path, [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["batch", 77])])
    assert "the ONNX graph's input 'tokens' is ['batch', 77] tensor(float), not an image tensor" in _refused(tmp_path, caplog)


def test_a_graph_of_two_inputs_answers_every_request_naming_them(tmp_path, caplog):
    _graph(tmp_path, [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 3, 64, 64]) for n in ("a", "b")])
    assert "the ONNX graph has 2 inputs (['a', 'b'])" in _refused(tmp_path, caplog)


def test_an_opset_onnx_runtime_cannot_run_names_the_fix(tmp_path, caplog):
    _graph(tmp_path, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 64, 64])], opset=99)
    message = _refused(tmp_path, caplog)
    assert f"ONNX Runtime {ort.__version__} cannot run g.onnx" in message
    assert "export it at an opset this ONNX Runtime supports" in message


def test_without_onnxruntime_every_request_says_what_to_install(tmp_path, caplog, monkeypatch):
    export(planted.Classifier(), tmp_path / "m.onnx", None, None)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime raises ImportError
    message = _refused(tmp_path, caplog)
    assert "the model is an ONNX graph and onnxruntime is not installed" in message
    assert 'pip install "video-frame-handler[onnx]"' in message


@pytest.mark.parametrize("channels_last", [False, True], ids=["NCHW", "NHWC"])
def test_onnx_runtime_reads_the_collated_chunk_itself_on_the_cpu(tmp_path, monkeypatch, channels_last):
    """The array ONNX Runtime gets is the staging buffer the frames were collated into: an NCHW
    graph's chunk is collated channel-first, an NHWC graph's is the chunk's own memory."""
    export(planted.Classifier() if not channels_last else _ChannelsLast(), tmp_path / "m.onnx", None, None,
           channels_last=channels_last)
    served = _load(tmp_path, "m.onnx", {**SCALE})
    model = served.pipeline._chunks._model
    fed, run = [], model.session.run

    def spy(names, feeds):
        [array] = feeds.values()
        fed.append((array.ctypes.data, array.flags.c_contiguous, array.shape))
        return run(names, feeds)

    seen = []
    call = type(model).__call__
    monkeypatch.setattr(model.session, "run", spy, raising=False)
    monkeypatch.setattr(type(model), "__call__", lambda self, x: (seen.append(x.data_ptr()), call(self, x))[1])
    frames = [support.frame(128, 192, seed=1), support.frame(128, 192, seed=2)]
    answers, _ = _serve(served, frames)
    assert [status for status, _ in answers] == [200, 200]
    shape = (2, 128, 192, 3) if channels_last else (2, 3, 128, 192)
    assert fed == [(seen[0], True, shape)]


class _ChannelsLast(torch.nn.Module):
    def forward(self, x):
        return planted.Classifier()(x.permute(0, 3, 1, 2))


def _ultralytics(frame, session, size=640, conf=0.25, iou=0.7, stride=None):
    """Ultralytics' predict path for a YOLO raw export, written out step by step (its package is
    AGPL: never a dependency): `LetterBox` (centred, 114, `cv2.INTER_LINEAR`, the `- 0.1`
    rounding of the borders; with a `stride`, as for a dynamic export, the borders only up to a
    multiple of it), / 255, the graph, `non_max_suppression` (best class per anchor, class offsets
    of 7680, greedy NMS) and `scale_boxes` (gain and borders again from the letterboxed shape,
    the same rounding, then clipped)."""
    h, w = frame.shape[:2]
    r = min(size / h, size / w)
    new_w, new_h = int(round(w * r)), int(round(h * r))
    dw, dh = size - new_w, size - new_h
    if stride:
        dw, dh = dw % stride, dh % stride
    dw, dh = dw / 2, dh / 2
    img = cv2.resize(frame, (new_w, new_h), interpolation=cv2.INTER_LINEAR) if (w, h) != (new_w, new_h) else frame
    top, bottom, left, right = int(round(dh - 0.1)), int(round(dh + 0.1)), int(round(dw - 0.1)), int(round(dw + 0.1))
    img = cv2.copyMakeBorder(img, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(114, 114, 114))
    x = (img.transpose(2, 0, 1)[None] / 255).astype(np.float32)
    rows_fixed = session.get_inputs()[0].shape[0]  # a fixed-batch graph takes exactly its batch
    [pred] = session.run(None, {"images": np.repeat(x, rows_fixed if isinstance(rows_fixed, int) else 1, 0)})
    rows = pred[0].T  # [A, 4 + nc]
    scores, classes = rows[:, 4:].max(1), rows[:, 4:].argmax(1)
    keep = scores > conf
    rows, scores, classes = rows[keep], scores[keep], classes[keep]
    boxes = np.concatenate([rows[:, :2] - rows[:, 2:4] / 2, rows[:, :2] + rows[:, 2:4] / 2], 1)
    shifted = boxes + classes[:, None] * 7680.0
    area = (shifted[:, 2] - shifted[:, 0]) * (shifted[:, 3] - shifted[:, 1])
    order, kept = np.argsort(-scores, kind="stable"), []
    while order.size:
        i, order = order[0], order[1:]
        kept.append(i)
        x1, y1 = np.maximum(shifted[i, 0], shifted[order, 0]), np.maximum(shifted[i, 1], shifted[order, 1])
        x2, y2 = np.minimum(shifted[i, 2], shifted[order, 2]), np.minimum(shifted[i, 3], shifted[order, 3])
        inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
        order = order[inter / (area[i] + area[order] - inter) <= iou]
    shape = img.shape[:2]
    gain = min(shape[0] / h, shape[1] / w)
    pad_x, pad_y = round((shape[1] - w * gain) / 2 - 0.1), round((shape[0] - h * gain) / 2 - 0.1)
    # In float32, as its torch tensors are.
    found = (boxes[kept[:300]] - np.float32([pad_x, pad_y, pad_x, pad_y])) / np.float32(gain)
    found = np.clip(found, 0, np.float32([w, h, w, h]))
    # The one difference: a box wholly in the letterbox's border is empty once clipped to the frame;
    # predict keeps it, the handler drops it (docs/models.md).
    return [(int(classes[i]), [round(float(v), 2) for v in box], round(float(scores[i]), 5))
            for i, box in zip(kept, found) if box[2] > box[0] and box[3] > box[1]]


@pytest.mark.parametrize("batch", [1, 16])
def test_a_yolo_export_answers_what_ultralytics_letterbox_nms_and_scaling_give(tmp_path, batch):
    """Frames of odd borders (301 rows: 169 above, 170 below), upscaled, downscaled, in one burst."""
    export(planted.Yolo(), tmp_path / "yolo.onnx", batch, (640, 640), metadata=ULTRALYTICS)
    served = _load(tmp_path, "yolo.onnx", {"task": "detection", "letterbox_pad": "center", "pad_value": 114,
                                          "resize_antialias": False, **SCALE})
    frames = [planted.scene(301, 640, {0: (11, 21, 211, 121), 2: (400, 150, 639, 301)}),
              planted.scene(720, 1280, {1: (100, 10, 150, 90)}), planted.scene(160, 120, {2: (5, 5, 40, 41)}),
              planted.scene(480, 333, {0: (0, 0, 333, 480)})]
    answers, _ = _serve(served, frames * 4)
    session = ort.InferenceSession(str(tmp_path / "yolo.onnx"))
    for i, (status, answer) in enumerate(answers):
        assert status == 200
        own = [(d["class_id"], d["box"], d["score"]) for d in answer["frames"][0]["detections"]]
        assert own == _ultralytics(frames[i % 4], session)


#: Frames of real photographs at the sizes cameras send and at odd ones: 1080p and 720p (a
#: 640x384 and 640x360 rectangle for a dynamic export), 481 and 301 rows (borders that round), a
#: portrait, one already 640x640, one larger in both sides, one small (scaled up).
PHOTO_SIZES = [(1080, 1920), (720, 1280), (481, 640), (301, 451), (1000, 750), (640, 640), (333, 500), (97, 130)]


def _detections(answer):
    return [(d["class_id"], d["box"], d["score"]) for d in answer["frames"][0]["detections"]]


@pytest.mark.parametrize("batch", [1, None], ids=["fixed 640x640, batch 1", "dynamic"])
def test_an_ultralytics_export_answers_box_for_box_what_its_predict_answers_with_no_setting(tmp_path, batch):
    """No `handler:` setting at all: the export's metadata says what predict does. Each frame twice
    in one burst (frames of a size batched together), every box and score equal to predict's."""
    size = (640, 640) if batch else None
    export(planted.TinyYolo(), tmp_path / "yolo.onnx", batch, size, metadata=ULTRALYTICS)
    served = _load(tmp_path, "yolo.onnx", {})
    frames = [support.frame(h, w, seed) for seed, (h, w) in enumerate(PHOTO_SIZES)]
    answers, stats = _serve(served, frames * 2)
    session = ort.InferenceSession(str(tmp_path / "yolo.onnx"))
    found = 0
    for i, (status, answer) in enumerate(answers):
        assert status == 200, answer
        expected = _ultralytics(frames[i % len(frames)], session, stride=None if batch else 32)
        assert _detections(answer) == expected, PHOTO_SIZES[i % len(frames)]
        found += len(expected)
    assert found > 200  # boxes enough that a pixel off anywhere would show
    if batch is None:  # 1080p at 384x640, not padded to 1088x1920: a chunk per rectangle (1080p and 720p
        # share 384x640, 301x451 and 333x500 share 448x640), each frame seen at its own cost
        assert stats.chunks == 6 and stats.tensor_pixels == 2 * 640 * (384 * 2 + 512 + 448 * 2 + 480 * 2 + 640)


def _logits(session, frame):
    [out] = session.run(None, {"images": (frame.transpose(2, 0, 1)[None] / 255).astype(np.float32)})
    return out[0].tolist()


#: 20 frame sizes whose sides are not multiples of 32, and 4 that are.
ODD_SIZES = [(h, w) for h in (101, 250, 333, 459, 721) for w in (130, 301, 500, 600)]
EVEN_SIZES = [(96, 128), (320, 480), (480, 640), (128, 128)]


def test_a_classifier_with_a_global_pool_answers_what_onnx_runtime_answers_on_each_frame_alone(tmp_path):
    """A dynamic graph ending in a global average pool, served with the defaults: no frame is padded
    (`size_divisor: 1`), so every logit equals ONNX Runtime's on the frame alone, batch-mates and
    all; `size_divisor: 32`, the trade of exactness for batching, changes the padded ones."""
    export(planted.PooledClassifier(), tmp_path / "cls.onnx", None, None, output_names=["logits"])
    session = ort.InferenceSession(str(tmp_path / "cls.onnx"))
    frames = [support.frame(h, w, seed) for seed, (h, w) in enumerate(ODD_SIZES + EVEN_SIZES)]
    served = _load(tmp_path, "cls.onnx", SCALE)
    assert served.config.size_divisor == 1
    answers, _ = _serve(served, frames * 2)
    for i, (status, answer) in enumerate(answers):
        assert status == 200, answer
        assert answer["frames"][0]["outputs"]["logits"] == _logits(session, frames[i % len(frames)])
    padded, _ = _serve(_load(tmp_path, "cls.onnx", {**SCALE, "size_divisor": 32}), frames)
    moved = [a["frames"][0]["outputs"]["logits"] != _logits(session, f) for (_, a), f in zip(padded, frames)]
    assert moved == [True] * len(ODD_SIZES) + [False] * len(EVEN_SIZES)


def test_a_classification_task_defaults_to_no_padding_whatever_the_format(tmp_path):
    """TorchScript too: `task: classification` leaves each frame at its own size by default."""
    planted.script(planted.PooledClassifier()).save(str(tmp_path / "cls.pt"))
    served = _load(tmp_path, "cls.pt", {"task": "classification", **SCALE})
    assert served.config.size_divisor == 1
    frames = [support.frame(h, w, seed) for seed, (h, w) in enumerate(ODD_SIZES[:6])]
    model = torch.jit.load(str(tmp_path / "cls.pt"))
    for frame, (_, answer) in zip(frames, _serve(served, frames * 2)[0]):
        x = torch.from_numpy(frame.copy()).permute(2, 0, 1)[None].float() / 255
        top = model(x).softmax(dim=1)[0].topk(5)
        assert [c["class_id"] for c in answer["frames"][0]["classes"]] == top.indices.tolist()
        assert [c["score"] for c in answer["frames"][0]["classes"]] == pytest.approx(top.values.tolist(), rel=1e-5)
