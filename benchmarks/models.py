"""Realistic NumPy programs (benchmarks/models/): NumPy vs eager vs jit_grad vs JAX.

    python benchmarks/models.py                      # every model, bench sizes
    python benchmarks/models.py --only gp --only md  # some models (or --only gp,md)
    python benchmarks/models.py --size small --repeat 3
    python benchmarks/models.py --one-core           # everything pinned to one core
    python benchmarks/models.py --load               # beside a busy loop pinned to one core

For each program (a plain NumPy loss of `params`), one table row of medians in ms,
measured side by side in this process:

    numpy     the NumPy forward only (the program as its user runs it)
    eager     jg.value_and_grad (define-by-run)
    jit_grad  jg.jit_grad, steady state
    jax       jax.jit(jax.value_and_grad(loss_jax)), steady state (when JAX is importable)

jit_grad and jax are measured in alternating rounds (ROUND_CALLS calls of one, then of the
other, per round, each batch once the other's threads are idle, after an untimed call), so that both see the same state of the machine: on the shared virtual
machines this runs on, one program's steady-state time moved by up to 1.7x between runs
minutes apart (the transformer block: 11.5 and 19 ms), which had made JAX/jit_grad swing
from 0.6 to 0.9 when each was timed in a block of its own. `jit alone` is jit_grad timed
before JAX was imported (its threads cannot slow it then); a jit_grad much slower
interleaved than alone would say that JAX's threads are in its way.

then ratios, and first-call times: trace + codegen + Numba compile of jit_grad ("kernel"
says whether it was compiled or loaded from the disk cache) and trace + XLA compile of
jax.jit. Last, each program's roofline: the time no implementation can beat on this
machine, the larger of its flops (the compiled graph's operation count, forward and
backward) at the rate of one large BLAS GEMM, and the bytes that must move (the arguments
read, the results written, and the values stored for the backward pass written and read
back) at np.copyto's bandwidth, both measured here; jit/roof is jit_grad's time over it.
The copy is of 64 MiB, from memory: a program whose data stay in the caches can beat the
bytes roof (jit/roof below 1). Unless JITGRAPH_CACHE_DIR is set, a fresh temporary cache is used, so first calls
are cold compiles. JAX runs after every jitgraph and NumPy measurement (its thread pool
keeps spinning and would slow what is measured next). Timing never fails anything; a
program that fails prints its error in its row.

`--one-core` pins this process (and so every thread it starts: Numba's, OpenBLAS's, XLA's)
to one core, besides asking each library for one thread: XLA's CPU client ignores thread
flags for part of its work, and a JAX call that the flags called single-threaded used 1.9
cores (its CPU time over its wall time). `--load` starts a process that spins on one core,
pinned there, for the whole run: the competing load of a shared machine.
"""
import argparse
import os
import sys
import tempfile
import threading
import time


def _one_core():
    """Pin this process to one core and ask every thread pool for one thread; before NumPy,
    Numba or JAX size their pools at import."""
    for var in ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    os.environ["JITGRAPH_THREADS"] = "one"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[-1]})


def _start_load():
    """A process spinning on core 0 (--one-core pins this one to the last core), until this
    one exits."""
    import atexit
    import subprocess
    proc = subprocess.Popen([sys.executable, "-c",
                             "import os\nos.sched_setaffinity(0, {0})\nwhile True:\n    pass\n"])
    atexit.register(proc.kill)


if "--one-core" in sys.argv[1:]:
    _one_core()
if "JITGRAPH_CACHE_DIR" not in os.environ:       # cold compiles unless the caller chose a cache
    os.environ["JITGRAPH_CACHE_DIR"] = tempfile.mkdtemp(prefix="jitgraph-models-")

import numpy as np  # noqa: E402

import jitgraph as jg  # noqa: E402
from jitgraph.bench import installed, median_time  # noqa: E402
from jitgraph.threads import running_threads  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402  (the package benchmarks/models/, not this file)

BUDGET = 3.0      # seconds of timed calls per measurement; slow ones get fewer repeats (>= 3)
ROUND_CALLS = 3   # timed calls of each per round of the interleaved jit_grad / JAX measurement,
ROUND_WARM = 1    # after this many untimed ones (threads woken from sleep, caches refilled)
ROUND_PAUSE = 0.05  # seconds idle before each batch of a round, at least ...
ROUND_QUIET_MAX = 1.0  # ... and then until no other thread of this process runs (at most this long)
# untimed calls before jit_grad's and JAX's: on this virtual machine the first 5-8 calls on
# both cores ran up to 1.9x slower than later ones (an idle virtual CPU warming up), for both
WARM = 10


def static_argnums(mod):
    return tuple(getattr(mod, "STATIC_ARGNUMS", ()))


def jax_args(mod, args):
    """The arguments as JAX device arrays (static ones left as they are)."""
    import jax
    models.jax_numpy()
    st = static_argnums(mod)
    return tuple(a if i in st else jax.tree_util.tree_map(jax.device_put, a) for i, a in enumerate(args))


def jax_value_and_grad(mod):
    import jax
    models.jax_numpy()
    return jax.jit(jax.value_and_grad(mod.loss_jax), static_argnums=static_argnums(mod))


def time_jitgraph(name, size, reps, seed=0):
    """A row dict for one model: numpy, eager, jit_grad (ms), jit_first_s, kernel."""
    mod = models.load(name)
    args = mod.make_inputs(size, seed)
    row = {"name": name, "title": mod.TITLE}
    try:
        f = jg.jit_grad(mod.loss, static_argnums=static_argnums(mod), wait=True)   # compiled from call 1
        t0 = time.perf_counter()
        f(*args)
        row["jit_first_s"] = time.perf_counter() - t0
        f.wait()         # the threaded build, compiled in the background meanwhile
        row["kernel"] = f.lower(*args).native
        eager = jg.value_and_grad(mod.loss)
        # jit_grad before NumPy and eager: after a NumPy product, NumPy's OpenBLAS threads spin
        # for about 0.1 s and take a core (the MLP's first compiled calls after its NumPy
        # forward took 23-32 ms against 12.5 ms later)
        row["jit_alone"] = row["jit_grad"] = median_time(lambda: f(*args), reps, warm=WARM, budget=BUDGET) * 1e3
        row["_call"] = lambda: f(*args)      # for the rounds beside JAX (time_jax)
        mem = f.lower(*args).memory
        arg_bytes = sum(np.asarray(a).nbytes for a in jg.tree.tree_flatten(args)[0]
                        if isinstance(a, (np.ndarray, np.generic, float)))
        row["flops"] = mem.total_flops
        row["bytes"] = arg_bytes + mem.output_bytes + 2 * mem.stored_bytes
        row["numpy"] = median_time(lambda: mod.loss(*args), reps, budget=BUDGET) * 1e3
        row["eager"] = median_time(lambda: eager(*args), reps, warm=1, budget=BUDGET) * 1e3
    except Exception as e:       # a benchmark reports failures, it does not stop at them
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    return row


def time_jax(row, size, reps, seed=0):
    mod = models.load(row["name"])
    if not hasattr(mod, "loss_jax"):
        return
    import jax
    try:
        args = jax_args(mod, mod.make_inputs(size, seed))
        jf = jax_value_and_grad(mod)
        t0 = time.perf_counter()
        jax.block_until_ready(jf(*args))
        row["jax_first_s"] = time.perf_counter() - t0
        jax_call = lambda: jax.block_until_ready(jf(*args))     # noqa: E731
        jit_call = row.pop("_call", None)
        if jit_call is None:            # jit_grad failed: JAX alone
            row["jax"] = median_time(jax_call, reps, warm=WARM, budget=BUDGET) * 1e3
        else:
            row["jit_grad"], row["jax"] = (t * 1e3 for t in interleaved(jit_call, jax_call, reps))
    except Exception as e:
        row["jax_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    row.pop("_call", None)


def _quiet():
    """Sleep ROUND_PAUSE, then until no thread of this process but this one has been running
    for 10 ms (sampled every 2 ms in /proc/self/task), at most ROUND_QUIET_MAX seconds."""
    time.sleep(ROUND_PAUSE)
    me = str(threading.get_native_id())
    end = time.perf_counter() + ROUND_QUIET_MAX
    idle_since = time.perf_counter()
    while time.perf_counter() < end:
        try:
            busy = running_threads(exclude={me}) > 0
        except (OSError, IndexError):       # no /proc: the pause alone
            return
        now = time.perf_counter()
        if busy:
            idle_since = now
        elif now - idle_since >= 0.010:
            return
        time.sleep(0.002)


def interleaved(f, g, rounds):
    """(median seconds per call of f, of g), timed in alternating rounds of ROUND_CALLS calls
    each (f's, then g's), after WARM calls of each; at least 3 rounds, fewer than `rounds`
    where the calls would take over 2 * BUDGET. Each batch starts once the other's threads
    are idle (`_quiet`): after each call of the GP's JAX program one of XLA's threads kept
    running for 95-99 ms, and with a fixed 50 ms pause the GP's jit_grad calls took 18.2 ms
    interleaved against 11.0 alone (11.8 with 0.5 s pauses). Each batch's first ROUND_WARM
    calls are not timed: they wake threads that slept through the other's batch and refill
    caches it used, which a loop calling one program back to back does not pay."""
    def last_of_warm(h):
        for _ in range(WARM):
            t0 = time.perf_counter()
            h()
        return time.perf_counter() - t0
    per_round = ROUND_CALLS * (last_of_warm(f) + last_of_warm(g))
    rounds = min(rounds, max(3, int(2 * BUDGET / max(per_round, 1e-9))))
    times = ([], [])
    for _ in range(rounds):
        for h, ts in ((f, times[0]), (g, times[1])):
            _quiet()
            for _ in range(ROUND_WARM):
                h()
            for _ in range(ROUND_CALLS):
                t0 = time.perf_counter()
                h()
                ts.append(time.perf_counter() - t0)
    return tuple(sorted(ts)[len(ts) // 2] for ts in times)


def machine_rates():
    """(flop/s of one 1024^3 float64 GEMM, bytes/s moved by np.copyto of 64 MiB), medians of 5
    at NumPy's default threading: the two roofs of `roofline_ms`."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((1024, 1024)), rng.standard_normal((1024, 1024))
    gemm = median_time(lambda: a @ b, 5)
    src = np.ones(1 << 23)
    dst = np.empty_like(src)
    copy = median_time(lambda: np.copyto(dst, src), 5)
    return 2 * 1024 ** 3 / gemm, 2 * src.nbytes / copy


def roofline_ms(row, rates):
    """The program's lower bound in ms: max(flops / GEMM rate, bytes / copy bandwidth)."""
    return 1e3 * max(row["flops"] / rates[0], row["bytes"] / rates[1])


COLUMNS = [("numpy", "numpy fwd", "{:10.3f}"), ("eager", "eager v&g", "{:10.3f}"),
           ("jit_alone", "jit alone", "{:10.3f}"), ("jit_grad", "jit_grad", "{:10.3f}"),
           ("jax", "jax v&g", "{:10.3f}")]
RATIOS = [("jit/np", "jit_grad", "numpy"), ("eager/jit", "eager", "jit_grad"), ("jax/jit", "jax", "jit_grad"),
          ("jit/roof", "jit_grad", "roof")]
FIRSTS = [("jit 1st", "jit_first_s"), ("jax 1st", "jax_first_s")]


def format_table(rows):
    w = max(len(r["name"]) for r in rows)
    head = [f"{'model':<{w}}"] + [f"{h:>10}" for _, h, _ in COLUMNS] + [f"{h:>9}" for h, _, _ in RATIOS]
    head += [f"{h:>8}" for h, _ in FIRSTS] + [f"{'roof':>8}", "kernel"]
    lines = [" ".join(head)]
    for r in rows:
        cells = [f"{r['name']:<{w}}"]
        cells += [fmt.format(r[k]) if k in r else f"{'-':>10}" for k, _, fmt in COLUMNS]
        cells += [f"{r[a] / r[b]:9.2f}" if a in r and b in r else f"{'-':>9}" for _, a, b in RATIOS]
        cells += [f"{r[k]:7.2f}s" if k in r else f"{'-':>8}" for _, k in FIRSTS]
        cells.append(f"{r['roof']:8.3f}" if "roof" in r else f"{'-':>8}")
        cells.append(r.get("kernel") or "-")
        lines.append(" ".join(cells))
    lines.append("")
    for r in rows:
        lines.append(f"  {r['name']:<{w}} {r['title']}")
        for key in ("error", "jax_error"):
            if key in r:
                lines.append(f"  {'':<{w}}   {key.replace('_', ' ')}: {r[key]}")
    lines.append("# jit_grad and jax v&g: timed in alternating rounds; jit alone: jit_grad before JAX was imported")
    lines.append("# ms per call (medians); jit/np = jit_grad time / NumPy forward time (a full gradient "
                 "costs >= 1 forward); 1st = first call (trace + compile), kernel: compiled or disk")
    if any("roof" in r for r in rows):
        lines.append("# roof = the program's roofline in ms (its flops at one large GEMM's rate or the bytes it "
                     "must move at np.copyto's bandwidth, whichever is longer); jit/roof = jit_grad / roof")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", metavar="NAME",
                   help=f"models to run (repeatable or comma-separated; default all: {', '.join(models.NAMES)})")
    p.add_argument("--size", choices=("small", "bench"), default="bench")
    p.add_argument("--repeat", type=int, default=7, help="timed calls per median (default 7)")
    p.add_argument("--no-jax", action="store_true", help="skip JAX")
    p.add_argument("--one-core", action="store_true",
                   help="pin the process to one core, one thread per library (applied at import)")
    p.add_argument("--load", action="store_true", help="run beside a busy loop pinned to one core")
    a = p.parse_args(argv)
    if a.load:
        _start_load()
    names = [n for o in a.only for n in o.split(",") if n] if a.only else list(models.NAMES)
    bad = [n for n in names if n not in models.NAMES]
    if bad:
        p.error(f"unknown model(s) {', '.join(bad)}; choose from {', '.join(models.NAMES)}")
    # jitgraph starts its compile server beside a process's first trace; its imports take a
    # core for about 0.6 s, which the first model's timed calls would share when its kernel
    # loads from the disk cache. Start it now and let it settle: steady state is measured.
    from jitgraph.codegen import compile_server
    if compile_server.start() is not None:
        time.sleep(1.5)
    rows = []
    for name in names:
        print(f"# {name}: jitgraph + numpy ...", file=sys.stderr, flush=True)
        rows.append(time_jitgraph(name, a.size, a.repeat))
    if not a.no_jax and installed("jax"):
        for row in rows:
            print(f"# {row['name']}: jax ...", file=sys.stderr, flush=True)
            time_jax(row, a.size, a.repeat)
    rates = machine_rates()
    for row in rows:
        if "flops" in row:
            row["roof"] = roofline_ms(row, rates)
    import numba
    print(f"# roofs on this machine: one 1024^3 GEMM at {rates[0] / 1e9:.1f} GFLOP/s, "
          f"np.copyto at {rates[1] / 1e9:.1f} GB/s (read + write)")
    print(f"# {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable"
          f"{', a busy loop pinned to core 0' if a.load else ''}), numba {numba.__version__} ({numba.get_num_threads()} threads), "
          f"numpy {np.__version__}; {a.size} sizes; medians of up to {a.repeat} "
          f"(at least 3 where they take over {BUDGET:g} s)")
    print(format_table(rows))
    return rows


if __name__ == "__main__":
    main()
