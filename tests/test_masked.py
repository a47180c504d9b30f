"""x[mask] with a traced boolean mask (jitgraph/ops/masked.py): elementwise work on the
selected rows followed by reductions, against NumPy, eager gradients and one compiled
program; the forms that need the selection's shape are refused by name."""
import numpy as np
import pytest

import jitgraph as jg

RNG = np.random.default_rng(7)
X = RNG.standard_normal((6, 5))
R = RNG.standard_normal((6, 5))
M = RNG.uniform(size=(6, 5)) < 0.4
ROWS = np.array([True, False, True, True, False, True])

CASES = {
    "masked squared error": lambda p, r, m, rows: np.sum((r[m] - p[m]) ** 2),
    "masked mean abs": lambda p, r, m, rows: np.mean(np.abs(r[m] - p[m])),
    "methods": lambda p, r, m, rows: (p[m] ** 2).sum() + p[m].max() - p[m].min() + p[m].mean() + p[m].prod(),
    "selected rows, axis 0": lambda p, r, m, rows: np.sum(p[rows] * r[rows], axis=0) @ np.arange(5.0),
    "row mean, row broadcast": lambda p, r, m, rows: np.sum(np.mean(p[rows], axis=0) * 2)
    + np.sum(p[rows] * np.arange(5.0) + 1.0) + np.sum(p[rows].max(axis=1)),
    "selected by value": lambda p, r, m, rows: np.sum(p[p > 0] ** 2) + np.sum(np.log1p(np.exp(p[p < 0]))),
    "var and std": lambda p, r, m, rows: np.var(p[m]) + np.std(p[m], ddof=1) + p[rows].var(axis=0).sum(),
    "where and clip": lambda p, r, m, rows: np.sum(np.where(p[m] > 0, p[m], 0.1 * p[m]))
    + np.sum(np.clip(p[m], -0.5, 0.5)),
    "count, norm, any, all": lambda p, r, m, rows: np.count_nonzero(p[m] > 0) * np.sum(p) + np.linalg.norm(p[m])
    + np.sum(p) * (np.any(p[m] > 2) + 2 * np.all(p[m] > -3)),
    "scalars on the left": lambda p, r, m, rows: np.sum(1.0 - p[m]) + np.sum(2.0 ** p[m]) + np.sum(-p[m]),
    "rows times a matrix": lambda p, r, m, rows: np.sum(np.tanh(p[rows] @ r[:5, :3])),
    "a constant selected by a traced mask": lambda p, r, m, rows: np.sum(r[p > 0.5]) * np.sum(p ** 2),
}


@pytest.mark.parametrize("name", list(CASES))
def test_selections_match_numpy_and_eager(name):
    f = CASES[name]
    args = (X, R, M, ROWS)
    want = f(*args)
    got, g = jg.eval_graph(jg.make_graph(f, grad=True)(*args), *args)
    v_e, g_e = jg.value_and_grad(f)(*args)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(v_e, want, rtol=1e-13)
    np.testing.assert_allclose(g, g_e, rtol=1e-12, atol=1e-14)


def test_gradient_matches_finite_differences_and_compiles():
    def loss(p, r, m, rows):
        return np.mean((r[m] - p[m]) ** 2) + 0.5 * np.sum(np.maximum(p[rows], 0.0) @ np.arange(5.0)) \
            + np.var(p[p > 0.3]) + np.max(np.abs(p[m]))

    args = (X, R, M, ROWS)
    v_e, g_e = jg.value_and_grad(loss)(*args)
    eps, d = 1e-6, RNG.standard_normal(X.shape)
    fd = (loss(X + eps * d, R, M, ROWS) - loss(X - eps * d, R, M, ROWS)) / (2 * eps)
    np.testing.assert_allclose(np.sum(g_e * d), fd, rtol=1e-6)
    f = jg.jit_grad(loss, wait=True)
    v, g = f(*args)
    np.testing.assert_allclose(v, loss(*args), rtol=1e-13)
    np.testing.assert_allclose(g, g_e, rtol=1e-12, atol=1e-14)
    # a new mask with the same shape reuses the compiled function: the selection is data, not shape
    m2 = ~M
    v2, g2 = f(X, R, m2, ~ROWS)
    np.testing.assert_allclose(v2, loss(X, R, m2, ~ROWS), rtol=1e-13)
    assert f.cache_info().traces == 1


def test_an_empty_selection():
    f = lambda p, m: np.sum(p[m] ** 2) + np.max(p[m])
    none = np.zeros((6, 5), bool)
    v, g = jg.eval_graph(jg.make_graph(f, grad=True)(X, none), X, none)
    assert v == -np.inf and np.all(g == 0)       # (NumPy's max of nothing raises)
    mean = jg.eval_graph(jg.make_graph(lambda p, m: np.mean(p[m]))(X, none), X, none)
    assert np.isnan(mean)


@pytest.mark.parametrize("f,match", [
    (lambda p, m: p[m].shape[0] * np.sum(p), "the shape"),
    (lambda p, m: p[m], "an array"),
    (lambda p, m: np.sum(p[m] * p[~m]), "different masks"),
    (lambda p, m: np.sum(p[m][:2]), "indexing"),
    (lambda p, m: np.sum(np.ones(5) @ p[m[:, 0]]), "np.matmul"),
    (lambda p, m: np.sum(np.sort(p[m])), "sort"),
    (lambda p, m: np.sum(p[m] * np.ones((3, 1))), "shape \\(3, 1\\)"),
    (lambda p, m: np.sum(p[m[:, 0], 1:]), "supported only alone"),
    (lambda p, m: np.sum(p[m[:3, 0]]), "boolean index of shape"),
])
def test_forms_needing_the_selection_as_an_array_are_refused(f, match):
    with pytest.raises((jg.NotSupportedError, IndexError), match=match):
        jg.make_graph(f)(X, M)


def test_selection_written_back_under_its_own_mask():
    """`A[A > t] *= 2` and `A[m] = A[m] ** 2 + 1` with a traced mask: the selection computed on
    every row and kept where the mask is set (rows too), values and gradients as NumPy's."""
    def f(a):
        A = a * 1.0
        A[A > 0.5] *= 2
        A[A < 0] = A[A < 0] ** 2 + 1
        B = np.stack([a, 2 * a], axis=1)
        B[B[:, 0] > 0] += 3
        return np.sum(A ** 2) + np.sum(B ** 2)

    a = np.array([0.1, 0.7, -0.3, 1.2])
    v, g = jg.value_and_grad(f)(a)
    jv, jgr = jg.jit_grad(f, backend="python")(a)
    assert v == pytest.approx(f(a)) and jv == pytest.approx(f(a))
    np.testing.assert_allclose(jgr, g, rtol=1e-12)
    eps, fd = 1e-6, []
    for i in range(4):
        e = np.zeros(4)
        e[i] = eps
        fd.append((f(a + e) - f(a - e)) / (2 * eps))
    np.testing.assert_allclose(g, fd, rtol=1e-6)
