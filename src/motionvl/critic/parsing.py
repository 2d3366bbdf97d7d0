"""Robust parsing of a critic model's answer into a :class:`MotionFeedback`.

:func:`parse_feedback` never raises on model output. It

1. extracts the JSON object from prose or a Markdown code fence (:func:`extract_json_text`);
2. repairs common breakage (:func:`repair_json`): smart quotes, single-quoted strings, Python
   literals (True/False/None), comments, trailing commas, bare NaN, and output truncated by the
   token limit (dangling key/value dropped, open string and brackets closed);
3. coerces values the model commonly writes loosely without changing a number's meaning: a
   percentage written as one ("85%"), confidence words ("high"), numbers in strings ("35 deg"),
   unknown regions (-> "whole_body"), direction synonyms ("raise" -> "increase"), "yes"/"no"
   verdicts; a number out of its range (a confidence or score outside [0, 1], a knee angle of
   -4000 deg) is refused and re-asked, never rescaled;
4. validates against the schema and returns either a feedback or a precise error string
   naming the JSON path ("descriptors[2].confidence: ...") that the caller sends back once
   (see :func:`motionvl.critic.base.critique_with_reask`).

:func:`parse_comparison` reads a comparison answer the same way (steps 1 and 2), then takes the
verdict only from its ``preferred`` field, which must be one of the schema's values: a word in
free text never decides a comparison.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

from .schema import (ABSTAIN, DIRECTIONS, FEATURE_LABELS, PREFERENCES, QUANTITIES, REGIONS, Comparison, Descriptor,
                     MotionFeedback, SchemaError, Suggestion, canonical_value, discretise, normalise_label)


@dataclasses.dataclass
class ParseResult:
    feedback: MotionFeedback | None
    error: str | None
    repairs: list[str]
    raw_labels: list[str] = dataclasses.field(default_factory=list)
    """Descriptor labels exactly as the model wrote them (to locate their tokens)."""

    @property
    def ok(self) -> bool:
        return self.feedback is not None


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?(.*?)(?:```|\Z)", re.S)


def extract_json_text(text: str) -> str | None:
    """The most plausible JSON object in ``text``: a fenced block's object, else the first
    balanced ``{...}`` (string-aware), else everything from the first ``{`` (truncated output)."""
    if not text:
        return None
    candidates = [m.group(2) for m in _FENCE.finditer(text) if "{" in m.group(2)]
    candidates.append(text)
    for cand in candidates:
        start = cand.find("{")
        if start < 0:
            continue
        end = _balanced_end(cand, start)
        return cand[start:end] if end is not None else cand[start:]
    return None


def _balanced_end(s: str, start: int) -> int | None:
    depth = 0
    in_str: str | None = None
    esc = False
    for i in range(start, len(s)):
        ch = s[i]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == in_str:
                in_str = None
        elif ch in "\"'":
            # a single quote inside a word (it's) is not a string delimiter
            if ch == "'" and i > 0 and s[i - 1].isalnum() and i + 1 < len(s) and s[i + 1].isalnum():
                continue
            in_str = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


_SMART = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2018": "'", "\u2019": "'"})


def _requote(s: str, repairs: list[str]) -> str:
    """Single-quoted strings -> double-quoted; strip // and # comments outside strings;
    Python literals and NaN/Infinity outside strings -> JSON."""
    out: list[str] = []
    i, n = 0, len(s)
    changed = {"quotes": False, "comments": False, "literals": False, "keys": False}
    while i < n:
        ch = s[i]
        if ch == '"':
            j = i + 1
            while j < n:
                if s[j] == "\\":
                    j += 2
                    continue
                if s[j] == '"':
                    break
                j += 1
            out.append(s[i:j + 1])
            i = j + 1
        elif ch == "'":
            j = i + 1
            buf = []
            while j < n:
                c = s[j]
                if c == "\\" and j + 1 < n:
                    buf.append(s[j:j + 2] if s[j + 1] != "'" else "'")
                    j += 2
                    continue
                if c == "'":
                    # an apostrophe inside a word is text, not the closing quote
                    if j + 1 < n and s[j + 1].isalnum() and j > 0 and s[j - 1].isalnum():
                        buf.append(c)
                        j += 1
                        continue
                    break
                if c == '"':
                    buf.append('\\"')
                else:
                    buf.append(c)
                j += 1
            out.append('"' + "".join(buf) + ('"' if j < n else ""))
            changed["quotes"] = True
            i = j + 1
        elif ch == "/" and i + 1 < n and s[i + 1] == "/" or ch == "#":
            j = s.find("\n", i)
            i = n if j < 0 else j
            changed["comments"] = True
        elif ch == "/" and i + 1 < n and s[i + 1] == "*":
            j = s.find("*/", i + 2)
            i = n if j < 0 else j + 2
            changed["comments"] = True
        elif ch.isalpha():
            j = i
            while j < n and (s[j].isalnum() or s[j] == "_"):
                j += 1
            word = s[i:j]
            rep = {"True": "true", "False": "false", "None": "null", "NaN": "null", "nan": "null",
                   "Infinity": "null", "undefined": "null", "null": "null", "true": "true", "false": "false"}
            k = j
            while k < n and s[k] in " \t\r\n":
                k += 1
            if k < n and s[k] == ":" and word not in ("true", "false", "null"):
                out.append(f'"{word}"')  # a bare key
                changed["keys"] = True
            elif word in rep:
                if rep[word] != word:
                    changed["literals"] = True
                out.append(rep[word])
            else:
                out.append(word)
            i = j
        else:
            out.append(ch)
            i += 1
    if changed["quotes"]:
        repairs.append("single quotes -> double quotes")
    if changed["comments"]:
        repairs.append("removed comments")
    if changed["literals"]:
        repairs.append("Python/JS literals -> JSON")
    if changed["keys"]:
        repairs.append("quoted bare keys")
    return "".join(out)


def _close_truncated(s: str, repairs: list[str], drop_incomplete: bool = False) -> str:
    """Close an unterminated string and open brackets; drop a dangling key or separator.
    With ``drop_incomplete`` an unfinished object inside an array is dropped instead of closed."""
    stack, in_str, esc = _scan_brackets(s)
    if not stack and not in_str:
        return s
    repairs.append("closed truncated output")
    if in_str:
        if esc:
            s = s[:-1]
        s += '"'
    s = s.rstrip()
    # a number or literal cut by the token limit may be incomplete ("0." of "0.35"): drop it
    if not in_str and (re.search(r"[:\[,]\s*[-+]?[\d.][\d.eE+-]*$", s)
                       or re.search(r"[:\[,]\s*(?:t|tr|tru|true|f|fa|fal|fals|false|n|nu|nul|null)$", s)):
        s = re.sub(r"[-+.\w]+$", "", s).rstrip()
    # drop incomplete trailing pieces until what remains can be closed cleanly
    for _ in range(8):
        t = s.rstrip()
        if t.endswith((",", ":")):
            t = t[:-1].rstrip()
            if s.rstrip().endswith(":"):
                t = _drop_last_string(t)
        elif re.search(r'[{,]\s*"(?:[^"\\]|\\.)*"$', t) and _inside_object(t):
            t = _drop_last_string(t)  # a key without a value
        if t == s.rstrip():
            break
        s = t
    s = re.sub(r",\s*$", "", s)
    stack = _open_brackets(s)
    if drop_incomplete:
        for k in range(1, len(stack)):
            if stack[k][0] == "{" and stack[k - 1][0] == "[":
                s = re.sub(r",\s*$", "", s[:stack[k][1]].rstrip())
                stack = stack[:k]
                repairs.append("dropped an unfinished list element")
                break
    return s + "".join("}" if b == "{" else "]" for b, _ in reversed(stack))


def _open_brackets(s: str) -> list[tuple[str, int]]:
    """Unclosed brackets of ``s`` (outermost first) with their positions."""
    return _scan_brackets(s)[0]


def _scan_brackets(s: str) -> tuple[list[tuple[str, int]], bool, bool]:
    """(unclosed brackets with positions, inside a string at the end, after a backslash at the end)."""
    stack: list[tuple[str, int]] = []
    in_str = esc = False
    for i, ch in enumerate(s):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append((ch, i))
        elif ch in "}]" and stack:
            stack.pop()
    return stack, in_str, esc


def _drop_last_string(t: str) -> str:
    m = re.search(r'"(?:[^"\\]|\\.)*"\s*$', t)
    return t[:m.start()].rstrip() if m else t


def _inside_object(t: str) -> bool:
    """Is the innermost open bracket at the end of ``t`` a '{' (so a trailing string is a key)?"""
    stack = _open_brackets(t)
    return bool(stack) and stack[-1][0] == "{"


def repair_json(s: str, repairs: list[str] | None = None, drop_incomplete: bool = False) -> str:
    """Best-effort repair of almost-JSON (see the module docstring); appends what it did to ``repairs``."""
    repairs = repairs if repairs is not None else []
    t = s.translate(_SMART)
    if t != s:
        repairs.append("smart quotes")
    t = _requote(t, repairs)
    t = _close_truncated(t, repairs, drop_incomplete)
    t2 = _sub_outside_strings(r",(\s*[}\]])", r"\1", t)
    if t2 != t:
        repairs.append("removed trailing commas")
    return t2


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?', re.S)


def _sub_outside_strings(pattern: str, repl: str, s: str) -> str:
    """re.sub applied only to the parts of ``s`` that are outside double-quoted strings."""
    out, pos = [], 0
    for m in _STRING.finditer(s):
        out.append(re.sub(pattern, repl, s[pos:m.start()]))
        out.append(m.group())
        pos = m.end()
    out.append(re.sub(pattern, repl, s[pos:]))
    return "".join(out)


def loads_lenient(text: str, drop_incomplete: bool = False) -> tuple[Any, list[str]]:
    """Parse the JSON object in ``text``; raises ValueError with a precise message if impossible."""
    repairs: list[str] = []
    if text is None or not str(text).strip():
        raise ValueError("empty answer: expected a JSON object")
    js = extract_json_text(text)
    if js is None:
        snippet = text.strip().replace("\n", " ")[:80]
        raise ValueError(f"no JSON object found in the answer (it starts with {snippet!r})")
    if js.strip() != text.strip():
        repairs.append("extracted JSON from surrounding text")
    try:
        return json.loads(js), repairs
    except json.JSONDecodeError:
        pass
    fixed = repair_json(js, repairs, drop_incomplete)
    try:
        return json.loads(fixed), repairs
    except json.JSONDecodeError as e:
        ctx = fixed[max(0, e.pos - 25): e.pos + 25].replace("\n", " ")
        raise ValueError(f"invalid JSON even after repair ({', '.join(repairs) or 'none'}): "
                         f"{e.msg} at char {e.pos} near {ctx!r}") from None


_CONF_WORDS = {"very high": 0.95, "very_high": 0.95, "certain": 0.95, "high": 0.8, "likely": 0.7,
               "medium": 0.5, "moderate": 0.5, "mid": 0.5, "unsure": 0.3, "low": 0.2, "unlikely": 0.2,
               "very low": 0.05, "very_low": 0.05, "none": 0.0}
_NUM = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def coerce_unit_interval(x: Any, path: str) -> tuple[float, str | None]:
    """A confidence/score as a float in [0, 1]: accepts 0.8, "0.8", "80%", "high"; a bare number outside [0, 1]
    (7.5, 80) is refused, never read as a percentage or rescaled.
    Returns (value, repair-note or None); raises ValueError with the path otherwise."""
    note = None
    if isinstance(x, bool):
        raise ValueError(f"{path}: expected a number in [0, 1], got {x!r}")
    if isinstance(x, str):
        s = x.strip().lower()
        if s in _CONF_WORDS:
            return _CONF_WORDS[s], f"{path}: {x!r} -> {_CONF_WORDS[s]}"
        m = _NUM.search(s)
        if not m:
            raise ValueError(f"{path}: expected a number in [0, 1], got {x!r}")
        v = float(m.group())
        if "%" in s:
            v /= 100.0
        note = f"{path}: {x!r} -> number"
        x = v
    if not isinstance(x, (int, float)) or not math.isfinite(float(x)):
        raise ValueError(f"{path}: expected a number in [0, 1], got {x!r}")
    v = float(x)
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{path}: {x!r} is outside [0, 1] (write a number between 0 and 1)")
    return v, note


def _check_range(label: str, value: float | None, unit: str | None, path: str) -> None:
    """ValueError when a stated value of a measurable quantity is outside what a body can show."""
    q = QUANTITIES.get(normalise_label(label))
    if q is None or value is None:
        if value is not None and abs(value) > 1e6:
            raise ValueError(f"{path}: {value!r} is not a plausible measurement")
        return
    v = canonical_value(label, value, unit)
    lo, hi = q.valid
    if not lo <= v <= hi:
        raise ValueError(f"{path}: {value!r}{' ' + unit if unit else ''} is outside what a body can show for "
                         f"{normalise_label(label)} ({lo:g} to {hi:g} {q.unit})".rstrip())


def _coerce_number(x: Any, path: str) -> tuple[float | None, str | None]:
    """value: number, null, or a string like "35 deg" (-> 35, unit "deg")."""
    if x is None or isinstance(x, float) and math.isnan(x):
        return None, None
    if isinstance(x, bool):
        return (1.0 if x else 0.0), None
    if isinstance(x, (int, float)):
        if not math.isfinite(float(x)):
            return None, None
        return float(x), None
    if isinstance(x, str):
        m = _NUM.search(x)
        if m is None:
            if x.strip().lower() in ("", "n/a", "na", "unknown", "null", "none", "-"):
                return None, None
            raise ValueError(f"{path}: expected a number or null, got {x!r}")
        unit = x[m.end():].strip() or None
        return float(m.group()), unit
    raise ValueError(f"{path}: expected a number or null, got {type(x).__name__}")


_DIRECTION_SYNONYMS = {
    "increase": "increase", "raise": "increase", "more": "increase", "higher": "increase", "up": "increase",
    "increase_weight": "increase", "strengthen": "increase", "boost": "increase",
    "decrease": "decrease", "reduce": "decrease", "lower": "decrease", "less": "decrease", "down": "decrease",
    "decrease_weight": "decrease", "weaken": "decrease",
    "add": "add", "introduce": "add", "new": "add", "create": "add",
    "remove": "remove", "drop": "remove", "delete": "remove", "disable": "remove",
}
_REGION_SYNONYMS = {"knee": "knees", "ankle": "ankles", "hip": "hips", "pelvis": "hips", "trunk": "torso",
                    "upper_body": "torso", "back": "torso", "foot": "feet", "arm": "arms", "hands": "arms",
                    "whole": "whole_body", "body": "whole_body", "global": "whole_body", "overall": "whole_body",
                    "gait": "whole_body", "legs": "whole_body", "wholebody": "whole_body"}


def _region(x: Any, label: str, path: str, repairs: list[str]) -> str:
    s = re.sub(r"[^a-z]+", "_", str(x or "").lower()).strip("_")
    if s in REGIONS:
        return s
    if s in _REGION_SYNONYMS:
        return _REGION_SYNONYMS[s]
    lab = normalise_label(label)
    guess = FEATURE_LABELS.get(lab, (None,))[0] or (QUANTITIES[lab].region if lab in QUANTITIES else None)
    region = guess or "whole_body"
    repairs.append(f"{path}: unknown region {x!r} -> {region}")
    return region


def _as_list(obj: dict, key: str, path: str, repairs: list[str], required: bool) -> list:
    if key not in obj or obj[key] is None:
        if required:
            raise ValueError(f"{path}{key}: missing (expected a list)")
        return []
    v = obj[key]
    if isinstance(v, dict):
        repairs.append(f"{key}: single object -> list")
        return [v]
    if isinstance(v, str):
        return [v] if v.strip() else []
    if not isinstance(v, list):
        raise ValueError(f"{key}: expected a list, got {type(v).__name__}")
    return v


def feedback_from_answer(obj: Any, critic: str, task: str, repairs: list[str]
                         ) -> tuple[MotionFeedback, list[str]]:
    """Validate/coerce a decoded answer object; raises ValueError with a JSON path on failure."""
    if isinstance(obj, list) and len(obj) == 1 and isinstance(obj[0], dict):
        obj = obj[0]
        repairs.append("unwrapped one-element list")
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object at the top level, got {type(obj).__name__}")
    for wrap in ("answer", "feedback", "result", "output"):
        if "descriptors" not in obj and isinstance(obj.get(wrap), dict):
            obj = obj[wrap]
            repairs.append(f"unwrapped {wrap!r}")
    descs: list[Descriptor] = []
    raw_labels: list[str] = []
    for i, d in enumerate(_as_list(obj, "descriptors", "", repairs, required=True)):
        p = f"descriptors[{i}]"
        if isinstance(d, str):
            raise ValueError(f"{p}: expected an object with label/region/confidence, got a string {d[:40]!r}")
        if not isinstance(d, dict):
            raise ValueError(f"{p}: expected an object, got {type(d).__name__}")
        label = d.get("label", d.get("name", d.get("feature")))
        if not isinstance(label, str) or not label.strip():
            raise ValueError(f"{p}.label: missing or not a non-empty string")
        if "confidence" not in d:
            raise ValueError(f"{p}.confidence: missing")
        conf, note = coerce_unit_interval(d["confidence"], f"{p}.confidence")
        if note:
            repairs.append(note)
        value, unit_from_value = _coerce_number(d.get("value"), f"{p}.value")
        unit = d.get("unit")
        if unit is not None and not isinstance(unit, str):
            unit = str(unit)
        unit = unit or unit_from_value
        _check_range(label, value, unit, f"{p}.value")
        note_txt = d.get("note", d.get("notes", d.get("evidence", ""))) or ""
        region = _region(d.get("region"), label, f"{p}.region", repairs)
        norm = normalise_label(label)
        stored_label = norm if (norm in FEATURE_LABELS or norm in QUANTITIES) else label.strip()
        descs.append(Descriptor(stored_label, region, value, unit, conf,
                                note_txt if isinstance(note_txt, str) else json.dumps(note_txt)))
        raw_labels.append(label)
    if "alignment_score" not in obj:
        alt = next((k for k in ("alignment", "score", "task_alignment") if k in obj), None)
        if alt is None:
            raise ValueError("alignment_score: missing (expected a number in [0, 1])")
        obj["alignment_score"] = obj[alt]
        repairs.append(f"alignment_score taken from {alt!r}")
    score, note = coerce_unit_interval(obj["alignment_score"], "alignment_score")
    if note:
        repairs.append(note)
    sugg: list[Suggestion] = []
    for i, s in enumerate(_as_list(obj, "suggestions", "", repairs, required=False)):
        p = f"suggestions[{i}]"
        if isinstance(s, str):
            raise ValueError(f"{p}: expected an object with term/direction/reason, got a string {s[:40]!r}")
        if not isinstance(s, dict):
            raise ValueError(f"{p}: expected an object, got {type(s).__name__}")
        term = s.get("term", s.get("reward_term", s.get("name")))
        if not isinstance(term, str) or not term.strip():
            raise ValueError(f"{p}.term: missing or not a non-empty string")
        direction = re.sub(r"[^a-z]+", "_", str(s.get("direction", "")).lower()).strip("_")
        if direction not in _DIRECTION_SYNONYMS:
            raise ValueError(f"{p}.direction: {s.get('direction')!r} is not one of {list(DIRECTIONS)}")
        reason = s.get("reason", s.get("why", "")) or ""
        sugg.append(Suggestion(term.strip(), _DIRECTION_SYNONYMS[direction],
                               reason if isinstance(reason, str) else json.dumps(reason)))
    btb = obj.get("better_than_best")
    if isinstance(btb, str):
        low = btb.strip().lower()
        if low in ("true", "yes", "better", "y"):
            btb = True
        elif low in ("false", "no", "worse", "n", "not better"):
            btb = False
        elif low in ("null", "none", "n/a", "unknown", "", "same", "equal"):
            btb = None
        else:
            raise ValueError(f"better_than_best: expected true, false or null, got {btb!r}")
    elif btb is not None and not isinstance(btb, bool):
        raise ValueError(f"better_than_best: expected true, false or null, got {btb!r}")
    unj = [u if isinstance(u, str) else json.dumps(u)
           for u in _as_list(obj, "unjudged", "", repairs, required=False) if u not in ("", None)]
    fb = MotionFeedback(critic=critic, task=task, descriptors=descs, features=discretise(descs),
                        alignment_score=score, suggestions=sugg, better_than_best=btb, unjudged=unj,
                        valid=True, error=None)
    return fb, raw_labels


def _attempt(text: str, critic: str, task: str, drop_incomplete: bool):
    repairs: list[str] = []
    try:
        obj, repairs = loads_lenient(text, drop_incomplete=drop_incomplete)
        fb, raw_labels = feedback_from_answer(obj, critic, task, repairs)
        return fb, raw_labels, None, repairs
    except (ValueError, SchemaError) as e:
        return None, [], str(e), repairs
    except Exception as e:  # noqa: BLE001 - model output must never crash the loop
        return None, [], f"unexpected parse failure: {type(e).__name__}: {e}", repairs


def parse_feedback(text: str | None, critic: str, task: str) -> ParseResult:
    """Parse a model answer; never raises. On success ``feedback.raw_text`` is the answer and
    ``feedback.meta["repairs"]`` lists what had to be repaired. A truncated answer is first
    closed as it is, then (if that does not validate) with its unfinished list element dropped."""
    text = text or ""
    fb, raw_labels, error, repairs = _attempt(text, critic, task, drop_incomplete=False)
    truncated = "closed truncated output" in repairs
    if fb is None and truncated:
        fb2, raw2, _, rep2 = _attempt(text, critic, task, drop_incomplete=True)
        if fb2 is not None:
            fb, raw_labels, repairs = fb2, raw2, rep2
    if fb is None:
        if truncated:
            error = f"{error} (the answer looks truncated: keep it shorter)"
        return ParseResult(None, error, repairs)
    fb.raw_text = text
    fb.meta["repairs"] = list(repairs)
    return ParseResult(fb, None, repairs, raw_labels)


# ----------------------------------------------------------------------------- comparisons

_ABSTENTIONS = (ABSTAIN, "none", "null", "tie", "equal", "same")
"""Values of ``preferred`` read as an abstention (JSON null too)."""


@dataclasses.dataclass
class ComparisonParse:
    comparison: Comparison | None
    error: str | None
    repairs: list[str]

    @property
    def ok(self) -> bool:
        return self.comparison is not None


def comparison_from_answer(obj: Any, critic: str, task: str, repairs: list[str]) -> Comparison:
    """Validate/coerce a decoded comparison answer; raises ValueError naming the field on failure."""
    if isinstance(obj, list) and len(obj) == 1 and isinstance(obj[0], dict):
        obj = obj[0]
        repairs.append("unwrapped one-element list")
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object at the top level, got {type(obj).__name__}")
    if "preferred" not in obj:
        raise ValueError(f"preferred: missing (expected one of {[*PREFERENCES, ABSTAIN]})")
    raw = obj["preferred"]
    if raw is not None and not isinstance(raw, str):
        raise ValueError(f"preferred: expected one of {[*PREFERENCES, ABSTAIN]}, got {raw!r}")
    word = "" if raw is None else raw.strip().lower()
    if raw is None or word in _ABSTENTIONS:
        preferred = None
    elif word in PREFERENCES:
        preferred = word
    else:
        raise ValueError(f"preferred: {raw!r} is not one of {[*PREFERENCES, ABSTAIN]}")
    if "confidence" not in obj:
        raise ValueError("confidence: missing (expected a number in [0, 1])")
    confidence, note = coerce_unit_interval(obj["confidence"], "confidence")
    if note:
        repairs.append(note)
    reason = obj.get("reason", "")
    reason = reason if isinstance(reason, str) else json.dumps(reason)
    return Comparison(preferred=preferred, confidence=confidence, reason=reason, critic=critic, task=task)


def parse_comparison(text: str | None, critic: str, task: str) -> ComparisonParse:
    """Parse a comparison answer; never raises. On success ``comparison.raw_text`` is the answer and
    ``comparison.meta["repairs"]`` lists what had to be repaired."""
    text = text or ""
    repairs: list[str] = []
    try:
        obj, repairs = loads_lenient(text)
        comparison = comparison_from_answer(obj, critic, task, repairs)
    except (ValueError, SchemaError) as e:
        return ComparisonParse(None, str(e), repairs)
    except Exception as e:  # noqa: BLE001 - model output must never crash the loop
        return ComparisonParse(None, f"unexpected parse failure: {type(e).__name__}: {e}", repairs)
    comparison.raw_text = text
    comparison.meta["repairs"] = list(repairs)
    return ComparisonParse(comparison, None, repairs)


# ----------------------------------------------------------------------------- token confidence

def combine_confidence(stated: float, token_prob: float, weight: float = 0.5) -> float:
    """Weighted geometric mean of the stated confidence and the model's token probability."""
    weight = min(max(weight, 0.0), 1.0)
    stated = min(max(stated, 0.0), 1.0)
    token_prob = min(max(token_prob, 0.0), 1.0)
    if stated == 0.0 or token_prob == 0.0:
        return 0.0 if weight not in (0.0, 1.0) else (token_prob if weight == 1.0 else stated)
    return float(math.exp((1 - weight) * math.log(stated) + weight * math.log(token_prob)))


def token_offsets(token_texts: list[str]) -> list[tuple[int, int]]:
    """Character spans of consecutive token texts in their concatenation."""
    spans, pos = [], 0
    for t in token_texts:
        spans.append((pos, pos + len(t)))
        pos += len(t)
    return spans


def apply_token_confidence(fb: MotionFeedback, raw_labels: list[str], spans: list[tuple[int, int]],
                           token_probs: list[float], weight: float = 0.5) -> MotionFeedback:
    """Combine each descriptor's stated confidence with the probability the model gave the tokens
    of its label (geometric mean over the label's tokens; the whole answer's geometric mean when
    the label cannot be located). ``spans`` are the tokens' character spans in ``fb.raw_text``.
    Stated confidences are kept in ``meta["stated_confidence"]``."""
    if not token_probs or fb.raw_text is None:
        return fb
    probs = [min(max(float(p), 1e-12), 1.0) for p in token_probs]
    overall = math.exp(sum(math.log(p) for p in probs) / len(probs))
    text = fb.raw_text
    search_from = 0
    stated, label_probs = [], []
    for d, raw in zip(fb.descriptors, raw_labels):
        idx = text.find(raw, search_from)
        p = overall
        if idx >= 0:
            search_from = idx + len(raw)
            toks = [k for k, (a, b) in enumerate(spans) if a < idx + len(raw) and b > idx and k < len(probs)]
            if toks:
                p = math.exp(sum(math.log(probs[k]) for k in toks) / len(toks))
        stated.append(d.confidence)
        label_probs.append(round(p, 6))
        d.confidence = round(combine_confidence(d.confidence, p, weight), 6)
    fb.features = discretise(fb.descriptors)
    fb.meta["stated_confidence"] = stated
    fb.meta["label_token_prob"] = label_probs
    fb.meta["token_confidence"] = round(overall, 6)
    fb.meta["token_confidence_weight"] = weight
    return fb
