"""The package's three layers (README, Repository): core, the ROS adapters in motionvl.ros, and the entry points
(commands and benchmarks) on top. Each imports only the layers below it, lazy imports in functions included."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "motionvl"
ROS_CLIENT = ("rclpy", "rcl_interfaces", "launch", "launch_ros")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _table_modules(tree: ast.Module, table: str) -> set[str]:
    """The module names (first item of each value) of a literal `TABLE = {...}` in a module's source."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == table for t in node.targets):
            return {value.elts[0].value for value in node.value.values}
    raise AssertionError(f"no {table} table")


def entry_points() -> set[str]:
    """The top layer: the `motionvl` command and its `bench` command, the modules they run (their COMMANDS and
    TARGETS tables) and every module named cli, bench, *_cli or *_bench."""
    found = {"motionvl.cli", "motionvl.bench_cli"}
    found |= _table_modules(ast.parse((PACKAGE / "cli.py").read_text()), "COMMANDS")
    found |= _table_modules(ast.parse((PACKAGE / "bench_cli.py").read_text()), "TARGETS")
    for name in modules():
        last = name.rsplit(".", 1)[-1]
        if last in ("cli", "bench") or last.endswith(("_cli", "_bench")):
            found.add(name)
    return found


def layer(name: str, entries: set[str]) -> str:
    if name in entries:
        return "entry"
    if name == "motionvl.ros" or name.startswith("motionvl.ros."):
        return "ros"
    if name.startswith("motionvl.msg") or name.startswith("motionvl.srv") or name.startswith("motionvl.action"):
        return "ros"  # the generated interfaces: imported by the adapters only
    return "core"


def imports(path: Path, name: str) -> list[tuple[str, int]]:
    """(imported module, line) of every import in the file, those inside functions too, relative ones resolved;
    `from a import b` yields both a and a.b (b may be a module); importlib.import_module("...") counts."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level \
                else node.module
            found.append((base, node.lineno))
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.args[0].value, node.lineno))
    return found


def violations(sources: dict[str, Path]) -> list[str]:
    entries = entry_points()
    known = set(sources)
    allowed = {"core": {"core"}, "ros": {"core", "ros"}, "entry": {"core", "ros", "entry"}}
    found = []
    for name, path in sources.items():
        own = layer(name, entries)
        for target, line in imports(path, name):
            where = f"{path.relative_to(SRC.parent)}:{line}: {name} ({own}) imports"
            if own == "core" and target.split(".")[0] in ROS_CLIENT:
                found.append(f"{where} {target} (ROS client library)")
            if not target.startswith("motionvl"):
                continue
            # the longest known module the name starts with (a.b.c may be a function c of module a.b)
            parts = target.split(".")
            module = next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in known),
                          None)
            if module is None and target.startswith(("motionvl.msg", "motionvl.srv", "motionvl.action")):
                module = target  # generated at setup, not in src/
            if module is not None and layer(module, entries) not in allowed[own]:
                found.append(f"{where} {module} ({layer(module, entries)})")
    return sorted(set(found))


def test_the_layers_are_found():
    entries = entry_points()
    assert {"motionvl.search.cli", "motionvl.rl.bench", "motionvl.rl.eval_cli", "motionvl.demo",
            "motionvl.ros.deploy_sim", "motionvl.ros.graph_bench"} <= entries
    assert layer("motionvl.search.loop", entries) == "core" and layer("motionvl.ros.graph", entries) == "ros"
    sources = modules()
    lazy = [target for target, _ in imports(sources["motionvl.search.cli"], "motionvl.search.cli")]
    assert "motionvl.ros.train_graph" in lazy, "imports inside functions are found"
    assert "motionvl.ros.reward_synthesizer_node" in lazy, "importlib.import_module with a constant is found"


def test_no_module_imports_a_layer_above_its_own():
    found = violations(modules())
    assert not found, ("core imports neither motionvl.ros, a ROS client library nor an entry point; motionvl.ros "
                       "no entry point:\n" + "\n".join(found))


@pytest.mark.parametrize("source, expected", [
    ("def f():\n    from motionvl.ros.graph import namespace\n", "(ros)"),
    ("from motionvl.render import cli\n", "(entry)"),
    ("from ..render.cli import run\n", "(entry)"),
    ("import importlib\nimportlib.import_module('motionvl.search.cli')\n", "(entry)"),
    ("import rclpy\n", "(ROS client library)"),
])
def test_a_core_module_reaching_up_is_caught(tmp_path, source, expected, monkeypatch):
    path = PACKAGE / "search" / "_layer_probe.py"  # a core module's place; never written: read through the stub
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: source if self == path else real(self, *a, **k))
    found = violations({**modules(), "motionvl.search._layer_probe": path})
    assert [line for line in found if "_layer_probe" in line and line.endswith(expected)], found
