"""Gradient checkpointing on a deep residual network: the same training step compiled
four ways, with the memory each needs and the time each takes.

    python examples/checkpointing.py                       # depth 64, width 256, batch 512
    python examples/checkpointing.py --depth 16 --width 64 --batch 128 --steps 3

Reverse mode keeps every activation the backward pass reads, so a depth-n network
stores O(n) of them. Rematerialization stores fewer and recomputes the rest during
the backward pass:

* `jit_grad(loss)`: store everything (remat=None);
* `jit_grad(loss, remat="sqrt")`: about sqrt(n) segments, O(sqrt n) stored activations,
  at the cost of about one more forward pass;
* `jg.checkpoint(block)` inside the loss: recompute what each block computes (like
  `jax.checkpoint`): only block inputs are stored;
* `jit_grad(loss, remat=<bytes>)`: a budget for the predicted peak; the least
  recomputation that fits it.

For each it prints the predicted memory (`f.lower(...).memory`: peak, stored
activations, recompute cost), the median time of a training step, and checks that
the gradients are the same bits as without remat. Then it trains a few SGD steps with
the "sqrt" version on a synthetic regression task.
"""
import argparse
import time

import numpy as np

import jitgraph as jg


def block(h, W, b):
    """One residual block: h + tanh(h W + b)."""
    return h + np.tanh(h @ W + b)


def make_loss(checkpoint_blocks=False):
    step = jg.checkpoint(block) if checkpoint_blocks else block

    def loss(params, x, y):
        Ws, bs, V = params
        h = x
        for W, b in zip(Ws, bs):
            h = step(h, W, b)
        err = h @ V - y
        return np.sum(err * err) / x.shape[0]

    return loss


def init(depth, width, rng):
    Ws = [rng.standard_normal((width, width)) * (0.5 / np.sqrt(width)) for _ in range(depth)]
    bs = [np.zeros(width) for _ in range(depth)]
    V = rng.standard_normal((width, 1)) / np.sqrt(width)
    return (Ws, bs, V)


def flat(grads):
    Ws, bs, V = grads
    return np.concatenate([g.ravel() for g in list(Ws) + list(bs) + [V]])


def median_ms(f, args, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f(*args)
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def mib(b):
    return f"{b / 2**20:9.3f} MiB"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depth", type=int, default=64)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--reps", type=int, default=5, help="timed calls per variant")
    ap.add_argument("--steps", type=int, default=10, help="SGD steps of the training demo")
    a = ap.parse_args(argv)

    rng = np.random.default_rng(0)
    params = init(a.depth, a.width, rng)
    x = rng.standard_normal((a.batch, a.width))
    y = np.sin(x[:, :1]) + 0.1 * rng.standard_normal((a.batch, 1))
    print(f"residual network: depth {a.depth}, width {a.width}, batch {a.batch}, float64")

    plain = jg.jit_grad(make_loss(), wait=True)
    base = plain.lower(params, x, y).memory
    sqrt_peak = jg.jit_grad(make_loss(), remat="sqrt", wait=True).lower(params, x, y).memory.peak_bytes
    budget = (base.peak_bytes + sqrt_peak) // 2
    variants = [
        ("store everything", plain),
        ('remat="sqrt"', jg.jit_grad(make_loss(), remat="sqrt", wait=True)),
        ("jg.checkpoint per block", jg.jit_grad(make_loss(checkpoint_blocks=True), wait=True)),
        (f"remat={budget} (bytes)", jg.jit_grad(make_loss(), remat=budget, wait=True)),
    ]
    print(f"\n{'variant':<28} {'peak':>12} {'stored':>12} {'recompute':>10} {'step ms':>8} {'time':>6}  grads")
    ref, ref_ms = None, None
    for name, f in variants:
        value, grads = f(params, x, y)
        m = f.lower(params, x, y).memory
        ms = median_ms(f, (params, x, y), a.reps)
        g = flat(grads)
        if ref is None:
            ref, ref_ms = g, ms
        same = "same bits" if np.array_equal(g, ref) else f"max diff {np.max(np.abs(g - ref)):.2e}"
        rec = m.recompute_flops / max(m.forward_flops, 1)
        print(f"{name:<28} {mib(m.peak_bytes)} {mib(m.stored_bytes)} {rec:>9.2f}x {ms:>8.1f} "
              f"{ms / ref_ms:>5.2f}x  {same}")
    print("\npeak: workspace + returned gradients (f.lower(...).memory.peak_bytes); stored: activations kept\n"
          "for the backward pass; recompute: extra operations, as a multiple of the forward pass;\n"
          "time: step time relative to storing everything")

    print(f"\nthe memory report of remat=\"sqrt\":\n{variants[1][1].lower(params, x, y).memory}")

    # a few SGD steps with the checkpointed gradient, from plain NumPy code
    f = variants[1][1]
    lr = 0.01
    for step in range(a.steps):
        value, (gWs, gbs, gV) = f(params, x, y)
        Ws, bs, V = params
        params = ([W - lr * g for W, g in zip(Ws, gWs)], [b - lr * g for b, g in zip(bs, gbs)], V - lr * gV)
        if step in (0, a.steps - 1):
            print(f"step {step:>3}: loss {value:.5f}")


if __name__ == "__main__":
    main()
