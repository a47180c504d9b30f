"""NumPy functions beyond the op table's rows: results whose size depends on the values (eager
only, refused with a hint when traced), Python-bool tests, dtype queries, the run-time range
errors of multi-indices, np.polydiv and np.vectorize's semantics (ops/sets.py, ops/vectorize.py).
The fixed-shape functions have rows in tests/optable/sets.py."""
import numpy as np
import pytest

import jitgraph as jg
from test_control import fd_grad as _fd

X = np.array([[0.5, -1.0, 0.5, 2.0], [2.0, 0.0, -1.0, 0.5], [3.0, 0.5, -1.0, 7.0]])


# ---- results whose size depends on the values -------------------------------------------------------
EAGER_ONLY = {
    "np.unique": lambda x: np.sum(np.unique(x) ** 2),
    "np.unique counts": lambda x: np.sum(np.unique(x, return_counts=True)[1] * np.unique(x) ** 2),
    "np.unique inverse": lambda x: np.sum(np.unique(x, return_inverse=True)[1] * x),
    "np.unique axis": lambda x: np.sum(np.unique(np.floor(x[:, :2] * 2 + 0.25), axis=0) * 1.0) + np.sum(x),
    "np.unique_counts": lambda x: np.sum(np.unique_counts(x).counts * np.unique_counts(x).values),
    "np.unique_inverse": lambda x: np.sum(np.unique_inverse(x).values[np.unique_inverse(x).inverse_indices] * x),
    "np.unique_all": lambda x: np.sum(np.unique_all(x).values[0] * x),
    "np.unique_values": lambda x: np.sum(np.unique_values(x) ** 3),
    "np.intersect1d": lambda x: np.sum(np.intersect1d(x[0], x[1]) ** 2),
    "np.intersect1d indices": lambda x: np.sum(x[0][np.intersect1d(x[0], x[2], return_indices=True)[1]]),
    "np.union1d": lambda x: np.sum(np.union1d(x[0], x[1]) ** 2),
    "np.setdiff1d": lambda x: np.sum(np.setdiff1d(x[2], x[1]) ** 2),
    "np.setxor1d": lambda x: np.sum(np.setxor1d(x[0], x[2]) ** 2),
    "np.argwhere": lambda x: np.sum(x[tuple(np.argwhere(x > 0.4).T)] ** 2),
    "np.flatnonzero": lambda x: np.sum(x.ravel()[np.flatnonzero(x > 0.4)] ** 2),
    "np.trim_zeros": lambda x: np.sum(np.trim_zeros(x[1] * (x[1] > 0)) ** 2),
}


# distinct values: finite differences see the gradient each value's first occurrence gets
DISTINCT = X + np.arange(12).reshape(3, 4) * 0.01


@pytest.mark.parametrize("name", sorted(EAGER_ONLY))
def test_value_sized_results_run_eagerly(name):
    f = EAGER_ONLY[name]
    for x in (X, DISTINCT):
        v, g = jg.value_and_grad(f)(x)
        np.testing.assert_allclose(v, f(x), rtol=1e-14)
        assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, _fd(f, DISTINCT), atol=1e-6)


def test_value_sized_results_read_first_occurrences():
    """With repeated values, the gradient goes to the positions NumPy reports."""
    _, g = jg.value_and_grad(lambda x: np.sum(np.unique(x) ** 2))(X)
    expected = np.zeros(X.size)
    first = np.unique(X, return_index=True)[1]
    expected[first] = 2 * X.ravel()[first]
    np.testing.assert_array_equal(g.ravel(), expected)
    _, g = jg.value_and_grad(lambda x: np.sum(np.intersect1d(x[0], x[1]) ** 3))(X)
    _, i0, _ = np.intersect1d(X[0], X[1], return_indices=True)
    expected = np.zeros_like(X)
    expected[0, i0] = 3 * X[0, i0] ** 2
    np.testing.assert_array_equal(g, expected)


@pytest.mark.parametrize("name", sorted(EAGER_ONLY))
def test_value_sized_results_are_refused_traced(name):
    with pytest.raises(jg.NotSupportedError, match="depends on the values.*np.isin"):
        jg.jit_grad(EAGER_ONLY[name], backend="python")(X)


def test_value_sized_results_of_constants_trace():
    table = np.array([3.0, 1.0, 3.0, 2.0])
    f = jg.jit_grad(lambda x: np.sum(x[: np.unique(table).size] ** 2), backend="python")
    v, g = f(np.arange(5.0))
    assert v == 5.0 and list(g) == [0.0, 2.0, 4.0, 0.0, 0.0]


# ---- Python bools --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,fn", [
    ("np.allclose", lambda x: np.allclose(x, x + 1e-12)),
    ("np.array_equal", lambda x: np.array_equal(x, x)),
    ("np.array_equiv", lambda x: np.array_equiv(x, x[0])),
])
def test_python_bool_tests(name, fn):
    seen = []

    def f(x):
        seen.append(fn(x))
        return np.sum(x)

    jg.value_and_grad(f)(X)
    assert seen == [fn(X)] and type(seen[0]) is bool
    with pytest.raises(jg.TracingError, match=f"{name} of traced values.*Python bool"):
        jg.jit_grad(f, backend="python")(X)


def test_python_bool_tests_static_answers():
    f = jg.jit(lambda x: x * np.array_equal(x, x[:2]) + x * np.array_equiv(x, np.ones((5, 5))), backend="python")
    np.testing.assert_array_equal(f(X), X * 0)
    assert jg.value_and_grad(lambda x: np.sum(x) * np.array_equal(x, X))(X)[0] == X.sum()


# ---- dtype and kind queries ----------------------------------------------------------------------------
def test_dtype_queries_answer_for_traced_values():
    def f(x, n):
        assert np.result_type(x, 1.0) == np.float32 and np.result_type(x, n) == np.float64
        assert np.result_type(x, np.float64) == np.float64 and np.common_type(x) == np.float32
        assert np.can_cast(x, np.float64) and not np.can_cast(x, np.int32)
        assert np.min_scalar_type(x) == np.float32
        assert not np.iscomplexobj(x) and np.isrealobj(x)
        assert not np.iscomplex(x).any() and np.isreal(x).all() and np.isreal(x).shape == x.shape
        return np.sum(x * n)

    x = X.astype(np.float32)
    for g in (jg.value_and_grad(f), jg.jit_grad(f, backend="python")):
        assert g(x, np.ones(4))[0] == np.float32(X.sum())


def test_min_scalar_type_of_a_traced_scalar_is_refused():
    f = jg.jit(lambda x: x.astype(np.min_scalar_type(x[0, 0])), backend="python")
    with pytest.raises(jg.TracingError, match="np.min_scalar_type of a traced value"):
        f(X)
    seen = []
    jg.value_and_grad(lambda x: seen.append(np.min_scalar_type(x[0, 0])) or np.sum(x))(X)
    assert seen == [np.min_scalar_type(X[0, 0])]


def test_apply_over_axes():
    f = lambda x: np.sum(np.apply_over_axes(np.sum, x ** 2, [0, -1]) + np.apply_over_axes(np.mean, x, 1))
    for g in (jg.value_and_grad(f), jg.jit_grad(f, backend="python")):
        v, gr = g(X)
        np.testing.assert_allclose(v, f(X), rtol=1e-14)
        np.testing.assert_allclose(gr, _fd(f, X), atol=1e-6)


# ---- multi-indices: NumPy's range errors, now or when the function runs ----------------------------------
@pytest.mark.parametrize("backend", ["python", "numba"])
def test_multi_index_range_errors_when_the_function_runs(backend):
    unravel = jg.jit(lambda i: np.unravel_index(i, (3, 4))[0], backend=backend)
    ravel = jg.jit(lambda i: np.ravel_multi_index((i, i), (3, 4)), backend=backend)
    np.testing.assert_array_equal(unravel(np.array([0, 11])), [0, 2])
    np.testing.assert_array_equal(ravel(np.array([0, 2])), [0, 10])
    with pytest.raises(ValueError, match="index 12 is out of bounds for array with size 12"):
        unravel(np.array([0, 12]))
    with pytest.raises(ValueError, match="index -1 is out of bounds"):
        unravel(np.array([-1, 3]))
    with pytest.raises(ValueError, match="invalid entry in coordinates array"):
        ravel(np.array([0, 3]))


def test_multi_index_range_errors_of_known_values():
    with pytest.raises(ValueError, match="index 12 is out of bounds"):
        jg.value_and_grad(lambda x: np.sum(x[np.unravel_index(np.array([12]), (3, 4))]))(X)
    with pytest.raises(ValueError, match="invalid entry"):
        jg.value_and_grad(lambda x: np.sum(x.ravel()[np.ravel_multi_index(([3], [0]), (3, 4))]))(X)


# ---- histograms ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bins", [1, 4, 7, 10])
def test_histogram_counts_and_edges_are_numpys(bins):
    rng = np.random.default_rng(bins)
    for rng_ in (None, (-1.0, 1.5)):
        f = jg.jit(lambda a: np.histogram(a, bins=bins, range=rng_), backend="python")
        for a in (rng.normal(size=300), rng.integers(0, 7, 50), np.full(5, 2.0), rng.normal(size=99) * 1e-3 + 7,
                  rng.normal(size=200).astype(np.float32), np.linspace(-1.0, 1.5, 11)):
            h, e = f(a)
            h2, e2 = np.histogram(a, bins=bins, range=rng_)
            np.testing.assert_array_equal(h, h2)
            np.testing.assert_array_equal(e, e2)
            assert h.dtype == h2.dtype and e.dtype == e2.dtype


def test_histogram_refusals():
    with pytest.raises(jg.NotSupportedError, match="bins='auto' of a traced value"):
        jg.jit(lambda a: np.histogram(a, bins="auto")[0], backend="python")(X[0])
    v, g = jg.value_and_grad(lambda a: np.sum(np.histogram(a, bins="auto")[1]))(X[0])
    assert v == np.sum(np.histogram(X[0], bins="auto")[1]) and np.all(np.isfinite(g))
    with pytest.raises(ValueError, match="`bins` must increase monotonically"):
        jg.jit(lambda a: np.histogram(a, bins=[1.0, 0.0])[0], backend="python")(X[0])


# ---- polynomial division ----------------------------------------------------------------------------------
def test_polydiv_eager_and_refused_traced():
    f = lambda u: np.sum(np.polydiv(u, np.array([1.0, -2.0]))[0] ** 2) + np.sum(np.polydiv(u, u[1:3])[1])
    u = np.array([1.0, -3.0, 2.0, 5.0])
    v, g = jg.value_and_grad(f)(u)
    np.testing.assert_allclose(v, f(u), rtol=1e-13)
    np.testing.assert_allclose(g, _fd(f, u), atol=1e-6)
    with pytest.raises(jg.NotSupportedError, match="np.polydiv of traced coefficients"):
        jg.jit_grad(f, backend="python")(u)


# ---- np.vectorize ----------------------------------------------------------------------------------------
def _branchy(t):
    return np.sin(t) * 2 if t > 0 else t ** 2


def test_vectorize_eager_follows_python_control_flow():
    f = lambda x: np.sum(np.vectorize(_branchy)(x))
    v, g = jg.value_and_grad(f)(DISTINCT)
    np.testing.assert_allclose(v, f(DISTINCT), rtol=1e-14)
    np.testing.assert_allclose(g, _fd(f, DISTINCT), atol=1e-6)
    with pytest.raises(jg.TracingError, match=r"np.vectorize\(_branchy\) of traced values.*np.where"):
        jg.jit_grad(f, backend="python")(X)


def test_vectorize_of_elementwise_code_is_one_fused_expression():
    f = lambda x: np.vectorize(lambda t: np.tanh(t) * 3.0 + t * t)(x)
    graph = jg.make_graph(f)(X)
    assert {n.op for n in graph.nodes} <= {"input", "const", "tanh", "mul", "add", "integer_pow", "broadcast"}
    np.testing.assert_allclose(jg.jit(f, backend="python")(X), f(X), rtol=1e-15)


def test_vectorize_scans_what_is_not_elementwise():
    def f(x):
        w = x[0] ** 2
        return np.sum(np.vectorize(lambda i, t: w[i] * t)(np.arange(12).reshape(3, 4) % 4, x))
    graph = jg.make_graph(f)(X)
    assert "scan" in {n.op for n in graph.nodes}
    for g in (jg.value_and_grad(f), jg.jit_grad(f, backend="python")):
        v, gr = g(X)
        np.testing.assert_allclose(v, f(X), rtol=1e-14)
        np.testing.assert_allclose(gr, _fd(f, X), atol=1e-6)


def test_vectorize_dtypes_otypes_excluded_and_errors():
    x32 = X.astype(np.float32)
    double = np.vectorize(lambda t: t * 2.0)
    as_f32 = np.vectorize(lambda t: t + 1, otypes=[np.float32])
    weighted = np.vectorize(lambda t, w: np.sum(w * t), excluded={1})
    for run in (lambda f, *a: f(*a), lambda f, *a: jg.jit(f, backend="python")(*a)):
        assert run(lambda x: double(x), x32).dtype == np.float32      # NumPy's: the first result's dtype
        assert run(lambda x: as_f32(x), X).dtype == np.float32
        np.testing.assert_allclose(run(lambda x: weighted(x, np.array([1.0, 2.0])), X), 3 * X)
        with pytest.raises(ValueError, match="size 0 inputs unless `otypes`"):
            run(lambda x: double(x[:0]), X)


def test_vectorize_drawing_random_numbers_draws_per_element_or_is_refused():
    rng = np.random.default_rng(0)
    noisy = np.vectorize(lambda t: t + rng.normal())
    seen = []
    jg.value_and_grad(lambda x: seen.append(noisy(x)) or np.sum(x))(np.zeros(4))
    draws = np.asarray(getattr(seen[0], "value", seen[0]))
    assert len(set(draws.tolist())) == 4          # one draw per element, as NumPy's
    with pytest.raises(jg.TracingError, match=r"np.vectorize\(<lambda>\) draws random numbers"):
        jg.jit(lambda x: noisy(x), backend="python")(np.zeros(4))


def test_printing_recorded_values():
    seen = []

    def f(x):
        seen.append((np.array2string(x, precision=2), np.array_repr(x), np.array_str(x)))
        return np.sum(x)

    x = np.ones(3) / 3
    jg.value_and_grad(f)(x)
    assert seen[-1] == (np.array2string(x, precision=2), np.array_repr(x), np.array_str(x))
    jg.jit(f, backend="python")(x)
    assert seen[-1] == ("Tracer<f64[3]>",) * 3


# ---- np.polynomial: NumPy's Python code, traced as the user's --------------------------------------------
POLYNOMIAL = {
    "hermevander": lambda x, c: np.sum(np.polynomial.hermite_e.hermevander(x, 3) @ c),
    "chebval": lambda x, c: np.sum(np.polynomial.chebyshev.chebval(x, c) ** 2),
    "legvander2d": lambda x, c: np.sum(np.polynomial.legendre.legvander2d(x, x[::-1], [2, 1])) * c[0],
    "polyder": lambda x, c: np.sum(np.polynomial.polynomial.polyval(x, np.polynomial.polynomial.polyder(c)) ** 2),
    "Chebyshev": lambda x, c: np.sum(np.polynomial.Chebyshev(c)(x) ** 2),
    # products trim trailing zero coefficients: traced ones are kept (the same polynomial)
    "Polynomial product": lambda x, c: np.sum(((np.polynomial.Polynomial(c) * np.polynomial.Polynomial(c[::-1])
                                               - 2.0 * np.polynomial.Polynomial(c)) ** 2)(x)),
    "polymul": lambda x, c: np.sum(np.polynomial.polynomial.polymul(c, x) ** 2),
}


@pytest.mark.parametrize("name", sorted(POLYNOMIAL))
def test_numpy_polynomial_functions_trace(name):
    f = POLYNOMIAL[name]
    x, c = np.linspace(-0.9, 0.9, 5), np.array([0.5, -1.0, 0.25, 0.3])
    ref = f(x, c)
    gx = _fd(lambda a: f(a, c), x)
    gc = _fd(lambda b: f(x, b), c)
    for g in (jg.value_and_grad(f, argnums=(0, 1)), jg.jit_grad(f, argnums=(0, 1), backend="python")):
        v, (dx, dc) = g(x, c)
        np.testing.assert_allclose(v, ref, rtol=1e-13)
        np.testing.assert_allclose(dx, gx, atol=1e-6)
        np.testing.assert_allclose(dc, gc, atol=1e-6)


def test_numpy_polynomial_compiled():
    f = jg.jit_grad(POLYNOMIAL["hermevander"], argnums=(0, 1), wait=True)
    x, c = np.linspace(-0.9, 0.9, 5), np.array([0.5, -1.0, 0.25, 0.3])
    v, (dx, dc) = f(x, c)
    np.testing.assert_allclose(v, POLYNOMIAL["hermevander"](x, c), rtol=1e-13)
    np.testing.assert_allclose(dc, np.polynomial.hermite_e.hermevander(x, 3).sum(0), rtol=1e-13)


def test_scipy_function_imported_before_jitgraph_is_named():
    import scipy.linalg
    original = getattr(scipy.linalg.solve_triangular, "__jitgraph_original__", None)
    if original is None:
        pytest.skip("scipy.linalg's functions are not wrapped in this process")
    with pytest.raises(jg.NotSupportedError, match=r"scipy.linalg.solve_triangular is not supported on "
                                                   r"traced values; .*called through the module"):
        jg.value_and_grad(lambda L, b: np.sum(original(L, b, lower=True)))(np.eye(3) * 2, np.ones(3))


def test_numpy_polynomial_multidimensional_coefficients():
    c2 = np.arange(6.0).reshape(3, 2) - 2.0
    c3 = np.arange(12.0).reshape(2, 3, 2) / 7.0
    y = np.array([0.1, -0.7, 0.4])
    cases = [lambda x: np.polynomial.polynomial.polyval(x, c2),        # tensor=True: every x per column
             lambda x: np.polynomial.chebyshev.chebval2d(x, y, c2),
             lambda x: np.polynomial.legendre.legval3d(x, y, x * 2, c3),
             lambda x: np.polynomial.hermite_e.hermegrid2d(x, y, c2)]
    x = np.array([0.5, 2.0, -0.3])
    for f in cases:
        np.testing.assert_allclose(jg.jit(f, backend="python")(x), f(x), rtol=1e-14)
        _, g = jg.value_and_grad(lambda x: np.sum(f(x) ** 2))(x)
        np.testing.assert_allclose(g, _fd(lambda x: np.sum(f(x) ** 2), x), rtol=1e-6)


def test_edge_cases_of_the_new_functions_match_numpy_and_scipy():
    import scipy.special as sc
    a, b = np.array([-2.0, -1, -3, 1, 0.5, 0.0]), np.array([1.0, 1, 2, -2, 1.5, 1.0])
    np.testing.assert_allclose(jg.jit(sc.beta, backend="python")(a, b), sc.beta(a, b), rtol=1e-13)
    z = np.array([-0.0, np.nan, 0.0, -1.0, -1.5])
    np.testing.assert_array_equal(jg.jit(sc.gammasgn, backend="python")(z), sc.gammasgn(z))
    run = lambda f, *args: jg.jit(f, backend="python")(*args)
    x = np.array([0.2, 1.7, 2.5])
    for f in (lambda x: np.histogram(x, bins=[1.0]), lambda x: np.histogram2d(x, x, bins=[3, np.array([0, 1.5, 3])]),
              lambda x: np.histogramdd(x.astype(np.float32)[:, None], bins=2, range=[(0, 3)])):
        for r, e in zip(run(f, x), f(x)):
            for ri, ei in zip(r if isinstance(r, list) else [r], e if isinstance(e, list) else [e]):
                np.testing.assert_array_equal(ri, ei)
                assert np.asarray(ri).dtype == np.asarray(ei).dtype
    with pytest.raises(ValueError, match="autodetected range is not finite"):
        run(lambda x: np.histogram(x, bins=3)[0], np.array([0.0, np.nan]))
    with pytest.raises(ValueError, match="must increase monotonically"):
        run(lambda x, e: np.histogram(x, bins=e)[0], x, np.array([0.0, 2.0, 1.0]))
    np.testing.assert_array_equal(run(lambda i: np.stack(np.unravel_index(i, (3, 4))), np.array([True])), [[0], [1]])
    np.testing.assert_array_equal(jg.jit(lambda b: np.polymul([0.0, 0.0, 1.0, 2.0], b), backend="python")(x),
                                  np.polymul([0.0, 0.0, 1.0, 2.0], x))
    assert jg.value_and_grad(lambda x: np.sum(np.intersect1d(x.astype(np.int8), x)) * 1.0)(x)[0] == \
        np.sum(np.intersect1d(x.astype(np.int8), x))
    seen = []
    jg.value_and_grad(lambda x: seen.append(np.unique_values(np.array([3, 0, 2, 1, 3]) * x[0])) or np.sum(x))(x)
    np.testing.assert_array_equal(getattr(seen[0], "value", seen[0]), np.unique_values(np.array([3, 0, 2, 1, 3]) * x[0]))

    def pm(a, v):
        a = a * 1
        np.putmask(a, a > 1, v)
        return a
    with pytest.raises(TypeError, match="Cannot cast array data from dtype\\('float64'\\) to dtype\\('int64'\\)"):
        run(pm, np.arange(5), np.array([1.7, 2.2]))
    np.testing.assert_array_equal(run(pm, np.arange(5), 7), pm(np.arange(5), 7))
    v, g = jg.value_and_grad(lambda x: np.sum(round(x[1]) * x))(x)       # round(): an integer, as NumPy's
    assert v == 2 * np.sum(x) and list(g) == [2.0, 2.0, 2.0]
    assert run(lambda x: np.vectorize(round)(x), x).dtype == np.vectorize(round)(x).dtype
