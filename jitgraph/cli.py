"""The `jitgraph` command (also `python -m jitgraph`).

    jitgraph bench [--full] [--plot out.png] [--no-peers] [--reps N] [workload ...]
    jitgraph show MODULE:FUNCTION --shape x=1024x256 --shape w=256 [--grad] [--remat sqrt] [--source]

`bench` times the benchmark workloads eagerly and compiled (and against JAX and
PyTorch when they are installed); `show` traces one of your functions at the
shapes you give and prints its graph, fusion groups, memory report and
generated source. Usage errors print one line and exit with status 2.
"""
import argparse
import functools
import importlib
import importlib.util
import inspect
import os
import re
import sys
import traceback

import numpy as np

import jitgraph as jg

from . import bench
from ._version import __version__
from .errors import JitgraphError
from .jit import JitFunction

PROG = "jitgraph"


class CliError(Exception):
    """A usage or input error: reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (with a pointer to --help) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


# ---- bench ----------------------------------------------------------------------------------

BENCH_HELP = """\
Time the six benchmark workloads (value + gradient, float64): hand-written NumPy,
eager jg.value_and_grad, jg.jit_grad, the jg.jit forward, and JAX
jit(value_and_grad) / PyTorch eager autograd when those are installed.

Prints one table of medians (ms; w5 in us per call), the ratios between them,
and the first-call time of jit_grad (trace + code generation + Numba compile,
or a load from the disk cache on later runs). A progress bar goes to stderr.

Default sizes are smaller than the published ones and finish in well under two
minutes on a laptop, compile included; --full uses the published sizes
(several minutes).

workloads:
{workloads}
"""


def _bench_parser(sub):
    listing = "\n".join(f"  {n}  {bench.title(n, 'default')} (--full: {bench.title(n, 'full').split(', ')[-1]})"
                        for n in bench.WORKLOADS)
    p = sub.add_parser("bench", help="time the benchmark workloads, eager vs compiled (vs JAX/PyTorch)",
                       description=BENCH_HELP.format(workloads=listing),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="*", metavar="workload",
                   help=f"workloads to run (default: all of {' '.join(bench.WORKLOADS)})")
    p.add_argument("--full", action="store_true", help="the published (large) sizes")
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)   # seconds: for tests
    p.add_argument("--plot", metavar="OUT.png",
                   help="also save a bar chart (needs matplotlib: pip install 'jitgraph[plot]')")
    p.add_argument("--no-peers", action="store_true", help="skip JAX and PyTorch even when installed")
    p.add_argument("--reps", type=int, default=7, metavar="N", help="timed repetitions per median (default 7)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(run=_run_bench)
    return p


def _run_bench(a):
    bad = [w for w in a.workloads if w not in bench.WORKLOADS]
    if bad:
        raise CliError(f"unknown workload(s) {', '.join(bad)}; choose from {', '.join(bench.WORKLOADS)}")
    if a.full and a.tiny:
        raise CliError("--full and --tiny exclude each other")
    if a.reps < 1:
        raise CliError(f"--reps must be at least 1, got {a.reps}")
    if a.plot:
        # checked before measuring anything: a missing extra or a bad path should not cost a run
        if not bench.plot_available():
            raise CliError("--plot needs matplotlib, which is not installed: pip install 'jitgraph[plot]'")
        parent = os.path.dirname(os.path.abspath(a.plot))
        if not os.path.isdir(parent):
            raise CliError(f"--plot {a.plot}: directory {parent} does not exist")
    sizes = "full" if a.full else "tiny" if a.tiny else "default"
    # default runs bound each measurement's time (a slow or busy machine still finishes in time);
    # --full keeps the published method: exactly --reps repetitions
    bench.report(a.workloads or None, sizes, a.reps, peers=not a.no_peers, progress=not a.no_progress,
                 plot_path=a.plot, budget=None if a.full else 0.5)
    return 0


# ---- show -----------------------------------------------------------------------------------

SHOW_HELP = """\
Trace FUNCTION at the shapes you give and print what jitgraph makes of it: the
traced graph (forward, or forward + backward with --grad), the fusion groups
(loops and library calls), the memory report, and with --source the generated
Numba source. The function is compiled once (as jg.jit or jg.jit_grad would).

FUNCTION is MODULE:NAME (a module importable from the current directory, e.g.
mypkg.losses:loss) or path/to/file.py:NAME. Every parameter needs a --shape;
a parameter with a default value may be left out and keeps it, as a constant:

  --shape x=1024x256        a float array of shape (1024, 256), standard normal
  --shape w=256             shape (256,)
  --shape b=scalar          a 0-d array ('()' works too)
  --shape idx=64:int64      a dtype for this parameter only (integer arrays are zeros)

examples:
  jitgraph show mymodel.py:loss --shape w=4x3 --shape x=5x4 --grad --argnums w
  jitgraph show mymodel.py:predict --shape w=4x3 --shape x=5x4 --dtype float32 --source
  jitgraph show mymodel.py:loss --shape w=4x3 --shape x=5x4 --grad --remat sqrt
"""


def _show_parser(sub):
    p = sub.add_parser("show", help="print the graph, fusion groups and generated source of a function",
                       description=SHOW_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("function", metavar="FUNCTION", help="MODULE:NAME or path/to/file.py:NAME")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=SHAPE[:DTYPE]",
                   help="shape (and optionally dtype) of one parameter; repeat for each parameter")
    p.add_argument("--dtype", default="float64", help="dtype of parameters without their own (default float64)")
    p.add_argument("--grad", action="store_true",
                   help="value and gradient (jg.jit_grad) instead of the forward only (jg.jit)")
    p.add_argument("--argnums", metavar="I,J|NAME,...",
                   help="parameters to differentiate, by position or name (default 0; implies --grad)")
    p.add_argument("--has-aux", action="store_true",
                   help="the function returns (loss, aux), as jit_grad(has_aux=True) (implies --grad)")
    p.add_argument("--source", action="store_true", help="also print the generated source")
    p.add_argument("--no-fusion", action="store_true",
                   help="print the traced graph only: no fusion, code generation or compile (fast)")
    p.add_argument("--remat", metavar="POLICY", type=parse_remat,
                   help="rematerialization for --grad: none, sqrt, or a byte budget for the predicted "
                        "peak (e.g. 200000000, 200M, 1.5G)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random arguments (default 0)")
    p.set_defaults(run=_run_show)
    return p


def parse_remat(text):
    """--remat: "none", "sqrt", or a byte count with an optional K/M/G suffix (powers of 1000)."""
    t = text.strip().lower()
    if t == "none":
        return None
    if t == "sqrt":
        return "sqrt"
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)b?", t)
    if not m:
        raise argparse.ArgumentTypeError(f"--remat takes none, sqrt or a byte budget like 200M, got {text!r}")
    n = int(float(m.group(1)) * {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}[m.group(2)])
    if n <= 0:
        raise argparse.ArgumentTypeError(f"--remat budget must be positive, got {text!r}")
    return n


def load_function(spec):
    """The callable named by 'MODULE:NAME' or 'path/to/file.py:NAME' (NAME may be dotted)."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise CliError(f"expected MODULE:FUNCTION or path/to/file.py:FUNCTION, got {spec!r}")
    if target.endswith(".py") or os.sep in target or "/" in target:
        path = os.path.abspath(target)
        if not os.path.isfile(path):
            raise CliError(f"no such file: {target}")
        stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
        modname = f"_jitgraph_show_{stem}"
        # the file's own directory first, so that it can import its neighbours
        sys.path.insert(0, os.path.dirname(path))
        mspec = importlib.util.spec_from_file_location(modname, path)
        if mspec is None or mspec.loader is None:
            raise CliError(f"{target} is not a Python file (give path/to/file.py:FUNCTION or MODULE:FUNCTION)")
        module = importlib.util.module_from_spec(mspec)
        sys.modules[modname] = module
        try:
            mspec.loader.exec_module(module)
        except Exception as e:
            raise CliError(f"running {target} failed: {type(e).__name__}: {e}") from e
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())   # as `python -m` does; the console script does not
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as e:
            if e.name and target.startswith(e.name):
                raise CliError(f"cannot import module {target!r}: {e} (run from the directory that "
                               "contains it, or give a file path: path/to/file.py:NAME)") from e
            raise CliError(f"importing {target} failed: {type(e).__name__}: {e}") from e
        except Exception as e:
            raise CliError(f"importing {target} failed: {type(e).__name__}: {e}") from e
    obj = module
    for i, part in enumerate(name.split(".")):
        if not hasattr(obj, part):
            where = target if i == 0 else ".".join(name.split(".")[:i])
            funcs = sorted(k for k, v in vars(obj).items()
                           if callable(v) and not k.startswith("_") and not isinstance(v, type)
                           and getattr(v, "__module__", None) == getattr(module, "__name__", None))
            hint = f" (functions there: {', '.join(funcs)})" if funcs and i == 0 else ""
            raise CliError(f"{where} has no attribute {part!r}{hint}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise CliError(f"{spec} is a {type(obj).__name__}, not a function")
    return obj


_SCALAR = ("scalar", "()", "[]")


def parse_shape(text, default_dtype):
    """'x=1024x256[:dtype]' -> ('x', (1024, 256), dtype); 'b=scalar' -> ('b', (), dtype)."""
    name, eq, rest = text.partition("=")
    name = name.strip()
    if not eq or not name.isidentifier():
        raise CliError(f"--shape {text!r}: expected NAME=SHAPE, e.g. x=1024x256, w=256 or b=scalar")
    shape_text, colon, dtype_text = rest.partition(":")
    shape_text = shape_text.strip().lower()
    if shape_text in _SCALAR:
        shape = ()
    else:
        parts = [p for p in re.split(r"[x,*]", shape_text.strip("()[]")) if p.strip()]
        try:
            shape = tuple(int(p) for p in parts)
        except ValueError:
            shape = None
        if not parts or shape is None or any(d < 0 for d in shape):
            raise CliError(f"--shape {text!r}: {shape_text!r} is not a shape; write sizes separated by "
                           "'x' (1024x256), one size (256), or 'scalar'")
    dtype = parse_dtype(dtype_text, f"--shape {text!r}") if colon else default_dtype
    return name, shape, dtype


def parse_dtype(text, what="--dtype"):
    """A NumPy dtype jitgraph traces (bool, integer or floating), from its name."""
    try:
        dt = np.dtype(text.strip())
    except TypeError:
        raise CliError(f"{what}: {text!r} is not a NumPy dtype (e.g. float64, float32, int64)") from None
    if dt.kind not in "biuf":
        raise CliError(f"{what}: dtype {dt.name} is not supported (bool, integer or floating only)")
    return dt


def build_arguments(fun, shapes, seed=0):
    """(args, static, params) for calling `fun`: random arrays for the shaped parameters.

    `shapes` maps parameter names to (shape, dtype). Floating arrays are standard normal,
    integer and bool ones zeros (valid as indices). Parameters left out keep their default,
    bound before tracing as a constant (so axes, flags and None work): `static` maps their
    positions to those values.
    """
    try:
        sig = inspect.signature(fun)
    except (TypeError, ValueError):
        raise CliError(f"cannot read the parameters of {fun!r}") from None
    params = list(sig.parameters.values())
    fname = getattr(fun, "__qualname__", getattr(fun, "__name__", "function"))
    listing = f"{fname}({', '.join(str(p) for p in params)})"
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = {p.name for p in positional}
    unknown = [n for n in shapes if n not in names]
    if unknown:
        raise CliError(f"--shape given for {', '.join(unknown)}, not a positional parameter of {listing}")
    required_kw = [p.name for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    if required_kw:
        raise CliError(f"{listing} has keyword-only parameter(s) without a default ({', '.join(required_kw)}); "
                       "jitgraph show passes positional parameters only")
    missing = [p.name for p in positional if p.name not in shapes and p.default is p.empty]
    if missing:
        ex = missing[0]
        raise CliError(f"no --shape for parameter(s) {', '.join(missing)} of {listing}; give one per "
                       f"parameter, e.g. --shape {ex}=1024x256 (or {ex}=scalar)")
    rng = np.random.default_rng(seed)
    args, static = [], {}
    for i, p in enumerate(positional):
        if p.name in shapes:
            shape, dt = shapes[p.name]
            try:
                a = rng.standard_normal(shape).astype(dt) if dt.kind == "f" else np.zeros(shape, dt)
            except (MemoryError, ValueError) as e:
                raise CliError(f"--shape {p.name}={'x'.join(map(str, shape))}: cannot make an array of "
                               f"that size ({e})") from e
            args.append(a[()] if shape == () else a)
        else:
            args.append(p.default)
            static[i] = p.default
    return args, static, [p.name for p in positional]


def _bind_static(fun, args, static):
    """(function of the non-static arguments only, those arguments, old index -> new index)."""
    if not static:
        return fun, list(args), {i: i for i in range(len(args))}
    dyn_pos = [i for i in range(len(args)) if i not in static]

    @functools.wraps(fun)
    def dynamic(*dyn):
        full = list(dyn)
        for i in sorted(static):
            full.insert(i, static[i])
        return fun(*full)

    del dynamic.__wrapped__     # tracing and signature reads must see `dynamic`'s own signature
    return dynamic, [args[i] for i in dyn_pos], {old: new for new, old in enumerate(dyn_pos)}


def parse_argnums(text, names):
    """'0,2' or 'w,b' (positions or parameter names) -> a tuple of positions."""
    out = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        if re.fullmatch(r"-?\d+", item):
            k = int(item)
            if not -len(names) <= k < len(names):
                raise CliError(f"--argnums {text}: position {k} is out of range for {len(names)} "
                               f"parameters ({', '.join(names)})")
            out.append(k % len(names))
        elif item in names:
            out.append(names.index(item))
        else:
            raise CliError(f"--argnums {text}: {item!r} is neither a position nor a parameter "
                           f"({', '.join(names)})")
    if not out:
        raise CliError(f"--argnums {text!r}: no parameter given")
    return tuple(out)


def _plural(n, word):
    return f"{n} {word}{'' if n == 1 else 's'}"


def _section(out, title, body):
    print(f"\n== {title} ==", file=out)
    print(str(body).rstrip("\n"), file=out)


def _run_show(a, out=None):
    out = sys.stdout if out is None else out
    default_dtype = parse_dtype(a.dtype)
    shapes = {}
    for text in a.shape:
        name, shape, dt = parse_shape(text, default_dtype)
        if name in shapes:
            raise CliError(f"--shape given twice for {name}")
        shapes[name] = (shape, dt)
    if a.no_fusion and a.source:
        raise CliError("--source needs code generation; drop --no-fusion")

    fun = load_function(a.function)
    grad, has_aux, argnums = a.grad or a.argnums is not None or a.has_aux, a.has_aux, 0
    if isinstance(fun, JitFunction):
        # a decorated function: show what its decorator compiles unless the flags say otherwise
        if not (a.grad or a.argnums is not None or a.has_aux):
            grad, has_aux, argnums = fun.grad, fun.has_aux, fun.argnums
        if fun.static_argnums:
            raise CliError(f"{a.function} has static_argnums {fun.static_argnums}; show the undecorated "
                           "function and give the static parameters defaults instead")
        fun = fun.fun
    args, static, names = build_arguments(fun, shapes, a.seed)
    if a.argnums is not None:
        argnums = parse_argnums(a.argnums, names)
    if grad:
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        nums = tuple(k % len(names) for k in nums) if names else nums
        fixed = [names[k] for k in nums if k in static]
        if fixed:
            raise CliError(f"cannot differentiate {', '.join(fixed)}: it has no --shape, so it keeps its "
                           "default as a constant")
    dyn_fun, dyn_args, remap = _bind_static(fun, args, static)
    if grad:
        dyn_nums = tuple(remap[k] for k in nums)
        dyn_nums = dyn_nums[0] if isinstance(argnums, int) else dyn_nums

    fname = getattr(fun, "__qualname__", getattr(fun, "__name__", a.function))
    what = (f"value and gradient w.r.t. {', '.join(names[k] for k in nums)}" if grad else "forward")
    print(f"{fname} ({a.function}): {what}", file=out)
    for n in names:
        if n in shapes:
            shape, dt = shapes[n]
            print(f"  {n}: {dt.name}[{','.join(map(str, shape))}]", file=out)
        else:
            print(f"  {n} = {args[names.index(n)]!r} (default)", file=out)
    try:
        if a.no_fusion:
            graph = jg.make_graph(dyn_fun, argnums=dyn_nums if grad else 0, grad=grad,
                                  has_aux=has_aux)(*dyn_args)
            _section(out, f"traced graph, {len(graph.nodes)} nodes", graph)
            return 0
        if grad:
            f = jg.jit_grad(dyn_fun, argnums=dyn_nums, has_aux=has_aux, remat=a.remat)
        else:
            if a.remat is not None:
                raise CliError("--remat applies to gradients; add --grad")
            f = jg.jit(dyn_fun)
        low = f.lower(*dyn_args)
    except (JitgraphError, CliError) as e:
        if isinstance(e, CliError):
            raise
        raise CliError(f"{type(e).__name__}: {e}") from e
    except Exception as e:
        raise CliError(f"tracing {fname} failed: {type(e).__name__}: {e}") from e
    _section(out, f"traced graph, {len(low.graph.nodes)} nodes", low.graph)
    _section(out, f"fusion: {_plural(len(low.groups), 'fused loop group')}, "
                  f"{_plural(len(low.partition.steps), 'step')}", low.describe())
    memory = getattr(low, "memory", None)
    if inspect.ismethod(memory):
        memory = memory()
    if memory is not None:
        _section(out, "memory", memory)
    if a.source:
        _section(out, f"generated source ({low.path or 'not written to a file'})", low.source)
    t = low.timings
    print(f"\ntrace {t.get('trace', 0) * 1e3:.1f} ms, codegen + compile {t.get('compile', 0) * 1e3:.0f} ms "
          f"(kernel: {low.native})", file=out)
    return 0


# ---- main -----------------------------------------------------------------------------------


def build_parser():
    """The `jitgraph` argument parser with its subcommands."""
    p = _Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"jitgraph {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _bench_parser(sub)
    _show_parser(sub)
    return p


def main(argv=None):
    """Run the `jitgraph` command line; returns the exit status (0, or 2 on a usage error)."""
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.command is None:
        parser.error("choose a command: bench or show")
    try:
        return a.run(a)
    except CliError as e:
        if os.environ.get("JITGRAPH_DEBUG", "0") not in ("", "0") and e.__cause__ is not None:
            traceback.print_exception(e.__cause__, file=sys.stderr)
        print(f"{PROG} {a.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\n{PROG} {a.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader (e.g. `| head`) went away: stop quietly, and keep Python's exit-time flush quiet
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
