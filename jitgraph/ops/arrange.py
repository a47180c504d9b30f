"""Array manipulation: NumPy functions that rearrange, repeat, split or pad arrays.

No primitives of their own: each is written with slicing (a view, as in NumPy,
wherever NumPy returns one: split, flip, rot90), broadcasts, concatenation and
gathers with index arrays NumPy itself computes from the static shape (repeat
with per-element counts, the non-constant pad modes, sliding windows), so every
gradient is the one of those primitives.
"""
import builtins
import functools
import operator

import numpy as np

from ..core import Tensor, known_value
from ..errors import NotSupportedError, TracingError, where
from ..numpy_api import (as_operand, broadcast_shapes, broadcast_to, cast, full_like, lift, norm_axis,
                         result_dtype, shape_of, view_of)
from .elementwise import (absolute, add, divide, equal, greater, less, logical_and, logical_not, multiply,
                          remainder, subtract, to_bool, where_)
from .index import getitem, setitem
from .linalg import lstsq
from .order import cumsum, diff, searchsorted
from .reduce import sum as _sum
from .registry import implements
from .shape import _transposed_view, broadcast_to_, concatenate, expand_dims, moveaxis, ravel, reshape, stack


def _traced(*xs):
    return builtins.any(isinstance(x, Tensor) for x in xs)


def _ndim(x):
    return len(shape_of(x))


def _along(axis, nd, key):
    """An index applying `key` along `axis` of an nd-dimensional array."""
    return (slice(None),) * axis + (key,) + (slice(None),) * (nd - axis - 1)


@functools.lru_cache(maxsize=64)
def _window_index(n, w):
    """idx[k, j] = k + j: the positions of the windows of length w in n elements (read-only, one
    array per (n, w): a trace makes one constant of it however many windows it takes)."""
    idx = np.arange(n - w + 1)[:, None] + np.arange(w)[None, :]
    idx.flags.writeable = False
    return idx


@functools.lru_cache(maxsize=64)
def _overlap_mask(n, m):
    """Which entries of the windows of np.convolve's zero-padded a (n + m - 1 windows of m) lie
    on a itself (read-only, one array per (n, m))."""
    at = _window_index(n + 2 * (m - 1), m)
    mask = (at >= m - 1) & (at < n + m - 1)
    mask.flags.writeable = False
    return mask


def _static_int(value, what):
    if isinstance(value, Tensor):
        raise NotSupportedError(f"{what} must be known when tracing (the result's shape depends on "
                                f"it), got a traced value{where()}")
    return value


# ---- copies -------------------------------------------------------------------------------------
@implements(np.copy)
def copy(a, order="K", subok=False):
    a = as_operand(a)
    return a.rebind(a.node) if isinstance(a, Tensor) else np.copy(a)


implements(np.empty_like)(lambda a, dtype=None, order="K", subok=True, shape=None, **kw:
                          full_like(as_operand(a), 0, dtype, shape))


# ---- repeating ----------------------------------------------------------------------------------
@implements(np.repeat)
def repeat(a, repeats, axis=None):
    """np.repeat: one count for all (a broadcast) or one per element (a gather)."""
    _static_int(repeats, "np.repeat's repeats")
    if not _traced(a):
        return np.repeat(a, repeats, axis)
    a = as_operand(a)
    if axis is None:
        a, axis = ravel(a), 0
    shape = tuple(a.shape)
    axis = norm_axis(axis, len(shape))
    counts = np.asarray(repeats)
    if counts.ndim == 0 or counts.size == 1:
        r = int(counts.reshape(-1)[0])
        if r < 0:
            raise ValueError("repeats may not contain negative values.")
        stretched = broadcast_to(reshape(a, shape[:axis + 1] + (1,) + shape[axis + 1:]),
                                 shape[:axis + 1] + (r,) + shape[axis + 1:])
        return reshape(stretched, shape[:axis] + (shape[axis] * r,) + shape[axis + 1:])
    idx = np.repeat(np.arange(shape[axis]), counts)       # NumPy checks the counts
    return getitem(a, _along(axis, len(shape), idx))


@implements(np.tile)
def tile(A, reps):
    """np.tile: one broadcast of A with a new axis before each axis, then a reshape."""
    _static_int(reps, "np.tile's reps")
    if not _traced(A):
        return np.tile(A, reps)
    A = as_operand(A)
    reps = tuple(int(r) for r in np.atleast_1d(reps))
    d = builtins.max(len(A.shape), len(reps))
    shape = (1,) * (d - len(A.shape)) + tuple(A.shape)
    reps = (1,) * (d - len(reps)) + reps
    if builtins.any(r < 0 for r in reps):
        raise ValueError("negative dimensions are not allowed")
    inter = tuple(v for pair in zip((1,) * d, shape) for v in pair)
    wide = tuple(v for pair in zip(reps, shape) for v in pair)
    tiled = broadcast_to(reshape(A, inter), wide)
    return reshape(tiled, tuple(r * s for r, s in zip(reps, shape)))


# ---- splitting (views) ----------------------------------------------------------------------------
def _split(ary, indices_or_sections, axis, equal):
    ary = as_operand(ary)
    nd = _ndim(ary)
    axis = norm_axis(axis, nd)
    n = shape_of(ary)[axis]
    _static_int(indices_or_sections, "np.split's indices_or_sections")
    if isinstance(indices_or_sections, (int, np.integer)):
        sections = int(indices_or_sections)
        if sections <= 0:
            raise ValueError("number sections must be larger than 0.")
        if equal and n % sections:
            raise ValueError("array split does not result in an equal division")
        each, extra = divmod(n, sections)
        sizes = [each + 1] * extra + [each] * (sections - extra)
        bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
    else:
        bounds = [0] + [int(i) for i in indices_or_sections] + [n]
    return [getitem(ary, _along(axis, nd, slice(a, b))) for a, b in zip(bounds[:-1], bounds[1:])]


@implements(np.split, view=True)
def split(ary, indices_or_sections, axis=0):
    return _split(ary, indices_or_sections, axis, True)


@implements(np.array_split, view=True)
def array_split(ary, indices_or_sections, axis=0):
    return _split(ary, indices_or_sections, axis, False)


@implements(np.hsplit, view=True)
def hsplit(ary, indices_or_sections):
    if _ndim(ary) == 0:
        raise ValueError("hsplit only works on arrays of 1 or more dimensions")
    return _split(ary, indices_or_sections, 1 if _ndim(ary) > 1 else 0, True)


@implements(np.vsplit, view=True)
def vsplit(ary, indices_or_sections):
    if _ndim(ary) < 2:
        raise ValueError("vsplit only works on arrays of 2 or more dimensions")
    return _split(ary, indices_or_sections, 0, True)


@implements(np.dsplit, view=True)
def dsplit(ary, indices_or_sections):
    if _ndim(ary) < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return _split(ary, indices_or_sections, 2, True)


if hasattr(np, "unstack"):
    @implements(np.unstack, view=True)
    def unstack(x, /, *, axis=0):
        x = as_operand(x)
        nd = _ndim(x)
        if nd == 0:
            raise ValueError("Input array must be at least 1-d.")
        axis = norm_axis(axis, nd)
        return tuple(getitem(x, _along(axis, nd, i)) for i in range(shape_of(x)[axis]))


# ---- flipping and rotating (views) ------------------------------------------------------------------
@implements(np.flip, view=True)
def flip(m, axis=None):
    m = as_operand(m)
    nd = _ndim(m)
    axes = range(nd) if axis is None else \
        [norm_axis(a, nd) for a in (axis if isinstance(axis, (tuple, list)) else (axis,))]
    key = [slice(None)] * nd
    for a in axes:
        key[a] = slice(None, None, -1)
    return getitem(m, tuple(key))


@implements(np.flipud, view=True)
def flipud(m):
    if _ndim(m) < 1:
        raise ValueError("Input must be >= 1-d.")
    return flip(m, 0)


@implements(np.fliplr, view=True)
def fliplr(m):
    if _ndim(m) < 2:
        raise ValueError("Input must be >= 2-d.")
    return flip(m, 1)


@implements(np.rot90, view=True)
def rot90(m, k=1, axes=(0, 1)):
    m = as_operand(m)
    nd = _ndim(m)
    axes = tuple(axes)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    a0, a1 = norm_axis(axes[0], nd), norm_axis(axes[1], nd)
    if a0 == a1:
        raise ValueError("Axes must be different.")
    k = operator.index(k) % 4
    if k == 0:
        return getitem(m, (Ellipsis,))
    if k == 2:
        return flip(flip(m, a0), a1)
    perm = list(range(nd))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return _transposed_view(flip(m, a1), perm)
    return flip(_transposed_view(m, perm), a1)


@implements(np.rollaxis, view=True)
def rollaxis(a, axis, start=0):
    a = as_operand(a)
    n = _ndim(a)
    axis = norm_axis(axis, n)
    if not -n <= start <= n:
        raise np.exceptions.AxisError(f"start arg requires {-n} <= start < {n + 1} but {start} was passed in")
    start = start + n if start < 0 else start
    if axis < start:
        start -= 1
    if axis == start:
        return getitem(a, (Ellipsis,))
    perm = [i for i in range(n) if i != axis]
    perm.insert(start, axis)
    return _transposed_view(a, perm)


# ---- rolling ------------------------------------------------------------------------------------
@implements(np.roll)
def roll(a, shift, axis=None):
    """np.roll: two slices concatenated for a known shift; a gather for a traced one."""
    if not _traced(a, shift):
        return np.roll(a, shift, axis)
    a = as_operand(a)
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), a.shape)
    nd = _ndim(a)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    shifts = shift if isinstance(shift, (tuple, list)) else (shift,)
    if len(shifts) == 1 and len(axes) > 1:
        shifts = shifts * len(axes)
    elif len(axes) == 1 and len(shifts) > 1:
        axes = axes * len(shifts)
    if len(axes) != len(shifts):
        raise ValueError("'shift' and 'axis' should be scalars or 1D sequences of the same length")
    total = {}
    for ax, s in zip(axes, shifts):
        ax = norm_axis(ax, nd)
        total[ax] = s if ax not in total else total[ax] + s
    for ax, s in total.items():
        n = a.shape[ax]
        if n == 0:
            continue
        if isinstance(s, Tensor):
            # position i reads i - s (mod n)
            idx = np.remainder(np.arange(n) - cast(s, np.int64), n)
            a = getitem(a, _along(ax, nd, idx))
            continue
        k = int(s) % n
        if k:
            a = concatenate([getitem(a, _along(ax, nd, slice(n - k, None))),
                             getitem(a, _along(ax, nd, slice(None, n - k)))], axis=ax)
    return a


# ---- padding ------------------------------------------------------------------------------------
_INDEX_MODES = ("edge", "reflect", "symmetric", "wrap")


@implements(np.pad)
def pad(array, pad_width, mode="constant", **kwargs):
    """np.pad: constant (and "empty") pads are blocks concatenated axis by axis, as NumPy fills
    them; edge, reflect, symmetric and wrap are gathers of the positions NumPy's own padding of
    np.arange(n) names."""
    if not _traced(array, *kwargs.values()):
        return np.pad(array, pad_width, mode, **kwargs)
    if callable(mode):
        raise NotSupportedError(f"np.pad with a function as mode is not supported{where()}")
    x = as_operand(array)
    nd = _ndim(x)
    _static_int(pad_width, "np.pad's pad_width")
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64).reshape(-1, 2)
                             if np.ndim(pad_width) else np.asarray(pad_width, dtype=np.int64), (nd, 2))
    if (widths < 0).any():
        raise ValueError("index can't contain negative values")
    if mode in ("constant", "empty"):
        values = kwargs.pop("constant_values", 0) if mode == "constant" else 0
        if kwargs:
            raise ValueError(f"unsupported keyword arguments for mode '{mode}': {set(kwargs)}")
        return _pad_constant(x, widths, values)
    if mode in _INDEX_MODES:
        reflect_type = kwargs.pop("reflect_type", "even")
        if kwargs:
            raise ValueError(f"unsupported keyword arguments for mode '{mode}': {set(kwargs)}")
        if reflect_type != "even":
            raise NotSupportedError(f"np.pad with reflect_type={reflect_type!r} is not supported{where()}")
        for ax in range(nd):
            before, after = (int(v) for v in widths[ax])
            if before or after:
                idx = np.pad(np.arange(x.shape[ax]), (before, after), mode)
                x = getitem(x, _along(ax, nd, idx))
        return x
    raise NotSupportedError(f"np.pad with mode={mode!r} is not supported (constant, empty, edge, "
                            f"reflect, symmetric and wrap are){where()}")


def _pad_constant(x, widths, values):
    nd = _ndim(x)
    per_axis = values if isinstance(values, Tensor) and _ndim(values) == 0 else None
    if per_axis is None:
        if isinstance(values, Tensor) or (isinstance(values, (list, tuple)) and
                                          builtins.any(isinstance(v, Tensor) for v in np.ravel(
                                              np.asarray(values, dtype=object)))):
            table = None
        else:
            table = np.broadcast_to(np.asarray(values).reshape(-1, 2) if np.ndim(values)
                                    else np.asarray(values), (nd, 2))
    if per_axis is None and table is None:
        raise NotSupportedError(f"np.pad with traced per-axis constant_values is not supported; pass "
                                f"one value{where()}")
    for ax in range(nd):
        before, after = (int(v) for v in widths[ax])
        parts = []
        for size, side in ((before, 0), (after, 1)):
            if size:
                shape = list(x.shape)
                shape[ax] = size
                value = per_axis if per_axis is not None else table[ax, side]
                parts.append((side, broadcast_to(cast(as_operand(value), x.dtype)
                                                 if isinstance(value, Tensor)
                                                 else np.asarray(value).astype(x.dtype), tuple(shape))))
        if parts:
            blocks = [p for s, p in parts if s == 0] + [x] + [p for s, p in parts if s == 1]
            x = concatenate(blocks, axis=ax)
    return x


# ---- windows, grids, ranges ---------------------------------------------------------------------
@implements(np.convolve)
def convolve(a, v, mode="full"):
    """np.convolve of two 1-d arrays: each window of the longer one (zero-padded but for the
    "valid" mode) against the shorter one reversed, summed, sliced to the mode's part."""
    if not _traced(a, v):
        return np.convolve(a, v, mode)
    if mode not in ("full", "same", "valid", 0, 1, 2):
        raise ValueError(f"mode must be one of 'valid', 'same', or 'full' (got {mode!r})")
    mode = {0: "valid", 1: "same", 2: "full"}.get(mode, mode)
    a, v = as_operand(a), as_operand(v)
    a = reshape(a, (1,)) if _ndim(a) == 0 else a
    v = reshape(v, (1,)) if _ndim(v) == 0 else v
    if _ndim(a) > 1 or _ndim(v) > 1:
        raise ValueError("object too deep for desired array")
    if not shape_of(a)[0]:
        raise ValueError("a cannot be empty")
    if not shape_of(v)[0]:
        raise ValueError("v cannot be empty")
    if shape_of(v)[0] > shape_of(a)[0]:
        a, v = v, a
    n, m = shape_of(a)[0], shape_of(v)[0]
    windows = sliding_window_view(a if mode == "valid" else pad(a, (m - 1, m - 1)), m)
    if mode != "valid" and np.result_type(a.dtype, v.dtype).kind in "fc":
        # the padding's zeros are left out of the sums, not multiplied: an infinite v times
        # a padded zero would be NaN where NumPy sums only the overlapping products
        out = _sum(where_(lift([windows, _overlap_mask(n, m)])[1],
                          multiply(windows, v[::-1]), 0), axis=-1)
    else:
        out = windows @ v[::-1]        # out[k] = sum_j a[k + j] v[m - 1 - j]
    if mode == "same":
        start = (m - 1) // 2
        out = out[start:start + n]
    return out


@implements(np.correlate)
def correlate(a, v, mode="valid"):
    """np.correlate of two real 1-d arrays: c[k] = sum_n a[n + k] v[n], as the convolution with v
    reversed (NumPy's: with the arrays swapped and the result reversed where v is longer)."""
    if not _traced(a, v):
        return np.correlate(a, v, mode)
    a, v = as_operand(a), as_operand(v)
    a = reshape(a, (1,)) if _ndim(a) == 0 else a
    v = reshape(v, (1,)) if _ndim(v) == 0 else v
    if _ndim(a) == 1 and _ndim(v) == 1 and shape_of(v)[0] > shape_of(a)[0]:
        return convolve(v, a[::-1], mode)[::-1]
    return convolve(a, v[::-1] if _ndim(v) == 1 else v, mode)


@implements(np.polyval)
def polyval(p, x):
    """np.polyval by NumPy's Horner loop: y = y * x + p[i] from zeros of x's dtype, so the value
    and its rounding are NumPy's."""
    if not _traced(p, x):
        return np.polyval(p, x)
    p = as_operand(p)
    x = as_operand(x)
    if _ndim(p) != 1:
        p = reshape(p, (-1,)) if _ndim(p) == 0 else p
    y = full_like(x, 0)
    for i in range(shape_of(p)[0]):
        y = add(multiply(y, x), p[i])
    return y


def _poly1d(p, name):
    p = as_operand(p)
    if _ndim(p) == 0:
        p = reshape(p, (1,))
    if _ndim(p) != 1:
        raise NotSupportedError(f"{name} of a {_ndim(p)}-d array of coefficients is not supported{where()}")
    return p


def _aligned(a1, a2, name):
    """a1 and a2 (coefficients, highest power first) with the shorter one padded with leading zeros."""
    a1, a2 = _poly1d(a1, name), _poly1d(a2, name)
    d = shape_of(a2)[0] - shape_of(a1)[0]
    if d > 0:
        a1 = concatenate([np.zeros(d, a1.dtype), a1])
    elif d < 0:
        a2 = concatenate([np.zeros(-d, a2.dtype), a2])
    return a1, a2


@implements(np.polyadd)
def polyadd(a1, a2):
    """np.polyadd of coefficient arrays (highest power first)."""
    a1, a2 = _aligned(a1, a2, "np.polyadd")
    return add(a1, a2)


@implements(np.polysub)
def polysub(a1, a2):
    """np.polysub of coefficient arrays (highest power first)."""
    a1, a2 = _aligned(a1, a2, "np.polysub")
    return subtract(a1, a2)


def _trimmed(p, name):
    """p without its leading zeros (np.poly1d's coefficients; [0] for none), where its values
    are known; traced coefficients are taken as they are (their leading one nonzero)."""
    p = _poly1d(p, name)
    if not shape_of(p)[0]:
        return as_operand(np.zeros(1, np.result_type(p.dtype, np.float64)))
    known = known_value(p)
    if known is None:
        return p
    nz = np.flatnonzero(known)
    if nz.size == 0:
        return cast(as_operand(np.zeros(1)), np.result_type(p.dtype, np.float64) if p.dtype == bool else p.dtype)
    return getitem(p, (slice(int(nz[0]), None),)) if nz[0] else p


@implements(np.polymul)
def polymul(a1, a2):
    """np.polymul: the convolution of the coefficient arrays, leading zeros dropped first (as
    np.poly1d drops them; of traced coefficients, the leading one is taken as nonzero)."""
    return convolve(_trimmed(a1, "np.polymul"), _trimmed(a2, "np.polymul"))


@implements(np.polyder)
def polyder(p, m=1):
    """np.polyder: the m-th derivative's coefficients (a constant's derivative is empty, as NumPy's)."""
    m = int(m)
    if m < 0:
        raise ValueError("Order of derivative must be positive (see polyint)")
    p = as_operand(p)
    for _ in range(m):
        n = shape_of(p)[0] - 1
        p = multiply(getitem(p, (slice(None, -1),)), np.arange(n, 0, -1))
    return p


@implements(np.polyint)
def polyint(p, m=1, k=None):
    """np.polyint: the m-th antiderivative's coefficients, with integration constants k."""
    m = int(m)
    if m < 0:
        raise ValueError("Order of integral must be positive (see polyder)")
    k = np.zeros(m, float) if k is None else k
    k = reshape(as_operand(k), (-1,)) if _ndim(k) == 0 else as_operand(k)
    if shape_of(k)[0] == 1 and m > 1:
        k = broadcast_to(cast(k, np.float64), (m,))
    if shape_of(k)[0] < m:
        raise ValueError("k must be a scalar or a rank-1 array of length 1 or >m.")
    p = as_operand(p)
    for i in range(m):
        y = divide(p, np.arange(shape_of(p)[0], 0, -1))
        p = concatenate([y, reshape(cast(getitem(k, (i,)), y.dtype), (1,))])
    return p


@implements(np.poly)
def poly(seq_of_zeros):
    """np.poly of a 1-d sequence of (real) roots: the monic polynomial's coefficients, a product
    of the factors (x - r) by convolution; differentiable in the roots."""
    z = as_operand(seq_of_zeros)
    z = reshape(z, (1,)) if _ndim(z) == 0 else z
    if _ndim(z) == 2 and shape_of(z)[0] == shape_of(z)[1] and shape_of(z)[0]:
        raise NotSupportedError(f"np.poly of a matrix needs its eigenvalues, complex in general, which "
                                f"are not supported{where()}")
    if _ndim(z) != 1:
        raise ValueError("input must be 1d or non-empty square 2d array.")
    z = cast(z, np.float32 if z.dtype == np.float32 else np.float64)
    n = shape_of(z)[0]
    if n == 0:
        return 1.0
    a = np.ones(1, z.dtype)
    for i in range(n):
        a = convolve(a, stack([np.ones((), z.dtype), -getitem(z, (i,))]))
    return a


@implements(np.polydiv)
def polydiv(u, v):
    """np.polydiv: (quotient, remainder) by NumPy's long division, whose remainder drops leading
    coefficients close to zero: that length is decided on the values, so of traced
    coefficients the call is refused (eagerly it is NumPy's)."""
    u = add(_poly1d(u, "np.polydiv"), 0.0)
    v = add(_poly1d(v, "np.polydiv"), 0.0)
    dt = np.result_type(u.dtype, v.dtype)
    u, v = cast(u, dt), cast(v, dt)
    m, n = shape_of(u)[0] - 1, shape_of(v)[0] - 1
    scale = divide(1.0, getitem(v, (0,)))
    r = [getitem(u, (i,)) for i in range(m + 1)]
    q = []
    for k in range(m - n + 1):
        d = multiply(scale, r[k])
        q.append(d)
        for j in range(n + 1):
            r[k + j] = subtract(r[k + j], multiply(d, getitem(v, (j,))))
    quotient = stack(q) if q else np.zeros(1, dt)
    while len(r) > 1:
        try:
            small = bool(np.allclose(r[0], 0, rtol=1e-14))
        except TracingError:
            raise NotSupportedError(f"np.polydiv of traced coefficients: the remainder's length "
                                    f"depends on their values{where()}") from None
        if not small:
            break
        r = r[1:]
    return quotient, stack(r)


@implements(np.polyfit)
def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """np.polyfit by NumPy's computation: least squares on the Vandermonde matrix with columns
    scaled to unit norm, coefficients highest power first (one column per fit for 2-D y);
    `full` adds (residuals, rank, singular values, rcond). cov is not supported traced."""
    if not _traced(x, y, w):
        return np.polyfit(x, y, deg, rcond=rcond, full=full, w=w, cov=cov)
    if cov:
        raise NotSupportedError(f"np.polyfit(..., cov=True) is not supported on traced values{where()}")
    order = int(_static_int(deg, "np.polyfit's deg")) + 1
    x, y = as_operand(x), as_operand(y)
    x = x.astype(np.promote_types(x.dtype, np.float64)) if x.dtype.kind != "f" or x.dtype.itemsize < 8 else x
    y = y.astype(np.promote_types(y.dtype, np.float64)) if y.dtype.kind != "f" or y.dtype.itemsize < 8 else y
    if order < 1:
        raise ValueError("expected deg >= 0")
    if _ndim(x) != 1:
        raise TypeError("expected 1D vector for x")
    if shape_of(x)[0] == 0:
        raise TypeError("expected non-empty vector for x")
    if _ndim(y) < 1 or _ndim(y) > 2:
        raise TypeError("expected 1D or 2D array for y")
    if shape_of(x)[0] != shape_of(y)[0]:
        raise TypeError("expected x and y to have same length")
    if rcond is None:
        rcond = shape_of(x)[0] * np.finfo(np.float64).eps
    lhs = vander(x, order)
    rhs = y
    if w is not None:
        w = as_operand(w)
        w = cast(w, np.float64)
        lhs = multiply(lhs, reshape(w, (-1, 1)))
        rhs = multiply(rhs, reshape(w, (-1, 1)) if _ndim(y) == 2 else w)
    scale = (lhs * lhs).sum(axis=0) ** 0.5
    lhs = divide(lhs, scale)
    c, resids, rank, s = lstsq(lhs, rhs, rcond)
    c = divide(c, reshape(scale, (-1, 1)) if _ndim(c) == 2 else scale)
    if full:
        return c, resids, rank, s, rcond
    return c


def trapezoid_terms(y, x, dx, axis):
    """d * (y[1:] + y[:-1]) / 2 along `axis` (normalized) of y: the trapezoids, d the spacing (dx,
    or the differences of x, 1-d along the axis or shaped like y), in NumPy's order of operations."""
    y = as_operand(y)
    nd = _ndim(y)
    if x is None:
        d = dx
    else:
        x = as_operand(x)
        if _ndim(x) == 1:
            d = diff(x)
            shape = [1] * nd
            shape[axis] = shape_of(d)[0]
            d = reshape(d, shape)
        else:
            d = diff(x, axis=axis)
    pair = add(getitem(y, _along(axis, nd, slice(1, None))), getitem(y, _along(axis, nd, slice(None, -1))))
    return divide(multiply(d, pair), 2.0)


if hasattr(np, "trapezoid"):
    @implements(np.trapezoid)
    def trapezoid(y, x=None, dx=1.0, axis=-1):
        """np.trapezoid: the sum of the trapezoids (`trapezoid_terms`) along `axis`."""
        if not _traced(y, x, dx):
            return np.trapezoid(y, x=x, dx=dx, axis=axis)
        axis = norm_axis(axis, _ndim(y))
        return _sum(trapezoid_terms(y, x, dx, axis), axis=axis)


def _block_depth(arrays, at="arrays"):
    if type(arrays) is tuple:
        raise TypeError(f"{at} is a tuple. Only lists can be used to arrange blocks, and np.block does "
                        f"not allow implicit conversion from tuple to ndarray.")
    if type(arrays) is not list:
        return 0
    if not arrays:
        raise ValueError(f"List at {at} cannot be empty")
    depths = {_block_depth(e, f"{at}[{i}]") for i, e in enumerate(arrays)}
    if len(depths) != 1:
        raise ValueError(f"List depths are mismatched at {at}")
    return 1 + depths.pop()


def _block_leaves(arrays):
    if type(arrays) is list:
        for e in arrays:
            yield from _block_leaves(e)
    else:
        yield arrays


@implements(np.block)
def block(arrays):
    """np.block: nested lists of arrays joined along the last axis (innermost lists), the one
    before it (the next level), and so on; every block is first given the result's rank with
    leading ones."""
    leaves = list(_block_leaves(arrays))
    if not _traced(*leaves):
        return np.block(arrays)
    depth = _block_depth(arrays)
    nd = builtins.max([depth] + [_ndim(as_operand(e)) for e in leaves])

    def assemble(x, level):
        if type(x) is list:
            return concatenate([assemble(e, level - 1) for e in x], axis=-level)
        x = as_operand(x)
        return reshape(x, (1,) * (nd - _ndim(x)) + tuple(shape_of(x)))
    return assemble(arrays, depth)


@implements(np.piecewise)
def piecewise(x, condlist, funclist, *args, **kw):
    """np.piecewise: funclist[i] (a function of x, or a value) where condlist[i] holds, the later
    condition winning, zero elsewhere (an extra function is the value where none holds).

    Conditions known when tracing select x's elements as NumPy does (each function sees only its
    elements). Traced conditions evaluate each function on all of x and pick by np.where: the
    values are NumPy's for elementwise functions, and a function whose derivative is infinite or
    NaN where its condition does not hold (sqrt of a negative) gives NaN gradients there."""
    conds = list(condlist) if isinstance(condlist, (list, tuple)) else [condlist]
    if not _traced(x, *conds):
        return np.piecewise(x, condlist, funclist, *args, **kw)
    x = as_operand(x)
    if not isinstance(condlist, (list, tuple)) or (
            _ndim(x) != 0 and not isinstance(conds[0], (list, np.ndarray, Tensor))):
        conds = [condlist]
    conds = [to_bool(as_operand(c)) for c in conds]
    n, n2 = len(conds), len(funclist)
    if n == n2 - 1:
        none = conds[0]
        for c in conds[1:]:
            none = none | c
        conds.append(logical_not(none))
    elif n != n2:
        raise ValueError(f"with {n} condition(s), either {n} or {n + 1} functions are expected")
    y = full_like(x, 0)
    for cond, func in zip(conds, funclist):
        cond = broadcast_to(cond, shape_of(x))
        if isinstance(cond, np.ndarray) and callable(func):
            # known: the function sees only its elements, as in NumPy; their results are
            # spread back to the selected positions by one gather
            k = int(cond.sum())
            if k:
                vals = broadcast_to(cast(as_operand(func(getitem(x, cond), *args, **kw)), y.dtype), (k,))
                spread = np.maximum(np.cumsum(cond.reshape(-1)) - 1, 0).reshape(cond.shape)
                y = where_(cond, getitem(vals, (spread,)), y)
            continue
        value = func(x, *args, **kw) if callable(func) else func
        y = where_(cond, cast(as_operand(value), y.dtype) if isinstance(value, Tensor) else
                   np.asarray(value).astype(y.dtype), y)
    return y


@implements(np.apply_along_axis)
def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """np.apply_along_axis: func1d on every 1-d slice along `axis` (one call per slice, while
    tracing), its results stacked with their axes in place of `axis`."""
    if not _traced(arr, *args, *kwargs.values()):
        return np.apply_along_axis(func1d, axis, arr, *args, **kwargs)
    arr = as_operand(arr)
    nd = _ndim(arr)
    axis = norm_axis(axis, nd)
    moved = moveaxis(arr, axis, -1)
    batch = tuple(shape_of(moved))[:-1]
    if not batch:
        return as_operand(func1d(moved, *args, **kwargs))
    if int(np.prod(batch)) == 0:
        raise ValueError("Cannot apply_along_axis when any iteration dimensions are 0")
    outs = [as_operand(func1d(moved[ind], *args, **kwargs)) for ind in np.ndindex(*batch)]
    res_shape = tuple(shape_of(outs[0]))
    r = reshape(stack(outs), batch + res_shape)
    k = len(res_shape)
    perm = tuple(range(axis)) + tuple(range(len(batch), len(batch) + k)) + tuple(range(axis, len(batch)))
    return r if perm == tuple(range(len(perm))) else r.transpose(perm)


def _indices_from(name, make):
    @implements(getattr(np, name))
    def f(arr, *a, **kw):
        return make(tuple(shape_of(as_operand(arr))), *a, **kw)
    f.__name__ = f.__qualname__ = name
    return f


def _tri_from(tri):
    def make(shape, k=0):
        if len(shape) != 2:
            raise ValueError("input array must be 2-d")
        return tri(shape[-2], k=k, m=shape[-1])
    return make


def _diag_from(shape):
    if len(shape) < 2:
        raise ValueError("input array must be at least 2-d")
    if len(set(shape)) != 1:
        raise ValueError("All dimensions of input must be of equal length")
    return np.diag_indices(shape[0], len(shape))


_indices_from("tril_indices_from", _tri_from(np.tril_indices))
_indices_from("triu_indices_from", _tri_from(np.triu_indices))
_indices_from("diag_indices_from", _diag_from)


if hasattr(np, "astype"):
    @implements(np.astype)
    def astype(x, dtype, /, *, copy=True, device=None):
        """np.astype (NumPy 2.1): x converted to dtype."""
        return as_operand(x).astype(dtype)


def _known_mask(condition, name):
    if isinstance(condition, Tensor):
        raise NotSupportedError(f"{name} with a traced condition is not supported (the result's "
                                f"size would depend on the data); use np.where{where()}")
    return np.asarray(condition).astype(bool)


@implements(np.compress)
def compress(condition, a, axis=None, out=None):
    """np.compress with a condition known when tracing: the slices along `axis` (of the
    flattened array for None) where it holds."""
    if not _traced(condition, a):
        return np.compress(condition, a, axis, out)
    if out is not None:
        raise NotSupportedError(f"np.compress with out= is not supported{where()}")
    cond = _known_mask(condition, "np.compress").reshape(-1)
    a = as_operand(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = norm_axis(axis, _ndim(a))
    n = shape_of(a)[axis]
    if len(cond) > n:
        raise IndexError(f"index {len(cond) - 1} is out of bounds for axis {axis} with size {n}")
    return getitem(a, _along(axis, _ndim(a), np.nonzero(cond)[0]))


@implements(np.extract)
def extract(condition, arr):
    """np.extract with a condition known when tracing: arr's elements where it holds, flattened."""
    if not _traced(condition, arr):
        return np.extract(condition, arr)
    cond = _known_mask(condition, "np.extract").reshape(-1)
    return getitem(ravel(as_operand(arr)), np.nonzero(cond)[0])


@implements(np.choose)
def choose(a, choices, out=None, mode="raise"):
    """np.choose: choices[a] elementwise (a, the choices broadcast together), for integer a known
    when tracing or traced (then out-of-range entries pick nothing: mode 'clip' or 'wrap' tells
    which choice they mean, as in NumPy; 'raise' needs them known)."""
    choices = list(choices)
    if not _traced(a, *choices):
        return np.choose(a, choices, out=out, mode=mode)
    if out is not None:
        raise NotSupportedError(f"np.choose with out= is not supported{where()}")
    n = len(choices)
    a = as_operand(a)
    if mode == "clip":
        a = np.clip(a, 0, n - 1) if not isinstance(a, Tensor) else a.clip(0, n - 1)
    elif mode == "wrap":
        a = a % n
    elif not isinstance(a, Tensor) and (np.any(a < 0) or np.any(a >= n)):
        raise ValueError("invalid entry in choice array")
    elif isinstance(a, Tensor):
        raise NotSupportedError(f"np.choose with a traced index array needs mode='clip' or "
                                f"mode='wrap' (mode='raise' would check its values){where()}")
    vals = [c if isinstance(c, (int, float)) else as_operand(c) for c in choices]
    dt = result_dtype(*vals)
    r = cast(as_operand(vals[-1]), dt)
    for k in range(n - 2, -1, -1):
        r = where_(a == k, cast(as_operand(vals[k]), dt), r)
    shape = broadcast_shapes(shape_of(a), *[shape_of(as_operand(c)) for c in vals])
    return broadcast_to(as_operand(r), shape)


@implements(np.digitize)
def digitize(x, bins, right=False):
    """np.digitize: the index of the bin each x falls in, for monotonic bins known when tracing
    or traced (increasing assumed for traced bins), by searchsorted as NumPy computes it."""
    if not _traced(x, bins):
        return np.digitize(x, bins, right)
    if not isinstance(bins, Tensor):
        b = np.asarray(bins)
        if b.ndim != 1:
            raise ValueError("object too deep for desired array")
        delta = np.diff(b)
        if not (np.all(delta >= 0) or np.all(delta <= 0)):
            raise ValueError("bins must be monotonically increasing or decreasing")
        if len(b) > 1 and b[0] > b[-1]:
            side = "left" if right else "right"
            return len(b) - searchsorted(b[::-1].copy(), x, side=side)
    return searchsorted(bins, x, side="left" if right else "right")


@implements(np.ediff1d)
def ediff1d(ary, to_end=None, to_begin=None):
    """np.ediff1d: the differences of the flattened array, with to_begin and to_end around them."""
    if not _traced(ary, to_end, to_begin):
        return np.ediff1d(ary, to_end, to_begin)
    flat = ravel(as_operand(ary))
    parts = [diff(flat)]
    if to_begin is not None:
        parts.insert(0, cast(ravel(as_operand(to_begin)), flat.dtype))
    if to_end is not None:
        parts.append(cast(ravel(as_operand(to_end)), flat.dtype))
    return concatenate(parts, axis=0) if len(parts) > 1 else parts[0]


@implements(np.vander)
def vander(x, N=None, increasing=False):
    """np.vander: the columns x**(N-1), ..., x, 1 (or increasing), each an integer power."""
    if not _traced(x):
        return np.vander(x, N, increasing)
    x = as_operand(x)
    if _ndim(x) != 1:
        raise ValueError("x must be a one-dimensional array or sequence.")
    x = cast(x, np.promote_types(x.dtype, int))        # NumPy's result dtype (float32 -> float64)
    n = shape_of(x)[0] if N is None else int(_static_int(N, "np.vander's N"))
    if n < 0:
        raise ValueError("negative dimensions are not allowed")
    cols = [full_like(x, 1)] + [x ** k for k in range(1, n)]
    cols = cols[:n] if increasing else cols[:n][::-1]
    if not cols:
        return reshape(x, (-1, 1))[:, :0]
    return stack(cols, axis=1)


@implements(np.lib.stride_tricks.sliding_window_view, view=True)
def sliding_window_view(x, window_shape, axis=None, *, subok=False, writeable=False):
    """Every window of x (a read-only view in NumPy): a gather per windowed axis, the window
    axes appended at the end."""
    if not _traced(x):
        return np.lib.stride_tricks.sliding_window_view(x, window_shape, axis, subok=subok,
                                                        writeable=writeable)
    if writeable:
        raise NotSupportedError(f"sliding_window_view(writeable=True) is not supported{where()}")
    x = as_operand(x)
    window = tuple(int(w) for w in np.atleast_1d(window_shape))
    nd = _ndim(x)
    axes = tuple(range(nd)) if axis is None else \
        tuple(norm_axis(a, nd) for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))
    if len(window) != len(axes):
        raise ValueError("Since axis is `None`, must provide window_shape for all dimensions of `x`; "
                         f"got {len(window)} window_shape elements and `x.ndim` is {nd}."
                         if axis is None else
                         f"Must provide matching length window_shape and axis; got {len(window)} "
                         f"window_shape elements and {len(axes)} axes elements.")
    if builtins.any(w < 0 for w in window):
        raise ValueError("`window_shape` cannot contain negative values")
    y = x
    for ax, w in zip(axes, window):
        n = y.shape[ax]
        if n < w:
            raise ValueError("window shape cannot be larger than input array shape")
        y = getitem(y, _along(ax, len(y.shape), _window_index(n, w)))        # (.., n - w + 1, w, ..)
        y = moveaxis(y, ax + 1, -1)
    y = y.rebind(y.node)
    return view_of(y, x, lambda b: sliding_window_view(b, window, axis), None, contiguous=False)


def as_strided(x, shape=None, strides=None, subok=False, writeable=True):
    """np.lib.stride_tricks.as_strided of a traced x: element (i_0, .., i_k) reads x's element at
    byte offset sum(i_j * strides[j]) of a C-ordered array of its values (a traced value's
    `strides` are those of its C-ordered array, so strides derived from them, as im2col code
    derives them, read what NumPy reads). One gather of the flattened values at positions
    known when tracing; a position outside the array (memory NumPy would read past its end)
    raises. A read-only view: writing into it is not supported."""
    x = as_operand(x)
    itemsize = x.dtype.itemsize
    shape = tuple(x.shape) if shape is None else tuple(int(_static_int(n, "as_strided's shape")) for n in shape)
    strides = x.strides if strides is None else \
        tuple(int(_static_int(s, "as_strided's strides")) for s in strides)
    if len(strides) != len(shape):
        raise ValueError("mismatch in length of strides and shape")
    if builtins.any(s % itemsize for s in strides):
        raise NotSupportedError(f"as_strided with strides {strides} that are not multiples of the "
                                f"item size ({itemsize} bytes) of a traced value{where()}")
    steps = [s // itemsize for s in strides]
    if builtins.any(n < 0 for n in shape):
        raise ValueError("negative dimensions are not allowed")
    pos = np.zeros(shape, np.int64)
    for k, (n, step) in enumerate(zip(shape, steps)):
        pos += (np.arange(n, dtype=np.int64) * step).reshape((n,) + (1,) * (len(shape) - k - 1))
    size = int(np.prod(x.shape, dtype=np.int64))
    if pos.size and (pos.min() < 0 or pos.max() >= size):
        raise NotSupportedError(f"as_strided reads outside its array: element offsets {int(pos.min())} to "
                                f"{int(pos.max())} of an array of {size} elements (NumPy would read "
                                f"memory past the array){where()}")
    y = getitem(ravel(x), pos)
    y = y.rebind(y.node)
    return view_of(y, x, lambda b: as_strided(b, shape, strides), None, contiguous=False)


@implements(np.meshgrid)
def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    if not _traced(*xi):
        return np.meshgrid(*xi, copy=copy, sparse=sparse, indexing=indexing)
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    nd = len(xi)
    out = []
    for i, x in enumerate(xi):
        shape = [1] * nd
        shape[i] = -1
        out.append(reshape(ravel(as_operand(x)), shape))
    if indexing == "xy" and nd > 1:
        out[0] = reshape(out[0], (1, -1) + (1,) * (nd - 2))
        out[1] = reshape(out[1], (-1, 1) + (1,) * (nd - 2))
    if not sparse:
        shape = broadcast_shapes(*[shape_of(o) for o in out])
        out = [broadcast_to(o, shape) for o in out]
    return tuple(out)


@implements(np.broadcast_arrays, view=True)
def broadcast_arrays(*args, subok=False):
    args = [as_operand(a) for a in args]
    shape = broadcast_shapes(*[shape_of(a) for a in args])
    return tuple(broadcast_to_(a, shape) for a in args)


@implements(np.linspace)
def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
    """np.linspace with traced endpoints, computed as NumPy does (start + i * step, the last
    point set to stop)."""
    _static_int(num, "np.linspace's num")
    if not _traced(start, stop):
        return np.linspace(start, stop, num, endpoint, retstep, dtype, axis)
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    div = num - 1 if endpoint else num
    dt = result_dtype(start, stop, float(num))        # (Python scalars are weak, as in NumPy)
    start, stop = as_operand(start), as_operand(stop)
    start, stop = cast(start, dt), cast(stop, dt)
    delta = stop - start
    extra = (1,) * _ndim(delta)
    y = np.arange(num, dtype=dt).reshape((-1,) + extra)
    if div > 0:
        step = delta / div
        y = y * step
    else:
        step = full_like(delta, np.nan)
        y = y * delta
    y = y + start
    if endpoint and num > 1:
        setitem(y, (-1, Ellipsis), stop)
    if axis != 0:
        y = moveaxis(y, 0, axis)
    if dtype is not None:
        y = cast(y, dtype)
    return (y, step) if retstep else y


@implements(np.logspace)
def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    if not _traced(start, stop, base):
        return np.logspace(start, stop, num, endpoint, base, dtype, axis)
    y = linspace(start, stop, num=num, endpoint=endpoint, axis=axis)
    if _ndim(base):
        base = expand_dims(as_operand(base), axis)
    y = np.power(base, y)
    return y if dtype is None else cast(y, dtype)


# ---- stacking -------------------------------------------------------------------------------------
@implements(np.atleast_3d, view=True)
def atleast_3d(x):
    s = tuple(shape_of(x))
    if len(s) == 0:
        return reshape(x, (1, 1, 1))
    if len(s) == 1:
        return reshape(x, (1,) + s + (1,))
    if len(s) == 2:
        return reshape(x, s + (1,))
    return as_operand(x)


@implements(np.dstack)
def dstack(tup, **kw):
    return concatenate([atleast_3d(a) for a in tup], axis=2, **kw)


@implements(np.column_stack)
def column_stack(tup):
    cols = []
    for a in tup:
        a = as_operand(a)
        cols.append(reshape(a, (-1, 1)) if _ndim(a) < 2 else a)
    return concatenate(cols, axis=1)


@implements(np.append)
def append(arr, values, axis=None):
    if axis is None:
        return concatenate([ravel(arr), ravel(values)], axis=0)
    return concatenate([arr, values], axis=axis)


@implements(np.delete)
def delete(arr, obj, axis=None):
    """np.delete of positions known when tracing: a gather of the kept ones."""
    _static_int(obj, "np.delete's positions")
    if not _traced(arr):
        return np.delete(arr, obj, axis)
    arr = as_operand(arr)
    if axis is None:
        arr, axis = ravel(arr), 0
    nd = _ndim(arr)
    axis = norm_axis(axis, nd)
    keep = np.delete(np.arange(arr.shape[axis]), obj)         # NumPy checks the positions
    return getitem(arr, _along(axis, nd, keep))


@implements(np.resize)
def resize(a, new_shape):
    """np.resize: a's elements repeated (in order) to fill new_shape."""
    if not _traced(a):
        return np.resize(a, new_shape)
    a = ravel(as_operand(a))
    shape = (int(new_shape),) if isinstance(new_shape, (int, np.integer)) else tuple(int(s) for s in new_shape)
    total = int(np.prod(shape, dtype=np.int64))
    if builtins.any(s < 0 for s in shape):
        raise ValueError("all elements of `new_shape` must be non-negative")
    if total == 0 or a.shape[0] == 0:        # NumPy: zeros
        return broadcast_to(lift([a, np.zeros((), a.dtype)])[1], shape)
    return reshape(getitem(a, np.arange(total) % a.shape[0]), shape)


@implements(np.insert)
def insert(arr, obj, values, axis=None):
    """np.insert at positions known when tracing: one gather from arr's elements followed by the
    values (cast to arr's dtype, broadcast as NumPy does), by the position map np.insert itself
    gives for the element numbers."""
    _static_int(obj, "np.insert's positions")
    if not _traced(arr, values):
        return np.insert(arr, obj, values, axis)
    arr = as_operand(arr)
    values = cast(as_operand(values), arr.dtype)
    n, k = int(np.prod(shape_of(arr), dtype=np.int64)), int(np.prod(shape_of(values), dtype=np.int64))
    numbers = np.arange(n, dtype=np.intp).reshape(shape_of(arr))
    positions = np.insert(numbers, obj, n + np.arange(k, dtype=np.intp).reshape(shape_of(values)), axis)
    return getitem(concatenate([ravel(arr), ravel(values)]), positions)


@implements(np.unwrap)
def unwrap(p, discont=None, axis=-1, *, period=2 * np.pi):
    """np.unwrap: p with multiples of `period` added where consecutive samples jump by more than
    max(discont, period / 2), as NumPy computes it. The corrections are piecewise constant,
    so the gradient passes through unchanged."""
    if _traced(discont, period):
        raise NotSupportedError(f"np.unwrap with a traced discont or period is not supported{where()}")
    if not _traced(p):
        return np.unwrap(p, discont, axis, period=period)
    p = as_operand(p)
    if p.dtype.kind != "f":
        raise NotSupportedError(f"np.unwrap of {p.dtype.name} arrays is not supported on traced values; "
                                f"cast them to a float dtype{where()}")
    nd = _ndim(p)
    axis = norm_axis(axis, nd)
    discont = period / 2 if discont is None else max(discont, period / 2)
    dd = diff(p, axis=axis)
    half = period / 2
    ddmod = remainder(dd + half, period) - half
    # NumPy maps a jump of exactly +half to +half, not -half
    ddmod = where_(logical_and(equal(ddmod, -half), greater(dd, 0)), half, ddmod)
    correct = where_(less(absolute(dd), discont), 0.0, ddmod - dd)
    head = getitem(p, _along(axis, nd, slice(0, 1)))
    return concatenate([head, getitem(p, _along(axis, nd, slice(1, None))) + cumsum(correct, axis=axis)],
                       axis=axis)
