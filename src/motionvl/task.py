"""What a task sentence asks of the motion, read with keyword rules (no model).

`parse_task("walk forward with straight knees at 0.6 m/s")` gives a `TaskSpec`: the gait (walk /
run / stand / turn / step in place / hop), direction, speed (in m/s, from "0.6 m/s", "2 km/h", ...),
turn rate, knees (straight / bent), torso (upright / leaning), steps (high / clear / low / long /
short), stability, symmetry, slip, sway and stance width. The phrases no rule understood are kept
in `unjudged`, so a reader (the kinematic critic, the rule-based reward synthesizer) can say what it
could not judge instead of guessing.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

from motionvl.robot import ConfigError
from motionvl.sim.terrain import KINDS


@dataclasses.dataclass
class TaskSpec:
    """What a task sentence asks for, as far as the rules understand it."""

    text: str
    gait: str | None = None
    """"walk", "run", "stand", "step" (in place), "turn", "hop" or None."""
    direction: str | None = None
    """"forward", "backward", "left", "right", "sideways" or None."""
    turn: str | None = None
    """"left" / "right" / "any" when turning is asked for."""
    speed: float | None = None
    """Asked speed in m/s (magnitude)."""
    speed_word: str | None = None
    """"slow" or "fast" when the speed is only qualitative."""
    turn_rate: float | None = None
    """Asked yaw rate in rad/s (magnitude)."""
    knees: str | None = None
    """"straight" or "bent"."""
    torso: str | None = None
    """"upright", "forward" or "backward"."""
    steps: list = dataclasses.field(default_factory=list)
    """Any of "high", "clear", "low", "long", "short"."""
    stable: bool = False
    """No fall and a steady trunk asked ("without falling", "stable", "smoothly")."""
    symmetric: bool = False
    """Left and right steps alike asked ("symmetric", "evenly")."""
    no_slip: bool = False
    """Stance feet that do not slide asked ("without slipping")."""
    low_sway: bool = False
    """A level pelvis without sideways sway asked ("without swaying", "level hips")."""
    stance: str | None = None
    """"wide" or "narrow"."""
    in_place: bool = False
    """No net travel asked ("in place", "on the spot")."""
    terrain: str | None = None
    """The ground named: one of TERRAINS ("rough", "stairs_up", ...); None: none named (flat)."""
    terrain_level: int | None = None
    """A terrain difficulty level named ("at level 3"); None: none."""
    understood: list = dataclasses.field(default_factory=list)
    """The phrases the rules matched."""
    unjudged: list = dataclasses.field(default_factory=list)
    """The parts of the sentence no rule understood."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


_NUM = r"(\d+(?:\.\d+)?|\.\d+)"
_BODY_PARTS = r"(?:arms?|legs?|foot|feet|knees?|hands?|hips?|ankles?|shoulders?|elbows?|side|eye|ear)"

_SPEED_UNITS = {"m/s": 1.0, "mps": 1.0, "meters per second": 1.0, "metres per second": 1.0, "meter per second": 1.0,
                "metre per second": 1.0, "km/h": 1 / 3.6, "kph": 1 / 3.6, "cm/s": 0.01}


def _speed_unit(u: str) -> float:
    u = re.sub(r"\s+", " ", u.strip().lower()).replace(" / ", "/").replace(" /", "/").replace("/ ", "/")
    return _SPEED_UNITS.get(u, 1.0)


# (field, value, pattern); applied in order, each match blanks its text so later rules and the
# "unjudged" leftovers do not see it again.
_STAIRS = r"(?:stairs?|staircase|stairway|steps|flights?\s+of\s+stairs)"
_SLOPE = r"(?:slopes?|ramps?|inclines?|hills?|hillside)"
_GROUND = r"(?:ground|terrain|floor|surfaces?|paths?|road|trail)"
_RULES: list[tuple[str, Any, str]] = [
    # terrain first: "up the steps" must not read as a gait or a step style
    ("terrain", "stairs_down", r"\b(?:down|descend(?:s|ing)?)\s+(?:the\s+|a\s+|some\s+)?" + _STAIRS + r"\b|\bdownstairs\b"),
    ("terrain", "stairs_up", r"\b(?:up|climb(?:s|ing)?|ascend(?:s|ing)?|onto|on|over)\s+(?:the\s+|a\s+|some\s+)?"
                             + _STAIRS + r"\b|\bupstairs\b|\bstair[- ]?climbing\b|\bstairs\b|\bstaircase\b"),
    ("terrain", "slope_down", r"\bdown\s+(?:the\s+|a\s+)?" + _SLOPE + r"\b|\bdownhill\b|\bdown\s+(?:an?\s+)?(?:decline|gradient)\b"),
    ("terrain", "slope_up", r"\b(?:up|climb(?:s|ing)?|ascend(?:s|ing)?|on|onto)\s+(?:the\s+|a\s+|an\s+)?" + _SLOPE
                            + r"\b|\buphill\b|\b" + _SLOPE + r"\b"),
    ("terrain", "rough", r"\b(?:rough|uneven|bumpy|rocky|irregular|broken|rugged)\s+" + _GROUND + r"\b"
                         r"|\b(?:rough|uneven|bumpy|rocky|rugged)\b"),
    ("terrain", "flat", r"\b(?:flat|level|even|smooth)\s+" + _GROUND + r"\b"),
    ("terrain_level", None, r"\b(?:(?:terrain|difficulty)\s+)?level\s+(\d+)\b|\bdifficulty\s+(\d+)\b"),
    ("gait", "step", r"\b(?:step(?:s|ping)?|walk(?:s|ing)?|march(?:es|ing)?|jog(?:s|ging)?)\s+in\s+place\b|\bstep(?:s|ping)?\s+on\s+the\s+spot\b"),
    ("speed", None, _NUM + r"\s*(m\s*/\s*s(?:ec)?|mps|met(?:er|re)s?\s+per\s+second|km\s*/\s*h|kph|cm\s*/\s*s)\b"),
    ("speed", None, r"\bspeed\s+(?:of\s+)?" + _NUM + r"\b"),
    ("turn_rate", None, _NUM + r"\s*(rad\s*/\s*s|radians?\s+per\s+second|deg(?:rees?)?\s*/\s*s|degrees?\s+per\s+second)"),
    ("knees", "straight", r"\b(?:straight|extended|stiff|locked|straightened|unbent)\s+(?:knees?|legs?)\b"
                          r"|\b(?:knees?|legs?)\s+(?:kept\s+|held\s+|fully\s+)?(?:straight|extended|stiff|locked|straightened)\b"
                          r"|\bstraight[- ]legged\b|\bstiff[- ]legged\b"
                          r"|\bwithout\s+bending\s+(?:the\s+|its\s+|his\s+|her\s+)?knees\b"),
    ("knees", "bent", r"\b(?:bent|flexed|bending|crouched|soft)\s+(?:knees?|legs?)\b|\b(?:knees?|legs?)\s+(?:kept\s+)?(?:bent|flexed)\b"
                      r"|\bcrouch(?:ed|ing|es)?\b|\bsquat(?:s|ted|ting)?\b|\bbend(?:ing|s)?\s+(?:the\s+|its\s+)?knees\b"),
    ("steps", "high", r"\bhigh\s+(?:steps?|knees?|knee\s+lifts?|foot\s+clearance|clearance|leg\s+lifts?)\b"
                      r"|\b(?:lift(?:s|ing)?|rais(?:e|es|ing))\s+(?:the\s+|its\s+|his\s+|her\s+|their\s+)?(?:knees?|feet|foot|legs?)"
                      r"(?:\s+high(?:er)?)?\b|\bknees?\s+high\b|\bhigh[- ]stepping\b|\bmarch(?:es|ing)?\b"),
    ("steps", "clear", r"\bwithout\s+(?:dragging|scuffing)(?:\s+(?:the\s+|its\s+)?feet)?\b|\bdon'?t\s+drag(?:\s+(?:the\s+|its\s+)?feet)?\b"
                       r"|\bno\s+(?:foot\s+)?dragging\b"),
    ("steps", "low", r"\bshuffl(?:e|es|ing)\b"),
    ("steps", "long", r"\b(?:long|big|large|wide|longer)\s+(?:strides?|steps?)\b"),
    ("steps", "short", r"\b(?:short|small|tiny|little|shorter)\s+(?:strides?|steps?)\b"),
    ("torso", "forward", r"\blean(?:s|ing|ed)?\s+forward\b|\bforward\s+lean\b|\bhunch(?:ed|ing)?(?:\s+over)?\b|\bstoop(?:ed|ing)?\b"),
    ("torso", "backward", r"\blean(?:s|ing|ed)?\s+back(?:ward|wards)?\b|\bbackward\s+lean\b"),
    ("torso", "upright", r"\b(?:upright|erect|vertical|straight)\s+(?:torso|trunk|back|posture|body|spine|upper\s+body)\b"
                         r"|\b(?:torso|trunk|back|posture|body|spine|upper\s+body)\s+(?:kept\s+|held\s+)?(?:upright|erect|vertical|straight)\b"
                         r"|\bupright\b|\b(?:stand(?:ing)?|walk(?:ing)?)\s+tall\b|\bgood\s+posture\b"),
    ("symmetric", True, r"\bsymmetric(?:al|ally)?\b|\bbalanced\s+gait\b|\bevenly\b|\beven\s+(?:gait|steps)\b|\brhythmic(?:al|ally)?\b"),
    ("no_slip", True, r"\bwithout\s+(?:slipping|sliding|skidding)\b|\bno\s+(?:slip|slipping|sliding)\b|\bfirm\s+footing\b"),
    ("low_sway", True, r"\bwithout\s+sway(?:ing)?\b|\bno\s+sway(?:ing)?\b|\bminimal\s+sway\b|\blevel\s+(?:hips|pelvis)\b"
                       r"|\b(?:hips|pelvis)\s+(?:kept\s+)?level\b"),
    ("stance", "wide", r"\bwide\s+(?:stance|gait|base)\b|\bfeet\s+(?:wide\s+|far\s+)?apart\b"),
    ("stance", "narrow", r"\bnarrow\s+(?:stance|gait|base)\b|\bfeet\s+(?:close\s+)?together\b"),
    ("stable", True, r"\bwithout\s+(?:falling(?:\s+(?:over|down))?|tripping|stumbling|losing\s+(?:its\s+|his\s+|her\s+)?balance|wobbl\w*)\b"
                     r"|\bdon'?t\s+fall\b|\bno\s+wobbl\w*\b|\bstabl[ey]\b|\bsteady\b|\bsteadily\b|\bsmooth(?:ly)?\b"
                     r"|\bstay(?:s|ing)?\s+on\s+(?:its|his|her)\s+feet\b|\b(?:in\s+)?balance[ds]?\b|\bbalancing\b"),
    ("gait", "turn", r"\b(?:turn(?:s|ing)?|rotat(?:e|es|ing)|spin(?:s|ning)?|pivot(?:s|ing)?)(?:\s+(?:around|in\s+place|on\s+the\s+spot))?\b"),
    ("gait", "stand", r"\bstand(?:s|ing)?(?:\s+still)?\b|\b(?:stay|remain|hold|keep)(?:s|ing)?\s+still\b|\bstay(?:s|ing)?\s+(?:put|in\s+place)\b"
                      r"|\bdon'?t\s+move\b|\bstationary\b|\bstill\b"),
    ("gait", "hop", r"\bhop(?:s|ping)?\b|\bjump(?:s|ing)?\b"),
    ("gait", "run", r"\brun(?:s|ning)?\b|\bjog(?:s|ging)?\b|\bsprint(?:s|ing)?\b|\btrot(?:s|ting)?\b"),
    ("gait", "walk", r"\bwalk(?:s|ing)?\b|\bstroll(?:s|ing)?\b|\bmov(?:e|es|ing)\b|\bgo(?:es|ing)?\b|\btravel(?:s|ling|ing)?\b"
                     r"|\bproceed(?:s|ing)?\b|\bclimb(?:s|ing)?\b|\bstep(?:s|ping)?\b|\blocomot\w*\b|\bgait\b"),
    ("direction", "sideways", r"\bside\s*-?\s*step(?:s|ping)?\b|\bsideways\b|\blaterally\b|\bstrafe\w*\b"),
    ("direction", "forward", r"\bforwards?\b|\bahead\b|\bstraight\s+ahead\b"),
    ("direction", "backward", r"\bbackwards?\b|\bin\s+reverse\b|\breverse\b|\bback\b"),
    ("direction", "left", r"\b(?:to\s+(?:the\s+|its\s+)?)?left\b(?!\s*-?\s*" + _BODY_PARTS + r")"),
    ("direction", "right", r"\b(?:to\s+(?:the\s+|its\s+)?)?right\b(?!\s*-?\s*" + _BODY_PARTS + r")"),
    ("in_place", True, r"\bin\s+place\b|\bon\s+the\s+spot\b"),
    ("speed_word", "slow", r"\bslow(?:ly)?\b|\bgentl[ey]\b|\bleisurely\b|\bcareful(?:ly)?\b"),
    ("speed_word", "fast", r"\bfast\b|\bquick(?:ly)?\b|\bbrisk(?:ly)?\b|\brapid(?:ly)?\b|\bhurr(?:y|ied|iedly)\b"),
]
_COMPILED = [(f, v, re.compile(p)) for f, v, p in _RULES]

_STOPWORDS = frozenset("""a an the with while whilst and at of to in on it its his her their your keep keeps keeping kept
maintain maintains maintaining please robot humanoid should be being is are very also then but both so that as by for from
too more less much using use can could would must try trying tries make makes making let lets do does hold holding held
nice nicely good well properly like just only same time all around about over up down into onto itself he she they them
one some any each every way manner style""".split())


def parse_task(task: str) -> TaskSpec:
    """Read what a task sentence asks for with keyword rules; unknown parts go to `unjudged`."""
    spec = TaskSpec(text=task)
    text = " " + str(task).lower().replace("’", "'") + " "
    work = list(text)
    directions: list[str] = []

    def blank(m: re.Match) -> None:
        for i in range(m.start(), m.end()):
            work[i] = " "

    for field, value, rx in _COMPILED:
        for m in rx.finditer("".join(work)):
            phrase = m.group(0).strip()
            if field == "speed":
                num = float(m.group(1))
                scale = _speed_unit(m.group(2)) if m.lastindex and m.lastindex >= 2 else 1.0
                if spec.speed is None:
                    spec.speed = num * scale
            elif field == "turn_rate":
                num = float(m.group(1))
                rate = math.radians(num) if m.group(2).startswith("deg") else num
                if spec.turn_rate is None:
                    spec.turn_rate = rate
            elif field == "terrain_level":
                if spec.terrain_level is None:
                    spec.terrain_level = int(m.group(1) or m.group(2))
            elif field == "terrain":
                spec.terrain = spec.terrain or value
            elif field == "steps":
                if value not in spec.steps:
                    spec.steps.append(value)
            elif field == "gait":
                # the first (most specific) gait wins; "turn" combines with a walking gait
                if spec.gait is None:
                    spec.gait = value
                elif spec.gait == "turn" and value in ("walk", "run"):
                    spec.gait, spec.turn = value, spec.turn or "any"
                elif value == "turn" and spec.gait in ("walk", "run", "step"):
                    spec.turn = spec.turn or "any"
            elif field == "direction":
                directions.append(value)
            elif getattr(spec, field) is None or isinstance(getattr(spec, field), bool):
                setattr(spec, field, value)
            spec.understood.append(phrase)
            blank(m)
    # "turn left": with a turning gait left/right is the turn's direction, forward/backward the walk's
    lateral = [d for d in directions if d in ("left", "right")]
    if spec.gait == "turn" or spec.turn is not None:
        spec.turn = lateral[0] if lateral else (spec.turn or "any")
        spec.direction = next((d for d in directions if d not in ("left", "right")), None)
    elif directions:
        spec.direction = lateral[0] if lateral and "sideways" in directions else directions[0]
    if spec.gait == "step":
        spec.in_place = True
    if spec.in_place and spec.gait in (None, "walk"):
        spec.gait = "step"
    if spec.gait is None and (spec.speed is not None or spec.direction is not None
                              or spec.terrain not in (None, "flat")):
        spec.gait = "walk"
    if spec.gait in ("walk", "run") and spec.direction is None and spec.turn is None:
        spec.direction = "forward"
    if spec.gait == "run" and spec.speed_word is None and spec.speed is None:
        spec.speed_word = "fast"
    # leftovers: split what no rule matched at clause boundaries and keep chunks with content words
    rest = "".join(work)
    chunks = re.split(r"[,;.!?]|\b(?:and|while|whilst|with|but|then|also)\b", rest)
    for chunk in chunks:
        words = [w for w in re.findall(r"[a-z0-9'/-]+", chunk) if w not in _STOPWORDS]
        if words:
            spec.unjudged.append(_original_phrase(task, chunk))
    return spec


def _original_phrase(task: str, chunk: str) -> str:
    """The leftover chunk as it reads in the task (case kept), whitespace collapsed."""
    norm = " ".join(chunk.split())
    m = re.search(r"\s+".join(re.escape(w) for w in norm.split()), task, flags=re.IGNORECASE)
    return m.group(0) if m else norm



# ============================================================================ the task object
# The one table of defaults a parsed motion is commanded with. Speeds are magnitudes along the motion's
# direction; a speed word scales them; a speed or turn rate in the sentence replaces them.
SPEEDS = {"forward": 0.6, "backward": 0.3, "sideways": 0.2}
"""Default speed (m/s) of a walk in each direction: forward 0.6 (the reference reward's walk), backward 0.3,
sideways (left or right) 0.2."""
TURN_RATE = 0.5
"""Default yaw rate (rad/s) of a turn, in place or while walking."""
SPEED_WORDS = {"slow": 0.5, "fast": 1.5}
"""Factor on the direction's default speed (or, turning in place, on TURN_RATE) for a speed word: slow forward
0.3 m/s, fast forward 0.9 m/s, slow backward 0.15 m/s, a slow turn 0.25 rad/s. A run is fast unless told."""
DEFAULT_COMMAND = (SPEEDS["forward"], 0.0, 0.0)
"""The command of a walk the sentence gives no direction or speed for, and of every tool run without a task
(`motionvl eval`, `render`, `deploy-sim`, the trainer's selection): walking forward at 0.6 m/s."""
MAX_COMMAND = (1.5, 1.0, 2.0)
"""Largest |vx| (m/s), |vy| (m/s), |yaw rate| (rad/s) a task may ask: beyond them a sentence is refused."""
COMMAND_SPREAD = (0.1, 0.05, 0.1)
"""Half-width (vx, vy, yaw rate) of the training commands drawn around a moving task's command
(EnvConfig.commands.task_spread); a task that stands or steps in place is trained at its command exactly."""
LATERAL_STRIDE = 0.3
"""Hip-roll sweep (rad per m/s of lateral command) a task that steps sideways trains and runs with
(EnvConfig.gait_lateral_stride). Policies trained without it walked 0.14 m/s for 0.2 sideways (quick preset);
0.3 is about three quarters of the sweep a 0.35 s stance at 0.2 m/s needs on mvl_biped's 0.45 m legs."""
TERRAINS = KINDS
"""The ground a task may name (motionvl.sim.terrain's kinds, EnvConfig.terrain); "stairs" alone is stairs up, a
slope alone a slope up."""
STAND_BELOW = 0.1
"""A standing task rests the stepping feed-forward at commands within this (EnvConfig.gait_stand_below; the gait
reward terms' default stand_below, `motionvl.rewards.terms.STAND_BELOW`)."""

CRITERIA = ("distance", "turn", "stand", "in_place", "progress")

STYLE_MEASURES = {("knees", "straight"): ("knee_angle_stance_deg", "lower"),
                  ("knees", "bent"): ("knee_angle_stance_deg", "higher"),
                  ("steps", "high"): ("swing_clearance_m", "higher")}
"""(TaskSpec field, value) of a style a sentence asks -> (the held-out evaluation's gait measure of it, the better
way): what breaks a tie on the ranking score that the critic's comparison leaves open (motionvl.search.decision).
Styles without an unambiguous per-evaluation mean (a torso kept upright: the mean of a signed pitch) have none."""


def style_gains(scores: dict, reference: dict, measures) -> list[float] | None:
    """Per style measure ((key, "lower" | "higher"), STYLE_MEASURES), how much better `scores` are than `reference`
    as a share of the reference's value (negative: worse); None when no measure is named or a value is missing."""
    gains = []
    for key, way in measures or ():
        mine, theirs = scores.get(key), reference.get(key)
        if not isinstance(mine, (int, float)) or not isinstance(theirs, (int, float)) or not theirs:
            return None
        gains.append((mine - theirs if way == "higher" else theirs - mine) / abs(theirs))
    return gains or None


def style_improvement(scores: dict, reference: dict, measures, least: float) -> str | None:
    """How the evaluation `scores` are better than `reference` on every style measure by at least `least` of the
    reference's value, as text ("knee_angle_stance_deg 14.8 -> 8.7 (+41%)"); None when they are not."""
    gains = style_gains(scores, reference, measures)
    if gains is None or least <= 0 or not min(gains) >= least:
        return None
    return ", ".join(f"{key} {reference[key]:.3g} -> {scores[key]:.3g} ({gain:+.0%})"
                     for (key, _), gain in zip(measures, gains))


class TaskError(ConfigError):
    """The sentence gives nothing to command or judge (or asks what the robot cannot be commanded to do)."""


@dataclasses.dataclass
class Criterion:
    """When an evaluation episode of a task succeeds (`motionvl.rl.evaluate.episode_metrics` applies it).

    distance   walking: no fall and at least `success_fraction` of the commanded distance along the commanded
               direction (the path integral when the command also turns), and at most `max_fraction` of it
               when the sentence asks a speed;
    progress   a terrain task: the same, measured over the task's terrain;
    turn       turning in place: no fall, at least `success_fraction` of the commanded heading turned, the mean
               yaw rate within `yaw_tolerance` of the command and at most `max_drift_mps` of drift;
    stand      standing: no fall and both feet in contact at least `min_contact` of the time;
    in_place   stepping or hopping in place: no fall and at most `max_drift_mps` of drift.

    Drift and the yaw-rate error are measured in the push-free seconds before each evaluation push (from the
    start-up settle, or the end of the previous push's recovery, to the push; the whole episode without pushes).
    Drift: the norm of the mean horizontal base velocity minus the commanded one (world frame) there."""

    kind: str = "distance"
    """One of CRITERIA."""
    success_fraction: float = 5.0 / 6.0
    """distance, progress, turn: share of the commanded distance (or heading) to cover: 5 m of 6 m at 0.6 m/s."""
    max_fraction: float | None = None
    """distance, progress: the most of the commanded distance a success may cover, set (2 - success_fraction) when
    the sentence asks a speed ("slowly", "at 0.9 m/s"): walking faster than asked is then not what was asked, and
    the task score falls off past the commanded distance as it does short of it. None: no bound."""
    yaw_tolerance: float = 0.2
    """turn: largest |mean yaw rate - command| as a share of the commanded yaw rate."""
    max_drift_mps: float = 0.1
    """turn, in_place: largest drift (m/s)."""
    min_contact: float = 0.9
    """stand: least share of the time with both feet in contact."""

    def __post_init__(self):
        if self.kind not in CRITERIA:
            raise TaskError(f"unknown success criterion {self.kind!r}; criteria: {list(CRITERIA)}")
        for name in ("success_fraction", "yaw_tolerance", "min_contact"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
                raise TaskError(f"criterion {name} must be in (0, 1], got {value!r}")
        if isinstance(self.max_drift_mps, bool) or not isinstance(self.max_drift_mps, (int, float)) \
                or not self.max_drift_mps > 0:
            raise TaskError(f"criterion max_drift_mps must be > 0, got {self.max_drift_mps!r}")
        if self.max_fraction is not None and (isinstance(self.max_fraction, bool) or not isinstance(
                self.max_fraction, (int, float)) or not 1.0 <= self.max_fraction < math.inf):
            raise TaskError(f"criterion max_fraction must be a number >= 1 or null, got {self.max_fraction!r}")

    @classmethod
    def from_dict(cls, raw) -> "Criterion":
        if isinstance(raw, Criterion):
            return raw
        if not isinstance(raw, dict):
            raise TaskError(f"a criterion must be a mapping, got {type(raw).__name__}")
        unknown = set(raw) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise TaskError(f"unknown criterion keys {sorted(unknown)}")
        return cls(**raw)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def describe(self, command, seconds: float = 10.0) -> str:
        """What an episode of `seconds` at `command` must do, as a reader sees it."""
        vx, vy, yaw = (float(c) for c in command)
        if self.kind in ("distance", "progress"):
            ground = " over the terrain" if self.kind == "progress" else ""
            most = "" if self.max_fraction is None else f" and <= {self.max_fraction * math.hypot(vx, vy) * seconds:.2f} m"
            return (f"no fall and >= {self.success_fraction * math.hypot(vx, vy) * seconds:.2f} m{most} of the "
                    f"commanded {math.hypot(vx, vy) * seconds:.2f} m in {seconds:g} s{ground}")
        if self.kind == "turn":
            return (f"no fall, >= {math.degrees(self.success_fraction * abs(yaw) * seconds):.0f} deg of the commanded "
                    f"{math.degrees(abs(yaw) * seconds):.0f} deg turned in {seconds:g} s, yaw rate within "
                    f"{self.yaw_tolerance:.0%} of {yaw:+.2f} rad/s, drift <= {self.max_drift_mps:g} m/s")
        if self.kind == "stand":
            return f"no fall and both feet in contact >= {self.min_contact:.0%} of the time"
        return f"no fall and drift <= {self.max_drift_mps:g} m/s"


def criterion_for_command(command, success_fraction: float = Criterion.success_fraction) -> Criterion:
    """The criterion of a bare command (a tool run without a task): walking when it moves, turning in place for a
    yaw rate alone, stepping in place for zero (the default policy steps at a standing command)."""
    vx, vy, yaw = (float(c) for c in command)
    if math.hypot(vx, vy) > 1e-9:
        return Criterion("distance", success_fraction=success_fraction)
    if abs(yaw) > 1e-9:
        return Criterion("turn", success_fraction=success_fraction)
    return Criterion("in_place", success_fraction=success_fraction)


@dataclasses.dataclass
class Task:
    """A task sentence read once: what is commanded, on which ground, judged how, trained with which settings.

    Built by `make_task`; every stage reads it (the trainers' command distribution and terrain, the reward-free
    evaluation, the playback, the gates, the report, `motionvl eval/render/critique/deploy-sim --task`)."""

    sentence: str
    """The task sentence as given."""
    motion: str
    """What the motion is: "walk", "run", "hop", "turn in place", "stand", "step in place", "hop in place"."""
    command: tuple
    """(vx m/s, vy m/s, yaw rate rad/s) the task is evaluated, played back and trained around."""
    command_source: str
    """"sentence" (from the table of defaults and what the sentence says), "style" (a style alone: the default
    walk), "given" (--command or the settings' `command`)."""
    criterion: Criterion
    """When an evaluation episode succeeds."""
    terrain: str = "flat"
    """One of TERRAINS."""
    terrain_level: int | None = None
    """A fixed terrain difficulty level; None: the terrain's curriculum in training, its default in evaluation."""
    reference_fits: bool = True
    """A shipped reference reward fits the task (walking, running, stepping on flat, rough or sloped ground): the
    search starts from it; standing too, with the stepping feed-forward resting. False (turning in place, stairs): the
    paper's category (ii), a start composed
    for the task (rules) or sampled from scratch (model backends)."""
    spread: tuple = COMMAND_SPREAD
    """Half-width of the training commands drawn around `command` (zero: exactly the command)."""
    env: dict = dataclasses.field(default_factory=dict)
    """Env and contract settings the task needs ({dotted training key: value}); its base trains with them too.
    Empty for walking tasks, which train with today's defaults."""
    understood: list = dataclasses.field(default_factory=list)
    """The phrases the rules read."""
    unjudged: list = dataclasses.field(default_factory=list)
    """The parts of the sentence no rule understood."""
    spec: TaskSpec | None = dataclasses.field(default=None, repr=False, compare=False)
    """What the keyword rules read (None for a task rebuilt from a dict)."""

    @property
    def style_measures(self) -> tuple:
        """((evaluation key, "lower" | "higher"), ...) of the styles the sentence asks (STYLE_MEASURES)."""
        spec = self.spec or parse_task(self.sentence)
        asked = [("knees", spec.knees)] + [("steps", s) for s in spec.steps]
        return tuple(dict.fromkeys(STYLE_MEASURES[a] for a in asked if a in STYLE_MEASURES))

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "spec"}
        out["command"] = [float(c) for c in self.command]
        out["spread"] = [float(c) for c in self.spread]
        out["criterion"] = self.criterion.to_dict()
        return out

    @classmethod
    def from_dict(cls, raw: dict) -> "Task":
        """A task from its to_dict() (an ONNX policy's metadata, a ledger record), the keyword rules re-read."""
        if not isinstance(raw, dict) or not isinstance(raw.get("sentence"), str) or "command" not in raw:
            raise TaskError(f"not a task record: {raw!r:.200}")
        known = {f.name for f in dataclasses.fields(cls)} - {"spec"}
        fields = {k: v for k, v in raw.items() if k in known}
        fields["command"] = _command_tuple(fields["command"])
        fields["spread"] = tuple(float(c) for c in fields.get("spread", COMMAND_SPREAD))
        fields["criterion"] = Criterion.from_dict(fields.get("criterion") or {})
        return cls(**fields, spec=parse_task(raw["sentence"]))

    def describe(self, seconds: float = 10.0) -> str:
        """One line: the motion, its command, the ground and the success criterion."""
        vx, vy, yaw = self.command
        level = "" if self.terrain_level is None else f" (level {self.terrain_level})"
        return (f"{self.motion}: command vx {vx:+.2f} m/s, vy {vy:+.2f} m/s, yaw {yaw:+.2f} rad/s"
                f"{' (given)' if self.command_source == 'given' else ''}; {self.terrain.replace('_', ' ')} ground"
                f"{level}; success: {self.criterion.describe(self.command, seconds)}")

    def training_overrides(self, share: float, base_ranges: tuple | None = None,
                           start_ranges: tuple | None = None) -> list[str]:
        """"dotted.key=value" overrides of the training config for this task: its env settings, a share `share`
        of the trained commands around its command (the rest over the base's ranges, `base_ranges` = (vx, vy,
        yaw_rate) ranges, widened to hold the command where it lies outside), its terrain and the task itself
        (for the trainer's held-out selection and the exported policy's metadata).

        A travelling command inside the ranges the base's command curriculum starts from (`start_ranges`,
        walking forward near the nominal speed; None: `base_ranges`) gets no share: the base trains it first
        and most, and narrowing half the commands around it cost robustness ("walk forward with straight
        knees", quick preset: the 300-iteration start fell in 11 % of pushed episodes with a 0.5 share, 5 %
        without). Walking backward or sideways, which the curriculum reaches late, turning or standing in
        place, which independent sampling of vx, vy and yaw rate almost never asks for, and commands beyond
        the ranges keep the share."""
        out = [f"{key}={json.dumps(value)}" for key, value in self.env.items()]
        inside = base_ranges is not None
        if base_ranges is not None:
            for axis, (lo, hi), c in zip(("vx", "vy", "yaw_rate"), base_ranges, self.command):
                if not lo <= c <= hi:
                    inside = False
                    out.append(f"env.commands.{axis}={json.dumps([min(lo, c), max(hi, c)])}")
        if start_ranges is not None:
            inside = inside and all(lo <= c <= hi for (lo, hi), c in zip(start_ranges, self.command))
        travels = math.hypot(*self.command[:2]) > 1e-9
        if share > 0 and not (inside and travels):
            out += [f"env.commands.task={json.dumps(list(map(float, self.command)))}",
                    f"env.commands.task_share={float(share)}",
                    f"env.commands.task_spread={json.dumps(list(map(float, self.spread)))}"]
        if self.terrain != "flat":
            out.append(f"env.terrain={self.terrain}")
        if self.terrain_level is not None:
            out.append(f"env.terrain_level={int(self.terrain_level)}")
        out.append(f"task={json.dumps(self.to_dict())}")
        return out


def _command_tuple(command) -> tuple:
    if not isinstance(command, (list, tuple)) or len(command) != 3 or not all(
            isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) for c in command):
        raise TaskError(f"a command is three numbers (vx m/s, vy m/s, yaw rate rad/s), got {command!r}")
    return tuple(float(c) for c in command)


def _sentence_command(spec: TaskSpec) -> tuple[tuple, str]:
    """(command, motion) from the table of defaults and what the sentence says."""
    factor = SPEED_WORDS.get(spec.speed_word, 1.0)
    if spec.gait == "stand":
        return (0.0, 0.0, 0.0), "stand"
    if spec.gait == "step" or (spec.gait == "hop" and spec.in_place):
        return (0.0, 0.0, 0.0), "hop in place" if spec.gait == "hop" else "step in place"
    yaw = 0.0
    travels = spec.gait != "turn" or spec.direction is not None
    if spec.turn is not None:
        rate = spec.turn_rate if spec.turn_rate is not None else TURN_RATE * (1.0 if travels else factor)
        yaw = -rate if spec.turn == "right" else rate  # "any" turns left
    if not travels:
        return (0.0, 0.0, yaw), "turn in place"
    direction = spec.direction or "forward"
    if spec.gait == "hop" and spec.direction is None:
        return (0.0, 0.0, yaw), "hop in place"
    axis = "sideways" if direction in ("left", "right", "sideways") else direction
    speed = spec.speed if spec.speed is not None else SPEEDS[axis] * factor
    vx, vy = {"forward": (speed, 0.0), "backward": (-speed, 0.0), "left": (0.0, speed), "right": (0.0, -speed),
              "sideways": (0.0, speed)}[direction]
    return (vx, vy, yaw), spec.gait if spec.gait in ("run", "hop") else "walk"


def commanded(spec: TaskSpec) -> tuple:
    """The command (vx, vy, yaw rate) the table of defaults gives what the keyword rules read (`spec`)."""
    return _sentence_command(spec)[0]


def make_task(sentence: str, *, command=None, allow_unjudged: bool = False,
              success_fraction: float = Criterion.success_fraction) -> Task:
    """The task object of a sentence (see `Task`); `command` (vx, vy, yaw rate) replaces the sentence's.

    A sentence the rules understand nothing of is a TaskError naming it, unless `allow_unjudged` (a model
    synthesizer proposes for it) and a command is given. A sentence with a style alone ("with straight knees")
    asks it of the default walk (DEFAULT_COMMAND)."""
    if not isinstance(sentence, str) or not sentence.strip():
        raise TaskError("the task sentence is empty: say what the robot should do, e.g. 'walk forward with straight knees'")
    spec = parse_task(sentence)
    given = None if command is None else _command_tuple(command)
    if not spec.understood:
        if given is None or not allow_unjudged:
            what = "; ".join(f"'{u}'" for u in spec.unjudged) or f"'{sentence}'"
            need = ("or give the command it asks for (--command VX VY YAW, or `command:` in the search settings)"
                    if allow_unjudged else "or run a model synthesizer (--synthesizer openai|transformers) with "
                    "--command VX VY YAW")
            raise TaskError(f"nothing in the task {sentence!r} can be commanded or judged: no rule understands {what}. "
                            f"Say what to do (walk forward/backward/sideways, turn left in place, stand still, "
                            f"climb the stairs, ... with a style such as straight knees), {need}")
    motion_words = (spec.gait, spec.direction, spec.turn, spec.speed, spec.speed_word, spec.turn_rate)
    source = "sentence" if any(v is not None for v in motion_words) or spec.in_place else "style"
    cmd, motion = _sentence_command(spec) if spec.understood else (DEFAULT_COMMAND, "walk")
    if given is not None:
        cmd, source = given, "given"
        if not spec.understood:
            motion = "walk" if math.hypot(*given[:2]) > 1e-9 else ("turn in place" if abs(given[2]) > 1e-9 else "stand")
    for axis, value, limit in zip(("vx", "vy", "yaw rate"), cmd, MAX_COMMAND):
        if abs(value) > limit:
            raise TaskError(f"the task {sentence!r} asks {axis} {value:+.2f}, beyond the {limit:g} this robot is "
                            "trained for; ask for less")
    terrain = spec.terrain or "flat"
    moving = math.hypot(cmd[0], cmd[1]) > 1e-9
    if motion == "stand":
        criterion = Criterion("stand", success_fraction=success_fraction)
    elif motion in ("step in place", "hop in place") or (not moving and abs(cmd[2]) < 1e-9):
        criterion = Criterion("in_place", success_fraction=success_fraction)
    elif not moving:
        criterion = Criterion("turn", success_fraction=success_fraction)
    else:
        asks_speed = spec.speed is not None or spec.speed_word is not None
        criterion = Criterion("progress" if terrain != "flat" else "distance", success_fraction=success_fraction,
                              max_fraction=2.0 - success_fraction if asks_speed else None)
    env = {"env.gait_stand_below": STAND_BELOW} if motion == "stand" else {}
    if abs(cmd[1]) > 1e-9:
        env["env.gait_lateral_stride"] = LATERAL_STRIDE
    still = motion in ("stand", "step in place", "hop in place")
    # Standing starts from the reference too (its gait terms stand while the feed-forward rests): trained 750
    # iterations, it fell in none of 64 pushed episodes where the start the rules compose for standing fell in 27%.
    fits = motion != "turn in place" and not terrain.startswith("stairs")
    return Task(sentence=sentence, motion=motion, command=tuple(round(float(c), 4) + 0.0 for c in cmd), command_source=source,
                criterion=criterion, terrain=terrain, terrain_level=spec.terrain_level, reference_fits=fits,
                spread=(0.0, 0.0, 0.0) if still else COMMAND_SPREAD, env=env, understood=list(spec.understood),
                unjudged=list(spec.unjudged), spec=spec)


def policy_task(metadata: dict | None) -> Task | None:
    """The task an exported policy's metadata records (`task`: a Task.to_dict(), or a sentence in older files),
    None without one."""
    raw = (metadata or {}).get("task")
    try:
        if isinstance(raw, dict):
            return Task.from_dict(raw)
        if isinstance(raw, str) and raw.strip():
            return make_task(raw)
    except TaskError:
        return None
    return None


def tool_task(sentence: str | None, metadata: dict | None = None, command=None, strict: bool = True) -> Task | None:
    """The task a tool (`motionvl eval`, `render`, `critique`, `deploy-sim`) runs a policy for: the sentence given
    (`--task`), else the policy's own (its metadata), else None (the tool's default command); `command` (the tool's
    `--command`) replaces the task's. A sentence the rules understand nothing of is a TaskError unless `command` is
    given, or None when not `strict` (a VLM critic judges what the rules cannot read)."""
    if sentence:
        try:
            return make_task(sentence, command=command, allow_unjudged=command is not None)
        except TaskError:
            if strict:
                raise
            return None
    task = policy_task(metadata)
    if task is not None and command is not None:
        task = dataclasses.replace(task, command=_command_tuple(command), command_source="given")
    return task
