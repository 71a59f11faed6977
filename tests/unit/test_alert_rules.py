"""The shipped Prometheus config and alert rules pass promtool, and their unit tests pass."""

import shutil
import subprocess

import pytest

from tests.support import ROOT

MONITORING = ROOT / "monitoring"


@pytest.fixture(scope="module")
def promtool():
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: apt-get install prometheus (.ci/run does)")
    return path


@pytest.mark.parametrize("args", [
    ["check", "rules", "alerts.yml"],
    ["check", "config", "prometheus.yml"],
    ["test", "rules", "alerts_test.yml"],
])
def test_promtool(promtool, args):
    result = subprocess.run([promtool, *args], cwd=MONITORING, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_every_alert_has_a_firing_test():
    rules = (MONITORING / "alerts.yml").read_text()
    tests = (MONITORING / "alerts_test.yml").read_text()
    names = [line.split(":", 1)[1].strip() for line in rules.splitlines() if "- alert:" in line]
    assert len(names) == 6
    for name in names:
        assert f"alertname: {name}" in tests
