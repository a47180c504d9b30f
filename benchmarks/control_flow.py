"""Control flow benchmark: a compiled loop (`jg.fori_loop`) against the same loop unrolled by tracing,
and the constructs outside a trace against the Python statements they stand for.

    python benchmarks/control_flow.py [--steps 10000] [--unrolled 100 1000 10000]

Compiled: explicit Euler integration of dy/dt = -k*y + sin(t) for a small
state, differentiated with respect to k and y0 with `jit_grad`. Each
configuration runs in its own subprocess with an empty kernel cache, so
first-call times are cold (trace + codegen + native compile). Unrolled runs
longer than --timeout seconds are reported as such.

Outside a trace (plain NumPy): `jg.cond`, `jg.fori_loop`, `jg.while_loop` and a
Kalman filter written with `jg.scan` + `jg.cond`, each against the same program
written with `if`, `for` and `while` (medians of repeated calls; the target is
at most 2x the Python statement).
"""
import os

os.environ.setdefault("JITGRAPH_WAIT", "1")    # steady-state timings: compile before call 1 returns

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import jitgraph as jg

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


# ---- outside a trace ------------------------------------------------------------------------------------
def _kalman(step_with_cond):
    """A constant-velocity Kalman filter over observations with gaps (NaN: no update)."""
    F = np.array([[1.0, 1.0], [0.0, 1.0]])
    H = np.array([[1.0, 0.0]])
    Q, R = np.eye(2) * 0.01, np.array([[0.25]])

    def update(state, z):
        m, P = state
        S = H @ P @ H.T + R
        K = P @ H.T / S
        return m + (K * (z - H @ m)).ravel(), P - K @ H @ P

    def step(state, z):
        m, P = state
        m, P = F @ m, F @ P @ F.T + Q
        if step_with_cond:
            m, P = jg.cond(np.isnan(z[0]) == False, update, lambda s, z: s, (m, P), z)  # noqa: E712
        elif not np.isnan(z[0]):
            m, P = update((m, P), z)
        return (m, P), m[0]
    return step


def _outside_programs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1000)
    zs = np.cumsum(rng.standard_normal(200)).reshape(200, 1)
    zs[::7] = np.nan
    init = (np.zeros(2), np.eye(2))

    def py_if(x):
        return x * 2.0 if x[0] > 0 else x - 1.0

    def py_for(x):
        for i in range(50):
            x = x * 0.99 + i
        return x

    def py_while(x):
        while x[0] < 100.0:
            x = x * 1.5 + 1.0
        return x

    def py_kalman(zs):
        state, ms = init, []
        step = _kalman(False)
        for z in zs:
            state, m = step(state, z)
            ms.append(m)
        return np.stack(ms)

    return [
        ("cond", lambda: jg.cond(x[0] > 0, lambda v: v * 2.0, lambda v: v - 1.0, x), lambda: py_if(x)),
        ("fori_loop (50)", lambda: jg.fori_loop(0, 50, lambda i, v: v * 0.99 + i, x), lambda: py_for(x)),
        ("while_loop", lambda: jg.while_loop(lambda v: v[0] < 100.0, lambda v: v * 1.5 + 1.0, np.abs(x)),
         lambda: py_while(np.abs(x))),
        ("Kalman scan+cond (200)", lambda: jg.scan(_kalman(True), init, zs)[1], lambda: py_kalman(zs)),
    ]


def _median_time(fn, reps=21):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def outside_a_trace():
    """[(name, construct s, Python statement s)] for the programs above, in plain NumPy."""
    rows = []
    for name, construct, python in _outside_programs():
        np.testing.assert_allclose(construct(), python(), rtol=1e-12)
        rows.append((name, _median_time(construct), _median_time(python)))
    return rows


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
    print(f"\noutside a trace (plain NumPy), medians\n{'construct':24s} {'jitgraph us':>12s} "
          f"{'Python us':>10s} {'ratio':>6s}")
    for name, t_c, t_p in outside_a_trace():
        print(f"{name:24s} {t_c * 1e6:12.1f} {t_p * 1e6:10.1f} {t_c / t_p:6.2f}")


if __name__ == "__main__":
    main()
