#!/usr/bin/env python3
"""Lays out a model store the way KServe's TorchServe runtime expects it, from the repo's files.

    python deploy/kserve/make_storage.py OUT_DIR     (then copy OUT_DIR to the storageUri)

    OUT_DIR/config/config.properties   repo config.properties + kserve.properties + model_snapshot
    OUT_DIR/config/metrics.yaml        handler/metrics.yaml (metrics_config)
    OUT_DIR/model-store/*.mar          the archives named in the repo's load_models (archive.sh)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = Path(__file__).resolve().with_name("kserve.properties")
sys.path.insert(0, str(ROOT))  # run as a script from the checkout
from tsutil.properties import parse as properties  # noqa: E402


def kserve_config(base: str, overlay: str) -> str:
    """config.properties for KServe: base, overlay, and model_snapshot built from base's models.

    The KServe wrapper reads config.properties line by line and json-loads `model_snapshot`, so
    the snapshot is one line.
    """
    models = json.loads(properties(base)["models"])
    snapshot = {"name": "startup.cfg", "modelCount": len(models), "models": models}
    return (base.rstrip("\n") + "\n\n# --- KServe overlay (deploy/kserve/kserve.properties)\n"
            + overlay.rstrip("\n") + "\nmodel_snapshot=" + json.dumps(snapshot, separators=(",", ":")) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="directory to fill (created)")
    args = parser.parse_args()
    base = (ROOT / "config.properties").read_text()
    (args.out / "config").mkdir(parents=True, exist_ok=True)
    (args.out / "config" / "config.properties").write_text(kserve_config(base, OVERLAY.read_text()))
    shutil.copy(ROOT / "handler" / "metrics.yaml", args.out / "config" / "metrics.yaml")
    store = args.out / "model-store"
    subprocess.run([str(ROOT / "archive.sh")], check=True, env={**os.environ, "MODEL_STORE": str(store)})
    for name in properties(base)["load_models"].split(","):
        if not (store / name).is_file():
            print(f"make_storage: {store / name} was not built", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
