"""Starting and stopping TorchServe: the one place serve.sh, the tests and the bench do it.

A `TorchServe` runs from its own working directory (its config, model store, logs and
`key_file.json` there) with its own TMPDIR, where `torchserve` keeps its pid file, so several can
share a machine; `VIDEO_TS_PORT_OFFSET` (or `port_offset`) moves all its ports.

    python -m tsutil.server wait config.properties     (serve.sh: until every model is READY)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tsutil import properties
from tsutil.keyfile import KeyFileError, read_key
from tsutil.properties import SHIPPED

PORT_OFFSET_ENV = "VIDEO_TS_PORT_OFFSET"


def env_port_offset() -> int:
    """`$VIDEO_TS_PORT_OFFSET`, 0 when unset."""
    return int(os.environ.get(PORT_OFFSET_ENV) or 0)


def ready(values: Mapping[str, str], key_file: Path) -> bool:
    """Whether /ping says Healthy and every model of `load_models` has all its workers READY."""
    try:
        auth = {} if values.get("disable_token_authorization") == "true" else {
            "inference": _bearer(key_file, "inference"), "management": _bearer(key_file, "management")}
        get(values["inference_address"] + "/ping", auth.get("inference"), timeout=5)
        for model in properties.load_models(values):
            workers = json.loads(get(f"{values['management_address']}/models/{model}", auth.get("management"),
                                     timeout=5))[0]["workers"]
            if not workers or any(w["status"] != "READY" for w in workers):
                return False
        return True
    except (OSError, KeyFileError, KeyError, IndexError, ValueError):  # URLError and HTTPError are OSErrors
        return False


def get(url: str, headers: Mapping[str, str] | None = None, timeout: float = 10) -> str:
    """The body of a GET of `url`, as text (urllib: the base install has no requests).

    Raises:
        urllib.error.HTTPError: a status other than 2xx.
        urllib.error.URLError: no connection.
    """
    with urllib.request.urlopen(urllib.request.Request(url, headers=dict(headers or {})), timeout=timeout) as answer:
        return str(answer.read().decode())


def wait_until(predicate: Callable[[], bool], timeout_s: float, every_s: float = 0.5) -> bool:
    """Polls `predicate` until it holds (True) or `timeout_s` has passed (False)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(every_s)


def _bearer(key_file: Path, api: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {read_key(key_file, api)}"}


class TorchServe:
    """`torchserve` in `workdir`, with `config` plus `overlays` and the archives of `archives`.

    Args:
        workdir: its working directory (created); config, model store, logs and keys go there.
        archives: a model store folder whose archives are copied, or {model name: .mar file},
            each copied as `<name>.mar`.
        config: the base config.properties (the shipped one by default).
        overlays: files or properties text applied after it, in order.
        port_offset: moves every port; None: `$VIDEO_TS_PORT_OFFSET`.
    """

    def __init__(self, workdir: Path, archives: Path | Mapping[str, Path], config: Path = SHIPPED,
                 overlays: Sequence[Path | str] = (), port_offset: int | None = None) -> None:
        offset = env_port_offset() if port_offset is None else port_offset
        self.workdir = workdir
        self.env = {**os.environ, "TMPDIR": str(workdir / "tmp")}
        (workdir / "tmp").mkdir(parents=True, exist_ok=True)
        text = properties.overlay(config.read_text(), *overlays,
                                  *([properties.port_overrides(offset)] if offset else []))
        (workdir / "config.properties").write_text(text)
        self.properties = properties.parse(text)
        metrics_config = self.properties.get("metrics_config")
        if metrics_config and not Path(metrics_config).is_absolute():
            (workdir / metrics_config).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(config.parent / metrics_config, workdir / metrics_config)
        store = workdir / self.properties.get("model_store", "model_store")
        if isinstance(archives, Path):
            shutil.copytree(archives, store, dirs_exist_ok=True)
        else:
            store.mkdir(parents=True, exist_ok=True)
            for name, mar in archives.items():
                shutil.copy(mar, store / f"{name}.mar")
        self.inference_url = self.properties["inference_address"]
        self.management_url = self.properties["management_address"]
        self.metrics_url = self.properties["metrics_address"]
        self.models = properties.load_models(self.properties)

    def start(self, timeout_s: float = 120.0) -> TorchServe:
        """`torchserve --start`, then waits until every model is READY.

        Raises:
            TimeoutError: not ready in time; the server is stopped again.
        """
        subprocess.run(["torchserve", "--start", "--ncs", "--ts-config", "config.properties"],
                       cwd=self.workdir, env=self.env, check=True, stdout=subprocess.DEVNULL)
        if not wait_until(self.ready, timeout_s):
            self.stop()
            raise TimeoutError(f"TorchServe not ready in {timeout_s} s; see {self.workdir / 'logs'}")
        return self

    def stop(self) -> None:
        """`torchserve --stop` for this server (its TMPDIR holds the pid file)."""
        subprocess.run(["torchserve", "--stop"], cwd=self.workdir, env=self.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)

    def ready(self) -> bool:
        return ready(self.properties, self.workdir / "key_file.json")

    def key(self, api: str = "inference") -> str:
        """The current `api` key ("inference", "management" or "API") from its key_file.json."""
        return read_key(self.workdir / "key_file.json", api)

    def auth(self, api: str = "inference") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key(api)}"}

    def describe(self, model: str) -> list[dict[str, Any]]:
        """The management API's description of `model` (one entry per version)."""
        return list(json.loads(get(f"{self.management_url}/models/{model}", self.auth("management"))))

    def worker_status(self, model: str) -> list[str]:
        """Each worker's status (`READY`, ...) of the model's first version."""
        return [str(w["status"]) for w in self.describe(model)[0]["workers"]]

    def worker_pids(self, model: str) -> list[int]:
        """Each worker's process id, of the model's first version."""
        return [int(w["pid"]) for w in self.describe(model)[0]["workers"]]

    def metrics(self) -> str:
        """One scrape of the metrics port (Prometheus text)."""
        return get(self.metrics_url + "/metrics")

    def metric(self, name: str, model: str | None = None, **labels: str) -> float:
        """The sum of series `name` for `model` with these labels, scraped now (see `prom.total`)."""
        from tsutil import prom  # prometheus-client: the test and autotune extras

        return prom.total(self.metrics(), name, model, **labels)

    def __enter__(self) -> TorchServe:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """`wait CONFIG`: waits until the TorchServe started with CONFIG (from this folder) is ready."""
    parser = argparse.ArgumentParser(prog="python -m tsutil.server", description=main.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    wait = commands.add_parser("wait", help="wait until every model of load_models is READY")
    wait.add_argument("config", type=Path, help="the config.properties TorchServe was started with")
    wait.add_argument("--key-file", type=Path, default=Path("key_file.json"))
    wait.add_argument("--timeout", type=float, default=180.0, help="seconds (default 180)")
    args = parser.parse_args(argv)
    values = properties.read(args.config)
    if wait_until(lambda: ready(values, args.key_file), args.timeout):
        return 0
    print(f"TorchServe did not become ready in {args.timeout:g} s; see logs/ts_log.log and "
          "logs/model_log.log", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
