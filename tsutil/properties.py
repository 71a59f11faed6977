"""TorchServe's `config.properties`: parsing, overlays and the port offset.

TorchServe reads the file with `java.util.Properties`, so a later line of a key replaces an
earlier one: an overlay is the base text with the overlay's lines after it.

    python -m tsutil.properties config.properties autotune/config.properties > tuned.properties
    python -m tsutil.properties config.properties --get inference_address
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The shipped configuration.
SHIPPED = ROOT / "config.properties"
#: The default ports; `VIDEO_TS_PORT_OFFSET` moves every one of them.
PORTS = {"inference": 8080, "management": 8081, "metrics": 8082, "grpc_inference": 7070,
         "grpc_management": 7071, "worker": 9000}


def parse(text: str) -> dict[str, str]:
    """The last value of each key, read as `java.util.Properties` reads it (continuation lines,
    `#`/`!` comments, `=`/`:` separators, escapes), by the maintained `javaproperties` parser."""
    import javaproperties

    return dict(javaproperties.loads(text))


def read(path: Path, *overlays: Path | str) -> dict[str, str]:
    """The effective values of `path` with `overlays` (files, or text) applied in order."""
    return parse(overlay(Path(path).read_text(), *overlays))


def overlay(base: str, *overlays: Path | str) -> str:
    """`base` with each overlay's lines after it (a file, or properties text), so they win."""
    parts = [base.rstrip("\n")]
    for item in overlays:
        text, origin = (item.read_text(), str(item)) if isinstance(item, Path) else (item, "text")
        parts.append(f"\n# --- overlay ({origin})\n{text.strip(chr(10))}")
    return "\n".join(parts) + "\n"


def models(values: Mapping[str, str]) -> dict[str, Any]:
    """The `models=` JSON: {name: {version: {"marName", "batchSize", ...}}} ({} without one)."""
    return dict(json.loads(values["models"])) if values.get("models") else {}


def load_models(values: Mapping[str, str]) -> list[str]:
    """The model names `load_models=` starts (`frame_quality.mar` -> `frame_quality`)."""
    return [m.strip().removesuffix(".mar") for m in values.get("load_models", "").split(",") if m.strip()]


def only(name: str, batch_size: int = 32, max_batch_delay_ms: int = 50, response_timeout_s: int = 120) -> str:
    """Overlay lines that load one model, `name.mar`, with one worker and these batch settings."""
    entry = {name: {"1.0": {"defaultVersion": True, "marName": f"{name}.mar", "minWorkers": 1,
                            "maxWorkers": 1, "batchSize": batch_size, "maxBatchDelay": max_batch_delay_ms,
                            "responseTimeout": response_timeout_s}}}
    return f"load_models={name}.mar\nmodels={json.dumps(entry)}\n"


def port_overrides(offset: int) -> str:
    """Overlay lines that move every port (HTTP, gRPC, workers) by `offset`, on loopback."""
    return (f"inference_address=http://127.0.0.1:{PORTS['inference'] + offset}\n"
            f"management_address=http://127.0.0.1:{PORTS['management'] + offset}\n"
            f"metrics_address=http://127.0.0.1:{PORTS['metrics'] + offset}\n"
            f"grpc_inference_port={PORTS['grpc_inference'] + offset}\n"
            f"grpc_management_port={PORTS['grpc_management'] + offset}\n"
            f"initial_worker_port={PORTS['worker'] + offset}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Prints a config with overlays applied (and `--port-offset` ports), for `--ts-config`,
    or with `--get KEY` the effective value of one key."""
    parser = argparse.ArgumentParser(prog="python -m tsutil.properties", description=main.__doc__)
    parser.add_argument("base", type=Path, help="the base config.properties")
    parser.add_argument("overlays", type=Path, nargs="*", help="files whose keys replace the base's")
    parser.add_argument("--port-offset", type=int, default=0, help="move every port by this much")
    parser.add_argument("--get", metavar="KEY", help="print only this key's effective value")
    args = parser.parse_args(argv)
    extra = [port_overrides(args.port_offset)] if args.port_offset else []
    text = overlay(args.base.read_text(), *args.overlays, *extra)
    if args.get is None:
        sys.stdout.write(text)
        return 0
    values = parse(text)
    if args.get not in values:
        parser.error(f"{args.get} is not set in {args.base} or its overlays")
    sys.stdout.write(values[args.get] + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
