"""A search run's settings and backends from plain values: shared by `motionvl train` and the orchestrator node."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from motionvl.backend_names import CRITICS, SYNTHESIZERS
from motionvl.robot import ConfigError


@dataclasses.dataclass
class BackendOptions:
    """Where the model-backed backends are; None where a backend needs nothing (or where the run's settings,
    which record the models and endpoints, say it)."""

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
    connect_timeout_s: float | None = None
    """Model endpoints' connect timeout for this session (None: the settings' limits.model_connect_timeout_s)."""
    read_timeout_s: float | None = None
    """Model endpoints' read timeout for this session (None: the settings' limits.model_read_timeout_s)."""


def load_settings(run_dir: str | Path, *, resume: bool = False, task: str | None = None, mode: str = "synth+critic",
                  preset: str = "quick", synthesizer: str | None = None, critic: str | None = None,
                  settings_file: str | Path | None = None, overrides=(), render: bool = True,
                  train_config: str | None = None, start_run: str | None = None, robot_config: str | None = None,
                  synth_model: str | None = None, synth_base_url: str | None = None, critic_model: str | None = None,
                  critic_base_url: str | None = None, replay: str | None = None, allow_backend_change: bool = False):
    """SearchSettings of a new run from the preset, a settings YAML and KEY=VALUE overrides, or of a resumed run:
    the recorded ones, backends, models and endpoints included (a task given then must be the recorded one; a
    backend, model or endpoint given that differs from the recorded one is refused unless allow_backend_change).
    API keys are never part of the settings."""
    from motionvl.rl.config import apply_overrides
    from motionvl.search.config import load_search_config
    from motionvl.search.ledger import Ledger
    from motionvl.search.loop import BACKEND_KEYS, SearchSettings, recorded_settings, without_credentials

    asked = {"synthesizer": synthesizer, "critic": critic, "synth_model": synth_model,
             "synth_base_url": without_credentials(synth_base_url), "critic_model": critic_model,
             "critic_base_url": without_credentials(critic_base_url), "replay": replay}
    if resume:
        recorded = recorded_settings(Ledger(run_dir)) if (Path(run_dir) / "ledger.jsonl").exists() else None
        if recorded is None:
            raise ConfigError(f"cannot resume: {run_dir} holds no search")
        if task and task != recorded["task"]:
            raise ConfigError(f"resume continues the recorded task {recorded['task']!r}; give no other task or start a new run")
        switched = {k: v for k, v in asked.items() if v not in (None, "") and v != recorded.get(k)}
        if switched and not allow_backend_change:
            raise ConfigError("the run was recorded with " + ", ".join(f"{k} {recorded.get(k)!r}" for k in switched)
                              + "; resuming with " + ", ".join(f"{k} {v!r}" for k, v in switched.items())
                              + " would mix two models in one run: resume without them (the recorded ones are used) "
                              "or pass --allow-backend-change to switch (the ledger records it)")
        values = {k: recorded[k] for k in SearchSettings.__dataclass_fields__ if k in recorded}
        values.update({k: v for k, v in switched.items() if k in BACKEND_KEYS})
        return SearchSettings(**values).validate()
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
    return SearchSettings(task=task, mode=mode, synthesizer=synthesizer or "rules", critic=critic or "kinematic",
                          preset=preset, config=cfg.to_dict(), train_config=train_config or None,
                          start_run=start_run or None, robot_config=robot_config or None,
                          synth_model=synth_model or None, synth_base_url=asked["synth_base_url"] or None,
                          critic_model=critic_model or None, critic_base_url=asked["critic_base_url"] or None,
                          replay=replay or None).validate()


def _pick(settings, options: BackendOptions, key: str):
    """A backend option given for this session, else the run's recorded one."""
    return getattr(options, key, None) or getattr(settings, key, None)


def model_timeouts(settings, options: BackendOptions) -> dict:
    """connect_timeout_s and read_timeout_s of the model endpoints for this session."""
    from motionvl.search.config import SearchConfig

    limits = SearchConfig.from_dict(settings.config).limits
    return {"connect_timeout_s": options.connect_timeout_s or limits.model_connect_timeout_s,
            "read_timeout_s": options.read_timeout_s or limits.model_read_timeout_s}


def synthesizer_options(settings, options: BackendOptions) -> dict:
    """make_synthesizer's options for the synthesizer `settings` names; ConfigError names what is missing (checked
    before any node or model starts)."""
    name = settings.synthesizer
    kwargs: dict = {}
    model, base_url, replay = (_pick(settings, options, k) for k in ("synth_model", "synth_base_url", "replay"))
    if name == "openai":
        if not (base_url and model):
            raise ConfigError("the openai synthesizer needs a base URL and a model name (--synth-base-url, --synth-model)")
        kwargs = {"base_url": base_url, "model": model, **model_timeouts(settings, options)}
    elif name == "transformers":
        if not model or not Path(model).is_dir():
            raise ConfigError(f"the transformers synthesizer needs a local model directory (--synth-model DIR); "
                              f"got {model!r}")
        kwargs = {"model_dir": model, "device": options.device}
    elif name == "replay":
        ledger = Path(replay or "") / "ledger.jsonl"
        if not replay or not ledger.exists():
            raise ConfigError(f"the replay synthesizer needs the run directory of a recorded search (--replay RUN_DIR); "
                              f"got {replay!r}")
        kwargs = {"ledger": str(ledger)}
    elif name != "rules":
        raise ConfigError(f"unknown synthesizer {name!r}; synthesizers: {', '.join(SYNTHESIZERS)}")
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
        return make(name, max_calls=limits.max_synth_calls, max_tokens=limits.max_synth_tokens,
                    max_bytes=limits.max_synth_bytes, robot=settings.robot(), **kwargs)
    except (ValueError, KeyError, ImportError) as exc:
        raise ConfigError(f"synthesizer {name!r}: {exc}") from exc


def make_critic(settings, options: BackendOptions):
    """The in-process critic of `settings` (None unless mode synth+critic); ConfigError names what is missing."""
    if settings.mode != "synth+critic":
        return None
    from motionvl.critic.base import create_critic

    from motionvl.search.config import SearchConfig

    name = settings.critic
    model, base_url = _pick(settings, options, "critic_model"), _pick(settings, options, "critic_base_url")
    limits = SearchConfig.from_dict(settings.config).limits
    caps = {"max_calls": limits.max_critic_calls, "max_tokens": limits.max_critic_tokens,
            "max_images": limits.max_critic_images, "max_bytes": limits.max_critic_bytes}
    playback = SearchConfig.from_dict(settings.config).playback
    frames = {"frame_period_s": playback.frame_interval_s}
    if name == "kinematic":
        return create_critic("kinematic")
    if name == "transformers":
        if not model or not Path(model).is_dir():
            raise ConfigError(f"the transformers critic needs a local model directory (--critic-model DIR); "
                              f"got {model!r}")
        return create_critic("transformers", model_dir=model, device=options.device, **caps, **frames)
    if name == "openai":
        if not (base_url and model):
            raise ConfigError("the openai critic needs a base URL and a model name (--critic-base-url, --critic-model)")
        return create_critic("openai", base_url=base_url, model=model, **model_timeouts(settings, options), **caps,
                             **frames)
    raise ConfigError(f"unknown critic {name!r}; critics: {', '.join(CRITICS)}")
