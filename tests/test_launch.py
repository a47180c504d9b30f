"""codegen/launch.py: chunks on Numba's threads without a parfor."""
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import njit

from threads import on_threads
from jitgraph.codegen.launch import chunk_njit, group_njit, parallel_chunks, parallel_chunks_py, parallel_self


@njit
def _count_chunk(ch, nch, counts, seen_nch, scale, offset):
    counts[ch] += 1
    seen_nch[ch] = nch
    lo = ch * 1000 // nch
    hi = (ch + 1) * 1000 // nch
    s = 0.0
    for i in range(lo, hi):
        s += scale * i + offset
    counts[nch + ch] = s


@njit
def _run(nch, counts, seen_nch, scale, offset):
    parallel_chunks(_count_chunk, nch, counts, seen_nch, scale, offset)


@pytest.mark.parametrize("threads", [1, None])
@pytest.mark.parametrize("nch", [0, 1, 2, 3, 7, 16])
def test_every_chunk_runs_once_with_its_arguments(nch, threads):
    counts = np.zeros(2 * max(nch, 1))
    seen = np.full(max(nch, 1), -1, dtype=np.int64)
    on_threads(threads, _run, nch, counts, seen, 0.5, np.int64(3))
    expect_counts = np.zeros_like(counts)
    expect_seen = np.full_like(seen, -1)
    parallel_chunks_py(_count_chunk.py_func, nch, expect_counts, expect_seen, 0.5, 3)
    np.testing.assert_array_equal(counts, expect_counts)
    np.testing.assert_array_equal(seen, expect_seen)
    assert (counts[:nch] == 1).all() and (seen[:nch] == nch).all()


@chunk_njit(error_model="numpy", fastmath=True)
def _sum_chunk(ch, nch, x, part):
    lo = ch * x.shape[0] // nch
    hi = (ch + 1) * x.shape[0] // nch
    s = 0.0
    for i in range(lo, hi):
        s += np.exp(x[i])
    part[ch] = s


@njit(error_model="numpy", fastmath=True)
def _chunked_sum(x):
    nch = 16
    part = np.zeros(nch)
    parallel_chunks(_sum_chunk, nch, x, part)
    return part


def test_the_same_bits_on_any_number_of_threads_and_noalias_chunks():
    x = np.random.default_rng(0).standard_normal(100_003)
    every = _chunked_sum(x)
    one = on_threads(1, _chunked_sum, x)
    np.testing.assert_array_equal(every, one)
    serial = np.zeros(16)
    parallel_chunks_py(_sum_chunk.py_func, 16, x, serial)
    np.testing.assert_allclose(every, serial, rtol=1e-13)
    np.testing.assert_allclose(every.sum(), np.exp(x).sum(), rtol=1e-12)
    (cres,) = _sum_chunk.overloads.values()
    assert cres.fndesc.noalias                       # compiled like a prange body
    (plain,) = _count_chunk.overloads.values()
    assert not plain.fndesc.noalias


@group_njit(error_model="numpy", fastmath=True)
def _self_sum(ch, nch, x, part, out):
    if ch < 0:
        nch = 16
        parallel_self(_self_sum, nch, x, part, out)
        s = part[0]
        for c in range(1, nch):
            s = s + part[c]
        out[0] = s
        return
    _sum_chunk(ch, nch, x, part)


def test_a_function_launches_its_own_chunks():
    """parallel_self: called from Python with ch = -1, the function runs its chunks on itself:
    every chunk once, the same bits on any number of threads, one compiled function."""
    x = np.random.default_rng(1).standard_normal(100_003)
    part, out = np.zeros(16), np.zeros(1)
    _self_sum(-1, 0, x, part, out)
    part1, out1 = np.zeros(16), np.zeros(1)
    on_threads(1, _self_sum, -1, 0, x, part1, out1)
    np.testing.assert_array_equal(part, part1)
    assert out[0] == out1[0]
    serial = np.zeros(16)
    parallel_chunks_py(_sum_chunk.py_func, 16, x, serial)
    np.testing.assert_allclose(part, serial, rtol=1e-13)
    np.testing.assert_allclose(out[0], np.exp(x).sum(), rtol=1e-12)
    (cres,) = _self_sum.overloads.values()
    assert cres.fndesc.noalias and len(_self_sum.overloads) == 1


@group_njit()
def _launches_without_ch(ch, nch, x, part):
    if ch < 0:
        parallel_self(_launches_without_ch, 4, part)        # not its own parameters
        return


@group_njit()
def _launches_with_other_types(ch, nch, x, part):
    if ch < 0:
        parallel_self(_launches_with_other_types, 4, x, 1.0)
        return


@pytest.mark.parametrize("fn", [_launches_without_ch, _launches_with_other_types])
def test_parallel_self_refuses_a_call_that_is_not_the_functions_own(fn):
    with pytest.raises(Exception, match="parallel_self"):
        fn(-1, 0, np.ones(3), np.zeros(4))


def test_openmp_layer_is_chosen_and_needs_no_lock():
    from jitgraph.codegen import launch
    from jitgraph.entry import _PARALLEL_LOCK
    layer = launch.threading_layer()
    assert layer in ("omp", "workqueue", "tbb") and launch.threads_usable()
    if layer == "omp":
        assert _PARALLEL_LOCK is None
    else:       # GNU OpenMP missing here: the workqueue layer, behind the process-wide lock
        assert layer == "workqueue" and _PARALLEL_LOCK is not None


_FORK_CHILD = textwrap.dedent("""
    import os, numpy as np, jitgraph as jg
    from jitgraph.codegen import launch

    def loss(w):
        return np.sum(np.tanh(w) ** 2) + np.sum(np.exp(-w * w))

    w = np.random.default_rng(6).standard_normal((400, 200))    # parallel chunks
    f = jg.jit_grad(loss, wait=True)
    v, g = f(w)
    assert f.lower(w).program.threads and launch.threads_usable()
    pid = os.fork()
    if pid == 0:
        # GNU OpenMP's threads are gone: Numba would terminate this child if it launched on them
        ok = not launch.threads_usable()
        v2, g2 = f(w)
        ok = ok and v2 == v and np.array_equal(g2, g)
        x = np.random.default_rng(1).standard_normal((300, 300))
        h = jg.jit_grad(lambda a: np.sum(np.sin(a @ a) ** 2), wait=True)   # a new kernel here
        hv, hg = h(x)
        ok = ok and np.isclose(hv, np.sum(np.sin(x @ x) ** 2), rtol=1e-12)
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status))
""")


def test_a_forked_child_runs_threaded_kernels_on_its_calling_thread(tmp_path):
    env = dict(os.environ, JITGRAPH_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", _FORK_CHILD], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == "0", r.stderr


def _reductions(x):
    return (x.sum(), x.max(), x.min(), x.sum(axis=0), x.max(axis=0), x.min(axis=0),
            np.any(x > 0), np.all(x > -3), np.any(x > 0, axis=0))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_parallel_reductions_combine_their_chunks_in_helpers(dtype):
    """A launch's per-chunk partial sums, maxima and minima (whole arrays and columns) are
    combined by the runtime's compiled helper (`_rt.combine_parts`), in chunk order: the
    results equal NumPy's (exactly, for integers and extrema), a NaN in one chunk reaches the
    maximum, on one thread as on all of them. Boolean reductions keep their inline loop."""
    import jitgraph as jg
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((600, 256)) * 100).astype(dtype)      # 153,600 points: chunked
    f = jg.jit(_reductions, wait=True)
    source = f.lower(x).source
    combines = re.findall(r"_rt\.combine_parts\(.*, (\d)\)\n", source)      # the op codes
    assert sorted(combines) == ["0", "0", "2", "2", "3", "3"], source
    assert "for c in range(1, nch):" in source        # the boolean any/all
    got = f(x)
    want = _reductions(x)
    # float32 sums cancel: their rounding is relative to the sum of magnitudes
    tol = dict(rtol=1e-5, atol=1e-6 * float(np.abs(x).sum())) if dtype == np.float32 else dict(rtol=1e-12)
    for k, (g, w) in enumerate(zip(got, want)):
        if k in (0, 3) and x.dtype.kind == "f":        # sums, reassociated
            np.testing.assert_allclose(g, w, **tol)
        else:
            np.testing.assert_array_equal(g, w)
    for g, w in zip(on_threads(1, f, x), got):
        np.testing.assert_allclose(g, w, **tol)
    # the same source run as Python (backend="python"): the helper's Python form
    for g, w in zip(jg.jit(_reductions, backend="python")(x), got):
        np.testing.assert_allclose(g, w, **tol)
    if dtype != np.int64:
        x[437, 11] = np.nan
        got = f(x)
        assert np.isnan(got[1]) and np.isnan(got[4][11]) and not np.isnan(got[4][12])
        assert np.isnan(got[2]) and np.isnan(got[5][11]) and got[5][12] == x[:, 12].min()


def test_a_product_combines_its_chunks_in_order():
    import jitgraph as jg
    x = 1 + 1e-4 * np.random.default_rng(4).standard_normal((600, 256))
    f = jg.jit(lambda a: (np.prod(a), np.prod(a, axis=0)), wait=True)
    assert re.findall(r"_rt\.combine_parts\(.*, (\d)\)\n", f.lower(x).source) == ["1", "1"]
    p, cols = f(x)
    np.testing.assert_allclose(p, np.prod(x), rtol=1e-12)
    np.testing.assert_allclose(cols, np.prod(x, axis=0), rtol=1e-13)
