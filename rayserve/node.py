"""Ray nodes that stay on loopback: `python -m rayserve.node start ...` is `ray start ...` that
keeps `--node-ip-address=127.0.0.1` and a `127.0.0.1:PORT` address as given.

Ray 2.60 replaces a loopback node address by the machine's outward address (so that other machines
could reach it), which would put every node's RPC ports on that interface. A cluster whose nodes
all run on one machine (the tests, a one-node `video-ray start`) needs no outward port, so these
nodes and the drivers that join them (`keep_loopback` before `ray.init`) keep the address they
were given; a driver joins any cluster through `rayserve.cluster.join`. `stop_session` stops the nodes of one session only (`ray stop` stops every Ray on the
machine). Ray's own token authentication is on (`RAY_AUTH_MODE=token`, the token in
`~/.ray/auth_token`, made by the first head that finds none).
"""

from __future__ import annotations

import contextlib
import os
import sys

import psutil


def keep_loopback() -> None:
    """This process's Ray keeps a loopback address as given, with token authentication on (a token
    made in `~/.ray/auth_token` the first time; a cluster without authentication ignores it)."""
    os.environ.setdefault("RAY_AUTH_MODE", "token")  # before Ray is imported: it reads this once
    from ray._private import services
    from ray._private.authentication.authentication_token_setup import ensure_token_if_auth_enabled

    ensure_token_if_auth_enabled(create_token_if_missing=True)
    services.resolve_ip_for_localhost = lambda host: host


def session_processes(session: str, address: str) -> list[psutil.Process]:
    """The processes of one Ray node on this machine: those that name its session or its GCS
    address on their command line (the GCS, the raylet, the monitors, the client server) and all
    their descendants (workers, agents, replicas)."""
    def ours(args: list[str]) -> bool:
        return any(session in arg or arg == address or arg.endswith("=" + address) for arg in args)

    found: dict[int, psutil.Process] = {}
    for process in psutil.process_iter(["cmdline"]):
        if ours(process.info["cmdline"] or []):
            found[process.pid] = process
    for process in list(found.values()):
        with contextlib.suppress(psutil.Error):
            found.update((child.pid, child) for child in process.children(recursive=True))
    found.pop(os.getpid(), None)
    return list(found.values())


def stop_session(session: str, address: str, grace_s: float = 15.0) -> int:
    """Stops one Ray node's processes (SIGTERM, then SIGKILL after `grace_s`), leaving any other
    Ray on the machine running, as `ray stop` would not; returns how many there were."""
    processes = session_processes(session, address)
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    return len(processes)


def main() -> None:
    keep_loopback()  # `ray start --head` in token mode refuses to start without a token: made here
    from ray.scripts.scripts import main as ray_main

    sys.argv[0] = "ray"
    ray_main()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
