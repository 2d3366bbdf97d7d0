"""The search's run arguments are declared once (motionvl.search.run_args.RunArgs): `motionvl train`'s options, the
orchestrator node's parameters and train.launch.py's arguments are derived from it with one default and one help
text each. A flag and its parameter that disagree, a name users rely on that stops working, or a table copied
back into one of the surfaces fails here."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path

import pytest
import yaml

from motionvl.search import run_args
from motionvl.search.run_args import CLI, LAUNCH, NODE, RunArgs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import launch_model  # noqa: E402

TRAIN = ROOT / "launch" / "train.launch.py"
FLAGS = {"--task": "task", "--command": "command", "--mode": "mode", "--preset": "preset",
         "--synthesizer": "synthesizer", "--critic": "critic", "--replay": "replay",
         "--allow-backend-change": "allow_backend_change", "--out": "run_dir", "--resume": "resume",
         "--record": "record", "--namespace": "namespace", "--trainers": "trainers", "--no-ros": "ros",
         "--playback": "playback", "--trainers-in-process": "trainers_in_process", "--train-config": "train_config",
         "--robot-config": "robot_config", "--start-run": "start_run", "--settings": "settings_file",
         "--set": "overrides", "--no-render": "render", "--report": "report", "--no-progress": "progress"}
"""Every option `motionvl train` has had (README, benchmarks and users call them) -> its field."""
PARAMETERS = {"task", "mode", "preset", "settings_file", "overrides", "run_dir", "resume", "allow_backend_change",
              "synthesizer", "critic", "train_config", "robot_config", "start_run", "render", "playback"}
"""The orchestrator's parameters of the run (launch files, params files and `-p` name them)."""
ARGUMENTS = {"task", "mode", "preset", "run_dir", "resume", "allow_backend_change", "record", "trainers",
             "synthesizer", "critic", "settings_file", "train_config", "robot_config", "playback", "namespace"}
"""train.launch.py's arguments of the run."""


def _actions() -> dict:
    from motionvl.search.cli import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser, {action.dest: action for action in parser._actions}


def _launch() -> tuple:
    module = launch_model.load(TRAIN)
    declared = {e.name: e for e in module.generate_launch_description().entities
                if isinstance(e, launch_model.DeclareLaunchArgument)}
    return module, declared


def test_every_flag_parameter_and_launch_argument_name_still_works():
    from motionvl.ros.orchestrator_node import PARAMETERS as node_parameters

    parser, actions = _actions()
    for flag, name in FLAGS.items():
        assert flag in actions[name].option_strings, (flag, name)
    assert set(run_args.names(CLI)) == set(FLAGS.values())
    assert PARAMETERS == set(run_args.names(NODE)) and PARAMETERS <= set(node_parameters)
    _, declared = _launch()
    assert ARGUMENTS == set(run_args.names(LAUNCH)) and ARGUMENTS <= set(declared)
    args = parser.parse_args(["--task", "walk forward", "--out", "runs/x", "--no-render", "--no-ros", "--no-progress",
                              "--set", "a=1", "--set", "b=2", "--settings", "s.yaml", "--resume"])
    assert (args.run_dir, args.render, args.ros, args.progress) == (Path("runs/x"), False, False, False)
    assert (args.overrides, args.settings_file, args.resume) == (["a=1", "b=2"], "s.yaml", True)


def test_a_flag_its_node_parameter_and_launch_argument_agree_in_default_and_help():
    """One default and one help text per setting. The rule's one exception: a field marked unset is None on the
    command line when not given (the run directory, texts and backends a resumed run takes from its record)."""
    from motionvl.ros.orchestrator_node import PARAMETERS as node_parameters

    _, actions = _actions()
    _, declared = _launch()
    fields = {f.name: f for f in dataclasses.fields(RunArgs)}
    helps, values = run_args.descriptions(), dataclasses.asdict(RunArgs())
    for name, field in fields.items():
        where = field.metadata["on"]
        assert helps[name] and "{" not in helps[name], f"{name}: no docstring (or an unfilled placeholder)"
        default = values[name]
        if CLI in where:
            action = actions[name]
            assert action.help.startswith(helps[name]), name
            if field.metadata.get("unset"):
                assert action.default is None, name
            else:
                assert action.default == default, name
        if NODE in where:
            assert node_parameters[name] == (default if default != [] else [""], helps[name]), name
        if LAUNCH in where:
            text = str(default).lower() if isinstance(default, bool) else str(default)
            assert (declared[name].default_value, declared[name].description) == (text, helps[name]), name


def test_the_surfaces_hold_no_copy_of_a_run_argument():
    """No option, table entry or description of a run argument is written again in a command, node or launch file."""
    helps = run_args.descriptions()
    names = "|".join(run_args.names(CLI) + run_args.names(NODE) + run_args.names(LAUNCH))
    entry = re.compile(r"""^\s*["'](%s)["']\s*:\s*\(""" % names, re.MULTILINE)
    flag = re.compile(r"""add_argument\(\s*["'](%s)["']""" % "|".join(FLAGS))
    found = []
    for path in (ROOT / "src" / "motionvl" / "search" / "cli.py", ROOT / "src" / "motionvl" / "ros" /
                 "orchestrator_node.py", TRAIN):
        text = path.read_text()
        found += [f"{path.name}: table entry {m.group(0).strip()}" for m in entry.finditer(text)]
        found += [f"{path.name}: option {m.group(1)}" for m in flag.finditer(text)]
    surfaces = [ROOT / "src" / "motionvl" / "search" / "cli.py", *(ROOT / "src" / "motionvl" / "ros").glob("*.py"),
                *(ROOT / "launch").glob("*.py")]
    for path in surfaces:
        flat = " ".join(path.read_text().split())
        found += [f"{path.name}: the description of {n}" for n, text in helps.items() if text[:48] in flat]
    assert not found, "\n".join(found)


def test_the_launch_resolves_the_run_directory_as_motionvl_train_does(tmp_path):
    """No run_dir: runs/search/<preset> for the orchestrator, the trainers' candidates and the recorder's bags."""
    launch = launch_model.evaluate(TRAIN, {"task": "walk forward", "preset": "cpu", "record": "true"}, workdir=tmp_path)
    assert launch.generated("orchestrator")["run_dir"] == "runs/search/cpu"
    assert launch.generated("policy_trainer_0")["runs_dir"] == "runs/search/cpu/candidates"
    assert launch.generated("recorder")["output_dir"] == "runs/search/cpu/bags"
    from motionvl.search.cli import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--preset", "cpu"])
    assert run_args.run_dir(args.run_dir, args.preset) == Path("runs/search/cpu")


def test_motionvl_train_hands_the_orchestrator_only_its_declared_parameters(monkeypatch, tmp_path):
    """The command line's values reach the node under the node's names (--out: run_dir, --no-render: render)."""
    pytest.importorskip("rclpy")
    from motionvl.ros import train_graph
    from motionvl.ros.orchestrator_node import PARAMETERS as node_parameters
    from motionvl.search import cli

    given = {}

    def run_train_graph(orchestrator, **_kwargs):
        given.update(orchestrator)
        return 0

    monkeypatch.setattr(train_graph, "run_train_graph", run_train_graph)
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--task", "walk forward", "--mode", "reference", "--out", str(tmp_path / "run"),
                              "--no-render", "--set", "gates.min_success_rate=0.5", "--command", "0.4", "0", "0"])
    assert cli.run(args) == 130  # the stand-in graph ran no search: "stopped"
    assert set(given) <= set(node_parameters), set(given) - set(node_parameters)
    assert (given["run_dir"], given["render"], given["mode"]) == (str(tmp_path / "run"), False, "reference")
    assert given["overrides"] == ["gates.min_success_rate=0.5", "command=[0.4, 0.0, 0.0]"]
    node_keywords = run_args.settings_keywords(given)
    cli_keywords = run_args.settings_keywords(args)
    for key in ("task", "mode", "preset", "render", "resume", "allow_backend_change", "settings_file"):
        assert node_keywords[key] == cli_keywords[key], key


def test_the_params_file_only_overrides_declared_parameters():
    """config/nodes.yaml gives each node only parameters it declares (or ROS's use_sim_time), each at a value other
    than its declared default: it overrides, and `motionvl params` is the reference of the rest."""
    pytest.importorskip("rclpy")
    from motionvl.ros.graph import node_section
    from motionvl.ros.params_reference import node_names, node_parameters

    params = yaml.safe_load((ROOT / "config" / "nodes.yaml").read_text())
    drift = []
    for key in params:
        name = key.rsplit("/", 1)[-1]
        assert name in node_names(), f"config/nodes.yaml: no node {name}"
        declared = {**node_parameters(name), "use_sim_time": (False, "ROS's own")}
        for param, value in node_section(params, name).items():
            if param not in declared or declared[param][0] == value:
                drift.append(f"{name}.{param}: {value!r} (declared: {declared.get(param, ('undeclared',))[0]!r})")
    assert not drift, "\n".join(drift)


@pytest.mark.parametrize("node,settings", [("policy_trainer", "motionvl.rl.jobs.QueueSettings"),
                                           ("camera_renderer", "motionvl.render.camera.RenderSettings"),
                                           ("deployment", "motionvl.deploy.config.DeployConfig"),
                                           ("vlm_critic", "motionvl.critic.rollouts.CollectLimits"),
                                           ("vlm_critic", "motionvl.critic.service.ServiceSettings"),
                                           ("reward_synthesizer", "motionvl.synth.SynthesizerOptions")])
def test_node_parameters_of_a_dataclass_are_its_fields(node, settings):
    """A node's parameters that feed a dataclass are its fields with their defaults and docstrings (declared once);
    the deployment node splits one field in two and takes another from the policy (SHAPED_FIELDS)."""
    pytest.importorskip("rclpy")
    import importlib

    from motionvl.dataclass_docs import field_docs

    module, _, name = settings.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    node_module = importlib.import_module(f"motionvl.ros.{node}_node")
    docs, default = field_docs(cls), cls()
    skipped = getattr(node_module, "SHAPED_FIELDS", ())
    for f in dataclasses.fields(cls):
        if f.name not in skipped:
            assert node_module.PARAMETERS[f.name] == (getattr(default, f.name), docs[f.name]), f.name


def test_a_bad_queue_setting_is_refused_by_its_own_check():
    from motionvl.rl.jobs import QueueSettings

    with pytest.raises(ValueError, match="eval_episodes"):
        QueueSettings(eval_episodes=0).validate()
