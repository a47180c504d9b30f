"""Array manipulation: NumPy functions that rearrange, repeat, split or pad arrays.

No primitives of their own: each is written with slicing (a view, as in NumPy,
wherever NumPy returns one: split, flip, rot90), broadcasts, concatenation and
gathers with index arrays NumPy itself computes from the static shape (repeat
with per-element counts, the non-constant pad modes, sliding windows), so every
gradient is the one of those primitives.
"""
import builtins
import operator

import numpy as np

from ..core import Tensor
from ..errors import NotSupportedError, where
from ..numpy_api import (as_operand, broadcast_shapes, broadcast_to, cast, full_like, lift, norm_axis,
                         result_dtype, shape_of, view_of)
from .elementwise import multiply, where_
from .index import getitem, setitem
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
                          _like(a, 0, dtype, shape, "np.empty_like"))


def _like(a, fill, dtype, shape, name):
    if shape is not None:
        raise NotSupportedError(f"{name} with shape= is not supported{where()}")
    return full_like(as_operand(a), fill, dtype)


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
        at = np.arange(n + m - 1)[:, None] + np.arange(m)[None, :]     # positions in the padded a
        out = _sum(where_(lift([windows, (at >= m - 1) & (at < n + m - 1)])[1],
                          multiply(windows, v[::-1]), 0), axis=-1)
    else:
        out = windows @ v[::-1]        # out[k] = sum_j a[k + j] v[m - 1 - j]
    if mode == "same":
        start = (m - 1) // 2
        out = out[start:start + n]
    return out


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
        idx = np.arange(n - w + 1)[:, None] + np.arange(w)[None, :]
        y = getitem(y, _along(ax, len(y.shape), idx))        # (.., n - w + 1, w, ..)
        y = moveaxis(y, ax + 1, -1)
    y = y.rebind(y.node)
    return view_of(y, x, lambda b: sliding_window_view(b, window, axis), None, contiguous=False)


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
