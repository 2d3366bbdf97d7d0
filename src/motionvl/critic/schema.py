"""One feedback schema for every motion critic (kinematic, transformers VLM, OpenAI-compatible VLM).

A critic looks at one rollout and answers with a :class:`MotionFeedback`:

* ``descriptors`` (the paper's D_motion): what each body region did, as a label plus an
  optional number (``value`` + ``unit``), a confidence in [0, 1] and a short note;
* ``features`` (the paper's F_motion): ``(label, confidence)`` pairs over the fixed vocabulary
  :data:`FEATURE_LABELS`, obtained from the descriptors with :func:`discretise`;
* ``alignment_score``: how well the motion fulfils the task sentence, in [0, 1];
* ``suggestions``: reward-term edits (MoVLR-style biomechanical feedback for the LLM);
* ``better_than_best``: the MoVLR judge's verdict against the best motion so far (``None``
  when there was no previous best or the critic cannot judge);
* ``unjudged``: parts of the task the critic could not judge (e.g. "speed" from a side view);
* ``valid`` / ``error`` / ``raw_text``: whether the critic produced a usable answer, why not,
  and the model's raw output (for logs and the re-ask protocol);
* ``meta``: free-form bookkeeping (attempts, generated token counts, latency, ...).

Descriptor labels are either a feature label (``"knees_bent"``) or a measured quantity from
:data:`QUANTITIES` (``"knee_flexion"`` with a value in degrees). :func:`discretise` maps both
into features: quantities through the thresholds in :data:`QUANTITIES`, feature labels as they
are, synonyms through :data:`LABEL_ALIASES`; within a mutually exclusive group
(:data:`EXCLUSIVE_GROUPS`) only the most confident feature is kept.

Example::

    >>> from motionvl.critic.schema import Descriptor, MotionFeedback, discretise, merge_measurements
    >>> d = [Descriptor("knee_flexion", "knees", 35.0, "deg", 0.8, "bent through stance"),
    ...      Descriptor("torso_upright", "torso", None, None, 0.9, "")]
    >>> discretise(d)
    [('torso_upright', 0.9), ('knees_bent', 0.8)]
    >>> fb = MotionFeedback(critic="openai:some-vlm", task="walk with straight knees",
    ...                     descriptors=d, features=discretise(d), alignment_score=0.3)
    >>> fb2 = merge_measurements(fb, {"knee_flexion": 8.0})   # kinematics says: nearly straight
    >>> fb2.descriptors[0].measured_value, fb2.descriptors[0].contradiction
    (8.0, True)
    >>> fb2.features                       # the contradicted feature is down-weighted
    [('torso_upright', 0.9), ('knees_bent', 0.2)]
    >>> MotionFeedback.from_json(fb2.to_json()) == fb2
    True
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

REGIONS: tuple[str, ...] = ("knees", "ankles", "hips", "torso", "feet", "arms", "whole_body")
"""Body regions a descriptor may refer to (the paper's four plus feet, arms and the whole body)."""

DIRECTIONS: tuple[str, ...] = ("increase", "decrease", "add", "remove")
"""How a suggestion wants a reward term changed."""

FEATURE_LABELS: dict[str, tuple[str, str]] = {
    # knees
    "knees_straight": ("knees", "knees nearly extended through the gait cycle"),
    "knees_bent": ("knees", "knees clearly flexed (crouched) through the gait cycle"),
    "high_knee_lift": ("knees", "swing knee raised high"),
    "low_knee_lift": ("knees", "swing knee barely raised"),
    # ankles
    "ankles_stiff": ("ankles", "little ankle motion"),
    "ankles_flexing": ("ankles", "visible dorsi/plantar flexion"),
    "heel_strike": ("ankles", "foot lands heel first"),
    "toe_off": ("ankles", "foot leaves the ground with a push-off from the toes"),
    # hips
    "hips_level": ("hips", "pelvis stays level"),
    "hips_swaying": ("hips", "pelvis sways or drops side to side"),
    "wide_stance": ("hips", "feet far apart laterally"),
    "narrow_stance": ("hips", "feet close together or crossing"),
    # torso
    "torso_upright": ("torso", "trunk vertical"),
    "torso_leaning_forward": ("torso", "trunk pitched forward"),
    "torso_leaning_backward": ("torso", "trunk pitched backward"),
    "torso_leaning_sideways": ("torso", "trunk rolled to one side"),
    "torso_wobbling": ("torso", "trunk oscillates"),
    # feet
    "feet_dragging": ("feet", "swing foot scuffs or drags along the ground"),
    "high_foot_clearance": ("feet", "swing foot lifted well clear of the ground"),
    "feet_sliding": ("feet", "stance foot slides on the ground"),
    "shuffling": ("feet", "short, low, rapid steps"),
    "stomping": ("feet", "feet land hard"),
    # arms
    "arms_swinging": ("arms", "arms swing with the gait"),
    "arms_still": ("arms", "arms held still"),
    "arms_flailing": ("arms", "arms move erratically"),
    # whole body
    "walking_forward": ("whole_body", "progressing forward"),
    "walking_backward": ("whole_body", "progressing backward"),
    "moving_sideways": ("whole_body", "progressing sideways"),
    "turning": ("whole_body", "heading changes"),
    "standing_still": ("whole_body", "no net progression"),
    "running": ("whole_body", "flight phases between steps"),
    "hopping": ("whole_body", "both feet leave the ground together"),
    "fell": ("whole_body", "the robot fell or its trunk touched the ground"),
    "stumbled": ("whole_body", "lost balance briefly and recovered"),
    "asymmetric_gait": ("whole_body", "left and right steps differ clearly"),
    "symmetric_gait": ("whole_body", "left and right steps look alike"),
    "smooth_motion": ("whole_body", "motion is smooth"),
    "jerky_motion": ("whole_body", "motion is jerky or vibrating"),
    "too_slow": ("whole_body", "slower than the task asks"),
    "too_fast": ("whole_body", "faster than the task asks"),
}
"""The feature vocabulary (label -> (region, meaning)) every critic maps into."""

EXCLUSIVE_GROUPS: tuple[tuple[str, ...], ...] = (
    ("knees_straight", "knees_bent"),
    ("high_knee_lift", "low_knee_lift"),
    ("ankles_stiff", "ankles_flexing"),
    ("hips_level", "hips_swaying"),
    ("wide_stance", "narrow_stance"),
    ("torso_upright", "torso_leaning_forward", "torso_leaning_backward"),
    ("feet_dragging", "high_foot_clearance"),
    ("arms_swinging", "arms_still"),
    ("walking_forward", "walking_backward", "standing_still"),
    ("asymmetric_gait", "symmetric_gait"),
    ("smooth_motion", "jerky_motion"),
    ("too_slow", "too_fast"),
)
"""Features that cannot hold together; :func:`discretise` keeps the most confident one."""

_GROUP_OF: dict[str, tuple[str, ...]] = {lab: g for g in EXCLUSIVE_GROUPS for lab in g}


@dataclasses.dataclass(frozen=True)
class Quantity:
    """A measurable descriptor quantity, its canonical unit and how it maps to features."""

    region: str
    unit: str
    tolerance: float
    """Default absolute tolerance (canonical unit) before a stated value contradicts a measured one."""
    rules: tuple[tuple[float | None, float | None, str], ...]
    """(low, high, feature): the feature holds when low <= value < high (None = unbounded)."""
    meaning: str
    valid: tuple[float, float] = (-math.inf, math.inf)
    """The values a body can show (canonical unit): a stated value outside is refused and re-asked."""


QUANTITIES: dict[str, Quantity] = {
    "knee_flexion": Quantity("knees", "deg", 10.0,
                             ((None, 15.0, "knees_straight"), (30.0, None, "knees_bent")),
                             "mean knee flexion angle while the foot is on the ground, 0 = straight", (-30.0, 180.0)),
    "knee_lift": Quantity("knees", "m", 0.05,
                          ((0.15, None, "high_knee_lift"), (None, 0.05, "low_knee_lift")),
                          "mean peak rise of the swing knee", (-1.0, 2.0)),
    "torso_pitch": Quantity("torso", "deg", 7.0,
                            ((None, -15.0, "torso_leaning_backward"), (-8.0, 8.0, "torso_upright"),
                             (15.0, None, "torso_leaning_forward")),
                            "mean trunk pitch, positive = leaning forward", (-180.0, 180.0)),
    "torso_roll": Quantity("torso", "deg", 7.0,
                           ((None, -12.0, "torso_leaning_sideways"), (12.0, None, "torso_leaning_sideways")),
                           "mean trunk roll", (-180.0, 180.0)),
    "foot_clearance": Quantity("feet", "m", 0.03,
                               ((None, 0.03, "feet_dragging"), (0.12, None, "high_foot_clearance")),
                               "mean peak swing-foot height above the ground", (-0.5, 2.0)),
    "stance_width": Quantity("hips", "m", 0.05,
                             ((None, 0.08, "narrow_stance"), (0.35, None, "wide_stance")),
                             "mean lateral distance between the feet", (-1.0, 2.0)),
    "forward_speed": Quantity("whole_body", "m/s", 0.15,
                              ((None, -0.1, "walking_backward"), (-0.05, 0.05, "standing_still"),
                               (0.1, None, "walking_forward")),
                              "mean forward velocity of the base", (-10.0, 10.0)),
    "gait_asymmetry": Quantity("whole_body", "", 0.1,
                               ((None, 0.1, "symmetric_gait"), (0.2, None, "asymmetric_gait")),
                               "0 = left and right steps identical, 1 = completely different", (0.0, 1.0)),
    "fell": Quantity("whole_body", "", 0.5, ((0.5, None, "fell"),), "1 if the robot fell", (0.0, 1.0)),
}
"""Measured quantities (label -> definition) shared by the VLM prompt and the kinematic critic."""

LABEL_ALIASES: dict[str, str] = {
    "straight_knees": "knees_straight", "knees_extended": "knees_straight", "extended_knees": "knees_straight",
    "bent_knees": "knees_bent", "crouched": "knees_bent", "knees_flexed": "knees_bent", "crouch_gait": "knees_bent",
    "upright_torso": "torso_upright", "torso_vertical": "torso_upright", "upright": "torso_upright",
    "leaning_forward": "torso_leaning_forward", "forward_lean": "torso_leaning_forward",
    "leaning_backward": "torso_leaning_backward", "backward_lean": "torso_leaning_backward",
    "dragging_feet": "feet_dragging", "foot_dragging": "feet_dragging", "foot_scuffing": "feet_dragging",
    "high_clearance": "high_foot_clearance", "foot_clearance_high": "high_foot_clearance",
    "falling": "fell", "fallen": "fell", "fall": "fell", "fell_over": "fell",
    "asymmetric": "asymmetric_gait", "limping": "asymmetric_gait", "symmetric": "symmetric_gait",
    "walks_forward": "walking_forward", "forward_walking": "walking_forward", "moving_forward": "walking_forward",
    "standing": "standing_still", "stationary": "standing_still", "not_moving": "standing_still",
    "knee_angle": "knee_flexion", "knee_bend": "knee_flexion", "trunk_pitch": "torso_pitch",
    "trunk_lean": "torso_pitch", "torso_lean": "torso_pitch", "trunk_roll": "torso_roll",
    "step_height": "foot_clearance", "swing_height": "foot_clearance", "speed": "forward_speed",
    "walking_speed": "forward_speed", "velocity": "forward_speed", "base_speed": "forward_speed",
}
"""Common synonyms a model writes, mapped to vocabulary labels or quantities."""

_UNIT_ALIASES = {
    "deg": "deg", "degree": "deg", "degrees": "deg", "°": "deg", "rad": "rad", "radian": "rad", "radians": "rad",
    "m": "m", "meter": "m", "meters": "m", "metre": "m", "metres": "m", "cm": "cm", "mm": "mm",
    "m/s": "m/s", "mps": "m/s", "m/sec": "m/s", "meters/second": "m/s", "cm/s": "cm/s", "km/h": "km/h",
    "%": "%", "percent": "%", "": "", "none": "", "ratio": "", "fraction": "",
}
_UNIT_TO_CANONICAL: dict[tuple[str, str], float] = {
    ("rad", "deg"): 180.0 / math.pi, ("cm", "m"): 0.01, ("mm", "m"): 0.001,
    ("cm/s", "m/s"): 0.01, ("km/h", "m/s"): 1.0 / 3.6, ("%", ""): 0.01,
}


class SchemaError(ValueError):
    """A feedback object violates the schema; the message names the offending field."""


def normalise_label(label: str) -> str:
    """Lower-case, snake_case and alias-resolve a label ("Straight knees" -> "knees_straight")."""
    s = re.sub(r"[^a-z0-9]+", "_", str(label).strip().lower()).strip("_")
    return LABEL_ALIASES.get(s, s)


def canonical_value(label: str, value: float | None, unit: str | None) -> float | None:
    """Convert a descriptor value to its quantity's canonical unit (rad->deg, cm->m, %->fraction).

    Values of unknown labels or in units that cannot be converted are returned unchanged.
    """
    if value is None:
        return None
    q = QUANTITIES.get(normalise_label(label))
    if q is None:
        return value
    u = _UNIT_ALIASES.get((unit or "").strip().lower(), (unit or "").strip().lower())
    if u == q.unit or not u:
        return value
    return value * _UNIT_TO_CANONICAL.get((u, q.unit), 1.0)


def _check_unit_interval(name: str, x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise SchemaError(f"{name}: expected a number in [0, 1], got {x!r}")
    x = float(x)
    if not (0.0 <= x <= 1.0) or math.isnan(x):
        raise SchemaError(f"{name}: {x!r} is outside [0, 1]")
    return x


def _check_optional_number(name: str, x: Any) -> float | None:
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(float(x)):
        raise SchemaError(f"{name}: expected a finite number or null, got {x!r}")
    return float(x)


def _check_str(name: str, x: Any, allow_empty: bool = True) -> str:
    if not isinstance(x, str):
        raise SchemaError(f"{name}: expected a string, got {type(x).__name__} {x!r}")
    if not allow_empty and not x.strip():
        raise SchemaError(f"{name}: must not be empty")
    return x


@dataclasses.dataclass
class Descriptor:
    """One observation about one body region (an element of D_motion)."""

    label: str
    region: str
    value: float | None = None
    unit: str | None = None
    confidence: float = 1.0
    note: str = ""
    measured_value: float | None = None
    """Value the kinematic analysis measured for the same quantity (set by :func:`merge_measurements`)."""
    contradiction: bool = False
    """The stated value/label disagrees with the measurement beyond tolerance (likely hallucinated)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, where: str = "descriptor") -> None:
        _check_str(f"{where}.label", self.label, allow_empty=False)
        if self.region not in REGIONS:
            raise SchemaError(f"{where}.region: {self.region!r} is not one of {list(REGIONS)}")
        self.value = _check_optional_number(f"{where}.value", self.value)
        if self.unit is not None:
            _check_str(f"{where}.unit", self.unit)
        self.confidence = _check_unit_interval(f"{where}.confidence", self.confidence)
        _check_str(f"{where}.note", self.note)
        self.measured_value = _check_optional_number(f"{where}.measured_value", self.measured_value)
        if not isinstance(self.contradiction, bool):
            raise SchemaError(f"{where}.contradiction: expected a bool, got {self.contradiction!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str = "descriptor") -> "Descriptor":
        if not isinstance(d, dict):
            raise SchemaError(f"{where}: expected an object, got {type(d).__name__}")
        return _construct(cls, d, where)


@dataclasses.dataclass
class Suggestion:
    """A proposed reward-term edit ("increase knee_extension: knees stay bent")."""

    term: str
    direction: str
    reason: str = ""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, where: str = "suggestion") -> None:
        _check_str(f"{where}.term", self.term, allow_empty=False)
        if self.direction not in DIRECTIONS:
            raise SchemaError(f"{where}.direction: {self.direction!r} is not one of {list(DIRECTIONS)}")
        _check_str(f"{where}.reason", self.reason)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str = "suggestion") -> "Suggestion":
        if not isinstance(d, dict):
            raise SchemaError(f"{where}: expected an object, got {type(d).__name__}")
        return _construct(cls, d, where)


def _construct(cls, d: dict, where: str):
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise SchemaError(f"{where}: unknown field(s) {unknown}")
    obj = cls.__new__(cls)
    for f in dataclasses.fields(cls):
        if f.name in d:
            val = d[f.name]
        elif f.default is not dataclasses.MISSING:
            val = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            val = f.default_factory()  # type: ignore[misc]
        else:
            raise SchemaError(f"{where}.{f.name}: missing")
        setattr(obj, f.name, val)
    obj.validate(where)
    return obj


class _JsonRecord:
    """to_json / from_json over a class's to_dict / from_dict; `_where` names it in errors."""

    _where = "record"

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_json(cls, text: str):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise SchemaError(f"{cls._where}: not JSON ({e})") from e
        return cls.from_dict(obj)


@dataclasses.dataclass
class MotionFeedback(_JsonRecord):
    """What one critic says about one rollout. See the module docstring."""

    _where = "feedback"

    critic: str
    task: str
    descriptors: list[Descriptor] = dataclasses.field(default_factory=list)
    features: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    alignment_score: float = 0.0
    suggestions: list[Suggestion] = dataclasses.field(default_factory=list)
    better_than_best: bool | None = None
    unjudged: list[str] = dataclasses.field(default_factory=list)
    valid: bool = True
    error: str | None = None
    raw_text: str | None = None
    meta: dict = dataclasses.field(default_factory=dict)
    """Bookkeeping that is not part of the judgement (attempts, token counts, latency, ...)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, where: str = "feedback") -> None:
        _check_str(f"{where}.critic", self.critic, allow_empty=False)
        _check_str(f"{where}.task", self.task)
        if not isinstance(self.descriptors, list):
            raise SchemaError(f"{where}.descriptors: expected a list")
        for i, d in enumerate(self.descriptors):
            if not isinstance(d, Descriptor):
                raise SchemaError(f"{where}.descriptors[{i}]: expected a Descriptor, got {type(d).__name__}")
            d.validate(f"{where}.descriptors[{i}]")
        if not isinstance(self.features, list):
            raise SchemaError(f"{where}.features: expected a list")
        feats = []
        for i, f in enumerate(self.features):
            if not isinstance(f, (tuple, list)) or len(f) != 2:
                raise SchemaError(f"{where}.features[{i}]: expected a (label, confidence) pair, got {f!r}")
            lab, conf = f
            if lab not in FEATURE_LABELS:
                raise SchemaError(f"{where}.features[{i}]: {lab!r} is not in the feature vocabulary")
            feats.append((lab, _check_unit_interval(f"{where}.features[{i}].confidence", conf)))
        self.features = feats
        self.alignment_score = _check_unit_interval(f"{where}.alignment_score", self.alignment_score)
        if not isinstance(self.suggestions, list):
            raise SchemaError(f"{where}.suggestions: expected a list")
        for i, s in enumerate(self.suggestions):
            if not isinstance(s, Suggestion):
                raise SchemaError(f"{where}.suggestions[{i}]: expected a Suggestion, got {type(s).__name__}")
            s.validate(f"{where}.suggestions[{i}]")
        if self.better_than_best is not None and not isinstance(self.better_than_best, bool):
            raise SchemaError(f"{where}.better_than_best: expected true, false or null, got {self.better_than_best!r}")
        if not isinstance(self.unjudged, list) or not all(isinstance(u, str) for u in self.unjudged):
            raise SchemaError(f"{where}.unjudged: expected a list of strings")
        if not isinstance(self.valid, bool):
            raise SchemaError(f"{where}.valid: expected a bool")
        if self.error is not None:
            _check_str(f"{where}.error", self.error)
        if self.raw_text is not None:
            _check_str(f"{where}.raw_text", self.raw_text)
        if not isinstance(self.meta, dict):
            raise SchemaError(f"{where}.meta: expected an object")

    def to_dict(self) -> dict:
        return {
            "critic": self.critic,
            "task": self.task,
            "descriptors": [d.to_dict() for d in self.descriptors],
            "features": [[lab, conf] for lab, conf in self.features],
            "alignment_score": self.alignment_score,
            "suggestions": [s.to_dict() for s in self.suggestions],
            "better_than_best": self.better_than_best,
            "unjudged": list(self.unjudged),
            "valid": self.valid,
            "error": self.error,
            "raw_text": self.raw_text,
            "meta": _jsonable(self.meta),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "MotionFeedback":
        if not isinstance(d, dict):
            raise SchemaError(f"feedback: expected an object, got {type(d).__name__}")
        d = dict(d)
        if not isinstance(d.get("descriptors", []), list):
            raise SchemaError("feedback.descriptors: expected a list")
        if not isinstance(d.get("suggestions", []), list):
            raise SchemaError("feedback.suggestions: expected a list")
        d["descriptors"] = [Descriptor.from_dict(x, f"feedback.descriptors[{i}]")
                            for i, x in enumerate(d.get("descriptors", []))]
        d["suggestions"] = [Suggestion.from_dict(x, f"feedback.suggestions[{i}]")
                            for i, x in enumerate(d.get("suggestions", []))]
        if not isinstance(d.get("features", []), list):
            raise SchemaError("feedback.features: expected a list")
        d["features"] = [tuple(f) if isinstance(f, list) else f for f in d.get("features", [])]
        return _construct(cls, d, "feedback")

    @classmethod
    def invalid(cls, critic: str, task: str, error: str, raw_text: str | None = None,
                meta: dict | None = None) -> "MotionFeedback":
        """A feedback that says the critic produced nothing usable (never raises)."""
        return cls(critic=critic or "unknown", task=task or "", valid=False, error=str(error),
                   raw_text=raw_text, meta=dict(meta or {}))



PREFERENCES: tuple[str, ...] = ("first", "second")
"""What a comparison may prefer; None is an abstention."""


@dataclasses.dataclass
class Comparison(_JsonRecord):
    """A critic's answer to "which of two rollouts fulfils the task better?" (MoVLR's judge).

    The search asks in both orders and counts an answer only when the two agree (`mirrored`).
    """

    _where = "comparison"

    preferred: str | None
    """"first", "second", or None when the critic abstains (no clear difference, or cannot tell)."""
    confidence: float
    """How sure the critic is of its answer (of the abstention too), in [0, 1]."""
    reason: str
    """Why, in a sentence or two (measured values where the critic has them)."""
    valid: bool = True
    """False when the critic produced no usable answer (`error` says why); then preferred is None."""
    meta: dict = dataclasses.field(default_factory=dict)
    """Bookkeeping that is not part of the judgement (scores, attempts, token counts, latency, ...)."""
    critic: str = ""
    """Name of the critic that answered."""
    task: str = ""
    """The task sentence the rollouts were judged against."""
    error: str | None = None
    """Why the answer is not valid."""
    raw_text: str | None = None
    """The model's last raw answer (model-backed critics)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, where: str = "comparison") -> None:
        if self.preferred is not None and self.preferred not in PREFERENCES:
            raise SchemaError(f"{where}.preferred: {self.preferred!r} is not one of {list(PREFERENCES)} or null")
        self.confidence = _check_unit_interval(f"{where}.confidence", self.confidence)
        _check_str(f"{where}.reason", self.reason)
        if not isinstance(self.valid, bool):
            raise SchemaError(f"{where}.valid: expected a bool")
        if not self.valid and self.preferred is not None:
            raise SchemaError(f"{where}.preferred: an invalid comparison prefers nothing")
        if not isinstance(self.meta, dict):
            raise SchemaError(f"{where}.meta: expected an object")
        _check_str(f"{where}.critic", self.critic)
        _check_str(f"{where}.task", self.task)
        for name in ("error", "raw_text"):
            if getattr(self, name) is not None:
                _check_str(f"{where}.{name}", getattr(self, name))

    def mirrored(self) -> "Comparison":
        """The same answer as seen with first and second swapped."""
        swap = {"first": "second", "second": "first", None: None}
        return dataclasses.replace(self, preferred=swap[self.preferred], meta=dict(self.meta))

    def to_dict(self) -> dict:
        return {f.name: (_jsonable(getattr(self, f.name)) if f.name == "meta" else getattr(self, f.name))
                for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, d: dict) -> "Comparison":
        if not isinstance(d, dict):
            raise SchemaError(f"comparison: expected an object, got {type(d).__name__}")
        return _construct(cls, d, "comparison")

    @classmethod
    def invalid(cls, critic: str, task: str, error: str, raw_text: str | None = None,
                meta: dict | None = None) -> "Comparison":
        """A comparison that says the critic produced nothing usable (never raises)."""
        return cls(preferred=None, confidence=0.0, reason="", valid=False, meta=dict(meta or {}),
                   critic=critic or "unknown", task=task or "", error=str(error), raw_text=raw_text)


# ----------------------------------------------------------------------------- what a model writes
# The answers a model-backed critic must write, as JSON schemas (usable as an API response_format)
# with an example each; the prompts show them and the parser reads them (motionvl.critic.parsing).

ANSWER_SCHEMA: dict = {
    "type": "object",
    "required": ["descriptors", "alignment_score"],
    "properties": {
        "descriptors": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["label", "region", "confidence"],
                "properties": {
                    "label": {"type": "string", "description": "a feature label or a quantity name"},
                    "region": {"enum": list(REGIONS)},
                    "value": {"type": ["number", "null"]},
                    "unit": {"type": ["string", "null"]},
                    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                    "note": {"type": "string"},
                },
            },
        },
        "alignment_score": {"type": "number", "minimum": 0, "maximum": 1},
        "suggestions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["term", "direction"],
                "properties": {
                    "term": {"type": "string"},
                    "direction": {"enum": list(DIRECTIONS)},
                    "reason": {"type": "string"},
                },
            },
        },
        "better_than_best": {"type": ["boolean", "null"]},
        "unjudged": {"type": "array", "items": {"type": "string"}},
    },
}
"""JSON schema of a critique answer: the model-written fields of `MotionFeedback`."""

ANSWER_EXAMPLE: dict = {
    "descriptors": [
        {"label": "knee_flexion", "region": "knees", "value": 35, "unit": "deg", "confidence": 0.7,
         "note": "both knees stay bent through stance from t=0.2 s on"},
        {"label": "torso_leaning_forward", "region": "torso", "value": None, "unit": None, "confidence": 0.8,
         "note": "trunk pitched forward in every frame"},
    ],
    "alignment_score": 0.35,
    "suggestions": [{"term": "knee_extension", "direction": "increase", "reason": "the task asks for straight knees"}],
    "better_than_best": None,
    "unjudged": ["exact walking speed"],
}
"""The example critique answer shown in the prompt (tests check that it parses)."""

ABSTAIN = "neither"
"""What a model writes to abstain in a comparison answer."""

COMPARISON_SCHEMA: dict = {
    "type": "object",
    "required": ["preferred", "confidence"],
    "properties": {
        "preferred": {"enum": [*PREFERENCES, ABSTAIN]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "reason": {"type": "string"},
    },
}
"""JSON schema of a comparison answer: the model-written fields of `Comparison`."""

COMPARISON_EXAMPLE: dict = {
    "preferred": "second",
    "confidence": 0.7,
    "reason": "the second rollout keeps its knees nearly straight through stance; the first walks crouched",
}
"""The example comparison answer shown in the prompt (tests check that it parses)."""


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (str, bool)) or x is None:
        return x
    if isinstance(x, (int, float)):
        return x
    if hasattr(x, "item"):  # numpy scalar
        return x.item()
    return str(x)


def quantity_features(label: str, value: float | None, unit: str | None = None) -> list[str]:
    """Features implied by a measured quantity (``("knee_flexion", 35, "deg") -> ["knees_bent"]``)."""
    q = QUANTITIES.get(normalise_label(label))
    v = canonical_value(label, value, unit)
    if q is None or v is None:
        return []
    return [feat for lo, hi, feat in q.rules if (lo is None or v >= lo) and (hi is None or v < hi)]


def discretise(descriptors: list[Descriptor], min_confidence: float = 0.0,
               contradiction_weight: float = 0.25) -> list[tuple[str, float]]:
    """Map descriptors (D_motion) to features F_motion = [(label, confidence)], most confident first.

    * a descriptor labelled with a vocabulary feature (or an alias of one) gives that feature;
    * a descriptor labelled with a quantity from :data:`QUANTITIES` and carrying a value gives
      the features its thresholds select (a value between two bands gives none);
    * a descriptor flagged ``contradiction`` has its confidence multiplied by
      ``contradiction_weight`` (0 drops it);
    * the same feature from several descriptors keeps the highest confidence; within an
      exclusive group only the most confident feature survives;
    * features below ``min_confidence`` are dropped.
    """
    best: dict[str, float] = {}
    for d in descriptors:
        conf = d.confidence * (contradiction_weight if d.contradiction else 1.0)
        lab = normalise_label(d.label)
        feats = [lab] if lab in FEATURE_LABELS else quantity_features(lab, d.value, d.unit)
        for f in feats:
            if conf > best.get(f, -1.0):
                best[f] = conf
    kept: dict[str, float] = {}
    for f, c in sorted(best.items(), key=lambda kv: (-kv[1], kv[0])):
        group = _GROUP_OF.get(f, ())
        if any(g in kept for g in group if g != f):
            continue
        if c >= min_confidence and c > 0.0:
            kept[f] = round(c, 6)
    return sorted(kept.items(), key=lambda kv: (-kv[1], kv[0]))


def merge_measurements(feedback: MotionFeedback, measured: dict[str, float],
                       tolerances: dict[str, float] | None = None,
                       relative_tolerance: float = 0.25,
                       contradiction_weight: float = 0.25) -> MotionFeedback:
    """Cross-check a (VLM) feedback against kinematic measurements; returns a new feedback.

    ``measured`` maps quantity labels (:data:`QUANTITIES`, canonical units) to measured values.
    For each descriptor:

    * if it states a number for a measured quantity, ``measured_value`` is attached and
      ``contradiction`` is set when ``|stated - measured|`` exceeds the tolerance
      (``tolerances[label]``, else the quantity's default, else ``relative_tolerance * |measured|``);
    * if it states a feature label (e.g. "knees_straight") while a measured quantity implies
      another feature of the same exclusive group (knee_flexion 40 deg -> "knees_bent"), the
      measured value of that quantity is attached and ``contradiction`` is set;
    * otherwise it is left unchanged.

    Features are recomputed with :func:`discretise` so contradicted observations lose weight;
    ``meta["contradictions"]`` lists the contradicted descriptor labels.
    """
    tolerances = dict(tolerances or {})
    meas = {normalise_label(k): float(v) for k, v in measured.items() if v is not None}
    implied: dict[str, tuple[str, float]] = {}  # feature -> (quantity, value)
    for qlab, v in meas.items():
        for f in quantity_features(qlab, v):
            implied[f] = (qlab, v)

    new_desc: list[Descriptor] = []
    contradicted: list[str] = []
    for d in feedback.descriptors:
        d = dataclasses.replace(d)
        lab = normalise_label(d.label)
        if lab in meas and d.value is not None:
            m = meas[lab]
            stated = canonical_value(lab, d.value, d.unit)
            q = QUANTITIES.get(lab)
            tol = tolerances.get(lab, tolerances.get(d.label, q.tolerance if q else relative_tolerance * abs(m)))
            d.measured_value = m
            d.contradiction = bool(stated is not None and abs(stated - m) > tol + 1e-12)
        elif lab in FEATURE_LABELS:
            rivals = [g for g in _GROUP_OF.get(lab, ()) if g != lab and g in implied]
            if rivals:
                d.measured_value = implied[rivals[0]][1]
                d.contradiction = True
            elif lab in implied:
                d.measured_value = implied[lab][1]
        if d.contradiction:
            contradicted.append(d.label)
        new_desc.append(d)
    meta = dict(feedback.meta)
    meta["contradictions"] = contradicted
    return dataclasses.replace(
        feedback, descriptors=new_desc,
        features=discretise(new_desc, contradiction_weight=contradiction_weight) if new_desc else list(feedback.features),
        meta=meta,
    )
