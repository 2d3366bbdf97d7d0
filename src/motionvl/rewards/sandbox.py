"""A safe home for generated (untrusted) reward code: static checks, restricted compile, isolated test.

Reward code format (the synthesizer prompt quotes this)
-------------------------------------------------------
A Python module holding only:
- term functions `def _reward_<name>(state):` (added to the reward) and `def _cost_<name>(state):`
  (subtracted). Each returns one float per environment: an (N,) array computed from `state`, a
  read-only RewardState whose fields are listed in STATE_API_DOC. <name> uses lowercase letters,
  digits and `_`. Weights in [0, 1] come from the reward spec, not from the code, so keep every
  term roughly within [0, 1], e.g. `np.exp(-err / sigma)`.
- optional helper functions with lowercase names (semantic state variables) that terms call;
- optional module-level constants: numbers, strings, tuples/lists of them (`SIGMA = 0.25`).
`np` is NOT numpy: it is a namespace holding only whitelisted math (listed, with the state
fields, by `reward_code_api_doc()`); masks are applied with np.where or by multiplying.
Arrays support a few methods (`x.sum(axis=1)`, `x.clip(0, 1)`, `x.astype(float)`, ...) and the
attributes T, shape, ndim, size. Builtins: abs min max len range float int bool round sum
enumerate zip. Example:

    SIGMA = 0.25

    def forward_speed_error(state):
        return np.square(state.base_lin_vel[:, 0] - state.command[:, 0])

    def _reward_track_forward_speed(state):
        return np.exp(-forward_speed_error(state) / SIGMA)

    def _cost_torque(state):
        return np.mean(np.square(state.joint_torque / state.effort_limit), axis=1)

Rules (checked before anything runs; each problem reads `line L: rule: what to do instead`)
------------------------------------------------------------------------------------------
- Top level: only `def`s, constants and a docstring. No import, class, global/nonlocal, try,
  with, while, raise, del, assert, lambda, yield/async, walrus, f-strings, dict/set displays,
  nested functions or decorators.
- Names: locals, parameters, module constants, module functions (only called, never passed as
  values), `np`, `state` and the builtins above. Nothing starting with `_` except term names
  (so no dunders), no open/exec/eval/getattr/__import__/... .
- Attributes: `state.<documented field>`, `np.<listed name>`, and the listed array methods and
  attributes on any value. No attribute starting with `_`, no str.format.
- Calls: module functions, `np.<function>`, the builtins, listed array methods; keywords only
  axis, keepdims, ord, decimals, ddof, nan/posinf/neginf, min/max/a_min/a_max, start, strict.
- Loops: `for`/comprehensions only over range(<int literals>) with <= 64 steps, a literal
  tuple/list, a module-level tuple constant, state.joint_names, or enumerate/zip of these.
  No recursion (the call graph must be acyclic). The statically counted operations of a term
  (loops multiply, calls add) must stay <= 20000.
- No mutation: assignments only to plain names (`x += y` means `x = x + y`); no `out=`.
- Literals: ints <= 2**63, strings <= 4096 chars, displays <= 256 items; `**` exponent literals
  within [-64, 64]; `seq * n` with a literal n <= 4096; no `@`, `<<`, `>>`, `'%'` formatting,
  chained comparisons (`a < b < c`: write `(a < b) & (b < c)`).
- At run time (see safe_math.py) intermediate arrays stay <= 64 values per environment, a term
  call does <= 4096 element-operations per environment, indices are plain ints (no masks or
  index arrays: use np.where), ints/strings/sequences cannot grow without bound.
- The test run (separate process, wall-time, CPU, memory, file-size and file-descriptor limits)
  calls every term on random plausible batches of two sizes and requires a finite (N,) array.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import math
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from motionvl.rewards import safe_math
from motionvl.rewards.safe_math import (
    MAX_ITERATIONS,
    MAX_SEQ_LEN,
    NP_CONSTANTS,
    NP_FUNCTIONS,
    NP_NAMES,
    SAFE_BUILTIN_NAMES,
    Guard,
    GuardError,
)
from motionvl.rewards.state import STATE_API_DOC, RewardState
from motionvl.robot import load_robot_config

MAX_SOURCE_CHARS = 64_000
MAX_AST_DEPTH = 60
MAX_STATIC_STEPS = 20_000
MAX_DISPLAY_ITEMS = 256
MAX_INT_LITERAL = 2**63
MAX_POW_EXPONENT = 64
MEM_HEADROOM_BYTES = 1 << 30  # test process address space on top of the interpreter + numpy

TERM_RE = re.compile(r"^_(reward|cost)_([a-z][a-z0-9_]*)$")
HELPER_RE = re.compile(r"^[a-z][a-z0-9_]*$")
LOCAL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

STATE_ATTRS = frozenset(f.name for f in dataclasses.fields(RewardState)) | {"num_envs"}
SAFE_METHODS = frozenset(
    "sum mean std var min max prod any all argmax argmin clip astype reshape copy flatten ravel "
    "squeeze round transpose cumsum index count startswith endswith".split()
)
SAFE_ATTRS = frozenset("T shape ndim size real imag".split())
SAFE_KEYWORDS = frozenset(
    "axis keepdims ord decimals ddof nan posinf neginf min max a_min a_max start strict".split()
)
_DTYPE_ARGS = ("float", "int", "bool")
_BINOP_SYMBOLS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
}
_COMPARE_SYMBOLS = {
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
    ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
}
_UNARY_SYMBOLS = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~"}

_AVAILABLE = "available builtins: " + ", ".join(SAFE_BUILTIN_NAMES)
_NAME_HINTS = {
    "open": "reward code cannot read or write files",
    "__import__": "reward code cannot import anything; use `np.<function>` and `state.<field>`",
    "numpy": "use the provided `np` namespace (it is not the numpy module)",
    "math": "use `np.<function>` instead of math",
    "any": "use np.any(x)", "all": "use np.all(x)", "pow": "use `x ** 2` with a small literal exponent",
    "list": "use a [...] display", "tuple": "use a (...) display",
    **dict.fromkeys(("exec", "eval", "compile"), "reward code cannot run other code"),
    **dict.fromkeys(
        ("getattr", "setattr", "delattr", "hasattr", "vars", "globals", "locals", "dir", "type",
         "object", "super", "memoryview", "isinstance", "id", "callable"),
        "no reflection; use `state.<field>` and `np.<function>` directly",
    ),
    **dict.fromkeys(("print", "input", "breakpoint", "help", "exit", "quit"), "reward code must be silent and non-interactive"),
}
_NP_HINTS = {
    "linalg": ": use np.linalg_norm(x, axis=-1) (or np.norm)", "zeros": ": use np.zeros_like(state.base_height)",
    "ones": ": use np.ones_like(state.base_height)", "full": ": use np.full_like(state.base_height, value)",
    "dot": ": use np.sum(a * b, axis=-1)", "newaxis": ": index with None, e.g. x[:, None]",
    **dict.fromkeys(("save", "load", "loadtxt", "savetxt", "fromfile", "memmap", "genfromtxt"), ": reward code cannot touch files"),
}
_STATEMENT_RULES = {
    ast.While: ("while-loop", "while loops are not allowed (they could run forever); "
                "use `for i in range(K)` with a literal K <= 64, or vectorised numpy"),
    ast.Import: ("import", "imports are not allowed; the only math is the `np` namespace and the only data is `state`"),
    ast.ImportFrom: ("import", "imports are not allowed; the only math is the `np` namespace and the only data is `state`"),
    ast.ClassDef: ("class", "classes are not allowed; write plain functions"),
    ast.Global: ("global", "global/nonlocal are not allowed; terms must be pure functions of `state`"),
    ast.Nonlocal: ("global", "global/nonlocal are not allowed; terms must be pure functions of `state`"),
    ast.Try: ("try", "try/except is not allowed; make the computation safe instead (np.clip, np.where, + 1e-6)"),
    ast.With: ("with", "`with` is not allowed"),
    ast.AsyncWith: ("async", "async code is not allowed"),
    ast.AsyncFor: ("async", "async code is not allowed"),
    ast.AsyncFunctionDef: ("async", "async functions are not allowed"),
    ast.FunctionDef: ("nested-function", "define helper functions at module level, not inside other functions"),
    ast.Raise: ("raise", "raise is not allowed; return a value for every environment"),
    ast.Delete: ("delete", "del is not allowed"),
    ast.Assert: ("assert", "assert is not allowed; use np.where/np.clip to handle edge cases"),
}
if hasattr(ast, "TryStar"):
    _STATEMENT_RULES[ast.TryStar] = _STATEMENT_RULES[ast.Try]
_EXPRESSION_RULES = {
    ast.Lambda: ("lambda", "lambda is not allowed; define a module-level helper function"),
    ast.NamedExpr: ("walrus", "`:=` is not allowed; use a separate assignment"),
    ast.JoinedStr: ("f-string", "f-strings are not allowed; reward code has no use for text"),
    ast.Yield: ("yield", "generators are not allowed; return an array"),
    ast.YieldFrom: ("yield", "generators are not allowed; return an array"),
    ast.Await: ("async", "async code is not allowed"),
    ast.Dict: ("container", "dicts are not allowed; use tuples or separate variables"),
    ast.Set: ("container", "sets are not allowed; use tuples"),
    ast.DictComp: ("container", "dict comprehensions are not allowed; use a list comprehension"),
    ast.SetComp: ("container", "set comprehensions are not allowed; use a list comprehension"),
    ast.Starred: ("starred", "`*x` unpacking is not allowed; pass arguments explicitly"),
}


class RewardCodeError(ValueError):
    """Generated reward code was rejected; `problems` are `line L: rule: explanation` strings."""

    def __init__(self, problems):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


@dataclasses.dataclass
class RewardTerm:
    name: str  # term name without the _reward_/_cost_ prefix
    sign: int  # +1 reward, -1 cost
    fn: Callable[[RewardState], np.ndarray]  # guarded; does not check the output (see evaluate_term)
    source_name: str  # the function name in the source, e.g. "_reward_track_forward_speed"
    line: int = 0  # line of its `def`
    filename: str = "<generated>"


# ---------------------------------------------------------------------------------------------
# Static checks
# ---------------------------------------------------------------------------------------------
class _Normalize(ast.NodeTransformer):
    """Drop annotations (never evaluated, never checked) and fold `-<number>` into a literal."""

    def visit_arg(self, node):
        node.annotation = None
        return node

    def visit_FunctionDef(self, node):
        node.returns = None
        return self.generic_visit(node)

    def visit_AnnAssign(self, node):
        if node.value is None:
            return ast.copy_location(ast.Pass(), node)
        return self.visit(ast.copy_location(ast.Assign(targets=[node.target], value=node.value), node))

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        operand = node.operand
        if isinstance(node.op, (ast.USub, ast.UAdd)) and isinstance(operand, ast.Constant) \
                and type(operand.value) in (int, float):
            value = -operand.value if isinstance(node.op, ast.USub) else operand.value
            return ast.copy_location(ast.Constant(value), node)
        return node


def _fold(node):
    """Value of a small constant expression, or None (unknown) / math.inf (absurdly large)."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow):
        left, right = _fold(node.left), _fold(node.right)
        if left is None or right is None:
            return None
        if math.inf in (abs(left), abs(right)):
            return math.inf
        if isinstance(node.op, ast.Pow) and (abs(right) > MAX_POW_EXPONENT or abs(left) > 2**64):
            return math.inf
        try:
            value = {ast.Add: lambda: left + right, ast.Sub: lambda: left - right,
                     ast.Mult: lambda: left * right, ast.Div: lambda: left / right,
                     ast.Pow: lambda: left ** right}[type(node.op)]()
        except (ArithmeticError, ValueError):
            return None
        return value if isinstance(value, (int, float)) else None  # not complex
    return None


def _too_deep(tree) -> ast.AST | None:
    """A node nested deeper than MAX_AST_DEPTH, found iteratively (the checks below recurse)."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_AST_DEPTH:
            return node
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return None


class _Checker:
    """Walks the normalised module once, collecting every rule violation."""

    def __init__(self):
        self.problems: list[tuple[int, str, str]] = []
        self.functions: dict[str, ast.FunctionDef] = {}
        self.constants: dict[str, int | None] = {}  # name -> length if a literal tuple/list
        self.calls: dict[str, list[tuple[str, int]]] = {}
        self.bounds: dict[int, int] = {}  # id(For / comprehension) -> iteration bound
        self.iter_calls: set[int] = set()  # range/enumerate/zip calls in iteration position
        self.scope: set[str] = set()
        self.current: str | None = None

    def add(self, node, rule: str, text: str):
        self.problems.append((getattr(node, "lineno", 1), rule, text))

    # -- module --------------------------------------------------------------------------
    def check_module(self, tree: ast.Module):
        for stmt in tree.body:  # register first: functions may call functions defined later
            if isinstance(stmt, ast.FunctionDef):
                if stmt.name in self.functions:
                    self.add(stmt, "duplicate", f"`{stmt.name}` is defined twice; keep one definition")
                elif not (TERM_RE.match(stmt.name) or HELPER_RE.match(stmt.name)):
                    self.add(stmt, "function-name", f"`{stmt.name}`: terms are `_reward_<name>`/`_cost_<name>` "
                             "and helpers are lowercase names (letters, digits, `_`) not starting with `_`")
                self.functions[stmt.name] = stmt
        for index, stmt in enumerate(tree.body):
            if isinstance(stmt, ast.FunctionDef):
                self.check_function(stmt)
            elif isinstance(stmt, ast.Assign):
                self.check_constant(stmt)
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
                    and isinstance(stmt.value.value, str) and index == 0:
                self.expr(stmt.value)  # the module docstring (size-checked like any literal)
            elif type(stmt) in _STATEMENT_RULES and not isinstance(stmt, ast.FunctionDef):
                self.add(stmt, *_STATEMENT_RULES[type(stmt)])
            else:
                self.add(stmt, "module-statement", "only function definitions, constants (NAME = literal) and a "
                         "docstring may appear at module level; put computations inside functions")
        terms = [name for name in self.functions if TERM_RE.match(name)]
        if not terms and not any(rule == "syntax" for _, rule, _ in self.problems):
            self.add(tree.body[0] if tree.body else tree, "no-terms", "define at least one term: "
                     "`def _reward_<name>(state):` or `def _cost_<name>(state):` returning an (N,) array")
        taken = {}
        for name in terms:
            short = TERM_RE.match(name)[2]
            if short in taken:
                self.add(self.functions[name], "duplicate", f"`{name}` and `{taken[short]}` share the term name `{short}`; rename one")
            taken[short] = name

    def check_constant(self, stmt: ast.Assign):
        if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            self.add(stmt, "module-statement", "module-level assignments must be `NAME = literal`")
            return
        name = stmt.targets[0].id
        self.check_new_name(stmt, name)
        if name in self.constants or name in self.functions:
            self.add(stmt, "duplicate", f"`{name}` is defined twice; define each constant once")
        self.check_constant_expr(stmt.value)
        self.scope = set()
        self.expr(stmt.value)
        value = stmt.value
        self.constants[name] = len(value.elts) if isinstance(value, (ast.Tuple, ast.List)) else None

    def check_constant_expr(self, node):
        """Module constants and parameter defaults: literals, arithmetic, earlier constants, np.pi."""
        for sub in ast.walk(node):
            ok = isinstance(sub, (ast.Constant, ast.Tuple, ast.List, ast.UnaryOp, ast.BinOp, ast.Load,
                                  ast.operator, ast.unaryop)) \
                or (isinstance(sub, ast.Name) and sub.id in self.constants) \
                or (isinstance(sub, ast.Name) and sub.id == "np") \
                or (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
                    and sub.value.id == "np" and sub.attr in NP_CONSTANTS)
            if not ok:
                self.add(sub, "constant", "constants and default values must be literals (numbers, strings, "
                         "tuples), arithmetic on them, earlier constants or np.pi/np.e/np.inf")
                return

    def check_new_name(self, node, name: str):
        if not LOCAL_RE.match(name):
            self.add(node, "name", f"`{name}`: names use ASCII letters, digits and `_` and must not start with `_`")
        elif name in ("np", "state") or name in SAFE_BUILTIN_NAMES:
            self.add(node, "shadow", f"`{name}` is reserved (the np namespace, the state or a builtin); pick another name")
        elif name in self.functions:
            self.add(node, "shadow", f"`{name}` is a function of this module; pick another name")

    # -- functions ---------------------------------------------------------------------------
    def check_function(self, fn: ast.FunctionDef):
        self.current = fn.name
        self.calls[fn.name] = []
        if fn.decorator_list:
            self.add(fn, "decorator", "decorators are not allowed")
        args = fn.args
        params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
        if args.vararg or args.kwarg:
            self.add(fn, "signature", "*args/**kwargs are not allowed; list the parameters")
        self.scope = set()
        for default in (*args.defaults, *(d for d in args.kw_defaults if d is not None)):
            self.check_constant_expr(default)
            self.expr(default)
        if TERM_RE.match(fn.name) and (params != ["state"] or args.defaults or args.kwonlyargs):
            self.add(fn, "signature", f"a term takes exactly one parameter named `state`: def {fn.name}(state):")
        stores = {name: fn for name in params}  # local name -> node binding it (for the problem's line)
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                if node.id not in stores or stores[node.id] is fn:
                    stores[node.id] = node
        for name, node in stores.items():
            if node is not fn or name != "state":  # `state` may only be a parameter, never rebound
                self.check_new_name(node, name)
            if name in self.constants:
                self.add(node, "shadow", f"`{name}` is a module constant; do not reuse the name for a local")
        self.scope = set(stores)
        body = fn.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # docstring
        for stmt in body:
            self.stmt(stmt)
        self.current = None

    def stmt(self, node):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self.target(target)
            self.expr(node.value)
        elif isinstance(node, ast.AugAssign):
            self.target(node.target)
            if not isinstance(node.target, ast.Name):
                return
            self.binop_rules(node, node.op, node.target, node.value)
            self.expr(node.value)
        elif isinstance(node, ast.Return):
            if node.value is not None:
                self.expr(node.value)
        elif isinstance(node, ast.If):
            self.expr(node.test)
            for sub in (*node.body, *node.orelse):
                self.stmt(sub)
        elif isinstance(node, ast.For):
            self.target(node.target)
            self.bounds[id(node)] = self.iteration(node.iter)
            for sub in (*node.body, *node.orelse):
                self.stmt(sub)
        elif isinstance(node, ast.Expr):
            self.expr(node.value)
        elif isinstance(node, (ast.Pass, ast.Break, ast.Continue)):
            pass
        elif type(node) in _STATEMENT_RULES:
            self.add(node, *_STATEMENT_RULES[type(node)])
        else:
            self.add(node, "statement", f"`{type(node).__name__}` statements are not allowed in reward code")

    def target(self, node):
        if isinstance(node, ast.Name):
            return
        if isinstance(node, (ast.Tuple, ast.List)):
            for elt in node.elts:
                self.target(elt)
        else:
            self.add(node, "assignment", "only plain names can be assigned: no mutation of `state`, arrays or "
                     "lists; build a new value instead, e.g. x = np.where(mask, new_value, x)")

    def iteration(self, node) -> int:
        """Static bound of a loop's iterable; reports anything that is not statically bounded."""
        bound = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            self.iter_calls.add(id(node))
            fname, args = node.func.id, node.args
            if fname == "range" and 1 <= len(args) <= 3 and all(
                    isinstance(a, ast.Constant) and type(a.value) is int for a in args):
                bound = len(range(*(a.value for a in args))) if args[-1].value != 0 or len(args) < 3 else None
            elif fname == "enumerate" and len(args) == 1:
                bound = self.iteration(args[0])
            elif fname == "zip" and args:
                bound = min(self.iteration(a) for a in args)
        elif isinstance(node, (ast.Tuple, ast.List)):
            self.expr(node)
            bound = len(node.elts)
        elif isinstance(node, ast.Name) and self.constants.get(node.id) is not None:
            bound = self.constants[node.id]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "state" and node.attr == "joint_names":
            self.expr(node)
            bound = MAX_ITERATIONS  # checked again at run time
        if bound is None or bound > MAX_ITERATIONS:
            if bound is None:
                self.expr(node)  # report what else is wrong inside the iterable
            self.add(node, "loop", f"loops may only iterate over range(K) with literal K <= {MAX_ITERATIONS}, a literal "
                     "tuple/list, a module-level tuple constant, state.joint_names, or enumerate/zip of these; "
                     "prefer vectorised numpy over Python loops")
            return MAX_ITERATIONS
        return bound

    # -- expressions -------------------------------------------------------------------------
    def expr(self, node, *, call=False, receiver=False):
        kind = type(node)
        if kind in _EXPRESSION_RULES:
            self.add(node, *_EXPRESSION_RULES[kind])
        elif kind is ast.Constant:
            self.constant(node)
        elif kind is ast.Name:
            self.name(node, call=call, receiver=receiver)
        elif kind is ast.Attribute:
            self.attribute(node, call=call)
        elif kind is ast.Call:
            self.call(node)
        elif kind is ast.BinOp:
            self.binop_rules(node, node.op, node.left, node.right)
            self.expr(node.left)
            self.expr(node.right)
        elif kind is ast.Compare:
            if len(node.ops) > 1:
                self.add(node, "chained-comparison", "chained comparisons are not allowed; write (a < b) & (b < c)")
            for sub in (node.left, *node.comparators):
                self.expr(sub)
        elif kind is ast.Subscript:
            if not isinstance(node.ctx, ast.Load):
                self.target(node)
            self.expr(node.value)
            self.expr(node.slice)
        elif kind in (ast.Tuple, ast.List):
            if len(node.elts) > MAX_DISPLAY_ITEMS:
                self.add(node, "literal", f"displays may hold at most {MAX_DISPLAY_ITEMS} items")
            for elt in node.elts:
                self.expr(elt)
        elif kind in (ast.ListComp, ast.GeneratorExp):
            for gen in node.generators:
                if gen.is_async:
                    self.add(node, "async", "async comprehensions are not allowed")
                self.target(gen.target)
                self.bounds[id(gen)] = self.iteration(gen.iter)
                for cond in gen.ifs:
                    self.expr(cond)
            self.expr(node.elt)
        elif kind in (ast.UnaryOp, ast.BoolOp, ast.IfExp, ast.Slice):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.expr(child)
        else:
            self.add(node, "expression", f"`{kind.__name__}` expressions are not allowed in reward code")

    def constant(self, node):
        value = node.value
        if isinstance(value, (bytes, complex)):
            self.add(node, "literal", f"{type(value).__name__} literals are not allowed")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT_LITERAL:
            self.add(node, "literal", "integer literal too large; use a float (e.g. 1e20) if you need a big number")
        elif isinstance(value, str) and len(value) > MAX_SEQ_LEN:
            self.add(node, "literal", f"string literal longer than {MAX_SEQ_LEN} characters")

    def name(self, node, *, call: bool, receiver: bool):
        name = node.id
        if name in self.scope or name in self.constants:
            return
        if name in self.functions:
            if not call:
                self.add(node, "function-value", f"`{name}` may only be called, not used as a value")
        elif name in SAFE_BUILTIN_NAMES:
            if not call:
                self.add(node, "builtin-value", f"`{name}` may only be called, not used as a value")
        elif name == "np":
            if not receiver:
                self.add(node, "np-value", "`np` may only be used as `np.<name>`")
        elif name.startswith("_"):
            self.add(node, "name", f"`{name}`: names starting with `_` (dunders included) are not allowed")
        else:
            hint = _NAME_HINTS.get(name, "define it, or use a `state.<field>`, `np.<function>` or a builtin")
            self.add(node, "name", f"`{name}` is not available: {hint} ({_AVAILABLE})")

    def attribute(self, node, *, call: bool):
        attr, value = node.attr, node.value
        if not isinstance(node.ctx, ast.Load):
            self.target(node)
        if attr.startswith("_"):
            self.add(node, "private-attribute", f"`.{attr}`: attributes starting with `_` are never allowed")
        elif isinstance(value, ast.Name) and value.id == "np":
            if attr not in NP_NAMES:
                hint = _NP_HINTS.get(attr, "")
                self.add(node, "np-name", f"`np.{attr}` is not available (np is a math-only namespace){hint}; "
                         f"available: {', '.join(sorted(NP_NAMES))}")
            elif call and attr in NP_CONSTANTS:
                self.add(node, "call", f"`np.{attr}` is a constant, not a function")
        elif isinstance(value, ast.Name) and value.id == "state" and "state" in self.scope:
            if attr not in STATE_ATTRS:
                self.add(node, "state-field", f"`state.{attr}` does not exist; fields: {', '.join(sorted(STATE_ATTRS))}")
            elif call:
                self.add(node, "call", f"`state.{attr}` is data, not a function")
        elif isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "np" \
                and value.attr not in NP_NAMES:
            pass  # np.linalg.norm & co: reported once, as np-name, on the receiver
        elif call and attr not in SAFE_METHODS:
            self.add(node, "method", f"method `.{attr}()` is not available; array methods: {', '.join(sorted(SAFE_METHODS))}")
        elif not call and attr not in SAFE_ATTRS:
            hint = f" (it is `state.{attr}`: name the parameter `state`)" if attr in STATE_ATTRS else ""
            self.add(node, "attribute", f"attribute `.{attr}` is not available{hint}; array attributes: "
                     f"{', '.join(sorted(SAFE_ATTRS))}, methods: {', '.join(sorted(SAFE_METHODS))}")
        self.expr(value, receiver=True)

    def call(self, node: ast.Call):
        func = node.func
        astype = isinstance(func, ast.Attribute) and func.attr == "astype"
        for arg in node.args:
            if not (astype and self.is_dtype(arg)):  # `float` etc. are values only here
                self.expr(arg)
        for kw in node.keywords:
            if kw.arg is None:
                self.add(node, "call", "`**kwargs` in calls is not allowed; pass keywords explicitly")
            elif kw.arg not in SAFE_KEYWORDS:
                self.add(node, "keyword", f"keyword `{kw.arg}=` is not allowed (e.g. no out=, dtype=, shape=); "
                         f"allowed: {', '.join(sorted(SAFE_KEYWORDS))}")
            self.expr(kw.value)
        if isinstance(func, ast.Name):
            if func.id in ("range", "enumerate", "zip") and id(node) not in self.iter_calls:
                self.add(node, "loop", f"`{func.id}` may only be used directly as a for-loop/comprehension iterable")
            elif func.id in self.functions:
                self.calls[self.current or ""].append((func.id, node.lineno))
            elif func.id in self.scope or func.id in self.constants:
                self.add(node, "call", f"`{func.id}` is a value; only module functions, np.<function>, "
                         "builtins and array methods can be called")
            self.expr(func, call=True)
        elif isinstance(func, ast.Attribute):
            if astype and not (len(node.args) == 1 and not node.keywords and self.is_dtype(node.args[0])):
                self.add(node, "dtype", "astype takes one of float, int, bool, np.float64, np.float32, np.int64, np.int32")
            self.expr(func, call=True)
        else:
            self.add(node, "call", "only module functions, np.<function>, builtins and array methods can be called")
            self.expr(func)

    @staticmethod
    def is_dtype(node) -> bool:
        return (isinstance(node, ast.Name) and node.id in _DTYPE_ARGS) or (
            isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "np"
            and node.attr in ("float64", "float32", "int64", "int32", "bool_"))

    def binop_rules(self, node, op, left, right):
        if type(op) not in _BINOP_SYMBOLS:
            hint = "use np.sum(a * b, axis=-1) for row-wise dot products" if isinstance(op, ast.MatMult) else "not available"
            self.add(node, "operator", f"operator `{type(op).__name__}` is not allowed; {hint}")
        elif isinstance(op, ast.Pow):
            exponent = _fold(right)
            if exponent is not None and abs(exponent) > MAX_POW_EXPONENT:
                self.add(node, "power", f"`**` exponents must be within [-{MAX_POW_EXPONENT}, {MAX_POW_EXPONENT}]; "
                         "huge powers blow up time and memory")
        elif isinstance(op, ast.Mult):
            for seq, count in ((left, right), (right, left)):
                if isinstance(seq, (ast.List, ast.Tuple)):
                    length = len(seq.elts)
                elif isinstance(seq, ast.Constant) and isinstance(seq.value, str):
                    length = len(seq.value)
                else:
                    continue
                n = _fold(count)  # a data-dependent count is caught by the run-time guard instead
                if n is not None and abs(n) * max(1, length) > MAX_SEQ_LEN:
                    self.add(node, "repetition", f"sequence repetition longer than {MAX_SEQ_LEN} items; "
                             "use np.ones_like(state.base_height) * value for per-environment arrays")
        elif isinstance(op, ast.Mod) and isinstance(left, ast.Constant) and isinstance(left.value, str):
            self.add(node, "string-format", "'%' string formatting is not allowed; reward code has no use for text")

    # -- whole-module properties ---------------------------------------------------------------
    def check_call_graph(self):
        """Reject recursion (any cycle), then bound each term's statically counted operations."""
        state, order = {}, []  # name -> 1 visiting / 2 done; order = callees before callers

        def visit(name, path):
            state[name] = 1
            for callee, line in self.calls.get(name, ()):
                if state.get(callee) == 1:
                    cycle = path[path.index(callee):] + [callee]
                    self.add(ast.Pass(lineno=line), "recursion", f"`{name}` calls `{callee}` and the chain "
                             f"{' -> '.join(cycle)} is recursive (could run forever); compute iteratively "
                             "with vectorised numpy or a bounded for loop")
                elif callee not in state:
                    visit(callee, path + [callee])
            state[name] = 2
            order.append(name)

        for name in self.functions:
            if name not in state:
                visit(name, [name])
        if any(rule == "recursion" for _, rule, _ in self.problems):
            return
        steps: dict[str, int] = {}
        for name in order:
            fn = self.functions[name]
            steps[name] = sum(self.steps(stmt, steps) for stmt in fn.body)
            if TERM_RE.match(name) and steps[name] > MAX_STATIC_STEPS:
                self.add(fn, "too-much-work", f"`{name}` may evaluate ~{steps[name]:.3g} operations (loops multiply, "
                         f"helper calls add; limit {MAX_STATIC_STEPS}); vectorise with numpy instead of nested loops")

    def steps(self, node, known: dict) -> int:
        if isinstance(node, ast.For):
            body = sum(self.steps(s, known) for s in (*node.body, *node.orelse))
            return self.steps(node.iter, known) + self.bounds.get(id(node), MAX_ITERATIONS) * (1 + body)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
            total, repeat = 0, 1
            for gen in node.generators:
                total += repeat * self.steps(gen.iter, known)
                repeat *= self.bounds.get(id(gen), MAX_ITERATIONS)
                total += repeat * sum(self.steps(c, known) for c in gen.ifs)
            return total + repeat * (1 + self.steps(node.elt, known))
        own = 1
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            own += known.get(node.func.id, 0)
        return own + sum(self.steps(child, known) for child in ast.iter_child_nodes(node))


def _parse_and_check(source: str, filename: str) -> tuple[ast.Module, dict[str, ast.FunctionDef]]:
    if not isinstance(source, str):
        raise RewardCodeError("line 1: source: reward code must be a str")
    if len(source) > MAX_SOURCE_CHARS:
        raise RewardCodeError(f"line 1: too-large: the code has {len(source)} characters (limit {MAX_SOURCE_CHARS}); keep it short")
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        where = f" (column {exc.offset})" if exc.offset else ""
        raise RewardCodeError(f"line {exc.lineno or 1}: syntax: {exc.msg}{where}; fix the Python syntax") from None
    except ValueError as exc:  # e.g. null bytes
        raise RewardCodeError(f"line 1: syntax: {exc}") from None
    except (RecursionError, MemoryError) as exc:
        raise RewardCodeError(f"line 1: nesting: the code could not be parsed ({type(exc).__name__}); "
                              "it is nested too deeply, split expressions into several assignments") from None
    deep = _too_deep(tree)
    if deep is not None:
        raise RewardCodeError(f"line {getattr(deep, 'lineno', 1)}: nesting: expressions/blocks are nested deeper than "
                              f"{MAX_AST_DEPTH} levels; split them into several assignments")
    tree = ast.fix_missing_locations(_Normalize().visit(tree))
    checker = _Checker()
    checker.check_module(tree)
    if not checker.problems:
        checker.check_call_graph()
    if checker.problems:
        unique = sorted(set(checker.problems))
        raise RewardCodeError([f"line {line}: {rule}: {text}" for line, rule, text in unique])
    return tree, checker.functions


# ---------------------------------------------------------------------------------------------
# Instrumented compile
# ---------------------------------------------------------------------------------------------
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


def _problem_from_exception(exc: BaseException, filename: str, line: int) -> str:
    """`line L: rule: ...` for an exception raised while running generated code."""
    tb = exc.__traceback__
    while tb is not None:  # innermost frame of the generated code = the offending line
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    if isinstance(exc, GuardError):
        return f"line {line}: {exc.rule}: {exc}"
    if isinstance(exc, MemoryError):
        return f"line {line}: memory: ran out of memory; keep arrays at (N,) or (N, J)"
    if isinstance(exc, RecursionError):
        return f"line {line}: recursion: recursion limit reached"
    hint = ""
    if "broadcast" in str(exc):
        hint = " (check array shapes: joints are (N, J), feet (N, 2) or (N, 2, 3), per-robot limits (J,))"
    return f"line {line}: runtime-error: {type(exc).__name__}: {exc}{hint}; fix the expression on this line"


def _bind(guard: Guard, raw: Callable) -> Callable[[RewardState], np.ndarray]:
    def term(state: RewardState) -> np.ndarray:
        with guard.session(state.num_envs):
            return raw(state)

    term.__name__ = term.__qualname__ = raw.__name__
    return term


def compile_reward_code(source: str, *, filename: str = "<generated>") -> dict[str, RewardTerm]:
    """Static checks + restricted, instrumented compile. Runs only the module level (defs and
    constants), never a term. Returns the terms keyed by name without prefix."""
    tree, functions = _parse_and_check(source, filename)
    guard = Guard()
    namespace = {
        "__builtins__": safe_math.make_builtins(guard),
        "__name__": "motionvl_reward_candidate",
        "np": safe_math.make_numpy_namespace(guard),
        "__mvl_binop": guard.binop, "__mvl_unary": guard.unary, "__mvl_compare": guard.compare,
        "__mvl_method": guard.method, "__mvl_index": guard.index, "__mvl_iterable": guard.iterable,
    }
    try:
        code = compile(ast.fix_missing_locations(_Instrument().visit(tree)), filename, "exec")
        with guard.session(0):
            exec(code, namespace)  # noqa: S102 - checked module: only defs and constant literals
    except RecursionError:
        raise RewardCodeError("line 1: nesting: the code is nested too deeply to compile") from None
    except Exception as exc:  # a constant expression failed (1/0, repetition guard, ...)
        raise RewardCodeError(_problem_from_exception(exc, filename, 1)) from None
    terms = {}
    for fname, node in functions.items():
        match = TERM_RE.match(fname)
        if match:
            terms[match[2]] = RewardTerm(
                name=match[2], sign=1 if match[1] == "reward" else -1, fn=_bind(guard, namespace[fname]),
                source_name=fname, line=node.lineno, filename=filename,
            )
    return terms


def evaluate_term(term: RewardTerm, state: RewardState) -> np.ndarray:
    """Call `term` and return its float64 (N,) output; RewardCodeError on errors or bad output."""
    try:
        out = term.fn(state)
    except Exception as exc:
        raise RewardCodeError(_problem_from_exception(exc, term.filename, term.line)) from None
    n, where = state.num_envs, f"line {term.line}"
    if not isinstance(out, np.ndarray):
        kind = "a scalar" if isinstance(out, (int, float, np.generic)) else \
            "None (missing return?)" if out is None else type(out).__name__
        raise RewardCodeError(f"{where}: shape: `{term.source_name}` returned {kind}; return one value per "
                              f"environment, an ({n},) array (e.g. value * np.ones_like(state.base_height))")
    if out.dtype.kind not in "biuf":
        raise RewardCodeError(f"{where}: dtype: `{term.source_name}` returned dtype {out.dtype}; return floats")
    if out.shape != (n,):
        raise RewardCodeError(f"{where}: shape: `{term.source_name}` returned shape {out.shape}, expected ({n},); "
                              "reduce per-joint/per-foot axes with np.sum(..., axis=1) or select a column")
    out = out.astype(np.float64, copy=False)
    finite = np.isfinite(out)
    if not finite.all():
        bad = int(n - finite.sum())
        raise RewardCodeError(f"{where}: non-finite: `{term.source_name}` returned NaN/inf for {bad} of {n} environments; "
                              "guard divisions and logs (x / (y + 1e-6), np.log(np.maximum(x, 1e-6))) and clip inputs")
    return out


# ---------------------------------------------------------------------------------------------
# Plausible random batches
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _robot_joints() -> tuple:
    """(names, default, lower, upper, effort) of the robot config: plausible joint values."""
    return _joints_of(load_robot_config())


def _joints_of(robot) -> tuple:
    return robot.joint_names, robot.default_pose, robot.lower, robot.upper, robot.effort_limit


def random_reward_state(num_envs: int, rng: np.random.Generator, robot=None) -> RewardState:
    """A batch of plausible mid-walk states (upright-ish, moving, mixed foot contacts) of `robot`'s
    joints (None: the package's robot config)."""
    n = int(num_envs)
    names, default, lower, upper, effort = _robot_joints() if robot is None else _joints_of(robot)
    nj = len(names)
    roll, pitch = rng.normal(0.0, 0.08, (2, n))
    yaw = rng.uniform(-np.pi, np.pi, n)
    cr, sr, cp, sp, cy, sy = (np.cos(roll / 2), np.sin(roll / 2), np.cos(pitch / 2), np.sin(pitch / 2),
                              np.cos(yaw / 2), np.sin(yaw / 2))
    quat = np.stack([cr * cp * cy + sr * sp * sy, sr * cp * cy - cr * sp * sy,
                     cr * sp * cy + sr * cp * sy, cr * cp * sy - sr * sp * cy], axis=1)
    gravity = np.stack([np.sin(pitch), -np.cos(pitch) * np.sin(roll), -np.cos(pitch) * np.cos(roll)], axis=1)
    height = np.clip(rng.normal(0.85, 0.04, n), 0.3, 1.1)
    base_pos = np.column_stack([rng.uniform(-5, 5, n), rng.uniform(-5, 5, n), height])
    contact = rng.random((n, 2)) < 0.6
    swing_height = np.where(contact, 0.0, rng.uniform(0.0, 0.12, (n, 2)))
    foot_pos = np.stack([base_pos[:, :2] + [0.0, 0.1], base_pos[:, :2] + [0.0, -0.1]], axis=1)
    foot_pos = np.concatenate([foot_pos + rng.normal(0, 0.1, (n, 2, 2)), swing_height[..., None]], axis=2)
    action = rng.uniform(-1.0, 1.0, (n, nj))
    return RewardState(
        dt=0.02,
        base_pos=base_pos,
        base_quat=quat,
        base_lin_vel=rng.normal([0.4, 0.0, 0.0], [0.3, 0.15, 0.1], (n, 3)),
        base_ang_vel=rng.normal(0.0, 0.3, (n, 3)),
        base_vel_avg=rng.normal([0.4, 0.0, 0.0], [0.2, 0.1, 0.1], (n, 3)),
        projected_gravity=gravity,
        base_height=height.copy(),
        joint_pos=np.clip(default + rng.normal(0.0, 0.15, (n, nj)), lower, upper),
        joint_vel=rng.normal(0.0, 1.5, (n, nj)),
        joint_acc=rng.normal(0.0, 30.0, (n, nj)),
        joint_torque=np.clip(rng.normal(0.0, 0.3, (n, nj)) * effort, -effort, effort),
        default_joint_pos=default,
        joint_pos_lower=lower,
        joint_pos_upper=upper,
        effort_limit=effort,
        foot_pos=foot_pos,
        foot_vel=rng.normal(0.0, 0.3, (n, 2, 3)) * np.where(contact, 0.1, 1.0)[..., None],  # stance feet slip a little
        foot_contact=contact,
        foot_contact_force=np.where(contact, rng.uniform(50.0, 500.0, (n, 2)), 0.0),
        foot_air_time=np.where(contact, 0.0, rng.uniform(0.0, 0.5, (n, 2))),
        first_contact=contact & (rng.random((n, 2)) < 0.2),
        body_collision=rng.random(n) < 0.03,
        command=np.column_stack([rng.uniform(-0.5, 1.2, n), rng.uniform(-0.3, 0.3, n), rng.uniform(-0.5, 0.5, n)]),
        heading_error=rng.normal(0.0, 0.3, n),
        gait_phase=rng.random(n),
        gait_period=0.8,
        action=action,
        last_action=np.clip(action + rng.normal(0.0, 0.2, (n, nj)), -1.0, 1.0),
        terminated=rng.random(n) < 0.02,
        joint_names=names,
    )


# ---------------------------------------------------------------------------------------------
# Isolated test run
# ---------------------------------------------------------------------------------------------
_CHILD_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from motionvl.rewards.sandbox import _child_main; _child_main()"
_CHILD_ENV = {"PATH": os.defpath, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def check_reward_code(source: str, *, num_envs: int = 64, timeout_s: float = 5.0, seed: int = 0) -> dict[str, RewardTerm]:
    """Full validation: static checks, restricted compile, then every term run in a separate,
    resource-limited process on random batches of num_envs and 4*num_envs+1 environments (the
    second size exposes arrays that grow faster than N). Raises RewardCodeError."""
    terms = compile_reward_code(source)
    problems = _run_isolated(source, "<generated>", (num_envs, 4 * num_envs + 1), timeout_s, seed,
                             {t.source_name: t.line for t in terms.values()})
    if problems:
        raise RewardCodeError(problems)
    return terms


def _run_isolated(source, filename, sizes, timeout_s, seed, term_lines) -> list[str]:
    request = json.dumps({"source": source, "filename": filename, "sizes": list(sizes), "seed": seed, "timeout_s": timeout_s})
    package_root = str(Path(__file__).resolve().parents[2])
    timed_out = False
    with tempfile.TemporaryDirectory(prefix="motionvl-sandbox-") as workdir:
        # -I: ignore PYTHON* variables, user site and cwd; a fresh empty cwd; own process group.
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _CHILD_BOOT, package_root], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir, env=_CHILD_ENV, start_new_session=True,
        )
        try:
            out, err = proc.communicate(request.encode(), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)  # the group we created (not yet reaped, so still ours)
            out, err = proc.communicate()
        except BaseException:  # interrupted: never leave the test process behind
            proc.kill()
            proc.wait()
            raise
        leftovers = os.listdir(workdir)
    running, line = None, 1
    for text in out.decode(errors="replace").splitlines():
        if text.startswith("RESULT "):
            problems = json.loads(text[len("RESULT "):])
            break
        if text.startswith("RUN "):
            _, running, n = text.split()
            line = term_lines.get(running, 1)
    else:
        what = f" while running `{running}` on {n} environments" if running else " before any term ran"
        if timed_out:
            problems = [f"line {line}: timeout: the test run did not finish within {timeout_s:g} s{what}; "
                        "make the computation cheaper"]
        elif proc.returncode < 0:
            name = signal.Signals(-proc.returncode).name
            problems = [f"line {line}: resource-limit: the test process was killed by {name}{what} "
                        "(CPU, memory or file-size limit)"]
        else:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            problems = [f"line {line}: sandbox-error: the test process failed{what}: {tail[0]}"]
    if leftovers:
        problems.append(f"line {line}: side-effect: the test run created files {sorted(leftovers)[:5]}")
    return problems


def _limit_resources(timeout_s: float):
    """Child-side limits, applied before any generated code runs (defence in depth: the static
    rules already forbid files, processes and unbounded work)."""
    with open("/proc/self/status") as status:
        vm_kb = next(int(l.split()[1]) for l in status if l.startswith("VmSize:"))
    limits = (
        (resource.RLIMIT_AS, vm_kb * 1024 + MEM_HEADROOM_BYTES),
        (resource.RLIMIT_CPU, math.ceil(timeout_s) + 1),
        (resource.RLIMIT_FSIZE, 0),  # no bytes written to any file
        (resource.RLIMIT_NOFILE, 3),  # stdin/stdout/stderr only: no new files or sockets
        (resource.RLIMIT_NPROC, 0),  # no new processes (ignored for root)
        (resource.RLIMIT_CORE, 0),
    )
    for which, value in limits:
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass


def _child_main():
    """Entry point of the test process: read the request, limit itself, run every term."""
    request = json.loads(sys.stdin.buffer.read())
    random_reward_state(2, np.random.default_rng(0))  # load numpy's lazy submodules before the fd limit
    _limit_resources(request["timeout_s"])
    problems: list[str] = []
    try:
        terms = compile_reward_code(request["source"], filename=request["filename"])
        rng = np.random.default_rng(request["seed"])
        for n in request["sizes"]:
            state = random_reward_state(n, rng)
            for term in terms.values():
                print("RUN", term.source_name, n, flush=True)
                try:
                    evaluate_term(term, state)
                except RewardCodeError as exc:
                    problems += exc.problems
            if problems:
                break
    except RewardCodeError as exc:
        problems += exc.problems
    except MemoryError:
        problems.append(f"line 1: memory: a test batch of {request['sizes']} environments did not fit the "
                        f"sandbox memory limit")
    print("RESULT", json.dumps(problems), flush=True)


def reward_code_api_doc() -> str:
    """Format, math namespace and state fields: everything the synthesizer prompt needs."""
    body = __doc__.split("Reward code format (the synthesizer prompt quotes this)")[-1].strip("-\n ")
    return "\n".join([
        body,
        "",
        "np functions: " + ", ".join(sorted(NP_FUNCTIONS)),
        "np constants and dtypes: " + ", ".join(sorted(NP_NAMES - NP_FUNCTIONS)),
        "array methods: " + ", ".join(sorted(SAFE_METHODS)) + "; array attributes: " + ", ".join(sorted(SAFE_ATTRS)),
        "",
        STATE_API_DOC,
    ])
