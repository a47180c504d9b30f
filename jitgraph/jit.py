"""Compiled functions: `jit` (forward) and `jit_grad` (fused forward + backward).

Two cache levels:

* The trace cache (per compiled function, in memory, LRU): keyed on the
  pytree structure of the arguments, each array's shape and dtype, the kind of
  each Python scalar, and the values of `static_argnums` arguments
  (`signature.py`); `argnums`, `has_aux` and the target are fixed per
  `JitFunction`. A miss traces the function (milliseconds) and generates source
  (`lowering.py`); each signature gets its own call wrapper (`entry.py`).
* The native cache (codegen/build.py): keyed on a content hash of the generated
  source plus tool versions and the CPU. Sizes are read from the arrays at run
  time, so a new batch size retraces but reuses the compiled kernel, in this
  process (the module is already imported) or from disk in a new process.

Python scalars (`int`, `float`, `bool`) are traced as scalar inputs, not baked
in as constants: a new value reuses the trace. To specialize on a value (a
flag, a size, a string), pass it through `static_argnums`.

Staleness: each trace records the identity of the globals and closure cells
the function reads directly (not modules); if one is rebound, the next call
retraces. In-place changes to a global array are not detected (arrays read
from globals are constants captured at trace time, as in JAX).
"""
import collections
import functools
import inspect
import sys
import threading
import time
import types
import uuid
import weakref

import numpy as np

from .api import check_argnums, grad, value_and_grad
from .codegen import collector
from .core import Tensor
from .entry import Stale
from .lowering import Lowered, build, cached, lower, resolved_target, trace
from .tiered import CompileWarning, TieredEntry, Upgrade
from .signature import (Inline, RetraceWarning, Signature, debug_level, env_int, fname, guards,
                        log_enabled, log_message, stale_names)
from .tree import tree_flatten

__all__ = ["jit", "jit_grad", "hvp", "memory_report", "JitFunction", "Lowered", "CacheInfo",
           "RetraceWarning", "CompileWarning"]


CacheInfo = collections.namedtuple(
    "CacheInfo", "traces compiles hits disk_hits kernel_reuses entries maxsize evictions interpreted_calls "
                 "compiled_calls")
CacheInfo.__doc__ = """Counters of one compiled function's caches.

traces: how many times the function was traced (trace-cache misses).
compiles: native compiles (Numba compiled new machine code).
hits: calls served by the trace cache.
disk_hits: traces whose kernel was loaded from the on-disk cache.
kernel_reuses: traces whose kernel was already compiled in this process (e.g. a new batch size).
entries / maxsize: current and maximum size of the trace cache; evictions: LRU evictions.
interpreted_calls: calls that ran on the NumPy interpreter while their kernel compiled (tiered);
compiled_calls: calls that went to a kernel through the tier check (once the kernel is ready,
the cache holds it and later calls count as hits only).
"""


_SHARED = weakref.WeakValueDictionary()   # token -> JitFunction: copies in one process share caches
_SHARED_LOCK = threading.Lock()


def _rebuild(token, fun, options):
    with _SHARED_LOCK:
        f = _SHARED.get(token)
        if f is None:
            f = JitFunction(fun, **options)
            f._token = token
            _SHARED[token] = f
        return f


class JitFunction:
    """A compiled version of `fun`; see `jit` and `jit_grad`."""

    def __init__(self, fun, grad, argnums=0, has_aux=False, parallel=True, backend="numba",
                 target="cpu", static_argnums=(), cache_size=None, remat=None, reuse_buffers=True,
                 wait=None, reroll=True):
        if backend not in ("numba", "python"):
            raise ValueError(f"backend must be 'numba' or 'python', got {backend!r}")
        if target not in ("cpu", "cuda", "auto"):
            raise ValueError(f"target must be 'cpu', 'cuda' or 'auto', got {target!r}")
        _check_remat(remat, grad)
        if grad:
            check_argnums(argnums)
        self.fun = fun
        self.grad = grad
        self.remat = remat
        self.reuse_buffers = bool(reuse_buffers)
        self.reroll = bool(reroll)
        # compile before the first call returns (else: tiered, see tiered.py)
        self.wait_compile = bool(env_int("JITGRAPH_WAIT", 0)) if wait is None else bool(wait)
        self.argnums = argnums
        self.has_aux = has_aux
        self.parallel = parallel
        self.backend = backend
        self.target = target
        self.static_argnums = _static_argnums(fun, static_argnums)
        if grad and self.static_argnums:
            nums = (argnums,) if isinstance(argnums, (int, np.integer)) else tuple(argnums)
            both = set(int(a) for a in nums) & set(self.static_argnums)
            if both:
                raise ValueError(f"argument(s) {sorted(both)} are both in argnums and static_argnums")
        self.maxsize = cache_size if cache_size is not None else env_int("JITGRAPH_TRACE_CACHE_SIZE", 128)
        self.signature = Signature(fun, self.static_argnums)
        self._entries = collections.OrderedDict()
        self._upgrades = {}        # key -> Upgrade: threaded builds compiling in the background
        self._lock = threading.RLock()
        self._token = uuid.uuid4().hex
        self._stats = dict(traces=0, compiles=0, hits=0, disk_hits=0, kernel_reuses=0, evictions=0,
                           interpreted_calls=0, compiled_calls=0)
        functools.update_wrapper(self, fun)

    # -- the call path -------------------------------------------------------------------------

    def __get__(self, obj, objtype=None):
        """`@jit_grad(argnums=1)` on a method: `obj.method` is the compiled function of the bound
        method, one per instance. `self` is not an argument but what the method reads from it,
        like a global (`self.scale = 3` retraces); argnums and static_argnums count the decorated
        function's parameters, self included (argnums=1 is the first after self)."""
        if obj is None:
            return self
        bound = getattr(obj, "__dict__", {}).get("_jitgraph_bound", {}).get(self._token)
        if bound is None:
            bound = self._bind(obj)
            if hasattr(obj, "__dict__"):
                obj.__dict__.setdefault("_jitgraph_bound", {})[self._token] = bound
        return bound

    def _bind(self, obj):
        def shifted(nums, what):
            single = isinstance(nums, (int, np.integer))
            out = []
            for a in ((nums,) if single else nums):
                a = int(a)
                if a == 0:
                    raise ValueError(f"{what}={nums!r} of {fname(self.fun)}, a method: position 0 is `self`, "
                                     "which is not an argument of the compiled method (what it reads from "
                                     "self is traced as constants and guarded); count the parameters after "
                                     "it from 1")
                out.append(a - 1 if a > 0 else a)
            return out[0] if single else tuple(out)
        options = self._constructor_options()
        options["static_argnums"] = tuple(a - 1 for a in self.static_argnums if a != 0)
        if self.grad:
            options["argnums"] = shifted(self.argnums, "argnums")
        return JitFunction(types.MethodType(self.fun, obj), **options)

    def _constructor_options(self):
        """The keyword arguments that make a JitFunction of these options."""
        return dict(grad=self.grad, argnums=self.argnums, has_aux=self.has_aux, parallel=self.parallel,
                    backend=self.backend, target=self.target, static_argnums=self.static_argnums,
                    cache_size=self.maxsize, remat=self.remat, reuse_buffers=self.reuse_buffers,
                    wait=self.wait_compile, reroll=self.reroll)

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = self.signature.bind(args, kwargs)
        try:
            key, leaves = self.signature.key(args)
            entry = self._entries.get(key)
            if entry is not None:
                try:
                    out = entry.call(leaves)
                except Stale:
                    return self._retrace_stale(entry, args)
                self._stats["hits"] += 1
                self._entries.move_to_end(key)
                return out
        except Inline:
            return self._inline(args)
        if any(isinstance(x, Tensor) for x in leaves):
            return self._inline(args)
        try:
            return self._miss(key, args).call(leaves)
        except Inline:
            return self._inline(args)

    def _inline(self, args):
        """Called inside another trace (e.g. under jit_grad or value_and_grad): trace through."""
        if self.grad:
            return value_and_grad(self.fun, self.argnums, self.has_aux)(*args)
        return self.fun(*args)

    def _retrace_stale(self, entry, args):
        with self._lock:
            if log_enabled("recompiles"):
                names = stale_names(entry.guards)
                log_message(f"jitgraph: retracing {fname(self.fun)}: {', '.join(names) or 'a global'} "
                            "was rebound since it was traced")
            self._entries.clear()
        key, leaves = self.signature.key(args)
        return self._miss(key, args).call(leaves)

    def _miss(self, key, args):
        # one trace and one compile however many threads call at once; the garbage collector
        # waits until they are done (codegen/collector.py)
        with self._lock, collector.paused():
            entry = self._entries.get(key)
            if entry is not None:       # another thread traced it while we waited
                self._entries.move_to_end(key)
                self._stats["hits"] += 1
                return entry
            desc = self.signature.describe(args)
            self.signature.explain(desc, self._stats["traces"])
            fun, dyn, argnums = self.signature.split_static(args, self.argnums, self.grad)
            if self._tiered():
                entry = self._tiered_entry(key, fun, dyn, argnums, desc)
            else:
                entry = lower(fun, dyn, argnums, self._options(), self.fun, desc, self._stats)
                self._debug(entry.lowered)
            self._entries[key] = entry
            while len(self._entries) > max(self.maxsize, 1):
                self._entries.popitem(last=False)
                self._stats["evictions"] += 1
            return entry

    def _native_cpu(self):
        """Does this function compile Numba kernels for the CPU (what tiers and the compile
        server serve)?"""
        return self.backend == "numba" and resolved_target(self.target) == "cpu"

    def _tiered(self):
        return not self.wait_compile and self._native_cpu()

    def _trace(self, fun, dyn, argnums):
        """(options, graph, guards, seconds) of a new signature's trace, for its builds."""
        t0 = time.perf_counter()
        options = self._options()
        graph = trace(fun, dyn, argnums, options, self.fun, self._stats)
        guard_list = guards(self.fun)
        return options, graph, guard_list, time.perf_counter() - t0

    def _tiered_entry(self, key, fun, dyn, argnums, desc):
        """Trace now; compile in the background (tiered.py), unless the disk cache holds the
        compiled program (a program run before, in this or another process): then its
        compiled entry, loaded now, serves from the first call."""
        options, graph, guard_list, trace_time = self._trace(fun, dyn, argnums)
        entry = cached(graph, dyn, options, guard_list, desc, self._stats, trace_time)
        if entry is not None:
            self._debug(entry.lowered)
            return entry

        serial = self._serial_first()

        def build_():
            # the threaded build, or plain loops first under JITGRAPH_SERIAL_FIRST=1
            return build(graph, dyn, options, guard_list, desc, self._stats, trace_time, threads=not serial)

        def ready(entry):
            with self._lock:
                current = self._entries.get(key) is tiered
                if current:
                    self._entries[key] = entry
                if serial and current:
                    self._upgrade(key, entry, graph, dyn, guard_list, desc, trace_time)
            self._debug(entry.lowered)

        tiered = TieredEntry(graph, guard_list, desc, build_, ready, self._stats)
        return tiered

    def _serial_first(self):
        """JITGRAPH_SERIAL_FIRST=1 (opt-in): a tiered signature of a parallel program is built
        with plain loops first, then with its parallel chunks in the background. Compiled
        calls start sooner (over the 17 programs of benchmarks/compile.py, 12% sooner in
        geometric mean; the transformer block 6.8 s against 10.9 s), but the threaded build
        then competes with those calls for the cores, and calls ran at full speed 1.5-3x
        later (the MLP 16.0 s against 5.4 s). By default the threaded build, whose results
        are the same bits on any number of threads, is the only one; wait=True always
        compiles it only."""
        return self.parallel and bool(env_int("JITGRAPH_SERIAL_FIRST", 0))

    def _upgrade(self, key, entry, graph, dyn, guard_list, desc, trace_time):
        """Compile the threaded build of `entry`'s program in the background, if it would add
        parallel chunks, and put it in the cache in place of `entry` (unless that was evicted
        meanwhile)."""
        if not entry.lowered.program.upgradable:
            return

        def build_threaded():
            return build(graph, dyn, self._options(), guard_list, desc, collections.Counter(), trace_time)

        def install(threaded):
            with self._lock:
                if self._entries.get(key) is entry:
                    self._entries[key] = threaded
                self._upgrades.pop(key, None)
            self._debug(threaded.lowered)

        self._upgrades[key] = Upgrade(fname(self.fun), build_threaded, install)

    def _pending(self, args):
        """The tiered entries and threaded upgrades of every signature (or of these arguments')."""
        with self._lock:
            if args:
                key = self.signature.key(args)[0]
                found = [self._entries.get(key), self._upgrades.get(key)]
            else:
                found = list(self._entries.values()) + list(self._upgrades.values())
        return [e for e in found if e is not None and hasattr(e, "wait")]

    def ready(self, *args):
        """Is every signature traced so far compiled in its final form (or, given arguments,
        theirs)? Before that, calls run on the NumPy interpreter (or, with
        JITGRAPH_SERIAL_FIRST=1, on a serial build; see `jit`'s `wait`)."""
        return all(e.ready() for e in self._pending(args))

    def wait(self, *args, timeout=None):
        """Block until every signature traced so far is compiled in its final form (or, given
        arguments, theirs); True if that happened within `timeout` seconds. A compile error is
        raised here."""
        pending = self._pending(args)
        while pending:
            if not all(e.wait(timeout) for e in pending):
                return False
            pending = self._pending(args)      # a serial build done schedules its threaded one
        return True

    def _options(self):
        return dict(grad=self.grad, has_aux=self.has_aux, parallel=self.parallel, backend=self.backend,
                    target=self.target, remat=self.remat, reuse_buffers=self.reuse_buffers,
                    reroll=self.reroll)

    # -- inspection ----------------------------------------------------------------------------

    def lower(self, *args):
        """Trace and compile for these arguments (or reuse); returns a `Lowered`."""
        key, _ = self.signature.key(args)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._miss(key, args)
        return entry.lowered

    def cache_info(self):
        """A `CacheInfo` with this function's trace/compile/hit counters."""
        s = self._stats
        return CacheInfo(s["traces"], s["compiles"], s["hits"], s["disk_hits"], s["kernel_reuses"],
                         len(self._entries), self.maxsize, s["evictions"], s["interpreted_calls"],
                         s["compiled_calls"])

    def release_buffers(self, workspace=True, outputs=True):
        """Free the buffers kept between calls: the workspace arenas and/or the output buffers
        kept for recycling (the next call allocates them again)."""
        with self._lock:
            for entry in self._entries.values():
                if workspace:
                    entry.release_workspace()
                if outputs:
                    entry.obufs[:] = [None] * len(entry.obufs)

    def clear_cache(self):
        """Drop every trace of this function (compiled kernels stay cached on disk and in memory)."""
        with self._lock:
            self._entries.clear()
            self.signature.reset()

    def _debug(self, lowered):
        level = debug_level()
        if level <= 0:
            return
        out = sys.stderr
        name = fname(self.fun)
        print(f"[jitgraph] {name}: graph\n{lowered.graph}", file=out)
        if level >= 2:
            print(f"[jitgraph] {name}: fusion\n{lowered.describe()}", file=out)
        if level >= 3:
            print(f"[jitgraph] {name}: source ({lowered.path})\n{lowered.source}", file=out)
        if level >= 4:
            t = lowered.timings
            print(f"[jitgraph] {name}: trace {t['trace'] * 1e3:.1f} ms, codegen+compile "
                  f"{t['compile'] * 1e3:.1f} ms ({lowered.native})", file=out)

    def __reduce__(self):
        # Pickling never sends native code. A compiled function its module exports under its
        # own name (`@jit_grad def loss` at module level) pickles by that name, like a function.
        # Otherwise pickling sends the function (by reference, or by value under cloudpickle)
        # and the options: an unpickled copy retraces once per process and loads the kernel from
        # the disk cache; copies with the same token share one cache.
        if self._exported():
            return self.__qualname__
        options = self._constructor_options()
        with _SHARED_LOCK:
            _SHARED.setdefault(self._token, self)
        return _rebuild, (self._token, self.fun, options)

    def _exported(self):
        """Is this object what its module exports under its name (outside __main__)?"""
        module = sys.modules.get(getattr(self, "__module__", None) or "")
        if module is None or module.__name__ == "__main__":
            return False
        obj = module
        for part in getattr(self, "__qualname__", "").split("."):
            obj = getattr(obj, part, None)
        return obj is self

    def __repr__(self):
        kind = "jit_grad" if self.grad else "jit"
        return f"<jitgraph.{kind} of {fname(self.fun)}>"


def _static_argnums(fun, static_argnums):
    """static_argnums as sorted non-negative positions, checked against fun's signature."""
    check_argnums(static_argnums, "static_argnums")
    nums = (static_argnums,) if isinstance(static_argnums, (int, np.integer)) else static_argnums
    nums = [int(a) for a in nums]
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        params = None
    if params is None or any(p.kind is p.VAR_POSITIONAL for p in params):
        if any(a < 0 for a in nums):
            raise ValueError(f"static_argnums={static_argnums!r}: negative positions need a function "
                             f"with a fixed number of positional parameters ({fname(fun)} has *args)")
        return tuple(sorted(set(nums)))
    n = sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    for a in nums:
        if not -n <= a < n:
            raise ValueError(f"static_argnums={static_argnums!r} is out of range: {fname(fun)} takes "
                             f"{n} positional argument{'s' if n != 1 else ''}")
    return tuple(sorted(set(a % n for a in nums)))


def _check_remat(remat, grad):
    if remat is None:
        return
    if not grad:
        raise ValueError("remat= is an option of jit_grad: a forward-only function stores no "
                         "activations for a backward pass")
    if isinstance(remat, str) and remat == "sqrt":
        return
    if isinstance(remat, (int, np.integer)) and not isinstance(remat, bool) and remat > 0:
        return
    raise ValueError(f"remat must be None, 'sqrt' or a positive byte budget (int), got {remat!r}")


def memory_report(fun, *args, **jit_options):
    """The `MemoryReport` of `fun` compiled for `args` (printing it gives a table).

    `fun` is a `jit_grad`/`jit` function, or a plain function (then compiled with
    `jit_grad(fun, **jit_options)`). Same as `fun.lower(*args).memory`.
    """
    if not isinstance(fun, JitFunction):
        fun = jit_grad(fun, **jit_options)
    elif jit_options:
        raise TypeError("memory_report: options go to jit_grad when fun is not compiled yet")
    return fun.lower(*args).memory


def jit_grad(fun=None, *, argnums=0, has_aux=False, static_argnums=(), parallel=True,
             backend="numba", target="cpu", cache_size=None, remat=None, reuse_buffers=True, wait=None,
             reroll=True):
    """Compiled `value_and_grad`: same arguments, same outputs, one fused native program.

    Usable as `@jit_grad` or `@jit_grad(argnums=(0, 1), has_aux=False)`.

    Args:
        argnums, has_aux: as in `value_and_grad`.
        static_argnums: positions of arguments that select the graph (flags, sizes,
            strings): their values are part of the cache key and must be hashable.
        parallel: multi-threaded loops (chunks on Numba's threads) where they pay; False for one thread.
        backend: "numba" (native), or "python" to run the same generated source as plain
            Python (no compile: for debugging).
        target: "cpu", "cuda" (numba.cuda kernels; needs `jitgraph[cuda]`), or "auto"
            (CUDA when a GPU is present).
        cache_size: how many signatures the in-memory trace cache keeps (LRU); default
            $JITGRAPH_TRACE_CACHE_SIZE or 128.
        remat: what the backward pass recomputes instead of storing: None
            (store every activation it reads, except in `checkpoint` regions), "sqrt"
            (about sqrt(n) segments: O(sqrt n) stored activations for a depth-n chain at
            about one extra forward pass), or an int byte budget for the predicted peak
            (the least recomputation that meets it; `MemoryBudgetError` says the smallest
            budget it can meet). Gradients are the same under every policy (a policy keeps
            Python loops unrolled: where the default rerolls one, to rounding).
        reuse_buffers: keep the planned buffers (one workspace arena per concurrent call)
            between calls (default). Concurrent calls from several threads each take their
            own arena, so they never share buffers; `f.release_buffers()` frees the kept
            ones. False allocates the workspace per call and frees it on return.
        wait: compile before the first call for a new signature returns. By default
            ($JITGRAPH_WAIT unset or 0) calls are tiered: a new signature's first calls run
            the traced graph on the NumPy interpreter (about eager speed, no stall) while
            its kernel compiles in a background thread, and switch to the kernel when it is
            ready. The tiers agree to rounding, not bit for bit. `f.ready()` / `f.wait()`
            tell or wait; `cache_info()` counts the calls each tier served; a failed
            background compile is a `CompileWarning` and the interpreter keeps serving.
            With wait=True, every call runs compiled code and computes the same bits.
        reroll: turn a Python loop that tracing unrolled back into one loop (a `scan`)
            where that pays: small bodies (a Kalman filter's, an HMM's), and long
            elementwise loops whose unrolled compile would dominate (jitgraph/reroll.py).
            Not with a `remat` policy or `checkpoint` regions, which act on the unrolled
            steps. Values agree with the unrolled program's to rounding.
            $JITGRAPH_REROLL=0 turns it off everywhere.

    `f.lower(*args)` returns the `Lowered` program (graph, generated source, fusion
    groups, `.memory` report); `f.cache_info()` the cache counters.
    """
    opts = dict(argnums=argnums, has_aux=has_aux, static_argnums=static_argnums, parallel=parallel,
                backend=backend, target=target, cache_size=cache_size, remat=remat,
                reuse_buffers=reuse_buffers, wait=wait, reroll=reroll)
    if fun is None:
        return lambda f: JitFunction(f, True, **opts)
    return JitFunction(fun, True, **opts)


def jit(fun=None, *, static_argnums=(), parallel=True, backend="numba", target="cpu",
        cache_size=None, reuse_buffers=True, wait=None, reroll=True):
    """Compiled forward function: fused loops, one native call. Outputs are NumPy arrays/scalars.

    Options as in `jit_grad` (without argnums/has_aux/remat), `wait` and `reroll` included.
    """
    opts = dict(static_argnums=static_argnums, parallel=parallel, backend=backend, target=target,
                cache_size=cache_size, reuse_buffers=reuse_buffers, wait=wait, reroll=reroll)
    if fun is None:
        return lambda f: JitFunction(f, False, **opts)
    return JitFunction(fun, False, **opts)


def hvp(fun, argnums=0, has_aux=False, **jit_options):
    """Compiled Hessian-vector product: `hvp(fun, argnums)(*args, v)` returns H(args) @ v.

    H is the Hessian of the scalar `fun` with respect to the `argnums` arguments and `v`
    has their structure (a tuple of them for a tuple `argnums`). Computed as the gradient
    of <grad fun, v> (reverse over reverse: the backward graph is made of differentiable
    ops), fused and compiled like any `jit` function. Measured (benchmarks/hvp.py) at 1-2x
    one gradient for elementwise, MLP, row-logsumexp and layer-norm losses (whose
    second-order graph is one loop over the rows, a few passes over each row).
    """

    def hv(*args_and_v):
        args, v = args_and_v[:-1], args_and_v[-1]

        def inner(*a):
            g = grad(fun, argnums, has_aux)(*a)
            if has_aux:
                g = g[0]
            gl, _ = tree_flatten(g)
            vl, _ = tree_flatten(v)
            if len(gl) != len(vl):
                raise ValueError(f"hvp: v has {len(vl)} leaves but the gradient has {len(gl)}")
            total = 0.0
            for a, b in zip(gl, vl):
                total = total + (a * b).sum()
            return total

        return grad(inner, argnums)(*args)

    hv.__name__ = f"hvp_{getattr(fun, '__name__', 'fun')}"
    hv.__qualname__ = hv.__name__
    return JitFunction(hv, False, **jit_options)
