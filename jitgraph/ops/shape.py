"""Shape primitives (reshape, transpose, broadcast, slicing, concatenation) and their NumPy functions.

`broadcast` is the one place broadcasting is differentiated: its adjoint sums
over the axes it added or stretched, so no other rule repeats that logic.
`slice` (basic strided slicing) and `pad_slice` (zeros with a slice written, its
adjoint) are each other's adjoints; `update_slice` (an array with a slice
written) is item assignment, `x[1:3] = v`.
"""
import builtins
import itertools
import operator

import numpy as np

from ..core import Tensor, bind, known_value
from ..errors import NotSupportedError, ShapeError, where
from ..numpy_api import (_weak_proxy, as_operand, broadcast_to, cast, full_like, is_contiguous, no_out, norm_axes,
                         norm_axis, ones_like, reshape as _reshape, result_dtype, shape_of, transpose,
                         view_of, zeros_like)
from .reduce import sum
from .registry import implements, register


# ---- primitives ---------------------------------------------------------------------------------
def _reshape_abs(x, shape):
    if int(np.prod(shape, dtype=np.int64)) != int(np.prod(x[0], dtype=np.int64)):
        raise ShapeError(f"cannot reshape {tuple(x[0])} into {tuple(shape)}")
    return tuple(shape), np.dtype(x[1])


def _transpose_abs(x, perm):
    if sorted(perm) != list(range(len(x[0]))):
        raise ShapeError(f"bad permutation {perm} for shape {x[0]}")
    return tuple(x[0][p] for p in perm), np.dtype(x[1])


def _broadcast_abs(x, shape):
    # NumPy's rule: align trailing dims; each source dim is 1 or equal to the target dim
    src = tuple(x[0])
    if len(src) > len(shape) or any(s != 1 and s != d for s, d in zip(reversed(src), reversed(shape))):
        raise ShapeError(f"cannot broadcast {src} to {tuple(shape)}")
    return tuple(shape), np.dtype(x[1])


def unbroadcast(g, x_shape):
    """Sum g over the axes that `broadcast` added or stretched, back to x_shape."""
    lead = len(g.shape) - len(x_shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(x_shape) if d == 1 and g.shape[lead + i] != 1)
    return _reshape(sum(g, axis=axes), x_shape) if axes else _reshape(g, x_shape)


def _no_flops(node):
    return 0


register("reshape", "shape", _reshape_abs, lambda x, shape: np.reshape(x, shape),
         (lambda g, out, x, shape: _reshape(g, x.shape),), flops=_no_flops)
register("transpose", "shape", _transpose_abs, lambda x, perm: np.transpose(x, perm),
         (lambda g, out, x, perm: transpose(g, tuple(np.argsort(perm))),), flops=_no_flops)
register("broadcast", "shape", _broadcast_abs, lambda x, shape: np.broadcast_to(x, shape),
         (lambda g, out, x, shape: unbroadcast(g, x.shape),), flops=_no_flops)


def slice_dims(starts, stops, steps):
    return tuple(len(range(a, b, c)) for a, b, c in zip(starts, stops, steps))


def _slice_abs(x, starts, stops, steps):
    if not len(starts) == len(stops) == len(steps) == len(x[0]):
        raise ShapeError(f"slice of rank {len(starts)} on shape {x[0]}")
    return slice_dims(starts, stops, steps), np.dtype(x[1])


def slices(starts, stops, steps):
    """Python slices for the params of `slice`/`pad_slice` (a negative step can stop
    "before 0", which Python spells as None)."""
    return tuple(slice(a, (None if b < 0 else b), c) for a, b, c in zip(starts, stops, steps))


def _pad_abs(x, shape, starts, stops, steps):
    if slice_dims(starts, stops, steps) != tuple(x[0]):
        raise ShapeError(f"pad_slice: {x[0]} does not fit the slice of {shape}")
    return tuple(shape), np.dtype(x[1])


def _pad_impl(x, shape, starts, stops, steps):
    out = np.zeros(shape, dtype=np.asarray(x).dtype)
    out[slices(starts, stops, steps)] = x
    return out


def _update_abs(x, v, starts, stops, steps):
    if slice_dims(starts, stops, steps) != tuple(v[0]) or len(starts) != len(x[0]):
        raise ShapeError(f"update_slice: {tuple(v[0])} does not fit the slice of {tuple(x[0])}")
    if np.dtype(v[1]) != np.dtype(x[1]):
        raise ShapeError(f"update_slice: dtypes {np.dtype(x[1]).name} and {np.dtype(v[1]).name} differ")
    return tuple(x[0]), np.dtype(x[1])


def _update_impl(x, v, starts, stops, steps):
    out = np.array(x, copy=True)
    out[slices(starts, stops, steps)] = v
    return out


def _update_vjp_x(g, out, x, v, starts, stops, steps):
    return bind("update_slice", g, zeros_like(v, g.dtype), starts=starts, stops=stops, steps=steps)


register("slice", "shape", _slice_abs,
         lambda x, starts, stops, steps: np.asarray(x)[slices(starts, stops, steps)],
         (lambda g, out, x, starts, stops, steps: bind(
             "pad_slice", g, shape=x.shape, starts=starts, stops=stops, steps=steps),))
# zeros of `shape` with x written into the slice; the adjoint of `slice`
register("pad_slice", "shape", _pad_abs, _pad_impl,
         (lambda g, out, x, shape, starts, stops, steps: bind(
             "slice", g, starts=starts, stops=stops, steps=steps),))


# x with the slice set to v (x[1:3, ::2] = v): item assignment and the write-back of views
register("update_slice", "shape", _update_abs, _update_impl,
         (_update_vjp_x,
          lambda g, out, x, v, starts, stops, steps: bind(
              "slice", g, starts=starts, stops=stops, steps=steps)))


def _concat_abs(*xs, axis):
    base = list(xs[0][0])
    total = 0
    for s, d in xs:
        if len(s) != len(base) or any(a != b for i, (a, b) in enumerate(zip(s, base)) if i != axis):
            raise ShapeError(f"concatenate: shapes {[tuple(s) for s, _ in xs]} differ off axis {axis}")
        if np.dtype(d) != np.dtype(xs[0][1]):
            raise ShapeError(f"concatenate: dtypes {[np.dtype(d).name for _, d in xs]} differ")
        total += s[axis]
    base[axis] = total
    return tuple(base), np.dtype(xs[0][1])


class _ConcatRules:
    """Concatenate has any number of inputs: rule i slices out input i's part."""

    def __getitem__(self, i):
        def rule(g, out, *xs, axis):
            start = builtins.sum(x.shape[axis] for x in xs[:i])
            starts, stops, steps = [0] * len(g.shape), list(g.shape), [1] * len(g.shape)
            starts[axis], stops[axis] = start, start + xs[i].shape[axis]
            return bind("slice", g, starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))
        return rule


register("concatenate", "shape", _concat_abs, lambda *xs, axis: np.concatenate(xs, axis=axis),
         _ConcatRules())


# ---- the NumPy front end ----------------------------------------------------------------------
def _reshaped_view(x, shape):
    """x reshaped, as NumPy's view of x when x is C-contiguous (a copy otherwise)."""
    y = _reshape(x, shape)
    if isinstance(x, Tensor) and y is not x and is_contiguous(x):
        out = tuple(y.shape)
        view_of(y, x, lambda b: _reshape(b, out), lambda b, v: _reshape(v, b.shape))
    return y


def _transposed_view(x, perm):
    """x with its axes permuted by perm (a full permutation), as NumPy's view of x."""
    y = transpose(x, perm)
    if isinstance(x, Tensor) and y is not x:
        perm = tuple(perm)
        back = tuple(int(i) for i in np.argsort(perm))
        view_of(y, x, lambda b: transpose(b, perm), lambda b, v: transpose(v, back), contiguous=False)
    return y


@implements(np.reshape, view=True)
def reshape(x, shape=None, order="C", **kw):
    if "newshape" in kw:
        shape = kw.pop("newshape")
    if kw or order not in ("C", "F"):
        raise NotSupportedError(f"reshape with order={order!r} is not supported{where()}")
    x = as_operand(x)
    if order == "F" and isinstance(x, Tensor):
        # Fortran order: the reversed axes reshaped in C order, reversed back; a new array (NumPy
        # copies too, unless x is also Fortran-contiguous), not a view of x
        nd = len(shape_of(x))
        flipped = reshape(transpose_(x, tuple(reversed(range(nd)))), _shape_arg(shape, x)[::-1])
        r = transpose_(flipped, tuple(reversed(range(len(shape_of(flipped))))))
        return r.rebind(r.node)
    if order == "F":
        return np.reshape(x, shape, order="F")
    return _reshaped_view(x, shape)


def _shape_arg(shape, x):
    """`shape` as a tuple with its -1 resolved for x's size."""
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    if -1 in shape:
        size = int(np.prod(shape_of(x), dtype=np.int64))
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        shape = tuple(size // known if known and d == -1 else d for d in shape)
    return shape


@implements(np.ravel, view=True)
def ravel(x, order="C"):
    return reshape(x, (-1,), order)


@implements(np.transpose, view=True)
def transpose_(x, axes=None):
    nd = len(shape_of(x))
    perm = tuple(reversed(range(nd))) if axes is None else tuple(norm_axis(a, nd) for a in axes)
    return _transposed_view(as_operand(x), perm)


@implements(np.swapaxes, view=True)
def swapaxes_(x, axis1, axis2):
    nd = len(shape_of(x))
    perm = list(range(nd))
    a, b = norm_axis(axis1, nd), norm_axis(axis2, nd)
    perm[a], perm[b] = perm[b], perm[a]
    return _transposed_view(as_operand(x), perm)


@implements(np.broadcast_to, view=True)
def broadcast_to_(x, shape, subok=False):
    x = as_operand(x)
    y = broadcast_to(x, shape)
    if isinstance(x, Tensor) and y is not x:
        view_of(y, x, lambda b: broadcast_to(b, tuple(y.shape)), None, contiguous=False)
    return y


implements(np.zeros_like)(lambda x, dtype=None, order="K", subok=True, shape=None, **kw:
                          full_like(x, 0, dtype, shape))
implements(np.ones_like)(lambda x, dtype=None, order="K", subok=True, shape=None, **kw:
                         full_like(x, 1, dtype, shape))
implements(np.full_like)(lambda x, fill_value, dtype=None, order="K", subok=True, shape=None, **kw:
                         full_like(x, fill_value, dtype, shape))


def _norm_axes_ordered(axis, nd):
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    return [norm_axis(a, nd) for a in axes]


@implements(np.moveaxis, view=True)
def moveaxis(x, source, destination):
    nd = len(shape_of(x))
    src = _norm_axes_ordered(source, nd)
    dst = _norm_axes_ordered(destination, nd)
    order = [n for n in range(nd) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return _transposed_view(as_operand(x), order)


@implements(np.expand_dims, view=True)
def expand_dims(x, axis):
    shape = list(shape_of(x))
    nd = len(shape) + (len(axis) if isinstance(axis, (tuple, list)) else 1)
    for a in sorted(_norm_axes_ordered(axis, nd)):
        shape.insert(a, 1)
    return reshape(x, shape)


@implements(np.squeeze, view=True)
def squeeze(x, axis=None):
    shape = shape_of(x)
    if axis is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    else:
        axes = norm_axes(axis, len(shape))
        for a in axes:
            if shape[a] != 1:
                raise ShapeError(f"cannot select an axis to squeeze out which has size not equal to one "
                                 f"(axis {a} of shape {tuple(shape)}){where()}")
    return reshape(x, [d for i, d in enumerate(shape) if i not in axes])


@implements(np.concatenate)
def concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    no_out(out, "np.concatenate")
    arrays = [as_operand(a) for a in arrays]
    if axis is None:
        arrays, axis = [ravel(a) for a in arrays], 0
    dt = result_dtype(*arrays) if dtype is None else np.dtype(dtype)
    arrays = [cast(a, dt) for a in arrays]
    nd = len(shape_of(arrays[0]))
    if nd == 0:
        raise ShapeError(f"zero-dimensional arrays cannot be concatenated{where()}")
    axis = norm_axis(axis, nd)
    if not builtins.any(isinstance(a, Tensor) for a in arrays):
        return np.concatenate(arrays, axis=axis)
    arrays = [a for a in arrays if shape_of(a)[axis] > 0] or arrays[:1]
    if len(arrays) == 1:
        return arrays[0]
    shapes = [tuple(shape_of(a)) for a in arrays]
    for s in shapes:
        if len(s) != nd or builtins.any(s[i] != shapes[0][i] for i in range(nd) if i != axis):
            raise ShapeError(f"concatenate: all input dimensions except axis {axis} must match, got "
                             f"{shapes}{where()}")
    merged = []          # neighbouring constants joined now: one constant operand
    for traced, run in itertools.groupby(arrays, lambda a: isinstance(a, Tensor)):
        run = list(run)
        merged += run if traced else [np.concatenate(run, axis=axis)]
    return _concatenate_tree(merged, axis)


CONCAT_MAX_INPUTS = 32      # operands per concatenate node (a loop's read of its operand is a
                            # select over them: 1,000 made a Python expression too deep to compile)


def _concatenate_tree(arrays, axis):
    """One concatenate node of `arrays` (no two neighbours constant), or a tree of them."""
    if len(arrays) == 1:
        return arrays[0]
    if len(arrays) > CONCAT_MAX_INPUTS:
        k = CONCAT_MAX_INPUTS
        arrays = [_concatenate_tree(arrays[i:i + k], axis) for i in range(0, len(arrays), k)]
        return _concatenate_tree(arrays, axis)
    return bind("concatenate", *arrays, axis=axis)


@implements(np.stack)
def stack(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    no_out(out, "np.stack")
    arrays = [as_operand(a) for a in arrays]
    shapes = {tuple(shape_of(a)) for a in arrays}
    if len(shapes) != 1:
        raise ShapeError(f"all input arrays must have the same shape, got {sorted(shapes)}{where()}")
    nd = len(shape_of(arrays[0])) + 1
    axis = norm_axis(axis, nd)
    return concatenate([expand_dims(a, axis) for a in arrays], axis=axis, dtype=dtype)


@implements(np.hstack)
def hstack(arrays, **kw):
    arrays = [atleast_1d(a) for a in arrays]
    return concatenate(arrays, axis=0 if len(shape_of(arrays[0])) == 1 else 1, **kw)


@implements(np.vstack)
def vstack(arrays, **kw):
    return concatenate([atleast_2d(a) for a in arrays], axis=0, **kw)


@implements(np.atleast_1d, view=True)
def atleast_1d(x):
    return reshape(x, (1,)) if len(shape_of(x)) == 0 else as_operand(x)


@implements(np.atleast_2d, view=True)
def atleast_2d(x):
    s = shape_of(x)
    return reshape(x, (1,) * (2 - len(s)) + tuple(s)) if len(s) < 2 else as_operand(x)


@implements(np.shape)
def shape(x):
    return tuple(shape_of(x))


@implements(np.ndim)
def ndim(x):
    return len(shape_of(x))


@implements(np.size)
def size(x, axis=None):
    s = shape_of(x)
    return int(np.prod(s, dtype=np.int64)) if axis is None else s[axis]


# ---- dtype and kind queries ------------------------------------------------------------------------
def _dtype_stand_in(x):
    """What NumPy's dtype functions read of x: a traced value's dtype (a weak one's Python
    scalar kind, NEP 50), anything else as it is."""
    if isinstance(x, Tensor):
        return _weak_proxy(x) if x.weak else x.dtype
    return x


@implements(np.result_type)
def result_type(*arrays_and_dtypes):
    return np.result_type(*[_dtype_stand_in(x) for x in arrays_and_dtypes])


@implements(np.common_type)
def common_type(*arrays):
    return np.common_type(*[np.empty(0, x.dtype) if isinstance(x, Tensor) else x for x in arrays])


@implements(np.can_cast)
def can_cast(from_, to, casting="safe"):
    return np.can_cast(from_.dtype if isinstance(from_, Tensor) else from_, to, casting)


@implements(np.min_scalar_type)
def min_scalar_type(a):
    """np.min_scalar_type: an array's own dtype; a 0-d value's smallest dtype holding it, which
    needs its value (known eagerly; refused as int() is of a traced value)."""
    if len(shape_of(a)) or (isinstance(a, Tensor) and a.dtype.kind == "b"):
        return a.dtype if isinstance(a, Tensor) else np.min_scalar_type(a)
    value = known_value(a)
    if value is None:
        a._concrete("np.min_scalar_type")
    return np.min_scalar_type(value)


@implements(np.iscomplexobj)
def iscomplexobj(x):
    """False: traced values are real (complex dtypes are not supported)."""
    return np.iscomplexobj(x) if not isinstance(x, Tensor) else False


@implements(np.isrealobj)
def isrealobj(x):
    return np.isrealobj(x) if not isinstance(x, Tensor) else True


@implements(np.iscomplex)
def iscomplex(x):
    """All false, of x's shape (traced values are real)."""
    return np.zeros(tuple(shape_of(x)), bool)


@implements(np.isreal)
def isreal(x):
    """All true, of x's shape (traced values are real)."""
    return np.ones(tuple(shape_of(x)), bool)


@implements(np.apply_over_axes)
def apply_over_axes(func, a, axes):
    """np.apply_over_axes: func(a, axis) for each axis in turn, keeping the number of dimensions
    (a result with one fewer gets the axis back as length 1)."""
    val = as_operand(a)
    n = len(shape_of(val))
    for axis in ((axes,) if np.ndim(axes) == 0 else axes):
        axis = operator.index(axis)
        res = func(val, axis + n if axis < 0 else axis)
        if len(shape_of(res)) != len(shape_of(val)):
            res = expand_dims(res, axis + n if axis < 0 else axis)
            if len(shape_of(res)) != len(shape_of(val)):
                raise ValueError("function is not returning an array of the correct shape")
        val = res
    return val


# ---- printing ---------------------------------------------------------------------------------------
def _printed(name, numpy_fn):
    @implements(numpy_fn)
    def f(a, *args, **kwargs):
        """NumPy's text of the value when it is known (eagerly, or a constant); a traced value's
        is its type and shape (`Tracer<f64[3]>`), as str() gives."""
        value = known_value(a)
        return str(a) if value is None else numpy_fn(value, *args, **kwargs)
    f.__name__ = f.__qualname__ = name
    return f


array_str = _printed("array_str", np.array_str)
array_repr = _printed("array_repr", np.array_repr)
array2string = _printed("array2string", np.array2string)
