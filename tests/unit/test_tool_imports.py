"""The tools beside the handler, drawn from their imports: no circles, and the handler's ground floor at most.

Every `import` and `from ... import` anywhere in a file counts, inside functions too: a circle
that a lazy import hides is still a circle (DESIGN.md section 11).
"""

from __future__ import annotations

import ast
import graphlib
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The tool packages drawn (the ones not checked out here are skipped).
TOOLS = ("loadgen", "autotune", "tskeys", "tsutil", "ingest", "bench")
#: What a tool may import from the handler: its ground floor (and these modules' submodules).
GROUND_FLOOR = ("handler.clip", "handler.config", "handler.errors", "handler.metrics", "handler.loading",
                "handler.formats", "handler.limits", "handler.models", "handler.motion")
#: bench measures the core in process, so it may import any room of the handler.
FLOOR_EXEMPT = ("bench",)

Graph = dict[str, set[str]]


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """{dotted module name: file} of every `.py` file under `root/<package>` (`__init__` as the package)."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """Every module that `name` (at `path`) imports, relative imports resolved.

    `from pkg import mod` is `pkg.mod` where that module exists, otherwise `pkg`; a name that is
    not a module of `known` keeps its dotted name (third-party ones, say).
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return targets


def import_graph(root: Path, packages: Iterable[str], resolve: Iterable[str] = ("handler",)) -> Graph:
    """{module: every module it imports}, over the modules of `packages`.

    Names are resolved against `packages` and `resolve` (so `from handler import config` is
    `handler.config`); the edges keep every target, also those outside `packages`.
    """
    packages = list(packages)
    known = module_files(root, [*packages, *resolve])
    return {name: imported(name, known[name], known) for name in module_files(root, packages)}


def within(graph: Graph, nodes: Iterable[str]) -> Graph:
    """`graph` with only the edges between `nodes`, each target cut to its longest prefix in `nodes`."""
    nodes = set(nodes)

    def node_of(target: str) -> str | None:
        parts = target.split(".")
        return next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in nodes), None)

    return {name: {t for t in map(node_of, targets) if t is not None and t != name}
            for name, targets in graph.items() if name in nodes}


def packages_of(graph: Graph) -> Graph:
    """The graph between top-level packages: `a` imports `b` when any module of `a` imports one of `b`."""
    tops: Graph = {}
    for name, targets in graph.items():
        top = name.partition(".")[0]
        tops.setdefault(top, set()).update(t.partition(".")[0] for t in targets)
    return within(tops, tops)


def circle(graph: Graph) -> list[str] | None:
    """One circle of `graph` (`[a, b, a]`: a imports b imports a), or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(reversed(exc.args[1]))  # graphlib lists it against the import direction
    return None


def _tools() -> Graph:
    return import_graph(ROOT, [t for t in TOOLS if (ROOT / t).is_dir()])


def test_no_tool_module_imports_itself_back():
    graph = _tools()
    assert len(graph) > 30, f"only {sorted(graph)} found under {ROOT}"
    found = circle(within(graph, graph))
    assert found is None, f"modules import each other in a circle: {' -> '.join(found)}"


def test_no_tool_package_imports_itself_back():
    graph = _tools()
    found = circle(packages_of(within(graph, graph)))
    assert found is None, f"tool packages import each other in a circle: {' -> '.join(found)}"


def test_tools_import_at_most_the_handlers_ground_floor():
    above = {f"{name} imports {target}" for name, targets in _tools().items()
             if name.partition(".")[0] not in FLOOR_EXEMPT
             for target in targets if target == "handler" or target.startswith("handler.")
             if not any(target == floor or target.startswith(f"{floor}.") for floor in GROUND_FLOOR)}
    assert not above, f"tools reach above the handler's ground floor ({', '.join(GROUND_FLOOR)}): {sorted(above)}"


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_drawing_sees_lazy_relative_and_package_imports(tmp_path):
    root = _tree(tmp_path, {
        "low/__init__.py": "from low.keys import read\n",
        "low/keys.py": "import json\n\ndef read():\n    from ..high import rules\n",
        "high/__init__.py": "",
        "high/rules.py": "from low import keys\nfrom handler.service import X\n",
        "handler/__init__.py": "", "handler/service.py": "",
    })
    graph = import_graph(root, ["low", "high"])
    assert graph == {"low": {"low.keys"}, "low.keys": {"json", "high.rules"},
                     "high": set(), "high.rules": {"low.keys", "handler.service"}}
    assert circle(within(graph, graph)) in (["low.keys", "high.rules", "low.keys"],
                                            ["high.rules", "low.keys", "high.rules"])
    assert packages_of(within(graph, graph)) == {"low": {"high"}, "high": {"low"}}
    assert circle(packages_of(within(graph, graph))) is not None
    graph["low.keys"] = {"json"}  # the lazy import gone: one way only
    assert circle(within(graph, graph)) is None and circle(packages_of(within(graph, graph))) is None


@pytest.mark.parametrize("lines", ["from . import b", "from .b import f", "import pkg.b", "from pkg import b"])
def test_every_spelling_of_an_import_is_an_edge(tmp_path, lines):
    root = _tree(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": f"def g():\n    {lines}\n", "pkg/b.py": ""})
    assert "pkg.b" in import_graph(root, ["pkg"])["pkg.a"]
