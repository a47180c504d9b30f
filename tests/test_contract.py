"""Tensor contractions, diagonals and triangles (jitgraph/ops/contract.py, ops/products.py).

einsum against np.einsum on a table of subscripts with random shapes (eager, traced, the
gradient against central differences); the graphs the lowering builds (batched contractions
are matmuls with no broadcast copies, row-wise products are a multiply and a sum); dtypes;
NumPy's errors; and the compiled CPU path on a few einsum programs.
"""
import warnings
import zlib

import numpy as np
import pytest

import jitgraph as jg
from jitgraph.ops import contract as jc


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


# ---- einsum against NumPy ---------------------------------------------------------------------
# subscripts, and the ellipsis shape of each operand (None: the operand has no ellipsis)
SUBSCRIPTS = [
    "ij,jk->ik", "ij,jk", "ij,kj->ik", "ji,jk->ki", "ij->ji", "ba", "ijk->kji", "ijk->j",
    "ii->i", "ii", "ii->", "iii->i", "iji->ij", "iij->j", "ij->", "i,i", "i,i->i", "i,j->ij", "i,j",
    "ij,ij->i", "ij,ij->", "ij,ji->", "ij,ij->ij", "ij,kl->ijkl", "ij,kl->", "ij,j->i", "j,ij->i",
    "bij,bjk->bik", "bij,jk->bik", "ij,bjk->bki", "bij,bkj->bik", "bij,bj->bi", "bi,bij->bj",
    "bi,bi->b", "bi,bj->bij", "ijk,ikj->i", "bii->b", "bii->bi", "bhqd,bhkd->bhqk",
    "bhqk,bhkd->bhqd", "bqhd,bkhd->bhqk", "i,ij,j->", "bi,ij,bj->b", "ij,jk,kl->il",
    "ij,jk,kl->li", "ab,cd,ef->", "ab,bc,cd,de->ae", "ijk,jkl,lm->im", "ij,ij,ij->ij",
    "ea,fb,abcd,gc,hd->efgh", ",i->i", "i,->", "", "Ab,bC->CA", "aA,Aa->", "ijkl->lkji",
    "...ij,...jk->...ik", "...ii->...i", "...ii", "i...i", "...i,...i", "i...,i...->...",
    "ij...,jk...->ik...", "...,...", "...ij->...", "a...b,b...c->...ac",
]


def _shapes(sub, rng):
    """Random operand shapes for subscripts (each label one size; ellipses broadcast, some with
    size-1 axes)."""
    inputs = sub.split("->")[0].split(",")
    sizes = {c: int(rng.integers(1, 5)) for c in set(sub) if c.isalpha()}
    ell = tuple(int(d) for d in rng.integers(1, 4, size=2))
    shapes = []
    for k, term in enumerate(inputs):
        head, dots, tail = term.partition("...")
        mid = ()
        if dots:
            mid = ell[k % 2:]                      # operands with different ellipsis ranks
            mid = tuple(1 if (k + i) % 3 == 2 else d for i, d in enumerate(mid))   # and size-1 axes
        shapes.append(tuple(sizes[c] for c in head) + mid + tuple(sizes[c] for c in tail))
    return shapes


@pytest.mark.parametrize("sub", SUBSCRIPTS)
def test_einsum_matches_numpy(sub):
    rng = _rng("einsum", sub)
    xs = [rng.standard_normal(s) for s in _shapes(sub, rng)]
    expected = np.einsum(sub, *xs)
    graph = jg.make_graph(lambda *a: np.einsum(sub, *a))(*xs).verify()
    got = jg.eval_graph(graph, *xs)
    assert np.shape(got) == expected.shape and np.asarray(got).dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    # the gradient of <einsum, w> (eager and traced) against a central difference
    w = rng.standard_normal(expected.shape)
    argnums = tuple(range(len(xs)))

    def loss(*a):
        return np.sum(np.einsum(sub, *a) * w)

    v, g = jg.value_and_grad(loss, argnums)(*xs)
    np.testing.assert_allclose(v, np.sum(expected * w), rtol=1e-12, atol=1e-12)
    _, g_traced = jg.eval_graph(jg.make_graph(loss, argnums, grad=True)(*xs), *xs)
    for a, b in zip(g, g_traced):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    dirs = [rng.standard_normal(np.shape(x)) for x in xs]
    eps = 1e-6
    fd = (loss(*[x + eps * d for x, d in zip(xs, dirs)]) - loss(*[x - eps * d for x, d in zip(xs, dirs)])) / (2 * eps)
    assert abs(fd - sum(np.sum(gi * d) for gi, d in zip(g, dirs))) <= 1e-6 * max(1.0, abs(fd))


def test_einsum_float32_keeps_float32():
    rng = _rng("f32")
    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 4, 5)).astype(np.float32)
    graph = jg.make_graph(lambda a, b: np.einsum("bij,bjk->bik", a, b))(a, b)
    assert graph.outputs[0].dtype == np.float32
    np.testing.assert_allclose(jg.eval_graph(graph, a, b), np.einsum("bij,bjk->bik", a, b), rtol=1e-5)


@pytest.mark.parametrize("fn,args", [
    (lambda a, b: np.einsum("ij,jk", a, b), (np.arange(6, dtype=np.int8).reshape(2, 3) * 40,
                                             np.arange(12, dtype=np.int8).reshape(3, 4))),
    (lambda a, b: np.einsum("bij,bjk->bik", a, b), (np.arange(24).reshape(2, 3, 4), np.arange(40).reshape(2, 4, 5))),
    (lambda a, b: np.einsum("ij,jk", a, b), (np.eye(2, 3, dtype=bool), np.eye(3, 4, 1, dtype=bool))),
    (lambda a: np.einsum("ii", a), (np.ones((3, 3), dtype=bool),)),
    (lambda a, b: np.einsum("i,i->i", a, b), (np.ones(3, np.float32), np.arange(3, dtype=np.int8))),
    (lambda a: np.einsum("i,->i", a, 2.0), (np.ones(3, np.float32),)),           # a Python float is float64
    (lambda a: np.einsum("i,i", a, a, dtype=np.float32, casting="same_kind"), (np.arange(3.0),)),
    (lambda a: np.einsum("i,i", a, a, dtype=np.float64), (np.arange(3),)),
    (lambda a, b: np.dot(a, b), (np.eye(2, 3, dtype=bool), np.eye(3, dtype=bool))),
    (lambda a, b: a @ b, (np.arange(6).reshape(2, 3), np.arange(12).reshape(3, 4))),
    (lambda a: np.dot(a, 2.0), (np.ones((2, 3), np.float32),)),
    (lambda a: np.inner(a, 2.0), (np.ones(3, np.float32),)),
    (lambda a: np.outer(a, a), (np.ones(3, bool),)),
    (lambda a: np.kron(a, a), (np.ones(2, np.int16),)),
    (lambda a: np.vdot(a, a), (np.ones(3, bool),)),
    (lambda a: np.tensordot(a, a, 1), (np.arange(9, dtype=np.uint8).reshape(3, 3),)),
    (lambda a: np.trace(a), (np.arange(9, dtype=np.int8).reshape(3, 3),)),
    (lambda a: np.trace(a, dtype=np.float32), (np.arange(9.0).reshape(3, 3),)),
    (lambda a: np.diag(a, 1), (np.ones(2, bool),)),
    (lambda a: np.tril(a), (np.ones((3, 3), bool),)),
    (lambda a: np.cross(a, a + 1), (np.arange(6).reshape(2, 3),)),
])
def test_dtypes_match_numpy(fn, args):
    expected = fn(*args)
    graph = jg.make_graph(fn)(*args)
    got = jg.eval_graph(graph, *args)
    assert np.asarray(got).dtype == np.asarray(expected).dtype
    np.testing.assert_array_equal(got, expected)


def test_without_traced_values_the_functions_are_numpys():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    assert np.array_equal(jc.einsum("ij,jk", a, b), np.einsum("ij,jk", a, b))
    assert np.array_equal(jc.tensordot(a, b, 1), a @ b)
    assert np.array_equal(jc.diagonal(b, 1), np.diagonal(b, 1))
    assert np.array_equal(jc.tril(b, -1), np.tril(b, -1))


# ---- the graphs ---------------------------------------------------------------------------------
def _graph(fn, *shapes, grad=True):
    rng = _rng("graph", shapes)
    xs = [rng.standard_normal(s) for s in shapes]
    return jg.make_graph(fn, tuple(range(len(xs))), grad=grad)(*xs), xs


def _ops(graph):
    return [n.op for n in graph.nodes]


@pytest.mark.parametrize("sub,shapes", [
    ("bij,bjk->bik", [(16, 8, 9), (16, 9, 7)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 8, 5), (2, 3, 6, 5)]),
    ("bqhd,bkhd->bhqk", [(2, 8, 3, 5), (2, 6, 3, 5)]),
    ("...ij,...jk->...ik", [(4, 1, 8, 9), (3, 9, 7)]),
])
def test_batched_contraction_is_a_matmul_without_broadcast_copies(sub, shapes):
    graph, xs = _graph(lambda *a: np.sum(np.einsum(sub, *a) ** 2), *shapes)
    ops = _ops(graph)
    assert ops.count("matmul") == 3            # the product and the two operands' gradients
    biggest = max(x.size for x in xs)
    out = np.einsum(sub, *xs).size
    for n in graph.nodes:
        if n.op in ("broadcast", "mul"):
            # nothing the size of the batched product (b * m * k * n) is formed
            assert n.size <= max(biggest, out), (n, graph)


def test_matmul_broadcast_batch_dims_are_free_dims():
    # (5, 2, 3) @ (3, 4): one 2-D (BLAS) product of (10, 3) and (3, 4), no broadcast of b
    graph, _ = _graph(lambda a, b: np.sum(np.sin(a @ b)), (5, 2, 3), (3, 4))
    mm = [n for n in graph.nodes if n.op == "matmul"]
    assert all(n.ndim == 2 for n in mm) and "broadcast" not in _ops(graph)
    assert mm[0].shape == (10, 4)
    # (2, 1, 2, 3) @ (5, 3, 4): each operand's batch axis is one of its free axes
    graph, _ = _graph(lambda a, b: np.sum(np.sin(a @ b)), (2, 1, 2, 3), (5, 3, 4))
    assert "broadcast" not in _ops(graph) and all(n.ndim == 2 for n in graph.nodes if n.op == "matmul")


def test_two_dimensional_products_are_unchanged():
    graph, _ = _graph(lambda a, b: np.sum(np.tanh(a @ b)), (5, 4), (4, 3), grad=False)
    assert _ops(graph)[2:] == ["matmul", "tanh", "reduce_sum"]
    graph, _ = _graph(lambda a, b: np.sum(np.einsum("ij,jk->ik", a, b)), (5, 4), (4, 3), grad=False)
    assert "matmul" in _ops(graph) and "transpose" not in _ops(graph)


@pytest.mark.parametrize("sub,shapes", [
    ("ij,ij->i", [(6, 5), (6, 5)]), ("bi,bi->b", [(6, 5), (6, 5)]), ("i,j->ij", [(6,), (5,)]),
    ("bij,bj->bi", [(4, 6, 5), (4, 5)]), ("ij,ij->", [(6, 5), (6, 5)]),
])
def test_elementwise_products_are_a_multiply_and_a_sum(sub, shapes):
    graph, _ = _graph(lambda *a: np.sum(np.einsum(sub, *a) ** 2), *shapes)
    ops = _ops(graph)
    assert "matmul" not in ops and "mul" in ops


def test_single_operand_labels_are_summed_first():
    # 'ij,jk->i' sums k out of b before the product (a matrix-vector product, not a matmul of b)
    graph, _ = _graph(lambda a, b: np.einsum("ij,jk->i", a, b), (6, 5), (5, 4), grad=False)
    sums = [n for n in graph.nodes if n.op == "reduce_sum"]
    assert sums[0].inputs[0].shape == (5, 4)


def test_greedy_order_contracts_the_cheap_pair_first():
    # (a @ b) @ c costs 2*300*400 + 2*400*3; a @ (b @ c) costs 300*400*3 + 2*300*3: the order of
    # the operands in the subscripts does not decide it
    graph, _ = _graph(lambda a, b, c: np.einsum("ij,jk,kl->il", a, b, c), (2, 300), (300, 400), (400, 3), grad=False)
    first = next(n for n in graph.nodes if n.op == "matmul")
    assert {tuple(x.shape) for x in first.inputs} == {(2, 300), (300, 400)}
    graph, _ = _graph(lambda a, b, c: np.einsum("ij,jk,kl->il", a, b, c), (300, 2), (2, 400), (400, 300), grad=False)
    first = next(n for n in graph.nodes if n.op == "matmul")
    assert {tuple(x.shape) for x in first.inputs} == {(2, 400), (400, 300)}


def test_explicit_path_is_followed():
    fn = lambda a, b, c: np.einsum("ij,jk,kl", a, b, c, optimize=["einsum_path", (1, 2), (0, 1)])
    graph, xs = _graph(fn, (2, 3), (3, 4), (4, 5), grad=False)
    first = next(n for n in graph.nodes if n.op == "matmul")
    assert {tuple(x.shape) for x in first.inputs} == {(3, 4), (4, 5)}
    np.testing.assert_allclose(jg.eval_graph(graph, *xs), fn(*xs), rtol=1e-12)


def test_nd_dot_inner_tensordot_are_matmuls():
    for fn, shapes in [(np.dot, [(2, 3, 4), (5, 4, 6)]), (np.inner, [(2, 3, 4), (5, 4)]),
                       (lambda a, b: np.tensordot(a, b, axes=([1, 2], [0, 1])), [(2, 3, 4), (3, 4, 5)])]:
        graph, xs = _graph(fn, *shapes, grad=False)
        assert "matmul" in _ops(graph)
        np.testing.assert_allclose(jg.eval_graph(graph, *xs), fn(*xs), rtol=1e-12)


def test_diagonals_are_strided_slices():
    for fn in (np.trace, np.diagonal, np.diag, lambda a: np.einsum("ii->i", a)):
        graph, _ = _graph(lambda a: np.sum(fn(a) ** 2), (5, 5))
        ops = _ops(graph)
        assert "slice" in ops and "pad_slice" in ops and "gather" not in ops and "transpose" not in ops
    graph, _ = _graph(lambda v: np.sum(np.diag(v, 1) ** 2), (4,))
    assert "pad_slice" in _ops(graph) and "scatter_add" not in _ops(graph)


# ---- semantics -----------------------------------------------------------------------------------
def test_triangles_keep_inf_and_nan_out_of_the_zeros():
    a = np.array([[1.0, np.inf], [np.nan, 2.0]])
    for fn in (np.tril, np.triu):
        np.testing.assert_array_equal(jg.eval_graph(jg.make_graph(fn)(a), a), fn(a))
    _, g = jg.value_and_grad(lambda a: np.sum(np.tril(a) * 3.0))(np.ones((2, 3)))
    np.testing.assert_array_equal(g, 3.0 * np.tri(2, 3))


def test_cross_with_2_vectors_warns_like_numpy():
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0, 5.0])
    with pytest.warns(DeprecationWarning, match="2-dimensional vectors"):
        got = jg.eval_graph(jg.make_graph(lambda a, b: np.cross(a, b))(a, b), a, b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        np.testing.assert_array_equal(got, np.cross(a, b))


def test_einsum_path_of_traced_operands_is_numpys():
    a, b, c = np.ones((2, 30)), np.ones((30, 40)), np.ones((40, 3))
    seen = {}

    def f(a, b, c):
        seen["path"] = np.einsum_path("ij,jk,kl->il", a, b, c, optimize="greedy")
        return np.sum(np.einsum("ij,jk,kl->il", a, b, c, optimize=seen["path"][0]))

    jg.make_graph(f)(a, b, c)
    assert seen["path"] == np.einsum_path("ij,jk,kl->il", a, b, c, optimize="greedy")


def test_second_order():
    """The Hessian of the bilinear form x^T A x is A + A^T; of a batched trace of x x^T, 2."""
    rng = _rng("hvp")
    A, x, v = rng.standard_normal((4, 4)), rng.standard_normal(4), rng.standard_normal(4)
    hv = jg.hvp(lambda x, A: np.einsum("i,ij,j->", x, A, x), argnums=0)(x, A, v)
    np.testing.assert_allclose(hv, (A + A.T) @ v, rtol=1e-12)
    X, V = rng.standard_normal((2, 3, 3)), rng.standard_normal((2, 3, 3))
    hv = jg.hvp(lambda X: np.sum(np.einsum("bii->b", np.einsum("bij,bkj->bik", X, X))), argnums=0)(X, V)
    np.testing.assert_allclose(hv, 2 * V, rtol=1e-12)


ERRORS = [
    (lambda a: np.einsum("ij,jk", a, np.ones((4, 5))), (2, 3), ValueError, "could not be broadcast"),
    (lambda a: np.einsum("ij", a), (3,), ValueError, "too many subscripts for operand 0"),
    (lambda a: np.einsum("i", a), (2, 3), ValueError, "no '...' ellipsis"),
    (lambda a: np.einsum("ij,jk", a), (2, 3), ValueError, "operands provided to einstein sum"),
    (lambda a: np.einsum("i->ii", a), (3,), ValueError, "output subscript 'i' multiple times"),
    (lambda a: np.einsum("i->j", a), (3,), ValueError, "'j' which never appeared in an input"),
    (lambda a: np.einsum("i1", a), (3, 3), ValueError, "invalid subscript '1'"),
    (lambda a: np.einsum("ii", a), (2, 3), ValueError, r"collapsing index 'i' don't match \(2 != 3\)"),
    (lambda a: np.einsum("...i->i", a), (2, 3), ValueError, "output has more dimensions"),
    (lambda a: np.einsum("i.j", a), (2, 3), ValueError, "not part of an ellipsis"),
    (lambda a: np.einsum("i-j", a), (2,), ValueError, "proper '->'"),
    (lambda a: np.einsum("i,i", a, a, dtype=np.int32), (2,), TypeError, "according to the rule 'safe'"),
    (lambda a: np.einsum("i,i,i", a, a, a, optimize=["einsum_path", (0, 1)]), (2,), RuntimeError,
     "1 more operands"),
    (lambda a: np.einsum("i,i", a, a, optimize=[(0, 1)]), (2,), TypeError, "Did not understand the path"),
    (lambda a: np.einsum("i,i", a, a, out=np.zeros(())), (2,), jg.NotSupportedError, "out="),
    (lambda a: np.tensordot(a, np.ones((4, 5))), (2, 3), ValueError, "shape-mismatch for sum"),
    (lambda a: np.tensordot(a, a, axes=([0, 0], [0, 1])), (3, 3), ValueError, "duplicate axes"),
    (lambda a: np.dot(a, np.ones(4)), (2, 3), ValueError, r"not aligned: 3 \(dim 1\) != 4 \(dim 0\)"),
    (lambda a: np.dot(a, np.ones((5, 3, 2))), (2, 3, 4), ValueError, r"not aligned: 4 \(dim 2\) != 3 \(dim 1\)"),
    (lambda a: np.inner(a, np.ones((2, 4))), (2, 3), ValueError, "not aligned"),
    (lambda a: np.vdot(a, np.ones(4)), (3,), ValueError, "vdot"),
    (lambda a: a @ np.ones((3, 3, 4)), (2, 2, 3), ValueError, "could not be broadcast"),
    (lambda a: np.diag(a), (2, 2, 2), ValueError, "Input must be 1- or 2-d."),
    (lambda a: np.diagonal(a), (3,), ValueError, "at least two dimensions"),
    (lambda a: np.diagonal(a, 0, 1, -1), (3, 3), ValueError, "axis1 and axis2 cannot be the same"),
    (lambda a: np.diagonal(a, 0, 0, 2), (3, 3), ValueError, "axis2: axis 2 is out of bounds"),
    (lambda a: np.trace(a), (3,), ValueError, "at least two dimensions"),
    (lambda a: np.cross(a, np.ones(3)), (4,), ValueError, "incompatible dimensions for cross product"),
    (lambda a: np.cross(a, a, axisc=5), (2, 3), ValueError, "axisc"),
    (lambda a: np.tril(a), (), TypeError, "tri()"),
]


@pytest.mark.parametrize("fn,shape,exc,match", ERRORS)
def test_errors_like_numpy(fn, shape, exc, match):
    x = np.ones(shape)
    if exc is not jg.NotSupportedError:
        with pytest.raises(exc):
            fn(x)                                      # NumPy's own error type
    with pytest.raises(exc, match=match):
        jg.make_graph(fn)(x)


# ---- compiled ---------------------------------------------------------------------------------------
PROGRAMS = {
    "attention": (lambda q, k: np.sum(jg.softmax(np.einsum("bhqd,bhkd->bhqk", q, k) * 0.5, axis=-1) ** 2),
                  [(2, 3, 5, 4), (2, 3, 6, 4)]),
    "bilinear": (lambda x, A, y: np.einsum("i,ij,j->", x, A, y), [(5,), (5, 4), (4,)]),
    "batched-trace": (lambda X: np.sum(np.sin(np.einsum("bii->b", X))), [(3, 4, 4)]),
    "chain": (lambda a, b, c: np.sum(np.einsum("ij,jk,kl->li", a, b, c) ** 2), [(2, 3), (3, 4), (4, 5)]),
    "broadcast-matmul": (lambda a, b: np.sum(np.tanh(a @ b)), [(2, 1, 3, 4), (5, 4, 2)]),
    "nd-dot": (lambda a, b: np.sum(np.dot(a, b) ** 2), [(2, 3, 4), (5, 4, 2)]),
    "diag-tril-cross": (lambda a, v: np.sum(np.tril(a, -1) ** 2) + np.sum(np.diag(v, 1) * a[0, 0])
                        + np.sum(np.cross(a[:, :3], v[:3]) ** 2) + np.sum(np.kron(v, a) ** 2), [(4, 4), (3,)]),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_compiled_cpu(name, dtype):
    fn, shapes = PROGRAMS[name]
    rng = _rng("compiled", name)
    xs = [rng.standard_normal(s).astype(dtype) for s in shapes]
    argnums = tuple(range(len(xs)))
    v_ref, g_ref = jg.value_and_grad(fn, argnums)(*xs)
    v, g = jg.jit_grad(fn, argnums=argnums)(*xs)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(v, v_ref, rtol=tol, atol=tol)
    for a, b in zip(g, g_ref):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, float(np.max(np.abs(b)))))


def test_compiled_integer_contraction():
    """Integer contractions are products and sums in loops (Numba's BLAS products are floating)."""
    a, b = np.arange(24, dtype=np.int32).reshape(2, 3, 4), np.arange(40, dtype=np.int32).reshape(2, 4, 5)
    f = jg.jit(lambda a, b: (np.einsum("bij,bjk->bik", a, b), a[0] @ b[1], np.trace(a[0])))
    for got, expected in zip(f(a, b), (np.einsum("bij,bjk->bik", a, b), a[0] @ b[1], np.trace(a[0]))):
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("sub,shapes", [("ij,jk->ik", [(3, 0), (0, 4)]), ("ij,jk->ik", [(0, 3), (3, 4)]),
                                        ("bij,bjk->bik", [(2, 3, 0), (2, 0, 4)]), ("ii", [(0, 0)]),
                                        ("ij,ij->i", [(0, 3), (0, 3)])])
def test_zero_size_operands(sub, shapes):
    rng = _rng("zero", sub, shapes)
    xs = [rng.standard_normal(s) for s in shapes]
    expected = np.einsum(sub, *xs)
    w = rng.standard_normal(expected.shape)
    argnums = tuple(range(len(xs)))

    def loss(*a):
        return np.sum(np.einsum(sub, *a) * w)

    for v, g in (jg.value_and_grad(loss, argnums)(*xs), jg.jit_grad(loss, argnums=argnums)(*xs)):
        np.testing.assert_allclose(v, np.sum(expected * w), rtol=1e-12, atol=1e-12)
        for gi, x in zip(g, xs):
            assert gi.shape == x.shape
        if expected.size and 0 in shapes[0]:      # an empty contraction: the other gradient is zero
            np.testing.assert_array_equal(g[-1], np.zeros(shapes[-1]))
