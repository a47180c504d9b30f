"""Cheap values recomputed by the loops that read them, not stored (fusion's _recompute_cheap).

A derivative the reverse sweep builds from a forward value (tanh's 1 - y*y, a ReLU's mask)
lands in the forward loop beside that value; its product with the adjoint runs later. When
it is a cheap function of values stored anyway, the later loops recompute it and nothing
stores it. Checked: the decision (what is recomputed, and that recomputing never makes a
value stored that was not), the generated loops, and the values against the interpreter,
in a compiled entry and a Python entry.
"""
import os
import re
import sys

import numpy as np
import pytest

import jitgraph as jg
from jitgraph import codegen
from jitgraph.api import trace_graph
from jitgraph.codegen import emit_cpu

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import models  # noqa: E402  (benchmarks/models/)


@pytest.fixture(autouse=True)
def _blas_products(monkeypatch):
    """Products stay BLAS calls here, as at realistic sizes: at these small shapes a product of a
    few terms would be a loop of its own (codegen.products.SMALL_K), fused with its neighbours."""
    monkeypatch.setattr(codegen.products, "SMALL_K", 0)
    monkeypatch.setattr(codegen.products, "SMALL_STACKED_TERMS", 0)


def _two_layers(params, x):
    w1, w2 = params
    h = np.tanh(x @ w1)
    return np.sum(np.tanh(h @ w2) ** 2)


def _inputs(rng):
    return (rng.standard_normal((5, 7)), rng.standard_normal((7, 3))), rng.standard_normal((6, 5))


def _agree(fun, *args):
    v0, g0 = jg.value_and_grad(fun)(*args)
    f = jg.jit_grad(fun, wait=True)
    v1, g1 = f(*args)
    np.testing.assert_allclose(v1, v0, rtol=1e-12)
    for a, b in zip(g1, g0):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)
    return f.lower(*args)


def test_tanh_derivative_is_recomputed_where_the_adjoint_arrives(rng):
    params, x = _inputs(rng)
    low = _agree(_two_layers, params, x)
    graph = low.graph
    part = codegen.Partition(graph)
    recomputed = [n for n in graph.nodes if n.id in part.recomputed]
    # the first layer's 1 - h*h (h feeds the second product and its weight gradient: stored)
    assert {n.op for n in recomputed} >= {"mul", "sub"}
    assert all(n.id not in part.materialized for n in recomputed)
    assert "recomputed by their readers: " in part.describe()
    # no loop stores a value of the hidden layer's shape but h itself
    hidden = [n for n in graph.nodes if n.id in part.materialized and n.shape == (6, 7)
              and isinstance(part.step_of.get(n.id), codegen.Group)]
    assert [n.op for n in hidden if n.id not in graph.adjoint_ids] == ["tanh"]
    # the backward loop spells it out of h's array (the only loop storing h)
    assert re.search(r"\(1\.0 - \((v\w+)\[[^\]]*\] \* \1\[[^\]]*\]\)\)", low.source)
    assert len(re.findall(r"= _tanh\(", low.source)) == 2


def test_recomputed_values_in_a_python_entry(rng, monkeypatch):
    monkeypatch.setattr(emit_cpu, "NJIT_ENTRY_MAX_STEPS", 0)
    params, x = _inputs(rng)
    low = _agree(lambda p, x: _two_layers(p, x) + np.sum(np.maximum(x @ p[0], 0.0) ** 2), params, x)
    assert "calling the compiled loops" in low.source       # a Python entry
    assert codegen.Partition(low.graph).recomputed


def test_flat_and_row_loops_read_recomputed_values(rng):
    """The tanh derivative is read by a flat loop in `_two_layers` (above); here by a row loop,
    the one that also sums each row for a per-row bias's gradient."""
    params = (rng.standard_normal((8, 8)), rng.standard_normal(4))
    x = rng.standard_normal((4, 8))

    def f(params, x):
        w, b = params
        h = np.tanh(x @ w + b[:, None])
        r = np.maximum(h @ w, 0.0)
        return np.sum(r * r * x) + np.sum(h ** 3)
    low = _agree(f, params, x)
    part = codegen.Partition(low.graph)
    readers = [s for s in part.groups() for n in s.nodes
               if any(part.resolve(y).id in part.recomputed for y in n.inputs)]
    assert readers and all(s.k < s.rank for s in readers)       # row loops (outer axes only)

    flat = _agree(_two_layers, *_inputs(rng))
    assert re.search(r"\(1\.0 - \((v\w+_f)\[i\] \* \1\[i\]\)\)", flat.source)     # a flat loop's read


def _graph(name):
    mod = models.load(name)
    args = mod.make_inputs("small", seed=0)
    st = tuple(getattr(mod, "STATIC_ARGNUMS", ()))
    fixed = {k: args[k] for k in st}

    def fn(*dyn):
        it = iter(dyn)
        return mod.loss(*[fixed[k] if k in fixed else next(it) for k in range(len(args))])
    return trace_graph(fn, [a for k, a in enumerate(args) if k not in st], 0, grad=True)


@pytest.mark.parametrize("name", models.NAMES)
def test_recomputing_never_stores_more(name):
    """Recomputation only removes stored values: each recomputed value reads values stored
    anyway, and every later step reading it is a loop."""
    graph = _graph(name)
    plain = codegen.Partition(graph, recompute=False)
    part = codegen.Partition(graph)
    assert part.materialized <= plain.materialized
    assert part.materialized == plain.materialized - part.recomputed
    outputs = {part.resolve(o).id for o in graph.outputs}
    for n in graph.nodes:
        s = part.step_of.get(n.id)
        if s is None:
            continue
        for src in part.reads(n):
            assert src.id not in part.recomputed
        if isinstance(s, codegen.OpStep):
            assert not any(part.resolve(x).id in part.recomputed for x in n.inputs)
    assert not part.recomputed & outputs


def test_values_read_once_per_point_are_recomputed_and_broadcast_ones_are_not(rng):
    """A cheap value read through a pad by a loop over a larger domain (np.diff of a stencil,
    padded back to the grid) reads each element once there: it is recomputed. One read
    through a broadcast (a per-column value at every row) would be recomputed at each row:
    it stays stored."""
    def f(u, b):
        lap = np.pad(np.diff(u, axis=0), ((1, 0), (0, 0)))
        per_column = np.exp(b) * 2.0 - b
        return np.sum(np.sin(lap + u) * per_column)

    u, b = rng.standard_normal((40, 30)), rng.standard_normal(30)
    graph = trace_graph(f, [u, b], (0, 1), grad=True)
    part = codegen.Partition(graph)
    recomputed = [n for n in graph.nodes if n.id in part.recomputed]
    assert any(n.op == "sub" and n.shape == (39, 30) for n in recomputed)
    column = [n for n in graph.nodes if n.op == "sub" and n.shape == (30,)]
    assert column and all(n.id in part.materialized for n in column)
    _agree(f, u, b)


@pytest.mark.parametrize("repeats", [False, True])
def test_values_read_through_a_gather_are_recomputed_unless_its_indices_repeat(rng, repeats):
    """A constant gather that reads each element once (a permutation) lets its reader recompute
    a cheap value; one whose indices repeat (an edge pad's, a window's) would recompute elements
    several times: the value stays stored."""
    idx = np.array([0, 0, 1, 2, 3, 4, 5, 6]) if repeats else np.array([3, 0, 7, 1, 6, 2, 5, 4])

    def f(u, w):
        d = np.diff(u, axis=1)                      # (6, 8), cheap, read through the gather only
        return np.sum(np.sin(d[:, idx] * w))

    u, w = rng.standard_normal((6, 9)), rng.standard_normal((6, 8))
    graph = trace_graph(f, [u, w], (0, 1), grad=True)
    part = codegen.Partition(graph)
    diff = [n for n in graph.nodes if n.op == "sub" and n.shape == (6, 8)]
    assert diff and all((n.id in part.recomputed) != repeats for n in diff[:1])
    _agree(f, u, w)
