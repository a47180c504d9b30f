"""Code generation: fusion structure, golden sources, runtime behaviour of compiled kernels."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from jitgraph import codegen
import jitgraph as jg
from jitgraph.codegen import emit_cpu, fusion, mathlib, native
from jitgraph.codegen.fusion import Group
from golden_files import assert_golden
from threads import on_threads
from jitgraph.bench import WORKLOADS
SMALL = dict(w1=dict(n=1000), w2=dict(B=16, D=8, H=12, C=5), w3=dict(n=17), w4=dict(n=100),
             w5={}, w6=dict(r=9, c=13))


def workload_graph(name, **kw):
    w = WORKLOADS[name]
    args = w["args"](np.random.default_rng(0), **(kw or SMALL[name]))
    return jg.make_graph(w["loss"], argnums=w["argnums"], grad=True)(*args), args


# ---- fusion structure ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["w1", "w4"])
def test_elementwise_workloads_are_one_loop(name):
    graph, _ = workload_graph(name)
    part = codegen.Partition(graph)
    assert len(part.steps) == 1, part.describe()
    (g,) = part.groups()
    assert g.k == g.rank  # a flat loop: forward and backward in the same iteration
    # nothing but the outputs is stored: intermediates live in registers
    assert part.materialized == {part.resolve(n).id for n in graph.outputs}


@pytest.mark.parametrize("name", ["w3", "w6"])
def test_row_workloads_are_one_row_loop(name):
    graph, _ = workload_graph(name)
    part = codegen.Partition(graph)
    assert len(part.steps) == 1, part.describe()
    (g,) = part.groups()
    assert g.k == 1 and g.rank == 2  # rows outside, passes over each row inside


def test_layer_norm_hvp_is_one_row_loop():
    # the casts of the scale and shift (parameters only) are placed after the first row loop;
    # they move in front of it, so the whole second-order graph stays one pass over the rows
    w = WORKLOADS["w6"]
    args = w["args"](np.random.default_rng(0), **SMALL["w6"])
    v = tuple(np.ones_like(args[a]) for a in w["argnums"])
    graph = jg.hvp(w["loss"], argnums=w["argnums"]).lower(*args, v).graph
    part = codegen.Partition(graph)
    rows = [g for g in part.groups() if g.k < g.rank]
    assert len(rows) == 1, part.describe()
    assert all(isinstance(s, codegen.Group) and s.rank == 1 for s in part.steps if s is not rows[0])
    # no row-sized value is stored but the x-shaped output
    stored = [n for n in graph.nodes if n.id in part.materialized and n.shape == args[0].shape]
    assert len(stored) == 1, part.describe()
    for i, step in enumerate(part.steps):        # steps renumbered in their new order
        assert step.seq == i


def _softmax_product(s, v):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.sum((e / e.sum(axis=-1, keepdims=True) @ v) ** 2)


def _stored_row_broadcasts(part, graph):
    return [n for n in graph.nodes if n.op == "broadcast" and n.id in part.materialized]


def test_a_row_broadcast_read_after_a_product_is_stored_per_row(monkeypatch):
    # the reverse sweep of e / e.sum(...) reads the broadcast row sum after the product's
    # adjoint (another step): it reads the per-row sum by row instead of a stored broadcast
    rng = np.random.default_rng(0)
    s, v = rng.standard_normal((6, 40)), rng.standard_normal((40, 3))
    graph = jg.make_graph(_softmax_product, argnums=(0, 1), grad=True)(s, v)
    part = codegen.Partition(graph)
    assert not _stored_row_broadcasts(part, graph), part.describe()
    read_by_row = [n for n in graph.nodes if n.id in part.virtual and n.op == "broadcast"
                   and isinstance(part.step_of.get(n.id), codegen.Group)]
    assert read_by_row and all(part.resolve(n).id in part.materialized for n in read_by_row)
    monkeypatch.setattr(fusion, "ROW_BROADCASTS_BY_ROW", False)
    assert _stored_row_broadcasts(codegen.Partition(graph), graph)
    monkeypatch.setattr(fusion, "ROW_BROADCASTS_BY_ROW", True)
    value, grads = jg.jit_grad(_softmax_product, argnums=(0, 1), wait=True)(s, v)
    ref_value, ref_grads = jg.value_and_grad(_softmax_product, argnums=(0, 1))(s, v)
    assert np.isclose(value, ref_value, rtol=1e-13)
    for g, r in zip(grads, ref_grads):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-14)


def test_short_row_broadcasts_stay_stored():
    # over a row of 3 (coordinates), later loops read the broadcast flat, as stored
    rng = np.random.default_rng(0)
    s, v = rng.standard_normal((6, 3)), rng.standard_normal((3, 3))
    graph = jg.make_graph(_softmax_product, argnums=(0, 1), grad=True)(s, v)
    part = codegen.Partition(graph)
    assert _stored_row_broadcasts(part, graph), part.describe()


def _planar_layer(z, w, u):
    # a planar flow's layer over 2-D points: a tanh and a log per row of 2
    a = np.tanh(z @ w)
    return np.sum(np.log(np.abs(1.0 + (1.0 - a ** 2) * (w @ u))) + np.sum((z + np.outer(a, u)) ** 2, axis=1))


def test_short_rows_loop_over_literal_extents():
    """A loop over rows of 2 (or 3) points runs them over literal extents, through views with
    literal trailing sizes (LLVM vectorizes across the rows); rows of 16 keep their size
    symbols. Each row length compiles its own source, and every one matches eager."""
    rng = np.random.default_rng(3)
    f = jg.jit_grad(_planar_layer, argnums=(1, 2), wait=True)
    for d in (2, 3, 16):
        z, w, u = rng.standard_normal((40, d)), rng.standard_normal(d) * 0.3, rng.standard_normal(d) * 0.3
        src = f.lower(z, w, u).source
        literal = bool(re.search(rf"_rt\.c_view\(v\w+, \(n\d+, {d}\)\)", src)) and f"range({d})" in src
        assert literal == (d <= emit_cpu.TINY_ROW), src
        value, grads = f(z, w, u)
        ref_value, ref_grads = jg.value_and_grad(_planar_layer, argnums=(1, 2))(z, w, u)
        assert np.isclose(value, ref_value, rtol=1e-13)
        for g, r in zip(grads, ref_grads):
            np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-14)


def test_mlp_matmuls_are_library_calls_and_softmax_is_one_row_group():
    graph, _ = workload_graph("w2")
    part = codegen.Partition(graph)
    ops = [s.node.op for s in part.steps if isinstance(s, codegen.OpStep)]
    assert ops.count("matmul") == 5
    rows = [g for g in part.groups() if g.k < g.rank]
    assert len(rows) == 1 and rows[0].shape == (16, 5)
    # forward softmax cross-entropy and its gradient share the row loop
    assert sum(1 for n in rows[0].nodes if n.id in graph.adjoint_ids) > 5


def test_row_group_passes_over_each_row():
    # w3 differentiates through the max too: max, sum of exp, the max's (zero) adjoint, gradient
    graph, _ = workload_graph("w3")
    _, src, _ = codegen.generate(graph)
    assert src.count("over the row") == 4
    assert "_exp(" in src
    # jg.logsumexp stops the gradient at the max: max, sum of exp, gradient
    A = np.random.default_rng(0).standard_normal((6, 5))
    graph = jg.make_graph(lambda A: np.sum(jg.logsumexp(A, axis=1)), grad=True)(A)
    _, src, _ = codegen.generate(graph)
    assert src.count("over the row") == 3


# ---- golden sources --------------------------------------------------------------------------
def _seed(w, x, b, y):
    return (w * x + b - y) ** 2


def _gather_mlp(E, W, idx):
    return np.sum(np.tanh(E[idx] @ W))


GOLDEN_CASES = {
    "seed": (_seed, (0, 2), lambda: (1.5, 2.0, 0.5, 1.0)),
    "w1": (WORKLOADS["w1"]["loss"], (0, 1), lambda: WORKLOADS["w1"]["args"](np.random.default_rng(0), n=100)),
    "w3": (WORKLOADS["w3"]["loss"], 0, lambda: WORKLOADS["w3"]["args"](np.random.default_rng(0), n=8)),
    "gather_mlp": (_gather_mlp, (0, 1), lambda: (np.ones((6, 4)), np.ones((4, 3)), np.array([0, 2, 2, 5]))),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_source(case):
    """Emitted source is stable; set JITGRAPH_UPDATE_GOLDEN=1 to rewrite after a deliberate change."""
    fn, argnums, make = GOLDEN_CASES[case]
    graph = jg.make_graph(fn, argnums=argnums, grad=True)(*make())
    _, src, _ = codegen.generate(graph)
    assert_golden(src, f"{case}.py.txt", f"source for {case}")


# ---- compiled behaviour -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def w6_small():
    w = WORKLOADS["w6"]
    args = w["args"](np.random.default_rng(1), **SMALL["w6"])
    return jg.jit_grad(w["loss"], argnums=w["argnums"]), args


def test_workloads_match_hand_written_gradients():
    for name in ("w1", "w2", "w3", "w4", "w5"):
        w = WORKLOADS[name]
        args = w["args"](np.random.default_rng(2), **SMALL[name])
        v, g = jg.jit_grad(w["loss"], argnums=w["argnums"])(*args)
        nv, ng = w["numpy"](*args)
        g = g if isinstance(g, tuple) else (g,)
        ng = ng if isinstance(ng, tuple) else (ng,)
        np.testing.assert_allclose(v, nv, rtol=1e-12)
        for a, b in zip(g, ng):
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12 * np.max(np.abs(b)))


def test_outputs_are_numpy_and_inputs_untouched(w6_small):
    f, args = w6_small
    copies = [np.copy(a) for a in args]
    v, (gx, ggam, gbet) = f(*args)
    assert isinstance(v, np.float64)
    for g, a in zip((gx, ggam, gbet), args):
        assert type(g) is np.ndarray and g.shape == a.shape and g.dtype == a.dtype
    for a, c in zip(args, copies):
        np.testing.assert_array_equal(a, c)


def test_nan_and_inf_propagate_and_do_not_poison_later_calls(w6_small):
    f, args = w6_small
    clean = f(*args)
    bad = [np.copy(a) for a in args]
    bad[0][2, 3] = np.nan
    bad[0][4, 1] = np.inf
    v, (gx, _, _) = f(*bad)
    ref_v, (ref_gx, _, _) = jg.value_and_grad(WORKLOADS["w6"]["loss"], argnums=(0, 1, 2))(*bad)
    assert np.isnan(v) and np.isnan(ref_v)
    np.testing.assert_array_equal(np.isnan(gx), np.isnan(ref_gx))
    again = f(*args)
    np.testing.assert_array_equal(again[1][0], clean[1][0])
    assert again[0] == clean[0]


def test_non_contiguous_and_python_scalar_arguments():
    f = jg.jit_grad(lambda x, s: np.sum(np.exp(x * s)), argnums=(0, 1))
    x = np.arange(12.0).reshape(3, 4) / 10
    v, (gx, gs) = f(x.T, 0.5)
    rv, (rgx, rgs) = jg.value_and_grad(lambda x, s: np.sum(np.exp(x * s)), argnums=(0, 1))(x.T, 0.5)
    np.testing.assert_allclose(gx, rgx, rtol=1e-13)
    np.testing.assert_allclose(gs, rgs, rtol=1e-13)
    assert isinstance(gs, np.float64)


def test_pytrees_and_aux_through_jit_grad():
    def loss(params, x):
        h = np.tanh(x @ params["w"] + params["b"][0])
        return np.sum(h * h), {"h": h, "n": np.mean(h)}

    params = {"w": np.ones((3, 2)) * 0.1, "b": [np.zeros(2)]}
    x = np.arange(6.0).reshape(2, 3)
    (v, aux), g = jg.jit_grad(loss, has_aux=True)(params, x)
    (rv, raux), rg = jg.value_and_grad(loss, has_aux=True)(params, x)
    assert set(g) == {"w", "b"} and isinstance(g["b"], list)
    np.testing.assert_allclose(g["w"], rg["w"], rtol=1e-13)
    np.testing.assert_allclose(g["b"][0], rg["b"][0], rtol=1e-13)
    np.testing.assert_allclose(aux["h"], raux["h"], rtol=1e-13)
    np.testing.assert_allclose(aux["n"], raux["n"], rtol=1e-13)


def test_jit_forward_and_lower():
    fwd = jg.jit(lambda x: np.tanh(x) * 2)
    x = np.linspace(-3, 3, 7)
    np.testing.assert_allclose(fwd(x), np.tanh(x) * 2, rtol=1e-15)
    low = fwd.lower(x)
    assert "def kernel" in low.source and "tanh" in str(low.graph)
    assert os.path.exists(low.path) and os.path.basename(low.path).startswith("jg_")
    assert len(low.groups) == 1


def test_data_dependent_control_flow_is_a_tracing_error():
    def f(x):
        if np.sum(x) > 0:
            return np.sum(x)
        return -np.sum(x)

    with pytest.raises(jg.TracingError, match="test_codegen.py"):
        jg.jit_grad(f)(np.ones(3))


def test_new_batch_size_reuses_source_and_kernel():
    f = jg.jit_grad(lambda w, x: np.sum(np.tanh(x @ w)), argnums=0)
    w = np.ones((4, 3)) * 0.1
    a = f.lower(w, np.ones((5, 4)))
    b = f.lower(w, np.ones((9, 4)))
    info = f.cache_info()
    assert info.traces == 2  # retraced for the new shape...
    assert a.source == b.source and a.path == b.path  # ...but the same code, compiled once
    assert b.program.kernel is a.program.kernel
    assert info.kernel_reuses == 1 and info.compiles + info.disk_hits == 1
    assert b.native == "reused"


def _lstm_gates(z, c):
    i, f, o, g = np.split(z, 4, axis=1)
    c = 1.0 / (1.0 + np.exp(-f)) * c + 1.0 / (1.0 + np.exp(-i)) * np.tanh(g)
    return np.sum((1.0 / (1.0 + np.exp(-o)) * np.tanh(c)) ** 2)


def test_serial_loops_of_many_arrays_run_outlined_and_small_ones_inline(monkeypatch):
    # an LSTM cell's gradient: serial loops (under PARALLEL_MIN points) storing many arrays,
    # which run in noalias functions of their own (emit_cpu.OUTLINE_MIN) in a compiled entry
    monkeypatch.setattr(native, "ENABLED", False)      # (its entry would run as Python)
    rng = np.random.default_rng(5)
    z, c = rng.standard_normal((32, 256)), rng.standard_normal((32, 64))
    f = jg.jit_grad(_lstm_gates, argnums=(0, 1))
    src = f.lower(z, c).source
    outlined = [line for line in src.splitlines() if line.startswith("def ") and "_loop(" in line]
    assert outlined, src
    for line in outlined:
        name = line[4:line.index("(")]
        assert f"@_rt.chunk_njit(**_OPTS)\n{line}" in src
        assert f"    _rt.call({name}, " in src             # called through its symbol, not launched
    v, (gz, gc) = f(z, c)
    ev, (ez, ec) = jg.value_and_grad(_lstm_gates, argnums=(0, 1))(z, c)
    assert v == pytest.approx(ev, rel=1e-12)
    np.testing.assert_allclose(gz, ez, rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(gc, ec, rtol=1e-11, atol=1e-14)
    # the same program on a few points, and a loop of two arrays, stay inline
    small = jg.jit_grad(_lstm_gates, argnums=(0, 1))
    assert "_loop(" not in small.lower(z[:2, :8], c[:2, :2]).source
    two = jg.jit_grad(lambda x: np.sum(np.tanh(x)))
    assert "_loop(" not in two.lower(rng.standard_normal(5000)).source


def _lstm_steps(z, c, w):
    h = np.zeros_like(c)
    for t in range(8):
        i, f, o, g = np.split(z[t] + np.tile(h, 4) * w, 4, axis=1)
        c = 1.0 / (1.0 + np.exp(-f)) * c + 1.0 / (1.0 + np.exp(-i)) * np.tanh(g)
        h = 1.0 / (1.0 + np.exp(-o)) * np.tanh(c)
    return np.sum(h ** 2)


def _chain_loss(x, w):
    """Rows of serial loops, each its own step (a reduction between them), then a product."""
    for _ in range(6):
        x = np.tanh(x) * 1.5 - x / (1.0 + np.sum(x * x, axis=1, keepdims=True))
    return np.sum((x @ w) ** 2)


@pytest.mark.parametrize("n, python", [(600, True), (4, False)])
def test_a_long_compiled_entry_of_heavy_steps_becomes_a_python_entry(monkeypatch, n, python):
    """A program whose compiled entry would pass ENTRY_MAX_LINES runs from Python when its
    steps are heavy enough for Python's cost per step not to matter, and stays one compiled
    function when they are light."""
    monkeypatch.setattr(emit_cpu, "ENTRY_MAX_LINES", 20)
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((n, 300)), rng.standard_normal((300, 300)) / 20
    graph = jg.make_graph(_chain_loss, argnums=(0, 1), grad=True, reroll=False)(x, w)
    part, source, em = codegen.generate(graph)
    assert len(part.steps) <= emit_cpu.NJIT_ENTRY_MAX_STEPS
    assert em.driver is python and ("calling the compiled loops" in source) is python
    assert emit_cpu.python_entry_pays(graph, part) is python
    if python:
        # its loop functions compile natively (codegen/native.py): a Python entry however
        # short its compiled entry would be; without native compiles, only a long one
        monkeypatch.setattr(emit_cpu, "ENTRY_MAX_LINES", 10_000)
        assert codegen.generate(graph)[2].driver is native.ENABLED
        if native.ENABLED:
            assert "@_rt.native_njit(" in codegen.generate(graph)[1]
        monkeypatch.setattr(native, "ENABLED", False)
        assert not codegen.generate(graph)[2].driver


def test_a_program_of_few_loops_runs_from_python_however_small(monkeypatch):
    """A Python entry calling a native loop function costs less per call than a compiled
    entry's Numba dispatch (w5: 1.5 against 2.1 us), so a program of a few loops and no
    library steps gets a Python entry at any size where native compiles are on."""
    x = np.linspace(0.0, 1.0, 5)
    graph = jg.make_graph(lambda x: np.sum(np.tanh(x) * x), grad=True)(x)
    part, _, em = codegen.generate(graph)
    assert all(isinstance(step, Group) for step in part.steps)
    assert em.driver is native.ENABLED
    monkeypatch.setattr(native, "ENABLED", False)
    assert not codegen.generate(graph)[2].driver


def test_a_python_entry_of_few_steps_computes_what_the_graph_does(monkeypatch):
    """The source of such an entry, run as Python (its loops interpreted: small sizes),
    agrees with the reference interpreter."""
    from jitgraph.interpreter import evaluate
    monkeypatch.setattr(emit_cpu, "ENTRY_MAX_LINES", 20)
    monkeypatch.setattr(emit_cpu, "PY_ENTRY_MAX_SHARE", 1e9)     # any steps pay at these sizes
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((24, 300)), rng.standard_normal((300, 300)) / 20
    graph = jg.make_graph(_chain_loss, argnums=(0, 1), grad=True, reroll=False)(x, w)
    program = codegen.compile_graph(graph, backend="python")
    assert "calling the compiled loops" in program.source
    for got, want in zip(program.run(x, w), evaluate(graph, x, w)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_python_mode_runs_the_threaded_products_serially():
    """Python mode has the threaded products of large programs, as their serial blocks."""
    from jitgraph.codegen import pymode
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((300, 70)), rng.standard_normal((70, 50))
    out = np.empty((300, 50))
    np.testing.assert_allclose(pymode.runtime.matmul2d_par(a, b.T.copy().T, out), a @ b, rtol=1e-12)
    a3, b3 = rng.standard_normal((3, 20, 7)), rng.standard_normal((3, 7, 5))
    np.testing.assert_allclose(pymode.runtime.matmul_batched_par(a3, b3, np.empty((3, 20, 5))), a3 @ b3,
                               rtol=1e-12)


def test_control_flow_keeps_a_compiled_entry(monkeypatch):
    """A scanned loop's steps ran slower from a Python entry: such programs keep theirs."""
    monkeypatch.setattr(emit_cpu, "ENTRY_MAX_LINES", 1)

    def loss(h, xs):
        def step(h, x):
            h = np.tanh(h * x + 1.0)
            return h, np.sum(h)
        h, ys = jg.scan(step, h, xs)
        return np.sum(h) + np.sum(ys)

    rng = np.random.default_rng(4)
    graph = jg.make_graph(loss, argnums=(0, 1), grad=True)(rng.standard_normal(4000), rng.standard_normal((50, 4000)))
    part, source, em = codegen.generate(graph)
    assert not emit_cpu.python_entry_pays(graph, part) and not em.driver


def test_a_python_entry_calls_its_outlined_loops_itself():
    """A Python entry calls an outlined loop directly (`@_rt.loop_njit`: noalias arrays and a
    Python wrapper), with no compiled group function around it, and a flat loop makes its
    flat views from its own arguments."""
    rng = np.random.default_rng(6)
    z, c, w = rng.standard_normal((8, 32, 256)), rng.standard_normal((32, 64)), rng.standard_normal((32, 256))
    f = jg.jit_grad(_lstm_steps, argnums=(0, 1, 2), wait=True)
    src = f.lower(z, c, w).source
    assert "calling the compiled loops" in src             # a Python entry
    deco = "@_rt.native_njit(**_OPTS)" if native.ENABLED else "@_rt.loop_njit(**_OPTS)"
    loops = [line for line in src.splitlines() if line.startswith("def ") and deco + "\n" + line in src]
    assert loops, src
    entry = src[src.index("\ndef kernel("):]
    flat = 0
    for line in loops:
        name = line[4:line.index("(")]
        text = src[src.index(line):].split("\n\n\n")[0]
        assert f"    {name}(" in entry
        if "    for i in range(" in text:
            assert "_rt.c_view(" in text
            flat += 1
    assert flat
    assert "_rt.call(" not in src
    v, grads = f(z, c, w)
    ev, egrads = jg.value_and_grad(_lstm_steps, argnums=(0, 1, 2))(z, c, w)
    assert v == pytest.approx(ev, rel=1e-12)
    for g, e in zip(grads, egrads):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-13)


def test_parallel_chunks_match_serial_and_do_not_depend_on_thread_count():

    def loss(x, g):
        y = (x - np.mean(x, axis=1, keepdims=True)) * g
        return np.sum(np.tanh(y) ** 2)

    rng = np.random.default_rng(3)
    x, g = rng.standard_normal((300, 256)), rng.standard_normal(256)
    par = jg.jit_grad(loss, argnums=(0, 1))
    ser = jg.jit_grad(loss, argnums=(0, 1), parallel=False)
    # a compiled entry launches chunk functions, a Python entry's group launches itself
    assert any(f"_rt.{launch}(" in par.lower(x, g).source for launch in ("parallel_chunks", "parallel_self"))
    assert not any(f"_rt.{launch}(" in ser.lower(x, g).source for launch in ("parallel_chunks", "parallel_self"))
    v1, g1 = par(x, g)
    v2, g2 = ser(x, g)
    np.testing.assert_allclose(v1, v2, rtol=1e-13)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)
    v3, g3 = on_threads(1, par, x, g)
    assert v3 == v1  # fixed chunks: bit-for-bit the same on any number of threads
    for a, b in zip(g1, g3):
        np.testing.assert_array_equal(a, b)


def test_a_python_entrys_parallel_group_is_one_function_launching_itself(monkeypatch):
    """In a Python entry, a parallel group is one compiled function (`@_rt.group_njit`) that
    the entry calls with ch = -1 and that runs its own chunks (`_rt.parallel_self`): no chunk
    function and launcher pair. Its partial sums, row reductions and outputs agree with
    eager gradients and are the same bits on one thread."""
    monkeypatch.setattr(emit_cpu, "NJIT_ENTRY_MAX_STEPS", 0)     # a Python entry

    def loss(x, g):
        y = (x - np.mean(x, axis=1, keepdims=True)) * g
        return np.sum(np.tanh(y) ** 2) + np.max(y)

    rng = np.random.default_rng(4)
    x, g = rng.standard_normal((300, 256)), rng.standard_normal(256)
    f = jg.jit_grad(loss, argnums=(0, 1), wait=True)
    src = f.lower(x, g).source
    assert "calling the compiled loops" in src
    deco = "@_rt.native_njit(parallel=True, **_OPTS)" if native.ENABLED else "@_rt.group_njit(**_OPTS)"
    assert deco in src and "_rt.parallel_self(" in src
    assert "@_rt.chunk_njit(" not in src and "_rt.parallel_chunks(" not in src
    entry = src[src.index("\ndef kernel("):]
    groups = [ln[4:ln.index("(")] for ln in src.splitlines() if ln.startswith("def ") and deco + "\n" + ln in src]
    assert groups and all(f"    {name}(-1, 0, " in entry for name in groups)
    v, grads = f(x, g)
    ev, egrads = jg.value_and_grad(loss, argnums=(0, 1))(x, g)
    assert v == pytest.approx(ev, rel=1e-12)
    for a, b in zip(grads, egrads):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    v1, grads1 = on_threads(1, f, x, g)
    assert v1 == v
    for a, b in zip(grads, grads1):
        np.testing.assert_array_equal(a, b)


def test_gather_index_errors_are_raised():
    f = jg.jit_grad(lambda E, idx: np.sum(E[idx] ** 2))
    E = np.ones((4, 2))
    v, g = f(E, np.array([0, 3, 3]))
    np.testing.assert_array_equal(g, [[2, 2], [0, 0], [0, 0], [4, 4]])
    with pytest.raises(IndexError):
        f(E, np.array([0, 4, 1]))


def test_generated_module_debugs_as_python(tmp_path):
    """With NUMBA_DISABLE_JIT=1 the generated module runs as Python: tracebacks show its lines."""
    script = tmp_path / "run.py"
    script.write_text(
        "import numpy as np, jitgraph as jg\n"
        "f = jg.jit_grad(lambda E, idx: np.sum(np.tanh(E[idx])))\n"
        "print(f(np.ones((4, 2)), np.array([0, 1]))[0])\n"
        "f(np.ones((4, 2)), np.array([0, 7]))\n")
    env = dict(os.environ, NUMBA_DISABLE_JIT="1", JITGRAPH_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0
    assert float(r.stdout.split()[0]) == pytest.approx(2 * np.tanh(1.0) * 2)
    assert "IndexError" in r.stderr
    assert "jg_" in r.stderr and "_rt.gather(" in r.stderr  # the generated line is in the traceback


# ---- vectorizable math ----------------------------------------------------------------------------
def _max_rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    ok = np.isfinite(b) & (np.abs(b) > 1e-300)
    return float(np.max(np.abs(a[ok] - b[ok]) / np.abs(b[ok])))


def test_mathlib_accuracy_and_special_values():
    from numba import njit

    @njit
    def apply(x, out):
        for i in range(x.shape[0]):
            out[0, i] = mathlib.exp(x[i])
            out[1, i] = mathlib.expm1(x[i])
            out[2, i] = mathlib.tanh(x[i])

    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-700, 700, 20000), rng.uniform(-1, 1, 20000),
                        10.0 ** rng.uniform(-300, 0, 2000), -(10.0 ** rng.uniform(-300, 0, 2000)),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 709.8, 710.0, -745.2, -800.0, 1e-320]])
    out = np.empty((3, x.size))
    with np.errstate(over="ignore"):
        apply(x, out)
        ref = np.exp(x), np.expm1(x), np.tanh(x)
    for got, r in zip(out, ref):
        assert _max_rel(got, r) < 1e-15
        np.testing.assert_array_equal(np.isnan(got), np.isnan(r))
        fin = ~np.isfinite(r) & ~np.isnan(r)
        np.testing.assert_array_equal(got[fin], r[fin])
    np.testing.assert_array_equal(np.signbit(out[2][x == 0]), np.signbit(x[x == 0]))   # tanh(-0.0)
    sub = (np.exp(x) < 1e-300) & (np.exp(x) > 0)
    np.testing.assert_allclose(out[0][sub], np.exp(x)[sub], rtol=1e-6)  # subnormal results


def test_boolean_reductions_fused_with_their_users():
    # max/min of booleans start at False/True, and any/all values read in the same loop are
    # booleans (0 or 1), not counts
    y = np.random.default_rng(0).standard_normal((30, 70)) - 2.0

    def f(y):
        m = y > 0
        outs = []
        for fn in (np.max, np.min, np.any, np.all, np.sum):
            for ax in (0, 1, None):
                outs += [fn(m, axis=ax), fn(m, axis=ax) * 1.0 + y.sum(axis=ax) * 0.0]
        return outs
    for got, want in zip(jg.jit(f)(y), f(y)):
        np.testing.assert_array_equal(got, want)


def test_python_entry_compiles_scalar_math():
    """A long program's entry runs as Python; its scalar steps (exp of a sum here) run as
    compiled functions, since the scalar language's `_exp` exists only in compiled code."""
    def f(w, x):
        s = np.exp(np.sum(w) * 0.1)
        for _ in range(30):
            x = np.sort(x @ w, axis=1)
        return np.sum(x) * s

    w, x = np.eye(3) * 0.5 + 0.01, np.ones((4, 3))
    g = jg.jit_grad(f, wait=True, reroll=False)     # the 30 steps unrolled
    (v, dw), (v0, dw0) = g(w, x), jg.value_and_grad(f)(w, x)
    np.testing.assert_allclose(v, v0, rtol=1e-12)
    np.testing.assert_allclose(dw, dw0, rtol=1e-10, atol=1e-300)
    src = g.lower(w, x).source
    assert "runs as Python" in src and "scalar ops" in src


def test_matrix_vector_products_fuse_with_their_neighbours(rng):
    """X @ w, the loss on it and the gradient X.T @ g: one loop over X's rows, no BLAS call."""
    X, y = rng.standard_normal((300, 7)), rng.standard_normal(300)

    def loss(w, X, y):
        z = X @ w[:-1] + w[-1]
        return np.sum(np.logaddexp(0.0, z) - y * z) + w[:-1] @ w[:-1]

    w = rng.standard_normal(8)
    f = jg.jit_grad(loss)
    (v, g), (v0, g0) = f(w, X, y), jg.value_and_grad(loss)(w, X, y)
    np.testing.assert_allclose(v, v0, rtol=1e-12)
    np.testing.assert_allclose(g, g0, rtol=1e-11)
    low = f.lower(w, X, y)
    assert "matmul" not in low.source
    part = codegen.Partition(low.graph)
    assert sum(isinstance(s, codegen.Group) and s.shape == (300, 7) for s in part.steps) == 1


def test_c_view_is_a_view_of_c_ordered_arrays_and_reshape_of_others():
    """`_rt.c_view` (compiled code's reshape): a C-ordered array's view under new C strides,
    sharing its memory and readonly flag; an F-ordered one goes through Numba's reshape, and a
    strided one is refused at compile time, as Numba's reshape refuses it."""
    from numba import njit
    from numba.core.errors import TypingError
    from jitgraph.codegen import runtime as rt

    @njit
    def flat(a, n):
        return rt.c_view(a, (n,))

    @njit
    def blocks(a, r, c, k):
        return rt.c_view(a, (r, c, k))

    a = np.arange(24.0).reshape(4, 6)
    v = flat(a, 24)
    assert v.shape == (24,) and v.flags.c_contiguous and np.shares_memory(v, a)
    v[5] = -1.0
    assert a[0, 5] == -1.0                      # a view, not a copy
    np.testing.assert_array_equal(blocks(a, 2, 3, 4), a.reshape(2, 3, 4))
    f = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(blocks(f.T, 1, 4, 3), f.T.reshape(1, 4, 3))     # a C-ordered view of F data
    assert flat(np.asfortranarray(np.arange(5.0)[:, None]), 5).tolist() == list(range(5))
    with pytest.raises(TypingError):
        flat(np.arange(24.0).reshape(4, 6)[:, ::2], 12)
    ro = np.arange(6.0)
    ro.flags.writeable = False
    assert not flat(ro.reshape(2, 3), 6).flags.writeable


def test_compiled_code_reshapes_by_c_view_and_python_entries_by_numpy():
    """Reshapes inside compiled code are `_rt.c_view` (no Numba reshape machinery); a Python
    entry's own lines keep NumPy's reshape (an intrinsic cannot run as Python)."""
    x = np.ones((6, 5))
    graph = jg.make_graph(lambda x, y: np.sum(np.tanh(x) * y), argnums=(0, 1), grad=True)(x, x)
    src = codegen.generate(graph)[1]
    assert "_rt.c_view(" in src and ".reshape(" not in src, src
    em = emit_cpu.Emitter(graph, codegen.Partition(graph))
    em.driver = True
    assert em.reshape("x", "(n0, n1)") == "x.reshape((n0, n1))"
    em.driver = False
    assert em.reshape("x", "n0 * n1") == "_rt.c_view(x, (n0 * n1,))"


def test_new_arrays_and_chunk_counts_are_intrinsics_in_compiled_code(monkeypatch):
    # Numba's np.empty, np.full, max and min are overloads compiled again in every process
    from numba import njit
    from jitgraph.codegen import runtime as _rt

    @njit
    def make(n, m):
        return (_rt.empty((n, 1), np.float64), _rt.full((n, m), 2.5, np.float64),
                _rt.full(n, 7, np.int64), _rt.full((2, n, m), True, np.bool_), _rt.empty(n, np.float32))

    a, b, c, d, e = make(3, 4)
    assert a.shape == (3, 1) and a.dtype == np.float64 and a.flags.c_contiguous
    np.testing.assert_array_equal(b, np.full((3, 4), 2.5))
    np.testing.assert_array_equal(c, np.full(3, 7, np.int64))
    assert d.dtype == np.bool_ and d.shape == (2, 3, 4) and d.all()
    assert e.shape == (3,) and e.dtype == np.float32

    def loss(x, w):
        return np.sum(np.tanh(x @ w) ** 2) + np.sum(np.ones((3, 200)) * w[0])
    x = np.cos(np.arange(400 * 200.0)).reshape(400, 200)      # loops large enough for chunks
    w = np.linspace(-1, 1, 200 * 200).reshape(200, 200) / 50
    monkeypatch.setattr(native, "ENABLED", False)     # a compiled entry (else a Python one)
    src = jg.jit_grad(loss, argnums=1).lower(x, w).source
    assert "_rt.parallel_chunks(" in src and "nch = _max(1, _min(_min(16, " in src
    assert "np.empty(" not in src and "np.full(" not in src and "max(1, min(" not in src


def test_independent_chains_fill_loops_of_bounded_size():
    """Chains that read only stored values may share a loop, up to SIBLING_MAX of them: more
    would make one long function (Numba's compile grows with it) where same-code groups share
    one compiled function."""
    x = np.random.default_rng(0).standard_normal((8, 40))
    graph = jg.make_graph(lambda x: tuple(np.sin(x[:, t]) * 2.0 for t in range(40)))(x)
    part = codegen.Partition(graph)
    groups = part.groups()
    assert len(groups) >= 40 // fusion.SIBLING_MAX
    assert all(g.siblings <= fusion.SIBLING_MAX for g in groups), part.describe()
    outs = jg.jit(lambda x: tuple(np.sin(x[:, t]) * 2.0 for t in range(40)), wait=True)(x)
    np.testing.assert_allclose(np.stack(outs, axis=1), np.sin(x) * 2.0, rtol=1e-15)
