"""First-call latency: jit_grad's tiers and compiles against JAX's first call, program by program.

    python benchmarks/compile.py                    # the realistic programs and w1-w6
    python benchmarks/compile.py --only mlp,w2      # some of them
    python benchmarks/compile.py --size small

Every number comes from a fresh process (the script runs itself as a child per
measurement), with a cache directory whose runtime helpers are already compiled (a
warm-up pass at the measured size compiles them) and whose kernels are deleted before each
cold measurement. Columns, in seconds:

    eager    one jg.value_and_grad call (median of 3 after one warm call)
    first    the first call of jit_grad (tiered default): trace, then the NumPy interpreter
    compiled time from the first call until a call runs compiled code, calling in a loop
             as a training loop would (the serial build of the parallel loops)
    final    ... until the final (multi-threaded) build serves the calls
    wait     the first call with wait=True (blocks until the serial build is compiled)
    warm     the first call in a new process whose disk cache holds the kernel (tiered
             default: it runs the kernel loaded from the cache; "*" marks one that did not)
    edit     (with --edit) the first call with wait=True of an edited program, `1.5 * loss + 0.1`,
             in a process that compiled the program itself first: a new graph and kernel,
             whose unchanged loop functions are shared with the first (codegen/build.py)
    jax      jax.jit(jax.value_and_grad(f)): the first call (trace + XLA compile)

and the ratios first/eager and compiled/jax, with geometric means. Timing never fails
anything; a failed measurement prints its error.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = ["w1", "w2", "w3", "w4", "w5", "w6"]
LOOP_LIMIT = 180.0       # seconds a child calls in a loop waiting for compiled code


def _program(name, size):
    """(loss, args, static_argnums, argnums, jax value-and-grad factory) of a program."""
    import numpy as np
    if name in WORKLOADS:
        from jitgraph import bench
        w = bench.WORKLOADS[name]
        preset = "tiny" if size == "small" else "default"
        args = w["args"](np.random.default_rng(0), **bench.size_params(name, preset))
        return w["loss"], args, (), w["argnums"], lambda: bench._jax_fn(w)
    sys.path.insert(0, HERE)
    import models
    mod = models.load(name)
    st = tuple(getattr(mod, "STATIC_ARGNUMS", ()))

    def jax_vg():
        import jax
        models.jax_numpy()
        return jax.jit(jax.value_and_grad(mod.loss_jax), static_argnums=st)
    return mod.loss, mod.make_inputs(size, 0), st, 0, jax_vg


def _child(mode, name, size):
    t_start = time.perf_counter()
    if mode == "jax":
        import jax
        loss, args, st, argnums, jax_vg = _program(name, size)
        f = jax_vg()
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        return dict(jax=time.perf_counter() - t0)
    import jitgraph as jg
    t_import = time.perf_counter() - t_start
    loss, args, st, argnums, _ = _program(name, size)
    out = {}
    if mode == "tiered":
        eager = jg.value_and_grad(loss, argnums=argnums)
        eager(*args)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            eager(*args)
            times.append(time.perf_counter() - t0)
        out["eager"] = sorted(times)[1]
        f = jg.jit_grad(loss, argnums=argnums, static_argnums=st, wait=False)
        t0 = time.perf_counter()
        f(*args)
        out["first"] = time.perf_counter() - t0
        interp = [out["first"]]
        while time.perf_counter() - t0 < LOOP_LIMIT:
            n = f.cache_info().interpreted_calls
            t1 = time.perf_counter()
            f(*args)
            if f.cache_info().interpreted_calls == n:       # this call ran compiled code
                out.setdefault("compiled", time.perf_counter() - t0)
                if f.ready():
                    out["final"] = time.perf_counter() - t0
                    break
            else:
                interp.append(time.perf_counter() - t1)
        out["interpreted"] = sorted(interp)[len(interp) // 2]
    elif mode == "wait":
        f = jg.jit_grad(loss, argnums=argnums, static_argnums=st, wait=True)
        t0 = time.perf_counter()
        f(*args)
        out["wait"] = time.perf_counter() - t0
        f.wait()
        out["wait_final"] = time.perf_counter() - t0
    elif mode == "edit":
        jg.jit_grad(loss, argnums=argnums, static_argnums=st, wait=True)(*args)

        def edited(*a):
            return 1.5 * loss(*a) + 0.1
        f = jg.jit_grad(edited, argnums=argnums, static_argnums=st, wait=True)
        t0 = time.perf_counter()
        f(*args)
        out["edit"] = time.perf_counter() - t0
    elif mode == "warm":
        f = jg.jit_grad(loss, argnums=argnums, static_argnums=st, wait=False)
        t0 = time.perf_counter()
        f(*args)
        out["warm"] = time.perf_counter() - t0
        out["warm_compiled"] = f.cache_info().interpreted_calls == 0
        out["import"] = t_import
        out["native"] = f.lower(*args).native
    return out


def _run_child(mode, name, size, env):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, name, "--size", size]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    for line in p.stdout.splitlines()[::-1]:
        if line.startswith("{"):
            return json.loads(line)
    tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"{mode}: {tail[:200]}"}


def measure(name, size, cache, jax, edit=False):
    env = dict(os.environ, JITGRAPH_CACHE_DIR=cache)
    env.pop("JITGRAPH_WAIT", None)
    row = {"name": name}
    kernels = os.path.join(cache, "kernels")
    for mode in ("tiered", "wait", "warm") + (("edit",) if edit else ()):
        if mode != "warm":
            shutil.rmtree(kernels, ignore_errors=True)
        row.update(_run_child(mode, name, size, env))
    if jax:
        row.update(_run_child("jax", name, size, env))
    return row


COLUMNS = ["eager", "first", "compiled", "final", "wait", "warm", "edit", "jax"]


def format_table(rows):
    columns = [c for c in COLUMNS if c != "edit" or any("edit" in r for r in rows)]
    w = max(len(r["name"]) for r in rows)
    lines = [f"{'program':<{w}} " + " ".join(f"{c:>8}" for c in columns) + f" {'1st/eager':>9} {'comp/jax':>8}"]
    ratios = {"first/eager": [], "compiled/jax": [], "compiled": [], "jax": []}
    for r in rows:
        cells = [f"{r[c]:8.2f}" if c in r else f"{'-':>8}" for c in columns]
        if r.get("warm_compiled") is False:
            k = columns.index("warm")
            cells[k] = cells[k][1:] + "*"
        fe = r["first"] / r["eager"] if "first" in r and "eager" in r else None
        cj = r["compiled"] / r["jax"] if "compiled" in r and "jax" in r else None
        lines.append(f"{r['name']:<{w}} " + " ".join(cells) + (f" {fe:9.2f}" if fe else f" {'-':>9}")
                     + (f" {cj:8.2f}" if cj else f" {'-':>8}"))
        if fe:
            ratios["first/eager"].append(fe)
        if cj:
            ratios["compiled/jax"].append(cj)
            ratios["compiled"].append(r["compiled"])
            ratios["jax"].append(r["jax"])
    lines.append("")
    for key, vals in ratios.items():
        if vals:
            lines.append(f"geometric mean {key}: {math.exp(sum(map(math.log, vals)) / len(vals)):.2f}")
    for r in rows:
        if "error" in r:
            lines.append(f"{r['name']}: {r['error']}")
    lines.append("# seconds; each from a fresh process; first = tiered first call, compiled = until a call "
                 "runs compiled code, final = until the multi-threaded build serves, warm = disk cache "
                 "(* = its first call ran on the interpreter), edit = an edited program compiled after it")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", metavar="NAME")
    p.add_argument("--size", choices=("small", "bench"), default="bench")
    p.add_argument("--no-jax", action="store_true")
    p.add_argument("--edit", action="store_true", help="also time an edited program's compile (the edit column)")
    p.add_argument("--child", nargs=2, metavar=("MODE", "NAME"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(_child(a.child[0], a.child[1], a.size)), flush=True)
        return None
    sys.path.insert(0, HERE)
    import models
    from jitgraph.bench import installed
    names = [n for o in a.only for n in o.split(",") if n] if a.only else list(models.NAMES) + WORKLOADS
    jax = not a.no_jax and installed("jax")
    cache = tempfile.mkdtemp(prefix="jitgraph-compile-bench-")
    try:
        env = dict(os.environ, JITGRAPH_CACHE_DIR=cache, JITGRAPH_WAIT="1")
        # at the measured sizes: some helpers (the threaded products) only run on large arrays
        print(f"# warm-up: compiling the runtime helpers ({a.size} sizes) ...", file=sys.stderr, flush=True)
        for name in names:
            _run_child("wait", name, a.size, env)
        rows = []
        for name in names:
            print(f"# {name} ...", file=sys.stderr, flush=True)
            rows.append(measure(name, a.size, cache, jax, edit=a.edit))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(f"# {os.cpu_count()} cores; {a.size} sizes")
    print(format_table(rows))
    return rows


if __name__ == "__main__":
    main()
