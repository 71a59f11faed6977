#!/usr/bin/env python3
"""Writes the Ray Serve variant of the alerts from monitoring/alerts.yml, the one copy of them.

    python monitoring/gen_alerts_ray.py          rewrite alerts_ray.yml and prometheusrule-ray.yaml
    python monitoring/gen_alerts_ray.py --check  exit 1 if either is out of date

The handler's alerts (group `video-handler`, less the TorchServe-only `ts_*` rules) are rewritten
for Ray's exporter: metric `video_x` -> `ray_video_x`, and TorchServe's per-host label `Hostname`
-> Ray's `NodeAddress, replica` (a node can hold several replicas of a model, each with its own
last-batch gauge). The Ray-only rules below are appended. video-ingest's alerts are left in
alerts.yml: they do not depend on the engine. tests/unit/test_alert_rules.py runs the check.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ALERTS = HERE / "alerts.yml"
OUTPUT = HERE / "alerts_ray.yml"
RULE = ROOT / "deploy" / "kubernetes" / "prometheusrule-ray.yaml"
HANDLER_GROUP = "video-handler"

HEADER = """\
# GENERATED from alerts.yml by gen_alerts_ray.py: edit the alerts there (or the Ray-only rules in
# the script) and rerun it. Ray Serve exports the handler's metrics with a `ray_` prefix and the
# labels NodeAddress and replica (docs/metrics.md). Tested by alerts_ray_test.yml:
#   promtool check rules alerts_ray.yml && promtool test rules alerts_ray_test.yml
"""
RULE_HEADER = """\
# GENERATED from monitoring/alerts.yml by monitoring/gen_alerts_ray.py: the Ray Serve variant of
# the alerts (monitoring/alerts_ray.yml, tested with promtool) for the RayService of rayservice.yaml.
"""

# Ray Serve's own metrics (Ray 2.60): `ray_serve_deployment_status` is the controller's gauge
# 0=UNKNOWN, 1=DEPLOY_FAILED, 2=UNHEALTHY, 3=UPDATING, 4=UPSCALING, 5=DOWNSCALING, 6=HEALTHY;
# `ray_video_replica_waiting` is each model replica's own queue (rayserve/model.py): the requests it
# holds beyond a running batch and a filling one; past job_queue_size of config.properties (100) it
# answers 503 itself.
RAY_RULES = yaml.safe_load("""
- alert: RayServeDeploymentUnhealthy
  expr: |
    max by (application, deployment) (ray_serve_deployment_status) > 0
    and max by (application, deployment) (ray_serve_deployment_status) < 3
  for: 1m
  labels:
    severity: critical
  annotations:
    summary: "Ray Serve deployment {{ $labels.deployment }} is {{ if eq $value 1.0 }}DEPLOY_FAILED{{ else }}UNHEALTHY{{ end }} for more than 1 minute"
    description: >-
      Replicas of {{ $labels.deployment }} (application {{ $labels.application }}) fail their
      constructor or health checks: `serve status` and the replica logs say why (an archive that
      does not load, no GPU for num_gpus, out of memory).
- alert: RayServeQueueFilling
  expr: max by (application, deployment) (ray_video_replica_waiting) > 50
  for: 1m
  labels:
    severity: critical
  annotations:
    summary: "{{ $value }} requests queue in a replica of {{ $labels.deployment }} for more than 1 minute"
    description: >-
      A replica of {{ $labels.deployment }} holds more than half of job_queue_size = 100 beyond its
      running and filling batches: past it the replica answers 503. Add replicas (maxWorkers, GPU
      workers), lower resolution, or tune batchSize / maxBatchDelay.
""")


def _ray_text(text: str) -> str:
    text = re.sub(r"\bvideo_(\w+)", r"ray_video_\1", text)
    text = text.replace("{{ $labels.Hostname }}", "{{ $labels.replica }} on {{ $labels.NodeAddress }}")
    return re.sub(r"\bHostname\b", "NodeAddress, replica", text)


def _ray_rule(rule: dict) -> dict:
    out = dict(rule)
    out["expr"] = _ray_text(rule["expr"])
    out["annotations"] = {key: _ray_text(value) for key, value in rule.get("annotations", {}).items()}
    return out


def ray_alerts(alerts: dict) -> dict:
    """The Ray variant of `alerts` (the parsed alerts.yml)."""
    [handler] = [g for g in alerts["groups"] if g["name"] == HANDLER_GROUP]
    rules = [_ray_rule(r) for r in handler["rules"] if not re.search(r"\bts_\w+", r["expr"])]
    return {"groups": [{"name": f"{HANDLER_GROUP}-ray", "rules": rules},
                       {"name": "ray-serve", "rules": RAY_RULES}]}


def _dump(node: object) -> str:
    sys.path.insert(0, str(ROOT / "deploy" / "kubernetes"))
    from gen_prometheusrule import _literals

    return yaml.safe_dump(_literals(node), sort_keys=False, width=100)


def render(alerts: dict) -> tuple[str, str]:
    """(alerts_ray.yml, prometheusrule-ray.yaml) as text."""
    ray = ray_alerts(alerts)
    manifest = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "video-ray", "labels": {"app.kubernetes.io/name": "video-ray"}},
        "spec": {"groups": ray["groups"]},
    }
    return HEADER + _dump(ray), RULE_HEADER + _dump(manifest)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if an output is stale")
    args = parser.parse_args()
    texts = render(yaml.safe_load(ALERTS.read_text()))
    stale = [path for path, text in zip((OUTPUT, RULE), texts)
             if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path} is out of date: run {Path(__file__).name}", file=sys.stderr)
        return 1 if stale else 0
    for path, text in zip((OUTPUT, RULE), texts):
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
