"""tsutil: config.properties parsing and overlays, Prometheus text, and who uses them."""

from __future__ import annotations

import pytest

from tsutil import prom, properties
from tsutil.properties import ROOT, SHIPPED

AUTOTUNE = ROOT / "autotune" / "config.properties"


def test_properties_join_continuations_skip_comments_and_keep_the_last_value():
    text = ("# a comment\n! another\n\nkey=one\nmodels={\\\n  \"m\": {\"1.0\": {}}\\\n}\n"
            "address = http://127.0.0.1:8080\ncolon: value\nkey=two\nescaped=ends with \\\\\nnext=x\n")
    assert properties.parse(text) == {"key": "two", "models": '{"m": {"1.0": {}}}',
                                      "address": "http://127.0.0.1:8080", "colon": "value",
                                      "escaped": "ends with \\", "next": "x"}  # Java unescapes \\


def test_the_shipped_models_and_load_models_agree():
    values = properties.read(SHIPPED)
    assert sorted(properties.load_models(values)) == sorted(properties.models(values))
    assert properties.load_models(values) == ["frame_quality", "frame_quality_realtime", "frame_quality_stream",
                                              "fixed_batch_cnn", "face_detector"]


def test_an_overlay_wins_and_port_overrides_move_every_port():
    values = properties.read(SHIPPED, properties.port_overrides(500), "job_queue_size=7\n")
    assert values["inference_address"] == "http://127.0.0.1:8580"
    assert values["management_address"] == "http://127.0.0.1:8581"
    assert values["metrics_address"] == "http://127.0.0.1:8582"
    assert (values["grpc_inference_port"], values["grpc_management_port"]) == ("7570", "7571")
    assert values["initial_worker_port"] == "9500" and values["job_queue_size"] == "7"
    assert values["enable_model_api"] == "false"


def test_only_loads_one_model_with_its_batch_settings():
    values = properties.read(SHIPPED, properties.only("m", batch_size=4, max_batch_delay_ms=10))
    assert properties.load_models(values) == ["m"]
    entry = properties.models(values)["m"]["1.0"]
    assert (entry["marName"], entry["batchSize"], entry["maxBatchDelay"]) == ("m.mar", 4, 10)


def test_the_autotune_overlay_changes_only_what_it_must():
    base, overlay = properties.read(SHIPPED), properties.parse(AUTOTUNE.read_text())
    assert overlay == {"enable_model_api": "true"}
    assert {k: v for k, v in overlay.items() if base.get(k) == v} == {}, "the overlay repeats shipped values"
    assert properties.read(SHIPPED, AUTOTUNE) == {**base, "enable_model_api": "true"}


def test_the_cli_prints_the_effective_config_and_one_key(capsys):
    assert properties.main([str(SHIPPED), str(AUTOTUNE), "--port-offset", "5", "--get", "management_address"]) == 0
    assert capsys.readouterr().out == "http://127.0.0.1:8086\n"
    assert properties.main([str(SHIPPED), str(AUTOTUNE)]) == 0
    assert properties.parse(capsys.readouterr().out)["enable_model_api"] == "true"
    with pytest.raises(SystemExit):
        properties.main([str(SHIPPED), "--get", "no_such_key"])


# As TorchServe 0.12 writes it: handler metrics with a trailing comma in the labels, frontend
# metrics with lower-case labels, exponents.
SCRAPE = """# HELP video_frames_total frames
# TYPE video_frames_total counter
video_frames_total{ModelName="frame_quality",Level="Model",Hostname="vm",} 131.0
video_frames_total{ModelName="other",Level="Model",Hostname="vm",} 99.0
# TYPE video_frames_rejected_total counter
video_frames_rejected_total{Reason="bad_input",ModelName="frame_quality",Level="Model",Hostname="vm",} 3.0
video_frames_rejected_total{Reason="stale",ModelName="frame_quality",Level="Model",Hostname="vm",} 2.0
# TYPE ts_inference_requests_total counter
ts_inference_requests_total{model_name="frame_quality",model_version="default",hostname="vm",} 480.0
ts_inference_requests_total{model_name="frame_quality",model_version="1.0-at4x10",hostname="vm",} 20.0
ts_queue_latency_microseconds{model_name="frame_quality",model_version="default",hostname="vm",} 5.4E6
"""


def test_prometheus_totals_by_model_and_labels():
    assert prom.total(SCRAPE, "video_frames_total", "frame_quality") == 131.0
    assert prom.total(SCRAPE, "video_frames_total") == 230.0
    assert prom.total(SCRAPE, "video_frames_rejected_total", "frame_quality") == 5.0
    assert prom.total(SCRAPE, "video_frames_rejected_total", "frame_quality", Reason="stale") == 2.0
    assert prom.total(SCRAPE, "ts_inference_requests_total", "frame_quality") == 500.0
    assert prom.total(SCRAPE, "ts_queue_latency_microseconds", "frame_quality") == 5.4e6
    assert prom.total(SCRAPE, "video_frames_total", "absent") == 0.0
    with pytest.raises(ValueError):
        list(prom.samples("video_frames_total{ModelName=} x\n"))
