"""A copy of a model archive with a new version and new batch settings.

TorchServe takes a registered model's version from the archive's MANIFEST.json, so a second
registration of the same model with other batch settings needs an archive that says another
version. The copy also rewrites `batchSize` / `maxBatchDelay` in the archive's model-config YAML,
so the archive describes what it is registered with (TorchServe 0.12 uses the YAML's values when
registration parameters are absent, and the registration parameters when given).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import yaml

MANIFEST = "MAR-INF/MANIFEST.json"


def read_manifest(mar: Path) -> dict:
    """The archive's MANIFEST.json."""
    with zipfile.ZipFile(mar) as zf:
        return json.loads(zf.read(MANIFEST))


def derive(source: Path, target: Path, version: str, batch_size: int, max_batch_delay_ms: int) -> Path:
    """Writes `target`: `source` with `version` and the batch settings; every other file as is.

    Raises:
        ValueError: for an archive without a manifest, or settings out of range.
    """
    if batch_size < 1 or max_batch_delay_ms < 0:
        raise ValueError(f"batchSize {batch_size}, maxBatchDelay {max_batch_delay_ms} ms: "
                         "use a batch of 1 or more and a delay of 0 ms or more")
    if "/" in version or not version:
        raise ValueError(f"version {version!r}: use a non-empty name without '/'")
    tmp = target.with_name(target.name + ".partial")
    with zipfile.ZipFile(source) as src:
        if MANIFEST not in src.namelist():
            raise ValueError(f"{source} has no {MANIFEST}: is it a TorchServe .mar?")
        manifest = json.loads(src.read(MANIFEST))
        manifest["model"]["modelVersion"] = version
        config_name = manifest["model"].get("configFile")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
            for item in src.infolist():
                data = src.read(item)
                if item.filename == MANIFEST:
                    data = json.dumps(manifest, indent=2).encode()
                elif config_name and item.filename == config_name:
                    config = yaml.safe_load(data) or {}
                    config.update(batchSize=batch_size, maxBatchDelay=max_batch_delay_ms)
                    data = yaml.safe_dump(config, sort_keys=False).encode()
                dst.writestr(item, data)
    tmp.replace(target)  # TorchServe never sees a half-written archive
    return target
