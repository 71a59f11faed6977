"""The shipped config.properties is secure by default and sized for what the handler accepts."""

import math

import yaml

from tests.support import ROOT
from tsutil import properties


def _properties():
    return properties.read(ROOT / "config.properties")


def test_secure_defaults():
    props = _properties()
    for key in ("inference_address", "management_address", "metrics_address"):
        assert props[key].startswith("http://127.0.0.1:"), key
    for key in ("grpc_inference_address", "grpc_management_address"):
        assert props[key] == "127.0.0.1"
    assert props["disable_token_authorization"] == "false"
    assert props["enable_model_api"] == "false"
    assert props["allowed_urls"] == "^$"
    assert props["metrics_mode"] == "prometheus"
    assert (ROOT / props["metrics_config"]).is_file()


def test_max_request_size_fits_the_largest_raw_clip_each_model_accepts():
    props = _properties()
    models = properties.models(props)
    assert sorted(props["load_models"].split(",")) == sorted(v["1.0"]["marName"] for v in models.values())
    for name, versions in models.items():
        raw = yaml.safe_load((ROOT / "handler" / "models" / f"{name}.yaml").read_text())
        handler = raw["handler"]
        largest_clip = handler["max_clip_pixels"] * 3  # raw rgb24 bytes
        assert largest_clip <= int(props["max_request_size"]) < 2 * largest_clip, name
        assert handler["max_clip_pixels"] >= handler["max_width"] * handler["max_height"]
        # The YAML inside the archive wins over config.properties: keep them equal.
        for key in ("batchSize", "maxBatchDelay", "minWorkers", "maxWorkers", "responseTimeout"):
            assert raw[key] == versions["1.0"][key], (name, key)
    assert math.isclose(models["frame_quality"]["1.0"]["batchSize"], 32)
