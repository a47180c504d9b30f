"""The per-signature call wrapper of a compiled function.

An `Entry` is one compiled signature: a small generated Python function that
checks the trace's global/closure guards, converts the arguments, takes a
workspace arena from its pool, passes the output buffers it can recycle, calls
the kernel and rebuilds the output structure. Generating it per signature keeps
generic loops off the hot path: it is most of the per-call overhead left after
Numba's own.
"""
import sys
import threading

import numba
import numpy as np

from .api import run_checks
from .codegen import launch
from .core import Tensor
from .signature import MISSING, Inline
from .threads import ThreadPolicy, clock
from .values import check_array_type


class Stale(Exception):
    """A global or closure cell the trace depended on was rebound."""


def _to_array(a, dt):
    if isinstance(a, Tensor):
        raise Inline
    if isinstance(a, np.ndarray):
        check_array_type(a, "an argument")
    return np.ascontiguousarray(a, dt)


def _to_scalar(a, dt):
    if isinstance(a, Tensor):
        raise Inline
    if hasattr(a, "__cuda_array_interface__"):
        return a          # the CUDA runtime reshapes () to (1,) on the device
    return np.full(1, a, dt)


def _to_packed(values, dt):
    """Scalar arguments as the one array input they are traced as (api._scalar_packs)."""
    for a in values:
        if isinstance(a, Tensor):
            raise Inline
    return np.array(values, dt)


def _pass_device(a, dt):
    """CUDA target: device arrays pass through; everything else becomes a contiguous host array."""
    if isinstance(a, Tensor):
        raise Inline
    if hasattr(a, "__cuda_array_interface__"):
        return a
    return np.ascontiguousarray(a, dt)


def _free_refcount():
    """What `sys.getrefcount` reports for an output buffer that only `Entry`'s list and the
    local reading it hold, measured with the same statements the per-call wrapper runs (3 on
    CPython 3.11; an interpreter that borrows references for locals reports fewer)."""
    ns = {}
    exec("def probe(obuf, getrefcount):\n    o0 = obuf[0]\n    return getrefcount(o0)\n", ns)
    return ns["probe"]([np.empty(1)], sys.getrefcount)


_FREE_REFS = _free_refcount()


def _parallel_lock():
    """A process-wide lock for calls of multi-threaded kernels, unless Numba's threading layer
    is thread-safe: the workqueue layer (jitgraph's second choice, see __init__) aborts the
    process when two Python threads launch parallel loops at once; OpenMP and TBB allow it."""
    return None if launch.threading_layer() in ("tbb", "omp") else threading.Lock()


_PARALLEL_LOCK = _parallel_lock()


class Entry:
    """One compiled signature: a small generated Python function that checks the
    trace's global/closure guards, converts the arguments, calls the kernel and
    rebuilds the output structure (no generic loops on the hot path: this is
    most of the per-call overhead left after Numba's)."""

    __slots__ = ("lowered", "call", "plain", "desc", "guards", "pool", "obufs", "threads")

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
              "Stale": Stale, "to_array": _pass_device if target == "cuda" else _to_array,
              "to_scalar": _to_scalar, "to_packed": _to_packed, "MISSING": MISSING}
        conds = []
        for k, (kind, container, key, obj) in enumerate(guards):
            ns[f"G{k}"], ns[f"O{k}"] = container, obj
            if kind == "global":
                conds.append(f"G{k}.get({key!r}, MISSING) is not O{k}")
            elif kind == "cell":
                conds.append(f"G{k}.cell_contents is not O{k}")
            else:     # an attribute read from a global or a closure variable
                conds.append(f"getattr(G{k}, {key!r}, MISSING) is not O{k}")
        if conds:
            lines.append(f"    if {' or '.join(conds)}:")
            lines.append("        raise Stale")
        names = [f"a{k}" for k in range(n_in)]
        picked = graph.meta.get("input_leaves")
        if picked is not None:        # leaves specialized on (big Python ints) are not inputs
            for k, j in enumerate(picked):
                if isinstance(j, int):
                    lines.append(f"    a{k} = leaves[{j}]")
                else:       # scalars traced as one array (api._scalar_packs)
                    lines.append(f"    a{k} = to_packed(({''.join(f'leaves[{i}], ' for i in j)}), dt{k})")
        elif n_in:
            lines.append(f"    {', '.join(names)}{',' if n_in == 1 else ''} = leaves")
        for k, node in enumerate(graph.inputs):
            ns[f"dt{k}"] = node.dtype
            if node.ndim == 0:
                lines.append(f"    a{k} = to_scalar(a{k}, dt{k})")
            else:
                lines.append(f"    if type(a{k}) is not np.ndarray or not a{k}.flags.c_contiguous "
                             f"or a{k}.dtype is not dt{k}:")
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
        locked = target == "cpu" and prog.threads and _PARALLEL_LOCK is not None
        if locked:
            # one parallel launch at a time (see _PARALLEL_LOCK)
            ns["plock"] = _PARALLEL_LOCK

        def call_lines(call):
            return ["with plock:", f"    r = {call}"] if locked else [f"r = {call}"]
        # a signature whose calls run parallel loops times them to choose its thread count
        self.threads = None
        if target == "cpu" and prog.threads:
            numba.get_num_threads()      # starts Numba's threads (a kernel whose only parallel
            # loops are in runtime helpers would otherwise run them on one thread)
            self.threads = ThreadPolicy(on_inactive=self._untimed)
            ns.update(begin=self.threads.begin, end=self.threads.end, clock=clock)
            timed_lines = (["tok = begin()", "t0 = clock()", "try:"] + ["    " + ln for ln in call_lines(call)]
                           + ["finally:", "    end(tok, clock() - t0)"])
        head = lines
        variants = {}
        for name, body in (("call", timed_lines if self.threads else None), ("plain", call_lines(call))):
            if body is None:
                continue
            lines = [f"def {name}(leaves):"] + head[1:]
            if prog.ws_bytes is not None:
                lines += ["    try:"] + ["        " + ln for ln in body] + ["    finally:"]
                lines += ["        pool.append(ws)"] if reuse else ["        pass"]
            else:
                lines += ["    " + ln for ln in body]
            variants[name] = lines
        tail = []
        checks = graph.meta.get("checks") or []
        n_own = len(graph.outputs) - len(checks)
        if checks:
            # run-time checks (api.run_checks): the values they read are the last outputs
            ns["run_checks"], ns["graph"] = run_checks, graph
            tail.append("    run_checks(graph, r)")
        outs = [f"r[{k}][0]" if n.ndim == 0 else f"r[{k}]" for k, n in enumerate(graph.outputs[:n_own])]
        for k, leaf in enumerate(graph.meta.get("grad_leaves", ())):
            if graph.outputs[1 + k].ndim == 0:
                # the gradient of a 0-d ndarray argument is a 0-d array (of a scalar, a scalar)
                outs[1 + k] = f"(r[{1 + k}].reshape(()) if type(leaves[{leaf}]) is np.ndarray else r[{1 + k}][0])"
        order = graph.meta.get("out_order")
        if order is not None:
            outs = [outs[i] for i in order]
        tail.append(f"    return {_build_tree(graph.meta['out_tree'], iter(outs), ns)}")
        for lines in variants.values():
            exec("\n".join(lines + tail), ns)
        self.plain = ns["plain"]
        self.call = ns["call"] if self.threads else self.plain

    def release_workspace(self):
        """Drop the free workspace arenas, and the views a Python entry keeps of them."""
        self.pool.clear()
        module = sys.modules.get(self.lowered.program.module or "")
        release = getattr(module, "release_views", None)
        if release is not None:
            release()

    def _untimed(self):
        """The thread policy stopped measuring (short calls): drop its timing from the calls."""
        self.call = self.plain


def _build_tree(td, outs, ns):
    """A Python expression rebuilding tree `td` from output expressions (namedtuple types are
    put in the namespace `ns`)."""
    if td.kind == "leaf":
        return next(outs)
    if td.kind == "none":
        return "None"
    kids = [_build_tree(c, outs, ns) for c in td.children]
    if td.kind == "namedtuple":
        name = f"NT{sum(1 for k in ns if k.startswith('NT'))}"
        ns[name] = td.meta
        return f"{name}({', '.join(kids)})"
    if td.kind == "dict":
        return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(td.meta, kids)) + "}"
    if td.kind == "list":
        return "[" + ", ".join(kids) + "]"
    return "(" + ", ".join(kids) + ("," if len(kids) == 1 else "") + ")"
