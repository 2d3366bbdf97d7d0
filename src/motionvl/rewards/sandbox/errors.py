"""Rejections of generated reward code: one `line L: rule: what to do instead` string per problem.

Every problem passes through messages.bound_problems, so a rejection stays short and quotes the
candidate only in excerpts, whichever layer (static rules, run-time guards, the worker process)
found it.
"""

from __future__ import annotations

from motionvl.rewards.messages import bound_problems, scrub


class RewardCodeError(ValueError):
    """Generated reward code was rejected; `problems` are bounded `line L: rule: explanation` strings."""

    def __init__(self, problems):
        self.problems = bound_problems([problems] if isinstance(problems, str) else problems)
        super().__init__("\n".join(self.problems))


class GuardError(Exception):
    """A sandbox rule broken at run time; `rule` is the short rule name used in messages."""

    def __init__(self, rule: str, message: str):
        super().__init__(message)
        self.rule = rule


def problem(line: int, rule: str, text: str) -> str:
    return f"line {int(line)}: {rule}: {text}"


def problem_from_exception(exc: BaseException, filename: str, line: int) -> str:
    """`line L: rule: ...` for an exception raised while running generated code; the line is the
    innermost frame of the generated code, else `line`."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    if isinstance(exc, GuardError):
        return problem(line, exc.rule, str(exc))
    if isinstance(exc, MemoryError):
        return problem(line, "memory", "ran out of memory; keep arrays at (N,) or (N, J)")
    if isinstance(exc, RecursionError):
        return problem(line, "nesting", "the calls nest too deeply; call fewer helpers inside each other")
    # the exception's words may hold candidate strings (as reprs): each quoted run cut to an excerpt, then the
    # whole (cutting first could leave a quote unclosed, and the rest of the string unrecognised as a quote)
    text = scrub(str(exc), 120)
    if isinstance(exc, TypeError) and ("positional argument" in text or "keyword argument" in text):
        return problem(line, "signature", f"{text}; functions take only their documented arguments (no out=, "
                       "dtype=, shape=, by keyword or position): see the np function list")
    hint = ""
    if "broadcast" in text:
        hint = " (check array shapes: joints are (N, J), feet (N, 2) or (N, 2, 3), per-robot limits (J,))"
    elif "read-only" in text:
        hint = " (state arrays are read-only: build a new array instead, e.g. np.where(mask, a, b))"
    return problem(line, "runtime-error", f"{type(exc).__name__}: {text}{hint}; fix the expression on this line")
