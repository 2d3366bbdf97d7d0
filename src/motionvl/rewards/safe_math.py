"""Runtime half of the reward sandbox: the `np` namespace, the builtins and the operator guards.

Generated reward code is rewritten (see `sandbox.py`) so that every operator that can allocate
(`a * b`, `-a`, `a < b`, `x.sum()`, `x[i]`) calls a method of a per-module `Guard`, and its `np`
and builtins are the guarded callables built here. A guard checks *before* computing that:
- an array result stays within `max_elems` (PER_ENV_ELEMS per environment + CONST_ELEMS), so an
  accidental (N, 1) * (N,) outer product fails at validation instead of eating RAM in training;
- the term call's total element-work stays within a budget linear in N (bounded time/memory);
- Python ints, strings, lists and tuples cannot grow without bound (repeated squaring, doubling);
- indices are plain integers (no fancy indexing, whose result size depends on the index).
Violations raise `GuardError(rule, message)`; the sandbox turns it into an LLM-facing message
with the offending line. Arrays handed to numpy are always numeric (no str/object dtypes), so
element counts bound bytes.
"""

from __future__ import annotations

import builtins
import contextlib
import operator
import threading
import types

import numpy as np

PER_ENV_ELEMS = 64  # largest intermediate per environment: (N, 12) joints, (N, 2, 3) feet fit easily
CONST_ELEMS = 4096  # arrays that do not scale with N (weights, constants)
WORK_PER_ENV = 4096  # element-operations per environment per term call
CONST_WORK = 1 << 20
MAX_SEQ_LEN = 4096  # elements in one str/list/tuple
MAX_INT_BITS = 1024
MAX_ITERATIONS = 64  # one loop's length (also enforced statically)

_ARRAY = (np.ndarray, np.generic)
_SEQ = (str, list, tuple)
_NUMBER = (int, float)  # bool is an int
_NUMERIC_KINDS = frozenset("biuf")


class GuardError(Exception):
    """A sandbox rule broken at run time; `rule` is the short rule name used in messages."""

    def __init__(self, rule: str, message: str):
        super().__init__(message)
        self.rule = rule


def _shape_of(x) -> tuple:
    """Shape numpy would give `x`, refusing anything that is not numeric (strings, objects, nested)."""
    if isinstance(x, _ARRAY):
        if x.dtype.kind not in _NUMERIC_KINDS:
            raise GuardError("argument-type", f"arrays must be numeric, got dtype {x.dtype}")
        return x.shape
    if isinstance(x, _NUMBER) or x is None:
        return ()
    if isinstance(x, (list, tuple)):
        bad = next((v for v in x if not isinstance(v, _NUMBER)), None)
        if bad is None:
            return (len(x),)
        hint = "; combine arrays with np.stack((a, b), axis=1)" if isinstance(bad, _ARRAY) else ""
        raise GuardError("argument-type", f"numpy math takes numbers and arrays, not a {type(x).__name__} "
                         f"holding {type(bad).__name__}{hint}")
    raise GuardError("argument-type", f"numpy math takes numbers and arrays, not {type(x).__name__}")


def _broadcast_size(shapes) -> int:
    """Element count of the broadcast of `shapes` (incompatible shapes: let numpy raise its error)."""
    ndim = max(len(s) for s in shapes)
    size = 1
    for axis in range(1, ndim + 1):
        dims = {s[-axis] for s in shapes if len(s) >= axis} - {1}
        if len(dims) > 1:
            return 0
        size *= dims.pop() if dims else 1
    return size


def _is_int_like(x) -> bool:
    try:
        operator.index(x)
    except TypeError:
        return False
    return True


_BINOPS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow,
    "&": operator.and_, "|": operator.or_, "^": operator.xor,
}
_COMPARES = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "==": operator.eq, "!=": operator.ne, "is": operator.is_, "is not": operator.is_not,
    "in": lambda a, b: a in b, "not in": lambda a, b: a not in b,
}
_UNARY = {"-": operator.neg, "+": operator.pos, "~": operator.invert}


class Guard:
    """Per-module runtime limits; `session(num_envs)` brackets one top-level term call."""

    def __init__(self):
        self._lock = threading.Lock()
        self.max_elems = CONST_ELEMS
        self.work_left = CONST_WORK

    @contextlib.contextmanager
    def session(self, num_envs: int):
        # One term call at a time per module: the budget is per call, not per thread.
        with self._lock:
            self.max_elems = PER_ENV_ELEMS * num_envs + CONST_ELEMS
            self.work_left = WORK_PER_ENV * num_envs + CONST_WORK
            with np.errstate(all="ignore"):  # NaN/inf are reported from the output, not as warnings
                yield

    # -- accounting -------------------------------------------------------------------------
    def _spend(self, elems: int):
        self.work_left -= elems
        if self.work_left < 0:
            raise GuardError(
                "work-budget",
                "the term does too much array work for one step (limit "
                f"{WORK_PER_ENV} element operations per environment); vectorise and avoid "
                "repeating large array operations in loops",
            )

    def _array_op(self, *operands) -> None:
        size = _broadcast_size([_shape_of(x) for x in operands])
        if size > self.max_elems:
            raise GuardError(
                "array-size",
                f"this operation would build an array of {size} elements (limit {self.max_elems}, "
                f"i.e. {PER_ENV_ELEMS} per environment). Usually an (N, 1) array meets an (N,) "
                "array and broadcasts to (N, N): reduce to (N,) first, or index with [:, 0]",
            )
        self._spend(max(size, *(np.size(x) if isinstance(x, _ARRAY) else 1 for x in operands)))

    # -- operators (called by the rewritten code) -------------------------------------------
    def binop(self, op: str, a, b):
        seq_a, seq_b = isinstance(a, _SEQ), isinstance(b, _SEQ)
        if seq_a or seq_b:
            if op == "*" and (_is_int_like(b) if seq_a else _is_int_like(a)):
                seq, count = (a, operator.index(b)) if seq_a else (b, operator.index(a))
                self._check_seq_len(len(seq) * max(count, 0))
            elif op == "+" and seq_a and seq_b:
                self._check_seq_len(len(a) + len(b))
            elif op == "%" and isinstance(a, str):
                raise GuardError("string-format", "'%' string formatting is not available in reward code")
            elif isinstance(a, str) or isinstance(b, str):
                raise GuardError("argument-type", f"strings do not support '{op}' here")
            else:  # list/tuple of numbers meeting an array or a number: numpy converts it
                self._array_op(a, b)
        elif isinstance(a, _ARRAY) or isinstance(b, _ARRAY):
            self._array_op(a, b)
        elif isinstance(a, int) and isinstance(b, int):
            self._check_int(op, a, b)
        else:
            self._spend(1)
        return _BINOPS[op](a, b)

    def compare(self, op: str, a, b):
        if op in ("in", "not in"):
            if isinstance(b, _ARRAY):
                raise GuardError("operator", "'in' on an array is not supported; use np.any(arr == value)")
            self._spend(len(b) if isinstance(b, _SEQ) else 1)
        elif op not in ("is", "is not") and (isinstance(a, _ARRAY) or isinstance(b, _ARRAY)):
            self._array_op(a, b)
        else:
            self._spend(1)
        return _COMPARES[op](a, b)

    def unary(self, op: str, x):
        self._spend(np.size(x) if isinstance(x, _ARRAY) else 1)
        return _UNARY[op](x)

    def method(self, obj, name: str, *args, **kwargs):
        """`obj.name(*args)` for a statically whitelisted method name."""
        if name == "astype" and (len(args) != 1 or kwargs or not any(args[0] is t for t in ALLOWED_DTYPES)):
            raise GuardError("dtype", "astype takes one of float, int, bool, np.float64, np.float32, np.int64, np.int32")
        if isinstance(obj, _ARRAY):
            arrays = [a for a in (*args, *kwargs.values()) if isinstance(a, _ARRAY)]
            self._array_op(obj, *arrays)
        else:
            self._spend(len(obj) if isinstance(obj, _SEQ) else 1)
        return getattr(obj, name)(*args, **kwargs)

    def index(self, i):
        """A computed subscript element must be a plain integer (basic indexing only)."""
        try:
            return operator.index(i)
        except TypeError:
            raise GuardError(
                "index",
                f"indices must be integers, got {type(i).__name__}; masks and index arrays are not "
                "supported: use np.where(mask, a, b) or multiply by the mask",
            ) from None

    def iterable(self, x):
        if len(x) > MAX_ITERATIONS:
            raise GuardError("loop", f"loops may run at most {MAX_ITERATIONS} iterations")
        return x

    # -- helpers ----------------------------------------------------------------------------
    def _check_seq_len(self, n: int):
        if n > MAX_SEQ_LEN:
            raise GuardError("sequence-size", f"a string/list/tuple of {n} elements is too large (limit {MAX_SEQ_LEN})")
        self._spend(max(n, 1))

    def _check_int(self, op: str, a: int, b: int):
        bits_a, bits_b = a.bit_length(), b.bit_length()
        if op == "*":
            bits = bits_a + bits_b
        elif op == "**":
            bits = bits_a * b if b > 0 else 0
        else:
            bits = max(bits_a, bits_b) + 1
        if bits > MAX_INT_BITS:
            raise GuardError("int-size", f"this integer operation would produce a {bits}-bit number "
                             f"(limit {MAX_INT_BITS}); use floats")
        self._spend(1)


ALLOWED_DTYPES = (float, int, bool, np.float64, np.float32, np.int64, np.int32, np.bool_)

# Names generated code may call as `np.<name>`. kind: "ew" broadcasts all numeric arguments;
# "reduce"/"like" read only the first argument; the rest are special cases below.
_EW = """abs absolute fabs sign sqrt cbrt square exp expm1 exp2 log log1p log2 log10 sin cos tan
arcsin arccos arctan arctan2 sinh cosh tanh hypot floor ceil round rint trunc minimum maximum
fmin fmax clip where logical_and logical_or logical_not logical_xor isfinite isnan isinf
nan_to_num mod fmod power deg2rad rad2deg radians degrees heaviside add subtract multiply
divide negative"""
_REDUCE = "sum mean std var min max amin amax prod any all argmax argmin count_nonzero median norm linalg_norm"
_LIKE = "zeros_like ones_like full_like"
_DTYPES = {"float64": np.float64, "float32": np.float32, "int64": np.int64, "int32": np.int32, "bool_": np.bool_}
NP_CONSTANTS = {"pi": np.pi, "e": np.e, "inf": np.inf}
NP_FUNCTIONS = frozenset(_EW.split() + _REDUCE.split() + _LIKE.split() + ["array", "asarray", "stack", "concatenate"])
NP_NAMES = NP_FUNCTIONS | frozenset(NP_CONSTANTS) | frozenset(_DTYPES)
# Resolved now, so lazily imported numpy submodules are loaded before any sandbox limits apply.
_NP_IMPL = {name: getattr(np, name, None) for name in NP_FUNCTIONS} | {
    "norm": np.linalg.norm, "linalg_norm": np.linalg.norm, "array": np.array, "asarray": np.asarray,
}


def make_numpy_namespace(guard: Guard) -> types.SimpleNamespace:
    """The object generated code sees as `np`: only whitelisted, guarded callables and constants."""
    ew, reduce, like = set(_EW.split()), set(_REDUCE.split()), set(_LIKE.split())

    def wrap(name, fn):
        if name in ew:
            if name == "where":
                def call(*args, **kw):
                    if len(args) != 3:
                        raise GuardError("call", "np.where needs three arguments: np.where(condition, a, b)")
                    guard._array_op(*args)
                    return fn(*args, **kw)
            else:
                def call(*args, **kw):
                    guard._array_op(*args, *(kw[k] for k in ("min", "max", "a_min", "a_max") if k in kw))
                    return fn(*args, **kw)
        elif name in reduce or name in like:
            def call(x, *args, **kw):
                guard._array_op(x, *(args[:1] if name == "full_like" else ()))
                return fn(x, *args, **kw)
        elif name in ("array", "asarray"):
            def call(values):
                guard._array_op(values)  # numbers, a flat list/tuple of numbers, or an array
                return fn(values)
        else:  # stack / concatenate: a short sequence of arrays, total size bounded
            def call(arrays, axis=0):
                if not isinstance(arrays, (list, tuple)) or not 0 < len(arrays) <= MAX_ITERATIONS:
                    raise GuardError("argument-type", f"np.{name} takes a list/tuple of 1..{MAX_ITERATIONS} arrays")
                for a in arrays:
                    _shape_of(a)  # numeric only
                total = sum(np.size(a) for a in arrays)
                if total > guard.max_elems:
                    raise GuardError("array-size", f"np.{name} would build {total} elements (limit {guard.max_elems})")
                guard._spend(total)
                return fn(arrays, axis=axis)
        call.__name__ = call.__qualname__ = name
        return call

    members = {name: wrap(name, _NP_IMPL[name]) for name in NP_FUNCTIONS}
    return types.SimpleNamespace(**members, **NP_CONSTANTS, **_DTYPES)


SAFE_BUILTIN_NAMES = ("abs", "min", "max", "len", "range", "float", "int", "bool", "round", "sum", "enumerate", "zip")


def make_builtins(guard: Guard) -> dict:
    """The whole `__builtins__` of generated code: no open/import/getattr/exec, growth guarded."""

    def _sum(iterable, start=0):
        if not isinstance(start, _NUMBER):
            raise GuardError("argument-type", "sum() start must be a number (sum() does not join lists here)")
        total = start
        for item in iterable:
            total = guard.binop("+", total, item)
        return total

    def _counted(fn):
        def call(*args):
            guard._spend(sum(np.size(a) if isinstance(a, _ARRAY) else len(a) if isinstance(a, _SEQ) else 1 for a in args))
            return fn(*args)
        call.__name__ = fn.__name__
        return call

    def _round(x, ndigits=None):
        if ndigits is not None and abs(operator.index(ndigits)) > 32:
            raise GuardError("argument-type", "round() ndigits must be within [-32, 32]")
        guard._spend(np.size(x) if isinstance(x, _ARRAY) else 1)
        return builtins.round(x, ndigits)

    def _range(*args):
        r = builtins.range(*args)
        return guard.iterable(r)

    return {
        "abs": _counted(builtins.abs), "min": _counted(builtins.min), "max": _counted(builtins.max),
        "len": builtins.len, "float": builtins.float, "int": builtins.int, "bool": builtins.bool,
        "round": _round, "sum": _sum, "range": _range, "enumerate": builtins.enumerate, "zip": builtins.zip,
    }
