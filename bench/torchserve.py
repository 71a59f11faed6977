"""The bench's TorchServe: one model from one archive, with the shipped config.properties.

Starting and stopping is `tsutil.server`'s; ports move by `port_offset` (default:
$VIDEO_TS_PORT_OFFSET) so the bench can share a machine.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tsutil import properties
from tsutil.properties import ROOT
from tsutil.server import TorchServe

__all__ = ["ROOT", "Server", "archive"]


def archive(store: Path, name: str, handler: Path, model: Path, config: Path,
            extra: Path | None = None) -> Path:
    """Packages `model` with `handler` into `store/name.mar` (torch-model-archiver)."""
    command = ["torch-model-archiver", "--model-name", name, "--version", "1.0",
               "--serialized-file", str(model), "--handler", str(handler), "--config-file", str(config),
               "--export-path", str(store), "--force"]
    if extra is not None:
        command += ["--extra-files", str(extra)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return store / f"{name}.mar"


class Server(TorchServe):
    """TorchServe in `workdir` serving `mar` alone as model `name` with these batch settings."""

    def __init__(self, workdir: Path, mar: Path, name: str = "frame_quality",
                 port_offset: int | None = None, batch_size: int = 32, max_batch_delay_ms: int = 50) -> None:
        super().__init__(workdir, {name: mar}, overlays=[properties.only(name, batch_size, max_batch_delay_ms)],
                         port_offset=port_offset)
        self.name = name
