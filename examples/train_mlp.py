"""Train a small MLP on two interleaved half-moons: a plain NumPy training loop, run
first with eager gradients (`jg.value_and_grad`), then compiled by one decorator
(`jg.jit_grad`), from the same initial weights and the same minibatches.

    python examples/train_mlp.py                 # 20 epochs each
    python examples/train_mlp.py --epochs 2      # a quick look

Prints the loss and time per epoch of both runs, the compiled function's first-call
(trace + compile) time, the final test accuracy, and how far the two runs' final
weights are apart (the compiled kernels fuse and reorder floating-point sums, so
they agree to rounding, not bit for bit).
"""
import argparse
import time

import numpy as np

import jitgraph as jg


def make_moons(n, noise, rng):
    """n points on two interleaved half circles, with Gaussian noise; labels 0 and 1."""
    half = n // 2
    t = rng.uniform(0, np.pi, n)
    upper = np.stack([np.cos(t[:half]), np.sin(t[:half])], axis=1)
    lower = np.stack([1 - np.cos(t[half:]), 0.5 - np.sin(t[half:])], axis=1)
    X = np.concatenate([upper, lower]) + noise * rng.standard_normal((n, 2))
    y = np.concatenate([np.zeros(half, np.int64), np.ones(n - half, np.int64)])
    return X, y


def init_params(rng, sizes):
    """Weights (scaled normal) and zero biases of an MLP with layer widths `sizes`."""
    params = {}
    for k, (m, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        params[f"W{k}"] = rng.standard_normal((m, n)) / np.sqrt(m)
        params[f"b{k}"] = np.zeros(n)
    return params


def logits(params, X):
    """The MLP's output: tanh hidden layers, a linear last layer."""
    n_layers = len(params) // 2
    h = X
    for k in range(n_layers - 1):
        h = np.tanh(h @ params[f"W{k}"] + params[f"b{k}"])
    return h @ params[f"W{n_layers - 1}"] + params[f"b{n_layers - 1}"]


def loss(params, X, Y):
    """Mean softmax cross-entropy; Y is one-hot. Plain NumPy: nothing jitgraph-specific."""
    z = logits(params, X)
    m = np.max(z, axis=1, keepdims=True)
    log_p = z - m - np.log(np.sum(np.exp(z - m), axis=1, keepdims=True))
    return -np.sum(Y * log_p) / X.shape[0]


def accuracy(params, X, y):
    """Fraction of points whose largest logit is their label."""
    return float(np.mean(np.argmax(logits(params, X), axis=1) == y))


def train(value_and_grad, params, X, Y, epochs, batch, lr, momentum, seed):
    """SGD with momentum; returns (params, per-epoch mean losses, per-epoch seconds)."""
    rng = np.random.default_rng(seed)      # the same minibatch order for every run
    params = {k: v.copy() for k, v in params.items()}
    velocity = {k: np.zeros_like(v) for k, v in params.items()}
    losses, times = [], []
    n = X.shape[0] - X.shape[0] % batch    # whole batches only: one shape, one trace
    for _ in range(epochs):
        order = rng.permutation(X.shape[0])[:n]
        t0 = time.perf_counter()
        total = 0.0
        for start in range(0, n, batch):
            idx = order[start:start + batch]
            value, grads = value_and_grad(params, X[idx], Y[idx])
            total += value
            for k in params:
                velocity[k] = momentum * velocity[k] - lr * grads[k]
                params[k] += velocity[k]
        times.append(time.perf_counter() - t0)
        losses.append(total / (n // batch))
    return params, losses, times


def main(argv=None):
    """Train eagerly, then compiled; print per-epoch loss and time and the final accuracy."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--n", type=int, default=4096, help="training points (default 4096)")
    p.add_argument("--hidden", type=int, default=64, help="width of the two hidden layers (default 64)")
    p.add_argument("--batch", type=int, default=128)
    a = p.parse_args(argv)

    rng = np.random.default_rng(0)
    X, y = make_moons(a.n, 0.15, rng)
    X_test, y_test = make_moons(1024, 0.15, rng)
    Y = np.eye(2)[y]
    params0 = init_params(rng, [2, a.hidden, a.hidden, 2])
    opts = dict(epochs=a.epochs, batch=a.batch, lr=0.1, momentum=0.9, seed=1)
    print(f"two moons: {a.n} training points, MLP 2-{a.hidden}-{a.hidden}-2 (tanh), "
          f"batch {a.batch}, {a.epochs} epochs of SGD with momentum")

    # 1. the NumPy training loop with eager, define-by-run gradients
    eager_vg = jg.value_and_grad(loss)
    p_eager, l_eager, t_eager = train(eager_vg, params0, X, Y, **opts)

    # 2. the same loop, compiled: jg.jit_grad(loss) is what `@jg.jit_grad` above `def loss`
    #    would make; the rest of the program does not change
    compiled_vg = jg.jit_grad(loss)
    t0 = time.perf_counter()
    compiled_vg(params0, X[:a.batch], Y[:a.batch])     # first call: trace, then the NumPy interpreter
    first_call = time.perf_counter() - t0
    compiled_vg.wait()                                 # the kernel compiles meanwhile (tiered)
    ready = time.perf_counter() - t0
    p_comp, l_comp, t_comp = train(compiled_vg, params0, X, Y, **opts)

    print(f"\n{'epoch':>5} {'loss (eager)':>13} {'loss (jit_grad)':>16} {'eager ms':>9} {'jit_grad ms':>12}")
    for e in range(a.epochs):
        print(f"{e + 1:5d} {l_eager[e]:13.6f} {l_comp[e]:16.6f} {t_eager[e] * 1e3:9.1f} {t_comp[e] * 1e3:12.1f}")
    me, mc = np.median(t_eager), np.median(t_comp)
    print(f"\nmedian time per epoch: eager {me * 1e3:.1f} ms, jit_grad {mc * 1e3:.1f} ms ({me / mc:.1f}x faster); "
          f"jit_grad's first call {first_call:.2f} s (traced, interpreted), compiled after {ready:.2f} s")
    print(f"test accuracy: eager {accuracy(p_eager, X_test, y_test):.3f}, "
          f"jit_grad {accuracy(p_comp, X_test, y_test):.3f}")
    diff = max(float(np.max(np.abs(p_eager[k] - p_comp[k]))) for k in params0)
    print(f"largest difference between the two runs' final weights: {diff:.1e}")


if __name__ == "__main__":
    main()
