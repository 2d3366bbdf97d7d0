"""Reading a reward spec out of a model's answer.

Accepted, in this order: the whole answer as JSON (what JSON-schema output gives); a fenced
```json / ```yaml block holding a mapping with `terms`; the first balanced JSON object with
`terms` anywhere in the text. Reading is linear in the answer's length: fences and braces are found
in one pass each, and the JSON decoder is handed at most DECODE_BUDGET times the answer's length in
all (a pathological answer, such as 400 000 opening braces, is refused after that, not parsed for
minutes). The callers bound an answer's size before it gets here. A fenced ```python block supplies `code` when the mapping has none.
Keys the spec format does not know but answers commonly carry (rationale, reasoning, changes,
explanation) are taken out as the rationale; any other unknown key is left for RewardSpec to
reject with its list of known keys.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

RATIONALE_KEYS = ("rationale", "reasoning", "explanation", "changes", "notes", "thoughts")

_LANG = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)")
_JSON_SYNTAX = re.compile(r'[{}"\\]')
DECODE_BUDGET = 4
"""The JSON decoder reads at most this many times the answer's length, over every attempt."""


class AnswerError(ValueError):
    """No usable spec in the answer; the message is what the model is told to fix."""


def response_schema() -> dict:
    """JSON schema of the answer (OpenAI `response_format` json_schema)."""
    term = {"type": "object",
            "properties": {"weight": {"type": "number", "minimum": 0, "maximum": 1},
                           "params": {"type": "object"},
                           "source": {"type": "string", "enum": ["library", "generated"]}},
            "required": ["weight"]}
    return {"type": "object",
            "properties": {"rationale": {"type": "string"},
                           "name": {"type": "string"},
                           "description": {"type": "string"},
                           "terms": {"type": "object", "additionalProperties": term},
                           "code": {"type": "string"}},
            "required": ["rationale", "terms"]}


class _Decoder:
    """json.loads within a budget of characters (DECODE_BUDGET x the answer's length over every call)."""

    def __init__(self, text: str):
        self.left = DECODE_BUDGET * max(len(text), 1)

    def __call__(self, text: str):
        if len(text) > self.left:
            raise ValueError("decode budget spent")
        self.left -= len(text)
        try:
            return _decode(text)
        except RecursionError:
            raise ValueError("nested too deeply") from None


def _decode(text: str):
    return json.loads(text)


def _as_mapping(text: str, lang: str, decode: _Decoder) -> dict | None:
    loaders = (decode,) if lang == "json" else (decode, yaml.safe_load)
    for load in loaders:
        try:
            value = load(text)
        except (ValueError, yaml.YAMLError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None


def _fences(text: str) -> tuple[list[tuple[str, str]], bool]:
    """([(language, body)] of the closed ``` blocks, whether a block is left open), in one pass."""
    blocks, pos = [], 0
    while True:
        start = text.find("```", pos)
        if start < 0:
            return blocks, False
        newline = text.find("\n", start + 3)
        if newline < 0:
            return blocks, False
        end = text.find("```", newline + 1)
        if end < 0:
            return blocks, True
        lang = _LANG.match(text, start + 3, newline).group(1)
        blocks.append((lang.lower(), text[newline + 1:end]))
        pos = end + 3


def _balanced_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every balanced {...}, outermost first, found in one pass. Inside braces, JSON strings (with
    their escapes) are skipped; outside them a quote is prose."""
    spans, stack, in_string, skip = [], [], False, -1
    for m in _JSON_SYNTAX.finditer(text):
        i = m.start()
        if i == skip:  # the character after a backslash in a string
            continue
        ch = text[i]
        if in_string:
            if ch == "\\":
                skip = i + 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = bool(stack)
        elif ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            spans.append((stack.pop(), i + 1))
    return sorted(spans)


def _balanced_objects(text: str, decode: _Decoder):
    """Mappings decoded from balanced {...} spans, earliest first; spans inside one already decoded are skipped."""
    covered = -1
    for start, end in _balanced_spans(text):
        if start < covered:
            continue
        try:
            value = decode(text[start:end])
        except ValueError:
            if decode.left <= 0:
                return
            continue
        if isinstance(value, dict):
            covered = end
            yield value


def extract_spec(text: str, *, truncated: bool = False) -> tuple[dict, str]:
    """(spec dict, rationale) from an answer; AnswerError naming what is missing.

    `truncated`: the server said the answer hit its token limit (finish_reason "length"), so a
    missing or broken object is reported as cut off rather than as malformed.
    """
    if not isinstance(text, str) or not text.strip():
        raise AnswerError("the answer is empty: reply with one JSON object holding 'rationale' and 'terms'")
    stripped = text.strip()
    decode = _Decoder(text)
    found: dict | None = _as_mapping(stripped, "json", decode)
    blocks, open_fence = _fences(text)
    if found is None or "terms" not in found:
        found = None
        for lang, body in blocks:
            if lang in ("json", "yaml", "yml", ""):
                value = _as_mapping(body, lang, decode)
                if value is not None and "terms" in value:
                    found = value
                    break
    if found is None:
        found = next((v for v in _balanced_objects(text, decode) if "terms" in v), None)
    if found is None:
        if truncated:
            raise AnswerError("the answer was cut off at the token limit before the JSON object closed: answer "
                              "again, shorter (a one-sentence rationale, only the terms, short code)")
        if open_fence and not blocks:
            raise AnswerError("the answer's code block is not closed (``` missing); the reply looks truncated")
        hint = "no JSON object" if "{" not in text else "no JSON object with a 'terms' mapping could be parsed"
        raise AnswerError(f"{hint} in the answer ({len(text)} characters): reply with exactly one JSON object "
                          "{\"rationale\": ..., \"name\": ..., \"terms\": {name: {\"weight\": w, \"params\": {...}}}, "
                          "\"code\": optional} and nothing else")
    spec = dict(found)
    notes = [spec.pop(k) for k in RATIONALE_KEYS if k in spec]
    rationale = "; ".join(n if isinstance(n, str) else json.dumps(n) for n in notes)
    if not spec.get("code"):
        code = next((body for lang, body in blocks if lang in ("python", "py")), None)
        if code and code.strip():
            spec["code"] = code
        elif "code" in spec:
            spec.pop("code")  # "" or null: no generated terms
    return spec, rationale[:2000]


def spec_answer(spec: dict, rationale: str) -> str:
    """An answer text in the format `extract_spec` reads (what the rules backend 'says')."""
    return json.dumps({"rationale": rationale, **spec}, indent=1, default=_jsonable)


def _jsonable(value: Any):
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")
