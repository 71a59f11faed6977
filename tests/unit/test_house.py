"""The house drawn from its imports (DESIGN section 11): floors, no circles, no long rooms.

Every import in `handler/` (and in the Ray engine's `rayserve/`) counts, at the top, inside
functions and under TYPE_CHECKING. A module may import its own floor or the floors below it, never
above, and never in a circle.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

HANDLER = ROOT / "handler"
#: From the top down; a module imports its own floor or lower ones only.
FLOORS = [
    ("service", ["handler.service", "handler.engine"]),
    ("doors", ["handler.doors", "handler.doors.native", "handler.doors.oip", "handler.doors.route",
               "handler.doors.wire"]),
    ("core", ["handler.pipeline", "handler.waves", "handler.chunks"]),
    ("tasks", ["handler.outputs", "handler.tasks", "handler.tasks.heads", "handler.tasks.head", "handler.tasks.raw",
               "handler.tasks.detection", "handler.tasks.classification", "handler.tasks.segmentation",
               "handler.tasks.nms", "handler.tasks.labels", "handler.tasks.rle", "handler.tasks.masks"]),
    ("geometry and device memory", ["handler.layout", "handler.collate", "handler.memory", "handler.fills"]),
    ("decoding", ["handler.frames", "handler.jpeg", "handler.video", "handler.colour", "handler.probe_segment",
                  "handler.formats", "handler.limits", "handler.looks"]),
    ("ground", ["handler", "handler.clip", "handler.motion", "handler.regions", "handler.config", "handler.device", "handler.errors", "handler.metrics",
                "handler.loading", "handler.onnx_model", "handler.ultralytics", "handler.models", "handler.models.build", "handler.models.frame_quality",
                "handler.models.fixed_batch_cnn", "handler.models.face_detector"]),
]
#: The Ray engine's rooms, read top to bottom (docs/engines.md).
RAY_FLOORS = [
    ("command", ["rayserve.cli", "rayserve.__main__"]),
    ("deploying", ["rayserve.deploy", "rayserve.cluster", "rayserve.node"]),
    ("applications", ["rayserve.app"]),
    ("replicas and doors", ["rayserve.model", "rayserve.ingress"]),
    ("the gate", ["rayserve.gate"]),
    ("ground", ["rayserve", "rayserve.plan", "rayserve.archive", "rayserve.wire"]),
]
FLOOR = {module: level for level, (_, modules) in enumerate(FLOORS) for module in modules}
RAY_FLOOR = {module: level for level, (_, modules) in enumerate(RAY_FLOORS) for module in modules}
HOUSES = {"handler": (HANDLER, FLOORS, FLOOR), "rayserve": (ROOT / "rayserve", RAY_FLOORS, RAY_FLOOR)}
#: A function longer than this does not fit on a screen.
SCREEN = 40


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(root: Path = HANDLER) -> dict[str, Path]:
    return {_module(p): p for p in sorted(root.rglob("*.py"))}


def _imports(path: Path, known: set[str]) -> set[str]:
    """The handler modules `path` imports anywhere (a package's import counts too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in known)
    return found - {_module(path)}


def _graph(root: Path = HANDLER) -> dict[str, set[str]]:
    modules = _modules(root)
    return {name: _imports(path, set(modules)) for name, path in modules.items()}


@pytest.mark.parametrize("house", HOUSES)
def test_every_module_has_a_floor(house):
    root, _, floor = HOUSES[house]
    assert set(_modules(root)) == set(floor), f"give each new {house} module a floor (DESIGN section 11)"


@pytest.mark.parametrize("house", HOUSES)
def test_no_module_imports_a_floor_above_its_own(house):
    root, floors, floor = HOUSES[house]
    upward = [f"{module} ({floors[floor[module]][0]}) imports {target} ({floors[floor[target]][0]})"
              for module, targets in _graph(root).items() for target in sorted(targets)
              if floor[target] < floor[module] and not target.startswith(module + ".")]
    assert not upward, "imports that go up a floor:\n" + "\n".join(upward)


@pytest.mark.parametrize("house", HOUSES)
def test_no_circles(house):
    graph = _graph(HOUSES[house][0])
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                circle = path[path.index(target):] + [target]
                pytest.fail("import circle: " + " -> ".join(circle))
            if target not in state:
                visit(target)
        path.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert len(state) == len(graph) > {"handler": 20, "rayserve": 10}[house]  # every module walked


def test_the_core_knows_no_door_and_imports_nothing_from_ts():
    for module, path in _modules().items():
        if module == "handler.service":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("ts"), f"{module} imports {node.module}"
            if isinstance(node, ast.Import):
                assert not any(a.name == "ts" or a.name.startswith("ts.") for a in node.names), module


def test_no_function_is_longer_than_a_screen():
    long = [f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in _modules().values() for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > SCREEN]
    assert not long, f"functions longer than {SCREEN} lines: split them\n" + "\n".join(long)


def test_colour_conversion_is_pure_torch():
    """`handler.colour` runs on any device torch has: it imports torch and the standard library only."""
    tree = ast.parse((HANDLER / "colour.py").read_text())
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert {name.split(".")[0] for name in names} - set(sys.stdlib_module_names) == {"torch"}
