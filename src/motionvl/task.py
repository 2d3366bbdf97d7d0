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
import math
import re
from typing import Any


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
_RULES: list[tuple[str, Any, str]] = [
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
                     r"|\bproceed(?:s|ing)?\b|\bstep(?:s|ping)?\b|\blocomot\w*\b|\bgait\b"),
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
    if spec.gait is None and (spec.speed is not None or spec.direction is not None):
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

