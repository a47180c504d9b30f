"""Per-op spec table checks: every row of tests/optable against NumPy and finite differences.

For every entry, in float64 and float32, both modes are run:

* eager:  `jg.value_and_grad(f, argnums)(*args)`
* traced: `g = jg.make_graph(f, argnums, grad=True)(*args); g.verify(); jg.eval_graph(g, *args)`

and checked: the value equals plain NumPy `f(*args)`; eager and traced agree
tightly; gradients pass a random-direction central-difference check (computed
in float64); float32 inputs give float32 values and gradients. Second order:
every differentiable row's Hessian-vector product (the gradient of <grad f, v>,
eager and traced) matches central differences of gradients.
"""
import numpy as np
import pytest

import jitgraph as jg
from optable import NONDIFF, TABLE, _id, diff_argnums, make_args


# ---- the checks ----------------------------------------------------------------------------
def run_both(f, args, argnums):
    """(value, grads) eagerly and from the interpreted joint graph."""
    v_e, g_e = jg.value_and_grad(f, argnums)(*args)
    graph = jg.make_graph(f, argnums, grad=True)(*args)
    assert graph.verify() is graph
    v_t, g_t = jg.eval_graph(graph, *args)
    assert isinstance(g_e, tuple) and isinstance(g_t, tuple)
    assert len(g_e) == len(g_t) == len(argnums)
    return v_e, g_e, v_t, g_t


def fd_check(f, args, argnums, grads, rtol, eps=1e-5, trials=2, seed=0):
    """Compare <grad, v> with a float64 central difference along random directions v."""
    args64 = [np.asarray(a, np.float64) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a
              for a in args]
    rng = np.random.default_rng(seed)
    for _ in range(trials):
        vs = [rng.standard_normal(np.shape(args64[i])) for i in argnums]
        plus, minus = list(args64), list(args64)
        for i, v in zip(argnums, vs):
            plus[i] = args64[i] + eps * v
            minus[i] = args64[i] - eps * v
        fd = (float(f(*plus)) - float(f(*minus))) / (2 * eps)
        terms = [np.asarray(g, np.float64) * v for g, v in zip(grads, vs)]
        gv = float(sum(np.sum(t) for t in terms))
        scale = max(abs(fd), float(sum(np.sum(np.abs(t)) for t in terms)), 1.0)
        assert abs(fd - gv) <= rtol * scale, f"<grad, v> = {gv!r} but finite difference gives {fd!r}"


def assert_tree_close(a, b, rtol, atol=0.0):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert np.shape(x) == np.shape(y)
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=rtol, atol=atol)


@pytest.mark.parametrize("entry", TABLE, ids=_id)
def test_op_float64(entry):
    args = make_args(entry, np.float64)
    argnums = diff_argnums(entry)
    expected = entry.fn(*args)
    v_e, g_e, v_t, g_t = run_both(entry.fn, args, argnums)
    for v in (v_e, v_t):
        assert np.shape(v) == () and np.asarray(v).dtype == np.float64
        np.testing.assert_allclose(v, expected, rtol=1e-12, atol=1e-13)
    for g, i in zip(g_e, argnums):
        assert np.shape(g) == np.shape(args[i]) and np.asarray(g).dtype == np.float64
        assert np.all(np.isfinite(g))
    scale = max(1.0, *(float(np.max(np.abs(g), initial=0.0)) for g in g_e))
    assert_tree_close(g_e, g_t, rtol=1e-12, atol=1e-12 * scale)
    fd_check(entry.fn, args, argnums, g_e, rtol=1e-6)


# entries whose plain-NumPy result is float64 for float32 inputs: a float64 NumPy scalar exponent,
# np.float_power, float64 constant arrays
PROMOTES_TO_F64 = {"pow-np-float", "np.float_power", "concatenate-with-const", "matmul-rmatmul-const",
                   "np.convolve constant", "np.bincount weights", "interp", "interp-left-right-at-points",
                   "interp-many-points",
                   "interp-sample-points", "np.vander", "np.vander N increasing", "cov", "cov-rowvar-bias",
                   "cov-y-ddof", "cov-fweights-aweights", "cov-aweights-ddof0", "corrcoef", "corrcoef-xy-rowvar",
                   "ufunc.outer-multiply-dtype", "np.bincount traced ints", "np.polyval-const-x", "np.polyfit",
                   "np.polyfit-x-w", "scipy.linalg.inv-det", "linalg.matrix_rank",
                   "np.nanpercentile", "np.quantile-methods", "scipy.linalg.block_diag",
                   "scipy.spatial.distance", "scipy.spatial.distance-cosine-euclid",
                   "scipy.integrate", "np.fft-spectral", "np.fft-2d", "scipy.linalg.lu_solve-constant-factor",
                   "np.histogram density", "np.histogram2d-dd", "np.polyder-polyint", "np.vectorize",
                   "factorial"}   # (as NumPy and SciPy: float64 results)


@pytest.mark.parametrize("entry", TABLE, ids=_id)
def test_op_float32(entry):
    args = make_args(entry, np.float32)
    argnums = diff_argnums(entry)
    expected = entry.fn(*args)
    # float32 unless the entry itself mixes in float64 values (NumPy promotes those)
    assert np.asarray(expected).dtype == (np.float64 if entry.name in PROMOTES_TO_F64 else np.float32)
    v_e, g_e, v_t, g_t = run_both(entry.fn, args, argnums)
    for v in (v_e, v_t):
        assert np.asarray(v).dtype == np.asarray(expected).dtype
        np.testing.assert_allclose(v, expected, rtol=1e-5, atol=1e-5)
    for grads in (g_e, g_t):
        for g, i in zip(grads, argnums):
            assert np.asarray(g).dtype == np.float32, f"gradient of argument {i} is {np.asarray(g).dtype}"
            assert np.shape(g) == np.shape(args[i])
    scale = max(1.0, *(float(np.max(np.abs(g), initial=0.0)) for g in g_e))
    assert_tree_close(g_e, g_t, rtol=1e-5, atol=1e-5 * scale)
    fd_check(entry.fn, args, argnums, g_e, rtol=2e-3)


# ---- comparisons: values only -----------------------------------------------------------------
COMPARISONS = [
    ("<", lambda x, y: x < y), ("<=", lambda x, y: x <= y), (">", lambda x, y: x > y),
    (">=", lambda x, y: x >= y), ("==", lambda x, y: x == y), ("!=", lambda x, y: x != y),
    ("np.less", lambda x, y: np.less(x, y)), ("np.greater_equal", lambda x, y: np.greater_equal(x, y)),
    ("scalar", lambda x, y: x > 0.5), ("rscalar", lambda x, y: 0.5 < y),
    ("and", lambda x, y: (x > 0) & (y > 0)), ("or", lambda x, y: np.logical_or(x > 0, y < 0)),
    ("not", lambda x, y: np.logical_not(x > y)), ("invert", lambda x, y: ~(x > y)),
]


@pytest.mark.parametrize("name,fn", COMPARISONS, ids=[c[0] for c in COMPARISONS])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((), (3,))])
def test_comparison_values(name, fn, shapes):
    rng = np.random.default_rng(1)
    x = np.round(rng.standard_normal(shapes[0]), 1)  # rounded, so == and != see some ties
    y = np.round(rng.standard_normal(shapes[1]), 1)
    if np.shape(x) == np.shape(y):
        y = np.where(rng.random(np.shape(y)) < 0.3, x, y)
    expected = fn(x, y)
    graph = jg.make_graph(fn)(x, y).verify()
    assert graph.outputs[0].dtype == np.bool_
    got = jg.eval_graph(graph, x, y)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, expected)
    # eagerly (inside value_and_grad) the comparison is concrete and matches NumPy
    seen = {}

    def loss(x):
        seen["cmp"] = fn(x, y)
        return np.sum(x)

    jg.value_and_grad(loss)(x)
    np.testing.assert_array_equal(np.asarray(seen["cmp"].value if hasattr(seen["cmp"], "value")
                                             else seen["cmp"]), expected)


def test_comparison_has_no_gradient_path():
    """A loss that only depends on x through a comparison has zero gradient, eager and traced."""
    def f(x):
        return np.sum(np.where(x > 0, 1.0, -1.0))

    x = np.array([-1.0, 2.0, 3.0])
    v, g = jg.value_and_grad(f)(x)
    assert v == 1.0 and np.array_equal(g, np.zeros(3))
    graph = jg.make_graph(f, grad=True)(x).verify()
    v, g = jg.eval_graph(graph, x)
    assert v == 1.0 and np.array_equal(g, np.zeros(3))


# ---- targeted checks ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["eager", "traced"])
def test_gather_backward_accumulates_repeats(mode):
    E = np.arange(12.0).reshape(6, 2)
    idx = np.array([[0, 1], [1, 5], [0, 0]])

    def f(E):
        return np.sum(E[idx])

    if mode == "eager":
        _, g = jg.value_and_grad(f)(E)
    else:
        _, g = jg.eval_graph(jg.make_graph(f, grad=True)(E).verify(), E)
    counts = np.bincount(idx.ravel(), minlength=6).astype(float)
    np.testing.assert_array_equal(g, np.repeat(counts[:, None], 2, axis=1))


@pytest.mark.parametrize("mode", ["eager", "traced"])
def test_max_gradient_splits_ties(mode):
    def f(x):
        return np.max(x) + np.sum(np.maximum(x, 1.0))

    x = np.array([3.0, 1.0, 3.0, 0.0])
    if mode == "eager":
        v, g = jg.value_and_grad(f)(x)
    else:
        v, g = jg.eval_graph(jg.make_graph(f, grad=True)(x).verify(), x)
    assert v == 3.0 + 3 + 1 + 3 + 1
    np.testing.assert_array_equal(g, [1.5, 0.5, 1.5, 0.0])


@pytest.mark.parametrize("mode", ["eager", "traced"])
def test_where_gradient_is_masked(mode):
    def f(x, y):
        return np.sum(np.where(x > y, x * 3.0, y * 5.0))

    x, y = np.array([1.0, -1.0, 2.0]), np.array([0.0, 0.0, 3.0])
    if mode == "eager":
        _, (gx, gy) = jg.value_and_grad(f, (0, 1))(x, y)
    else:
        _, (gx, gy) = jg.eval_graph(jg.make_graph(f, (0, 1), grad=True)(x, y).verify(), x, y)
    np.testing.assert_array_equal(gx, [3.0, 0.0, 0.0])
    np.testing.assert_array_equal(gy, [0.0, 5.0, 5.0])


def _logsumexp_ref(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    r = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis=axis)


def test_stable_composites_match_formulas():
    x = np.random.default_rng(3).standard_normal((3, 4))
    np.testing.assert_allclose(jg.logsumexp(x), np.log(np.sum(np.exp(x))), rtol=1e-13)
    np.testing.assert_allclose(jg.logsumexp(x, axis=1), np.log(np.sum(np.exp(x), axis=1)), rtol=1e-13)
    np.testing.assert_allclose(jg.logsumexp(x, axis=0, keepdims=True),
                               np.log(np.sum(np.exp(x), axis=0, keepdims=True)), rtol=1e-13)
    sm = np.exp(x) / np.sum(np.exp(x), axis=-1, keepdims=True)
    np.testing.assert_allclose(jg.softmax(x), sm, rtol=1e-13)
    np.testing.assert_allclose(jg.softmax(x, axis=0), np.exp(x) / np.sum(np.exp(x), axis=0), rtol=1e-13)
    np.testing.assert_allclose(jg.log_softmax(x), np.log(sm), rtol=1e-12)
    np.testing.assert_allclose(jg.sigmoid(x), 1.0 / (1.0 + np.exp(-x)), rtol=1e-13)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mode", ["eager", "traced"])
def test_stable_composites_do_not_overflow_float32(mode, dtype):
    x = np.array([[1000.0, 0.0, -1000.0], [1000.0, 1000.0, 999.0]], dtype)

    def f(x):
        return np.sum(jg.logsumexp(x, axis=1)) + np.sum(jg.log_softmax(x) * 0.5) + np.sum(jg.sigmoid(x))

    with np.errstate(over="raise", invalid="raise", divide="raise"):
        if mode == "eager":
            v, g = jg.value_and_grad(f)(x)
        else:
            v, g = jg.eval_graph(jg.make_graph(f, grad=True)(x).verify(), x)
    assert np.asarray(v).dtype == dtype and g.dtype == dtype
    assert np.isfinite(v) and np.all(np.isfinite(g))
    ref = f(x.astype(np.float64))
    np.testing.assert_allclose(v, ref, rtol=1e-6)


@pytest.mark.parametrize("mode", ["numpy", "eager", "traced"])
def test_stable_composites_do_not_overflow(mode):
    x = np.array([[1000.0, 0.0, -1000.0], [1000.0, 1000.0, 999.0]])

    def f(x):
        return (np.sum(jg.logsumexp(x, axis=1)) + np.sum(jg.softmax(x) * np.arange(3.0))
                + np.sum(jg.log_softmax(x, axis=0)) + np.sum(jg.sigmoid(x)))

    with np.errstate(over="raise", invalid="raise", divide="raise"):
        if mode == "numpy":
            v, g = f(x), None
        elif mode == "eager":
            v, g = jg.value_and_grad(f)(x)
        else:
            v, g = jg.eval_graph(jg.make_graph(f, grad=True)(x).verify(), x)
    lse = np.array([1000.0, 1000.0 + np.log(2.0 + np.exp(-1.0))])
    assert np.isfinite(v)
    np.testing.assert_allclose(jg.logsumexp(x, axis=1), lse, rtol=1e-15)
    np.testing.assert_allclose(jg.sigmoid(np.array([1000.0, -1000.0, 0.0])), [1.0, 0.0, 0.5])
    np.testing.assert_allclose(jg.softmax(np.array([1000.0, 1000.0])), [0.5, 0.5])
    np.testing.assert_allclose(jg.log_softmax(np.array([1000.0, 0.0])), [0.0, -1000.0])
    if g is not None:
        assert np.all(np.isfinite(g))
        v2, g2 = jg.value_and_grad(f)(x - 1000.0 + 1000.0)
        np.testing.assert_allclose(v, v2)
        # the logsumexp gradient is the softmax: row sums of d lse / dx are 1
        _, g_lse = jg.value_and_grad(lambda x: np.sum(jg.logsumexp(x, axis=1)))(x)
        np.testing.assert_allclose(np.sum(g_lse, axis=1), [1.0, 1.0], rtol=1e-14)
        np.testing.assert_allclose(g_lse[1], np.exp(x[1] - lse[1]), rtol=1e-12)


@pytest.mark.parametrize("entry", NONDIFF, ids=[e.name for e in NONDIFF])
def test_nondiff_values(entry):
    """Values of the entries without a gradient: plain NumPy, the interpreted graph, eagerly."""
    args = make_args(entry, np.float64)
    expected = entry.fn(*args)
    graph = jg.make_graph(entry.fn)(*args).verify()
    np.testing.assert_array_equal(jg.eval_graph(graph, *args), expected)
    seen = {}

    def loss(x, *rest):
        seen["value"] = entry.fn(x, *rest)
        return np.sum(x)

    if np.asarray(args[0]).dtype.kind == "f":
        jg.value_and_grad(loss)(*args)
        v = seen["value"]
        np.testing.assert_array_equal(getattr(v, "value", v), expected)


def test_table_covers_the_spec():
    names = {e.name for e in TABLE}
    for required in ["add", "sub", "mul", "div", "pow2", "pow-tensor", "neg", "abs", "sign", "square",
                     "sqrt", "exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "sinh", "cosh",
                     "arctan", "maximum", "minimum", "clip", "where", "reshape", ".T", "expand_dims",
                     "squeeze", "broadcast_to", "concatenate-0", "stack-0", "gather E[idx2d]", "np.take",
                     "matmul @", "np.dot", "np.outer", "jg.logsumexp", "jg.softmax", "jg.log_softmax",
                     "jg.sigmoid"]:
        assert required in names
    assert len(TABLE) > 250


# ---- second derivatives: the backward pass is itself differentiable ---------------------------------
_W = np.random.default_rng(5).standard_normal((3, 4))
SECOND_ORDER = {
    "tanh-matmul": lambda x: np.sum(np.tanh(x @ _W) ** 2),
    "max-reduce": lambda x: np.sum(np.max(x * x, axis=1) ** 2),
    "maximum": lambda x: np.sum(np.maximum(x, 0.1) ** 3),
    "where": lambda x: np.sum(np.where(x > 0, x ** 3, np.sin(x))),
    "gather": lambda x: np.sum(x[[0, 0, 1]] ** 3),
    "slice-broadcast": lambda x: np.sum((x[::-1, 1:] + x[0, 1:]) ** 3),
    "logsumexp": lambda x: jg.logsumexp(x * x),
    "softmax": lambda x: np.sum(jg.softmax(x) ** 2),
    "var-prod": lambda x: np.var(x) ** 2 + np.prod(x, axis=0)[0] ** 2,
    "pow-tensor": lambda x: np.sum(np.abs(x) ** x),
    "concat-div-sqrt": lambda x: np.sum(np.concatenate([x, 1.0 / (1.0 + x * x)], axis=1) ** 2)
    + np.sum(np.sqrt(x * x + 1)),
}


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
def test_hessian_vector_products(name):
    """grad of <grad f, v>, eagerly (eager inside eager) and traced (eager inside a trace)."""
    f = SECOND_ORDER[name]
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 3)) + 0.1
    v = rng.standard_normal((3, 3))

    def gv(x):
        return np.sum(jg.grad(f)(x) * v)

    h_e = jg.grad(gv)(x)
    _, h_t = jg.eval_graph(jg.make_graph(gv, grad=True)(x).verify(), x)
    eps = 1e-5
    fd = (jg.grad(f)(x + eps * v) - jg.grad(f)(x - eps * v)) / (2 * eps)
    scale = max(1.0, float(np.max(np.abs(fd))))
    np.testing.assert_allclose(h_e, fd, rtol=1e-6, atol=1e-6 * scale)
    np.testing.assert_allclose(h_t, h_e, rtol=1e-10, atol=1e-12 * scale)


@pytest.mark.parametrize("entry", [e for e in TABLE if diff_argnums(e)], ids=_id)
def test_op_second_order(entry):
    """Every row's Hessian-vector product, the gradient of <grad f, v> (eager inside eager, and
    eager inside a trace), against central differences of the gradient along v (float64)."""
    args = make_args(entry, np.float64)
    nums = diff_argnums(entry)
    rng = np.random.default_rng(7)
    vs = [rng.standard_normal(np.shape(args[i])) for i in nums]

    def grads(*a):
        return jg.grad(entry.fn, nums)(*a)

    def gv(*a):
        return sum(np.sum(g * v) for g, v in zip(grads(*a), vs))

    h_e = jg.grad(gv, nums)(*args)
    _, h_t = jg.eval_graph(jg.make_graph(gv, nums, grad=True)(*args).verify(), *args)
    eps = 1e-5
    plus, minus = list(args), list(args)
    for i, v in zip(nums, vs):
        plus[i] = args[i] + eps * v
        minus[i] = args[i] - eps * v
    fd = [(gp - gm) / (2 * eps) for gp, gm in zip(grads(*plus), grads(*minus))]
    for he, ht, d in zip(h_e, h_t, fd):
        scale = max(1.0, float(np.max(np.abs(d), initial=0.0)))
        np.testing.assert_allclose(he, d, rtol=1e-5, atol=1e-5 * scale)
        np.testing.assert_allclose(ht, he, rtol=1e-10, atol=1e-11 * scale)


def test_interp_at_sample_points_and_with_infinite_values():
    """np.interp at a sample point: its fp exactly, and the interval's slope as the gradient (a
    select of the sample's value would give 0); a repeated last point reads the last fp; an
    infinite fp gives NumPy's value (from the interval's other end), not NaN."""
    def identity(x):
        return np.sum(np.interp(x, np.array([0.0, 1.0, 2.0]), np.array([0.0, 1.0, 2.0])))

    x = np.array([0.5, 1.0, 1.5, 0.0, 2.0])
    for vg in (jg.value_and_grad(identity), jg.jit_grad(identity, wait=True)):
        value, grad = vg(x)
        assert value == 5.0
        np.testing.assert_array_equal(grad, np.ones(5))
    cases = [([1.0], [0.0, 1.0, 1.0], [5.0, 3.0, 2.0]), ([0.5], [0.0, 1.0], [np.inf, np.inf]),
             ([np.nan, 1.0, -1.0, 5.0, 2.0, 2.5], [0.0, 1.0, 2.5, 4.0], [1.0, np.inf, 2.0, 3.0]),
             ([1.0, 2.0, 0.5, 0.0, 3.0], [0.0, 1.0, 1.0, 2.0], [0.0, 1.0, 3.0, 2.0])]
    for x, xp, fp in cases:
        x, xp, fp = (np.array(v) for v in (x, xp, fp))
        want = np.interp(x, xp, fp)
        np.testing.assert_array_equal(jg.jit(lambda x, xp, fp: np.interp(x, xp, fp), wait=True)(x, xp, fp), want)
        np.testing.assert_array_equal(jg.value_and_grad(lambda x: np.sum(np.interp(x, xp, fp)))(x)[0], want.sum())
