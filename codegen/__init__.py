"""The back end: fusion of a graph into loop groups, CPU source emission, building.

`compile_graph(graph)` returns a `Program`: the partition, the generated source
and the Numba entry function. Nothing here imports jitgraph's public API; the
front end calls in.
"""
import numpy as np

from .build import cache_dir, cache_enabled, load_kernel
from .emit_cpu import Emitter
from .fusion import Group, OpStep, Partition
from .memory import MemoryPlan, MemoryReport


def _host_workspace(nbytes):
    return np.empty(nbytes, np.uint8)


class Program:
    """A compiled graph: `kernel(dims, *inputs, *consts[, ws, wofs], *out_buffers)` returns the
    graph's outputs (`run(*inputs)` supplies everything after the inputs)."""

    def __init__(self, graph, partition, source, kernel, module, path, sizes, consts, plan=None):
        self.graph = graph
        self.partition = partition
        self.source = source
        self.kernel = kernel
        self.module = module
        self.path = path
        self.sizes = sizes        # values of n0, n1, ... in `dims`
        self.consts = consts      # constant arrays passed after the inputs
        self.plan = plan          # the MemoryPlan, or None
        # workspace: bytes of the arena and the offsets of its slots, for these sizes; the
        # kernel takes (ws, wofs) after the constants when ws_bytes is not None
        self.ws_bytes, self.ws_offsets = None, None
        self.new_workspace = _host_workspace     # the CUDA target allocates on the device
        if plan is not None and plan.has_workspace:
            self.ws_bytes, self.ws_offsets = plan.layout()
        # (shape, dtype) of each output buffer the kernel takes last (o0, o1, ...): computed below
        self.out_specs = []
        if plan is not None:
            by_id = {n.id: n for n in graph.nodes}
            for nid, k in sorted(plan.out_index.items(), key=lambda kv: kv[1]):
                n = by_id[nid]
                self.out_specs.append((tuple(n.shape) or (1,), n.dtype))

    def run(self, *inputs):
        """Call the kernel on flattened inputs (0-d as shape (1,)) with a new workspace and new
        output buffers; jit's per-call wrapper does the same, keeping the buffers."""
        args = [np.array(self.sizes, np.int64), *inputs, *self.consts]
        if self.ws_bytes is not None:
            args += [self.new_workspace(self.ws_bytes), self.ws_offsets]
        args += [np.empty(shape, dt) for shape, dt in self.out_specs]
        return self.kernel(*args)


def generate(graph, parallel=True, fastmath=("reassoc", "contract", "arcp"), cache=None):
    """(partition, source, emitter) for `graph` without compiling anything."""
    part = Partition(graph)
    em = Emitter(graph, part, parallel=parallel, fastmath=fastmath,
                 cache=cache_enabled() if cache is None else cache)
    source = em.emit()
    return part, source, em


def memory_report(graph, parallel=True):
    """The MemoryReport of `graph` as `compile_graph` would build it (partitions, plans and
    emits the source; compiles nothing)."""
    _, _, em = generate(graph, parallel)
    return em.plan.report(graph.meta.get("remat"))


def compile_graph(graph, parallel=True, fastmath=("reassoc", "contract", "arcp"), backend="numba",
                  target="cpu"):
    """Fuse, emit and build `graph`; backend "python" runs the source without Numba.

    target "cuda" builds numba.cuda kernels plus host code (codegen/emit_cuda.py).
    """
    if target == "cuda":
        from .emit_cuda import compile_graph_cuda
        return compile_graph_cuda(graph)
    if target != "cpu":
        raise ValueError(f"target must be 'cpu' or 'cuda', got {target!r}")
    part, source, em = generate(graph, parallel, fastmath)
    if backend == "python":
        from .pymode import python_kernel
        kernel, module, path = python_kernel(source), None, None
    else:
        kernel, module, path = load_kernel(source)
    consts = em.const_values()
    return Program(graph, part, source, kernel, module, path, list(em.sizes.values), consts, em.plan)


__all__ = ["compile_graph", "generate", "memory_report", "Program", "Partition", "Group", "OpStep", "MemoryPlan",
           "MemoryReport", "cache_dir",
           "cache_enabled", "load_kernel"]
