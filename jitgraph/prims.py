"""The primitive ops: for each, a shape/dtype rule and a NumPy implementation.

The NumPy implementations are the reference semantics (the interpreter in
`interpreter.py` runs any graph with them, and eager mode computes with them).
Primitives are deliberately strict: elementwise ops take operands of one shape
and one dtype; broadcasting, dtype promotion and keepdims are made explicit by
the NumPy front end (`numpy_api.py`) as separate `broadcast`, `cast` and
`reshape` nodes, so derivative rules never repeat that logic.
"""
import numpy as np

from .errors import ShapeError


class Prim:
    __slots__ = ("name", "kind", "abstract", "impl")

    def __init__(self, name, kind, abstract, impl):
        self.name, self.kind, self.abstract, self.impl = name, kind, abstract, impl


PRIMS = {}


def _register(name, kind, abstract, impl):
    PRIMS[name] = Prim(name, kind, abstract, impl)


def _same(*avals):
    shape, dtype = avals[0]
    for s, d in avals[1:]:
        if tuple(s) != tuple(shape) or np.dtype(d) != np.dtype(dtype):
            raise ShapeError(f"elementwise operands differ: {avals}")
    return tuple(shape), np.dtype(dtype)


# ---- elementwise -------------------------------------------------------------
def _float_unary(x):
    shape, dtype = x
    if not np.issubdtype(dtype, np.floating):
        raise ShapeError(f"expected a floating operand, got {np.dtype(dtype).name}")
    return tuple(shape), np.dtype(dtype)


UNARY = {
    "neg": np.negative, "abs": np.abs, "sign": np.sign, "sqrt": np.sqrt,
    "exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh,
    "sinh": np.sinh, "cosh": np.cosh, "arctan": np.arctan,
    "stop_gradient": lambda x: x,
}
for _n, _f in UNARY.items():
    _register(_n, "elementwise",
              _float_unary if _n not in ("neg", "abs", "sign", "stop_gradient") else _same,
              lambda x, _f=_f: _f(x))


def _pow_int(x, p):
    return x ** p


_register("integer_pow", "elementwise", lambda x, p: _same(x), _pow_int)

ARITH = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "pow": np.power, "max": np.maximum, "min": np.minimum,
}
for _n, _f in ARITH.items():
    _register(_n, "elementwise", _same, lambda a, b, _f=_f: _f(a, b))

COMPARE = {
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal,
}


def _cmp(a, b):
    shape, _ = _same(a, b)
    return shape, np.dtype(bool)


for _n, _f in COMPARE.items():
    _register(_n, "elementwise", _cmp, lambda a, b, _f=_f: _f(a, b))

LOGICAL = {"and": np.logical_and, "or": np.logical_or}
for _n, _f in LOGICAL.items():
    _register(_n, "elementwise", _cmp, lambda a, b, _f=_f: _f(a, b))
_register("not", "elementwise", lambda x: (tuple(x[0]), np.dtype(bool)), np.logical_not)


def _where_abs(c, a, b):
    if tuple(c[0]) != tuple(a[0]):
        raise ShapeError(f"where: condition shape {c[0]} differs from {a[0]}")
    return _same(a, b)


_register("where", "elementwise", _where_abs, lambda c, a, b: np.where(c, a, b))
_register("cast", "elementwise", lambda x, dtype: (tuple(x[0]), np.dtype(dtype)),
          lambda x, dtype: np.asarray(x).astype(dtype))


# ---- reductions: `axes` are removed from the shape -----------------------------
def _reduce_abs(x, axes):
    shape, dtype = x
    if any(not 0 <= a < len(shape) for a in axes) or len(set(axes)) != len(axes) \
            or tuple(sorted(axes)) != tuple(axes):
        raise ShapeError(f"bad reduction axes {axes} for shape {shape}")
    return tuple(d for i, d in enumerate(shape) if i not in axes), np.dtype(dtype)


REDUCE = {"reduce_sum": np.sum, "reduce_max": np.max, "reduce_min": np.min, "reduce_prod": np.prod}
for _n, _f in REDUCE.items():
    _register(_n, "reduce", _reduce_abs,
              lambda x, axes, _f=_f: np.asarray(_f(x, axis=axes)).astype(np.asarray(x).dtype))


# ---- shape ops -------------------------------------------------------------------
def _reshape_abs(x, shape):
    if int(np.prod(shape, dtype=np.int64)) != int(np.prod(x[0], dtype=np.int64)):
        raise ShapeError(f"cannot reshape {tuple(x[0])} into {tuple(shape)}")
    return tuple(shape), np.dtype(x[1])


_register("reshape", "shape", _reshape_abs, lambda x, shape: np.reshape(x, shape))


def _transpose_abs(x, perm):
    if sorted(perm) != list(range(len(x[0]))):
        raise ShapeError(f"bad permutation {perm} for shape {x[0]}")
    return tuple(x[0][p] for p in perm), np.dtype(x[1])


_register("transpose", "shape", _transpose_abs, lambda x, perm: np.transpose(x, perm))


def _broadcast_abs(x, shape):
    # NumPy's rule: align trailing dims; each source dim is 1 or equal to the target dim
    src = tuple(x[0])
    if len(src) > len(shape) or any(s != 1 and s != d for s, d in zip(reversed(src), reversed(shape))):
        raise ShapeError(f"cannot broadcast {src} to {tuple(shape)}")
    return tuple(shape), np.dtype(x[1])


_register("broadcast", "shape", _broadcast_abs, lambda x, shape: np.broadcast_to(x, shape))


def _slice_dims(shape, starts, stops, steps):
    return tuple(len(range(a, b, c)) for a, b, c in zip(starts, stops, steps))


def _slice_abs(x, starts, stops, steps):
    if not len(starts) == len(stops) == len(steps) == len(x[0]):
        raise ShapeError(f"slice of rank {len(starts)} on shape {x[0]}")
    return _slice_dims(x[0], starts, stops, steps), np.dtype(x[1])


def _slices(starts, stops, steps):
    # a negative step can stop "before 0", which Python slices spell as None
    return tuple(slice(a, (None if b < 0 else b), c) for a, b, c in zip(starts, stops, steps))


_register("slice", "shape", _slice_abs,
          lambda x, starts, stops, steps: np.asarray(x)[_slices(starts, stops, steps)])


def _pad_abs(x, shape, starts, stops, steps):
    if _slice_dims(shape, starts, stops, steps) != tuple(x[0]):
        raise ShapeError(f"pad_slice: {x[0]} does not fit the slice of {shape}")
    return tuple(shape), np.dtype(x[1])


def _pad_impl(x, shape, starts, stops, steps):
    out = np.zeros(shape, dtype=np.asarray(x).dtype)
    out[_slices(starts, stops, steps)] = x
    return out


# zeros of `shape` with x written into the slice; the adjoint of `slice`
_register("pad_slice", "shape", _pad_abs, _pad_impl)


def _concat_abs(*xs, axis):
    base = list(xs[0][0])
    total = 0
    for s, d in xs:
        if len(s) != len(base) or any(a != b for i, (a, b) in enumerate(zip(s, base)) if i != axis):
            raise ShapeError(f"concatenate: shapes {[tuple(s) for s, _ in xs]} differ off axis {axis}")
        total += s[axis]
    _same(*[((0,), d) for _, d in xs])
    base[axis] = total
    return tuple(base), np.dtype(xs[0][1])


_register("concatenate", "shape", _concat_abs, lambda *xs, axis: np.concatenate(xs, axis=axis))


# ---- indexing: gather along one axis with an integer index array -------------------
def _gather_abs(x, idx, axis):
    if not np.issubdtype(idx[1], np.integer):
        raise ShapeError(f"gather index must be integer, got {np.dtype(idx[1]).name}")
    s = tuple(x[0])
    return s[:axis] + tuple(idx[0]) + s[axis + 1:], np.dtype(x[1])


def _gather_impl(x, idx, axis):
    return np.take(x, idx, axis=axis)


_register("gather", "index", _gather_abs, _gather_impl)


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


# zeros of the gathered-from shape with g added at idx (repeats accumulate); adjoint of gather
_register("scatter_add", "index", _scatter_abs, _scatter_impl)


# ---- linear algebra ---------------------------------------------------------------
def _matmul_abs(a, b):
    (sa, da), (sb, db) = a, b
    if len(sa) < 2 or len(sa) != len(sb) or sa[:-2] != sb[:-2] or sa[-1] != sb[-2]:
        raise ShapeError(f"matmul: shapes {tuple(sa)} and {tuple(sb)} do not fit "
                         "(need (..., m, k) @ (..., k, n) with equal batch dims)")
    _same(((0,), da), ((0,), db))
    return tuple(sa[:-1]) + (sb[-1],), np.dtype(da)


_register("matmul", "matmul", _matmul_abs, lambda a, b: np.matmul(a, b))
