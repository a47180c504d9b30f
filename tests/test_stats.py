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
from jitgraph.ops.stats import FAMILIES

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
    ("uniform", (), -0.5, 2.5, np.array([0.05, 0.3, 0.5, 0.8, 0.97])),
    ("lognorm", (0.7,), -0.2, 1.5, np.array([0.1, 0.5, 1.0, 2.0, 6.0])),
    ("lognorm", (1.9,), 0.0, 1.0, np.array([1e-3, 0.2, 1.0, 30.0])),
    ("cauchy", (), 0.3, 1.5, np.array([-40.0, -2.0, -0.5, 0.0, 0.7, 3.0, 1e3])),
    ("halfnorm", (), 0.2, 1.3, np.array([0.01, 0.5, 1.0, 2.5, 9.0])),
    ("halfcauchy", (), -0.5, 2.0, np.array([0.01, 0.5, 1.0, 3.0, 50.0])),
    ("invgamma", (2.5,), 0.1, 1.5, np.array([0.05, 0.3, 1.0, 2.0, 10.0])),
    ("weibull_min", (0.7,), 0.0, 1.0, np.array([1e-3, 0.2, 1.0, 3.0, 40.0])),
    ("weibull_min", (2.3,), 0.5, 2.0, np.array([0.05, 0.5, 1.0, 2.0, 5.0])),
    ("pareto", (2.0,), 0.0, 1.5, np.array([1.01, 1.5, 2.0, 5.0, 100.0])),
    ("gumbel_r", (), 0.4, 1.2, np.array([-3.0, -1.0, 0.0, 1.0, 4.0, 40.0])),
    ("chi2", (3.0,), 0.0, 2.0, np.array([0.01, 0.5, 2.0, 5.0, 30.0])),
    ("chi2", (1.0,), -1.0, 1.0, np.array([1e-4, 0.3, 1.0, 4.0])),
    ("truncnorm", (-1.0, 2.0), 0.3, 1.5, np.array([-0.9, -0.3, 0.0, 0.8, 1.5, 1.99])),
    ("truncnorm", (0.5, 3.0), 0.0, 1.0, np.array([0.51, 1.0, 2.0, 2.9])),
    ("truncnorm", (-4.0, -0.5), -1.0, 0.5, np.array([-3.9, -2.0, -1.0, -0.6])),
    ("truncnorm", (0.2, np.inf), 0.0, 2.0, np.array([0.3, 1.0, 3.0, 8.0])),
    ("truncnorm", (-np.inf, 1.0), 0.5, 1.0, np.array([-6.0, -1.0, 0.0, 0.9])),
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


def _check_against_scipy(dist, method, points, shapes, loc, scale):
    """`method` at `points` traced (eagerly, interpreted, compiled) equals SciPy's, on the
    distribution and frozen with loc and scale traced."""
    want = getattr(dist, method)(points, *shapes, loc=loc, scale=scale)
    for got in _traced_values(lambda x: getattr(dist, method)(x, *shapes, loc=loc, scale=scale), points):
        assert got.dtype == np.float64
        _assert_scipy_close(got, want)
    frozen = _traced_values(lambda x, m, s: getattr(dist(*shapes, loc=m, scale=s), method)(x),
                            points, np.float64(loc), np.float64(scale))
    for got in frozen:
        _assert_scipy_close(got, want)
    return want


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", CONTINUOUS, ids=IDS)
def test_continuous_values(case, method):
    name, shapes, loc, scale, z = case
    dist = getattr(st, name)
    lo, hi = dist.support(*shapes)
    outside = [v for v in (lo - 0.5, hi + 0.5) if np.isfinite(v)]
    edges = [v for v in (lo, hi) if np.isfinite(v)]
    x = _points(loc, scale, np.concatenate([z, outside, edges, [np.nan]]))
    _check_against_scipy(dist, method, x, shapes, loc, scale)


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


SHAPE_GRADIENT = {"logpdf", "pdf"}      # the CDFs of t, gamma, beta, invgamma, chi2: no shape derivative
SHAPE_DIFFERENTIABLE = {"lognorm", "weibull_min", "pareto", "truncnorm"}      # every method


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
    with_shapes = nshape and (method in SHAPE_GRADIENT or name in SHAPE_DIFFERENTIABLE)

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


QUANTILE_CASES = [c for c in CONTINUOUS if "ppf" in FAMILIES[c[0]].formulas]
Q = np.array([0.0, 1e-12, 0.01, 0.3, 0.5, 0.7, 0.99, 1.0 - 1e-12, 1.0, -0.1, 1.1, np.nan])


@pytest.mark.parametrize("method", ["ppf", "isf"])
@pytest.mark.parametrize("case", QUANTILE_CASES, ids=[f"{d}{s}" for d, s, *_ in QUANTILE_CASES])
def test_quantiles(case, method):
    """ppf and isf: SciPy's values (the ends of the support at q = 0 and 1, NaN outside [0, 1], for
    NaN and for invalid parameters), on the distribution and frozen with traced loc and scale;
    gradients with respect to q, loc, scale and the shape parameters against central differences."""
    name, shapes, loc, scale, _ = case
    dist = getattr(st, name)
    _check_against_scipy(dist, method, Q, shapes, loc, scale)
    scales = np.array([1.0, -1.0, 0.0, 2.0])
    q = np.array([0.3, 0.0, 1.0, 1.0])
    for locs in (loc, np.array([np.nan, loc, loc, np.nan])):
        want = getattr(dist, method)(q, *shapes, loc=locs, scale=scales)
        def run(q, s):
            return getattr(dist, method)(q, *shapes, loc=locs, scale=s)
        for got in _traced_values(run, q, scales):
            _assert_scipy_close(got, want)

    qs = np.array([0.01, 0.2, 0.5, 0.75, 0.97])
    weights = np.linspace(0.5, 1.5, qs.size)

    def f(q, loc, scale, *shapes):
        return weights * getattr(dist, method)(q, *shapes, loc=loc, scale=scale)

    args = (qs, np.float64(loc), np.float64(scale)) + tuple(np.float64(s) for s in shapes)
    argnums = tuple(range(len(args)))
    value, grads = jg.value_and_grad(lambda *a: np.sum(f(*a)), argnums)(*args)
    np.testing.assert_allclose(value, np.sum(f(*args)), rtol=1e-12)
    _, traced = jg.eval_graph(jg.make_graph(lambda *a: np.sum(f(*a)), argnums, grad=True)(*args), *args)
    for i, (g, gt) in enumerate(zip(grads, traced)):
        fd = _fd_grad(f, args, i, eps=1e-7)
        np.testing.assert_allclose(g, fd, rtol=2e-6, atol=2e-6 * max(1.0, np.max(np.abs(fd))))
        np.testing.assert_allclose(gt, g, rtol=1e-12, atol=1e-14)


def test_quantiles_invert_the_cdf():
    """ppf(cdf(x)) = x and isf(sf(x)) = x, traced end to end (the derivative is 1)."""
    x = np.array([-1.5, 0.2, 2.0])
    for dist, args in ((st.norm, (0.3, 1.2)), (st.cauchy, (-0.2, 0.7)), (st.logistic, (0.1, 2.0)),
                       (st.gumbel_r, (0.0, 1.5)), (st.laplace, (0.4, 0.6))):
        for inverse, forward in (("ppf", "cdf"), ("isf", "sf")):
            def f(x):
                return getattr(dist, inverse)(getattr(dist, forward)(x, *args), *args)
            np.testing.assert_allclose(jg.eval_graph(jg.make_graph(f)(x), x), x, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(jg.grad(lambda x: np.sum(f(x)))(x), np.ones(3), rtol=1e-9)


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


# (distribution, shape parameters, loc, the parameter differentiated (its index among the shapes))
DISCRETE = [("binom", (7.0, 0.3), 0.0, 1), ("binom", (1.0, 0.85), 2.0, 1), ("bernoulli", (0.3,), 0.0, 0),
            ("bernoulli", (0.9,), -1.0, 0), ("geom", (0.25,), 0.0, 0), ("geom", (0.7,), 3.0, 0),
            ("nbinom", (3.0, 0.4), 0.0, 1), ("nbinom", (2.5, 0.85), -1.0, 1), ("nbinom", (0.7, 0.1), 2.0, 1)]
DISCRETE_METHODS = ("logpmf", "pmf", "logcdf", "cdf", "sf", "logsf")


@pytest.mark.parametrize("case", DISCRETE, ids=[f"{d}{s}" for d, s, *_ in DISCRETE])
def test_discrete_distributions(case):
    """binom, bernoulli, geom and nbinom: every method inside and outside the support (below it,
    above n, between integers, infinities, NaN), on the distribution and frozen; gradients with
    respect to p against central differences of SciPy's functions; k's gradient is 0."""
    name, shapes, loc, which = case
    dist = getattr(st, name)
    k = loc + np.array([-1.0, 0.0, 1.0, 2.0, 2.5, 3.0, 5.0, 7.0, 8.0, np.inf, -np.inf, np.nan])
    for method in DISCRETE_METHODS:
        want = getattr(dist, method)(k, *shapes, loc)

        def f(k, p):
            args = list(shapes)
            args[which] = p
            return getattr(dist, method)(k, *args, loc)

        def frozen(k, p):
            args = list(shapes)
            args[which] = p
            return getattr(dist(*args, loc=loc), method)(k)
        for fn in (f, frozen):
            for got in _traced_values(fn, k, np.float64(shapes[which]), argnums=(1,)):
                _assert_scipy_close(got, want)
    kk = loc + np.array([0.0, 1.0, 2.0, 4.0])
    for method in DISCRETE_METHODS:
        def g(p):
            args = list(shapes)
            args[which] = p
            return getattr(dist, method)(kk, *args, loc)
        grad = jg.grad(lambda p: np.sum(np.where(np.isfinite(g(p)), g(p), 0.0)))(np.float64(shapes[which]))
        want = _fd_grad(lambda p: np.where(np.isfinite(g(p)), g(p), 0.0), (np.float64(shapes[which]),), 0)
        np.testing.assert_allclose(grad, want, rtol=1e-6, atol=1e-9, err_msg=method)
    assert np.all(jg.grad(lambda k: np.sum(dist.logpmf(k, *shapes, loc)))(kk) == 0.0)


def test_nbinom_traced_n():
    """nbinom with n traced (a real n > 0, as SciPy allows): SciPy's values; logpmf and pmf
    differentiate in n, the distribution functions refuse by name (betainc's a)."""
    k = np.array([0.0, 1.0, 3.0, 7.5, 12.0])
    for method in DISCRETE_METHODS:
        want = getattr(st.nbinom, method)(k, 2.7, 0.35)
        got = jg.eval_graph(jg.make_graph(lambda n: getattr(st.nbinom(n, 0.35), method)(k))(2.7), 2.7)
        _assert_scipy_close(got, want)
    kk = np.array([0.0, 1.0, 3.0, 12.0])
    for method in ("logpmf", "pmf"):
        def f(n, p):
            return getattr(st.nbinom, method)(kk, n, p)
        grads = jg.grad(lambda n, p: np.sum(f(n, p)), (0, 1))(2.7, 0.35)
        for i, g in enumerate(grads):
            np.testing.assert_allclose(g, _fd_grad(f, (2.7, 0.35), i), rtol=1e-6, atol=1e-9)
    with pytest.raises(jg.GradError, match=r"scipy\.special\.betainc has no derivative with respect to .*'a'"):
        jg.grad(lambda n: np.sum(st.nbinom.cdf(k, n, 0.35)))(2.7)


def test_discrete_invalid_parameters():
    """p outside [0, 1] (geom, nbinom: p = 0 too) and a negative or fractional n (nbinom: n <= 0)
    give NaN."""
    k = np.array([0.0, 1.0, 2.0, 3.0])
    cases = [(st.binom, lambda p: (np.array([3.0, -1.0, 2.5, 4.0]), p), np.array([0.5, 0.5, 0.5, 1.5])),
             (st.bernoulli, lambda p: (p,), np.array([-0.1, 0.0, 1.0, 1.1])),
             (st.geom, lambda p: (p,), np.array([0.0, 0.5, 1.0, -0.5])),
             (st.nbinom, lambda p: (np.array([3.0, 0.0, 2.5, -1.0]), p), np.array([0.5, 0.5, 0.0, 0.5])),
             (st.nbinom, lambda p: (2.0, p), np.array([0.0, 1.0, 1.5, -0.5]))]
    for dist, params, p in cases:
        for method in ("logpmf", "pmf", "cdf", "sf", "logsf"):
            want = getattr(dist, method)(k, *params(p))
            for got in _traced_values(lambda p: getattr(dist, method)(k, *params(p)), p):
                _assert_scipy_close(got, want)


MVN_X = [np.array([0.3, -1.2, 0.5]), np.linspace(-1.0, 1.0, 12).reshape(4, 3),
         np.linspace(-2.0, 1.0, 30).reshape(2, 5, 3)]


def _spd(d, seed=3):
    a = np.random.default_rng(seed).standard_normal((d, d))
    return a @ a.T + d * np.eye(d)


@pytest.mark.parametrize("cov_kind", ["full", "diagonal", "scalar"])
@pytest.mark.parametrize("x", MVN_X, ids=["point", "rows", "batch"])
def test_multivariate_normal(x, cov_kind):
    """logpdf and pdf with x, mean and cov traced or constant (cov a matrix, a 1-d diagonal or a
    scalar), and frozen: SciPy's values and shapes (a single point gives a scalar)."""
    mean = np.array([0.1, -0.4, 0.2])
    cov = {"full": _spd(3), "diagonal": np.array([0.5, 1.5, 2.0]), "scalar": np.float64(1.7)}[cov_kind]
    mvn = st.multivariate_normal
    for method in ("logpdf", "pdf"):
        want = getattr(mvn, method)(x, mean, cov)
        calls = [(lambda x, m, c: getattr(mvn, method)(x, m, c), (x, mean, cov)),
                 (lambda x: getattr(mvn, method)(x, mean, cov), (x,)),
                 (lambda m: getattr(mvn, method)(x, mean=m, cov=cov), (mean,)),
                 (lambda c: getattr(mvn, method)(x, mean, c), (cov,)),
                 (lambda x, m, c: getattr(mvn(m, c), method)(x), (x, mean, cov)),
                 (lambda x: getattr(mvn(mean, cov), method)(x), (x,))]
        for f, args in calls:
            for got in _traced_values(f, *args):
                assert got.shape == np.shape(want)
                _assert_scipy_close(got, want, rtol=1e-12)


def test_multivariate_normal_gradients():
    """Gradients with respect to x, mean and a full covariance (the lower triangle, which SciPy
    and the Cholesky factor read) against central differences of SciPy's logpdf."""
    x, mean, cov = MVN_X[1], np.array([0.1, -0.4, 0.2]), _spd(3)

    def f(x, m, c):
        return st.multivariate_normal.logpdf(x, m, c) * np.linspace(0.5, 1.5, 4)

    value, grads = jg.value_and_grad(lambda *a: np.sum(f(*a)), (0, 1, 2))(x, mean, cov)
    np.testing.assert_allclose(value, np.sum(f(x, mean, cov)), rtol=1e-12)
    _, traced = jg.eval_graph(jg.make_graph(lambda *a: np.sum(f(*a)), (0, 1, 2), grad=True)(x, mean, cov),
                              x, mean, cov)
    for i, (g, gt) in enumerate(zip(grads, traced)):
        np.testing.assert_allclose(g, _fd_grad(f, (x, mean, cov), i), rtol=2e-6, atol=2e-7)
        np.testing.assert_allclose(gt, g, rtol=1e-12, atol=1e-14)
    # a diagonal or scalar covariance
    for c in (np.array([0.5, 1.5, 2.0]), np.float64(1.7)):
        g = jg.grad(lambda c: np.sum(f(x, mean, c)))(c)
        np.testing.assert_allclose(g, _fd_grad(f, (x, mean, c), 2), rtol=2e-6, atol=2e-7)


def test_multivariate_normal_dimensions_and_errors():
    """One-dimensional distributions (x a scalar or a vector of points), the default parameters, and
    SciPy's errors: a mean that is not a vector, mismatched sizes, a constant singular matrix."""
    mvn = st.multivariate_normal
    for x in (np.float64(0.3), np.array([0.3, -1.0, 2.0]), np.array([[0.3], [1.0]])):
        for f, args in ((lambda x: mvn.logpdf(x, 0.5, 2.0), (x,)), (lambda m: mvn.logpdf(x, m, 2.0), (0.5,)),
                        (lambda c: mvn.pdf(x, 0.5, c), (2.0,)), (lambda x: mvn.logpdf(x), (x,))):
            want = f(*args)
            for got in _traced_values(f, *[np.float64(a) if np.ndim(a) == 0 else a for a in args]):
                assert got.shape == np.shape(want)
                _assert_scipy_close(got, want)
    x = np.zeros(3)
    with pytest.raises(ValueError, match="Array 'mean' must be a vector of length 6"):
        jg.make_graph(lambda m: mvn.logpdf(x, m))(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="Dimension mismatch"):
        jg.make_graph(lambda c: mvn.logpdf(x, np.zeros(3), c))(np.eye(2))
    with pytest.raises(jg.NotSupportedError, match="singular covariance matrix is not supported"):
        jg.make_graph(lambda x: mvn.logpdf(x, np.zeros(3), np.diag([1.0, 1.0, 0.0]), allow_singular=True))(x)


def test_dirichlet():
    """dirichlet.logpdf/pdf with x (components along the first axis, the last one implied when
    missing) or alpha traced, and frozen."""
    alpha = np.array([1.5, 2.0, 0.7])
    x = np.array([[0.2, 0.1], [0.5, 0.6], [0.3, 0.3]])
    for xs in (x, x[:2], x[:, 0]):
        for method in ("logpdf", "pdf"):
            want = getattr(st.dirichlet, method)(xs, alpha)
            for f, a in ((lambda a: getattr(st.dirichlet, method)(xs, a), alpha),
                         (lambda x: getattr(st.dirichlet, method)(x, alpha), xs),
                         (lambda a: getattr(st.dirichlet(a), method)(xs), alpha)):
                for got in _traced_values(f, a):
                    assert got.shape == np.shape(want)
                    _assert_scipy_close(got, want)
    g = jg.grad(lambda a: np.sum(st.dirichlet.logpdf(x, a)))(alpha)
    np.testing.assert_allclose(g, _fd_grad(lambda a: st.dirichlet.logpdf(x, a), (alpha,), 0), rtol=1e-6)
    g = jg.grad(lambda x: np.sum(st.dirichlet.logpdf(x, alpha)))(x[:2])
    np.testing.assert_allclose(g, _fd_grad(lambda x: st.dirichlet.logpdf(x, alpha), (x[:2],), 0), rtol=1e-6)


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


ENTROPY_P = np.array([[0.2, 0.0, 1.5, 3.0], [1.0, 2.0, 0.0, 0.5], [0.3, 0.3, 0.3, 0.0]])
ENTROPY_Q = np.array([[0.5, 1.0, 1.0, 2.0], [1.0, 0.0, 1.0, 1.0], [0.2, 0.3, 0.1, 0.4]])


def test_entropy():
    """scipy.stats.entropy: SciPy's values, shapes and dtypes (axis, axis=None, keepdims, base, qk
    broadcast against pk, float32, a scalar, zeros: 0 log 0 = 0, qk = 0 < pk: inf, negative pk: -inf,
    NaN), pk or qk traced."""
    p, q = ENTROPY_P, ENTROPY_Q
    calls = [lambda p, q: st.entropy(p), lambda p, q: st.entropy(p, axis=1),
             lambda p, q: st.entropy(p, axis=None), lambda p, q: st.entropy(p, base=2),
             lambda p, q: st.entropy(p, q), lambda p, q: st.entropy(q, p, None, -1),
             lambda p, q: st.entropy(p, q, base=10.0, axis=1), lambda p, q: st.entropy(p, keepdims=True),
             lambda p, q: st.entropy(p, axis=None, keepdims=True), lambda p, q: st.entropy(p[0]),
             lambda p, q: st.entropy(p[0, 0]), lambda p, q: st.entropy(p, q[0]),
             lambda p, q: st.entropy(p.astype(np.float32)), lambda p, q: st.entropy(p.astype(np.float32), q),
             lambda p, q: st.entropy([p[0, 0], p[0, 2], 1.0]), lambda p, q: st.entropy(p - 0.25),
             lambda p, q: st.entropy(p * np.nan, axis=1)]
    for f in calls:
        want = f(p, q)
        for argnums in ((0,), (1,)):
            for got in _traced_values(f, p, q, argnums=argnums):
                assert got.shape == np.shape(want) and got.dtype == np.asarray(want).dtype
                _assert_scipy_close(got, want, rtol=1e-13)
    with pytest.raises(ValueError, match="`base` must be a positive number"):
        jg.make_graph(lambda p: st.entropy(p, base=-1.0))(p)


def test_entropy_gradients():
    """Gradients of the entropy and of the Kullback-Leibler divergence with respect to pk, qk and the
    base, against central differences of SciPy's function (positive pk: the derivative of 0 log 0 is
    SciPy's 0 only as a convention)."""
    p, q = ENTROPY_P + 0.1, ENTROPY_Q + 0.2
    for f in (lambda p, q, b: st.entropy(p, axis=1) * np.arange(1.0, 4.0),
              lambda p, q, b: st.entropy(p, q, base=b) * np.arange(1.0, 5.0),
              lambda p, q, b: st.entropy(q, p, base=b, axis=None)):
        args = (p, q, np.float64(3.0))
        value, grads = jg.value_and_grad(lambda *a: np.sum(f(*a)), (0, 1, 2))(*args)
        np.testing.assert_allclose(value, np.sum(f(*args)), rtol=1e-13)
        for i, g in enumerate(grads):
            np.testing.assert_allclose(g, _fd_grad(f, args, i), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_compiled_new_distributions(backend):
    """Quantiles, the distributions added with them, nbinom and entropy, compiled (jit_grad), against
    the interpreter and SciPy."""
    data = np.array([0.3, 1.2, 2.5, 0.8, 4.0])
    counts = np.array([0.0, 2.0, 5.0, 1.0, 3.0])
    probs = np.array([0.1, 0.4, 0.2, 0.3])

    def loss(loc, log_scale, logit_p):
        s, p = np.exp(log_scale), 1.0 / (1.0 + np.exp(-logit_p))
        return (np.sum(st.cauchy.logpdf(data, loc, s)) + np.sum(st.gumbel_r(loc, s).logcdf(data))
                + np.sum(st.weibull_min.logsf(data, 1.0 + s, scale=2.0))
                + np.sum(st.halfnorm.logpdf(data, -1.0, s)) + np.sum(st.truncnorm.logpdf(data, -1.0, 5.0, loc, s))
                + np.sum(st.chi2.logcdf(data, 3.0, scale=s))
                + np.sum(st.norm.ppf(probs, loc, s)) + np.sum(st.lognorm(s).isf(probs))
                + np.sum(st.nbinom.logpmf(counts, 2.5, p)) + np.sum(st.nbinom.logcdf(counts, 3, p))
                + st.entropy(probs * s + 0.1, probs + p))

    args = (np.float64(0.4), np.float64(-0.1), np.float64(0.3))
    graph = jg.make_graph(loss, (0, 1, 2), grad=True)(*args)
    v_ref, g_ref = jg.eval_graph(graph, *args)
    v, g = jg.jit_grad(loss, argnums=(0, 1, 2), backend=backend, wait=True)(*args)
    np.testing.assert_allclose(v, v_ref, rtol=1e-12)
    np.testing.assert_allclose(g, g_ref, rtol=1e-10)
    assert np.isfinite(v)
    np.testing.assert_allclose(v, loss(*args), rtol=1e-12)
    for i in range(3):
        np.testing.assert_allclose(g[i], _fd_grad(loss, args, i), rtol=1e-6)


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


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_compiled_discrete_and_multivariate(backend):
    """Binomial, geometric, log-normal, uniform and multivariate normal log-likelihoods (a traced
    covariance: Cholesky factor and triangular solve), compiled, against the interpreter and SciPy."""
    rng = np.random.default_rng(2)
    counts, tries = rng.integers(0, 8, 20).astype(float), rng.integers(1, 6, 20).astype(float)
    data = rng.standard_normal((6, 2))

    def loss(logit_p, log_s, a):
        p = 1.0 / (1.0 + np.exp(-logit_p))
        s = np.exp(log_s)
        cov = np.array([[1.0, 0.0], [0.0, 0.0]]) * s + np.array([[0.0, 0.0], [1.0, 0.0]]) * a \
            + np.array([[0.0, 1.0], [0.0, 0.0]]) * a + np.array([[0.0, 0.0], [0.0, 2.0]])
        return -(np.sum(st.binom.logpmf(counts, 8, p)) + np.sum(st.geom.logpmf(tries, p))
                 + np.sum(st.binom.logcdf(counts, 8, p)) + np.sum(st.lognorm.logpdf(tries, s, scale=2.0))
                 + np.sum(st.uniform.logcdf(counts, -1.0, 10.0 + s))
                 + np.sum(st.multivariate_normal.logpdf(data, [0.1, -0.2], cov)))

    args = (np.float64(0.3), np.float64(-0.2), np.float64(0.4))
    graph = jg.make_graph(loss, (0, 1, 2), grad=True)(*args)
    v_ref, g_ref = jg.eval_graph(graph, *args)
    v, g = jg.jit_grad(loss, argnums=(0, 1, 2), backend=backend)(*args)
    np.testing.assert_allclose(v, v_ref, rtol=1e-12)
    np.testing.assert_allclose(g, g_ref, rtol=1e-10)
    p, s = 1.0 / (1.0 + np.exp(-0.3)), np.exp(-0.2)
    cov = np.array([[s, 0.4], [0.4, 2.0]])
    want = -(np.sum(st.binom.logpmf(counts, 8, p)) + np.sum(st.geom.logpmf(tries, p))
             + np.sum(st.binom.logcdf(counts, 8, p)) + np.sum(st.lognorm.logpdf(tries, s, scale=2.0))
             + np.sum(st.uniform.logcdf(counts, -1.0, 10.0 + s))
             + np.sum(st.multivariate_normal.logpdf(data, [0.1, -0.2], cov)))
    np.testing.assert_allclose(v, want, rtol=1e-12)


def test_arrays_still_run_scipy():
    x = np.linspace(-1.0, 1.0, 5)
    original = st.norm.logpdf.__jitgraph_original__
    assert np.array_equal(st.norm.logpdf(x, 0.2, 1.5), original(st.norm, x, 0.2, 1.5))
    assert st.norm(0.0, 1.0).cdf(0.0) == 0.5
    assert st.norm.ppf(0.5) == 0.0 and st.norm(1.0).ppf(0.5) == 1.0
    assert st.poisson.pmf(0, 0.0) == 1.0
    assert st.entropy([0.5, 0.5], base=2) == 1.0 and st.entropy.__jitgraph_original__ is not None


def test_unsupported_methods_and_distributions_are_named():
    x = np.linspace(0.1, 0.9, 4)
    cases = [(lambda x: st.gamma.ppf(x, 2.0), r"scipy\.stats\.gamma\.ppf is not supported on traced values"),
             (lambda x: st.t(x[0], 1.0).ppf(0.5), r"scipy\.stats\.t\.ppf is not supported"),
             (lambda x: st.chi2.isf(x[0], 3.0), r"scipy\.stats\.chi2\.isf is not supported"),
             (lambda x: st.gamma.rvs(x), r"scipy\.stats\.gamma\.rvs is not supported"),
             (lambda x: st.t.mean(x), r"scipy\.stats\.t\.mean is not supported"),
             (lambda x: st.levy.logpdf(x), r"scipy\.stats\.levy\.logpdf is not supported"),
             (lambda x: st.levy(x[0]), r"scipy\.stats\.levy with traced parameters is not supported"),
             (lambda x: st.zipf.pmf(x, 3.0), r"scipy\.stats\.zipf\.pmf is not supported"),
             (lambda x: st.nbinom.ppf(x, 3, 0.5), r"scipy\.stats\.nbinom\.ppf is not supported"),
             (lambda x: st.entropy(x, nan_policy="omit"),
              r"scipy\.stats\.entropy with nan_policy='omit' is not supported"),
             (lambda x: st.norm.fit(x), r"scipy\.stats\.norm\.fit is not supported"),
             (lambda x: st.zscore(x), r"scipy\.stats\.zscore is not supported on traced values"),
             (lambda x: st.multivariate_normal.cdf(x, np.zeros(4)),
              r"scipy\.stats\.multivariate_normal\.cdf is not supported"),
             (lambda x: st.multivariate_normal(x).cdf(np.zeros(4)),
              r"scipy\.stats\.multivariate_normal\(\.\.\.\)\.cdf with traced parameters is not supported")]
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
