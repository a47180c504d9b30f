"""Train a small MLP with data-parallel gradients on a local Dask cluster.

    python -m pip install -e ".[distributed]"
    python examples/distributed_training.py

The data is generated on the workers, chunk by chunk (the client never holds it);
each training step sends the parameters to the workers once, runs the compiled
`jit_grad` of the loss on every chunk, and adds the chunk gradients in a tree.
At the end, the distributed gradient is checked against one process computing
the same gradient on the whole data.
"""
import time

import numpy as np

import jitgraph as jg
import jitgraph.distributed as jgd

N, D, H, C = 400_000, 20, 64, 5          # 64 MB of features in 8 chunks
CHUNK = 50_000


def loss(params, X, Y):
    """Mean cross-entropy of a one-hidden-layer MLP over one chunk of samples."""
    h = np.tanh(X @ params["W1"] + params["b1"])
    logits = h @ params["W2"] + params["b2"]
    return -np.mean(np.sum(Y * jg.log_softmax(logits, axis=1), axis=1))


def teacher_labels(x, W):
    """One-hot labels of a fixed random linear teacher (runs on the workers, per chunk)."""
    return np.eye(W.shape[1])[np.argmax(np.sin(x) @ W, axis=1)]


def main():
    import dask.array as da
    from distributed import Client, LocalCluster, wait

    # one Numba thread per Dask worker thread: the cores are shared out by processes
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None, env={"NUMBA_NUM_THREADS": "1"}) as cluster, \
            Client(cluster) as client:
        X = da.random.default_rng(0).standard_normal((N, D), chunks=(CHUNK, D))
        W_teacher = np.random.default_rng(1).standard_normal((D, C))
        Y = X.map_blocks(teacher_labels, W_teacher, chunks=(X.chunks[0], (C,)), dtype=np.float64)
        X, Y = client.persist([X, Y])
        wait([X, Y])

        rng = np.random.default_rng(2)
        params = {"W1": rng.standard_normal((D, H)) / np.sqrt(D), "b1": np.zeros(H),
                  "W2": rng.standard_normal((H, C)) / np.sqrt(H), "b2": np.zeros(C)}
        # loss returns a chunk mean: reduce="mean" weights each chunk by its size
        step = jgd.value_and_grad(loss, argnums=0, reduce="mean")    # uses the default client
        lr = 0.5
        for epoch in range(10):
            t0 = time.perf_counter()
            value, grads = step(params, X, Y)
            params = {k: params[k] - lr * grads[k] for k in params}
            print(f"step {epoch:2d}  loss {value:.4f}  {time.perf_counter() - t0:6.3f} s")

        for addr, info in step.worker_cache_info().items():
            print(f"{addr}: traced {info.traces}x, compiled {info.compiles}x, "
                  f"loaded from disk {info.disk_hits}x, {info.hits} cached calls")

        # check: the same gradient in this process, on the whole data
        Xn, Yn = client.compute([X, Y], sync=True)
        v_ref, g_ref = jg.jit_grad(loss)(params, Xn, Yn)
        v, g = step(params, X, Y)
        err = max(np.max(np.abs(g[k] - g_ref[k])) / np.max(np.abs(g_ref[k])) for k in g)
        print(f"single process: loss {v_ref:.12f}, distributed {v:.12f}, "
              f"max relative gradient difference {err:.1e}")


if __name__ == "__main__":
    main()
