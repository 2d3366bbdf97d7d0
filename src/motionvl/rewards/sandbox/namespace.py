"""What generated code can call: the `np` namespace, array and sequence methods, the builtins.

Every callable is a wrapper with an exact signature written here: numpy gets only the arguments
listed (a value, an axis, keepdims, ord, decimals, ddof, fill and clip values), never `out`,
`dtype`, `shape`, `buffer`, `copy`, `overwrite_input` or `where`, whether passed by keyword or by
position (an extra positional argument is a TypeError of the wrapper). Each argument's type is
checked (an axis is an int or a tuple of ints, numbers are numbers, arrays are numeric and flat
sequences are short) and the operation is charged to the module's Guard before numpy runs.
The dtype names (`np.float64`, ...) are tokens for `x.astype(...)`, not constructors.
"""

from __future__ import annotations

import builtins
import math
import operator
import types

import numpy as np

from motionvl.rewards.sandbox.errors import GuardError
from motionvl.rewards.sandbox.guard import (
    ARRAY,
    COST,
    MAX_ITERATIONS,
    NUMBER,
    SEQUENCE,
    Guard,
    numeric_shape,
    power_op,
)

# the elementwise functions by arity, and the reductions (each charged its guard.COST entry)
_UNARY = ("abs absolute fabs sign square floor ceil rint trunc logical_not isfinite isnan isinf negative deg2rad "
          "rad2deg radians degrees sqrt cbrt exp expm1 exp2 log log1p log2 log10 sin cos tan arcsin arccos arctan "
          "sinh cosh tanh").split()
_BINARY = ("minimum maximum fmin fmax logical_and logical_or logical_xor heaviside add subtract multiply divide "
           "arctan2 hypot mod fmod power").split()
_REDUCE = "sum mean min max amin amax prod any all".split()
NP_CONSTANTS = {"pi": np.pi, "e": np.e, "inf": np.inf}
DTYPE_NAMES = ("float64", "float32", "int64", "int32", "bool_")
_SPECIAL = ("clip where round nan_to_num std var argmax argmin count_nonzero median norm linalg_norm zeros_like "
            "ones_like full_like array asarray stack concatenate").split()
NP_FUNCTIONS = frozenset([*_UNARY, *_BINARY, *_REDUCE, *_SPECIAL])
NP_NAMES = NP_FUNCTIONS | frozenset(NP_CONSTANTS) | frozenset(DTYPE_NAMES)
ARRAY_METHODS = frozenset("sum mean std var min max prod any all argmax argmin clip astype reshape copy flatten "
                          "ravel squeeze round transpose cumsum".split())
SEQUENCE_METHODS = frozenset("index count startswith endswith".split())
SAFE_BUILTIN_NAMES = ("abs", "min", "max", "len", "range", "float", "int", "bool", "round", "sum", "enumerate", "zip")

MAX_NDIM = 4
MAX_DECIMALS = 15
MAX_DDOF = 16


class DType:
    """`np.float64` and co. in generated code: a name `x.astype(...)` accepts, nothing callable."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str):
        self.name, self.dtype = name, np.dtype(getattr(np, name))

    def __repr__(self) -> str:
        return f"np.{self.name}"


_BUILTIN_DTYPES = {"float": np.dtype(np.float64), "int": np.dtype(np.int64), "bool": np.dtype(np.bool_)}


# -- argument checks -------------------------------------------------------------------------------
def _axis(axis, fn: str):
    if axis is None:
        return None
    if isinstance(axis, tuple) and 0 < len(axis) <= MAX_NDIM and all(_small_int(a, MAX_NDIM) for a in axis):
        return tuple(operator.index(a) for a in axis)
    if _small_int(axis, MAX_NDIM):
        return operator.index(axis)
    raise GuardError("argument-type", f"{fn}: axis must be None, an int or a tuple of ints")


def _small_int(x, bound: int) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, np.integer)) and -bound <= x <= bound


def _flag(value, fn: str, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise GuardError("argument-type", f"{fn}: {name} must be True or False")
    return bool(value)


def _number(value, fn: str, name: str, optional: bool = False):
    if value is None and optional:
        return None
    if isinstance(value, (*NUMBER, np.number, np.bool_)) and not isinstance(value, np.ndarray):
        return value
    raise GuardError("argument-type", f"{fn}: {name} must be a number")


def _int_in(value, low: int, high: int, fn: str, name: str) -> int:
    if not _small_int(value, max(abs(low), abs(high))) or not low <= value <= high:
        raise GuardError("argument-type", f"{fn}: {name} must be an int within [{low}, {high}]")
    return operator.index(value)


def _ndim(x) -> int:
    return len(numeric_shape(x))


def _norm_ord(x, ord, axis, fn: str):
    """Vector norms only (sum of |x|, sqrt of the sum of squares, max |x|); matrix norms of order 2, -2
    and 'nuc' are singular value decompositions, whose cost no element count describes."""
    if ord is None:
        return None
    if isinstance(ord, str) or not isinstance(ord, NUMBER) or ord not in (1, 2, math.inf, -math.inf):
        raise GuardError("argument-type", f"{fn}: ord must be None, 1, 2, np.inf or -np.inf")
    if not (isinstance(axis, int) or _ndim(x) <= 1):
        raise GuardError("matrix-norm", f"{fn}: with ord a norm over several axes is a matrix norm (a singular "
                         "value decomposition for ord=2): give one axis, e.g. axis=-1 for per-row norms")
    return ord


def _result_shape(x, axis, keepdims: bool) -> tuple:
    shape = numeric_shape(x)
    if axis is None:
        return tuple(1 for _ in shape) if keepdims else ()
    axes = {a % len(shape) if shape else 0 for a in (axis if isinstance(axis, tuple) else (axis,))}
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes)


# -- the np namespace ------------------------------------------------------------------------------
def make_numpy_namespace(guard: Guard) -> types.SimpleNamespace:
    """The object generated code sees as `np`: only the wrappers below, the constants and dtype names."""
    g = guard
    members = {}

    def unary(name, fn):
        def call(x):
            g.array_op(x, op=name)
            return fn(x)
        return call

    def binary(name, fn):
        def call(x1, x2):
            g.array_op(x1, x2, op=power_op(x2) if name == "power" else name)
            return fn(x1, x2)
        return call

    def reduce(name, fn):
        def call(x, axis=None, keepdims=False):
            axis, keepdims = _axis(axis, f"np.{name}"), _flag(keepdims, f"np.{name}", "keepdims")
            g.array_op(x, op=name, result_shape=_result_shape(x, axis, keepdims))  # charged by the input's size
            return fn(x, axis=axis, keepdims=keepdims)
        return call

    for name in _UNARY:
        members[name] = unary(name, getattr(np, name))
    for name in _BINARY:
        members[name] = binary(name, getattr(np, name))
    for name in _REDUCE:
        members[name] = reduce(name, getattr(np, name))

    def clip(a, a_min=None, a_max=None, *, min=None, max=None):  # noqa: A002 - numpy's own keyword names
        low, high = (a_min if a_min is not None else min), (a_max if a_max is not None else max)
        if low is None and high is None:
            raise GuardError("call", "np.clip needs a lower or an upper bound: np.clip(x, low, high)")
        g.array_op(a, *(v for v in (low, high) if v is not None), op="clip")
        return np.clip(a, low, high)

    def where(condition, x, y):
        g.array_op(condition, x, y, op="where")
        return np.where(condition, x, y)

    def round(x, decimals=0):  # noqa: A001
        decimals = _int_in(decimals, -MAX_DECIMALS, MAX_DECIMALS, "np.round", "decimals")
        g.array_op(x, op="round")
        return np.round(x, decimals)

    def nan_to_num(x, nan=0.0, posinf=None, neginf=None):
        values = (_number(nan, "np.nan_to_num", "nan"), _number(posinf, "np.nan_to_num", "posinf", True),
                  _number(neginf, "np.nan_to_num", "neginf", True))
        g.array_op(x, op="nan_to_num")
        return np.nan_to_num(x, copy=True, nan=values[0], posinf=values[1], neginf=values[2])

    def moments(name, fn):
        def call(x, axis=None, ddof=0, keepdims=False):
            axis, keepdims = _axis(axis, f"np.{name}"), _flag(keepdims, f"np.{name}", "keepdims")
            ddof = _int_in(ddof, 0, MAX_DDOF, f"np.{name}", "ddof")
            g.array_op(x, op=name, result_shape=_result_shape(x, axis, keepdims))
            return fn(x, axis=axis, ddof=ddof, keepdims=keepdims)
        return call

    def arg(name, fn):
        def call(x, axis=None):
            axis = _axis(axis, f"np.{name}")
            if isinstance(axis, tuple):
                raise GuardError("argument-type", f"np.{name}: axis must be None or an int")
            g.array_op(x, op=name, result_shape=_result_shape(x, axis, False))
            return fn(x, axis=axis)
        return call

    def count_nonzero(x, axis=None):
        g.array_op(x, op="count_nonzero", result_shape=_result_shape(x, _axis(axis, "np.count_nonzero"), False))
        return np.count_nonzero(x, axis=_axis(axis, "np.count_nonzero"))

    def median(x, axis=None, keepdims=False):
        axis, keepdims = _axis(axis, "np.median"), _flag(keepdims, "np.median", "keepdims")
        g.array_op(x, op="median", result_shape=_result_shape(x, axis, keepdims))
        return np.median(x, axis=axis, keepdims=keepdims)

    def norm(x, ord=None, axis=None, keepdims=False):  # noqa: A002
        axis, keepdims = _axis(axis, "np.norm"), _flag(keepdims, "np.norm", "keepdims")
        ord = _norm_ord(x, ord, axis, "np.norm")
        g.array_op(x, op="norm", result_shape=_result_shape(x, axis, keepdims))
        return np.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)

    def like(name, fn):
        def call(x):
            g.array_op(x, op=name)
            return fn(x)
        return call

    def full_like(x, fill_value):
        _number(fill_value, "np.full_like", "fill_value")
        g.array_op(x, op="full_like")
        return np.full_like(x, fill_value)

    def array(x):
        g.array_op(x, op="array")
        return np.array(x)

    def joined(name, fn):
        def call(arrays, axis=0):
            if not isinstance(arrays, (list, tuple)) or not 0 < len(arrays) <= MAX_ITERATIONS:
                raise GuardError("argument-type", f"np.{name} takes a list/tuple of 1..{MAX_ITERATIONS} arrays")
            axis = _int_in(axis, -MAX_NDIM, MAX_NDIM, f"np.{name}", "axis")
            total = sum(math.prod(numeric_shape(a)) for a in arrays)
            g.array_op(*arrays, op=name, result_shape=(total,))
            return fn(arrays, axis=axis)
        return call

    members.update(
        clip=clip, where=where, round=round, nan_to_num=nan_to_num, std=moments("std", np.std),
        var=moments("var", np.var), argmax=arg("argmax", np.argmax), argmin=arg("argmin", np.argmin),
        count_nonzero=count_nonzero, median=median, norm=norm, linalg_norm=norm,
        zeros_like=like("zeros_like", np.zeros_like), ones_like=like("ones_like", np.ones_like), full_like=full_like,
        array=array, asarray=array, stack=joined("stack", np.stack), concatenate=joined("concatenate", np.concatenate),
    )
    for name, fn in members.items():
        fn.__name__ = fn.__qualname__ = name
    assert set(members) == NP_FUNCTIONS
    return types.SimpleNamespace(**members, **NP_CONSTANTS, **{name: DType(name) for name in DTYPE_NAMES})


# -- methods ---------------------------------------------------------------------------------------
def make_method_dispatch(guard: Guard, safe_builtins: dict):
    """`__mvl_method(obj, name, *args, **kwargs)`: `obj.name(...)` through a wrapper of exact signature,
    array methods on numpy values, sequence methods on str/tuple/list, nothing else. `safe_builtins` is the
    module's builtins: its float/int/bool are dtype names for astype."""
    g = guard
    builtin_dtypes = {id(safe_builtins[name]): dtype for name, dtype in _BUILTIN_DTYPES.items()}

    def reduction(name):
        def call(x, axis=None, keepdims=False):
            axis, keepdims = _axis(axis, f".{name}()"), _flag(keepdims, f".{name}()", "keepdims")
            g.array_op(x, op=name, result_shape=_result_shape(x, axis, keepdims))
            return getattr(x, name)(axis=axis, keepdims=keepdims)
        return call

    def moment(name):
        def call(x, axis=None, ddof=0, keepdims=False):
            axis, keepdims = _axis(axis, f".{name}()"), _flag(keepdims, f".{name}()", "keepdims")
            g.array_op(x, op=name, result_shape=_result_shape(x, axis, keepdims))
            return getattr(x, name)(axis=axis, ddof=_int_in(ddof, 0, MAX_DDOF, f".{name}()", "ddof"), keepdims=keepdims)
        return call

    def arg(name):
        def call(x, axis=None):
            axis = _axis(axis, f".{name}()")
            if isinstance(axis, tuple):
                raise GuardError("argument-type", f".{name}(): axis must be None or an int")
            g.array_op(x, op=name, result_shape=_result_shape(x, axis, False))
            return getattr(x, name)(axis=axis)
        return call

    def clip(x, a_min=None, a_max=None, *, min=None, max=None):  # noqa: A002
        low, high = (a_min if a_min is not None else min), (a_max if a_max is not None else max)
        if low is None and high is None:
            raise GuardError("call", ".clip() needs a lower or an upper bound: x.clip(low, high)")
        g.array_op(x, *(v for v in (low, high) if v is not None), op="clip")
        return np.clip(x, low, high)

    def astype(x, dtype):
        target = dtype.dtype if isinstance(dtype, DType) else builtin_dtypes.get(id(dtype))
        if target is None:
            raise GuardError("dtype", "astype takes one of float, int, bool, np.float64, np.float32, np.int64, np.int32, "
                             "np.bool_")
        g.array_op(x, op="astype")
        return x.astype(target)

    def reshape(x, *shape):
        if len(shape) == 1 and isinstance(shape[0], tuple):
            shape = shape[0]
        if not 0 < len(shape) <= MAX_NDIM or not all(_small_int(d, 1 << 40) for d in shape):
            raise GuardError("argument-type", f".reshape() takes 1..{MAX_NDIM} ints (one may be -1)")
        g.array_op(x, op="reshape")
        return x.reshape(tuple(operator.index(d) for d in shape))  # same element count, or numpy refuses

    def copying(name):
        def call(x):
            g.array_op(x, op=name)
            return getattr(x, name)()
        return call

    def squeeze(x, axis=None):
        g.array_op(x, op="squeeze")
        return x.squeeze(axis=_axis(axis, ".squeeze()"))

    def round(x, decimals=0):  # noqa: A001
        g.array_op(x, op="round")
        return x.round(_int_in(decimals, -MAX_DECIMALS, MAX_DECIMALS, ".round()", "decimals"))

    def cumsum(x, axis=None):
        axis = _axis(axis, ".cumsum()")
        if isinstance(axis, tuple):
            raise GuardError("argument-type", ".cumsum(): axis must be None or an int")
        g.array_op(x, op="cumsum")
        return x.cumsum(axis=axis)

    array_methods = {
        **{name: reduction(name) for name in ("sum", "mean", "min", "max", "prod", "any", "all")},
        "std": moment("std"), "var": moment("var"), "argmax": arg("argmax"), "argmin": arg("argmin"),
        "clip": clip, "astype": astype, "reshape": reshape, "copy": copying("copy"), "flatten": copying("flatten"),
        "ravel": copying("ravel"), "transpose": copying("transpose"), "squeeze": squeeze, "round": round,
        "cumsum": cumsum,
    }
    assert set(array_methods) == ARRAY_METHODS

    def index(seq, value):
        _plain_item(value, ".index()")
        g.compare_sequences(seq, value)  # every element compared with value, nested sequences counted through
        return seq.index(value)

    def count(seq, value):
        _plain_item(value, ".count()")
        g.compare_sequences(seq, value)
        return seq.count(value)

    def affix(name):
        def call(text, affix):
            if not isinstance(text, str) or not isinstance(affix, str):
                raise GuardError("argument-type", f".{name}() is a string method taking one string")
            g.spend(COST["operator"] + len(affix))
            return getattr(text, name)(affix)
        return call

    sequence_methods = {"index": index, "count": count, "startswith": affix("startswith"), "endswith": affix("endswith")}
    assert set(sequence_methods) == SEQUENCE_METHODS

    def dispatch(obj, name, *args, **kwargs):
        table = array_methods if isinstance(obj, ARRAY) else sequence_methods if isinstance(obj, SEQUENCE) else {}
        fn = table.get(name)
        if fn is None:
            kind = "arrays" if isinstance(obj, ARRAY) else type(obj).__name__
            raise GuardError("method", f"`.{name}()` is not available on {kind}; array methods: "
                             f"{', '.join(sorted(ARRAY_METHODS))}; string/tuple methods: {', '.join(sorted(SEQUENCE_METHODS))}")
        return fn(obj, *args, **kwargs)

    return dispatch


def _decimal_digits(x, ndigits: int) -> int:
    """Digits Python's round(x, ndigits) works out: those of |x|'s integer part plus the ndigits after the point."""
    if isinstance(x, float):
        before = 1 + max(0, int(math.log10(abs(x)))) if math.isfinite(x) and x != 0.0 else 1
    else:  # an int (or bool): about 0.3 decimal digits per bit
        before = 1 + int(x).bit_length() * 3 // 10
    return before + max(ndigits, 0)


def _plain_item(value, fn: str):
    if not isinstance(value, (str, *NUMBER)):
        raise GuardError("argument-type", f"{fn} looks for a string or a number")


# -- builtins --------------------------------------------------------------------------------------
def make_builtins(guard: Guard) -> dict:
    """The whole `__builtins__` of generated code: no open/import/getattr/exec, growth guarded."""
    g = guard

    def _elements(args) -> int:
        return sum(int(np.size(a)) if isinstance(a, ARRAY) else len(a) if isinstance(a, SEQUENCE) else 1 for a in args)

    def _items(iterable, fn: str) -> list:
        """The items of a list, tuple, range, generator expression or short array (at most MAX_ITERATIONS)."""
        if isinstance(iterable, ARRAY) and np.ndim(iterable) >= 1 and len(iterable) <= MAX_ITERATIONS:
            g.array_op(iterable, op="copy")
            return list(iterable)
        if not isinstance(iterable, (list, tuple, range, types.GeneratorType)):
            raise GuardError("argument-type", f"{fn}() takes a list, tuple, range or generator expression; for an "
                             f"array use np.{fn}(x, axis=...)")
        items = []
        for item in iterable:  # generator expressions are bounded by the static loop rules
            items.append(item)
            if len(items) > MAX_ITERATIONS:
                raise GuardError("loop", f"{fn}() over more than {MAX_ITERATIONS} items; use np.{fn}(x, axis=...)")
        g.spend(COST["operator"] + len(items))
        return items

    def _sum(iterable, start=0):
        if not isinstance(start, NUMBER):
            raise GuardError("argument-type", "sum() start must be a number (sum() does not join lists here)")
        total = start
        for item in _items(iterable, "sum"):
            total = g.binop("+", total, item)
        return total

    def _extreme(fn):
        other = "maximum" if fn is builtins.max else "minimum"

        def call(*args):
            if not args:
                raise GuardError("call", f"{fn.__name__}() needs arguments")
            items = _items(args[0], fn.__name__) if len(args) == 1 else list(args)
            if len(items) > MAX_ITERATIONS or any((isinstance(v, ARRAY) and np.size(v) > 1) or isinstance(v, (list, tuple))
                                                  for v in items):
                raise GuardError("argument-type", f"{fn.__name__}() compares numbers; for arrays use np.{other}(a, b)")
            g.spend(COST["operator"] + COST["item"] * len(items))
            return fn(items)
        call.__name__ = fn.__name__
        return call

    def _abs(x):
        if isinstance(x, NUMBER):
            g.spend(COST["operator"])
        else:
            g.array_op(x, op="abs")
        return builtins.abs(x)

    def _round(x, ndigits=None):
        if ndigits is not None:
            _int_in(ndigits, -32, 32, "round()", "ndigits")
        if isinstance(x, NUMBER) and not isinstance(x, np.floating):
            # Python rounds to ndigits through a decimal expansion of every digit: charged by their number
            g.spend(COST["operator"] + (0 if ndigits is None else COST["digit"] * _decimal_digits(x, ndigits)))
        else:
            g.array_op(x, op="round")
        return builtins.round(x, ndigits)

    def _len(x):
        if not isinstance(x, (*ARRAY, *SEQUENCE, range)):
            raise GuardError("argument-type", "len() takes an array, string, tuple or list")
        g.spend(COST["operator"])
        return builtins.len(x)

    def _scalar(fn):
        def call(x=0):
            if not isinstance(x, (*NUMBER, *ARRAY, str, np.bool_)) or (isinstance(x, ARRAY) and np.size(x) != 1):
                raise GuardError("argument-type", f"{fn.__name__}() takes a number (or a one-element array)")
            if isinstance(x, str) and fn is not builtins.float:
                raise GuardError("argument-type", f"{fn.__name__}() takes a number")
            g.spend(COST["operator"] + (COST["parse"] * len(x) if isinstance(x, str) else 0))
            return fn(x)
        call.__name__ = fn.__name__
        return call

    def _range(*args):
        if not 1 <= len(args) <= 3 or not all(isinstance(a, int) for a in args):
            raise GuardError("argument-type", "range() takes 1 to 3 ints")
        g.spend(COST["operator"])
        return g.iterable(builtins.range(*args))

    def _enumerate(iterable):
        g.spend(COST["operator"])
        return builtins.enumerate(g.iterable(iterable))

    def _zip(*iterables, strict=False):
        g.spend(COST["operator"])
        return builtins.zip(*(g.iterable(i) for i in iterables), strict=_flag(strict, "zip()", "strict"))

    return {
        "abs": _abs, "min": _extreme(builtins.min), "max": _extreme(builtins.max), "len": _len,
        "float": _scalar(builtins.float), "int": _scalar(builtins.int), "bool": _scalar(builtins.bool),
        "round": _round, "sum": _sum, "range": _range, "enumerate": _enumerate, "zip": _zip,
    }


def warm_up() -> None:
    """Call every wrapped numpy function and method once on tiny arrays, so that numpy's lazily imported
    modules (np.median's, np.linalg's) are loaded before a worker's open-file and memory limits apply."""
    guard = Guard()
    safe_builtins = make_builtins(guard)
    np_ns, method = make_numpy_namespace(guard), make_method_dispatch(guard, safe_builtins)
    x = np.linspace(0.1, 0.9, 6).reshape(2, 3)
    with guard.session(64):
        for name in sorted(NP_FUNCTIONS):
            fn = getattr(np_ns, name)
            if name in _BINARY:
                fn(x, x)
            elif name == "clip":
                fn(x, 0.2, 0.8)
            elif name == "where":
                fn(x > 0.5, x, x)
            elif name == "full_like":
                fn(x, 1.0)
            elif name in ("stack", "concatenate"):
                fn((x, x), axis=0)
            else:
                fn(x)
        for name in sorted(ARRAY_METHODS):
            args = {"clip": (0.2, 0.8), "astype": (safe_builtins["float"],), "reshape": (-1,)}.get(name, ())
            method(x, name, *args)
