"""Loop rerolling (jitgraph/reroll.py): a Python loop that tracing unrolled becomes a scan.

Each program is traced twice, rerolled and unrolled (reroll=False), and both joint graphs run
on the reference interpreter: values and gradients must agree to rounding. The structure
checks say whether the loop became a scan and over how many iterations."""
import numpy as np
import pytest

import jitgraph as jg
from jitgraph.api import eval_graph, trace_graph

pytestmark = pytest.mark.xdist_group("reroll")


def scans(graph):
    return [n for n in graph.nodes if n.op == "scan"]


def forward_scans(graph):
    return [n for n in scans(graph) if not n.p["reverse"]]


def check(fun, args, argnums=0, has_aux=False, rtol=1e-12):
    """The rerolled joint graph and the unrolled one compute the same value and gradients
    (and aux); returns the rerolled graph."""
    g1 = trace_graph(fun, args, argnums, has_aux, grad=True)
    g0 = trace_graph(fun, args, argnums, has_aux, grad=True, reroll=False)
    g1.verify()
    got, want = eval_graph(g1, *args), eval_graph(g0, *args)
    for a, b in zip(jg.tree.tree_flatten(got)[0], jg.tree.tree_flatten(want)[0]):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-14)
    return g1


# ---- programs -----------------------------------------------------------------------------------
def kalman(params, ys):
    A, C = params["A"], params["C"]
    Q = np.diag(np.exp(params["log_q"]))
    R = np.diag(np.exp(params["log_r"]))
    n, k = A.shape[0], C.shape[0]
    m, P, nll = np.zeros(n), np.eye(n), 0.0
    for t in range(ys.shape[0]):
        m = A @ m
        P = A @ P @ A.T + Q
        S = C @ P @ C.T + R
        v = ys[t] - C @ m
        _, logdet = np.linalg.slogdet(S)
        nll = nll + 0.5 * (logdet + v @ np.linalg.solve(S, v) + k * np.log(2 * np.pi))
        K = P @ C.T @ np.linalg.inv(S)
        m = m + K @ v
        P = (np.eye(n) - K @ C) @ P
        P = 0.5 * (P + P.T)
    return nll


def kalman_args(T=9, seed=0):
    rng = np.random.default_rng(seed)
    params = {"A": np.eye(3) * 0.9 + 0.05 * rng.standard_normal((3, 3)), "C": rng.standard_normal((2, 3)),
              "log_q": np.log(np.full(3, 0.1)), "log_r": np.log(np.full(2, 0.05))}
    return params, rng.standard_normal((T, 2))


def rnn(W, U, xs):
    """Outputs collected in a list and stacked (the scan's stacked outputs)."""
    h = np.zeros(W.shape[0])
    hs = []
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + U @ xs[t])
        hs.append(h)
    H = np.stack(hs)
    return np.sum(H ** 2) + np.mean(H[:, 0])


def rnn_args(T=7, seed=1):
    rng = np.random.default_rng(seed)
    return 0.5 * rng.standard_normal((4, 4)), rng.standard_normal((4, 3)), rng.standard_normal((T, 3))


def test_a_kalman_filter_becomes_one_scan_over_every_step():
    args = kalman_args()
    g = check(kalman, args)
    fwd = forward_scans(g)
    # every step but the last, whose updates of m and P nothing reads (a scan would compute
    # them, where the program does not: it stays unrolled after the scan)
    assert len(fwd) == 1 and fwd[0].p["length"] == 8
    assert len(g.nodes) < len(trace_graph(kalman, args, grad=True, reroll=False).nodes) / 3


def test_stacked_outputs_of_an_rnn():
    g = check(rnn, rnn_args(), argnums=(0, 1))
    assert [n.p["length"] for n in forward_scans(g)] == [7]


def test_time_dependent_constants_and_columns():
    def f(w, X):
        x, dt = np.ones(3), 0.1
        for t in range(X.shape[1]):
            x = x + dt * np.tanh(w @ x) * (t * dt) + X[:, t]      # t * dt: a constant per step
        return np.sum(x ** 2)
    rng = np.random.default_rng(2)
    g = check(f, (0.3 * rng.standard_normal((3, 3)), rng.standard_normal((3, 6))))
    assert [n.p["length"] for n in forward_scans(g)] == [6]


def test_a_reversed_loop():
    def f(w, X):
        h = np.zeros(3)
        for t in reversed(range(X.shape[0])):
            h = np.tanh(w @ h + X[t])
        return np.sum(h)
    rng = np.random.default_rng(3)
    g = check(f, (rng.standard_normal((3, 3)), rng.standard_normal((5, 3))))
    assert [n.p["length"] for n in forward_scans(g)] == [5]


def test_two_loops_become_two_scans():
    def f(w, X):
        h = np.zeros(3)
        for t in range(X.shape[0]):
            h = np.tanh(w @ h + X[t])
        g = h
        for t in range(X.shape[0]):
            g = np.sin(w.T @ g) * X[t]
        return np.sum(g * h)
    rng = np.random.default_rng(4)
    g = check(f, (0.5 * rng.standard_normal((3, 3)), rng.standard_normal((6, 3))))
    lengths = sorted(n.p["length"] for n in forward_scans(g))
    assert len(lengths) == 2 and lengths[0] >= 5 and lengths[1] == 6


def test_an_integer_start_and_a_scalar_start_of_a_vector_carry():
    def f(w, X):
        s, h = 0, 0.0          # an int that becomes a float, a scalar that becomes a vector
        for t in range(X.shape[0]):
            h = np.tanh(w @ X[t] + h)
            s = s + np.sum(h * h)
        return s
    rng = np.random.default_rng(5)
    check(f, (rng.standard_normal((3, 3)), rng.standard_normal((6, 3))))


def test_a_value_of_a_middle_iteration_and_aux():
    def f(w, X):
        h, losses = np.zeros(3), []
        for t in range(X.shape[0]):
            h = np.tanh(w @ h + X[t])
            losses.append(np.sum(h ** 2))
        return losses[3] + np.mean(np.array(losses)), {"h2": h, "first": losses[0]}
    rng = np.random.default_rng(6)
    check(f, (rng.standard_normal((3, 3)), rng.standard_normal((8, 3))), has_aux=True)


def _two_steps_back(w, X):
    a, b = np.zeros(3), np.ones(3)
    for t in range(X.shape[0]):
        a, b = b, np.tanh(w @ b + 0.5 * a + X[t])
    return np.sum(b)


def _alternating(w, X):
    h = np.zeros(3)
    for t in range(X.shape[0]):
        h = np.tanh(w @ h + X[t]) if t % 2 else np.sin(w.T @ h) + X[t]
    return np.sum(h ** 2)


def _cond_inside(w, X):
    h = np.zeros(3)
    for t in range(X.shape[0]):
        h = jg.cond(np.sum(h) > 0, lambda a: np.tanh(w @ a), lambda a: np.sin(w @ a), h) + X[t]
    return np.sum(h ** 2)


@pytest.mark.parametrize("f, seed, steps", [(_two_steps_back, 7, 7), (_alternating, 8, 9), (_cond_inside, 9, 5)],
                         ids=["two steps back", "alternating bodies", "cond inside"])
def test_irregular_loops_stay_correct(f, seed, steps):
    rng = np.random.default_rng(seed)
    check(f, (rng.standard_normal((3, 3)), rng.standard_normal((steps, 3))))


def lotka_volterra_rk4(theta, z0, steps=40):
    """Classical RK4 integration: each step evaluates one function four times, so every kind of
    node recurs within a step (no node's next of its kind is a whole step later)."""
    a, b, c, d = np.exp(theta)

    def f(z):
        x, y = z[0], z[1]
        return np.array([a * x - b * x * y, -c * y + d * x * y])
    z, h, total = z0, 0.05, 0.0
    for _ in range(steps):
        k1 = f(z)
        k2 = f(z + h / 2 * k1)
        k3 = f(z + h / 2 * k2)
        k4 = f(z + h * k3)
        z = z + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        total = total + np.sum(np.log(z) ** 2)
    return total


def test_a_runge_kutta_loop_becomes_one_scan():
    theta, z0 = np.log(np.array([1.0, 0.5, 1.0, 0.3])), np.array([1.5, 1.2])
    g = check(lotka_volterra_rk4, (theta, z0))
    (fwd,) = forward_scans(g)
    assert fwd.p["length"] >= 38
    assert len(g.nodes) < 1500        # (unrolled: 8,330)


def test_what_stays_unrolled():
    rng = np.random.default_rng(10)
    x = rng.standard_normal(8)

    def chain(x):                # elementwise only: one fused loop unrolled, T passes as a scan
        for _ in range(20):
            x = np.sin(x) * 1.1
        return np.sum(x)

    def short(w, X):             # two iterations
        h = np.zeros(3)
        for t in range(2):
            h = np.tanh(w @ h + X[t])
        return np.sum(h)

    assert not scans(check(chain, (x,)))
    assert not scans(check(short, (rng.standard_normal((3, 3)), rng.standard_normal((2, 3)))))


def test_option_and_environment_turn_it_off(monkeypatch):
    args = kalman_args(T=5)
    assert not scans(jg.jit_grad(kalman, reroll=False).lower(*args).graph)
    assert not scans(jg.jit_grad(kalman, remat="sqrt").lower(*args).graph)   # remat acts on the steps
    monkeypatch.setenv("JITGRAPH_REROLL", "0")
    assert not scans(trace_graph(kalman, args, grad=True))


def test_forward_only_jit():
    W, U, xs = rnn_args()

    def f(W, U, xs):
        h = np.zeros(4)
        for t in range(xs.shape[0]):
            h = np.tanh(W @ h + U @ xs[t])
        return h, np.sum(h)
    g = trace_graph(f, (W, U, xs))
    assert [n.p["length"] for n in scans(g)] == [7]
    got = eval_graph(g, W, U, xs)
    want = f(W, U, xs)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-13)


def test_compiled_kalman_and_rnn_agree_with_eager():
    args = kalman_args()
    f = jg.jit_grad(kalman)
    v, g = f(*args)
    ev, eg = jg.value_and_grad(kalman)(*args)
    assert forward_scans(f.lower(*args).graph)
    np.testing.assert_allclose(v, ev, rtol=1e-12)
    for k in g:
        np.testing.assert_allclose(g[k], eg[k], rtol=1e-11, atol=1e-13)
    args = rnn_args()
    v, g = jg.jit_grad(rnn, argnums=(0, 1))(*args)
    ev, eg = jg.value_and_grad(rnn, argnums=(0, 1))(*args)
    np.testing.assert_allclose(v, ev, rtol=1e-12)
    for a, b in zip(g, eg):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)


def test_a_long_elementwise_loop_becomes_a_scan_with_constant_rows():
    """An explicit Euler integration of 600 steps: elementwise, but long enough that its unrolled
    compile would dominate; the per-step constants (np.sin(dt * i)) become one constant array."""
    steps, dt = 600, 1.0 / 600

    def f(k, y0):
        y = y0
        for i in range(steps):
            y = y + dt * (-k * y + np.sin(dt * i))
        return np.sum(y ** 2)
    args = (np.linspace(0.5, 2.0, 4), np.linspace(-1.0, 1.0, 4))
    g = check(f, args, argnums=(0, 1))
    assert [n.p["length"] for n in forward_scans(g)] == [600] and len(g.nodes) < 40


# ---- what a review of the pass found ----------------------------------------------------------------
def test_a_last_iteration_with_dead_values_stays_unrolled():
    """The scan would compute the last iteration's unread sqrt(0) and its reverse 0 * inf = NaN."""
    rng = np.random.default_rng(3)
    W, X = 0.5 * rng.standard_normal((3, 3)), np.abs(rng.standard_normal((8, 3)))
    X[-1] = 0.0

    def f(w, X):
        h, loss = np.ones(3), 0.0
        for t in range(X.shape[0]):
            loss = loss + np.sum(np.tanh(w @ h) * X[t])
            h = np.sqrt(np.abs(w @ h) * X[t])     # never read after the last iteration
        return loss
    g = check(f, (W, X))
    assert np.all(np.isfinite(eval_graph(g, W, X)[1]))


def test_code_after_a_loop_is_not_one_more_iteration():
    def f(w, b):
        h = np.ones(3)
        for t in range(7):
            h = np.exp(w @ h + b)
        return np.sum(np.log(w @ h + b))       # starts as the body does
    g = check(f, (0.5 * np.eye(3), np.zeros(3)), argnums=(0, 1))
    assert [n.p["length"] for n in forward_scans(g)] in ([], [7], [6])


def test_a_tuple_valued_op_read_after_the_loop():
    def f(w, X):
        P = np.eye(3)
        for t in range(X.shape[0]):
            vals, vecs = np.linalg.eigh(P @ P.T + np.outer(X[t], X[t]))
            P = np.diag(vals) @ w
        return np.sum(vecs[:, 0] ** 2) + np.sum(P)
    rng = np.random.default_rng(4)
    check(f, (0.3 * rng.standard_normal((3, 3)), rng.standard_normal((5, 3))))


def test_stacked_outputs_do_not_make_tracing_quadratic(monkeypatch):
    """After the rewrite, the rows read from a stacked output repeat with period 2: a check that
    fails there is not retried once per row (3,998 checks took 12 s for 2,000 steps)."""
    from jitgraph import reroll
    calls = []
    real = reroll._plan
    monkeypatch.setattr(reroll, "_plan", lambda *a: calls.append(1) or real(*a))

    def f(w, X):
        h, a, b = np.zeros(3), [], []
        for t in range(X.shape[0]):
            h = np.tanh(w @ h + X[t])
            a.append(np.sum(h))
            b.append(np.max(h))
        return np.sum(np.array(a) * np.array(b))
    rng = np.random.default_rng(8)
    g = trace_graph(f, (0.5 * rng.standard_normal((3, 3)), rng.standard_normal((400, 3))))
    assert scans(g) and len(calls) < 200


# ---- loops that write into an array at a moving position -------------------------------------------
def soft_dtw(X, Y, gamma=0.1):
    """Cuturi and Blondel's soft-DTW recursion: a double loop of scalar item assignments."""
    from scipy.special import logsumexp
    D = np.sum((X[:, None, :] - Y[None, :, :]) ** 2, axis=2)
    n, m = D.shape
    R = np.full((n + 1, m + 1), np.inf)
    R[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            r = np.array([R[i - 1, j - 1], R[i - 1, j], R[i, j - 1]])
            R[i, j] = D[i - 1, j - 1] - gamma * logsumexp(-r / gamma)
    return R[n, m]


def test_a_double_loop_of_item_assignments_becomes_one_scan():
    """Each cell reads three cells of R and writes one, at positions that move with (i, j): the
    scan gathers and scatters at rows of a constant index array, and the cost matrix's cells,
    read once each, are one gather before it."""
    rng = np.random.default_rng(11)
    args = (rng.standard_normal((6, 2)), rng.standard_normal((5, 2)))
    g = check(soft_dtw, args)
    assert [n.p["length"] for n in forward_scans(g)] == [29] and len(g.nodes) < 80   # (unrolled: 1,597)
    body = forward_scans(g)[0].p["body"]
    assert {n.op for n in body.nodes} >= {"gather", "scatter_set"}


def test_the_reverse_loop_stores_the_cells_read_not_the_table():
    """The reverse loop needs the cells each iteration read (stored per iteration, three
    numbers), not the whole table as it was at each iteration."""
    rng = np.random.default_rng(11)
    g = check(soft_dtw, (rng.standard_normal((6, 2)), rng.standard_normal((5, 2))))
    assert not [n for n in g.nodes if n.op == "proj" and n.shape == (29, 7, 6)]


def planar_flow(params, z):
    """Rezende and Mohamed's planar flows: each layer's vectors broadcast over the points."""
    log_q = -0.5 * np.sum(z ** 2, axis=1)
    for k in range(params["u"].shape[0]):
        u, w, b = params["u"][k], params["w"][k], params["b"][k]
        wu = w @ u
        u_hat = u + (-1 + np.logaddexp(0, wu) - wu) * w / np.sum(w ** 2)
        a = np.tanh(z @ w + b)
        log_q = log_q - np.log(np.abs(1 + np.outer(1 - a ** 2, w) @ u_hat) + 1e-8)
        z = z + np.outer(a, u_hat)
    return np.mean(log_q + np.sum(z ** 2, axis=1))


def test_rows_that_broadcast_are_stacked_small():
    """Each layer's u_hat and w (hoisted: they depend on the parameters only) reach the body as
    rows of 2 that the body broadcasts over the points, not as stacked (layers, points, 2)
    arrays."""
    rng = np.random.default_rng(14)
    K = 5
    params = {"u": 0.5 * rng.standard_normal((K, 2)), "w": 0.5 * rng.standard_normal((K, 2)),
              "b": 0.1 * rng.standard_normal(K)}
    g = check(planar_flow, (params, rng.standard_normal((40, 2))))
    (fwd,) = forward_scans(g)
    assert fwd.p["length"] >= K - 1
    assert not [x for x in fwd.inputs if x.shape[:1] == (fwd.p["length"],) and x.size >= 40 * fwd.p["length"]]


def _euler_into_trajectory(theta, x0, data, dt=0.05):
    traj = np.zeros((data.shape[0], x0.shape[0]))
    traj[0] = x0
    for t in range(data.shape[0] - 1):
        traj[t + 1] = traj[t] + dt * np.tanh(theta @ traj[t])
    return np.sum((traj - data) ** 2)


def _discounted_returns(w, rewards, gamma=0.9):
    r = rewards * np.tanh(w)
    G = np.zeros(r.shape[0])
    G[-1] = r[-1]
    for t in reversed(range(r.shape[0] - 1)):
        G[t] = r[t] + gamma * G[t + 1]
    return np.sum(G ** 2)


def _hmm_forward(logA, logB, obs):
    from scipy.special import logsumexp
    alpha = np.zeros((len(obs), logA.shape[0]))
    alpha[0] = -np.log(logA.shape[0]) + logB[:, obs[0]]
    for t in range(1, len(obs)):
        alpha[t] = logsumexp(alpha[t - 1][:, None] + logA, axis=0) + logB[:, obs[t]]
    return logsumexp(alpha[-1]) + 0.01 * np.sum(alpha)


def _same_place(w, x):
    y = np.array(x, dtype=float)
    for i in range(y.shape[0]):
        y[i] = np.sin(y[i] * w[i % 3]) + y[i - 1]      # i = 0 reads the last element
    return np.sum(y ** 2)


def _columns(w, X):
    H = np.zeros((X.shape[0], X.shape[1] + 1))
    for j in range(X.shape[1]):
        H[:, j + 1] = np.tanh(w * H[:, j] + X[:, j])
    return np.sum(H[:, 1:] ** 2) + np.max(H)


def _moving_args(name):
    rng = np.random.default_rng(12)
    if name == "trajectory":
        return 0.5 * rng.standard_normal((3, 3)), rng.standard_normal(3), rng.standard_normal((12, 3))
    if name == "returns":
        return rng.standard_normal(10), rng.standard_normal(10)
    if name == "hmm":
        return (np.log(rng.dirichlet(np.ones(3), size=3)), np.log(rng.dirichlet(np.ones(4), size=3)),
                rng.integers(0, 4, 9))
    if name == "same place":
        return rng.standard_normal(3), rng.standard_normal(8)
    return rng.standard_normal(4), rng.standard_normal((4, 6))


@pytest.mark.parametrize("f, name, trips", [
    (_euler_into_trajectory, "trajectory", 11), (_discounted_returns, "returns", 9), (_hmm_forward, "hmm", 8),
    (_same_place, "same place", 8), (_columns, "columns", 5)])
def test_updates_at_moving_positions(f, name, trips):
    """A preallocated trajectory, a backward recursion, an HMM's alpha table, an update that
    reads its own position (and, at i = 0, the array's last element), a column per iteration."""
    g = check(f, _moving_args(name))
    assert [n.p["length"] for n in forward_scans(g)] == [trips]


def test_a_large_array_with_small_moving_updates_stays_unrolled():
    """As a scan, each iteration would scatter into (and its reverse sweep make an adjoint of)
    the whole array: 120,000 elements for a row of 300."""
    def f(w):
        H = np.zeros((400, 300))
        H[0] = w
        for t in range(6):
            H[t + 1] = np.sin(H[t]) * 1.1 + np.cos(H[t])
        return np.sum(H ** 2)
    assert not scans(check(f, (np.linspace(0, 1, 300),)))


def test_a_long_loop_of_small_moving_updates_becomes_a_scan_however_large_the_array():
    """400 iterations each writing one element of 60,000: as a scan each iteration scatters into
    the whole array, but unrolled, such a loop's compile grows with its thousands of nodes."""
    def f(w, x):
        y = np.zeros(60_000)
        y[0] = w[0]
        for i in range(1, 400):
            y[i] = y[i - 1] * w[1] + x[i]
        return np.sum(y ** 2)
    rng = np.random.default_rng(15)
    g = check(f, (np.array([0.5, 0.9]), rng.standard_normal(400)))
    assert [n.p["length"] for n in forward_scans(g)] in ([399], [398])


def test_compiled_moving_updates():
    """Compiled: soft-DTW and an HMM (whose per-step gathers of logB's columns are one gather
    before the scan) agree with eager."""
    rng = np.random.default_rng(13)
    args = (rng.standard_normal((5, 2)), rng.standard_normal((4, 2)))
    v, g = jg.jit_grad(soft_dtw, wait=True)(*args)
    ev, eg = jg.value_and_grad(soft_dtw)(*args)
    np.testing.assert_allclose(v, ev, rtol=1e-13)
    np.testing.assert_allclose(g, eg, rtol=1e-11, atol=1e-14)
    args = _moving_args("hmm")
    f = jg.jit_grad(_hmm_forward, argnums=(0, 1), wait=True)
    v, g = f(*args)
    ev, eg = jg.value_and_grad(_hmm_forward, argnums=(0, 1))(*args)
    np.testing.assert_allclose(v, ev, rtol=1e-13)
    for a, b in zip(g, eg):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-14)
    graph = f.lower(*args).graph
    assert sum(n.op == "gather" for n in graph.nodes if n.op != "scan") <= 4


# ---- rows made at once from Python-int positions; values read from the last iteration ---------
def _char_rnn(W, U, idx):
    """min-char-rnn's step: a one-hot vector set in np.zeros at a Python-int position, its
    product with W, a tanh recurrence."""
    h, loss = np.zeros(U.shape[0]), 0.0
    for t in range(len(idx)):
        x = np.zeros((W.shape[1], 1))
        x[idx[t]] = 1.0
        h = np.tanh(U @ h + (W @ x)[:, 0])
        loss += np.sum(h ** 2)
    return loss


def _column_rnn(W, idx):
    h, loss = np.zeros(W.shape[0]), 0.0
    for t in range(len(idx)):
        h = np.tanh(W @ h + W[:, idx[t]])
        loss += np.sum(h)
    return loss


def _char_args(T=20, seed=0):
    rng = np.random.default_rng(seed)
    return (0.3 * rng.standard_normal((6, 5)), 0.3 * rng.standard_normal((6, 6)),
            [int(i) for i in rng.integers(-5, 5, T)])


def test_one_hot_rows_at_python_int_positions_are_made_at_once():
    """The per-step one-hot vectors (negative positions included) are one scatter into the rows
    end to end and one product: before, 20 scatters and 20 products ran before the scan."""
    args = _char_args()
    g = check(_char_rnn, args, argnums=(0, 1))
    assert len(forward_scans(g)) == 1 and forward_scans(g)[0].p["length"] >= 19
    outside = [n for n in g.nodes if n.op == "scatter_set"]
    assert len(outside) == 1 and outside[0].shape[0] >= 19 * 5
    g = check(_column_rnn, (args[1], [i % 6 for i in args[2]]))
    assert sum(n.op == "gather" for n in g.nodes) == 1


def test_stacked_one_hot_positions_are_bounds_checked():
    W, U, idx = _char_args()
    f = jg.jit_grad(_char_rnn, argnums=(0, 1), wait=True)
    v, g = f(W, U, idx)
    ev, eg = jg.value_and_grad(_char_rnn, argnums=(0, 1))(W, U, idx)
    np.testing.assert_allclose(v, ev, rtol=1e-13)
    for a, b in zip(g, eg):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-14)
    for bad in (5, -6):
        idx2 = list(idx)
        idx2[7] = bad
        with pytest.raises(IndexError, match="out of bounds"):
            f(W, U, idx2)


def _sinkhorn(X, Y, eps=0.5, iters=12):
    M = np.sum((X[:, None, :] - Y[None, :, :]) ** 2, axis=-1)
    f, g = np.zeros(X.shape[0]), np.zeros(Y.shape[0])
    for _ in range(iters):
        f = -eps * np.log(np.sum(np.exp((g[None, :] - M) / eps), axis=1))
        g = -eps * np.log(np.sum(np.exp((f[:, None] - M) / eps), axis=0))
    return np.sum(np.exp((f[:, None] + g[None, :] - M) / eps) * M)


def test_a_value_read_only_from_the_last_iteration_is_a_carry():
    """Sinkhorn's `f[:, None]` is reused after the loop (tracing shares it): it is a carry of
    the scan, not a stacked output of every iteration."""
    rng = np.random.default_rng(3)
    args = (rng.standard_normal((7, 2)), rng.standard_normal((5, 2)))
    g = check(_sinkhorn, args)
    (scan,) = forward_scans(g)
    nk, avals = scan.p["n_carry"], scan.p["out_avals"]
    ys = avals[nk:len(avals) - nk]          # (the carries, the stacked outputs, the carries' history)
    assert scan.p["length"] >= 11 and not [s for s, _ in ys if len(s) == 3]
    # the loop is cut where the iteration passes the vector g on, not its broadcast g[None, :]
    # (the first rotation found): one (7, 5) carry, the one read after the loop, and no
    # (7, 5) matrix stacked per iteration for the reverse sweep
    carries = [s for s, _ in avals[:nk]]
    assert sorted(len(s) for s in carries) == [1, 2] and not [s for s, _ in ys if len(s) == 2], avals


def test_second_derivatives_through_rerolled_loops():
    """A gradient of a Python-loop RNN inside a traced gradient, and the Hessian of Sinkhorn:
    the rows of the loops the inner derivative makes mix inputs, constants and slices (once
    an IndexError and a KeyError when stacking them)."""
    rng = np.random.default_rng(8)
    W, xs = 0.4 * rng.standard_normal((5, 5)), rng.standard_normal((20, 5))

    def loop_rnn(W, xs):
        h, loss = np.zeros(W.shape[0]), 0.0
        for t in range(xs.shape[0]):
            h = np.tanh(W @ h + xs[t])
            loss = loss + np.sum(h ** 2)
        return loss

    check(lambda W: np.sum(jg.grad(loop_rnn)(W, xs) ** 2), (W,))
    X, Y = rng.standard_normal((6, 2)), rng.standard_normal((4, 2))
    graph = jg.make_graph(jg.hessian(_sinkhorn))(X, Y)
    np.testing.assert_allclose(jg.eval_graph(graph, X, Y), jg.hessian(_sinkhorn)(X, Y), rtol=1e-10, atol=1e-12)


def test_a_scalar_recursion_collected_in_a_list_becomes_a_scan():
    """A GARCH-style recursion of scalars appended to a list: a body of two nodes (the terms
    without the carry are hoisted) over 59 iterations is a scan, not straight-line code whose
    compile grew to minutes (100 steps: 59 s); values and gradients match eager."""
    def loss(th, e):
        s = 1.0
        out = [s]
        for t in range(1, e.shape[0]):
            s = th[0] + th[1] * e[t - 1] ** 2 + th[2] * s
            out.append(s)
        s = np.array(out)
        return np.sum(np.log(s) + e ** 2 / s)

    th, e = np.array([0.05, 0.1, 0.85]), np.random.default_rng(8).standard_normal(60)
    f = jg.jit_grad(loss, backend="python")
    assert any(n.op == "scan" for n in f.lower(th, e).graph.nodes)
    v, g = f(th, e)
    v_ref, g_ref = jg.value_and_grad(loss)(th, e)
    np.testing.assert_allclose(v, v_ref, rtol=1e-12)
    np.testing.assert_allclose(g, g_ref, rtol=1e-11)
