"""Static rules for generated reward code: what may be written, checked before anything runs.

Reward code is parsed, normalised (annotations dropped, `-<number>` folded) and walked once,
collecting every rule violation as `line L: rule: what to do instead`. Loops must be statically
bounded, the call graph acyclic and shallow (walked iteratively, so the checker's own stack never
limits what it accepts), each term's statically counted operations small, and all terms' together.
A term may not take a library term's name (the reward reflection would report its statistics as
the library's). Warnings the parser raises about the source are captured, never printed
(`capture_warnings`, bounded by `bound_warnings`). Whatever goes wrong inside the checker itself
is a rejection, never a crash.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import re
import threading
import warnings
from typing import Callable

from motionvl.rewards.messages import excerpt, scrub
from motionvl.rewards.sandbox.errors import RewardCodeError, problem
from motionvl.rewards.sandbox.guard import MAX_ITERATIONS, MAX_SEQ_LEN
from motionvl.rewards.sandbox.namespace import (
    ARRAY_METHODS,
    DTYPE_NAMES,
    NP_CONSTANTS,
    NP_NAMES,
    SAFE_BUILTIN_NAMES,
    SEQUENCE_METHODS,
)
from motionvl.rewards.state import RewardState
from motionvl.rewards.terms import REGISTRY

MAX_SOURCE_CHARS = 64_000
MAX_AST_DEPTH = 60
MAX_STATIC_STEPS = 20_000
MAX_STATIC_STEPS_ALL = 100_000  # all terms together: a term count cannot multiply the work of one term
MAX_DISPLAY_ITEMS = 256
MAX_INT_LITERAL = 2**63
MAX_POW_EXPONENT = 64
MAX_CALL_DEPTH = 24  # helpers calling helpers: the same depth in the check and in training

TERM_RE = re.compile(r"^_(reward|cost)_([a-z][a-z0-9_]*)$")
HELPER_RE = re.compile(r"^[a-z][a-z0-9_]*$")
LOCAL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

STATE_ATTRS = frozenset(f.name for f in dataclasses.fields(RewardState)) | {"num_envs"}
SAFE_METHODS = ARRAY_METHODS | SEQUENCE_METHODS
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
            if short in REGISTRY:  # its statistics would be reported under the library term's name
                self.add(self.functions[name], "shadow", f"`{name}`: `{short}` is the name of a library term; give "
                         f"the generated term a name of its own (e.g. `{short}_gen`), or weight the library term "
                         "in the spec instead")
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
            elif call and attr in DTYPE_NAMES:
                self.add(node, "call", f"`np.{attr}` is a dtype name for x.astype(np.{attr}), not a function; "
                         "use float(x) for one number or np.array(values) for a list")
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
                self.add(node, "dtype", "astype takes one of float, int, bool, np.float64, np.float32, np.int64, "
                         "np.int32, np.bool_")
            self.expr(func, call=True)
        else:
            self.add(node, "call", "only module functions, np.<function>, builtins and array methods can be called")
            self.expr(func)

    @staticmethod
    def is_dtype(node) -> bool:
        return (isinstance(node, ast.Name) and node.id in _DTYPE_ARGS) or (
            isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "np"
            and node.attr in DTYPE_NAMES)

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
        """Reject recursion (any cycle) and call chains deeper than MAX_CALL_DEPTH, then bound each term's
        statically counted operations. Iterative: a long chain of helpers cannot exhaust the checker's stack."""
        status, order, depth = {}, [], {}  # name -> 1 on the path / 2 done; order: callees before callers
        for root in self.functions:
            if root in status:
                continue
            status[root] = 1
            path, stack = [root], [(root, iter(self.calls.get(root, ())))]
            while stack:
                name, callees = stack[-1]
                step = next(callees, None)
                if step is None:
                    stack.pop()
                    path.pop()
                    status[name] = 2
                    order.append(name)
                    depth[name] = 1 + max((depth.get(c, 0) for c, _ in self.calls.get(name, ())), default=0)
                    continue
                callee, line = step
                if status.get(callee) == 1:
                    cycle = path[path.index(callee):] + [callee]
                    chain = " -> ".join(cycle if len(cycle) <= 5 else [*cycle[:2], "...", *cycle[-2:]])
                    self.add(ast.Pass(lineno=line), "recursion", f"`{name}` calls `{callee}` and the chain {chain} is "
                             "recursive (could run forever); compute iteratively with vectorised numpy or a bounded "
                             "for loop")
                elif callee not in status and callee in self.functions:
                    status[callee] = 1
                    path.append(callee)
                    stack.append((callee, iter(self.calls.get(callee, ()))))
        if any(rule == "recursion" for _, rule, _ in self.problems):
            return
        for name in order:
            if depth[name] > MAX_CALL_DEPTH:
                self.add(self.functions[name], "call-depth", f"`{name}` starts a chain of {depth[name]} nested function "
                         f"calls (limit {MAX_CALL_DEPTH}); call fewer helpers inside each other")
                return
        steps: dict[str, int] = {}
        for name in order:
            fn = self.functions[name]
            steps[name] = sum(self.steps(stmt, steps) for stmt in fn.body)
            if TERM_RE.match(name) and steps[name] > MAX_STATIC_STEPS:
                self.add(fn, "too-much-work", f"`{name}` may evaluate ~{steps[name]:.3g} operations (loops multiply, "
                         f"helper calls add; limit {MAX_STATIC_STEPS}); vectorise with numpy instead of nested loops")
        total = sum(n for name, n in steps.items() if TERM_RE.match(name))
        if total > MAX_STATIC_STEPS_ALL and not any(rule == "too-much-work" for _, rule, _ in self.problems):
            first = next(fn for name, fn in self.functions.items() if TERM_RE.match(name))
            self.add(first, "too-much-work", f"the terms together may evaluate ~{total:.3g} operations (limit "
                     f"{MAX_STATIC_STEPS_ALL}); fewer terms, each vectorised, and shared values computed once")

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


MAX_WARNINGS = 5
"""Distinct compiler warnings kept per candidate (the rest are counted)."""
_WARNINGS_LOCK = threading.Lock()  # warnings.catch_warnings swaps process-wide state: one capture at a time


def capture_warnings(fn: Callable, filename: str):
    """(fn(), the warnings it raised about `filename` as `line L: warning: ...` lines). Nothing is printed;
    warnings about other files (another thread's) are passed on as they came."""
    with _WARNINGS_LOCK:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = fn()
            finally:
                found = list(caught)
    ours = [w for w in found if w.filename == filename]
    for w in found:
        if w.filename != filename:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return result, [problem(w.lineno or 1, "warning", f"{w.category.__name__}: {excerpt(w.message, 120)}") for w in ours]


def bound_warnings(lines) -> tuple:
    """The same warning once (its first line, with a count of the other lines it came from), at most
    MAX_WARNINGS distinct ones in their order, then a count of the rest; every line scrubbed."""
    first, repeats = {}, {}
    for line in lines:
        head, _, text = scrub(line).partition(": ")  # "line L", "warning: Category: message"
        key = text or head
        if key in first:
            repeats[key] += 1
        else:
            first[key], repeats[key] = scrub(line), 0
    out = [first[k] + (f" (and on {repeats[k]} other line(s))" if repeats[k] else "") for k in first]
    more = len(out) - MAX_WARNINGS
    return tuple(out[:MAX_WARNINGS] + ([f"... and {more} more kind(s) of warning"] if more > 0 else []))


@dataclasses.dataclass(frozen=True)
class CheckedCode:
    """Source that passed the static rules: its normalised tree, functions by name, and the state fields
    it reads (the only ones a worker process is sent)."""

    tree: ast.Module
    functions: dict
    fields: frozenset
    warnings: tuple = ()  # the parser's warnings about the source, `line L: warning: ...` (not yet bounded)


def check_source(source: str, filename: str = "<generated>") -> CheckedCode:
    """Apply every static rule to `source`; RewardCodeError lists all problems. Never raises anything else:
    a failure of the checker itself is a rejection too."""
    try:
        return _check(source, filename)
    except RewardCodeError:
        raise
    except RecursionError:
        raise RewardCodeError(problem(1, "nesting", "the code is nested too deeply to check; split expressions "
                                         "into several assignments")) from None
    except Exception as exc:  # noqa: BLE001 - the checker must answer, whatever the input
        raise RewardCodeError(problem(1, "checker-error", f"the checker could not analyse this code "
                                      f"({type(exc).__name__}); simplify it")) from None


def _check(source: str, filename: str) -> CheckedCode:
    if not isinstance(source, str):
        raise RewardCodeError(problem(1, "source", "reward code must be a str"))
    if len(source) > MAX_SOURCE_CHARS:
        raise RewardCodeError(problem(1, "too-large", f"the code has {len(source)} characters (limit "
                                      f"{MAX_SOURCE_CHARS}); keep it short"))
    try:
        tree, parse_warnings = capture_warnings(lambda: ast.parse(source, filename=filename), filename)
    except SyntaxError as exc:
        where = f" (column {exc.offset})" if exc.offset else ""
        raise RewardCodeError(problem(exc.lineno or 1, "syntax", f"{exc.msg}{where}; fix the Python syntax")) from None
    except (RecursionError, MemoryError) as exc:
        raise RewardCodeError(problem(1, "nesting", f"the code could not be parsed ({type(exc).__name__}); it is "
                                      "nested too deeply, split expressions into several assignments")) from None
    except Exception as exc:  # noqa: BLE001 - e.g. null bytes (ValueError)
        raise RewardCodeError(problem(1, "syntax", f"the code could not be parsed ({type(exc).__name__})")) from None
    deep = _too_deep(tree)
    if deep is not None:
        raise RewardCodeError(problem(getattr(deep, "lineno", 1), "nesting", f"expressions/blocks are nested deeper "
                                      f"than {MAX_AST_DEPTH} levels; split them into several assignments"))
    tree = ast.fix_missing_locations(_Normalize().visit(tree))
    checker = _Checker()
    checker.check_module(tree)
    if not checker.problems:
        checker.check_call_graph()
    if checker.problems:
        unique = sorted(set(checker.problems))
        raise RewardCodeError([problem(line, rule, text) for line, rule, text in unique])
    fields = frozenset(node.attr for node in ast.walk(tree)
                       if isinstance(node, ast.Attribute) and node.attr in STATE_ATTRS)
    return CheckedCode(tree, checker.functions, fields, tuple(parse_warnings))
