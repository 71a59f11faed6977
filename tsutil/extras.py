"""The project's extras: the commands' entry points, which say in one line which extra to install
when theirs is missing, and the check `scripts/setup.sh` makes before installing anything.

The base install holds what the handler imports; each command beside it comes with an extra
(pyproject.toml): `video-ingest` with `ingest`, `video-loadgen` with `loadgen`, `video-autotune`
with `autotune`, `video-ray` with `ray`. What an extra requires is read from the installed
project's own metadata, so the list lives in pyproject.toml alone.

    python -m tsutil.extras check test,ray      exit 0 when the project and these extras are
                                                installed, 1 otherwise
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PROJECT = "video-frame-handler"


def missing(extra: str) -> list[str]:
    """The distributions `extra` requires that are not installed, in pyproject.toml's order.

    Raises:
        metadata.PackageNotFoundError: the project itself is not installed (a checkout on
            PYTHONPATH, as the container image runs video-ingest).
    """
    absent: list[str] = []
    for text in metadata.requires(PROJECT) or []:
        requirement = Requirement(text)
        if requirement.marker is None or not requirement.marker.evaluate({"extra": extra}):
            continue
        if canonicalize_name(requirement.name) == PROJECT:  # an extra made of others: test, bench
            absent += [name for inner in sorted(requirement.extras) for name in missing(inner)]
            continue
        try:
            metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            absent.append(requirement.name)
    return list(dict.fromkeys(absent))


def advice(extra: str, command: str) -> str | None:
    """The one line `command` says when `extra` is not installed; None when it is, or when the
    project is not installed at all (nothing to read: the import itself then says what is missing)."""
    try:
        absent = missing(extra)
    except metadata.PackageNotFoundError:
        return None
    if not absent:
        return None
    return (f"{command} needs the '{extra}' extra ({', '.join(absent)} not installed): "
            f"pip install '{PROJECT}[{extra}]'")


def run(extra: str, command: str, module: str) -> None:
    """Runs `module`'s `main()` as `command`, or exits with `advice` when its extra is missing."""
    line = advice(extra, command)
    if line:
        sys.exit(line)
    sys.exit(importlib.import_module(module).main())


def ingest() -> None:
    """`video-ingest`."""
    run("ingest", "video-ingest", "ingest.cli")


def loadgen() -> None:
    """`video-loadgen`."""
    run("loadgen", "video-loadgen", "loadgen.cli")


def autotune() -> None:
    """`video-autotune`."""
    run("autotune", "video-autotune", "autotune.cli")


def ray() -> None:
    """`video-ray`."""
    run("ray", "video-ray", "rayserve.cli")


def installed(extras: Sequence[str]) -> bool:
    """Whether the project and every one of `extras` are installed."""
    try:
        return not any(missing(extra) for extra in extras)
    except metadata.PackageNotFoundError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tsutil.extras", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="exit 0 when the project and these extras are installed")
    check.add_argument("extras", help="comma-separated, e.g. test,ray ('' for the base install)")
    args = parser.parse_args(argv)
    return 0 if installed([e for e in args.extras.split(",") if e]) else 1


if __name__ == "__main__":
    sys.exit(main())
