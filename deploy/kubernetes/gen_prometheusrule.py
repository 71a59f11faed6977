#!/usr/bin/env python3
"""Writes prometheusrule.yaml from monitoring/alerts.yml, the project's one copy of the alerts.

    python deploy/kubernetes/gen_prometheusrule.py          rewrite prometheusrule.yaml
    python deploy/kubernetes/gen_prometheusrule.py --check  exit 1 if it is out of date

tests/unit/test_deploy.py runs the check, so an edited alerts.yml fails CI until this is rerun.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "monitoring" / "alerts.yml"
OUTPUT = Path(__file__).resolve().with_name("prometheusrule.yaml")
HEADER = """\
# GENERATED from monitoring/alerts.yml by deploy/kubernetes/gen_prometheusrule.py: edit the
# alerts there (they are tested with promtool) and rerun the script.
"""


class _Literal(str):
    """A multi-line string dumped as a YAML block literal (keeps PromQL readable)."""


yaml.SafeDumper.add_representer(
    _Literal, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|"))


def _literals(node):
    if isinstance(node, dict):
        return {key: _literals(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_literals(value) for value in node]
    if isinstance(node, str) and "\n" in node:
        return _Literal(node)
    return node


def render(alerts: dict) -> str:
    """The PrometheusRule manifest (text) holding `alerts`' rule groups unchanged."""
    manifest = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "video-torchserve", "labels": {"app.kubernetes.io/name": "video-torchserve"}},
        "spec": {"groups": alerts["groups"]},
    }
    return HEADER + yaml.safe_dump(_literals(manifest), sort_keys=False, width=100)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if prometheusrule.yaml is stale")
    args = parser.parse_args()
    text = render(yaml.safe_load(ALERTS.read_text()))
    if args.check:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT} is out of date: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
