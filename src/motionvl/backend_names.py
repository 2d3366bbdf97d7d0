"""The model backends in one place: their names (command-line choices, node parameter checks, run labels), the
settings each takes and the one declaration of those settings (`ModelSettings`: names, defaults, descriptions).

The `motionvl train`, `synth` and `critique` options, the reward_synthesizer, vlm_critic and orchestrator nodes'
parameters and train.launch.py's arguments are derived from it (`model_parameters`, `add_model_arguments`,
`recorded_parameters`), and every backend is built from it (`backend_keywords`).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import NamedTuple

from motionvl.dataclass_docs import field_docs


@dataclasses.dataclass
class ModelSettings:
    """Where a model-backed synthesizer or critic finds its model and how long its endpoint may take."""

    model: str = ""
    """openai: the model name the server expects; transformers: a local model directory (never downloaded)."""
    base_url: str = ""
    """openai: the endpoint, e.g. http://127.0.0.1:8000/v1 (the API key comes from the environment only:
    MOTIONVL_OPENAI_API_KEY, else OPENAI_API_KEY)."""
    device: str = "auto"
    """transformers: auto, cpu, cuda:0, ..."""
    connect_timeout_s: float = 10.0
    """openai: seconds the endpoint may take to accept a connection."""
    read_timeout_s: float = 300.0
    """openai: seconds the endpoint may take to answer one request (a line is logged every 10 s while it waits)."""


RECORDED = ("model", "base_url")
"""The settings that say which model answers: a search records them per backend kind (synth_model,
critic_base_url, ...) and a resume keeps them."""
SESSION = tuple(f.name for f in dataclasses.fields(ModelSettings) if f.name not in RECORDED)
"""The others: the session running a search sets them once for both its backends (device, timeouts)."""

class Backend(NamedTuple):
    options: tuple
    """The ModelSettings it takes."""
    about: str
    """What it is, for help texts."""


ENDPOINT = ("base_url", "model", "connect_timeout_s", "read_timeout_s")
LOCAL = ("model", "device")
SYNTHESIZER_BACKENDS = {
    "rules": Backend((), "offline, model-free rules; not an LLM"),
    "openai": Backend(ENDPOINT, "an OpenAI-compatible endpoint"),
    "transformers": Backend(LOCAL, "a local causal LM directory"),
    "replay": Backend((), "the answers a recorded run got, from its ledger"),
}
CRITIC_BACKENDS = {
    "kinematic": Backend((), "offline gait analysis, no model; not a VLM"),
    "transformers": Backend(LOCAL, "a local VLM directory"),
    "openai": Backend(ENDPOINT, "an OpenAI-compatible endpoint"),
}
SYNTHESIZERS = tuple(SYNTHESIZER_BACKENDS)
CRITICS = tuple(CRITIC_BACKENDS)
MODEL_SYNTHESIZERS = tuple(name for name, backend in SYNTHESIZER_BACKENDS.items() if "model" in backend.options)
"""The synthesizers that are language models (a run with one is labelled LLM)."""
MODEL_CRITICS = tuple(name for name, backend in CRITIC_BACKENDS.items() if "model" in backend.options)
"""The critics that are vision-language models (a run with one is labelled VLM)."""
KINDS = {"synth": SYNTHESIZER_BACKENDS, "critic": CRITIC_BACKENDS}
"""Backend kind -> its registry; the kind is also the prefix of its settings in a search (synth_model, ...)."""
KIND_LABELS = {"synth": "synthesizer", "critic": "critic"}
KEYWORDS = {"transformers": {"model": "model_dir"}}
"""Where a backend's constructor names a setting otherwise (the transformers backends' model directory)."""

_DOCS = field_docs(ModelSettings)
_DEFAULTS = ModelSettings()


def kind_settings(kind: str) -> tuple[str, ...]:
    """The settings any backend of `kind` takes, in ModelSettings' order."""
    taken = {name for backend in KINDS[kind].values() for name in backend.options}
    return tuple(f.name for f in dataclasses.fields(ModelSettings) if f.name in taken)


def required(name: str) -> bool:
    """A setting with no usable default (an empty model or endpoint) must be given."""
    return getattr(_DEFAULTS, name) == ""


def backend_keywords(kind: str, backend: str, settings: ModelSettings) -> dict:
    """The constructor keywords of `backend` of `kind` from `settings`; ValueError naming what is missing."""
    registry = KINDS[kind]
    if backend not in registry:
        raise ValueError(f"backend must be one of {tuple(registry)}, got {backend!r}")
    options = registry[backend].options
    missing = [name for name in options if required(name) and not getattr(settings, name)]
    if missing:
        raise ValueError(f"backend {backend!r} needs {' and '.join(missing)}")
    rename = KEYWORDS.get(backend, {})
    return {rename.get(name, name): getattr(settings, name) for name in options}


def backends_help(kind: str) -> str:
    """The backends of `kind`, each with what it is: for help texts and parameter descriptions."""
    items = [f"{name} ({backend.about})" for name, backend in KINDS[kind].items()]
    return ", ".join(items[:-1]) + " or " + items[-1]


def model_parameters(names, prefix: str = "") -> dict:
    """Node parameters `{prefix + name: (default, description)}` of the named settings."""
    return {prefix + name: (getattr(_DEFAULTS, name), _DOCS[name]) for name in names}


def model_settings(values: dict, prefix: str = "") -> ModelSettings:
    """ModelSettings from node parameters (or any mapping) holding `prefix + name` keys; missing ones default."""
    return ModelSettings(**{f.name: values[prefix + f.name] for f in dataclasses.fields(ModelSettings)
                            if values.get(prefix + f.name) is not None})


def option_flag(name: str, prefix: str = "") -> str:
    """The command-line option of a setting: --synth-base-url, --connect-timeout (seconds: no _s)."""
    return "--" + (prefix + name.removesuffix("_s")).replace("_", "-")


def add_model_arguments(parser: argparse.ArgumentParser, names, prefix: str = "", unset: str = "") -> None:
    """One option per named setting (dest prefix + name; an empty text is unset, None), help from its docstring.
    `unset`: the timeouts default to None instead, which this text explains."""
    for name in names:
        default = getattr(_DEFAULTS, name)
        if isinstance(default, float):
            default, note = (None, f" ({unset})") if unset else (default, f" (default {default:g})")
        else:
            default, note = default or None, (f" (default {default})" if default else "")
        parser.add_argument(option_flag(name, prefix), dest=prefix + name, type=type(getattr(_DEFAULTS, name)),
                            default=default, help=_DOCS[name] + note,
                            **({"metavar": "S"} if name.endswith("_s") else {}))


def recorded_parameters() -> dict:
    """The recorded settings of each kind as the orchestrator's parameters and train.launch.py's arguments:
    `{kind_name: ("", description)}` (synth_model, synth_base_url, critic_model, critic_base_url)."""
    return {f"{kind}_{name}": (getattr(_DEFAULTS, name), f"{KIND_LABELS[kind]}, {_DOCS[name]}")
            for kind in KINDS for name in RECORDED}
