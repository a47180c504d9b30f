"""Cache benchmark: what retracing and recompiling cost, and what the disk cache saves.

    python benchmarks/cache.py

1. The w2 (MLP) gradient called with 6 batch sizes: traces vs native compiles.
2. First call of the w2 gradient in a fresh process, cold (empty cache directory)
   then warm (the directory the cold run filled), each in its own subprocess.
3. Per-call overhead of a cache hit (w5: 3 elements).
Timing never fails anything: this is a benchmark, not a test.
"""
import os

os.environ.setdefault("JITGRAPH_WAIT", "1")    # steady-state timings: compile before call 1 returns

import json
import subprocess
import sys
import tempfile
import time
import timeit

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

CHILD = """
import sys, time, json
t0 = time.perf_counter()
import numpy as np
sys.path.insert(0, {here!r})
from workloads import WORKLOADS
import jitgraph as jg
t1 = time.perf_counter()
w = WORKLOADS["w2"]
args = w["args"](np.random.default_rng(0))
f = jg.jit_grad(w["loss"], argnums=w["argnums"])
t2 = time.perf_counter()
f(*args)
t3 = time.perf_counter()
print(json.dumps(dict(imports=t1 - t0, first_call=t3 - t2, native=f.lower(*args).native)))
"""


def batch_sizes():
    import jitgraph as jg
    from workloads import WORKLOADS
    w = WORKLOADS["w2"]
    f = jg.jit_grad(w["loss"], argnums=w["argnums"])
    rows = []
    for B in (16, 64, 100, 500, 1000, 1024):
        args = w["args"](np.random.default_rng(B), B=B)
        t0 = time.perf_counter()
        f(*args)
        rows.append((B, time.perf_counter() - t0, f.lower(*args).native))
    return f.cache_info(), rows


def first_calls():
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, JITGRAPH_CACHE_DIR=d)
        env.pop("NUMBA_CACHE_DIR", None)
        out = []
        for label in ("cold", "warm"):
            r = subprocess.run([sys.executable, "-c", CHILD.format(here=HERE)], env=env,
                               capture_output=True, text=True, check=True)
            out.append((label, json.loads(r.stdout.strip().splitlines()[-1])))
        return out


def hit_overhead():
    import jitgraph as jg
    from workloads import WORKLOADS
    w = WORKLOADS["w5"]
    f = jg.jit_grad(w["loss"])
    a = w["args"](np.random.default_rng(0))
    f(*a)
    t = min(timeit.repeat(lambda: f(*a), number=20000, repeat=7)) / 20000
    return t * 1e6


def main():
    info, rows = batch_sizes()
    print("w2 gradient at 6 batch sizes (one process, in order):")
    for B, t, native in rows:
        print(f"  B={B:5d}: first call {t * 1e3:8.1f} ms  kernel {native}")
    print(f"  -> {info.traces} traces, {info.compiles} native compiles, {info.disk_hits} disk loads, "
          f"{info.kernel_reuses} reuses of an already compiled kernel")
    fc = first_calls()
    print("w2 gradient, first call in a fresh process:")
    for label, r in fc:
        print(f"  {label}: {r['first_call']:.3f} s (kernel {r['native']}; imports {r['imports']:.2f} s)")
    print(f"  -> warm/cold speedup {fc[0][1]['first_call'] / fc[1][1]['first_call']:.1f}x")
    print(f"cache-hit call overhead (w5, 3 elements): {hit_overhead():.2f} us per call")


if __name__ == "__main__":
    main()
