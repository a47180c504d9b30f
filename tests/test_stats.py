"""scipy.stats log-densities and distribution functions on traced values (jitgraph/ops/stats.py).

Every formula of the table is checked against SciPy's own method: values (inside and outside
the support, invalid parameters), eagerly and traced, on the distribution objects and on
frozen distributions; gradients with respect to x, loc, scale and the shape parameters
against central differences of SciPy's function; compiled programs against the reference
interpreter. Methods and distributions without a formula are refused by name.
"""
import numpy as np
import pytest
import scipy.special as sc
import scipy.stats as st

import jitgraph as jg

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# (distribution, shape parameters, loc, scale, points inside the support in standard form)
CONTINUOUS = [
    ("norm", (), 0.3, 1.7, np.linspace(-3.0, 3.0, 7)),
    ("t", (3.5,), -0.2, 0.8, np.linspace(-4.0, 4.0, 7)),
    ("t", (250.0,), 0.1, 1.3, np.linspace(-3.0, 3.0, 5)),
    ("laplace", (), 0.5, 2.0, np.array([-3.0, -1.0, -0.2, 0.4, 1.5, 4.0])),
    ("logistic", (), -1.0, 0.6, np.linspace(-5.0, 5.0, 6)),
    ("expon", (), 0.2, 1.5, np.array([0.05, 0.5, 1.0, 2.5, 6.0])),
    ("gamma", (2.5,), 0.1, 2.0, np.array([0.1, 0.7, 1.5, 3.0, 8.0])),
    ("gamma", (0.7,), 0.0, 1.0, np.array([0.05, 0.3, 1.0, 2.0])),
    ("beta", (2.0, 3.5), 0.0, 1.0, np.array([0.05, 0.2, 0.5, 0.8, 0.95])),
    ("beta", (0.6, 1.4), -1.0, 3.0, np.array([0.02, 0.3, 0.7, 0.99])),
]
METHODS = ("logpdf", "pdf", "logcdf", "cdf", "sf", "logsf")
IDS = [f"{d}{s}" for d, s, *_ in CONTINUOUS]


def _points(loc, scale, z):
    return loc + scale * z


def _traced_values(f, *args, argnums=None):
    """f(*args) eagerly (inside value_and_grad, which records the arguments in `argnums`) and
    from the interpreted graph."""
    seen = {}

    def loss(*a):
        seen["v"] = f(*a)
        return np.sum(seen["v"])

    jg.value_and_grad(loss, tuple(range(len(args))) if argnums is None else argnums)(*args)
    eager = seen["v"].value if hasattr(seen["v"], "value") else seen["v"]
    traced = jg.eval_graph(jg.make_graph(f)(*args), *args)
    return np.asarray(eager), np.asarray(traced)


def _assert_scipy_close(got, want, rtol=1e-12):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got) & (got > 0), np.isinf(want) & (want > 0))
    np.testing.assert_array_equal(np.isinf(got) & (got < 0), np.isinf(want) & (want < 0))
    ok = np.isfinite(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=rtol, atol=1e-300)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", CONTINUOUS, ids=IDS)
def test_continuous_values(case, method):
    name, shapes, loc, scale, z = case
    dist = getattr(st, name)
    lo, hi = dist.support(*shapes)
    outside = [v for v in (lo - 0.5, hi + 0.5) if np.isfinite(v)]
    edges = [v for v in (lo, hi) if np.isfinite(v)]
    x = _points(loc, scale, np.concatenate([z, outside, edges, [np.nan]]))
    want = getattr(dist, method)(x, *shapes, loc=loc, scale=scale)
    for got in _traced_values(lambda x: getattr(dist, method)(x, *shapes, loc=loc, scale=scale), x):
        assert got.dtype == np.float64
        _assert_scipy_close(got, want)
    # frozen, loc and scale traced
    frozen = _traced_values(lambda x, m, s: getattr(dist(*shapes, loc=m, scale=s), method)(x),
                            x, np.float64(loc), np.float64(scale))
    for got in frozen:
        _assert_scipy_close(got, want)


@pytest.mark.parametrize("case", CONTINUOUS, ids=IDS)
def test_invalid_parameters_give_nan(case):
    name, shapes, loc, _, z = case
    dist = getattr(st, name)
    x = _points(loc, 1.0, z)
    scales = np.array([-1.0, 0.0, 2.0, -3.0, 1.0, 0.5, -0.5][:len(z)])
    for method in ("logpdf", "cdf", "sf"):
        want = getattr(dist, method)(x, *shapes, loc=loc, scale=scales)
        def run(x, s):
            return getattr(dist, method)(x, *shapes, loc=loc, scale=s)
        for got in _traced_values(run, x, scales):
            _assert_scipy_close(got, want)
    if shapes:
        bad = tuple(np.where(np.arange(len(z)) % 2 == 0, -abs(s), s) for s in shapes)
        want = dist.logpdf(x, *bad, loc=loc)
        for got in _traced_values(lambda x: dist.logpdf(x, *bad, loc=loc), x):
            _assert_scipy_close(got, want)


def _fd_grad(f, args, i, eps=1e-6):
    """Central differences of sum(f(*args)) with respect to argument i (elementwise)."""
    a = np.array(args[i], np.float64)
    g = np.zeros_like(a)
    for k in np.ndindex(a.shape):
        plus, minus = a.copy(), a.copy()
        plus[k] += eps
        minus[k] -= eps
        ap, am = list(args), list(args)
        ap[i], am[i] = plus, minus
        g[k] = (np.sum(f(*ap)) - np.sum(f(*am))) / (2 * eps)
    return g


SHAPE_GRADIENT = {"logpdf", "pdf"}      # the CDFs of t, gamma and beta: no shape derivative


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", CONTINUOUS, ids=IDS)
def test_continuous_gradients(case, method):
    """Gradients with respect to x, loc, scale (and the shape parameters where the formula has
    them) against central differences of SciPy's own function."""
    name, shapes, loc, scale, z = case
    dist = getattr(st, name)
    x = _points(loc, scale, z[1:-1])
    weights = np.linspace(0.5, 1.5, x.size)
    nshape = len(shapes)
    with_shapes = nshape and (method in SHAPE_GRADIENT or name in ("norm", "laplace", "logistic", "expon"))

    def f(x, loc, scale, *shapes):
        return weights * getattr(dist, method)(x, *shapes, loc=loc, scale=scale)

    args = (x, np.float64(loc), np.float64(scale)) + tuple(np.float64(s) for s in shapes)
    argnums = tuple(range(3 + (nshape if with_shapes else 0)))
    value, grads = jg.value_and_grad(lambda *a: np.sum(f(*a)), argnums)(*args)
    np.testing.assert_allclose(value, np.sum(f(*args)), rtol=1e-12)
    graph = jg.make_graph(lambda *a: np.sum(f(*a)), argnums, grad=True)(*args)
    _, traced = jg.eval_graph(graph, *args)
    for i, (g, gt) in enumerate(zip(grads, traced)):
        fd = _fd_grad(f, args, i)
        np.testing.assert_allclose(g, fd, rtol=2e-6, atol=2e-6 * max(1.0, np.max(np.abs(fd))))
        np.testing.assert_allclose(gt, g, rtol=1e-12, atol=1e-14)
    if nshape and not with_shapes:
        with pytest.raises(jg.GradError, match=r"scipy\.special\.\w+ has no derivative with respect to"):
            jg.grad(lambda s: np.sum(f(x, loc, scale, s, *args[4:])))(np.float64(shapes[0]))


POISSON = [(3.5, 0.0), (0.4, 1.0), (12.0, -2.0)]


@pytest.mark.parametrize("mu,loc", POISSON)
def test_poisson(mu, loc):
    k = loc + np.array([-1.0, 0.0, 1.0, 2.0, 2.5, 5.0, 20.0, np.inf, np.nan])
    for method in ("logpmf", "pmf", "logcdf", "cdf", "sf", "logsf"):
        want = getattr(st.poisson, method)(k, mu, loc)
        for got in _traced_values(lambda k, m: getattr(st.poisson, method)(k, m, loc), k, np.float64(mu)):
            _assert_scipy_close(got, want)
        for got in _traced_values(lambda k, m: getattr(st.poisson(m, loc=loc), method)(k), k, np.float64(mu)):
            _assert_scipy_close(got, want)
    # gradients with respect to mu (k is an integer: its gradient is 0)
    kk = loc + np.array([0.0, 1.0, 3.0, 7.0])
    for method in ("logpmf", "pmf", "cdf", "sf", "logcdf"):
        def f(mu):
            return getattr(st.poisson, method)(kk, mu, loc)
        g = jg.grad(lambda m: np.sum(f(m)))(np.float64(mu))
        np.testing.assert_allclose(g, _fd_grad(f, (np.float64(mu),), 0), rtol=1e-6, atol=1e-9)
    assert np.all(jg.grad(lambda k: np.sum(st.poisson.logpmf(k, mu, loc)))(kk) == 0.0)
    assert np.isnan(jg.eval_graph(jg.make_graph(lambda m: st.poisson.logpmf(2.0, m))(-1.0), -1.0))


def test_broadcasting_keywords_and_dtypes():
    x = np.linspace(-1.0, 1.0, 6).reshape(2, 3).astype(np.float32)
    loc = np.array([0.0, 0.5, -0.5])
    scale = np.array([[1.0], [2.0]])
    for f in (lambda x: st.norm.logpdf(x, loc, scale), lambda x: st.norm.logpdf(x, scale=scale, loc=loc),
              lambda x: st.t.cdf(x, df=4.0, loc=loc), lambda x: st.gamma(a=2.0, scale=scale).pdf(x * x),
              lambda x: st.norm.logpdf(1.0, loc=x), lambda x: st.beta.logcdf(x * x, 2.0, b=3.0)):
        want = f(x)
        for got in _traced_values(f, x):
            assert got.dtype == np.float64 and got.shape == np.shape(want)     # SciPy's float64
            _assert_scipy_close(got, want)
    # scalars in, a 0-d result out
    g = jg.make_graph(lambda m: st.norm.logpdf(0.5, m, 2.0))(np.float64(0.1))
    assert g.outputs[0].shape == ()
    assert jg.grad(lambda m: st.norm.logpdf(0.5, m, 2.0))(0.1) == pytest.approx((0.5 - 0.1) / 4.0)


def test_t_with_infinite_df_is_normal():
    x = np.linspace(-2.0, 2.0, 5)
    df = np.array([np.inf, 3.0, np.inf, 1e12, 2.0])
    for method in ("logpdf", "cdf", "sf"):
        want = getattr(st.t, method)(x, df)
        for got in _traced_values(lambda x, d: getattr(st.t, method)(x, d), x, df, argnums=(0,)):
            _assert_scipy_close(got, want)
    g = jg.grad(lambda x: np.sum(st.t.logpdf(x, df)))(x)
    assert np.all(np.isfinite(g))


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_compiled_log_likelihoods(backend):
    """A Gaussian and a Student-t log-likelihood and a gamma CDF, compiled, against the
    interpreter and SciPy."""
    rng = np.random.default_rng(1)
    data = rng.standard_normal(50) * 1.3 + 0.4

    def loss(mu, log_sigma, log_df):
        sigma, df = np.exp(log_sigma), np.exp(log_df)
        return -(np.sum(st.norm.logpdf(data, mu, sigma)) + np.sum(st.t(df, mu, sigma).logpdf(data))
                 + np.sum(st.gamma.logcdf(data * data, 2.0, scale=sigma)))

    args = (np.float64(0.1), np.float64(0.2), np.float64(1.5))
    graph = jg.make_graph(loss, (0, 1, 2), grad=True)(*args)
    v_ref, g_ref = jg.eval_graph(graph, *args)
    v, g = jg.jit_grad(loss, argnums=(0, 1, 2), backend=backend)(*args)
    np.testing.assert_allclose(v, v_ref, rtol=1e-12)
    np.testing.assert_allclose(g, g_ref, rtol=1e-10)
    s = np.exp(0.2)
    want = -(np.sum(st.norm.logpdf(data, 0.1, s)) + np.sum(st.t.logpdf(data, np.exp(1.5), 0.1, s))
             + np.sum(st.gamma.logcdf(data * data, 2.0, scale=s)))
    np.testing.assert_allclose(v, want, rtol=1e-12)


def test_arrays_still_run_scipy():
    x = np.linspace(-1.0, 1.0, 5)
    original = st.norm.logpdf.__jitgraph_original__
    assert np.array_equal(st.norm.logpdf(x, 0.2, 1.5), original(st.norm, x, 0.2, 1.5))
    assert st.norm(0.0, 1.0).cdf(0.0) == 0.5
    assert st.norm.ppf(0.5) == 0.0 and st.norm(1.0).ppf(0.5) == 1.0
    assert st.poisson.pmf(0, 0.0) == 1.0


def test_unsupported_methods_and_distributions_are_named():
    x = np.linspace(0.1, 0.9, 4)
    cases = [(lambda x: st.norm.ppf(x), r"scipy\.stats\.norm\.ppf is not supported on traced values"),
             (lambda x: st.norm(x[0], 1.0).ppf(0.5), r"scipy\.stats\.norm\.ppf is not supported"),
             (lambda x: st.norm.ppf(x[0]), r"scipy\.stats\.norm\.ppf is not supported"),
             (lambda x: st.gamma.rvs(x), r"scipy\.stats\.gamma\.rvs is not supported"),
             (lambda x: st.t.mean(x), r"scipy\.stats\.t\.mean is not supported"),
             (lambda x: st.cauchy.logpdf(x), r"scipy\.stats\.cauchy\.logpdf is not supported"),
             (lambda x: st.cauchy(x[0]), r"scipy\.stats\.cauchy with traced parameters is not supported"),
             (lambda x: st.binom.pmf(x, 3, 0.5), r"scipy\.stats\.binom\.pmf is not supported"),
             (lambda x: st.norm.fit(x), r"scipy\.stats\.norm\.fit is not supported"),
             (lambda x: st.zscore(x), r"scipy\.stats\.zscore is not supported on traced values"),
             (lambda x: st.multivariate_normal.logpdf(x, np.zeros(4)),
              r"scipy\.stats\.multivariate_normal\.logpdf is not supported")]
    for f, message in cases:
        with pytest.raises(jg.NotSupportedError, match=message):
            jg.make_graph(lambda x: np.sum(f(x)))(x)
        with pytest.raises(jg.NotSupportedError, match=message):
            jg.grad(lambda x: np.sum(f(x)))(x)


def test_cdf_shape_gradients_are_refused():
    with pytest.raises(jg.GradError, match=r"scipy\.special\.betainc\w* has no derivative"):
        jg.grad(lambda df: st.t.cdf(1.3, df))(4.0)
    with pytest.raises(jg.GradError, match=r"scipy\.special\.gammainc has no derivative"):
        jg.grad(lambda a: st.gamma.cdf(1.3, a))(2.0)
    with pytest.raises(jg.GradError, match=r"scipy\.special\.betainc\w* has no derivative"):
        jg.grad(lambda b: st.beta.sf(0.3, 2.0, b))(2.0)
    # the densities differentiate in their shape parameters
    for f, a in ((lambda a: st.gamma.logpdf(1.3, a), 2.0), (lambda d: st.t.logpdf(0.7, d), 4.0),
                 (lambda b: st.beta.pdf(0.3, 2.0, b), 2.5)):
        g = jg.grad(f)(a)
        np.testing.assert_allclose(g, (f(a + 1e-6) - f(a - 1e-6)) / 2e-6, rtol=1e-6)


def test_special_functions_used_by_the_formulas_match_scipy():
    """stdtr (the t CDF) from the incomplete beta function, in both of its branches."""
    df = np.array([0.5, 1.0, 3.0, 30.0, 1e4, 1e7])
    for t in (-50.0, -3.0, -0.1, 0.0, 0.2, 2.5, 40.0):
        want = sc.stdtr(df, t)
        got = jg.eval_graph(jg.make_graph(lambda d: st.t.cdf(t, d))(df), df)
        np.testing.assert_allclose(got, want, rtol=5e-12)
