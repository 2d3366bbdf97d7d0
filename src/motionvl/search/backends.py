"""A search run's settings and backends from plain values: shared by `motionvl train` and the orchestrator node."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from motionvl.robot import ConfigError


@dataclasses.dataclass
class BackendOptions:
    """Where the model-backed backends are; None where a backend needs nothing."""

    synth_model: str | None = None
    """openai: the model name; transformers: a local model directory."""
    synth_base_url: str | None = None
    """openai: the endpoint, e.g. http://127.0.0.1:8000/v1."""
    replay: str | None = None
    """replay: the run directory whose recorded synthesizer answers to replay."""
    critic_model: str | None = None
    """transformers: a local model directory; openai: the model name."""
    critic_base_url: str | None = None
    """openai: the critic's endpoint."""
    device: str = "auto"
    """transformers backends: auto, cpu, cuda:0, ..."""


def load_settings(run_dir: str | Path, *, resume: bool = False, task: str | None = None, mode: str = "synth+critic",
                  preset: str = "quick", synthesizer: str = "rules", critic: str = "kinematic",
                  settings_file: str | Path | None = None, overrides=(), render: bool = True,
                  train_config: str | None = None, start_run: str | None = None, robot_config: str | None = None):
    """SearchSettings of a new run from the preset, a settings YAML and KEY=VALUE overrides, or of a resumed run:
    the recorded ones (a task given then must be the recorded one)."""
    from motionvl.rl.config import apply_overrides
    from motionvl.search.config import load_search_config
    from motionvl.search.ledger import Ledger
    from motionvl.search.loop import SearchSettings

    if resume:
        recorded = Ledger(run_dir).get("run", "settings") if (Path(run_dir) / "ledger.jsonl").exists() else None
        if recorded is None:
            raise ConfigError(f"cannot resume: {run_dir} holds no search")
        if task and task != recorded["task"]:
            raise ConfigError(f"resume continues the recorded task {recorded['task']!r}; give no other task or start a new run")
        return SearchSettings(**{k: recorded[k] for k in SearchSettings.__dataclass_fields__ if k in recorded}).validate()
    if not task:
        raise ConfigError("a task sentence is required (what the policy should do), e.g. \"walk forward with straight knees\"")
    base = {}
    if settings_file:
        import yaml

        path = Path(settings_file)
        if not path.exists():
            raise ConfigError(f"search settings {path}: no such file")
        base = yaml.safe_load(path.read_text()) or {}
        if not isinstance(base, dict):
            raise ConfigError(f"search settings {path}: expected a mapping of search settings")
    merged = apply_overrides(base, list(overrides or ()), "search settings")
    if not render:
        merged.setdefault("playback", {})["render"] = False
    cfg = load_search_config(preset, merged)
    return SearchSettings(task=task, mode=mode, synthesizer=synthesizer, critic=critic, preset=preset,
                          config=cfg.to_dict(), train_config=train_config or None, start_run=start_run or None,
                          robot_config=robot_config or None).validate()


def synthesizer_options(settings, options: BackendOptions) -> dict:
    """make_synthesizer's options for the synthesizer `settings` names; ConfigError names what is missing (checked
    before any node or model starts)."""
    name = settings.synthesizer
    kwargs: dict = {}
    if name == "openai":
        if not (options.synth_base_url and options.synth_model):
            raise ConfigError("the openai synthesizer needs a base URL and a model name (--synth-base-url, --synth-model)")
        kwargs = {"base_url": options.synth_base_url, "model": options.synth_model}
    elif name == "transformers":
        if not options.synth_model or not Path(options.synth_model).is_dir():
            raise ConfigError(f"the transformers synthesizer needs a local model directory (--synth-model DIR); "
                              f"got {options.synth_model!r}")
        kwargs = {"model_dir": options.synth_model, "device": options.device}
    elif name == "replay":
        ledger = Path(options.replay or "") / "ledger.jsonl"
        if not options.replay or not ledger.exists():
            raise ConfigError(f"the replay synthesizer needs the run directory of a recorded search (--replay RUN_DIR); "
                              f"got {options.replay!r}")
        kwargs = {"ledger": str(ledger)}
    elif name != "rules":
        raise ConfigError(f"unknown synthesizer {name!r}; synthesizers: rules, openai, transformers, replay")
    return kwargs


def make_synthesizer(settings, options: BackendOptions):
    """The in-process synthesizer of `settings` (None in mode reference); ConfigError names what is missing."""
    if settings.mode == "reference":
        return None
    name, kwargs = settings.synthesizer, synthesizer_options(settings, options)
    from motionvl.search.config import SearchConfig
    from motionvl.synth import make_synthesizer as make

    limits = SearchConfig.from_dict(settings.config).limits
    try:
        return make(name, max_calls=limits.max_synth_calls, max_tokens=limits.max_synth_tokens, robot=settings.robot(),
                    **kwargs)
    except (ValueError, KeyError, ImportError) as exc:
        raise ConfigError(f"synthesizer {name!r}: {exc}") from exc


def make_critic(settings, options: BackendOptions):
    """The in-process critic of `settings` (None unless mode synth+critic); ConfigError names what is missing."""
    if settings.mode != "synth+critic":
        return None
    from motionvl.critic.base import create_critic

    name = settings.critic
    if name == "kinematic":
        return create_critic("kinematic")
    if name == "transformers":
        if not options.critic_model or not Path(options.critic_model).is_dir():
            raise ConfigError(f"the transformers critic needs a local model directory (--critic-model DIR); "
                              f"got {options.critic_model!r}")
        return create_critic("transformers", model_dir=options.critic_model, device=options.device)
    if name == "openai":
        if not (options.critic_base_url and options.critic_model):
            raise ConfigError("the openai critic needs a base URL and a model name (--critic-base-url, --critic-model)")
        return create_critic("openai", base_url=options.critic_base_url, model=options.critic_model)
    raise ConfigError(f"unknown critic {name!r}; critics: kinematic, transformers, openai")
