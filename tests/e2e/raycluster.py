"""A real Ray cluster of three nodes on this machine for end-to-end tests, started as Ray's docs
say, with plain `ray start` (so its nodes register at the machine's outward address, as a user's
do): a head (no CPUs: it holds the HTTP proxy, Serve's controller and `doors`) and two workers (the
model replicas), each its own `ray start --block` process group, so a test can SIGKILL a node whole.
Ray's token authentication is on (`RAY_AUTH_MODE=token`, tests/e2e/conftest.py).

Serve deploys the applications of `rayserve.deploy.config` there, the way `video-ray start` does; `RayServe` answers the
same questions a test asks of `tests.e2e.server.TorchServe` (address, key, metrics).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

from rayserve.plan import app_name
from tsutil import prom

#: Each node's object store: the tests' frames are small; Ray's default takes 30% of memory per node.
OBJECT_STORE_BYTES = 150_000_000


#: The `ray` command of this Python's environment.
RAY = str(Path(sys.executable).with_name("ray"))


class Node:
    """One `ray start --block` process group."""

    def __init__(self, name: str, args: list[str], log: Path) -> None:
        self.name, self.log = name, log
        with open(log, "wb") as out:
            # Metrics every second (Ray's default is 10 s): the autotune watcher reads rates a second apart.
            env = {**os.environ, "RAY_metrics_report_interval_ms": "1000"}
            self.process = subprocess.Popen([RAY, "start", "--block", *args], stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True, env=env)

    def kill(self) -> None:
        """SIGKILL to the node's raylet and every worker of it, as a machine that lost power."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s: a head node's `ray start --block` does not end on
        SIGTERM (it waited out the 30 s this gave it, twice a test run)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()


class RayCluster:
    """A head and `workers` worker nodes (`worker1`, `worker2`, ... as custom resources)."""

    def __init__(self, workdir: Path, port_offset: int = 0, workers: int = 2, worker_cpus: int = 2) -> None:
        from rayserve.node import keep_loopback

        keep_loopback()  # this driver's Ray in token mode, the token made if missing: the nodes read it
        self.workdir = workdir
        self.gcs_port = 6490 + port_offset  # clear of `video-ray start`'s 6390
        self.metrics_ports = {"head": 8192 + port_offset}
        common = ["--disable-usage-stats", f"--object-store-memory={OBJECT_STORE_BYTES}"]
        self.nodes = {"head": Node("head", [
            "--head", "--node-ip-address=127.0.0.1", f"--port={self.gcs_port}", "--include-dashboard=false", "--num-cpus=0",
            '--resources={"head": 1}', f"--metrics-export-port={self.metrics_ports['head']}", *common],
            workdir / "head.log")}
        self.address = f"127.0.0.1:{self.gcs_port}"  # the GCS listens on every interface; nodes use the outward one
        _wait_port(self.gcs_port, 90, self.nodes["head"])
        self.connect()
        self.wait_nodes(1)
        # One at a time: nodes starting together on one machine pick the same socket names.
        for i in range(1, workers + 1):
            name = f"worker{i}"
            self.metrics_ports[name] = 8192 + i + port_offset
            self.nodes[name] = Node(name, [
                f"--address={self.address}", f"--num-cpus={worker_cpus}", f'--resources={{"{name}": 1}}',
                *_own_ports(22000 + port_offset + 400 * i),
                f"--metrics-export-port={self.metrics_ports[name]}", *common], workdir / f"{name}.log")
            self.wait_nodes(i + 1)

    def connect(self) -> None:
        from rayserve import cluster

        cluster.join(self.address, log_to_driver=False)  # the replicas' logs stay in the session's files

    def alive_nodes(self) -> dict[str, str]:
        """Node id -> our node name, of the nodes alive now."""
        import ray

        found = {}
        for node in ray.nodes():
            if node["Alive"]:
                names = [n for n in self.nodes if node["Resources"].get(n)]
                found[node["NodeID"]] = names[0] if names else "?"
        return found

    def wait_nodes(self, count: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.alive_nodes()) != count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.alive_nodes())} Ray nodes alive, not {count}: see {self.workdir}/*.log")
            time.sleep(0.5)

    def replicas(self, deployment: str) -> list[str]:
        """The node name of each running replica of `deployment`."""
        from ray._private import state  # the GCS's actor table (Ray's state API needs the dashboard)

        nodes = self.alive_nodes()
        return sorted(nodes.get(actor["Address"]["NodeID"], "?") for actor in state.actors().values()
                      if actor["State"] == "ALIVE" and actor["ActorClassName"] == f"ServeReplica:{app_name(deployment)}:{deployment}")

    def metric(self, node: str, name: str, **labels: str) -> float:
        """The sum of series `name` with these labels on one node's metrics port."""
        text = requests.get(f"http://127.0.0.1:{self.metrics_ports[node]}/metrics", timeout=10).text
        return prom.total(text, name, None, **labels)

    def stop(self) -> None:
        import ray

        try:
            from ray import serve

            serve.shutdown()
        finally:
            ray.shutdown()
            for node in reversed(list(self.nodes.values())):
                node.stop()


class RayServe:
    """The applications `rayserve.deploy` made on a cluster: what a test sends to and reads."""

    def __init__(self, cluster: RayCluster, workdir: Path, args: dict[str, Any], port: int) -> None:
        from rayserve import deploy
        from rayserve.cli import write_keys

        self.cluster, self.workdir = cluster, workdir
        self.args = {"key_file": str(workdir / "key_file.json"), **args}
        self.tuning: dict[str, dict[str, float]] = {}
        self.inference_url = f"http://127.0.0.1:{port}"
        self.properties: dict[str, str] = {}
        write_keys(workdir / "key_file.json", rotate=False)
        deploy.deploy(self.args, http={"host": "127.0.0.1", "port": port})

    def reconfigure(self, model: str, values: dict[str, float]) -> None:
        """New batch settings for `model`'s live replicas, as `video-ray tune` applies them."""
        from rayserve import deploy

        self.tuning = deploy.tune(self.args, self.tuning, model, values)

    def key(self, api: str = "inference") -> str:
        return str(json.loads((self.workdir / "key_file.json").read_text())[api]["key"])

    def auth(self, api: str = "inference") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key(api)}"}

    def replica_logs(self, model: str) -> list[str]:
        """The text of each replica's Serve log file that `model` ever had (one file per replica)."""
        import ray

        logs = Path(ray._private.worker._global_node.get_logs_dir_path()) / "serve"
        return [path.read_text(errors="replace") for path in sorted(logs.glob(f"replica_{app_name(model)}_{model}_*.log"))]

    def batch_requests(self, model: str) -> list[int]:
        """Requests per batch of `model`, from the handler's per-batch log line in its replicas' logs."""
        return [int(n) for text in self.replica_logs(model) for n in re.findall(r"batch: (\d+) requests", text)]

    def batch_limits(self, model: str) -> list[list[int]]:
        """Per replica, the batch sizes it was configured with, in order (`Model.reconfigure`'s line)."""
        return [[int(n) for n in re.findall(r"batches of up to (\d+) requests", text)]
                for text in self.replica_logs(model)]


def _own_ports(base: int) -> list[str]:
    """Ports of their own for a second node on the machine (Ray's defaults are one machine's, one node's)."""
    names = ("node-manager-port", "object-manager-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
             "runtime-env-agent-port")
    return [*(f"--{name}={base + i}" for i, name in enumerate(names)),
            f"--min-worker-port={base + 100}", f"--max-worker-port={base + 399}"]


def _wait_port(port: int, timeout_s: float, node: Node) -> None:
    import socket

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        if node.process.poll() is not None:
            raise RuntimeError(f"the Ray {node.name} exited: see {node.log}")
        time.sleep(0.2)
    raise TimeoutError(f"the Ray {node.name} did not listen on {port} within {timeout_s:g} s: see {node.log}")
