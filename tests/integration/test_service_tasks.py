"""Vision tasks through the handler's own `initialize` and `handle` (a real `ts.context.Context`):
labels from each source, eager mode, a missing operator, a task that does not fit the model."""

import json
import logging
import textwrap
import zipfile

import pytest
import torch
from ts.context import Context, RequestProcessor
from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl

from handler.errors import ConfigError
from handler.service import VideoFrameHandler
from tests import planted, support

SCALE = {"normalize": {"scale": 1 / 255}}
FRAME = planted.scene(120, 160, {0: (10, 20, 50, 60), 2: (100, 10, 150, 90)})


def _context(model_dir, serialized, handler_config, model_file=None):
    metrics = MetricsCacheYamlImpl(str(support.ROOT / "handler" / "metrics.yaml"))
    metrics.initialize_cache()
    manifest = {"model": {"modelName": "m", "serializedFile": serialized, "handler": "service.py",
                          **({"modelFile": model_file} if model_file else {})}}
    return Context("m", str(model_dir), manifest, 8, None, "0.12.0", metrics=metrics,
                   model_yaml_config={"handler": handler_config})


def _serve(model_dir, serialized, handler_config, model_file=None, frame=FRAME):
    handler = VideoFrameHandler()
    context = _context(model_dir, serialized, handler_config, model_file)
    handler.initialize(context)
    context.request_processor = [RequestProcessor({"body": {"content-type": "application/x-npy"},
                                                   "Content-Type": "application/x-npy"})]
    context.request_ids = {0: "req-0"}
    context.metrics.set_request_ids(context.request_ids)
    [body] = handler.handle([{"body": bytearray(support.npy(frame))}], context)
    return context.get_response_status(0)[0], json.loads(body)


def test_labels_from_index_to_name_json_beside_the_model(tmp_path):
    planted.script(planted.Yolo()).save(str(tmp_path / "m.pt"))
    (tmp_path / "index_to_name.json").write_text(json.dumps({"0": ["n0", "person"], "2": "car"}))
    status, body = _serve(tmp_path, "m.pt", {"task": "detection", "labels": "index_to_name.json", **SCALE})
    assert status == 200
    assert [(d["label"], d["box"]) for d in body["frames"][0]["detections"]] == [
        ("person", [10, 20, 50, 60]), ("car", [100, 10, 150, 90])]


def test_labels_from_an_ultralytics_files_config_txt(tmp_path):
    metadata = {"names": {"0": "person", "1": "bicycle", "2": "car"}, "imgsz": [160, 160], "task": "detect"}
    torch.jit.save(planted.script(planted.Yolo()), str(tmp_path / "yolo.torchscript"),
                   _extra_files={"config.txt": json.dumps(metadata)})
    _, body = _serve(tmp_path, "yolo.torchscript", {"task": "detection", **SCALE})
    assert [d["label"] for d in body["frames"][0]["detections"]] == ["person", "car"]


EAGER = textwrap.dedent('''
    import torch


    class Boxes(torch.nn.Module):
        """One learned box per frame, end2end: [N, 1, 6]."""

        def __init__(self):
            super().__init__()
            self.box = torch.nn.Parameter(torch.zeros(6))

        def forward(self, x):
            return self.box.expand(x.shape[0], 1, 6)
''')


def test_eager_mode_a_model_file_and_its_state_dict(tmp_path):
    (tmp_path / "boxes.py").write_text(EAGER)
    torch.save({"box": torch.tensor([5.0, 6.0, 70.0, 80.0, 0.75, 1.0])}, tmp_path / "boxes.pth")
    status, body = _serve(tmp_path, "boxes.pth", {"task": "detection", **SCALE}, model_file="boxes.py")
    assert status == 200
    assert body["frames"][0]["detections"] == [{"box": [5, 6, 70, 80], "score": 0.75, "class_id": 1, "label": "1"}]


def test_a_missing_operator_answers_every_request_at_once_naming_it(tmp_path, caplog):
    torch.library.define("planted_ops::double", "(Tensor x) -> Tensor")
    torch.library.impl("planted_ops::double", "CompositeExplicitAutograd")(lambda x: x * 2)

    class Needs(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.planted_ops.double(x).mean(dim=(1, 2, 3))

    torch.jit.script(Needs()).save(str(tmp_path / "registered.pt"))
    # The same program calling an operator no package registers, as torchvision's are without it.
    with zipfile.ZipFile(tmp_path / "registered.pt") as src, zipfile.ZipFile(tmp_path / "needs.pt", "w") as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info).replace(b"planted_ops", b"missing_ops"))
    with caplog.at_level(logging.ERROR):
        status, body = _serve(tmp_path, "needs.pt", {})
    assert (status, body["type"]) == (500, "ModelNotLoaded")
    assert "the model calls the operator missing_ops::double, which nothing registered" in body["message"]
    assert "install the package that registers the missing_ops:: operators" in body["message"]
    assert "Every request is answered 500 ModelNotLoaded until this is fixed" in caplog.text


def test_a_task_or_format_that_does_not_fit_fails_at_initialize_naming_both(tmp_path):
    planted.script(planted.Yolo()).save(str(tmp_path / "m.pt"))
    with pytest.raises(ConfigError, match=r"handler.format = efficient_nms: the model's outputs Tensor\[1, 7, 64\]"):
        _serve(tmp_path, "m.pt", {"task": "detection", "format": "efficient_nms", **SCALE})
    with pytest.raises(ConfigError, match=r"handler.task = segmentation takes class scores .* Tensor\[1, 7, 64\]"):
        _serve(tmp_path, "m.pt", {"task": "segmentation", **SCALE})
