"""Compiled functions: every program of the op spec table through `jit_grad` and `jit`.

Entries are run in batches: one program whose loss is the sum of the batch's
losses (each entry has its own inputs, so each gradient is exactly that entry's
gradient) and whose aux output is every entry's own value. Values and gradients
are checked against the reference interpreter on the same graph, on the first
call and on a cached call, to 1e-12 relative in float64 and 1e-5 in float32.

Every batch runs the generated source with backend="python" (the same source,
executed by Python: this checks fusion and emission for every program in
seconds). Numba compiles about 0.5 s per table entry, so a subset of batches in
each dtype is also compiled natively; together they cover every op kind, and
the workload and codegen tests compile more.
"""
import numpy as np
import pytest

import jitgraph as jg
from optable import TABLE, diff_argnums, make_args

BATCH = 30


def _batches():
    return [TABLE[i:i + BATCH] for i in range(0, len(TABLE), BATCH)]


def _batched(entries, dtype):
    """(loss, forward, flat inputs, argnums, owners) for a batch of table entries."""
    flat, plans, argnums, owners = [], [], [], []
    for e in entries:
        args = make_args(e, dtype)
        dn = diff_argnums(e)
        plan = []
        for i, a in enumerate(args):
            if isinstance(e.specs[i], tuple) or i in dn:
                if i in dn:
                    argnums.append(len(flat))
                    owners.append(e)
                plan.append(("in", len(flat)))
                flat.append(a)
            else:
                plan.append(("lit", a))   # index arrays and Python scalars stay constants
        plans.append(plan)

    def entry_args(plan, xs):
        return [xs[v] if kind == "in" else v for kind, v in plan]

    def loss(*xs):
        values = tuple(e.fn(*entry_args(plan, xs)) for e, plan in zip(entries, plans))
        total = 0.0
        for v in values:
            total = total + v
        return total, values

    return loss, flat, tuple(argnums), owners


TOL = {np.float64: 1e-12, np.float32: 1e-5}
NUMBA_BATCHES = {np.float64: (0, 4, 8, 12), np.float32: (2, 10)}

CASES = [(b, dt, "python") for dt in (np.float64, np.float32) for b in range(len(_batches()))]
CASES += [(b, dt, "numba") for dt, bs in NUMBA_BATCHES.items() for b in bs]


@pytest.mark.parametrize("batch,dtype,backend", CASES,
                         ids=[f"batch{b}-{np.dtype(d).name}-{k}" for b, d, k in CASES])
def test_table_through_jit_grad(batch, dtype, backend):
    entries = _batches()[batch]
    loss, flat, argnums, owners = _batched(entries, dtype)
    rtol = TOL[dtype]
    graph = jg.make_graph(loss, argnums, grad=True, has_aux=True)(*flat)
    (v_ref, values_ref), g_ref = jg.eval_graph(graph, *flat)
    f = jg.jit_grad(loss, argnums=argnums, has_aux=True, backend=backend)
    for call in ("first", "cached"):
        (v, values), g = f(*flat)
        assert f.cache_info().traces == 1, f"{call} call retraced"
        assert np.asarray(v).dtype == np.asarray(v_ref).dtype
        np.testing.assert_allclose(v, v_ref, rtol=rtol, atol=rtol * max(1.0, abs(float(v_ref))))
        for e, got, ref in zip(entries, values, values_ref):
            assert np.asarray(got).dtype == np.asarray(ref).dtype, e.name
            np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * max(1.0, abs(float(ref))),
                                       err_msg=f"value of table entry {e.name!r} ({call} call)")
        for k, (got, ref) in enumerate(zip(g, g_ref)):
            assert got.shape == ref.shape and got.dtype == ref.dtype == dtype, owners[k].name
            scale = max(1.0, float(np.max(np.abs(ref), initial=0.0)))
            np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * scale,
                                       err_msg=f"gradient of table entry {owners[k].name!r} ({call} call)")


def test_gradients_keep_the_array_ness_of_their_argument():
    """A 0-d ndarray parameter gets a 0-d ndarray gradient (a scalar parameter a NumPy scalar),
    and an SGD loop whose update turns 0-d arrays into NumPy scalars does not retrace."""
    def loss(p, x):
        return np.sum((x * p["w"] + p["b"]) ** 2)

    x = np.arange(3.0)
    f = jg.jit_grad(loss)
    for run in (jg.value_and_grad(loss), f):
        p = {"w": np.array(0.5), "b": np.array(0.1)}
        _, g = run(p, x)
        assert type(g["w"]) is np.ndarray and g["w"].shape == ()
        for _ in range(3):
            _, g = run(p, x)
            p = {k: p[k] - 0.01 * g[k] for k in p}
    assert f.cache_info().traces == 1
    h = jg.jit_grad(lambda w: w * w)
    assert type(h(np.array(2.0))[1]) is np.ndarray
    assert type(h(2.0)[1]) is np.float64 and type(h(np.float64(2.0))[1]) is np.float64
    assert type(jg.grad(lambda w: w * w)(np.array(2.0))) is np.ndarray


def test_the_garbage_collector_pauses_for_a_trace_and_is_restored_after():
    """codegen/collector.py: a new signature's trace and build run with the cyclic collector
    off (reentrant, any thread); it is on again after, and stays off if the user had it off."""
    import gc
    import threading
    from jitgraph.codegen import collector

    seen = []

    def loss(x):
        seen.append(gc.isenabled())
        return np.sum(np.tanh(x) ** 2)

    assert gc.isenabled()
    f = jg.jit_grad(loss, wait=True)
    x = np.linspace(-1.0, 1.0, 7)
    f(x)
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        jg.jit_grad(loss, wait=True)(x[:5])
        assert seen == [False, False] and not gc.isenabled()
    finally:
        gc.enable()
    with collector.paused():
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
        inside = []
        t = threading.Thread(target=lambda: inside.append(gc.isenabled()))
        t.start()
        t.join()
        assert inside == [False]
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError):
        with collector.paused():
            1 / 0
    assert gc.isenabled()


def test_the_compile_server_collects_less_often():
    import gc
    from jitgraph.codegen import collector
    saved = gc.get_threshold()
    try:
        collector.compile_thresholds()
        assert gc.get_threshold() == (collector.COMPILE_THRESHOLD,) + saved[1:]
    finally:
        gc.set_threshold(*saved)


def test_a_compile_in_this_process_runs_with_the_collector_on():
    """Inside a paused phase, `resumed()` (around a compile in this process, whose garbage is
    large) turns the collector on, and off again after; outside one it changes nothing."""
    import gc
    from jitgraph.codegen import collector
    with collector.resumed():
        assert gc.isenabled()
    with collector.paused():
        with collector.resumed():
            assert gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector.paused():
            with collector.resumed():
                assert not gc.isenabled()          # the user's setting, kept
    finally:
        gc.enable()
