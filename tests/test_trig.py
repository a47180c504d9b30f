"""Vectorizable sin, cos, log and log1p (codegen/mathlib.py) against exact values, and their use in
kernels.

mathlib's sin and cos reduce the argument by a table of 2/pi (Payne-Hanek, without branches)
and evaluate fdlibm's polynomials; the claim is an error within 1 ulp for every double, also
for arguments within 2**-61 of a multiple of pi/2, the closest any double comes. Exact values
come from mpmath at 300 bits.

mathlib's log takes the exponent from the bits (subnormals scaled first) and evaluates fdlibm's
polynomial in s = f / (2 + f); log1p adds the rounding error of 1 + x to the log of the
rounded sum.
"""
import math

import mpmath
import numba
import numpy as np
import pytest

import jitgraph as jg
from jitgraph.codegen import emit_cpu, mathlib

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# the kernels' flags: the compensated sums must survive them
_OPTS = dict(error_model="numpy", fastmath={"reassoc", "contract", "arcp"}, boundscheck=False)


def _loop(fn):
    """A compiled loop applying `fn` elementwise."""
    @numba.njit(**_OPTS)
    def run(x):
        out = np.empty(x.size)
        for i in range(x.size):
            out[i] = fn(x[i])
        return out
    return run


LOOPS = {"sin": _loop(mathlib.sin), "cos": _loop(mathlib.cos)}

# doubles close to multiples of pi/2 (numerators of pi's continued-fraction convergents, and the
# double nearest a multiple of pi/2 over the whole range), and famous large arguments
HARD = [355.0, 103993.0, 104348.0, 833719.0, 1146408.0, 4272943.0, 5419351.0, 80143857.0,
        165707065.0, 245850922.0, 411557987.0, 1068966896.0, 6167950454.0, 6381956970095103 * 2.0 ** 797,
        5.319372648326541e+255, 1e22, 2.0 ** 1023 * 1.9999, 1.7976931348623157e308, math.pi / 4,
        np.nextafter(math.pi / 4, 0), np.nextafter(math.pi / 4, 4), math.pi / 2, math.pi, 2 ** 36, 2 ** 52 + 1]


def _ulp_errors(name, x, got):
    mpmath.mp.prec = 300
    fn = getattr(mpmath, name)
    errs = []
    for xi, gi in zip(x.tolist(), got.tolist()):
        exact = fn(mpmath.mpf(xi))
        errs.append(float(abs(mpmath.mpf(gi) - exact) / np.spacing(abs(float(exact)))))
    return np.array(errs)


def _arguments():
    rng = np.random.default_rng(12)
    signs = rng.choice([-1.0, 1.0], 1500)
    return np.concatenate([
        HARD, np.negative(HARD),
        rng.uniform(-8, 8, 800),
        signs * np.ldexp(rng.uniform(1, 2, 1500), rng.integers(-40, 1024, 1500)),   # every binade
        np.ldexp(rng.uniform(1, 2, 300), rng.integers(30, 40, 300)),                  # near 2**36
        5e-324 * np.arange(1, 6), [1e-300, -2.0 ** -27, 2.0 ** -26],
    ])


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_within_one_ulp_of_exact_over_the_double_range(name):
    x = _arguments()
    errs = _ulp_errors(name, x, LOOPS[name](x))
    worst = int(np.argmax(errs))
    assert errs[worst] <= 1.0, f"{name}({x[worst]!r}): {errs[worst]:.3f} ulp"
    # fdlibm's kernels are correctly rounded for most arguments
    assert np.mean(errs <= 0.5) > 0.95


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_special_values_as_numpy(name):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324])
    got, want = LOOPS[name](x), getattr(np, name)(x)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_the_table_is_exact():
    # row E - EMIN holds (2**E 2/pi) mod 4 as four doubles
    mpmath.mp.prec = 1400
    two_over_pi = 2 / mpmath.pi
    table = mathlib._two_over_pi_mod4_table()
    assert table.shape == (mathlib._TRIG_EMAX - mathlib._TRIG_EMIN + 1, 4)
    for e in (-53, -1, 0, 1, 52, 100, 500, 971):
        row = table[e - mathlib._TRIG_EMIN]
        exact = mpmath.fmod(mpmath.ldexp(two_over_pi, e), 4)
        got = sum(mpmath.mpf(float(v)) for v in row)
        # four doubles carry about 215 bits, and the rows are cut 240 bits below the point
        assert abs(got - exact) <= max(mpmath.ldexp(abs(exact), -210), mpmath.ldexp(1, -238))


def _trig_loss(theta, x):
    px = x * np.cos(theta) - np.sin(theta)
    return np.sum(np.sin(3.0 * px) * np.cos(px + 0.5) + np.cos(theta) ** 2)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_compiled_programs_use_them_and_match_numpy(dtype):
    rng = np.random.default_rng(0)
    theta = rng.uniform(-50, 50, 300).astype(dtype)
    x = rng.uniform(-3, 3, 300).astype(dtype)
    f = jg.jit_grad(_trig_loss, argnums=(0, 1), wait=True)
    (val, grads) = f(theta, x)
    want_val, want_grads = jg.value_and_grad(_trig_loss, argnums=(0, 1))(theta, x)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(val, want_val, rtol=tol)
    for g, w in zip(grads, want_grads):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    src = f.lower(theta, x).source
    assert "_ml.sin(" in src and "_ml.cos(" in src and "np.sin(" not in src and "np.cos(" not in src


def test_many_call_sites_keep_libm():
    # past INLINE_MATH_MAX sites the inline form's compile time outgrows its gain
    def chain(z):
        for _ in range(emit_cpu.INLINE_MATH_MAX + 1):
            z = np.sin(z)
        return np.sum(z)
    z = np.linspace(0.1, 2, 50)
    src = jg.jit(chain).lower(z).source
    assert "np.sin(" in src and "_ml.sin(" not in src
    np.testing.assert_allclose(jg.jit(chain)(z), chain(z), rtol=1e-13)

    def logs(z):            # log and log1p sites count with sin's and cos's
        for _ in range(emit_cpu.INLINE_MATH_MAX // 2 + 1):
            z = np.log1p(np.log(z + 2.0))
        return np.sum(z)
    src = jg.jit(logs).lower(z).source
    assert "np.log1p(" in src and "np.log(" in src and "_ml.log" not in src
    np.testing.assert_allclose(jg.jit(logs)(z), logs(z), rtol=1e-13)


# ---- log, log1p -----------------------------------------------------------------------------------
LOOPS.update(log=_loop(mathlib.log), log1p=_loop(mathlib.log1p))
BOUND = {"log": 0.8, "log1p": 1.2}      # ulp; NumPy's (glibc's) are within 0.52 on these


def _log_arguments(name):
    rng = np.random.default_rng(5)
    every_binade = np.ldexp(rng.uniform(1, 2, 1500), rng.integers(-1074, 1024, 1500))
    near_one = 1 + rng.uniform(-1e-3, 1e-3, 400)
    if name == "log":
        return np.concatenate([every_binade, near_one, rng.uniform(0.5, 2.0, 400), 5e-324 * np.arange(1, 6),
                               [np.sqrt(2.0), np.nextafter(np.sqrt(2.0), 2), np.sqrt(0.5), 1.7976931348623157e308]])
    return np.concatenate([every_binade, -np.ldexp(rng.uniform(1, 2, 600), rng.integers(-1074, 0, 600)),
                           near_one - 1, rng.uniform(-0.99, 3.0, 400), [np.sqrt(2.0) - 1, np.sqrt(0.5) - 1,
                                                                         -0.5, 1e-300, -1e-300]])


@pytest.mark.parametrize("name", ["log", "log1p"])
def test_logs_within_bound_of_exact_over_the_double_range(name):
    x = _log_arguments(name)
    errs = _ulp_errors(name, x, LOOPS[name](x))
    worst = int(np.argmax(errs))
    assert errs[worst] <= BOUND[name], f"{name}({x[worst]!r}): {errs[worst]:.3f} ulp"
    assert np.mean(errs <= 0.5) > 0.9


@pytest.mark.parametrize("name", ["log", "log1p"])
def test_log_special_values_as_numpy(name):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, -2.0, 5e-324, -5e-324, 2.0 ** -1022])
    got, want = LOOPS[name](x), getattr(np, name)(x)
    np.testing.assert_array_equal(got, want)
    real = ~np.isnan(want)         # (a NaN's sign bit means nothing)
    np.testing.assert_array_equal(np.signbit(got[real]), np.signbit(want[real]))


def _softplus_loss(w, x):
    z = x * w
    return np.sum(np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z))) - np.log(np.abs(w) + 0.5) * z)


def _compiled_as_eager(loss, args, dtype, scaled_atol):
    """jit_grad of loss(*args) against eager value_and_grad, in `dtype`, each gradient's
    absolute tolerance scaled by its largest magnitude or not; returns the generated source."""
    argnums = tuple(range(len(args)))
    f = jg.jit_grad(loss, argnums=argnums, wait=True)
    val, grads = f(*args)
    want_val, want_grads = jg.value_and_grad(loss, argnums=argnums)(*args)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(val, want_val, rtol=tol)
    for g, want in zip(grads, want_grads):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, want, rtol=tol, atol=tol * np.abs(want).max() if scaled_atol else tol)
    return f.lower(*args).source


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_compiled_programs_use_the_logs_and_match_numpy(dtype):
    rng = np.random.default_rng(1)
    w = rng.standard_normal(400).astype(dtype)
    x = rng.uniform(-30, 30, 400).astype(dtype)
    src = _compiled_as_eager(_softplus_loss, (w, x), dtype, scaled_atol=True)
    assert "_ml.log1p(" in src and "_ml.log(" in src and "np.log1p(" not in src and "np.log(" not in src


# ---- the cube root: the C library's, corrected by one exact-residual Newton step ---------------------
def test_cbrt_within_one_ulp_and_mostly_correctly_rounded():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(1500) * 10.0 ** rng.integers(-300, 300, 1500),
                        np.arange(1, 300.0) ** 3, -np.arange(1, 50.0) ** 3, 5e-324 * np.arange(1, 4), [1e-310, 1.7976931348623157e308]])
    got = jg.jit(lambda a: np.cbrt(a), wait=True)(x)
    mpmath.mp.prec = 300
    exact = np.array([float(mpmath.cbrt(mpmath.mpf(abs(v)))) * np.sign(v) for v in x.tolist()])
    ulps = np.abs(got - exact) / np.spacing(np.abs(exact))
    assert ulps.max() <= 1.0
    assert np.sum(ulps > 0) <= 5           # (glibc's cbrt alone: about half of them)
    n = np.arange(1, 300.0)
    np.testing.assert_array_equal(jg.jit(lambda a: np.cbrt(a), wait=True)(n ** 3), n)


def test_cbrt_special_values_and_float32():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 8.0, -27.0])
    for dt in (np.float64, np.float32):
        got = jg.jit(lambda a: np.cbrt(a), wait=True)(x.astype(dt))
        want = np.cbrt(x.astype(dt))
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got[:5], want[:5])
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
        np.testing.assert_array_equal(got[5:], [2.0, -3.0])    # (NumPy's float32 SIMD loop: -2.9999998)
    y = np.random.default_rng(6).standard_normal(200).astype(np.float32) * 1e3
    np.testing.assert_allclose(jg.jit(lambda a: np.cbrt(a), wait=True)(y), np.cbrt(y), rtol=2e-7)


# ---- hypot: scaled by a power of two where the squares would overflow or underflow, one fma --------
def test_hypot_within_one_ulp_over_the_double_range_and_its_special_values():
    rng = np.random.default_rng(7)
    e = rng.integers(-1074, 1024, 1500)
    x = rng.choice([-1.0, 1.0], 1500) * np.ldexp(rng.uniform(1, 2, 1500), e)
    # y of every ratio to x, within the range
    y = np.clip(x * np.ldexp(rng.uniform(1, 2, 1500), rng.integers(-60, 60, 1500)), -1.7e308, 1.7e308)
    got = jg.jit(lambda a, b: np.hypot(a, b), wait=True)(x, y)
    mpmath.mp.prec = 300
    exact = [mpmath.hypot(mpmath.mpf(a), mpmath.mpf(b)) for a, b in zip(x.tolist(), y.tolist())]
    finite = [i for i, v in enumerate(exact) if float(v) < 1.7976931348623157e308]
    ulps = [float(abs(mpmath.mpf(float(got[i])) - exact[i]) / np.spacing(float(exact[i]))) for i in finite]
    assert max(ulps) <= 1.0
    a = np.array([np.inf, -np.inf, np.nan, np.nan, 0.0, -0.0, 5e-324, 1.7e308, 3.0, -1e-310])
    b = np.array([np.nan, 1.0, np.inf, 2.0, 0.0, -0.0, 5e-324, 1.7e308, -4.0, 1e-310])
    np.testing.assert_array_equal(jg.jit(lambda a, b: np.hypot(a, b), wait=True)(a, b), np.hypot(a, b))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_magnitudes_use_the_vectorizable_hypot(dtype):
    """np.abs of a complex spectrum and np.hypot compile to mathlib's hypot, in a Python entry's
    native loops too, with values and gradients as eager's."""
    def loss(a, b):
        return np.sum(np.abs(np.fft.rfft(a)) * 0.5) + np.sum(np.hypot(a, b) * b)
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((4, 16)).astype(dtype), rng.standard_normal((4, 16)).astype(dtype)
    src = _compiled_as_eager(loss, (a, b), dtype, scaled_atol=False)
    assert "_ml.hypot(" in src and "np.hypot(" not in src
