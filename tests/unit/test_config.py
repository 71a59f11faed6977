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
        ({"resize": "stretch"}, "use one of ['pad', 'letterbox']"),
        ({"resize": "letterbox"}, "needs handler.input_size"),
        ({"input_size": [64, 64]}, "only used with letterbox"),
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
