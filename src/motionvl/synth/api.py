"""The synthesizer's interface: what a proposal request carries and what a candidate is.

`RewardSynthesizer.propose(request) -> list[Candidate]` is the one call every backend answers
(`rules`, `openai`, `transformers`, `replay`). A request is checked before any backend sees it
(`SynthesisError` names what is wrong); everything that goes wrong with one candidate after that
(unparseable or truncated model output, a spec the sandbox refuses, an endpoint that does not
answer) is a rejected `Candidate` with its reason, never an exception out of `propose`. The only
other exception is `SynthesisCapReached`, raised when the run's call/token cap is used up before
a call starts (a cap reached half-way rejects the remaining candidates with a "cap reached" reason).
"""

from __future__ import annotations

import abc
import dataclasses
import re
from typing import Any

from motionvl.llm.usage import UsageBudget
from motionvl.rewards.spec import RewardSpec

MAX_TASK_CHARS = 1000
MAX_TRIED = 32
"""Earlier candidates a request carries: a run of the gpu preset (K=10, N=5) makes at most 40 before its last round."""
MAX_REJECTION_CHARS = 2000
"""A rejection goes back to the model for repair and into the ledger: long enough for every problem of a
spec, short enough not to swamp the prompt."""

USAGE_KEYS = ("prompt_tokens", "completion_tokens", "latency_s", "cost", "calls", "bytes_sent", "bytes_received")


class SynthesisError(ValueError):
    """A request or a backend's configuration is unusable; the message says what to change."""


class SynthesisCapReached(SynthesisError):
    """The run's cap on model calls or tokens is used up: no further proposal can be made."""


def bounded(text: str, limit: int = MAX_REJECTION_CHARS) -> str:
    """`text` cut to `limit` characters with a note of how much was cut."""
    text = str(text)
    if len(text) <= limit:
        return text
    return text[:limit] + f" ... [{len(text) - limit} more characters cut]"


def empty_usage() -> dict:
    return {"prompt_tokens": 0, "completion_tokens": 0, "latency_s": 0.0, "cost": 0.0, "calls": 0, "bytes_sent": 0,
            "bytes_received": 0}


def add_usage(total: dict, part: dict) -> dict:
    """total += part, key by key (missing keys count 0); returns total."""
    for key in USAGE_KEYS:
        total[key] = total.get(key, 0) + (part.get(key) or 0)
    total["latency_s"] = round(float(total["latency_s"]), 6)
    total["cost"] = round(float(total["cost"]), 8)
    return total


def _spec_from(value: Any, where: str) -> RewardSpec | None:
    if value is None or isinstance(value, RewardSpec):
        return value
    try:
        return RewardSpec.from_dict(value, where=where)
    except ValueError as exc:
        raise SynthesisError(f"request.parent is not a valid reward spec: {bounded(exc, 600)}") from None


def _feedback_dict(value: Any) -> dict | None:
    if value is None or isinstance(value, dict):
        return value
    if hasattr(value, "to_dict"):  # a MotionFeedback
        return value.to_dict()
    raise SynthesisError(f"request.feedback must be a MotionFeedback or its dict, got {type(value).__name__}")


@dataclasses.dataclass
class SynthesisRequest:
    """One proposal round: K candidates for a task, as mutations of a parent or fresh samples."""

    task: str
    """The task sentence ("walk forward with straight knees")."""
    iteration: int
    """The search iteration this round belongs to (0 = the first)."""
    num_candidates: int
    """K, how many candidates to propose (distinct edits)."""
    parent: RewardSpec | None = None
    """r*, the spec to mutate; None: the reference spec is shown as the start (config/rewards/reference.yaml)."""
    parent_statistics: dict | None = None
    """The parent run's term_stats.json (per-term mean/min/max/last over training: the reward reflection)."""
    parent_scores: dict | None = None
    """The parent's reward-free evaluation (eval.json: success_rate, fell_fraction, knee_angle_stance_deg, ...)."""
    feedback: dict | None = None
    """The critic's MotionFeedback (as a dict) on the parent's rollout: descriptors, measured values,
    contradictions, suggestions."""
    tried: list = dataclasses.field(default_factory=list)
    """Earlier candidates that did not become r* (newest last, at most MAX_TRIED): {id, parent, edits (term diff
    against their parent), terms, code, scale, only_positive (their spec's), outcome, reason, scores, statistics},
    and the answers refused at synthesis ({id, outcome: "refused", reason}, no terms). A backend proposes none of
    them again, and a model reads why they lost."""
    seed: int = 0
    """Makes the rules backend's choices and the model's sampling repeatable."""
    temperature: float = 0.3
    """Sampling temperature of model backends (the paper's 0.3)."""
    from_scratch: bool = False
    """No reference reward fits the task (the paper's category (ii)): write one from the term library, each
    candidate an independent sample (no parent; the reference is not shown as a start)."""
    environment: dict | None = None
    """The run's training environment (an EnvConfig mapping with the run's num_envs and overrides): generated code
    is checked on it, as training will run it. None: the environment's defaults."""
    gates: dict | None = None
    """The search's gates a parent must pass, where the run sets other than GateConfig's defaults:
    min_success_rate, max_fall_fraction (the rules stabilise a parent below them). None: the defaults."""

    def checked(self) -> "SynthesisRequest":
        """A normalised copy (parent as RewardSpec, feedback as dict); SynthesisError for bad input."""
        if not isinstance(self.task, str):
            raise SynthesisError(f"task must be a sentence (a string), got {type(self.task).__name__}")
        task = " ".join(self.task.split())
        if not task:
            raise SynthesisError("task is empty: say what the robot should do, e.g. 'walk forward with straight knees'")
        if len(task) > MAX_TASK_CHARS:
            raise SynthesisError(f"task is {len(task)} characters long; at most {MAX_TASK_CHARS}")
        if len(re.findall(r"[^\W\d_]{2,}", task)) == 0:
            raise SynthesisError(f"task {task!r} has no words: say what the robot should do, "
                                 "e.g. 'walk forward with straight knees'")
        for name in ("iteration", "num_candidates", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise SynthesisError(f"{name} must be an integer, got {value!r}")
        if self.iteration < 0:
            raise SynthesisError(f"iteration must be >= 0, got {self.iteration}")
        if not 1 <= self.num_candidates <= 64:
            raise SynthesisError(f"num_candidates must be within 1..64, got {self.num_candidates}")
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 <= t <= 2.0:
            raise SynthesisError(f"temperature must be a number within [0, 2], got {t!r}")
        if not isinstance(self.from_scratch, bool):
            raise SynthesisError(f"from_scratch must be true or false, got {self.from_scratch!r}")
        if self.from_scratch and self.parent is not None:
            raise SynthesisError("a request from scratch has no parent")
        tried = self.tried or []
        if not isinstance(tried, list) or not all(isinstance(x, dict) for x in tried):
            raise SynthesisError("tried must be a list of candidate records (mappings)")
        for name in ("parent_statistics", "parent_scores", "environment"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, dict):
                raise SynthesisError(f"{name} must be a mapping (the run's JSON file), got {type(value).__name__}")
        _check_gates(self.gates)
        return dataclasses.replace(self, task=task, parent=_spec_from(self.parent, "request.parent"),
                                   feedback=_feedback_dict(self.feedback), temperature=float(t), tried=tried[-MAX_TRIED:])

    def to_dict(self) -> dict:
        out = dataclasses.asdict(dataclasses.replace(self, parent=None))
        out["parent"] = self.parent.to_dict() if isinstance(self.parent, RewardSpec) else self.parent
        out["feedback"] = _feedback_dict(self.feedback)
        for key in ("tried", "from_scratch", "environment", "gates"):  # a request without them keeps the key it had
            if not out[key]:                                    # before they existed (replay)
                del out[key]
        return out

    @classmethod
    def from_dict(cls, raw: Any) -> "SynthesisRequest":
        """From JSON (the node's request payload, a ledger record); unknown keys are an error."""
        if not isinstance(raw, dict):
            raise SynthesisError(f"a synthesis request must be a JSON object, got {type(raw).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - names)
        if unknown:
            raise SynthesisError(f"unknown request keys {unknown} (known: {sorted(names)})")
        missing = [n for n in ("task", "iteration", "num_candidates") if n not in raw]
        if missing:
            raise SynthesisError(f"request is missing {missing}")
        return cls(**raw).checked()


REQUEST_GATES = ("min_success_rate", "max_fall_fraction")
"""The gates a synthesis request may carry (motionvl.search.config.GateConfig's fields of the same names)."""


def gate_thresholds(gates: dict | None) -> tuple[float, float]:
    """(min_success_rate, max_fall_fraction) a request holds a parent to: its gates, else GateConfig's defaults."""
    from motionvl.search.config import GateConfig

    gates = gates or {}
    return (gates.get("min_success_rate", GateConfig.min_success_rate),
            gates.get("max_fall_fraction", GateConfig.max_fall_fraction))


def _check_gates(gates) -> None:
    if gates is None:
        return
    if not isinstance(gates, dict):
        raise SynthesisError(f"gates must be a mapping of {list(REQUEST_GATES)}, got {type(gates).__name__}")
    for key, value in gates.items():
        if key not in REQUEST_GATES:
            raise SynthesisError(f"gates: unknown gate {key!r} (known: {list(REQUEST_GATES)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise SynthesisError(f"gates: {key} must be a share within [0, 1], got {value!r}")


@dataclasses.dataclass
class Candidate:
    """One proposed reward spec, accepted (`ok`, `spec` validated by the sandbox) or rejected with its reason."""

    spec: RewardSpec | None
    ok: bool
    rejection: str | None
    """Why the candidate was refused (bounded), None when ok. Starts with "cap reached" when the run's cap stopped it."""
    prompt: str
    """The prompt of the first attempt (rules: the inputs the rules acted on)."""
    response: str
    """The last answer (rules: the spec as JSON with its rationale)."""
    attempts: int
    """Model calls made for this candidate (1 + repairs; 0 when none was made)."""
    usage: dict
    """prompt_tokens, completion_tokens, latency_s, cost, calls, bytes_sent, bytes_received: summed over the attempts."""
    edits: list = dataclasses.field(default_factory=list)
    """Term-level diff against the parent (`term_diff`): [{term, change, old, new}]."""
    rationale: str = ""
    """What the backend says it changed and why."""
    exchanges: list = dataclasses.field(default_factory=list)
    """Per attempt: {response, finish_reason, rejection, usage} (the replay backend re-reads these). In the dict form
    the last attempt's answer is `response` alone (an answer is stored once)."""

    @property
    def cap_reached(self) -> bool:
        return bool(self.rejection) and self.rejection.startswith("cap reached")

    def to_dict(self) -> dict:
        out = dataclasses.asdict(dataclasses.replace(self, spec=None))
        out["spec"] = self.spec.to_dict() if self.spec is not None else None
        if out["exchanges"] and out["exchanges"][-1].get("response") == out["response"]:
            out["exchanges"][-1] = {k: v for k, v in out["exchanges"][-1].items() if k != "response"}
        return out

    @classmethod
    def from_dict(cls, raw: dict) -> "Candidate":
        raw = dict(raw)
        spec = raw.pop("spec", None)
        exchanges = [dict(e) for e in raw.pop("exchanges", None) or []]
        if exchanges and "response" not in exchanges[-1]:
            exchanges[-1]["response"] = raw.get("response", "")
        return cls(spec=RewardSpec.from_dict(spec, where="recorded candidate") if spec is not None else None,
                   exchanges=exchanges, **raw)


def rejected(reason: str, *, prompt: str = "", response: str = "", attempts: int = 0, usage: dict | None = None,
             exchanges: list | None = None) -> Candidate:
    return Candidate(spec=None, ok=False, rejection=bounded(reason), prompt=prompt, response=response,
                     attempts=attempts, usage=usage or empty_usage(), exchanges=exchanges or [])


def fixed_field_problem(parent: RewardSpec | dict, spec: RewardSpec | dict) -> str | None:
    """Why a generated spec may not be trained as a revision of `parent`: it changes a field the operator owns
    (scale, only_positive: the reward's overall magnitude and its clipping, which PPO's settings and a warm start's
    value function are tuned to), else None."""
    def fields(s):
        raw = s.to_dict() if isinstance(s, RewardSpec) else (s or {})
        scale, positive = raw.get("scale", 1.0), raw.get("only_positive", False)
        number = isinstance(scale, (int, float)) and not isinstance(scale, bool)
        return {"scale": float(scale) if number else scale, "only_positive": positive}

    before, after = fields(parent), fields(spec)
    if not isinstance(after["scale"], float):
        after["scale"] = repr(after["scale"])
    changed = [f"scale {before['scale']:g} -> {after['scale']:g}" if k == "scale" and isinstance(after[k], float)
               else f"{k} {before[k]} -> {after[k]}" for k in before if before[k] != after[k]]
    if not changed:
        return None
    return ("the spec changes " + ", ".join(changed) + ": scale and only_positive are fixed at r*'s "
            f"(scale {before['scale']:g}, only_positive {str(before['only_positive']).lower()}); leave them out and "
            "express emphasis through the term weights")


def term_diff(parent: RewardSpec | None, spec: RewardSpec) -> list[dict]:
    """Term-level changes from `parent` to `spec`: [{term, change: added|removed|weight|params|source|code|scale|
    only_positive, old, new}] (term "*" for the spec-wide fields)."""
    before = {t.name: t for t in parent.terms} if parent is not None else {}
    after = {t.name: t for t in spec.terms}
    out: list[dict] = []
    for name, t in after.items():
        old = before.get(name)
        if old is None:
            out.append({"term": name, "change": "added", "old": None, "new": t.to_dict()})
            continue
        if old.source != t.source:
            out.append({"term": name, "change": "source", "old": old.source, "new": t.source})
        if old.weight != t.weight:
            out.append({"term": name, "change": "weight", "old": old.weight, "new": t.weight})
        if old.params != t.params:
            out.append({"term": name, "change": "params", "old": dict(old.params), "new": dict(t.params)})
    out += [{"term": name, "change": "removed", "old": t.to_dict(), "new": None}
            for name, t in before.items() if name not in after]
    if parent is not None and (parent.code or None) != (spec.code or None):
        out.append({"term": "*", "change": "code", "old": parent.code, "new": spec.code})
    if parent is not None:
        out += [{"term": "*", "change": field, "old": getattr(parent, field), "new": getattr(spec, field)}
                for field in ("scale", "only_positive") if getattr(parent, field) != getattr(spec, field)]
    return out


RESPONSE_FORMATS = ("auto", "json_schema", "json_object", "none")


@dataclasses.dataclass(frozen=True)
class SynthesizerOptions:
    """How the model backends ask and repair: the defaults of the synthesizer classes (motionvl.synth.llm), the
    reward_synthesizer node's parameters and `motionvl synth`'s options, declared once."""

    max_repairs: int = 2
    """Model backends: repairs per candidate after a rejected answer (0-10)."""
    max_new_tokens: int = 2048
    """Model backends: the answer's token limit (>= 16)."""
    max_retries: int = 3
    """openai: retries with exponential backoff on transport errors, 5xx and 429."""
    response_format: str = dataclasses.field(default="auto", metadata={"choices": RESPONSE_FORMATS})
    """openai: auto (JSON schema where the server takes it, else plain text), json_schema, json_object or none."""


SYNTHESIZER_OPTIONS = SynthesizerOptions()


class CallBudget(UsageBudget):
    """A run's cap on the synthesizer's model calls, tokens and bytes (None = no cap); restored on resume."""

    def __init__(self, max_calls: int | None = None, max_tokens: int | None = None, max_bytes: int | None = None):
        try:
            super().__init__("model", max_calls=max_calls, max_tokens=max_tokens, max_bytes=max_bytes)
        except ValueError as exc:
            raise SynthesisError(str(exc)) from None


class RewardSynthesizer(abc.ABC):
    """Proposes reward specs. Subclasses set `name` and `offline` and implement `_propose`."""

    name: str = "synthesizer"
    offline: bool = True
    """True when no model is involved (the rules backend, a replay): a run is then never called an LLM run."""

    def __init__(self, *, max_calls: int | None = None, max_tokens: int | None = None, max_bytes: int | None = None):
        self.budget = CallBudget(max_calls, max_tokens, max_bytes)

    def propose(self, request: SynthesisRequest) -> list[Candidate]:
        """K candidates for the request (rejected ones carry their reason). SynthesisError for a bad request,
        SynthesisCapReached when the run's cap is used up before the first call."""
        if not isinstance(request, SynthesisRequest):
            raise SynthesisError(f"propose takes a SynthesisRequest, got {type(request).__name__}")
        request = request.checked()
        reason = self.budget.exhausted()
        if reason:
            raise SynthesisCapReached(reason)
        return self._propose(request)

    @abc.abstractmethod
    def _propose(self, request: SynthesisRequest) -> list[Candidate]:
        ...

    def describe(self) -> dict:
        """What ran, for the ledger and the report (a run is labelled by the backends that actually ran)."""
        return {"backend": self.name, "offline": self.offline}
