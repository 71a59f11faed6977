"""Ray nodes that stay on loopback: `python -m rayserve.node start ...` is `ray start ...` that
keeps `--node-ip-address=127.0.0.1` and a `127.0.0.1:PORT` address as given.

Ray 2.60 replaces a loopback node address by the machine's outward address (so that other machines
could reach it), which would put every node's RPC ports on that interface. A cluster whose nodes
all run on one machine (the tests, a one-node `video-ray start`) needs no outward port, so these
nodes and the drivers that join them (`keep_loopback` before `ray.init`) keep the address they
were given. Ray's own token authentication is on (`RAY_AUTH_MODE=token`, the token in
`~/.ray/auth_token`, made by the first head that finds none).
"""

from __future__ import annotations

import os
import sys


def keep_loopback() -> None:
    """This process's Ray keeps a loopback address as given, with token authentication on."""
    os.environ.setdefault("RAY_AUTH_MODE", "token")  # before Ray is imported: it reads this once
    from ray._private import services

    services.resolve_ip_for_localhost = lambda host: host


def main() -> None:
    keep_loopback()
    if "--head" in sys.argv:
        # `ray start --head` in token mode refuses to start without a token: make one the first time.
        from ray._private.authentication.authentication_token_setup import ensure_token_if_auth_enabled

        ensure_token_if_auth_enabled(create_token_if_missing=True)
    from ray.scripts.scripts import main as ray_main

    sys.argv[0] = "ray"
    ray_main()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
