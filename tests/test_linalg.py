"""np.linalg: NumPy's values, dtypes, keywords and errors; gradients against the analytic formulas;
batched stacks; the compiled routines (Python mode for most programs, Numba for a few).

The op table (tests/optable/linalg.py) checks every function against finite differences,
first and second order; these tests check what a random-direction difference cannot:
exact formulas, the triangle a function reads, subgradients at zero, errors.
"""
import re
import sys

import numpy as np
import pytest
import scipy.linalg

import jitgraph as jg
from jitgraph.codegen import native
from jitgraph.codegen.emit_cpu import NJIT_ENTRY_MAX_STEPS

RNG = np.random.default_rng(2024)


def spd(n, batch=(), dtype=np.float64):
    a = RNG.standard_normal(batch + (n, n))
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


def general(shape, dtype=np.float64):
    n = shape[-1]
    a = RNG.standard_normal(shape)
    if len(shape) >= 2 and shape[-1] == shape[-2]:
        a = a + 3 * np.eye(n)
    return a.astype(dtype)


def traced(fn, *args):
    """fn's value through make_graph + eval_graph."""
    return jg.eval_graph(jg.make_graph(fn)(*args).verify(), *args)


def eager(fn, *args):
    """fn's value recorded on an eager tape (the arguments are recorded values)."""
    seen = {}

    def loss(*xs):
        seen["out"] = fn(*xs)
        return np.sum(xs[0])

    jg.value_and_grad(loss, tuple(range(len(args))))(*args)
    return jg.tree_map(lambda v: np.asarray(getattr(v, "value", v)), seen["out"])


def assert_same(got, want, rtol=1e-12):
    got_l, want_l = jg.tree_flatten(got)[0], jg.tree_flatten(want)[0]
    assert len(got_l) == len(want_l)
    for g, w in zip(got_l, want_l):
        w = np.asarray(w)
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(1.0, float(np.max(np.abs(w), initial=0))))


# ---- values: every function, batched, with its keywords, in every mode -----------------------------
CASES = [
    ("solve", lambda a, b: np.linalg.solve(a, b), [(2, 3, 4, 4), (2, 3, 4, 2)]),
    ("solve-vector", lambda a, b: np.linalg.solve(a, b), [(2, 4, 4), (4,)]),
    ("solve-broadcast", lambda a, b: np.linalg.solve(a, b), [(2, 1, 4, 4), (3, 4, 1)]),
    ("inv", lambda a: np.linalg.inv(a), [(2, 3, 4, 4)]),
    ("det", lambda a: np.linalg.det(a), [(2, 3, 4, 4)]),
    ("slogdet", lambda a: tuple(np.linalg.slogdet(-a)), [(3, 4, 4)]),
    ("cholesky", lambda a: np.linalg.cholesky(a @ np.swapaxes(a, -1, -2)), [(2, 3, 4, 4)]),
    ("cholesky-upper", lambda a: np.linalg.cholesky(a @ np.swapaxes(a, -1, -2), upper=True), [(2, 4, 4)]),
    ("eigh", lambda a: tuple(np.linalg.eigh(a)), [(2, 3, 4, 4)]),
    ("eigh-U", lambda a: tuple(np.linalg.eigh(a, UPLO="U")), [(3, 4, 4)]),
    ("eigh-u", lambda a: tuple(np.linalg.eigh(a, "u")), [(4, 4)]),
    ("svd", lambda a: tuple(np.linalg.svd(a)), [(2, 3, 5, 4)]),
    ("svd-wide", lambda a: tuple(np.linalg.svd(a, full_matrices=True)), [(2, 3, 5)]),
    ("svd-reduced", lambda a: tuple(np.linalg.svd(a, full_matrices=False)), [(2, 5, 3)]),
    ("svd-values", lambda a: np.linalg.svd(a, compute_uv=False), [(2, 3, 4, 6)]),
    ("svd-hermitian", lambda a: tuple(np.linalg.svd(a + np.swapaxes(a, -1, -2), hermitian=True)), [(2, 4, 4)]),
    ("svd-hermitian-values", lambda a: np.linalg.svd(a, compute_uv=False, hermitian=True), [(2, 4, 4)]),
    ("qr", lambda a: tuple(np.linalg.qr(a)), [(2, 3, 5, 3)]),
    ("qr-wide", lambda a: tuple(np.linalg.qr(a)), [(2, 3, 5)]),
    ("qr-complete", lambda a: tuple(np.linalg.qr(a, mode="complete")), [(2, 5, 3)]),
    ("qr-r", lambda a: np.linalg.qr(a, "r"), [(2, 5, 3)]),
    ("pinv", lambda a: np.linalg.pinv(a), [(2, 3, 5, 3)]),
    ("pinv-rcond", lambda a: np.linalg.pinv(a, rcond=0.5), [(2, 3, 5)]),
    ("pinv-rtol", lambda a: np.linalg.pinv(a, rtol=None), [(2, 4, 4)]),
    ("pinv-hermitian", lambda a: np.linalg.pinv(a, hermitian=True), [(2, 4, 4)]),
    ("lstsq", lambda a, b: np.linalg.lstsq(a, b), [(6, 3), (6,)]),
    ("lstsq-2d", lambda a, b: np.linalg.lstsq(a, b, rcond=None), [(6, 3), (6, 2)]),
    ("lstsq-wide", lambda a, b: np.linalg.lstsq(a, b), [(3, 6), (3, 2)]),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name,fn,shapes", CASES, ids=[c[0] for c in CASES])
def test_values_match_numpy(name, fn, shapes, dtype):
    args = [general(s, dtype) for s in shapes]
    want = fn(*args)
    rtol = 1e-12 if dtype == np.float64 else 2e-6
    assert_same(traced(fn, *args), want, rtol)
    assert_same(eager(fn, *args), want, rtol)
    assert_same(jg.jit(fn, backend="python")(*args), want, rtol)


def test_integers_and_mixed_dtypes_promote_like_numpy():
    a = np.array([[4, 1], [2, 3]])
    b = np.array([1, 2])
    for fn in (np.linalg.solve, lambda a, b: np.linalg.inv(a) @ b, lambda a, b: np.linalg.det(a) * b,
               lambda a, b: np.linalg.norm(a, axis=1) + b, lambda a, b: np.linalg.lstsq(a, b)[0]):
        want = fn(a, b)
        assert want.dtype == np.float64
        assert_same(traced(fn, a, b), want)
    a32, b64 = a.astype(np.float32), b.astype(np.float64)
    assert traced(np.linalg.solve, a32, b64).dtype == np.linalg.solve(a32, b64).dtype == np.float64
    assert traced(np.linalg.solve, a32, b.astype(np.float32)).dtype == np.float32
    assert traced(lambda a: np.linalg.norm(a, 2), a).dtype == np.float64
    assert traced(lambda a: np.linalg.eigh(a)[0], np.array([[2, 1], [1, 2]], np.int32)).dtype == np.float64
    # the rank of lstsq is NumPy's int32
    assert traced(lambda a, b: np.linalg.lstsq(a, b)[2], a, b).dtype == np.int32


def test_results_are_numpy_named_tuples():
    a = spd(3)

    def f(a):
        e, s, q = np.linalg.eigh(a), np.linalg.svd(a), np.linalg.qr(a)
        return e.eigenvalues, e.eigenvectors, s.U, s.S, s.Vh, q.Q, q.R, np.linalg.slogdet(a).logabsdet

    assert_same(traced(f, a), f(a))
    out = jg.jit(lambda a: np.linalg.eigh(a), backend="python")(a)
    assert type(out) is type(np.linalg.eigh(a)) and out.eigenvalues.shape == (3,)


# ---- norm: every form against np.linalg.norm -------------------------------------------------------
VECTOR_ORDS = [None, 2, 1, 0, np.inf, -np.inf, 3, 0.5, -1, -2.5]
MATRIX_ORDS = [None, "fro", "f", "nuc", 2, -2, 1, -1, np.inf, -np.inf]
NORM_FORMS = (
    [((5,), o, None, kd) for o in VECTOR_ORDS for kd in (False, True)]
    + [((2, 3, 4), o, ax, kd) for o in VECTOR_ORDS for ax in (0, -1, 1) for kd in (False, True)]
    + [((3, 4), o, None, kd) for o in MATRIX_ORDS for kd in (False, True)]
    + [((2, 3, 4), o, ax, kd) for o in MATRIX_ORDS for ax in ((1, 2), (2, 0), (-1, -3), (0, 1))
       for kd in (False, True)]
    + [((2, 3, 4), None, None, kd) for kd in (False, True)]
    + [((3, 0), o, ax, False) for o, ax in ((None, None), (np.inf, 1), (1, None), (np.inf, None), (2, 0))]
)


@pytest.mark.parametrize("shape,ord,axis,keepdims", NORM_FORMS,
                         ids=[f"{s}-{o}-{a}-{k}" for s, o, a, k in NORM_FORMS])
def test_norm_forms_match_numpy(shape, ord, axis, keepdims):
    x = RNG.standard_normal(shape)
    if x.size:
        x[..., 0] = 0.0      # zeros: ord=0 counts them, negative orders see infinities
    fn = lambda x: np.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)   # noqa: E731
    with np.errstate(divide="ignore"):
        want = fn(x)
        assert_same(traced(fn, x), want)
        assert_same(eager(fn, x), want)
        x32 = x.astype(np.float32)
        assert_same(traced(fn, x32), fn(x32), rtol=2e-6)


def test_norm_of_integers_is_float64():
    x = np.arange(-3, 3).reshape(2, 3)
    for ord_, axis in [(None, None), (1, 0), (np.inf, 1), ("nuc", None), (0, 1)]:
        fn = lambda x, o=ord_, a=axis: np.linalg.norm(x, o, a)   # noqa: E731
        assert_same(traced(fn, x), fn(x))


@pytest.mark.parametrize("x,kw,exc,msg", [
    (np.ones(3), {"ord": "fro"}, ValueError, "Invalid norm order 'fro' for vectors"),
    (np.ones(3), {"ord": "nuc"}, ValueError, "Invalid norm order 'nuc' for vectors"),
    (np.ones((2, 3)), {"ord": 3}, ValueError, "Invalid norm order for matrices."),
    (np.ones((2, 3)), {"ord": "bad", "axis": (0, 1)}, ValueError, "Invalid norm order for matrices."),
    (np.ones((2, 3)), {"axis": (0, 0)}, ValueError, "Duplicate axes given."),
    (np.ones((2, 3)), {"axis": (-1, 1)}, ValueError, "Duplicate axes given."),
    (np.ones((2, 3, 4)), {"ord": 2}, ValueError, "Improper number of dimensions to norm."),
    (np.ones((2, 3, 4)), {"axis": (0, 1, 2)}, ValueError, "Improper number of dimensions to norm."),
    (np.ones((2, 3)), {"axis": 2}, ValueError, "out of bounds"),
    (np.ones((2, 3)), {"axis": "a"}, TypeError, "'axis' must be None, an integer or a tuple of integers"),
])
def test_norm_errors_like_numpy(x, kw, exc, msg):
    with pytest.raises(exc, match=msg):
        np.linalg.norm(x, **kw)
    with pytest.raises(exc, match=msg):
        jg.make_graph(lambda x: np.linalg.norm(x, **kw))(x)


# ---- errors ------------------------------------------------------------------------------------------
SINGULAR = np.array([[1.0, 2.0], [2.0, 4.0]])
NOT_PD = np.array([[1.0, 2.0], [2.0, 1.0]])


@pytest.mark.parametrize("fn,a,msg", [
    (lambda a: np.linalg.solve(a, np.ones(2)), SINGULAR, "Singular matrix"),
    (lambda a: np.linalg.inv(a), SINGULAR, "Singular matrix"),
    (lambda a: np.linalg.cholesky(a), NOT_PD, "Matrix is not positive definite"),
], ids=["solve", "inv", "cholesky"])
def test_linalg_error_eager_traced_and_compiled(fn, a, msg):
    with pytest.raises(np.linalg.LinAlgError, match=msg):
        fn(a)
    with pytest.raises(np.linalg.LinAlgError, match=msg):
        jg.value_and_grad(lambda a: np.sum(fn(a)))(a)
    with pytest.raises(np.linalg.LinAlgError, match=msg):
        jg.eval_graph(jg.make_graph(lambda a: np.sum(fn(a)), grad=True)(np.eye(2) * 2), a)
    for backend in ("python", "numba"):
        f = jg.jit(fn, backend=backend)
        f(np.eye(2) * 2)
        with pytest.raises(np.linalg.LinAlgError, match=msg):
            f(a)


def test_singular_determinant_is_zero_compiled():
    f = jg.jit(lambda a: (np.linalg.det(a), np.linalg.slogdet(a)[0], np.linalg.slogdet(a)[1]))
    det, sign, logdet = f(SINGULAR)
    assert det == 0.0 and sign == 0.0 and logdet == -np.inf


@pytest.mark.parametrize("fn,args,exc,msg", [
    (np.linalg.inv, (np.ones((2, 3)),), np.linalg.LinAlgError, "Last 2 dimensions of the array must be square"),
    (np.linalg.det, (np.ones(3),), np.linalg.LinAlgError,
     "1-dimensional array given. Array must be at least two-dimensional"),
    (np.linalg.cholesky, (np.ones((3, 2)),), np.linalg.LinAlgError, "must be square"),
    (np.linalg.svd, (np.ones(3),), np.linalg.LinAlgError, "Array must be at least two-dimensional"),
    (np.linalg.solve, (np.eye(3), np.ones(2)), ValueError, r"solve1: Input operand 1 has a mismatch in its "
     r"core dimension 0, with gufunc signature \(m,m\),\(m\)->\(m\) \(size 2 is different from 3\)"),
    (np.linalg.solve, (np.eye(3), np.ones((2, 2))), ValueError, r"solve: Input operand 1 has a mismatch"),
    (np.linalg.lstsq, (np.ones((3, 2)), np.ones(4)), np.linalg.LinAlgError, "Incompatible dimensions"),
    (np.linalg.lstsq, (np.ones((2, 3, 2)), np.ones(3)), np.linalg.LinAlgError, "Array must be two-dimensional"),
    (lambda a: np.linalg.eigh(a, "X"), (np.eye(2),), ValueError, "UPLO argument must be 'L' or 'U'"),
    (lambda a: np.linalg.qr(a, "bogus"), (np.eye(2),), ValueError, "Unrecognized mode 'bogus'"),
    (lambda a: np.linalg.pinv(a, rcond=0.1, rtol=0.1), (np.eye(2),), ValueError,
     "`rtol` and `rcond` can't be both set."),
])
def test_shape_and_argument_errors_like_numpy(fn, args, exc, msg):
    with pytest.raises(exc, match=msg):
        fn(*args)
    with pytest.raises(exc, match=msg):
        jg.make_graph(fn)(*args)


def test_unsupported_forms_are_clear():
    with pytest.raises(jg.NotSupportedError, match="mode='raw'"):
        jg.make_graph(lambda a: np.linalg.qr(a, mode="raw"))(np.eye(2))
    with pytest.raises(jg.NotSupportedError, match="complex"):
        jg.make_graph(lambda a: np.linalg.inv(a))(np.eye(2) + 0j)
    with pytest.raises(jg.NotSupportedError, match="scalar"):
        jg.make_graph(lambda a: np.linalg.pinv(a, rcond=np.array([0.1, 0.2])))(np.ones((2, 3, 3)))


# ---- gradients against analytic formulas ------------------------------------------------------------
def grads(fn, *args, argnums=0):
    """The gradient eagerly, traced and compiled (Python mode); checks that they agree."""
    _, g_e = jg.value_and_grad(fn, argnums)(*args)
    _, g_t = jg.eval_graph(jg.make_graph(fn, argnums, grad=True)(*args).verify(), *args)
    _, g_c = jg.jit_grad(fn, argnums=argnums, backend="python")(*args)
    for g in (g_t, g_c):
        for x, y in zip(jg.tree_flatten(g)[0], jg.tree_flatten(g_e)[0]):
            np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-12)
    return g_e


def lower_of(g):
    """The adjoint for a function reading the lower triangle, from its symmetric-matrix adjoint g."""
    return np.tril(g + g.T, -1) + np.diag(np.diag(g))


def test_logdet_and_det_gradients():
    a = general((2, 4, 4))
    inv_t = np.swapaxes(np.linalg.inv(a), -1, -2)
    np.testing.assert_allclose(grads(lambda a: np.sum(np.linalg.slogdet(a)[1]), a), inv_t, rtol=1e-10)
    det = np.linalg.det(a)[:, None, None]
    np.testing.assert_allclose(grads(lambda a: np.sum(np.linalg.det(a)), a), det * inv_t, rtol=1e-10)
    # the sign has no gradient
    np.testing.assert_array_equal(grads(lambda a: np.sum(np.linalg.slogdet(a)[0]), a), 0.0)


def test_solve_and_inv_gradients():
    a, b, w = general((4, 4)), RNG.standard_normal((4, 2)), RNG.standard_normal((4, 2))
    ga, gb = grads(lambda a, b: np.sum(np.linalg.solve(a, b) * w), a, b, argnums=(0, 1))
    lam = np.linalg.solve(a.T, w)
    np.testing.assert_allclose(gb, lam, rtol=1e-10)
    np.testing.assert_allclose(ga, -lam @ np.linalg.solve(a, b).T, rtol=1e-10)
    c = RNG.standard_normal((4, 4))
    ai = np.linalg.inv(a)
    ct = np.ascontiguousarray(c.T)
    # sum(c^T * inv(a)) = tr(c inv(a)), whose gradient is -(inv(a) c inv(a))^T
    np.testing.assert_allclose(grads(lambda a: np.sum(ct * np.linalg.inv(a)), a), -(ai @ c @ ai).T,
                               rtol=1e-10)


def log_diag_sum(m):
    """sum(log m[i, i]) for a square m (through a mask: the diagonal alone is read)."""
    n = m.shape[-1]
    return np.sum(np.log(m * np.eye(n) + (1 - np.eye(n))))


def test_cholesky_gradient_lands_on_the_lower_triangle():
    a = spd(4)
    junk = np.triu(RNG.standard_normal((4, 4)), 1)      # read by nobody
    # sum(log diag L) = logdet(a) / 2, whose symmetric adjoint is inv(a) / 2
    g = grads(lambda x: log_diag_sum(np.linalg.cholesky(x)), a + junk)
    np.testing.assert_allclose(g, lower_of(np.linalg.inv(a) / 2), rtol=1e-10, atol=1e-12)
    gu = grads(lambda x: log_diag_sum(np.linalg.cholesky(x, upper=True)), a + junk.T)
    np.testing.assert_allclose(gu, lower_of(np.linalg.inv(a) / 2).T, rtol=1e-10, atol=1e-12)


def test_eigh_gradients():
    a = spd(4)
    w, v = np.linalg.eigh(a)
    # trace: the identity; the largest eigenvalue: v v^T, on the triangle read
    np.testing.assert_allclose(grads(lambda a: np.sum(np.linalg.eigh(a)[0]), a), np.eye(4), atol=1e-12)
    top = np.outer(v[:, -1], v[:, -1])
    np.testing.assert_allclose(grads(lambda a: np.linalg.eigh(a)[0][-1], a), lower_of(top), atol=1e-12)
    np.testing.assert_allclose(grads(lambda a: np.linalg.eigh(a, "U")[0][-1], a), lower_of(top).T, atol=1e-12)
    # eigenvalues stay differentiable at a repeated eigenvalue; eigenvectors do not (documented)
    np.testing.assert_allclose(grads(lambda a: np.sum(np.linalg.eigh(a)[0] ** 2), np.eye(3)), 2 * np.eye(3))
    with np.errstate(all="ignore"):
        _, g = jg.value_and_grad(lambda a: np.sum(np.linalg.eigh(a)[1] * np.arange(9.0).reshape(3, 3)))(np.eye(3))
    assert not np.all(np.isfinite(g))


def test_singular_value_gradients():
    a = general((5, 3))
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    np.testing.assert_allclose(grads(lambda a: np.linalg.norm(a, "nuc"), a), u @ vh, atol=1e-12)
    np.testing.assert_allclose(grads(lambda a: np.linalg.norm(a, 2), a), np.outer(u[:, 0], vh[0]), atol=1e-12)
    np.testing.assert_allclose(grads(lambda a: np.linalg.norm(a, -2), a), np.outer(u[:, -1], vh[-1]), atol=1e-12)
    np.testing.assert_allclose(grads(lambda a: np.sum(np.linalg.svd(a)[1]), a), u @ vh, atol=1e-12)
    # singular values alone stay differentiable where they repeat (an orthogonal matrix)
    q = np.linalg.qr(general((3, 3)))[0]
    np.testing.assert_allclose(grads(lambda a: np.linalg.norm(a, "nuc"), q), q, atol=1e-12)


def test_pinv_and_lstsq_gradients():
    a, b = general((6, 3)), RNG.standard_normal(6)
    w = RNG.standard_normal(3)
    gb = grads(lambda b: np.sum(np.linalg.lstsq(a, b)[0] * w), b)
    np.testing.assert_allclose(gb, a @ np.linalg.solve(a.T @ a, w), rtol=1e-10)
    res_grad = grads(lambda b: np.sum(np.linalg.lstsq(a, b)[1]), b)
    np.testing.assert_allclose(res_grad, 2 * (b - a @ np.linalg.pinv(a) @ b), rtol=1e-8, atol=1e-12)
    # pinv of a full-column-rank a is inv(a^T a) a^T: its gradient matches that composite's
    wp = RNG.standard_normal((3, 6))
    ga = grads(lambda a: np.sum(np.linalg.pinv(a) * wp), a)
    ref = jg.grad(lambda a: np.sum(np.linalg.solve(a.T @ a, a.T) * wp))(a)
    np.testing.assert_allclose(ga, ref, rtol=1e-8, atol=1e-12)
    # at repeated singular values (an orthogonal matrix) it is defined: pinv(q) = q^T
    q = np.linalg.qr(general((3, 3)))[0]
    wq = RNG.standard_normal((3, 3))
    np.testing.assert_allclose(grads(lambda q: np.sum(np.linalg.pinv(q) * wq), q),
                               jg.grad(lambda q: np.sum(np.linalg.inv(q) * wq))(q), rtol=1e-8, atol=1e-12)


def test_qr_gradient_of_r_diagonal():
    a = general((5, 3))
    # sum(log |diag R|) = logdet(a^T a) / 2: adjoint a (a^T a)^-1
    g = grads(lambda a: log_diag_sum(np.abs(np.linalg.qr(a)[1])), a)
    np.testing.assert_allclose(g, a @ np.linalg.inv(a.T @ a), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("fn", [
    lambda x: np.linalg.norm(x), lambda x: np.linalg.norm(x, 2), lambda x: np.linalg.norm(x, axis=-1),
    lambda x: np.linalg.norm(x.reshape(2, 2), "fro"), lambda x: np.linalg.norm(x, 3),
    lambda x: np.linalg.norm(x, 1), lambda x: np.linalg.norm(x, np.inf),
], ids=["default", "2", "axis", "fro", "3", "1", "inf"])
def test_norm_gradient_at_zero_is_zero(fn):
    z = np.zeros(4)
    with np.errstate(all="raise"):
        g = grads(lambda x: np.sum(fn(x)), z)
    np.testing.assert_array_equal(g, 0.0)
    x = RNG.standard_normal(4)
    if fn(x).shape == () and np.isclose(fn(x), np.sqrt(np.sum(x * x))):
        np.testing.assert_allclose(grads(fn, x), x / np.linalg.norm(x), rtol=1e-12)


# ---- second order ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["logdet", "inv", "eigh", "cholesky"])
def test_second_order_against_formulas(name):
    """The gradient of <grad f, v> (a Hessian-vector product), eager, traced and compiled."""
    a = spd(3)
    v = RNG.standard_normal((3, 3))
    ai = np.linalg.inv(a)
    f = {"logdet": lambda a: np.linalg.slogdet(a)[1],
         "inv": lambda a: np.sum(np.linalg.inv(a)),
         "eigh": lambda a: np.sum(np.linalg.eigh(a)[0] ** 2),
         "cholesky": lambda a: 2 * log_diag_sum(np.linalg.cholesky(a))}[name]

    def gv(a):
        return np.sum(jg.grad(f)(a) * v)

    if name == "logdet":        # d/da tr(inv(a) v) = -(inv(a) v inv(a))^T
        want = -(ai @ v @ ai).T
    elif name == "eigh":        # sum(w^2) is the squared Frobenius norm of the lower triangle's matrix
        want = 4 * np.tril(v, -1) + 2 * np.diag(np.diag(v))
    elif name == "cholesky":    # logdet of the lower triangle's matrix: lower_of(-inv V inv)
        vs = np.tril(v) + np.tril(v, -1).T
        want = lower_of(-(ai @ vs @ ai))
    else:                       # differences of gradients
        eps = 1e-5
        want = np.zeros((3, 3))
        for i in range(3):
            for j in range(3):
                e = np.zeros((3, 3))
                e[i, j] = eps
                want[i, j] = (gv(a + e) - gv(a - e)) / (2 * eps)
    h_e = jg.grad(gv)(a)
    _, h_t = jg.eval_graph(jg.make_graph(gv, grad=True)(a).verify(), a)
    _, h_c = jg.jit_grad(gv, backend="python")(a)
    for h in (h_e, h_t, h_c):
        np.testing.assert_allclose(h, want, rtol=1e-6, atol=1e-8)


# ---- compiled with Numba -----------------------------------------------------------------------------
def _all_routines(a, b):
    """One program calling every LAPACK routine."""
    s = a @ a.T + 4 * np.eye(a.shape[0], dtype=a.dtype)
    w, v = np.linalg.eigh(s)
    wu = np.linalg.eigh(s + a * np.triu(np.ones((4, 4), a.dtype), 1), UPLO="U")[0]
    u, sv, vh = np.linalg.svd(a[:, :3])
    q, r = np.linalg.qr(a[:, :3], mode="complete")
    x, res, rank, sl = np.linalg.lstsq(a[:, :3], b[:, 0])
    return (np.linalg.solve(a, b), np.linalg.inv(a), np.linalg.det(a), np.linalg.slogdet(a).logabsdet,
            np.linalg.cholesky(s), w, v * v, wu, (u[:, :3] * sv) @ vh, u * u,
            np.linalg.svd(a, compute_uv=False), np.linalg.svd(s, hermitian=True)[1],
            np.linalg.svd(-s, compute_uv=False, hermitian=True), q, r, np.linalg.pinv(a[:, :3]),
            np.linalg.pinv(-s, hermitian=True), x, res, rank, sl, np.linalg.norm(a, 2),
            np.linalg.norm(a, "nuc"), np.linalg.norm(a[0]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_routine_compiled_with_numba(dtype):
    a = general((4, 4), dtype)
    b = RNG.standard_normal((4, 2)).astype(dtype)
    want = _all_routines(a, b)
    got = jg.jit(_all_routines)(a, b)
    assert_same(got, want, 1e-10 if dtype == np.float64 else 2e-5)
    # batched stacks, and the gradient program of a few
    stack = general((2, 3, 4, 4), dtype)
    f = jg.jit(lambda s: (np.linalg.inv(s), np.linalg.eigh(s)[0], np.linalg.svd(s, compute_uv=False)))
    assert_same(f(stack), (np.linalg.inv(stack), np.linalg.eigh(stack)[0],
                           np.linalg.svd(stack, compute_uv=False)), 1e-10 if dtype == np.float64 else 2e-5)


def test_small_matrices_by_loops_and_large_by_lapack_agree_with_numpy():
    """Stacks of matrices up to linalg_runtime.SMALL_N are factored, solved and their signed
    log-determinants taken by loops (no LAPACK call, no temporary arrays), larger ones by LAPACK:
    both match NumPy, pivoting signs, a singular matrix's determinant (sign 0, -inf), a matrix with
    a NaN (NaN results) and the "Singular matrix" error included."""
    from jitgraph.codegen import linalg_runtime
    f = jg.jit(lambda a, b: (np.linalg.solve(a, b), np.linalg.slogdet(a), np.linalg.inv(a), np.linalg.det(a)))
    for n in (1, 2, 3, linalg_runtime.SMALL_N, linalg_runtime.SMALL_N + 1):
        a = RNG.standard_normal((5, n, n))
        a[1] = a[1][::-1]                                   # pivots all the way down
        if n > 1:
            a[2, :, 1] = 0.0                                # singular
        b = RNG.standard_normal((5, n, 2))
        sign, logdet = f(a[[0, 1, 3, 4]], b[[0, 1, 3, 4]])[1]
        want = np.linalg.slogdet(a[[0, 1, 3, 4]])
        np.testing.assert_array_equal(sign, want[0])
        np.testing.assert_allclose(logdet, want[1], rtol=1e-12, atol=1e-12)
        got = f(a[[0, 1, 3, 4]], b[[0, 1, 3, 4]])
        np.testing.assert_allclose(got[0], np.linalg.solve(a[[0, 1, 3, 4]], b[[0, 1, 3, 4]]), rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(got[2], np.linalg.inv(a[[0, 1, 3, 4]]), rtol=1e-9, atol=1e-11)
        if n > 1:
            s2, l2 = jg.jit(np.linalg.slogdet)(a)
            assert s2[2] == 0.0 and l2[2] == -np.inf
            assert jg.jit(np.linalg.det)(a)[2] == 0.0
            with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
                f(a, b)
        nan = a[[0]].copy()
        nan[0, 0, 0] = np.nan
        assert np.isnan(f(nan, b[[0]])[0]).all() and np.isnan(f(nan, b[[0]])[1][1]).all()


def test_gradients_compiled_with_numba():
    a, b = spd(4), RNG.standard_normal((4, 3))

    def loss(a, b):
        L = np.linalg.cholesky(a)
        x = np.linalg.solve(L, b)
        return np.sum(x * x) + np.linalg.slogdet(a)[1] + np.linalg.norm(np.linalg.pinv(b), "nuc") \
            + np.sum(np.linalg.eigh(a)[0] ** 2) + np.sum(np.linalg.qr(b)[1] ** 2)

    v_ref, g_ref = jg.value_and_grad(loss, (0, 1))(a, b)
    f = jg.jit_grad(loss, argnums=(0, 1))
    for _ in range(2):
        v, g = f(a, b)
        np.testing.assert_allclose(v, v_ref, rtol=1e-12)
        for x, y in zip(g, g_ref):
            np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-12)
    assert f.cache_info().traces == 1


# ---- the rest of the contract ------------------------------------------------------------------------
def test_lstsq_residuals_of_a_rank_deficient_matrix():
    """Eagerly NumPy's empty residuals; traced, the static shape keeps the sums of squares."""
    a = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])
    b = np.array([1.0, 0.0, 1.0])
    x, res, rank, s = np.linalg.lstsq(a, b)
    assert rank == 1 and res.shape == (0,)
    got = eager(lambda a, b: np.linalg.lstsq(a, b), a, b)
    assert_same(got, (x, res, rank, s))
    gx, gres, grank, gs = traced(lambda a, b: np.linalg.lstsq(a, b), a, b)
    assert_same((gx, grank, gs), (x, rank, s))
    np.testing.assert_allclose(gres, [np.sum((b - a @ x) ** 2)], rtol=1e-12)
    cx, cres, crank, cs = jg.jit(lambda a, b: np.linalg.lstsq(a, b))(a, b)
    assert_same((cx, crank, cs), (x, rank, s), 1e-10)
    np.testing.assert_allclose(cres, gres, rtol=1e-10)


def test_cuda_target_refuses_lapack_routines():
    with pytest.raises(jg.NotSupportedError, match=r"LAPACK routines \(np.linalg.\*\)"):
        jg.jit(lambda a: np.linalg.inv(a), target="cuda")(np.eye(3))


def test_row_reduction_broadcast_over_square_columns():
    """A per-row value broadcast to a square (n, n) is right-aligned: it varies along the columns
    (the fused loop once read it per row; square matrices made the shapes agree)."""
    w = RNG.standard_normal((3, 3))

    def f(x):
        return np.broadcast_to(np.sum(x * w, axis=1), (3, 3)) * x

    x = RNG.standard_normal((3, 3))
    for backend in ("python", "numba"):
        np.testing.assert_allclose(jg.jit(f, backend=backend)(x), f(x), rtol=1e-14)


def test_long_program_whose_entry_runs_as_python():
    """Past NJIT_ENTRY_MAX_STEPS steps the entry is Python: it calls the routines through ctypes."""
    a = general((3, 3))

    def f(a, x):
        for _ in range(NJIT_ENTRY_MAX_STEPS + 2):
            x = np.linalg.solve(a, x)
        return x

    x = RNG.standard_normal(3)
    # (unrolled: rerolled, the loop is one scan of a compiled entry)
    lowered = jg.jit(f, reroll=False).lower(a, x)
    assert "runs as Python" in lowered.source and "python=True" in lowered.source
    np.testing.assert_allclose(jg.jit(f, reroll=False)(a, x), f(a, x), rtol=1e-10)
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        jg.jit(f, reroll=False)(np.zeros((3, 3)), x)
    assert "runs as Python" not in jg.jit(f).lower(a, x).source
    np.testing.assert_allclose(jg.jit(f)(a, x), f(a, x), rtol=1e-10)


def test_a_python_entry_calls_every_kind_of_routine_argument():
    """A Python entry passes LAPACK routines arrays (as addresses), int32 arrays (lstsq's rank),
    sizes and floats (pinv's and lstsq's rcond): the same values as NumPy, and the gradient as
    the eager tape's."""
    a = general((3, 3))

    def f(a, x):
        total = 0.0
        for _ in range(4):
            _, logdet = np.linalg.slogdet(a)
            x = np.linalg.solve(a, x) + 0.1 * (np.linalg.inv(a) @ x)
            w, _ = np.linalg.eigh(a @ a.T)
            total = total + logdet + np.sum(np.linalg.pinv(a, rcond=1e-12) @ x) + w.sum() \
                + np.sum(np.linalg.lstsq(a, x, rcond=1e-12)[0])
        return total

    x = RNG.standard_normal(3)
    g = jg.jit_grad(f, wait=True)
    source = g.lower(a, x).source
    assert "runs as Python" in source
    for name in ("slogdet", "lu", "lu_solve", "eigh", "pinv", "lstsq"):
        assert re.search(rf'_la\.external\("{name}", "float64", njit, "\w+", python=True\)', source), name
    value, grad = g(a, x)
    np.testing.assert_allclose(value, f(a, x), rtol=1e-10)
    value_e, grad_e = jg.value_and_grad(f)(a, x)
    np.testing.assert_allclose(value, value_e, rtol=1e-10)
    np.testing.assert_allclose(grad, grad_e, rtol=1e-8, atol=1e-10)


# ---- triangular solves: scipy.linalg's solvers and Cholesky factors --------------------------------
def _scipy_solvers(a, b):
    import scipy.linalg as sla
    s = a @ a.T + 4 * np.eye(4, dtype=a.dtype)
    return (sla.solve_triangular(a, b), sla.solve_triangular(a, b[:, 0], lower=True, trans="T"),
            sla.solve_triangular(a, b, trans=2, unit_diagonal=True), sla.cholesky(s),
            sla.cholesky(s, lower=True), sla.cho_solve(sla.cho_factor(s), b),
            sla.cho_solve(sla.cho_factor(s, lower=True), b[:, 1]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_scipy_triangular_and_cholesky_solvers_match_scipy(dtype):
    a = general((4, 4), dtype)
    b = RNG.standard_normal((4, 2)).astype(dtype)
    want = _scipy_solvers(a, b)
    rtol = 1e-12 if dtype == np.float64 else 2e-5
    assert_same(traced(_scipy_solvers, a, b), want, rtol)
    assert_same(eager(_scipy_solvers, a, b), want, rtol)
    assert_same(jg.jit(_scipy_solvers, backend="python")(a, b), want, rtol)
    assert_same(jg.jit(_scipy_solvers)(a, b), want, 1e-10 if dtype == np.float64 else 2e-5)
    ints = np.array([[2, 0], [1, 3]])
    assert traced(lambda a: __import__("scipy.linalg").linalg.solve_triangular(a, np.ones(2), lower=True),
                  ints).dtype == np.float64


def test_scipy_solver_errors_match_scipy():
    import scipy.linalg as sla
    singular = np.array([[1.0, 0.0], [2.0, 0.0]])
    with pytest.raises(np.linalg.LinAlgError, match="singular matrix"):
        jg.value_and_grad(lambda a: np.sum(sla.solve_triangular(a, np.ones(2), lower=True)))(singular)
    with pytest.raises(np.linalg.LinAlgError, match="singular matrix"):
        jg.jit(lambda a: sla.solve_triangular(a, np.ones(2), lower=True))(singular)
    for bad, msg in [((np.ones((2, 3)), np.ones(2)), "expected square matrix"),
                     ((np.eye(3), np.ones(2)), "incompatible")]:
        with pytest.raises(ValueError, match=msg):
            sla.solve_triangular(*bad)
        with pytest.raises(ValueError, match=msg):
            jg.make_graph(lambda a, b: sla.solve_triangular(a, b))(*bad)
    with pytest.raises(ValueError, match="trans"):
        jg.make_graph(lambda a, b: sla.solve_triangular(a, b, trans="X"))(np.eye(2), np.ones(2))


def test_solves_with_one_matrix_share_one_factorization():
    """An implicit time-stepping loop solves with one matrix at every step, and its backward pass
    with the transpose: np.linalg.solve is an LU factorization and a solve from it, so the whole
    gradient factors the matrix once (it had factored it twice per step)."""
    a = general((6, 6)) + 6 * np.eye(6)
    b = RNG.standard_normal((6, 3))

    def implicit_steps(a, b):
        x = b
        for _ in range(5):
            x = np.linalg.solve(a, x + 0.1 * b)
        return np.sum(np.tanh(x)) + np.sum(np.linalg.solve(a, b[:, 0]))

    g = jg.make_graph(implicit_steps, argnums=(0, 1), grad=True)(a, b)
    ops = [n.op for n in g.nodes]
    assert ops.count("lu") == 1 and ops.count("lu_solve") >= 12
    v_ref, (ga_ref, gb_ref) = jg.value_and_grad(implicit_steps, (0, 1))(a, b)
    assert v_ref == pytest.approx(implicit_steps(a, b), rel=1e-12)
    eps, e = 1e-6, np.zeros_like(a)
    e[2, 4] = eps
    assert ga_ref[2, 4] == pytest.approx((implicit_steps(a + e, b) - implicit_steps(a - e, b)) / (2 * eps),
                                         rel=1e-6)
    v, (ga, gb) = jg.jit_grad(implicit_steps, argnums=(0, 1), wait=True)(a, b)
    assert v == pytest.approx(v_ref, rel=1e-12)
    np.testing.assert_allclose(ga, ga_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gb, gb_ref, rtol=1e-10, atol=1e-12)
    # second order through the shared factorization
    h = jg.hvp(lambda a: implicit_steps(a, b))(a, e / eps)
    fd = (jg.value_and_grad(implicit_steps)(a + e, b)[1] - jg.value_and_grad(implicit_steps)(a - e, b)[1]) / (2 * eps)
    np.testing.assert_allclose(h, fd, rtol=1e-5, atol=1e-7)


def test_solves_by_cholesky_factors_are_triangular():
    """np.linalg.solve by L or L^T (and inv(L)) runs triangular solves, forward and backward: no
    LU factorization is left in the program, and the cholesky adjoint needs none either."""
    a, y = spd(5), RNG.standard_normal(5)

    def gp(a, y):
        L = np.linalg.cholesky(a)
        alpha = np.linalg.solve(L.T, np.linalg.solve(L, y))
        return 0.5 * y @ alpha + np.sum(np.log(np.diag(L))) + np.sum(np.linalg.inv(L))

    g = jg.make_graph(gp, argnums=(0, 1), grad=True)(a, y)
    ops = [n.op for n in g.nodes]
    assert "solve" not in ops and ops.count("solve_triangular") >= 5
    v_ref, g_ref = jg.value_and_grad(gp, (0, 1))(a, y)
    np.testing.assert_allclose(v_ref, gp(a, y), rtol=1e-12)
    want_y = np.linalg.solve(a, y)              # d/dy of y^T a^-1 y / 2
    np.testing.assert_allclose(g_ref[1], want_y, rtol=1e-10)
    v, gr = jg.jit_grad(gp, argnums=(0, 1))(a, y)
    np.testing.assert_allclose(v, v_ref, rtol=1e-12)
    for x, w in zip(gr, g_ref):
        np.testing.assert_allclose(x, w, rtol=1e-10, atol=1e-12)
    assert np.all(np.triu(gr[0], 1) == 0)       # cholesky reads the lower triangle


def test_a_solve_with_many_right_hand_sides_runs_in_column_blocks():
    """A float64 triangular solve with 256 or more right-hand sides (here a Cholesky factor's
    backward) runs as column blocks on Numba's threads (codegen/ops_linalg.py): the same values
    as SciPy, a singular factor raises as SciPy does, and a non-finite operand gives NaN as the
    whole routine does."""
    import scipy.linalg as sla
    rng = np.random.default_rng(11)
    n = 260
    a = np.tril(rng.standard_normal((n, n))) + n * np.eye(n)
    b = rng.standard_normal((n, n))

    def solve(a, b):
        return sla.solve_triangular(a, b, lower=True)

    def blocked(lowered):
        # a compiled entry's chunk function, or a Python entry's parallel group (compiled
        # without Numba where native compiles are on)
        src = lowered.source
        if "def solve_triangular_blocks(" not in src:
            return "solve_triangular_chunk" in src
        fn = sys.modules[lowered.program.kernel.__module__].solve_triangular_blocks
        return type(fn).__name__ == "NativeFunction" or not native.ENABLED

    f = jg.jit(solve)
    assert blocked(f.lower(a, b))
    np.testing.assert_allclose(f(a, b), sla.solve_triangular(a, b, lower=True), rtol=1e-12, atol=1e-12)
    g = jg.jit(lambda a, b: sla.solve_triangular(a, b, trans=1, lower=True))
    np.testing.assert_allclose(g(a, b), sla.solve_triangular(a, b, trans=1, lower=True), rtol=1e-12, atol=1e-12)
    singular = a.copy()
    singular[5, 5] = 0.0
    with pytest.raises(np.linalg.LinAlgError, match="singular matrix"):
        f(singular, b)
    bad = b.copy()
    bad[3, 7] = np.nan
    assert np.isnan(f(a, bad)).all()
    assert np.isnan(f(singular, bad)).all()        # as the whole routine: NaN before the singular check

    def loss(k):
        return np.sum(np.linalg.cholesky(k) * b)

    k = a @ a.T
    fg = jg.jit_grad(loss, wait=True)
    assert blocked(fg.lower(k))
    (v, grad), (v0, grad0) = fg(k), jg.value_and_grad(loss)(k)
    np.testing.assert_allclose(v, v0, rtol=1e-12)
    np.testing.assert_allclose(grad, grad0, rtol=1e-9, atol=1e-12 * np.abs(grad0).max())


def test_a_python_entrys_solve_blocks_compile_with_numba_too(monkeypatch):
    """Without native compiles, a Python entry's group launching a solve's column blocks is
    compiled by Numba (the same text: the routine called by its symbol) and computes the
    same values."""
    import scipy.linalg as sla
    from jitgraph.codegen import emit_cpu
    monkeypatch.setattr(native, "ENABLED", False)
    monkeypatch.setattr(emit_cpu, "NJIT_ENTRY_MAX_STEPS", 1)       # a Python entry
    rng = np.random.default_rng(12)
    n = 260
    a = np.tril(rng.standard_normal((n, n))) + n * np.eye(n)
    b = rng.standard_normal((n, n))

    def loss(k):
        return np.sum(sla.solve_triangular(k, b, lower=True) ** 2)

    f = jg.jit_grad(loss, wait=True)
    src = f.lower(a).source
    assert "def solve_triangular_blocks(" in src and "@_rt.group_njit(**_OPTS)" in src
    (v, g), (v0, g0) = f(a), jg.value_and_grad(loss)(a)
    np.testing.assert_allclose(v, v0, rtol=1e-12)
    np.testing.assert_allclose(g, g0, rtol=1e-9, atol=1e-12 * np.abs(g0).max())


def test_solve_with_a_constant_matrix_and_a_traced_right_hand_side():
    """A NumPy matrix against a traced right-hand side (the triangular-factor test read the
    matrix's graph node, which a constant does not have)."""
    A = np.eye(3) * 2 + np.triu(np.ones((3, 3)), 1)
    f = lambda w: np.sum(np.linalg.solve(A, w) ** 2) + np.sum(np.linalg.inv(A) @ w)  # noqa: E731
    w = np.arange(9.0).reshape(3, 3)
    v, g = jg.value_and_grad(f)(w)
    vj, gj = jg.jit_grad(f)(w)
    np.testing.assert_allclose(v, f(w), rtol=1e-13)
    np.testing.assert_allclose(vj, f(w), rtol=1e-13)
    np.testing.assert_allclose(gj, g, rtol=1e-12)


# ---- the matrix exponential ----------------------------------------------------------------------------
def _ctmc_loglik(log_rates, counts, times):
    """A continuous-time Markov chain's log-likelihood of observed transition counts after each
    waiting time (as in phylogenetics or survival multi-state models): the generator Q from
    positive rates, the transition matrices expm(Q t)."""
    n = counts.shape[-1]
    rates = np.exp(log_rates).reshape(n, n - 1)
    q = np.zeros((n, n))
    off = ~np.eye(n, dtype=bool)
    q[off] = rates.ravel()
    q = q - np.diag(q.sum(axis=1))
    total = 0.0
    for k, t in enumerate(times):
        p = scipy.linalg.expm(q * t)
        total = total + np.sum(counts[k] * np.log(p))
    return total


def test_expm_program_compiled_matches_finite_differences():
    rng = np.random.default_rng(3)
    n = 4
    log_rates = rng.standard_normal(n * (n - 1)) * 0.5
    counts = rng.integers(0, 20, (3, n, n)).astype(float)
    times = (0.3, 1.0, 4.0)
    f = jg.jit_grad(_ctmc_loglik, wait=True)
    v, g = f(log_rates, counts, times)
    np.testing.assert_allclose(v, _ctmc_loglik(log_rates, counts, times), rtol=1e-12)
    eps = 1e-6
    for i in range(0, len(log_rates), 3):
        e = np.zeros_like(log_rates)
        e[i] = eps
        fd = (_ctmc_loglik(log_rates + e, counts, times) - _ctmc_loglik(log_rates - e, counts, times)) / (2 * eps)
        np.testing.assert_allclose(g[i], fd, rtol=1e-6, atol=1e-6)


def test_expm_large_norms_nonfinite_and_stacks_match_scipy():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 5, 5)) * np.array([0.01, 3.0, 40.0])[:, None, None]
    f = jg.jit(lambda a: scipy.linalg.expm(a), wait=True)
    want = scipy.linalg.expm(a)
    got = f(a)
    for k in range(3):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-9, atol=1e-12 * np.abs(want[k]).max())
    bad = a.copy()
    bad[1, 0, 0] = np.nan
    assert np.isnan(f(bad)[1]).all() and np.isfinite(f(bad)[0]).all()
    one = np.array([[2.5]])
    np.testing.assert_allclose(jg.jit(lambda a: scipy.linalg.expm(a), wait=True)(one), [[np.exp(2.5)]], rtol=1e-14)


def test_lu_factor_of_a_traced_matrix_is_for_lu_solve_only():
    sla = scipy.linalg
    a = np.eye(3) * 2.0 + 0.1
    with pytest.raises(jg.NotSupportedError, match="only usable by scipy.linalg.lu_solve"):
        jg.make_graph(lambda m: np.prod(np.diag(sla.lu_factor(m)[0])))(a)
    with pytest.raises(jg.NotSupportedError, match="pivot array"):
        jg.make_graph(lambda m: np.sum(m) * sla.lu_factor(m)[1][0])(a)
