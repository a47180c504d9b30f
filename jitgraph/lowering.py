"""Lowering one signature of a compiled function: trace, rematerialize, generate, build.

`lower(...)` traces the function on the signature's abstract arguments into the
joint graph, applies the remat policy, has the back end compile it, and makes
the per-signature call wrapper (`entry.Entry`). It runs the program once, so
that Numba's lazy compile happens here, and records whether the native code was
compiled, loaded from the disk cache or reused. `Lowered` is what inspection
sees: the graph, the generated source, the fusion groups, the memory report.
"""
import hashlib
import linecache
import os
import sys
import sysconfig
import threading
import time

import numba
import numpy as np

from . import codegen
from .codegen import collector, compile_server, numba_cache
from .codegen.build import module_dispatchers
from .codegen.native import NativeFunction
from .api import trace_graph
from .entry import Entry
from .remat import apply_policy
from .errors import TracingError, is_library_frame
from .signature import cuda_leaf, fname, guards, rng_states
from .tree import tree_flatten, tree_unflatten


class Lowered:
    """What a compiled function becomes for one signature: inspect `.graph`, `.source`, `.groups`."""

    def __init__(self, graph, program, timings):
        self.graph = graph
        self.program = program
        self.timings = timings            # seconds: trace, codegen+compile
        self.native = None                # "compiled", "disk", "reused" or "python"
        self._memory = None

    @property
    def source(self):
        """The generated Python/Numba source module."""
        return self.program.source

    @property
    def partition(self):
        """The fusion partition: `steps` (loop groups and library calls) in execution order."""
        return self.program.partition

    @property
    def groups(self):
        """The fused loop groups."""
        return self.program.partition.groups()

    @property
    def path(self):
        """File the generated module was written to (tracebacks point into it)."""
        return self.program.path

    def describe(self):
        """One line per step of the partition (what JITGRAPH_DEBUG=2 prints)."""
        return self.program.partition.describe()

    @property
    def memory(self):
        """The `MemoryReport` of this program: predicted peak, workspace (on the device for the
        CUDA target), stored activations and recompute cost."""
        plan = getattr(self.program, "plan", None)
        if plan is None:
            return None
        if self._memory is None:
            self._memory = plan.report(self.graph.meta.get("remat"))
        return self._memory

    @property
    def graph_hash(self):
        """Content hash of the traced graph, constants included (the source hash leaves out
        the values of floating scalar constants, which are passed at run time)."""
        h = hashlib.sha256(str(self.graph).encode())
        for n in self.graph.nodes:
            if n.op == "const":
                h.update(np.ascontiguousarray(n.value).tobytes())
        return h.hexdigest()[:24]

    def __repr__(self):
        return (f"<Lowered {self.graph.meta.get('name')}: {len(self.graph.nodes)} nodes, "
                f"{len(self.groups)} fused groups, {len(self.program.partition.steps)} steps>")


def resolved_target(target):
    """"cpu" or "cuda" for a target option ("auto": CUDA when a GPU is present)."""
    if target != "auto":
        return target
    try:
        if numba.config.ENABLE_CUDASIM:     # the simulator is for tests, not a device
            return "cpu"
        from numba import cuda
        return "cuda" if cuda.is_available() else "cpu"
    except Exception:
        return "cpu"


def lower(fun, dyn, argnums, options, guard_fun, desc, stats):
    """Trace `fun` for the dynamic arguments `dyn` and build it; returns the `Entry`.

    `options`: the JitFunction's options (grad, has_aux, parallel, backend, target, remat,
    reuse_buffers); `guard_fun`: the user's function, whose globals guard the trace;
    `stats`: the function's counters (traces, compiles, disk_hits, kernel_reuses)."""
    t0 = time.perf_counter()
    graph = trace(fun, dyn, argnums, options, guard_fun, stats)
    return build(graph, dyn, options, guards(guard_fun), desc, stats, time.perf_counter() - t0)


def trace(fun, dyn, argnums, options, guard_fun, stats):
    """The traced graph of `fun` for the dynamic arguments `dyn` (before rematerialization)."""
    abstract = [_abstract(a) for a in dyn]
    before = rng_states(guard_fun)
    reroll = options.get("reroll", True) and options.get("remat") is None
    graph = trace_graph(fun, abstract, argnums, options["has_aux"], options["grad"], reroll=reroll)
    if rng_states(guard_fun) != before:
        _refuse_random_draws(fun, abstract, argnums, options, guard_fun)
    stats["traces"] += 1
    return graph


def build(graph, dyn, options, guard_list, desc, stats, trace_time=0.0, threads=True, cached_only=False):
    """Generate and compile the program of a traced graph (applying the remat policy first),
    and run it once on `dyn` so that Numba compiles now; returns the `Entry`. `guard_list`:
    the globals and closure cells the trace read (`signature.guards`, taken when it traced).
    threads=False builds the program with plain loops and products on one thread
    (`codegen.compile_graph`; `entry.lowered.program.upgradable` says whether a threaded
    build would differ). cached_only=True returns None unless the program is in the disk cache,
    indexed and compiled (`cached`)."""
    t1 = time.perf_counter()
    target = resolved_target(options["target"])
    if options["grad"]:
        # the budget policy measures candidates with the CPU plan (codegen/memory.py)
        graph = apply_policy(graph, options["remat"],
                             lambda g: codegen.memory_report(g, parallel=options["parallel"]))
    program = codegen.compile_graph(graph, parallel=options["parallel"], backend=options["backend"],
                                    target=target, threads=threads, indexed_only=cached_only)
    if program is None:
        return None
    leaves, _ = tree_flatten(tuple(dyn))
    lowered = Lowered(graph, program, {})
    entry = Entry(lowered, guard_list, desc, target, reuse=options["reuse_buffers"])
    # Numba compiles lazily: compile now (for the argument types of a call on `dyn`, or by
    # running the call when the entry is Python) so the first call's cost is all here, and
    # find out whether this was a compile, a disk-cache load or an in-process reuse
    before = _dispatch_state(program)
    args = _kernel_args(entry, leaves) if target == "cpu" and options["backend"] == "numba" else None
    if cached_only and not _compiled_on_disk(program, args):
        return None
    remote = False
    if args is not None and isinstance(program.kernel, numba.core.registry.CPUDispatcher):
        argtypes = tuple(program.kernel.typeof_pyval(a) for a in args)
        remote = _compile_in_server(program, argtypes)
        with _loading(remote or cached_only):
            program.kernel.compile(argtypes)
    elif cached_only and before is not None and before[0] == 0:
        # a Python entry whose functions the disk cache holds (`_compiled_on_disk`) and this
        # process has not loaded: each loads at its first call, the caller's, not in a run of
        # the whole program here (the unrolled LSTM's warm first call: 8 ms less)
        lowered.native = "disk"
        stats["disk_hits"] += 1
        lowered.timings.update(trace=trace_time, compile=time.perf_counter() - t1)
        return entry
    else:
        if args is not None:
            remote = _run_in_server(program, args)
        with _loading(remote or cached_only):
            entry.call(leaves)
    after = _dispatch_state(program)
    if remote and after is not None and after[1] > before[1]:
        lowered.native = "compiled"       # by the compile server, loaded from the disk cache
        stats["compiles"] += 1
    elif before is None:
        lowered.native = "python" if options["backend"] == "python" else "external"
    elif after[0] == before[0]:
        lowered.native = "reused"
        stats["kernel_reuses"] += 1
    elif after[1] > before[1]:
        lowered.native = "disk"
        stats["disk_hits"] += 1
    else:
        lowered.native = "compiled"
        stats["compiles"] += 1
    lowered.timings.update(trace=trace_time, compile=time.perf_counter() - t1)
    return entry


def _loading(loads):
    """Around the step that makes the program's native code ready here: when it `loads` (a
    compile server compiled it, or `cached` found it compiled on disk), the garbage collector
    paused (codegen/collector.py; a background build's load too). Otherwise it may compile
    in this process: the collector on, even inside a paused phase, as a compile's garbage is
    large."""
    return collector.paused() if loads else collector.resumed()


def cached(graph, dyn, options, guard_list, desc, stats, trace_time=0.0, threads=True):
    """The `Entry` of `graph`'s program when the disk cache holds it, indexed and compiled (it
    is loaded, not generated or compiled: a new process's first call of a program run
    before), else None."""
    if options["backend"] != "numba" or resolved_target(options["target"]) != "cpu" \
            or not codegen.cache_enabled() or isinstance(options["remat"], int):
        return None      # (a remat budget is fitted by generating candidate programs)
    try:
        return build(graph, dyn, options, guard_list, desc, stats, trace_time, threads, cached_only=True)
    except Exception:
        return None      # the build proper reports it (tiered.py)


def _compiled_on_disk(program, args):
    """Does the disk cache (or this process) hold the native code of the program's kernel,
    for the argument values `args` when it is an @njit function, else of each function of
    its Python entry's module?"""
    kernel = program.kernel
    mod = _module(program)
    if mod is None:
        return False
    functions = module_dispatchers(mod)
    if args is not None and isinstance(kernel, numba.core.registry.CPUDispatcher):
        argtypes = tuple(kernel.typeof_pyval(a) for a in args)
        if not (argtypes in kernel.overloads or numba_cache.in_cache(kernel, argtypes) is True):
            return False
        functions = [f for f in functions if f is not kernel]      # its loop functions
    else:
        natives = _native_functions(mod)
        if not functions and not natives:
            return False
        if not all(f.variants or f.cached_on_disk() for f in natives):
            return False
    return all(f.overloads or numba_cache.has_cached(f) for f in functions)


class _Captured(Exception):
    pass


def _kernel_args(entry, leaves):
    """The arguments the entry passes its kernel for these leaves (from a call of the entry
    with the kernel swapped for a recorder), or None."""
    ns = entry.plain.__globals__
    kernel = ns.get("kernel")
    got = []

    def record(*args):
        got.append(args)
        raise _Captured

    ns["kernel"] = record
    try:
        entry.plain(leaves)
    except _Captured:
        pass
    finally:
        ns["kernel"] = kernel
    return got[0] if got else None


# A kernel calling at least this many loop functions has a second server compile them meanwhile
# (compile_server.compile_remote), when its caller waits for it. Not for a build in the
# background (tiered.py), whose interpreted calls hold a core meanwhile: a third process then
# made the MLP's calls run compiled later, 6.9-7.0 s against 5.5-6.4 s.
LOOPS_BESIDE_MIN = 3
COMPILE_THREAD = "jitgraph-compile"     # the name of tiered.py's background compile thread


def _server_usable():
    return codegen.cache_enabled() and compile_server.enabled()


def _compile_in_server(program, argtypes):
    """Compile the program's @njit kernel in the compile server (codegen/compile_server.py)
    when it is neither compiled in this process nor in the disk cache; True when the server
    compiled it (the caller then loads it from the disk cache).

    A caller waiting for the compile (`wait=True`, not tiered.py's compile thread) compiles
    the kernel itself while the server is still starting (its imports cost about 0.6 s,
    Numba's first compile in this process 0.15-0.3 s), and the server, once started, compiles
    the loop functions of a kernel with many meanwhile (`loops_remote`), which this compile
    then loads. In the background the server compiles it: the interpreted calls of the
    caller's thread would take the compile's GIL (w5's first compiled call 1.76 against
    0.79 s)."""
    kernel = program.kernel
    if not _server_usable() or argtypes in kernel.overloads or numba_cache.in_cache(kernel, argtypes) is not False:
        return False
    background = threading.current_thread().name == COMPILE_THREAD
    beside = program.source.count("@_rt.chunk_njit(") >= LOOPS_BESIDE_MIN
    if not background and not compile_server.ready():
        if beside:
            compile_server.loops_remote(program.path, "kernel", argtypes)
        return False
    return compile_server.compile_remote(program.path, "kernel", argtypes, loops_beside=beside and not background)


SERVER_RUN_MAX_BYTES = 1 << 28     # larger arguments are not copied to the compile server


def _run_in_server(program, args):
    """Run a Python entry's module in the compile server on `args`, which compiles its @njit
    functions into the disk cache, unless each of them is compiled here or cached already;
    True when the server ran it. Several servers share the functions when they are many
    (`compile_server.split_entry`)."""
    mod = _module(program)
    if mod is None or not _server_usable():
        return False
    functions = module_dispatchers(mod)
    if not functions or all(f.overloads or numba_cache.has_cached(f) for f in functions):
        return False
    spec = list(args)
    n_out = len(program.out_specs)
    made = list(range(len(spec) - n_out, len(spec)))          # the output buffers
    if program.ws_bytes is not None:
        made.append(len(spec) - n_out - 2)                     # the arena (before its offsets, wofs)
    for k in made:      # made by the server: their contents are overwritten
        spec[k] = compile_server.Empty(spec[k].shape, spec[k].dtype)
    if sum(a.nbytes for a in spec if isinstance(a, np.ndarray)) > SERVER_RUN_MAX_BYTES:
        return False
    jobs = compile_server.jobs()
    parts = None
    if jobs > 1:
        with open(program.path, encoding="utf-8") as f:
            parts = compile_server.split_entry(f.read(), "kernel", jobs, started=compile_server.running())
    return compile_server.run_remote(program.path, "kernel", spec, parts)


def _refuse_random_draws(fun, abstract, argnums, options, guard_fun):
    """A trace drew random numbers: find the line (tracing again, comparing the generators'
    states after each line of the user's code) and raise, since the compiled function would
    repeat those numbers forever. Another thread drawing meanwhile (a Dask worker, say) moves
    the generators too, at no fixed line: the line must be found twice to count."""
    first = _line_of_draw(fun, abstract, argnums, options, guard_fun)
    if first is None or _line_of_draw(fun, abstract, argnums, options, guard_fun) != first:
        return
    filename, lineno = first
    line = linecache.getline(filename, lineno).strip()
    raise TracingError(
        f"{fname(guard_fun)} draws random numbers while it is traced (at {filename}:{lineno}: {line}): "
        "a compiled function would return the same numbers on every call. Draw them outside and pass "
        "them as an argument (f(x, rng.standard_normal(3))), or use the eager jg.value_and_grad")


_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep


def _line_of_draw(fun, abstract, argnums, options, guard_fun):
    """(filename, line) of the user's line after which the generators' states changed, or None."""
    found, last = [], [None, rng_states(guard_fun)]

    def line_tracer(frame, event, arg):
        if event in ("line", "return") and not found:
            states = rng_states(guard_fun)
            if states != last[1] and last[0] is not None:
                found.append(last[0])
            last[:] = [(frame.f_code.co_filename, frame.f_lineno), states]
        return line_tracer

    def call_tracer(frame, event, arg):
        name = frame.f_code.co_filename
        library = is_library_frame(frame) or name.startswith("<frozen") \
            or os.path.abspath(name).startswith(_STDLIB)
        return None if library else line_tracer

    sys.settrace(call_tracer)
    try:
        trace_graph(fun, abstract, argnums, options["has_aux"], options["grad"])
    finally:
        sys.settrace(None)
    return found[0] if found else None


def _abstract(a):
    """A stand-in for tracing: device arrays become empty host arrays of their shape and dtype."""
    leaves, tree = tree_flatten(a)
    if not any(hasattr(x, "__cuda_array_interface__") for x in leaves):
        return a
    out = []
    for x in leaves:
        dev = cuda_leaf(x)
        out.append(np.empty(dev[0], dev[1]) if dev is not None else x)
    return tree_unflatten(tree, out)


def _module(program):
    """The imported module of a program's generated source, or None."""
    return sys.modules.get(program.module) if isinstance(program.module, str) else None


def _native_functions(mod):
    """The natively compiled loop functions of a generated module (codegen/native.py), its own
    and the shared ones it holds."""
    return [v for v in vars(mod).values() if isinstance(v, NativeFunction)]


def _dispatch_state(program):
    """(compiled signatures, disk-cache hits) summed over the Numba dispatchers of a program's
    module (its entry, when compiled, and its loop functions) and its native functions, else
    None."""
    kernels = [program.kernel]
    natives = []
    mod = _module(program)
    if mod is not None:
        kernels = module_dispatchers(mod)
        natives = _native_functions(mod)
    kernels = [k for k in kernels if hasattr(k, "overloads") and hasattr(k, "stats")]
    if not kernels and not natives:
        return None
    return (sum(len(k.overloads) for k in kernels) + sum(len(f.variants) for f in natives),
            sum(sum(k.stats.cache_hits.values()) for k in kernels) + sum(f.loaded for f in natives))
