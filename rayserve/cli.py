"""`video-ray`: serves the archives of `config.properties` on Ray Serve, as `./serve.sh` serves them
on TorchServe.

    video-ray start [--config config.properties] [--models a,b] [--port 8000] [--address ADDR]
                    [--replica-cpus 1] [--ingress-replicas 1]
    video-ray tune MODEL [--batch-size N] [--max-batch-delay MS]   live, no replica restarted
    video-ray rotate-key        a new inference key in key_file.json; the old one is refused at once
    video-ray extras [--config config.properties] [--models a,b]   the pip extras the archives need (onnx)
    video-ray stop

`start` starts a one-node Ray cluster on 127.0.0.1, or joins the one at `--address` as a driver of
its node on this machine (`rayserve.cluster`: any cluster, `ray start`'s own included), checks that
the cluster has room for every replica, writes `key_file.json` (TorchServe's shape, mode 0600) when
it is missing, deploys an application per model and `doors` from a Serve config (`rayserve.deploy`;
the args stay in `video-ray.json` for `tune` until `stop`), shows progress until every model
answers and prints a working curl. Everything listens on 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rayserve.archive import ArchiveError
from rayserve.cluster import JoinError
from rayserve.node import keep_loopback

logger = logging.getLogger("rayserve")

#: Ray's GCS port for a cluster `start` makes (outside 10002-19999, where Ray puts its workers).
GCS_PORT = 6390


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = _parser().parse_args(argv)
    try:
        if args.command == "extras":
            from rayserve.plan import extras

            print(",".join(extras({"config": args.config, "models": [m for m in args.models.split(",") if m]})))
            return 0
        if args.command == "rotate-key":
            write_keys(Path(args.key_file), rotate=True)
            print(f"video-ray: a new inference key is in {args.key_file}; the old one is refused from now")
            return 0
        keep_loopback()  # before Ray is imported: its configuration reads the environment once
        if args.command == "start":
            return start(args)
        return tune(args) if args.command == "tune" else stop(args)
    except (ArchiveError, FileNotFoundError, JoinError) as err:
        print(f"video-ray: {err}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="video-ray", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    begin = commands.add_parser("start", help="start Ray (or join --address) and deploy the archives")
    begin.add_argument("--config", default="config.properties", help="TorchServe's properties (default: %(default)s)")
    begin.add_argument("--models", default="", help="model names, comma-separated (default: load_models)")
    begin.add_argument("--model-store", help="overrides the properties' model_store")
    begin.add_argument("--host", default="127.0.0.1", help="HTTP address (default: %(default)s)")
    begin.add_argument("--port", type=int, default=8000, help="HTTP port (default: %(default)s)")
    begin.add_argument("--metrics-port", type=int, default=8092, help="Prometheus port of the node Ray starts")
    begin.add_argument("--address", help="join this Ray cluster instead of starting one")
    begin.add_argument("--gcs-port", type=int, default=GCS_PORT, help="the port of the cluster start makes")
    begin.add_argument("--replica-cpus", type=float, default=1.0, help="Ray CPUs per model replica")
    begin.add_argument("--ingress-replicas", type=int, default=1, help="replicas of `doors`, the application on / (OIP, /ping, metadata; default: 1)")
    begin.add_argument("--key-file", default="key_file.json", help="the keys (written when missing)")
    begin.add_argument("--disable-token-auth", action="store_true", help="serve without keys (not recommended)")
    begin.add_argument("--timeout", type=float, default=300, help="seconds to wait for every model")
    tuning = commands.add_parser("tune", help="new batch settings for a model's live replicas")
    tuning.add_argument("model")
    tuning.add_argument("--batch-size", type=int, help="requests per batch (max_batch_size)")
    tuning.add_argument("--max-batch-delay", type=float, help="ms a batch waits to fill (batch_wait_timeout_s)")
    tuning.add_argument("--address", help="the cluster (default: the one start deployed to from this folder)")
    tuning.add_argument("--gcs-port", type=int, default=GCS_PORT)
    rotate = commands.add_parser("rotate-key", help="write a new inference key")
    rotate.add_argument("--key-file", default="key_file.json")
    needs = commands.add_parser("extras", help="the project's pip extras the archives need besides ray (onnx)")
    needs.add_argument("--config", default="config.properties")
    needs.add_argument("--models", default="", help="model names, comma-separated (default: load_models)")
    halt = commands.add_parser("stop", help="delete the application and stop the Ray node start made")
    halt.add_argument("--address", help="the cluster to delete the applications from (default: the one start "
                      "deployed to from this folder)")
    halt.add_argument("--gcs-port", type=int, default=GCS_PORT, help="the port of the cluster start made")
    return parser


def start(args: argparse.Namespace) -> int:
    import ray

    from rayserve import cluster, deploy
    from rayserve.plan import demands, plan

    # Paths absolute: Serve builds the applications in its controller, on the head, not in this folder.
    app_args: dict[str, Any] = {"config": str(Path(args.config).resolve()),
                                "models": [m for m in args.models.split(",") if m],
                                "key_file": None if args.disable_token_auth else str(Path(args.key_file).resolve()),
                                "replica_cpus": args.replica_cpus, "ingress_replicas": args.ingress_replicas}
    if args.model_store:
        app_args["model_store"] = str(Path(args.model_store).resolve())
    planned = plan(app_args)  # fails here, before Ray starts, on a bad archive or setting; warns of the rest
    wanted = demands(app_args)
    started = None if args.address else _start_head(args, cpus=sum(
        d.replicas * d.resources.get("CPU", 0) for d in wanted))
    address = args.address or f"127.0.0.1:{args.gcs_port}"
    nodes = cluster.nodes_at(address)
    cluster.check_room(wanted, nodes, args.replica_cpus)
    if not args.disable_token_auth:
        write_keys(Path(args.key_file), rotate=False)
    cluster.join(address, nodes)
    # The session `stop` stops: only the one this start began (`ray stop` would stop every Ray here).
    node = ray._private.worker._global_node
    started_node = {"session": node.session_name, "address": address} if started and node is not None else None
    print(f"video-ray: deploying {len(planned)} model{'s' if len(planned) > 1 else ''} on the Ray cluster at "
          f"{address}", flush=True)
    try:
        deploy.deploy(app_args, http={"host": args.host, "port": args.port}, timeout_s=args.timeout,
                      progress=lambda line: print(f"video-ray: {line}", flush=True))
    except RuntimeError as err:
        raise ArchiveError(str(err)) from None
    deploy.save(app_args, {}, node=started_node, address=address)
    _print_curl(args, [archive.name for archive, _ in planned])
    return 0


def tune(args: argparse.Namespace) -> int:
    from rayserve import cluster, deploy

    values = {key: value for key, value in (("batch_size", args.batch_size),
                                            ("max_batch_delay_ms", args.max_batch_delay)) if value is not None}
    if not values:
        raise ArchiveError("give --batch-size, --max-batch-delay or both")
    app_args, tuning = deploy.load()
    cluster.join(args.address or deploy.deployed_to() or f"127.0.0.1:{args.gcs_port}")
    try:
        tuning = deploy.tune(app_args, tuning, args.model, values)
    except RuntimeError as err:
        raise ArchiveError(str(err)) from None
    deploy.save(app_args, tuning)
    print(f"video-ray: {args.model} now batches with {tuning[args.model]} on its live replicas")
    return 0


def stop(args: argparse.Namespace) -> int:
    import ray
    from ray import serve

    from rayserve import cluster, deploy
    from rayserve.node import stop_session

    address = args.address or deploy.deployed_to() or f"127.0.0.1:{args.gcs_port}"
    try:
        cluster.join(address)
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
        print(f"video-ray: deleted the applications on the Ray cluster at {address}")
    except (ConnectionError, RuntimeError) as err:  # JoinError among them
        print(f"video-ray: no Ray cluster to stop at {address} ({err})", file=sys.stderr)
    node = None if args.address else deploy.started_node()
    deploy.STATE.unlink(missing_ok=True)  # its args, tuning and node are gone with the applications
    if node is None:
        if not args.address:
            print("video-ray: its nodes keep running: video-ray started none of them from this folder "
                  "(`ray stop` on each stops them)", file=sys.stderr)
        return 0
    stopped = stop_session(node["session"], node["address"])
    print(f"video-ray: stopped the Ray node at {node['address']} ({node['session']}, {stopped} processes)")
    return 0


def write_keys(path: Path, rotate: bool) -> None:
    """Writes TorchServe's `key_file.json` shape (mode 0600, atomically): new keys when the file is
    missing, a new inference key when `rotate`. Ray keys do not expire."""
    try:
        keys = json.loads(path.read_text())
        if not rotate:
            return
    except (OSError, ValueError):
        keys = {kind: {"key": secrets.token_urlsafe(24)} for kind in ("management", "inference", "API")}
    keys["inference"] = {"key": secrets.token_urlsafe(24)}
    fd, tmp = tempfile.mkstemp(dir=path.resolve().parent, prefix=".key_file.")
    with os.fdopen(fd, "w") as f:
        json.dump(keys, f, indent=2)
    os.replace(tmp, path)


def _start_head(args: argparse.Namespace, cpus: float) -> bool:
    """A one-node cluster on 127.0.0.1 at `--gcs-port`; False when one runs there already (a
    previous `start`, or the user's: deployed to, never stopped by this tool)."""
    address = f"127.0.0.1:{args.gcs_port}"
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", args.gcs_port)) == 0:
            logger.info("a Ray cluster is already running at %s: deploying there", address)
            return False
    logical = max(os.cpu_count() or 1, int(cpus + 0.999))
    subprocess.run([sys.executable, "-m", "rayserve.node", "start", "--head", "--node-ip-address=127.0.0.1",
                    f"--port={args.gcs_port}",
                    "--include-dashboard=false", "--disable-usage-stats", f"--num-cpus={logical}",
                    f"--metrics-export-port={args.metrics_port}"], check=True, stdout=subprocess.DEVNULL)
    return True


def _print_curl(args: argparse.Namespace, models: list[str]) -> None:
    url = f"http://{args.host}:{args.port}"
    auth = "" if args.disable_token_auth else (
        f"-H \"Authorization: Bearer $(python3 -c 'import json; print(json.load(open(\"{args.key_file}\"))"
        f"[\"inference\"][\"key\"])')\" \\\n       ")
    print(f"Ray Serve is serving {', '.join(models)} on {url} (metrics: the node's --metrics-export-port)")
    print(f"Try:\n  curl {auth}-T data/images/chelsea.png {url}/predictions/{models[0]}")
    print("Stop it with: video-ray stop")
