"""scipy.signal's convolutions and scipy.ndimage's filters on traced values (jitgraph/ops/filters.py):
values against SciPy over every mode and boundary rule, gradients against finite differences,
and one compiled program."""
import subprocess
import sys

import numpy as np
import pytest
import scipy.ndimage as nd
import scipy.signal as ss

import jitgraph as jg

RNG = np.random.default_rng(21)


def interpreted(f, *args):
    return jg.eval_graph(jg.make_graph(f)(*args), *args)


def assert_scipy(f, *args):
    want = f(*args)
    got = interpreted(f, *args)
    assert np.shape(got) == np.shape(want) and np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)


SHAPES = [((7,), (3,)), ((6,), (4,)), ((3,), (5,)), ((5, 6), (3, 2)), ((4, 4), (5, 6))]


@pytest.mark.parametrize("s1,s2", SHAPES)
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_signal_convolutions_match_scipy(s1, s2, mode):
    a, b = RNG.standard_normal(s1), RNG.standard_normal(s2)
    for name in ("convolve", "correlate", "fftconvolve"):     # (through the module: jitgraph's wrappers)
        assert_scipy(lambda x, y: getattr(ss, name)(x, y, mode), a, b)
    if len(s1) == 2:
        for boundary in ("fill", "wrap", "symm"):
            try:
                ss.convolve2d(a, b, mode, boundary, 0.5)
            except ValueError:
                continue
            assert_scipy(lambda x, y: ss.convolve2d(x, y, mode, boundary, 0.5), a, b)
            assert_scipy(lambda x, y: ss.correlate2d(x, y, mode, boundary, 0.5), a, b)


@pytest.mark.parametrize("kshape", [(3, 3), (2, 3), (4, 1)])
@pytest.mark.parametrize("mode", ["reflect", "mirror", "nearest", "wrap", "constant"])
def test_ndimage_correlate_and_convolve_match_scipy(kshape, mode):
    img, w = RNG.standard_normal((7, 8)), RNG.standard_normal(kshape)
    for origin in ((0, -1, 1) if min(kshape) > 2 else (0,)):
        assert_scipy(lambda x: nd.correlate(x, w, mode=mode, cval=0.3, origin=origin), img)
        assert_scipy(lambda x: nd.convolve(x, w, mode=mode, cval=0.3, origin=origin), img)


def test_ndimage_separable_filters_match_scipy():
    img = RNG.standard_normal((7, 8))
    for sigma in (0.7, (1.0, 0.0)):
        for mode in ("reflect", "nearest", "constant"):
            assert_scipy(lambda x: nd.gaussian_filter(x, sigma, mode=mode), img)
    assert_scipy(lambda x: nd.gaussian_filter(x, 1.0, order=(1, 0)), img)
    assert_scipy(lambda x: nd.gaussian_filter1d(x, 1.2, axis=0), img)
    for size in (2, 3):
        assert_scipy(lambda x: nd.uniform_filter1d(x, size, axis=1), img)
        assert_scipy(lambda x: nd.uniform_filter(x, size, mode="nearest"), img)
    assert_scipy(lambda x: nd.correlate1d(x, [1.0, -2.0, 0.5, 0.25], axis=0, origin=1), img)
    assert_scipy(lambda x: nd.convolve1d(x, [1.0, -2.0, 0.5, 0.25], axis=1, origin=-1), img)
    # float32 stays float32 (computed in float64, as SciPy does); integers truncate
    assert_scipy(lambda x: nd.gaussian_filter(x.astype(np.float32), 1.0), img)
    assert_scipy(lambda x: nd.correlate(np.round(x * 10).astype(np.int64), np.full((3, 3), 0.25)) * x, img)


def _fd_check(f, x, eps=1e-6):
    _, g = jg.value_and_grad(f)(x)
    v = RNG.standard_normal(x.shape)
    fd = (f(x + eps * v) - f(x - eps * v)) / (2 * eps)
    np.testing.assert_allclose(np.sum(g * v), fd, rtol=1e-6, atol=1e-8)


def test_gradients_reach_the_input_and_a_traced_kernel():
    img = RNG.standard_normal((6, 7))
    _fd_check(lambda x: np.sum(np.tanh(ss.convolve2d(x, x[:3, :2], "same", "symm"))), img)
    _fd_check(lambda x: np.sum(nd.gaussian_filter(x, 1.0, mode="mirror") ** 3), img)
    _fd_check(lambda x: np.sum(ss.correlate(x, x[1:3, 2:5], "valid") ** 2), img)


def test_a_compiled_denoising_loss():
    img = RNG.standard_normal((12, 12))
    k = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])

    def loss(u, f):
        smooth = nd.gaussian_filter(u, 1.0)
        lap = ss.convolve2d(u, k, "same", "symm")
        return np.sum((smooth - f) ** 2) + 0.1 * np.sum(lap ** 2) + np.sum(nd.uniform_filter(u, 3) * f)

    v_ref, g_ref = jg.value_and_grad(loss)(img, img[::-1])
    v, g = jg.jit_grad(loss, wait=True)(img, img[::-1])
    np.testing.assert_allclose(v, loss(img, img[::-1]), rtol=1e-12)
    np.testing.assert_allclose(g, g_ref, rtol=1e-10, atol=1e-12)


def test_unsupported_forms_are_refused_by_name():
    x = np.ones((4, 4))
    with pytest.raises(jg.NotSupportedError, match="fftconvolve with axes"):
        jg.make_graph(lambda a: ss.fftconvolve(a, a, axes=0))(x)
    with pytest.raises(jg.NotSupportedError, match=r"filtfilt with method='gust'"):
        jg.make_graph(lambda a: ss.filtfilt([1.0], [1.0, 0.5], a[0], method="gust"))(x)
    with pytest.raises(jg.NotSupportedError, match=r"filtfilt with traced coefficients"):
        jg.make_graph(lambda a: ss.filtfilt(a[0, :2], [1.0, 0.5], a[1]))(x)
    with pytest.raises(ValueError, match="Unexpected shape for zi"):
        jg.make_graph(lambda a: ss.lfilter([1.0], [1.0, 0.5], a[0], zi=[0.0, 1.0]))(x)


@pytest.mark.parametrize("b,a", [([1.0, 0.5], [1.0, -0.3]), ([0.2, 0.3, 0.1], [2.0]), ([1.0], [1.0, -1.2, 0.5]),
                                 ([0.5, 0.1, 0.1, 0.3], [2.0, 0.4]), tuple(ss.butter(3, 0.2))])
def test_lfilter_matches_scipy_along_either_axis(b, a):
    x = RNG.standard_normal((3, 30))
    for axis in (-1, 0):
        assert_scipy(lambda x: ss.lfilter(b, a, x, axis=axis), x)


def test_lfilter_gradients_of_learned_coefficients_compiled():
    x = RNG.standard_normal((2, 25))

    def loss(coef, x):
        return np.sum(ss.lfilter(coef[:2], np.concatenate([[1.0], coef[2:]]), x) ** 2)

    c = np.array([0.5, 0.2, -0.3, 0.1])
    _, g_ref = jg.value_and_grad(loss)(c, x)
    eps = 1e-6
    fd = [(loss(c + eps * e, x) - loss(c - eps * e, x)) / (2 * eps) for e in np.eye(4)]
    np.testing.assert_allclose(g_ref, fd, rtol=1e-6, atol=1e-7)
    v, g = jg.jit_grad(loss, wait=True)(c, x)
    np.testing.assert_allclose(v, loss(c, x), rtol=1e-12)
    np.testing.assert_allclose(g, g_ref, rtol=1e-10, atol=1e-12)


def test_names_imported_after_jitgraph_are_the_wrappers():
    """A fresh process that imports jitgraph first, then names from scipy.signal, scipy.ndimage,
    scipy.stats, scipy.spatial.distance and scipy.integrate (an import hook installs the wrappers
    as those modules load)."""
    code = (
        "import numpy as np, jitgraph as jg\n"
        "from scipy.signal import convolve2d\n"
        "from scipy.ndimage import gaussian_filter\n"
        "from scipy.stats import entropy\n"
        "from scipy.spatial.distance import cdist, pdist\n"
        "from scipy.integrate import simpson\n"
        "x = np.arange(1.0, 26.0).reshape(5, 5) / 25\n"
        "f = lambda a: np.sum(convolve2d(a, a[:2, :2])) + np.sum(gaussian_filter(a, 1.0)) + entropy(a.ravel())"
        " + np.sum(cdist(a, a[:2])) + np.sum(pdist(a)) + simpson(a[0])\n"
        "v, g = jg.value_and_grad(f)(x)\n"
        "assert abs(v - f(x)) < 1e-9 * abs(v) and g.shape == (5, 5)\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_lfilter_with_initial_state_and_filtfilt_match_scipy():
    x = RNG.standard_normal((3, 30))
    b, a = ss.butter(3, 0.2)
    zi = RNG.standard_normal((3, 3))
    for f in (lambda x: ss.lfilter(b, a, x, zi=zi)[0] + ss.lfilter(b, a, x, zi=zi)[1].sum(),
              lambda x: ss.lfilter(b, a, x.T, axis=0, zi=zi.T)[1],
              lambda x: ss.lfilter([0.5, 0.3, 0.2], [1.0], x, zi=zi[:, :2])[0],       # FIR with a state
              lambda x: ss.lfilter(b, a, x, zi=x[:, :3] * 0.5)[0],                   # a traced state
              lambda x: ss.filtfilt(b, a, x),
              lambda x: ss.filtfilt(b, a, x.T, axis=0, padtype="even"),
              lambda x: ss.filtfilt(b, a, x, padtype="constant", padlen=5),
              lambda x: ss.filtfilt([0.2, 0.8], [1.0, -0.5], x, padtype=None)):
        assert_scipy(f, x)
    _fd_check(lambda x: np.sum(ss.filtfilt(b, a, x) ** 2), x)
    _fd_check(lambda x: np.sum(ss.lfilter(b, a, x, zi=x[:, :3])[0] ** 2), x)


def test_filtfilt_compiled():
    x = RNG.standard_normal((2, 40))
    b, a = ss.butter(2, 0.3)

    def loss(gain, x):
        return np.sum((ss.filtfilt(b, a, gain * x, axis=1) - x) ** 2)

    v_ref, g_ref = jg.value_and_grad(loss)(np.array(0.7), x)
    v, g = jg.jit_grad(loss, wait=True)(np.array(0.7), x)
    np.testing.assert_allclose(v, loss(np.array(0.7), x), rtol=1e-12)
    np.testing.assert_allclose(g, g_ref, rtol=1e-10)
