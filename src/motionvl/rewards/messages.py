"""Bounded, echo-free problem messages: what a rejected reward candidate's LLM gets back.

A rejection goes into the next repair prompt, so its text is an input channel into the LLM:
it must stay short whatever the candidate holds, and it may quote the candidate only as a
short excerpt (a name, a few characters of an expression), never its strings or comments at
length. Every message the sandbox and the spec checks produce passes through `bound_problems`.
"""

from __future__ import annotations

import re

MAX_EXCERPT_CHARS = 32
"""Longest run of candidate text quoted in a message (names, a piece of an expression)."""
MAX_PROBLEM_CHARS = 320
"""Longest single problem line."""
MAX_PROBLEMS = 12
"""Problems listed in one rejection; the rest are counted."""
MAX_MESSAGE_CHARS = 4000
"""Longest whole message (all problems and the heading)."""

# a quoted run: `...`, or '...' / "..." with backslash escapes inside (Python's repr of a string holding both
# quote characters escapes one of them: the run must not end at an escaped quote)
_QUOTED = re.compile(r"(`[^`\n]*`|'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\")")
_QUOTE_CHARS = re.compile(r"[`'\"\\]")
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")


def excerpt(text, limit: int = MAX_EXCERPT_CHARS) -> str:
    """`text` as a short, printable excerpt: ASCII only, at most `limit` characters (then '...')."""
    text = _UNPRINTABLE.sub("?", str(text))
    return text if len(text) <= limit else text[: max(limit - 3, 1)] + "..."


def plain(text) -> str:
    """Candidate text (a name) as an excerpt without quote characters or backslashes (each becomes '?'), so
    that no later scrub can misread where a quote ends."""
    return excerpt(_QUOTE_CHARS.sub("?", str(text)))


def quote(text) -> str:
    """plain(text) in single quotes."""
    return "'" + plain(text) + "'"


def _shorten_quote(match: re.Match) -> str:
    quoted = match.group(0)
    quote, body = quoted[0], quoted[1:-1]
    return quote + excerpt(body) + quote if len(body) > MAX_EXCERPT_CHARS else quoted


def scrub(line: str, limit: int = MAX_PROBLEM_CHARS) -> str:
    """One problem line, bounded: non-printable characters replaced, every quoted run (`...`, '...',
    "...") cut to an excerpt, the whole line cut to `limit` characters."""
    line = " ".join(_UNPRINTABLE.sub("?", str(line)).split())
    line = _QUOTED.sub(_shorten_quote, line)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def bound_problems(problems) -> list[str]:
    """At most MAX_PROBLEMS scrubbed, de-duplicated lines in their order, plus a count of the rest."""
    seen, out = set(), []
    for problem in problems:
        line = scrub(problem)
        if line and line not in seen:
            seen.add(line)
            out.append(line)
    if len(out) > MAX_PROBLEMS:
        out = out[:MAX_PROBLEMS] + [f"... and {len(out) - MAX_PROBLEMS} more problem(s); fix the ones above first"]
    return out


def bounded_message(heading: str, problems: list[str]) -> str:
    """`heading` then one problem per line, at most MAX_MESSAGE_CHARS in all."""
    text = scrub(heading) + ("\n  - " + "\n  - ".join(problems) if problems else "")
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."
