"""What NumPy does with recorded values where no protocol lets jitgraph see it.

`__array_ufunc__` and `__array_function__` reach jitgraph when a traced value is an
argument, but not when it sits inside a Python list (`np.mean([a, b])`), is handed
to a C constructor (`np.array([a, b])`, `np.asarray(x)`), is concatenated by
`np.r_`/`np.c_`, or is written into an array NumPy created (`out = np.zeros(n);
out[i] = a`). While a function is recorded (traced for `jit`, or taped by
`value_and_grad`), `recording()` puts wrappers for those entry points in the `numpy`
module; a wrapper does jitgraph's work only in a thread that records, for a call from
the user's code (not NumPy's or jitgraph's own), and when a recorded value is
involved, and otherwise calls NumPy's function. Names bound with `from numpy import
mean` before the recording keep NumPy's functions.
"""
import builtins
import contextlib
import math
import os
import sys
import sysconfig
import threading
import types

import numpy as np

from .buffers import Buffer, tensors, unwrap
from .core import is_tracing, known_value
from .errors import NotSupportedError, TracingError, is_library_frame, where
from .numpy_api import as_operand, cast, result_dtype, shape_of
from .ops.arrange import as_strided
from .ops.registry import FUNCTIONS
from .ops.shape import concatenate, reshape, transpose_
from .ops.vectorize import vectorized_call

_CREATORS = ("zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like",
             "eye", "identity")


class _State(threading.local):
    depth = 0


_state = _State()
_lock = threading.Lock()
_installed = {"count": 0, "originals": []}       # (object, attribute, what it held), in patch order


_INSTALLED = tuple(os.path.abspath(p) + os.sep for p in {sysconfig.get_paths()["purelib"],
                                                         sysconfig.get_paths()["platlib"]})
_FROM_PACKAGE = {}
# NumPy's modules written in NumPy operations that traced values go through as they go through the
# user's code: np.polynomial (hermevander, chebval, ...) makes its arrays with np.array and np.empty
_TRACED_NUMPY = tuple(os.path.join(os.path.dirname(os.path.abspath(np.__file__)), d) + os.sep
                      for d in ("polynomial",))


def _from_user():
    """Does the patched function's caller (two frames up) belong to the user's code (not NumPy's,
    jitgraph's, or an installed package's such as SciPy, which get NumPy's functions)?"""
    if not _state.depth:
        return False
    frame = sys._getframe(2)
    name = frame.f_code.co_filename
    if name.startswith(_TRACED_NUMPY):
        return True
    if is_library_frame(frame):
        return False
    installed = _FROM_PACKAGE.get(name)
    if installed is None:
        installed = _FROM_PACKAGE[name] = os.path.abspath(name).startswith(_INSTALLED)
    return not installed


# ---- the wrappers -----------------------------------------------------------------------------------
def _creator(name, original):
    """np.zeros & co: a Buffer, which can receive recorded values (see buffers.py)."""
    def create(*args, **kwargs):
        result = original(*args, **kwargs)
        if type(result) is np.ndarray and _from_user():
            return result.view(Buffer)
        return result
    return create


def _constructor(name, original, copy_default):
    """np.array, np.asarray & co. of recorded values (or lists holding them): a recorded value."""
    def construct(a, dtype=None, *args, **kwargs):
        if not (_from_user() and tensors(a)):
            return original(a, dtype, *args, **kwargs)
        if args or builtins.any(k not in ("copy", "ndmin", "order", "subok") for k in kwargs):
            raise NotSupportedError(f"np.{name} of traced values with arguments {sorted(kwargs)} is not "
                                    f"supported{where()}")
        t = as_operand(a)
        if dtype is not None:
            t = cast(t, dtype)
        ndmin = kwargs.get("ndmin", 0)
        if len(t.shape) < ndmin:
            t = reshape(t, (1,) * (ndmin - len(t.shape)) + tuple(t.shape))
        copy = kwargs.get("copy", copy_default)
        if copy and t is a:
            t = t.rebind(t.node)
        return t
    return construct


def _list_aware(fn, original):
    """A NumPy function jitgraph implements, called with recorded values inside lists (which
    __array_function__ does not look into): jitgraph's implementation."""
    def call(*args, **kwargs):
        if _from_user() and _in_containers(args, kwargs):
            return fn(*args, **kwargs)
        return original(*args, **kwargs)
    return call


def _in_containers(args, kwargs):
    for v in list(args) + list(kwargs.values()):
        if isinstance(v, (list, tuple)) and tensors(v):
            return True
    return False


class _Concatenator:
    """np.r_ / np.c_ with recorded values among the items (NumPy's rules: slices are ranges,
    a leading "axis,ndmin,trans1d" string sets the layout, scalars are weak)."""

    def __init__(self, original, axis, ndmin, trans1d):
        self.original = original
        self.axis, self.ndmin, self.trans1d = axis, ndmin, trans1d

    def __getitem__(self, key):
        if not (_state.depth and tensors(key)):
            return self.original[key]
        key = key if isinstance(key, tuple) else (key,)
        axis, ndmin, trans1d = self.axis, self.ndmin, self.trans1d
        objs, kinds = [], []
        for k, item in enumerate(key):
            if isinstance(item, str):
                if k != 0 or item in ("r", "c"):
                    raise NotSupportedError(f"np.r_/np.c_ directive {item!r} with traced values is not "
                                            f"supported{where()}")
                vec = [int(v) for v in item.split(",")]
                axis = vec[0]
                if len(vec) > 1:
                    ndmin = vec[1]
                if len(vec) > 2:
                    trans1d = vec[2]
                continue
            # a slice is NumPy's range (or linspace) of it; scalars are weak in the result type
            obj = self.original[item] if isinstance(item, slice) else item
            kinds.append(obj)
            nd = len(shape_of(obj))
            t = as_operand(obj)
            if nd < ndmin:
                t = reshape(t, (1,) * (ndmin - nd) + tuple(shape_of(t)))
                if trans1d != -1:
                    k2 = ndmin - nd
                    k1 = trans1d + k2 + 1 if trans1d < 0 else trans1d
                    axes = list(range(ndmin))
                    t = transpose_(t, axes[:k1] + axes[k2:] + axes[k1:k2])
            objs.append(t)
        dt = result_dtype(*kinds)
        return concatenate([cast(t, dt) for t in objs], axis=axis)


# np.lib.stride_tricks.as_strided takes its array through np.array, from NumPy's own code, and is
# mostly imported by name (`from numpy.lib.stride_tricks import as_strided`), so neither a protocol
# nor a patched module attribute reaches it: while recording, the function's own code is
# `_as_strided_hook`'s, which sends recorded values to jitgraph's as_strided (ops/arrange.py)
# and everything else to NumPy's code.
_AS_STRIDED = np.lib.stride_tricks.as_strided
_AS_STRIDED_CODE = _AS_STRIDED.__code__
_as_strided_numpy = types.FunctionType(_AS_STRIDED_CODE, _AS_STRIDED.__globals__, "as_strided",
                                       _AS_STRIDED.__defaults__, _AS_STRIDED.__closure__)


def _as_strided_hook(x, shape=None, strides=None, subok=False, writeable=True):
    # runs with NumPy's globals (this code replaces the function's code): this module is
    # found through sys.modules
    import sys
    return sys.modules["jitgraph.recording"].as_strided_dispatch(x, shape, strides, subok, writeable)


def as_strided_dispatch(x, shape, strides, subok, writeable):
    if tensors(x):      # a recorded value, or a Buffer holding one
        return as_strided(x._shadow if isinstance(x, Buffer) else x, shape, strides, subok, writeable)
    return _as_strided_numpy(x, shape, strides, subok, writeable)


# np.vectorize objects are often made before the recording (at import, as decorators): while
# recording, the class's __call__ sends calls with recorded values to ops/vectorize.py.
_VECTORIZE_CALL = np.vectorize.__call__


def _vectorize_call(self, *args, **kwargs):
    if self.pyfunc is not np._NoValue and tensors((args, kwargs)):
        return vectorized_call(self, args, kwargs)
    return _VECTORIZE_CALL(self, *args, **kwargs)


# np.polynomial's *val(x, c, tensor=True) read a multidimensional c against every x only for an
# ndarray x (`isinstance(x, np.ndarray)`): for a recorded x the wrapper reshapes c as NumPy's code
# would, then calls NumPy's function with tensor=False.
_POLYNOMIAL_VALS = (("polynomial", "polyval"), ("chebyshev", "chebval"), ("legendre", "legval"),
                    ("laguerre", "lagval"), ("hermite", "hermval"), ("hermite_e", "hermeval"))


def _tensor_val(original):
    def val(x, c, tensor=True):
        if tensor and tensors(x):
            x = as_operand(x)
            c = as_operand(c) if tensors(c) else np.array(c, ndmin=1, copy=None)
            if len(shape_of(c)) > 1:
                return original(x, reshape(c, tuple(shape_of(c)) + (1,) * len(shape_of(x))), tensor=False)
        return original(x, c, tensor=tensor)
    val.__wrapped__ = original
    return val


# np.polynomial trims trailing zero coefficients (polyutils.trimseq: of polymul's product, of
# as_series' arguments), which makes a length depend on the values. Traced coefficients whose
# values are unknown are all kept, as np.polymul keeps them (ops/arrange.py): the same
# polynomial, with its zero high-order coefficients, where NumPy would drop them.
def _trimseq(original):
    def trimseq(seq):
        if tensors(seq) and known_value(seq) is None:
            return seq
        return original(seq)
    trimseq.__wrapped__ = original
    return trimseq


def _polynomial_patches():
    import numpy.polynomial as P
    from numpy.polynomial import polyutils
    return [(getattr(P, module), name, _tensor_val(getattr(getattr(P, module), name)))
            for module, name in _POLYNOMIAL_VALS] + [(polyutils, "trimseq", _trimseq(polyutils.trimseq))]


# math's functions of a recorded value (one element) from the user's code: NumPy's, so the result
# stays recorded (traced: a value, where float() would fail; eagerly: a gradient, where float()
# would cut it). Each gives a 0-d value; Python's ValueError for a domain error (math.sqrt(-1)) is
# raised where the value is known (eagerly).
def _math_patches():
    import scipy.special as sc
    unary = {"exp": np.exp, "expm1": np.expm1, "log1p": np.log1p, "log2": np.log2, "log10": np.log10,
             "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin,
             "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
             "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "fabs": np.fabs,
             "erf": sc.erf, "erfc": sc.erfc, "gamma": sc.gamma, "lgamma": sc.gammaln, "cbrt": np.cbrt,
             "exp2": np.exp2}
    binary = {"atan2": np.arctan2, "pow": np.power, "copysign": np.copysign, "fmod": np.fmod,
              "hypot": np.hypot}
    out = {name: (lambda f: lambda x: f(_as_float(x)))(f) for name, f in unary.items()}
    out.update({name: (lambda f: lambda x, y: f(_as_float(x), _as_float(y)))(f) for name, f in binary.items()})
    out["log"] = lambda x, base=None: (np.log(_as_float(x)) if base is None
                                       else np.log(_as_float(x)) / np.log(_as_float(base)))
    return [(math, name, _math_function(name, getattr(math, name), fn))
            for name, fn in out.items() if hasattr(math, name)]


def _as_float(x):
    """x as math's functions take it: one element, as float64."""
    x = as_operand(unwrap(x))
    if int(np.prod(shape_of(x), dtype=np.int64)) != 1:
        raise TypeError("only 0-dimensional arrays can be converted to Python scalars")
    return cast(reshape(x, ()), np.float64)


_POLES = ("log", "log2", "log10", "log1p", "atanh", "gamma", "lgamma")    # math: ValueError, not overflow


def _math_function(name, original, numpy_form):
    def call(*args):
        if not (tensors(args) and _from_user()):
            return original(*args)
        with np.errstate(all="ignore"):
            result = numpy_form(*args)
        values = [known_value(unwrap(a)) for a in args + (result,)]       # (None for a traced one)
        if builtins.all(v is not None for v in values) and builtins.all(np.isfinite(v).all() for v in values[:-1]):
            if np.isnan(values[-1]).any() or (np.isinf(values[-1]).any() and name in _POLES):
                raise ValueError("math domain error")
            if np.isinf(values[-1]).any():
                raise OverflowError("math range error")
        return result
    call.__wrapped__ = original
    return call


# A generator made without a seed while a graph is traced draws numbers the compiled function
# would repeat on every call (a trace reads no generator state that lowering.py could watch):
# refused. Eagerly, and seeded, generators are fine.
def _unseeded_refused(module, name, original):
    def create(*args, **kwargs):
        if not args and not kwargs and is_tracing() and _from_user():
            raise TracingError(
                f"{module}.{name}() without a seed while the function is traced{where()}: a compiled "
                "function would return the same numbers on every call. Draw them outside and pass them "
                "as an argument (f(x, rng.standard_normal(3))), or use the eager jg.value_and_grad")
        if is_tracing() and tensors((args, kwargs)):
            raise TracingError(
                f"{module}.{name}() with a traced seed{where()}: the seed is an argument of the traced "
                f"function, so its value is not known while the function is traced. Pass it with "
                f"static_argnums (one trace per seed), or draw the numbers outside and pass them as an "
                f"argument")
        return original(*args, **kwargs)
    return create


# (np.random.RandomState and random.Random are classes, which NumPy's own code checks against)
_RANDOM_MAKERS = ((np.random, "np.random", "default_rng"),)


# ---- installing them while recording -------------------------------------------------------------------
_PATCHES = []


def _patches():
    """(object, attribute, replacement) for everything patched while recording (made once, while
    nothing is patched)."""
    if not _PATCHES:
        _PATCHES.extend(_make_patches())
    return _PATCHES


def _make_patches():
    out = [(np, name, _creator(name, getattr(np, name))) for name in _CREATORS]
    out += [(np, name, _constructor(name, getattr(np, name), copy)) for name, copy in
            (("array", True), ("asarray", False), ("asanyarray", False), ("ascontiguousarray", False))]
    out += [(np, "r_", _Concatenator(np.r_, 0, 1, -1)), (np, "c_", _Concatenator(np.c_, -1, 2, 0))]
    taken = {name for _, name, _ in out}
    # the functions jitgraph implements, list aware; np.linalg's and np.fft's too
    # (np.linalg.det([[a, b], [c, d]]) of recorded values)
    for module in (np, np.linalg, np.fft):
        for name in dir(module):
            obj = getattr(module, name, None)
            if (module is not np or name not in taken) and callable(obj) \
                    and not isinstance(obj, (type, np.ufunc)) and obj in FUNCTIONS:
                out.append((module, name, _list_aware(FUNCTIONS[obj], obj)))
    out += [(_AS_STRIDED, "__code__", _as_strided_hook.__code__), (np.vectorize, "__call__", _vectorize_call)]
    out += _math_patches() + _polynomial_patches()
    out += [(module, name, _unseeded_refused(spelled, name, getattr(module, name)))
            for module, spelled, name in _RANDOM_MAKERS]
    return out


@contextlib.contextmanager
def recording():
    """Marks the code inside as recorded in this thread, with the entry points that no protocol
    reaches replaced (in numpy, np.linalg, np.fft, np.polynomial and math, while any thread
    records)."""
    with _lock:
        if _installed["count"] == 0:
            for obj, attr, replacement in _patches():
                _installed["originals"].append((obj, attr, getattr(obj, attr)))
                setattr(obj, attr, replacement)
        _installed["count"] += 1
    _state.depth += 1
    try:
        yield
    finally:
        _state.depth -= 1
        with _lock:
            _installed["count"] -= 1
            if _installed["count"] == 0:
                for obj, attr, original in reversed(_installed["originals"]):
                    setattr(obj, attr, original)
                _installed["originals"].clear()
