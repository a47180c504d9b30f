"""Products: the batched `matmul` primitive and the NumPy products built on it (dot, inner, outer, ...)."""
import builtins

import numpy as np

from ..core import Tensor, bind
from ..errors import NotSupportedError, ShapeError, where
from ..numpy_api import (as_operand, broadcast_shapes, broadcast_to, cast, no_out, reshape, result_dtype,
                         shape_of, swapaxes)
from .elementwise import multiply
from .reduce import sum
from .registry import implements, register
from .shape import ravel


def _matmul_abs(a, b):
    (sa, da), (sb, db) = a, b
    if len(sa) < 2 or len(sa) != len(sb) or sa[:-2] != sb[:-2] or sa[-1] != sb[-2]:
        raise ShapeError(f"matmul: shapes {tuple(sa)} and {tuple(sb)} do not fit "
                         "(need (..., m, k) @ (..., k, n) with equal batch dims)")
    if np.dtype(da) != np.dtype(db):
        raise ShapeError(f"matmul: dtypes {np.dtype(da).name} and {np.dtype(db).name} differ")
    return tuple(sa[:-1]) + (sb[-1],), np.dtype(da)


def _matmul_flops(node):
    return 2 * int(np.prod(node.shape, dtype=np.int64)) * int(node.inputs[0].shape[-1])


def _swap(x):
    return swapaxes(x, -1, -2)


# (..., m, k) @ (..., k, n) with equal batch dims; NumPy's broadcasting and 1-D operands are
# the front end's reshapes and broadcasts
register("matmul", "linalg", _matmul_abs, lambda a, b: np.matmul(a, b),
         (lambda g, out, a, b: matmul(g, _swap(b)), lambda g, out, a, b: matmul(_swap(a), g)),
         flops=_matmul_flops)


@implements(np.matmul)
def matmul(a, b):
    a, b = as_operand(a), as_operand(b)
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


@implements(np.dot)
def dot(a, b, out=None):
    no_out(out, "np.dot")
    sa, sb = shape_of(a), shape_of(b)
    if len(sa) == 0 or len(sb) == 0:
        return multiply(a, b)
    if len(sa) <= 2 and len(sb) <= 2:
        return matmul(a, b)
    if len(sb) == 1:
        return matmul(a, b)
    raise NotSupportedError(f"np.dot of {len(sa)}-D and {len(sb)}-D arrays is not supported; "
                            f"use np.matmul or np.tensordot-free reshapes{where()}")


@implements(np.vdot)
def vdot(a, b):
    return sum(multiply(ravel(a), ravel(b)))


@implements(np.inner)
def inner(a, b):
    if len(shape_of(a)) <= 1 and len(shape_of(b)) <= 1:
        return dot(a, b)
    return matmul(a, _swap(b)) if len(shape_of(b)) >= 2 else matmul(a, b)


@implements(np.outer)
def outer(a, b, out=None):
    no_out(out, "np.outer")
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))
