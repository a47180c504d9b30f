"""Rows: matrix products, tensor contractions (einsum, tensordot, kron, cross), diagonals and
triangles."""
import warnings

import numpy as np

from . import nondiff, op


# linear algebra
for _sa, _sb in [((3,), (3,)), ((3,), (3, 4)), ((3, 4), (4,)), ((2, 3), (3, 4)), ((5, 2, 3), (5, 3, 4)),
                 ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)), ((2, 1, 2, 3), (5, 3, 4)), ((3,), (5, 3, 4)),
                 ((5, 2, 3), (3,)), ((1, 3, 4), (5, 4, 2)), ((2, 1, 3, 4), (1, 5, 4, 2)), ((4, 1, 2, 3), (2, 3, 5))]:
    op("matmul @", lambda a, b: a @ b, (_sa, _sb))
op("np.matmul", lambda a, b: np.matmul(a, b), ((2, 3), (3, 4)), ((4, 2, 3), (1, 3, 2)))
op("np.dot", lambda a, b: np.dot(a, b), ((3,), (3,)), ((2, 3), (3, 4)), ((2, 3), (3,)), ((3,), (3, 4)),
   ((), (3,)), ((2, 3), ()), ((2, 3, 4), (5, 4, 2)), ((2, 3, 4), (4,)), ((4,), (2, 4, 3)), ((2, 3), (4, 3, 5)))
op("dot-method", lambda a, b: a.dot(b), ((2, 3), (3,)), ((2, 2, 3), (3, 2)))
op("ufunc.outer-subtract", lambda a, b: np.subtract.outer(a, b), ((3,), (4,)), ((2, 3), (2,)))
op("ufunc.outer-multiply-dtype", lambda a, b: np.multiply.outer(a, b, dtype=np.float64), ((3,), (2, 2)))
op("ufunc.outer-hypot", lambda a, b: np.hypot.outer(a, b), ((3,), (4,)), domain="nonzero")
op("np.outer", lambda a, b: np.outer(a, b), ((3,), (4,)), ((2, 3), (4,)), ((2, 2), (3, 1)), ((), (3,)))
op("matmul-rmatmul-const", lambda a: np.ones((2, 3)) @ a @ np.arange(4.0), ((3, 4),))
op("matmul-self", lambda a: a @ a.T, ((3, 4),))
# the weight's gradient sums two products: the CPU code generator adds one onto the other
# (matmul_add, codegen/products.py)
op("matmul-shared-weight", lambda w, x: np.tanh(x @ w) @ w, ((4, 4), (3, 4)))
op("np.inner", lambda a, b: np.inner(a, b), ((3,), (3,)), ((2, 3), (3,)), ((2, 3, 4), (5, 4)), ((2, 3), (4, 3)),
   ((3,), ()))
op("np.vdot", lambda a, b: np.vdot(a, b), ((4,), (4,)), ((2, 3), (6,)), ((2, 2), (2, 2)))
op("np.kron", lambda a, b: np.kron(a, b), ((3,), (2,)), ((2, 3), (2, 2)), ((2, 1, 2), (3,)), ((2,), (2, 3)),
   ((2, 3), ()))

# einsum: every subscript form (shapes chosen so that no two labels share a size by accident)
EINSUM = [
    ("ij,jk->ik", (3, 4), (4, 5)), ("ij,jk", (2, 3), (3, 4)), ("ij,kj->ik", (3, 4), (5, 4)),
    ("ji,jk->ik", (4, 3), (4, 5)), ("ji,kj->ik", (4, 3), (5, 4)), ("ij,jk->ki", (3, 4), (4, 5)),
    ("ij->ji", (3, 4)), ("ba", (2, 3)), ("ijk->kij", (2, 3, 4)), ("ii->i", (4, 4)), ("ii", (3, 3)),
    ("ii->", (3, 3)), ("iii->i", (3, 3, 3)), ("iji->j", (3, 4, 3)), ("iij->ji", (3, 3, 2)), ("ij->", (3, 4)),
    ("ij->j", (3, 4)), ("ijk->ki", (2, 3, 4)), ("i,i", (5,), (5,)), ("i,i->i", (5,), (5,)),
    ("i,j->ij", (3,), (4,)), ("i,j", (3,), (4,)), ("ij,ij->i", (3, 4), (3, 4)), ("ij,ij->", (3, 4), (3, 4)),
    ("ij,ji->", (3, 4), (4, 3)), ("ij,ij->ij", (3, 4), (3, 4)), ("ij,kl->ijkl", (2, 3), (4, 5)),
    ("ij,kl->", (2, 3), (4, 5)), ("ij,j->i", (3, 4), (4,)), ("j,ij->i", (4,), (3, 4)),
    ("bij,bjk->bik", (2, 3, 4), (2, 4, 5)), ("bij,jk->bik", (2, 3, 4), (4, 5)), ("ij,bjk->bik", (3, 4), (2, 4, 5)),
    ("bij,bkj->bki", (2, 3, 4), (2, 5, 4)), ("bij,bj->bi", (2, 3, 4), (2, 4)), ("bi,bij->bj", (3, 4), (3, 4, 5)),
    ("bi,bi->b", (3, 4), (3, 4)), ("bi,bj->bij", (2, 3), (2, 4)), ("ijk,ikj->i", (2, 3, 4), (2, 4, 3)),
    ("...ij,...jk->...ik", (2, 3, 4), (4, 5)), ("...ij,...jk->...ik", (2, 1, 3, 4), (5, 4, 2)),
    ("...ij,...jk", (3, 4), (2, 4, 5)), ("...ii->...i", (2, 3, 3)), ("...ii", (2, 3, 3)), ("bii->b", (2, 3, 3)),
    ("i...i", (3, 2, 3)), ("...i,...i", (2, 3, 4), (3, 4)), ("i...,i...->...", (2, 3), (2, 1)),
    ("ij...,jk...->ik...", (2, 3, 4), (3, 5, 4)), ("...,...", (2, 3), (3,)), ("ij,j", (3, 4), (1,)),
    ("bhqd,bhkd->bhqk", (2, 2, 3, 4), (2, 2, 5, 4)), ("bhqk,bhkd->bhqd", (2, 2, 3, 5), (2, 2, 5, 4)),
    ("bqhd,bkhd->bhqk", (2, 3, 2, 4), (2, 5, 2, 4)), ("i,ij,j->", (3,), (3, 4), (4,)),
    ("bi,ij,bj->b", (2, 3), (3, 4), (2, 4)), ("ij,jk,kl->il", (2, 3), (3, 4), (4, 5)),
    ("ij,jk,kl", (5, 3), (3, 4), (4, 2)), ("ab,cd,ef->", (2, 3), (4, 5), (3, 2)), ("ea,fb,abcd,gc,hd->efgh",
                                                                                   (2, 3), (2, 3), (3, 3, 2, 2), (2, 2), (3, 2)),
    ("ij,ij,ij->ij", (2, 3), (2, 3), (2, 3)), (",i->i", (), (3,)), ("i,->i", (3,), ()), ("", ()),
    (",", (), ()), ("Ab,bC->CA", (2, 3), (3, 4)), ("ijkl->lkji", (2, 3, 4, 5)), ("i,i->", (1,), (4,)),
]
for _sub, *_shapes in EINSUM:
    op(f"np.einsum '{_sub}'", lambda *a, _sub=_sub: np.einsum(_sub, *a), tuple(_shapes))
op("np.einsum sublist", lambda a, b: np.einsum(a, [0, 1], b, [1, 2], [0, 2]), ((2, 3), (3, 4)))
op("np.einsum sublist-ellipsis", lambda a: np.einsum(a, [Ellipsis, 0, 0]), ((2, 3, 3),))
op("np.einsum optimize", lambda a, b, c: np.einsum("ij,jk,kl->il", a, b, c, optimize=True),
   ((2, 3), (3, 4), (4, 5)))
op("np.einsum optimize-optimal", lambda a, b, c: np.einsum("i,ij,jk->k", a, b, c, optimize="optimal"),
   ((2,), (2, 3), (3, 4)))
op("np.einsum path", lambda a, b, c: np.einsum("ij,jk,kl", a, b, c, optimize=["einsum_path", (1, 2), (0, 1)]),
   ((2, 3), (3, 4), (4, 5)))
op("np.einsum path-triple", lambda a, b, c: np.einsum("ij,jk,kl", a, b, c, optimize=["einsum_path", (0, 1, 2)]),
   ((2, 3), (3, 4), (4, 5)))
op("np.einsum int-operand", lambda a: np.einsum("ij,j->i", a, np.arange(4, dtype=np.int8)), ((3, 4),))
op("np.einsum const-operand", lambda a: np.einsum("ij,jk->ik", a, np.ones((4, 2), a.dtype)), ((3, 4),))
op("np.einsum same-operand", lambda a: np.einsum("ij,ij->", a, a), ((3, 4),))
op("np.einsum gram", lambda a: np.einsum("bi,bj->ij", a, a), ((5, 3),))

# tensordot
op("np.tensordot", lambda a, b: np.tensordot(a, b), ((2, 3, 4), (3, 4, 5)), ((3, 4), (3, 4)))
op("np.tensordot-1", lambda a, b: np.tensordot(a, b, 1), ((2, 3), (3, 4)), ((2, 3, 4), (4, 5)))
op("np.tensordot-0", lambda a, b: np.tensordot(a, b, axes=0), ((2,), (3,)), ((2, 3), (2,)))
op("np.tensordot-pairs", lambda a, b: np.tensordot(a, b, axes=([0, 2], [2, 0])), ((2, 3, 4), (4, 5, 2)))
op("np.tensordot-int-pair", lambda a, b: np.tensordot(a, b, (1, 0)), ((2, 3), (3, 4)))
op("np.tensordot-neg", lambda a, b: np.tensordot(a, b, ([-1], [-2])), ((2, 3), (4, 3, 5)))
op("np.tensordot-empty", lambda a, b: np.tensordot(a, b, ([], [])), ((2,), (3, 2)))

# diagonals and traces
op("np.trace", lambda a: np.trace(a), ((3, 4),), ((4, 3),), ((3, 3),))
op("np.trace-offset", lambda a: np.trace(a, 1), ((3, 4),))
op("np.trace-neg-offset", lambda a: np.trace(a, offset=-2), ((4, 3),))
op("np.trace-axes", lambda a: np.trace(a, 1, 2, 0), ((3, 2, 4),))
op("np.trace-neg-axes", lambda a: np.trace(a, axis1=-1, axis2=-2), ((2, 3, 3),))
op("np.trace-off-the-end", lambda a: np.trace(a, 5), ((3, 4),))
op("trace-method", lambda a: a.trace(axis1=1, axis2=2), ((2, 3, 3),))
op("np.diagonal", lambda a: np.diagonal(a), ((3, 4),), ((4, 3),), ((3, 4, 2),))
op("np.diagonal-offset", lambda a: np.diagonal(a, 2), ((3, 4),))
op("np.diagonal-neg-offset", lambda a: np.diagonal(a, -1), ((3, 4),))
op("np.diagonal-axes", lambda a: np.diagonal(a, 1, 0, 2), ((3, 2, 4),))
op("np.diagonal-reversed-axes", lambda a: np.diagonal(a, -1, 2, 1), ((2, 3, 4),))
op("np.diagonal-neg-axes", lambda a: np.diagonal(a, 0, -2, -1), ((2, 3, 4),))
op("np.diagonal-empty", lambda a: np.diagonal(a, 4), ((3, 4),))
op("diagonal-method", lambda a: a.diagonal(1), ((3, 4),))
op("np.diag", lambda a: np.diag(a), ((3,),), ((3, 4),), ((1,),))
op("np.diag-k", lambda a: np.diag(a, 2), ((3,),), ((3, 4),))
op("np.diag-neg-k", lambda a: np.diag(a, k=-1), ((3,),), ((4, 3),))
op("np.diagflat", lambda a: np.diagflat(a), ((2, 2),))
op("np.diagflat-k", lambda a: np.diagflat(a, -1), ((3,),))
op("diag-of-diag", lambda a: np.diag(np.diag(a)), ((3, 3),))

# triangles
op("np.tril", lambda a: np.tril(a), ((3, 4),), ((4, 3),), ((2, 3, 3),), ((3,),))
op("np.tril-k", lambda a: np.tril(a, -1), ((3, 4),))
op("np.tril-k+", lambda a: np.tril(a, k=2), ((3, 4),))
op("np.triu", lambda a: np.triu(a), ((3, 4),), ((2, 3, 3),), ((3,),))
op("np.triu-k", lambda a: np.triu(a, 1), ((3, 4),))
op("np.triu-k-", lambda a: np.triu(a, k=-1), ((4, 3),))

# cross products
op("np.cross", lambda a, b: np.cross(a, b), ((3,), (3,)), ((4, 3), (3,)), ((2, 1, 3), (4, 3)))
op("np.cross-axes", lambda a, b: np.cross(a, b, axisa=0, axisb=1, axisc=0), ((3, 4), (4, 3)))
op("np.cross-axis", lambda a, b: np.cross(a, b, axis=0), ((3, 4), (3, 4)))
op("np.cross-neg-axes", lambda a, b: np.cross(a, b, axisa=-2, axisc=-2), ((3, 2), (2, 3)))


def _cross2(a, b):
    with warnings.catch_warnings():      # NumPy 2 deprecates 2-vectors, and jitgraph says so too
        warnings.simplefilter("ignore", DeprecationWarning)
        return np.cross(a, b)


op("np.cross-2d", _cross2, ((2,), (2,)), ((4, 2), (2,)), ((4, 2), (3,)), ((3,), (4, 2)))

# integer and boolean products (no gradient): computed as integer sums, booleans as logical
for _name, _fn in [
    ("einsum-int", lambda a, b: np.einsum("ij,jk->ik", (a * 4).astype(np.int64), (b * 4).astype(np.int64))),
    ("einsum-int8", lambda a, b: np.einsum("bij,bjk", (a * 20).astype(np.int8), (b * 20).astype(np.int8))),
    ("einsum-bool", lambda a, b: np.einsum("ij,jk", a > 0.5, b > 0.5)),
    ("matmul-int", lambda a, b: (a * 4).astype(np.int32) @ (b * 4).astype(np.int32)),
    ("dot-bool", lambda a, b: np.dot(a > 0, b > 0)),
]:
    nondiff(_name, _fn, ((2, 2, 3), (2, 3, 4)) if "int8" in _name else ((2, 3), (3, 4)))
nondiff("trace-int", lambda a: np.trace((a * 4).astype(np.int8)), ((3, 3),))
nondiff("tril-bool", lambda a: np.tril(a > 0, -1), ((3, 4),))
nondiff("diag-int", lambda a: np.diag((a * 4).astype(np.int32), 1), ((3,),))
nondiff("kron-int", lambda a, b: np.kron((a * 4).astype(np.int16), (b * 4).astype(np.int16)), ((2,), (2, 3)))
