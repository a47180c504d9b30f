"""The CUDA target (codegen/emit_cuda.py): values and gradients against the reference interpreter.

Without a GPU these run on Numba's CUDA simulator (tests/conftest.py sets
NUMBA_ENABLE_CUDASIM=1 when `nvidia-smi` is not on PATH), where every thread
is a Python thread, so shapes stay small; the runtime then uses blocks of 8
threads, 4x4 matmul tiles and grids of at most 3 blocks, so that row tiles,
grid-stride loops, multi-block partial sums and partial tiles are all taken by
the small arrays here.
"""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from jitgraph import codegen
import jitgraph as jg
from golden_files import assert_golden
from jitgraph.bench import WORKLOADS
from jitgraph.interpreter import evaluate
from jitgraph.ops.registry import PRIMS
from optable import TABLE, diff_argnums, make_args

pytest.importorskip("numba_cuda")
from numba import cuda  # noqa: E402  (module level: the simulator swaps this name in kernels)
pytestmark = [
    pytest.mark.xdist_group("cuda"),
    # the simulator computes with NumPy scalars, which warn where the GPU silently gives inf/nan
    # (e.g. log(0) in the idle threads of a block whose rows ran out)
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning",
                               "ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning"),
]

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TOL = {np.float64: 1e-12, np.float32: 1e-5}


# tests that run without a device (or simulator): they check the errors and the emitted source
NO_DEVICE = {"test_no_device_is_a_clear_error", "test_missing_numba_cuda_says_how_to_install",
             "test_importing_jitgraph_does_not_import_numba_cuda", "test_golden_source"}


@pytest.fixture(scope="module")
def _unavailable():
    from jitgraph.codegen.emit_cuda import cuda_unavailable_reason
    return cuda_unavailable_reason()


@pytest.fixture(autouse=True)
def _device_or_skip(request, _unavailable):
    if _unavailable is not None and request.node.originalname not in NO_DEVICE:
        pytest.skip(_unavailable)


@pytest.fixture(scope="module", autouse=True)
def _short_switch_interval():
    # The simulator's block manager busy-waits (holding the GIL) until every thread of a
    # block reaches syncthreads(); a short switch interval lets them get there 3x sooner.
    old = sys.getswitchinterval()
    sys.setswitchinterval(5e-4)
    yield
    sys.setswitchinterval(old)


def run_cuda(graph, args):
    """The CUDA program's outputs for `args`, called the way the front end calls kernels."""
    prog = codegen.compile_graph(graph, target="cuda")
    leaves = [np.ascontiguousarray(a).reshape(np.shape(a) or (1,)) for a in args]
    return prog, prog.run(*leaves)


def assert_matches_interpreter(graph, args, outs, dtype=np.float64, what=""):
    ref = evaluate(graph, *args)
    assert len(outs) == len(ref)
    rtol = TOL[np.dtype(dtype).type]
    for k, (got, want) in enumerate(zip(outs, ref)):
        assert isinstance(got, np.ndarray), type(got)
        want = np.asarray(want)
        assert got.dtype == want.dtype, f"{what} output {k}"
        got = got.reshape(want.shape)
        if want.dtype.kind == "f":
            scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
            np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, err_msg=f"{what} output {k}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{what} output {k}")


def check(fun, args, argnums=0, dtype=np.float64, has_aux=False):
    graph = jg.trace_graph(fun, args, argnums, has_aux, True)
    prog, outs = run_cuda(graph, args)
    assert_matches_interpreter(graph, args, outs, dtype)
    return prog, outs


# ---- the op table, in batches (one program per batch: the sum of the entries' losses) -------------
BATCH = 30
HOST_ONLY = {name for name, p in PRIMS.items() if p.host_only}


def _on_device(entry):
    """Does the entry's program use only primitives the CUDA target lowers?"""
    graph = jg.make_graph(entry.fn, diff_argnums(entry), grad=True)(*make_args(entry, np.float64))
    return not {n.op for n in graph.nodes} & HOST_ONLY


DEVICE_TABLE = [e for e in TABLE if _on_device(e)]
BATCHES = [DEVICE_TABLE[i:i + BATCH] for i in range(0, len(DEVICE_TABLE), BATCH)]


def _batched(entries, dtype):
    flat, plans, argnums = [], [], []
    for e in entries:
        dn = diff_argnums(e)
        plan = []
        for i, a in enumerate(make_args(e, dtype)):
            if isinstance(e.specs[i], tuple) or i in dn:
                if i in dn:
                    argnums.append(len(flat))
                plan.append(("in", len(flat)))
                flat.append(a)
            else:
                plan.append(("lit", a))
        plans.append(plan)

    def loss(*xs):
        values = tuple(e.fn(*[xs[v] if kind == "in" else v for kind, v in plan])
                       for e, plan in zip(entries, plans))
        total = 0.0
        for v in values:
            total = total + v
        return total, values

    return loss, flat, tuple(argnums)


CASES = [(b, dt) for dt in (np.float64, np.float32) for b in range(len(BATCHES))]


@pytest.mark.parametrize("batch,dtype", CASES, ids=[f"batch{b}-{np.dtype(d).name}" for b, d in CASES])
def test_table_batch(batch, dtype):
    loss, flat, argnums = _batched(BATCHES[batch], dtype)
    graph = jg.trace_graph(loss, flat, argnums, True, True)
    _, outs = run_cuda(graph, flat)
    assert_matches_interpreter(graph, flat, outs, dtype, what=f"batch {batch}")


def test_table_batches_cover_every_primitive():
    ops = set()
    for entries in BATCHES:
        loss, flat, argnums = _batched(entries, np.float64)
        ops |= {n.op for n in jg.trace_graph(loss, flat, argnums, True, True).nodes}
    missing = {name for name, p in PRIMS.items() if not p.host_only and p.kind != "structural"} - ops
    assert not missing, missing


# ---- the benchmark workloads, end to end through jit_grad(target="cuda") --------------------------------
SMALL = dict(w1=dict(n=45), w2=dict(B=9, D=5, H=7, C=3), w3=dict(n=11), w4=dict(n=30), w5={},
             w6=dict(r=7, c=19))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_workloads_through_jit_grad(name):
    w = WORKLOADS[name]
    args = w["args"](np.random.default_rng(3), **SMALL[name])
    f = jg.jit_grad(w["loss"], argnums=w["argnums"], target="cuda")
    v, g = f(*args)
    nv, ng = w["numpy"](*args)
    g = g if isinstance(g, tuple) else (g,)
    ng = ng if isinstance(ng, tuple) else (ng,)
    np.testing.assert_allclose(v, nv, rtol=1e-12)
    for a, b in zip(g, ng):
        assert np.shape(a) == np.shape(b)
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    v2, _ = f(*args)
    assert v2 == v


def test_jit_forward_and_float32():
    x = np.random.default_rng(0).standard_normal((6, 10)).astype(np.float32)
    f = jg.jit(lambda x: jg.softmax(x, axis=1) * 2 + np.tanh(x), target="cuda")
    out = f(x)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_allclose(out, jg.softmax(x.astype(np.float64), axis=1) * 2 + np.tanh(x), rtol=1e-5)


# ---- reductions: every op and axis form, lengths not multiples of the block --------------------------------
RED_OPS = [np.sum, np.max, np.min, np.prod, np.mean]


@pytest.mark.parametrize("shape,axis", [((37,), None), ((3, 37), 1), ((3, 37), 0), ((5, 3), 1),
                                        ((2, 9, 3), (1, 2)), ((2, 9, 3), (0, 2)), ((2, 9, 3), 1),
                                        ((1, 21), 1), ((6, 1), 1), ((2, 9, 3), None)])
def test_reductions(shape, axis):
    x = np.random.default_rng(1).uniform(0.6, 1.3, shape) * np.where(np.arange(np.prod(shape)) % 5 == 0,
                                                                    -1, 1).reshape(shape)

    def f(x):
        total = 0.0
        for k, op in enumerate(RED_OPS):
            total = total + np.sum(op(x, axis=axis) * (k + 1.5))
        return total + np.sum(jg.logsumexp(x, axis=axis) ** 2)

    check(f, (x,))


@pytest.mark.parametrize("r,c", [(3, 5), (9, 37), (1, 70), (20, 1)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rowwise_softmax_logsumexp_layernorm(r, c, dtype):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((r, c)).astype(dtype)
    gamma = rng.standard_normal(c).astype(dtype)

    def f(x, gamma):
        mu = np.mean(x, axis=1, keepdims=True)
        xc = x - mu
        ln = xc / np.sqrt(np.mean(xc * xc, axis=1, keepdims=True) + 1e-5) * gamma
        return np.sum(ln * ln) + np.sum(jg.log_softmax(x) * gamma) + np.sum(jg.logsumexp(x, axis=1))

    check(f, (x, gamma), argnums=(0, 1), dtype=dtype)


def test_bias_gradients_and_column_sums():
    rng = np.random.default_rng(4)
    x, b, c = rng.standard_normal((13, 3, 5)), rng.standard_normal(5), rng.standard_normal((3, 1))

    def f(x, b, c):
        y = np.tanh(x + b) * c
        return np.sum(y ** 2) + np.sum(np.sum(y, axis=(0, 2)) ** 2) + np.sum(np.max(y, axis=0) * 3)

    check(f, (x, b, c), argnums=(0, 1, 2))


# ---- matmul: sizes not multiples of the tile, batched, transposed ------------------------------------------
@pytest.mark.parametrize("sa,sb", [((5, 7), (7, 6)), ((1, 9), (9, 1)), ((4, 4), (4, 8)),
                                   ((3, 5, 7), (3, 7, 2)), ((2, 1, 6, 5), (1, 3, 5, 9)), ((7,), (7, 3))])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matmul(sa, sb, dtype):
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
    check(lambda a, b: np.sum(np.sin(a @ b)) + np.sum((a @ b) ** 2), (a, b), argnums=(0, 1), dtype=dtype)


def test_mlp_with_gather_and_concatenate():
    rng = np.random.default_rng(6)
    E, W, idx = rng.standard_normal((10, 4)), rng.standard_normal((8, 3)), np.array([3, 0, 9, 3, -1])

    def f(E, W):
        h = np.concatenate([E[idx], E[idx[::-1]] * 0.5], axis=1)
        return np.sum(jg.log_softmax(np.tanh(h @ W)[1:, ::-1]))

    check(f, (E, W), argnums=(0, 1))


# ---- runtime behaviour -----------------------------------------------------------------------------------------
def _w6_graph():
    w = WORKLOADS["w6"]
    args = w["args"](np.random.default_rng(0), r=6, c=11)
    return jg.trace_graph(w["loss"], args, w["argnums"], False, True), args


def test_results_are_deterministic():
    graph, args = _w6_graph()
    prog, first = run_cuda(graph, args)
    for _ in range(2):
        again = prog.run(*args)
        for a, b in zip(first, again):
            assert np.array_equal(a, b)


def test_device_inputs_give_device_results():
    from numba import cuda
    from jitgraph.codegen import cuda_runtime
    graph, args = _w6_graph()
    prog, host = run_cuda(graph, args)
    dev = [cuda.to_device(a) for a in args]
    outs = prog.run(*dev)
    assert all(cuda_runtime.is_device_array(o) for o in outs)
    for o, h in zip(outs, host):
        np.testing.assert_array_equal(o.copy_to_host(), h)
    mixed = prog.run(args[0], dev[1], args[2])      # one device input: results on the device
    assert all(cuda_runtime.is_device_array(o) for o in mixed)
    # inputs are read in place, never written
    np.testing.assert_array_equal(dev[0].copy_to_host(), args[0])


def test_returned_inputs_are_copies_on_the_device():
    from numba import cuda
    x = np.arange(6.0).reshape(2, 3)
    graph = jg.trace_graph(lambda x: (x, x.reshape(3, 2), x * 2), (x,))
    prog = codegen.compile_graph(graph, target="cuda")
    d = cuda.to_device(x)
    a, b, c = prog.run(d)
    a[0, 0] = 100.0
    b[0, 0] = 200.0
    np.testing.assert_array_equal(d.copy_to_host(), x)
    np.testing.assert_array_equal(c.copy_to_host(), x * 2)


def test_gather_index_out_of_bounds_raises():
    x = np.ones((4, 3))
    graph = jg.trace_graph(lambda x, i: np.sum(x[i]), (x, np.array([0, 2])), 0, False, True)
    prog = codegen.compile_graph(graph, target="cuda")
    with pytest.raises(IndexError, match="out of bounds"):
        prog.run(x, np.array([0, 7]))
    v, g = prog.run(x, np.array([1, -1]))
    assert v[0] == 6.0 and g.sum() == 6.0


# ---- errors without CUDA ----------------------------------------------------------------------------------------
def test_no_device_is_a_clear_error(monkeypatch):
    from numba import cuda
    from jitgraph.codegen.emit_cuda import CudaUnavailableError
    monkeypatch.setattr(cuda, "is_available", lambda: False)   # as on a machine without a GPU
    graph = jg.trace_graph(lambda x: np.sum(x * x), (np.ones(3),), 0, False, True)
    with pytest.raises(CudaUnavailableError, match="NUMBA_ENABLE_CUDASIM=1") as info:
        codegen.compile_graph(graph, target="cuda")
    assert isinstance(info.value, jg.NotSupportedError)
    assert "no CUDA device was found" in str(info.value)
    f = jg.jit_grad(lambda x: np.sum(x * x), target="cuda")
    with pytest.raises(jg.NotSupportedError, match="no CUDA device"):
        f(np.ones(3))


def test_missing_numba_cuda_says_how_to_install(monkeypatch):
    from jitgraph.codegen.emit_cuda import CudaUnavailableError
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "numba_cuda" else real(name, *a))
    graph = jg.trace_graph(lambda x: np.sum(x * x), (np.ones(3),), 0, False, True)
    with pytest.raises(CudaUnavailableError, match=r"pip install jitgraph\[cuda\]"):
        codegen.compile_graph(graph, target="cuda")


def test_control_flow_is_a_clear_error():
    if not hasattr(jg, "fori_loop"):
        pytest.skip("no control flow in this jitgraph")

    def f(x):
        return np.sum(jg.fori_loop(0, 3, lambda i, c: np.sin(c), x))

    graph = jg.trace_graph(f, (np.ones(4),), 0, False, True)
    with pytest.raises(jg.NotSupportedError, match="does not support control flow"):
        codegen.compile_graph(graph, target="cuda")


def test_importing_jitgraph_does_not_import_numba_cuda():
    code = ("import sys, jitgraph, jitgraph.codegen, jitgraph.codegen.emit_cuda; "
            "bad = [m for m in sys.modules if m.startswith(('numba.cuda', 'numba_cuda'))]; "
            "assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# ---- golden sources --------------------------------------------------------------------------------------------
def _gather_mlp(E, W, idx):
    return np.sum(np.tanh(E[idx] @ W))


GOLDEN_CASES = {
    "w1": (WORKLOADS["w1"]["loss"], (0, 1), lambda: WORKLOADS["w1"]["args"](np.random.default_rng(0), n=100)),
    "w6": (WORKLOADS["w6"]["loss"], (0, 1, 2), lambda: WORKLOADS["w6"]["args"](np.random.default_rng(0), r=8, c=5)),
    "gather_mlp": (_gather_mlp, (0, 1), lambda: (np.ones((6, 4)), np.ones((4, 3)), np.array([0, 2, 2, 5]))),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_source(case):
    """Emitted CUDA source is stable; set JITGRAPH_UPDATE_GOLDEN=1 to rewrite after a deliberate change."""
    from jitgraph.codegen.emit_cuda import generate_cuda
    fn, argnums, make = GOLDEN_CASES[case]
    graph = jg.make_graph(fn, argnums=argnums, grad=True)(*make())
    _, src, _ = generate_cuda(graph, tpb=8)
    assert_golden(src, f"cuda_{case}.py.txt", f"CUDA source for {case}")
    # every computed node appears on a line with its comment
    names = graph.names()
    for n in graph.nodes:
        if n.op not in ("input", "const") and n.id not in codegen.Partition(graph).virtual:
            assert f"# {names[n.id]}:" in src, names[n.id]


def test_gpu_benchmark_quick_runs():
    # on the simulator when conftest chose it (the environment is inherited), else on the GPU
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu.py"), "--quick", "--no-peers"],
                         check=True, cwd=ROOT, capture_output=True, text=True, timeout=120).stdout
    for name in ("w1", "w2", "w3", "w4", "w6"):
        assert name in out



def test_device_workspace_from_the_memory_plan():
    f = jg.jit_grad(WORKLOADS["w2"]["loss"], argnums=WORKLOADS["w2"]["argnums"], target="cuda")
    args2 = WORKLOADS["w2"]["args"](np.random.default_rng(1), **SMALL["w2"])
    v1, g1 = f(*args2)
    v2, g2 = f(*args2)                          # the kept device workspace is reused
    assert v1 == v2 and all(np.array_equal(a, b) for a, b in zip(g1, g2))
    entry = next(iter(f._entries.values()))
    low = f.lower(*args2)
    assert "_rt.slot(ws, wofs[" in low.source and low.program.ws_bytes > 0
    assert len(entry.pool) == 1 and low.memory.workspace_bytes > 0


def test_remat_on_the_cuda_target():
    def loss(Ws, x):
        h = x
        for W in Ws:
            h = h + np.tanh(h @ W)
        return np.sum(h * h)

    rng = np.random.default_rng(5)
    Ws = [rng.standard_normal((5, 5)) * 0.3 for _ in range(6)]
    x = rng.standard_normal((7, 5))
    v0, g0 = jg.jit_grad(loss, target="cuda")(Ws, x)
    v1, g1 = jg.jit_grad(loss, target="cuda", remat="sqrt")(Ws, x)
    rv, rg = jg.value_and_grad(loss)(Ws, x)
    np.testing.assert_allclose(v1, rv, rtol=1e-12)
    for a, b, c in zip(g0, g1, rg):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(b, c, rtol=1e-10, atol=1e-12)


def _shared_sum_kernel():
    def red(x, out):
        t = cuda.threadIdx.x
        cuda.syncthreads()
        sh = cuda.shared.array(8, np.float64)
        sh[t] = x[t]
        cuda.syncthreads()
        s = 4
        while s > 0:
            if t < s:
                sh[t] += sh[t + s]
            cuda.syncthreads()
            s //= 2
        if t == 0:
            out[0] = sh[0]

    return cuda.jit(red)


def test_simulator_shared_arrays_are_one_per_block():
    # the simulator's shared-array lookup is not atomic; cuda_runtime serializes it (threads
    # released together by a barrier then allocate at once: unpatched, about 1 launch in 150
    # reduced over two different arrays)
    from numba.cuda.simulator import kernelapi
    from jitgraph.codegen import cuda_runtime
    if not cuda_runtime.SIM:
        pytest.skip("simulator only")
    assert getattr(kernelapi.FakeCUDAShared.array, "_jitgraph_locked", False)
    red = _shared_sum_kernel()
    x = np.arange(8.0)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(60):
            out = np.zeros(1)
            red[1, 8](x, out)
            assert out[0] == 28.0
    finally:
        sys.setswitchinterval(old)
