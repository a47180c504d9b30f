"""The back end (installed as `jitgraph.codegen`): fusion of a graph into loop groups,
source emission per target, building.

`compile_graph(graph)` returns a `Program`: the partition, the generated source
and the Numba entry function. The back end reads the front end's IR and
primitive registry; nothing here imports jitgraph's public API, which calls in.
"""
import os
import sys

import numpy as np

from . import collector, compile_server, index, native
from .products import rewrite_products
from .scatters import accumulate_scatters, window_scatters
from .schedule import sink_updates
from . import ops_cpu, ops_cuda  # noqa: F401  (register the library-op lowerings)
from . import ops_linalg, ops_order  # noqa: F401  (lowerings of the LAPACK and order families)
from .build import cache_dir, cache_enabled, load_cached_kernel, load_kernel, module_dispatchers
from . import emit_cpu
from .emit_cpu import Emitter, _owned, python_entry_pays, uses_threads
from .emit_cuda import compile_graph_cuda
from .fusion import Group, OpStep, Partition
from .memory import MemoryPlan, MemoryReport
from .program import IndexedProgram, Program
from .pymode import python_kernel


VIEW_FUNCTIONS_MAX_RATIO = 2


def generate(graph, parallel=True, fastmath=("reassoc", "contract", "arcp")):
    """(partition, source, emitter) for `graph` without compiling anything."""
    part, source, em = _emit(graph, parallel, fastmath)
    if not em.driver and (native.ENABLED and not emit_cpu.compiled_entry_ops(graph)
                          or len(em.body) > emit_cpu.ENTRY_MAX_LINES) and python_entry_pays(graph, part):
        # a long compiled entry compiles slower than its groups' functions apart, and a Python
        # entry's functions compile without Numba (codegen/native.py) (emit_cpu)
        part, source, em = _emit(graph, parallel, fastmath, python_entry=True)
    if em.driver and part.index_views - part.recomputed:
        # A long program's Python entry compiles one function per distinct loop text, which
        # the layers of a deep network share. A slice's start is a parameter of those
        # functions (GroupEmitter._offset), but other index views write their offsets into
        # the text (written as literals, each gate's slice of an unrolled LSTM had made 13
        # functions 111, and its compile 5 s 31 s), so such a program keeps its copies when
        # views would multiply the functions to compile.
        plain, source_plain, em_plain = _emit(graph, parallel, fastmath, python_entry=em.python_entry,
                                              index_views=False)
        if len(em.functions) > VIEW_FUNCTIONS_MAX_RATIO * len(em_plain.functions):
            return plain, source_plain, em_plain
    return part, source, em


def _emit(graph, parallel, fastmath, python_entry=False, index_views=True):
    graph = sink_updates(accumulate_scatters(window_scatters(rewrite_products(graph))))
    part = Partition(graph, index_views=index_views)
    em = Emitter(graph, part, parallel=parallel, fastmath=fastmath, python_entry=python_entry)
    return part, em.emit(), em


def memory_report(graph, parallel=True):
    """The MemoryReport of `graph` as `compile_graph` would build it (partitions, plans and
    emits the source; compiles nothing)."""
    _, _, em = generate(graph, parallel)
    return em.plan.report(graph.meta.get("remat"))


def compile_graph(graph, parallel=True, fastmath=("reassoc", "contract", "arcp"), backend="numba",
                  target="cpu", threads=True, indexed_only=False):
    """Fuse, emit and build `graph`; backend "python" runs the source without Numba.

    target "cuda" builds numba.cuda kernels plus host code (codegen/emit_cuda.py).
    threads=False builds a parallel program without its parallel chunks (each chunk body is
    a function of its own, ~0.1-0.2 s of compile), in plain loops with single-threaded
    products: it compiles sooner and computes the same values up to rounding. The threaded
    build computes the same bits on any number of threads. `Program.threads` says whether
    the program runs threads (parallel chunks or threaded products), `Program.upgradable`
    whether a threaded build would add some.

    A graph built before (in any process sharing the cache directory) is not generated
    again: its kernel module is found through the program index (codegen/index.py).
    indexed_only=True returns None instead of generating.
    """
    if target == "cuda":
        return compile_graph_cuda(graph)
    if target != "cpu":
        raise ValueError(f"target must be 'cpu' or 'cuda', got {target!r}")
    key = None
    if backend == "numba" and cache_enabled():
        key = index.key(graph, parallel=parallel, fastmath=tuple(fastmath), threads=threads)
        program = _indexed(graph, key)
        if program is not None:
            return program
        # a program to compile, most likely: where Numba will compile it (its control flow
        # keeps a compiled entry), the compile server's imports (about a second) overlap the
        # generation. Not started for a program loaded from the cache, where it would only
        # compete with the first calls (and look like another process's load to their thread
        # policy, jitgraph/threads.py), nor for one whose loops compile natively: its imports
        # then took a core from the compile and the interpreted calls (see _needs_server)
        if _numba_entry_likely(graph):
            compile_server.start()
    if indexed_only:
        return None
    with collector.paused():     # (a background build's generation: codegen/collector.py)
        part, source, em = generate(graph, parallel, fastmath)
        upgradable = not threads and uses_threads(source)
        gen_parallel = parallel and not upgradable
        if upgradable:
            part, source, em = generate(graph, False, fastmath)
        if backend == "python":
            kernel, module, path = python_kernel(source), None, None
        else:
            kernel, module, path = load_kernel(source)
    if key is not None and _needs_server(module):
        compile_server.start()
    consts = em.const_values()
    program = Program(graph, part, source, kernel, module, path, list(em.sizes.values), consts, em.plan)
    program.threads = uses_threads(source)
    program.upgradable = upgradable
    program.generate_options = (gen_parallel, tuple(fastmath))
    if key is not None and path is not None and os.path.isfile(path):
        record = _record(graph, em, program)
        if record is not None:
            index.store(key, record)
    return program


def _numba_entry_likely(graph):
    """Will Numba compile this program's entry (as far as the graph tells before generating it):
    native compiles off, or control flow (emit_cpu.python_entry_pays)?"""
    return not native.ENABLED or emit_cpu.has_control_flow(graph)


def _needs_server(module):
    """Does a generated module leave anything to Numba (a compiled entry, or a function of a
    Python entry's outside the native language), which the compile server compiles?"""
    mod = sys.modules.get(module) if module else None
    return mod is not None and bool(module_dispatchers(mod))


def _record(graph, em, program):
    """What `_indexed` needs to make `program` again without generating it, or None when its
    constants do not all come from the graph's own nodes or plain arrays."""
    pos = {n.id: k for k, n in enumerate(graph.nodes)}
    if any(n.id not in pos for n in em.const_args + em.scalar_consts):
        return None
    return dict(module=program.module, sizes=[int(v) for v in program.sizes],
                const_nodes=[pos[n.id] for n in em.const_args],
                extra_consts=[np.asarray(v) for _, v in em.extra_consts],
                scalar_nodes=[pos[n.id] for n in em.scalar_consts],
                ws_bytes=program.ws_bytes, ws_offsets=program.ws_offsets,
                out_specs=[(tuple(s), np.dtype(d).str) for s, d in program.out_specs],
                threads=program.threads, upgradable=program.upgradable,
                generate_options=program.generate_options)


def _indexed(graph, key):
    """The Program of `graph` from the index record under `key` (its kernel module imported,
    nothing generated), or None."""
    rec = index.load(key)
    if rec is None:
        return None
    try:
        loaded = load_cached_kernel(rec["module"])
        if loaded is None:
            return None
        nodes = graph.nodes
        consts = [_owned(nodes[k].value) for k in rec["const_nodes"]] + list(rec["extra_consts"])
        if rec["scalar_nodes"]:
            consts.append(np.array([nodes[k].value.item() for k in rec["scalar_nodes"]], dtype=np.float64))
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    kernel, module, path = loaded
    return IndexedProgram(graph, kernel, module, path, rec, consts, generate)


__all__ = ["compile_graph", "generate", "memory_report", "Program", "Partition", "Group", "OpStep", "MemoryPlan",
           "MemoryReport", "cache_dir",
           "cache_enabled", "load_kernel"]
