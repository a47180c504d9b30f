"""Reductions over axes, the NumPy functions built on them, and the stable row-wise composites.

A reduction primitive removes its (sorted) `axes` from the shape; `keepdims` is a
reshape the front end adds. Besides the common fields, each reduction registers
its identity and how two partial results combine (a scalar expression), which
the back ends use to split a reduction across chunks, threads and blocks.
"""
import builtins

import numpy as np

from ..core import Tensor, bind
from ..errors import NotSupportedError, ShapeError, where
from ..numpy_api import (UFUNC_REDUCE, as_operand, broadcast_to, cast, keepdims_shape, no_out, norm_axes,
                         reshape, shape_of)
from .elementwise import (absolute, add, divide, equal, exp, exp2, isfinite, log, log2, logaddexp, logaddexp2,
                          maximum, minimum, multiply, not_equal, subtract, sqrt, stop_gradient, where_)
from .elementwise import hypot as _hypot
from .registry import implements, register


class Reduction:
    """What a reduction's front end and lowerings need: its NumPy function, its identity and
    its combining expression."""

    __slots__ = ("numpy", "identity", "combine")

    def __init__(self, numpy, identity, combine):
        self.numpy, self.identity, self.combine = numpy, identity, combine


REDUCTIONS = {}


def _reduce_abs(x, axes):
    shape, dtype = x
    if any(not 0 <= a < len(shape) for a in axes) or len(set(axes)) != len(axes) \
            or tuple(sorted(axes)) != tuple(axes):
        raise ShapeError(f"bad reduction axes {axes} for shape {shape}")
    return tuple(d for i, d in enumerate(shape) if i not in axes), np.dtype(dtype)


def _flops(node):
    return int(node.inputs[0].size)


def _reduction(name, fn, identity, combine, vjp, plain=None):
    """`fn`: the primitive's reference (NumPy's function); `plain`: what sums plain arrays in the
    front end (`reduce`), fn unless given."""
    register(name, "reduce", _reduce_abs,
             lambda x, axes: np.asarray(fn(x, axis=axes)).astype(np.asarray(x).dtype), vjp,
             flops=_flops)
    REDUCTIONS[name] = Reduction(plain or fn, identity, combine)


def identity(op, dtype):
    """The identity of reduction `op` in `dtype` (a Python scalar)."""
    dtype = np.dtype(dtype)
    value = REDUCTIONS[op].identity
    if dtype == bool and op in ("reduce_max", "reduce_min"):
        return bool(value > 0)        # max starts at False (-inf), min at True (+inf)
    if dtype.kind in "iub" and np.isinf(value):
        info = np.iinfo(dtype if dtype != bool else np.int64)
        return int(info.min if value < 0 else info.max)
    return value if dtype.kind == "f" else int(value)


def expand(g, x_shape, axes):
    """Undo a reduction over `axes`: reshape with keepdims, then broadcast to x_shape."""
    if tuple(axes) == tuple(range(len(axes))):  # leading axes: broadcasting adds them back
        return broadcast_to(g, x_shape)
    return broadcast_to(reshape(g, keepdims_shape(x_shape, axes)), x_shape)


def _reduce_select(g, out, x, axes):
    """Adjoint of max/min reductions: split evenly between the positions that attain it."""
    hit = cast(equal(x, expand(out, x.shape, axes)), x.dtype)
    return expand(g, x.shape, axes) * hit / expand(sum(hit, axis=axes), x.shape, axes)


def _sum(x, axis=None, keepdims=False):
    """np.sum with float32 accumulated in float64, for sums of plain arrays in the front end: the
    eager reverse sweep's. NumPy adds along a non-last axis one row at a time: a float32 gradient
    summed over a broadcast (300, 400) axis pair came out 1.4e-3 off (relative; a cancelling
    sum), 1.4e-6 this way (JAX: 2.2e-6). The primitive's reference stays NumPy's sum (the
    interpreter computes NumPy's values)."""
    x = np.asarray(x)
    dtype = np.float64 if x.dtype == np.float32 else None
    return np.sum(x, axis=axis, dtype=dtype, keepdims=keepdims)


_reduction("reduce_sum", np.sum, 0.0, "{0} + {1}", (lambda g, out, x, axes: expand(g, x.shape, axes),),
           plain=_sum)
_reduction("reduce_max", np.max, -np.inf, "max({0}, {1})", (_reduce_select,))
_reduction("reduce_min", np.min, np.inf, "min({0}, {1})", (_reduce_select,))
# prod / x_i is the product of the others; like autograd, this rule is exact only for
# nonzero x (a zero entry gives inf/nan there).
_reduction("reduce_prod", np.prod, 1.0, "{0} * {1}",
           (lambda g, out, x, axes: expand(g * out, x.shape, axes) / x,))


# ---- the NumPy front end ----------------------------------------------------------------------
def reduce(op, x, axis, keepdims, dtype=None):
    """Reduction `op` of x over `axis` (None: all), NumPy-style."""
    x = as_operand(x)
    if dtype is not None:
        x = cast(x, dtype)
    elif op in ("reduce_sum", "reduce_prod") and x.dtype.kind in "biu":
        x = cast(x, np.uint64 if x.dtype.kind == "u" else np.int64)     # NumPy's accumulators
    axes = norm_axes(axis, len(shape_of(x)))
    if not isinstance(x, Tensor):
        out = REDUCTIONS[op].numpy(x, axis=axes, keepdims=keepdims)
        return np.asarray(out, dtype=x.dtype)
    if op in ("reduce_max", "reduce_min") and any(x.shape[a] == 0 for a in axes):
        raise ShapeError(f"zero-size reduction of {op[7:]} has no identity{where()}")
    r = bind(op, x, axes=axes)
    if keepdims:
        r = reshape(r, keepdims_shape(x.shape, axes))
    return r


def _no_extra(initial, where_, name):
    if initial is not None or where_ is not None:
        raise NotSupportedError(f"{name}(..., initial=/where=) is not supported{where()}")


_COMBINE = {"reduce_sum": add, "reduce_prod": multiply, "reduce_max": maximum, "reduce_min": minimum}
_IDENTITY = {"reduce_sum": 0, "reduce_prod": 1}


def _reduce_extra(op, x, axis, keepdims, dtype, initial, mask, name):
    """A reduction with NumPy's `initial=` (a scalar the reduction starts from) and `where=` (a
    mask broadcast against x: elements where it is False are left out, as the op's identity, or
    as `initial` for max and min, which have none and so need it)."""
    x = as_operand(x)
    if mask is not None:
        if initial is None and op not in _IDENTITY:
            raise ValueError(f"reduction operation '{_COMBINE[op].__name__}' does not have an identity, "
                             f"so to use a where mask one has to specify 'initial'{where()}")
        mask = broadcast_to(as_operand(mask), shape_of(x))
        x = where_(mask, x, _IDENTITY.get(op, initial))
    r = reduce(op, x, axis, keepdims, dtype)
    if initial is None:
        return r
    if isinstance(initial, Tensor) or np.ndim(initial) != 0:
        raise NotSupportedError(f"{name}(..., initial=) takes a scalar that is not traced{where()}")
    return _COMBINE[op](r, np.asarray(initial).astype(r.dtype))


@implements(np.sum)
def sum(x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    no_out(out, "np.sum")
    return _reduce_extra("reduce_sum", x, axis, keepdims, dtype, initial, where, "np.sum")


@implements(np.prod)
def prod(x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    no_out(out, "np.prod")
    return _reduce_extra("reduce_prod", x, axis, keepdims, dtype, initial, where, "np.prod")


@implements(np.max, np.amax)
def amax(x, axis=None, out=None, keepdims=False, initial=None, where=None):
    no_out(out, "np.max")
    return _reduce_extra("reduce_max", x, axis, keepdims, None, initial, where, "np.max")


@implements(np.min, np.amin)
def amin(x, axis=None, out=None, keepdims=False, initial=None, where=None):
    no_out(out, "np.min")
    return _reduce_extra("reduce_min", x, axis, keepdims, None, initial, where, "np.min")


def count(x, axis):
    """How many elements a reduction over `axis` combines."""
    shape = shape_of(x)
    return int(np.prod([shape[a] for a in norm_axes(axis, len(shape))], dtype=np.int64))


@implements(np.mean)
def mean(x, axis=None, dtype=None, out=None, keepdims=False, where=None):
    """np.mean; with `where=`, the mean of the elements the mask keeps (NaN where it keeps none)."""
    no_out(out, "np.mean")
    x = as_operand(x)
    if dtype is None and x.dtype.kind in "biu":
        dtype = np.float64
    if where is not None:
        kept = broadcast_to(as_operand(where), shape_of(x))
        s = _reduce_extra("reduce_sum", x, axis, keepdims, dtype, None, kept, "np.mean")
        return divide(s, reduce("reduce_sum", cast(kept, s.dtype), axis, keepdims))
    s = reduce("reduce_sum", x, axis, keepdims, dtype)
    return divide(s, float(count(x, axis)))


@implements(np.var)
def var(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None,
        correction=None):
    no_out(out, "np.var")
    _no_extra(None, where, "np.var")
    if mean is not None:
        raise NotSupportedError(f"np.var(..., mean=) is not supported{where()}")
    if correction is not None:
        ddof = correction
    x = as_operand(x)
    if dtype is None and x.dtype.kind in "biu":
        dtype = np.float64
    if dtype is not None:
        x = cast(x, dtype)
    mu = globals()["mean"](x, axis, keepdims=True)
    d = subtract(x, mu)
    ss = reduce("reduce_sum", multiply(d, d), axis, keepdims)
    return divide(ss, float(builtins.max(count(x, axis) - ddof, 0)))


@implements(np.std)
def std(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None,
        correction=None):
    """sqrt(var), with gradient 0 where the variance is 0 (sqrt's derivative there is inf, and
    the variance's is 0: their product would be NaN)."""
    v = var(x, axis, dtype, out, ddof, keepdims, where, mean, correction)
    zero = equal(v, 0.0)
    return where_(zero, 0.0, sqrt(where_(zero, 1.0, v)))


# ---- stable composites ----------------------------------------------------------------------------
def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x), axis)) computed stably (the max is subtracted first)."""
    x = as_operand(x)
    m = stop_gradient(amax(x, axis=axis, keepdims=True))
    s = sum(exp(subtract(x, m)), axis=axis, keepdims=True)
    r = add(log(s), m)
    if keepdims:
        return r
    axes = norm_axes(axis, len(shape_of(x)))
    return reshape(r, [d for i, d in enumerate(shape_of(r)) if i not in axes])


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x), axis), computed stably."""
    x = as_operand(x)
    e = exp(subtract(x, stop_gradient(amax(x, axis=axis, keepdims=True))))
    return divide(e, sum(e, axis=axis, keepdims=True))


def log_softmax(x, axis=-1):
    """x - logsumexp(x, axis), computed stably."""
    return subtract(x, logsumexp(x, axis=axis, keepdims=True))


@implements(np.count_nonzero)
def count_nonzero(a, axis=None, *, keepdims=False):
    """The number of nonzero elements along `axis` (an int64 count; no gradient)."""
    a = as_operand(a)
    if not isinstance(a, Tensor):
        return np.count_nonzero(a, axis=axis, keepdims=keepdims)
    nz = a if a.dtype == bool else not_equal(a, 0)
    return reduce("reduce_sum", cast(nz, np.int64), axis, keepdims)


# ---- ufunc.reduce of logaddexp, logaddexp2, hypot --------------------------------------------------
def _ufunc_reduce(x, axis, dtype, out, keepdims, initial, mask, name, identity, combine, body):
    """`body(x, axes)` (keepdims) with ufunc.reduce's arguments: `where=` leaves elements out as
    the identity, `initial` is combined with the result."""
    no_out(out, f"np.{name}.reduce")
    x = as_operand(x)
    dt = np.dtype(dtype) if dtype is not None else (x.dtype if x.dtype.kind == "f" else np.dtype(np.float64))
    x = cast(x, dt)
    if mask is not None:
        x = where_(broadcast_to(as_operand(mask), shape_of(x)), x, identity)
    axes = norm_axes(axis, len(shape_of(x)))
    r = body(x, axes)
    if not keepdims:
        r = reshape(r, [d for i, d in enumerate(shape_of(x)) if i not in axes])
    if initial is not None:
        if isinstance(initial, Tensor):
            raise NotSupportedError(f"np.{name}.reduce(..., initial=) takes a value known when "
                                    f"tracing{where()}")
        r = combine(r, np.asarray(initial, dt))
    return r


def _log_sum_exp(base2):
    def body(x, axes):
        # the largest element is subtracted first (its gradient cancels, so none flows through it);
        # an infinite or NaN maximum is left to the sum, which then gives inf, -inf or NaN as
        # the sequential logaddexp does
        m = stop_gradient(reduce("reduce_max", x, axes, True)) if axes else x
        m = where_(isfinite(m), m, 0.0)
        d = subtract(x, m)
        s = reduce("reduce_sum", exp2(d) if base2 else exp(d), axes, True)
        return add(log2(s) if base2 else log(s), m)
    return body


def _hypot_body(x, axes):
    # scaled by the largest magnitude, so no square over- or underflows
    m = stop_gradient(reduce("reduce_max", absolute(x), axes, True)) if axes else absolute(x)
    safe = where_(isfinite(m) & not_equal(m, 0.0), m, 1.0)
    q = divide(x, safe)
    s = reduce("reduce_sum", multiply(q, q), axes, True)
    zero = equal(s, 0.0)
    return multiply(safe, where_(zero, 0.0, sqrt(where_(zero, 1.0, s))))


def _reducer(name, identity, combine, body):
    def reducer(x, axis=0, dtype=None, out=None, keepdims=False, initial=None, where=None):
        return _ufunc_reduce(x, axis, dtype, out, keepdims, initial, where, name, identity, combine, body)
    reducer.__name__ = reducer.__qualname__ = f"{name}_reduce"
    return reducer


# (to rounding: NumPy combines the elements one after another)
UFUNC_REDUCE[np.logaddexp] = _reducer("logaddexp", -np.inf, logaddexp, _log_sum_exp(False))
UFUNC_REDUCE[np.logaddexp2] = _reducer("logaddexp2", -np.inf, logaddexp2, _log_sum_exp(True))
UFUNC_REDUCE[np.hypot] = _reducer("hypot", 0.0, _hypot, _hypot_body)
