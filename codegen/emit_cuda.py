"""CUDA target: each step of the CPU partition becomes a `numba.cuda` kernel, plus host code.

`compile_graph_cuda(graph)` fuses `graph` with the same `codegen.fusion.Partition`
as the CPU target and writes one module (imported through `codegen.build.load_kernel`,
so tracebacks point at real lines) holding:

* one kernel per loop group. A flat group (no inner axes) is a grid-stride loop,
  one thread per point. A row group (softmax, logsumexp, layer norm) gives each
  row a segment of a block (one row per block, or several short rows per block),
  whose threads stride over the row in each pass and combine their partial
  reductions through shared memory in a fixed tree order.
* "sink" reductions (a loss summed over everything, a bias gradient summed over
  rows) never use atomics: every thread accumulates its own points, a block
  (or, for column sums, each thread of a fixed column set) writes a partial, and a
  second kernel combines the partials in index order. Launch sizes depend only on
  the array sizes (and the constants of `cuda_runtime`), so every result is
  bitwise reproducible from run to run. A sink
  of any other shape stores its input and is reduced by a chunked two-pass kernel.
* a simple kernel per transpose, slice, pad, concatenate, gather, scatter_add (one
  thread per (outer, inner) column, looping over the indices in order, so repeats
  accumulate deterministically); a reshape is a device view. Out-of-range indices
  set a flag that the host checks at the end of the call (IndexError).
* matrix products through `cuda_runtime.matmul`: cuBLAS via CuPy when CuPy is
  importable at run time, else a tiled shared-memory kernel. A transpose read only
  by matrix products is never stored: the product reads its input transposed.
* `kernel(dims, *inputs, *consts, ws, wofs)`, the host function: it launches the
  kernels in order on the default stream and returns one array per graph output
  (0-d outputs as shape (1,) arrays), like the CPU kernel. Stored values are views
  of slots of the device workspace arena `ws` (byte offsets `wofs`), planned by
  `codegen/memory.py` like the CPU's (kept between calls by the caller; kernels on
  the default stream run in order, so a slot is reused only after its last
  reader); outputs, materialized broadcasts and block partial sums are allocated
  per call.

Placement rule: if no input lives on the GPU, the NumPy inputs are copied to the
device once per call and the results come back as NumPy arrays. If any input
already lives on the GPU (anything exposing `__cuda_array_interface__`: Numba
device arrays, CuPy arrays, PyTorch CUDA tensors; wrapped with
`numba.cuda.as_cuda_array`), device inputs are used in place, without a copy
(host inputs are copied up), and the results stay on the device as Numba device
arrays. Constant arrays of the graph are copied to the device once per process.

Without a GPU (and without the simulator, NUMBA_ENABLE_CUDASIM=1) building a CUDA
program raises `CudaUnavailableError` (a `NotSupportedError`); there is no CPU
fallback. numba-cuda is an optional dependency (`pip install jitgraph[cuda]`), only
imported when a CUDA program is built (this module reads its launch constants from
`cuda_config`, and only generated modules import `cuda_runtime`). Control flow (`cond`, `scan`, loops) has no
CUDA lowering yet and raises `NotSupportedError`.
"""
import importlib.util

import numpy as np

from jitgraph.errors import NotSupportedError
from jitgraph.ops.registry import PRIMS
from jitgraph.ops.registry import Lowerings
from jitgraph.ops.scalar import DTYPES, FUNCTIONS

from . import cuda_config
from .build import load_kernel
from .fusion import Group, Partition
from .lower import EmitterBase, GroupPlan, acc_dtype
from .memory import MemoryPlan
from .program import Program
from .source import RecordingSizes, literal, np_dtype

SEGMENT = {"reduce_sum": "_rt.seg_sum", "reduce_prod": "_rt.seg_prod",
           "reduce_max": "_rt.seg_max", "reduce_min": "_rt.seg_min"}
NB_TYPES = {"float64": "float64", "float32": "float32", "int64": "int64", "int32": "int32",
            "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "boolean"}

# op name -> lowering of a library op (its own kernel or host call): fn(em, node, v); see ops_cuda.py
OPS = Lowerings()



def spell(name, dtype):
    """The scalar language on the GPU: the math module's functions, by their C names, through
    `cuda_runtime.fmath` (NumPy's under the simulator); NaN-propagating max and min."""
    if name in DTYPES:
        return f"np.{name}", None
    if name in ("abs", "max", "min"):
        return {"abs": "abs", "max": "_max", "min": "_min"}[name], None
    if FUNCTIONS[name].c is None:
        raise NotSupportedError(f"the CUDA target has no spelling of the scalar function {name!r}")
    return f"_m.{FUNCTIONS[name].c}", None


class CudaUnavailableError(NotSupportedError):
    """The CUDA target cannot run here: numba-cuda is missing, or no CUDA device (or simulator)."""


def cuda_unavailable_reason():
    """None when numba.cuda can run kernels in this process, else what is missing and what to do."""
    if importlib.util.find_spec("numba_cuda") is None:
        return ("the CUDA target needs numba-cuda, which is not installed: "
                "pip install jitgraph[cuda]")
    from numba import cuda
    if cuda.is_available():
        return None
    return ("no CUDA device was found (numba.cuda.is_available() is False: no NVIDIA GPU, or no "
            "driver, visible to this process). Run on a machine with a GPU, or use the CUDA "
            "simulator (slow, for tests and debugging) by setting NUMBA_ENABLE_CUDASIM=1 in the "
            "environment before Python starts.")


def require_cuda():
    reason = cuda_unavailable_reason()
    if reason is not None:
        raise CudaUnavailableError(reason)


def compile_graph_cuda(graph):
    """Fuse, emit and import the CUDA program for `graph`; returns a `codegen.Program`."""
    require_cuda()
    part, source, em = generate_cuda(graph)
    kernel, module, path = load_kernel(source)
    consts = [n.value for n in em.const_args]
    prog = Program(graph, part, source, kernel, module, path, list(em.sizes.values), consts, em.plan)
    rt = kernel.__globals__["_rt"]        # the generated module's cuda_runtime
    prog.new_workspace = lambda nbytes: rt.empty((nbytes,), np.uint8)
    return prog


def generate_cuda(graph, tpb=cuda_config.TPB):
    """(partition, source, emitter) for `graph`, without importing the module; `tpb` is the
    number of threads per block."""
    part = Partition(graph, index_views=False, recompute=False)    # kernels read operands at the loop's index
    em = CudaEmitter(graph, part, tpb=tpb)
    return part, em.emit(), em


def unravel(var, shape, names, S, ind):
    """Lines setting names[d] to the index along shape[d] of row-major linear index `var`;
    returns (lines, index expressions), "0" for unit dimensions."""
    dims = [d for d in range(len(shape)) if shape[d] != 1]
    ix = ["0"] * len(shape)
    lines = []
    for d in dims:
        ix[d] = names[d]
    if len(dims) == 1:
        lines.append(f"{ind}{names[dims[0]]} = {var}")
    elif dims:
        rest = var
        for d in reversed(dims[1:]):
            lines.append(f"{ind}{names[d]} = {rest} % {S(shape[d])}")
            lines.append(f"{ind}rem = {rest} // {S(shape[d])}")
            rest = "rem"
        lines.append(f"{ind}{names[dims[0]]} = {rest}")
    return lines, ix


def _index(ix):
    return ", ".join(ix) if ix else "0"


class Kernel:
    """One `@cuda.jit` function: its body, and the host expressions its parameters take.

    Its body names sizes through `S`, which records them: the size symbols it uses are
    parameters too."""

    def __init__(self, name, title, sizes):
        self.name = name
        self.title = title
        self.S = RecordingSizes(sizes)
        self.lines = []
        self.scalars = []     # (parameter, host expression), first in the signature
        self.arrays = {}      # parameter -> host expression

    def scalar(self, param, host):
        self.scalars.append((param, host))
        return param

    def array(self, param, host=None):
        self.arrays.setdefault(param, param if host is None else host)
        return param

    def params(self):
        own = {p for p, _ in self.scalars}
        syms = sorted(set(self.S.used) - own, key=lambda s: int(s[1:]))
        ps = self.scalars + [(s, s) for s in syms] + list(self.arrays.items())
        return [p for p, _ in ps], [h for _, h in ps]

    def source(self):
        params, _ = self.params()
        return (["", "", f"# {self.title}", "@cuda.jit(cache=True)",
                 f"def {self.name}({', '.join(params)}):"] + ["    " + ln for ln in self.lines])

    def launch(self, grid, block="TPB"):
        _, hosts = self.params()
        return f"{self.name}[{grid}, {block}]({', '.join(hosts)})"


class CudaEmitter(EmitterBase):
    def __init__(self, graph, partition, tpb):
        super().__init__(graph, partition)
        self.tpb = tpb
        self.kernels = []
        self.host = []
        self.stored = set(partition.materialized)
        self.defined = set()      # virtual nodes materialized on the host
        self.views = set()        # ids of stored values that are views of another array
        self.uses_err = False
        # transposes of the last two axes read only by matmuls: the matmul reads the
        # untransposed array in transposed order instead of a stored copy
        users = graph.users()
        outs = {n.id for n in graph.outputs}
        self.matmul_t = {
            n.id for n in graph.nodes
            if n.op == "transpose" and n.ndim >= 2 and n.id not in outs and users[n.id]
            and tuple(n.p["perm"]) == tuple(range(n.ndim - 2)) + (n.ndim - 1, n.ndim - 2)
            and all(u.op == "matmul" for u in users[n.id]) and n.id not in partition.virtual}
        # stored values live in slots of a device workspace arena planned like the CPU's
        # (codegen/memory.py): reshapes are views, matmul_t transposes are read in place;
        # no in-place loops, and outputs are new device arrays
        views = {n.id for n in graph.nodes if n.op == "reshape" and n.id in partition.materialized}
        self.plan = MemoryPlan(graph, partition, self.sizes, views=views | self.matmul_t, in_place=False,
                               plannable=lambda n: True, recycle_outputs=False)

    spell = staticmethod(spell)

    def shared(self, dtype):
        name = NB_TYPES[acc_dtype(dtype).name]
        return f"sh_{name}", f"cuda.shared.array(TPB, _nt.{name})"

    # ---- reading stored values inside a kernel ----------------------------------------------
    def read(self, kern, x, ix, flat=None):
        """Expression for value x at index ix (one expression per dim of x), following virtual
        broadcasts and unit reshapes down to the stored array; `flat` is the linear index when
        the kernel reads full-size arrays through 1-D views."""
        x, ix = self.part.resolve_index(x, ix)
        if self.is_scalar_const(x):
            return literal(x.value, x.dtype)
        v = self.var(x)
        if flat is not None and x.size != 1:
            kern.array(v + "_f", f"{v}.reshape({self.sizes.product(x.shape)})")
            return f"{v}_f[{flat}]"
        kern.array(v)
        return f"{v}[{_index(ix) if x.ndim else '0'}]"

    # ---- host side ------------------------------------------------------------------------------
    def buffer(self, node):
        """A host expression for a new device array for node's value: its workspace slot, or a
        new allocation for values outside the plan (outputs, materialized broadcasts)."""
        shape, dt = self.sizes.shape(node.shape), np_dtype(node.dtype)
        slot = self.plan.slot_of.get(node.id)
        return f"_rt.empty({shape}, {dt})" if slot is None else self.slot(slot, node.shape, node.dtype)

    def host_array(self, node):
        """A host expression for node's value as a device array of its shape."""
        if node.id in self.part.virtual:
            if node.id not in self.defined:
                self.defined.add(node.id)
                self.emit_pointwise(node, lambda k, ix: self.read(k, node, ix), "materialize")
            return self.var(node)
        if self.is_scalar_const(node):
            return f"_rt.const_scalar({literal(node.value, node.dtype)}, {np_dtype(node.dtype)})"
        return self.var(node)

    def emit(self):
        for step in self.part.steps:
            if isinstance(step, Group):
                GroupKernel(self, step).emit()
            else:
                self.emit_op(step.node)
        outs, fresh, seen = [], [], set()
        for n in self.graph.outputs:
            v = self.host_array(n)
            r = self.part.resolve(n)
            owned = n.id in self.defined or (r.op not in ("input", "const") and r.id not in self.views)
            fresh.append(owned and v not in seen)
            seen.add(v)
            outs.append(v)
        self.host.append(f"return _rt.outputs(on_device, ({''.join(o + ', ' for o in outs)}), {tuple(fresh)!r})")
        return self.render()

    def render(self):
        g = self.graph
        ins = [self.var(n) for n in g.inputs]
        consts = [self.var(n) for n in self.const_args]
        head = [
            f"# Generated by jitgraph from graph {g.meta.get('name', '?')!r} for the CUDA target. Do not",
            "# edit: this file is named after the hash of its content and rewritten never.",
            "import numpy as np",
            "from numba import cuda",
            "from numba.cuda import types as _nt",
            "from jitgraph.codegen import cuda_runtime as _rt",
            "from jitgraph.codegen.cuda_runtime import fmath as _m, vmax as _max, vmin as _min",
            "",
            f"TPB = {self.tpb}  # threads per block: codegen.cuda_config.TPB when this was generated",
            "_IN_DTYPES = (" + "".join(f"{np_dtype(n.dtype)}, " for n in g.inputs) + ")",
        ]
        src = list(head)
        for k in self.kernels:
            src += k.source()
        args = ["dims"] + ins + consts + (["ws", "wofs"] if self.plan.has_workspace else [])
        src += ["", "", f"def kernel({', '.join(args)}):"]
        body = []
        if ins:
            body.append(f"on_device, ({', '.join(ins)},) = _rt.inputs(({', '.join(ins)},), _IN_DTYPES)")
        else:
            body.append("on_device = False")
        for c in consts:
            body.append(f"{c} = _rt.const({c})")
        for k, d in enumerate(self.sizes.values):
            body.append(f"{self.sizes(d)} = int(dims[{k}])")
        if self.uses_err:
            body.append("err = _rt.error_flag()")
        body += self.host[:-1]
        if self.uses_err:
            body.append("_rt.check_index(err)")
        body.append(self.host[-1])
        src += ["    " + ln for ln in body]
        return "\n".join(src) + "\n"

    def kernel(self, title):
        k = Kernel(f"k{len(self.kernels)}", title, self.sizes)
        self.kernels.append(k)
        return k

    # ---- one-thread-per-output-point kernels (shape ops, materialized broadcasts) -----------------
    def emit_pointwise(self, node, value, what=None):
        """out[ix] = value(kernel, ix) for every point of node's shape, in a grid-stride loop.
        `value` returns an expression, or (lines, expression)."""
        v = self.var(node)
        k = self.kernel(f"{what or node.op} -> {self.names[node.id]}")
        k.lines.append(self.comment(node))
        total = self.sizes.product(node.shape)
        k.scalar("total", total)
        names = [f"i{d}" for d in range(node.ndim)]
        k.lines.append("for p in range(cuda.grid(1), total, cuda.gridsize(1)):")
        lines, ix = unravel("p", node.shape, names, k.S, "    ")
        k.lines += lines
        got = value(k, ix)
        pre, expr = got if isinstance(got, tuple) else ([], got)
        k.lines += ["    " + ln for ln in pre]
        k.array(v)
        k.lines.append(f"    {v}[{_index(ix) if node.ndim else '0'}] = {expr}")
        self.host.append(self.comment(node))
        self.host.append(f"{v} = {self.buffer(node)}")
        self.host.append(k.launch(f"_rt.blocks({total}, TPB)"))

    def emit_op(self, node):
        if node.id in self.matmul_t:
            self.host.append(self.comment(node) + "  (the matmuls read the input transposed)")
            return
        lower = OPS.get(node.op)
        if lower is None:
            prim = PRIMS[node.op]
            if prim.host_only:
                raise NotSupportedError(f"the CUDA target does not support {prim.host_only} yet (op "
                                        f"{node.op!r}); use target='cpu' for this function")
            raise NotSupportedError(f"codegen: no CUDA lowering for op {node.op!r}")
        lower(self, node, self.var(node))



# ---- loop groups ----------------------------------------------------------------------------------------
class GroupKernel:
    """Emits one loop group: its kernel, the host lines launching it, and the combine passes."""

    def __init__(self, em, g):
        self.em, self.g = em, g
        self.members = g.members
        self.scalar_sinks, self.col_sinks, self.other_sinks = [], [], []
        self.k = None
        self.flat = False
        self.plan = None

    def _classify(self):
        g, em = self.g, self.em
        row = g.k < g.rank
        for s in g.nodes:
            if self.members[s.id] != "sink":
                continue
            x = s.inputs[0]
            axes = tuple(s.p["axes"])
            if s.size == 1:
                self.scalar_sinks.append(s)
            elif not row and len(axes) < g.rank and axes == tuple(range(len(axes))) and axes \
                    and tuple(x.shape) == g.shape:
                self.col_sinks.append(s)       # flat group, reduced over leading axes
            elif row and self.plan.level(x) == 2 and axes == tuple(range(g.k)) and tuple(x.shape) == g.shape:
                self.col_sinks.append(s)       # row group, reduced over the outer axes
            else:
                self.other_sinks.append(s)
                if x.id in self.members:
                    em.stored.add(x.id)

    # ---- expressions ------------------------------------------------------------------------------------
    def value(self, x, target_shape):
        if x.id in self.members:
            return self.em.scalar(x)
        off = len(target_shape) - x.ndim
        ix = [f"i{off + d}" for d in range(x.ndim)]
        return self.em.read(self.k, x, ix, flat="p" if self.flat else None)

    def member_line(self, n, ind, lines):
        lines.append(ind + self.plan.node_line(n, self.value, self.em))
        if n.id in self.em.stored:
            lines.append(ind + self.store_line(n))

    def store_line(self, n):
        v = self.em.var(n)
        if self.flat:
            self.k.array(v + "_f", f"{v}.reshape({self.em.sizes.product(n.shape)})")
            return f"{v}_f[p] = {self.em.scalar(n)}"
        self.k.array(v)
        ix = ["0" if n.shape[d] == 1 else f"i{d}" for d in range(n.ndim)]
        return f"{v}[{_index(ix) if n.ndim else '0'}] = {self.em.scalar(n)}"

    def _update(self, s, acc, x):
        """`acc = acc (op) value of x`, with the node's comment."""
        return f"{self.em.reduce_update(s.op, acc, self.value(x, x.shape), s.dtype)}  {self.em.comment(s)}"

    def acc(self, s):
        return f"{self.em.scalar(s)}_acc"

    def part(self, s):
        return f"{self.em.var(s)}_part"

    # ---- emission --------------------------------------------------------------------------------------------
    def emit(self):
        g, em = self.g, self.em
        self.plan = GroupPlan(em, g, em.stored, index_sinks=False)
        self._classify()
        self.plan.loop_sinks = self.scalar_sinks + self.col_sinks    # the others get their own kernels
        self.k = em.kernel(f"group {g.seq}: {self.title()}")
        em.host.append(f"# group {g.seq}: {self.title()}")
        for n in g.nodes:
            if self.members[n.id] != "sink" and n.id in em.stored:
                em.host.append(f"{em.var(n)} = {em.buffer(n)}")
        if g.rank == 0:
            self.emit_scalar_group()
        elif g.k == g.rank:
            self.emit_flat()
        else:
            self.emit_rows()
        for s in self.other_sinks:
            self.emit_reduction(s)

    def title(self):
        g = self.g
        kind = "scalar" if g.rank == 0 else "flat grid-stride loop" if g.k == g.rank else \
            f"rows over outer axes {tuple(range(g.k))}"
        return f"fused loop over {self.em.sizes.shape(g.shape) if g.rank else '()'} ({kind}), {len(g.nodes)} nodes"

    def _finish_scalar_sinks(self, lines, tid="tid"):
        """Block-reduce each thread's accumulator; thread 0 writes the block's partial."""
        for s in self.scalar_sinks:
            sh, decl = self.em.shared(s.dtype)
            if f"{sh} = {decl}" not in lines:
                lines.append(f"{sh} = {decl}")
            lines.append(f"{self.acc(s)} = {SEGMENT[s.op]}({sh}, {tid}, {tid}, TPB, {self.acc(s)})")
        lines.append(f"if {tid} == 0:")
        for s in self.scalar_sinks:
            self.k.array(self.part(s))
            lines.append(f"    {self.part(s)}[cuda.blockIdx.x] = {self.acc(s)}")

    def _combine_host(self, s, part_shape):
        em = self.em
        v = em.var(s)
        em.host.append(f"{v} = {em.buffer(s)}")
        em.host.append(f"_rt.combine({s.op!r}, {self.part(s)}.reshape({part_shape}), "
                       f"{v}.reshape({em.sizes.product(s.shape)}))  {em.comment(s)}")

    def _partials_host(self, sinks, rows, seq):
        for s in sinks:
            self.em.host.append(f"{self.part(s)} = _rt.empty({rows}, {np_dtype(acc_dtype(s.dtype))})")

    def emit_flat(self):
        g, em, k = self.g, self.em, self.k
        if not (self.scalar_sinks or self.col_sinks
                or any(self.members[n.id] != "sink" for n in g.nodes)):
            em.kernels.remove(k)   # only sinks reduced by their own kernels
            return
        self.flat = self.plan.flat
        total = em.sizes.product(g.shape)
        seq = g.seq
        lines = k.lines
        k.scalar("T", f"T{seq}")
        k.scalar("total", total)
        lines.append("t = cuda.grid(1)")
        for s in self.scalar_sinks + self.col_sinks:
            lines.append(f"{self.acc(s)} = {em.reduce_init(s.op, s.dtype)}")
        lines.append("if t < T:")
        lines.append("    for p in range(t, total, T):")
        ind = "        "
        if not self.flat:
            ul, _ = unravel("p", g.shape, [f"i{d}" for d in range(g.rank)], k.S, ind)
            lines += ul
        for n in g.nodes:
            if self.members[n.id] != "sink":
                self.member_line(n, ind, lines)
        for s in self.scalar_sinks + self.col_sinks:
            lines.append(ind + self._update(s, self.acc(s), s.inputs[0]))
        for s in self.col_sinks:
            # T is a multiple of every column count, so thread t always meets columns t % ncol
            k.array(self.part(s))
            lines += ["if t < T:", f"    {self.part(s)}[t] = {self.acc(s)}"]
        if self.scalar_sinks:
            lines.append("tid = cuda.threadIdx.x")
            self._finish_scalar_sinks(lines)
        # column counts are products of trailing sizes, so the largest is a multiple of the others
        widest = max(self.col_sinks, key=lambda s: s.size, default=None)
        ncol = em.sizes.product(widest.shape) if widest is not None else "1"
        em.host.append(f"T{seq} = _rt.flat_threads({total}, {ncol}, TPB)")
        em.host.append(f"B{seq} = -(-T{seq} // TPB)")
        self._partials_host(self.scalar_sinks, f"(B{seq},)", seq)
        self._partials_host(self.col_sinks, f"(T{seq},)", seq)
        em.host.append(k.launch(f"B{seq}"))
        for s in self.scalar_sinks:
            self._combine_host(s, f"(B{seq}, 1)")
        for s in self.col_sinks:
            nc = em.sizes.product(s.shape)
            self._combine_host(s, f"(T{seq} // max({nc}, 1), {nc})")

    def emit_scalar_group(self):
        g, em, k = self.g, self.em, self.k
        for n in g.nodes:
            if self.members[n.id] == "sink":
                em.host.append(f"{em.var(n)} = {em.buffer(n)}")
            self.member_line(n, "", k.lines)
        em.host.append(k.launch("1", "1"))

    # ---- row groups ------------------------------------------------------------------------------------
    def emit_rows(self):
        g, em, k = self.g, self.em, self.k
        m = self.members
        seq = g.seq
        lines = k.lines
        nrows, ninner = em.sizes.product(g.shape[:g.k]), em.sizes.product(g.shape[g.k:])
        k.scalar("nrows", nrows)
        k.scalar("ninner", ninner)
        k.scalar("rw", f"rw{seq}")
        lines += ["tid = cuda.threadIdx.x", "lane = tid % rw", "rpb = TPB // rw",
                  "slot = cuda.blockIdx.x * rpb + tid // rw"]
        shared_decls = {em.shared(n.dtype) for n in g.nodes if n.kind == "reduce" and m[n.id] == 1}
        for decl in sorted(shared_decls):
            lines.append(f"{decl[0]} = {decl[1]}")
        for s in self.scalar_sinks:
            lines.append(f"{self.acc(s)} = {em.reduce_init(s.op, s.dtype)}")
        for s in self.col_sinks:
            k.array(self.part(s))
            lines += ["for q in range(lane, ninner, rw):",
                      f"    {self.part(s)}[slot, q] = {em.reduce_init(s.op, s.dtype)}"]
        lines += ["for row0 in range(cuda.blockIdx.x * rpb, nrows, cuda.gridDim.x * rpb):",
                  "    row = row0 + tid // rw",
                  "    active = row < nrows",
                  "    if not active:",
                  "        row = nrows - 1  # idle threads of the last block read a real row, store nothing"]
        ind = "    "
        ul, _ = unravel("row", g.shape[:g.k], [f"i{d}" for d in range(g.k)], k.S, ind)
        lines += ul
        lines += self.plan.row_body(self, ind)
        if self.scalar_sinks:
            self._finish_scalar_sinks(lines)
        em.host.append(f"rw{seq} = _rt.row_width({ninner}, TPB)")
        cols = ", column_sums=True" if self.col_sinks else ""
        em.host.append(f"B{seq} = _rt.row_blocks({nrows}, rw{seq}, TPB{cols})")
        self._partials_host(self.scalar_sinks, f"(B{seq},)", seq)
        self._partials_host(self.col_sinks, f"(B{seq} * (TPB // rw{seq}), {ninner})", seq)
        em.host.append(k.launch(f"B{seq}"))
        for s in self.scalar_sinks:
            self._combine_host(s, f"(B{seq}, 1)")
        for s in self.col_sinks:
            self._combine_host(s, f"(B{seq} * (TPB // rw{seq}), {ninner})")

    # ---- the parts GroupPlan.row_body renders with ---------------------------------------------------
    def scalar(self, n):
        return self.em.scalar(n)

    def comment(self, n):
        return self.em.comment(n)

    def store(self, n, ind):
        return [ind + self.store_line(n)]

    def row_store(self, n, ind):
        if n.id not in self.em.stored:
            return []
        return [f"{ind}if active and lane == 0:", f"{ind}    {self.store_line(n)}"]

    def update(self, s):
        if s.kind == "reduce" and self.members[s.id] == 1:
            return self._update(s, self.em.scalar(s), s.inputs[0])
        tgt = f"{self.part(s)}[slot, q]" if s in self.col_sinks else self.acc(s)
        return self._update(s, tgt, s.inputs[0])

    def row_update(self, s, ind):
        return [f"{ind}if active and lane == 0:", f"{ind}    {self._update(s, self.acc(s), s.inputs[0])}"]

    def open_pass(self, ind):
        g = self.g
        ul, _ = unravel("q", g.shape[g.k:], [f"i{d}" for d in range(g.k, g.rank)], self.k.S, ind + "    ")
        return [f"{ind}for q in range(lane, ninner if active else 0, rw):"] + ul, ind + "    "

    def close_pass(self, reds, ind):
        lines = []
        for r in reds:
            sh, _ = self.em.shared(r.dtype)
            lines.append(f"{ind}{self.em.scalar(r)} = {SEGMENT[r.op]}({sh}, tid, lane, rw, {self.em.scalar(r)})")
            lines += self.row_store(r, ind)
        return lines

    # ---- sinks of other shapes: a chunked reduction of the stored input ----------------------------------
    def emit_reduction(self, s):
        """s = reduce(x, axes) for a stored (or virtual) x: thread (chunk c, output r) reduces its
        chunk of the reduced points; a second pass combines the chunks in order."""
        em = self.em
        x = s.inputs[0]
        axes = tuple(s.p["axes"])
        kept = [d for d in range(x.ndim) if d not in axes]
        k = em.kernel(f"reduction {em.names[s.id]} of group {self.g.seq}")
        nr = em.sizes.product([x.shape[d] for d in kept])
        nj = em.sizes.product([x.shape[d] for d in axes])
        k.scalar("nr", nr)
        k.scalar("nj", nj)
        k.scalar("nch", f"nch_{em.names[s.id]}")
        k.lines.append(em.comment(s))
        k.lines += ["for t in range(cuda.grid(1), nr * nch, cuda.gridsize(1)):", "    r = t % nr", "    c = t // nr"]
        names = [f"i{d}" for d in range(x.ndim)]
        ul, _ = unravel("r", [x.shape[d] for d in kept], [names[d] for d in kept], k.S, "    ")
        k.lines += ul
        acc = self.acc(s)
        k.lines.append(f"    {acc} = {em.reduce_init(s.op, s.dtype)}")
        k.lines.append("    for j in range(c * nj // nch, (c + 1) * nj // nch):")
        ul, _ = unravel("j", [x.shape[d] for d in axes], [names[d] for d in axes], k.S, "        ")
        k.lines += ul
        ix = ["0" if x.shape[d] == 1 else names[d] for d in range(x.ndim)]
        if x.id in self.members:
            k.array(em.var(x))
            val = f"{em.var(x)}[{_index(ix) if x.ndim else '0'}]"
        else:
            val = em.read(k, x, ix)
        k.lines.append(f"        {em.reduce_update(s.op, acc, val, s.dtype)}")
        k.array(self.part(s))
        k.lines.append(f"    {self.part(s)}[c, r] = {acc}")
        name = em.names[s.id]
        em.host.append(f"nch_{name} = _rt.chunks({nr}, {nj}, TPB)")
        em.host.append(f"{self.part(s)} = _rt.empty((nch_{name}, {nr}), {np_dtype(acc_dtype(s.dtype))})")
        em.host.append(k.launch(f"_rt.blocks({nr} * nch_{name}, TPB)"))
        self._combine_host(s, f"(nch_{name}, {nr})")
