"""Run-time limits of one compiled candidate: array sizes, work accounting and operator guards.

Generated code is rewritten (instrument.py) so that every operator that can allocate (`a * b`,
`-a`, `a < b`, `x[i]`) calls a method of the module's `Guard`, and its `np`, array methods and
builtins (namespace.py) charge the guard before computing. A guard checks *before* computing:
- an array result stays within `max_elems` (PER_ENV_ELEMS per environment + CONST_ELEMS), so an
  (N, 1) * (N,) outer product fails on a training-sized batch instead of eating memory;
- the term call's work stays within a budget linear in N, and the work of all of a candidate's
  terms in one call within another (`call(num_envs)` brackets such a call). Work is charged in
  additions (np.add's time per element), as measured: per element of each numpy operation (COST:
  a sine costs a hundred additions, a power of a negative base a thousand, a reduction along the
  short joint axis tens), plus each guarded call's fixed cost (numpy's and the guard's own, which
  dominate on small batches and in Python loops), per element of a Python sequence comparison
  (nested sequences counted through), per character of a number parsed from a string and per
  digit of a Python number rounded to a given number of digits; what no count can charge (matrix
  norms, nested sequences in numpy, object or string arrays) is refused by namespace.py instead;
- the elements of all arrays a call builds stay within a second budget linear in N (ALLOC_PER_ENV),
  so raising the work budget for cheap operations does not raise the memory a call may hold;
- Python ints, strings, lists and tuples cannot grow without bound (repeated squaring, doubling);
- indices are plain integers (no fancy indexing, whose result size depends on the index).
Violations raise `GuardError(rule, message)`; the sandbox turns it into a message with the line.
"""

from __future__ import annotations

import contextlib
import operator
import threading

import numpy as np

from motionvl.rewards.sandbox.errors import GuardError

PER_ENV_ELEMS = 64  # largest intermediate per environment: (N, 12) joints, (N, 2, 3) feet fit easily
CONST_ELEMS = 4096  # arrays that do not scale with N (weights, constants)
WORK_PER_ENV = 1 << 16  # work per environment per term call, in additions (~20 us per environment)
CONST_WORK = 1 << 23  # a term call's work on any batch: ~1000 guarded numpy calls
CALL_WORK_PER_ENV = 1 << 17  # all of a candidate's terms in one call together: two terms' worth ...
CALL_CONST_WORK = 1 << 24  # ... and ~2000 guarded numpy calls on any batch
ALLOC_PER_ENV = 4096  # array elements built per environment per term call (32 KB of float64)
CONST_ALLOC = 1 << 20
MAX_SEQ_LEN = 4096  # elements in one str/list/tuple
MAX_INT_BITS = 1024
MAX_ITERATIONS = 64  # one loop's length (also enforced statically)

COST = {
    **dict.fromkeys("+ - * & | ^ < <= > >= == != neg pos invert abs absolute fabs square floor ceil rint trunc "
                    "logical_not logical_and logical_or logical_xor isfinite isnan isinf negative add subtract "
                    "multiply copy astype reshape squeeze flatten ravel transpose zeros_like ones_like full_like "
                    "array".split(), 1),
    **dict.fromkeys("/ divide clip minimum maximum fmin fmax".split(), 4),
    **dict.fromkeys("sign where exp exp2 cbrt round argmax argmin sqrt log log1p log2 log10 expm1 tan arctan arcsin "
                    "sinh cosh any all stack concatenate deg2rad rad2deg radians degrees small-power".split(), 8),
    **dict.fromkeys("tanh arccos heaviside".split(), 16),
    **dict.fromkeys("sum mean prod count_nonzero norm linalg_norm arctan2 nan_to_num".split(), 32),
    **dict.fromkeys("min max amin amax cumsum".split(), 64),
    **dict.fromkeys("std var fmod".split(), 128),
    **dict.fromkeys("sin cos % mod // hypot median".split(), 256),
    **dict.fromkeys("** power".split(), 2048),  # pow() of a negative base: ~1000 additions per element
    "python": 512,  # per element of a Python list/tuple numpy converts
    "call": 8192,  # per guarded numpy function or array method call, whatever its size (numpy's and the guard's)
    "operator": 4096,  # per guarded operator on Python numbers or sequences, builtin call or loop iteration
    "item": 64,  # per element a comparison of Python sequences (==, <, in, .index, .count) visits
    "parse": 8,  # per character of a number parsed from a string (float("1e3"))
    "digit": 256,  # per decimal digit of a Python number rounded to ndigits (round(1e300, 2): ~300 digits)
}
"""Work of each operation, in additions (np.add's time per element): per element, numpy's measured time on
(N, 12) float64 arrays (reductions along the short joint axis, negative bases for powers); per call, item,
character or digit for the Python-level entries below "python"; with margin for their spread, rounded up to a
power of two. bench/reward_isolation.py prints the measurements beside these."""
SMALL_EXPONENTS = (0, 1, 2, 0.5, -1, -2)
"""`x ** k` numpy computes without pow() (a multiplication, a square root, a reciprocal): charged small-power."""


def power_op(exponent) -> str:
    """The COST entry of `x ** exponent`."""
    return "small-power" if isinstance(exponent, NUMBER) and exponent in SMALL_EXPONENTS else "**"


ARRAY = (np.ndarray, np.generic)
SEQUENCE = (str, list, tuple)
NUMBER = (int, float)  # bool is an int; np.float64 is a float
NUMERIC_KINDS = frozenset("biuf")


def numeric_shape(x) -> tuple:
    """Shape numpy would give `x`, refusing what is not numeric or flat (strings, objects, nested
    sequences: numpy would convert those element by element at a cost nothing here can charge)."""
    if isinstance(x, ARRAY):
        if x.dtype.kind not in NUMERIC_KINDS:
            raise GuardError("argument-type", f"arrays must be numeric, got dtype {x.dtype.name}")
        return x.shape
    if isinstance(x, NUMBER) or x is None:
        return ()
    if isinstance(x, (list, tuple)):
        if len(x) > MAX_SEQ_LEN:
            raise GuardError("sequence-size", f"a list/tuple of {len(x)} numbers is too large (limit {MAX_SEQ_LEN})")
        bad = next((v for v in x if not isinstance(v, NUMBER)), None)
        if bad is None:
            return (len(x),)
        hint = "; combine arrays with np.stack((a, b), axis=1)" if isinstance(bad, (*ARRAY, list, tuple)) else ""
        raise GuardError("argument-type", f"numpy math takes numbers, arrays and flat lists of numbers, not a "
                         f"{type(x).__name__} holding {type(bad).__name__}{hint}")
    raise GuardError("argument-type", f"numpy math takes numbers and arrays, not {type(x).__name__}")


def broadcast_size(shapes) -> int:
    """Element count of the broadcast of `shapes` (incompatible shapes: 0, numpy raises its own error)."""
    ndim = max((len(s) for s in shapes), default=0)
    size = 1
    for axis in range(1, ndim + 1):
        dims = {s[-axis] for s in shapes if len(s) >= axis} - {1}
        if len(dims) > 1:
            return 0
        size *= dims.pop() if dims else 1
    return size


def _size_of(shape: tuple) -> int:
    size = 1
    for dim in shape:
        size *= dim
    return size


def is_int_like(x) -> bool:
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
    """Per-module run-time limits: `session(num_envs)` brackets one top-level term call, `call(num_envs)` one
    call of all of a candidate's terms (the sessions inside it also draw on the call's budget)."""

    def __init__(self):
        self._lock = threading.RLock()
        self.max_elems = CONST_ELEMS
        self.work_left = CONST_WORK
        self.alloc_left = CONST_ALLOC
        self.call_left: int | None = None  # work left to the terms of the current call; None outside one
        self._call_bound = False  # whether this session's budget is what the call has left

    @contextlib.contextmanager
    def call(self, num_envs: int):
        """One call of all the candidate's terms on a batch of num_envs: their work together stays within
        CALL_WORK_PER_ENV per environment (+ CALL_CONST_WORK)."""
        with self._lock:
            self.call_left = CALL_WORK_PER_ENV * num_envs + CALL_CONST_WORK
            try:
                yield
            finally:
                self.call_left = None

    @contextlib.contextmanager
    def session(self, num_envs: int):
        # One term call at a time per module: the budget is per call, not per thread.
        with self._lock:
            budget = WORK_PER_ENV * num_envs + CONST_WORK
            self._call_bound = self.call_left is not None and self.call_left < budget
            start = self.work_left = self.call_left if self._call_bound else budget
            self.max_elems = PER_ENV_ELEMS * num_envs + CONST_ELEMS
            self.alloc_left = ALLOC_PER_ENV * num_envs + CONST_ALLOC
            try:
                with np.errstate(all="ignore"):  # NaN/inf are reported from the output, not as warnings
                    yield
            finally:
                if self.call_left is not None:
                    self.call_left -= start - self.work_left

    # -- accounting -------------------------------------------------------------------------
    def spend(self, units: int):
        self.work_left -= units
        if self.work_left < 0:
            if self._call_bound:
                raise GuardError(
                    "work-budget",
                    f"the terms together do too much array work for one step (limit {CALL_WORK_PER_ENV} additions' "
                    "worth per environment for all generated terms of a call); compute shared quantities once in "
                    "fewer terms, vectorise, and avoid expensive operations in loops",
                )
            raise GuardError(
                "work-budget",
                f"the term does too much array work for one step (limit {WORK_PER_ENV} additions' worth per "
                "environment; every numpy call costs thousands on a small batch, sin/cos, %, powers other than ** 2 "
                "and reductions along an axis tens to thousands per element); vectorise and avoid repeating "
                "operations in loops",
            )

    def allocate(self, elements: int):
        self.alloc_left -= elements
        if self.alloc_left < 0:
            raise GuardError(
                "memory-budget",
                f"the term builds too many array elements in one step (limit {ALLOC_PER_ENV} per environment); "
                "keep fewer intermediate arrays, e.g. accumulate a running sum instead of a list of arrays",
            )

    def array_op(self, *operands, op: str = "+", result_shape: tuple | None = None) -> int:
        """Check and charge one numpy operation `op` (a COST entry) over `operands` (numbers, arrays, flat
        numeric lists): the call, and per element of its largest operand or result; the result is their
        broadcast unless `result_shape` says otherwise. Returns its size."""
        shapes, largest, listed, common = [], 0, 0, ()
        for x in operands:
            if type(x) is np.ndarray and x.dtype.kind in NUMERIC_KINDS:  # the common case, without numeric_shape
                shape, count = x.shape, x.size
            else:
                shape = numeric_shape(x)
                count = _size_of(shape)
                if isinstance(x, (list, tuple)):
                    listed += len(x)
            shapes.append(shape)
            if count > largest:
                largest = count
            if shape and common is not None and shape != common:
                common = shape if not common else None  # None: several shapes, broadcasting to work out
        if result_shape is not None:
            size = _size_of(result_shape)
        elif common is not None:  # one shape and scalars
            size = largest
        else:
            size = broadcast_size(shapes)
        if size > self.max_elems:
            raise GuardError(
                "array-size",
                f"this operation would build an array of {size} elements (limit {self.max_elems}, i.e. "
                f"{PER_ENV_ELEMS} per environment). Usually an (N, 1) array meets an (N,) array and broadcasts "
                "to (N, N): reduce to (N,) first, or index with [:, 0]",
            )
        self.spend(COST["call"] + COST[op] * (size if size > largest else largest) + COST["python"] * listed)
        self.allocate(size)
        return size

    def check_seq_len(self, n: int):
        if n > MAX_SEQ_LEN:
            raise GuardError("sequence-size", f"a string/list/tuple of {n} elements is too large (limit {MAX_SEQ_LEN})")
        self.spend(COST["operator"] + max(n, 1))

    def visits(self, x) -> int:
        """Elements a Python comparison involving `x` may visit: a string's characters count a quarter each (a
        substring search reads each a few times), a list's or tuple's elements 1 each, nested lists and tuples
        counted through (as often as they appear: each distinct one is walked once here). The count stops once
        it is more than the work left could pay for. Arrays inside sequences are refused."""
        if isinstance(x, str):
            return len(x) // 4 + 1
        if not isinstance(x, (list, tuple)):
            return 1
        limit = max(self.work_left, 0) // COST["item"] + 1
        counted: dict[int, int] = {}  # id -> visits of a sequence walked already
        stack = [(x, False)]
        while stack:
            seq, walked = stack.pop()
            if walked:
                total = len(seq) + 1 + sum(counted.get(id(v), 0) for v in seq if isinstance(v, (list, tuple)))
                counted[id(seq)] = total
                if total > limit:
                    return total
            elif id(seq) not in counted:
                counted[id(seq)] = 0  # in progress (sequences cannot be mutated, so never their own element)
                stack.append((seq, True))
                for v in seq:
                    if isinstance(v, (list, tuple)):
                        if id(v) not in counted:
                            stack.append((v, False))
                    elif isinstance(v, ARRAY):
                        raise GuardError("operator", "sequences holding arrays cannot be compared; compare the arrays")
        return counted[id(x)]

    def compare_sequences(self, *seqs) -> None:
        """Charge a Python comparison, search or count over `seqs` (each visited once at most)."""
        self.spend(COST["operator"])
        self.spend(COST["item"] * sum(self.visits(s) for s in seqs))

    def _check_int(self, op: str, a: int, b: int):
        bits_a, bits_b = a.bit_length(), b.bit_length()
        if op == "*":
            bits = bits_a + bits_b
        elif op == "**":
            bits = bits_a * b if b > 0 else 0
        elif op in ("//", "%", "&"):
            bits = max(bits_a, bits_b)
        else:
            bits = max(bits_a, bits_b) + 1
        if bits > MAX_INT_BITS:
            raise GuardError("int-size", f"this integer operation would produce a {bits}-bit number "
                             f"(limit {MAX_INT_BITS}); use floats")
        self.spend(COST["operator"] + bits // 64)

    # -- operators (called by the rewritten code) -------------------------------------------
    def binop(self, op: str, a, b):
        seq_a, seq_b = isinstance(a, SEQUENCE), isinstance(b, SEQUENCE)
        if seq_a or seq_b:
            if op == "*" and (is_int_like(b) if seq_a else is_int_like(a)):
                seq, count = (a, operator.index(b)) if seq_a else (b, operator.index(a))
                self.check_seq_len(len(seq) * max(count, 0))
            elif op == "+" and seq_a and seq_b:
                self.check_seq_len(len(a) + len(b))
            elif op == "%" and isinstance(a, str):
                raise GuardError("string-format", "'%' string formatting is not available in reward code")
            elif isinstance(a, str) or isinstance(b, str):
                raise GuardError("argument-type", f"strings do not support '{op}' here")
            else:  # list/tuple of numbers meeting an array or a number: numpy converts it
                self.array_op(a, b, op=power_op(b) if op == "**" else op)
        elif isinstance(a, ARRAY) or isinstance(b, ARRAY):
            self.array_op(a, b, op=power_op(b) if op == "**" else op)
        elif isinstance(a, int) and isinstance(b, int):
            self._check_int(op, a, b)
        elif isinstance(a, NUMBER) and isinstance(b, NUMBER):
            self.spend(COST["operator"])
        else:
            raise GuardError("argument-type", f"'{op}' takes numbers, arrays and sequences, "
                             f"not {type(a).__name__} and {type(b).__name__}")
        return _BINOPS[op](a, b)

    def compare(self, op: str, a, b):
        if op in ("in", "not in"):
            if not isinstance(b, SEQUENCE):
                raise GuardError("operator", "'in' works on strings, tuples and lists; for arrays use "
                                 "np.any(arr == value)")
            if isinstance(a, ARRAY):
                raise GuardError("operator", "'in' cannot compare arrays; use np.any(arr == value)")
            self.compare_sequences(a, b)  # refuses arrays inside either
        elif op in ("is", "is not"):
            self.spend(COST["operator"])
        elif isinstance(a, ARRAY) or isinstance(b, ARRAY) or (isinstance(a, (list, tuple)) != isinstance(b, (list, tuple))):
            self.array_op(a, b)
        elif isinstance(a, SEQUENCE) and isinstance(b, SEQUENCE):
            self.compare_sequences(a, b)
        else:
            self.spend(COST["operator"])
        return _COMPARES[op](a, b)

    def unary(self, op: str, x):
        if isinstance(x, ARRAY):
            self.array_op(x, op="neg")
        elif isinstance(x, NUMBER):
            self.spend(COST["operator"])
        else:
            raise GuardError("argument-type", f"'{op}' takes a number or an array, not {type(x).__name__}")
        return _UNARY[op](x)

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
        if isinstance(x, (enumerate, zip)):  # built by the wrappers below from checked iterables
            return x
        if not isinstance(x, (tuple, list, range)):
            raise GuardError("loop", "loops run over range(K), tuples, lists and state.joint_names only")
        if len(x) > MAX_ITERATIONS:
            raise GuardError("loop", f"loops may run at most {MAX_ITERATIONS} iterations")
        return x
