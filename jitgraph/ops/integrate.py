"""scipy.integrate's rules over samples on traced values: trapezoid, cumulative_trapezoid and
simpson.

trapezoid is np.trapezoid's formula (`arrange.trapezoid`); cumulative_trapezoid is its running
sum. Simpson's rule is linear in the samples: for known sample points (x a NumPy array, or
spacing dx) the integral is sum(w * y) along the axis, with weights w computed here in NumPy by
SciPy's composite rule (parabolas through pairs of intervals, for irregular spacing too, and
Cartwright's correction of the last interval when the sample count is even). A traced dx
scales the weights; traced sample points x are refused for simpson.

The integrals (of sampled data) that take a Python function (quad, solve_ivp, odeint) run
SciPy's compiled solvers and are not traceable.
"""
import numpy as np

from ..core import Tensor
from ..errors import NotSupportedError, where
from ..numpy_api import as_operand, cast, norm_axis, shape_of
from . import reduce as rd
from .arrange import _along, trapezoid, trapezoid_terms
from .index import getitem
from .order import cumsum
from .shape import concatenate
from .special import library_functions


def _check_points(x, nd, n, axis):
    """SciPy's checks of sample points x (1-d along the axis, or shaped like y, n samples)."""
    sx = tuple(shape_of(x))
    if len(sx) != 1 and len(sx) != nd:
        raise ValueError("If given, shape of x must be 1-D or the same as y.")
    if (sx[0] if len(sx) == 1 else sx[axis]) != n:
        raise ValueError("If given, length of x along axis must be the same as y.")


def integrate_trapezoid(y, x=None, dx=1.0, axis=-1):
    """scipy.integrate.trapezoid (np.trapezoid's rule)."""
    return trapezoid(y, x=x, dx=dx, axis=axis)


def cumulative_trapezoid(y, x=None, dx=1.0, axis=-1, initial=None):
    """scipy.integrate.cumulative_trapezoid: the running trapezoid integral along `axis` (one
    shorter than y, or starting with `initial`, which must be 0 or None, as SciPy's)."""
    y = as_operand(y)
    nd = len(shape_of(y))
    axis = norm_axis(axis, nd)
    if shape_of(y)[axis] == 0:
        raise ValueError("At least one point is required along `axis`.")
    if x is not None:
        _check_points(x, nd, shape_of(y)[axis], axis)
    res = cumsum(trapezoid_terms(y, x, dx, axis), axis=axis)
    if initial is None:
        return res
    if not np.isscalar(initial):
        raise ValueError("`initial` parameter should be a scalar.")
    if initial != 0:
        raise ValueError("`initial` must be `None` or `0`.")
    first = getitem(res, _along(axis, nd, slice(0, 1))) * 0.0
    return concatenate([first, res], axis=axis)


def _guarded(num, den):
    """num / den where den != 0, else 0 (SciPy's true_divide with where=)."""
    out = np.zeros(np.broadcast(num, den).shape)
    np.true_divide(num, den, out=out, where=np.broadcast_to(den != 0, out.shape))
    return out


def simpson_weights(n, h):
    """Weights w (..., n) with simpson(y, x) = sum(w * y, -1), for the n - 1 spacings h (..., n - 1)
    of the sample points along the last axis: SciPy's composite rule."""
    h = np.asarray(h, dtype=np.float64)
    w = np.zeros(h.shape[:-1] + (n,))
    if n == 1:
        return w
    if n == 2:
        w[..., 0] = w[..., 1] = 0.5 * h[..., 0]
        return w
    last = n - 1 if n % 2 else n - 2          # the parabolas cover points 0..last
    h0, h1 = h[..., 0:last - 1:2], h[..., 1:last:2]
    hsum, hprod = h0 + h1, h0 * h1
    ratio = _guarded(h0, h1)
    w[..., 0:last - 1:2] += hsum / 6.0 * (2.0 - _guarded(1.0, ratio))
    w[..., 1:last:2] += hsum / 6.0 * (hsum * _guarded(hsum, hprod))
    w[..., 2:last + 1:2] += hsum / 6.0 * (2.0 - ratio)
    if n % 2 == 0:                           # Cartwright's correction for the last interval
        a, b = h[..., -2], h[..., -1]
        w[..., -1] += _guarded(2 * b ** 2 + 3 * a * b, 6 * (a + b))
        w[..., -2] += _guarded(b ** 2 + 3.0 * a * b, 6 * a)
        w[..., -3] -= _guarded(b ** 3, 6 * a * (a + b))
    return w


def simpson(y, x=None, *, dx=1.0, axis=-1):
    """scipy.integrate.simpson along `axis`: sum(w * y) with SciPy's weights for sample points
    x (a NumPy array, 1-d or shaped like y) or spacing dx (possibly traced)."""
    if isinstance(x, Tensor):
        raise NotSupportedError(f"scipy.integrate.simpson with traced sample points x is not supported; "
                                f"pass x as a NumPy array (y and dx may be traced){where()}")
    y = as_operand(y)
    nd = len(shape_of(y))
    axis = norm_axis(axis, nd)
    n = shape_of(y)[axis]
    if x is None:
        weights, scale = simpson_weights(n, np.ones(n - 1)), dx
    else:
        x = np.asarray(x)
        _check_points(x, nd, n, axis)
        spacing = np.diff(x) if x.ndim == 1 else np.moveaxis(np.diff(x, axis=axis), axis, -1)
        weights, scale = simpson_weights(n, spacing), None
        if x.ndim != 1:
            weights = np.moveaxis(weights, -1, axis)
    if weights.ndim == 1:
        shape = [1] * nd
        shape[axis] = n
        weights = weights.reshape(shape)
    # SciPy's dtype: float32 samples stay float32 with a spacing dx, and sample points x make float64
    dt = y.dtype if y.dtype.kind == "f" and x is None else np.result_type(y.dtype, np.float64)
    total = rd.sum(cast(y, dt) * weights.astype(dt), axis=axis)
    return total if scale is None else total * scale


library_functions("scipy.integrate", {"trapezoid": integrate_trapezoid, "simpson": simpson,
                                      "cumulative_trapezoid": cumulative_trapezoid})
