"""A Ray cluster from this machine: joined as a driver of the node that runs here, whatever address
the cluster gave it, and checked for room before anything is deployed.

`ray start --head --node-ip-address 127.0.0.1` registers the node at the machine's outward address,
and a cluster of several machines has one address per machine: a driver that names its own address
finds no node (Ray waits a minute, then raises). `join` asks the cluster's GCS which nodes it has,
picks the one on this machine and says at once why it cannot join, and what to do, when it cannot.
`unplaced` tells which replicas no node can hold, before Serve waits on them.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rayserve.plan import Demand

logger = logging.getLogger(__name__)

#: Seconds a cluster whose GCS answers may take to register its first node (a head still starting).
STARTING_S = 20.0


class JoinError(RuntimeError):
    """The cluster cannot be joined from here; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Node:
    """An alive node: its address and its resources (`CPU`, `GPU`, custom ones), in all."""

    address: str
    resources: Mapping[str, float]


def join(address: str, nodes: Sequence[Node] | None = None, **init: Any) -> None:
    """`ray.init` on the cluster at `address` (`HOST:PORT` of its GCS), as a driver of a node that
    runs on this machine; `nodes`: its alive nodes, when already asked (`nodes_at`); `init` goes to
    `ray.init`.

    Raises:
        JoinError: nothing answers there, the cluster refused this machine's Ray token, or none
            of its nodes runs here.
    """
    import ray

    if ray.is_initialized():
        return
    here = local_node(address, nodes_at(address) if nodes is None else nodes)
    init.setdefault("logging_level", logging.WARNING)
    ray.init(address=address, _node_ip_address=here, **init)


def nodes_at(address: str) -> list[Node]:
    """The alive nodes of the cluster whose GCS is at `address`, from its node table.

    Raises:
        JoinError: naming the address, what went wrong and the fix.
    """
    from ray._raylet import GcsClient  # type: ignore[attr-defined]
    from ray.exceptions import AuthenticationError

    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise JoinError(f"--address {address!r} is not HOST:PORT (the head's GCS address, e.g. 127.0.0.1:6379)")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as err:
        raise JoinError(f"no Ray cluster answers at {address} ({err.strerror or err}): start one with `ray start "
                        f"--head --port {port}`, or leave out --address and video-ray starts a one-node cluster "
                        "on 127.0.0.1") from None
    try:
        client = GcsClient(address=address)
        alive = _alive(client)
        deadline = time.monotonic() + STARTING_S
        while not alive and time.monotonic() < deadline:  # a head whose GCS is up before its node is
            time.sleep(0.5)
            alive = _alive(client)
    except AuthenticationError:
        raise JoinError(f"the Ray cluster at {address} refused this machine's Ray token (or asked for one, "
                        "and RAY_AUTH_MODE is not token here): copy the cluster's token "
                        "here (`ray get-auth-token` on its head prints it) into ~/.ray/auth_token, or set "
                        "RAY_AUTH_TOKEN") from None
    except Exception as err:  # Ray's RpcError and kin: not a GCS there, or one that does not answer
        raise JoinError(f"{address} does not answer as a Ray cluster's GCS ({type(err).__name__}: {err}): give "
                        "the head's address as `ray start --head` printed it") from None
    return alive


def _alive(client: Any) -> list[Node]:
    return [Node(info.node_manager_address, dict(info.resources_total))
            for info in client.get_all_node_info(timeout=15).values() if info.state == 0]  # GcsNodeInfo.ALIVE


def local_node(address: str, nodes: Sequence[Node], local: set[str] | None = None) -> str:
    """The address of a node of `nodes` that runs on this machine (one of `local`'s addresses).

    Raises:
        JoinError: none does, naming the nodes' addresses and what to do.
    """
    mine = _local_addresses() if local is None else local
    here = [node.address for node in nodes if node.address in mine]
    if here:
        return here[0]
    seen = ", ".join(sorted({node.address for node in nodes})) or "none alive"
    raise JoinError(f"the Ray cluster at {address} has no node on this machine (its nodes: {seen}): run video-ray "
                    f"on one of them (the head), or make this machine a node first: `ray start --address {address}`")


def _local_addresses() -> set[str]:
    import psutil

    found = {"127.0.0.1", "::1"}
    for addresses in psutil.net_if_addrs().values():
        found.update(a.address.split("%")[0] for a in addresses if a.family in (socket.AF_INET, socket.AF_INET6))
    return found


def unplaced(demands: Sequence[Demand], nodes: Sequence[Node]) -> dict[str, int]:
    """Replicas of each deployment that no node has room for when all start together: replicas
    packed onto the nodes' resources first fit, largest first (Ray places each replica on one node).

    Returns:
        deployment name -> replicas left over; empty when every replica fits.
    """
    room = [dict(node.resources) for node in nodes]
    replicas = sorted(((d.name, d.resources) for d in demands for _ in range(d.replicas)),
                      key=lambda r: (-r[1].get("GPU", 0), -r[1].get("CPU", 0)))
    left: dict[str, int] = {}
    for name, wants in replicas:
        node = next((r for r in room if all(r.get(k, 0) >= v - 1e-9 for k, v in wants.items())), None)
        if node is None:
            left[name] = left.get(name, 0) + 1
            continue
        for k, v in wants.items():
            node[k] -= v
    return left


def check_room(demands: Sequence[Demand], nodes: Sequence[Node], replica_cpus: float) -> None:
    """Raises JoinError naming the deployments whose replicas no node can hold, what the nodes
    have, and the setting that fixes it (a `--replica-cpus` that fits, where one does)."""
    left = unplaced(demands, nodes)
    if not left:
        return
    have = ", ".join(f"{n.address}: {_amounts(n.resources) or 'nothing'}" for n in nodes) or "no alive node"
    asked = ", ".join(f"{d.name} {d.replicas} x {_amounts(d.resources) or 'nothing'}" for d in demands if d.replicas)
    cpus = sum(d.replicas * d.resources.get("CPU", 0) for d in demands)
    short = ", ".join(f"{d.name} ({left[d.name]} of {d.replicas})" for d in demands if d.name in left)
    fixes = []
    if any(d.resources.get("GPU") for d in demands if d.name in left):
        gpus = sum(n.resources.get("GPU", 0) for n in nodes)
        fixes.append(f"a replica with deviceType: gpu holds a GPU and the nodes have {gpus:g}: add GPU nodes, or "
                     "set deviceType: cpu in the model-config YAML")
    fitting = _fitting_cpus(demands, nodes, replica_cpus)
    if fitting:
        fixes.append(f"--replica-cpus {fitting:g} fits every replica (now {replica_cpus:g})")
    fixes.append("add nodes, lower minWorkers, or serve fewer models (--models a,b)")
    raise JoinError(f"the replicas do not all fit on the cluster's nodes, no room for: {short}. They ask for "
                    f"{asked} ({cpus:g} CPU in all); the nodes have {have}. Fix: " + "; ".join(fixes))


def _fitting_cpus(demands: Sequence[Demand], nodes: Sequence[Node], replica_cpus: float) -> float | None:
    """The largest `--replica-cpus` below `replica_cpus`, in hundredths, at which every replica fits."""
    def fits(cpus: float) -> bool:
        scaled = [Demand(d.name, d.replicas, {**d.resources, "CPU": cpus}) if d.resources.get("CPU") else d
                  for d in demands]
        return not unplaced(scaled, nodes)

    low, high = 1, int(replica_cpus * 100)  # hundredths of a CPU
    if high <= low or not fits(low / 100):
        return None
    while low < high - 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle / 100) else (low, middle)
    return low / 100


def _amounts(resources: Mapping[str, float]) -> str:
    return ", ".join(f"{amount:g} {name}" for name, amount in resources.items()
                     if name in ("CPU", "GPU") or not (name.startswith("node:") or "memory" in name))
