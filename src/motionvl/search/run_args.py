"""The arguments of one search run, declared once: `RunArgs`, a docstring per field. `motionvl train`'s options
(`add_run_arguments`), the orchestrator node's parameters (`run_parameters`) and train.launch.py's arguments
(`launch_arguments`) are derived from it; the models and endpoints come from motionvl.backend_names the same way.

The rule from a field to its three forms:
- where: the field's metadata "on" names the surfaces that take it (cli, node, launch);
- names: a node parameter and a launch argument carry the field's name; the option is --<name with dashes>
  unless the field names its flags (--out for run_dir, --settings for settings_file, --set for overrides); a
  true/false field is an option pair (--render/--no-render, --ros/--no-ros);
- defaults: the field's default everywhere (a launch argument's as text), except that a field marked "unset"
  is None on the command line when not given (an empty text or list, or a backend a resumed run takes from
  its record; a node cannot tell a value given from its default);
- help: the field's docstring, with the backends' names where its metadata "more" says so.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from motionvl.backend_names import CRITICS, SYNTHESIZERS, backends_help
from motionvl.dataclass_docs import field_docs
from motionvl.rl.config import add_dataclass_arguments
from motionvl.search.config import MODES

PLAYBACKS = ("in_process", "ros")
DEFAULT_RUNS = Path("runs/search")
CLI, NODE, LAUNCH = "cli", "node", "launch"
ALL = (CLI, NODE, LAUNCH)


def _on(*where, **metadata):
    return {"on": where, **metadata}


@dataclasses.dataclass
class RunArgs:
    """What `motionvl train` and the orchestrator node are asked to search for, where and how."""

    task: str = dataclasses.field(default="", metadata=_on(*ALL, unset=True))
    """The task sentence, e.g. "walk forward with straight knees" (empty with resume: the recorded one)."""
    command: tuple | None = dataclasses.field(default=None, metadata=_on(
        CLI, nargs=3, type=float, metavar=("VX", "VY", "YAW")))
    """The task's velocity command (m/s, m/s, rad/s) instead of the one the sentence gives (motionvl.task's table:
    forward 0.6, slow 0.3, fast 0.9, backward 0.3, sideways 0.2 m/s, turn 0.5 rad/s); needed for a sentence the
    rules do not understand (model synthesizers only)."""
    mode: str = dataclasses.field(default="synth+critic", metadata=_on(*ALL, choices=MODES))
    """Ablation mode: reference (RL-Base: the reference reward alone), synth (the synthesizer revises the reward
    from training statistics and task scores; RL-LLM) or synth+critic (also the critic's feedback; RL-LLM+VLM)."""
    preset: str = dataclasses.field(default="quick", metadata=_on(*ALL))
    """Budget preset of config/search.yaml: quick, cpu or gpu (budgets in PPO iterations)."""
    synthesizer: str = dataclasses.field(default="rules", metadata=_on(*ALL, choices=SYNTHESIZERS, unset=True,
                                                                       more="synth"))
    """The reward synthesizer (the reward_synthesizer node's, or an in-process one): {more}. Not given: rules,
    or on resume the recorded one (another only with allow_backend_change)."""
    critic: str = dataclasses.field(default="kinematic", metadata=_on(*ALL, choices=CRITICS, unset=True,
                                                                      more="critic"))
    """The motion critic: {more}. Not given: kinematic, or on resume the recorded one (another only with
    allow_backend_change)."""
    replay: str = dataclasses.field(default="", metadata=_on(CLI, unset=True, type=Path, metavar="RUN_DIR"))
    """The replay synthesizer: the recorded run directory whose answers to replay."""
    allow_backend_change: bool = dataclasses.field(default=False, metadata=_on(*ALL))
    """With resume: switch to the synthesizer, critic, models and endpoints given (recorded in the ledger);
    without it a resume keeps the recorded ones and refuses another model or endpoint."""
    run_dir: str = dataclasses.field(default="", metadata=_on(*ALL, unset=True, flags=("--out",), type=Path,
                                                              metavar="RUN_DIR"))
    """The search's run directory: ledger, candidates, exported policy, report (empty or not given: runs/search/<preset>)."""
    resume: bool = dataclasses.field(default=False, metadata=_on(*ALL))
    """Continue the search recorded in the run directory where it stopped (its backends, models and endpoints
    as recorded)."""
    record: bool = dataclasses.field(default=False, metadata=_on(CLI, LAUNCH))
    """Also record the run's topics as a rosbag in <run directory>/bags (ROS route)."""
    namespace: str = dataclasses.field(default="", metadata=_on(CLI, LAUNCH, metavar="NAME"))
    """ROS namespace of the run's nodes and topics; two searches on one ROS domain need different ones (empty:
    none)."""
    trainers: int = dataclasses.field(default=1, metadata=_on(CLI, LAUNCH))
    """policy_trainer nodes (trainers) run side by side."""
    ros: bool = dataclasses.field(default=True, metadata=_on(CLI))
    """Run the search on the ROS graph (--no-ros: trainer processes of its own, no nodes, no graph)."""
    playback: str = dataclasses.field(default="in_process", metadata=_on(*ALL, choices=PLAYBACKS))
    """Where candidates are played back and critiqued: ros (the deployment node on the simulator node, filmed
    by camera_renderer, judged by vlm_critic: the path a robot uses) or in_process (the deployment controller
    and the critic in the orchestrator's process; always with --no-ros)."""
    trainers_in_process: bool = dataclasses.field(default=False, metadata=_on(CLI))
    """ROS route: the policy_trainer nodes in this process instead of child processes."""
    train_config: str = dataclasses.field(default="", metadata=_on(*ALL, unset=True))
    """Training YAML the trainers use (empty: the package's config/training.yaml)."""
    robot_config: str = dataclasses.field(default="", metadata=_on(*ALL, unset=True))
    """Robot YAML of the run's trainers, evaluations and playbacks (empty: the package's config/robot.yaml);
    a resumed run keeps its own."""
    start_run: str = dataclasses.field(default="", metadata=_on(CLI, NODE, unset=True))
    """An existing training run of the reference reward to start from (empty: train one)."""
    settings_file: str = dataclasses.field(default="", metadata=_on(*ALL, unset=True, flags=("--settings",),
                                                                    metavar="YAML"))
    """YAML mapping of search settings (SearchConfig keys) laid over the preset, as a preset's own entry
    (empty: none)."""
    overrides: list = dataclasses.field(default_factory=list, metadata=_on(
        CLI, NODE, unset=True, flags=("--set",), action="append", metavar="KEY=VALUE"))
    """Search settings as KEY=VALUE laid over the preset and settings file, e.g. gates.min_success_rate=0.9
    (--set is repeatable)."""
    render: bool = dataclasses.field(default=True, metadata=_on(CLI, NODE))
    """Render the playbacks: frames for a VLM, videos and contact sheets for the report (false: the kinematic
    critic only)."""
    report: str = dataclasses.field(default="", metadata=_on(CLI, unset=True, type=Path, metavar="RUN_DIR"))
    """Only rewrite the report of this run directory."""
    progress: bool = dataclasses.field(default=True, metadata=_on(CLI))
    """Progress bars."""


def names(where: str) -> tuple[str, ...]:
    """The fields a surface (cli, node, launch) takes, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(RunArgs) if where in f.metadata["on"])


def defaults() -> dict:
    return dataclasses.asdict(RunArgs())


def descriptions() -> dict:
    """{field: help text}: the docstring, with its backends' names."""
    docs = field_docs(RunArgs)
    return {f.name: docs[f.name].format(more=backends_help(f.metadata["more"])) if "more" in f.metadata
            else docs[f.name] for f in dataclasses.fields(RunArgs)}


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """`motionvl train`'s options of the run arguments (dest: the field's name)."""
    add_dataclass_arguments(parser, RunArgs, names=names(CLI), helps=descriptions())


def run_parameters() -> dict:
    """The orchestrator node's parameters `{name: (default, description)}`. An empty list is [""], a string
    array: ROS 2 cannot type an empty one (empty strings are dropped where it is read)."""
    values, helps = defaults(), descriptions()
    return {name: (values[name] if values[name] != [] else [""], helps[name]) for name in names(NODE)}


def launch_arguments() -> dict:
    """train.launch.py's arguments `{name: (default as text, description)}`."""
    values, helps = defaults(), descriptions()

    def text(value) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    return {name: (text(values[name]), helps[name]) for name in names(LAUNCH)}


def run_dir(given, preset: str) -> Path:
    """The run directory: the one given, else runs/search/<preset>."""
    return Path(given) if given else DEFAULT_RUNS / preset


def settings_keywords(values) -> dict:
    """load_settings' keywords from run arguments (a dict or a namespace holding the fields; the recorded models
    and endpoints too): empty texts and lists are unset (None)."""
    get = values.get if isinstance(values, dict) else lambda name, default=None: getattr(values, name, default)
    keywords = {name: get(name) or None for name in (
        "task", "synthesizer", "critic", "settings_file", "train_config", "start_run", "robot_config", "synth_model",
        "synth_base_url", "critic_model", "critic_base_url")}
    replay = get("replay")
    return {**keywords, "mode": get("mode"), "preset": get("preset"), "render": bool(get("render")),
            "resume": bool(get("resume")), "allow_backend_change": bool(get("allow_backend_change")),
            "overrides": [o for o in get("overrides") or () if o], "replay": str(replay) if replay else None}


def check_choices(values: dict) -> None:
    """ValueError naming a node parameter outside its field's choices."""
    for f in dataclasses.fields(RunArgs):
        choices = f.metadata.get("choices")
        if NODE in f.metadata["on"] and choices and values.get(f.name) not in choices:
            raise ValueError(f"parameter {f.name} must be one of {', '.join(choices)}, got {values.get(f.name)!r}")
