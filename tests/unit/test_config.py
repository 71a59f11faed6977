import pytest
import yaml

from handler.config import HandlerConfig, Resize
from handler.errors import ConfigError
from tests.support import ROOT


def test_defaults_are_valid():
    config = HandlerConfig.from_mapping(None)
    assert config.max_chunk == 16
    assert config.resize is Resize.PAD


@pytest.mark.parametrize("name", ["frame_quality", "fixed_batch_cnn"])
def test_shipped_model_configs_parse(name):
    raw = yaml.safe_load((ROOT / "handler" / "models" / f"{name}.yaml").read_text())
    config = HandlerConfig.from_mapping(raw["handler"])
    assert config.max_chunk == 16


def test_static_batch_sets_the_chunk_size():
    config = HandlerConfig.from_mapping({"static_batch": 8, "model_max_batch": 8})
    assert config.max_chunk == 8


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ({"model_max_batch": 0}, "handler.model_max_batch = 0"),
        ({"model_max_batch": "16"}, "handler.model_max_batch = '16'"),
        ({"model_max_batch": True}, "handler.model_max_batch = True"),
        ({"max_width": 10**6}, "handler.max_width"),
        ({"max_frame_age_ms": -5}, "handler.max_frame_age_ms = -5"),
        ({"batch": 16}, "unknown key(s) ['batch']"),
        ({"static_batch": 8, "model_max_batch": 16}, "exceeds static_batch"),
        ({"resize": "stretch"}, "use one of ['pad', 'letterbox', 'rect']"),
        ({"resize": "letterbox"}, "needs handler.input_size"),
        ({"input_size": [64, 64]}, "input_size is only used with them"),
            ({"resize": "rect", "input_size": [630, 640]}, "[630, 640] is not a multiple of size_divisor = 32 "
                                                            "(rect's stride): use [640, 640]"),
        ({"normalize": {"std": [1, 0, 1]}}, "handler.normalize.std"),
        ({"normalize": {"scale": 0}}, "handler.normalize.scale = 0"),
        ({"pass_sizes": "yes"}, "handler.pass_sizes = 'yes'"),
        ({"max_clip_pixels": 100}, "raise it to at least"),
        ({"dense_outputs": "mask"}, "handler.dense_outputs = 'mask': use auto or a list"),
        ({"max_batch_pixels": 32 * 1920 * 1080 - 1}, "handler.max_batch_pixels = 66355199 is below max_clip_pixels"),
    ],
)
def test_invalid_values_name_the_key_and_the_fix(raw, names):
    with pytest.raises(ConfigError) as err:
        HandlerConfig.from_mapping(raw)
    assert names in str(err.value)


ULTRALYTICS = {"task": "detect", "imgsz": [640, 640], "stride": 32, "names": {0: "person"}}


def test_an_ultralytics_exports_metadata_says_how_its_predict_letterboxes():
    from handler.ultralytics import defaults

    implied = {"task": "detection", "normalize": {"scale": 1 / 255}, "letterbox_pad": "center", "pad_value": 114,
               "resize_antialias": False}
    # Dynamic (any batch, any size): the minimum rectangle; fixed sides: the graph sets the letterbox.
    assert defaults({}, ULTRALYTICS, fixed=False, dynamic=True) == {
        **implied, "resize": "rect", "input_size": [640, 640], "size_divisor": 32}
    assert defaults(None, ULTRALYTICS, fixed=True, dynamic=False) == implied
    # A TorchScript export (fixed at its imgsz, its size unknown to the handler): the full letterbox.
    assert defaults({}, {**ULTRALYTICS, "imgsz": 320, "stride": [8.0, 16.0, 32.0]}, fixed=False, dynamic=False) == {
        **implied, "resize": "letterbox", "input_size": [320, 320]}
    # What the handler: section says wins; a pad is left a pad (no input_size added).
    assert defaults({"resize": "pad", "pad_value": 0}, ULTRALYTICS, fixed=False, dynamic=True) == {
        **implied, "resize": "pad", "pad_value": 0}
    assert defaults({"input_size": [320, 320]}, ULTRALYTICS, False, True)["input_size"] == [320, 320]
    # Not an Ultralytics detector's metadata: nothing added.
    for other in ({"names": {0: "a"}}, {**ULTRALYTICS, "task": "classify"}, {"task": "detect", "imgsz": [640, 640]}):
        assert defaults({"task": "raw"}, other, fixed=False, dynamic=True) == {"task": "raw"}
    config = HandlerConfig.from_mapping(defaults({}, ULTRALYTICS, fixed=False, dynamic=True))
    assert (config.resize.value, config.input_size, config.size_divisor) == ("rect", (640, 640), 32)


def test_a_classifier_is_not_padded_unless_told():
    assert HandlerConfig.from_mapping({"task": "classification"}).size_divisor == 1
    assert HandlerConfig.from_mapping({"task": "classification", "size_divisor": 32}).size_divisor == 32
    assert HandlerConfig.from_mapping({"task": "detection"}).size_divisor == 32
