"""Benchmark runner: eager vs hand-written NumPy vs jit_grad (vs JAX and PyTorch when installed).

    python benchmarks/run.py                 # published sizes, all workloads
    python benchmarks/run.py --quick         # small sizes (a smoke run)
    python benchmarks/run.py w1 w3 --reps 5

Prints one table of medians (ms; w5 in us per call) measured side by side in
this process, plus first-call (trace + codegen + compile) time and the ratios
the codegen issue sets as targets. Peers run in this process too, so compare
ratios, not absolute numbers across runs. Timing never fails anything: this is
a benchmark, not a test.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workloads import WORKLOADS  # noqa: E402

import jitgraph as jg  # noqa: E402

QUICK = dict(w1=dict(n=200_000), w2=dict(B=256, D=64, H=128, C=10), w3=dict(n=512), w4=dict(n=50_000),
             w5={}, w6=dict(r=512, c=256))


def bench(f, reps=7, warm=2, inner=1):
    for _ in range(warm):
        f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            f()
        ts.append((time.perf_counter() - t0) / inner)
    return statistics.median(ts)


def _jax_fn(name, w):
    try:
        import jax
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    # the same loss, written against jax.numpy: run the NumPy source with jnp swapped in
    src_fun = w["loss"]
    glb = dict(src_fun.__globals__)
    glb["np"] = jnp
    import types
    f = types.FunctionType(src_fun.__code__, glb, src_fun.__name__, src_fun.__defaults__)
    return jax.jit(jax.value_and_grad(f, argnums=w["argnums"]))


def _torch_fn(name, w, args):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    nums = w["argnums"] if isinstance(w["argnums"], tuple) else (w["argnums"],)

    def t_loss(*ts):
        if name == "w1":
            w_, b, x = ts
            return (torch.tanh(x * w_ + b) ** 2).sum()
        if name == "w2":
            W1, b1, W2, b2, X, Y = ts
            h = X @ W1 + b1
            a = torch.clamp(h, min=0)
            lo = a @ W2 + b2
            return -(Y * torch.log_softmax(lo, 1)).sum() / X.shape[0]
        if name == "w3":
            return torch.logsumexp(ts[0], 1).sum()
        if name == "w4":
            z = ts[0]
            for _ in range(50):
                z = torch.sin(z) * 0.9 + 0.1 * z
            return z.sum()
        if name == "w5":
            return torch.tanh(ts[0] * ts[0] + 0.3).sum()
        if name == "w6":
            x, g, b = ts
            mu = x.mean(1, keepdim=True)
            xc = x - mu
            var = (xc * xc).mean(1, keepdim=True)
            y = xc / torch.sqrt(var + 1e-5) * g + b
            return (y * y).sum()

    def run():
        ts = [torch.tensor(np.asarray(a), requires_grad=(i in nums)) for i, a in enumerate(args)]
        loss = t_loss(*ts)
        grads = torch.autograd.grad(loss, [ts[i] for i in nums])
        return loss.item(), [g.numpy() for g in grads]

    return run


def run(names, quick=False, reps=7, peers=True, out=sys.stdout):
    """Measure every workload; peers (JAX, then PyTorch) run after all jitgraph and NumPy
    measurements, because their thread pools keep spinning after they run and would slow
    down whatever is measured next in the process."""
    rng = np.random.default_rng(0)
    rows, inputs = [], {}
    for name in names:
        w = WORKLOADS[name]
        kw = QUICK[name] if quick else {}
        args = inputs[name] = w["args"](rng, **kw)
        nums = w["argnums"]
        inner, scale = _units(name)
        row = {"name": name, "title": w["title"]}
        f = jg.jit_grad(w["loss"], argnums=nums)
        t0 = time.perf_counter()
        f(*args)
        row["first_call_s"] = time.perf_counter() - t0
        fwd = jg.jit(w["loss"])
        fwd(*args)
        eager = jg.value_and_grad(w["loss"], argnums=nums)
        r = 1 if name == "w5" else reps
        row["jit_grad"] = bench(lambda: f(*args), reps, inner=inner) * scale
        row["jit_fwd"] = bench(lambda: fwd(*args), reps, inner=inner) * scale
        row["numpy"] = bench(lambda: w["numpy"](*args), reps, inner=inner) * scale
        row["eager"] = bench(lambda: eager(*args), max(3, r // 2), warm=1,
                             inner=max(1, inner // 10)) * scale
        rows.append(row)
    if peers:
        for row in rows:
            name, w = row["name"], WORKLOADS[row["name"]]
            inner, scale = _units(name)
            jf = _jax_fn(name, w)
            if jf is not None:
                args = inputs[name]
                jf(*args)
                row["jax"] = bench(lambda: jax_block(jf(*args)), reps, inner=inner) * scale
        for row in rows:
            name, w = row["name"], WORKLOADS[row["name"]]
            inner, scale = _units(name)
            tf = _torch_fn(name, w, inputs[name])
            if tf is not None:
                row["torch"] = bench(tf, reps, inner=max(1, inner // 10)) * scale
    for row in rows:
        print(_fmt_row(row), file=out, flush=True)
    return rows


def _units(name):
    """(calls per timing, scale): w5 is timed over 1000 calls in us, the rest in ms."""
    return (1000, 1e6) if name == "w5" else (1, 1e3)


def jax_block(res):
    import jax
    return jax.block_until_ready(res)


HEAD = (f"{'workload':<5} {'numpy':>9} {'eager':>9} {'jit_grad':>9} {'jit fwd':>9} {'jax':>9} "
        f"{'torch':>9} {'grad/fwd':>8} {'np/jit':>7} {'jax/jit':>7} {'1st call':>8}")


def _fmt_row(r):
    def c(k):
        return f"{r[k]:9.3f}" if k in r else f"{'-':>9}"
    ratio = r["jit_grad"] / r["jit_fwd"]
    npj = r["numpy"] / r["jit_grad"]
    jj = f"{r['jax'] / r['jit_grad']:7.2f}" if "jax" in r else f"{'-':>7}"
    return (f"{r['name']:<5} {c('numpy')} {c('eager')} {c('jit_grad')} {c('jit_fwd')} {c('jax')} {c('torch')} "
            f"{ratio:8.2f} {npj:7.2f} {jj} {r['first_call_s']:7.2f}s")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    p.add_argument("--quick", action="store_true", help="small sizes")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--no-peers", action="store_true", help="skip JAX and PyTorch")
    a = p.parse_args(argv)
    import numba
    print(f"# {os.cpu_count()} cores, numba {numba.__version__} ({numba.get_num_threads()} threads), "
          f"numpy {np.__version__}; medians of {a.reps}; ms (w5: us per call)")
    print(HEAD)
    rows = run(a.workloads, a.quick, a.reps, not a.no_peers)
    geo = [r["numpy"] / r["jit_grad"] for r in rows if r["name"] in ("w1", "w3", "w4", "w6")]
    if geo:
        print(f"# geometric mean numpy/jit_grad over {len(geo)} of w1,w3,w4,w6: "
              f"{float(np.exp(np.mean(np.log(geo)))):.2f}x")
    return rows


if __name__ == "__main__":
    main()
