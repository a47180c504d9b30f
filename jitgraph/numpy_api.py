"""NumPy semantics on top of the strict primitives.

Every function here accepts Tensors, NumPy arrays and Python scalars, applies
NumPy's rules (dtype promotion with weak Python scalars, broadcasting, axis
normalization, keepdims, indexing) by emitting explicit `cast`, `broadcast`,
`reshape` and `slice` primitives, and binds the primitive. With no Tensor among
the arguments the result is computed by NumPy, so the same code serves derivative
rules in eager mode.
"""
import builtins

import numpy as np

from .core import Tensor, bind
from .errors import NotSupportedError, ShapeError, where
from .prims import REDUCE


# ---- operands: dtype promotion and broadcasting ----------------------------------
def _is_weak(x):
    return (isinstance(x, Tensor) and x.weak) or (
        isinstance(x, (bool, int, float)) and not isinstance(x, np.generic))


def _weak_proxy(x):
    """A Python scalar standing for a weak value in np.result_type."""
    if isinstance(x, Tensor):
        kind = x.dtype.kind
        return {"b": False, "i": 0, "u": 0}.get(kind, 0.0)
    return x


def _as_operand(x):
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (list, tuple)):
        if any(isinstance(e, Tensor) for e in _leaves(x)):
            return stack(list(x))
    return x if isinstance(x, np.ndarray) else np.asarray(x)


def _leaves(x):
    if isinstance(x, (list, tuple)):
        for e in x:
            yield from _leaves(e)
    else:
        yield x


def result_dtype(*xs):
    strong = [x.dtype if isinstance(x, Tensor) else np.asarray(x).dtype
              for x in xs if not _is_weak(x)]
    weak = [_weak_proxy(x) for x in xs if _is_weak(x)]
    if not strong:
        # Python scalars alone: bool < int64 < float64
        kinds = {type(w) for w in weak}
        return np.dtype(float) if float in kinds else np.dtype(np.int64) if int in kinds else np.dtype(bool)
    return np.result_type(*strong, *weak)


def cast(x, dtype):
    dtype = np.dtype(dtype)
    if isinstance(x, Tensor):
        return x if x.dtype == dtype else _keep_weak(bind("cast", x, dtype=dtype), x.weak)
    return np.asarray(x, dtype=dtype)


def _keep_weak(t, weak):
    if isinstance(t, Tensor):
        t.weak = weak
    return t


def shape_of(x):
    return x.shape if isinstance(x, Tensor) else np.shape(x)


def broadcast_shapes(*shapes):
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise ShapeError(
            "operands could not be broadcast together with shapes "
            + " ".join(str(tuple(s)) for s in shapes) + where()) from None


def broadcast_to(x, shape):
    shape = tuple(int(d) for d in shape)
    xs = tuple(shape_of(x))
    if xs == shape:
        return x
    if len(xs) > len(shape) or any(a != 1 and a != b for a, b in zip(reversed(xs), reversed(shape))):
        raise ShapeError(f"cannot broadcast shape {xs} to {shape}{where()}")
    if not isinstance(x, Tensor):
        return np.broadcast_to(x, shape)
    return _keep_weak(bind("broadcast", x, shape=shape), x.weak)


def _lift(xs):
    """Put raw operands into the innermost trace among xs, so a scalar stays a scalar node."""
    top = None
    for x in xs:
        if isinstance(x, Tensor) and (top is None or x._trace.level > top.level):
            top = x._trace
    if top is None:
        return xs
    return [x if isinstance(x, Tensor) else top.lift(x) for x in xs]


def _elementwise(op, *xs, dtype=None, out_dtype_float=False):
    """Promote, broadcast and bind an elementwise primitive."""
    weak = all(_is_weak(x) for x in xs)
    xs = [x if _is_weak(x) and not isinstance(x, Tensor) else _as_operand(x) for x in xs]
    dt = result_dtype(*xs) if dtype is None else np.dtype(dtype)
    if out_dtype_float and not np.issubdtype(dt, np.floating):
        dt = np.dtype(np.float64)
    xs = _lift([cast(x, dt) for x in xs])
    shape = broadcast_shapes(*[shape_of(x) for x in xs])
    xs = [broadcast_to(x, shape) for x in xs]
    return _keep_weak(bind(op, *xs), weak)


def _unary_float(op):
    def f(x):
        return _elementwise(op, x, out_dtype_float=True)
    f.__name__ = op
    return f


sqrt, exp, expm1, log, log1p = map(_unary_float, ("sqrt", "exp", "expm1", "log", "log1p"))
sin, cos, tan, tanh, sinh, cosh, arctan = map(
    _unary_float, ("sin", "cos", "tan", "tanh", "sinh", "cosh", "arctan"))


def negative(x):
    return _elementwise("neg", x)


def absolute(x):
    return _elementwise("abs", x)


def sign(x):
    return _elementwise("sign", x)


def stop_gradient(x):
    """x, with a zero derivative: gradients do not flow through it."""
    return _elementwise("stop_gradient", x)


def add(a, b):
    return _elementwise("add", a, b)


def subtract(a, b):
    return _elementwise("sub", a, b)


def multiply(a, b):
    return _elementwise("mul", a, b)


def divide(a, b):
    return _elementwise("div", a, b, out_dtype_float=True)


def maximum(a, b):
    return _elementwise("max", a, b)


def minimum(a, b):
    return _elementwise("min", a, b)


def _cmp(op):
    def f(a, b):
        weak = all(_is_weak(x) for x in (a, b))
        a, b = (x if _is_weak(x) and not isinstance(x, Tensor) else _as_operand(x) for x in (a, b))
        dt = result_dtype(a, b)
        a, b = _lift([cast(a, dt), cast(b, dt)])
        shape = broadcast_shapes(shape_of(a), shape_of(b))
        return _keep_weak(bind(op, broadcast_to(a, shape), broadcast_to(b, shape)), weak)
    f.__name__ = op
    return f


less, less_equal, greater, greater_equal, equal, not_equal = map(
    _cmp, ("lt", "le", "gt", "ge", "eq", "ne"))


def _logical(op):
    def f(a, b):
        return _elementwise(op, _to_bool(a), _to_bool(b), dtype=bool)
    return f


def _to_bool(x):
    x = _as_operand(x) if not isinstance(x, (bool, int, float)) else np.asarray(x)
    return x if x.dtype == bool else not_equal(x, 0)


logical_and, logical_or = _logical("and"), _logical("or")


def logical_not(x):
    return bind("not", _to_bool(x))


def square(x):
    return power(x, 2)


def reciprocal(x):
    return divide(1.0, x)


def power(a, b):
    """a ** b; an integral scalar exponent becomes `integer_pow` (exact repeated products)."""
    if isinstance(b, (int, float, np.integer, np.floating)) and not isinstance(b, bool) \
            and float(b) == int(b) and abs(int(b)) <= 64 and isinstance(a, Tensor):
        p = int(b)
        a_dt = result_dtype(a, b) if not isinstance(b, np.generic) else np.result_type(a.dtype, b)
        a = cast(a, a_dt)
        if p == 1:
            return a
        if p == 0:
            return ones_like(a)
        return _keep_weak(bind("integer_pow", a, p=p), a.weak)
    return _elementwise("pow", a, b, out_dtype_float=True)


def where_(cond, a, b):
    cond = _to_bool(cond)
    weak = _is_weak(a) and _is_weak(b)
    a, b = (x if _is_weak(x) and not isinstance(x, Tensor) else _as_operand(x) for x in (a, b))
    dt = result_dtype(a, b)
    cond, a, b = _lift([cond, cast(a, dt), cast(b, dt)])
    shape = broadcast_shapes(shape_of(cond), shape_of(a), shape_of(b))
    return _keep_weak(bind("where", broadcast_to(cond, shape), broadcast_to(a, shape),
                           broadcast_to(b, shape)), weak)


def clip(x, a_min=None, a_max=None, out=None, **kw):
    _no_out(out, "np.clip")
    if a_min is None and "min" in kw:
        a_min = kw.pop("min")
    if a_max is None and "max" in kw:
        a_max = kw.pop("max")
    if kw:
        raise NotSupportedError(f"np.clip: arguments {sorted(kw)} are not supported{where()}")
    if a_min is not None:
        x = maximum(x, a_min)
    if a_max is not None:
        x = minimum(x, a_max)
    return x


def _no_out(out, name):
    if out is not None:
        raise NotSupportedError(f"{name}(..., out=...) is not supported: traced values are immutable{where()}")


# ---- reductions ---------------------------------------------------------------------------
def _norm_axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < ndim:
            raise ShapeError(f"axis {a} is out of bounds for an array of dimension {ndim}{where()}")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {axis}{where()}")
    return tuple(sorted(out))


def _keepdims_shape(shape, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def _reduce(op, x, axis, keepdims, dtype=None):
    x = _as_operand(x)
    if dtype is not None:
        x = cast(x, dtype)
    elif op in ("reduce_sum", "reduce_prod") and x.dtype.kind in "biu":
        x = cast(x, np.int64)
    axes = _norm_axes(axis, len(shape_of(x)))
    if not isinstance(x, Tensor):
        out = REDUCE[op](x, axis=axes, keepdims=keepdims)
        return np.asarray(out, dtype=x.dtype)
    if op in ("reduce_max", "reduce_min") and any(x.shape[a] == 0 for a in axes):
        raise ShapeError(f"zero-size reduction of {op[7:]} has no identity{where()}")
    r = bind(op, x, axes=axes)
    if keepdims:
        r = reshape(r, _keepdims_shape(x.shape, axes))
    return r




def sum(x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    _no_out(out, "np.sum")
    _no_extra(initial, where, "np.sum")
    return _reduce("reduce_sum", x, axis, keepdims, dtype)


def prod(x, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    _no_out(out, "np.prod")
    _no_extra(initial, where, "np.prod")
    return _reduce("reduce_prod", x, axis, keepdims, dtype)


def amax(x, axis=None, out=None, keepdims=False, initial=None, where=None):
    _no_out(out, "np.max")
    _no_extra(initial, where, "np.max")
    return _reduce("reduce_max", x, axis, keepdims)


def amin(x, axis=None, out=None, keepdims=False, initial=None, where=None):
    _no_out(out, "np.min")
    _no_extra(initial, where, "np.min")
    return _reduce("reduce_min", x, axis, keepdims)


def _no_extra(initial, where_, name):
    if initial is not None or where_ is not None:
        raise NotSupportedError(f"{name}(..., initial=/where=) is not supported{where()}")


def _count(x, axis):
    shape = shape_of(x)
    return int(np.prod([shape[a] for a in _norm_axes(axis, len(shape))], dtype=np.int64))


def mean(x, axis=None, dtype=None, out=None, keepdims=False, where=None):
    _no_out(out, "np.mean")
    _no_extra(None, where, "np.mean")
    x = _as_operand(x)
    if dtype is None and x.dtype.kind in "biu":
        dtype = np.float64
    s = _reduce("reduce_sum", x, axis, keepdims, dtype)
    return divide(s, float(_count(x, axis)))


def var(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None,
        correction=None):
    _no_out(out, "np.var")
    _no_extra(None, where, "np.var")
    if mean is not None:
        raise NotSupportedError(f"np.var(..., mean=) is not supported{where()}")
    if correction is not None:
        ddof = correction
    x = _as_operand(x)
    if dtype is None and x.dtype.kind in "biu":
        dtype = np.float64
    if dtype is not None:
        x = cast(x, dtype)
    mu = globals()["mean"](x, axis, keepdims=True)
    d = subtract(x, mu)
    ss = _reduce("reduce_sum", multiply(d, d), axis, keepdims)
    return divide(ss, float(builtins.max(_count(x, axis) - ddof, 0)))


def std(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None,
        correction=None):
    return sqrt(var(x, axis, dtype, out, ddof, keepdims, where, mean, correction))


# ---- shapes -------------------------------------------------------------------------------------
def reshape(x, shape, order="C", **kw):
    if "newshape" in kw:
        shape = kw.pop("newshape")
    if order != "C" or kw:
        raise NotSupportedError(f"reshape with order={order!r} is not supported{where()}")
    x = _as_operand(x)
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    shape = [int(d) for d in shape]
    size = int(np.prod(shape_of(x), dtype=np.int64))
    if shape.count(-1) > 1:
        raise ShapeError(f"can only specify one unknown dimension in reshape {tuple(shape)}{where()}")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise ShapeError(f"cannot reshape array of size {size} into shape {tuple(shape)}{where()}")
        shape[shape.index(-1)] = size // known
    shape = tuple(shape)
    if int(np.prod(shape, dtype=np.int64)) != size:
        raise ShapeError(f"cannot reshape array of size {size} into shape {shape}{where()}")
    if not isinstance(x, Tensor):
        return np.reshape(x, shape)
    if shape == x.shape:
        return x
    return _keep_weak(bind("reshape", x, shape=shape), x.weak)


def ravel(x, order="C"):
    return reshape(x, (-1,), order)


def method_flatten(x, order="C"):
    return reshape(x, (-1,), order)


def transpose(x, axes=None):
    x = _as_operand(x)
    nd = len(shape_of(x))
    if axes is None:
        perm = tuple(reversed(range(nd)))
    else:
        perm = tuple(int(a) % nd for a in axes)
        if sorted(perm) != list(range(nd)):
            raise ShapeError(f"axes {tuple(axes)} don't match an array of dimension {nd}{where()}")
    if not isinstance(x, Tensor):
        return np.transpose(x, perm)
    if perm == tuple(range(nd)):
        return x
    return _keep_weak(bind("transpose", x, perm=perm), x.weak)


def method_transpose(x, *axes):
    if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
        axes = axes[0]
    return transpose(x, axes if axes else None)


def swapaxes(x, a, b):
    nd = len(shape_of(x))
    perm = list(range(nd))
    a, b = a % nd, b % nd
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


def moveaxis(x, source, destination):
    nd = len(shape_of(x))
    src = _norm_axes_ordered(source, nd)
    dst = _norm_axes_ordered(destination, nd)
    order = [n for n in range(nd) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(x, order)


def _norm_axes_ordered(axis, nd):
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    return [int(a) % nd for a in axes]


def expand_dims(x, axis):
    shape = list(shape_of(x))
    nd = len(shape) + (len(axis) if isinstance(axis, (tuple, list)) else 1)
    for a in sorted(_norm_axes_ordered(axis, nd)):
        shape.insert(a, 1)
    return reshape(x, shape)


def squeeze(x, axis=None):
    shape = shape_of(x)
    if axis is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    else:
        axes = _norm_axes(axis, len(shape))
        for a in axes:
            if shape[a] != 1:
                raise ShapeError(f"cannot select an axis to squeeze out which has size not equal to one "
                                 f"(axis {a} of shape {tuple(shape)}){where()}")
    return reshape(x, [d for i, d in enumerate(shape) if i not in axes])


def concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    _no_out(out, "np.concatenate")
    arrays = [_as_operand(a) for a in arrays]
    if axis is None:
        arrays, axis = [ravel(a) for a in arrays], 0
    dt = result_dtype(*arrays) if dtype is None else np.dtype(dtype)
    arrays = [cast(a, dt) for a in arrays]
    nd = len(shape_of(arrays[0]))
    if nd == 0:
        raise ShapeError(f"zero-dimensional arrays cannot be concatenated{where()}")
    axis = _norm_axes(axis, nd)[0]
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
    return bind("concatenate", *arrays, axis=axis)


def stack(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    _no_out(out, "np.stack")
    arrays = [_as_operand(a) for a in arrays]
    shapes = {tuple(shape_of(a)) for a in arrays}
    if len(shapes) != 1:
        raise ShapeError(f"all input arrays must have the same shape, got {sorted(shapes)}{where()}")
    nd = len(shape_of(arrays[0])) + 1
    axis = _norm_axes(axis, nd)[0]
    return concatenate([expand_dims(a, axis) for a in arrays], axis=axis, dtype=dtype)


def hstack(arrays, **kw):
    arrays = [atleast_1d(a) for a in arrays]
    return concatenate(arrays, axis=0 if len(shape_of(arrays[0])) == 1 else 1, **kw)


def vstack(arrays, **kw):
    return concatenate([atleast_2d(a) for a in arrays], axis=0, **kw)


def atleast_1d(x):
    return reshape(x, (1,)) if len(shape_of(x)) == 0 else _as_operand(x)


def atleast_2d(x):
    s = shape_of(x)
    return reshape(x, (1,) * (2 - len(s)) + tuple(s)) if len(s) < 2 else _as_operand(x)


def zeros_like(x, dtype=None, **kw):
    return full_like(x, 0, dtype)


def ones_like(x, dtype=None, **kw):
    return full_like(x, 1, dtype)


def full_like(x, fill_value, dtype=None, **kw):
    dt = np.dtype(dtype) if dtype is not None else (x.dtype if isinstance(x, Tensor) else np.asarray(x).dtype)
    c = np.asarray(fill_value, dtype=dt)
    shape = tuple(shape_of(x))
    if isinstance(x, Tensor):
        # a constant broadcast to x's shape: nothing about x's value is read
        return broadcast_to(x._trace.lift(c), shape)
    return np.full(shape, c, dtype=dt)


def shape(x):
    return tuple(shape_of(x))


def ndim(x):
    return len(shape_of(x))


def size(x, axis=None):
    s = shape_of(x)
    return int(np.prod(s, dtype=np.int64)) if axis is None else s[axis]


# ---- linear algebra --------------------------------------------------------------------------------
def matmul(a, b):
    a, b = _as_operand(a), _as_operand(b)
    dt = result_dtype(a, b)
    a, b = cast(a, dt), cast(b, dt)
    sa, sb = tuple(shape_of(a)), tuple(shape_of(b))
    if not sa or not sb:
        raise ShapeError(f"matmul: operands must be at least 1-D, got shapes {sa} and {sb}{where()}")
    squeeze_a, squeeze_b = len(sa) == 1, len(sb) == 1
    if squeeze_a:
        a, sa = reshape(a, (1,) + sa), (1,) + sa
    if squeeze_b:
        b, sb = reshape(b, sb + (1,)), sb + (1,)
    if sa[-1] != sb[-2]:
        raise ShapeError(f"matmul: shapes {tuple(shape_of(a))} and {tuple(shape_of(b))} not aligned: "
                         f"{sa[-1]} (dim {len(sa) - 1}) != {sb[-2]} (dim {len(sb) - 2}){where()}")
    batch = broadcast_shapes(sa[:-2], sb[:-2])
    a = broadcast_to(a, batch + sa[-2:])
    b = broadcast_to(b, batch + sb[-2:])
    r = bind("matmul", a, b) if builtins.any(isinstance(v, Tensor) for v in (a, b)) else np.matmul(a, b)
    out_shape = batch + (() if squeeze_a else (sa[-2],)) + (() if squeeze_b else (sb[-1],))
    return reshape(r, out_shape)


def dot(a, b, out=None):
    _no_out(out, "np.dot")
    sa, sb = shape_of(a), shape_of(b)
    if len(sa) == 0 or len(sb) == 0:
        return multiply(a, b)
    if len(sa) <= 2 and len(sb) <= 2:
        return matmul(a, b)
    if len(sb) == 1:
        return matmul(a, b)
    raise NotSupportedError(f"np.dot of {len(sa)}-D and {len(sb)}-D arrays is not supported; "
                            f"use np.matmul or np.tensordot-free reshapes{where()}")


def vdot(a, b):
    return sum(multiply(ravel(a), ravel(b)))


def inner(a, b):
    if len(shape_of(a)) <= 1 and len(shape_of(b)) <= 1:
        return dot(a, b)
    return matmul(a, swapaxes(b, -1, -2)) if len(shape_of(b)) >= 2 else matmul(a, b)


def outer(a, b, out=None):
    _no_out(out, "np.outer")
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


# ---- indexing --------------------------------------------------------------------------------------
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


def getitem(x, key):
    """x[key] for basic slicing, integers, None, Ellipsis and one integer index array."""
    x = _as_operand(x)
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


def take(a, indices, axis=None, out=None, mode=None):
    _no_out(out, "np.take")
    if axis is None:
        return getitem(ravel(a), indices)
    nd = len(shape_of(a))
    axis = _norm_axes(axis, nd)[0]
    return getitem(a, (slice(None),) * axis + (indices,))


# ---- stable composites ----------------------------------------------------------------------------
def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x), axis)) computed stably (the max is subtracted first)."""
    x = _as_operand(x)
    m = stop_gradient(amax(x, axis=axis, keepdims=True))
    s = sum(exp(subtract(x, m)), axis=axis, keepdims=True)
    r = add(log(s), m)
    return r if keepdims else squeeze(r, axis=_norm_axes(axis, len(shape_of(x))))


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x), axis), computed stably."""
    x = _as_operand(x)
    e = exp(subtract(x, stop_gradient(amax(x, axis=axis, keepdims=True))))
    return divide(e, sum(e, axis=axis, keepdims=True))


def log_softmax(x, axis=-1):
    """x - logsumexp(x, axis), computed stably."""
    return subtract(x, logsumexp(x, axis=axis, keepdims=True))


def sigmoid(x):
    """1 / (1 + exp(-x)), computed as 0.5 * tanh(x / 2) + 0.5, which never overflows."""
    return add(multiply(tanh(multiply(x, 0.5)), 0.5), 0.5)


# ---- NumPy protocol dispatch ---------------------------------------------------------------------
UFUNCS = {
    np.add: add, np.subtract: subtract, np.multiply: multiply, np.true_divide: divide,
    np.power: power, np.float_power: lambda a, b: power(cast(a, np.float64), b),
    np.negative: negative, np.positive: lambda x: x, np.absolute: absolute, np.fabs: absolute,
    np.sign: sign, np.square: square, np.sqrt: sqrt, np.reciprocal: reciprocal,
    np.exp: exp, np.expm1: expm1, np.log: log, np.log1p: log1p,
    np.sin: sin, np.cos: cos, np.tan: tan, np.tanh: tanh, np.sinh: sinh, np.cosh: cosh,
    np.arctan: arctan, np.maximum: maximum, np.minimum: minimum, np.fmax: maximum, np.fmin: minimum,
    np.less: less, np.less_equal: less_equal, np.greater: greater, np.greater_equal: greater_equal,
    np.equal: equal, np.not_equal: not_equal, np.logical_and: logical_and, np.logical_or: logical_or,
    np.logical_not: logical_not, np.matmul: matmul,
}
UFUNC_REDUCE = {np.add: sum, np.multiply: prod, np.maximum: amax, np.minimum: amin}

FUNCTIONS = {
    np.sum: sum, np.prod: prod, np.mean: mean, np.var: var, np.std: std,
    np.max: amax, np.amax: amax, np.min: amin, np.amin: amin,
    np.reshape: reshape, np.ravel: ravel, np.transpose: transpose, np.swapaxes: swapaxes,
    np.moveaxis: moveaxis, np.expand_dims: expand_dims, np.squeeze: squeeze,
    np.broadcast_to: broadcast_to, np.concatenate: concatenate, np.stack: stack,
    np.hstack: hstack, np.vstack: vstack, np.atleast_1d: atleast_1d, np.atleast_2d: atleast_2d,
    np.where: where_, np.clip: clip, np.dot: dot, np.vdot: vdot, np.inner: inner, np.outer: outer,
    np.zeros_like: zeros_like, np.ones_like: ones_like, np.full_like: full_like,
    np.shape: shape, np.ndim: ndim, np.size: size, np.take: take, np.matmul: matmul,
    np.square: square, np.abs: absolute, np.round: None,
}
FUNCTIONS = {k: v for k, v in FUNCTIONS.items() if v is not None}


def _np_name(obj):
    mod = getattr(obj, "__module__", None) or "numpy"
    mod = "np" + mod[len("numpy"):] if mod.startswith("numpy") else mod
    return f"{mod}.{getattr(obj, '__name__', repr(obj))}"


def apply_ufunc(ufunc, method, inputs, kwargs):
    name = f"np.{ufunc.__name__}"
    if kwargs.get("out") is not None:
        _no_out(kwargs["out"], name)
    kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    if method == "reduce" and ufunc in UFUNC_REDUCE:
        return UFUNC_REDUCE[ufunc](*inputs, **kwargs)
    if method != "__call__":
        raise NotSupportedError(f"{name}.{method} is not supported{where()}")
    fn = UFUNCS.get(ufunc)
    if fn is None:
        raise NotSupportedError(f"{name} is not supported{where()}")
    dtype = kwargs.pop("dtype", None)
    if kwargs:
        raise NotSupportedError(f"{name} with arguments {sorted(kwargs)} is not supported{where()}")
    r = fn(*inputs)
    return cast(r, dtype) if dtype is not None else r


def apply_function(func, args, kwargs):
    fn = FUNCTIONS.get(func)
    if fn is None:
        raise NotSupportedError(f"{_np_name(func)} is not supported{where()}")
    return fn(*args, **kwargs)


# ---- methods ----------------------------------------------------------------------------------------
def method_sum(x, axis=None, dtype=None, out=None, keepdims=False, **kw):
    return sum(x, axis, dtype, out, keepdims, **kw)


def method_max(x, axis=None, out=None, keepdims=False, **kw):
    return amax(x, axis, out, keepdims, **kw)


def method_min(x, axis=None, out=None, keepdims=False, **kw):
    return amin(x, axis, out, keepdims, **kw)


def method_squeeze(x, axis=None):
    return squeeze(x, axis)


def method_astype(x, dtype, copy=True, **kw):
    return cast(x, dtype)


def method_clip(x, min=None, max=None, out=None, **kw):
    return clip(x, min, max, out, **kw)


def method_dot(x, b, out=None):
    return dot(x, b, out)


def method_take(x, indices, axis=None, out=None, mode=None):
    return take(x, indices, axis, out, mode)


__all__ = [n for n in dir() if not n.startswith("_")]
