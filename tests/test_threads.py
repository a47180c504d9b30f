"""The thread policy of compiled calls (jitgraph/threads.py): the choice between all threads and
one, followed as the load changes, and never changing results."""
import numba
import numpy as np
import pytest

import jitgraph as jg
from jitgraph import threads
from jitgraph.threads import ALL, ONE, ThreadPolicy
from threads import launches_chunks, on_threads

pytestmark = pytest.mark.xdist_group("threads")


def run(policy, cost, calls):
    """Make `calls` calls whose time in each mode is cost(mode) seconds; the modes used."""
    modes = []
    for _ in range(calls):
        token = policy.begin()
        modes.append(token[0])
        policy.end(token, cost(token[0]))
    return modes


@pytest.fixture
def quiet(monkeypatch):
    """No load hint: the first calls run on all threads."""
    monkeypatch.setattr(threads, "_no_idle_core", lambda: False)


def test_chooses_the_faster_mode_and_follows_a_load(quiet):
    p = ThreadPolicy(name="adaptive")
    load = [False]

    def cost(mode):
        if mode == ALL:
            return 0.040 if load[0] else 0.010
        return 0.016

    modes = run(p, cost, 40)
    assert p.mode == ALL and not p.exploring()
    first = threads.WARM + threads.EXPLORE
    # all threads first (no load hint), and the first probe of one thread an interval later:
    # the first 10 calls (a benchmark's) all on all threads
    probe = first + threads.INTERVAL_FIRST
    assert modes[:probe] == [ALL] * probe
    assert modes[probe:probe + PROBE_LEN] == [ONE] * PROBE_LEN
    load[0] = True
    modes = run(p, cost, 60)
    assert p.mode == ONE
    assert modes[:20].count(ONE) >= PROBE_LEN                       # found within 20 calls
    assert modes[-30:].count(ONE) >= 30 - PROBE_LEN
    load[0] = False
    modes = run(p, cost, 60)
    assert p.mode == ALL and modes[-30:].count(ALL) >= 30 - PROBE_LEN
    assert p.switches == 2


PROBE_LEN = threads.PROBE


def test_losing_probes_grow_rarer(quiet):
    p = ThreadPolicy(name="adaptive")
    modes = run(p, lambda m: 0.010 if m == ALL else 0.015, 1000)
    probes = [i for i in range(1, 1000) if modes[i] == ONE and modes[i - 1] == ALL]
    gaps = np.diff(probes)
    assert p.mode == ALL and p.switches == 0
    assert list(gaps) == sorted(gaps) and gaps[-1] > 4 * gaps[0]
    assert modes.count(ONE) < 0.05 * len(modes)


def test_a_far_slower_probe_stops_after_settling(quiet):
    p = ThreadPolicy(name="adaptive")
    modes = run(p, lambda m: 0.100 if m == ALL else 0.010, 160)
    assert p.mode == ONE and p.switches == 1
    later = modes[60:]
    runs = [len(r) for r in "".join("AO"[m] for m in later).split("O") if r]
    assert runs and max(runs) == threads.SETTLE


def test_load_hint_orders_the_first_calls(monkeypatch):
    monkeypatch.setattr(threads, "_no_idle_core", lambda: True)
    p = ThreadPolicy(name="adaptive")
    modes = run(p, lambda m: 0.010, 30)
    first = threads.WARM + threads.EXPLORE
    # the hinted mode first, then a probe of all threads, which does not win at equal times
    assert modes == [ONE] * first + [ALL] * PROBE_LEN + [ONE] * (30 - first - PROBE_LEN)


def test_a_wrong_load_hint_is_corrected_within_the_first_calls(monkeypatch):
    # a passing task seen in /proc/loadavg at the first calls of a quiet machine
    monkeypatch.setattr(threads, "_no_idle_core", lambda: True)
    p = ThreadPolicy(name="adaptive")
    modes = run(p, lambda m: 0.012 if m == ALL else 0.021, 40)
    first = threads.WARM + threads.EXPLORE
    assert modes[:first] == [ONE] * first and p.mode == ALL and p.switches == 1
    settled = first + PROBE_LEN + threads.INTERVAL_FIRST
    assert modes[first:settled] == [ALL] * (settled - first)


def test_short_calls_stop_measuring(quiet):
    stopped = []
    p = ThreadPolicy(name="adaptive", on_inactive=lambda: stopped.append(1))
    run(p, lambda m: 20e-6, 30)
    assert stopped == [1] and not p.active and p.mode == ALL
    assert p.describe().startswith("default threads")


def test_fixed_policies():
    assert set(run(ThreadPolicy(name="one"), lambda m: 0.01, 20)) == {ONE}
    assert set(run(ThreadPolicy(name="all"), lambda m: 0.01, 20)) == {ALL}


def test_policy_name_from_environment(monkeypatch):
    monkeypatch.setenv("JITGRAPH_THREADS", "One")
    assert threads.policy_name() == "one"
    monkeypatch.setenv("JITGRAPH_THREADS", "sometimes")
    with pytest.raises(ValueError, match="JITGRAPH_THREADS"):
        threads.policy_name()


def test_one_thread_mode_sets_and_restores_numba_threads():
    before = numba.get_num_threads()
    p = ThreadPolicy(name="one")
    token = p.begin()
    assert numba.get_num_threads() == 1
    p.end(token, 0.01)
    assert numba.get_num_threads() == before


def test_products_split_into_the_same_blocks_on_any_thread_count():
    """Row blocks on Numba's threads, BLAS on one thread each: the serial and the parallel
    helpers give the same bits, for C and F (transposed) operands, odd layouts and batches,
    and the process's BLAS thread count is left as it was."""
    from threadpoolctl import threadpool_info
    from jitgraph.codegen import blas, runtime
    assert blas.MODE in ("local", "global", "none")
    before = [d["num_threads"] for d in threadpool_info()]
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((300, 200)), rng.standard_normal((200, 150))
    assert runtime.gemm_blocks(300, 150, 200) == 2 and runtime.gemm_blocks(2000, 2000, 2000) == 8
    assert runtime.gemm_blocks(100, 100, 100) == 1 and runtime.gemm_split(300, 150, 200) == runtime.GEMM_ROWS
    # fewer than two row blocks' rows (a weight gradient): column blocks of 128 or more
    assert runtime.gemm_split(100, 600, 400) == runtime.GEMM_COLS and runtime.gemm_blocks(100, 600, 400) == 4
    # a result too small for either (a narrow layer's weight gradient): blocks of the inner
    # dimension, 256 or more; a memory-bound product (30000 x 9 x 8) is split by rows
    assert runtime.gemm_split(128, 128, 2048) == runtime.GEMM_INNER and runtime.gemm_blocks(128, 128, 2048) == 8
    assert runtime.gemm_blocks(16, 9, 700) == 1 and runtime.gemm_blocks(8, 9, 40000) == 8
    assert runtime.gemm_blocks(30000, 8, 9) == 8 and runtime.gemm_blocks(3000, 8, 9) == 1
    for x in (a, np.asfortranarray(a)):
        serial, par = np.empty((300, 150)), np.empty((300, 150))
        runtime.matmul2d(x, b, serial)
        runtime.matmul2d_par(x, b, par)
        assert np.array_equal(serial, par)
        np.testing.assert_allclose(serial, a @ b, rtol=1e-12, atol=1e-12)
    # one BLAS call on the operands as laid out: F-ordered b, float32, a strided operand
    # (neither C- nor F-ordered: copied), blocks of one row, an empty inner dimension
    wa, wb = rng.standard_normal((300, 100)), rng.standard_normal((100, 600))
    fa, fb = rng.standard_normal((100, 400)), rng.standard_normal((400, 600))
    ka, kb = rng.standard_normal((60, 2100)), rng.standard_normal((2100, 90))
    for x, y in [(a, np.asfortranarray(b)), (a.astype(np.float32), b.astype(np.float32)),
                 (wa, wb), (np.asfortranarray(wa), np.asfortranarray(wb)),
                 (a[:, ::2], b[::2]), (a[:1], b), (a[:, :0], b[:0]),
                 # column blocks: C- and F-ordered, float32, a strided operand, one row
                 (fa, fb), (np.asfortranarray(fa), fb[:, :500]), (fa, np.asfortranarray(fb)),
                 (fa.astype(np.float32), fb.astype(np.float32)), (fa[:, ::2], fb[::2]),
                 (fa[:1], np.asfortranarray(fb)),
                 # inner blocks: C- and F-ordered, float32, a strided operand, one row and
                 # one column; a memory-bound product in row blocks
                 (ka, kb), (np.asfortranarray(ka), kb), (ka, np.asfortranarray(kb)), (ka, kb[:, :1]),
                 (ka.astype(np.float32), kb.astype(np.float32)), (ka[:, ::2], kb[::2]), (ka[:1], kb),
                 (rng.standard_normal((30000, 9)), rng.standard_normal((9, 8)))]:
        shape = (x.shape[0], y.shape[1])
        serial, par = np.empty(shape, x.dtype), np.empty(shape, x.dtype)
        runtime.matmul2d(x, y, serial)
        runtime.matmul2d_par(x, y, par)
        assert np.array_equal(serial, par)
        tol = 1e-12 if x.dtype == np.float64 else 1e-5
        np.testing.assert_allclose(serial, x.astype(np.float64) @ y, rtol=tol, atol=tol * 10)
        # out += x @ y: BLAS adds the first block's product onto out, the others after it
        start = rng.standard_normal(shape).astype(x.dtype)
        serial, par = start.copy(), start.copy()
        runtime.matmul2d_acc(x, y, serial)
        runtime.matmul2d_acc_par(x, y, par)
        assert np.array_equal(serial, par)
        np.testing.assert_allclose(serial, start + x.astype(np.float64) @ y, rtol=tol, atol=tol * 100)
    xa, xb = rng.standard_normal((6, 100, 120)), rng.standard_normal((6, 120, 140))
    serial, par = np.empty((6, 100, 140)), np.empty((6, 100, 140))
    runtime.matmul_batched(xa, xb, serial)
    runtime.matmul_batched_par(xa, xb, par)
    assert np.array_equal(serial, par)
    np.testing.assert_allclose(serial, xa @ xb, rtol=1e-12, atol=1e-12)
    assert [d["num_threads"] for d in threadpool_info()] == before


def layer_loss(params, x):
    w, b = params
    return np.sum(np.tanh(x @ w + b) ** 2)


def layer_args(n):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((n, n)) / n, rng.standard_normal(n)), rng.standard_normal((n, n))


@pytest.mark.parametrize("name", ["one", "all", "adaptive"])
def test_results_do_not_depend_on_the_mode(monkeypatch, name):
    """Every mode gives the same bits (chunk counts depend on sizes, not threads): a product
    on BLAS and a parallel loop (300 x 300 points), 32 calls (adaptive: both modes)."""
    monkeypatch.setenv("JITGRAPH_THREADS", name)
    args = layer_args(300)
    f = jg.jit_grad(layer_loss, wait=True)
    outs = [f(*args) for _ in range(32)]
    entry = next(iter(f._entries.values()))
    assert entry.threads is not None and entry.lowered.program.threads
    if name == "adaptive":
        assert not entry.threads.exploring() and entry.threads.times[ONE] and entry.threads.times[ALL]
        entry.threads.deactivate()              # as for calls under 0.2 ms: no timing left
        assert entry.call is entry.plain and entry.threads.describe().startswith("default")
    for v, (gw, gb) in outs:
        assert v == outs[0][0] and np.array_equal(gw, outs[0][1][0]) and np.array_equal(gb, outs[0][1][1])
    ref = jg.value_and_grad(layer_loss)(*args)
    np.testing.assert_allclose(outs[0][0], ref[0], rtol=1e-12)
    np.testing.assert_allclose(outs[0][1][0], ref[1][0], rtol=1e-10, atol=1e-12)


def test_a_python_entrys_parallel_groups_follow_the_policy(monkeypatch):
    """A Python entry's parallel groups launch their own chunks (`_rt.parallel_self`): such a
    program runs threads, so its calls follow the policy. (They did not: with two busy loops
    beside it on 2 cores, a matrix-product-state model took 400 ms a call on all threads
    whatever JITGRAPH_THREADS said, 6.8 ms on one.)"""
    from jitgraph.codegen import emit_cpu
    monkeypatch.setattr(emit_cpu, "NJIT_ENTRY_MAX_STEPS", 0)     # a Python entry
    monkeypatch.setenv("JITGRAPH_THREADS", "one")

    def loss(w, x):                   # loops only, no product
        return np.sum(np.tanh(x * w + 1.0) ** 2)
    args = (np.linspace(0, 1, 300), np.random.default_rng(0).standard_normal((300, 300)))
    f = jg.jit_grad(loss, wait=True)
    v, g = f(*args)
    entry = next(iter(f._entries.values()))
    source = entry.lowered.source
    assert "_rt.parallel_self(" in source and "_par(" not in source and "parallel_chunks" not in source
    assert entry.threads is not None and entry.lowered.program.threads and entry.threads.mode == ONE
    ref = jg.value_and_grad(loss)(*args)
    np.testing.assert_allclose(v, ref[0], rtol=1e-12)
    np.testing.assert_allclose(g, ref[1], rtol=1e-10)


def test_programs_without_parallel_loops_have_no_policy():
    f = jg.jit_grad(layer_loss, wait=True)           # a small product: one BLAS call
    f(*layer_args(8))
    entry = next(iter(f._entries.values()))
    assert entry.threads is None and entry.call is entry.plain


@pytest.mark.parametrize("m, k, n", [(128, 2048, 512), (100, 400, 600), (300, 200, 150),
                                     (128, 2048, 128), (100, 100, 100), (600, 400, 100),
                                     (8, 40000, 9), (30000, 9, 8), (3000, 9, 8)])
def test_a_program_threads_the_products_the_runtime_splits(m, k, n):
    """The generated program calls the threaded product exactly where runtime.gemm_blocks
    makes two blocks or more, column and inner blocks included: a weight gradient of a layer's
    width in rows (128 x 2048 x 512) had run on one thread."""
    from jitgraph import codegen
    from jitgraph.codegen import runtime
    rng = np.random.default_rng(7)
    graph = jg.make_graph(lambda a, b: a @ b)(rng.standard_normal((m, k)), rng.standard_normal((k, n)))
    source = codegen.generate(graph)[1]
    assert ("_rt.matmul2d_par(" in source) == (runtime.gemm_blocks(m, n, k) >= 2)


def test_threaded_build_computes_the_same_bits_on_one_thread_and_on_all():
    """Scalar sums, column sums (per-chunk partials), row reductions and a threaded product:
    on one thread the chunks run on the calling thread, on all of them on Numba's workers,
    and the results agree bit for bit; the serial build agrees to rounding."""
    from jitgraph import codegen

    def loss(x, w):
        mu = x.mean(axis=1, keepdims=True)
        h = np.tanh((x - mu) @ w)
        return np.sum(h ** 2) + np.sum(np.exp(-x * x).sum(axis=0) ** 2)

    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((1024, 160)), rng.standard_normal((160, 96)) / 10
    graph = jg.jit_grad(loss, argnums=(0, 1), wait=True).lower(x, w).graph
    serial = codegen.compile_graph(graph, threads=False)
    threaded = codegen.compile_graph(graph, threads=True)
    assert not launches_chunks(serial.source) and "_rt.matmul2d_par(" not in serial.source
    assert launches_chunks(threaded.source) and "_rt.matmul2d_par(" in threaded.source
    assert serial.upgradable and not serial.threads and threaded.threads and not threaded.upgradable
    every = threaded.run(x, w)
    one = on_threads(1, threaded.run, x, w)
    assert len(every) == len(one) == 3
    for p, q in zip(every, one):
        assert np.array_equal(p, q)
    ref = jg.value_and_grad(loss, argnums=(0, 1))(x, w)
    np.testing.assert_allclose(every[0][0], ref[0], rtol=1e-12)
    np.testing.assert_allclose(every[1], ref[1][0], rtol=1e-9, atol=1e-12)
    for p, q in zip(every, serial.run(x, w)):
        np.testing.assert_allclose(p, q, rtol=1e-12, atol=1e-12)
