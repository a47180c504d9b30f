"""Compiled functions: `jit` (forward) and `jit_grad` (fused forward + backward).

The first call with a new argument signature (pytree structure, shapes,
dtypes) traces the function, differentiates the graph, fuses it, emits source
and compiles it with Numba; later calls with the same signature go straight to
native code. The compiled program is cached on disk under the hash of its
source (see codegen/build.py), so another process, or the same function at a
new batch size with the same graph structure, does not compile again.
"""
import functools
import os
import sys
import time

import numpy as np

from .api import _fname, trace_graph
from .tree import tree_flatten, tree_unflatten

def debug_level():
    """JITGRAPH_DEBUG: 1 prints graphs, 2 adds fusion groups, 3 adds source, 4 adds timings."""
    try:
        return int(os.environ.get("JITGRAPH_DEBUG", "0"))
    except ValueError:
        return 0


class Lowered:
    """What a compiled function becomes for one signature: inspect `.graph`, `.source`, `.groups`."""

    def __init__(self, graph, program, timings):
        self.graph = graph
        self.program = program
        self.timings = timings            # seconds: trace, codegen+compile

    @property
    def source(self):
        """The generated Python/Numba source module."""
        return self.program.source

    @property
    def partition(self):
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
        return self.program.partition.describe()

    def __repr__(self):
        return (f"<Lowered {self.graph.meta.get('name')}: {len(self.graph.nodes)} nodes, "
                f"{len(self.groups)} fused groups, {len(self.program.partition.steps)} steps>")


class _Entry:
    """One compiled signature: a small generated Python function that converts the
    arguments, calls the kernel and rebuilds the output structure (no generic loops
    on the hot path: this is most of the per-call overhead left after Numba's)."""

    __slots__ = ("lowered", "call")

    def __init__(self, lowered):
        graph, prog = lowered.graph, lowered.program
        self.lowered = lowered
        n_in = len(graph.inputs)
        lines = ["def call(leaves):"]
        names = [f"a{k}" for k in range(n_in)]
        if n_in:
            lines.append(f"    {', '.join(names)}{',' if n_in == 1 else ''} = leaves")
        ns = {"np": np, "kernel": prog.kernel, "dims": np.array(prog.sizes, dtype=np.int64),
              "tree_unflatten": tree_unflatten, "out_tree": graph.meta["out_tree"]}
        for k, node in enumerate(graph.inputs):
            ns[f"dt{k}"] = node.dtype
            if node.ndim == 0:
                lines.append(f"    a{k} = np.full(1, a{k}, dt{k})")
            else:
                lines.append(f"    if type(a{k}) is not np.ndarray or not a{k}.flags.c_contiguous:")
                lines.append(f"        a{k} = np.ascontiguousarray(a{k}, dt{k})")
        consts = []
        for k, c in enumerate(prog.consts):
            ns[f"c{k}"] = c
            consts.append(f"c{k}")
        lines.append(f"    r = kernel({', '.join(['dims'] + names + consts)})")
        outs = [f"r[{k}][0]" if n.ndim == 0 else f"r[{k}]" for k, n in enumerate(graph.outputs)]
        order = graph.meta.get("out_order")
        if order is not None:
            outs = [outs[i] for i in order]
        lines.append(f"    return {_build_tree(graph.meta['out_tree'], iter(outs))}")
        exec("\n".join(lines), ns)
        self.call = ns["call"]

    def __call__(self, leaves):
        return self.call(leaves)


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


def _leaf_key(x):
    if isinstance(x, np.ndarray):
        return (x.shape, x.dtype.char)
    if isinstance(x, bool):
        return ("b",)
    if isinstance(x, int):
        return ("i",)
    if isinstance(x, float):
        return ("f",)
    a = np.asarray(x)
    return (a.shape, a.dtype.char, "np")


class JitFunction:
    """A compiled version of `fun`; see `jit` and `jit_grad`."""

    def __init__(self, fun, grad, argnums=0, has_aux=False, parallel=True, backend="numba"):
        if backend not in ("numba", "python"):
            raise ValueError(f"backend must be 'numba' or 'python', got {backend!r}")
        self.backend = backend
        self.fun = fun
        self.grad = grad
        self.argnums = argnums
        self.has_aux = has_aux
        self.parallel = parallel
        self._entries = {}
        self.compiles = 0
        functools.update_wrapper(self, fun)

    def _key(self, args):
        try:
            # fast path: arrays (and NumPy scalars), keyed on shape and dtype
            return tuple([(a.shape, a.dtype.char) for a in args]), args
        except AttributeError:
            pass
        leaves, tree = tree_flatten(args)
        return (tree, tuple(_leaf_key(x) for x in leaves)), leaves

    def __call__(self, *args):
        key, leaves = self._key(args)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = self._lower(args)
        return entry.call(leaves)

    def lower(self, *args):
        """Trace and compile for these arguments (or reuse); returns a `Lowered`."""
        key, _ = self._key(args)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = self._lower(args)
        return entry.lowered

    def _lower(self, args):
        import codegen

        t0 = time.perf_counter()
        graph = trace_graph(self.fun, args, self.argnums, self.has_aux, self.grad)
        t1 = time.perf_counter()
        program = codegen.compile_graph(graph, parallel=self.parallel, backend=self.backend)
        # Numba compiles lazily; compile now so the first call's cost is all here
        leaves, _ = tree_flatten(tuple(args))
        lowered = Lowered(graph, program, {})
        entry = _Entry(lowered)
        entry.call(leaves)
        t2 = time.perf_counter()
        lowered.timings.update(trace=t1 - t0, compile=t2 - t1)
        self.compiles += 1
        self._debug(lowered)
        return entry

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
                  f"{t['compile'] * 1e3:.1f} ms", file=out)

    def __repr__(self):
        kind = "jit_grad" if self.grad else "jit"
        return f"<jitgraph.{kind} of {_fname(self.fun)}>"


def jit_grad(fun=None, *, argnums=0, has_aux=False, parallel=True, backend="numba"):
    """Compiled `value_and_grad`: same arguments, same outputs, one fused native program.

    Usable as `@jit_grad` or `@jit_grad(argnums=(0, 1), has_aux=False)`. The
    forward and backward graphs are fused into loops and compiled with Numba;
    `parallel=False` turns off multi-threaded loops. `backend="python"` runs the
    same generated source as plain Python (no compile: for debugging and tests).
    `f.lower(*args)` returns the `Lowered` program (graph, generated source,
    fusion groups).
    """
    if fun is None:
        return lambda f: JitFunction(f, True, argnums, has_aux, parallel, backend)
    return JitFunction(fun, True, argnums, has_aux, parallel, backend)


def jit(fun=None, *, parallel=True, backend="numba"):
    """Compiled forward function: fused loops, one native call. Outputs are NumPy arrays/scalars."""
    if fun is None:
        return lambda f: JitFunction(f, False, parallel=parallel, backend=backend)
    return JitFunction(fun, False, parallel=parallel, backend=backend)
