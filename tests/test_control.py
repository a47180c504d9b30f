"""Structured control flow (cond, fori_loop, scan, while_loop) and higher-order derivatives."""
import numpy as np
import pytest

import jitgraph as jg
from jitgraph.codegen import emit_cpu
from jitgraph.ops import control
from optable import TABLE, diff_argnums, make_args

pytestmark = pytest.mark.xdist_group("control")


def fd_grad(f, x, eps=1e-6):
    """Central differences of scalar f at x (float64)."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def assert_close(a, b, rtol=1e-12, atol=1e-13):
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


# ---- cond ------------------------------------------------------------------------------------------
def f_cond(x, w):
    s = np.sum(x * w)
    y = jg.cond(s > 0, lambda a: np.sin(a) * w, lambda a: np.cos(a) + w * w, x)
    return np.sum(y ** 2)


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_cond_takes_either_branch_in_one_compiled_graph(backend):
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal(4), rng.standard_normal(4)
    f = jg.jit_grad(f_cond, argnums=(0, 1), backend=backend)
    for xx in (x, -x):         # the two calls take different branches
        v, (gx, gw) = f(xx, w)
        v_ref, (gx_ref, gw_ref) = jg.value_and_grad(f_cond, argnums=(0, 1))(xx, w)
        assert_close(v, v_ref)
        assert_close(gx, gx_ref)
        assert_close(gw, gw_ref)
        assert_close(gx, fd_grad(lambda t: f_cond(t, w), xx), rtol=1e-7, atol=1e-8)
    assert f.cache_info().traces == 1
    text = str(f.lower(x, w).graph)
    assert "cond[" in text and text.count("{ lambda") >= 3


def test_cond_branch_mismatch_names_both():
    def bad(x):
        return jg.cond(np.sum(x) > 0, lambda a: a, lambda a: np.sum(a), x)

    with pytest.raises(jg.ShapeError, match=r"true_fun .* float64\[3\] but false_fun .* float64\[\]"):
        jg.jit(bad, backend="python")(np.ones(3))


def test_cond_outside_a_trace_is_python():
    assert jg.cond(True, lambda a: a + 1, lambda a: a - 1, 1.0) == 2.0
    v, g = jg.value_and_grad(lambda x: jg.cond(x > 0, np.sin, np.cos, x))(0.5)
    assert g == pytest.approx(np.cos(0.5))


def test_constructs_outside_a_trace_never_touch_the_tracer(monkeypatch):
    """Plain NumPy and eager tapes run the constructs as Python statements: bodies may use
    functions jitgraph does not support, and nothing is traced."""
    def no_tracing(*a, **k):
        raise AssertionError("traced a body outside a trace")
    monkeypatch.setattr(control, "trace_subgraph", no_tracing)
    carry, ys = jg.scan(lambda c, x: (c + np.linalg.det(np.eye(2) * x), c), 0.0, np.arange(3.0))
    assert carry == pytest.approx(0.0 + 1.0 + 4.0) and np.allclose(ys, [0.0, 0.0, 1.0])
    xs = np.array([3, 1, 3, 2])
    assert jg.cond(len(np.unique(xs)) == 3, lambda v: v * 2, lambda v: v, 1.5) == 3.0
    assert jg.fori_loop(0, 3, lambda i, v: v + len(np.unique(xs[:i + 1])), 0) == 1 + 2 + 2
    assert jg.while_loop(lambda v: v < np.median(xs) * 10, lambda v: v * 2, 1) == 32
    # eagerly, the recorded values decide, as Python control flow does
    def loss(x):
        y = jg.fori_loop(0, 3, lambda i, v: v * np.sin(v) + i, x)
        return jg.cond(y > 0, lambda a: a ** 2, lambda a: -a, y)

    def python_loss(x):
        y = x
        for i in range(3):
            y = y * np.sin(y) + i
        return y ** 2 if y > 0 else -y

    v, g = jg.value_and_grad(loss)(0.7)
    eps = 1e-6
    assert v == pytest.approx(python_loss(0.7))
    assert g == pytest.approx((python_loss(0.7 + eps) - python_loss(0.7 - eps)) / (2 * eps), rel=1e-6)


# ---- loops -----------------------------------------------------------------------------------------
def euler(k, y0, steps=200, dt=0.01):
    """Explicit Euler for dy/dt = -k y + sin(t), differentiated w.r.t. k and y0."""
    def body(i, y):
        return y + dt * (-k * y + np.sin(dt * i))
    return np.sum(jg.fori_loop(0, steps, body, y0) ** 2)


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_fori_loop_gradient_is_a_real_loop(backend):
    k, y0 = np.array([0.5, 1.5, 2.0]), np.array([1.0, -2.0, 0.5])
    f = jg.jit_grad(euler, argnums=(0, 1), backend=backend)
    v, (gk, gy) = f(k, y0)
    v_ref, (gk_ref, gy_ref) = jg.value_and_grad(euler, argnums=(0, 1))(k, y0)   # Python loop
    assert_close(v, v_ref)
    assert_close(gk, gk_ref)
    assert_close(gy, gy_ref)
    assert_close(gk, fd_grad(lambda t: euler(t, y0), k), rtol=1e-6, atol=1e-8)
    low = f.lower(k, y0)
    assert "for " in low.source and "range(n" in low.source       # trip count is not unrolled
    assert low.source.count("np.sin") <= 4


def f_scan(w, xs):
    def body(c, x):
        c = np.tanh(c * w + x)
        return c, np.sum(c * c)
    c, ys = jg.scan(body, np.zeros(3), xs)
    return np.sum(c) + np.sum(ys * np.arange(1.0, 1 + xs.shape[0]))


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_scan_gradients(backend):
    rng = np.random.default_rng(2)
    w, xs = rng.standard_normal(3), rng.standard_normal((7, 3))
    v, (gw, gxs) = jg.jit_grad(f_scan, argnums=(0, 1), backend=backend)(w, xs)
    v_ref, (gw_ref, gxs_ref) = jg.value_and_grad(f_scan, argnums=(0, 1))(w, xs)
    assert_close(v, v_ref)
    assert_close(gw, gw_ref)
    assert_close(gxs, gxs_ref)
    assert_close(gw, fd_grad(lambda t: f_scan(t, xs), w), rtol=1e-6, atol=1e-8)


def test_scan_reverse_and_pytree_carry():
    def f(a, xs):
        def body(c, x):
            h, s = c
            h = np.sin(h * a + x["u"]) + x["v"]
            return (h, s + np.sum(h)), h[0]
        (h, s), ys = jg.scan(body, (np.ones(2), 0.0), {"u": xs, "v": xs[:, ::-1]}, reverse=True)
        return s + np.sum(ys * ys) + np.sum(h)

    a, xs = np.array([0.3, -0.7]), np.linspace(-1, 1, 10).reshape(5, 2)
    v, g = jg.jit_grad(f, argnums=(0, 1), backend="python")(a, xs)
    v_ref, g_ref = jg.value_and_grad(f, argnums=(0, 1))(a, xs)
    assert_close(v, v_ref)
    assert_close(g[0], g_ref[0])
    assert_close(g[1], g_ref[1])


def test_nested_loops():
    def f(w):
        def outer(i, c):
            inner = jg.fori_loop(0, 3, lambda j, d: np.tanh(d * w) + 0.1 * j, c)
            return inner + 0.01 * i
        return np.sum(jg.fori_loop(0, 4, outer, np.ones(2)) ** 2)

    w = np.array([0.9, 1.1])
    v, g = jg.jit_grad(f, backend="python")(w)
    v_ref, g_ref = jg.value_and_grad(f)(w)
    assert_close(v, v_ref)
    assert_close(g, g_ref)
    assert_close(g, fd_grad(f, w), rtol=1e-6, atol=1e-8)
    src = jg.jit_grad(f, backend="python").lower(w).source
    assert "s0_s0_kernel" in src or "s0_kernel" in src


def test_traced_trip_count_and_while_loop_forward_only():
    def power(x, n):
        return jg.fori_loop(0, n, lambda i, c: c * 1.5, x)

    f = jg.jit(power, backend="python")
    assert_close(f(np.ones(2), 3), np.full(2, 1.5 ** 3))
    assert_close(f(np.ones(2), 5), np.full(2, 1.5 ** 5))
    assert f.cache_info().traces == 1            # n is a traced scalar: one graph for every n
    with pytest.raises(jg.GradError, match="fori_loop with a traced bound is not reverse-differentiable"):
        jg.jit_grad(lambda x, n: np.sum(power(x, n)), backend="python")(np.ones(2), 3)

    def doubling(x):
        return jg.while_loop(lambda c: np.sum(c) < 100, lambda c: c * 2, x)

    assert_close(jg.jit(doubling, backend="python")(np.ones(3)), np.full(3, 64.0))
    assert_close(doubling(np.ones(3)), np.full(3, 64.0))
    with pytest.raises(jg.GradError, match="while_loop is not reverse-differentiable"):
        jg.jit_grad(lambda x: np.sum(doubling(x)), backend="python")(np.ones(3))


def test_carry_must_keep_its_type():
    with pytest.raises(jg.ShapeError, match="carry 0 enters the body .* float64\\[2\\] but leaves as"):
        jg.jit(lambda x: jg.fori_loop(0, 3, lambda i, c: np.sum(c), x), backend="python")(np.ones(2))


def test_long_fori_loop_compiles_as_one_loop():
    f = jg.jit_grad(lambda k, y: euler(k, y, steps=10_000, dt=1e-4), argnums=(0, 1))
    k, y0 = np.array([0.5, 1.5]), np.array([1.0, 2.0])
    v, (gk, gy) = f(k, y0)
    # reference: the same recurrence and its adjoint, by hand in float64
    ys = [y0]
    for i in range(10_000):
        ys.append(ys[-1] + 1e-4 * (-k * ys[-1] + np.sin(1e-4 * i)))
    lam = 2 * ys[-1]
    gk_ref = np.zeros(2)
    for i in range(9_999, -1, -1):
        gk_ref += lam * (-1e-4 * ys[i])
        lam = lam * (1 - 1e-4 * k)
    assert_close(v, np.sum(ys[-1] ** 2))
    assert_close(gk, gk_ref, rtol=1e-10)
    assert_close(gy, lam, rtol=1e-10)
    assert len(f.lower(k, y0).graph.nodes) < 40


def carries_that_move(x, xs):
    """Loops whose carries swap, rotate, pass through or share a buffer with a stacked output:
    the cases where a body writing into reused buffers could clobber a value still needed."""
    def swap(c, _):
        a, b = c
        return (np.tanh(a) * 2.0 + b, a), a + b

    def rotate(c, _):
        a, b, d = c
        return (np.sin(b), d, a), a

    def scalar(c, xi):
        s, v = c
        return (s + np.sum(xi * v), v * 0.9), s

    def shared(c, xi):
        c = np.tanh(c @ np.eye(3) + xi)
        return c, c

    def branchy(c, xi):
        c = jg.cond(np.sum(xi) > 0, lambda c: c * 2.0, lambda c: c - 1.0, c)
        return c, c

    (a, b), ys = jg.scan(swap, (x, x * 0.5), None, length=6)
    (p, q, r), zs = jg.scan(rotate, (x, x + 1.0, x * 2.0), None, length=7)
    (s, v), ss = jg.scan(scalar, (0.0, x), xs)
    h, hs = jg.scan(shared, x, xs, reverse=True)
    e, _ = jg.scan(shared, x, xs[:0])
    k, ks = jg.scan(branchy, x, xs)
    w = jg.while_loop(lambda t: t[2] < 5, lambda t: (t[1], t[0] + t[1], t[2] + 1), (x, x * 2.0, 0))
    f = jg.fori_loop(0, 5, lambda i, t: (t[1], t[0] * 0.5 + t[1]), (x, x * 3.0))
    return a, b, ys, p, q, r, zs, s, v, ss, h, hs, e, k, ks, w, f, h


def test_loop_buffers_keep_every_carry():
    rng = np.random.default_rng(5)
    x, xs = rng.standard_normal(3), rng.standard_normal((5, 3))
    f = jg.jit(carries_that_move)
    got = f(x, xs)
    want = carries_that_move(x, xs)            # outside a trace: Python loops
    flat = jg.tree.tree_flatten(got)[0]
    for g, w in zip(flat, jg.tree.tree_flatten(want)[0]):
        assert_close(g, w)
    kept = [np.array(g, copy=True) for g in flat]
    again = jg.tree.tree_flatten(f(x * 2.0 - 1.0, xs[::-1].copy()))[0]
    for g, k in zip(flat, kept):          # a later call leaves earlier results alone
        np.testing.assert_array_equal(g, k)
    arrays = [g for g in flat + again if isinstance(g, np.ndarray)]
    for i, g in enumerate(arrays):        # no result is a view of another or of an argument
        assert not np.shares_memory(g, x) and not np.shares_memory(g, xs)
        assert not any(np.shares_memory(g, h) for h in arrays[i + 1:] if h is not g)
    src = f.lower(x, xs).source
    for name in ("s0_kernel", "s1_kernel", "s3_kernel"):       # swap, rotate, shared: no allocation
        body = src[src.index(f"def {name}("):]
        body = body[:body.index("\n\n")]
        assert "np.empty(" not in body and ".copy()" not in body, body


def test_loops_in_a_python_entry(monkeypatch):
    """A program long enough to run its entry as Python (here: any program) calls its loop
    bodies, copies and buffers from Python."""
    monkeypatch.setattr(emit_cpu, "NJIT_ENTRY_MAX_STEPS", 1)
    rng = np.random.default_rng(7)
    W, U, xs = rng.standard_normal((4, 4)) * 0.5, rng.standard_normal((3, 4)), rng.standard_normal((6, 2, 3))
    f = jg.jit_grad(rnn_loss, argnums=(0, 1), wait=True)
    src = f.lower(W, U, xs).source
    assert "@njit(**_OPTS)\ndef kernel" not in src
    # the loops themselves are compiled functions: from Python, each iteration's calls cost
    # microseconds
    entry = src.split("def kernel(")[1]
    assert entry.count("_loop(") == 2 and "for " not in entry
    for _ in range(2):
        v, (gW, gU) = f(W, U, xs)
        v_ref, (gW_ref, gU_ref) = jg.value_and_grad(rnn_loss, argnums=(0, 1))(W, U, xs)
        assert_close(v, v_ref)
        assert_close(gW, gW_ref)
        assert_close(gU, gU_ref)

    def doubling(x):
        return jg.while_loop(lambda c: np.sum(c) < 100, lambda c: c * 2, np.sin(x) + 2)
    g = jg.jit(doubling, wait=True)
    assert "while " not in g.lower(np.ones(3)).source.split("def kernel(")[1]
    assert_close(g(np.ones(3)), doubling(np.ones(3)))


def rnn_loss(W, U, xs):
    def cell(h, x):
        h = np.tanh(h @ W + x @ U)
        return h, h
    h, hs = jg.scan(cell, np.zeros((2, 4)), xs)
    return np.sum(hs ** 2) + np.sum(h)


def test_scan_gradient_stores_products_instead_of_recomputing():
    rng = np.random.default_rng(6)
    W, U, xs = rng.standard_normal((4, 4)) * 0.5, rng.standard_normal((3, 4)), rng.standard_normal((6, 2, 3))
    f = jg.jit_grad(rnn_loss, argnums=(0, 1), backend="python")
    graph = f.lower(W, U, xs).graph
    scans = [n for n in graph.nodes if n.op == "scan"]
    assert len(scans) == 2                 # one forward loop (stacking its products), one reverse
    fwd, bwd = sorted(scans, key=lambda n: n.p["reverse"])
    n_y = len(fwd.p["out_avals"]) - 2 * fwd.p["n_carry"]
    # hs, and per step the pre-activation h @ W + x @ U: one sum stored for the two
    # products, which the reverse sweep needs only through it
    assert n_y == 2
    assert fwd.p["body"].outputs[-1].op == "add"
    # x @ U is one product before the loop (`_hoist_products`): the forward body has h @ W
    # only; the reverse body has dh @ W.T only: dW (h.T @ dz) and dU (x.T @ dz) are one
    # product each after it, of the stored history and the stacked dz, and no product is
    # recomputed
    assert sum(n.op == "matmul" for n in fwd.p["body"].nodes) == 1
    assert sum(n.op == "matmul" for n in bwd.p["body"].nodes) == 1
    v, (gW, gU) = f(W, U, xs)
    v_ref, (gW_ref, gU_ref) = jg.value_and_grad(rnn_loss, argnums=(0, 1))(W, U, xs)
    assert_close(v, v_ref)
    assert_close(gW, gW_ref)
    assert_close(gU, gU_ref)
    assert_close(gW, fd_grad(lambda t: rnn_loss(t, U, xs), W), rtol=1e-6, atol=1e-8)
    g2 = jg.jit_grad(lambda W: np.sum(jg.grad(rnn_loss)(W, U, xs) ** 2), backend="python")
    assert_close(g2(W)[1], fd_grad(lambda t: np.sum(jg.grad(rnn_loss)(t, U, xs) ** 2), W, eps=1e-5),
          rtol=1e-5, atol=1e-7)


def test_scan_stores_a_sum_of_products_and_keeps_a_product_read_elsewhere():
    """A product read only through sums (`x @ U - h @ W + b`) is stored as the last sum; one
    that another node also reads (`z * tanh(z + b)`) is stored itself (and x @ U, one product
    before the loop, is not stored). Gradients match."""
    rng = np.random.default_rng(11)
    W, U, b = rng.standard_normal((4, 4)) * 0.4, rng.standard_normal((3, 4)), rng.standard_normal(4)
    xs = rng.standard_normal((5, 2, 3))

    def summed(W, U, b, xs):
        def cell(h, x):
            h = np.tanh(x @ U - h @ W + b)
            return h, h
        _, hs = jg.scan(cell, np.zeros((2, 4)), xs)
        return np.sum(hs ** 2)

    def reused(W, U, b, xs):
        def cell(h, x):
            z = h @ W
            h = z * np.tanh(z + x @ U + b)
            return h, h
        _, hs = jg.scan(cell, np.full((2, 4), 0.5), xs)
        return np.sum(hs ** 2)

    for fun, stored in ((summed, ["add"]), (reused, ["matmul"])):
        f = jg.jit_grad(fun, argnums=(0, 1, 2), backend="python")
        graph = f.lower(W, U, b, xs).graph
        fwd = min((n for n in graph.nodes if n.op == "scan"), key=lambda n: n.p["reverse"])
        body = fwd.p["body"]
        assert sorted(o.op for o in body.outputs[2:]) == stored     # after the carry and hs
        v, grads = f(W, U, b, xs)
        v_ref, grads_ref = jg.value_and_grad(fun, argnums=(0, 1, 2))(W, U, b, xs)
        assert_close(v, v_ref)
        for g, g_ref, k in zip(grads, grads_ref, range(3)):
            assert_close(g, g_ref)
            args = [W, U, b]
            fd = fd_grad(lambda t: fun(*(args[:k] + [t] + args[k + 1:]), xs), args[k])
            assert_close(g, fd, rtol=1e-6, atol=1e-8)


# ---- higher order --------------------------------------------------------------------------------------
def test_jit_grad_of_a_function_that_takes_gradients():
    def f(x):
        return np.sum(np.tanh(x) ** 3) + np.sum(x[:2] * x[1:3])

    def gnorm(x):
        _, g = jg.value_and_grad(f)(x)
        return np.sum(g * g)

    def gnorm_jit(x):
        _, g = jg.jit_grad(f)(x)
        return np.sum(g * g)

    x = np.random.default_rng(3).standard_normal(5)
    v_ref, g_ref = jg.value_and_grad(gnorm)(x)
    for fun in (gnorm, gnorm_jit):
        v, g = jg.jit_grad(fun, backend="python")(x)
        assert_close(v, v_ref)
        assert_close(g, g_ref)
    assert_close(g_ref, fd_grad(gnorm, x), rtol=1e-6, atol=1e-8)


SECOND_ORDER = [
    ("sin", np.sin, "real"), ("cos", np.cos, "real"), ("tanh", np.tanh, "real"),
    ("exp", np.exp, "real"), ("log", np.log, "positive"), ("sqrt", np.sqrt, "positive"),
    ("sigmoid", jg.sigmoid, "real"), ("pow3", lambda x: x ** 3, "real"),
    ("recip", lambda x: 1 / x, "positive"), ("arctan", np.arctan, "real"),
    ("sum", lambda x: np.sum(x * x, axis=0), "real"), ("max", lambda x: np.max(x * x, axis=1), "real"),
    ("prod", lambda x: np.prod(x, axis=1), "positive"), ("mean", lambda x: np.mean(np.sin(x), 0), "real"),
    ("logsumexp", lambda x: jg.logsumexp(x, axis=1), "real"), ("softmax", lambda x: jg.softmax(x, 1), "real"),
    ("matmul", lambda x: x @ x.T, "real"),
]


@pytest.mark.parametrize("name,fn,domain", SECOND_ORDER, ids=[s[0] for s in SECOND_ORDER])
def test_second_derivatives_against_finite_differences(name, fn, domain):
    rng = np.random.default_rng(abs(hash(name)) % 2 ** 32)
    x = rng.uniform(0.5, 2.0, (3, 4)) if domain == "positive" else rng.standard_normal((3, 4))
    v = rng.standard_normal((3, 4))
    wts = rng.standard_normal(np.shape(fn(x)))

    def loss(x):
        return np.sum(fn(x) * wts)

    hv = jg.hvp(loss, backend="python")(x, v)
    grad = jg.grad(loss)
    eps = 1e-5
    fd = (grad(x + eps * v) - grad(x - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-7)


HVP_ENTRIES = [e for e in TABLE[::4] if diff_argnums(e)]


@pytest.mark.parametrize("entry", HVP_ENTRIES, ids=lambda e: f"{e.name}-{len(e.specs)}")
def test_hvp_of_table_programs_matches_differences_of_gradients(entry):
    args = make_args(entry, np.float64)
    nums = diff_argnums(entry)
    rng = np.random.default_rng(7)
    vs = tuple(rng.standard_normal(np.shape(args[a])) for a in nums)
    hv = jg.hvp(entry.fn, argnums=nums, backend="python")(*args, vs)
    grad = jg.grad(entry.fn, argnums=nums)
    eps = 1e-5

    def shifted(s):
        a = list(args)
        for k, i in enumerate(nums):
            a[i] = args[i] + s * vs[k]
        return grad(*a)

    gp, gm = shifted(eps), shifted(-eps)
    for k in range(len(nums)):
        fd = (np.asarray(gp[k]) - np.asarray(gm[k])) / (2 * eps)
        scale = max(1.0, float(np.max(np.abs(fd))))
        np.testing.assert_allclose(hv[k], fd, rtol=1e-5, atol=2e-6 * scale)


def test_hvp_compiled_matches_python_backend():
    def f(w, x):
        return np.sum(np.tanh(x @ w) ** 2)

    rng = np.random.default_rng(4)
    w, x, v = rng.standard_normal((4, 3)), rng.standard_normal((6, 4)), rng.standard_normal((4, 3))
    assert_close(jg.hvp(f)(w, x, v), jg.hvp(f, backend="python")(w, x, v))


def test_hvp_through_cond_and_fori_loop():
    def f(w):
        r = jg.fori_loop(0, 5, lambda i, c: np.tanh(c * w + 0.1), np.ones(3))
        return jg.cond(np.sum(r) > 0, lambda a: np.sum(a ** 3), lambda a: np.sum(a), r * w)

    w, v = np.array([0.3, 0.9, -0.4]), np.array([1.0, -2.0, 0.5])
    hv = jg.hvp(f, backend="python")(w, v)
    grad = jg.grad(f)
    eps = 1e-5
    np.testing.assert_allclose(hv, (grad(w + eps * v) - grad(w - eps * v)) / (2 * eps), rtol=1e-6, atol=1e-8)
    text = str(jg.hvp(f, backend="python").lower(w, v).graph)
    assert "scan[" in text and "cond[" in text        # still symbolic: nothing was unrolled


def test_weight_gradients_of_a_scan_are_one_product_after_it():
    """dW of a recurrence, a product per step (dh h^T of a vector state, h^T dz over a batch),
    is not accumulated in the reverse loop: its factors are stacked, one product sums them."""
    rng = np.random.default_rng(12)

    def vector_state(W, xs):
        def cell(h, x):
            h = np.tanh(W @ h + x)
            return h, h
        _, hs = jg.scan(cell, np.zeros(W.shape[0]), xs)
        return np.sum(hs ** 2)

    def batched(W, xs):
        def cell(h, x):
            h = np.tanh(h @ W + x)
            return h, h
        _, hs = jg.scan(cell, np.zeros(xs.shape[1:]), xs)
        return np.sum(hs ** 2)

    for fun, W, xs in ((vector_state, 0.3 * rng.standard_normal((9, 9)), rng.standard_normal((7, 9))),
                       (batched, 0.3 * rng.standard_normal((9, 9)), rng.standard_normal((7, 4, 9)))):
        f = jg.jit_grad(fun, backend="python")
        graph = f.lower(W, xs).graph
        bwd = max((n for n in graph.nodes if n.op == "scan"), key=lambda n: n.p["reverse"])
        carried = bwd.p["out_avals"][:bwd.p["n_carry"]]
        assert all(s != W.shape for s, _ in carried)          # no accumulator of dW
        assert any(n.op == "matmul" and n.shape == W.shape for n in graph.nodes)
        v, g = f(W, xs)
        v_ref, g_ref = jg.value_and_grad(fun)(W, xs)
        assert_close(v, v_ref)
        assert_close(g, g_ref)
        assert_close(g, fd_grad(lambda t: fun(t, xs), W), rtol=1e-6, atol=1e-8)
    # second derivatives through the summed product
    h2 = jg.jit_grad(lambda W: np.sum(jg.grad(vector_state)(W, xs) ** 2), backend="python")
    W = 0.3 * rng.standard_normal((9, 9))
    xs = rng.standard_normal((7, 9))
    assert_close(h2(W)[1], fd_grad(lambda t: np.sum(jg.grad(vector_state)(t, xs) ** 2), W, eps=1e-5),
                 rtol=1e-5, atol=1e-7)


def test_scan_weight_gradient_factors_are_read_where_they_are_stacked():
    """A factor of a weight's per-step cotangent that the reverse loop has stacked already (a
    data sequence x_t of x_t @ Wx, a stored history h_{t-1}) is read there, not stored again,
    and a transposed factor (h^T of h @ W, h^T of W @ h) is transposed by the one product
    after the loop, not copied per step: the reverse body has no transpose and no weight-shaped
    product. Wx (3 x 16) is factored although its factors x_t and dz_t (8 x 3, 8 x 16) are
    larger than it: x_t is stacked already."""
    rng = np.random.default_rng(13)

    def rows(Wx, Wh, xs):
        def cell(h, x):
            h = np.tanh(x @ Wx + h @ Wh)
            return h, h
        _, hs = jg.scan(cell, np.zeros((xs.shape[1], Wh.shape[0])), xs)
        return np.sum(hs ** 2)

    def columns(Wx, Wh, xs):                 # states as columns: dW = dz h^T
        def cell(h, x):
            h = np.tanh(Wx.T @ x + Wh @ h)
            return h, h
        _, hs = jg.scan(cell, np.zeros((Wh.shape[0], xs.shape[2])), xs)
        return np.sum(np.sin(hs))

    Wx, Wh = 0.5 * rng.standard_normal((3, 16)), 0.3 * rng.standard_normal((16, 16))
    for fun, xs in ((rows, rng.standard_normal((6, 8, 3))), (columns, rng.standard_normal((6, 3, 8)))):
        f = jg.jit_grad(fun, argnums=(0, 1), backend="python")
        graph = f.lower(Wx, Wh, xs).graph
        bwd = max((n for n in graph.nodes if n.op == "scan"), key=lambda n: n.p["reverse"])
        body = bwd.p["body"]
        assert not [n for n in body.nodes if n.op == "transpose"], str(body)
        assert not [n for n in body.nodes if n.op == "matmul" and n.shape in (Wx.shape, Wh.shape)], str(body)
        assert all(s not in (Wx.shape, Wh.shape) for s, _ in bwd.p["out_avals"][:bwd.p["n_carry"]])
        v, (gx, gh) = f(Wx, Wh, xs)
        v_ref, (gx_ref, gh_ref) = jg.value_and_grad(fun, argnums=(0, 1))(Wx, Wh, xs)
        assert_close(v, v_ref)
        assert_close(gx, gx_ref)
        assert_close(gh, gh_ref)
        assert_close(gx, fd_grad(lambda t: fun(t, Wh, xs), Wx), rtol=1e-6, atol=1e-8)
        assert_close(gh, fd_grad(lambda t: fun(Wx, t, xs), Wh), rtol=1e-6, atol=1e-8)


def test_products_of_the_data_with_a_weight_are_one_product_before_the_loop():
    """x_t @ Wx (rows) and Wx @ x_t (a vector x_t) read no carry: each is one product of the
    whole sequence before the loop, which the body reads per step; a reverse scan, a pytree of
    xs and the gradient with respect to the data (dX = dP Wx^T, after the loop) are right."""
    rng = np.random.default_rng(14)
    Wx, Wv, Wh = rng.standard_normal((3, 5)), rng.standard_normal((5, 2)), 0.4 * rng.standard_normal((5, 5))
    xs = {"rows": rng.standard_normal((6, 4, 3)), "vec": rng.standard_normal((6, 2))}

    def gru_ish(Wx, Wv, Wh, xs):
        def cell(h, x):
            z = 1 / (1 + np.exp(-(x["rows"] @ Wx + Wv @ x["vec"])))
            h = z * h + (1 - z) * np.tanh(h @ Wh + x["rows"] @ Wx)
            return h, np.sum(h, axis=0)
        h, ys = jg.scan(cell, np.zeros((4, 5)), xs, reverse=True)
        return np.sum(ys ** 2) + np.sum(np.cos(h))

    args = (Wx, Wv, Wh, xs)
    f = jg.jit_grad(gru_ish, argnums=(0, 1, 2, 3), backend="python")
    graph = f.lower(*args).graph
    fwd = min((n for n in graph.nodes if n.op == "scan"), key=lambda n: n.p["reverse"] is False)
    body = fwd.p["body"]
    assert [n.shape for n in body.nodes if n.op == "matmul"] == [(4, 5)]      # h @ Wh only
    v, grads = f(*args)
    v_ref, grads_ref = jg.value_and_grad(gru_ish, argnums=(0, 1, 2, 3))(*args)
    assert_close(v, v_ref)
    for g, g_ref in zip(grads[:3], grads_ref[:3]):
        assert_close(g, g_ref)
    for key in xs:
        assert_close(grads[3][key], grads_ref[3][key])
    assert_close(grads[0], fd_grad(lambda t: gru_ish(t, Wv, Wh, xs), Wx), rtol=1e-6, atol=1e-8)
    assert_close(grads[1], fd_grad(lambda t: gru_ish(Wx, t, Wh, xs), Wv), rtol=1e-6, atol=1e-8)
    assert_close(grads[3]["rows"], fd_grad(lambda t: gru_ish(Wx, Wv, Wh, dict(xs, rows=t)), xs["rows"]),
                 rtol=1e-6, atol=1e-8)
    # compiled (Numba) against the Python backend
    v_c, grads_c = jg.jit_grad(gru_ish, argnums=(0, 1, 2, 3))(*args)
    assert_close(v_c, v, rtol=1e-11)
    for g, g_c in zip(grads[:3], grads_c[:3]):
        assert_close(g_c, g, rtol=1e-10, atol=1e-12)


def test_captured_broadcasts_are_made_in_the_loop_body():
    """A scan's captured value that is a broadcast of a smaller one (a bias over the batch; a
    rerolled Sinkhorn's log-weights over the cost matrix, and its 1/eps) is passed small and
    broadcast in the body, forward and reverse: no scan reads a full-size broadcast."""
    rng = np.random.default_rng(15)

    def rnn(W, b, xs):
        def cell(h, x):
            h = np.tanh(h @ W + x + b)
            return h, h
        _, hs = jg.scan(cell, np.zeros((3, 4)), xs)
        return np.sum(hs ** 2)

    def sinkhorn(X, Y, a, b):
        C = np.sum((X[:, None, :] - Y[None, :, :]) ** 2, axis=-1)
        f, g = np.zeros(len(a)), np.zeros(len(b))
        for _ in range(6):
            f = -0.5 * jg.logsumexp((g[None, :] - C) / 0.5 + np.log(b)[None, :], axis=1)
            g = -0.5 * jg.logsumexp((f[:, None] - C) / 0.5 + np.log(a)[:, None], axis=0)
        return np.sum(np.exp((f[:, None] + g[None, :] - C) / 0.5) * C)

    a, b = rng.random(5) + 0.5, rng.random(6) + 0.5
    cases = ((rnn, (0.4 * rng.standard_normal((4, 4)), rng.standard_normal(4), rng.standard_normal((5, 3, 4)))),
             (sinkhorn, (rng.standard_normal((5, 2)), rng.standard_normal((6, 2)), a / a.sum(), b / b.sum())))
    for fun, args in cases:
        f = jg.jit_grad(fun, argnums=(0, 1), backend="python")
        scans = [n for n in f.lower(*args).graph.nodes if n.op == "scan"]
        assert len(scans) == 2
        for s in scans:
            consts = s.inputs[:s.p["n_consts"]]
            assert not [c for c in consts if c.op == "broadcast"], [c.op for c in consts]
        assert any(n.op == "broadcast" for n in scans[0].p["body"].nodes)
        v, grads = f(*args)
        v_ref, grads_ref = jg.value_and_grad(fun, argnums=(0, 1))(*args)
        assert_close(v, v_ref, rtol=1e-11)
        for k, (g, g_ref) in enumerate(zip(grads, grads_ref)):
            assert_close(g, g_ref, rtol=1e-10, atol=1e-12)
            fd = fd_grad(lambda t: fun(*(args[:k] + (t,) + args[k + 1:])), args[k])
            assert_close(g, fd, rtol=1e-5, atol=1e-7)
