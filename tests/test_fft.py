"""np.fft and complex arithmetic on traced values (jitgraph/ops/fft.py): complex values are pairs
of real arrays; transforms are dense products with NumPy's own transform matrices. Values
against NumPy, gradients against eager and finite differences, one compiled spectral solver."""
import numpy as np
import pytest

import jitgraph as jg

RNG = np.random.default_rng(11)
X = RNG.standard_normal((4, 8))
Y = RNG.standard_normal((4, 8))
K = np.fft.rfftfreq(8, 1 / 8) * 2 * np.pi

CASES = {
    "power spectrum": lambda a: np.sum(np.abs(np.fft.rfft(a, axis=1)) ** 2),
    "spectral derivative": lambda a: np.sum(np.fft.irfft(1j * K * np.fft.rfft(a), n=8) ** 2),
    "convolution by rfft": lambda a: np.sum(np.fft.irfft(np.fft.rfft(a, 16) * np.fft.rfft(Y, 16), 16) ** 2),
    "filter by fft/ifft": lambda a: np.sum(np.fft.ifft(np.fft.fft(a) * np.exp(-1j * np.arange(8.0))).real ** 2),
    "fft2, abs, angle": lambda a: np.sum(np.abs(np.fft.fft2(a)) + np.angle(np.fft.fft2(a + 0.1))),
    "rfft2 and irfft2": lambda a: np.sum(np.fft.irfft2(np.fft.rfft2(a) * 0.5, s=a.shape) * a),
    "norms": lambda a: np.sum(np.fft.fft(a, norm="ortho").imag ** 2) + np.sum(np.fft.ifft(a, norm="forward").real),
    "fftshift": lambda a: np.sum(np.abs(np.fft.fftshift(np.fft.fft(a, axis=0), axes=0)) * np.arange(8.0))
    + np.sum(np.fft.ifftshift(np.fft.fft(a)).real),
    "exp(i theta)": lambda a: np.sum(np.real(np.exp(1j * a) * np.conj(np.exp(0.5j * a)))),
    "fftn padded": lambda a: np.sum(np.abs(np.fft.fftn(a, s=(5, 10))) ** 2),
    "hfft of ihfft": lambda a: np.sum(np.fft.hfft(np.fft.ihfft(a)) ** 2),
    "sum and mean": lambda a: np.abs(np.mean(np.fft.fft(a))) + np.abs(np.fft.fft(a).sum(axis=0)).sum(),
    "division, powers": lambda a: np.sum(np.abs((np.fft.rfft(a) + 2.0) / (np.fft.rfft(Y) + 3.0) ** 2)),
    "complex matmul": lambda a: np.sum(np.abs(np.fft.fft(a) @ np.fft.fft(Y).T)),
    "reshape, transpose": lambda a: np.sum(np.abs(np.fft.fft(a).reshape(2, 16).T) * np.arange(2.0))
    + np.sum(np.reshape(np.fft.rfft(a), (4, 5)).sum(axis=0).real),
    "log, square, indexing": lambda a: np.sum(np.log(np.fft.fft(a)[:, 1:3] ** 2 + 1.0).real)
    + np.sum(np.concatenate([np.fft.rfft(a), np.fft.rfft(Y)], axis=1).imag),
}


@pytest.fixture(params=["dense", "four steps"])
def transforms(request, monkeypatch):
    """Every case twice: transforms as one dense product, and (forced down to these lengths)
    in four steps where the length factors (8 = 2 x 4, 10 = 2 x 5, 16 = 4 x 4; 5 stays dense)."""
    if request.param == "four steps":
        monkeypatch.setattr(jg.ops.fft, "FOUR_STEP_MIN", 4)
        monkeypatch.setattr(jg.ops.fft, "FACTOR_MIN", 2)
    return request.param


@pytest.mark.parametrize("name", list(CASES))
def test_values_and_gradients(name, transforms):
    f = CASES[name]
    want = f(X)
    got, g = jg.eval_graph(jg.make_graph(f, grad=True)(X), X)
    v_e, g_e = jg.value_and_grad(f)(X)
    np.testing.assert_allclose(got, want, rtol=1e-13)
    np.testing.assert_allclose(v_e, want, rtol=1e-13)
    np.testing.assert_allclose(g, g_e, rtol=1e-12, atol=1e-13)
    eps, d = 1e-6, RNG.standard_normal(X.shape)
    fd = (f(X + eps * d) - f(X - eps * d)) / (2 * eps)
    np.testing.assert_allclose(np.sum(g_e * d), fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("kind", ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"])
def test_long_transforms_in_four_steps(kind):
    """Lengths from 512 (or 600 = 24 x 25, 525 = 21 x 25) are computed in four steps, rfft of even
    lengths from 768 through a complex transform of half the length: every kind, norm, padding
    and truncation against NumPy, and no dense (n, n) matrix in the graph."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 3, 560)), rng.standard_normal((2, 3, 560))
    complex_input = kind in ("fft", "ifft", "irfft", "hfft")
    # (800 and 1000: an rfft through a transform of half the length, itself in four steps)
    for n, norm, axis in ((512, None, -1), (600, "ortho", 1), (525, "forward", -1), (None, None, 2),
                          (800, "ortho", -1), (1000, None, 1)):
        def f(a, b):
            z = a + 1j * b if complex_input else a
            r = getattr(np.fft, kind)(z, n=n, axis=axis, norm=norm)
            return r if kind in ("irfft", "hfft") else np.abs(r)
        x, y = (a, b) if axis != 1 else (a.transpose(0, 2, 1), b.transpose(0, 2, 1))
        graph = jg.make_graph(f)(x, y)
        np.testing.assert_allclose(jg.eval_graph(graph, x, y), f(x, y), rtol=1e-11, atol=1e-11)
        assert max(n.size for n in graph.nodes if n.op == "const") < 560 * 100


def test_squared_magnitudes_need_no_hypot():
    """|z| ** 2 (np.abs(X) ** 2 of a spectrum, np.hypot(a, b) ** 4) is traced as sums of
    squares: no hypot, whose libm call does not vectorize, and a gradient defined at 0."""
    f = lambda a: np.sum(np.abs(np.fft.rfft(a)) ** 2) + np.sum(np.hypot(a, 2 * a) ** 4)
    graph = jg.make_graph(f, grad=True)(X)
    assert not any(n.op == "hypot" for n in graph.nodes)
    (v, g), (v_e, g_e) = jg.eval_graph(graph, X), jg.value_and_grad(f)(X)
    np.testing.assert_allclose(v, f(X), rtol=1e-13)
    np.testing.assert_allclose(g, g_e, rtol=1e-12)
    eps, d = 1e-6, RNG.standard_normal(X.shape)
    np.testing.assert_allclose(np.sum(g * d), (f(X + eps * d) - f(X - eps * d)) / (2 * eps), rtol=1e-6)
    z = np.zeros((2, 8))
    assert np.all(jg.jit_grad(f)(z)[1] == 0.0)


def test_float32_stays_float32():
    f = lambda a: np.abs(np.fft.rfft(a)) ** 2
    x = X.astype(np.float32)
    got = jg.eval_graph(jg.make_graph(f)(x), x)
    want = f(x)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_compiled_pseudo_spectral_burgers_solver():
    """Viscous Burgers' equation by RK2 in time with spectral derivatives; the loss fits the
    initial condition to a target, as a user calibrating a spectral model would."""
    n = 32
    k = np.fft.rfftfreq(n, 1 / n)

    def rhs(u, nu):
        uh = np.fft.rfft(u)
        ux = np.fft.irfft(1j * k * uh, n)
        uxx = np.fft.irfft(-(k ** 2) * uh, n)
        return -u * ux + nu * uxx

    def loss(u0, nu, target):
        u = u0
        for _ in range(5):
            mid = u + 0.005 * rhs(u, nu)
            u = u + 0.01 * rhs(mid, nu)
        return np.mean((u - target) ** 2)

    xs = np.linspace(0, 2 * np.pi, n, endpoint=False)
    args = (np.sin(xs), np.array(0.1), np.sin(xs - 0.1) * 0.9)
    v_e, g_e = jg.value_and_grad(loss, argnums=(0, 1))(*args)
    v, g = jg.jit_grad(loss, argnums=(0, 1), wait=True)(*args)
    np.testing.assert_allclose(v, loss(*args), rtol=1e-12)
    for a, b in zip(g, g_e):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("f,error,match", [
    (lambda a: np.fft.fft(a), jg.NotSupportedError, "result must be real"),
    (lambda a: np.sum(np.fft.rfft(np.fft.fft(a)).real), TypeError, "takes real input"),
    (lambda a: np.sum(np.sort(np.fft.fft(a)).real), jg.NotSupportedError, "sort"),
    (lambda a: np.sum(np.fft.fft(a) ** 0.5).real, jg.NotSupportedError, "integer power"),
    (lambda a: np.sum(np.abs(np.fft.fft(a, n=5000))), jg.NotSupportedError, "up to length 4096"),
    (lambda a: np.sum(np.sin(np.fft.fft(a)).real), jg.NotSupportedError, "np.sin"),
])
def test_unsupported_forms_are_refused_by_name(f, error, match):
    with pytest.raises(error, match=match):
        jg.make_graph(f)(X)
