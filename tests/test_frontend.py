"""Front-end behaviour: argnums, has_aux, pytrees, scalars and dtypes, control flow, errors,
immutability of inputs, graph printing and verification, and which nodes get adjoints."""
import copy
import inspect
import os

import numpy as np
import pytest

import jitgraph as jg
from jitgraph.errors import JitgraphError
from jitgraph.graph import Graph, Node, type_str


def traced(f, argnums=0, has_aux=False):
    """value_and_grad through the joint graph and the interpreter (checked with verify())."""
    def run(*args):
        graph = jg.make_graph(f, argnums, grad=True, has_aux=has_aux)(*args)
        assert graph.verify() is graph
        return jg.eval_graph(graph, *args)
    return run


MODES = {"eager": jg.value_and_grad, "traced": traced}
mode_param = pytest.mark.parametrize("vg", list(MODES.values()), ids=list(MODES))


def loss3(w, b, x):
    return np.sum(np.tanh(x @ w + b) ** 2)


@pytest.fixture
def wbx(rng):
    return rng.standard_normal((4, 3)), rng.standard_normal(3), rng.standard_normal((5, 4))


def _ref_grads(w, b, x):
    h = np.tanh(x @ w + b)
    d = 2 * h * (1 - h * h)
    return x.T @ d, d.sum(0), d @ w.T


# ---- argnums ------------------------------------------------------------------------------------
@mode_param
def test_argnums_int_gives_single_gradient(vg, wbx):
    w, b, x = wbx
    v, gw = vg(loss3, 0)(w, b, x)
    assert isinstance(gw, np.ndarray) and gw.shape == w.shape
    np.testing.assert_allclose(v, loss3(w, b, x), rtol=1e-13)
    np.testing.assert_allclose(gw, _ref_grads(w, b, x)[0], rtol=1e-12)
    _, gx = vg(loss3, 2)(w, b, x)
    np.testing.assert_allclose(gx, _ref_grads(w, b, x)[2], rtol=1e-12)
    _, gx_neg = vg(loss3, -1)(w, b, x)
    np.testing.assert_allclose(gx_neg, gx, rtol=1e-15)


@mode_param
def test_argnums_tuple_gives_tuple(vg, wbx):
    w, b, x = wbx
    _, g1 = vg(loss3, (0,))(w, b, x)
    assert isinstance(g1, tuple) and len(g1) == 1 and g1[0].shape == w.shape
    _, g = vg(loss3, (0, 1, 2))(w, b, x)
    assert isinstance(g, tuple) and [a.shape for a in g] == [w.shape, b.shape, x.shape]
    for got, ref in zip(g, _ref_grads(w, b, x)):
        np.testing.assert_allclose(got, ref, rtol=1e-12)
    _, (gx, gw) = vg(loss3, (2, 0))(w, b, x)  # order follows argnums
    np.testing.assert_allclose(gw, g[0], rtol=1e-13)
    np.testing.assert_allclose(gx, g[2], rtol=1e-13)


@mode_param
def test_bad_argnums(vg, wbx):
    with pytest.raises(jg.GradError, match="argnums"):
        vg(loss3, 3)(*wbx)


def test_repeated_argnums_traced():
    x = np.array([0.5, -1.0])
    graph = jg.make_graph(lambda x: np.sum(x * x), (0, 0), grad=True)(x).verify()
    _, (g1, g2) = jg.eval_graph(graph, x)
    np.testing.assert_array_equal(g1, 2 * x)
    np.testing.assert_array_equal(g2, 2 * x)


def test_repeated_argnums_eager():
    x = np.array([0.5, -1.0])
    _, (g1, g2) = jg.value_and_grad(lambda x: np.sum(x * x), (0, 0))(x)
    assert isinstance(g2, np.ndarray)
    np.testing.assert_array_equal(g1, 2 * x)
    np.testing.assert_array_equal(g2, 2 * x)


def test_grad_returns_only_gradients(wbx):
    w, b, x = wbx
    gw, gb = jg.grad(loss3, (0, 1))(w, b, x)
    ref = _ref_grads(w, b, x)
    np.testing.assert_allclose(gw, ref[0], rtol=1e-12)
    np.testing.assert_allclose(gb, ref[1], rtol=1e-12)
    g, aux = jg.grad(lambda w: (np.sum(w ** 2), w * 3.0), has_aux=True)(w)
    np.testing.assert_allclose(g, 2 * w)
    np.testing.assert_allclose(aux, 3 * w)


# ---- has_aux ------------------------------------------------------------------------------------
@mode_param
def test_has_aux(vg, wbx):
    w, b, x = wbx

    def f(w, b, x):
        h = np.tanh(x @ w + b)
        return np.sum(h ** 2), {"h": h, "stats": (np.mean(h), np.max(h))}

    (v, aux), (gw, gb) = vg(f, (0, 1), has_aux=True)(w, b, x)
    h = np.tanh(x @ w + b)
    np.testing.assert_allclose(v, np.sum(h ** 2), rtol=1e-13)
    assert set(aux) == {"h", "stats"} and isinstance(aux["stats"], tuple)
    assert isinstance(aux["h"], np.ndarray)  # concrete values, not recorded boxes
    np.testing.assert_allclose(aux["h"], h, rtol=1e-13)
    np.testing.assert_allclose(aux["stats"], [np.mean(h), np.max(h)], rtol=1e-13)
    ref = _ref_grads(w, b, x)
    np.testing.assert_allclose(gw, ref[0], rtol=1e-12)
    np.testing.assert_allclose(gb, ref[1], rtol=1e-12)


@mode_param
def test_has_aux_requires_a_pair(vg, wbx):
    with pytest.raises(jg.GradError, match="has_aux"):
        vg(loss3, 0, has_aux=True)(*wbx)


# ---- pytrees ------------------------------------------------------------------------------------
@mode_param
def test_pytree_arguments_get_same_structure(vg, rng):
    params = {
        "layers": [{"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)},
                   {"w": rng.standard_normal((2, 1)), "b": rng.standard_normal(1)}],
        "scale": (rng.standard_normal(()), [rng.standard_normal(1)]),
    }
    x = rng.standard_normal((4, 3))
    before = copy.deepcopy(params)

    def f(p, x):
        h = x
        for layer in p["layers"]:
            h = np.tanh(h @ layer["w"] + layer["b"])
        return np.sum(h ** 2) * p["scale"][0] + np.sum(p["scale"][1][0])

    v, g = vg(f, 0)(params, x)
    np.testing.assert_allclose(v, f(params, x), rtol=1e-13)
    assert isinstance(g, dict) and set(g) == {"layers", "scale"}
    assert isinstance(g["layers"], list) and len(g["layers"]) == 2
    assert isinstance(g["scale"], tuple) and isinstance(g["scale"][1], list)
    flat_p, tree_p = jg.tree_flatten(params)
    flat_g, tree_g = jg.tree_flatten(g)
    assert tree_p == tree_g
    assert [np.shape(a) for a in flat_p] == [np.shape(a) for a in flat_g]
    # finite-difference check of every leaf along one random direction
    eps = 1e-6
    vs = [rng.standard_normal(np.shape(a)) for a in flat_p]
    plus = jg.tree_unflatten(tree_p, [a + eps * d for a, d in zip(flat_p, vs)])
    minus = jg.tree_unflatten(tree_p, [a - eps * d for a, d in zip(flat_p, vs)])
    fd = (f(plus, x) - f(minus, x)) / (2 * eps)
    np.testing.assert_allclose(sum(np.sum(a * d) for a, d in zip(flat_g, vs)), fd, rtol=1e-6)
    # and the gradient of the whole pytree matches argnums over its parts (unused leaf: zeros)
    _, (g_tuple, gx) = vg(f, (0, 1))(params, x)
    for a, c in zip(jg.tree_flatten(g_tuple)[0], flat_g):
        np.testing.assert_allclose(a, c, rtol=1e-13)
    assert gx.shape == x.shape
    for a, c in zip(jg.tree_flatten(params)[0], jg.tree_flatten(before)[0]):
        np.testing.assert_array_equal(a, c)


# ---- Python scalars and integer arguments --------------------------------------------------------
@mode_param
def test_python_float_and_int_arguments(vg):
    x = np.array([1.0, 2.0, 3.0])

    def f(x, s, n):
        return np.sum(x ** n * s)

    v, (gx, gs) = vg(f, (0, 1))(x, 0.5, 2)
    assert v == pytest.approx(0.5 * 14.0)
    np.testing.assert_allclose(gx, 2 * 0.5 * x)
    assert float(gs) == pytest.approx(14.0)
    assert np.shape(gs) == () and np.asarray(gs).dtype == np.float64
    # a Python float argument alone
    v, g = vg(lambda s: s * s * 3.0, 0)(1.5)
    assert v == pytest.approx(6.75) and float(g) == pytest.approx(9.0)


@mode_param
def test_int_argument_in_argnums_raises(vg):
    x = np.array([1.0, 2.0])
    with pytest.raises(jg.GradError, match=r"argument 1\b.*int"):
        vg(lambda x, n: np.sum(x * n), (0, 1))(x, 3)
    with pytest.raises(jg.GradError, match=r"argument 0\b.*int64"):
        vg(lambda i: np.sum(i * 1.0))(np.arange(3))
    with pytest.raises(jg.GradError, match="argnums"):
        vg(lambda p: np.sum(p["a"] * p["i"]))({"a": x, "i": np.arange(2)})


@mode_param
def test_integer_index_arrays_as_inputs(vg, rng):
    E = rng.standard_normal((6, 3))
    idx = np.array([[0, 5], [5, 5], [2, 0]])
    w = rng.standard_normal(3)

    def f(E, w, idx):
        return np.sum(np.tanh(E[idx] @ w)) + np.sum(np.take(E, idx[0], axis=0))

    v, (gE, gw) = vg(f, (0, 1))(E, w, idx)
    np.testing.assert_allclose(v, f(E, w, idx), rtol=1e-13)
    t = np.tanh(E[idx] @ w)
    d = (1 - t * t)
    ref_E = np.zeros_like(E)
    np.add.at(ref_E, idx.ravel(), (d[..., None] * w).reshape(-1, 3))
    np.add.at(ref_E, idx[0], 1.0)
    np.testing.assert_allclose(gE, ref_E, rtol=1e-12)
    np.testing.assert_allclose(gw, np.einsum("ij,ijk->k", d, E[idx]), rtol=1e-12)
    # another index array of the same shape: the same graph / function gives the right answer
    idx2 = np.array([[1, 1], [1, 1], [1, 1]])
    v2, _ = vg(f, (0, 1))(E, w, idx2)
    np.testing.assert_allclose(v2, f(E, w, idx2), rtol=1e-13)


def test_traced_graph_is_reusable_for_new_values(rng, wbx):
    w, b, x = wbx
    graph = jg.make_graph(loss3, (0, 1), grad=True)(w, b, x).verify()
    for _ in range(3):
        args = (rng.standard_normal(w.shape), rng.standard_normal(b.shape), rng.standard_normal(x.shape))
        v, (gw, gb) = jg.eval_graph(graph, *args)
        v_e, (gw_e, gb_e) = jg.value_and_grad(loss3, (0, 1))(*args)
        np.testing.assert_allclose([v], [v_e], rtol=1e-13)
        np.testing.assert_allclose(gw, gw_e, rtol=1e-12)
        np.testing.assert_allclose(gb, gb_e, rtol=1e-12)


# ---- dtypes and weak typing ------------------------------------------------------------------------
@mode_param
def test_float32_inputs_give_float32_gradients(vg, wbx):
    w, b, x = (a.astype(np.float32) for a in wbx)
    v, grads = vg(loss3, (0, 1, 2))(w, b, x)
    assert np.asarray(v).dtype == np.float32
    for g, a in zip(grads, (w, b, x)):
        assert g.dtype == np.float32 and g.shape == a.shape
    ref = _ref_grads(*(a.astype(np.float64) for a in (w, b, x)))
    for g, r in zip(grads, ref):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


@mode_param
def test_mixed_precision_gradient_keeps_input_dtype(vg):
    x32 = np.array([1.0, 2.0], np.float32)
    y64 = np.array([3.0, 4.0])
    v, (gx, gy) = vg(lambda x, y: np.sum(x * y), (0, 1))(x32, y64)
    assert np.asarray(v).dtype == np.float64  # as in NumPy: float32 * float64 -> float64
    assert gx.dtype == np.float32 and gy.dtype == np.float64
    np.testing.assert_array_equal(gx, [3.0, 4.0])


@mode_param
def test_python_scalars_are_weak(vg):
    x = np.array([1.0, 2.0, 3.0], np.float32)

    def f(x, s):
        y = x * 0.5 + 1 - 2.0 * x / 3 + x ** 2 + np.maximum(x, 0.25) + np.where(x > 1.5, x, 0.0)
        return np.sum(y * s)

    assert f(x, 2.0).dtype == np.float32  # plain NumPy 2 agrees (NEP 50)
    v, (gx, gs) = vg(f, (0, 1))(x, 2.0)
    assert np.asarray(v).dtype == np.float32 and gx.dtype == np.float32
    np.testing.assert_allclose(v, f(x, 2.0), rtol=1e-6)
    assert np.asarray(gs).dtype == np.float64  # the Python float argument itself is float64


def test_weak_scalars_add_no_float64_nodes():
    x = np.ones((2, 3), np.float32)
    graph = jg.make_graph(lambda x: np.sum(x * 0.5 + 2) / 4, grad=True)(x).verify()
    text = str(graph)
    assert "f64" not in text and " = cast" not in text, text
    assert all(n.dtype == np.float32 for n in graph.nodes)


# ---- data-dependent control flow ------------------------------------------------------------------
def branchy(x):
    if np.sum(x) > 0:  # data-dependent branch
        return np.sum(x ** 2)
    return np.sum(np.sin(x))


BRANCH_LINE = inspect.getsourcelines(branchy)[1] + 1


def test_control_flow_eager_follows_both_branches():
    x = np.array([1.0, 2.0, -0.5])
    v, g = jg.value_and_grad(branchy)(x)
    assert v == pytest.approx(np.sum(x ** 2))
    np.testing.assert_allclose(g, 2 * x)
    v, g = jg.value_and_grad(branchy)(-x)
    assert v == pytest.approx(np.sum(np.sin(-x)))
    np.testing.assert_allclose(g, np.cos(-x))


def test_control_flow_eager_loops_and_python_values():
    def f(x):
        total = 0.0
        while float(np.max(x)) < 10.0:
            x = x * 2.0
            total = total + np.sum(x)
        n = int(np.argmax(np.array([1, 3, 2])))  # plain NumPy on non-recorded values is untouched
        return total * n + np.sum(x) * (len(x) if x.shape[0] == 3 else 0)

    x = np.array([1.0, 2.0, 3.0])
    v, g = jg.value_and_grad(f)(x)
    # max 3 -> 6 -> 12: two doublings
    assert v == pytest.approx((np.sum(2 * x) + np.sum(4 * x)) * 1 + np.sum(4 * x) * 3)
    np.testing.assert_allclose(g, np.full(3, 2.0 + 4.0 + 12.0))


def test_data_arguments_methods_take_recorded_operands():
    """`X.dot(W)` with X a plain array argument and W differentiated (CS231n's layers): NumPy's
    method converts W to an array, where no protocol sees it. Eager value_and_grad passes the
    arguments it does not differentiate as Buffers, whose `dot` records; they stay plain NumPy
    otherwise (an integer argument indexes, a row loop iterates, the caller's array is intact)."""
    rng = np.random.default_rng(3)
    X, W, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 2)), rng.standard_normal(2)
    idx = np.array([2, 0])
    keep = X.copy()

    def layer(params, X, idx, extra):
        h = X.reshape(X.shape[0], -1).dot(params["W"]) + params["b"]
        rows = sum(np.sum(r) for r in X)
        return np.sum(np.tanh(h[idx]) * extra["scale"]) + 0.0 * rows

    args = ({"W": W, "b": b}, X, idx, {"scale": np.array([1.0, 2.0])})
    v, g = jg.value_and_grad(layer)(*args)
    ev, eg = jg.jit_grad(layer, backend="python")(*args)
    assert v == pytest.approx(ev)
    np.testing.assert_allclose(g["W"], eg["W"], rtol=1e-12)
    np.testing.assert_allclose(g["b"], eg["b"], rtol=1e-12)
    np.testing.assert_array_equal(X, keep)
    assert type(X) is np.ndarray


def test_arrays_computed_from_made_arrays_take_traced_positions():
    """`x = np.ones(V) * 0.1; x[idx[t]] = 1`: an array computed (not viewed) from arrays the
    function made receives values at traced positions, as the made arrays do. A view of one
    cannot (the write would not reach its base): the error names the line and what to write."""
    rng = np.random.default_rng(5)
    W, idx = rng.standard_normal((4, 6)), np.array([1, 5, 2])

    def loss(W, idx):
        h = np.zeros(4)
        for t in range(3):
            x = np.ones(6) * 0.1
            x[idx[t]] = 1
            y = np.concatenate([np.zeros(2), np.full(4, 0.5)]) ** 2
            y[idx[t]] += W[0, t]
            h = np.tanh(W @ x + W @ y + h)
        return np.sum(h ** 2)

    v, g = jg.value_and_grad(loss)(W, idx)
    jv, jgr = jg.jit_grad(loss, backend="python")(W, idx)
    assert jv == pytest.approx(v, rel=1e-12)
    np.testing.assert_allclose(jgr, g, rtol=1e-12)
    eps = 1e-6
    e = np.zeros_like(W)
    e[0, 1] = eps
    assert g[0, 1] == pytest.approx((loss(W + e, idx) - loss(W - e, idx)) / (2 * eps), rel=1e-6)

    def row_view(W, idx):
        x = np.zeros((2, 6))
        row = x[1]
        row[idx[0]] = 1
        return np.sum(W @ x[1])
    with pytest.raises(jg.TracingError, match=r"row\[idx\[0\]\] = 1.*x\[1, i\] = v"):
        jg.jit_grad(row_view, backend="python")(W, idx)
    assert jg.value_and_grad(row_view)(W, idx)[0] == pytest.approx(np.sum(W[:, 1]))


@pytest.mark.parametrize("grad", [False, True])
def test_control_flow_traced_raises_tracing_error(grad):
    x = np.array([1.0, 2.0])
    with pytest.raises(jg.TracingError) as info:
        jg.make_graph(branchy, grad=grad)(x)
    msg = str(info.value)
    assert f"{os.path.basename(__file__)}:{BRANCH_LINE}" in msg, msg
    assert "if np.sum(x) > 0" in msg
    for hint in ("np.where", "jg.cond", "value_and_grad"):
        assert hint in msg, msg


def test_other_concrete_uses_raise_tracing_error():
    x = np.array([1.0, 2.0])
    for f in (lambda x: float(np.sum(x)), lambda x: np.sum(x).item(), lambda x: np.sum(x).tolist(),
              lambda x: int(x[0]), lambda x: [0, 1, 2][x[0]]):
        with pytest.raises(jg.TracingError, match="value_and_grad"):
            jg.make_graph(f)(x)


# ---- errors ---------------------------------------------------------------------------------------
@mode_param
def test_non_scalar_output_raises_grad_error(vg):
    with pytest.raises(jg.GradError, match=r"shape \(3,\)"):
        vg(lambda x: x * 2.0)(np.ones(3))
    with pytest.raises(jg.GradError, match="scalar"):
        vg(lambda x: np.sum(x, axis=0, keepdims=True))(np.ones((2, 2)))
    with pytest.raises(jg.GradError, match="floating"):
        vg(lambda x: np.sum(x) > 0)(np.ones(3))


@pytest.mark.parametrize("mode", ["eager", "traced", "make_graph"])
def test_incompatible_broadcast_raises_shape_error(mode):
    x, y = np.ones((3, 4)), np.ones(3)
    f = lambda x, y: np.sum(x + y)  # noqa: E731
    with pytest.raises(jg.ShapeError) as info:
        if mode == "eager":
            jg.value_and_grad(f)(x, y)
        elif mode == "traced":
            jg.make_graph(f, grad=True)(x, y)
        else:
            jg.make_graph(f)(x, y)
    assert "(3, 4)" in str(info.value) and "(3,)" in str(info.value)
    assert isinstance(info.value, ValueError)  # a ShapeError is also a ValueError, like NumPy's


@pytest.mark.parametrize("mode", ["eager", "traced"])
def test_other_shape_errors(mode):
    run = (lambda f, *a: jg.value_and_grad(f)(*a)) if mode == "eager" else \
        (lambda f, *a: jg.make_graph(f)(*a))
    with pytest.raises(jg.ShapeError, match=r"\(2, 3\).*\(4, 5\)|not aligned"):
        run(lambda a, b: np.sum(a @ b), np.ones((2, 3)), np.ones((4, 5)))
    with pytest.raises(jg.ShapeError, match="reshape"):
        run(lambda a: np.sum(np.reshape(a, (4, 2))), np.ones((2, 3)))
    with pytest.raises(jg.ShapeError, match="axis"):
        run(lambda a: np.sum(a, axis=2), np.ones((2, 3)))


@pytest.mark.parametrize("mode", ["eager", "traced"])
def test_unsupported_functions_raise_not_supported(mode):
    run = (lambda f: jg.value_and_grad(f)(np.ones(4))) if mode == "eager" else \
        (lambda f: jg.make_graph(f)(np.ones(4)))
    if mode == "traced":     # eagerly, np.unique of the recorded values is NumPy's
        with pytest.raises(jg.NotSupportedError, match=r"np\.unique of a traced value: its result's size"):
            run(lambda x: np.sum(np.unique(x)))
    with pytest.raises(jg.NotSupportedError, match=r"np\.gcd is not supported"):
        run(lambda x: np.sum(np.gcd(x.astype(np.int64), 6)))
    with pytest.raises(jg.NotSupportedError, match=r"np\.spacing is not supported"):
        run(lambda x: np.sum(np.spacing(x)))
    with pytest.raises(jg.NotSupportedError, match=r"np\.multiply\.reduceat is not supported"):
        run(lambda x: np.sum(np.multiply.reduceat(x, [0, 2])))
    if mode == "traced":     # eagerly, the mask's value is known: NumPy's result
        with pytest.raises(jg.NotSupportedError, match="traced boolean mask.*np.where"):
            run(lambda x: np.sum(x[x > 0][:2]))      # (x[x > 0] reduced is supported)
    outside = np.empty(4)       # made outside the function (out= into an array it made works)
    with pytest.raises(jg.NotSupportedError, match="out="):
        run(lambda x: np.sum(np.add(x, 1.0, out=outside)))
    # NotSupportedError is also a NotImplementedError and a JitgraphError
    assert issubclass(jg.NotSupportedError, NotImplementedError)
    assert issubclass(jg.NotSupportedError, jg.JitgraphError)


def test_unsupported_error_names_user_line():
    def f(x):
        return np.sum(np.spacing(x))  # the offending line

    line = inspect.getsourcelines(f)[1] + 1
    with pytest.raises(jg.NotSupportedError) as info:
        jg.make_graph(f)(np.ones(2))
    assert f"{os.path.basename(__file__)}:{line}" in str(info.value)


# ---- inputs are never modified ------------------------------------------------------------------------
INPLACE_CASES = [
    lambda x, y, i: np.sum(x * y),
    lambda x, y, i: np.sum(x[i] ** 2) + np.sum(x[::-1, 1:] * 2.0),
    lambda x, y, i: np.sum(np.concatenate([x, y[None, :]]) ** 2),
    lambda x, y, i: np.sum(np.maximum(x, y) + np.clip(x, -0.1, 0.1)),
    lambda x, y, i: np.sum(np.reshape(x, -1)) + np.sum(x.T @ x) + jg.logsumexp(y),
    lambda x, y, i: np.sum(np.take(x, i, axis=0) * y),
    lambda x, y, i: np.mean(x) + np.var(y) + np.sum(np.broadcast_to(y, x.shape) * x),
]


@pytest.mark.parametrize("case", range(len(INPLACE_CASES)))
@pytest.mark.parametrize("vg", list(MODES.values()), ids=list(MODES))
def test_inputs_are_not_modified(vg, case, rng):
    f = INPLACE_CASES[case]
    x, y, i = rng.standard_normal((4, 3)), rng.standard_normal(3), np.array([0, 3, 3, 1])
    copies = [a.copy() for a in (x, y, i)]
    v, grads = vg(f, (0, 1))(x, y, i)
    for a, c in zip((x, y, i), copies):
        np.testing.assert_array_equal(a, c)
    # the inputs' flags are untouched too (no freezing of the caller's arrays)
    assert x.flags.writeable and y.flags.writeable and i.flags.writeable
    np.testing.assert_allclose(v, f(x, y, i), rtol=1e-12)


# Results own their memory: a gradient is never a read-only broadcast view, nor (in traced
# mode, where mul-by-1 and broadcasts of an input fold away) a view of a caller's input.
def test_eager_gradients_are_writable_arrays():
    g = jg.grad(lambda x: np.sum(x))(np.ones(3))
    g *= 0.5  # e.g. scaling by a learning rate in place
    np.testing.assert_array_equal(g, [0.5, 0.5, 0.5])


def test_traced_gradients_do_not_alias_inputs():
    x, y = np.ones((4, 3)), np.arange(3.0)
    graph = jg.make_graph(lambda x, y: np.sum(x * y), (0, 1), grad=True)(x, y)
    _, (gx, gy) = jg.eval_graph(graph, x, y)
    assert not np.shares_memory(gx, y)
    y *= -2.0
    np.testing.assert_array_equal(gx, np.broadcast_to(np.arange(3.0), (4, 3)))


# ---- graph printing and verification ------------------------------------------------------------------
def test_graph_str_is_readable(wbx):
    w, b, x = wbx
    graph = jg.make_graph(loss3, (0, 1), grad=True)(w, b, x)
    text = str(graph)
    lines = text.splitlines()
    assert lines[0] == "{ lambda a:f64[4,3] b:f64[3] c:f64[5,4] ."
    assert lines[-1].startswith("  in (") and lines[-1].endswith(") }")
    body = [ln for ln in lines[1:-1] if not ln.strip().startswith("#")]
    non_inputs = [n for n in graph.nodes if n.op != "input"]
    assert len(body) == len(non_inputs)  # one line per node
    assert sum("# ---- backward" in ln for ln in lines) == 1
    for ln, node in zip(body, non_inputs):
        assert ln.startswith("    ")
        lhs, rhs = ln.strip().split(" = ", 1)
        assert lhs.endswith(":" + type_str(node.shape, node.dtype))
        assert rhs.split()[0].split("[")[0] == node.op
    assert "    d:f64[5,3] = matmul c a\n" in text
    assert "    e:f64[5,3] = broadcast[shape=(5, 3)] b\n" in text
    assert "reduce_sum[axes=(0, 1)]" in text
    assert repr(graph) == text
    # a scalar graph and an integer graph print their types
    g2 = jg.make_graph(lambda i, s: i * 2 + s)(np.arange(3, dtype=np.int32), 1.5)
    assert "a:i32[3] b:f64[]" in str(g2)


def test_verify_passes_on_traced_graphs(wbx):
    w, b, x = wbx
    for f, args, kw in [
        (loss3, (w, b, x), dict(argnums=(0, 1, 2), grad=True)),
        (lambda x: (x[::-1, None] * 2, np.sum(x, axis=0)), (x,), {}),
        (lambda x: np.sum(jg.softmax(x) ** 2 + np.take(x, [0, 0], axis=1)[:, :1]), (x,), dict(grad=True)),
        (lambda p: np.sum(np.stack([p["a"], p["a"] * 2]) @ p["b"]), ({"a": w, "b": b},), dict(grad=True)),
    ]:
        graph = jg.make_graph(f, **kw)(*args)
        assert graph.verify() is graph


def _fresh_graph(wbx):
    return jg.make_graph(loss3, (0, 1), grad=True)(*wbx).verify()


def test_verify_rejects_a_wrong_shape(wbx):
    graph = _fresh_graph(wbx)
    node = next(n for n in graph.nodes if n.op == "tanh")
    node.shape = (5, 4)
    with pytest.raises(JitgraphError, match="tanh"):
        graph.verify()


def test_verify_rejects_a_wrong_dtype(wbx):
    graph = _fresh_graph(wbx)
    node = next(n for n in graph.nodes if n.op == "matmul")
    node.dtype = np.dtype(np.float32)
    with pytest.raises(JitgraphError, match="f32"):
        graph.verify()


def test_verify_rejects_bad_order_unknown_op_and_bad_const(wbx):
    graph = _fresh_graph(wbx)
    k = next(i for i, n in enumerate(graph.nodes) if n.op == "tanh")
    graph.nodes[k], graph.nodes[k - 1] = graph.nodes[k - 1], graph.nodes[k]
    with pytest.raises(JitgraphError, match="before it is defined"):
        graph.verify()

    graph = _fresh_graph(wbx)
    next(n for n in graph.nodes if n.op == "tanh").op = "no_such_op"
    with pytest.raises(JitgraphError, match="unknown op"):
        graph.verify()

    graph = _fresh_graph(wbx)
    const = next(n for n in graph.nodes if n.op == "const")
    const.value = np.ones(2)
    with pytest.raises(JitgraphError, match="const"):
        graph.verify()

    graph = _fresh_graph(wbx)
    graph.nodes.append(graph.nodes[-1])
    with pytest.raises(JitgraphError, match="twice"):
        graph.verify()

    a = Node("input", (), {"index": 0}, (2,), np.float64)
    stray = Node("input", (), {"index": 1}, (2,), np.float64)
    with pytest.raises(JitgraphError, match="not among the graph inputs"):
        Graph([a], [Node("add", (a, stray), {}, (2,), np.float64)]).verify()


# ---- which nodes get adjoints ---------------------------------------------------------------------------
def seed_loss(w, x, b, y):
    return (w * x + b - y) ** 2


def test_seed_example_backward_never_reads_y():
    args = (np.float64(1.5), np.float64(2.0), np.float64(0.5), np.float64(1.0))
    graph = jg.make_graph(seed_loss, argnums=(0, 2), grad=True)(*args).verify()
    w_in, x_in, b_in, y_in = graph.inputs
    backward = [n for n in graph.nodes if n.id in graph.adjoint_ids]
    assert backward, "the joint graph has backward nodes"
    assert all(y_in not in n.inputs for n in backward)
    assert all(b_in not in n.inputs and w_in not in n.inputs for n in backward)
    # exactly one backward use of x: the factor x in dL/dw
    assert sum(x_in in n.inputs for n in backward) == 1
    value, (gw, gb) = jg.eval_graph(graph, *args)
    assert (value, gw, gb) == (6.25, 10.0, 5.0)


@mode_param
def test_gradient_through_unused_or_nondiff_paths(vg):
    x = np.array([0.3, -0.7])
    # w does not reach the loss: zero gradient of the right shape and dtype
    v, (gx, gw) = vg(lambda x, w: np.sum(np.sin(x)), (0, 1))(x, np.ones((2, 2), np.float32))
    np.testing.assert_allclose(gx, np.cos(x))
    assert gw.shape == (2, 2) and gw.dtype == np.float32 and not np.any(gw)
    # jg.stop_gradient cuts the path
    v, g = vg(lambda x: np.sum(x * jg.stop_gradient(x)))(x)
    np.testing.assert_allclose(g, x)


def test_nondiff_branch_gets_no_adjoint():
    """d/dw sum(w * sin(x) + exp(x)): nothing of sin's or exp's derivative is computed."""
    w, x = np.array([1.0, 2.0]), np.array([0.1, 0.2])
    graph = jg.make_graph(lambda w, x: np.sum(w * np.sin(x) + np.exp(x)), 0, grad=True)(w, x).verify()
    backward = [n for n in graph.nodes if n.id in graph.adjoint_ids]
    ops = {n.op for n in backward}
    assert not ops & {"cos", "exp", "sin"}, ops
    x_in = graph.inputs[1]
    assert all(x_in not in n.inputs for n in backward)
    sin_node = next(n for n in graph.nodes if n.op == "sin")
    assert sin_node.id not in graph.adjoint_ids
    # the only forward value the backward pass reads is sin(x), the factor of w (here it is the
    # gradient itself: the adjoint 1 * sin(x) simplifies to sin(x))
    forward_reads = {i.id for n in backward for i in n.inputs if i.id not in graph.adjoint_ids}
    assert forward_reads <= {sin_node.id}
    assert graph.outputs[1] is sin_node or sin_node.id in forward_reads
    _, g = jg.eval_graph(graph, w, x)
    np.testing.assert_allclose(g, np.sin(x))


def test_graph_without_grad_outputs_structure(rng):
    x = rng.standard_normal((2, 3))
    graph = jg.make_graph(lambda x: {"s": np.sum(x), "t": (x.T, x[0])})(x).verify()
    assert not graph.adjoint_ids
    out = jg.eval_graph(graph, x)
    assert set(out) == {"s", "t"}
    np.testing.assert_allclose(out["s"], np.sum(x))
    np.testing.assert_array_equal(out["t"][0], x.T)
    np.testing.assert_array_equal(out["t"][1], x[0])


# ---- many scalar arguments; constant folding --------------------------------------------------
def _pick_rows(W, idx, ts):
    out = 0.0
    for t in range(len(idx)):
        out = out + ts[t] * np.sum(np.tanh(W[idx[t]]))
    return out


def test_many_scalar_arguments_are_one_array_input():
    """A list of 20 Python ints (and one of floats) traces as one array input each; the
    compiled call packs them, and other values of the same signature give their results."""
    rng = np.random.default_rng(2)
    W = rng.standard_normal((7, 3)).astype(np.float32)
    idx = [int(i) for i in rng.integers(-7, 7, 20)]
    ts = [float(t) for t in rng.standard_normal(20)]
    graph = jg.make_graph(_pick_rows, grad=True)(W, idx, ts)
    assert [(n.shape, n.dtype) for n in graph.inputs] == [((7, 3), np.float32), ((20,), np.int64),
                                                          ((20,), np.float64)]
    f = jg.jit_grad(_pick_rows, wait=True)
    for k in range(2):
        v, g = f(W, idx, ts)
        ev, eg = jg.value_and_grad(_pick_rows)(W, idx, ts)
        # Python floats stay weak: the float32 program stays float32, as in NumPy
        assert np.asarray(v).dtype == np.float32 == g.dtype
        np.testing.assert_allclose(v, ev, rtol=1e-5)
        np.testing.assert_allclose(g, eg, rtol=1e-5, atol=1e-6)
        idx, ts = idx[::-1], [2 * t for t in ts]
    assert f.cache_info().traces == 1
    # differentiated scalars stay scalars (their gradients are scalars)
    graph = jg.make_graph(_pick_rows, argnums=2, grad=True)(W, idx, ts)
    assert len(graph.inputs) == 2 + 20


def test_ops_of_constants_fold_when_tracing():
    """A one-hot vector set in np.zeros at a position known when tracing is a constant; a
    broadcast constant stays a broadcast of its value."""
    def f(x):
        e = np.zeros_like(x)
        e[2] = 1.0
        return np.sum(x * e) + np.sum(x * (np.zeros_like(x) + 2.0))
    graph = jg.make_graph(f, grad=True)(np.arange(5.0))
    ops = {n.op for n in graph.nodes}
    assert not ops & {"scatter_set", "update_slice"}
    assert all(n.value.size <= 5 for n in graph.nodes if n.op == "const")
    assert jg.value_and_grad(f)(np.arange(5.0))[0] == 2.0 + 20.0
    np.testing.assert_allclose(jg.eval_graph(graph, np.arange(5.0))[1], [2, 2, 3, 2, 2])


def test_constants_are_snapshots_and_equal_ones_are_one_node():
    """A plain array written into after a traced value used it: the recorded constant is what it
    held then, as NumPy computed (it had aliased the array, and the later write changed it).
    Equal constants are one node, so equal work on them is shared: two convolutions of one
    signal gather its windows once."""
    x = np.ones(2)

    def written_after_use(x):
        c = np.array([1.0, 2.0])
        y = x * c
        c[0] = 100.0
        d = np.arange(2.0) + 1
        z = x * d
        d += 10
        return np.sum(y + x * c + z + x * d)

    assert jg.jit(written_after_use, backend="python")(x) == pytest.approx(written_after_use(x))
    assert jg.value_and_grad(written_after_use)(x)[0] == pytest.approx(written_after_use(x))

    def two_filters(s, k):
        return np.sum(np.convolve(s, k[:, 0]) * np.convolve(s, k[:, 1]))
    s, k = np.random.default_rng(0).standard_normal(3000), np.ones((30, 2))
    graph = jg.jit(two_filters).lower(s, k).graph
    assert [n.op for n in graph.nodes].count("gather") == 1
    assert jg.jit(two_filters, backend="python")(s, k) == pytest.approx(two_filters(s, k), rel=1e-12)


def test_folded_zeros_keep_their_signs_and_like_functions_take_shape():
    def f(x):
        c = (np.zeros_like(x) + np.array([1.0, -1.0, 2.0, -2.0])) * 0.0      # [0, -0, 0, -0]
        return np.arctan(1.0 / c) * x
    x = np.ones(4)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(jg.jit(f, wait=True)(x), f(x))

    def g(x):
        return (np.sum(np.ones_like(x, shape=(5,))) + np.sum(np.full_like(x, 2.0, shape=(2, 3)) * x[0])
                + np.zeros_like(x, shape=3, dtype=np.float32).sum())
    x = np.arange(1.0, 4.0)
    v, grad = jg.value_and_grad(g)(x)
    assert v == g(x) == 17.0 and np.array_equal(grad, [12.0, 0.0, 0.0])
    graph = jg.make_graph(g, grad=True)(x)
    assert jg.eval_graph(graph, x)[0] == 17.0


def test_a_mask_made_of_constants_selects_as_numpy_does():
    """A mask folded to a constant when tracing is a known selection, not a run-time mask."""
    def f(x):
        e = np.ones_like(x) * 2
        m = (np.zeros_like(x, dtype=np.int64) + np.arange(x.shape[0])) % 2 == 1
        e[~m] *= x[~m]
        return np.sum(e * x) + np.sum(x[m] ** 2)
    x = np.arange(1.0, 7.0)
    v, g = jg.jit_grad(f, wait=True)(x)
    ev, eg = jg.value_and_grad(f)(x)
    assert v == f(x) == ev
    np.testing.assert_allclose(g, eg)


def test_a_compiled_gradient_inside_an_eager_one_takes_its_data_arguments():
    """Eager value_and_grad passes an undifferentiated array as a Buffer; a jit_grad called
    inside it that differentiates that argument takes it (it raised TypeError)."""
    def inner(W, U):
        return np.sum(np.tanh(W @ U))
    ji = jg.jit_grad(inner, argnums=(0, 1), wait=True)

    def outer(W, U):
        v, (gW, gU) = ji(W, U)
        return v + np.sum(gW ** 2) + np.sum(gU)
    rng = np.random.default_rng(5)
    W, U = 0.3 * rng.standard_normal((3, 3)), rng.standard_normal((3, 2))
    v, g = jg.value_and_grad(outer)(W, U)
    np.testing.assert_allclose(v, outer(W, U), rtol=1e-12)
    eps = 1e-6
    E = np.zeros_like(W)
    E[1, 2] = eps
    np.testing.assert_allclose(g[1, 2], (outer(W + E, U) - outer(W - E, U)) / (2 * eps), rtol=1e-6)


def test_an_element_read_is_a_copy_not_a_view():
    """`old = y[i]` reads a scalar, a copy in NumPy: writing y[i] afterwards leaves `old` alone
    (the swap idiom, a loop keeping the previous element); a row `y[0]` of a 2-d y stays a view."""
    def keep_old(x):
        y = x.copy()
        old = y[0]
        y[0] = 10.0
        y[0], y[1] = y[1], y[0]
        prev, total = y[2], 0.0
        for i in range(3):
            y[2] = y[2] * 0.5 + x[i]
            total = total + prev * y[2]
            prev = y[2]
        m = np.stack([x, x]).copy()
        row = m[0]
        m[0, 1] = 7.0
        return old * 3.0 + np.sum(y * np.array([1.0, 2.0, 3.0])) + total + np.sum(row)

    x = np.array([1.0, 2.0, 3.0])
    for run in (jg.value_and_grad(keep_old), jg.jit_grad(keep_old, backend="python")):
        v, g = run(x)
        assert v == pytest.approx(keep_old(x), rel=1e-12)
        eps, fd = 1e-6, []
        for i in range(3):
            e = np.zeros(3)
            e[i] = eps
            fd.append((keep_old(x + e) - keep_old(x - e)) / (2 * eps))
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_ufunc_out_into_an_array_the_function_made():
    """np.multiply(x, 2, out=y) with y = np.zeros(3): y takes the recorded result (it was refused as
    a write into a NumPy array)."""
    def f(x):
        y = np.zeros(3)
        np.multiply(x, 2, out=y)
        z = np.empty(3)
        np.exp(y, out=z)
        np.add(z, 1.0, out=z)
        return np.sum(y * x) + np.sum(z)

    x = np.array([0.1, 0.2, 0.3])
    want = 4 * x + 2 * np.exp(2 * x)
    for run in (jg.value_and_grad(f), jg.jit_grad(f, backend="python")):
        v, g = run(x)
        assert v == pytest.approx(f(x), rel=1e-12)
        np.testing.assert_allclose(g, want, rtol=1e-12)


def test_eager_conversions_to_python_numbers_warn_that_the_gradient_is_cut():
    """float(np.sum(x ** 2)) or x[0].item() * ... eagerly: the value is right, the gradient
    through the conversion is lost, and a GradientCutWarning names the line; control flow on
    recorded values (comparisons, int() of an index) says nothing."""
    import warnings
    x = np.array([1.0, 2.0, 3.0])
    with pytest.warns(jg.GradientCutWarning, match=r"float\(\) of a recorded value"):
        v, g = jg.value_and_grad(lambda x: float(np.sum(x ** 2)) ** 0.5)(x)
    assert v == pytest.approx(14.0 ** 0.5) and not g.any()
    with pytest.warns(jg.GradientCutWarning, match=r"\.item\(\)"):
        jg.value_and_grad(lambda x: x[0].item() * np.sum(x))(x)

    def control(x):
        y = x
        while np.max(y) < 10.0:
            y = y * 2.0
        return np.sum(y) * int(np.argmax(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error", jg.GradientCutWarning)
        v, g = jg.value_and_grad(control)(x)
    assert v == pytest.approx(control(x))
    np.testing.assert_allclose(g, [8.0, 8.0, 8.0])


def _check_against_differences(f, x, rel):
    """Value (to `rel`) and gradient (against central differences) eagerly and traced."""
    want = [(f(x + e) - f(x - e)) / 2e-6 for e in np.eye(len(x)) * 1e-6]
    for run in (jg.value_and_grad(f), jg.jit_grad(f, backend="python")):
        v, g = run(x)
        assert v == pytest.approx(f(x), rel=rel)
        np.testing.assert_allclose(g, want, rtol=1e-7)


def test_math_functions_of_recorded_values_run_as_numpy():
    """math.exp(x[0]) & co. from the user's code: a recorded 0-d value (eagerly the gradient
    flows, traced it traces); Python's errors where the value is known; a name imported from
    math before the recording is Python's function."""
    import math
    from math import sqrt as python_sqrt

    def f(x):
        return (math.exp(-x[0]) + math.log(x[1], 2) + math.sqrt(x[2]) * math.atan2(x[0], x[1])
                + math.lgamma(x[2]) + math.pow(x[1], 1.5) + math.tanh(x[0])) * np.sum(x)

    x = np.array([0.3, 1.7, 2.2])
    _check_against_differences(f, x, rel=1e-13)
    for bad, error in ((lambda x: math.sqrt(x[0] - 1.0), ValueError), (lambda x: math.log(x[0] - x[0]), ValueError),
                       (lambda x: math.exp(x[0] * 1e4), OverflowError), (lambda x: math.sqrt(x), TypeError)):
        with pytest.raises(error):
            jg.value_and_grad(lambda x: bad(x) * np.sum(x))(x)
    with pytest.warns(jg.GradientCutWarning):
        v, g = jg.value_and_grad(lambda x: python_sqrt(x[0]) * np.sum(x))(x)
    assert g.tolist() == [python_sqrt(0.3)] * 3
    assert math.sqrt(4.0) == 2.0 and math.sqrt.__module__ == "math"       # Python's again


def test_math_floor_ceil_trunc_of_recorded_values():
    import math
    f = lambda x: np.sum(x * math.floor(x[0])) + math.ceil(x[1]) * x[2] + math.trunc(-x[1]) * 1.0
    x = np.array([1.5, 2.2, -0.7])
    for run in (jg.value_and_grad(f), jg.jit_grad(f, backend="python")):
        v, g = run(x)
        assert v == f(x) and g.tolist() == [1.0, 1.0, 4.0]
    with pytest.raises(TypeError, match="length-1"):
        jg.value_and_grad(lambda x: math.floor(x) * 1.0)(x)


def test_lists_of_recorded_values_in_linalg_and_fft_functions():
    f = lambda x: (np.linalg.det([[x[0], x[1]], [x[2], 1.0]]) + np.fft.fft([x[0], x[1]]).real.sum()
                   + np.linalg.inv([[x[0], 0.5], [x[1], 2.0]]).sum())
    _check_against_differences(f, np.array([1.0, 2.0, 3.0]), rel=1e-14)
    assert np.linalg.det.__module__ == "numpy.linalg" and np.fft.fft.__module__ == "numpy.fft"   # NumPy's again


def test_maximum_and_minimum_at_match_numpy():
    """np.maximum.at / np.minimum.at: integers, NaN (it propagates, as NumPy's), repeated and
    tuple indices, eager and compiled; a ufunc with no .at support names the supported ones."""
    def run(ufunc, a, key, v):
        o = a.copy()
        ufunc.at(o, key, v)
        return o

    cases = [(np.minimum, np.arange(6), np.array([1, 1, 3, 5]), np.array([-3, 7, 2, 9])),
             (np.maximum, np.arange(6, dtype=np.int32), np.array([0, 0, 2]), np.array([9, 4, 1], np.int32)),
             (np.minimum, np.arange(6.0), np.array([1, 1, 3, 3]), np.array([np.nan, -1.0, 2.0, -5.0])),
             (np.maximum, np.arange(6.0), np.array([2, 2, 4]), np.array([1.0, np.nan, 7.0])),
             (np.maximum, np.zeros((3, 3)), (np.array([0, 1, 1]), np.array([2, 0, 0])), np.array([1.0, 5.0, 3.0])),
             (np.minimum, np.ones((3, 4)), np.array([2, 0, 2]), -np.arange(12.0).reshape(3, 4))]
    with np.errstate(invalid="ignore"):
        for ufunc, a, key, v in cases:
            want = run(ufunc, a, key, v)
            got = jg.jit(lambda a, v: run(ufunc, a, key, v))(a, v)
            np.testing.assert_array_equal(got, want)
            assert got.dtype == want.dtype
            got = jg.jit(lambda a, v: run(ufunc, a, key, v), backend="python")(a, v)
            np.testing.assert_array_equal(got, want)
    with pytest.raises(jg.NotSupportedError, match="np.maximum.at and np.minimum.at are"):
        jg.jit(lambda a, v: run(np.multiply, a, np.array([0, 0]), v))(np.ones(3), np.ones(2))
