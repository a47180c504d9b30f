"""Membership, sets, histograms and multi-indices: NumPy functions built on the sort, search and
scatter primitives.

Two kinds of function live here.

* Fixed-shape ones trace like any other: `np.isin` (a binary search in the sorted test values),
  `np.lexsort` (stable sorts chained from the last key to the first), `np.histogram`,
  `np.histogram2d` and `np.histogramdd` with a bin count or given edges (the counts a
  `scatter_add` by bin; the gradient reaches the weights), `np.unravel_index` and
  `np.ravel_multi_index` (index arithmetic, with NumPy's range errors checked when the
  function runs).
* Functions whose result size depends on the values (`np.unique` and its `unique_*` forms,
  `np.intersect1d`, `np.union1d`, `np.setdiff1d`, `np.setxor1d`, `np.argwhere`,
  `np.flatnonzero`, `np.trim_zeros`) run on values known when they are called: eagerly
  (`jg.value_and_grad`), or on constants while tracing. Their positions are computed by NumPy
  and their values are read from the argument at those positions, so eager gradients reach
  it (for `np.unique`, each distinct value's first occurrence). Of a traced value they are
  refused, saying what to write instead.
"""
import builtins
import operator

import numpy as np

from ..core import Tensor, bind, known_value
from ..errors import NotSupportedError, where
from ..numpy_api import as_operand, broadcast_shapes, broadcast_to, cast, runtime_check, shape_of
from .elementwise import (add, divide, equal, floor_divide, greater_equal, less_equal, logical_and,
                          logical_not, maximum, minimum, multiply, remainder, subtract, where_)
from .index import getitem
from .order import INDEX, _argsort, _take_along, any as _any, diff, searchsorted, sort
from .reduce import amax, amin, sum as _sum
from .registry import implements
from .shape import concatenate, ravel, reshape


# ---- membership --------------------------------------------------------------------------------
# Up to this many distinct test values, each element is compared with every one (a loop that fuses
# with its neighbours); above, a binary search in the sorted test values.
ISIN_COMPARE_MAX = 32


@implements(np.isin)
def isin(element, test_elements, assume_unique=False, invert=False, *, kind=None):
    """np.isin: whether each element occurs among test_elements (NaN never does), a boolean
    array of element's shape; no gradient. Test values known when tracing are deduplicated
    first; a binary search in them (or in the sorted traced ones) answers each element."""
    if kind not in (None, "sort", "table"):
        raise ValueError(f"Invalid kind: '{kind}'. Please use None or 'sort' or 'table'.")
    if kind == "table" and builtins.any(as_operand(v).dtype.kind not in "biu" for v in (element, test_elements)):
        raise ValueError("The 'table' method is only supported for boolean or integer arrays. Please "
                         "select 'sort' or None for kind.")
    x = as_operand(element)
    test_elements = as_operand(test_elements) if isinstance(test_elements, (list, tuple)) else test_elements
    test = known_value(test_elements)
    if test is None:
        t = ravel(as_operand(test_elements))
    else:
        t = np.unique(test.reshape(-1))
    dt = np.result_type(x.dtype, t.dtype)
    dt = np.dtype(np.int8) if dt == bool else dt        # (searchsorted compares numbers)
    if shape_of(t)[0] == 0:
        found = broadcast_to(as_operand(np.zeros((), bool)), tuple(shape_of(x)))
    else:
        x, t = cast(x, dt), cast(t, dt)
        n = shape_of(t)[0]
        if test is not None and n <= ISIN_COMPARE_MAX:
            found = _any(equal(reshape(x, tuple(shape_of(x)) + (1,)), t), axis=-1)
        else:
            if test is None:
                t = sort(t)
            pos = minimum(searchsorted(t, x), n - 1)
            found = equal(getitem(t, (pos,)), x)
    if not isinstance(found, Tensor):
        found = as_operand(found)
    return logical_not(found) if invert else found


# ---- results whose size depends on the values ----------------------------------------------------
_SIZE_HELP = ("its result's size depends on the values, which a compiled function must know when it "
              "is traced. Use np.isin for membership masks, a mask with np.where and reductions "
              "(np.sum(np.where(mask, x, 0))), or call the function eagerly (jg.value_and_grad)")


def _values_now(name, *xs):
    """The values of the arrays xs, known now; a traced one is refused with what to do instead."""
    out = []
    for x in xs:
        v = known_value(as_operand(x) if isinstance(x, (list, tuple)) else x)
        if v is None:
            raise NotSupportedError(f"{name} of a traced value: {_SIZE_HELP}{where()}")
        out.append(v)
    return out


def _read(x, positions):
    """x's elements at `positions` of its flattened array: a gather, so gradients reach x."""
    positions = np.asarray(positions, dtype=INDEX)
    if isinstance(x, Tensor):
        return getitem(ravel(x), (positions,))
    return np.asarray(x).reshape(-1)[positions]


@implements(np.unique)
def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *,
           equal_nan=True, sorted=True):
    """np.unique of a value known now: NumPy's positions, the values read from `ar` (with
    axis=None, each distinct value's first occurrence; with an axis, the first of each
    distinct slice), so eager gradients reach them."""
    (v,) = _values_now("np.unique", ar)
    ar = as_operand(ar) if isinstance(ar, (list, tuple)) else ar
    if not sorted and axis is None and not (return_index or return_inverse or return_counts):
        values = np.unique(v, equal_nan=equal_nan, sorted=False)      # (NumPy's order: unsorted)
        return _read(ar, _positions_in(v.reshape(-1), values))
    res = np.unique(v, return_index=True, return_inverse=return_inverse, return_counts=return_counts,
                    axis=axis, equal_nan=equal_nan)
    first = res[1]
    if axis is None:
        values = _read(ar, first)
    else:
        ax = operator.index(axis) % v.ndim
        key = (slice(None),) * ax + (np.asarray(first, dtype=INDEX),)
        values = getitem(as_operand(ar), key) if isinstance(ar, Tensor) else v[key]
    out = [values]
    if return_index:
        out.append(first)
    out.extend(res[2:])
    return out[0] if len(out) == 1 else tuple(out)


@implements(np.unique_values)
def unique_values(x):
    return unique(x, equal_nan=False, sorted=False)


@implements(np.unique_counts)
def unique_counts(x):
    values, counts = unique(x, return_counts=True, equal_nan=False)
    return type(np.unique_counts(np.zeros(1)))(values, counts)


@implements(np.unique_inverse)
def unique_inverse(x):
    values, inverse = unique(x, return_inverse=True, equal_nan=False)
    return type(np.unique_inverse(np.zeros(1)))(values, np.reshape(inverse, shape_of(x)))


@implements(np.unique_all)
def unique_all(x):
    values, index, inverse, counts = unique(x, True, True, True, equal_nan=False)
    return type(np.unique_all(np.zeros(1)))(values, index, np.reshape(inverse, shape_of(x)), counts)


def _positions_in(v, values):
    """The flat position in array v of each of `values` (its first occurrence)."""
    order = np.argsort(v, kind="stable")
    return order[np.searchsorted(v[order], values)]


@implements(np.intersect1d)
def intersect1d(ar1, ar2, assume_unique=False, return_indices=False):
    """np.intersect1d of values known now; the values are read from ar1."""
    v1, v2 = _values_now("np.intersect1d", ar1, ar2)
    dt = np.result_type(v1.dtype, v2.dtype)
    if not return_indices:
        common = np.intersect1d(v1, v2, assume_unique=assume_unique)
        both = np.concatenate([v1.reshape(-1), v2.reshape(-1)])
        flat = concatenate([ravel(cast(as_operand(ar1), dt)), ravel(cast(as_operand(ar2), dt))])
        return _read(flat, _positions_in(both.astype(dt), common))
    common, i1, i2 = np.intersect1d(v1, v2, assume_unique=assume_unique, return_indices=True)
    return cast(_read(ar1, i1), dt), i1, i2


@implements(np.union1d)
def union1d(ar1, ar2):
    """np.union1d of values known now; each value read from its first occurrence in ar1, ar2."""
    v1, v2 = _values_now("np.union1d", ar1, ar2)
    both = np.concatenate([v1.reshape(-1), v2.reshape(-1)])
    _, first = np.unique(both, return_index=True)
    return _read(concatenate([ravel(as_operand(ar1)), ravel(as_operand(ar2))]), first)


@implements(np.setdiff1d)
def setdiff1d(ar1, ar2, assume_unique=False):
    """np.setdiff1d of values known now; the values are read from ar1."""
    v1, v2 = _values_now("np.setdiff1d", ar1, ar2)
    flat = v1.reshape(-1)
    if assume_unique:
        keep = np.flatnonzero(~np.isin(flat, v2, assume_unique=True))
    else:
        values = np.setdiff1d(flat, v2)
        keep = _positions_in(flat, values)
    return _read(ar1, keep)


@implements(np.setxor1d)
def setxor1d(ar1, ar2, assume_unique=False):
    """np.setxor1d of values known now; each value read from ar1 or ar2, where it occurs."""
    v1, v2 = _values_now("np.setxor1d", ar1, ar2)
    values = np.setxor1d(v1, v2, assume_unique=assume_unique)
    both = np.concatenate([v1.reshape(-1), v2.reshape(-1)])
    return _read(concatenate([ravel(as_operand(ar1)), ravel(as_operand(ar2))]), _positions_in(both, values))


@implements(np.argwhere)
def argwhere(a):
    """np.argwhere of a value known now: the (count, ndim) int64 positions of its nonzero elements."""
    (v,) = _values_now("np.argwhere", a)
    return np.argwhere(v)


@implements(np.flatnonzero)
def flatnonzero(a):
    """np.flatnonzero of a value known now: the flat positions of its nonzero elements."""
    (v,) = _values_now("np.flatnonzero", a)
    return np.flatnonzero(v)


@implements(np.trim_zeros)
def trim_zeros(filt, trim="fb", axis=None):
    """np.trim_zeros of a value known now: a view of filt without its leading and/or trailing zeros."""
    (v,) = _values_now("np.trim_zeros", filt)
    if v.ndim != 1 or axis not in (None, 0, -1):
        raise NotSupportedError(f"np.trim_zeros of a {v.ndim}-d array or along an axis is not "
                                f"supported{where()}")
    trim = trim.lower()
    if builtins.any(c not in "fb" for c in trim):
        raise ValueError(f"unexpected character(s) in `trim`: {trim!r}")
    nz = np.flatnonzero(v)
    if nz.size == 0:
        return getitem(as_operand(filt), (slice(0, 0),))
    start = int(nz[0]) if "f" in trim else 0
    stop = int(nz[-1]) + 1 if "b" in trim else v.shape[0]
    return getitem(as_operand(filt), (slice(start, stop),))


# ---- lexsort -----------------------------------------------------------------------------------
@implements(np.lexsort)
def lexsort(keys, axis=-1):
    """np.lexsort: the permutation sorting by the last key, ties broken by the one before it, and
    so on; stable sorts chained from the first key to the last (NaN last, as NumPy's). int64
    indices, no gradient."""
    if isinstance(keys, Tensor):
        if len(keys.shape) == 0:
            raise TypeError("need sequence of keys with len > 0 in lexsort")
        keys = [keys[i] for i in range(keys.shape[0])]
    keys = [as_operand(k) for k in keys]
    if not keys:
        raise TypeError("need sequence of keys with len > 0 in lexsort")
    shape = tuple(shape_of(keys[0]))
    if builtins.any(tuple(shape_of(k)) != shape for k in keys):
        raise ValueError("all keys need to be the same shape")
    if not shape:
        return np.asarray(0, INDEX)
    ax = operator.index(axis)
    if not -len(shape) <= ax < len(shape):
        raise np.exceptions.AxisError(axis, len(shape))
    ax %= len(shape)
    perm = None
    for k in keys:
        k = k if isinstance(k, Tensor) else as_operand(k)
        if perm is None:
            perm = _argsort(k, ax)
        else:
            perm = _take_along(perm, _argsort(_take_along(k, perm, ax), ax), ax)
    return perm


# ---- histograms --------------------------------------------------------------------------------
_ESTIMATORS = ("auto", "fd", "doane", "scott", "stone", "rice", "sturges", "sqrt")


def _edges(a, bins, rng, weights, name, range_dtype=True):
    """The bin edges of one dimension of data `a` (flat): a traced or known 1-d array. Edges
    from a range have the data's floating dtype (np.histogram's) or, without `range_dtype`,
    float64 (np.histogramdd's)."""
    if isinstance(bins, str):
        if bins not in _ESTIMATORS:
            raise ValueError(f"{bins!r} is not a valid estimator for `bins`")
        v = known_value(a)
        w = None if weights is None else known_value(weights)
        if v is None or (weights is not None and w is None):
            raise NotSupportedError(f"{name} with bins={bins!r} of a traced value: the number of bins "
                                    f"depends on the data; pass a number of bins or the edges{where()}")
        return np.histogram_bin_edges(v, bins, rng, w)
    if np.ndim(bins) == 0 and not isinstance(bins, Tensor):
        n = operator.index(bins)
        if n < 1:
            raise ValueError("`bins` must be positive, when an integer")
        if rng is not None:
            lo, hi = rng
            if isinstance(lo, Tensor) or isinstance(hi, Tensor):
                raise NotSupportedError(f"{name} with a traced range is not supported{where()}")
            lo, hi = float(lo), float(hi)
            if lo > hi:
                raise ValueError("max must be larger than min in range parameter.")
            if not (np.isfinite(lo) and np.isfinite(hi)):
                raise ValueError(f"supplied range of [{lo}, {hi}] is not finite")
            if lo == hi:
                lo, hi = lo - 0.5, hi + 0.5
            # (np.histogram's edges have the data's floating dtype)
            dtype = a.dtype if range_dtype and a.dtype.kind == "f" else None
            return np.linspace(lo, hi, n + 1, endpoint=True, dtype=dtype)
        if not isinstance(a, Tensor):
            return np.histogram_bin_edges(a, n)
        if shape_of(a)[0] == 0:
            return np.linspace(0.0, 1.0, n + 1)
        v = known_value(a)
        if v is not None and not np.all(np.isfinite(v[[v.argmin(), v.argmax()]])):
            raise ValueError(f"autodetected range of [{v.min()}, {v.max()}] is not finite")
        dt = np.result_type(a.dtype, np.float64) if a.dtype.kind != "f" else a.dtype
        lo, hi = cast(amin(a), dt), cast(amax(a), dt)
        if v is not None and not np.isfinite(np.asarray(v.max(), dt) - np.asarray(v.min(), dt)):
            raise ValueError(f"Too many bins for data range. Cannot create {n} finite-sized bins.")
        # NaN or an infinity in the data (a range NumPy refuses): raised when the function runs
        runtime_check(subtract(hi, lo), "histogram_range", n)
        same = equal(lo, hi)
        lo, hi = where_(same, subtract(lo, 0.5), lo), where_(same, add(hi, 0.5), hi)
        # np.linspace's formula, i * step + lo with its last point exactly hi: NumPy's edges
        step = divide(subtract(hi, lo), n)
        edges = add(multiply(np.arange(n + 1, dtype=dt), step), lo)
        last = np.zeros(n + 1, bool)
        last[-1] = True
        return where_(last, hi, edges)
    edges = as_operand(bins)
    if len(shape_of(edges)) != 1:
        raise ValueError("`bins` must be 1d, when an array")
    known = known_value(edges)
    if known is not None and np.any(known[:-1] > known[1:]):
        raise ValueError("`bins` must increase monotonically, when an array")
    if known is None and shape_of(edges)[0] > 1:       # traced edges: checked when the function runs
        runtime_check(amin(diff(edges)), "histogram_bins", None)
    return edges


def _bin_index(x, edges):
    """(bin of each value of x, whether it falls in the edges' range): NumPy's rule, each bin
    closed on the left and the last one closed on both sides. At least one bin."""
    n = shape_of(edges)[0] - 1
    dt = np.result_type(x.dtype, edges.dtype)
    x, edges = cast(x, dt), cast(edges if isinstance(edges, Tensor) else as_operand(edges), dt)
    idx = subtract(searchsorted(edges, x, side="right"), 1)
    first, last = getitem(edges, (0,)), getitem(edges, (n,))
    idx = where_(equal(x, last), n - 1, idx)
    inside = logical_and(greater_equal(x, first), less_equal(x, last))
    return minimum(maximum(idx, 0), n - 1), inside


def _counts(flat_bin, inside, weights, size):
    if weights is None:
        w = cast(inside, INDEX)
    else:
        w = as_operand(weights)
        w = where_(inside, ravel(w), 0)
    w = w if isinstance(w, Tensor) else as_operand(w)
    return bind("scatter_add", w, flat_bin if isinstance(flat_bin, Tensor) else as_operand(flat_bin),
                axis=0, size=size)


@implements(np.histogram_bin_edges)
def histogram_bin_edges(a, bins=10, range=None, weights=None):
    """np.histogram_bin_edges: with a bin count, evenly spaced from the data's minimum to its
    maximum (traced: computed when the function runs) unless `range` is given."""
    return as_operand(_edges(ravel(as_operand(a)), bins, range, weights, "np.histogram_bin_edges"))


@implements(np.histogram)
def histogram(a, bins=10, range=None, density=None, weights=None):
    """np.histogram with a bin count or given edges (known or traced): the number of values
    (or their summed weights) per bin, each bin closed on the left and the last on both sides;
    values outside the edges are left out. Differentiable in the weights (and, with density,
    in traced edges); the counts themselves are step functions of the data."""
    flat = ravel(as_operand(a))
    if weights is not None and tuple(shape_of(weights)) != tuple(shape_of(a)):
        raise ValueError("weights should have the same shape as a.")
    edges = as_operand(_edges(flat, bins, range, weights, "np.histogram"))
    n = shape_of(edges)[0] - 1
    if n <= 0:          # one edge (or none): no bins
        dt = np.dtype(np.intp) if weights is None else as_operand(weights).dtype
        return np.zeros(0, np.float64 if density else dt), edges
    idx, inside = _bin_index(flat, edges)
    hist = _counts(idx, inside, weights, n)
    if density:
        hist = cast(hist, np.result_type(hist.dtype, np.float64))
        hist = divide(divide(hist, _sum(hist)), cast(diff(edges), hist.dtype))
    return hist, edges


@implements(np.histogramdd)
def histogramdd(sample, bins=10, range=None, density=None, weights=None):
    """np.histogramdd of an (N, D) sample (or a sequence of D arrays) with bin counts or edges
    per dimension: one `scatter_add` into the flattened bins."""
    if isinstance(sample, (list, tuple)):
        cols = [ravel(as_operand(s)) for s in sample]
    else:
        s = as_operand(sample)
        if len(shape_of(s)) == 1:
            s = reshape(s, (-1, 1))
        cols = [getitem(s, (slice(None), d)) for d in builtins.range(shape_of(s)[1])]
    dims = len(cols)
    if isinstance(bins, (list, tuple)) or (not isinstance(bins, Tensor) and np.ndim(bins) == 1
                                           and len(bins) == dims and np.ndim(bins[0]) == 0):
        if len(bins) != dims:
            raise ValueError("The dimension of bins must be equal to the dimension of the sample x.")
        per_dim = list(bins)
    else:
        per_dim = [bins] * dims
    ranges = [None] * dims if range is None else list(range)
    edges, flat_bin, inside, sizes = [], None, None, []
    for d in builtins.range(dims):
        e = as_operand(_edges(cols[d], per_dim[d], ranges[d], None, "np.histogramdd", range_dtype=False))
        idx, ok = _bin_index(cols[d], e)
        n = shape_of(e)[0] - 1
        flat_bin = idx if flat_bin is None else add(multiply(flat_bin, n), idx)
        inside = ok if inside is None else logical_and(inside, ok)
        edges.append(e)
        sizes.append(n)
    total = int(np.prod(sizes, dtype=np.int64))
    hist = _counts(flat_bin, inside, weights, total)
    hist = cast(hist, np.float64)
    hist = reshape(hist, tuple(sizes))
    if density:
        hist = divide(hist, _sum(hist))
        for d, e in enumerate(edges):
            hist = divide(hist, reshape(cast(diff(e), np.float64), (1,) * d + (-1,) + (1,) * (dims - d - 1)))
    return hist, edges


@implements(np.histogram2d)
def histogram2d(x, y, bins=10, range=None, density=None, weights=None):
    """np.histogram2d: np.histogramdd of the pairs (x, y); returns (H, xedges, yedges)."""
    if len(shape_of(x)) != 1 or tuple(shape_of(x)) != tuple(shape_of(y)):
        raise ValueError("x and y must be 1-d arrays of one length")
    try:
        count = len(bins)
    except TypeError:
        count = 1
    if count not in (1, 2):
        bins = [bins, bins]       # one array of edges for both axes (NumPy's rule)
    hist, edges = histogramdd([x, y], bins, range, density, weights)
    return hist, edges[0], edges[1]


# ---- multi-indices -------------------------------------------------------------------------------
def _order(order):
    if order not in ("C", "F"):
        raise ValueError("only 'C' or 'F' order is permitted")
    return order


def _check_range(idx, size, what):
    """Raise NumPy's ValueError where an index is outside [0, size): now for known values, else
    when the function runs (`api.run_checks`)."""
    if not int(np.prod(shape_of(idx), dtype=np.int64)):
        return
    known = known_value(idx)
    if known is None:
        runtime_check(amin(idx), what + "_low", size)
        runtime_check(amax(idx), what + "_high", size)
    elif known.min() < 0 or known.max() >= size:
        bad = known.min() if known.min() < 0 else known.max()
        raise ValueError(RANGE_MESSAGES[what].format(index=bad, size=size))


# the errors of `_check_range` (api.run_checks raises them for traced values)
RANGE_MESSAGES = {"unravel": "index {index} is out of bounds for array with size {size}",
                  "multi_index": "invalid entry in coordinates array"}


@implements(np.unravel_index)
def unravel_index(indices, shape, order="C"):
    """np.unravel_index of traced flat indices: one index array per axis, by division and
    remainder; an index outside the array raises NumPy's ValueError when the function runs."""
    shape = tuple(operator.index(d) for d in (shape if np.ndim(shape) else (shape,)))
    idx = as_operand(indices)
    if idx.dtype.kind not in "biu":
        raise TypeError("only int indices permitted")
    idx = cast(idx, INDEX)
    size = int(np.prod(shape, dtype=np.int64))
    _check_range(idx, size, "unravel")
    axes = builtins.range(len(shape)) if _order(order) == "F" else reversed(builtins.range(len(shape)))
    out = [None] * len(shape)
    rest = idx
    for ax in axes:
        out[ax] = remainder(rest, shape[ax]) if shape[ax] else rest
        rest = floor_divide(rest, shape[ax]) if shape[ax] else rest
    return tuple(out)


@implements(np.ravel_multi_index)
def ravel_multi_index(multi_index, dims, mode="raise", order="C"):
    """np.ravel_multi_index of traced coordinates: the flat index, sum of coordinate times stride;
    mode 'wrap' and 'clip' (one for all axes, or one per axis) as NumPy's, and for 'raise' an
    out-of-range coordinate raises NumPy's ValueError when the function runs."""
    dims = tuple(operator.index(d) for d in (dims if np.ndim(dims) else (dims,)))
    coords = [as_operand(c) for c in multi_index]
    if len(coords) != len(dims):
        raise ValueError(f"parameter multi_index must be a sequence of length {len(dims)}")
    if builtins.any(d == 0 for d in dims):
        raise ValueError("cannot unravel if shape has zero entries (is empty).")
    modes = [mode] * len(dims) if isinstance(mode, str) else list(mode)
    if len(modes) != len(dims):
        raise ValueError("mode must be a string or a sequence of one per dimension")
    shape = broadcast_shapes(*[tuple(shape_of(c)) for c in coords])
    strides = [1] * len(dims)
    axes = list(builtins.range(len(dims)))
    step = 1
    for ax in (reversed(axes) if _order(order) == "C" else axes):
        strides[ax] = step
        step *= dims[ax]
    flat = None
    for ax, (c, d, m) in enumerate(zip(coords, dims, modes)):
        if c.dtype.kind not in "iu":
            raise TypeError("only int indices permitted")
        c = cast(c, INDEX)
        if m == "wrap":
            c = remainder(c, d)
        elif m == "clip":
            c = minimum(maximum(c, 0), d - 1)
        elif m == "raise":
            _check_range(c, d, "multi_index")
        else:
            raise ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (got {m!r})")
        term = multiply(c, strides[ax])
        flat = term if flat is None else add(flat, term)
    return broadcast_to(flat, shape)
