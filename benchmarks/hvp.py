"""Cost of a compiled Hessian-vector product against the compiled gradient, side by side.

    python benchmarks/hvp.py

For workloads w1, w2, w3 and w6 (at the `default` sizes of `jitgraph bench`), times
`jg.jit_grad(loss)` and `jg.hvp(loss)` (reverse over reverse, fused and compiled) in
one process, medians of 7, and prints hvp/grad.
"""
import os

os.environ.setdefault("JITGRAPH_WAIT", "1")    # steady-state timings: compile before call 1 returns

import statistics
import time

import numpy as np

import jitgraph as jg
from jitgraph.bench import WORKLOADS, size_params


def median_time(f, reps=7):
    f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    print(f"{'workload':9s} {'grad ms':>9s} {'hvp ms':>9s} {'hvp/grad':>9s} {'hvp first call s':>17s}")
    for name in ("w1", "w2", "w3", "w6"):
        w = WORKLOADS[name]
        args = w["args"](np.random.default_rng(0), **size_params(name, "default"))
        nums = w["argnums"]
        rng = np.random.default_rng(1)
        v = (tuple(rng.standard_normal(np.shape(args[a])) for a in nums)
             if isinstance(nums, tuple) else rng.standard_normal(np.shape(args[nums])))
        g = jg.jit_grad(w["loss"], argnums=nums)
        h = jg.hvp(w["loss"], argnums=nums)
        t0 = time.perf_counter()
        h(*args, v)
        first = time.perf_counter() - t0
        tg = median_time(lambda: g(*args))
        th = median_time(lambda: h(*args, v))
        print(f"{name:9s} {tg * 1e3:9.2f} {th * 1e3:9.2f} {th / tg:9.2f} {first:17.2f}")


if __name__ == "__main__":
    main()
