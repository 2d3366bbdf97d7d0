"""The reward synthesizer (no ROS): proposes reward specs for a task sentence, as fresh samples or as
revisions of the best spec so far with its statistics, scores and critic feedback.

    from motionvl.synth import SynthesisRequest, make_synthesizer
    synth = make_synthesizer("rules")                       # offline default: model-free rules, not an LLM
    candidates = synth.propose(SynthesisRequest("walk forward with straight knees", iteration=0, num_candidates=4))
    [c.spec for c in candidates if c.ok]                    # validated RewardSpecs, ready to train

Backends and their options (`make_synthesizer(backend, **options)`):

=============  ===========================================================================================
rules          model-free term-level edits (`rules.py`). start (spec path/RewardSpec, default the reference)
openai         base_url, model (required); api_key (else env MOTIONVL_OPENAI_API_KEY / OPENAI_API_KEY),
               timeout_s 120, max_retries, backoff_s 1, backoff_max_s 30, response_format, send_seed true,
               price_prompt_per_mtok / price_completion_per_mtok 0, extra_body
transformers   model_dir (required; a local causal LM directory, never downloaded), device auto, dtype,
               trust_remote_code false
replay         ledger (required: the run's ledger.jsonl, or its parsed records)
=============  ===========================================================================================

Common options: max_calls / max_tokens (the run's cap; None = none), robot (RobotConfig for the prompt and
the sandbox); model backends also max_repairs, max_new_tokens, max_prompt_chars 32000, start.
`SynthesizerOptions` declares max_repairs, max_new_tokens, max_retries and response_format (defaults, what they
do) once: for these classes, the reward_synthesizer node's parameters and `motionvl synth`'s options.
"""

from __future__ import annotations

import inspect

from motionvl.backend_names import SYNTHESIZERS, ModelSettings, backend_keywords
from motionvl.synth.api import (Candidate, CallBudget, RewardSynthesizer, SynthesisCapReached, SynthesisError,
                                SynthesisRequest, SynthesizerOptions, term_diff)
from motionvl.synth.replay import (append_record, read_synthesis_records, request_key, synthesis_record,
                                   usage_totals)

BACKENDS = SYNTHESIZERS

__all__ = ["BACKENDS", "Candidate", "CallBudget", "RewardSynthesizer", "SynthesisCapReached", "SynthesisError",
           "SynthesisRequest", "SynthesizerOptions", "append_record", "make_synthesizer", "read_synthesis_records", "request_key",
           "synthesis_record", "synthesizer_options", "term_diff", "usage_totals"]


def _backend_class(backend: str):
    if backend == "rules":
        from motionvl.synth.rules import RulesSynthesizer
        return RulesSynthesizer
    if backend == "openai":
        from motionvl.synth.llm import OpenAISynthesizer
        return OpenAISynthesizer
    if backend == "transformers":
        from motionvl.synth.llm import TransformersSynthesizer
        return TransformersSynthesizer
    if backend == "replay":
        from motionvl.synth.replay import ReplaySynthesizer
        return ReplaySynthesizer
    raise SynthesisError(f"unknown synthesizer backend {backend!r}; choose one of {list(BACKENDS)}")


def backend_options(backend: str) -> list[str]:
    """The option names `make_synthesizer(backend, ...)` accepts."""
    cls = _backend_class(backend)
    names: list[str] = []
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        for p in inspect.signature(klass.__init__).parameters.values():
            if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name not in names:
                names.append(p.name)
    return names


def make_synthesizer(backend: str = "rules", **options) -> RewardSynthesizer:
    """A synthesizer by backend name; SynthesisError for an unknown backend or option, or one it cannot start
    (missing model directory, bad endpoint URL, no ledger)."""
    if not isinstance(backend, str):
        raise SynthesisError(f"backend must be a name, one of {list(BACKENDS)}; got {backend!r}")
    cls = _backend_class(backend.strip().lower())
    known = backend_options(backend.strip().lower())
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise SynthesisError(f"synthesizer backend {backend!r} takes no option {unknown}; its options: {known}")
    required = [p.name for p in inspect.signature(cls.__init__).parameters.values()
                if p.name != "self" and p.default is p.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    missing = [name for name in required if options.get(name) in (None, "")]
    if missing:
        raise SynthesisError(f"synthesizer backend {backend!r} needs {missing}")
    try:
        return cls(**options)
    except SynthesisError:
        raise
    except TypeError as exc:  # a required option missing
        raise SynthesisError(f"synthesizer backend {backend!r}: {exc}") from None
    except ValueError as exc:  # e.g. the start spec does not load
        raise SynthesisError(f"synthesizer backend {backend!r}: {exc}") from None


def synthesizer_options(backend: str, model: ModelSettings | None = None, *, ledger=None, **common) -> dict:
    """make_synthesizer's options for `backend`: the model settings it takes (motionvl.backend_names), replay's
    `ledger`, and those of the `common` options (caps, robot, start, max_repairs, ...) that are not None and that
    the backend takes. SynthesisError names what is missing: the one check `motionvl train`, `motionvl synth` and
    the reward_synthesizer node make before a model starts."""
    _backend_class(backend)  # an unknown backend: the error make_synthesizer gives
    try:
        options = backend_keywords("synth", backend, model or ModelSettings())
    except ValueError as exc:
        raise SynthesisError(f"synthesizer {exc}") from None
    if backend == "replay":
        if not ledger:
            raise SynthesisError("synthesizer backend 'replay' needs ledger (the ledger.jsonl of the run to replay)")
        options["ledger"] = ledger
    known = backend_options(backend)
    options.update({name: value for name, value in common.items() if value is not None and name in known})
    return options
