"""`motionvl train`: the language loop, from a task sentence to an exported ONNX policy and a report.

    motionvl train --task "walk forward with straight knees" --preset quick --out out/demo
    motionvl train --task "..." --mode synth+critic --synthesizer openai --synth-base-url URL --synth-model NAME \\
                   --critic openai --critic-base-url URL --critic-model NAME --preset cpu --out runs/s1
    motionvl train --out runs/s1 --resume          # continue after a crash or kill -9
    motionvl train --report runs/s1                 # rewrite the report of a run

Modes (the paper's ablation): reference (RL-Base: the reference reward alone for the whole budget),
synth (the synthesizer revises the reward from training statistics and task scores; RL-LLM), synth+critic
(also the critic's feedback, alignment and pairwise judgement; RL-LLM+VLM). Results are labelled by the
backends that ran: with the offline `rules` synthesizer and `kinematic` critic, RL-Rules+Kinematic.
Presets (config/search.yaml) are budgeted in PPO iterations.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

if "MUJOCO_GL" not in os.environ and "mujoco" not in sys.modules and not os.environ.get("DISPLAY"):
    os.environ["MUJOCO_GL"] = "egl"

from motionvl.robot import ConfigError  # noqa: E402
from motionvl.search.config import MODES  # noqa: E402

SYNTHESIZERS = ("rules", "openai", "transformers", "replay")
CRITICS = ("kinematic", "transformers", "openai")
DEFAULT_OUT = Path("runs/search")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", default=None, help='the task sentence, e.g. "walk forward with straight knees"')
    parser.add_argument("--mode", choices=MODES, default="synth+critic", help="ablation mode (default synth+critic)")
    parser.add_argument("--preset", default="quick", help="budget preset of config/search.yaml: quick, cpu, gpu (default quick)")
    parser.add_argument("--synthesizer", choices=SYNTHESIZERS, default="rules",
                        help="reward synthesizer backend (default rules: offline, model-free, not an LLM)")
    parser.add_argument("--synth-model", default=None, help="openai: model name; transformers: local model directory")
    parser.add_argument("--synth-base-url", default=None, help="openai: endpoint, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--replay", type=Path, default=None, help="replay: the recorded run directory whose answers to replay")
    parser.add_argument("--critic", choices=CRITICS, default="kinematic",
                        help="motion critic (default kinematic: offline gait analysis, not a VLM)")
    parser.add_argument("--critic-model", default=None, help="transformers: local model directory; openai: model name")
    parser.add_argument("--critic-base-url", default=None, help="openai: endpoint of the critic")
    parser.add_argument("--device", default="auto", help="transformers backends: auto, cpu, cuda:0, ...")
    parser.add_argument("--out", type=Path, default=None, help=f"run directory (default {DEFAULT_OUT}/<preset>)")
    parser.add_argument("--resume", action="store_true", help="continue the search in --out where it stopped")
    parser.add_argument("--record", action="store_true", help="also record the run's topics as a rosbag (ROS route)")
    parser.add_argument("--trainers", type=int, default=1, help="trainer processes run side by side (default 1)")
    parser.add_argument("--train-config", default=None, help="training YAML (default: the package's config/training.yaml)")
    parser.add_argument("--start-run", default=None,
                        help="an existing training run of the reference reward to start from instead of training one")
    parser.add_argument("--settings", type=Path, default=None, metavar="YAML",
                        help="a YAML mapping of search settings laid over the preset (as a preset's own entry)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a search setting, e.g. --set gates.min_success_rate=0.9 (repeatable)")
    parser.add_argument("--no-render", action="store_true", help="play back without rendering (kinematic critic only)")
    parser.add_argument("--report", type=Path, default=None, metavar="RUN_DIR", help="only rewrite the report of RUN_DIR")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def settings_from_args(args: argparse.Namespace):
    """SearchSettings from the arguments (a resumed run: the recorded ones, which the arguments may not change)."""
    from motionvl.rl.config import apply_overrides
    from motionvl.search.config import load_search_config
    from motionvl.search.ledger import Ledger
    from motionvl.search.loop import SearchSettings

    if args.resume:
        recorded = Ledger(args.out).get("run", "settings")
        if recorded is None:
            raise ConfigError(f"cannot resume: {args.out} holds no search")
        fields = {k: recorded[k] for k in SearchSettings.__dataclass_fields__ if k in recorded}
        if args.task is not None and args.task != recorded["task"]:
            raise ConfigError(f"--resume continues the recorded task {recorded['task']!r}; leave out --task or use a new --out")
        return SearchSettings(**fields)
    if args.task is None:
        raise ConfigError("--task is required (the sentence the policy should do), e.g. --task \"walk forward with straight knees\"")
    base = {}
    if args.settings is not None:
        import yaml

        if not args.settings.exists():
            raise ConfigError(f"--settings {args.settings}: no such file")
        base = yaml.safe_load(args.settings.read_text()) or {}
        if not isinstance(base, dict):
            raise ConfigError(f"--settings {args.settings}: expected a mapping of search settings")
    overrides = apply_overrides(base, args.overrides, "--set")
    if args.no_render:
        overrides.setdefault("playback", {})["render"] = False
    cfg = load_search_config(args.preset, overrides)
    return SearchSettings(task=args.task, mode=args.mode, synthesizer=args.synthesizer, critic=args.critic,
                          preset=args.preset, config=cfg.to_dict(), train_config=args.train_config,
                          start_run=args.start_run)


def make_synthesizer(args: argparse.Namespace, settings):
    from motionvl.search import deps

    if settings.mode == "reference":
        return None
    name = settings.synthesizer
    options: dict = {}
    if name == "openai":
        if not (args.synth_base_url and args.synth_model):
            raise ConfigError("--synthesizer openai needs --synth-base-url URL and --synth-model NAME")
        options = {"base_url": args.synth_base_url, "model": args.synth_model}
    elif name == "transformers":
        if not args.synth_model or not Path(args.synth_model).is_dir():
            raise ConfigError(f"--synthesizer transformers needs --synth-model DIR (a local model directory); "
                              f"got {args.synth_model!r}")
        options = {"model_dir": args.synth_model, "device": args.device}
    elif name == "replay":
        if not args.replay or not (Path(args.replay) / "ledger.jsonl").exists():
            raise ConfigError(f"--synthesizer replay needs --replay RUN_DIR of a recorded search; got {args.replay}")
        options = {"ledger": str(Path(args.replay) / "ledger.jsonl")}
    try:
        return deps.make_synthesizer(name, **options)
    except (ValueError, KeyError, ImportError) as exc:
        raise ConfigError(f"synthesizer {name!r}: {exc}") from exc


def make_critic(args: argparse.Namespace, settings):
    if settings.mode != "synth+critic":
        return None
    from motionvl.critic.base import create_critic

    name = settings.critic
    if name == "kinematic":
        return create_critic("kinematic")
    if name == "transformers":
        if not args.critic_model or not Path(args.critic_model).is_dir():
            raise ConfigError(f"--critic transformers needs --critic-model DIR (a local model directory); got {args.critic_model!r}")
        return create_critic("transformers", model_dir=args.critic_model, device=args.device)
    if not (args.critic_base_url and args.critic_model):
        raise ConfigError("--critic openai needs --critic-base-url URL and --critic-model NAME")
    return create_critic("openai", base_url=args.critic_base_url, model=args.critic_model)


def run(args: argparse.Namespace) -> int:
    from motionvl.search.ledger import LedgerWriteError
    from motionvl.search.loop import SearchError

    if args.report is not None:
        from motionvl.search.report import write_report

        paths = write_report(args.report)
        print(f"report: {paths['html']}")
        return 0
    args.out = args.out or DEFAULT_OUT / args.preset
    try:
        return _run(args)
    except (ConfigError, SearchError) as exc:
        print(f"motionvl train: {exc}", file=sys.stderr)
        return 2
    except LedgerWriteError as exc:
        print(f"motionvl train: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\nmotionvl train: interrupted; `motionvl train --out {args.out} --resume` continues", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    from motionvl.search.dispatch import LocalProcessSlot
    from motionvl.search.loop import Search
    from motionvl.search.playback import InProcessPlayback
    from motionvl.search.config import SearchConfig

    if args.trainers < 1:
        raise ConfigError("--trainers must be >= 1")
    settings = settings_from_args(args)
    settings.validate()
    synthesizer = make_synthesizer(args, settings)
    critic = make_critic(args, settings)
    cfg = SearchConfig.from_dict(settings.config)
    slots = [LocalProcessSlot(f"trainer-{i}", runs_dir=args.out / "candidates", train_config=settings.train_config)
             for i in range(args.trainers)]
    search = Search(args.out, settings, synthesizer=synthesizer, critic=critic, playback=InProcessPlayback(cfg.playback),
                    slots=lambda: slots, resume=args.resume, progress=not args.no_progress,
                    log=lambda msg: print(msg, flush=True))
    try:
        summary = search.run()
    finally:
        for slot in slots:
            slot.close()
    print(json.dumps(summary, default=str))
    return 0
