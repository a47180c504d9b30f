"""Peak memory and time of a deep residual MLP's gradient under each remat policy.

    python benchmarks/memory.py                    # depths 16 64 256, width 256, batch 1024
    python benchmarks/memory.py --depths 8 16 --batch 256 --width 64

The network: h <- h + tanh(h @ W_i + b_i) for i < depth, loss = sum(h * h) / batch,
float64, gradients with respect to every W_i and b_i. Each layer stores activations
the backward pass reads (its input and tanh's derivative), which no fusion removes.

Each (depth, policy) runs in its own subprocess: it compiles, times the call
(median), then frees the kept workspace, returns freed memory to the system
(malloc_trim), resets the peak-RSS counter (/proc/self/clear_refs) and measures
how far one more call raises the peak above the resident memory just before it.
That growth is the call's working memory: the workspace arena, the gradients it
returns (0.5 MiB per layer here), and anything unplanned. A second measurement
keeps the previous call's (dropped) gradient buffers, which the next call
recycles, as a training loop does: its growth ("activations") is the workspace
alone, the activations and temporaries. The predictions are
`f.lower(...).memory.peak_bytes` (workspace + outputs) and `.workspace_bytes`;
"stored" is `.stored_bytes`, the activations kept for the backward pass. Gradients are compared bit for bit with
the remat=None run (SHA-256 of their bytes).
"""
import os

os.environ.setdefault("JITGRAPH_WAIT", "1")    # steady-state timings: compile before call 1 returns

import argparse
import json
import math
import subprocess
import sys

CHILD = r"""
import ctypes, gc, hashlib, json, sys, time
import numpy as np
import jitgraph as jg

depth, width, batch, policy, reps = json.loads(sys.argv[1])

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024

def loss(Ws, bs, x):
    h = x
    for W, b in zip(Ws, bs):
        h = h + np.tanh(h @ W + b)
    return np.sum(h * h) / h.shape[0]

rng = np.random.default_rng(0)
Ws = [rng.standard_normal((width, width)) * (0.5 / np.sqrt(width)) for _ in range(depth)]
bs = [rng.standard_normal(width) * 0.1 for _ in range(depth)]
x = rng.standard_normal((batch, width))
f = jg.jit_grad(loss, argnums=(0, 1), remat=policy)
t0 = time.perf_counter()
low = f.lower(Ws, bs, x)
first = time.perf_counter() - t0
times = []
for _ in range(reps):
    t0 = time.perf_counter()
    r = f(Ws, bs, x)
    times.append(time.perf_counter() - t0)
digest = hashlib.sha256(b"".join(np.ascontiguousarray(g).tobytes()
                                 for part in r[1] for g in part)).hexdigest()[:16]
del r

def growth_of_one_call(outputs):
    # free the kept workspace (and the kept output buffers when `outputs`), give freed
    # memory back to the system, reset the peak counter, and see how far one call raises it
    f.release_buffers(workspace=True, outputs=outputs)
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    base = status("VmRSS")
    f(Ws, bs, x)
    return status("VmHWM") - base

growth = growth_of_one_call(True)
growth_ws = growth_of_one_call(False)
m = low.memory
print(json.dumps(dict(depth=depth, policy=policy, first_s=first, run_s=float(np.median(times)),
                      growth=growth, growth_ws=growth_ws, predicted=m.peak_bytes, outputs=m.output_bytes,
                      stored=m.stored_bytes, workspace=m.workspace_bytes,
                      recompute_flops=m.recompute_flops, forward_flops=m.forward_flops,
                      digest=digest)))
"""


def run_one(depth, width, batch, policy, reps):
    args = json.dumps([depth, width, batch, policy, reps])
    p = subprocess.run([sys.executable, "-c", CHILD, args], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"depth {depth} remat={policy!r} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def slope(points):
    """Least-squares slope of log(y) against log(x)."""
    xs = [math.log(x) for x, _ in points]
    ys = [math.log(y) for _, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depths", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", metavar="OUT", help="also write the rows as JSON")
    a = ap.parse_args(argv)
    if not os.path.exists("/proc/self/clear_refs"):
        sys.exit("this benchmark reads peak RSS from /proc (Linux only)")
    rows = []
    mib = 1 << 20
    print(f"# residual MLP, width {a.width}, batch {a.batch}, float64; MiB, ms; one subprocess per row")
    print(f"{'depth':>5} {'remat':>6} {'growth':>8} {'predicted':>9} {'pred/meas':>9} {'activations':>11} "
          f"{'predicted':>9} {'stored':>8} {'run ms':>8} {'time x':>6} {'1st call s':>10} {'grads':>7}")
    for d in a.depths:
        base = None
        for pol in (None, "sqrt"):
            r = run_one(d, a.width, a.batch, pol, a.reps)
            rows.append(r)
            act = r["growth_ws"]
            if pol is None:
                base = r
            same = "same" if r["digest"] == base["digest"] else "DIFFER"
            print(f"{d:>5} {str(pol):>6} {r['growth'] / mib:>8.1f} {r['predicted'] / mib:>9.1f} "
                  f"{r['predicted'] / r['growth']:>9.3f} {act / mib:>11.1f} {r['workspace'] / mib:>9.1f} "
                  f"{r['stored'] / mib:>8.1f} "
                  f"{r['run_s'] * 1e3:>8.1f} {r['run_s'] / base['run_s']:>6.2f} {r['first_s']:>10.1f} "
                  f"{same:>7}", flush=True)
    if len(a.depths) >= 2:
        for pol in (None, "sqrt"):
            mine = [r for r in rows if r["policy"] == pol]
            s_growth = slope([(r["depth"], r["growth"]) for r in mine])
            s_act = slope([(r["depth"], r["growth_ws"]) for r in mine])
            print(f"# remat={pol!s:>4}: log-log slope against depth: growth {s_growth:.2f}, "
                  f"activations (growth with recycled gradient buffers) {s_act:.2f}")
        big = max(a.depths)
        none = next(r for r in rows if r["depth"] == big and r["policy"] is None)
        sq = next(r for r in rows if r["depth"] == big and r["policy"] == "sqrt")
        print(f"# depth {big}: activations {none['growth_ws'] / sq['growth_ws']:.1f}x "
              f"smaller with sqrt (growth {none['growth'] / sq['growth']:.1f}x), time {sq['run_s'] / none['run_s']:.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
