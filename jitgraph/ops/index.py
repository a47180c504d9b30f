"""Integer-array indexing: the `gather` primitive, its adjoint `scatter_add`, and `x[key]`.

`gather(x, idx, axis)` takes the slices of x along `axis` at the integer array
idx (negative indices count from the end); `scatter_add(g, idx, axis, size)`
adds them back into zeros, accumulating repeated indices, which makes the two
each other's adjoints. `getitem` reduces any supported NumPy index (integers,
slices, None, Ellipsis and one integer array) to `slice`, `reshape`, `gather`
and `transpose` nodes.
"""
import builtins

import numpy as np

from ..core import Tensor, bind
from ..errors import NotSupportedError, ShapeError, where
from ..numpy_api import as_operand, cast, no_out, norm_axis, reshape, shape_of, transpose
from .registry import implements, method, register
from .shape import ravel


# ---- primitives ---------------------------------------------------------------------------------
def _gather_abs(x, idx, axis):
    if not np.issubdtype(idx[1], np.integer):
        raise ShapeError(f"gather index must be integer, got {np.dtype(idx[1]).name}")
    s = tuple(x[0])
    return s[:axis] + tuple(idx[0]) + s[axis + 1:], np.dtype(x[1])


def _scatter_abs(g, idx, axis, size):
    s, k = tuple(g[0]), len(idx[0])
    if s[axis:axis + k] != tuple(idx[0]):
        raise ShapeError(f"scatter_add: update shape {s} does not match index shape {idx[0]}")
    return s[:axis] + (size,) + s[axis + k:], np.dtype(g[1])


def _scatter_impl(g, idx, axis, size):
    g = np.asarray(g)
    idx = np.asarray(idx)
    k = idx.ndim
    out_shape = g.shape[:axis] + (size,) + g.shape[axis + k:]
    out = np.zeros(out_shape, dtype=g.dtype)
    gm = np.moveaxis(g.reshape(g.shape[:axis] + (-1,) + g.shape[axis + k:]), axis, 0)
    om = np.moveaxis(out, axis, 0)  # a view: writes land in `out`
    np.add.at(om, np.where(idx < 0, idx + size, idx).reshape(-1), gm)
    return out


register("gather", "index", _gather_abs, lambda x, idx, axis: np.take(x, idx, axis=axis),
         (lambda g, out, x, idx, axis: bind("scatter_add", g, idx, axis=axis, size=x.shape[axis]), None))
# zeros of the gathered-from shape with g added at idx (repeats accumulate); adjoint of gather
register("scatter_add", "index", _scatter_abs, _scatter_impl,
         (lambda g, out, u, idx, axis, size: bind("gather", g, idx, axis=axis), None))


# ---- the NumPy front end ----------------------------------------------------------------------
def _is_int_array(k):
    if isinstance(k, Tensor):
        return k.dtype.kind in "iu"
    if isinstance(k, (list, np.ndarray)):
        a = np.asarray(k)
        return a.dtype.kind in "iu" or (a.size == 0 and a.dtype.kind == "f")
    return False


def _is_bool_array(k):
    if isinstance(k, Tensor):
        return k.dtype == bool
    if isinstance(k, (list, np.ndarray)):
        return np.asarray(k).dtype == bool
    return False


@method("getitem")
def getitem(x, key):
    """x[key] for basic slicing, integers, None, Ellipsis and one integer index array."""
    x = as_operand(x)
    if not isinstance(key, tuple):
        key = (key,)
    if builtins.any(_is_bool_array(k) for k in key):
        raise NotSupportedError(
            "boolean-mask indexing is not supported: its result shape depends on the data; "
            f"use np.where(mask, x, 0) and reductions instead{where()}")
    shape = tuple(shape_of(x))
    n_real = len([k for k in key if k is not None and k is not Ellipsis])
    if builtins.sum(k is Ellipsis for k in key) > 1:
        raise ShapeError(f"an index can only have a single ellipsis ('...'){where()}")
    if n_real > len(shape):
        raise ShapeError(f"too many indices for array: array is {len(shape)}-dimensional, "
                         f"but {n_real} were indexed{where()}")
    if Ellipsis in [k for k in key if not _is_int_array(k) and not isinstance(k, Tensor)]:
        i = [j for j, k in enumerate(key) if k is Ellipsis][0]
        key = key[:i] + (slice(None),) * (len(shape) - n_real) + key[i + 1:]
    else:
        key = key + (slice(None),) * (len(shape) - n_real)

    starts, stops, steps = [], [], []
    out_dims = []          # description of result dims: ('dim', d) / ('new',) / ('arr',)
    arrays = []            # (position among x's dims, index array)
    adv_positions = []     # key positions of integer-like (advanced) items
    int_dims = []          # dims of x indexed by a plain integer (dropped from the result)
    dim = 0
    for pos, k in enumerate(key):
        if k is None:
            out_dims.append(("new",))
            continue
        n = shape[dim]
        if isinstance(k, slice):
            a, b, c = k.indices(n)
            starts.append(a), stops.append(b), steps.append(c)
            out_dims.append(("dim", dim))
        elif _is_int_array(k):
            starts.append(0), stops.append(n), steps.append(1)
            arrays.append((dim, k))
            adv_positions.append(pos)
            out_dims.append(("arr", dim))
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            i = int(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}{where()}")
            i %= n
            starts.append(i), stops.append(i + 1), steps.append(1)
            int_dims.append(dim)
            adv_positions.append(pos)
        else:
            raise NotSupportedError(f"index {k!r} of type {type(k).__name__} is not supported{where()}")
        dim += 1
    if len(arrays) > 1:
        raise NotSupportedError(
            f"indexing with more than one integer array is not supported; index one axis at a time"
            f"{where()}")

    if not isinstance(x, Tensor) and not (arrays and isinstance(arrays[0][1], Tensor)):
        return np.asarray(x)[key]
    y = x
    if (tuple(starts), tuple(stops), tuple(steps)) != (tuple([0] * len(shape)), shape, tuple([1] * len(shape))):
        y = bind("slice", x, starts=tuple(starts), stops=tuple(stops), steps=tuple(steps)) \
            if isinstance(x, Tensor) else np.asarray(x)[tuple(slice(a, b, c) for a, b, c in zip(starts, stops, steps))]
    if int_dims:
        y = reshape(y, [s for d, s in enumerate(shape_of(y)) if d not in int_dims])
    kept = [d for d in range(len(shape)) if d not in int_dims]
    if arrays:
        adim, idx = arrays[0]
        axis = kept.index(adim)
        idx = idx if isinstance(idx, Tensor) else np.asarray(idx)
        if idx.dtype.kind == "u":       # indices are int64 in the kernels; larger ones are out of range
            if not isinstance(idx, Tensor) and idx.size and idx.max() > np.iinfo(np.int64).max:
                raise IndexError(f"index {idx.max()} is out of bounds for axis {adim} with size "
                                 f"{shape[adim]}{where()}")
            idx = cast(idx, np.int64)
        idx_shape = tuple(shape_of(idx))
        y = bind("gather", y, idx, axis=axis)
        contiguous = adv_positions == list(range(adv_positions[0], adv_positions[-1] + 1))
        if not contiguous and axis != 0:
            nd = len(shape_of(y))
            k = len(idx_shape)
            perm = list(range(axis, axis + k)) + [i for i in range(nd) if not axis <= i < axis + k]
            y = transpose(y, perm)
            out_dims = [("arr",)] + [o for o in out_dims if o[0] != "arr"]
    if builtins.any(o[0] == "new" for o in out_dims):
        # insert the None axes: walk out_dims against the current shape
        cur = list(shape_of(y))
        new_shape, j = [], 0
        for o in out_dims:
            if o[0] == "new":
                new_shape.append(1)
            elif o[0] == "arr":
                k = len(shape_of(arrays[0][1]))
                new_shape.extend(cur[j:j + k])
                j += k
            else:
                new_shape.append(cur[j])
                j += 1
        new_shape.extend(cur[j:])
        y = reshape(y, new_shape)
    return y


@implements(np.take)
def take(a, indices, axis=None, out=None, mode=None):
    no_out(out, "np.take")
    if axis is None:
        return getitem(ravel(a), indices)
    nd = len(shape_of(a))
    axis = norm_axis(axis, nd)
    return getitem(a, (slice(None),) * axis + (indices,))
