"""Restricted compile of checked reward code: every allocating operator routed through the Guard.

The checked tree is rewritten so that binary, unary and comparison operators, method calls,
computed indices and loop iterables call the module's guard (under names starting with `__`,
which generated source can never spell), then compiled and run at module level only (the
`def`s and constants) in a namespace holding just the guarded `np`, the guarded builtins and
those hooks. `compile_reward_code` returns the terms, each a guarded function of the state.

Compiler warnings the candidate's text raises (invalid escape sequences, `"x" is 1`, ...) are
captured, never printed: de-duplicated and bounded, they are kept as `CompiledCode.warnings`.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Callable

import numpy as np

from motionvl.rewards.sandbox import namespace
from motionvl.rewards.sandbox.errors import RewardCodeError, problem, problem_from_exception
from motionvl.rewards.sandbox.guard import Guard
from motionvl.rewards.sandbox.rules import (
    _BINOP_SYMBOLS,
    _COMPARE_SYMBOLS,
    _UNARY_SYMBOLS,
    TERM_RE,
    bound_warnings,
    capture_warnings,
    check_source,
)
from motionvl.rewards.state import RewardState


@dataclasses.dataclass
class RewardTerm:
    name: str  # term name without the _reward_/_cost_ prefix
    sign: int  # +1 reward, -1 cost
    fn: Callable[[RewardState], np.ndarray]  # guarded; does not check the output (see outputs.evaluate_term)
    source_name: str  # the function name in the source, e.g. "_reward_track_forward_speed"
    line: int = 0  # line of its `def`
    filename: str = "<generated>"


@dataclasses.dataclass(frozen=True)
class CompiledCode:
    """A candidate after the static rules and the restricted compile."""

    source: str
    filename: str
    terms: dict  # name -> RewardTerm, in definition order
    fields: frozenset  # the state fields the code reads
    guard: Guard = dataclasses.field(default_factory=Guard, compare=False, repr=False)  # the terms' run-time limits
    warnings: tuple = ()  # the compiler's warnings about the source: bounded `line L: warning: ...` lines


def _guard_call(name: str, *args, keywords=()) -> ast.Call:
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=list(args), keywords=list(keywords))


class _Instrument(ast.NodeTransformer):
    """Route every allocating operator through the module's Guard (names start with `__`, so the
    generated source itself can never refer to them)."""

    def visit_BinOp(self, node):
        self.generic_visit(node)
        op = ast.Constant(_BINOP_SYMBOLS[type(node.op)])
        return ast.copy_location(_guard_call("__mvl_binop", op, node.left, node.right), node)

    def visit_AugAssign(self, node):  # `x += y` -> `x = x + y`: never in-place (no mutation)
        self.generic_visit(node)
        value = _guard_call("__mvl_binop", ast.Constant(_BINOP_SYMBOLS[type(node.op)]),
                            ast.Name(id=node.target.id, ctx=ast.Load()), node.value)
        return ast.copy_location(ast.Assign(targets=[node.target], value=value), node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return node
        return ast.copy_location(_guard_call("__mvl_unary", ast.Constant(_UNARY_SYMBOLS[type(node.op)]), node.operand), node)

    def visit_Compare(self, node):
        self.generic_visit(node)
        op = ast.Constant(_COMPARE_SYMBOLS[type(node.ops[0])])
        return ast.copy_location(_guard_call("__mvl_compare", op, node.left, node.comparators[0]), node)

    def visit_Call(self, node):
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Attribute) and not (isinstance(func.value, ast.Name) and func.value.id == "np"):
            call = _guard_call("__mvl_method", func.value, ast.Constant(func.attr), *node.args, keywords=node.keywords)
            return ast.copy_location(call, node)
        return node

    def visit_Subscript(self, node):
        self.generic_visit(node)

        def plain(index):
            if isinstance(index, (ast.Slice, ast.Constant)):
                return index
            return ast.copy_location(_guard_call("__mvl_index", index), index)

        if isinstance(node.slice, ast.Tuple):
            node.slice.elts = [plain(e) for e in node.slice.elts]
        else:
            node.slice = plain(node.slice)
        return node

    def _bounded(self, iterable):
        if isinstance(iterable, ast.Attribute):  # state.joint_names: length known only at run time
            return ast.copy_location(_guard_call("__mvl_iterable", iterable), iterable)
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id in ("enumerate", "zip"):
            iterable.args = [self._bounded(a) for a in iterable.args]
        return iterable

    def visit_For(self, node):
        self.generic_visit(node)
        node.iter = self._bounded(node.iter)
        return node

    def visit_comprehension(self, node):
        self.generic_visit(node)
        node.iter = self._bounded(node.iter)
        return node


def _bind(guard: Guard, raw: Callable) -> Callable[[RewardState], np.ndarray]:
    def term(state: RewardState) -> np.ndarray:
        with guard.session(state.num_envs):
            return raw(state)

    term.__name__ = term.__qualname__ = raw.__name__
    return term


def compile_code(source: str, *, filename: str = "<generated>") -> CompiledCode:
    """Static checks + restricted, instrumented compile. Runs only the module level (defs and constants),
    never a term. RewardCodeError on any problem; nothing else escapes."""
    checked = check_source(source, filename)
    guard = Guard()
    safe_builtins = namespace.make_builtins(guard)
    module = {
        "__builtins__": safe_builtins,
        "__name__": "motionvl_reward_candidate",
        "np": namespace.make_numpy_namespace(guard),
        "__mvl_binop": guard.binop, "__mvl_unary": guard.unary, "__mvl_compare": guard.compare,
        "__mvl_method": namespace.make_method_dispatch(guard, safe_builtins), "__mvl_index": guard.index,
        "__mvl_iterable": guard.iterable,
    }
    try:
        code, compiled_warnings = capture_warnings(
            lambda: compile(ast.fix_missing_locations(_Instrument().visit(checked.tree)), filename, "exec"), filename)
        with guard.session(0):
            exec(code, module)  # noqa: S102 - checked module: only defs and constant literals
    except RecursionError:
        raise RewardCodeError(problem(1, "nesting", "the code is nested too deeply to compile")) from None
    except Exception as exc:  # noqa: BLE001 - a constant expression failed (1/0, repetition guard, ...)
        raise RewardCodeError(problem_from_exception(exc, filename, 1)) from None
    terms = {}
    for fname, node in checked.functions.items():
        match = TERM_RE.match(fname)
        if match:
            terms[match[2]] = RewardTerm(
                name=match[2], sign=1 if match[1] == "reward" else -1, fn=_bind(guard, module[fname]),
                source_name=fname, line=node.lineno, filename=filename,
            )
    return CompiledCode(source, filename, terms, checked.fields | {"base_pos"},  # base_pos: state.num_envs
                        guard=guard, warnings=bound_warnings([*checked.warnings, *compiled_warnings]))


def compile_reward_code(source: str, *, filename: str = "<generated>") -> dict[str, RewardTerm]:
    """The terms of `source` keyed by name without prefix (see compile_code)."""
    return compile_code(source, filename=filename).terms
