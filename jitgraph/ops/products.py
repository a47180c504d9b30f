"""Products: the batched `matmul` primitive, the two-operand contraction every product lowers
to, and the NumPy products built on it (matmul, dot, inner, outer, vdot).

A contraction is described by labels, one per axis of each operand (as in einsum). Like
XLA's dot_general, `contract_pair` sorts the labels of two operands into batch labels (in
both, kept), contracted labels (in both, summed), and each operand's free labels, and
lowers the product to transposes, reshapes and one (batched) `matmul`, which becomes a BLAS
call on the CPU. Products with nothing to contract, or whose result has one row or one
column (a row-wise dot, a matrix-vector or vector-matrix product, batched or not), become
a broadcast multiply and a sum, which fuse into one loop. Integer and boolean products
take that path too (the matmul lowerings are floating-point).
"""
import builtins

import numpy as np

from ..core import Tensor, bind
from ..errors import ShapeError, where
from ..numpy_api import as_operand, broadcast_shapes, cast, no_out, reshape, shape_of, swapaxes, transpose
from .elementwise import multiply, to_bool
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
    """x with its last two axes swapped. A transpose of a transpose reads the original: the
    adjoint of a product whose operand was transposed (einsum's 'bqd,bkd->bqk') swaps it back,
    and that costs no copy."""
    if isinstance(x, Tensor) and x.node.op == "transpose" and x.ndim >= 2:
        perm = list(x.node.p["perm"])
        perm[-1], perm[-2] = perm[-2], perm[-1]
        src = x.rebind(x.node.inputs[0])
        return src if perm == sorted(perm) else transpose(src, perm)
    return swapaxes(x, -1, -2)


# (..., m, k) @ (..., k, n) with equal batch dims; NumPy's broadcasting and 1-D operands are
# the front end's reshapes (see contract_pair)
register("matmul", "linalg", _matmul_abs, lambda a, b: np.matmul(a, b),
         (lambda g, out, a, b: matmul(g, _swap(b)), lambda g, out, a, b: matmul(_swap(a), g)),
         flops=_matmul_flops)


def _matmul_add_abs(c, a, b):
    shape, dtype = _matmul_abs(a, b)
    (sc, dc) = c
    if len(shape) != 2 or tuple(sc) != shape or np.dtype(dc) != dtype:
        raise ShapeError(f"matmul_add: c {tuple(sc)} {np.dtype(dc).name} + a @ b needs 2-D operands and c "
                         f"of the product's shape {shape} and dtype {dtype.name}")
    return shape, dtype


# c + a @ b for 2-D operands, in one BLAS call that adds the product to c (beta = 1). Traced
# programs never hold it: the CPU code generator makes it of a sum whose operand is a product
# (codegen/products.py), and its result may then take c's buffer (codegen/memory.py).
register("matmul_add", "linalg", _matmul_add_abs, lambda c, a, b: c + np.matmul(a, b),
         (lambda g, out, c, a, b: g, lambda g, out, c, a, b: matmul(g, _swap(b)),
          lambda g, out, c, a, b: matmul(_swap(a), g)),
         flops=lambda node: (2 * int(node.inputs[1].shape[-1]) + 1) * node.size,
         host_only="a product added to a value (matmul_add: the CPU code generator's form of c + a @ b)",
         onnx="made by the CPU code generator only: exported graphs hold matmul and add")


# ---- contraction by labels --------------------------------------------------------------------
def _size(shape):
    return int(np.prod(shape, dtype=np.int64))


def product_dtype(xs, dtype=None):
    """(operands cast to the dtype the product computes in, the result dtype).

    NumPy's products convert every operand to an array (a Python scalar is a float64 or int64
    array, never a weak value), so the result dtype is np.result_type of the operands' dtypes.
    Boolean products (sums of products in the logical sense) compute in int64; `finish`
    turns the sums back into booleans."""
    xs = [as_operand(x) for x in xs]
    dt = np.result_type(*[x.dtype for x in xs]) if dtype is None else np.dtype(dtype)
    work = np.dtype(np.int64) if dt == np.bool_ else dt
    return [cast(x, work) for x in xs], dt


def finish(r, dtype):
    """The value of a product computed by `product_dtype`'s rule, in `dtype`."""
    return to_bool(r) if np.dtype(dtype) == np.bool_ else r


def sum_labels(x, labels, drop):
    """(x summed over the axes whose labels are in `drop`, the remaining labels)."""
    axes = tuple(i for i, lab in enumerate(labels) if lab in drop)
    if not axes:
        return x, tuple(labels)
    return sum(x, axis=axes, dtype=x.dtype), tuple(lab for lab in labels if lab not in drop)


def permute(x, labels, order):
    """x with its axes (labelled `labels`) put in the order `order` (the same labels)."""
    labels = tuple(labels)
    return transpose(x, [labels.index(lab) for lab in order])


def broadcast_labels(xs, labels, what="operands"):
    """NumPy's broadcasting over labelled axes: a label's axes have one size, except that size
    1 stretches. Axes of size 1 whose label has another size elsewhere are dropped (the
    operand is constant along them); returns (operands, labels)."""
    sizes = {}
    for x, ls in zip(xs, labels):
        for lab, d in zip(ls, shape_of(x)):
            if d != 1:
                if sizes.setdefault(lab, d) != d:
                    shapes = " ".join(str(tuple(shape_of(y))) for y in xs)
                    raise ShapeError(
                        f"{what} could not be broadcast together with remapped shapes: {shapes} "
                        f"(an axis of size {sizes[lab]} meets one of size {d}){where()}")
    out_xs, out_labels = [], []
    for x, ls in zip(xs, labels):
        shape = tuple(shape_of(x))
        keep = [i for i, (lab, d) in enumerate(zip(ls, shape)) if not (d == 1 and sizes.get(lab, 1) != 1)]
        if len(keep) != len(shape):
            x = reshape(x, [shape[i] for i in keep])
            ls = tuple(ls[i] for i in keep)
        out_xs.append(x)
        out_labels.append(tuple(ls))
    return out_xs, out_labels


def _bind_matmul(a, b):
    if builtins.any(isinstance(v, Tensor) for v in (a, b)):
        return bind("matmul", a, b)
    return np.matmul(a, b)


def _as_matrices(x, labels, batch, rows, cols):
    """x (axes labelled `labels`) as a stack batch + (R, C) of matrices whose rows run over the
    labels `rows` and columns over `cols`. When x holds its axes as batch + cols + rows it is
    reshaped and its last two axes swapped (a transposed view for a 2-D product on the CPU,
    a transposed-operand flag on CUDA); otherwise it is permuted to batch + rows + cols."""
    shape = dict(zip(labels, shape_of(x)))
    bshape = [shape[lab] for lab in batch]
    r, c = _size([shape[lab] for lab in rows]), _size([shape[lab] for lab in cols])
    if tuple(labels) == tuple(batch + cols + rows) and rows and cols:
        return _swap(reshape(x, bshape + [c, r]))
    return reshape(permute(x, labels, batch + rows + cols), bshape + [r, c])


def contract_pair(a, la, b, lb, keep, prefer=()):
    """The product of a and b (same dtype, unique labels per operand, one size per label),
    summed over the labels not in `keep`. Returns (result, its labels).

    `prefer`: the order the caller wants the result in; it decides the order of the batch
    labels and whether a is the left or the right operand of the matmul."""
    keep = set(keep)
    la, lb = tuple(la), tuple(lb)
    a, la = sum_labels(a, la, {lab for lab in la if lab not in lb and lab not in keep})
    b, lb = sum_labels(b, lb, {lab for lab in lb if lab not in la and lab not in keep})
    shared = [lab for lab in la if lab in lb]
    contracted = [lab for lab in shared if lab not in keep]
    batch = [lab for lab in shared if lab in keep]
    rank = {lab: i for i, lab in enumerate(prefer)}
    batch.sort(key=lambda lab: rank.get(lab, len(rank)))
    free_a = [lab for lab in la if lab not in lb]
    free_b = [lab for lab in lb if lab not in la]
    sizes = dict(zip(la, shape_of(a)))
    sizes.update(zip(lb, shape_of(b)))
    m, n = _size([sizes[lab] for lab in free_a]), _size([sizes[lab] for lab in free_b])
    dtype = a.dtype
    # a product with a vector side (m or n is 1: matrix-vector, vector-matrix) reads its
    # matrix once whatever computes it; as a multiply and a sum it is a loop that fuses with
    # its neighbours (X @ w, the loss on it and X.T @ g: one pass over X's rows)
    if contracted and dtype.kind == "f" and m > 1 and n > 1:
        ra = [rank[lab] for lab in free_a if lab in rank]
        rb = [rank[lab] for lab in free_b if lab in rank]
        if ra and rb and max(rb) < min(ra):
            # the caller wants b's free axes first: compute (b^T a^T), no transpose afterwards
            a, la, b, lb, free_a, free_b = b, lb, a, la, free_b, free_a
        left = _as_matrices(a, la, batch, free_a, contracted)
        right = _as_matrices(b, lb, batch, contracted, free_b)
        r = _bind_matmul(left, right)
        labels = tuple(batch + free_a + free_b)
        return reshape(r, [sizes[lab] for lab in labels]), labels
    # a broadcast product (a in its own order, b's own axes after it), then the sum
    labels = la + tuple(free_b)
    a = reshape(a, list(shape_of(a)) + [1] * len(free_b))
    b = permute(b, lb, [lab for lab in la if lab in lb] + free_b)
    b = reshape(b, [sizes[lab] if lab in lb else 1 for lab in labels])
    return sum_labels(multiply(a, b), labels, set(contracted))


def contract_to(a, la, b, lb, out, dtype):
    """The product of a and b with axes labelled la and lb, summed over every label not in
    `out` and laid out as `out`, in `dtype` (NumPy's broadcasting of size-1 axes)."""
    (a, b), dt = product_dtype([a, b], dtype)
    (a, b), (la, lb) = broadcast_labels([a, b], [la, lb])
    r, labels = contract_pair(a, la, b, lb, out, prefer=out)
    r, labels = sum_labels(r, labels, set(labels) - set(out))
    return finish(permute(r, labels, out), dt)


# ---- the NumPy front end ------------------------------------------------------------------------
def _any_tensor(*xs):
    return builtins.any(isinstance(x, Tensor) for x in xs)


def _not_aligned(sa, sb, da, db):
    return ShapeError(f"shapes {tuple(sa)} and {tuple(sb)} not aligned: {sa[da]} (dim {da}) != "
                      f"{sb[db]} (dim {db}){where()}")


@implements(np.matmul)
def matmul(a, b):
    """a @ b: NumPy's batched matrix product (1-D operands, broadcast batch dims). A batch
    dim that only one operand has (or has with size > 1) is a free dim of that operand, as in
    XLA: nothing is broadcast in memory."""
    a, b = as_operand(a), as_operand(b)
    if not _any_tensor(a, b):
        return np.matmul(a, b)
    sa, sb = tuple(shape_of(a)), tuple(shape_of(b))
    if not sa or not sb:
        raise ShapeError(f"matmul: operands must be at least 1-D, got shapes {sa} and {sb}{where()}")
    ka, kb = len(sa) - 1, max(len(sb) - 2, 0)
    if sa[ka] != sb[kb]:
        raise ShapeError(f"matmul: shapes {sa} and {sb} not aligned: "
                         f"{sa[ka]} (dim {ka}) != {sb[kb]} (dim {kb}){where()}")
    batch = broadcast_shapes(sa[:-2], sb[:-2])
    nb = len(batch)
    la = tuple(("batch", nb - len(sa) + 2 + i) for i in range(len(sa) - 2)) + (("m",) if len(sa) > 1 else ()) + ("k",)
    lb = tuple(("batch", nb - len(sb) + 2 + i) for i in range(len(sb) - 2)) + ("k",) + (("n",) if len(sb) > 1 else ())
    out = tuple(("batch", i) for i in range(nb)) + (("m",) if len(sa) > 1 else ()) + (("n",) if len(sb) > 1 else ())
    return contract_to(a, la, b, lb, out, None)


@implements(np.dot)
def dot(a, b, out=None):
    """np.dot: a product with a scalar; otherwise the sum over a's last axis and b's
    second-to-last (its only axis when b is 1-D), with a's other axes then b's in the result."""
    no_out(out, "np.dot")
    a, b = as_operand(a), as_operand(b)
    if not _any_tensor(a, b):
        return np.dot(a, b)
    sa, sb = tuple(shape_of(a)), tuple(shape_of(b))
    if not sa or not sb:
        (a, b), dt = product_dtype([a, b])
        return finish(multiply(a, b), dt)
    kb = max(len(sb) - 2, 0)
    if sa[-1] != sb[kb]:
        raise _not_aligned(sa, sb, len(sa) - 1, kb)
    la = tuple(("a", i) for i in range(len(sa) - 1)) + ("k",)
    lb = tuple(("b", i) if i != kb else "k" for i in range(len(sb)))
    return contract_to(a, la, b, lb, la[:-1] + tuple(lab for lab in lb if lab != "k"), None)


@implements(np.vdot)
def vdot(a, b):
    """np.vdot: the dot product of the flattened operands (real values: no conjugation)."""
    a, b = as_operand(a), as_operand(b)
    if not _any_tensor(a, b):
        return np.vdot(a, b)
    if _size(shape_of(a)) != _size(shape_of(b)):
        raise ShapeError(f"vdot: arrays of sizes {_size(shape_of(a))} and {_size(shape_of(b))} "
                         f"(shapes {tuple(shape_of(a))} and {tuple(shape_of(b))}) have different "
                         f"lengths{where()}")
    return contract_to(ravel(a), ("k",), ravel(b), ("k",), (), None)


@implements(np.inner)
def inner(a, b):
    """np.inner: the sum over the last axes of a and b (a product with a scalar); the result
    has a's other axes, then b's."""
    a, b = as_operand(a), as_operand(b)
    if not _any_tensor(a, b):
        return np.inner(a, b)
    sa, sb = tuple(shape_of(a)), tuple(shape_of(b))
    if not sa or not sb:
        (a, b), dt = product_dtype([a, b])
        return finish(multiply(a, b), dt)
    if sa[-1] != sb[-1]:
        # NumPy reports b with its last axis moved to the front
        raise _not_aligned(sa, sb[-1:] + sb[:-1], len(sa) - 1, 0)
    la = tuple(("a", i) for i in range(len(sa) - 1)) + ("k",)
    lb = tuple(("b", i) for i in range(len(sb) - 1)) + ("k",)
    return contract_to(a, la, b, lb, la[:-1] + lb[:-1], None)


@implements(np.outer)
def outer(a, b, out=None):
    """np.outer: the product of every element of a (flattened) with every element of b."""
    no_out(out, "np.outer")
    a, b = as_operand(a), as_operand(b)
    if not _any_tensor(a, b):
        return np.outer(a, b)
    (a, b), dt = product_dtype([a, b])
    return finish(multiply(reshape(a, (-1, 1)), reshape(b, (1, -1))), dt)
