"""Scans, sorting and order statistics, and the NumPy functions built on them.

Primitives (each a step of its own in the back ends; on the GPU one thread per independent
row along the axis):

* `cumsum(x, axis, reverse)`: running sums along `axis` (from the end when `reverse`), added
  in order like np.cumsum; its adjoint is itself with `reverse` flipped.
* `cumprod(x, axis)`: running products; its adjoint is a composite of cumsum and cumprod
  whose value and derivatives (so second derivatives) are exact where x has zeros (see
  `_cumprod_vjp`).
* `argsort(x, axis)`: the stable sorting permutation with NaN last (np.argsort(kind="stable"),
  which NumPy's default kind equals on short rows); an integer result, so no adjoint flows.
* `take_along(x, idx, axis)`: np.take_along_axis for operands whose shapes agree off `axis`
  (negative indices count from the end); its adjoint `put_along_add(g, idx, axis, size)` adds g
  into zeros at idx (repeats accumulate), and each is the other's adjoint.
* `wrap_index(i, n)`: i mod n for integer indices (np.take(..., mode="wrap") of traced indices).

Everything else is a composite of these and the other families' primitives:

* sort is take_along(x, argsort(x)), so its gradient scatters back through the permutation;
  np.partition and np.argpartition are the full sort and argsort: a valid partition for every
  kth, the same arrangement eagerly, traced and compiled, but not NumPy's introselect
  arrangement (which NumPy does not promise, and which depends on its SIMD dispatch);
* argmax/argmin are two passes of reductions (the extreme, NaN-propagating, then the least
  index attaining it, or the first NaN), which fuse into one row loop;
* all/any are product/sum reductions of booleans; diff, gradient, median, percentile/quantile
  (linear), average, ptp, searchsorted, cov, corrcoef and the nan-functions follow NumPy's own formulas
  with the same order of operations, so values match NumPy's to the last bit where NumPy's
  are deterministic.
"""
import builtins
import warnings

import numpy as np

from ..core import EagerBox, Tensor, bind
from ..errors import NotSupportedError, ShapeError, where
from ..numpy_api import (as_operand, broadcast_shapes, broadcast_to, cast, keepdims_shape, no_out,
                         norm_axes, norm_axis, reshape, result_dtype, shape_of, transpose)
from .contract import diagonal
from .elementwise import (add, clip, divide, equal, floor, floor_divide, less, less_equal, logical_and, logical_not,
                          logical_or, maximum, minimum, multiply, not_equal, sqrt, subtract, to_bool, where_)
from .index import take as _index_take
from .reduce import amax, amin, count as _reduced_count, mean, prod, sum as _sum, var as _var
from .registry import ZERO_GRADIENT, implements, register
from .products import matmul
from .shape import concatenate, expand_dims, moveaxis, ravel, squeeze, stack

INDEX = np.dtype(np.intp)      # NumPy's index dtype (int64)


# ---- primitives ---------------------------------------------------------------------------------
def _check_axis(shape, axis):
    if not 0 <= axis < len(shape):
        raise ShapeError(f"axis {axis} is out of range for shape {tuple(shape)}")


def _scan_abs(x, axis, reverse=False):
    shape, dtype = x
    _check_axis(shape, axis)
    if np.dtype(dtype) == bool:
        raise ShapeError("cumulative operations take numbers, not booleans (the front end casts)")
    return tuple(shape), np.dtype(dtype)


def _cumsum_impl(x, axis, reverse):
    x = np.asarray(x)
    if not reverse:
        return np.cumsum(x, axis=axis, dtype=x.dtype)
    return np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=x.dtype), axis).copy()


def _flops_size(node):
    return int(node.size)


def _cumprod_vjp(g, out, x, axis):
    """Adjoint of y = cumprod(x) along `axis`: x_k's share is sum_{i >= k} g_i * prod_{j <= i,
    j != k} x_j, written so that it and its own derivatives are exact where x has zeros (at
    any number of them; a share divided by x_k everywhere would be nan there):

    * before the first zero z of a row: revcumsum(g * y)_k / x_k;
    * at z: revcumsum(g * y1)_k, with y1 = cumprod(x with x_z replaced by one);
    * after z: x_z * q_k (zero, but its derivative in x_z is q_k), where q_k, the share with
      x_z left out, is revcumsum(g * y1)_k / x_k before the second zero z2, revcumsum(g * y2)_k
      at z2 (y2: x_z and x_z2 replaced by ones), and zero after it."""
    zero = equal(x, 0.0)
    seen = cumsum(cast(zero, np.int64), axis=axis)          # zeros at or before each position
    before = equal(seen, 0)
    first = logical_and(zero, equal(seen, 1))
    between = logical_and(logical_not(zero), equal(seen, 1))
    second = logical_and(zero, equal(seen, 2))
    x1 = where_(first, 1.0, x)
    x2 = where_(second, 1.0, x1)
    s1 = _cumsum(multiply(g, bind("cumprod", x1, axis=axis)), axis, True)
    r_before = divide(_cumsum(multiply(g, out), axis, True), where_(before, x, 1.0))
    q = where_(between, divide(s1, where_(between, x, 1.0)),
               where_(second, _cumsum(multiply(g, bind("cumprod", x2, axis=axis)), axis, True), 0.0))
    x_z = _sum(where_(first, x, 0.0), axis=axis, keepdims=True)
    return where_(before, r_before, where_(first, s1, multiply(x_z, q)))


register("cumsum", "linalg", _scan_abs, _cumsum_impl,
         (lambda g, out, x, axis, reverse: _cumsum(g, axis, not reverse),), flops=_flops_size)
register("cumprod", "linalg", _scan_abs,
         lambda x, axis: np.cumprod(np.asarray(x), axis=axis, dtype=np.asarray(x).dtype),
         (_cumprod_vjp,), flops=_flops_size)


def _argsort_abs(x, axis):
    shape, dtype = x
    _check_axis(shape, axis)
    if np.dtype(dtype) == bool:
        raise ShapeError("argsort takes numbers, not booleans (the front end casts)")
    return tuple(shape), INDEX


def _n_log_n(count, n):
    """count * log2(n) (at least count): a sort's or binary search's rough operation count."""
    return int(count) * max(1, int(np.ceil(np.log2(max(n, 2)))))


def _sort_flops(node):
    return _n_log_n(node.size, node.shape[node.p["axis"]])


register("argsort", "index", _argsort_abs,
         lambda x, axis: np.argsort(np.asarray(x), axis=axis, kind="stable").astype(INDEX),
         ZERO_GRADIENT, flops=_sort_flops)


def _along_abs(x, idx, axis):
    (xs, xd), (js, jd) = x, idx
    _check_axis(xs, axis)
    if np.dtype(jd) != INDEX:
        raise ShapeError(f"take_along: indices must be {INDEX.name}, got {np.dtype(jd).name}")
    if len(xs) != len(js) or builtins.any(a != b for d, (a, b) in enumerate(zip(xs, js)) if d != axis):
        raise ShapeError(f"take_along: shapes {tuple(xs)} and {tuple(js)} differ off axis {axis}")
    return tuple(js), np.dtype(xd)


def _put_abs(g, idx, axis, size):
    (gs, gd), (js, jd) = g, idx
    _check_axis(gs, axis)
    if tuple(gs) != tuple(js) or np.dtype(jd) != INDEX:
        raise ShapeError(f"put_along_add: values {tuple(gs)} and {INDEX.name} indices {tuple(js)} "
                         "must have one shape")
    return tuple(gs[:axis]) + (size,) + tuple(gs[axis + 1:]), np.dtype(gd)


def _put_impl(g, idx, axis, size):
    g, idx = np.asarray(g), np.asarray(idx)
    out = np.zeros(g.shape[:axis] + (size,) + g.shape[axis + 1:], g.dtype)
    ix = list(np.indices(idx.shape, sparse=True))
    ix[axis] = np.where(idx < 0, idx + size, idx)
    np.add.at(out, tuple(ix), g)      # in index order, like every lowering
    return out


register("take_along", "index", _along_abs,
         lambda x, idx, axis: np.take_along_axis(np.asarray(x), np.asarray(idx), axis),
         (lambda g, out, x, idx, axis: bind("put_along_add", g, idx, axis=axis, size=x.shape[axis]),
          None), flops=_flops_size)
# zeros of the taken-from shape with g added at idx along axis (repeats accumulate)
register("put_along_add", "index", _put_abs, _put_impl,
         (lambda g, out, u, idx, axis, size: bind("take_along", g, idx, axis=axis), None),
         flops=_flops_size)


def _wrap_abs(i, n):
    shape, dtype = i
    if np.dtype(dtype) != INDEX or n <= 0:
        raise ShapeError(f"wrap_index takes {INDEX.name} indices and a positive size")
    return tuple(shape), INDEX


# integer %: the sign of the divisor, like np.mod, on every target (Numba's int % is Python's)
register("wrap_index", "elementwise", _wrap_abs, lambda i, n: np.mod(i, n), ZERO_GRADIENT,
         expr=lambda n: "{0} %% %d" % n)


def _cumsum(x, axis, reverse=False):
    return bind("cumsum", x, axis=axis, reverse=reverse)


# ---- helpers ----------------------------------------------------------------------------------------
def _traced(*xs):
    return builtins.any(isinstance(x, Tensor) for x in xs)


def _ndim(x):
    return len(shape_of(x))


def _concrete(x):
    """x's value when it is known now (an array, or a value on an eager tape), else None."""
    while isinstance(x, EagerBox):      # a tape inside a tape holds boxes of the outer one
        x = x.value
    if isinstance(x, Tensor):
        return None
    return np.asarray(x)


def _filled(like, shape, value, dtype):
    """An array of `shape` filled with `value`, in the trace of `like`."""
    c = np.asarray(value, dtype=dtype)
    if isinstance(like, Tensor):
        lifted = like._trace.lift(c)
        if isinstance(lifted, Tensor):
            return broadcast_to(lifted, shape)
    return np.full(shape, c, dtype)


def _slice_axis(x, axis, start, stop=None):
    """x[..., start:stop, ...] along `axis` (Python slice semantics)."""
    shape = tuple(shape_of(x))
    a, b, c = slice(start, stop).indices(shape[axis])
    if not isinstance(x, Tensor):
        return np.asarray(x)[(slice(None),) * axis + (slice(a, b, c),)]
    if (a, b) == (0, shape[axis]):
        return x
    starts, stops, steps = [0] * len(shape), list(shape), [1] * len(shape)
    starts[axis], stops[axis], steps[axis] = a, b, c
    return bind("slice", x, starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))


def _ordered_axes(axis, ndim):
    """NumPy's normalize_axis_tuple: normalized axes in the given order, no repeats."""
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = [norm_axis(a, ndim) for a in axes]
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {axis}{where()}")
    return tuple(out)


def _accumulator(dtype):
    """The dtype np.sum/np.cumsum accumulate in without dtype=: small integers widen to 64 bits."""
    dtype = np.dtype(dtype)
    if dtype == bool or (dtype.kind == "i" and dtype.itemsize < 8):
        return np.dtype(np.int64)
    if dtype.kind == "u" and dtype.itemsize < 8:
        return np.dtype(np.uint64)
    return dtype


def _isnan(x):
    return not_equal(x, x)


def _no_where(where_arg, name):
    if where_arg is not None and where_arg is not np._NoValue:
        raise NotSupportedError(f"{name}(..., where=) is not supported{where()}")


def _kd(keepdims):
    return False if keepdims is np._NoValue else bool(keepdims)


# ---- scans ----------------------------------------------------------------------------------------
def _cumulative(op, a, axis, dtype, out, name):
    no_out(out, name)
    a = as_operand(a)
    if not isinstance(a, Tensor):
        return getattr(np, name[3:])(a, axis=axis, dtype=dtype)
    dt = np.dtype(dtype) if dtype is not None else _accumulator(a.dtype)
    nd = a.ndim
    if axis is None or nd == 0:
        if axis is not None:
            norm_axis(axis, 1)        # a 0-d array accepts axis 0 and -1, like NumPy
        x, ax = ravel(a), 0
    else:
        x, ax = a, norm_axis(axis, nd)
    if dt == bool:
        # cumulative or / and: the counts of the truths, compared with zero
        r = bind(op, cast(x, np.int64), axis=ax) if op == "cumprod" else _cumsum(cast(x, np.int64), ax)
        return not_equal(r, 0)
    x = cast(x, dt)
    return bind(op, x, axis=ax) if op == "cumprod" else _cumsum(x, ax)


@implements(np.cumsum)
def cumsum(a, axis=None, dtype=None, out=None):
    """np.cumsum: running sums along `axis` (the flattened array for None), added in order."""
    return _cumulative("cumsum", a, axis, dtype, out, "np.cumsum")


@implements(np.cumprod)
def cumprod(a, axis=None, dtype=None, out=None):
    """np.cumprod: running products along `axis`; its gradient is exact where a has zeros."""
    return _cumulative("cumprod", a, axis, dtype, out, "np.cumprod")


def _nan_cumulative(op, a, fill, axis, dtype, out, name):
    a = as_operand(a)
    if isinstance(a, Tensor):
        a = _nan_replaced(a, fill)[0]
    return _cumulative(op, a, axis, dtype, out, name)


@implements(np.nancumsum)
def nancumsum(a, axis=None, dtype=None, out=None):
    """np.nancumsum: np.cumsum with NaN counted as zero (no gradient reaches the NaNs)."""
    return _nan_cumulative("cumsum", a, 0, axis, dtype, out, "np.nancumsum")


@implements(np.nancumprod)
def nancumprod(a, axis=None, dtype=None, out=None):
    """np.nancumprod: np.cumprod with NaN counted as one."""
    return _nan_cumulative("cumprod", a, 1, axis, dtype, out, "np.nancumprod")


def _cumulative_include(op, x, axis, dtype, out, include_initial, name):
    """NumPy 2.1's np.cumulative_sum / np.cumulative_prod: axis may be omitted only for 1-D x;
    include_initial puts the identity first."""
    no_out(out, name)
    x = as_operand(x)
    if not isinstance(x, Tensor):
        return getattr(np, name[3:])(x, axis=axis, dtype=dtype, include_initial=include_initial)
    if axis is None:
        if x.ndim != 1:
            raise ValueError(f"For arrays which have more than one dimension ``axis`` argument is "
                             f"required.{where()}")
        axis = 0
    r = _cumulative(op, x, axis, dtype, None, "np." + op)
    if not include_initial:
        return r
    ax = norm_axis(axis, r.ndim)
    first = list(shape_of(r))
    first[ax] = 1
    return concatenate([np.full(tuple(first), 0 if op == "cumsum" else 1, dtype=r.dtype), r], axis=ax)


if hasattr(np, "cumulative_sum"):
    @implements(np.cumulative_sum)
    def cumulative_sum(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
        """np.cumulative_sum: running sums along `axis`, optionally starting with 0."""
        return _cumulative_include("cumsum", x, axis, dtype, out, include_initial, "np.cumulative_sum")

    @implements(np.cumulative_prod)
    def cumulative_prod(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
        """np.cumulative_prod: running products along `axis`, optionally starting with 1."""
        return _cumulative_include("cumprod", x, axis, dtype, out, include_initial, "np.cumulative_prod")


@implements(np.diff)
def diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    """np.diff: n-th differences along `axis` (not_equal for booleans), after prepending and
    appending values (scalars are broadcast along the axis)."""
    extras = [e for e in (prepend, append) if e is not np._NoValue]
    if not _traced(a, *extras):
        return np.diff(a, n, axis, prepend, append)
    if n == 0:
        return a
    if n < 0:
        raise ValueError("order must be non-negative but got " + repr(n))
    a = as_operand(a)
    nd = a.ndim
    if nd == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = norm_axis(axis, nd)
    parts = []
    for e in (prepend, a, append):
        if e is np._NoValue:
            continue
        e = as_operand(e)
        if _ndim(e) == 0:
            shape = list(a.shape)
            shape[axis] = 1
            e = broadcast_to(e, shape)
        parts.append(e)
    if len(parts) > 1:
        a = concatenate(parts, axis)
    for _ in range(n):
        hi, lo = _slice_axis(a, axis, 1), _slice_axis(a, axis, None, -1)
        a = not_equal(hi, lo) if a.dtype == bool else subtract(hi, lo)
    return a


def _spacings(f, axes, varargs):
    """np.gradient's spacing per axis: a scalar (uniform) or the differences of 1-d coordinates
    (constant differences of concrete coordinates become their scalar, like NumPy)."""
    n, len_axes = len(varargs), len(axes)
    if n == 0:
        return [1.0] * len_axes
    if n == 1 and _ndim(varargs[0]) == 0:
        return list(varargs) * len_axes
    if n != len_axes:
        raise TypeError("invalid number of arguments")
    dx = list(varargs)
    for i, d in enumerate(dx):
        if _ndim(d) == 0:
            continue
        if _ndim(d) != 1:
            raise ValueError("distances must be either scalars or 1d")
        if shape_of(d)[0] != shape_of(f)[axes[i]]:
            raise ValueError("when 1d, distances must match the length of the corresponding dimension")
        d = as_operand(d)
        if d.dtype.kind in "iu":
            d = cast(d, np.float64)
        diffx = diff(d)
        if not isinstance(diffx, Tensor) and (diffx == diffx[0]).all():
            diffx = diffx[0]
        dx[i] = diffx
    return dx


@implements(np.gradient)
def gradient(f, *varargs, axis=None, edge_order=1):
    """np.gradient: second-order central differences inside, first- or second-order one-sided
    differences at the ends, for uniform spacings (scalars) or coordinate arrays; one array per
    axis (a tuple for several). The formulas are NumPy's, term by term: concrete spacings are
    combined with NumPy's arithmetic (Python floats stay weak), traced ones on the graph."""
    if not _traced(f, *varargs):
        return np.gradient(f, *varargs, axis=axis, edge_order=edge_order)
    f = as_operand(f)
    N = f.ndim
    axes = tuple(range(N)) if axis is None else _ordered_axes(axis, N)
    dx = _spacings(f, axes, varargs)
    if edge_order > 2:
        raise ValueError("'edge_order' greater than 2 not supported")
    otype = f.dtype
    if otype.kind != "f":
        if otype == bool:
            raise TypeError("numpy boolean subtract, the `-` operator, is not supported, use the "
                            "bitwise_xor, the `^` operator, or the logical_xor function instead.")
        f, otype = cast(f, np.float64), np.dtype(np.float64)
    outvals = []
    for ax, ax_dx in zip(axes, dx):
        if f.shape[ax] < edge_order + 1:
            raise ValueError("Shape of array too small to calculate a numerical gradient, at least "
                             "(edge_order + 1) elements are required.")
        uniform = _ndim(ax_dx) == 0

        def s(a, b=None, ax=ax):
            return _slice_axis(f, ax, a, b)
        if uniform:
            inner = (s(2) - s(None, -2)) / (2. * ax_dx)
        else:
            dx1, dx2 = ax_dx[0:-1], ax_dx[1:]
            a = -(dx2) / (dx1 * (dx1 + dx2))
            b = (dx2 - dx1) / (dx1 * dx2)
            c = dx1 / (dx2 * (dx1 + dx2))
            shape = [1] * N
            shape[ax] = -1
            a, b, c = reshape(a, shape), reshape(b, shape), reshape(c, shape)
            inner = a * s(None, -2) + b * s(1, -1) + c * s(2)
        if edge_order == 1:
            dx_0 = ax_dx if uniform else ax_dx[0]
            dx_n = ax_dx if uniform else ax_dx[-1]
            first = (s(1, 2) - s(0, 1)) / dx_0
            last = (s(-1) - s(-2, -1)) / dx_n
        else:
            if uniform:
                a, b, c = -1.5 / ax_dx, 2. / ax_dx, -0.5 / ax_dx
            else:
                dx1, dx2 = ax_dx[0], ax_dx[1]
                a = -(2. * dx1 + dx2) / (dx1 * (dx1 + dx2))
                b = (dx1 + dx2) / (dx1 * dx2)
                c = - dx1 / (dx2 * (dx1 + dx2))
            first = a * s(0, 1) + b * s(1, 2) + c * s(2, 3)
            if uniform:
                a, b, c = 0.5 / ax_dx, -2. / ax_dx, 1.5 / ax_dx
            else:
                dx1, dx2 = ax_dx[-2], ax_dx[-1]
                a = (dx2) / (dx1 * (dx1 + dx2))
                b = - (dx2 + dx1) / (dx1 * dx2)
                c = (2. * dx2 + dx1) / (dx2 * (dx1 + dx2))
            last = a * s(-3, -2) + b * s(-2, -1) + c * s(-1)
        # NumPy writes each piece into an array of f's dtype
        outvals.append(concatenate([cast(p, otype) for p in (first, inner, last)], axis=ax))
    return outvals[0] if len(axes) == 1 else tuple(outvals)


# ---- sorting ---------------------------------------------------------------------------------------
_KINDS = ("quicksort", "mergesort", "heapsort", "stable")


def _check_sort_kind(kind, order, name):
    if order is not None:
        raise NotSupportedError(f"{name}(..., order=) is not supported: it sorts structured arrays"
                                f"{where()}")
    if kind is not None and kind not in _KINDS:
        raise ValueError(f"sort kind must be one of 'quick', 'heap', or 'stable' (got {kind!r})")


def _argsort(x, axis):
    """The stable sorting permutation of x along normalized `axis`, NaN last."""
    if x.dtype == bool:
        x = cast(x, np.uint8)
    return bind("argsort", x, axis=axis)


def _take_along(x, idx, axis):
    return bind("take_along", x, idx, axis=axis)


def _sorted(x, axis):
    """x sorted along normalized `axis` (NaN last); the gradient scatters back through the
    permutation."""
    return _take_along(x, _argsort(x, axis), axis)


def _flat_or_axis(a, axis, zero_d_ok):
    """(array, normalized axis) of a sort-like function: None flattens; a 0-d array is sorted as
    one element where NumPy allows it (argsort, argpartition)."""
    if axis is None or (zero_d_ok and a.ndim == 0):
        return ravel(a), 0
    return a, norm_axis(axis, a.ndim)


@implements(np.sort)
def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    """np.sort along `axis` (None: the flattened array), NaN last; differentiable."""
    _check_sort_kind(kind, order, "np.sort")
    a = as_operand(a)
    if not isinstance(a, Tensor):
        return np.sort(a, axis=axis, kind=kind, stable=stable)
    x, ax = _flat_or_axis(a, axis, False)
    return _sorted(x, ax)


@implements(np.argsort)
def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    """np.argsort: a stable sort (ties keep their order, NaN last), which NumPy's default kind
    also gives on rows of up to 16 elements; int64 indices, no gradient."""
    _check_sort_kind(kind, order, "np.argsort")
    a = as_operand(a)
    if not isinstance(a, Tensor):
        return np.argsort(a, axis=axis, kind=kind, stable=stable)
    x, ax = _flat_or_axis(a, axis, True)
    return _argsort(x, ax)


def _check_kth(kth, n, name):
    if isinstance(kth, Tensor):
        raise NotSupportedError(f"{name} with a traced kth is not supported{where()}")
    k = np.asarray(kth)
    if k.dtype.kind not in "iu" or k.ndim > 1:
        raise TypeError("Partition index must be integer")
    for v in k.reshape(-1):
        if not -n <= int(v) < n:
            raise ValueError(f"kth(={int(v)}) out of bounds ({n})")


@implements(np.partition)
def partition(a, kth, axis=-1, kind="introselect", order=None):
    """np.partition: every kth element in its sorted place, smaller ones before it and larger
    ones after. Computed as the full sort (a valid partition for any kth, the same
    arrangement eagerly, traced and compiled; NumPy leaves the arrangement unspecified)."""
    if order is not None:
        raise NotSupportedError(f"np.partition(..., order=) is not supported{where()}")
    a = as_operand(a)
    if not isinstance(a, Tensor):
        return np.partition(a, kth, axis=axis, kind=kind)
    x, ax = _flat_or_axis(a, axis, False)
    _check_kth(kth, x.shape[ax], "np.partition")
    return _sorted(x, ax)


@implements(np.argpartition)
def argpartition(a, kth, axis=-1, kind="introselect", order=None):
    """np.argpartition, as the stable argsort (see `partition`)."""
    if order is not None:
        raise NotSupportedError(f"np.argpartition(..., order=) is not supported{where()}")
    a = as_operand(a)
    if not isinstance(a, Tensor):
        return np.argpartition(a, kth, axis=axis, kind=kind)
    x, ax = _flat_or_axis(a, axis, True)
    _check_kth(kth, x.shape[ax], "np.argpartition")
    return _argsort(x, ax)


# ---- indices of extremes ---------------------------------------------------------------------------
def _arg_extreme(a, axis, out, keepdims, op, name):
    no_out(out, f"np.{name}")
    a = as_operand(a)
    keepdims = _kd(keepdims)
    if not isinstance(a, Tensor):
        return getattr(np, name)(a, axis=axis, keepdims=keepdims)
    nd = a.ndim
    if axis is None or nd == 0:
        if axis is not None:
            norm_axis(axis, 1)
        x, ax = ravel(a), 0
        kd_shape = (1,) * nd
    else:
        x, ax = a, norm_axis(axis, nd)
        kd_shape = keepdims_shape(a.shape, (ax,))
    n = x.shape[ax]
    if n == 0:
        raise ValueError(f"attempt to get {name} of an empty sequence")
    extreme = (amax if op == "max" else amin)(x, axis=ax, keepdims=True)
    hit = equal(x, extreme)
    if x.dtype.kind == "f":
        # np.argmax/argmin stop at the first NaN: a NaN extreme is hit by every NaN
        hit = logical_or(hit, logical_and(_isnan(extreme), _isnan(x)))
    iota = np.arange(n, dtype=INDEX).reshape((n,) + (1,) * (x.ndim - ax - 1))
    r = amin(where_(hit, iota, n), axis=ax)       # the first position attaining it
    return reshape(r, kd_shape) if keepdims else r


@implements(np.argmax)
def argmax(a, axis=None, out=None, *, keepdims=False):
    """np.argmax: the first index of the maximum (of the first NaN, where there is one)."""
    return _arg_extreme(a, axis, out, keepdims, "max", "argmax")


@implements(np.argmin)
def argmin(a, axis=None, out=None, *, keepdims=False):
    """np.argmin: the first index of the minimum (of the first NaN, where there is one)."""
    return _arg_extreme(a, axis, out, keepdims, "min", "argmin")


# ---- gathers ----------------------------------------------------------------------------------------
@implements(np.take_along_axis)
def take_along_axis(arr, indices, axis=-1):
    """np.take_along_axis, broadcasting arr and indices against each other off the axis;
    differentiable in arr (the adjoint adds back at the indices, repeats accumulating)."""
    if not _traced(arr, indices):
        return np.take_along_axis(arr, indices, axis)
    arr, idx = as_operand(arr), as_operand(indices)
    if idx.dtype.kind not in "iu":
        raise IndexError("`indices` must be an integer array")
    if axis is None:
        if _ndim(idx) != 1:
            raise ValueError("when axis=None, `indices` must have a single dimension.")
        arr, ax = ravel(arr), 0
    else:
        ax = norm_axis(axis, _ndim(arr))
        if _ndim(idx) != _ndim(arr):
            raise ValueError("`indices` and `arr` must have the same number of dimensions")
    idx = cast(idx, INDEX)
    xs, js = tuple(shape_of(arr)), tuple(shape_of(idx))
    off = broadcast_shapes(xs[:ax] + xs[ax + 1:], js[:ax] + js[ax + 1:])
    arr = broadcast_to(arr, off[:ax] + (xs[ax],) + off[ax:])
    idx = broadcast_to(idx, off[:ax] + (js[ax],) + off[ax:])
    return _take_along(arr, idx, ax)


# np.take with NumPy's index modes: "wrap" and "clip" are index arithmetic before index.py's take
@implements(np.take)
def take(a, indices, axis=None, out=None, mode="raise"):
    """np.take with mode "raise" (out-of-range indices raise IndexError), "wrap" (indices mod
    the axis length) or "clip" (indices clipped into range; negative ones to 0)."""
    no_out(out, "np.take")
    mode = "raise" if mode is None else mode
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (got {mode!r})")
    if not _traced(a, indices):
        return np.take(a, indices, axis=axis, mode=mode)
    if mode != "raise":
        shape = shape_of(a)
        n = int(np.prod(shape, dtype=np.int64)) if axis is None else shape[norm_axis(axis, len(shape))]
        idx = indices if isinstance(indices, Tensor) else np.asarray(indices)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"Cannot cast array data from dtype('{idx.dtype}') to dtype('int64') "
                            "according to the rule 'safe'")
        if n == 0:
            if int(np.prod(shape_of(idx), dtype=np.int64)):
                raise IndexError("cannot do a non-empty take from an empty axes.")
        elif isinstance(idx, Tensor):
            idx = cast(idx, INDEX)
            idx = bind("wrap_index", idx, n=n) if mode == "wrap" else minimum(maximum(idx, 0), n - 1)
        else:
            idx = np.mod(idx, n) if mode == "wrap" else np.clip(idx, 0, n - 1)
        indices = idx
    return _index_take(a, indices, axis)


def _searchsorted_abs(a, v, right):
    (sa, da), (sv, dv) = a, v
    if len(sa) != 1 or np.dtype(da) != np.dtype(dv) or np.dtype(da) == bool:
        raise ShapeError(f"searchsorted: a sorted 1-d array and values of its (numeric) dtype, got "
                         f"{np.dtype(da).name}{list(sa)} and {np.dtype(dv).name}{list(sv)}")
    return tuple(sv), INDEX


def _searchsorted_flops(node):
    return _n_log_n(node.size, node.inputs[0].shape[0])


# the position of each value of v in sorted a (NaN last): a binary search per value
register("searchsorted", "index", _searchsorted_abs,
         lambda a, v, right: np.searchsorted(np.asarray(a), np.asarray(v), "right" if right else "left")
         .astype(INDEX), ZERO_GRADIENT, flops=_searchsorted_flops)
# Up to this many sorted elements, each value is compared with every one (a loop that fuses
# with its neighbours and vectorizes); above, a binary search per value (`searchsorted`): a
# particle filter's resampling gradient at 16,000 particles took 44.5 ms the first way, 0.75 ms the second.
SEARCH_COMPARE_MAX = 32


@implements(np.searchsorted)
def searchsorted(a, v, side="left", sorter=None):
    """np.searchsorted of values v in the sorted 1-d array a (NaN sorts last): for "left" the
    count of a's elements below each value, for "right" of those not above it. A binary search
    per value, or, for a short a (SEARCH_COMPARE_MAX), every value compared with every element
    in one fused loop."""
    if not _traced(a, v, sorter):
        return np.searchsorted(a, v, side, sorter)
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right' (got {side!r})")
    a, v = as_operand(a), as_operand(v)
    if _ndim(a) != 1:
        raise ValueError("object too deep for desired array")
    if sorter is not None:
        a = take(a, sorter)
    dt = result_dtype(a, v)
    a, v = cast(a, dt), cast(v, dt)
    if shape_of(a)[0] > SEARCH_COMPARE_MAX and np.dtype(dt).kind in "iuf":
        return bind("searchsorted", a, v, right=side == "right")
    vv = reshape(v, tuple(shape_of(v)) + (1,))
    below = _less_nan_last(a, vv) if side == "left" else logical_not(_less_nan_last(vv, a))
    return _sum(below, axis=-1)


@implements(np.interp)
def interp(x, xp, fp, left=None, right=None, period=None):
    """np.interp: the piecewise-linear interpolant of the points (xp, fp), increasing xp, at x;
    differentiable in x, xp and fp. Each x finds its interval with searchsorted and reads the
    interval's ends. As NumPy: x at a sample point gives its fp exactly, outside the samples
    `left` and `right` (fp's first and last values by default)."""
    if not _traced(x, xp, fp, left, right):
        return np.interp(x, xp, fp, left, right, period)
    if period is not None:
        raise NotSupportedError(f"np.interp with period= is not supported{where()}")
    if builtins.any(np.dtype(getattr(v, "dtype", np.float64)).kind == "c" for v in (x, xp, fp, left, right)):
        raise NotSupportedError(f"np.interp of complex values is not supported{where()}")
    f64 = np.dtype(np.float64)
    x, xp, fp = (cast(as_operand(v), f64) for v in (x, xp, fp))
    if _ndim(xp) != 1 or _ndim(fp) != 1:
        raise ValueError("object too deep for desired array" if builtins.max(_ndim(xp), _ndim(fp)) > 1
                         else "object of too small depth for desired array")
    n = shape_of(xp)[0]
    if shape_of(fp)[0] != n:
        raise ValueError("fp and xp are not of the same length.")
    if n == 0:
        raise ValueError("array of sample points is empty")
    first, last = _index_take(xp, 0, 0), _index_take(xp, n - 1, 0)
    y_left = _index_take(fp, 0, 0) if left is None else cast(as_operand(left), f64)
    y_right = _index_take(fp, n - 1, 0) if right is None else cast(as_operand(right), f64)
    if n == 1:
        y = broadcast_to(_index_take(fp, 0, 0), tuple(shape_of(x)))
    else:
        j = minimum(maximum(searchsorted(xp, x, side="right"), 1), n - 1)
        x0, x1 = _index_take(xp, subtract(j, 1), 0), _index_take(xp, j, 0)
        y0, y1 = _index_take(fp, subtract(j, 1), 0), _index_take(fp, j, 0)
        dx = subtract(x1, x0)
        # (an interval between repeated sample points holds no x: only the last point's x lands
        # there, and it reads y1 below; 1 spares the gradient a division by zero)
        slope = divide(subtract(y1, y0), where_(equal(dx, 0.0), 1.0, dx))
        # from the interval's start, as NumPy (x at the last sample point from its end): exact
        # at a sample point, the slope's gradient everywhere
        from_end = add(y1, multiply(slope, subtract(x, x1)))
        y = where_(equal(x, last), from_end, add(y0, multiply(slope, subtract(x, x0))))
        # NumPy's way out of an infinite fp: the value at a sample point, then the other end
        y = where_(logical_and(_isnan(y), equal(x, x0)), y0, y)
        y = where_(_isnan(y), where_(logical_and(_isnan(from_end), equal(y0, y1)), y0, from_end), y)
        y = where_(_isnan(x), x, y)
    return where_(less(x, first), y_left, where_(less(last, x), y_right, y))


def _less_nan_last(x, y):
    """x < y in the order NumPy sorts by: NaN after every number."""
    lt = less(x, y)
    if np.dtype(result_dtype(x, y)).kind != "f":
        return lt
    return logical_or(lt, logical_and(_isnan(y), logical_not(_isnan(x))))


# ---- order statistics --------------------------------------------------------------------------------
def _reduce_layout(a, axis):
    """NumPy's _ureduce: (array, axis to reduce, the axes of a it covers). Several axes move
    behind the kept ones and merge into the last."""
    nd = a.ndim
    if axis is None:
        return ravel(a), 0, tuple(range(nd))
    axes = _ordered_axes(axis, nd)
    if len(axes) == 1:
        return a, axes[0], axes
    keep = sorted(set(range(nd)) - set(axes))
    x = moveaxis(a, keep, list(range(len(keep))))
    return reshape(x, tuple(shape_of(x))[:len(keep)] + (-1,)), len(keep), axes


def _keep(r, a_shape, axes, lead=()):
    """A reduction result (lead dims first) with the reduced axes kept as ones."""
    return reshape(r, tuple(lead) + keepdims_shape(a_shape, axes))


@implements(np.median)
def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """np.median: the middle of the sorted values, or the mean of the two middle ones; NaN
    where a slice holds NaN."""
    no_out(out, "np.median")
    a = as_operand(a)
    if not isinstance(a, Tensor):
        return np.median(a, axis=axis, keepdims=keepdims)
    x, ax, axes = _reduce_layout(a, axis)
    n = x.shape[ax]
    rdt = a.dtype if a.dtype.kind == "f" else np.dtype(np.float64)
    out_shape = tuple(d for i, d in enumerate(x.shape) if i != ax)
    if n == 0:
        warnings.warn("Mean of empty slice.", RuntimeWarning, stacklevel=2)
        r = _filled(a, out_shape, np.nan, rdt)
    else:
        part = _sorted(x, ax)
        h = n // 2
        mid = _slice_axis(part, ax, h, h + 1) if n % 2 else _slice_axis(part, ax, h - 1, h + 1)
        r = mean(mid, axis=ax)
        if a.dtype.kind == "f":
            last = reshape(_slice_axis(part, ax, n - 1, n), out_shape)
            r = where_(_isnan(last), last, r)
    return _keep(r, a.shape, axes) if keepdims else r


def _lerp(lo, hi, t):
    """NumPy's _lerp: lo + (hi - lo) * t, or hi - (hi - lo) * (1 - t) where t >= 0.5 (t concrete)."""
    d = subtract(hi, lo)
    if isinstance(t, float):
        return subtract(hi, multiply(d, 1 - t)) if t >= 0.5 else add(lo, multiply(d, t))
    return where_(t >= 0.5, subtract(hi, multiply(d, 1 - t)), add(lo, multiply(d, t)))


def _neighbours(vi, n):
    """NumPy's _get_indexes: the order statistics below and above each virtual index."""
    prev = np.array(np.floor(vi))
    nxt = np.array(prev + 1)
    above = vi >= n - 1
    prev[above], nxt[above] = -1, -1
    below = vi < 0
    prev[below], nxt[below] = 0, 0
    return prev.astype(INDEX), nxt.astype(INDEX)


def _pick(sorted_x, idx):
    """sorted_x[idx] along axis 0 for concrete indices (basic indexing for a scalar one)."""
    if idx.ndim == 0:
        k = int(idx)
        return reshape(_slice_axis(sorted_x, 0, k, k + 1 if k != -1 else None), shape_of(sorted_x)[1:])
    return _index_take(sorted_x, idx, 0)


# NumPy's discontinuous methods on (n - 1) q: an order statistic, or the midpoint of two
_DISCRETE = {"lower": np.floor, "higher": np.ceil, "nearest": np.around}
QUANTILE_METHODS = ("linear", "lower", "higher", "nearest", "midpoint")


def _quantile(a, q, axis, keepdims, weak_q, name, method="linear"):
    """NumPy's _quantile with method "linear" (or one of `QUANTILE_METHODS`), for concrete q in
    [0, 1]."""
    if q.ndim > 2:
        raise ValueError("q must be a scalar or 1d")
    x, ax, axes = _reduce_layout(a, axis)
    n = x.shape[ax]
    arr = moveaxis(x, ax, 0)
    if n == 0:
        raise IndexError("index -1 is out of bounds for axis 0 with size 0")
    part = _sorted(arr, 0)
    vi = np.asanyarray((n - 1) * q)
    if method in _DISCRETE:
        r = _pick(part, np.clip(np.asanyarray(_DISCRETE[method](vi)), 0, n - 1).astype(INDEX))
    elif vi.dtype.kind in "iub":       # integral q: the order statistics themselves
        r = _pick(part, vi.astype(INDEX))
    else:
        prev, nxt = _neighbours(vi, n)
        gamma = np.asanyarray(vi - prev, dtype=vi.dtype)
        if method == "midpoint":
            gamma = np.where(gamma % 1 == 0, 0.0, 0.5).astype(vi.dtype)
        if weak_q:
            gamma = float(gamma)
        else:
            gamma = gamma.reshape(vi.shape + (1,) * (arr.ndim - 1))
        r = _lerp(_pick(part, prev), _pick(part, nxt), gamma)
    if arr.dtype.kind == "f":
        last = _pick(part, np.asarray(-1))
        r = where_(_isnan(last), last, r)
    if keepdims:
        return _keep(r, a.shape, axes, lead=q.shape)
    return r


def _quantile_front(a, q, axis, out, method, keepdims, weights, interpolation, name):
    """Checks and q's normalization (NumPy's), then `_quantile`. Only a may be traced: a
    traced q, out or weights is refused (so an untraced a never gets here)."""
    no_out(out, name)
    if isinstance(q, Tensor):
        raise NotSupportedError(f"{name} with a traced q is not supported: which order statistics "
                                f"it reads depend on q{where()}")
    if weights is not None:
        raise NotSupportedError(f"{name}(..., weights=) is not supported (only method "
                                f"'inverted_cdf' takes weights){where()}")
    if interpolation is not None:
        method = interpolation
    if method not in QUANTILE_METHODS:
        raise NotSupportedError(f"{name}(..., method={method!r}) is not supported; the methods "
                                f"{', '.join(QUANTILE_METHODS)} are{where()}")
    weak_q = type(q) in (int, float)
    if name in ("np.percentile", "np.nanpercentile"):
        q = np.true_divide(q, 100, out=...)
    q = np.asanyarray(q)
    if not (q.size == 0 or (q.min() >= 0 and q.max() <= 1)):
        raise ValueError("Percentiles must be in the range [0, 100]" if "percentile" in name
                         else "Quantiles must be in the range [0, 1]")
    a = as_operand(a)
    if name.startswith("np.nan") and a.dtype.kind == "f":
        if method != "linear":
            raise NotSupportedError(f"{name}(..., method={method!r}) is not supported; "
                                    f"method='linear' is{where()}")
        return _nan_quantile(a, q, axis, keepdims, weak_q)
    return _quantile(a, q, axis, keepdims, weak_q, name, method)


def _nan_order_statistic(part, k):
    """part[..., k] for traced integer positions k of shape (..., 1)."""
    return reshape(_take_along(part, k, part.ndim - 1), shape_of(part)[:-1])


def _nan_sorted(a, axis):
    """(a sorted along the reduced axes, moved last and merged, NaN last; the count of values
    that are not NaN in each slice, shaped (..., 1); the axes reduced)."""
    x, ax, axes = _reduce_layout(a, axis)
    arr = moveaxis(x, ax, -1)
    part = _sorted(arr, arr.ndim - 1)
    count = _sum(cast(logical_not(_isnan(arr)), INDEX), axis=-1, keepdims=True)
    return part, count, axes


def _nan_quantile(a, q, axis, keepdims, weak_q):
    """NumPy's nanquantile (linear): each slice's quantile of its values that are not NaN, whose
    count, and so the order statistics read, is known only when the function runs (gathers at
    traced positions); NaN for a slice of NaNs alone."""
    if q.ndim > 2:
        raise ValueError("q must be a scalar or 1d")
    if not _reduced_count(a, axis):
        raise IndexError("index -1 is out of bounds for axis 0 with size 0")
    part, count, axes = _nan_sorted(a, axis)
    last = maximum(subtract(count, 1), 0)
    # NumPy's interpolation weights have q's dtype (a weak Python q: a's)
    gamma_dtype = a.dtype if weak_q else (q.dtype if q.dtype.kind == "f" else np.dtype(np.float64))
    results = []
    for qv in q.reshape(-1):
        vi = multiply(cast(subtract(count, 1), np.float64), float(qv))
        prev = floor(vi)
        gamma = cast(subtract(vi, prev), gamma_dtype)
        lo_k = minimum(maximum(cast(prev, INDEX), 0), last)
        hi_k = minimum(add(lo_k, 1), last)
        lo, hi = _nan_order_statistic(part, lo_k), _nan_order_statistic(part, hi_k)
        r = _lerp(lo, hi, reshape(gamma, shape_of(lo)))
        results.append(where_(equal(reshape(count, shape_of(lo)), 0), np.nan, r))
    r = results[0] if q.ndim == 0 else reshape(stack(results, axis=0), q.shape + tuple(shape_of(results[0])))
    if keepdims:
        return _keep(r, a.shape, axes, lead=q.shape)
    return r


@implements(np.nanpercentile)
def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=np._NoValue,
                  *, weights=None, interpolation=None):
    """np.nanpercentile (linear interpolation): the percentiles of each slice's non-NaN values."""
    if not _traced(a):
        return np.nanpercentile(a, q, axis=axis, method=method, keepdims=_kd(keepdims))
    return _quantile_front(a, q, axis, out, method, _kd(keepdims), weights, interpolation, "np.nanpercentile")


@implements(np.nanquantile)
def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=np._NoValue,
                *, weights=None, interpolation=None):
    """np.nanquantile (linear interpolation): the quantiles of each slice's non-NaN values."""
    if not _traced(a):
        return np.nanquantile(a, q, axis=axis, method=method, keepdims=_kd(keepdims))
    return _quantile_front(a, q, axis, out, method, _kd(keepdims), weights, interpolation, "np.nanquantile")


@implements(np.nanmedian)
def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=np._NoValue):
    """np.nanmedian: the median of each slice's non-NaN values (the mean of the two middle ones
    for an even count); NaN for a slice of NaNs alone."""
    no_out(out, "np.nanmedian")
    if not _traced(a):
        return np.nanmedian(a, axis=axis, keepdims=_kd(keepdims))
    a = as_operand(a)
    if a.dtype.kind != "f":
        return median(a, axis=axis, keepdims=_kd(keepdims))
    if not _reduced_count(a, axis):
        return median(a, axis=axis, keepdims=_kd(keepdims))
    part, count, axes = _nan_sorted(a, axis)
    lo_k = maximum(floor_divide(subtract(count, 1), 2), 0)
    hi_k = minimum(floor_divide(count, 2), maximum(subtract(count, 1), 0))
    lo, hi = _nan_order_statistic(part, lo_k), _nan_order_statistic(part, hi_k)
    r = divide(add(lo, hi), 2.0)
    r = where_(equal(reshape(count, shape_of(r)), 0), np.nan, r)
    return _keep(r, a.shape, axes) if _kd(keepdims) else r


@implements(np.percentile)
def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False,
               *, weights=None, interpolation=None):
    """np.percentile with linear interpolation: q (concrete, a scalar or an array, in [0, 100])
    picks order statistics of a along `axis`; the result has q's dims first."""
    return _quantile_front(a, q, axis, out, method, keepdims, weights, interpolation, "np.percentile")


@implements(np.quantile)
def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False,
             *, weights=None, interpolation=None):
    """np.quantile with linear interpolation (q concrete, in [0, 1]); see `percentile`."""
    return _quantile_front(a, q, axis, out, method, keepdims, weights, interpolation, "np.quantile")


@implements(np.average)
def average(a, axis=None, weights=None, returned=False, *, keepdims=np._NoValue):
    """np.average: the mean, or sum(a * w) / sum(w) along `axis` (1-d weights along a single
    axis broadcast); with `returned`, also the sum of the weights. A zero weight sum raises
    ZeroDivisionError where the weights are known (not for weights computed in a traced
    function: there the result is inf or nan)."""
    if not _traced(a, weights):
        return np.average(a, axis, weights, returned, keepdims=keepdims)
    a = as_operand(a)
    axes = None if axis is None else _ordered_axes(axis, a.ndim)
    kd = _kd(keepdims)
    if weights is None:
        avg = mean(a, axis=axes, keepdims=kd)
        scl = _filled(avg, shape_of(avg), a.size / int(np.prod(shape_of(avg), dtype=np.int64)), avg.dtype)
    else:
        wgt = as_operand(weights)
        ws = tuple(shape_of(wgt))
        if a.shape != ws:
            if axes is None:
                raise TypeError("Axis must be specified when shapes of a and weights differ.")
            if ws != tuple(a.shape[x] for x in axes):
                raise ValueError("Shape of weights must be consistent with shape of a along specified axis.")
            from_axes = np.argsort(axes)
            wgt = np.transpose(wgt, tuple(int(i) for i in from_axes)) if len(axes) > 1 else wgt
            wgt = reshape(wgt, tuple(s if i in axes else 1 for i, s in enumerate(a.shape)))
        if a.dtype.kind in "biu":
            rdt = np.result_type(a.dtype, wgt.dtype, "f8")
        else:
            rdt = np.result_type(a.dtype, wgt.dtype)
        scl = _sum(wgt, axis=axes, dtype=rdt, keepdims=kd)
        known = _concrete(scl)
        if known is not None and np.any(known == 0.0):
            raise ZeroDivisionError("Weights sum to zero, can't be normalized")
        avg = divide(_sum(multiply(cast(a, rdt), cast(wgt, rdt)), axis=axes, keepdims=kd), scl)
    if returned:
        if tuple(shape_of(scl)) != tuple(shape_of(avg)):
            scl = broadcast_to(scl, shape_of(avg))
        return avg, scl
    return avg


@implements(np.ptp)
def ptp(a, axis=None, out=None, keepdims=False):
    """np.ptp: max - min along `axis` (in a's dtype: integers wrap like NumPy's)."""
    no_out(out, "np.ptp")
    a = as_operand(a)
    if not isinstance(a, Tensor):
        return np.ptp(a, axis=axis, keepdims=_kd(keepdims))
    if a.dtype == bool:
        raise TypeError("numpy boolean subtract, the `-` operator, is not supported, use the "
                        "bitwise_xor, the `^` operator, or the logical_xor function instead.")
    kd = _kd(keepdims)
    return subtract(amax(a, axis=axis, keepdims=kd), amin(a, axis=axis, keepdims=kd))


# ---- NaN-ignoring reductions ----------------------------------------------------------------------
def _nan_replaced(a, value):
    """(a with NaN replaced by value, the NaN mask), or (a, None) for non-floating a."""
    if a.dtype.kind != "f":
        return a, None
    mask = _isnan(a)
    return where_(mask, value, a), mask


def _nan_front(a):
    """a as an operand, or None when it is not traced (the caller computes with NumPy)."""
    return as_operand(a) if _traced(a) else None


@implements(np.nansum)
def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """np.nansum: the sum with NaN counted as zero."""
    no_out(out, "np.nansum")
    _no_initial(initial, where, "np.nansum")
    x = _nan_front(a)
    if x is None:
        return np.nansum(a, axis=axis, dtype=dtype, keepdims=_kd(keepdims))
    arr, _ = _nan_replaced(x, 0.0)
    return _sum(arr, axis=axis, dtype=dtype, keepdims=_kd(keepdims))


@implements(np.nanprod)
def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """np.nanprod: the product with NaN counted as one (np.prod's gradient rule: exact for
    nonzero entries)."""
    no_out(out, "np.nanprod")
    _no_initial(initial, where, "np.nanprod")
    x = _nan_front(a)
    if x is None:
        return np.nanprod(a, axis=axis, dtype=dtype, keepdims=_kd(keepdims))
    arr, _ = _nan_replaced(x, 1.0)
    return prod(arr, axis=axis, dtype=dtype, keepdims=_kd(keepdims))


def _no_mean(mean_arg, name):
    if mean_arg is not None and mean_arg is not np._NoValue:
        raise NotSupportedError(f"{name}(..., mean=) is not supported{where()}")


def _no_initial(initial, where_arg, name):
    if initial is not None and initial is not np._NoValue:
        raise NotSupportedError(f"{name}(..., initial=) is not supported{where()}")
    _no_where(where_arg, name)


def _nan_extreme(a, axis, out, keepdims, initial, where_arg, op, name):
    no_out(out, f"np.{name}")
    _no_initial(initial, where_arg, f"np.{name}")
    x = _nan_front(a)
    kd = _kd(keepdims)
    if x is None:
        return getattr(np, name)(a, axis=axis, keepdims=kd)
    reduce_fn = amax if op == "max" else amin
    if x.dtype.kind != "f":
        return reduce_fn(x, axis=axis, keepdims=kd)
    arr, mask = _nan_replaced(x, -np.inf if op == "max" else np.inf)
    r = reduce_fn(arr, axis=axis, keepdims=kd)
    all_nan = _all_any(mask, axis, kd, "all")
    return where_(all_nan, np.nan, r)


@implements(np.nanmax)
def nanmax(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """np.nanmax: the maximum ignoring NaN; NaN for an all-NaN slice."""
    return _nan_extreme(a, axis, out, keepdims, initial, where, "max", "nanmax")


@implements(np.nanmin)
def nanmin(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """np.nanmin: the minimum ignoring NaN; NaN for an all-NaN slice."""
    return _nan_extreme(a, axis, out, keepdims, initial, where, "min", "nanmin")


def _nan_arg(a, axis, out, keepdims, op, name):
    no_out(out, f"np.{name}")
    x = _nan_front(a)
    if x is None:
        return getattr(np, name)(a, axis=axis, keepdims=_kd(keepdims))
    arr, mask = _nan_replaced(x, -np.inf if op == "max" else np.inf)
    known = _concrete(x)
    if mask is not None and known is not None and known.size \
            and np.any(np.all(np.isnan(known), axis=axis)):
        raise ValueError("All-NaN slice encountered")
    return _arg_extreme(arr, axis, None, keepdims, op, name[3:])


@implements(np.nanargmax)
def nanargmax(a, axis=None, out=None, *, keepdims=False):
    """np.nanargmax: the index of the maximum ignoring NaN. An all-NaN slice raises ValueError
    where the values are known (eagerly); in a traced function it gives index 0."""
    return _nan_arg(a, axis, out, keepdims, "max", "nanargmax")


@implements(np.nanargmin)
def nanargmin(a, axis=None, out=None, *, keepdims=False):
    """np.nanargmin: the index of the minimum ignoring NaN (see `nanargmax`)."""
    return _nan_arg(a, axis, out, keepdims, "min", "nanargmin")


def _count(mask, axis, keepdims):
    """How many entries are not NaN (intp)."""
    return _sum(logical_not(mask), axis=axis, dtype=INDEX, keepdims=keepdims)


def _by_count(a, cnt):
    """NumPy's _divide_by_count: a / cnt, keeping a's dtype."""
    return divide(a, cast(cnt, a.dtype))


def _inexact_dtype(dtype):
    if dtype is not None:
        dtype = np.dtype(dtype)
        if dtype.kind != "f":
            raise TypeError("If a is inexact, then dtype must be inexact")
    return dtype


@implements(np.nanmean)
def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """np.nanmean: the mean of the entries that are not NaN; NaN for an all-NaN slice."""
    no_out(out, "np.nanmean")
    _no_where(where, "np.nanmean")
    x = _nan_front(a)
    kd = _kd(keepdims)
    if x is None:
        return np.nanmean(a, axis=axis, dtype=dtype, keepdims=kd)
    arr, mask = _nan_replaced(x, 0.0)
    if mask is None:
        return mean(arr, axis=axis, dtype=dtype, keepdims=kd)
    dtype = _inexact_dtype(dtype)
    tot = _sum(arr, axis=axis, dtype=dtype, keepdims=kd)
    cnt = _count(mask, axis, kd)
    empty = equal(cnt, 0)
    return where_(empty, np.nan, _by_count(tot, where_(empty, 1, cnt)))    # 0 / 0 without a warning


@implements(np.nanvar)
def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
           correction=None):
    """np.nanvar: the variance of the entries that are not NaN (divided by count - ddof); NaN
    where count - ddof <= 0."""
    no_out(out, "np.nanvar")
    _no_where(where, "np.nanvar")
    _no_mean(mean, "np.nanvar")
    x = _nan_front(a)
    kd = _kd(keepdims)
    if x is None:
        return np.nanvar(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=kd,
                         **({} if correction is None else {"correction": correction}))
    if correction is not None and correction is not np._NoValue:
        if ddof != 0:
            raise ValueError("ddof and correction can't be provided simultaneously.")
        ddof = correction
    arr, mask = _nan_replaced(x, 0.0)
    if mask is None:
        return _var(arr, axis=axis, dtype=dtype, ddof=ddof, keepdims=kd)
    dtype = _inexact_dtype(dtype)
    cnt = _count(mask, axis, True)
    avg = _by_count(_sum(arr, axis=axis, dtype=dtype, keepdims=True), cnt)
    # NumPy subtracts into arr (its dtype), zeroes the NaN places and squares in place
    dev = where_(mask, 0.0, cast(subtract(arr, avg), arr.dtype))
    var = _sum(multiply(dev, dev), axis=axis, dtype=dtype, keepdims=kd)
    dof = subtract(cnt if kd else reshape(cnt, shape_of(var)), ddof)
    bad = less_equal(dof, 0)
    return where_(bad, np.nan, _by_count(var, where_(bad, 1, dof)))


@implements(np.nanstd)
def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
           correction=None):
    """np.nanstd: the square root of `nanvar`."""
    no_out(out, "np.nanstd")
    _no_where(where, "np.nanstd")
    if not _traced(a):
        return np.nanstd(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=_kd(keepdims),
                         **({} if correction is None else {"correction": correction}))
    return sqrt(nanvar(a, axis, dtype, out, ddof, keepdims, where=where, mean=mean, correction=correction))


# ---- truth reductions ---------------------------------------------------------------------------------
def _all_any(b, axis, keepdims, which):
    """np.all / np.any of boolean b: the min / max reductions of booleans (their identities,
    True and False, give NumPy's answer for an empty axis)."""
    shape = tuple(shape_of(b))
    axes = norm_axes(axis, len(shape))
    out_shape = tuple(d for i, d in enumerate(shape) if i not in axes)
    if not axes:
        r = b
    elif builtins.any(shape[i] == 0 for i in axes):
        r = _filled(b, out_shape, which == "all", bool)
    else:
        r = bind("reduce_min" if which == "all" else "reduce_max", b, axes=axes)
    return reshape(r, keepdims_shape(shape, axes)) if keepdims else r


def _truth(a, axis, out, keepdims, where_arg, which):
    no_out(out, f"np.{which}")
    _no_where(where_arg, f"np.{which}")
    if not _traced(a):
        return getattr(np, which)(a, axis=axis, keepdims=_kd(keepdims))
    return _all_any(to_bool(as_operand(a)), axis, _kd(keepdims), which)


@implements(np.all)
def all(a, axis=None, out=None, keepdims=False, *, where=None):
    """np.all along `axis` (a boolean result; no gradient)."""
    return _truth(a, axis, out, keepdims, where, "all")


@implements(np.any)
def any(a, axis=None, out=None, keepdims=False, *, where=None):
    """np.any along `axis` (a boolean result; no gradient)."""
    return _truth(a, axis, out, keepdims, where, "any")


# ---- covariance -------------------------------------------------------------------------------------
@implements(np.cov)
def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    """np.cov: the covariance matrix of the variables in m's rows (columns with rowvar=False),
    with y's variables after them; frequency and reliability weights as NumPy takes them."""
    if ddof is not None and ddof != int(ddof):
        raise ValueError(f"ddof must be integer{where()}")
    dt = np.result_type(as_operand(m).dtype, np.float64) if dtype is None else np.dtype(dtype)
    X = _as_rows(m, rowvar, dt)
    if y is not None:
        X = concatenate([X, _as_rows(y, rowvar, dt)], axis=0)
    if ddof is None:
        ddof = 0 if bias else 1
    n = shape_of(X)[1]
    w, given = None, {}
    for weights, kind in ((fweights, "fweights"), (aweights, "aweights")):
        if weights is None:
            continue
        if not isinstance(weights, Tensor):
            weights = np.asarray(weights, dtype=float if kind == "aweights" else None)
            if kind == "fweights" and not np.all(weights == np.around(weights)):
                raise TypeError(f"fweights must be integer{where()}")
            if np.any(weights < 0):
                raise ValueError(f"{kind} cannot be negative{where()}")
        if len(shape_of(weights)) > 1:
            raise RuntimeError(f"cannot handle multidimensional {kind}{where()}")
        if shape_of(weights)[0] != n:
            raise RuntimeError(f"incompatible numbers of samples and {kind}{where()}")
        given[kind] = cast(as_operand(weights), dt)
        w = given[kind] if w is None else multiply(w, given[kind])
    if w is None:
        avg = divide(_sum(X, axis=1), float(n))
        fact = float(n - ddof)
        if fact <= 0:
            warnings.warn("Degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=2)
            fact = 0.0
    else:
        w_sum = _sum(w)
        avg = divide(_sum(multiply(X, w), axis=1), w_sum)
        if ddof == 0:
            fact = w_sum
        elif aweights is None:
            fact = subtract(w_sum, float(ddof))
        else:
            fact = subtract(w_sum, divide(multiply(float(ddof), _sum(multiply(w, given["aweights"]))), w_sum))
    Xc = subtract(X, expand_dims(avg, 1))
    c = matmul(Xc, transpose(Xc if w is None else multiply(Xc, w)))
    c = multiply(c, divide(1.0, fact))
    return squeeze(c)


def _as_rows(m, rowvar, dt):
    """m as NumPy's cov reads it: at least 2-D, variables in rows."""
    m = cast(as_operand(m), dt)
    if len(shape_of(m)) > 2:
        raise ValueError(f"m has more than 2 dimensions{where()}")
    X = reshape(m, (1, -1)) if len(shape_of(m)) < 2 else m
    return transpose(X) if not rowvar and shape_of(X)[0] != 1 else X


@implements(np.corrcoef)
def corrcoef(x, y=None, rowvar=True, bias=np._NoValue, ddof=np._NoValue, *, dtype=None):
    """np.corrcoef: cov normalized by the standard deviations on its diagonal, clipped to [-1, 1]."""
    c = cov(x, y, rowvar, dtype=dtype)
    if len(shape_of(c)) == 0:
        return divide(c, c)
    d = sqrt(diagonal(c))
    c = divide(divide(c, expand_dims(d, 1)), expand_dims(d, 0))
    return clip(c, -1.0, 1.0)

