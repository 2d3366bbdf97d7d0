"""A search run's settings and backends from plain values: shared by `motionvl train` and the orchestrator node."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from motionvl.backend_names import KIND_LABELS, KINDS, RECORDED, SESSION, ModelSettings, backend_keywords, option_flag
from motionvl.robot import ConfigError


BackendOptions = dataclasses.make_dataclass("BackendOptions", [(name, object, None) for name in SESSION])
BackendOptions.__doc__ = """This session's ModelSettings for the run's backends (motionvl.backend_names.SESSION: the
device, the timeouts); None: the default, for a timeout the settings' limits. The models and endpoints come from
the run's settings, which record them."""


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


def model_settings(settings, options: BackendOptions, kind: str) -> ModelSettings:
    """The ModelSettings of the run's `kind` backend (synth, critic) for this session: its recorded model and
    endpoint, this session's device and timeouts (else the settings' limits)."""
    from motionvl.search.config import SearchConfig

    limits = SearchConfig.from_dict(settings.config).limits
    session = {"connect_timeout_s": limits.model_connect_timeout_s, "read_timeout_s": limits.model_read_timeout_s,
               **{name: getattr(options, name) for name in SESSION if getattr(options, name) is not None}}
    return ModelSettings(**{name: getattr(settings, f"{kind}_{name}") or "" for name in RECORDED}, **session)


def _checked(kind: str, name: str, model: ModelSettings) -> None:
    """ConfigError naming the options a backend misses (checked before any node or model starts)."""
    label = KIND_LABELS[kind]
    if name not in KINDS[kind]:
        raise ConfigError(f"unknown {label} {name!r}; {label}s: {', '.join(KINDS[kind])}")
    try:
        backend_keywords(kind, name, model)
    except ValueError as exc:
        flags = ", ".join(option_flag(n, f"{kind}_") for n in RECORDED if n in KINDS[kind][name].options)
        raise ConfigError(f"the {name} {label}: {exc} ({flags})") from None
    if name == "transformers" and not Path(model.model).is_dir():
        raise ConfigError(f"the transformers {label} needs a local model directory ({option_flag('model', kind + '_')} "
                          f"DIR); got {model.model!r}")


def checked_synthesizer_options(settings, options: BackendOptions) -> dict:
    """motionvl.synth.synthesizer_options for the synthesizer `settings` names; ConfigError names what is missing
    (checked before any node or model starts)."""
    from motionvl.synth import SynthesisError
    from motionvl.synth import synthesizer_options as options_of

    name, model = settings.synthesizer, model_settings(settings, options, "synth")
    _checked("synth", name, model)
    ledger = Path(settings.replay or "") / "ledger.jsonl"
    if name == "replay" and not (settings.replay and ledger.exists()):
        raise ConfigError(f"the replay synthesizer needs the run directory of a recorded search (--replay RUN_DIR); "
                          f"got {settings.replay!r}")
    try:
        return options_of(name, model, ledger=str(ledger) if name == "replay" else None)
    except SynthesisError as exc:
        raise ConfigError(str(exc)) from None


def make_synthesizer(settings, options: BackendOptions):
    """The in-process synthesizer of `settings` (None in mode reference); ConfigError names what is missing."""
    if settings.mode == "reference":
        return None
    name, kwargs = settings.synthesizer, checked_synthesizer_options(settings, options)
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
    from motionvl.critic.service import backend_factory
    from motionvl.search.config import SearchConfig

    name, model = settings.critic, model_settings(settings, options, "critic")
    _checked("critic", name, model)
    cfg = SearchConfig.from_dict(settings.config)
    limits = cfg.limits
    caps = {"max_calls": limits.max_critic_calls, "max_tokens": limits.max_critic_tokens,
            "max_images": limits.max_critic_images, "max_bytes": limits.max_critic_bytes}
    return backend_factory(name, model, **caps, frame_period_s=cfg.playback.frame_interval_s)()
