"""scipy.spatial.distance and scipy.integrate's sample rules on traced values
(jitgraph/ops/distance.py, jitgraph/ops/integrate.py): values and dtypes against SciPy,
gradients against finite differences, the zero-distance gradient, one compiled program."""
import numpy as np
import pytest
import scipy.integrate as si
import scipy.spatial.distance as ssd

import jitgraph as jg

RNG = np.random.default_rng(46)
XA = RNG.standard_normal((5, 3))
XB = RNG.standard_normal((4, 3))
W = RNG.uniform(0.2, 2.0, 3)
POS = RNG.uniform(0.1, 1.0, (5, 3))


def interpreted(f, *args):
    return jg.eval_graph(jg.make_graph(f)(*args), *args)


def assert_scipy(f, *args, rtol=1e-12):
    want = f(*args)
    got = interpreted(f, *args)
    eager = jg.value_and_grad(lambda *a: np.sum(f(*a)))(*args)[0]
    assert np.shape(got) == np.shape(want) and np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-13)
    np.testing.assert_allclose(eager, np.sum(want), rtol=rtol, atol=1e-12)


def _fd_check(f, x, eps=1e-6):
    _, g = jg.value_and_grad(f)(x)
    v = RNG.standard_normal(x.shape)
    fd = (f(x + eps * v) - f(x - eps * v)) / (2 * eps)
    np.testing.assert_allclose(np.sum(g * v), fd, rtol=1e-6, atol=1e-8)


METRICS = [("euclidean", {}), ("sqeuclidean", {}), ("cityblock", {}), ("chebyshev", {}),
           ("minkowski", {"p": 3}), ("minkowski", {"p": 1.5}), ("minkowski", {"p": np.inf}),
           ("cosine", {}), ("correlation", {}), ("braycurtis", {}), ("canberra", {}),
           ("seuclidean", {}), ("seuclidean", {"V": W}), ("mahalanobis", {}),
           ("hamming", {}), ("jaccard", {}), ("jensenshannon", {}),
           ("euclidean", {"w": W}), ("sqeuclidean", {"w": W}), ("cityblock", {"w": W}),
           ("minkowski", {"p": 3, "w": W}), ("cosine", {"w": W}), ("correlation", {"w": W}),
           ("chebyshev", {"w": np.array([1.0, 0.0, 2.0])})]


@pytest.mark.parametrize("metric,kw", METRICS, ids=[f"{m}-{'-'.join(kw)}" for m, kw in METRICS])
def test_cdist_and_pdist_match_scipy(metric, kw):
    a, b = (POS, POS[:4] + 0.3) if metric == "jensenshannon" else (XA, XB)
    if metric in ("hamming", "jaccard"):
        a, b = np.round(a), np.round(b)
    assert_scipy(lambda x, y: ssd.cdist(x, y, metric, **kw), a, b)
    if metric != "mahalanobis":          # (pdist's default VI needs more rows than columns)
        assert_scipy(lambda x: ssd.pdist(x, metric, **kw), a)
    else:
        assert_scipy(lambda x: ssd.pdist(x, metric, VI=np.eye(3) * 2.0), a)


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "cityblock", "chebyshev", "minkowski", "cosine",
                                    "correlation", "braycurtis", "canberra", "hamming", "jaccard"])
def test_two_vector_functions_match_scipy_with_their_dtypes(metric):
    u, v = XA[0], XB[1]
    assert_scipy(lambda x, y: getattr(ssd, metric)(x, y), u, v)
    assert_scipy(lambda x, y: getattr(ssd, metric)(x, y), u.astype(np.float32), v.astype(np.float32), rtol=1e-5)
    if metric not in ("chebyshev",):
        assert_scipy(lambda x, y: getattr(ssd, metric)(x, y, w=W), u, v)
    assert_scipy(lambda x, y: ssd.seuclidean(x, y, W), u, v)
    assert_scipy(lambda x, y: ssd.mahalanobis(x, y, np.diag(W)), u, v)
    assert_scipy(lambda x, y: ssd.minkowski(x, y, 4), u, v)
    assert_scipy(lambda x, y: ssd.jensenshannon(x, y, base=2.0), POS[0], POS[1])
    assert_scipy(lambda x, y: ssd.jensenshannon(x, y, axis=1), POS[:3], POS[1:4])


def test_squareform_both_ways():
    d = ssd.pdist(XA)
    assert_scipy(lambda v: ssd.squareform(v), d)
    assert_scipy(lambda m: ssd.squareform(m, checks=False), ssd.squareform(d))
    assert_scipy(lambda x: ssd.squareform(ssd.pdist(x, "cityblock")) @ x, XA)
    assert_scipy(lambda v: ssd.squareform(v, force="tomatrix") * 1.0, d[:1])
    with pytest.raises(ValueError, match="binomial coefficient"):
        jg.make_graph(lambda v: ssd.squareform(v))(np.ones(4))


def test_gradients_match_finite_differences():
    _fd_check(lambda x: np.sum(np.exp(-ssd.cdist(x, XB, "sqeuclidean"))), XA)
    _fd_check(lambda x: np.sum(ssd.pdist(x) ** 1.5), XA)
    _fd_check(lambda x: np.sum(ssd.pdist(x, "minkowski", p=3)), XA)
    _fd_check(lambda x: np.sum(ssd.cdist(x, XB, "cosine")), XA)
    _fd_check(lambda x: np.sum(ssd.cdist(x, XB, "correlation", w=W)), XA)
    _fd_check(lambda x: np.sum(ssd.cdist(x, XB, "mahalanobis")), XA)
    _fd_check(lambda x: np.sum(ssd.cdist(x, XB, "canberra")), XA)
    _fd_check(lambda x: np.sum(ssd.pdist(x, "jensenshannon")), POS)
    # weights are differentiable too
    _fd_check(lambda w: np.sum(ssd.cdist(XA, XB, "euclidean", w=w)), W)


def test_zero_distances_have_zero_gradient_not_nan():
    """cdist(X, X)'s diagonal and repeated rows: the root of a zero sum has gradient 0."""
    x = np.vstack([XA, XA[:1]])
    for metric, kw in [("euclidean", {}), ("minkowski", {"p": 3}), ("seuclidean", {"V": W}), ("mahalanobis", {"VI": np.eye(3)})]:
        _, g = jg.value_and_grad(lambda a: np.sum(ssd.cdist(a, a, metric, **kw)))(x)
        _, gp = jg.value_and_grad(lambda a: np.sum(ssd.pdist(a, metric, **kw)))(x)
        assert np.all(np.isfinite(g)) and np.all(np.isfinite(gp)), metric
        np.testing.assert_allclose(g, 2 * gp, rtol=1e-12, atol=1e-12)


def test_a_compiled_kernel_regression():
    """An RBF kernel ridge loss written with cdist, compiled, against eager and NumPy."""
    y = RNG.standard_normal(5)

    def loss(x, log_ell):
        k = np.exp(-0.5 * ssd.cdist(x, x, "sqeuclidean") / np.exp(2 * log_ell))
        alpha = np.linalg.solve(k + 0.5 * np.eye(5), y)
        return y @ alpha + np.sum(ssd.pdist(x)) * 0.01

    args = (XA, np.array(0.3))
    v_ref, g_ref = jg.value_and_grad(loss, argnums=(0, 1))(*args)
    v, g = jg.jit_grad(loss, argnums=(0, 1), wait=True)(*args)
    np.testing.assert_allclose(v, loss(*args), rtol=1e-12)
    for a, b in zip(g, g_ref):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_refusals_and_scipy_errors():
    with pytest.raises(jg.NotSupportedError, match="callable metric"):
        jg.make_graph(lambda a: ssd.cdist(a, a, lambda u, v: 1.0))(XA)
    with pytest.raises(jg.NotSupportedError, match="boolean metric 'dice'"):
        jg.make_graph(lambda a: ssd.pdist(a, "dice"))(XA)
    with pytest.raises(ValueError, match="Unknown Distance Metric"):
        jg.make_graph(lambda a: ssd.pdist(a, "nosuch"))(XA)
    with pytest.raises(ValueError, match="same number of columns"):
        jg.make_graph(lambda a: ssd.cdist(a, a[:, :2]))(XA)
    with pytest.raises(ValueError, match="2-dimensional"):
        jg.make_graph(lambda a: ssd.cdist(a[0], a))(XA)
    with pytest.raises(jg.NotSupportedError, match="out="):
        jg.make_graph(lambda a: ssd.cdist(a, a, out=np.zeros((5, 5))))(XA)


# ---- scipy.integrate --------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8])
def test_simpson_matches_scipy_for_every_sample_count(n):
    # inputs of its own, not the module's generator's next draws: which those are depends on the
    # tests a worker ran before, and the float32 check compares a sum of three float32 values
    # with SciPy's (with default_rng(190)'s draws they cancel to 3e-4 and differ by 5e-5 relative)
    rng = np.random.default_rng(n)
    y = rng.standard_normal((3, n))
    x = np.cumsum(rng.uniform(0.1, 1.0, n))
    assert_scipy(lambda a: si.simpson(a, dx=0.3), y)
    assert_scipy(lambda a: si.simpson(a, x=x), y)
    assert_scipy(lambda a: si.simpson(a.T, x=x, axis=0), y)
    x2 = np.cumsum(rng.uniform(0.1, 1.0, (3, n)), axis=1)
    assert_scipy(lambda a: si.simpson(a, x=x2), y)
    assert_scipy(lambda a: si.simpson(a.astype(np.float32), dx=0.5), y, rtol=2e-5)


def test_trapezoid_rules_match_scipy():
    y = RNG.standard_normal((3, 6))
    x = np.cumsum(RNG.uniform(0.1, 1.0, 6))
    for kw in ({}, {"dx": 0.2}, {"x": x}):
        assert_scipy(lambda a: si.trapezoid(a, **kw), y)
        assert_scipy(lambda a: si.cumulative_trapezoid(a, **kw), y)
        assert_scipy(lambda a: si.cumulative_trapezoid(a, initial=0, **kw), y)
    assert_scipy(lambda a: si.cumulative_trapezoid(a, x=a[0] ** 2, axis=-1), y)   # traced x
    assert_scipy(lambda a: si.cumulative_trapezoid(a, axis=0, initial=0), y)
    with pytest.raises(ValueError, match="`initial` must be `None` or `0`"):
        jg.make_graph(lambda a: si.cumulative_trapezoid(a, initial=1.0))(y)


def test_integration_gradients_and_traced_spacing():
    y = RNG.standard_normal((2, 7))
    _fd_check(lambda a: np.sum(si.simpson(np.sin(a), dx=0.1) ** 2), y)
    _fd_check(lambda a: np.sum(si.cumulative_trapezoid(a ** 2, x=np.arange(7.0) ** 1.5) ** 2), y)
    # a traced spacing scales the weights
    f = lambda h: si.simpson(np.sin(np.arange(7.0) * h), dx=h)
    _fd_check(f, np.array(0.2))
    np.testing.assert_allclose(interpreted(f, np.array(0.2)), f(np.array(0.2)), rtol=1e-13)
    with pytest.raises(jg.NotSupportedError, match="traced sample points"):
        jg.make_graph(lambda a: si.simpson(a, x=a))(y[0])

