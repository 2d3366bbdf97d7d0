"""A reward as data: weighted library and generated terms, loadable from YAML/JSON and callable.

    total = scale * dt * sum_i(sign_i * weight_i * term_i(state))

with every term normalised to about [0, 1] (see `terms.py`), sign +1 for rewards and -1 for
costs, weight in [0, 1], scale in SCALE_RANGE and every numeric term parameter within
+-PARAM_LIMIT: every field that changes the reward is bounded. `reward_key(spec)` is the one
definition of "the same reward" (duplicates, the exported policy's reward_spec_hash). Calling a spec
returns the total and each term's signed, weighted per-step contribution, so the environment's
per-term episode sums are the per-term episode rewards the ablation table reports, and they add up
to the episode return.

File format (YAML or JSON, same keys)::

    name: rl_base_walk
    description: flat-ground walking at 0.6 m/s
    scale: 1.0
    terms:
      tracking_lin_vel: {weight: 1.0, params: {sigma: 0.25}}
      orientation: 0.3                    # shorthand: weight only, default params
      upright_bonus: {weight: 0.2, source: generated}
    code: |                               # generated terms, checked by the sandbox
      def _reward_upright_bonus(state): ...
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import logging
import math
import threading
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import yaml

from motionvl.rewards.messages import plain, quote
from motionvl.rewards.state import RewardState
from motionvl.rewards.terms import ALIASES, POSITIVE_PARAMS, REGISTRY
from motionvl.robot import ConfigError, package_root

_log = logging.getLogger(__name__)
REFERENCE_SPEC = "config/rewards/reference.yaml"
DEFAULT_COST_LIMIT = 8.0
"""The bound on generated terms' CPU time per call, in multiples of the reference reward's on the same batches
(rewards/sandbox/cost.py), that every spec carries unless told otherwise (TrainConfig.reward_cost_limit). The
reference reward rewritten as generated code (config/rewards/reference_generated.yaml) measures ~2x at 512
environments and 3-4x on small batches, where the sandbox's fixed cost per operation dominates: 8 keeps such
a candidate clear of the bound, while a term that makes the rollout many times slower fails."""
SOURCES = ("library", "generated")
_TOP_KEYS = ("name", "description", "scale", "only_positive", "terms", "code")
SCALE_RANGE = (0.1, 10.0)
"""Bounds of a spec's `scale`. Terms are normalised and weights lie in [0, 1], so the scale only sets the reward's
overall magnitude, which PPO's settings (and a warm start's value function) are tuned to at 1: a factor of ten either
way is plenty for a hand-written spec. Generated candidates keep their parent's scale (motionvl.synth)."""
PARAM_LIMIT = 1e4
"""Largest magnitude of a numeric term parameter (SI units: no kernel width, height or force needs more)."""


class RewardSpecError(ConfigError):
    """A reward spec is invalid; the message lists every problem (it goes back to the LLM)."""


@dataclasses.dataclass(frozen=True)
class TermSpec:
    name: str
    weight: float
    params: dict = dataclasses.field(default_factory=dict)
    source: str = "library"

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"weight": self.weight}
        if self.params:
            out["params"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.params.items()}
        if self.source != "library":
            out["source"] = self.source
        return out


class RewardSpec:
    """Validated, immutable reward spec; `spec(state) -> (total (N,), {name: (N,) contribution})`."""

    def __init__(self, terms, code: str | None = None, scale: float = 1.0, name: str = "",
                 description: str = "", only_positive: bool = False, where: str = "reward spec", *,
                 isolated: bool = True, deadline_s: float | None = None,
                 cost_limit: float | None = DEFAULT_COST_LIMIT):
        """isolated: generated terms run in the sandbox's worker process with a deadline_s per call (None:
        the sandbox's default), as training must; False runs them in this process on read-only copies of
        the state (no deadline: only for measuring what the isolation costs). cost_limit: the generated
        terms' CPU time per call may be at most this many times the reference reward's on the same batches
        (sandbox/cost.py; training sets it from TrainConfig.reward_cost_limit, of the same default); None:
        no such bound."""
        errors: list[str] = []
        self.isolated, self.deadline_s = bool(isolated), deadline_s
        if cost_limit is not None and (isinstance(cost_limit, bool) or not isinstance(cost_limit, (int, float))
                                       or not cost_limit > 0):
            errors.append(f"cost_limit must be null or a number > 0, got {cost_limit!r}")
        self.cost_limit = cost_limit
        self._runner = None  # the generated terms' runner, started on the first call (see _generated_values)
        self._runner_lock = threading.Lock()
        self.terms: tuple[TermSpec, ...] = tuple(terms)
        self.code = code or None
        self.scale = scale
        self.name = name
        self.description = description
        self.only_positive = only_positive
        self._where = where
        # only_positive clips the total at 0 (legged_gym's option against learning to fall early);
        # the per-term contributions are then no longer summing to the total.
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
            errors.append(f"scale must be a number in [{SCALE_RANGE[0]:g}, {SCALE_RANGE[1]:g}], got {scale!r}")
        elif not SCALE_RANGE[0] <= scale <= SCALE_RANGE[1]:
            errors.append(f"scale {scale:g} outside [{SCALE_RANGE[0]:g}, {SCALE_RANGE[1]:g}]")
        if not isinstance(only_positive, bool):
            errors.append(f"only_positive must be true or false, got {only_positive!r}")
        self._compiled = self._compile(errors) if self.code else None
        self._generated = self._compiled.terms if self._compiled is not None else {}
        seen = set()
        for t in self.terms:
            if t.name in seen:
                errors.append(f"term {quote(t.name)} appears twice")
            seen.add(t.name)
            errors.extend(f"term {quote(t.name)}: {e}" for e in self._term_errors(t))
        if not self.terms:
            errors.append("no terms")
        if errors:
            raise RewardSpecError(f"{where}: " + ("; ".join(errors) if len(errors) == 1 else
                                                  "\n  - " + "\n  - ".join(errors)))
        self._evaluators = tuple(self._evaluator(t) for t in self.terms)

    # ------------------------------------------------------------------ validation
    def _compile(self, errors: list):
        if not isinstance(self.code, str):
            errors.append(f"code must be a string of Python source, got {type(self.code).__name__}")
            return None
        from motionvl.rewards import sandbox  # only specs with generated code need it

        try:
            compiled = sandbox.compile_code(self.code)
        except sandbox.RewardCodeError as exc:  # the sandbox's message is what the LLM has to fix
            errors.extend(f"generated code rejected: {p}" for p in exc.problems)
            return None
        _log_warnings_once(compiled)
        return compiled

    def _term_errors(self, t: TermSpec) -> list[str]:
        errs = []
        w = t.weight
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w):
            errs.append(f"weight must be a number in [0, 1], got {w!r}")
        elif not 0.0 <= w <= 1.0:
            errs.append(f"weight {w} outside [0, 1]")
        if not isinstance(t.params, dict):
            return errs + [f"params must be a mapping, got {type(t.params).__name__}"]
        if t.source == "generated":
            if not self.code:
                errs.append("source is 'generated' but the spec has no code")
            elif self._generated and t.name not in self._generated:
                errs.append(f"not defined by the generated code{_suggest(t.name, self._generated)}; "
                            f"it defines {sorted(self._generated)} (write _reward_{plain(t.name)} or _cost_{plain(t.name)})")
            if t.params:
                errs.append("generated terms take no params (put constants in the code)")
        elif t.source == "library":
            if t.name not in REGISTRY:
                hint = _suggest(t.name, REGISTRY)
                errs.append(f"unknown library term{hint}" + ("" if "did you mean" in hint else
                                                             f" (library terms: {', '.join(REGISTRY)})"))
            else:
                errs.extend(_param_errors(t.params, REGISTRY[t.name].params))
        else:
            errs.append(f"source must be one of {list(SOURCES)}, got {t.source!r}")
        return errs

    def _evaluator(self, t: TermSpec):
        coeff = float(self.scale) * float(t.weight)
        if t.source == "generated":
            return coeff * self._generated[t.name].sign, None  # evaluated with the others by _generated_values
        lib = REGISTRY[t.name]
        params = {**lib.params, **{k: tuple(v) if isinstance(v, list) else v for k, v in t.params.items()}}
        return coeff * lib.sign, lambda state, fn=lib.fn, params=params: fn(state, **params)

    # ------------------------------------------------------------------ evaluation
    def _generated_values(self, state: RewardState, names) -> dict[str, np.ndarray]:
        """The generated terms' values for `state`, all in one call of the runner (the sandbox's worker process,
        or this process if not `isolated`). RewardCodeError when a term fails (final: training stops on it)."""
        if not names:
            return {}
        with self._runner_lock:
            if self._runner is None:
                from motionvl.rewards import sandbox

                weighted = [t.name for t in self.terms if t.source == "generated" and t.weight != 0]
                cost = None if self.cost_limit is None else sandbox.StepCost(self.cost_limit, _reference_reward())
                if self.isolated:
                    deadline = sandbox.CALL_DEADLINE_S if self.deadline_s is None else self.deadline_s
                    self._runner = sandbox.IsolatedTerms(self._compiled, weighted, deadline_s=deadline, cost=cost)
                else:
                    self._runner = sandbox.InProcessTerms(self._compiled, weighted, cost=cost)
            runner = self._runner
        values = runner.evaluate(state)
        return {name: values[name] for name in names}

    def __call__(self, state: RewardState) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        generated = self._generated_values(
            state, [t.name for t in self.terms if t.source == "generated" and t.weight != 0])
        contributions = {}
        total = np.zeros(state.num_envs)
        for t, (coeff, evaluate) in zip(self.terms, self._evaluators):
            if coeff == 0.0:  # weight 0: switched off, still listed so every run reports the same terms
                contributions[t.name] = np.zeros(state.num_envs)
                continue
            raw = generated[t.name] if evaluate is None else evaluate(state)
            value = coeff * state.dt * np.asarray(raw, dtype=np.float64)
            contributions[t.name] = value
            total += value
        if self.only_positive:
            total = np.maximum(total, 0.0)
        return total, contributions

    def check(self, state: RewardState, only=None) -> None:
        """Evaluate every term (or the terms named in `only`) once on `state`; raise RewardSpecError naming
        any term that fails."""
        errors = []
        selected = [(t, evaluate) for t, (_, evaluate) in zip(self.terms, self._evaluators)
                    if only is None or t.name in only]
        try:  # the generated terms' values are checked where they are made (the sandbox)
            self._generated_values(state, [t.name for t, evaluate in selected if evaluate is None and t.weight != 0])
        except ValueError as exc:  # RewardCodeError: the sandbox's bounded problems
            errors.append(f"generated terms: {exc}")
        for t, evaluate in selected:
            if evaluate is None:
                continue
            try:
                value = np.asarray(evaluate(state), dtype=np.float64)
            except Exception as exc:
                errors.append(f"term {quote(t.name)}: {type(exc).__name__}: {exc}")
                continue
            if value.shape != (state.num_envs,):
                errors.append(f"term {quote(t.name)}: returned shape {value.shape}, expected ({state.num_envs},)")
            elif not np.all(np.isfinite(value)):
                errors.append(f"term {quote(t.name)}: returned non-finite values")
        if errors:
            raise RewardSpecError(f"reward spec {quote(self.name)}: " + "; ".join(errors))

    def with_isolation(self, isolated: bool = True, deadline_s: float | None = None) -> "RewardSpec":
        """The same spec with its generated terms run in the sandbox's worker process (isolated) or in this
        process (see __init__); deadline_s per call of the worker (None: the sandbox's default)."""
        return self._replace(isolated=isolated, deadline_s=deadline_s)

    def with_cost_limit(self, cost_limit: float | None) -> "RewardSpec":
        """The same spec with its generated terms' cost per call bounded at cost_limit times the reference
        reward's (see __init__); this spec itself when the limit is already that, or it has no generated code."""
        if not self.code or cost_limit == self.cost_limit:
            return self
        return self._replace(cost_limit=cost_limit)

    def close(self) -> None:
        """Stop the generated terms' worker process, if one runs (a later call starts a new one)."""
        with self._runner_lock:
            runner, self._runner = self._runner, None
        if runner is not None:
            runner.close()

    # ------------------------------------------------------------------ data
    def sign(self, name: str) -> int:
        t = self.term(name)
        return self._generated[name].sign if t.source == "generated" else REGISTRY[name].sign

    def term(self, name: str) -> TermSpec:
        for t in self.terms:
            if t.name == name:
                return t
        raise KeyError(f"no term {quote(name)} in the spec{_suggest(name, self.weights)}")

    def standing_thresholds(self) -> dict[str, float]:
        """{term: stand_below} of the weighted library terms with a standing branch (the command magnitude at or
        below which they ask for both feet down); generated terms are not inspected."""
        return {t.name: float(t.params.get("stand_below", REGISTRY[t.name].params["stand_below"]))
                for t in self.terms
                if t.source == "library" and t.weight and "stand_below" in REGISTRY[t.name].params}

    def standing_below(self, stand_below: float) -> "RewardSpec":
        """A new spec whose library terms with a standing branch take this stand_below where the spec sets
        none of its own (training passes env.gait_stand_below while the stepping feedforward is on, so a spec
        need not repeat the env's threshold); explicit values are kept."""
        unset = {t.name for t in self.terms
                 if t.source == "library" and "stand_below" in REGISTRY[t.name].params and "stand_below" not in t.params}
        if not unset:  # nothing to add: skip re-validating (and re-compiling generated code)
            return self
        terms = [dataclasses.replace(t, params={**t.params, "stand_below": float(stand_below)}) if t.name in unset else t
                 for t in self.terms]
        return self._replace(terms=terms)

    @property
    def weights(self) -> MappingProxyType:
        return MappingProxyType({t.name: t.weight for t in self.terms})

    def with_weights(self, weights: dict) -> "RewardSpec":
        """A new spec with some weights replaced (validated like a loaded spec)."""
        unknown = [n for n in weights if n not in self.weights]
        if unknown:
            raise RewardSpecError("with_weights: " + "; ".join(
                f"no term {quote(n)} in the spec{_suggest(n, self.weights)}" for n in unknown))
        terms = [dataclasses.replace(t, weight=weights.get(t.name, t.weight)) for t in self.terms]
        return self._replace(terms=terms)

    def _replace(self, **changes) -> "RewardSpec":
        kwargs = dict(terms=self.terms, code=self.code, scale=self.scale, name=self.name,
                      description=self.description, only_positive=self.only_positive, isolated=self.isolated,
                      deadline_s=self.deadline_s, cost_limit=self.cost_limit)
        kwargs.update(changes)
        return RewardSpec(**kwargs)

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"name": self.name, "description": self.description, "scale": self.scale}
        if self.only_positive:
            out["only_positive"] = True
        out["terms"] = {t.name: t.to_dict() for t in self.terms}
        if self.code:
            out["code"] = self.code
        return out

    @classmethod
    def from_dict(cls, raw: Any, where: str = "reward spec") -> "RewardSpec":
        if not isinstance(raw, dict):
            raise RewardSpecError(f"{where}: expected a mapping with a 'terms' key, got {type(raw).__name__}")
        unknown = sorted(set(raw) - set(_TOP_KEYS))
        if unknown:
            raise RewardSpecError(f"{where}: unknown keys {unknown} (known: {list(_TOP_KEYS)})")
        raw_terms = raw.get("terms")
        if not isinstance(raw_terms, dict):
            raise RewardSpecError(f"{where}: 'terms' must be a mapping of term name -> weight or "
                                  f"{{weight, params, source}}, got {type(raw_terms).__name__}")
        terms, errors = [], []
        for name, entry in raw_terms.items():
            try:
                terms.append(_term_from(str(name), entry))
            except RewardSpecError as exc:
                errors.append(str(exc))
        if errors:
            raise RewardSpecError(f"{where}: " + "; ".join(errors))
        return cls(terms, code=raw.get("code"), scale=raw.get("scale", 1.0), name=str(raw.get("name", "")),
                   description=str(raw.get("description", "")), only_positive=raw.get("only_positive", False),
                   where=where)

    def to_yaml(self) -> str:
        return yaml.dump(self.to_dict(), sort_keys=False, default_flow_style=None, width=100, Dumper=_Dumper)

    def save(self, path: str | Path) -> Path:
        """Write as JSON for a .json suffix, else YAML."""
        path = Path(path)
        text = json.dumps(self.to_dict(), indent=2) if path.suffix == ".json" else self.to_yaml()
        path.write_text(text)
        return path

    def describe(self) -> str:
        """The spec as text for an LLM prompt: the formula, then one line per term."""
        lines = [f"reward '{self.name}': {self.description}".rstrip(": "),
                 f"per step = {self.scale:g} x dt x sum(sign x weight x term); terms are normalised to [0, 1], "
                 f"weights are in [0, 1]" + ("; total clipped at 0" if self.only_positive else "")]
        for t in self.terms:
            if t.source == "generated":
                sign, doc, params = self._generated[t.name].sign, "generated code", ""
            else:
                lib = REGISTRY[t.name]
                sign, doc = lib.sign, lib.doc
                params = " " + ", ".join(f"{k}={v!r}" for k, v in {**lib.params, **t.params}.items()) if lib.params else ""
            lines.append(f"  {'+' if sign > 0 else '-'} {t.name:<20} w={t.weight:.2f}  {doc}{'  [' + params.strip() + ']' if params else ''}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"RewardSpec({self.name!r}, {len(self.terms)} terms, scale={self.scale})"

    def __eq__(self, other) -> bool:
        return isinstance(other, RewardSpec) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):  # the bound evaluators are not picklable; the data is (worker processes)
        return RewardSpec.from_dict, (self.to_dict(),)


_WARNED: set = set()  # sha256 of generated code whose compiler warnings were logged in this process


def _log_warnings_once(compiled) -> None:
    """The compiler's (captured, bounded) warnings about generated code, logged the first time it compiles here."""
    if not compiled.warnings:
        return
    digest = hashlib.sha256(compiled.source.encode("utf-8", "surrogatepass")).hexdigest()
    if digest not in _WARNED:
        _WARNED.add(digest)
        _log.warning("generated reward code: compiler warning(s):\n  %s", "\n  ".join(compiled.warnings))


# ----------------------------------------------------------------------------- loading
_REFERENCE: list = []  # the reference reward, loaded once: the yardstick of generated terms' cost per step


def _reference_reward() -> "RewardSpec":
    if not _REFERENCE:
        _REFERENCE.append(load_reward_spec(None))
    return _REFERENCE[0]


def load_reward_spec(path: str | Path | None = None) -> RewardSpec:
    """Load a spec from a YAML or JSON file; None loads the hand-written reference (RL-Base)."""
    path = Path(path) if path is not None else package_root() / REFERENCE_SPEC
    if not path.exists():
        raise RewardSpecError(f"reward spec not found: {path}")
    text = path.read_text()
    try:
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise RewardSpecError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from exc
    return RewardSpec.from_dict(raw, where=str(path))


def reward_spec_from_text(text: str, where: str = "reward spec") -> RewardSpec:
    """Parse a spec from YAML (or JSON, which is YAML) text, e.g. an LLM's answer."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RewardSpecError(f"{where}: not valid YAML: {exc}") from exc
    return RewardSpec.from_dict(raw, where=where)


def reward_key(spec: "RewardSpec | dict") -> str | None:
    """What makes two specs the same reward, as 16 hex digits: the scale, only_positive, every term's weight, params
    and source (library names with their aliases resolved), and the generated code (surrounding blank space aside).
    Name and description do not count. None for a mapping without terms (nothing to compare)."""
    raw = spec.to_dict() if isinstance(spec, RewardSpec) else spec
    if not isinstance(raw, dict) or not isinstance(raw.get("terms"), dict):
        return None
    terms = {}
    for name, entry in raw["terms"].items():
        entry = entry if isinstance(entry, dict) else {"weight": entry}
        source = entry.get("source") or "library"
        name = ALIASES.get(str(name), str(name)) if source == "library" else str(name)
        terms[name] = [_number(entry.get("weight")), _plain(entry.get("params") or {}), source]
    body = {"scale": _number(raw.get("scale", 1.0)), "only_positive": bool(raw.get("only_positive", False)),
            "terms": terms, "code": (raw.get("code") or "").strip() or None}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _number(value):
    try:
        return round(float(value), 9)
    except (TypeError, ValueError):
        return str(value)


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _number(value)
    return value


def _term_from(name: str, entry: Any) -> TermSpec:
    if isinstance(entry, (int, float)) and not isinstance(entry, bool):
        entry = {"weight": entry}
    if not isinstance(entry, dict):
        raise RewardSpecError(f"term {quote(name)}: expected a weight or a mapping {{weight, params, source}}, got {entry!r}")
    extra = sorted(set(entry) - {"weight", "params", "source"})
    if extra:
        raise RewardSpecError(f"term {quote(name)}: unknown keys {extra} (known: weight, params, source)")
    if "weight" not in entry:
        raise RewardSpecError(f"term {quote(name)}: missing 'weight'")
    source = entry.get("source", "library")
    if source == "library":
        name = ALIASES.get(name, name)
    return TermSpec(name=name, weight=entry["weight"], params=entry.get("params") or {}, source=source)


def _param_errors(params: dict, defaults: dict) -> list[str]:
    errs = []
    for key, value in params.items():
        if key not in defaults:
            known = ", ".join(f"{k}={v!r}" for k, v in defaults.items()) or "none"
            errs.append(f"unknown param {quote(key)}{_suggest(key, defaults)} (params: {known})")
            continue
        default = defaults[key]
        if isinstance(default, (tuple, list)):
            if not (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value) and value):
                errs.append(f"param {quote(key)} must be a non-empty list of strings, got {value!r}")
        elif isinstance(default, (int, float)) or default is None:
            if value is None and default is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                errs.append(f"param {quote(key)} must be a finite number, got {value!r}")
            elif abs(value) > PARAM_LIMIT:
                errs.append(f"param {quote(key)} {value:g} outside [-{PARAM_LIMIT:g}, {PARAM_LIMIT:g}]")
            elif key in POSITIVE_PARAMS and value <= 0:
                errs.append(f"param {quote(key)} must be > 0, got {value}")
        elif not isinstance(value, type(default)):
            errs.append(f"param {quote(key)} must be {type(default).__name__}, got {value!r}")
    return errs


def _suggest(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.5)
    alias = ALIASES.get(name)
    if alias and alias not in close:
        close.insert(0, alias)
    return f" {quote(name)} (did you mean {', '.join(quote(c) for c in close)}?)" if close else f" {quote(name)}"


class _Dumper(yaml.SafeDumper):
    pass


# multi-line generated code as a literal block so saved specs stay readable
_Dumper.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))
