"""The launch files' structure, evaluated without `launch` (not on PyPI: tests/launch_model.py);
tests/test_launch_arguments.py starts the processes they describe.

Every launch file parses, defines generate_launch_description(), starts only executables that
setup.py installs as console scripts of this package, names nodes that config/nodes.yaml has
a section for, and every console script points at a module with a main().
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
LAUNCH_FILES = sorted((ROOT / "launch").glob("*.launch.py"))


def _console_scripts() -> dict:
    """name -> 'module:function' the script runs (nodes: their module's main(), entered through
    motionvl.ros.console): setup.py and CMakeLists.txt make one per src/motionvl/ros/<name>_node.py."""
    scripts = {"motionvl": "motionvl.cli:main"}
    scripts.update({p.stem: f"motionvl.ros.{p.stem}:main" for p in (ROOT / "src" / "motionvl" / "ros").glob("*_node.py")})
    return scripts


# launch arguments under which each launch file starts every node it can start
EVERY_NODE = {"train.launch.py": {"playback": "ros", "record": "true", "trainers": "2"},
              "deploy.launch.py": {"sim": "true", "record": "true"}}


def _launched(path: Path, workdir: Path) -> list:
    """The node processes the launch file starts with EVERY_NODE's arguments (tests/launch_model.py)."""
    import launch_model

    return launch_model.evaluate(path, EVERY_NODE[path.name], workdir=workdir).nodes


def test_launch_files_exist():
    assert {p.name for p in LAUNCH_FILES} >= {"train.launch.py"}


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_file_compiles_and_defines_description(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    compile(tree, str(path), "exec")
    assert any(isinstance(n, ast.FunctionDef) and n.name == "generate_launch_description" for n in tree.body)


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_executables_are_console_scripts(path, tmp_path):
    scripts = _console_scripts()
    nodes = _launched(path, tmp_path)
    assert nodes, f"{path.name} starts no node"
    from motionvl.ros.params_reference import node_names

    for node in nodes:
        assert node.executable in scripts, f"{path.name}: {node.executable} is not a console script"
        section = "policy_trainer" if node.name.startswith("policy_trainer_") else node.name
        assert section in node_names(), f"{path.name}: node {node.name} has no section in `motionvl params`"


def test_launch_files_start_the_documented_nodes(tmp_path):
    by_file = {p.name: {n.executable for n in _launched(p, tmp_path)} for p in LAUNCH_FILES}
    assert by_file["train.launch.py"] == {"simulator_node", "camera_renderer_node", "vlm_critic_node",
                                          "reward_synthesizer_node", "policy_trainer_node", "orchestrator_node",
                                          "recorder_node", "deployment_node"}
    assert by_file["deploy.launch.py"] == {"deployment_node", "simulator_node", "recorder_node"}


def test_nodes_yaml_is_a_params_file_whose_sections_reach_a_node_in_any_namespace():
    for shipped in ("nodes.yaml", "simulation_playback.yaml"):
        raw = yaml.safe_load((ROOT / "config" / shipped).read_text())
        for name, section in raw.items():
            assert set(section) == {"ros__parameters"}, name
            assert name.startswith("/**/"), f"config/{shipped}: section {name} reaches only a node in the root namespace"


def test_console_scripts_point_at_main_functions():
    """Each console script's module exists with a main(): no script points at nothing."""
    from motionvl.ros import console

    assert "ros.console:{node}" in (ROOT / "setup.py").read_text(), "node scripts enter through motionvl.ros.console"
    for script, target in _console_scripts().items():
        if script != "motionvl":
            assert callable(getattr(console, script)), script
        module, func = target.split(":")
        assert importlib.util.find_spec(module) is not None, f"{script}: no module {module}"
        source = Path(importlib.util.find_spec(module).origin).read_text()
        assert f"def {func}(" in source, f"{module} has no {func}()"


def test_ros_launch_tests_compile():
    for path in sorted((ROOT / "ros_tests").glob("*.py")):
        compile(path.read_text(), str(path), "exec")


def test_every_node_gets_the_same_robot_and_world():
    """One robot config and one terrain for the whole graph: the shipped params files have node sections only
    (a `/**` section would outrank the launch arguments, see config/nodes.yaml), and every node that loads the
    robot or builds a floor declares the parameters it reads (tests/test_launch_arguments.py checks that the
    launch files' robot_config reaches each)."""
    import re

    for shipped in ("nodes.yaml", "simulation_playback.yaml"):
        raw = yaml.safe_load((ROOT / "config" / shipped).read_text())
        assert "/**" not in raw, f"config/{shipped} has a /** section"
        for name, section in raw.items():
            world = {"robot_config", "terrain", "terrain_level", "terrain_seed"}
            assert not world & set(section["ros__parameters"]), name
    node_sources = {p.stem: p.read_text() for p in (ROOT / "src" / "motionvl" / "ros").glob("*_node.py")}
    for name, source in node_sources.items():
        declared = set(re.findall(r'^\s+"(\w+)": \(', source, re.M))
        if "load_robot_config(" in source:
            assert "robot_config" in declared, f"{name} loads a robot but has no robot_config parameter"
        if "TerrainConfig(" in source or "node_terrain(" in source:
            assert "**TERRAIN_PARAMETERS" in source and "TerrainConfig(" not in source, \
                f"{name} builds a floor without the terrain parameters (motionvl.ros.terrain)"


def test_trainer_processes_get_the_graphs_robot_from_the_params_file(tmp_path):
    """`motionvl train` starts trainers with the params file's policy_trainer section: a whole-graph section
    (/**) of a params file of the user's comes with it, so a trainer trains on the robot every other node uses."""
    from motionvl.ros.train_graph import node_parameters

    params = tmp_path / "nodes.yaml"
    params.write_text(yaml.safe_dump({"/**": {"ros__parameters": {"robot_config": "/robots/mine.yaml", "terrain": "rough"}},
                                      "policy_trainer": {"ros__parameters": {"runs_dir": "r", "terrain": "flat"}}}))
    assert node_parameters(params, "policy_trainer") == {"robot_config": "/robots/mine.yaml", "terrain": "flat",
                                                         "runs_dir": "r"}
    assert node_parameters(params, "orchestrator") == {"robot_config": "/robots/mine.yaml", "terrain": "rough"}
    assert "robot_config" not in node_parameters(ROOT / "config" / "nodes.yaml", "policy_trainer")


def test_motionvl_params_prints_each_named_node_described_and_refuses_an_unknown_one(capsys):
    """`motionvl params deployment`: that node's section, each parameter under its description, loadable YAML whose
    values keep their types (1e-05 stays a float for PyYAML too)."""
    pytest.importorskip("rclpy")
    from motionvl.cli import main
    from motionvl.ros.params_reference import node_parameters, yaml_value

    assert main(["params", "deployment"]) == 0
    out = capsys.readouterr().out
    assert list(yaml.safe_load(out)) == ["/**/deployment"]
    lines = out.splitlines()
    for param, (_default, description) in node_parameters("deployment").items():
        at = next(i for i, line in enumerate(lines) if line.strip().removeprefix("# ").startswith(f"{param}:"))
        assert lines[at - 1].startswith("    # ") and description.split()[-1] in lines[at - 1], param
    for value in (1e-05, 0.0005, 2.0, -3, True, "007", "", [1, 2], ["a"]):
        assert yaml.safe_load(yaml_value(value)) == value, value
    assert main(["params", "nodes"]) == 2 and "no node ['nodes']" in capsys.readouterr().err
