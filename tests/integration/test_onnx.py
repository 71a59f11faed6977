"""ONNX graphs through the handler's core (`handler.engine`, ONNX Runtime on the CPU): the graph's
declared batch and size decide the chunks and the letterbox, every task reads its outputs, answers
equal ONNX Runtime run on each frame alone, and each load failure names its fix."""

from __future__ import annotations

import json
import logging
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from handler import engine
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
    assert (config.static_batch, config.input_size) == (batch, size)
    assert config.model_max_batch == (batch or 16)
    frames = [SCENES[i % 4][0] for i in range(32)]
    answers, stats = _serve(served, frames)
    for i, (status, answer) in enumerate(answers):
        assert status == 200, answer
        assert _boxes(answer) == SCENES[i % 4][1]  # the labels are the graph's `names`
    if batch == 1:
        assert stats.chunks == 32
    elif batch == 16:
        assert stats.chunks == 2 and stats.tensor_pixels == 32 * 640 * 640
    else:  # one chunk per size, each frame padded to its size's slot: no letterbox
        assert stats.chunks == 4
        own = sum(f.shape[0] * f.shape[1] for f in frames)
        assert own < stats.tensor_pixels == own + stats.padded_pixels < 32 * 640 * 640


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
    "yolo pose": (lambda p: export(planted.Yolo(pose=True), p / "m.onnx", None, None,
                                   metadata={**ULTRALYTICS, "task": "pose", "kpt_shape": [2, 3]}),
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
