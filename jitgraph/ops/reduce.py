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
from ..numpy_api import (as_operand, broadcast_to, cast, keepdims_shape, no_out, norm_axes, reshape,
                         shape_of)
from .elementwise import (add, divide, equal, exp, log, maximum, minimum, multiply, subtract, sqrt, stop_gradient,
                          where_)
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


def _reduction(name, fn, identity, combine, vjp):
    register(name, "reduce", _reduce_abs,
             lambda x, axes: np.asarray(fn(x, axis=axes)).astype(np.asarray(x).dtype), vjp,
             flops=_flops)
    REDUCTIONS[name] = Reduction(fn, identity, combine)


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


_reduction("reduce_sum", np.sum, 0.0, "{0} + {1}", (lambda g, out, x, axes: expand(g, x.shape, axes),))
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
        x = cast(x, np.int64)
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
