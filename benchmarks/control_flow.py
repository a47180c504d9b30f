"""Control flow benchmark: a compiled loop (`jg.fori_loop`) against the same loop unrolled by tracing.

    python benchmarks/control_flow.py [--steps 10000] [--unrolled 100 1000 10000]

The workload: explicit Euler integration of dy/dt = -k*y + sin(t) for a small
state, differentiated with respect to k and y0 with `jit_grad`. Each
configuration runs in its own subprocess with an empty kernel cache, so
first-call times are cold (trace + codegen + native compile). Unrolled runs
longer than --timeout seconds are reported as such.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
import numpy as np
import jitgraph as jg
steps, mode = int(sys.argv[1]), sys.argv[2]
dt = 1.0 / steps
def loss(k, y0):
    if mode == "fori":
        y = jg.fori_loop(0, steps, lambda i, y: y + dt * (-k * y + np.sin(dt * i)), y0)
    else:
        y = y0
        for i in range(steps):
            y = y + dt * (-k * y + np.sin(dt * i))
    return np.sum(y ** 2)
k, y0 = np.linspace(0.5, 2.0, 8), np.linspace(-1.0, 1.0, 8)
f = jg.jit_grad(loss, argnums=(0, 1))
t0 = time.perf_counter()
v, (gk, gy) = f(k, y0)
first = time.perf_counter() - t0
low = f.lower(k, y0)
ts = []
for _ in range(5):
    t0 = time.perf_counter()
    f(k, y0)
    ts.append(time.perf_counter() - t0)
ts.sort()
print(json.dumps(dict(first=first, trace=low.timings["trace"], run=ts[2], nodes=len(low.graph.nodes),
                      lines=low.source.count("\n"), value=float(v))))
"""


def run(steps, mode, timeout):
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, JITGRAPH_CACHE_DIR=d)
        env.pop("NUMBA_CACHE_DIR", None)
        try:
            r = subprocess.run([sys.executable, "-c", CHILD, str(steps), mode], env=env,
                               capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        if r.returncode != 0:
            raise RuntimeError(r.stderr)
        return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--unrolled", type=int, nargs="*", default=[100, 1000])
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args(argv)
    rows = [("fori_loop", a.steps, run(a.steps, "fori", a.timeout))]
    rows += [("unrolled", n, run(n, "unrolled", a.timeout)) for n in a.unrolled]
    print(f"{'version':10s} {'steps':>7s} {'first call s':>12s} {'trace s':>8s} {'run ms':>8s} "
          f"{'graph nodes':>11s} {'source lines':>12s}")
    for name, n, r in rows:
        if r is None:
            print(f"{name:10s} {n:7d}   > {a.timeout:.0f} s (stopped)")
            continue
        print(f"{name:10s} {n:7d} {r['first']:12.2f} {r['trace']:8.2f} {r['run'] * 1e3:8.2f} "
              f"{r['nodes']:11d} {r['lines']:12d}")


if __name__ == "__main__":
    main()
