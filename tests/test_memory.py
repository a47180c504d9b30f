"""Memory planning (codegen/memory.py) and rematerialization (jitgraph/remat.py)."""
import sys

import numpy as np
import pytest

from jitgraph import codegen
import jitgraph as jg
from jitgraph.codegen.memory import MemoryPlan
from jitgraph.codegen.source import Sizes
from jitgraph.api import trace_graph
from jitgraph.remat import _Forward, rematerialize, segments_for
from threads import launches_chunks, run_in_threads

pytestmark = pytest.mark.xdist_group("memory")


@pytest.fixture(autouse=True)
def _unrolled(monkeypatch):
    """These tests plan the memory of the steps a Python loop unrolls into (a deep residual
    MLP's layers): such loops stay unrolled here (jitgraph/reroll.py would make them a scan)."""
    monkeypatch.setenv("JITGRAPH_REROLL", "0")


def resmlp(Ws, bs, x):
    h = x
    for W, b in zip(Ws, bs):
        h = h + np.tanh(h @ W + b)
    return np.sum(h * h) / h.shape[0]


def resmlp_args(depth, width=8, batch=16, seed=0):
    rng = np.random.default_rng(seed)
    Ws = [rng.standard_normal((width, width)) * 0.3 for _ in range(depth)]
    bs = [rng.standard_normal(width) * 0.1 for _ in range(depth)]
    return Ws, bs, rng.standard_normal((batch, width))


def layernorm_mlp(W, g, x, idx):
    h = np.maximum(x @ W, 0.0)
    mu = h.mean(axis=1, keepdims=True)
    v = ((h - mu) ** 2).mean(axis=1, keepdims=True)
    y = (h - mu) / np.sqrt(v + 1e-5) * g
    z = np.concatenate([y[:, :3], y.T[:3, :].T], axis=1)
    return np.sum(z[idx] ** 2) + np.sum(y[1:, 2:] * y[:-1, :-2])


def layernorm_args(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((6, 5)), rng.standard_normal(5), rng.standard_normal((7, 6)),
            np.array([0, 3, 3, 6]))


def _plan(graph):
    return MemoryPlan(graph, codegen.Partition(graph), Sizes(graph))


def _reads(plan):
    """Root node id -> step indices that read it (through views and virtual broadcasts)."""
    part, out = plan.part, {}
    for n in plan.graph.nodes:
        if n.id not in plan.step_at:    # inputs, constants, virtual broadcasts, index views
            continue
        for src in part.reads(n):
            r = plan.root_of(src)
            out.setdefault(r.id, set()).add(plan.step_at[n.id])
    return out


def _check_invariants(plan):
    reads = _reads(plan)
    for it in plan.items:
        # every stored value stays live until its last read
        assert it.end >= max(reads.get(it.node.id, {it.start}))
        assert it.end >= it.start
    for items in plan.slots:
        items = sorted(items, key=lambda it: it.start)
        for a, b in zip(items, items[1:]):
            # no two live values share a buffer; touching is allowed only for an in-place write
            assert a.end < b.start or (b.in_place and a.end == b.start), (a.node, b.node)
        assert len({it.cls for it in items}) == 1
    for nid in plan.fresh:
        assert nid not in plan.slot_of
    for o in plan.graph.outputs:      # outputs never live in the workspace
        assert plan.root_of(plan.part.resolve(o)).id not in plan.slot_of


GRAPHS = {
    "resmlp": lambda: trace_graph(resmlp, resmlp_args(5), (0, 1), grad=True),
    "resmlp_sqrt": lambda: _sqrt(trace_graph(resmlp, resmlp_args(9), (0, 1), grad=True)),
    "layernorm": lambda: trace_graph(layernorm_mlp, layernorm_args(), (0, 1), grad=True),
    "forward": lambda: trace_graph(layernorm_mlp, layernorm_args(), grad=False),
}


def _sqrt(g):
    fwd = _Forward(g)
    return rematerialize(g, segments_for(fwd, 3))


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_plan_invariants(name):
    graph = GRAPHS[name]()
    plan = _plan(graph)
    _check_invariants(plan)
    assert plan.slots, "nothing was planned"
    rep = plan.report()
    assert rep.peak_bytes == rep.workspace_bytes + rep.output_bytes + rep.unplanned_bytes
    assert rep.buffers == len(plan.slots) <= rep.values


def test_plan_reuses_buffers_and_updates_in_place():
    plan = _plan(GRAPHS["resmlp"]())
    planned = [it for it in plan.items if it.node.id in plan.slot_of]
    assert len(plan.slots) < len(planned)           # dead values' buffers are reused
    assert any(it.in_place for it in planned)       # an elementwise loop overwrote an operand
    total, offsets = plan.layout()
    assert total % 64 == 0 and all(int(o) % 64 == 0 for o in offsets)
    # a new batch size keeps the plan (the source) and gets new offsets
    bigger, _ = plan.layout([2 * v for v in plan.sizes.values])
    assert bigger > total


@pytest.mark.parametrize("T", [4, 40])
def test_buffer_filled_in_a_loop_is_updated_in_place_both_ways(T):
    """`hs[t] = h` in a loop: forward and backward, each step writes into the buffer in place.
    The backward's update (the adjoint with row t zeroed) had come before the read of row t,
    so each step copied the whole buffer; codegen/schedule.py moves it after that read. Only
    the first write (into the zeros the program made) copies. T = 40 runs as a Python entry."""
    from jitgraph.codegen.schedule import sink_updates
    rng = np.random.default_rng(5)
    W, xs = rng.standard_normal((6, 6)) * 0.4, rng.standard_normal((T, 3, 6))

    def rnn(W, xs):
        hs = np.zeros((T, 3, 6))
        h = np.zeros((3, 6))
        for t in range(T):
            h = np.tanh(h @ W + xs[t])
            hs[t] = h
        return np.sum(hs ** 2) + np.sum(hs[:, 0] * hs[:, 1])

    graph = jg.make_graph(rnn, grad=True)(W, xs)
    sunk = sink_updates(graph)
    assert sunk is not graph and sink_updates(sunk) is sunk      # no conflict left
    source = codegen.generate(graph)[1]
    # T writes forward, T - 1 backward (the initial zeros need no adjoint)
    assert source.count("= update_slice[") == 2 * T - 1
    assert source.count("updated in place: its old value is read no more") == 2 * T - 2
    for argnums in (0, 1):
        v0, g0 = jg.value_and_grad(rnn, argnums)(W, xs)
        v1, g1 = jg.jit_grad(rnn, argnums=argnums)(W, xs)
        np.testing.assert_allclose(v1, v0, rtol=1e-12)
        np.testing.assert_allclose(g1, g0, rtol=1e-11, atol=1e-12)


def test_outputs_are_not_overwritten_by_later_calls():
    f = jg.jit_grad(resmlp, argnums=(0, 1))
    a1, a2 = resmlp_args(3, seed=1), resmlp_args(3, seed=2)
    v1, (gW1, gb1) = f(*a1)
    keep = [g.copy() for g in gW1 + gb1]
    f(*a2)
    for g, k in zip(gW1 + gb1, keep):
        np.testing.assert_array_equal(g, k)
    src = f.lower(*a1).source
    assert "_rt.slot(ws, wofs[" in src
    # a dropped output's buffer is written again by the next call; a held one never is
    ptr = f(*a1)[1][0][0].__array_interface__["data"][0]
    assert f(*a2)[1][0][0].__array_interface__["data"][0] == ptr
    held = f(*a1)
    again = f(*a2)
    assert held[1][0][0].__array_interface__["data"][0] != again[1][0][0].__array_interface__["data"][0]
    np.testing.assert_array_equal(held[1][0][0], f(*a1)[1][0][0])


def _flat(grads):
    gW, gb = grads
    return np.concatenate([g.ravel() for g in list(gW) + list(gb)])


def test_gradients_identical_under_every_policy():
    args = resmlp_args(9)
    ref_v, ref_g = jg.value_and_grad(resmlp, argnums=(0, 1))(*args)
    results, reports = {}, {}
    for pol in (None, "sqrt", 10**9):
        f = jg.jit_grad(resmlp, argnums=(0, 1), remat=pol)
        v, g = f(*args)
        results[pol] = (v, _flat(g))
        reports[pol] = f.lower(*args).memory
    np.testing.assert_allclose(results[None][1], _flat(ref_g), rtol=1e-12, atol=1e-14)
    for pol in ("sqrt", 10**9):
        assert results[pol][0] == results[None][0]
        np.testing.assert_array_equal(results[pol][1], results[None][1])
    assert reports["sqrt"].recompute_flops > 0 and reports[None].recompute_flops == 0
    assert reports["sqrt"].stored_bytes < reports[None].stored_bytes
    assert reports["sqrt"].peak_bytes < reports[None].peak_bytes
    assert reports[10**9].remat["policy"] == 10**9 and reports[10**9].recompute_flops == 0


def test_sqrt_stores_sublinear_activations():
    stored = {}
    for depth in (4, 16, 64):
        g = trace_graph(resmlp, resmlp_args(depth), (0, 1), grad=True)
        from jitgraph.remat import apply_policy
        stored[depth] = (codegen.memory_report(g).stored_bytes,
                         codegen.memory_report(apply_policy(g, "sqrt", codegen.memory_report)).stored_bytes)
    # without remat: linear in depth; with sqrt: about sqrt(depth)
    assert stored[64][0] / stored[4][0] == pytest.approx(16, rel=0.1)
    assert stored[64][1] / stored[4][1] < 6
    assert stored[64][0] / stored[64][1] > 4


def test_budget_meets_the_budget_or_names_the_smallest():
    args = resmlp_args(9)
    with pytest.raises(jg.MemoryBudgetError, match=r"cannot be met: the smallest predicted peak is ([\d,]+) bytes") as e:
        jg.jit_grad(resmlp, argnums=(0, 1), remat=1000).lower(*args)
    smallest = int(str(e.value).split("smallest predicted peak is ")[1].split(" bytes")[0].replace(",", ""))
    f = jg.jit_grad(resmlp, argnums=(0, 1), remat=smallest)
    m = f.lower(*args).memory
    assert m.peak_bytes <= smallest and m.recompute_flops > 0
    none = jg.jit_grad(resmlp, argnums=(0, 1)).lower(*args).memory
    # between the two: less recomputation than needed for the smallest peak
    mid = jg.jit_grad(resmlp, argnums=(0, 1), remat=(none.peak_bytes + smallest) // 2).lower(*args).memory
    assert mid.peak_bytes <= (none.peak_bytes + smallest) // 2
    assert mid.recompute_flops <= m.recompute_flops


@pytest.mark.parametrize("bad", ["half", 0, -5, 2.5, True])
def test_bad_policies_are_rejected(bad):
    with pytest.raises(ValueError, match="remat must be"):
        jg.jit_grad(resmlp, remat=bad)


def test_remat_is_a_jit_grad_option():
    with pytest.raises(ValueError, match="remat= is an option of jit_grad"):
        jg.JitFunction(resmlp, grad=False, remat="sqrt")
    with pytest.raises(TypeError):
        jg.jit(resmlp, remat="sqrt")


def test_checkpoint_recomputes_marked_regions():
    def layer(h, W, b):
        return h + np.tanh(h @ W + b)

    def loss(Ws, bs, x, ckpt):
        h = x
        for W, b in zip(Ws, bs):
            h = (jg.checkpoint(layer) if ckpt else layer)(h, W, b)
        return np.sum(h * h)

    args = resmlp_args(6)
    plain = jg.jit_grad(loss, argnums=(0, 1), static_argnums=3)
    v0, g0 = plain(*args, False)
    v1, g1 = plain(*args, True)
    assert v0 == v1
    np.testing.assert_array_equal(_flat(g0), _flat(g1))
    m0, m1 = plain.lower(*args, False).memory, plain.lower(*args, True).memory
    assert m1.stored_bytes < m0.stored_bytes and m1.recompute_flops > 0
    assert m1.remat["policy"] == "checkpoint" and m1.remat["segments"] == 6
    # eager: checkpoint is the identity
    ve, ge = jg.value_and_grad(loss, argnums=(0, 1))(*args, True)
    np.testing.assert_allclose(_flat(ge), _flat(g0), rtol=1e-12)
    assert jg.checkpoint(layer)(args[2], args[0][0], args[1][0]).shape == args[2].shape


def test_remat_with_control_flow_in_the_forward():
    def loss(W, x):
        h = jg.fori_loop(0, 3, lambda i, h: np.tanh(h @ W), x)
        for _ in range(4):
            h = h + np.sin(h @ W)
        return np.sum(h ** 2)

    rng = np.random.default_rng(3)
    args = (rng.standard_normal((5, 5)) * 0.4, rng.standard_normal((4, 5)))
    g0 = jg.jit_grad(loss)(*args)[1]
    g1 = jg.jit_grad(loss, remat="sqrt")(*args)[1]
    np.testing.assert_array_equal(g0, g1)


def test_concurrent_calls_use_separate_workspaces():
    f = jg.jit_grad(resmlp, argnums=(0, 1))
    inputs = [resmlp_args(3, seed=s) for s in range(6)]
    expect = [_flat(f(*a)[1]) for a in inputs]
    entry = f._entries[next(iter(f._entries))]
    assert len(entry.pool) == 1
    def work(k):
        for _ in range(20):
            np.testing.assert_array_equal(_flat(f(*inputs[k])[1]), expect[k])

    run_in_threads(work, 6)
    assert 1 <= len(entry.pool) <= 6          # at most one workspace per concurrent caller
    f.release_buffers()
    assert entry.pool == []
    g = jg.jit_grad(resmlp, argnums=(0, 1), reuse_buffers=False)
    np.testing.assert_array_equal(_flat(g(*inputs[0])[1]), expect[0])
    assert all(not e.pool for e in g._entries.values())


def test_concurrent_calls_of_parallel_kernels():
    # Numba's workqueue threading layer aborts the process when two threads launch parallel
    # loops at once: calls of multi-threaded kernels take a process-wide lock
    f = jg.jit_grad(lambda x: np.sum(np.tanh(x) ** 2))
    x = np.random.default_rng(0).random(200_000)
    expect = f(x)[1]
    assert f.wait(timeout=600)        # the threaded build follows the serial one
    assert launches_chunks(f.lower(x).source)

    def work(k):
        for _ in range(10):
            np.testing.assert_array_equal(f(x)[1], expect)

    run_in_threads(work, 4)


def test_deep_program_runs_from_a_python_entry_with_shared_loops():
    args = resmlp_args(14, width=4, batch=6)
    f = jg.jit_grad(resmlp, argnums=(0, 1))
    v, g = f(*args)
    rv, rg = jg.value_and_grad(resmlp, argnums=(0, 1))(*args)
    np.testing.assert_allclose(_flat(g), _flat(rg), rtol=1e-12, atol=1e-14)
    low = f.lower(*args)
    src = low.source
    assert "the entry runs as Python" in src and "\ndef kernel(" in src
    n_groups = len(low.groups)
    n_funcs = src.count("\ndef group_")
    assert n_funcs <= 8 < n_groups          # the layers share their loops
    assert "del " in src                    # arrays are dropped after their last use


def test_python_entry_makes_its_workspace_views_once_per_arena():
    args = resmlp_args(14, width=4, batch=6)
    f = jg.jit_grad(resmlp, argnums=(0, 1))
    _, g = f(*args)
    program = f.lower(*args).program
    assert "V = _views(ws, wofs, dims)" in program.source and "_rt.slot_view" not in \
        program.source.split("\ndef kernel(")[1]
    views = sys.modules[program.module]._VIEWS
    views.clear()          # functions of other tests with the same source share this module
    np.testing.assert_array_equal(_flat(f(*args)[1]), _flat(g))
    assert len(views) == 1
    (kept,) = views.values()
    for _ in range(3):
        np.testing.assert_array_equal(_flat(f(*args)[1]), _flat(g))
    assert list(views.values()) == [kept]        # the same arena, the same views
    # another batch size (the same module, other sizes) gets views of its own sizes
    other = resmlp_args(14, width=4, batch=9, seed=1)
    _, g9 = f(*other)
    want = jg.value_and_grad(resmlp, argnums=(0, 1))(*other)[1]
    np.testing.assert_allclose(_flat(g9), _flat(want), rtol=1e-12, atol=1e-14)
    assert f.lower(*other).program.module == program.module and len(views) == 2
    f.release_buffers()
    assert views == {}
    np.testing.assert_array_equal(_flat(f(*args)[1]), _flat(g))


def test_memory_report_table_and_function():
    args = resmlp_args(4)
    rep = jg.memory_report(resmlp, *args, argnums=(0, 1), remat="sqrt")
    text = str(rep)
    for row in ("predicted peak", "workspace", "outputs", "stored for the backward pass",
                "rematerialization", "recompute cost"):
        assert row in text
    assert rep.as_dict()["remat"] == "sqrt"
    f = jg.jit(lambda x: np.tanh(x) @ x)
    fwd = jg.memory_report(f, np.ones((3, 3)))
    assert "backward" not in str(fwd) and fwd.stored_bytes == 0


def test_no_per_call_allocation_in_a_parallel_program():
    def loss(x, gamma, W):
        mu = x.mean(axis=1, keepdims=True)
        y = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5) * gamma
        return np.sum(np.tanh(y @ W) ** 2)

    rng = np.random.default_rng(0)
    args = (rng.standard_normal((512, 160)), rng.standard_normal(160), rng.standard_normal((160, 8)))
    f = jg.jit_grad(loss, argnums=(0, 1, 2))
    f(*args)
    assert f.wait(timeout=600)
    low = f.lower(*args)
    assert launches_chunks(low.source)
    for alloc in ("np.empty(", "np.full(", "np.zeros(", ".copy()"):
        assert alloc not in low.source, alloc
    v, g = f(*args)
    rv, rg = jg.value_and_grad(loss, argnums=(0, 1, 2))(*args)
    for a, b in zip(g, rg):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_control_flow_results_never_share_planned_buffers():
    # a loop that runs zero times returns its initial carry, a loop body or a branch may
    # return (views of) its operands: those operands must not be overwritten by later steps
    M = np.arange(16.0).reshape(4, 4) / 10
    x = np.linspace(-1, 1, 16).reshape(4, 4)

    def zero_trips(x):
        a = x * 2.0
        y = jg.fori_loop(0, 0, lambda i, y: y * 1.5, a)
        return np.sum(y * ((x * 5.0) @ M))

    def swap(x):
        a, b = x * 2.0, (x * 3.0).reshape(16)
        a2, b2 = jg.fori_loop(0, 2, lambda i, c: (c[1].reshape(4, 4), c[0].reshape(16)), (a, b))
        return np.sum(a2 * ((x * 5.0) @ M)) + np.sum(b2 * ((x * 7.0) @ M).reshape(16))

    def branch(x):
        a = x * 2.0
        y = jg.cond(np.sum(x) > -100.0, lambda a: a.reshape(16), lambda a: (a * 3.0).reshape(16), a)
        return y * ((x * 5.0) @ M).reshape(16), y

    for fun, args in ((zero_trips, (x,)), (swap, (x,))):
        v, g = jg.jit_grad(fun)(*args)
        rv, rg = jg.value_and_grad(fun)(*args)
        assert v == pytest.approx(rv, rel=1e-12)
        np.testing.assert_allclose(g, rg, rtol=1e-12, atol=1e-12)
    f = jg.jit(branch)
    out, y = f(x)
    np.testing.assert_allclose(out, (2 * x).reshape(16) * ((x * 5.0) @ M).reshape(16), rtol=1e-12)
    keep = y.copy()
    f(x * 3)
    np.testing.assert_array_equal(y, keep)       # a returned result is never written again
