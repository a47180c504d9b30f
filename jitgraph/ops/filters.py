"""Convolutions and filters of scipy.signal and scipy.ndimage on traced values.

No primitives of their own: each output point is a window of the (padded) input times the
kernel, summed, written as padding (`np.pad`'s modes, which are the boundary rules of both
modules), every window of the padded array (`sliding_window_view`, gathers) and one
`tensordot` with the kernel, so gradients reach the input and a traced kernel alike.
Separable filters (gaussian_filter, uniform_filter) are 1-d correlations along each axis
in turn, as SciPy computes them. lfilter's IIR recurrence is a `scan` (so CPU-only, as
control flow is), from zero or a given (possibly traced) state; filtfilt runs it forward and
backward over the padded signal from SciPy's steady-state initial conditions.

Values agree with SciPy's to rounding, not bit for bit: SciPy sums a window in its own
order (fftconvolve through FFTs, uniform_filter1d as a running sum). Float inputs only for
scipy.signal; scipy.ndimage computes in float64 and converts to the input's dtype, as SciPy
does (integers truncated).

The wrappers go into scipy.signal and scipy.ndimage once those modules are imported
(`special.library_functions`): a call with a traced value among its arguments runs
the version here, any other SciPy's own. SciPy's modules are never imported here.
"""
import builtins
import sys

import numpy as np

from ..core import Tensor
from ..errors import NotSupportedError, where
from ..numpy_api import as_operand, cast, reshape, shape_of
from .arrange import flip, pad, sliding_window_view
from .contract import tensordot
from .control import scan
from .index import getitem
from .shape import concatenate, moveaxis
from .special import library_functions


def _traced(*xs):
    return builtins.any(isinstance(x, Tensor) for x in xs)


def _ndim(x):
    return len(shape_of(x))


def _windows_dot(padded, kernel):
    """out[i] = sum_j padded[i + j] kernel[j] over every axis (a 'valid' correlation)."""
    nd = _ndim(kernel)
    windows = sliding_window_view(padded, tuple(shape_of(kernel)))
    return tensordot(windows, kernel, axes=(tuple(range(nd, 2 * nd)), tuple(range(nd))))


def _float_operands(in1, in2, name):
    a, b = as_operand(in1), as_operand(in2)
    if _ndim(a) != _ndim(b):
        raise ValueError("in1 and in2 should have the same dimensionality")
    dt = np.result_type(a.dtype, b.dtype)
    if dt.kind != "f":
        raise NotSupportedError(f"{name} of {dt.name} arrays is not supported on traced values; "
                                f"cast them to a float dtype{where()}")
    return cast(a, dt), cast(b, dt)


def _swap_needed(mode, s1, s2):
    """SciPy's _inputs_swap_needed: in 'valid' mode, one input must be at least as large as the
    other in every dimension; the second is used as the larger one."""
    if mode != "valid":
        return False
    if all(a >= b for a, b in zip(s1, s2)):
        return False
    if all(b >= a for a, b in zip(s1, s2)):
        return True
    raise ValueError("For 'valid' mode, one must be at least as large as the other in every dimension")


def _mode_slice(full, s1, s2, mode):
    """The part of a full convolution (size s1 + s2 - 1) that `mode` keeps: all of it, the
    centred s1 (same), or the |s1 - s2| + 1 points where the inputs overlap whole (valid)."""
    if mode == "full":
        return full
    if mode == "same":
        key = tuple(slice((b - 1) // 2, (b - 1) // 2 + a) for a, b in zip(s1, s2))
    elif mode == "valid":
        key = tuple(slice(min(a, b) - 1, max(a, b)) for a, b in zip(s1, s2))
    else:
        raise ValueError("acceptable mode flags are 'valid', 'same', or 'full'")
    return getitem(full, key)


def _full_convolution(a, b, boundary="fill", fillvalue=0):
    """The full convolution of a and b (padding a by len(b) - 1 on each side by the boundary
    rule), as one correlation with b reversed."""
    widths = [(k - 1, k - 1) for k in shape_of(b)]
    if boundary == "fill":
        padded = pad(a, widths, mode="constant", constant_values=fillvalue)
    else:
        padded = pad(a, widths, mode={"wrap": "wrap", "circular": "wrap", "symm": "symmetric",
                                      "symmetric": "symmetric"}[boundary])
    return _windows_dot(padded, flip(b))


# ---- scipy.signal ----------------------------------------------------------------------------------
def signal_convolve(in1, in2, mode="full", method="auto"):
    """scipy.signal.convolve (and fftconvolve, oaconvolve: the same values to rounding) of two
    float arrays of one rank, by direct sums."""
    a, b = _float_operands(in1, in2, "scipy.signal.convolve")
    s1, s2 = tuple(shape_of(a)), tuple(shape_of(b))
    if _swap_needed(mode, s1, s2):
        a, b, s1, s2 = b, a, s2, s1
    return _mode_slice(_full_convolution(a, b), s1, s2, mode)


def signal_correlate(in1, in2, mode="full", method="auto"):
    """scipy.signal.correlate of two float arrays of one rank: the convolution with in2
    reversed (and, where 'valid' mode swaps the inputs, the result reversed)."""
    a, b = _float_operands(in1, in2, "scipy.signal.correlate")
    if _swap_needed(mode, tuple(shape_of(a)), tuple(shape_of(b))):
        return flip(signal_convolve(b, flip(a), mode))
    return signal_convolve(a, flip(b), mode)


def fftconvolve(in1, in2, mode="full", axes=None):
    """scipy.signal.fftconvolve (and oaconvolve) over every axis: the convolution, summed
    directly (equal to SciPy's FFT result to rounding)."""
    if axes is not None:
        raise NotSupportedError(f"scipy.signal.fftconvolve with axes= is not supported on traced "
                                f"values{where()}")
    return signal_convolve(in1, in2, mode)


def _check_2d(a, b, name):
    if _ndim(a) != 2 or _ndim(b) != 2:
        raise ValueError(f"{name} inputs must both be 2-D arrays")


def convolve2d(in1, in2, mode="full", boundary="fill", fillvalue=0):
    """scipy.signal.convolve2d: boundary 'fill' (fillvalue), 'wrap' or 'symm' outside in1."""
    a, b = _float_operands(in1, in2, "scipy.signal.convolve2d")
    _check_2d(a, b, "convolve2d")
    s1, s2 = tuple(shape_of(a)), tuple(shape_of(b))
    if _swap_needed(mode, s1, s2):
        a, b, s1, s2 = b, a, s2, s1
    return _mode_slice(_full_convolution(a, b, boundary, fillvalue), s1, s2, mode)


def correlate2d(in1, in2, mode="full", boundary="fill", fillvalue=0):
    """scipy.signal.correlate2d: the convolution with in2 reversed; 'valid' mode with a larger
    in2 swaps the inputs and reverses the result, and 'same' starts half a kernel into the full
    result (not as scipy.signal.correlate's 'same', for even kernels), as SciPy does."""
    a, b = _float_operands(in1, in2, "scipy.signal.correlate2d")
    _check_2d(a, b, "correlate2d")
    s1, s2 = tuple(shape_of(a)), tuple(shape_of(b))
    if _swap_needed(mode, s1, s2):
        return flip(convolve2d(b, flip(a), mode, boundary, fillvalue))
    if mode == "same":      # centred as SciPy's correlate2d: from len(in2) // 2 of the full output
        full = convolve2d(a, flip(b), "full", boundary, fillvalue)
        return getitem(full, tuple(slice(k // 2, k // 2 + n) for n, k in zip(s1, s2)))
    return convolve2d(a, flip(b), mode, boundary, fillvalue)


def lfilter(b, a, x, axis=-1, zi=None):
    """scipy.signal.lfilter: the direct form II transposed recurrence SciPy computes,
    y[n] = b0 x[n] + z0 and z_i = b_{i+1} x[n] + z_{i+1} - a_{i+1} y[n] (coefficients divided by
    a[0]), as a `scan` over `axis` from the state zi (zeros by default; with zi, the result is
    (y, zf), the final state, as SciPy's); an FIR filter (one a) without zi is one correlation.
    Gradients reach x, traced coefficients and a traced zi."""
    b, a, x = as_operand(b), as_operand(a), as_operand(x)
    if _ndim(b) != 1 or _ndim(a) != 1:
        raise ValueError("object of too small depth for desired array")
    if not isinstance(a, Tensor) and a[0] == 0:
        raise ValueError("BUG: filter coefficient a[0] == 0 not supported yet")
    dt = np.result_type(b.dtype, a.dtype, x.dtype, *(() if zi is None else (as_operand(zi).dtype,)))
    dt = dt if dt.kind == "f" else np.dtype(np.float64)
    b, a, x = cast(b, dt), cast(a, dt), cast(x, dt)
    nd = _ndim(x)
    axis = axis % nd
    m = max(shape_of(a)[0], shape_of(b)[0])
    b = pad(b / a[0], (0, m - shape_of(b)[0]))
    xm = moveaxis(x, axis, 0)
    if shape_of(a)[0] == 1 and zi is None:
        padded = pad(xm, [(m - 1, 0)] + [(0, 0)] * (nd - 1))
        ys = tensordot(sliding_window_view(padded, m, axis=0), flip(b), axes=1)
        return moveaxis(ys, 0, axis)
    a = pad(a / a[0], (0, m - shape_of(a)[0]))
    lanes = (1,) * (nd - 1)
    b_rest, a_rest = reshape(b[1:], (m - 1,) + lanes), reshape(a[1:], (m - 1,) + lanes)
    zero = np.zeros((1,) + tuple(shape_of(xm))[1:], dt)

    def step(z, xn):
        y = b[0] * xn + z[0]
        shifted = concatenate([z[1:], zero], axis=0)
        return shifted + b_rest * xn - a_rest * y, y

    state = (m - 1,) + tuple(shape_of(xm))[1:]
    if zi is None:
        _, ys = scan(step, np.zeros(state, dt), xm)
        return moveaxis(ys, 0, axis)
    zi = as_operand(zi)
    want = tuple(shape_of(x))[:axis] + (m - 1,) + tuple(shape_of(x))[axis + 1:]
    if tuple(shape_of(zi)) != want:
        raise ValueError(f"Unexpected shape for zi: expected {want}, found {tuple(shape_of(zi))}.")
    zf, ys = scan(step, cast(moveaxis(zi, axis, 0), dt), xm)
    return moveaxis(ys, 0, axis), moveaxis(zf, 0, axis)


def _axis_slice(x, axis, key):
    return getitem(x, (slice(None),) * axis + (key,))


def _extended(x, n, axis, padtype):
    """scipy.signal's odd, even and constant extensions of x by n samples at both ends."""
    if n == 0:
        return x
    first, last = _axis_slice(x, axis, slice(0, 1)), _axis_slice(x, axis, slice(-1, None))
    left, right = _axis_slice(x, axis, slice(n, 0, -1)), _axis_slice(x, axis, slice(-2, -(n + 2), -1))
    if padtype == "odd":
        left, right = 2 * first - left, 2 * last - right
    elif padtype == "constant":
        left = concatenate([first] * n, axis=axis)
        right = concatenate([last] * n, axis=axis)
    return concatenate([left, x, right], axis=axis)


def filtfilt(b, a, x, axis=-1, padtype="odd", padlen=None, method="pad", irlen=None):
    """scipy.signal.filtfilt (method 'pad'): x extended at both ends (odd, even or constant),
    filtered forward and backward by lfilter from the steady-state initial conditions
    lfilter_zi(b, a) scaled by the first sample, and cut back: zero phase. b and a must be known
    when tracing (lfilter_zi is SciPy's, on them)."""
    if method != "pad":
        raise NotSupportedError(f"scipy.signal.filtfilt with method={method!r} is not supported on traced "
                                f"values (method='pad' is){where()}")
    if isinstance(b, Tensor) or isinstance(a, Tensor):
        raise NotSupportedError(f"scipy.signal.filtfilt with traced coefficients is not supported (its initial "
                                f"conditions are SciPy's lfilter_zi of b and a){where()}")
    if padtype not in ("odd", "even", "constant", None):
        raise ValueError(f"Unknown value '{padtype}' given to padtype.  padtype must be 'even', 'odd', "
                         f"'constant', or None.")
    b, a = np.atleast_1d(np.asarray(b, dtype=float)), np.atleast_1d(np.asarray(a, dtype=float))
    x = as_operand(x)
    nd = _ndim(x)
    axis = axis % nd
    ntaps = max(len(a), len(b))
    edge = 0 if padtype is None or padlen == 0 else (3 * ntaps if padlen is None else padlen)
    if shape_of(x)[axis] <= edge:
        raise ValueError(f"The length of the input vector x must be greater than padlen, which is {edge}.")
    ext = _extended(x, edge, axis, padtype)
    zi_shape = [1] * nd
    zi_shape[axis] = ntaps - 1
    # (this function is installed into scipy.signal, so that module is imported)
    zi = np.reshape(sys.modules["scipy.signal"].lfilter_zi(b, a), zi_shape)
    y, _ = lfilter(b, a, ext, axis=axis, zi=zi * _axis_slice(ext, axis, slice(0, 1)))
    y = flip(y, axis)
    y, _ = lfilter(b, a, y, axis=axis, zi=zi * _axis_slice(y, axis, slice(0, 1)))
    y = flip(y, axis)
    return _axis_slice(y, axis, slice(edge, shape_of(y)[axis] - edge)) if edge else y


SIGNAL_FUNCTIONS = {"lfilter": lfilter, "filtfilt": filtfilt, "convolve": signal_convolve, "correlate": signal_correlate, "fftconvolve": fftconvolve,
                    "oaconvolve": fftconvolve, "convolve2d": convolve2d, "correlate2d": correlate2d}


# ---- scipy.ndimage -----------------------------------------------------------------------------------
# ndimage's boundary modes as np.pad's (reflect repeats the edge sample, mirror does not)
_PAD_MODES = {"reflect": "symmetric", "grid-mirror": "symmetric", "mirror": "reflect", "nearest": "edge",
              "wrap": "wrap", "grid-wrap": "wrap", "constant": "constant", "grid-constant": "constant"}


def _per_axis(value, nd, what):
    values = tuple(np.broadcast_to(np.asarray(value), (nd,)).tolist()) if np.ndim(value) == 0 \
        else tuple(value)
    if len(values) != nd:
        raise RuntimeError(f"{what} must have length equal to the number of dimensions")
    return values


def _nd_input(x, name):
    x = as_operand(x)
    if x.dtype.kind not in "biuf":
        raise NotSupportedError(f"{name} of {x.dtype.name} arrays is not supported{where()}")
    return x


def ndimage_correlate(input, weights, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
    """scipy.ndimage.correlate: out[i] = sum_j weights[j] input[i + j - (size // 2 + origin)],
    outside the input by `mode`; computed in float64, converted to the input's dtype."""
    if output is not None or axes is not None:
        raise NotSupportedError(f"scipy.ndimage.correlate with output= or axes= is not supported on "
                                f"traced values{where()}")
    if mode not in _PAD_MODES:
        raise RuntimeError("boundary mode not supported")
    x = _nd_input(input, "scipy.ndimage.correlate")
    w = as_operand(weights)
    nd = _ndim(x)
    if _ndim(w) != nd:
        raise RuntimeError("filter weights array has incorrect shape.")
    origins = _per_axis(origin, nd, "origin")
    widths = []
    for k, o in zip(shape_of(w), origins):
        before = k // 2 + int(o)
        if not 0 <= before <= k - 1 + (k == 0):
            raise ValueError("invalid origin")
        widths.append((before, k - 1 - before))
    x64, w64 = cast(x, np.float64), cast(w, np.float64)
    kind = _PAD_MODES[mode]
    padded = pad(x64, widths, mode="constant", constant_values=float(cval)) if kind == "constant" \
        else pad(x64, widths, mode=kind)
    return cast(_windows_dot(padded, w64), x.dtype)


def ndimage_convolve(input, weights, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
    """scipy.ndimage.convolve: correlate with the weights reversed and the origin mirrored
    (one further for an even size, as SciPy shifts it)."""
    w = as_operand(weights)
    nd = _ndim(w)
    origins = [-int(o) - (1 - k % 2) for o, k in zip(_per_axis(origin, nd, "origin"), shape_of(w))]
    return ndimage_correlate(input, flip(w), output, mode, cval, origins, axes=axes)


def _along(w, axis, nd):
    shape = [1] * nd
    shape[axis] = -1
    return w.reshape(shape) if isinstance(w, Tensor) else np.reshape(w, shape)


def correlate1d(input, weights, axis=-1, output=None, mode="reflect", cval=0.0, origin=0):
    """scipy.ndimage.correlate1d: correlate along one axis."""
    x = _nd_input(input, "scipy.ndimage.correlate1d")
    nd = _ndim(x)
    axis = axis % nd
    w = as_operand(weights)
    if _ndim(w) != 1:
        raise RuntimeError("no filter weights given")
    origins = [0] * nd
    origins[axis] = int(origin)
    return ndimage_correlate(x, _along(w, axis, nd), output, mode, cval, origins)


def convolve1d(input, weights, axis=-1, output=None, mode="reflect", cval=0.0, origin=0):
    """scipy.ndimage.convolve1d: correlate1d with the weights reversed and the origin mirrored."""
    w = as_operand(weights)
    k = shape_of(w)[0]
    return correlate1d(input, flip(w), axis, output, mode, cval, -int(origin) - (1 - k % 2))


def _gaussian_kernel(sigma, order, radius):
    """SciPy's _gaussian_kernel1d: exp(-x^2 / (2 sigma^2)) normalized, differentiated `order`
    times (the polynomial factor of its derivatives), for x in [-radius, radius]."""
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    phi = np.exp(-0.5 / (sigma * sigma) * x ** 2)
    phi /= phi.sum()
    if order == 0:
        return phi
    exponent = np.arange(order + 1)
    q = np.zeros(order + 1)
    q[0] = 1
    D = np.diag(exponent[1:], 1)
    P = np.diag(np.ones(order) / -(sigma * sigma), -1)
    Q = D + P
    for _ in range(order):
        q = Q.dot(q)
    return (x[:, None] ** exponent).dot(q) * phi


def gaussian_filter1d(input, sigma, axis=-1, order=0, output=None, mode="reflect", cval=0.0,
                      truncate=4.0, *, radius=None):
    """scipy.ndimage.gaussian_filter1d: a correlation with SciPy's Gaussian kernel (radius
    int(truncate * sigma + 0.5) unless given) reversed, along one axis."""
    if isinstance(sigma, Tensor):
        raise NotSupportedError(f"scipy.ndimage.gaussian_filter with a traced sigma is not supported "
                                f"(the kernel's size depends on it){where()}")
    sd = float(sigma)
    lw = int(truncate * sd + 0.5) if radius is None else int(radius)
    if order < 0:
        raise ValueError("order must be non-negative")
    return correlate1d(input, _gaussian_kernel(sd, int(order), lw)[::-1].copy(), axis, output, mode, cval, 0)


def gaussian_filter(input, sigma, order=0, output=None, mode="reflect", cval=0.0, truncate=4.0, *,
                    radius=None, axes=None):
    """scipy.ndimage.gaussian_filter: gaussian_filter1d along each axis in turn (those with a
    positive sigma)."""
    if output is not None or axes is not None:
        raise NotSupportedError(f"scipy.ndimage.gaussian_filter with output= or axes= is not supported "
                                f"on traced values{where()}")
    x = _nd_input(input, "scipy.ndimage.gaussian_filter")
    nd = _ndim(x)
    sigmas = _per_axis(sigma, nd, "sigma")
    orders = _per_axis(order, nd, "order")
    modes = _per_axis(mode, nd, "mode") if not isinstance(mode, str) else (mode,) * nd
    radii = _per_axis(radius, nd, "radius") if radius is not None else (None,) * nd
    for axis in range(nd):
        if sigmas[axis] > 1e-15:
            x = gaussian_filter1d(x, sigmas[axis], axis, orders[axis], None, modes[axis], cval, truncate,
                                  radius=radii[axis])
    return x


def uniform_filter1d(input, size, axis=-1, output=None, mode="reflect", cval=0.0, origin=0):
    """scipy.ndimage.uniform_filter1d: the mean over `size` points along one axis (SciPy keeps a
    running sum: equal to rounding)."""
    if size < 1:
        raise RuntimeError("incorrect filter size")
    return correlate1d(input, np.full(int(size), 1.0 / int(size)), axis, output, mode, cval, origin)


def uniform_filter(input, size=3, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None):
    """scipy.ndimage.uniform_filter: uniform_filter1d along each axis in turn."""
    if output is not None or axes is not None:
        raise NotSupportedError(f"scipy.ndimage.uniform_filter with output= or axes= is not supported "
                                f"on traced values{where()}")
    x = _nd_input(input, "scipy.ndimage.uniform_filter")
    nd = _ndim(x)
    sizes, origins = _per_axis(size, nd, "size"), _per_axis(origin, nd, "origin")
    modes = _per_axis(mode, nd, "mode") if not isinstance(mode, str) else (mode,) * nd
    for axis in range(nd):
        if sizes[axis] > 1:
            x = uniform_filter1d(x, sizes[axis], axis, None, modes[axis], cval, origins[axis])
    return x


NDIMAGE_FUNCTIONS = {"correlate": ndimage_correlate, "convolve": ndimage_convolve, "correlate1d": correlate1d,
                     "convolve1d": convolve1d, "gaussian_filter": gaussian_filter,
                     "gaussian_filter1d": gaussian_filter1d, "uniform_filter": uniform_filter,
                     "uniform_filter1d": uniform_filter1d}
library_functions("scipy.signal", SIGNAL_FUNCTIONS)
library_functions("scipy.ndimage", NDIMAGE_FUNCTIONS)
