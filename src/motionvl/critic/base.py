"""The critic protocol, a registry of critic backends, and the parse/re-ask protocol.

Every critic (kinematic analysis, a local transformers VLM, an OpenAI-compatible endpoint)
answers ``critique(frames, times, task, previous_best=None, **kwargs) -> MotionFeedback`` about
one rollout and ``compare(first, second, task) -> Comparison`` about two :class:`Rollout` objects.
Model-backed critics share :func:`critique_with_reask` / :func:`compare_with_reask`: ask, parse,
and if the answer cannot be parsed ask ONCE more with the parse error; if that fails too, the
answer has ``valid=False`` and the error. Backend exceptions are caught as well, so the training
loop never crashes on a critic.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

from motionvl.sim.trajectory import Trajectory

from .parsing import apply_token_confidence, parse_comparison, parse_feedback
from .prompts import reask_text
from .schema import Comparison, MotionFeedback


@dataclasses.dataclass
class Rollout:
    """One rollout as a critic sees it: camera frames with their times, and the recorded states."""

    frames: list
    """H x W x 3 uint8 RGB images in time order (may be empty for the kinematic critic)."""
    times: list
    """Seconds since the rollout started, one per frame."""
    trajectory: Trajectory | None = None
    """The recorded states (what the kinematic critic reads); None when only frames exist."""

    def save(self, directory: str | Path) -> Path:
        """Write frames.npz (frames, times) and, if present, trajectory.npz into `directory`."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        frames = np.stack(self.frames) if self.frames else np.zeros((0, 0, 0, 3), np.uint8)
        np.savez_compressed(directory / "frames.npz", frames=frames, times=np.asarray(self.times, dtype=float))
        if self.trajectory is not None:
            self.trajectory.save(directory / "trajectory.npz")
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> "Rollout":
        """Read what `save` wrote; a clear error when the directory holds no rollout."""
        directory = Path(directory)
        if not (directory / "frames.npz").is_file():
            raise FileNotFoundError(f"{directory} holds no rollout (no frames.npz)")
        with np.load(directory / "frames.npz", allow_pickle=False) as f:
            frames, times = list(f["frames"]), [float(t) for t in f["times"]]
        traj_file = directory / "trajectory.npz"
        return cls(frames, times, Trajectory.load(traj_file) if traj_file.is_file() else None)


@runtime_checkable
class Critic(Protocol):
    """What the critic node calls. ``frames`` are HxWx3 uint8 RGB images, ``times`` their
    seconds since the rollout started. Critics that analyse the rollout itself (kinematic)
    take it as the keyword ``trajectory=`` (a :class:`motionvl.sim.trajectory.Trajectory`);
    image critics ignore unknown keywords."""

    name: str

    def critique(self, frames: list, times: list[float], task: str, previous_best: str | None = None,
                 **kwargs: Any) -> MotionFeedback: ...

    def compare(self, first: Rollout, second: Rollout, task: str) -> Comparison: ...


# ----------------------------------------------------------------------------- registry

@dataclasses.dataclass
class _Entry:
    factory: Callable[..., Any] | str  # a callable or "module:attribute", resolved on first use
    spec_arg: str | None  # keyword that receives the part after "name:" in a spec string
    doc: str


_REGISTRY: dict[str, _Entry] = {}


def register_critic(name: str, factory: Callable[..., Any] | str | None = None, *,
                    spec_arg: str | None = None, doc: str = ""):
    """Register a critic factory under ``name`` (usable as a decorator when ``factory`` is None).

    ``factory`` may be a dotted "module:attribute" string so that heavy backends (torch) are
    imported only when that critic is created.
    """
    def _do(f):
        _REGISTRY[name] = _Entry(f, spec_arg, doc)
        return f

    return _do if factory is None else _do(factory)


def available_critics() -> dict[str, str]:
    """Registered critic names -> one-line description."""
    return {k: v.doc for k, v in sorted(_REGISTRY.items())}


def create_critic(spec: str, **kwargs: Any) -> Critic:
    """Build a critic from a name or "name:argument" spec.

    ``create_critic("kinematic")``, ``create_critic("transformers:/models/qwen2-vl", device="cpu")``
    (the argument is passed as ``model_dir``), ``create_critic("openai:gpt-4o-mini",
    base_url="http://127.0.0.1:8000")`` (passed as ``model``).
    """
    name, _, arg = spec.partition(":")
    entry = _REGISTRY.get(name)
    if entry is None:
        raise KeyError(f"unknown critic {name!r}; available: {sorted(_REGISTRY)}")
    if arg:
        if entry.spec_arg is None:
            raise ValueError(f"critic {name!r} takes no argument in its spec (got {spec!r})")
        kwargs.setdefault(entry.spec_arg, arg)
    factory = entry.factory
    if isinstance(factory, str):
        mod, _, attr = factory.partition(":")
        try:
            factory = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as e:
            raise ImportError(f"critic {name!r} is registered as {entry.factory!r}, which cannot be "
                              f"imported: {e}") from e
    return factory(**kwargs)


register_critic("kinematic", "motionvl.critic.kinematic:KinematicCritic",
                doc="offline kinematic gait analysis of the rollout (no model; not a VLM)")
register_critic("transformers", "motionvl.critic.vlm_transformers:TransformersVLMCritic", spec_arg="model_dir",
                doc="local image-text-to-text model directory run with transformers")
register_critic("openai", "motionvl.critic.vlm_openai:OpenAICritic", spec_arg="model",
                doc="OpenAI-compatible /v1/chat/completions endpoint (vLLM, Ollama, transformers serve, ...)")


# ----------------------------------------------------------------------------- re-ask protocol

@dataclasses.dataclass
class Reply:
    """One model answer as a backend returns it to :func:`critique_with_reask`."""

    text: str
    token_spans: list[tuple[int, int]] | None = None
    """Character span of each generated token in ``text`` (for token-probability confidence)."""
    token_probs: list[float] | None = None
    """Probability the model gave each generated token."""
    meta: dict = dataclasses.field(default_factory=dict)
    """Per-attempt bookkeeping (generated tokens, finish reason, latency, HTTP attempts, ...)."""


AskFn = Callable[[list[tuple[str, str]]], Reply]
"""Backend callback: given follow-up turns [(role, text), ...] to append after the prompt (empty
on the first attempt), return the model's reply."""


@dataclasses.dataclass
class _Asked:
    parsed: Any
    """What `parse` returned for the last answer (its `.ok` says whether it is usable)."""
    reply: Reply | None
    error: str
    log: list
    last_text: str | None
    latency_s: float


def _ask_with_reask(ask: AskFn, parse: Callable[[str], Any], reask: bool, max_answer_chars: int | None = None
                    ) -> _Asked:
    """Ask, parse, and once more with the parse error when the answer is unusable; never raises. An answer longer
    than `max_answer_chars` is not parsed: it is unusable for its size (and kept cut to that length)."""
    t0 = time.monotonic()
    log: list[dict] = []
    followups: list[tuple[str, str]] = []
    last_text: str | None = None
    error = "no attempt made"
    parsed = reply = None
    for _ in range(2 if reask else 1):
        try:
            reply = ask(list(followups))
        except Exception as e:  # noqa: BLE001 - a critic must never crash the loop
            error = f"backend error: {type(e).__name__}: {e}"
            log.append({"backend_error": error, **({"usage": e.usage} if isinstance(getattr(e, "usage", None), dict)
                                                   else {})})
            parsed = None
            break
        text = reply.text if isinstance(reply.text, str) else ("" if reply.text is None else str(reply.text))
        entry = dict(reply.meta)
        log.append(entry)
        if max_answer_chars is not None and len(text) > max_answer_chars:
            parsed = None
            problem = (f"the answer is {len(text)} characters long, more than {max_answer_chars}: answer with the JSON "
                       "object only, one short note per descriptor")
            last_text = text[:max_answer_chars] + f" ... [{len(text) - max_answer_chars} more characters not kept]"
            followups = [("assistant", last_text), ("user", reask_text(problem))]
            error = f"parse error: {problem}"
            entry["parse_error"] = problem
            continue
        last_text = text
        parsed = parse(text)
        if parsed.ok:
            return _Asked(parsed, reply, "", log, text, round(time.monotonic() - t0, 4))
        error = f"parse error: {parsed.error}"
        entry["parse_error"] = parsed.error
        followups = [("assistant", text), ("user", reask_text(parsed.error))]
    if any("parse_error" in e for e in log) and not log[-1].get("backend_error"):
        error = f"unusable answer after {len(log)} attempt(s); last {error}"
    return _Asked(None, reply, error, log, last_text, round(time.monotonic() - t0, 4))


def _attempts_meta(asked: _Asked) -> dict:
    from motionvl.llm.usage import totals

    return {"attempts": len(asked.log), "reasked": len(asked.log) > 1, "attempt_log": asked.log,
            "latency_s": asked.latency_s, "usage": totals(e.get("usage") for e in asked.log)}


def critique_with_reask(ask: AskFn, critic: str, task: str, reask: bool = True,
                        token_confidence_weight: float = 0.5, max_answer_chars: int | None = None) -> MotionFeedback:
    """Run the ask -> parse -> (re-ask once) -> feedback protocol; never raises.

    ``meta`` of the result has ``attempts`` (model calls made), ``attempt_log`` (per call: the
    backend's meta plus ``parse_error`` if any), ``usage`` (summed over the calls: calls, tokens,
    images, bytes) and ``latency_s``. A transport error (after
    the backend's own retries) is not re-asked: it ends the critique with ``valid=False``.
    """
    asked = _ask_with_reask(ask, lambda text: parse_feedback(text, critic, task), reask, max_answer_chars)
    if asked.parsed is None:
        return MotionFeedback.invalid(critic, task, asked.error, raw_text=asked.last_text, meta=_attempts_meta(asked))
    fb = asked.parsed.feedback
    reply = asked.reply
    if reply.token_probs and reply.token_spans:
        apply_token_confidence(fb, asked.parsed.raw_labels, reply.token_spans, reply.token_probs,
                               token_confidence_weight)
    fb.meta.update(_attempts_meta(asked))
    return fb


def compare_with_reask(ask: AskFn, critic: str, task: str, reask: bool = True,
                       max_answer_chars: int | None = None) -> Comparison:
    """The same protocol for a comparison answer (:func:`motionvl.critic.parsing.parse_comparison`)."""
    asked = _ask_with_reask(ask, lambda text: parse_comparison(text, critic, task), reask, max_answer_chars)
    if asked.parsed is None:
        return Comparison.invalid(critic, task, asked.error, raw_text=asked.last_text, meta=_attempts_meta(asked))
    comparison = asked.parsed.comparison
    comparison.meta.update(_attempts_meta(asked))
    return comparison
