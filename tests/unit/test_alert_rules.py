"""The shipped Prometheus config and alert rules pass promtool, and their unit tests pass."""

import copy
import importlib.util
import re
import shutil
import subprocess
import sys

import pytest
import yaml

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
    ["check", "rules", "alerts_ray.yml"],
    ["test", "rules", "alerts_ray_test.yml"],
])
def test_promtool(promtool, args):
    result = subprocess.run([promtool, *args], cwd=MONITORING, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_every_alert_has_a_firing_test():
    rules = (MONITORING / "alerts.yml").read_text()
    tests = (MONITORING / "alerts_test.yml").read_text()
    names = [line.split(":", 1)[1].strip() for line in rules.splitlines() if "- alert:" in line]
    assert len(names) == 8
    for name in names:
        assert f"alertname: {name}" in tests


def _gen_alerts_ray():
    spec = importlib.util.spec_from_file_location("gen_alerts_ray", MONITORING / "gen_alerts_ray.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_ray_alerts_are_generated_from_alerts_yml():
    result = subprocess.run([sys.executable, str(MONITORING / "gen_alerts_ray.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_ray_alerts_mirror_every_handler_alert_with_ray_names_and_labels():
    gen = _gen_alerts_ray()
    source = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    [handler] = [g["rules"] for g in source["groups"] if g["name"] == "video-handler"]
    ray = yaml.safe_load((MONITORING / "alerts_ray.yml").read_text())
    [mirrored] = [g["rules"] for g in ray["groups"] if g["name"] == "video-handler-ray"]
    # Every handler alert but the TorchServe-only ones, same name, labels, for and order.
    wanted = [r for r in handler if not re.search(r"\bts_", r["expr"])]
    assert [r["alert"] for r in wanted] == [r["alert"] for r in mirrored] and len(mirrored) == 3
    for old, new in zip(wanted, mirrored):
        assert (new["labels"], new.get("for")) == (old["labels"], old.get("for"))
        assert "Hostname" not in new["expr"] + str(new["annotations"])
        assert re.findall(r"\bray_(video_\w+)", new["expr"]) == re.findall(r"\b(video_\w+)", old["expr"])
        assert "NodeAddress, replica" in new["expr"]
    # The ingest alerts stay in alerts.yml alone (both files loaded must not double them).
    names = [r["alert"] for g in ray["groups"] for r in g["rules"]]
    assert not {"VideoIngestCameraDown", "VideoIngestZoneCrowded", "TorchServeQueueLatencyHigh"} & set(names)
    # An edit to alerts.yml reaches the Ray variant.
    edited = copy.deepcopy(source)
    edited["groups"][0]["rules"][0]["for"] = "7s"
    assert gen.render(edited) != gen.render(source)
    assert gen.ray_alerts(edited)["groups"][0]["rules"][0]["for"] == "7s"


def test_the_ray_queue_alert_fires_at_half_of_job_queue_size():
    ray = yaml.safe_load((MONITORING / "alerts_ray.yml").read_text())
    [rule] = [r for g in ray["groups"] for r in g["rules"] if r["alert"] == "RayServeQueueFilling"]
    threshold = float(re.search(r">\s*([0-9.]+)\s*$", rule["expr"].strip())[1])
    queue = int(re.search(r"^job_queue_size=(\d+)$", (ROOT / "config.properties").read_text(), re.M)[1])
    assert threshold == queue / 2
    assert f"job_queue_size = {queue}" in rule["annotations"]["description"]


def test_every_ray_alert_has_a_firing_test():
    rules = yaml.safe_load((MONITORING / "alerts_ray.yml").read_text())
    tests = yaml.safe_load((MONITORING / "alerts_ray_test.yml").read_text())
    names = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    firing = {case["alertname"] for test in tests["tests"] for case in test["alert_rule_test"] if case["exp_alerts"]}
    quiet = {case["alertname"] for test in tests["tests"] for case in test["alert_rule_test"] if not case["exp_alerts"]}
    assert len(names) == 5 and names == firing == quiet
