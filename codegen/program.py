"""`Program`: a compiled graph, and how to call it."""
import numpy as np


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
        self.threads = self.upgradable = False    # runs threads / a threaded build would add some
        # workspace: bytes of the arena and the offsets of its slots, for these sizes; the
        # kernel takes (ws, wofs) after the constants when ws_bytes is not None
        self.ws_bytes, self.ws_offsets = None, None
        self.new_workspace = _host_workspace     # the CUDA target allocates on the device
        if plan is not None and plan.has_workspace:
            self.ws_bytes, self.ws_offsets = plan.layout()
        # (shape, dtype) of each output buffer the kernel takes last (o0, o1, ...): computed below
        self.out_specs = []
        if plan is not None:
            by_id = {n.id: n for n in plan.graph.nodes}     # the graph the code was made of
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


class IndexedProgram(Program):
    """A Program made from its index record (codegen/index.py): the kernel module is imported
    and the call's values are known; the partition, the memory plan and the source are made
    again (by `generate`, or read from the module's file) only when something reads them."""

    def __init__(self, graph, kernel, module, path, record, consts, generate):
        self.graph = graph
        self.kernel, self.module, self.path = kernel, module, path
        self.sizes = list(record["sizes"])
        self.consts = consts
        self.threads, self.upgradable = record["threads"], record["upgradable"]
        self.generate_options = record["generate_options"]
        self.ws_bytes, self.ws_offsets = record["ws_bytes"], record["ws_offsets"]
        self.new_workspace = _host_workspace
        self.out_specs = [(tuple(s), np.dtype(d)) for s, d in record["out_specs"]]
        self._generate = generate
        self._generated = None
        self._source = None

    def _regenerate(self):
        if self._generated is None:
            parallel, fastmath = self.generate_options
            self._generated = self._generate(self.graph, parallel, fastmath)
        return self._generated

    @property
    def partition(self):
        return self._regenerate()[0]

    @property
    def plan(self):
        return self._regenerate()[2].plan

    @property
    def source(self):
        if self._source is None:
            with open(self.path, encoding="utf-8", newline="") as f:
                self._source = f.read()
        return self._source
