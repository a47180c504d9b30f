"""Benchmark workloads and the runner behind `jitgraph bench` and `benchmarks/run.py`.

Six float64 value+gradient workloads (w1-w6), each a plain NumPy loss, the
indices of its differentiated arguments, a function making its arguments at a
given size, and a hand-written NumPy forward+backward for the reference
timing. `run` times every implementation side by side in this process:
hand-written NumPy, eager `value_and_grad`, `jit_grad`, the `jit` forward, and
JAX / PyTorch when they are installed. Timing never fails anything: this is a
benchmark, not a test.
"""
import importlib.util
import inspect
import os
import statistics
import sys
import time
import types

import numba
import numpy as np

import jitgraph as jg

# ---- workloads ------------------------------------------------------------------------------


def w1_loss(w, b, x):
    return np.sum(np.tanh(x * w + b) ** 2)


def w1_args(rng, n=4_000_000):
    return (rng.standard_normal(n), np.float64(0.3), rng.standard_normal(n))


def w1_numpy(w, b, x):
    t = np.tanh(x * w + b)
    g = 2 * t * (1 - t * t)
    return (t * t).sum(), (g * x, g.sum())


def w2_loss(W1, b1, W2, b2, X, Y):
    h = X @ W1 + b1
    a = np.maximum(h, 0)
    lo = a @ W2 + b2
    m = lo.max(axis=1, keepdims=True)
    lse = np.log(np.sum(np.exp(lo - m), axis=1, keepdims=True)) + m
    return -np.sum(Y * (lo - lse)) / X.shape[0]


def w2_args(rng, B=1024, D=256, H=512, C=10):
    X = rng.standard_normal((B, D))
    Y = np.eye(C)[rng.integers(0, C, B)]
    return (rng.standard_normal((D, H)) * 0.05, np.zeros(H), rng.standard_normal((H, C)) * 0.05,
            np.zeros(C), X, Y)


def w2_numpy(W1, b1, W2, b2, X, Y):
    B = X.shape[0]
    h = X @ W1 + b1
    a = np.maximum(h, 0)
    lo = a @ W2 + b2
    m = lo.max(1, keepdims=True)
    e = np.exp(lo - m)
    s = e.sum(1, keepdims=True)
    p = e / s
    loss = -(Y * (lo - m - np.log(s))).sum() / B
    dlo = (p - Y) / B
    gW2 = a.T @ dlo
    gb2 = dlo.sum(0)
    da = dlo @ W2.T
    dh = da * (h > 0)
    return loss, (X.T @ dh, dh.sum(0), gW2, gb2)


def w3_loss(A):
    m = A.max(axis=1, keepdims=True)
    return np.sum(np.log(np.sum(np.exp(A - m), axis=1)) + m[:, 0])


def w3_args(rng, n=2048):
    return (rng.standard_normal((n, n)),)


def w3_numpy(A):
    m = A.max(1, keepdims=True)
    e = np.exp(A - m)
    s = e.sum(1, keepdims=True)
    return (np.log(s) + m).sum(), e / s


DEPTH = 50


def w4_loss(z):
    for _ in range(DEPTH):
        z = np.sin(z) * 0.9 + 0.1 * z
    return np.sum(z)


def w4_args(rng, n=1_000_000):
    return (rng.standard_normal(n),)


def w4_numpy(z0):
    zs = [z0]
    z = z0
    for _ in range(DEPTH):
        z = np.sin(z) * 0.9 + 0.1 * z
        zs.append(z)
    g = np.ones_like(z)
    for k in range(DEPTH - 1, -1, -1):
        g = g * (0.9 * np.cos(zs[k]) + 0.1)
    return z.sum(), g


def w5_loss(a):
    return np.sum(np.tanh(a * a + 0.3))


def w5_args(rng):
    return (np.ones(3),)


def w5_numpy(a):
    t = np.tanh(a * a + 0.3)
    return t.sum(), (1 - t * t) * 2 * a


def w6_loss(x, gamma, beta):
    mu = np.mean(x, axis=1, keepdims=True)
    xc = x - mu
    var = np.mean(xc * xc, axis=1, keepdims=True)
    y = xc / np.sqrt(var + 1e-5) * gamma + beta
    return np.sum(y * y)


def w6_args(rng, r=4096, c=1024):
    return (rng.standard_normal((r, c)), rng.standard_normal(c), rng.standard_normal(c))


def w6_numpy(x, gam, bet):
    mu = x.mean(1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(1, keepdims=True)
    r = 1 / np.sqrt(var + 1e-5)
    xh = xc * r
    y = xh * gam + bet
    dy = 2 * y
    dxh = dy * gam
    dx = r * (dxh - dxh.mean(1, keepdims=True) - xh * (dxh * xh).mean(1, keepdims=True))
    return (y * y).sum(), (dx, (dy * xh).sum(0), dy.sum(0))


def _count(n):
    """4000000 -> '4M', 200000 -> '200k', 1024 -> '1024'."""
    for div, suffix in ((1_000_000, "M"), (1000, "k")):
        if n >= div and n % div == 0:
            return f"{n // div}{suffix}"
    return str(n)


WORKLOADS = {
    "w1": dict(loss=w1_loss, argnums=(0, 1), args=w1_args, numpy=w1_numpy,
               what="elementwise sum(tanh(x*w+b)^2)", size=lambda n: _count(n)),
    "w2": dict(loss=w2_loss, argnums=(0, 1, 2, 3), args=w2_args, numpy=w2_numpy,
               what="MLP, softmax cross-entropy", size=lambda B, D, H, C: f"{B}x{D}x{H}x{C}"),
    "w3": dict(loss=w3_loss, argnums=0, args=w3_args, numpy=w3_numpy,
               what="row logsumexp, summed", size=lambda n: f"{n}x{n}"),
    "w4": dict(loss=w4_loss, argnums=0, args=w4_args, numpy=w4_numpy,
               what=f"{DEPTH}-deep sin chain", size=lambda n: _count(n)),
    "w5": dict(loss=w5_loss, argnums=0, args=w5_args, numpy=w5_numpy,
               what="call overhead (us per call)", size=lambda: "3 elements"),
    "w6": dict(loss=w6_loss, argnums=(0, 1, 2), args=w6_args, numpy=w6_numpy,
               what="layer norm rows + sum of squares", size=lambda r, c: f"{r}x{c}"),
}

# Argument sizes per preset. "full" is the published one (the defaults of the args functions);
# "default" is what `jitgraph bench` runs (under 2 minutes with a cold compile cache);
# "quick" is `benchmarks/run.py --quick`; "tiny" runs in seconds (tests).
SIZES = {
    "full": {name: {} for name in WORKLOADS},
    "default": dict(w1=dict(n=1_000_000), w2=dict(B=512, D=128, H=256, C=10), w3=dict(n=1024),
                    w4=dict(n=200_000), w5={}, w6=dict(r=1024, c=512)),
    "quick": dict(w1=dict(n=200_000), w2=dict(B=256, D=64, H=128, C=10), w3=dict(n=512),
                  w4=dict(n=50_000), w5={}, w6=dict(r=512, c=256)),
    "tiny": dict(w1=dict(n=10_000), w2=dict(B=32, D=16, H=32, C=10), w3=dict(n=64), w4=dict(n=2_000),
                 w5={}, w6=dict(r=64, c=32)),
}


def size_params(name, preset="full"):
    """The keyword arguments of workload `name`'s args function under a size preset, defaults filled in."""
    w = WORKLOADS[name]
    params = {p.name: p.default for p in list(inspect.signature(w["args"]).parameters.values())[1:]}
    params.update(SIZES[preset][name])
    return params


def title(name, preset="full"):
    """'elementwise sum(tanh(x*w+b)^2), 4M': what workload `name` computes, at a size preset."""
    w = WORKLOADS[name]
    return f"{w['what']}, {w['size'](**size_params(name, preset))}"


for _name, _w in WORKLOADS.items():
    _w["title"] = title(_name)
del _name, _w


# ---- timing ---------------------------------------------------------------------------------


def median_time(f, reps=7, warm=2, inner=1, budget=None):
    """Median over `reps` timings of `inner` calls of `f()` (seconds per call), after `warm` calls.

    With `budget` (seconds), slow functions get fewer repetitions (but at least 3, or `reps` if
    fewer) so that the timed calls take about `budget` in all, judged by the last warm-up call.
    """
    t_call = None
    for _ in range(warm):
        t0 = time.perf_counter()
        f()
        t_call = time.perf_counter() - t0
    if budget is not None and t_call is not None:
        reps = min(reps, max(3, int(budget / max(t_call * inner, 1e-9))))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            f()
        ts.append((time.perf_counter() - t0) / inner)
    return statistics.median(ts)


def units(name):
    """(calls per timing, scale): w5 is timed over 1000 calls in us, the rest in ms."""
    return (1000, 1e6) if name == "w5" else (1, 1e3)


def installed(module):
    """Whether `module` can be imported (looked up without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def available_peers():
    """The peer frameworks installed here, among 'jax' and 'torch'."""
    return [m for m in ("jax", "torch") if installed(m)]


def _jax_fn(w):
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    # the same loss, written against jax.numpy: run the NumPy source with jnp swapped in
    src_fun = w["loss"]
    glb = dict(src_fun.__globals__)
    glb["np"] = jnp
    f = types.FunctionType(src_fun.__code__, glb, src_fun.__name__, src_fun.__defaults__)
    return jax.jit(jax.value_and_grad(f, argnums=w["argnums"]))


def _jax_block(res):
    import jax
    return jax.block_until_ready(res)


def _torch_loss(name, ts):
    import torch

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
        for _ in range(DEPTH):
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
    raise KeyError(name)


def _torch_fn(name, w, args):
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    nums = w["argnums"] if isinstance(w["argnums"], tuple) else (w["argnums"],)

    def run():
        ts = [torch.tensor(np.asarray(a), requires_grad=(i in nums)) for i, a in enumerate(args)]
        loss = _torch_loss(name, ts)
        grads = torch.autograd.grad(loss, [ts[i] for i in nums])
        return loss.item(), [g.numpy() for g in grads]

    return run


# ---- progress -------------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on `stream` (default stderr), redrawn in place on a terminal.

    Elsewhere (a log file, a pipe) each step is one plain line. `start(label)` announces the
    step about to run; `done()` counts it as finished.
    """

    def __init__(self, total, stream=None, width=24):
        self.total = max(int(total), 1)
        self.stream = sys.stderr if stream is None else stream
        self.width = width
        self.count = 0
        self.t0 = time.perf_counter()
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty())
        self._last = 0

    def _elapsed(self):
        s = int(time.perf_counter() - self.t0)
        return f"{s // 60}:{s % 60:02d}"

    def start(self, label):
        """Show that the step `label` is running."""
        frac = min(self.count / self.total, 1.0)
        if self.tty:
            fill = int(round(frac * self.width))
            line = (f"[{'#' * fill}{'.' * (self.width - fill)}] {self.count}/{self.total} "
                    f"{self._elapsed()} {label}")
            pad = " " * max(self._last - len(line), 0)
            self._last = len(line)
            self.stream.write("\r" + line + pad)
        else:
            self.stream.write(f"[{self.count + 1}/{self.total} {self._elapsed()}] {label}\n")
        self.stream.flush()

    def done(self):
        """Count one step as finished."""
        self.count += 1

    def close(self):
        """Erase the bar (terminal) so that what is printed next starts on a clean line."""
        if self.tty and self._last:
            self.stream.write("\r" + " " * self._last + "\r")
            self.stream.flush()
            self._last = 0


class _NoProgress:
    def start(self, label):
        pass

    def done(self):
        pass

    def close(self):
        pass


# ---- the runner -----------------------------------------------------------------------------

_LABELS = dict(jit_grad="jit_grad", jit_fwd="jit forward", numpy="NumPy by hand", eager="eager value_and_grad")


def run(names=None, sizes="default", reps=7, peers=True, progress=True, seed=0, budget=None):
    """Time every workload in `names` (default: all) at size preset `sizes`; a list of row dicts.

    Each row has name, title, first_call_s (trace + codegen + compile, or disk-cache load),
    native ("compiled", "disk", ...), and medians numpy, eager, jit_grad, jit_fwd, plus jax
    and torch when `peers` and installed: milliseconds (w5: microseconds per call).
    `progress`: True for a bar on stderr, False for none, or a `Progress`. `budget` (seconds):
    slow measurements take fewer repetitions (at least 3), as in `median_time`.

    Peers (JAX, then PyTorch) run after all jitgraph and NumPy measurements, because their
    thread pools keep spinning after they run and would slow down whatever is measured next.
    """
    names = list(WORKLOADS) if names is None else list(names)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise KeyError(f"unknown workload(s) {unknown}; choose from {list(WORKLOADS)}")
    peer_mods = available_peers() if peers else []
    if progress is True:
        bar = Progress(len(names) * (6 + len(peer_mods)))     # 6 steps per workload, 1 per peer
    elif progress is False or progress is None:
        bar = _NoProgress()
    else:
        bar = progress
    rng = np.random.default_rng(seed)
    rows, inputs = [], {}
    try:
        for name in names:
            w = WORKLOADS[name]
            args = inputs[name] = w["args"](rng, **SIZES[sizes][name])
            nums = w["argnums"]
            inner, scale = units(name)
            row = {"name": name, "title": title(name, sizes)}
            bar.start(f"{name}: compiling jit_grad")
            f = jg.jit_grad(w["loss"], argnums=nums, wait=True)     # compiled from the first call
            t0 = time.perf_counter()
            f(*args)
            row["first_call_s"] = time.perf_counter() - t0
            row["native"] = f.lower(*args).native
            bar.done()
            bar.start(f"{name}: compiling jit")
            fwd = jg.jit(w["loss"], wait=True)
            fwd(*args)
            f.wait()         # the threaded builds, compiled meanwhile in the background
            fwd.wait()
            bar.done()
            eager = jg.value_and_grad(w["loss"], argnums=nums)
            eager_reps = 3 if name == "w5" else max(3, reps // 2)
            for key, fn, kw in (
                    ("jit_grad", lambda: f(*args), dict(reps=reps, inner=inner)),
                    ("jit_fwd", lambda: fwd(*args), dict(reps=reps, inner=inner)),
                    ("numpy", lambda: w["numpy"](*args), dict(reps=reps, inner=inner)),
                    ("eager", lambda: eager(*args), dict(reps=eager_reps, warm=1, inner=max(1, inner // 10)))):
                bar.start(f"{name}: timing {_LABELS[key]}")
                row[key] = median_time(fn, budget=budget, **kw) * scale
                bar.done()
            rows.append(row)
        for mod in peer_mods:
            _time_peer(mod, rows, inputs, reps, bar, budget)
    finally:
        bar.close()
    return rows


def _time_peer(mod, rows, inputs, reps, bar, budget):
    """Add `mod`'s ("jax" or "torch") median to each row; a peer that fails is skipped with a note."""
    label = {"jax": "JAX", "torch": "PyTorch"}[mod]
    for row in rows:
        name = row["name"]
        inner, scale = units(name)
        bar.start(f"{name}: timing {label}")
        args = inputs[name]
        try:
            if mod == "jax":
                jf = _jax_fn(WORKLOADS[name])
                row["jax"] = median_time(lambda: _jax_block(jf(*args)), reps, inner=inner, budget=budget) * scale
            else:
                tf = _torch_fn(name, WORKLOADS[name], args)
                row["torch"] = median_time(tf, reps, inner=max(1, inner // 10), budget=budget) * scale
        except Exception as e:     # a broken peer install must not cost the jitgraph numbers
            bar.close()
            print(f"# skipping {label}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            return
        finally:
            bar.done()


# ---- reporting ------------------------------------------------------------------------------

# (key, header, width, format) of the table's columns; a column whose key no row has is left out
_TIMES = [("numpy", "numpy", 9), ("eager", "eager", 9), ("jit_grad", "jit_grad", 9),
          ("jit_fwd", "jit fwd", 9), ("jax", "jax", 9), ("torch", "torch", 9)]
_RATIOS = [("grad/fwd", "jit_grad", "jit_fwd"), ("np/jit", "numpy", "jit_grad"),
           ("eager/jit", "eager", "jit_grad"), ("jax/jit", "jax", "jit_grad"),
           ("torch/jit", "torch", "jit_grad")]


def _columns(rows):
    have = set().union(*(r.keys() for r in rows)) if rows else set()
    times = [c for c in _TIMES if c[0] in have]
    ratios = [c for c in _RATIOS if c[1] in have and c[2] in have]
    return times, ratios


def header(rows):
    """The table's header line for these rows (peer columns only when some row has them)."""
    times, ratios = _columns(rows)
    cells = [f"{'workload':<8}"] + [f"{h:>{wd}}" for _, h, wd in times]
    cells += [f"{h:>9}" for h, _, _ in ratios] + [f"{'1st call':>9}", "kernel"]
    return " ".join(cells)


def format_row(r, rows=None):
    """One table line for row `r` (columns chosen from `rows`, default just `r`)."""
    times, ratios = _columns(rows or [r])
    cells = [f"{r['name']:<8}"]
    for key, _, wd in times:
        cells.append(f"{r[key]:{wd}.3f}" if key in r else f"{'-':>{wd}}")
    for _, num, den in ratios:
        cells.append(f"{r[num] / r[den]:9.2f}" if num in r and den in r else f"{'-':>9}")
    cells.append(f"{r['first_call_s']:8.2f}s")
    cells.append(r.get("native") or "-")
    return " ".join(cells)


def geomean_speedup(rows):
    """(geometric mean of numpy/jit_grad over w1, w3, w4, w6 among `rows`, how many), or (None, 0)."""
    geo = [r["numpy"] / r["jit_grad"] for r in rows if r["name"] in ("w1", "w3", "w4", "w6")]
    if not geo:
        return None, 0
    return float(np.exp(np.mean(np.log(geo)))), len(geo)


def format_table(rows, sizes="default"):
    """The table `jitgraph bench` prints: header, one line per row, the workloads' legend, notes."""
    lines = [header(rows)] + [format_row(r, rows) for r in rows]
    lines.append("")
    for r in rows:
        lines.append(f"  {r['name']:<4} {r['title']}")
    geo, n = geomean_speedup(rows)
    if geo is not None:
        lines.append(f"# geometric mean numpy/jit_grad over {n} of w1,w3,w4,w6: {geo:.2f}x")
    lines.append("# 1st call: trace + codegen + Numba compile of jit_grad (kernel: compiled), or "
                 "loading it from the disk cache (kernel: disk)")
    return "\n".join(lines)


def machine_line(sizes, reps, budget=None):
    """A '# ...' line naming the cores, versions, size preset, repetitions and units."""
    fewer = f" (at least 3 where {reps} take over {budget:g} s)" if budget is not None and reps > 3 else ""
    return (f"# {os.cpu_count()} cores, numba {numba.__version__} ({numba.get_num_threads()} threads), "
            f"numpy {np.__version__}; {sizes} sizes; medians of {reps}{fewer}; ms (w5: us per call)")


# ---- plot -----------------------------------------------------------------------------------

_SERIES = [("numpy", "NumPy by hand"), ("eager", "eager value_and_grad"), ("jit_grad", "jit_grad"),
           ("jit_fwd", "jit (forward only)"), ("jax", "JAX jit(value_and_grad)"), ("torch", "PyTorch eager")]


def plot_available():
    """Whether matplotlib (the `jitgraph[plot]` extra) is installed."""
    return installed("matplotlib")


def plot(rows, path, sizes="default"):
    """Save a grouped bar chart of `rows` to `path`: each time relative to hand-written NumPy.

    Needs matplotlib (`pip install "jitgraph[plot]"`); the file format follows the extension.
    """
    from matplotlib.figure import Figure    # no pyplot: no GUI backend, no global figure state

    series = [(k, lbl) for k, lbl in _SERIES if any(k in r for r in rows)]
    fig = Figure(figsize=(max(6.0, 1.4 * len(rows) + 2.5), 4.5), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / max(len(series), 1)
    xs = np.arange(len(rows))
    for j, (key, label) in enumerate(series):
        vals = [r[key] / r["numpy"] if key in r else np.nan for r in rows]
        bars = ax.bar(xs + (j - (len(series) - 1) / 2) * width, vals, width, label=label)
        if key == "jit_grad":
            for b, v in zip(bars, vals):
                ax.annotate(f"{1 / v:.1f}x", (b.get_x() + b.get_width() / 2, v), ha="center",
                            va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
    ax.set_yscale("log")
    ax.axhline(1.0, color="0.4", lw=0.8, ls="--")
    ax.set_xticks(xs, [f"{r['name']}\n{r['title'].split(', ')[-1]}" for r in rows], fontsize=8)
    ax.set_ylabel("time / NumPy by hand (log; lower is better)")
    ax.set_title(f"value + gradient, float64, {sizes} sizes (labels: NumPy / jit_grad)", fontsize=10)
    ax.legend(fontsize=7, ncols=2)
    fig.savefig(path, dpi=120)
    return path


# ---- one call for the command lines ---------------------------------------------------------


def report(names=None, sizes="default", reps=7, peers=True, out=None, progress=True, plot_path=None,
           budget=None):
    """Run the benchmark and print the machine line and the table to `out` (stdout); the rows.

    Saves the bar chart to `plot_path` when given (needs matplotlib). `budget` as in `run`.
    """
    out = sys.stdout if out is None else out
    print(machine_line(sizes, reps, budget), file=out, flush=True)
    rows = run(names, sizes, reps, peers, progress, budget=budget)
    print(format_table(rows, sizes), file=out, flush=True)
    if plot_path:
        plot(rows, plot_path, sizes)
        print(f"# plot saved to {plot_path}", file=out, flush=True)
    return rows


__all__ = ["WORKLOADS", "SIZES", "DEPTH", "run", "report", "format_table", "format_row", "header",
           "geomean_speedup", "median_time", "plot", "plot_available", "Progress", "size_params",
           "title", "available_peers", "units"]
