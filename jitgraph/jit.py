"""Compiled functions: `jit` (forward) and `jit_grad` (fused forward + backward).

Two cache levels:

* The trace cache (per compiled function, in memory, LRU): keyed on the
  pytree structure of the arguments, each array's shape and dtype, the kind of
  each Python scalar, and the values of `static_argnums` arguments; `argnums`,
  `has_aux` and the target are fixed per `JitFunction`. A miss traces the
  function (milliseconds) and generates source.
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
import logging
import os
import sys
import threading
import time
import types
import uuid
import warnings
import weakref

import numpy as np

from .api import _fname, grad, trace_graph
from .core import Tensor
from .tree import tree_flatten, tree_unflatten

log = logging.getLogger("jitgraph")


def _env_int(name, default):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def debug_level():
    """JITGRAPH_DEBUG: 1 prints graphs, 2 adds fusion groups, 3 adds source, 4 adds timings."""
    return _env_int("JITGRAPH_DEBUG", 0)


def _log_enabled(topic):
    return topic in os.environ.get("JITGRAPH_LOG", "").replace(",", " ").split()


def _log(msg):
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    log.info(msg)


class RetraceWarning(UserWarning):
    """A compiled function has been traced more times than JITGRAPH_RETRACE_WARN allows."""


CacheInfo = collections.namedtuple(
    "CacheInfo", "traces compiles hits disk_hits kernel_reuses entries maxsize evictions")
CacheInfo.__doc__ = """Counters of one compiled function's caches.

traces: how many times the function was traced (trace-cache misses).
compiles: native compiles (Numba compiled new machine code).
hits: calls served by the trace cache.
disk_hits: traces whose kernel was loaded from the on-disk cache.
kernel_reuses: traces whose kernel was already compiled in this process (e.g. a new batch size).
entries / maxsize: current and maximum size of the trace cache; evictions: LRU evictions.
"""


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
        import hashlib
        h = hashlib.sha256(str(self.graph).encode())
        for n in self.graph.nodes:
            if n.op == "const":
                h.update(np.ascontiguousarray(n.value).tobytes())
        return h.hexdigest()[:24]

    def __repr__(self):
        return (f"<Lowered {self.graph.meta.get('name')}: {len(self.graph.nodes)} nodes, "
                f"{len(self.groups)} fused groups, {len(self.program.partition.steps)} steps>")


class _Stale(Exception):
    """A global or closure cell the trace depended on was rebound."""


class _Inline(Exception):
    """The compiled function was called with recording values (inside another trace)."""


def _to_array(a, dt):
    if isinstance(a, Tensor):
        raise _Inline
    return np.ascontiguousarray(a, dt)


def _to_scalar(a, dt):
    if isinstance(a, Tensor):
        raise _Inline
    if hasattr(a, "__cuda_array_interface__"):
        return a          # the CUDA runtime reshapes () to (1,) on the device
    return np.full(1, a, dt)


def _pass_device(a, dt):
    """CUDA target: device arrays pass through; everything else becomes a contiguous host array."""
    if isinstance(a, Tensor):
        raise _Inline
    if hasattr(a, "__cuda_array_interface__"):
        return a
    return np.ascontiguousarray(a, dt)


def _free_refcount():
    """What `sys.getrefcount` reports for an output buffer that only `_Entry`'s list and the
    local reading it hold, measured with the same statements the per-call wrapper runs (3 on
    CPython 3.11; an interpreter that borrows references for locals reports fewer)."""
    ns = {}
    exec("def probe(obuf, getrefcount):\n    o0 = obuf[0]\n    return getrefcount(o0)\n", ns)
    return ns["probe"]([np.empty(1)], sys.getrefcount)


_FREE_REFS = _free_refcount()


def _parallel_lock():
    """A process-wide lock for calls of multi-threaded kernels, unless Numba's threading layer
    is thread-safe. jitgraph selects the workqueue layer (see __init__), which aborts the
    process when two Python threads launch parallel loops at once; TBB and OpenMP allow it."""
    layer = os.environ.get("NUMBA_THREADING_LAYER", "default").lower()
    return None if layer in ("tbb", "omp") else threading.Lock()


_PARALLEL_LOCK = _parallel_lock()


class _Entry:
    """One compiled signature: a small generated Python function that checks the
    trace's global/closure guards, converts the arguments, calls the kernel and
    rebuilds the output structure (no generic loops on the hot path: this is
    most of the per-call overhead left after Numba's)."""

    __slots__ = ("lowered", "call", "desc", "guards", "pool", "obufs")

    def __init__(self, lowered, guards, desc, target="cpu", reuse=True):
        graph, prog = lowered.graph, lowered.program
        self.lowered = lowered
        self.pool = []       # free workspace arenas
        self.obufs = [None] * len(getattr(prog, "out_specs", ()))   # last output buffers
        self.desc = desc
        self.guards = guards
        n_in = len(graph.inputs)
        lines = ["def call(leaves):"]
        ns = {"np": np, "kernel": prog.kernel, "dims": np.array(prog.sizes, dtype=np.int64),
              "Stale": _Stale, "to_array": _pass_device if target == "cuda" else _to_array,
              "to_scalar": _to_scalar, "MISSING": _MISSING}
        conds = []
        for k, (container, key, obj) in enumerate(guards):
            ns[f"G{k}"], ns[f"O{k}"] = container, obj
            if isinstance(container, dict):
                conds.append(f"G{k}.get({key!r}, MISSING) is not O{k}")
            else:     # a closure cell
                conds.append(f"G{k}.cell_contents is not O{k}")
        if conds:
            lines.append(f"    if {' or '.join(conds)}:")
            lines.append("        raise Stale")
        names = [f"a{k}" for k in range(n_in)]
        if n_in:
            lines.append(f"    {', '.join(names)}{',' if n_in == 1 else ''} = leaves")
        for k, node in enumerate(graph.inputs):
            ns[f"dt{k}"] = node.dtype
            if node.ndim == 0:
                lines.append(f"    a{k} = to_scalar(a{k}, dt{k})")
            else:
                lines.append(f"    if type(a{k}) is not np.ndarray or not a{k}.flags.c_contiguous:")
                lines.append(f"        a{k} = to_array(a{k}, dt{k})")
        consts = []
        for k, c in enumerate(prog.consts):
            ns[f"c{k}"] = c
            consts.append(f"c{k}")
        args = ["dims"] + names + consts
        if prog.ws_bytes is not None:
            # the planned buffers: a workspace arena per concurrent call, kept between calls
            # (a pool: a call takes a free arena or makes one, and gives it back)
            ns.update(pool=self.pool, wofs=prog.ws_offsets, WSB=int(prog.ws_bytes),
                      new_ws=prog.new_workspace)
            lines += ["    try:",
                      "        ws = pool.pop()",
                      "    except IndexError:",
                      "        ws = new_ws(WSB)"]
            args += ["ws", "wofs"]
        ns.update(obuf=self.obufs, getrefcount=sys.getrefcount, empty=np.empty, FREE=_FREE_REFS)
        for k, (shape, dt) in enumerate(getattr(prog, "out_specs", ())):
            ns[f"OS{k}"], ns[f"OD{k}"] = shape, dt
            if reuse:
                # Output buffers are new arrays unless the one returned last time is referenced
                # by nothing but this list: then the caller dropped it and every view of it,
                # so writing into it is invisible; this spares the page faults of a fresh large
                # array per call. FREE is the count of such a buffer (the list, the local,
                # getrefcount's argument), measured at import by _free_refcount.
                lines += [f"    o{k} = obuf[{k}]",
                          f"    if o{k} is None or getrefcount(o{k}) > FREE:",
                          f"        o{k} = empty(OS{k}, OD{k})",
                          f"        obuf[{k}] = o{k}"]
            else:
                lines.append(f"    o{k} = empty(OS{k}, OD{k})")
            args.append(f"o{k}")
        call = f"kernel({', '.join(args)})"
        if target == "cpu" and "prange(" in prog.source and _PARALLEL_LOCK is not None:
            # one parallel launch at a time (see _PARALLEL_LOCK)
            ns["plock"] = _PARALLEL_LOCK
            call_lines = ["with plock:", f"    r = {call}"]
        else:
            call_lines = [f"r = {call}"]
        if prog.ws_bytes is not None:
            lines += ["    try:"] + ["        " + ln for ln in call_lines] + ["    finally:"]
            lines += ["        pool.append(ws)"] if reuse else ["        pass"]
        else:
            lines += ["    " + ln for ln in call_lines]
        outs = [f"r[{k}][0]" if n.ndim == 0 else f"r[{k}]" for k, n in enumerate(graph.outputs)]
        order = graph.meta.get("out_order")
        if order is not None:
            outs = [outs[i] for i in order]
        lines.append(f"    return {_build_tree(graph.meta['out_tree'], iter(outs))}")
        exec("\n".join(lines), ns)
        self.call = ns["call"]


_MISSING = object()


def _build_tree(td, outs):
    """A Python expression rebuilding tree `td` from output expressions."""
    if td.kind == "leaf":
        return next(outs)
    if td.kind == "none":
        return "None"
    kids = [_build_tree(c, outs) for c in td.children]
    if td.kind == "dict":
        return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(td.meta, kids)) + "}"
    if td.kind == "list":
        return "[" + ", ".join(kids) + "]"
    return "(" + ", ".join(kids) + ("," if len(kids) == 1 else "") + ")"


def _cuda_leaf(x):
    iface = getattr(x, "__cuda_array_interface__", None)
    if iface is None:
        return None
    return tuple(iface["shape"]), np.dtype(iface["typestr"])


def _leaf_key(x):
    if isinstance(x, np.ndarray):
        return (x.shape, x.dtype.char)
    if isinstance(x, bool):
        return ("b",)
    if isinstance(x, int):
        return ("i",)
    if isinstance(x, float):
        return ("f",)
    dev = _cuda_leaf(x)
    if dev is not None:
        return (dev[0], dev[1].char, "cuda")
    if isinstance(x, Tensor):
        raise _Inline
    a = np.asarray(x)
    return (a.shape, a.dtype.char, "np")


def _leaf_text(x):
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        return f"Python {type(x).__name__}"
    dev = _cuda_leaf(x)
    if dev is not None:
        return f"device array shape {dev[0]} {dev[1].name}"
    a = np.asarray(x)
    return f"shape {a.shape} {a.dtype.name}"


def _code_names(code):
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _code_names(c)
    return names


def _guards(fun):
    """(container, key, object) triples: the globals and closure cells `fun` reads directly."""
    fun = inspect.unwrap(fun)
    code = getattr(fun, "__code__", None)
    if code is None:
        return []
    out = []
    g = fun.__globals__
    for name in sorted(_code_names(code)):
        obj = g.get(name, _MISSING)
        if obj is _MISSING or isinstance(obj, types.ModuleType):
            continue
        out.append((g, name, obj))
    for cell in fun.__closure__ or ():
        try:
            obj = cell.cell_contents
        except ValueError:     # an empty cell (a name assigned after the function was defined)
            continue
        if isinstance(obj, types.ModuleType):
            continue
        out.append((cell, None, obj))
    return out


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
                 target="cpu", static_argnums=(), cache_size=None, remat=None, reuse_buffers=True):
        if backend not in ("numba", "python"):
            raise ValueError(f"backend must be 'numba' or 'python', got {backend!r}")
        if target not in ("cpu", "cuda", "auto"):
            raise ValueError(f"target must be 'cpu', 'cuda' or 'auto', got {target!r}")
        _check_remat(remat, grad)
        self.fun = fun
        self.grad = grad
        self.remat = remat
        self.reuse_buffers = bool(reuse_buffers)
        self.argnums = argnums
        self.has_aux = has_aux
        self.parallel = parallel
        self.backend = backend
        self.target = target
        if isinstance(static_argnums, (int, np.integer)):
            static_argnums = (int(static_argnums),)
        self.static_argnums = tuple(sorted(set(int(a) for a in static_argnums)))
        if grad and self.static_argnums:
            nums = (argnums,) if isinstance(argnums, (int, np.integer)) else tuple(argnums)
            both = set(int(a) for a in nums) & set(self.static_argnums)
            if both:
                raise ValueError(f"argument(s) {sorted(both)} are both in argnums and static_argnums")
        self.maxsize = cache_size if cache_size is not None else _env_int("JITGRAPH_TRACE_CACHE_SIZE", 128)
        self._entries = collections.OrderedDict()
        self._lock = threading.RLock()
        self._token = uuid.uuid4().hex
        self._last_desc = None
        self._changed = collections.Counter()
        self._warned = False
        self._stats = dict(traces=0, compiles=0, hits=0, disk_hits=0, kernel_reuses=0, evictions=0)
        try:
            self._params = [p.name for p in inspect.signature(fun).parameters.values()]
        except (TypeError, ValueError):
            self._params = []
        functools.update_wrapper(self, fun)

    # -- the call path -------------------------------------------------------------------------

    def _key(self, args):
        dyn, statics = args, []
        if not self.static_argnums:
            try:
                # fast path: arrays (and NumPy scalars), keyed on shape and dtype
                return tuple([(a.shape, a.dtype.char) for a in args]), args
            except AttributeError:
                pass
        else:
            dyn = []
            for i, a in enumerate(args):
                if i not in self.static_argnums:
                    dyn.append(a)
                    continue
                try:
                    hash(a)
                except TypeError:
                    raise TypeError(
                        f"static argument {i}{self._argname(i)} of {_fname(self.fun)} must be "
                        f"hashable (it is part of the cache key), got a {type(a).__name__}; "
                        "pass a tuple instead of a list, or make it a traced argument") from None
                statics.append((i, a))
        leaves, tree = tree_flatten(tuple(dyn))
        return (tree, tuple(_leaf_key(x) for x in leaves), tuple(statics)), leaves

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = self._bind(args, kwargs)
        try:
            key, leaves = self._key(args)
            entry = self._entries.get(key)
            if entry is not None:
                try:
                    out = entry.call(leaves)
                except _Stale:
                    return self._retrace_stale(entry, args)
                self._stats["hits"] += 1
                self._entries.move_to_end(key)
                return out
        except _Inline:
            return self._inline(args)
        if any(isinstance(x, Tensor) for x in leaves):
            return self._inline(args)
        try:
            return self._miss(key, args).call(leaves)
        except _Inline:
            return self._inline(args)

    def _bind(self, args, kwargs):
        try:
            ba = inspect.signature(self.fun).bind(*args, **kwargs)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{_fname(self.fun)}: {e}") from None
        ba.apply_defaults()
        if ba.kwargs:
            raise TypeError(f"{_fname(self.fun)}: keyword-only arguments {sorted(ba.kwargs)} are not "
                            "supported by jit; make them positional")
        return ba.args

    def _inline(self, args):
        """Called inside another trace (e.g. under jit_grad or value_and_grad): trace through."""
        from .api import value_and_grad
        fun = self.fun
        if self.grad:
            return value_and_grad(fun, self.argnums, self.has_aux)(*args)
        return fun(*args)

    def _retrace_stale(self, entry, args):
        with self._lock:
            if _log_enabled("recompiles"):
                names = []
                for container, key, obj in entry.guards:
                    if isinstance(container, dict):
                        if container.get(key, _MISSING) is not obj:
                            names.append(f"global `{key}`")
                    elif container.cell_contents is not obj:
                        names.append("a closure variable")
                _log(f"jitgraph: retracing {_fname(self.fun)}: {', '.join(names) or 'a global'} "
                     "was rebound since it was traced")
            self._entries.clear()
        key, leaves = self._key(args)
        return self._miss(key, args).call(leaves)

    def _miss(self, key, args):
        with self._lock:     # one trace and one compile however many threads call at once
            entry = self._entries.get(key)
            if entry is not None:       # another thread traced it while we waited
                self._entries.move_to_end(key)
                self._stats["hits"] += 1
                return entry
            desc = self._describe(args)
            self._explain(desc)
            entry = self._lower(args, desc)
            self._entries[key] = entry
            while len(self._entries) > max(self.maxsize, 1):
                self._entries.popitem(last=False)
                self._stats["evictions"] += 1
            return entry

    # -- explaining retraces -------------------------------------------------------------------

    def _argname(self, i):
        return f" `{self._params[i]}`" if i < len(self._params) else ""

    def _describe(self, args):
        desc = []
        for i, a in enumerate(args):
            if i in self.static_argnums:
                desc.append(("static", repr(a)))
                continue
            leaves, tree = tree_flatten(a)
            if tree.kind == "leaf":
                desc.append(("leaf", _leaf_text(a)))
            else:
                desc.append(("tree", repr(tree), tuple(_leaf_text(x) for x in leaves)))
        return tuple(desc)

    def _changes(self, old, new):
        if old is None:
            return []
        if len(old) != len(new):
            return [(None, f"number of arguments {len(old)} -> {len(new)}")]
        out = []
        for i, (o, n) in enumerate(zip(old, new)):
            if o == n:
                continue
            what = f"argument {i}{self._argname(i)}"
            if o[0] == "static" or n[0] == "static":
                out.append((i, f"static {what}: {o[1]} -> {n[1]}"))
            elif o[0] != n[0] or (o[0] == "tree" and o[1] != n[1]):
                out.append((i, f"{what}: structure {o[1] if o[0] == 'tree' else '*'} -> "
                               f"{n[1] if n[0] == 'tree' else '*'}"))
            elif o[0] == "leaf":
                out.append((i, f"{what}: {o[1]} -> {n[1]}"))
            else:
                diffs = [f"leaf {k}: {a} -> {b}" for k, (a, b) in enumerate(zip(o[2], n[2])) if a != b]
                out.append((i, f"{what}: " + "; ".join(diffs)))
        return out

    def _explain(self, desc):
        changes = self._changes(self._last_desc, desc)
        self._last_desc = desc
        for i, _ in changes:
            self._changed[i] += 1
        name = _fname(self.fun)
        if changes and _log_enabled("recompiles"):
            _log(f"jitgraph: retracing {name}: " + "; ".join(c for _, c in changes))
        limit = _env_int("JITGRAPH_RETRACE_WARN", 16)
        if not self._warned and self._stats["traces"] + 1 > limit > 0:
            self._warned = True
            blame = ""
            if self._changed:
                i, n = self._changed.most_common(1)[0]
                if i is not None:
                    blame = (f"; argument {i}{self._argname(i)} changed in {n} of them (if it is a "
                             "size or a flag, consider static_argnums; if it is an array of varying "
                             "shape, consider padding it to a few fixed sizes)")
            warnings.warn(f"jitgraph: {name} has been traced {self._stats['traces'] + 1} times"
                          f"{blame}. Set JITGRAPH_LOG=recompiles to see each retrace, or "
                          "JITGRAPH_RETRACE_WARN to change this threshold.", RetraceWarning, stacklevel=4)

    # -- lowering ------------------------------------------------------------------------------

    def _split_static(self, args):
        """(function of the dynamic arguments, dynamic args, argnums among them)."""
        if not self.static_argnums:
            return self.fun, args, self.argnums
        statics = {i: args[i] for i in self.static_argnums if i < len(args)}
        dyn_pos = [i for i in range(len(args)) if i not in statics]
        fun = self.fun

        def dynamic(*dyn):
            full = list(dyn)
            for i in sorted(statics):
                full.insert(i, statics[i])
            return fun(*full)

        dynamic.__name__ = getattr(fun, "__name__", "fun")
        dynamic.__qualname__ = _fname(fun)
        argnums = self.argnums
        if self.grad:
            remap = {p: j for j, p in enumerate(dyn_pos)}
            if isinstance(argnums, (int, np.integer)):
                argnums = remap[int(argnums) % len(args)]
            else:
                argnums = tuple(remap[int(a) % len(args)] for a in argnums)
        return dynamic, tuple(args[i] for i in dyn_pos), argnums

    def _resolved_target(self):
        if self.target != "auto":
            return self.target
        try:
            import numba
            if numba.config.ENABLE_CUDASIM:     # the simulator is for tests, not a device
                return "cpu"
            from numba import cuda
            return "cuda" if cuda.is_available() else "cpu"
        except Exception:
            return "cpu"

    def _lower(self, args, desc):
        import codegen

        t0 = time.perf_counter()
        fun, dyn, argnums = self._split_static(args)
        target = self._resolved_target()
        abstract = [_abstract(a) for a in dyn]
        graph = trace_graph(fun, abstract, argnums, self.has_aux, self.grad)
        if self.grad:
            # the budget policy measures candidates with the CPU plan (codegen/memory.py)
            from .remat import apply_policy
            graph = apply_policy(graph, self.remat,
                                 lambda g: codegen.memory_report(g, parallel=self.parallel))
        guards = _guards(self.fun)
        self._stats["traces"] += 1
        t1 = time.perf_counter()
        program = codegen.compile_graph(graph, parallel=self.parallel, backend=self.backend,
                                        target=target)
        leaves, _ = tree_flatten(tuple(dyn))
        lowered = Lowered(graph, program, {})
        entry = _Entry(lowered, guards, desc, target, reuse=self.reuse_buffers)
        # Numba compiles lazily; run once now so the first call's cost is all here, and
        # find out whether this was a compile, a disk-cache load or an in-process reuse
        before = _dispatch_state(program)
        entry.call(leaves)
        after = _dispatch_state(program)
        if before is None:
            lowered.native = "python" if self.backend == "python" else "external"
        elif after[0] == before[0]:
            lowered.native = "reused"
            self._stats["kernel_reuses"] += 1
        elif after[1] > before[1]:
            lowered.native = "disk"
            self._stats["disk_hits"] += 1
        else:
            lowered.native = "compiled"
            self._stats["compiles"] += 1
        t2 = time.perf_counter()
        lowered.timings.update(trace=t1 - t0, compile=t2 - t1)
        self._debug(lowered)
        return entry

    # -- inspection ----------------------------------------------------------------------------

    def lower(self, *args):
        """Trace and compile for these arguments (or reuse); returns a `Lowered`."""
        key, _ = self._key(args)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._miss(key, args)
        return entry.lowered

    def cache_info(self):
        """A `CacheInfo` with this function's trace/compile/hit counters."""
        s = self._stats
        return CacheInfo(s["traces"], s["compiles"], s["hits"], s["disk_hits"], s["kernel_reuses"],
                         len(self._entries), self.maxsize, s["evictions"])

    def release_buffers(self, workspace=True, outputs=True):
        """Free the buffers kept between calls: the workspace arenas and/or the output buffers
        kept for recycling (the next call allocates them again)."""
        with self._lock:
            for entry in self._entries.values():
                if workspace:
                    entry.pool.clear()
                if outputs:
                    entry.obufs[:] = [None] * len(entry.obufs)

    def clear_cache(self):
        """Drop every trace of this function (compiled kernels stay cached on disk and in memory)."""
        with self._lock:
            self._entries.clear()
            self._last_desc = None

    def _debug(self, lowered):
        level = debug_level()
        if level <= 0:
            return
        out = sys.stderr
        name = _fname(self.fun)
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
        # Pickling sends the function (by reference, or by value under cloudpickle) and the
        # options, never native code: an unpickled copy retraces once per process and loads
        # the kernel from the disk cache; copies with the same token share one cache.
        options = dict(grad=self.grad, argnums=self.argnums, has_aux=self.has_aux,
                       parallel=self.parallel, backend=self.backend, target=self.target,
                       static_argnums=self.static_argnums, cache_size=self.maxsize, remat=self.remat,
                       reuse_buffers=self.reuse_buffers)
        with _SHARED_LOCK:
            _SHARED.setdefault(self._token, self)
        return _rebuild, (self._token, self.fun, options)

    def __get__(self, obj, objtype=None):
        # decorating a method: bind like a function would
        if obj is None:
            return self
        return functools.partial(self, obj)

    def __repr__(self):
        kind = "jit_grad" if self.grad else "jit"
        return f"<jitgraph.{kind} of {_fname(self.fun)}>"


def _abstract(a):
    """A stand-in for tracing: device arrays become empty host arrays of their shape and dtype."""
    leaves, tree = tree_flatten(a)
    if not any(hasattr(x, "__cuda_array_interface__") for x in leaves):
        return a
    out = []
    for x in leaves:
        dev = _cuda_leaf(x)
        out.append(np.empty(dev[0], dev[1]) if dev is not None else x)
    return tree_unflatten(tree, out)


def _dispatch_state(program):
    """(compiled signatures, disk-cache hits) summed over the Numba dispatchers of a program's
    module (its entry, when compiled, and its loop functions), else None."""
    kernels = [program.kernel]
    mod = sys.modules.get(program.module) if isinstance(program.module, str) else None
    if mod is not None:
        kernels = [v for v in vars(mod).values() if hasattr(v, "overloads") and hasattr(v, "stats")
                   and getattr(getattr(v, "py_func", None), "__module__", None) == mod.__name__]
    kernels = [k for k in kernels if hasattr(k, "overloads") and hasattr(k, "stats")]
    if not kernels:
        return None
    return (sum(len(k.overloads) for k in kernels),
            sum(sum(k.stats.cache_hits.values()) for k in kernels))


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
             backend="numba", target="cpu", cache_size=None, remat=None, reuse_buffers=True):
    """Compiled `value_and_grad`: same arguments, same outputs, one fused native program.

    Usable as `@jit_grad` or `@jit_grad(argnums=(0, 1), has_aux=False)`.

    Args:
        argnums, has_aux: as in `value_and_grad`.
        static_argnums: positions of arguments that select the graph (flags, sizes,
            strings): their values are part of the cache key and must be hashable.
        parallel: multi-threaded loops (Numba prange) where they pay; False for one thread.
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
            budget it can meet). Gradients are the same under every policy.
        reuse_buffers: keep the planned buffers (one workspace arena per concurrent call)
            between calls (default). Concurrent calls from several threads each take their
            own arena, so they never share buffers; `f.release_buffers()` frees the kept
            ones. False allocates the workspace per call and frees it on return.

    `f.lower(*args)` returns the `Lowered` program (graph, generated source, fusion
    groups, `.memory` report); `f.cache_info()` the cache counters.
    """
    opts = dict(argnums=argnums, has_aux=has_aux, static_argnums=static_argnums, parallel=parallel,
                backend=backend, target=target, cache_size=cache_size, remat=remat,
                reuse_buffers=reuse_buffers)
    if fun is None:
        return lambda f: JitFunction(f, True, **opts)
    return JitFunction(fun, True, **opts)


def jit(fun=None, *, static_argnums=(), parallel=True, backend="numba", target="cpu",
        cache_size=None, reuse_buffers=True):
    """Compiled forward function: fused loops, one native call. Outputs are NumPy arrays/scalars.

    Options as in `jit_grad` (without argnums/has_aux/remat).
    """
    opts = dict(static_argnums=static_argnums, parallel=parallel, backend=backend, target=target,
                cache_size=cache_size, reuse_buffers=reuse_buffers)
    if fun is None:
        return lambda f: JitFunction(f, False, **opts)
    return JitFunction(fun, False, **opts)


def hvp(fun, argnums=0, has_aux=False, **jit_options):
    """Compiled Hessian-vector product: `hvp(fun, argnums)(*args, v)` returns H(args) @ v.

    H is the Hessian of the scalar `fun` with respect to the `argnums` arguments and `v`
    has their structure (a tuple of them for a tuple `argnums`). Computed as the gradient
    of <grad fun, v> (reverse over reverse: the backward graph is made of differentiable
    ops), fused and compiled like any `jit` function. Measured (benchmarks/hvp.py) at about
    2x one gradient for elementwise, MLP and row-logsumexp losses; a second-order graph
    whose intermediates do not fuse into few loops (layer norm: 19x) costs more.
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
