"""Forward-graph rewrites (jitgraph/rewrites.py) and np.add.at of whole slices.

A rewritten graph must compute what the eager tape (which follows the NumPy code as
written) computes, values and gradients, on the reference interpreter and compiled."""
import numpy as np
import pytest

import jitgraph as jg
from jitgraph.api import eval_graph, trace_graph

N, E, F, H = 7, 19, 5, 4


@pytest.fixture
def graph_data():
    rng = np.random.default_rng(3)
    src = rng.integers(0, N, E)
    dst = rng.integers(-N, N, E)            # negative indices count from the end
    X = rng.standard_normal((N, F))
    W1, W2 = rng.standard_normal((F, H)), rng.standard_normal((H, 3))
    return W1, W2, X, src, dst


def gcn(W1, W2, X, src, dst):
    """Two message-passing layers: each edge's message h[src] @ W summed into its target."""
    h = X
    for W in (W1, W2):
        agg = np.zeros((h.shape[0], W.shape[1]))
        np.add.at(agg, dst, h[src] @ W)
        h = np.tanh(agg + h @ W)
    return np.sum(h ** 2)


def _products(graph):
    return [n for n in graph.nodes if n.op in ("matmul", "matmul_add")]


def _agree(got, want, rtol=1e-12):
    for a, b in zip(jg.tree.tree_flatten(got)[0], jg.tree.tree_flatten(want)[0]):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-13)


def test_gathered_rows_are_multiplied_before_the_gather(graph_data):
    graph = trace_graph(gcn, graph_data, (0, 1), grad=True).verify()
    # every product (forward and backward) runs over the N node rows, none over the E edges
    rows = {n.shape[0] for n in _products(graph)} | {n.inputs[0].shape[-1] for n in _products(graph)
                                                    if n.shape[0] in (F, H)}
    assert E not in rows, str(graph)
    want = jg.value_and_grad(gcn, (0, 1))(*graph_data)
    _agree(eval_graph(graph, *graph_data), want)
    _agree(jg.jit_grad(gcn, argnums=(0, 1), wait=True)(*graph_data), want)


def test_fewer_gathered_rows_than_the_matrix_has_stay_as_written(graph_data):
    W1, W2, X, src, dst = graph_data

    def f(W1, X, idx):
        return np.sum(np.tanh(X[idx] @ W1))

    idx = np.array([3, 1])
    graph = trace_graph(f, (W1, X, idx), 0, grad=True).verify()
    assert [n.shape for n in graph.nodes if n.op == "matmul" and n.inputs[0].op == "gather"] == [(2, H)]
    _agree(eval_graph(graph, W1, X, idx), jg.value_and_grad(f)(W1, X, idx))


def _scatter_adds(graph):
    return [(n.p["axis"], n.p["size"], n.inputs[0].shape) for n in graph.nodes if n.op == "scatter_add"]


@pytest.mark.parametrize("case", ["rows", "index_matrix", "columns", "trailing"])
def test_add_at_of_whole_slices_scatters_slices(case, graph_data):
    W1, _, X, src, dst = graph_data
    m = X[:4] * 1.0
    if case == "rows":
        idx, shape = dst[:4], (N, F)

        def f(w, m, idx):
            agg = np.zeros(shape)
            np.add.at(agg, idx, m * w)
            return np.sum(np.tanh(agg) * np.arange(N * F).reshape(shape))
    elif case == "index_matrix":
        idx, shape, m = dst[:4].reshape(2, 2), (N, F), m.reshape(2, 2, F)

        def f(w, m, idx):
            agg = np.ones(shape)
            np.add.at(agg, idx, m * w)
            return np.sum(agg ** 3)
    elif case == "columns":
        idx, shape = src[:4], (F, N)

        def f(w, m, idx):
            agg = np.zeros(shape)
            np.subtract.at(agg, (slice(None), idx), (m * w).T)
            return np.sum(np.sin(agg))
    else:
        idx, shape, m = src[:4], (N, F, 2), m[..., None] * np.ones(2)

        def f(w, m, idx):
            agg = np.zeros(shape)
            np.add.at(agg, (idx, Ellipsis), m * w[:, None])
            return np.sum(agg ** 2)
    w = np.linspace(0.5, 1.5, F)
    graph = trace_graph(f, (w, m, idx), 0, grad=True).verify()
    axis = 1 if case == "columns" else 0
    assert (axis, shape[axis], tuple(np.shape(m * 1.0) if case != "columns" else (F, 4))) \
        in _scatter_adds(graph), str(graph)
    assert not [s for s in _scatter_adds(graph) if s[1] == int(np.prod(shape))]     # nothing flattened
    want = jg.value_and_grad(f)(w, m, idx)
    np.testing.assert_allclose(want[0], f(w, m, idx), rtol=1e-13)
    eps = 1e-6
    fd = [(f(w + eps * e, m, idx) - f(w - eps * e, m, idx)) / (2 * eps) for e in np.eye(F)]
    np.testing.assert_allclose(want[1], fd, rtol=1e-6, atol=1e-8)
    _agree(eval_graph(graph, w, m, idx), want)
    _agree(jg.jit_grad(f, wait=True)(w, m, idx), want)


def _rows_at(w, m, idx):
    agg = np.zeros((N, F))
    np.add.at(agg, idx, m * w)
    return np.sum(agg)


@pytest.mark.parametrize("bad", [N, -N - 1])
def test_add_at_out_of_bounds_is_numpys_index_error(bad):
    w, m, idx = np.ones(F), np.ones((2, F)), np.array([0, bad])
    with pytest.raises(IndexError, match="out of bounds"):
        jg.value_and_grad(_rows_at)(w, m, idx)
    with pytest.raises(IndexError, match="out of bounds"):
        jg.jit_grad(_rows_at, wait=True)(w, m, idx)

    def known(w, m):
        return _rows_at(w, m, idx)
    with pytest.raises(IndexError, match=f"index {bad} is out of bounds for axis 0 with size {N}"):
        jg.jit_grad(known, wait=True)(w, m)


def test_an_embeddings_rows_for_a_batch_of_sequences(graph_data):
    W1, _, X, src, _ = graph_data
    tokens = src[:18].reshape(3, 6)          # 18 tokens of a 7-entry vocabulary

    def f(emb, W, tokens):
        return np.sum(np.tanh(emb[tokens] @ W) ** 2)

    graph = trace_graph(f, (X, W1, tokens), (0, 1), grad=True).verify()
    assert 18 not in {n.shape[0] for n in _products(graph)}, str(graph)
    want = jg.value_and_grad(f, (0, 1))(X, W1, tokens)
    np.testing.assert_allclose(want[0], f(X, W1, tokens), rtol=1e-13)
    _agree(eval_graph(graph, X, W1, tokens), want)
    _agree(jg.jit_grad(f, argnums=(0, 1), wait=True)(X, W1, tokens), want)


# ---- a loop reading one column per step ---------------------------------------------------------
B, T, V = 3, 12, 5


def _rnn(Wx, Wh, x, tok):
    """A character model's shape: x[:, t] read at each step, targets tok[:, t + 1]."""
    h, total = np.zeros((B, Wh.shape[0])), 0.0
    for t in range(T):
        h = np.tanh(x[:, t] @ Wx + h @ Wh)
        logits = h[:, :V]
        total = total + np.sum(logits[np.arange(B), tok[:, t + 1]])
    return total


@pytest.fixture
def rnn_data():
    rng = np.random.default_rng(5)
    return (rng.standard_normal((4, 6)) * 0.5, rng.standard_normal((6, 6)) * 0.5,
            rng.standard_normal((B, T, 4)), rng.integers(-V, V, (B, T + 1)))


def test_a_columns_adjoint_is_added_into_its_slice(rnn_data):
    graph = trace_graph(_rnn, rnn_data, (0, 1, 2), grad=True, reroll=False).verify()
    # x's adjoint: its first few columns are terms of one sum (index views of the loop that
    # reads it), the rest are written into that array, not T additions of padded whole arrays
    few = jg.ad._PADDED_TERMS
    assert [n.op for n in graph.nodes if n.shape == (B, T, 4) and n.op in ("add", "update_slice")] \
        == ["add"] * (few - 1) + ["update_slice"] * (T - few), str(graph)
    want = jg.value_and_grad(_rnn, (0, 1, 2))(*rnn_data)
    _agree(eval_graph(graph, *rnn_data), want)
    _agree(jg.jit_grad(_rnn, argnums=(0, 1, 2), wait=True, reroll=False)(*rnn_data), want)


def test_the_bounds_checks_of_an_arrays_columns_are_one_check(rnn_data):
    graph = trace_graph(_rnn, rnn_data, (0, 1, 2), grad=True, reroll=False)
    assert [kind for kind, _ in graph.meta["checks"]] == ["index", "index"]     # max and min
    f = jg.jit_grad(_rnn, argnums=(0, 1, 2), wait=True, reroll=False)
    _agree(f(*rnn_data), jg.value_and_grad(_rnn, (0, 1, 2))(*rnn_data))
    Wx, Wh, x, tok = rnn_data
    for bad in (V, -V - 1):
        t = tok.copy()
        t[1, 4] = bad
        with pytest.raises(IndexError, match=f"index {bad} is out of bounds for axis 1 with size {V}"):
            f(Wx, Wh, x, t)
    t = tok.copy()
    t[:, 0] = 99                 # a column never used as an index: NumPy raises nothing
    _agree(f(Wx, Wh, x, t), jg.value_and_grad(_rnn, (0, 1, 2))(Wx, Wh, x, t))


def test_columns_that_do_not_tile_a_box_keep_their_own_checks(rnn_data):
    Wx, Wh, x, tok = rnn_data

    def f(Wx, tok):
        logits = np.tanh(x[:, 0] @ Wx)[:, :V]
        return sum(np.sum(logits[np.arange(B), tok[:, t]]) for t in (0, 2, 3))

    graph = trace_graph(f, (Wx, tok), 0, grad=True)
    assert len(graph.meta["checks"]) == 6       # max and min of each column
    t = tok.copy()
    t[:, 1] = 99
    g = jg.jit_grad(f, wait=True)
    _agree(g(Wx, t), jg.value_and_grad(f)(Wx, t))
    t[1, 2] = -V - 1
    with pytest.raises(IndexError, match=f"index {-V - 1} is out of bounds for axis 1 with size {V}"):
        g(Wx, t)


def test_a_message_passing_layers_concatenated_pieces(graph_data):
    """concatenate([h[src], h[dst], e], axis=1) @ W: each gathered piece is multiplied by its
    rows of W before the gather."""
    W1, _, X, src, dst = graph_data
    e = np.linspace(-1.0, 1.0, E)[:, None]
    W = np.random.default_rng(1).standard_normal((2 * F + 1, H))

    def mpnn(W, X, e, src, dst):
        msg = np.tanh(np.concatenate([X[src], X[dst], e], axis=1) @ W)
        agg = np.zeros((N, H))
        np.add.at(agg, dst, msg)
        return np.sum(agg ** 2)

    args = (W, X, e, src, dst)
    graph = trace_graph(mpnn, args, (0, 1), grad=True).verify()
    assert not [n for n in _products(graph) if n.inputs[0].op == "concatenate"], str(graph)
    # no product reads the E gathered rows of a piece, forward or backward
    assert not [n for n in _products(graph) if (E, F) in (n.inputs[0].shape, n.inputs[-1].shape)
                or (F, E) in (n.inputs[0].shape, n.inputs[-1].shape)], str(graph)
    want = jg.value_and_grad(mpnn, (0, 1))(*args)
    np.testing.assert_allclose(want[0], mpnn(*args), rtol=1e-13)
    _agree(eval_graph(graph, *args), want)
    _agree(jg.jit_grad(mpnn, argnums=(0, 1), wait=True)(*args), want)
