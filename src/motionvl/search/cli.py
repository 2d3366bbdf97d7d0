"""`motionvl train`: the language loop, from a task sentence to an exported ONNX policy and a report.

    motionvl train --task "walk forward with straight knees" --preset quick --out out/demo
    motionvl train --task "turn left in place" --out runs/turn   # commanded, trained and judged as a turn
    motionvl train --task "..." --mode synth+critic --synthesizer openai --synth-base-url URL --synth-model NAME \\
                   --critic openai --critic-base-url URL --critic-model NAME --preset cpu --out runs/s1
    motionvl train --out runs/s1 --resume          # continue after a crash or kill -9 (same backends and models)
    motionvl train --report runs/s1                 # rewrite the report of a run

Modes (the paper's ablation): reference (RL-Base: the reference reward alone for the whole budget),
synth (the synthesizer revises the reward from training statistics and task scores; RL-LLM), synth+critic
(also the critic's feedback, alignment and pairwise judgement; RL-LLM+VLM). Results are labelled by the
backends that ran: with the offline `rules` synthesizer and `kinematic` critic, RL-Rules+Kinematic.
Presets (config/search.yaml) are budgeted in PPO iterations.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

if "MUJOCO_GL" not in os.environ and "mujoco" not in sys.modules and not os.environ.get("DISPLAY"):
    os.environ["MUJOCO_GL"] = "egl"

from motionvl.backend_names import KINDS, RECORDED, SESSION, add_model_arguments, option_flag  # noqa: E402
from motionvl.robot import ConfigError  # noqa: E402
from motionvl.search.run_args import add_run_arguments, run_dir, settings_keywords  # noqa: E402

def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)  # motionvl.search.run_args: the run's settings, the orchestrator node's too
    models = parser.add_argument_group("models and endpoints (motionvl.backend_names)")
    for kind in KINDS:
        add_model_arguments(models, RECORDED, prefix=f"{kind}_")
    add_model_arguments(models, SESSION, unset="default: the settings' limits.model_connect_timeout_s and "
                                               "model_read_timeout_s, 10 and 300")


def _options(args: argparse.Namespace):
    """This session's backend options: the device and timeouts (models and endpoints come from the settings)."""
    from motionvl.search.backends import BackendOptions

    for name in ("connect_timeout_s", "read_timeout_s"):
        value = getattr(args, name, None)
        if value is not None and not value > 0:
            raise ConfigError(f"{option_flag(name)} must be > 0 seconds, got {value:g}")
    return BackendOptions(**{name: getattr(args, name) for name in SESSION})


def settings_from_args(args: argparse.Namespace):
    """SearchSettings from the arguments (a resumed run: the recorded ones, backends, models and endpoints too,
    which the arguments may change only with --allow-backend-change)."""
    from motionvl.search.backends import load_settings

    return load_settings(args.run_dir, **{**settings_keywords(args), "overrides": command_overrides(args)})


def command_overrides(args: argparse.Namespace) -> list[str]:
    """The --set overrides with --command as the settings' `command`."""
    command = getattr(args, "command", None)
    return list(args.overrides or []) + ([f"command=[{', '.join(repr(float(c)) for c in command)}]"] if command else [])


def run(args: argparse.Namespace) -> int:
    from motionvl.search.ledger import LedgerWriteError
    from motionvl.search.loop import SearchError

    if args.report is not None:
        from motionvl.search.report import write_report

        paths = write_report(args.report)
        print(f"report: {paths['html']}")
        return 0
    args.run_dir = run_dir(args.run_dir, args.preset)
    try:
        return _run(args)
    except (ConfigError, SearchError) as exc:
        print(f"motionvl train: {exc}", file=sys.stderr)
        return 2
    except LedgerWriteError as exc:
        print(f"motionvl train: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\nmotionvl train: interrupted; `motionvl train --out {args.run_dir} --resume` continues", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    if args.trainers < 1:
        raise ConfigError("--trainers must be >= 1")
    from motionvl.ros.graph import namespace

    try:
        args.namespace = namespace(args.namespace)
    except ValueError as exc:
        raise ConfigError(f"--namespace: {exc}") from None
    settings = settings_from_args(args)  # bad input fails here, before any node starts
    from motionvl.search.config import SearchConfig
    from motionvl.search.loop import run_task

    task = run_task(args.run_dir, settings) if args.resume else settings.task_object()
    seconds = SearchConfig.from_dict(settings.config).evaluation.seconds
    print(f"motionvl train: task {task.describe(seconds)}", file=sys.stderr)
    from motionvl.search.backends import checked_synthesizer_options, make_critic, make_synthesizer

    if settings.mode != "reference":
        checked_synthesizer_options(settings, _options(args))
    make_critic(settings, _options(args))
    playback = args.playback
    if not args.ros:
        if playback == "ros":
            raise ConfigError("--playback ros needs the ROS graph; --no-ros plays back in process")
        return _run_without_ros(args, settings)
    try:
        import importlib

        importlib.import_module("motionvl.ros.reward_synthesizer_node")
        synth_node = settings.mode != "reference"
    except ImportError:
        synth_node = False
    if not synth_node:
        make_synthesizer(settings, _options(args))
    from motionvl.ros.train_graph import run_train_graph

    from motionvl.search.backends import model_settings

    models = {kind: dataclasses.asdict(model_settings(settings, _options(args), kind)) for kind in KINDS}
    orchestrator = {"run_dir": str(args.run_dir), "resume": bool(args.resume), "task": settings.task, "mode": settings.mode,
                    "preset": settings.preset, "synthesizer": settings.synthesizer, "critic": settings.critic,
                    "settings_file": args.settings_file or "",
                    "overrides": command_overrides(args) or [""],
                    **{f"{kind}_{name}": models[kind][name] for kind in KINDS for name in RECORDED},
                    "device": args.device, "train_config": settings.train_config or "",
                    "start_run": settings.start_run or "", "render": args.render, "playback": playback,
                    "allow_backend_change": bool(args.allow_backend_change),
                    "robot_config": settings.robot_config,  # None: the node default (the package robot)
                    "terrain": task.terrain, "terrain_level": task.terrain_level}  # the playback graph's floor
    synthesizer = None
    if synth_node:
        from motionvl.search.config import SearchConfig

        limits = SearchConfig.from_dict(settings.config).limits
        replay = settings.replay
        synthesizer = {"backend": settings.synthesizer, **models["synth"],
                       "ledger": str(Path(replay) / "ledger.jsonl") if replay else "",
                       "max_calls": limits.max_synth_calls, "max_tokens": limits.max_synth_tokens,
                       "max_bytes": limits.max_synth_bytes, "robot_config": settings.robot_config}
    code = run_train_graph(orchestrator, synthesizer=synthesizer, trainers=args.trainers,
                           trainers_in_process=args.trainers_in_process, record=args.record,
                           train_config=settings.train_config, robot_config=settings.robot_config,
                           critic_parameters=models["critic"], namespace=args.namespace)
    from motionvl.search.ledger import Ledger

    finished = Ledger(args.run_dir).get("run", "finished") if (args.run_dir / "ledger.jsonl").exists() else None
    if finished is not None:
        print(json.dumps(finished, default=str))
        return 0
    if code == 0:  # stopped by a signal before the search ended
        print(f"motionvl train: stopped; `motionvl train --out {args.run_dir} --resume` continues", file=sys.stderr)
        return 130
    return code


def _run_without_ros(args: argparse.Namespace, settings) -> int:
    from motionvl.rl.threads import cpu_shares
    from motionvl.search.dispatch import LocalProcessSlot
    from motionvl.search.loop import Search
    from motionvl.search.playback import InProcessPlayback
    from motionvl.search.backends import make_critic, make_synthesizer
    from motionvl.search.config import SearchConfig

    synthesizer = make_synthesizer(settings, _options(args))
    critic = make_critic(settings, _options(args))
    cfg = SearchConfig.from_dict(settings.config)
    shares = cpu_shares(args.trainers) if args.trainers > 1 else [None]  # local trainers share the cores on purpose
    slots = [LocalProcessSlot(f"trainer-{i}", runs_dir=args.run_dir / "candidates", train_config=settings.train_config,
                              robot_config=settings.robot_config, cpus=shares[i]) for i in range(args.trainers)]
    search = Search(args.run_dir, settings, synthesizer=synthesizer, critic=critic,
                    playback=InProcessPlayback(cfg.playback, robot=settings.robot()),
                    slots=lambda: slots, resume=args.resume, progress=args.progress,
                    log=lambda msg: print(msg, flush=True), allow_backend_change=args.allow_backend_change)
    try:
        summary = search.run()
    finally:
        for slot in slots:
            slot.close()
    print(json.dumps(summary, default=str))
    return 0
