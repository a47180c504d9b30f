"""Indexing: x[key], x[key] = v, and the primitives they reduce to.

`gather(x, idx, axis)` takes the slices of x along `axis` at the integer array
idx (negative indices count from the end); `scatter_add(g, idx, axis, size)`
adds them back into zeros, accumulating repeated indices, which makes the two
each other's adjoints. `scatter_set(x, idx, v, axis)` is x with those slices
replaced by v (of repeated indices, the last write wins, as in NumPy).

`getitem` reduces any NumPy index with a shape known when tracing (integers,
slices, None, Ellipsis, integer arrays, boolean masks whose value is known) to
`slice`, `reshape`, `transpose` and one `gather` (several index arrays index
the flattened axes they address). Basic indexing gives a view: updating it in
place updates the array it was taken from (`numpy_api.write_into`).
`setitem` is `update_slice` for basic keys and `scatter_set` for advanced ones.
"""
import builtins
import operator

import numpy as np

from ..buffers import unwrap
from ..core import EagerBox, Tensor, bind, known_value
from ..errors import STATIC_HINT, NotSupportedError, ShapeError, where
from ..numpy_api import (as_operand, broadcast_shapes, broadcast_to, cast, lift, no_out, norm_axis,
                         reshape, runtime_check, shape_of, transpose, view_of, write_into,
                         zeros_like)
from .elementwise import add, equal, less, maximum, minimum, multiply, where_
from .masked import MaskedSelection
from .reduce import amax, amin
from .registry import implements, method, register
from .shape import ravel, slice_dims


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


def _rows(a, axis, k):
    """a (axis dims of an index of rank k at `axis`) as (index position, rest...)."""
    a = np.asarray(a)
    return np.moveaxis(a.reshape(a.shape[:axis] + (-1,) + a.shape[axis + k:]), axis, 0)


def _scatter_impl(g, idx, axis, size):
    g = np.asarray(g)
    idx = np.asarray(idx)
    out = np.zeros(g.shape[:axis] + (size,) + g.shape[axis + idx.ndim:], dtype=g.dtype)
    om = np.moveaxis(out, axis, 0)  # a view: writes land in `out`
    np.add.at(om, np.where(idx < 0, idx + size, idx).reshape(-1), _rows(g, axis, idx.ndim))
    return out


register("gather", "index", _gather_abs, lambda x, idx, axis: np.take(x, idx, axis=axis),
         (lambda g, out, x, idx, axis: bind("scatter_add", g, idx, axis=axis, size=x.shape[axis]), None))
# zeros of the gathered-from shape with g added at idx (repeats accumulate); adjoint of gather
register("scatter_add", "index", _scatter_abs, _scatter_impl,
         (lambda g, out, u, idx, axis, size: bind("gather", g, idx, axis=axis), None))


def _scatter_set_abs(x, idx, v, axis):
    if not np.issubdtype(idx[1], np.integer):
        raise ShapeError(f"scatter_set index must be integer, got {np.dtype(idx[1]).name}")
    s = tuple(x[0])
    want = s[:axis] + tuple(idx[0]) + s[axis + 1:]
    if tuple(v[0]) != want or np.dtype(v[1]) != np.dtype(x[1]):
        raise ShapeError(f"scatter_set: values {tuple(v[0])} {np.dtype(v[1]).name} do not fit "
                         f"{want} {np.dtype(x[1]).name}")
    return s, np.dtype(x[1])


def _scatter_set_impl(x, idx, v, axis):
    out = np.array(x, copy=True)
    idx = np.asarray(idx)
    # NumPy assigns in index order, so of repeated indices the last one's value stays
    np.moveaxis(out, axis, 0)[idx.reshape(-1)] = _rows(v, axis, idx.ndim)
    return out


def _winners(idx, n):
    """True where idx[j] is the last occurrence of its index: the write scatter_set keeps."""
    if int(np.prod(idx.shape, dtype=np.int64)) <= 1:
        # one index (a rerolled dynamic programme's cell): it wins, no search per iteration
        return np.ones(tuple(idx.shape), dtype=bool)
    flat = reshape(idx, (-1,))
    order = np.arange(int(np.prod(idx.shape, dtype=np.int64)), dtype=np.int64)
    none = np.full((n,), -1, dtype=np.int64)
    last = bind("scatter_set", *lift([flat, none])[1:], flat, order, axis=0)
    return reshape(equal(bind("gather", last, flat, axis=0), order), idx.shape)


def _scatter_set_vjp_v(g, out, x, idx, v, axis):
    gv = bind("gather", g, idx, axis=axis)
    k, nd = len(idx.shape), len(gv.shape)
    win = reshape(_winners(idx, x.shape[axis]), (1,) * axis + tuple(idx.shape) + (1,) * (nd - axis - k))
    return where_(broadcast_to(win, gv.shape), gv, 0)


def _scatter_add_to_impl(x, idx, v, axis):
    return np.asarray(x) + _scatter_impl(v, idx, axis, np.shape(x)[axis])


# x with the slices v added at idx along `axis` (repeats accumulate): x + scatter_add(v, idx),
# as the CPU back end computes it, into x's buffer where x dies there. Traced programs never
# hold it: codegen/scatters.py's `accumulate_scatters` makes it of a sum with a scatter_add in it
register("scatter_add_to", "index", _scatter_set_abs, _scatter_add_to_impl,
         (lambda g, out, x, idx, v, axis: g, None, lambda g, out, x, idx, v, axis: bind("gather", g, idx, axis=axis)),
         host_only="rows added to a value (scatter_add_to: the CPU code generator's form of x + scatter_add)",
         onnx="made by the CPU code generator only: exported graphs hold scatter_add and add")


# x with the slices at idx along `axis` set to v: item assignment with index arrays
register("scatter_set", "index", _scatter_set_abs, _scatter_set_impl,
         (lambda g, out, x, idx, v, axis: bind("scatter_set", g, idx, zeros_like(v, g.dtype), axis=axis),
          None, _scatter_set_vjp_v))


# ---- parsing an index ---------------------------------------------------------------------------
_MASK_HELP = ("its result's shape depends on the data, which a compiled function must know when "
              "it is traced; x[mask] followed by elementwise operations and reductions (np.sum(x[mask] ** 2)) "
              "is supported, or use np.where(mask, x, 0) with reductions (np.sum(np.where(mask, x, 0))), "
              "or x[mask] = v written as x = np.where(mask, v, x)")


@implements(np.nonzero)
def nonzero(a):
    """np.nonzero (and one-argument np.where): positions, which carry no gradient. Eagerly, those
    of the recorded value; of a traced value their number depends on the data, so they are
    refused with what to write instead."""
    if isinstance(a, EagerBox):
        return np.nonzero(np.asarray(a.value))
    if isinstance(a, Tensor):
        raise NotSupportedError(f"np.nonzero / np.where(cond) of a traced value: {_NONZERO_HELP}{where()}")
    return np.nonzero(a)


_NONZERO_HELP = ("the number of positions depends on the data, which a compiled function must know when it "
                 "is traced; index with the mask itself (x[cond] followed by elementwise operations and "
                 "reductions), or use np.where(cond, x, 0)")


class _Mask:
    """A boolean mask in an index whose value is only known when the function runs."""
    __slots__ = ("mask",)

    def __init__(self, mask):
        self.mask = mask


def _index_array(k):
    """An index item that is an array: ('arr', integer array) or a mask (ndarray or _Mask)."""
    if isinstance(k, Tensor):
        if k.dtype == bool:
            value = known_value(k)
            return _Mask(k) if value is None else value
        if k.dtype.kind not in "iu":
            raise IndexError(f"arrays used as indices must be of integer (or boolean) type, not "
                             f"{k.dtype.name}{where()}")
        # the kernels index with int64 (an unsigned index above its range is out of bounds)
        return ("arr", cast(k, np.int64))
    a = np.asarray(k) if not isinstance(k, list) or not builtins.any(isinstance(e, Tensor) for e in k) \
        else None
    if a is None or a.dtype == object:
        t = as_operand(k)          # a list holding traced integers: stacked into one array
        return _index_array(t)
    if a.dtype == bool:
        return a
    if a.size == 0 and a.dtype.kind == "f":
        a = a.astype(np.int64)
    if a.dtype.kind not in "iu":
        raise IndexError(f"arrays used as indices must be of integer (or boolean) type, not "
                         f"{a.dtype.name}{where()}")
    if a.dtype.kind == "u":        # the kernels index with int64; larger values are out of range
        if a.size and a.max() > np.iinfo(np.int64).max:
            raise IndexError(f"index {a.max()} is out of bounds{where()}")
        a = a.astype(np.int64)
    return ("arr", a)


def _parse(shape, key, masks_allowed=False):
    """key as a list with one item per index position: None, a slice, an int, or ('arr', a)
    (a: integer ndarray or Tensor); Ellipsis expanded, known masks turned into their
    nonzero() arrays. A traced mask stays a `_Mask` if `masks_allowed`."""
    if not isinstance(key, tuple):
        key = (key,)
    items = []
    for k in map(unwrap, key):
        if k is None or k is Ellipsis:
            items.append(k)
        elif isinstance(k, slice):
            bounds = [e for e in (k.start, k.stop, k.step) if isinstance(e, Tensor)]
            if bounds:
                weak = f" If a bound comes from a Python int argument (x[:n]), {STATIC_HINT}" \
                    if builtins.any(e.weak for e in bounds) else ""
                raise NotSupportedError(
                    "a slice with traced bounds (x[i:i + n] with i traced) has a length known only "
                    f"when the function runs; index with x[i + np.arange(n)] instead{where()}.{weak}")
            items.append(k)
        elif isinstance(k, (bool, np.bool_)):
            raise NotSupportedError(f"a boolean scalar as an index (x[True]) is not supported{where()}")
        elif isinstance(k, (int, np.integer)):
            items.append(int(k))
        elif isinstance(k, (Tensor, list, tuple, np.ndarray)):
            items.append(_index_array(k))
        elif isinstance(k, range):         # NumPy takes a range as the array of its integers
            items.append(_index_array(np.arange(k.start, k.stop, k.step, dtype=np.int64)))
        elif hasattr(k, "__index__"):      # an integer-like object, as NumPy takes it
            items.append(operator.index(k))
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) "
                             f"and integer or boolean arrays are valid indices, not "
                             f"{type(k).__name__}{where()}")
    if builtins.sum(k is Ellipsis for k in items) > 1:
        raise IndexError(f"an index can only have a single ellipsis ('...'){where()}")

    def width(k):
        if k is None or k is Ellipsis:
            return 0
        if isinstance(k, np.ndarray):
            return builtins.max(k.ndim, 1)
        if isinstance(k, _Mask):
            return builtins.max(len(k.mask.shape), 1)
        return 1
    n_real = builtins.sum(width(k) for k in items)
    if n_real > len(shape):
        raise IndexError(f"too many indices for array: array is {len(shape)}-dimensional, but "
                         f"{n_real} were indexed{where()}")
    fill = [slice(None)] * (len(shape) - n_real)
    if Ellipsis in [k for k in items if not isinstance(k, (tuple, np.ndarray, _Mask))]:
        i = [j for j, k in enumerate(items) if k is Ellipsis][0]
        items = items[:i] + fill + items[i + 1:]
    else:
        items = items + fill

    out, dim = [], 0
    for k in items:
        if isinstance(k, _Mask):
            if not masks_allowed:
                raise NotSupportedError(f"indexing with a traced boolean mask is not supported: "
                                        f"{_MASK_HELP}{where()}")
            out.append(k)
        elif isinstance(k, np.ndarray):      # a known mask: the positions it selects
            m = builtins.max(k.ndim, 1)
            if k.ndim == 0:
                raise NotSupportedError(f"a 0-d boolean mask as an index is not supported{where()}")
            for j, n in enumerate(k.shape):
                if n != shape[dim + j]:
                    raise IndexError(f"boolean index did not match indexed array along axis "
                                     f"{dim + j}; size of axis is {shape[dim + j]} but size of "
                                     f"corresponding boolean axis is {n}{where()}")
            out += [("arr", a.astype(np.int64)) for a in np.nonzero(k)]
            dim += m
            continue
        else:
            out.append(k)
        dim += width(k)
    return out


def _int_bounds(i, n, dim):
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}{where()}")
    return i % n


# ---- x[key] -------------------------------------------------------------------------------------
@method("getitem")
def getitem(x, key):
    """x[key]: basic indexing (a view), integer arrays and known boolean masks (a copy); x[mask]
    for a traced mask over leading axes is a `MaskedSelection` (ops/masked.py)."""
    x = as_operand(x)
    shape = tuple(shape_of(x))
    items = _parse(shape, key, masks_allowed=True)
    masks = [k for k in items if isinstance(k, _Mask)]
    if not masks:
        return _getitem(x, items)
    if len(masks) > 1 or not isinstance(items[0], _Mask) or builtins.any(
            not (isinstance(k, slice) and k.indices(n) == (0, n, 1))
            for k, n in zip(items[1:], shape[len(masks[0].mask.shape):])):
        raise NotSupportedError(f"indexing with a traced boolean mask is supported only alone (x[mask], "
                                f"the mask over x's leading axes): {_MASK_HELP}{where()}")
    mask = masks[0].mask
    m = len(mask.shape)
    if tuple(mask.shape) != shape[:m]:
        raise IndexError(f"boolean index of shape {tuple(mask.shape)} does not match the indexed array's "
                         f"shape {shape}{where()}")
    return MaskedSelection(x, mask)


def _basic_params(shape, items):
    """starts, stops, steps of the slice a basic index takes (an integer takes one element),
    the dims integers index, and the index's result shape."""
    starts, stops, steps, int_dims, result = [], [], [], [], []
    dim = 0
    for k in items:
        if k is None:
            result.append(1)
            continue
        n = shape[dim]
        if isinstance(k, slice):
            a, b, c = k.indices(n)
            starts.append(a), stops.append(b), steps.append(c)
            result.append(len(range(a, b, c)))
        elif isinstance(k, int):
            i = _int_bounds(k, n, dim)
            starts.append(i), stops.append(i + 1), steps.append(1)
            int_dims.append(dim)
        else:          # an index array: the whole axis, gathered from afterwards
            starts.append(0), stops.append(n), steps.append(1)
        dim += 1
    return tuple(starts), tuple(stops), tuple(steps), int_dims, tuple(result)


def _is_array(k):
    return isinstance(k, tuple)


def _getitem(x, items):
    shape = tuple(shape_of(x))
    arrays = [k[1] for k in items if _is_array(k)]
    if not isinstance(x, Tensor) and not builtins.any(isinstance(a, Tensor) for a in arrays):
        return np.asarray(x)[tuple(k[1] if _is_array(k) else k for k in items)]
    starts, stops, steps, int_dims, _ = _basic_params(shape, items)
    y = x
    if (starts, stops, steps) != ((0,) * len(shape), shape, (1,) * len(shape)):
        y = bind("slice", x, starts=starts, stops=stops, steps=steps) if isinstance(x, Tensor) \
            else np.asarray(x)[tuple(slice(a, b if b >= 0 else None, c) for a, b, c in zip(starts, stops, steps))]
    if int_dims:
        y = reshape(y, [s for d, s in enumerate(shape_of(y)) if d not in int_dims])
    if arrays:
        y = _advanced(y, items)
    elif builtins.any(k is None for k in items):
        y = reshape(y, _basic_params(shape, items)[4])
    if arrays or not isinstance(x, Tensor):
        return y
    if y is x:
        y = x.rebind(x.node)
    if len(int_dims) == len(shape) and not builtins.any(k is None for k in items):
        # an integer for every axis: NumPy's result is a scalar, a copy (`old = y[0]; y[0] = v`
        # keeps the old value; a view had taken the new one)
        return y
    return view_of(y, x, lambda base: _getitem(base, items), lambda base, v: _set_basic(base, items, v),
                   _contiguous(shape, starts, stops, steps))


def _contiguous(shape, starts, stops, steps):
    """Is the strided slice of a C-ordered array of `shape` C-contiguous itself?"""
    strides = np.cumprod((1,) + tuple(shape[:0:-1]))[::-1]
    sizes = slice_dims(starts, stops, steps)
    want = 1
    for d in reversed(range(len(shape))):
        if sizes[d] > 1 and strides[d] * steps[d] != want:
            return False
        want *= sizes[d]
    return True


def _advanced(y, items):
    """Index y (x sliced, integer-indexed dims dropped) by the key's index arrays, and place
    their broadcast dims as NumPy does: where the first one was if the arrays (and integers)
    stand together in the key, else first."""
    kept = [k for k in items if k is not None and not isinstance(k, int)]      # y's dims
    axes = [d for d, k in enumerate(kept) if _is_array(k)]
    arrays = [k[1] for k in items if _is_array(k)]
    ys = list(shape_of(y))
    if len(arrays) == 1:
        bshape = tuple(shape_of(arrays[0]))
        y = bind("gather", y, arrays[0], axis=axes[0])
        at = axes[0]                  # where gather put the index dims
    else:
        # several arrays index the axes they address flattened into one, at the position
        # sum_i idx_i * stride_i (each idx_i bounds-checked on its own axis)
        bshape = broadcast_shapes(*[shape_of(a) for a in arrays])
        flat, stride = None, 1
        for d, idx in reversed(list(zip(axes, arrays))):
            term = _normalized(idx, ys[d], d)
            term = multiply(term, stride) if stride != 1 else term
            flat = term if flat is None else add(flat, term)
            stride *= ys[d]
        rest = [d for d in range(len(ys)) if d not in axes]
        y = reshape(transpose(y, axes + rest), (stride,) + tuple(ys[d] for d in rest))
        y = bind("gather", *lift([y, broadcast_to(flat, bshape)]), axis=0)
        at = 0
    positions = [i for i, k in enumerate(items) if _is_array(k) or isinstance(k, int)]
    together = positions == list(range(positions[0], positions[-1] + 1))
    to = axes[0] if together else 0
    nb, nd = len(bshape), len(shape_of(y))
    if at != to:
        others = [i for i in range(nd) if not at <= i < at + nb]
        y = transpose(y, others[:to] + list(range(at, at + nb)) + others[to:])
    if builtins.any(k is None for k in items):
        cur = list(shape_of(y))
        out, j, placed = [], 0, False
        if not together:
            out, j, placed = cur[:nb], nb, True
        for k in items:
            if isinstance(k, int):
                continue
            if k is None:
                out.append(1)
            elif _is_array(k):
                if not placed:
                    out += cur[j:j + nb]
                    j += nb
                    placed = True
            else:
                out.append(cur[j])
                j += 1
        y = reshape(y, out + cur[j:])
    return y


def _normalized(idx, n, dim):
    """Index array idx for an axis of size n with negative entries counted from the end, and
    its bounds checked (now if it is known, else when the function runs)."""
    if not isinstance(idx, Tensor) or known_value(idx) is not None:
        a = np.asarray(known_value(idx) if isinstance(idx, Tensor) else idx)
        bad = (a < -n) | (a >= n)
        if bad.any():
            raise IndexError(f"index {a[bad].reshape(-1)[0]} is out of bounds for axis {dim} with "
                             f"size {n}{where()}")
        if not isinstance(idx, Tensor):
            if a.dtype == np.int64 and not a.flags.writeable and not (a < 0).any():
                return a        # a memoized index array stays one object: one constant (core.const)
            return np.where(a < 0, a + n, a).astype(np.int64)
    idx = cast(idx, np.int64)
    if int(np.prod(idx.shape, dtype=np.int64)):
        runtime_check(amax(idx), "index", (n, dim))
        runtime_check(amin(idx), "index", (n, dim))
    return where_(less(idx, 0), add(idx, n), idx)


def take(a, indices, axis=None, out=None):
    """np.take(a, indices, axis) with mode="raise" (ops/order.py registers np.take's modes)."""
    no_out(out, "np.take")
    if axis is None:
        return getitem(ravel(a), indices)
    nd = len(shape_of(a))
    axis = norm_axis(axis, nd)
    return getitem(a, (slice(None),) * axis + (indices,))


# ---- x[key] = v ---------------------------------------------------------------------------------
@method("setitem")
def setitem(x, key, value):
    """x[key] = value: the array (and what it is a view of, and its views) takes the new value."""
    items = _parse(x.shape, key, masks_allowed=True)
    masks = [k for k in items if isinstance(k, _Mask)]
    if masks:
        new = _set_masked(x, items, masks, value)
    elif builtins.any(_is_array(k) for k in items):
        new = _set_advanced(x, items, value)
    else:
        new = _set_basic(x, items, value)
    write_into(x, new, "x[...] = v")


def _fit(value, shape, dtype):
    """value cast to dtype (as NumPy's item assignment does, unsafe casts included) and
    broadcast to shape; leading length-1 dims beyond shape are dropped, as NumPy does."""
    v = as_operand(value)
    vs = tuple(shape_of(v))
    if len(vs) > len(shape):
        if builtins.any(d != 1 for d in vs[:len(vs) - len(shape)]):
            raise ValueError(f"could not broadcast input array from shape {vs} into shape "
                             f"{tuple(shape)}{where()}")
        v = reshape(v, vs[len(vs) - len(shape):])
    try:
        np.broadcast_shapes(tuple(shape_of(v)), tuple(shape))
    except ValueError:
        raise ValueError(f"could not broadcast input array from shape {vs} into shape "
                         f"{tuple(shape)}{where()}") from None
    if np.dtype(v.dtype).kind == "c" and np.dtype(dtype).kind != "c":
        raise TypeError(f"cannot assign complex values to a {np.dtype(dtype).name} array{where()}")
    return broadcast_to(cast(v, dtype), tuple(np.broadcast_shapes(tuple(shape_of(v)), tuple(shape))))


def _set_basic(x, items, value):
    """x with x[items] (a basic index) set to value, as a new value."""
    shape = tuple(x.shape)
    starts, stops, steps, _, result = _basic_params(shape, items)
    v = _fit(value, result, x.dtype)
    if tuple(shape_of(v)) != result:
        raise ValueError(f"could not broadcast input array from shape {tuple(shape_of(v))} into shape "
                         f"{result}{where()}")
    v = reshape(v, slice_dims(starts, stops, steps))
    if (starts, stops, steps) == ((0,) * len(shape), shape, (1,) * len(shape)):
        return lift([x, v])[1]
    return bind("update_slice", *lift([x, v]), starts=starts, stops=stops, steps=steps)


def _one_array_axis(shape, items):
    """(axis, idx) when the parsed key is one index array with whole slices elsewhere
    (x[..., idx, ...]: whole slices at idx along one axis), else None."""
    arrays = [(d, k[1]) for d, k in enumerate(items) if _is_array(k)]
    if len(arrays) == 1 and builtins.all(
            _is_array(k) or (isinstance(k, slice) and k.indices(shape[d]) == (0, shape[d], 1))
            for d, k in enumerate(items)):
        return arrays[0]
    return None


def _set_advanced(x, items, value):
    shape = tuple(x.shape)
    one = _one_array_axis(shape, items)
    if one is not None:
        # x[..., idx, ...] = v with whole slices elsewhere: the slices at idx along one axis
        axis, idx = one
        idx = cast(idx, np.int64)
        v = _fit(value, shape[:axis] + tuple(shape_of(idx)) + shape[axis + 1:], x.dtype)
        return bind("scatter_set", *lift([x, idx, v]), axis=axis)
    # any other index: the flat positions it selects, from an array of positions
    positions = _getitem(np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape),
                         items)
    v = _fit(value, tuple(shape_of(positions)), x.dtype)
    flat = bind("scatter_set", *lift([ravel(x), ravel(positions), ravel(v)]), axis=0)
    return reshape(flat, shape)


def _set_masked(x, items, masks, value):
    """x[mask] = v for a mask known only when the function runs: np.where(mask, v, x), which
    is NumPy's result when v is one value or one row for every selected position."""
    mask = masks[0].mask
    lead = [k for k in items if not (isinstance(k, slice) and k == slice(None))]
    if len(masks) > 1 or len(lead) != 1 or not isinstance(items[0], _Mask):
        raise NotSupportedError(f"a traced boolean mask in an index is supported only alone "
                                f"(x[mask] = v): {_MASK_HELP}{where()}")
    m, shape = len(mask.shape), tuple(x.shape)
    if tuple(mask.shape) != shape[:m]:
        raise IndexError(f"boolean index of shape {tuple(mask.shape)} does not match the indexed "
                         f"array's shape {shape}{where()}")
    if isinstance(value, MaskedSelection) and isinstance(value.mask, Tensor) \
            and value.mask.node is mask.node and tuple(shape_of(value.values)) == shape:
        # x[mask] = f(x[mask]) (`x[x > t] *= 2`): the selection computed on every row, kept
        # where the mask is set
        value, row = value.values, shape[m:]
        mask = broadcast_to(reshape(mask, tuple(mask.shape) + (1,) * len(row)), shape)
        return where_(mask, _fit(as_operand(value), shape, x.dtype), x)
    v = as_operand(value)
    row = shape[m:]
    vs = tuple(shape_of(v))
    try:
        np.broadcast_shapes(vs, row)
        fits = len(vs) <= len(row)
    except ValueError:
        fits = False
    if not fits:
        raise NotSupportedError(f"x[mask] = v with a traced mask needs v to be one value or one "
                                f"{row} row for every selected position (shape {vs} given), since how "
                                f"many positions are selected is only known when the function runs; "
                                f"{_MASK_HELP}{where()}")
    mask = broadcast_to(reshape(mask, tuple(mask.shape) + (1,) * len(row)), shape)
    return where_(mask, _fit(v, shape, x.dtype), x)


# ---- in-place NumPy functions -------------------------------------------------------------------
def _positions(x, key):
    """The flat positions of x that x[key] selects (an integer array of x[key]'s shape)."""
    shape = tuple(shape_of(x))
    grid = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)
    return _getitem(grid, _parse(shape, key))


def ufunc_at(ufunc, x, key, value=None):
    """np.add.at(x, key, v) (and subtract, maximum, minimum): unbuffered, so repeated positions
    accumulate."""
    if ufunc not in (np.add, np.subtract, np.maximum, np.minimum) or value is None:
        raise NotSupportedError(f"np.{ufunc.__name__}.at is not supported (np.add.at, np.subtract.at, "
                                f"np.maximum.at and np.minimum.at are){where()}")
    if not isinstance(x, Tensor):
        raise NotSupportedError(f"np.{ufunc.__name__}.at into a NumPy array from a traced value is not "
                                f"supported: it would change an array outside the trace{where()}")
    if ufunc in (np.maximum, np.minimum):
        return _extreme_at(ufunc, x, key, value)
    shape = tuple(x.shape)
    one = _one_array_axis(shape, _parse(shape, key))
    if one is not None:
        # a GNN's np.add.at(agg, dst, messages): whole slices added at idx along one axis,
        # one index per slice, not per element
        axis, idx = one
        if not isinstance(idx, Tensor):
            idx = _normalized(idx, shape[axis], axis)       # (known: its bounds checked now)
        v = _fit(value, shape[:axis] + tuple(shape_of(idx)) + shape[axis + 1:], x.dtype)
        total = bind("scatter_add", *lift([v, idx]), axis=axis, size=shape[axis])
    else:
        pos = _positions(x, key)
        v = _fit(value, tuple(shape_of(pos)), x.dtype)
        size = int(np.prod(shape, dtype=np.int64))
        total = bind("scatter_add", *lift([ravel(v), ravel(pos)]), axis=0, size=size)
        total = reshape(total, shape)
    write_into(x, ufunc(x, total), f"np.{ufunc.__name__}.at")


def _extreme_at(ufunc, x, key, value):
    """np.maximum.at / np.minimum.at: each selected position takes the extreme of its value and
    of every update aimed at it. The updates are sorted by (position, value) so that each
    position's extreme comes last among its updates, which is the one `scatter_set` keeps (NaN
    sorts last, so it wins, as it propagates in NumPy's); positions no update aims at take the
    ufunc's identity, which leaves them as they were. The gradient reaches x where it stays the
    extreme and the one winning update of each position."""
    shape = tuple(x.shape)
    pos = _positions(x, key)
    v = ravel(_fit(value, tuple(shape_of(pos)), x.dtype))
    pos = ravel(pos)
    n = int(np.prod(shape, dtype=np.int64))
    if shape_of(v)[0] == 0:
        return
    dt = np.dtype(x.dtype)
    larger = ufunc is np.maximum
    if dt.kind == "f":
        order = np.lexsort((v if larger else np.negative(v), pos))
    else:
        order = np.lexsort((v, pos))
        if not larger:          # each position's smallest last (integers: no NaN to keep last)
            order = order[::-1]
    if dt.kind == "f":
        identity = -np.inf if larger else np.inf
    elif dt.kind == "b":
        identity = not larger
    else:
        info = np.iinfo(dt)
        identity = info.min if larger else info.max
    base = np.full((n,), identity, dt)
    pos, v = (bind("gather", *lift([a, order]), axis=0) for a in (pos, v))
    best = bind("scatter_set", *lift([base, pos, v]), axis=0)
    write_into(x, ufunc(x, reshape(best, shape)), f"np.{ufunc.__name__}.at")


@implements(np.bincount)
def bincount(x, weights=None, minlength=0):
    """np.bincount: the weights (or ones) summed into bins by the non-negative integers `x`.
    Integers known while tracing make max(x) + 1 bins (at least `minlength`), as NumPy's;
    integers known only when the function runs make `minlength` bins, and run-time checks
    raise where NumPy's result would have more. A scatter-add: its gradient gathers."""
    known = known_value(x) if isinstance(x, Tensor) else np.asarray(x)
    if known is None:
        minlength = operator.index(minlength)
        if minlength <= 0:
            raise NotSupportedError(f"np.bincount of traced integers needs minlength=: the number of bins, "
                                    f"max(x) + 1, would only be known when the function runs; pass "
                                    f"minlength=n for n bins (values must stay below n){where()}")
    ndim, dtype = len(shape_of(x)), (x if known is None else known).dtype
    if ndim != 1:
        raise ValueError("object too deep for desired array" if ndim > 1 else "object of too small depth "
                         "for desired array")
    n = shape_of(x)[0]
    if dtype.kind not in "biu" and (n or known is None):
        raise TypeError(f"Cannot cast array data from dtype('{dtype}') to dtype('int64') according to "
                        f"the rule 'safe'")
    if known is None:
        if n == 0:
            return np.zeros(minlength, np.intp if weights is None else np.float64)
        x, size = cast(x, np.int64), minlength
        runtime_check(amin(x), "bincount_negative", None)
        runtime_check(amax(x), "bincount_bins", minlength)
    else:
        if n and known.min() < 0:
            raise ValueError("'list' argument must have no negative elements")
        minlength = operator.index(minlength)       # (NumPy's TypeError for None and floats)
        if minlength < 0:
            raise ValueError("'minlength' must not be negative")
        x = known.astype(np.intp)
        size = builtins.max(minlength, int(x.max()) + 1 if n else 0)
        if weights is None or not n:
            return np.bincount(x, minlength=size)   # (of no values NumPy counts, whatever the weights)
    if weights is None:
        w = np.ones(n, np.intp)
    else:
        w = cast(as_operand(weights), np.float64)
        if tuple(shape_of(w)) != (n,):
            raise ValueError("The weights and list don't have the same length.")
    if known is None:
        # a value out of range counts in an end bin, and the run-time checks then raise NumPy's
        # error (or say minlength was too small) instead of returning the counts
        x = minimum(maximum(x, 0), minlength - 1)
    return bind("scatter_add", *lift([w, x]), axis=0, size=size)


@implements(np.put)
def put(a, ind, v, mode="raise"):
    if mode != "raise":
        raise NotSupportedError(f"np.put with mode={mode!r} is not supported{where()}")
    _require_tensor(a, "np.put")
    flat = ravel(a)
    setitem(flat, (ind,), v)


@implements(np.copyto)
def copyto(dst, src, casting="same_kind", where=True):
    _require_tensor(dst, "np.copyto")
    src = as_operand(src)
    if not np.can_cast(src.dtype, dst.dtype, casting):
        raise TypeError(f"Cannot cast array data from dtype('{src.dtype}') to dtype('{dst.dtype}') "
                        f"according to the rule '{casting}'{_where()}")
    new = broadcast_to(cast(src, dst.dtype), dst.shape)
    if where is not True:
        new = where_(broadcast_to(as_operand(where), dst.shape), new, dst)
    write_into(dst, lift([dst, new])[1], "np.copyto")


_where = where


def _check_safe_cast(values, dtype):
    """np.putmask's and np.place's rule: an array of values casts safely (Python scalars are
    NumPy's to convert)."""
    if isinstance(values, (bool, int, float)):
        return
    vdt = as_operand(values).dtype
    if not np.can_cast(vdt, dtype, "safe"):
        raise TypeError(f"Cannot cast array data from {vdt!r} to {np.dtype(dtype)!r} according to the rule "
                        f"'safe'{_where()}")


@implements(np.putmask)
def putmask(a, mask, values):
    """np.putmask: a's elements where mask is true take values[n % len(values)], n their flat
    position (np.where, written into a and what a is a view of)."""
    _require_tensor(a, "np.putmask")
    size = int(np.prod(a.shape, dtype=np.int64))
    mask = as_operand(mask)
    if int(np.prod(shape_of(mask), dtype=np.int64)) != size:
        raise ValueError(f"putmask: mask and data must be the same size{_where()}")
    _check_safe_cast(values, a.dtype)
    v = ravel(as_operand(values))
    n = shape_of(v)[0]
    if n == 0:
        return
    if n != size:
        v = getitem(v, (np.arange(size, dtype=np.int64) % n,))
    new = where_(reshape(cast(mask, bool), a.shape), reshape(cast(v, a.dtype), a.shape), a)
    write_into(a, lift([a, new])[1], "np.putmask")


@implements(np.place)
def place(arr, mask, vals):
    """np.place: the k-th element of arr where mask is true takes vals[k % len(vals)] (a scatter at
    known positions, or, for a traced mask, np.where with the running count of its truths)."""
    _require_tensor(arr, "np.place")
    _check_safe_cast(vals, arr.dtype)
    size = int(np.prod(arr.shape, dtype=np.int64))
    if int(np.prod(shape_of(mask), dtype=np.int64)) != size:
        raise ValueError(f"place: mask and data must be the same size{_where()}")
    v = ravel(as_operand(vals))
    n = shape_of(v)[0]
    known = known_value(mask)
    if known is not None:
        positions = np.flatnonzero(known)
        if positions.size == 0:
            return
        if n == 0:
            raise ValueError("Cannot insert from an empty array!")
        picked = getitem(v, (np.arange(positions.size, dtype=np.int64) % n,))
        setitem(ravel(arr), (positions,), cast(picked, arr.dtype))
        return
    if n == 0:
        raise NotSupportedError(f"np.place with empty vals and a traced mask is not supported{_where()}")
    m = reshape(cast(as_operand(mask), bool), (size,))
    k = np.cumsum(cast(m, np.int64)) - 1
    picked = getitem(v, (maximum(k, 0) % n,))
    new = where_(m, cast(picked, arr.dtype), ravel(arr))
    write_into(arr, lift([arr, reshape(new, arr.shape)])[1], "np.place")


@implements(np.fill_diagonal)
def fill_diagonal(a, val, wrap=False):
    _require_tensor(a, "np.fill_diagonal")
    shape = a.shape
    if len(shape) < 2 or (len(shape) > 2 and len(set(shape)) != 1):
        raise ValueError("array must be at least 2-d and, above 2-d, have all dimensions equal")
    if wrap and len(shape) == 2 and shape[0] > shape[1] + 1:
        raise NotSupportedError(f"np.fill_diagonal with wrap=True is not supported{_where()}")
    n = builtins.min(shape)
    step = int(np.sum(np.cumprod((1,) + shape[:0:-1])))       # 1 + n1 + n1*n2 + ...
    positions = np.arange(n, dtype=np.int64) * step
    flat = ravel(a)
    val = as_operand(val)
    if len(shape_of(val)) and int(np.prod(shape_of(val))) != n:
        val = np.resize(val, n) if not isinstance(val, Tensor) else val
    setitem(flat, (positions,), ravel(val) if len(shape_of(val)) else val)


@implements(np.put_along_axis)
def put_along_axis(arr, indices, values, axis):
    _require_tensor(arr, "np.put_along_axis")
    nd = len(arr.shape)
    if axis is None:
        put(arr, indices, values)
        return
    axis = norm_axis(axis, nd)
    if len(shape_of(indices)) != nd:
        raise ValueError(f"`indices` and `arr` must have the same number of dimensions{_where()}")
    key = []
    for d in range(nd):
        if d == axis:
            key.append(indices)
        else:
            key.append(np.arange(arr.shape[d]).reshape((1,) * d + (-1,) + (1,) * (nd - d - 1)))
    setitem(arr, tuple(key), values)


def _require_tensor(a, name):
    if not isinstance(a, Tensor):
        raise NotSupportedError(f"{name} writing into a NumPy array (not a traced one) is not supported: "
                                f"it would change an array outside the trace{_where()}")


def array_fill(x, value):
    """ndarray.fill(value)."""
    write_into(x, lift([x, broadcast_to(cast(as_operand(value), x.dtype), x.shape)])[1], "x.fill")


method("fill")(array_fill)
method("ufunc_at")(ufunc_at)


def add_reduceat(a, indices, axis=0, dtype=None, out=None):
    """np.add.reduceat for indices known when tracing: sums of a[indices[i]:indices[i + 1]]
    along `axis` (a[indices[i]] where the next index is not larger; the last to the end), as
    one gather of the positions every segment covers and one scatter-add of them into their
    segments, each segment added in order as NumPy does."""
    no_out(out, "np.add.reduceat")
    if isinstance(indices, Tensor):
        raise NotSupportedError(f"np.add.reduceat with traced indices is not supported (the "
                                f"segments' lengths would depend on the data){where()}")
    a = as_operand(a)
    nd = len(shape_of(a))
    axis = norm_axis(axis, nd)
    n = shape_of(a)[axis]
    idx = np.asarray(indices)
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise TypeError(f"np.add.reduceat's indices must be a 1-d array of integers{where()}")
    for i in idx:
        if not 0 <= i < n:
            raise IndexError(f"index {i} out-of-bounds in add.reduceat [0, {n}){where()}")
    positions, segments = [], []
    for k, start in enumerate(idx):
        stop = idx[k + 1] if k + 1 < len(idx) else n
        span = np.arange(start, stop) if start < stop else np.array([start])
        positions.append(span)
        segments.append(np.full(len(span), k))
    if dtype is not None:
        a = cast(a, dtype)
    elif a.dtype == bool or (a.dtype.kind in "iu" and a.dtype.itemsize < 8):
        a = cast(a, np.int64 if a.dtype.kind != "u" or a.dtype == bool else np.uint64)
    if not isinstance(a, Tensor):
        return np.add.reduceat(a, idx, axis=axis)
    rows = bind("gather", a, np.concatenate(positions).astype(np.int64), axis=axis)
    return bind("scatter_add", rows, np.concatenate(segments).astype(np.int64), axis=axis, size=len(idx))
method("add_reduceat")(add_reduceat)
