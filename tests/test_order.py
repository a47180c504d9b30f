"""Scans, sorting and order statistics (jitgraph/ops/order.py): ties, NaNs, empty and size-1
axes, np.take's modes, percentiles against NumPy over many q/axis combinations, gradients
with zeros and ties, and compiled results (Numba, the generated source as Python, the CUDA
target) equal to eager and traced ones. The op table (tests/optable/order.py) checks every
function's values and first- and second-order gradients; these are the cases it cannot reach.
"""
import warnings

import numpy as np
import pytest

import jitgraph as jg
from jitgraph import codegen
from jitgraph.codegen import ops_order
from jitgraph.interpreter import evaluate


def traced(fn, *args):
    """fn(*args) through the traced graph and the reference interpreter."""
    return jg.eval_graph(jg.make_graph(fn)(*args).verify(), *args)


def eager(fn, *args):
    """fn(*args) on an eager tape (the values jitgraph records while differentiating), or None
    when no argument is floating (a tape starts at a floating argument)."""
    floats = [k for k, a in enumerate(args) if np.asarray(a).dtype.kind == "f"]
    if not floats:
        return None
    seen = {}

    def loss(*a):
        seen["v"] = fn(*a)
        return np.sum(a[floats[0]])

    jg.value_and_grad(loss, floats[0])(*args)
    v = seen["v"]
    return tuple(getattr(t, "value", t) for t in v) if isinstance(v, tuple) else getattr(v, "value", v)


def assert_same(got, want, rtol=0.0):
    """Equal shapes and dtypes; equal values (NaN where NaN), to `rtol` for floats."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    if rtol and want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
    else:
        np.testing.assert_array_equal(got, want)


def assert_all_modes(fn, *args, compiled=("python",)):
    """fn(*args) eagerly and traced (exactly NumPy's fn(*args): both run NumPy's reference
    implementations), and compiled with each backend (to rounding: compiled sums may add in
    another order; orderings and indices exactly)."""
    want = fn(*args)
    got = eager(fn, *args)
    if got is not None:
        assert_same(got, want)
    assert_same(traced(fn, *args), want)
    for backend in compiled:
        rtol = 1e-5 if np.asarray(want).dtype == np.float32 else 1e-12
        assert_same(jg.jit(fn, backend=backend)(*args), want, rtol)
    return want


def ties(shape, seed=0, nan=False, dtype=np.float64):
    """Random values with many ties (and NaNs)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, shape).astype(dtype)
    if nan:
        x[rng.random(shape) < 0.2] = np.nan
    return x


# ---- sorting: ties keep their order, NaN last, every row length -----------------------------------------
@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 33, 100, 1000])
def test_sort_helper_is_stable_with_nan_last(n):
    """The CPU helper against np.argsort(kind="stable") on rows around the run length (16)."""
    for seed in range(3):
        x = ties((2, n, 3), seed, nan=True)
        out = ops_order.argsort(x, np.empty(x.shape, np.int64))
        np.testing.assert_array_equal(out, np.argsort(x, axis=1, kind="stable"))


@pytest.mark.parametrize("axis", [0, 1, -1, None])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32, np.uint8])
def test_argsort_ties_are_stable_in_every_mode(axis, dtype):
    x = ties((5, 40), nan=False, dtype=dtype)
    fn = lambda x: np.argsort(x, axis=axis, kind="stable")   # noqa: E731
    assert_all_modes(fn, x, compiled=("python", "numba"))
    assert_all_modes(lambda x: np.sort(x, axis=axis), x)


def test_argsort_of_booleans_and_the_default_kind():
    b = ties((3, 20)) > 0
    assert_all_modes(lambda b: np.argsort(b, axis=1, kind="stable"), b)
    # with distinct values every kind gives the one order
    x = np.random.default_rng(1).standard_normal((4, 50))
    assert_all_modes(lambda x: np.argsort(x), x)
    assert_same(traced(lambda x: np.argsort(x, kind="quicksort"), x), np.argsort(x, kind="stable"))


def test_sort_puts_nan_last_and_argsort_keeps_nan_order():
    x = ties((6, 30), seed=2, nan=True)
    for axis in (0, 1, None):
        assert_all_modes(lambda x: np.sort(x, axis=axis), x, compiled=("python", "numba"))
        assert_all_modes(lambda x: np.argsort(x, axis=axis, kind="stable"), x)


def test_zero_d_and_empty_sorts():
    z = np.array(2.5)
    assert_all_modes(lambda z: np.argsort(z), z)
    assert_all_modes(lambda z: np.sort(z, axis=None), z)
    e = np.ones((3, 0))
    assert_all_modes(lambda e: np.sort(e, axis=1), e)
    assert_all_modes(lambda e: np.argsort(e, axis=0), e)
    with pytest.raises(ValueError):
        jg.make_graph(lambda z: np.sort(z))(z)


# ---- partition: NumPy's promise, not its arrangement -----------------------------------------------------
@pytest.mark.parametrize("kth", [0, 3, -1, (1, 5), [0, 2, 7]])
def test_partition_property(kth):
    x = ties((3, 9), seed=3, nan=True)
    ks = np.atleast_1d(kth)
    for fn in (traced, eager, lambda f, x: jg.jit(f)(x)):
        p = fn(lambda x: np.partition(x, kth, axis=1), x)
        i = fn(lambda x: np.argpartition(x, kth, axis=1), x)
        ref = np.sort(x, axis=1)
        for k in ks:
            np.testing.assert_array_equal(p[:, k], ref[:, k])
            np.testing.assert_array_equal(np.take_along_axis(x, i, 1)[:, k], ref[:, k])
            lo, hi = p[:, :k % 9], p[:, k % 9 + 1:]
            with np.errstate(invalid="ignore"):
                assert not np.any(lo > p[:, k % 9, None]) and not np.any(hi < p[:, k % 9, None])
        np.testing.assert_array_equal(np.sort(i, axis=1), np.tile(np.arange(9), (3, 1)))


def test_partition_errors():
    x = np.ones((2, 4))
    with pytest.raises(ValueError, match=r"kth\(=4\) out of bounds \(4\)"):
        jg.make_graph(lambda x: np.partition(x, 4))(x)
    with pytest.raises(ValueError, match="out of bounds"):
        jg.make_graph(lambda x: np.argpartition(x, -5, axis=1))(x)
    with pytest.raises(TypeError, match="Partition index must be integer"):
        jg.make_graph(lambda x: np.partition(x, 1.5))(x)
    with pytest.raises(jg.NotSupportedError, match="order="):
        jg.make_graph(lambda x: np.sort(x, order="a"))(x)


# ---- argmax / argmin: first occurrence, first NaN ---------------------------------------------------------
@pytest.mark.parametrize("name", ["argmax", "argmin", "nanargmax", "nanargmin"])
@pytest.mark.parametrize("axis,keepdims", [(None, False), (None, True), (0, False), (1, True), (-1, False)])
def test_arg_extremes_ties_and_nan(name, axis, keepdims):
    fn = getattr(np, name)
    x = ties((6, 7), seed=4, nan=name.startswith("arg"))
    if name.startswith("nan"):
        x[1, 3] = x[4, 0] = np.nan      # NaN, but no all-NaN slice
    f = lambda x: fn(x, axis=axis, keepdims=keepdims)   # noqa: E731
    assert_all_modes(f, x, compiled=("python", "numba"))


def test_arg_extremes_of_nan_ints_bools_and_zero_d():
    x = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 2.0, -np.inf, -np.inf], [0.0, -0.0, 0.0, -0.0]])
    for f in (np.argmax, np.argmin):
        assert_all_modes(lambda x: f(x, axis=1), x)
        assert_all_modes(lambda x: f(x), x)
    assert_all_modes(lambda i: np.argmax(i, axis=0), ties((5, 3), dtype=np.int32))
    assert_all_modes(lambda x: np.argmin(x > 0, axis=1), ties((4, 5)))
    assert_all_modes(lambda z: np.argmax(z), np.array(3.0))
    assert_all_modes(lambda z: np.argmax(z, axis=0, keepdims=True), np.array(3.0))


def test_arg_extremes_of_empty_and_all_nan_slices_raise():
    with pytest.raises(ValueError, match="attempt to get argmax of an empty sequence"):
        jg.make_graph(lambda x: np.argmax(x, axis=0))(np.ones((0, 3)))
    assert_all_modes(lambda x: np.argmin(x, axis=1), np.ones((0, 3)))
    x = np.array([[np.nan, np.nan], [1.0, np.nan]])
    with pytest.raises(ValueError, match="All-NaN slice encountered"):
        eager(lambda x: np.nanargmax(x, axis=1), x)


# ---- scans --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,want", [(np.int32, np.int64), (np.uint8, np.uint64), (np.bool_, np.int64),
                                        (np.float32, np.float32), (np.int64, np.int64)])
def test_cumsum_cumprod_dtypes(dtype, want):
    x = (np.arange(12).reshape(3, 4) % 3).astype(dtype)
    for fn in (np.cumsum, np.cumprod):
        r = assert_all_modes(lambda x: fn(x, axis=1), x)
        assert r.dtype == want
        assert_all_modes(lambda x: fn(x), x)
    assert_all_modes(lambda x: np.cumsum(x, axis=0, dtype=np.float32), x)
    assert_all_modes(lambda x: np.cumsum(x, axis=0, dtype=bool), x)
    assert_all_modes(lambda x: np.cumprod(x, axis=1, dtype=bool), x)


def test_scans_of_empty_size_one_and_zero_d():
    for x in (np.ones((3, 0)), np.ones((0, 2)), np.ones((3, 1))):
        for axis in (0, 1, None):
            assert_all_modes(lambda x: np.cumsum(x, axis=axis), x)
            assert_all_modes(lambda x: np.cumprod(x, axis=axis), x)
    assert_all_modes(lambda z: np.cumsum(z), np.array(2.0))
    assert_all_modes(lambda z: np.cumprod(z, axis=0), np.array(2.0))


def test_cumsum_adds_in_order_like_numpy():
    """Running sums in float32 round at every step: every target adds in NumPy's order."""
    x = np.random.default_rng(5).standard_normal((4, 3000)).astype(np.float32) * 1e4
    assert_all_modes(lambda x: np.cumsum(x, axis=1), x, compiled=("python", "numba"))
    assert_all_modes(lambda x: np.cumsum(x, axis=0), x)


def test_cumprod_gradient_is_exact_with_zeros():
    """d cumprod: the first zero of a row gets the product of the others; after it, zero. The
    second derivatives are exact there too (one, two, three zeros in a row)."""
    rng = np.random.default_rng(6)
    x = rng.uniform(0.5, 1.5, (5, 6))
    x[0, 2] = 0.0
    x[1, 0] = 0.0
    x[2, 1] = x[2, 4] = 0.0
    x[3, 5] = 0.0
    x[4, 0] = x[4, 2] = x[4, 3] = 0.0
    w = rng.standard_normal((5, 6))

    def f(x):
        return np.sum(np.cumprod(x, axis=1) * w)

    want = np.zeros_like(x)
    for r in range(5):
        for k in range(6):
            for i in range(k, 6):
                want[r, k] += w[r, i] * np.prod(np.delete(x[r, :i + 1], k))
    _, g = jg.value_and_grad(f)(x)
    np.testing.assert_allclose(g, want, rtol=1e-13, atol=1e-15)
    _, g_t = jg.eval_graph(jg.make_graph(f, grad=True)(x), x)
    np.testing.assert_allclose(g_t, want, rtol=1e-13, atol=1e-15)
    _, g_c = jg.jit_grad(f)(x)
    np.testing.assert_allclose(g_c, want, rtol=1e-12, atol=1e-15)
    # second order across a zero: the Hessian-vector product against differences of gradients
    v = rng.standard_normal(x.shape)
    h = jg.grad(lambda x: np.sum(jg.grad(f)(x) * v))(x)
    eps = 1e-6
    fd = (jg.grad(f)(x + eps * v) - jg.grad(f)(x - eps * v)) / (2 * eps)
    np.testing.assert_allclose(h, fd, rtol=1e-6, atol=1e-7)


def test_diff_forms():
    x = np.random.default_rng(7).standard_normal((3, 5))
    assert_all_modes(lambda x: np.diff(x, n=7, axis=1), x)           # n past the length: empty
    assert_all_modes(lambda x: np.diff(x, n=0), x)
    assert_all_modes(lambda x: np.diff(x, axis=0, prepend=x[:1], append=2), x)
    assert_all_modes(lambda x: np.diff(x > 0), x)
    assert_all_modes(lambda x: np.diff(x, prepend=0), x.astype(np.float32))   # float64 like NumPy
    with pytest.raises(ValueError, match="order must be non-negative"):
        jg.make_graph(lambda x: np.diff(x, n=-1))(x)
    with pytest.raises(ValueError, match="at least one dimensional"):
        jg.make_graph(lambda x: np.diff(x))(np.array(1.0))


@pytest.mark.parametrize("edge_order", [1, 2])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_gradient_forms(edge_order, dtype):
    x = (np.random.default_rng(8).standard_normal((4, 5)) * 10).astype(dtype)
    c4, c5 = np.array([0.0, 0.5, 2.0, 2.25]), np.array([1, 2, 4, 7, 11])
    for fn in (lambda x: np.gradient(x, edge_order=edge_order),
               lambda x: np.gradient(x, 0.5, axis=1, edge_order=edge_order),
               lambda x: np.gradient(x, c4, c5, edge_order=edge_order),
               lambda x: np.gradient(x, 2, np.arange(5.0) * 3, edge_order=edge_order),
               lambda x: np.gradient(x, np.float64(0.5), axis=-1, edge_order=edge_order)):
        want = fn(x)
        got_t, got_e = traced(fn, x), eager(fn, x)
        for got in (got_t, got_e) if got_e is not None else (got_t,):
            for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                assert_same(g, w)
    with pytest.raises(ValueError, match="too small"):
        jg.make_graph(lambda x: np.gradient(x, edge_order=2))(np.ones((2, 2)))
    with pytest.raises(ValueError, match="must match the length"):
        jg.make_graph(lambda x: np.gradient(x, c5, axis=0))(np.ones((4, 5)))


def test_gradient_with_traced_coordinates():
    """Traced coordinates take the non-uniform formulas (NumPy's, equal up to rounding)."""
    x = np.random.default_rng(9).standard_normal(6)
    c = np.array([0.0, 0.3, 1.0, 1.2, 2.0, 3.5])
    want = np.gradient(x, c, edge_order=2)
    np.testing.assert_allclose(jg.eval_graph(jg.make_graph(lambda x, c: np.gradient(x, c, edge_order=2))(x, c),
                                             x, c), want, rtol=1e-13)
    _, (gx, gc) = jg.value_and_grad(lambda x, c: np.sum(np.gradient(x, c) ** 2), (0, 1))(x, c)
    assert np.all(np.isfinite(gc)) and np.any(gc != 0)


# ---- gathers along an axis and np.take's modes --------------------------------------------------------------
def test_take_along_axis_broadcasts_and_counts_from_the_end():
    x = np.arange(24.0).reshape(2, 3, 4)
    assert_all_modes(lambda x: np.take_along_axis(x, np.array([[[3, -1, 0]]]), axis=2), x)
    assert_all_modes(lambda x: np.take_along_axis(x, np.array([[[1]], [[-2]]]), axis=1), x)
    assert_all_modes(lambda x: np.take_along_axis(x, np.array([23, -24, 5]), axis=None), x)
    assert_all_modes(lambda x, i: np.take_along_axis(x, i, axis=0), x, np.array([[[1], [0], [1]]], np.int32))
    with pytest.raises(ValueError, match="same number of dimensions"):
        jg.make_graph(lambda x: np.take_along_axis(x, np.array([0]), axis=0))(x)
    with pytest.raises(IndexError, match="integer array"):
        jg.make_graph(lambda x: np.take_along_axis(x, np.zeros((1, 1, 1)), axis=0))(x)


def test_take_along_axis_out_of_range_raises_in_every_mode():
    x = np.ones((2, 3))
    i = np.array([[0, 3]])
    f = lambda x, i: np.take_along_axis(x, i, axis=1)   # noqa: E731
    with pytest.raises(IndexError):
        traced(f, x, i)
    for backend in ("python", "numba"):
        with pytest.raises(IndexError):
            jg.jit(f, backend=backend)(x, i)


def test_take_along_axis_gradient_accumulates_repeats():
    x = np.arange(6.0).reshape(2, 3)
    i = np.array([[0, 0, 2, 0], [1, -1, 1, 1]])
    want = np.array([[3.0, 0.0, 1.0], [0.0, 3.0, 1.0]])
    _, g = jg.value_and_grad(lambda x: np.sum(np.take_along_axis(x, i, axis=1)))(x)
    np.testing.assert_array_equal(g, want)
    _, g = jg.jit_grad(lambda x: np.sum(np.take_along_axis(x, i, axis=1)))(x)
    np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("mode", ["raise", "wrap", "clip", None])
def test_take_modes(mode):
    x = np.arange(12.0).reshape(3, 4)
    idx = np.array([[5, -6], [1, -1]]) if mode in ("wrap", "clip") else np.array([[2, -3], [1, -1]])
    for axis in (None, 0, 1, -1):
        assert_all_modes(lambda x: np.take(x, idx, axis=axis, mode=mode), x)
        assert_all_modes(lambda x, i: np.take(x, i, axis=axis, mode=mode), x, idx)
    assert_all_modes(lambda x: x.take(idx, axis=1, mode=mode), x)


def test_take_mode_errors():
    x = np.arange(6.0)
    with pytest.raises(IndexError):
        traced(lambda x: np.take(x, [6]), x)
    with pytest.raises(IndexError):
        traced(lambda x, i: np.take(x, i), x, np.array([6]))
    with pytest.raises(ValueError, match="clipmode"):
        traced(lambda x: np.take(x, [1], mode="bounce"), x)
    with pytest.raises(IndexError, match="empty"):
        traced(lambda x: np.take(x, [1], axis=1, mode="wrap"), np.ones((2, 0)))
    assert_all_modes(lambda x: np.take(x, np.array([], np.int64), axis=1, mode="clip"), np.ones((2, 0)))


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_ties_nan_and_sorter(side):
    a = np.array([-1.0, 0.0, 0.0, 2.0, np.nan, np.nan])
    v = np.array([[-2.0, 0.0, 0.5], [2.0, np.inf, np.nan]])
    assert_all_modes(lambda a, v: np.searchsorted(a, v, side=side), a, v)
    assert_all_modes(lambda a: np.searchsorted(a, 0.0, side=side), a)
    assert_all_modes(lambda a, v: a.searchsorted(v, side), a, v)
    perm = np.array([3, 0, 5, 1, 4, 2])
    shuffled = np.empty_like(a)
    shuffled[perm] = a
    assert_all_modes(lambda s, v: np.searchsorted(s, v, side=side, sorter=perm), shuffled, v)
    i = np.array([1, 3, 5, 7])
    assert_all_modes(lambda i: np.searchsorted(i, 4.5, side=side), i)


# ---- order statistics --------------------------------------------------------------------------------------
QS = [0, 1, 0.0, 1.0, 0.25, 0.5, 1 / 3, 0.999, np.float64(0.7), np.float32(0.3),
      [0.0, 0.5, 1.0], np.array([0.1, 0.9]), np.array([[0.2, 0.4], [0.6, 0.8]]),
      np.array([0.25, 0.75], np.float32), np.array(0.5), [0, 1]]
AXES = [None, 0, 1, -1, (0, 2), (2, 0, 1)]


@pytest.mark.parametrize("q", QS, ids=[repr(q).replace(" ", "") for q in QS])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_quantile_and_percentile_match_numpy(q, dtype):
    x = (np.random.default_rng(10).standard_normal((3, 4, 5)) * 10).astype(dtype)
    pq = [v * 100 for v in q] if isinstance(q, list) else q * 100    # keeps q's type and dtype
    for axis in AXES:
        for keepdims in (False, True):
            assert_all_modes(lambda x: np.quantile(x, q, axis=axis, keepdims=keepdims), x, compiled=())
            assert_all_modes(lambda x: np.percentile(x, pq, axis=axis, keepdims=keepdims), x, compiled=())
    assert_all_modes(lambda x: np.quantile(x, q, axis=(0, 2), keepdims=True), x)
    assert_all_modes(lambda x: np.percentile(x, pq, axis=1), x)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")   # inf - inf, as in NumPy
def test_quantiles_of_nan_size_one_infinities_and_ties():
    x = ties((4, 6), seed=11, nan=True)
    x[0] = np.nan
    x[1] = np.array([np.inf, 1.0, -np.inf, 2.0, 0.0, 0.0])
    for q in (0.0, 0.3, 0.5, 1.0, [0.1, 0.9]):
        for axis in (None, 0, 1):
            assert_all_modes(lambda x: np.quantile(x, q, axis=axis), x)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                assert_all_modes(lambda x: np.median(x, axis=axis), x)
    assert_all_modes(lambda x: np.percentile(x, [0, 50, 100], axis=1), np.ones((3, 1)))
    assert_all_modes(lambda x: np.median(x, axis=0), np.ones((1, 3)))
    assert_all_modes(lambda x: np.median(x), np.array(4.0))
    assert_all_modes(lambda x: np.percentile(x, 40), np.array(4.0))


def test_median_dtypes_and_empty():
    for dtype in (np.int32, np.int64, np.float32, np.bool_):
        x = ties((3, 4), seed=12, dtype=np.float64).astype(dtype)
        for axis in (None, 0, (0, 1)):
            assert_all_modes(lambda x: np.median(x, axis=axis, keepdims=True), x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert_all_modes(lambda x: np.median(x, axis=0), np.ones((0, 3)))


def test_quantile_errors():
    x = np.ones((2, 3))
    with pytest.raises(ValueError, match=r"Percentiles must be in the range \[0, 100\]"):
        traced(lambda x: np.percentile(x, 101), x)
    with pytest.raises(ValueError, match=r"Quantiles must be in the range \[0, 1\]"):
        traced(lambda x: np.quantile(x, [0.5, -0.1]), x)
    with pytest.raises(jg.NotSupportedError, match="traced q"):
        jg.make_graph(lambda x, q: np.quantile(x, q))(x, np.float64(0.5))
    with pytest.raises(jg.NotSupportedError, match="method='weibull'"):
        traced(lambda x: np.quantile(x, 0.5, method="weibull"), x)
    with pytest.raises(jg.NotSupportedError, match="method='nearest'"):
        traced(lambda x: np.nanquantile(x, 0.5, method="nearest"), x)
    with pytest.raises(IndexError):
        traced(lambda x: np.percentile(x, 50), np.ones(0))


def test_median_and_quantile_gradients_pick_the_order_statistics():
    x = np.array([[3.0, 1.0, 2.0, 5.0], [0.0, -1.0, 4.0, 2.0]])
    _, g = jg.value_and_grad(lambda x: np.sum(np.median(x, axis=1)))(x)
    np.testing.assert_array_equal(g, [[0.5, 0.0, 0.5, 0.0], [0.5, 0.0, 0.0, 0.5]])
    # q = 0.25 of 4 values: 0.75 of the way from the smallest to the second
    _, g = jg.value_and_grad(lambda x: np.sum(np.quantile(x, 0.25, axis=1)))(x)
    np.testing.assert_allclose(g, [[0.0, 0.25, 0.75, 0.0], [0.75, 0.25, 0.0, 0.0]])
    # the sort's adjoint scatters back through the permutation: each value gets its rank
    # (the tied 2.0s in their stable order)
    _, g = jg.value_and_grad(lambda x: np.sum(np.sort(x, axis=None) * np.arange(8.0)))(x)
    np.testing.assert_array_equal(g, [[5.0, 2.0, 3.0, 7.0], [1.0, 0.0, 6.0, 4.0]])


def test_average_forms_and_zero_weights():
    rng = np.random.default_rng(13)
    x, w = rng.standard_normal((3, 4)), rng.uniform(0.5, 2.0, (3, 4))
    assert_all_modes(lambda x, w: np.average(x, weights=w), x, w)
    assert_all_modes(lambda x, w: np.average(x, axis=1, weights=w[0], returned=True), x, w)
    assert_all_modes(lambda x, w: np.average(x, axis=(1, 0), weights=w.T, keepdims=True), x, w)
    assert_all_modes(lambda x: np.average(x, axis=0, returned=True), x)
    assert_all_modes(lambda i, w: np.average(i, axis=0, weights=w[:, 0]), (x * 10).astype(np.int32), w)
    with pytest.raises(ZeroDivisionError):
        eager(lambda x, w: np.average(x, axis=1, weights=w * 0.0), x, w)
    with pytest.raises(TypeError, match="Axis must be specified"):
        traced(lambda x, w: np.average(x, weights=w[0]), x, w)
    with pytest.raises(ValueError, match="consistent with shape"):
        traced(lambda x, w: np.average(x, axis=1, weights=w[:, 0]), x, w)


def test_ptp_all_any_nan_functions_edge_cases():
    x = ties((4, 5), seed=14, nan=True)
    x[2] = np.nan
    i = ties((4, 5), seed=15, dtype=np.int8)
    assert_all_modes(lambda i: np.ptp(i, axis=1), i)
    assert_all_modes(lambda x: np.ptp(x, axis=0, keepdims=True), x)
    with pytest.raises(TypeError, match="boolean subtract"):
        traced(lambda x: np.ptp(x > 0), x)
    for which in (np.all, np.any):
        for axis in (None, 0, 1, (0, 1), ()):
            assert_all_modes(lambda x: which(x, axis=axis), x)
            assert_all_modes(lambda i: which(i, axis=axis, keepdims=True), i)
        assert_all_modes(lambda x: which(x[:, :0], axis=1), x)
        assert_all_modes(lambda x: which(x[:0], axis=None), x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for fn in (np.nansum, np.nanmean, np.nanmax, np.nanmin, np.nanprod, np.nanvar, np.nanstd):
            for axis in (None, 0, 1):
                assert_all_modes(lambda x: fn(x, axis=axis), x)
                assert_all_modes(lambda i: fn(i, axis=axis), i)
        assert_all_modes(lambda x: np.nanvar(x, axis=1, ddof=2), x)
        assert_all_modes(lambda x: np.nanmean(x, axis=0, dtype=np.float32), x)
        assert_all_modes(lambda x: np.nanargmax(x, axis=1), np.where(np.isnan(x), 0.0, x))


def test_tensor_methods_dispatch():
    x = np.random.default_rng(16).standard_normal((3, 4))

    def f(x):
        y = x * 1.0
        y.sort(axis=0)
        return (y, x.argsort(axis=1), x.argmax(axis=0), x.argmin(), x.cumsum(1), x.cumprod(),
                x.all(axis=1), x.any(), np.sort(x, axis=None).searchsorted(0.1))

    want = f(x)
    for got in (traced(f, x), eager(f, x), jg.jit(f, backend="python")(x)):
        for g, w in zip(got, want):
            assert_same(g, w)


# ---- compiled results equal eager ones ---------------------------------------------------------------------
def _program(x, i):
    return (np.cumsum(x, axis=1), np.cumprod(x, axis=0), np.sort(x, axis=-1), np.argsort(x, axis=0),
            np.argmax(x, axis=1), np.take_along_axis(x, i, axis=1), np.take(x, i, axis=1, mode="wrap"),
            np.median(x, axis=0), np.percentile(x, [10.0, 90.0], axis=1), np.nanmax(x, axis=0),
            np.any(x > 1.0, axis=1), np.diff(x, axis=0), np.gradient(x, axis=1))


@pytest.mark.parametrize("backend", ["numba", "python"])
def test_compiled_program_equals_eager(backend):
    rng = np.random.default_rng(17)
    x = rng.standard_normal((5, 7))
    x[1, 2] = np.nan
    i = rng.integers(-7, 14, (5, 3))
    i[i >= 7] = -1
    want = eager(_program, x, i)
    f = jg.jit(_program, backend=backend)
    for _ in range(2):
        got = f(x, i)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-13, atol=0)
            assert np.asarray(g).dtype == np.asarray(w).dtype

    def loss(x):
        return sum(np.sum(v * 0.5) for v in _program(x, np.abs(i) % 7) if v.dtype.kind == "f")
    xf = np.nan_to_num(x)
    v_e, g_e = jg.value_and_grad(loss)(xf)
    v_c, g_c = jg.jit_grad(loss, backend=backend)(xf)
    np.testing.assert_allclose(v_c, v_e, rtol=1e-13)
    np.testing.assert_allclose(g_c, g_e, rtol=1e-12, atol=1e-13)


def test_generated_source_imports_the_helpers_once():
    g = jg.make_graph(lambda x: np.sort(np.cumsum(x, axis=0), axis=1))(np.ones((3, 4)))
    _, src, _ = codegen.generate(g)
    assert src.count("from jitgraph.codegen import ops_order as _ord") == 1
    assert "_ord.argsort(" in src and "_ord.cumsum(" in src and "_ord.take_along(" in src


@pytest.mark.xdist_group("cuda")
def test_cuda_target_equals_eager():
    cuda_sim = pytest.importorskip("numba_cuda")
    from jitgraph.codegen.emit_cuda import cuda_unavailable_reason
    if cuda_unavailable_reason() is not None:
        pytest.skip(cuda_unavailable_reason())
    assert cuda_sim is not None
    rng = np.random.default_rng(18)
    x = ties((4, 20), seed=19, nan=True)
    i = rng.integers(-20, 20, (4, 5))
    graph = jg.trace_graph(_program, (x, i), 0, False, False)
    prog = codegen.compile_graph(graph, target="cuda")
    outs = prog.run(x, i)
    for got, want in zip(outs, evaluate(graph, x, i)):
        want = np.asarray(want)
        assert_same(np.asarray(got).reshape(want.shape), want, 1e-12)
