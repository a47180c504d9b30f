"""Data-parallel gradients on a real Dask LocalCluster (two worker processes, loopback only)."""
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import jitgraph as jg
import jitgraph.distributed as jgd

pytestmark = pytest.mark.xdist_group("dask")

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

RTOL = 1e-10


@pytest.fixture(scope="module")
def client():
    # Workers share this session's kernel cache directory, so a kernel compiled by the test
    # process (or by the other worker) is a disk hit. Not the default client: tests pass it
    # explicitly, and the local-scheduler fallback is testable.
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
        dashboard_address=None, env={"JITGRAPH_CACHE_DIR": os.environ["JITGRAPH_CACHE_DIR"]})
    c = distributed.Client(cluster, set_as_default=False)
    yield c
    c.close()
    cluster.close()


# Module-level functions travel by reference (workers import this module).
def mlp_mean(params, X, Y):
    h = np.tanh(X @ params["W1"] + params["b1"])
    out = h @ params["W2"]
    return np.mean((out - Y) ** 2)


def mlp_sum(params, X, Y):
    h = np.tanh(X @ params["W1"] + params["b1"])
    out = h @ params["W2"]
    return np.sum((out - Y) ** 2)


def softmax_xent(W, batch, b, scale):
    X, Y = batch
    logits = (X @ W + b) * scale
    return -np.sum(Y * jg.log_softmax(logits, axis=1)) / X.shape[0]


def counted_loss(w, x):
    return np.sum(np.sin(x @ w) ** 2)


def _params(rng, D=6, H=5, C=3):
    return {"W1": rng.standard_normal((D, H)) * 0.5, "b1": rng.standard_normal(H) * 0.1,
            "W2": rng.standard_normal((H, C)) * 0.5}


def _data(rng, N=200, D=6, C=3):
    return rng.standard_normal((N, D)), rng.standard_normal((N, C))


def _assert_close(a, b):
    la, ta = jg.tree_flatten(a)
    lb, tb = jg.tree_flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        np.testing.assert_allclose(x, y, rtol=RTOL, atol=1e-13)


def _stats(client):
    return client.run(jgd.local_stats)


# ---- import and pickling --------------------------------------------------------------------------

def test_import_jitgraph_does_not_import_dask():
    code = ("import sys, jitgraph, jitgraph.distributed\n"
            "from jitgraph import distributed\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed'))\n"
            "assert not bad, bad\n"
            "assert distributed.value_and_grad is jitgraph.distributed.value_and_grad\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_compiled_function_pickles_cheaply_and_runs_on_a_worker(client):
    f = jg.jit_grad(mlp_mean)
    rng = np.random.default_rng(1)
    p, (X, Y) = _params(rng), _data(rng, N=40)
    ref = f(p, X, Y)
    blob = pickle.dumps(f)
    assert len(blob) < 2000                   # the function by reference plus options
    assert b"ELF" not in blob and b"llvm" not in blob.lower()
    assert pickle.loads(blob) is f            # one instance per token per process
    step = jgd.value_and_grad(f, reduce="mean", client=client)
    assert step.compiled is f
    cloudpickle = pytest.importorskip("cloudpickle")
    assert len(cloudpickle.dumps(f)) < 2000
    remote = client.submit(lambda g, *a: g(*a), f, p, X, Y, pure=False).result()
    _assert_close(remote, ref)


# ---- equality with the single-process result ------------------------------------------------------

@pytest.mark.parametrize("reduce,fun", [("sum", mlp_sum), ("mean", mlp_mean)])
def test_matches_single_process_on_concatenated_data(client, reduce, fun):
    rng = np.random.default_rng(2)
    p, (X, Y) = _params(rng), _data(rng, N=300)
    ref = jg.jit_grad(fun)(p, X, Y)
    step = jgd.value_and_grad(fun, reduce=reduce, client=client)
    out = step(p, da.from_array(X, chunks=(50, 6)), da.from_array(Y, chunks=(50, 3)))
    _assert_close(out, ref)
    assert isinstance(out[1]["W1"], np.ndarray) and out[1]["W1"].shape == (6, 5)


def test_several_argnums_pytree_data_and_broadcast_arguments(client):
    rng = np.random.default_rng(3)
    N, D, C = 240, 7, 4
    X = rng.standard_normal((N, D))
    Y = np.eye(C)[rng.integers(0, C, N)]
    W, b = rng.standard_normal((D, C)) * 0.3, rng.standard_normal(C) * 0.1
    scale = 1.7                                   # a broadcast Python scalar, not differentiated
    ref = jg.jit_grad(softmax_xent, argnums=(0, 2))(W, (X, Y), b, scale)
    step = jgd.value_and_grad(softmax_xent, argnums=(0, 2), reduce="mean", client=client)
    batch = (da.from_array(X, chunks=60), da.from_array(Y, chunks=(60, 2)))   # Y split on axis 1
    value, (gW, gb) = step(W, batch, b, scale)
    _assert_close((value, (gW, gb)), ref)
    assert gW.shape == (D, C) and gb.shape == (C,)


def test_unequal_chunks_are_weighted_by_size(client):
    rng = np.random.default_rng(4)
    p, (X, Y) = _params(rng), _data(rng, N=101)
    ref = jg.jit_grad(mlp_mean)(p, X, Y)
    step = jgd.value_and_grad(mlp_mean, reduce="mean", client=client)
    # an empty chunk, a one-sample chunk, and Y chunked differently from X (rechunked to match)
    Xd = da.from_array(X, chunks=((1, 7, 0, 80, 13), (6,)))
    out = step(p, Xd, da.from_array(Y, chunks=(25, 3)))
    _assert_close(out, ref)
    # an unweighted mean of the chunk means would differ
    sizes = (1, 7, 80, 13)
    ends = np.cumsum(sizes)
    chunk_means = [mlp_mean(p, X[e - s:e], Y[e - s:e]) for s, e in zip(sizes, ends)]
    assert abs(np.mean(chunk_means) - out[0]) > 1e-6
    # NumPy data named in data_argnums is split to match the Dask chunks
    out2 = jgd.value_and_grad(mlp_mean, reduce="mean", client=client, data_argnums=(1, 2))(p, Xd, Y)
    _assert_close(out2, ref)


def test_numpy_data_is_split_across_workers_or_broadcast(client):
    rng = np.random.default_rng(5)
    p, (X, Y) = _params(rng), _data(rng, N=77)
    ref = jg.jit_grad(mlp_sum)(p, X, Y)
    split = jgd.value_and_grad(mlp_sum, client=client, data_argnums=(1, 2))
    _assert_close(split(p, X, Y), ref)
    # without data_argnums, NumPy arguments are broadcast: Y whole to every task, X chunked
    Yb = rng.standard_normal(3)
    ref_b = jg.jit_grad(mlp_sum)(p, X, Yb)
    bcast = jgd.value_and_grad(mlp_sum, client=client)
    _assert_close(bcast(p, da.from_array(X, chunks=20), Yb), ref_b)


def test_local_scheduler_without_a_client():
    rng = np.random.default_rng(6)
    p, (X, Y) = _params(rng), _data(rng, N=90)
    ref = jg.jit_grad(mlp_mean)(p, X, Y)
    with dask.config.set(scheduler="threads"):
        out = jgd.value_and_grad(mlp_mean, reduce="mean")(p, da.from_array(X, chunks=40),
                                                         da.from_array(Y, chunks=40))
    _assert_close(out, ref)


def test_bad_arguments_are_reported():
    rng = np.random.default_rng(7)
    p, (X, Y) = _params(rng), _data(rng, N=10)
    Xd = da.from_array(X, chunks=5)
    with pytest.raises(ValueError, match="reduce must be"):
        jgd.value_and_grad(mlp_mean, reduce="max")
    with pytest.raises(ValueError, match="differentiated.*also a data argument"):
        jgd.value_and_grad(mlp_mean, argnums=(0, 1))(p, Xd, Y)
    with pytest.raises(ValueError, match="holds a Dask array but is not a data argument"):
        jgd.value_and_grad(mlp_mean, data_argnums=1)(p, Xd, da.from_array(Y, chunks=5))
    with pytest.raises(ValueError, match="disagree on the number of samples"):
        jgd.value_and_grad(mlp_mean)(p, Xd, da.from_array(Y[:8], chunks=4))
    with pytest.raises(ValueError, match="forward only"):
        jgd.value_and_grad(jg.jit(mlp_mean))
    with pytest.raises(ValueError, match="has_aux"):
        jgd.value_and_grad(mlp_mean, has_aux=True)


# ---- what travels, and how often ------------------------------------------------------------------

def test_arguments_are_sent_once_per_call_not_once_per_task(client):
    rng = np.random.default_rng(8)
    p, (X, Y) = _params(rng), _data(rng, N=160)
    step = jgd.value_and_grad(mlp_sum, client=client)
    Xd, Yd = da.from_array(X, chunks=10), da.from_array(Y, chunks=10)     # 16 chunk tasks
    step(p, Xd, Yd)
    before = _stats(client)
    calls = 3
    for _ in range(calls):
        step(p, Xd, Yd)
    after = _stats(client)
    payloads = sum(after[w]["payloads"] - before[w]["payloads"] for w in after)
    specs = sum(after[w]["specs"] - before[w]["specs"] for w in after)
    assert payloads == calls * len(after)       # one replica per worker per call
    assert specs == 0                           # the compiled function's blob: once per process


def test_compiled_once_per_worker_and_traced_once_per_signature(client):
    rng = np.random.default_rng(9)
    w, X = rng.standard_normal((5, 2)), rng.standard_normal((96, 5))
    step = jgd.value_and_grad(counted_loss, client=client)
    Xd = da.from_array(X, chunks=8)                                        # 12 equal chunks
    ref = jg.jit_grad(counted_loss)(w, X)
    for _ in range(3):
        _assert_close(step(w, Xd), ref)
    info = {a: i for a, i in step.worker_cache_info().items() if i is not None}
    assert info, "no worker ran the function"
    assert sum(i.traces + i.hits for i in info.values()) == 3 * 12      # one call per task
    for i in info.values():
        assert i.compiles + i.disk_hits <= 1 and i.traces == 1
    for _ in range(3):
        step(w, Xd)
    again = {a: i for a, i in step.worker_cache_info().items() if i is not None}
    assert sum(i.traces + i.hits for i in again.values()) == 6 * 12
    assert all(again[a].traces == info[a].traces for a in info)          # more tasks, no new traces
    # unequal chunks: one trace per distinct chunk shape, still no new compile
    step(w, da.from_array(X, chunks=((40, 40, 16), (5,))))
    for a, i in step.worker_cache_info().items():
        if i is not None:
            assert i.compiles + i.disk_hits <= 1 and i.traces <= 3


# ---- worker loss ---------------------------------------------------------------------------------

def _slow_block(seed, rows, cols, delay):
    time.sleep(delay)
    return np.random.default_rng(seed).standard_normal((rows, cols))


def _slow_data(sizes, cols, seed, delay):
    blocks = [da.from_delayed(dask.delayed(_slow_block, pure=True)(seed + i, n, cols, delay),
                              shape=(n, cols), dtype=float) for i, n in enumerate(sizes)]
    local = np.concatenate([_slow_block(seed + i, n, cols, 0) for i, n in enumerate(sizes)])
    return da.concatenate(blocks), local


def test_a_worker_killed_mid_run_is_survived(client):
    rng = np.random.default_rng(10)
    sizes = [30] * 6 + [17] * 6
    Xd, X = _slow_data(sizes, 6, 100, 0.25)
    Yd, Y = _slow_data(sizes, 3, 200, 0.0)
    p = _params(rng)
    ref = jg.jit_grad(mlp_mean)(p, X, Y)
    step = jgd.value_and_grad(mlp_mean, reduce="mean", client=client)
    pids = client.run(os.getpid)
    victim_addr, victim = sorted(pids.items())[0]
    done = threading.Event()
    at_kill = []

    def kill():
        # as soon as the victim runs chunk tasks (12 blocks x 0.25 s on 2 workers: about 1.5 s
        # once they start; the call may first trace and load the function for the chunks)
        deadline = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < deadline \
                and not client.processing(workers=[victim_addr]).get(victim_addr):
            time.sleep(0.02)
        busy = len(client.processing(workers=[victim_addr]).get(victim_addr, ()))
        at_kill.append((not done.is_set(), busy > 0))
        os.kill(victim, signal.SIGKILL)

    killer = threading.Thread(target=kill)
    killer.start()
    try:
        out = step(p, Xd, Yd)
    finally:
        done.set()
        killer.join()
    assert at_kill == [(True, True)]          # mid-run, with tasks assigned to the victim
    _assert_close(out, ref)
    client.wait_for_workers(2, timeout=60)    # the nanny restarts it; later tests get two workers
    assert victim not in client.run(os.getpid).values()
    _assert_close(step(p, Xd, Yd), ref)
