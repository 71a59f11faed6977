"""The same setup with a stock-style handler reproduces the seed's failures, so the fix is shown."""

import subprocess

import pytest

from handler.models.build import build_all
from tests import support
from tests.e2e.server import TorchServe
from tsutil import properties
from tsutil.properties import SHIPPED


@pytest.fixture(scope="module")
def naive_server(tmp_path_factory):
    models = tmp_path_factory.mktemp("naive_models")
    build_all(models)
    store = tmp_path_factory.mktemp("naive_store")
    for name in properties.load_models(properties.read(SHIPPED)):  # as config.properties loads
        subprocess.run([
            "torch-model-archiver", "--model-name", name, "--version", "1.0",
            "--serialized-file", str(models / "frame_quality.pt"),
            "--handler", str(support.ROOT / "tests" / "e2e" / "naive_handler.py"),
            "--config-file", str(support.ROOT / "handler" / "models" / "frame_quality.yaml"),
            "--export-path", str(store)], check=True)
    ts = TorchServe(tmp_path_factory.mktemp("naive_torchserve"), store).start()
    yield ts
    ts.stop()


def _burst_until_failure(server, payloads, tries=3):
    """Statuses of the first of up to `tries` bursts in which a batch failed (503)."""
    for _ in range(tries):
        statuses = [r.status_code for r in server.burst("frame_quality", payloads)]
        if 503 in statuses:
            break
    return statuses


def test_a_burst_overflows_the_static_buffer(naive_server):
    payloads = [(support.jpeg(support.frame(720, 1280, i)), "image/jpeg", {}) for i in range(32)]
    assert 503 in _burst_until_failure(naive_server, payloads)
    # The seed's error: "The expanded size of the tensor (16) must match the existing size (N) ...
    # Target sizes: [16, 3, 720, 1280].  Tensor sizes: [N, 3, 720, 1280]"
    assert "Target sizes: [16, 3, 720, 1280]" in naive_server.model_log()


def test_mixed_resolutions_break_torch_stack(naive_server):
    payloads = [(support.jpeg(support.frame(h, w, i)), "image/jpeg", {})
                for i, (h, w) in enumerate([(720, 1280), (480, 640)] * 4)]
    assert 503 in _burst_until_failure(naive_server, payloads)
    assert "stack expects each tensor to be equal size" in naive_server.model_log()
