"""Data-parallel training on a Dask LocalCluster vs one process; per-task overhead.

    python benchmarks/dask_bench.py            # ~4.7 GB of data, 2 worker processes
    python benchmarks/dask_bench.py --quick    # small sizes, under a minute

1. Softmax regression, full-batch gradient descent, reduce="mean". The data
   (X: N x D float64 normal, Y: one-hot labels of a random teacher) is generated
   chunk by chunk on the workers with dask.array random + map_blocks and
   persisted there; the client only ever holds the parameters.
2. The same steps in one process (a subprocess started after the cluster has
   closed, so the two never share memory): the same data (the same Dask graph,
   computed with the threaded scheduler), one `jit_grad` call on the whole
   array, and a loop over the same chunks. The loss trajectory must match the
   cluster's to float rounding.
3. Per-task overhead: many tiny chunks, time per call / chunk tasks, against a
   no-op Dask graph of the same shape; and, on a worker, the cost of unpickling
   a compiled function that is already cached there.

Workers get one thread each (NUMBA_NUM_THREADS=1, BLAS at 1 via Dask's defaults);
the single process uses both cores. This is a benchmark: nothing is asserted
except that the runs agree.
"""
import os

os.environ.setdefault("JITGRAPH_WAIT", "1")    # steady-state timings: compile before call 1 returns

import argparse
import json
import pickle
import statistics
import subprocess
import sys
import time
import timeit

# Run as a script, this file's folder comes first on sys.path, and its name would shadow the
# `distributed` package (here and in the worker processes, which inherit the path): drop it.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import numpy as np  # noqa: E402

import jitgraph as jg  # noqa: E402
import jitgraph.distributed as jgd  # noqa: E402

FULL = dict(N=8_000_000, D=64, C=10, chunk=250_000, steps=8, loop_steps=3, tasks=256)
QUICK = dict(N=200_000, D=32, C=10, chunk=25_000, steps=5, loop_steps=2, tasks=64)
LR = 0.5


def softmax_loss(params, X, Y):
    logits = X @ params["W"] + params["b"]
    return -np.mean(np.sum(Y * jg.log_softmax(logits, axis=1), axis=1))


def _labels(x, W_true):
    k = np.argmax(x @ W_true, axis=1)
    return np.eye(W_true.shape[1])[k]


def make_data(N, D, C, chunk, seed=0):
    """Lazy (X, Y) Dask arrays: nothing is generated until computed or persisted."""
    import dask.array as da
    X = da.random.default_rng(seed).standard_normal((N, D), chunks=(chunk, D))
    W_true = np.random.default_rng(seed + 1).standard_normal((D, C))
    Y = X.map_blocks(_labels, W_true, chunks=(X.chunks[0], (C,)), dtype=np.float64)
    return X, Y


def init_params(D, C):
    return {"W": np.zeros((D, C)), "b": np.zeros(C)}


def sgd(params, grads):
    return {k: params[k] - LR * grads[k] for k in params}


def train(step, cfg, X, Y):
    """cfg["steps"] SGD steps (plus a first one that traces and loads or compiles kernels)
    with `step(params, X, Y) -> (loss, grads)`; the times and losses of each."""
    params = init_params(cfg["D"], cfg["C"])
    times, losses = [], []
    for _ in range(cfg["steps"] + 1):
        t0 = time.perf_counter()
        loss, grads = step(params, X, Y)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
        params = sgd(params, grads)
    return {"first_step_s": times[0], "step_s": times[1:], "losses": losses}


def _median(xs):
    return statistics.median(xs) if xs else float("nan")


# ---- the cluster ------------------------------------------------------------------------------------

def run_cluster(cfg, workers):
    from distributed import Client, LocalCluster, wait

    out = {}
    t0 = time.perf_counter()
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                           host="127.0.0.1", dashboard_address=None,
                           env={"NUMBA_NUM_THREADS": "1"})
    client = Client(cluster)
    out["cluster_start_s"] = time.perf_counter() - t0
    try:
        X, Y = make_data(cfg["N"], cfg["D"], cfg["C"], cfg["chunk"])
        t0 = time.perf_counter()
        X, Y = client.persist([X, Y])
        wait([X, Y])
        out["generate_s"] = time.perf_counter() - t0
        out["data_gb"] = (X.nbytes + Y.nbytes) / 1e9
        out["chunks"] = X.numblocks[0]

        step = jgd.value_and_grad(softmax_loss, reduce="mean", client=client)
        out.update(train(step, cfg, X, Y))
        out["worker_cache_info"] = {a: (i._asdict() if i else None)
                                    for a, i in step.worker_cache_info().items()}
        del X, Y
        out["overhead"] = task_overhead(client, cfg["tasks"])
    finally:
        client.close()
        cluster.close()
    return out


def _tiny_loss(w, x):
    return np.sum(np.tanh(x @ w))


def _noop(*args):
    return None


def task_overhead(client, ntasks, reps=7):
    """Seconds per chunk task: jitgraph's graph vs a no-op Dask graph of the same shape."""
    import dask
    import dask.array as da

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 2))
    X = client.persist(da.from_array(rng.standard_normal((2 * ntasks, 4)), chunks=(2, 4)))
    step = jgd.value_and_grad(_tiny_loss, client=client)
    step(w, X)                                                    # warm: traced on every worker

    def jg_call():
        step(w, X)

    blocks = list(X.to_delayed(optimize_graph=False).reshape(-1))
    blob = pickle.dumps(b"x" * 1500)            # about the size of the compiled function's blob

    def noop_call():
        ref = client.scatter([{"w": w}], broadcast=True, hash=False)[0]
        level = [dask.delayed(_noop, pure=False)(blob, ref, b) for b in blocks]
        while len(level) > 1:
            level = [dask.delayed(_noop, pure=False)(*level[i:i + 4]) for i in range(0, len(level), 4)]
        client.compute(level[0]).result()

    noop_call()
    t_jg = _median([timeit.timeit(jg_call, number=1) for _ in range(reps)])
    t_noop = _median([timeit.timeit(noop_call, number=1) for _ in range(reps)])

    import cloudpickle                          # as Dask ships it: _tiny_loss lives in __main__
    compiled_blob = cloudpickle.dumps(step.compiled)

    def on_worker(blob=compiled_blob, w=w):
        # unpickling a compiled function whose token this process already holds, and one
        # cached call of it on a 2-sample chunk
        import pickle as pk
        import timeit as ti
        f = pk.loads(blob)
        x = np.ones((2, 4))
        n = 2000
        loads = min(ti.repeat(lambda: pk.loads(blob), number=n, repeat=5)) / n
        call = min(ti.repeat(lambda: f(w, x), number=n, repeat=5)) / n
        return dict(unpickle_us=loads * 1e6, call_us=call * 1e6, same_instance=f is pk.loads(blob))

    worker = client.run(on_worker)
    return dict(chunk_tasks=ntasks, total_tasks=ntasks + _combine_count(ntasks, 4),
                jitgraph_call_s=t_jg, noop_call_s=t_noop,
                per_chunk_task_us=t_jg / ntasks * 1e6, noop_per_chunk_task_us=t_noop / ntasks * 1e6,
                compiled_blob_bytes=len(compiled_blob), worker=list(worker.values()))


def _combine_count(n, s):
    total = 0
    while n > 1:
        n = -(-n // s)
        total += n
    return total


# ---- one process ------------------------------------------------------------------------------------

def run_single(cfg):
    """In its own process: the same data (same Dask graph, threaded scheduler), the same steps."""
    import dask
    out = {}
    X, Y = make_data(cfg["N"], cfg["D"], cfg["C"], cfg["chunk"])
    t0 = time.perf_counter()
    X, Y = dask.compute(X, Y, scheduler="threads")
    out["generate_s"] = time.perf_counter() - t0
    f = jg.jit_grad(softmax_loss)
    out.update(train(f, cfg, X, Y))
    # the cluster's work, chunk by chunk, in one process: weighted sum of chunk means
    params = init_params(cfg["D"], cfg["C"])
    loop = []
    N, c = cfg["N"], cfg["chunk"]
    for _ in range(cfg["loop_steps"]):
        t0 = time.perf_counter()
        tot_v, tot_g = 0.0, None
        for a in range(0, N, c):
            v, g = f(params, X[a:a + c], Y[a:a + c])
            n = min(c, N - a)
            tot_v += v * n
            tot_g = {k: g[k] * n for k in g} if tot_g is None else {k: tot_g[k] + g[k] * n for k in g}
        grads = {k: tot_g[k] / N for k in tot_g}
        loop.append(time.perf_counter() - t0)
        params = sgd(params, grads)
    out["chunk_loop_step_s"] = loop
    out["cache_info"] = f.cache_info()._asdict()
    return out


# ---- report ------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (under a minute)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--single", help=argparse.SUPPRESS)      # internal: JSON config of a child run
    ap.add_argument("--json", action="store_true", help="print the raw results as JSON")
    a = ap.parse_args()
    if a.single:
        print(json.dumps(run_single(json.loads(a.single))))
        return
    cfg = QUICK if a.quick else FULL
    t_all = time.perf_counter()
    dist = run_cluster(cfg, a.workers)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--single", json.dumps(cfg)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"single-process run failed:\n{r.stderr}")
    single = json.loads(r.stdout.strip().splitlines()[-1])
    if a.json:
        print(json.dumps(dict(config=cfg, distributed=dist, single=single), indent=1))

    ld, ls = np.array(dist["losses"]), np.array(single["losses"])
    agree = float(np.max(np.abs(ld - ls) / np.maximum(np.abs(ls), 1e-300)))
    sd, ss, sl = _median(dist["step_s"]), _median(single["step_s"]), _median(single["chunk_loop_step_s"])
    print(f"data: N={cfg['N']:,} x D={cfg['D']} float64 + one-hot C={cfg['C']} labels = "
          f"{dist['data_gb']:.2f} GB in {dist['chunks']} chunks of {cfg['chunk']:,} rows")
    print(f"cluster: {a.workers} worker processes x 1 thread; start {dist['cluster_start_s']:.1f} s; "
          f"generate+persist on workers {dist['generate_s']:.1f} s")
    print(f"single process: generate {single['generate_s']:.1f} s (threaded scheduler, 2 threads)")
    print(f"losses (cluster): {' '.join(f'{x:.5f}' for x in ld)}")
    print(f"max relative loss difference cluster vs single process: {agree:.1e}")
    print(f"first step (trace + kernel load per worker): cluster {dist['first_step_s']:.2f} s, "
          f"single {single['first_step_s']:.2f} s")
    print(f"per step, median of {cfg['steps']}:")
    print(f"  cluster, {a.workers} processes           {sd * 1e3:9.1f} ms")
    print(f"  one process, whole array, 2 threads  {ss * 1e3:9.1f} ms   (cluster/single {sd / ss:.2f}x)")
    print(f"  one process, chunk loop, 2 threads   {sl * 1e3:9.1f} ms   (cluster/single {sd / sl:.2f}x)")
    print("worker cache_info (compiles, disk_hits, traces, hits):")
    for addr, i in dist["worker_cache_info"].items():
        print(f"  {addr}: " + ("-" if i is None else
                               f"{i['compiles']}, {i['disk_hits']}, {i['traces']}, {i['hits']}"))
    o = dist["overhead"]
    w = o["worker"][0]
    print(f"per-task overhead ({o['chunk_tasks']} chunk tasks of 2 rows + "
          f"{o['total_tasks'] - o['chunk_tasks']} combine tasks, median of 7 calls):")
    print(f"  jitgraph call {o['jitgraph_call_s'] * 1e3:.1f} ms = {o['per_chunk_task_us']:.0f} us per "
          f"chunk task; no-op Dask graph of the same shape {o['noop_call_s'] * 1e3:.1f} ms = "
          f"{o['noop_per_chunk_task_us']:.0f} us per chunk task")
    print(f"  on a worker: unpickling the cached compiled function ({o['compiled_blob_bytes']} bytes) "
          f"{w['unpickle_us']:.1f} us (same instance: {w['same_instance']}); "
          f"cached call on 2 rows {w['call_us']:.1f} us")
    print(f"total {time.perf_counter() - t_all:.0f} s")


if __name__ == "__main__":
    main()
