"""Reading a reward spec out of a model's answer.

Accepted, in this order: the whole answer as JSON (what JSON-schema output gives); a fenced
```json / ```yaml block holding a mapping with `terms`; the first balanced JSON object with
`terms` anywhere in the text. A fenced ```python block supplies `code` when the mapping has none.
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

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_OPEN_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*)\Z", re.DOTALL)


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


def _as_mapping(text: str, lang: str) -> dict | None:
    loaders = (json.loads,) if lang == "json" else (json.loads, yaml.safe_load)
    for load in loaders:
        try:
            value = load(text)
        except (ValueError, yaml.YAMLError):
            continue
        if isinstance(value, dict):
            return value
    return None


def _balanced_objects(text: str):
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            yield value


def extract_spec(text: str, *, truncated: bool = False) -> tuple[dict, str]:
    """(spec dict, rationale) from an answer; AnswerError naming what is missing.

    `truncated`: the server said the answer hit its token limit (finish_reason "length"), so a
    missing or broken object is reported as cut off rather than as malformed.
    """
    if not isinstance(text, str) or not text.strip():
        raise AnswerError("the answer is empty: reply with one JSON object holding 'rationale' and 'terms'")
    stripped = text.strip()
    found: dict | None = _as_mapping(stripped, "json")
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]
    if found is None or "terms" not in found:
        found = None
        for lang, body in blocks:
            if lang in ("json", "yaml", "yml", ""):
                value = _as_mapping(body, lang)
                if value is not None and "terms" in value:
                    found = value
                    break
    if found is None:
        found = next((v for v in _balanced_objects(text) if "terms" in v), None)
    if found is None:
        if truncated:
            raise AnswerError("the answer was cut off at the token limit before the JSON object closed: answer "
                              "again, shorter (a one-sentence rationale, only the terms, short code)")
        if _OPEN_FENCE.search(text) and not blocks:
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
