"""The search's one meeting point with parts built beside it (pinned APIs in the lead's protocol).

Each function here uses the real part when it is installed and a named interim stand-in until then,
so switching is one place: the synthesizer (motionvl.synth.make_synthesizer), the sandbox's single
validation entry (motionvl.rewards.validate_spec) and the critic's pairwise comparison
(Critic.compare). INTERIM marks code that goes once the part lands.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import numpy as np

from motionvl.rewards.spec import RewardSpec, RewardSpecError


# ----------------------------------------------------------------------------- synthesizer
def _synth_module():
    try:
        return importlib.import_module("motionvl.synth")
    except ImportError:
        return None


def synthesis_request(**fields):
    """A motionvl.synth.SynthesisRequest (its fields: task, iteration, num_candidates, parent, parent_statistics,
    parent_scores, feedback, seed, temperature)."""
    module = _synth_module()
    cls = module.SynthesisRequest if module is not None else SynthesisRequest
    return cls(**fields)


def candidate(**fields):
    """A motionvl.synth.Candidate (spec, ok, rejection, prompt, response, attempts, usage)."""
    module = _synth_module()
    cls = module.Candidate if module is not None else Candidate
    return cls(**fields)


def make_synthesizer(backend: str, **options):
    """motionvl.synth.make_synthesizer(backend, **options); ValueError for an unknown backend."""
    module = _synth_module()
    if module is not None:
        return module.make_synthesizer(backend, **options)
    if backend != "rules":  # INTERIM: only the offline stand-in exists before motionvl.synth lands
        raise ValueError(f"unknown synthesizer backend {backend!r}: this installation has only 'rules' "
                         "(motionvl.synth is not installed)")
    return InterimRulesSynthesizer(**options)


@dataclasses.dataclass
class SynthesisRequest:  # INTERIM: motionvl.synth.SynthesisRequest
    task: str
    iteration: int
    num_candidates: int
    parent: RewardSpec | None = None
    parent_statistics: dict | None = None
    parent_scores: dict | None = None
    feedback: dict | None = None
    seed: int = 0
    temperature: float = 0.3


@dataclasses.dataclass
class Candidate:  # INTERIM: motionvl.synth.Candidate
    spec: RewardSpec | None
    ok: bool
    rejection: str | None
    prompt: str
    response: str
    attempts: int
    usage: dict


class InterimRulesSynthesizer:  # INTERIM: motionvl.synth's `rules` backend replaces it
    """Model-free stand-in: moves the weights of the terms the critic's suggestions name (increase/decrease,
    a term missing from the parent is added from the library), each candidate by another step size; without
    suggestions, seeded random re-weighting. Not an LLM."""

    name = "rules"
    offline = True
    STEPS = (1.5, 2.0, 1.25, 2.5, 1.75, 3.0)

    def __init__(self, **_options: Any):
        pass

    def propose(self, request) -> list:
        from motionvl.rewards.terms import REGISTRY

        parent = request.parent
        suggestions = [(s.get("term"), s.get("direction")) for s in ((request.feedback or {}).get("suggestions") or [])]
        rng = np.random.default_rng([request.seed, request.iteration])
        out = []
        for k in range(request.num_candidates):
            step = self.STEPS[k % len(self.STEPS)]
            weights = dict(parent.weights)
            edits = []
            for term, direction in suggestions:
                if term not in REGISTRY or direction not in ("increase", "decrease"):
                    continue
                now = weights.get(term, 0.0)
                new = min(1.0, max(now, 0.1) * step) if direction == "increase" else now / step
                weights[term] = round(new, 4)
                edits.append(f"{direction} {term}: {now:.3g} -> {new:.3g}")
            if not edits:
                for term in rng.choice(sorted(weights), size=min(3, len(weights)), replace=False):
                    new = round(float(np.clip(weights[term] * rng.uniform(0.5, 1.5), 0.0, 1.0)), 4)
                    edits.append(f"{term}: {weights[term]:.3g} -> {new:.3g}")
                    weights[term] = new
            raw = parent.to_dict()
            raw["name"] = f"{parent.name or 'reward'}_i{request.iteration}k{k + 1}"
            for term, weight in weights.items():
                raw["terms"].setdefault(term, {"weight": weight})["weight"] = weight
            prompt = f"[rules] task={request.task!r} iteration={request.iteration} step={step} suggestions={suggestions}"
            try:
                spec, ok, rejection = RewardSpec.from_dict(raw, where=f"candidate {k + 1}"), True, None
            except RewardSpecError as exc:
                spec, ok, rejection = None, False, str(exc)
            out.append(Candidate(spec, ok, rejection, prompt, "; ".join(edits), 0,
                                 {"prompt_tokens": 0, "completion_tokens": 0, "latency_s": 0.0, "cost": 0.0}))
        return out


def synthesis_record(request, candidates: list, synthesizer, error: str | None) -> dict:
    """The ledger record of one propose call (motionvl.synth.synthesis_record: what its replay backend reads)."""
    module = _synth_module()
    if module is not None:
        described = synthesizer if hasattr(synthesizer, "describe") and hasattr(synthesizer, "budget") else None
        record = module.synthesis_record(request, candidates, described, error)
        record["synthesizer"] = record["synthesizer"] or {"backend": getattr(synthesizer, "name", None),
                                                          "offline": bool(getattr(synthesizer, "offline", False))}
        return {k: v for k, v in record.items() if k != "kind"}
    return {"synthesizer": {"backend": getattr(synthesizer, "name", None), "offline": True},  # INTERIM
            "request": {**dataclasses.asdict(dataclasses.replace(request, parent=None)),
                        "parent": request.parent.to_dict() if request.parent is not None else None},
            "candidates": [{**dataclasses.asdict(dataclasses.replace(c, spec=None)),
                            "spec": c.spec.to_dict() if c.spec is not None else None} for c in candidates],
            "usage": {"calls": sum(c.attempts for c in candidates),
                      "prompt_tokens": sum(c.usage.get("prompt_tokens", 0) for c in candidates),
                      "completion_tokens": sum(c.usage.get("completion_tokens", 0) for c in candidates)},
            "error": error}


def usage_totals(records: list[dict]) -> dict:
    """{calls, tokens} the recorded synthesis calls used."""
    module = _synth_module()
    if module is not None:
        return module.usage_totals(records)
    calls = sum(int((r.get("usage") or {}).get("calls") or 0) for r in records)  # INTERIM
    tokens = sum(int((r.get("usage") or {}).get(k) or 0) for r in records for k in ("prompt_tokens", "completion_tokens"))
    return {"calls": calls, "tokens": tokens}


def term_diff(parent: dict | None, spec: dict) -> list[dict]:
    """Term-level changes from spec dict `parent` to `spec`: [{term, change, old, new}] (motionvl.synth.term_diff)."""
    module = _synth_module()
    parent_spec = RewardSpec.from_dict(parent) if parent is not None else None
    if module is not None:
        return module.term_diff(parent_spec, RewardSpec.from_dict(spec))
    before = {t.name: t for t in parent_spec.terms} if parent_spec is not None else {}  # INTERIM
    out = []
    for t in RewardSpec.from_dict(spec).terms:
        old = before.get(t.name)
        if old is None:
            out.append({"term": t.name, "change": "added", "old": None, "new": t.to_dict()})
        elif old.weight != t.weight:
            out.append({"term": t.name, "change": "weight", "old": old.weight, "new": t.weight})
        elif old.params != t.params:
            out.append({"term": t.name, "change": "params", "old": dict(old.params), "new": dict(t.params)})
    names = {t.name for t in RewardSpec.from_dict(spec).terms}
    out += [{"term": n, "change": "removed", "old": t.to_dict(), "new": None} for n, t in before.items() if n not in names]
    return out


# ----------------------------------------------------------------------------- validation
def validate_spec(spec: RewardSpec) -> None:
    """motionvl.rewards.validate_spec when the sandbox provides it; until then the spec's isolated code test.
    Raises ValueError (RewardValidationError / RewardSpecError) with a bounded message for the synthesizer."""
    rewards = importlib.import_module("motionvl.rewards")
    check = getattr(rewards, "validate_spec", None)
    if check is not None:
        check(spec)
        return
    spec.test_generated_code()  # INTERIM


# ----------------------------------------------------------------------------- pairwise comparison
def rollout(frames, times, trajectory):
    """The critic's Rollout(frames, times, trajectory)."""
    for module in ("motionvl.critic", "motionvl.critic.base", "motionvl.critic.schema"):
        cls = getattr(importlib.import_module(module), "Rollout", None)
        if cls is not None:
            return cls(frames, times, trajectory)
    return {"frames": frames, "times": times, "trajectory": trajectory}


def compare(critic, first, second, task: str) -> dict:
    """Critic.compare(first, second, task) as {preferred: 'first'|'second'|None, confidence, reason, valid}.
    A critic without compare (INTERIM, before the critic helper's comparison lands) is asked for a critique
    of each and prefers the higher alignment score by more than 0.02, else abstains."""
    if hasattr(critic, "compare"):
        try:
            c = critic.compare(first, second, task)
        except Exception as exc:  # noqa: BLE001 - a judge must never crash the search
            return {"preferred": None, "confidence": 0.0, "reason": f"comparison failed: {type(exc).__name__}: {exc}",
                    "valid": False}
        return {"preferred": c.preferred, "confidence": float(c.confidence), "reason": c.reason, "valid": bool(c.valid)}
    scores = []
    for r in (first, second):
        get = (lambda k: r.get(k)) if isinstance(r, dict) else (lambda k: getattr(r, k))
        fb = critic.critique(get("frames"), get("times"), task, trajectory=get("trajectory"))
        scores.append(fb.alignment_score if fb.valid else None)
    if None in scores:
        return {"preferred": None, "confidence": 0.0, "reason": "a critique was invalid", "valid": False}
    diff = scores[0] - scores[1]
    preferred = "first" if diff > 0.02 else "second" if diff < -0.02 else None
    return {"preferred": preferred, "confidence": min(1.0, abs(diff) * 5), "valid": True,
            "reason": f"alignment {scores[0]:.3f} vs {scores[1]:.3f} (interim: critiques compared)"}
