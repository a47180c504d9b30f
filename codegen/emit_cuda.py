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
imported when a CUDA program is built. Control flow (`cond`, `scan`, loops) has no
CUDA lowering yet and raises `NotSupportedError`.
"""
import importlib.util
import re

import numpy as np

from jitgraph.errors import NotSupportedError

from .fusion import Group, Partition, REDUCE_OPS
from .memory import MemoryPlan
from .source import OPERATOR_TEMPLATES, Sizes, literal, np_dtype


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
    from . import Program
    from .build import load_kernel

    part, source, em = generate_cuda(graph)
    kernel, module, path = load_kernel(source)
    consts = [n.value for n in em.const_args]
    prog = Program(graph, part, source, kernel, module, path, list(em.sizes.values), consts, em.plan)
    from . import cuda_runtime
    prog.new_workspace = lambda nbytes: cuda_runtime.empty((nbytes,), np.uint8)
    return prog


def generate_cuda(graph, tpb=None):
    """(partition, source, emitter) for `graph`, without importing the module. `tpb` (threads
    per block) defaults to `cuda_runtime.TPB`, which imports numba.cuda."""
    if tpb is None:
        from . import cuda_runtime as rt
        tpb = rt.TPB
    part = Partition(graph)
    em = CudaEmitter(graph, part, tpb=tpb)
    return part, em.emit(), em


# ---- scalar expressions -------------------------------------------------------------------------
TEMPLATES = {
    **OPERATOR_TEMPLATES,
    "sqrt": "_sqrt({0})", "log": "_log({0})", "log1p": "_log1p({0})",
    "sin": "_sin({0})", "cos": "_cos({0})", "tan": "_tan({0})",
    "sinh": "_sinh({0})", "cosh": "_cosh({0})", "arctan": "_atan({0})",
}

REDUCE_UPDATE = {"reduce_sum": "{a} + {v}", "reduce_prod": "{a} * {v}",
                 "reduce_max": "_max({a}, {v})", "reduce_min": "_min({a}, {v})"}
SEGMENT = {"reduce_sum": "_rt.seg_sum", "reduce_prod": "_rt.seg_prod",
           "reduce_max": "_rt.seg_max", "reduce_min": "_rt.seg_min"}
NB_TYPES = {"float64": "float64", "float32": "float32", "int64": "int64", "int32": "int32",
            "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "boolean"}


def acc_dtype(dtype):
    """Accumulator dtype of a reduction: booleans are counted in int64 (any/all via != 0)."""
    return np.dtype(np.int64) if np.dtype(dtype) == bool else np.dtype(dtype)


def reduce_init(op, dtype):
    dtype = acc_dtype(dtype)
    if dtype.kind == "f":
        v = {"reduce_sum": 0.0, "reduce_prod": 1.0, "reduce_max": -np.inf, "reduce_min": np.inf}[op]
    else:
        info = np.iinfo(dtype)
        v = {"reduce_sum": 0, "reduce_prod": 1, "reduce_max": info.min, "reduce_min": info.max}[op]
    return literal(v, dtype)


def elementwise_expr(node, args):
    op = node.op
    dt = node.dtype
    if op == "integer_pow":
        p = node.p["p"]
        x = args[0]
        body = " * ".join([x] * abs(p)) if 0 < abs(p) <= 4 else f"{x} ** {abs(p)}"
        if p == 0:
            return literal(1, dt)
        return body if p > 0 else f"{literal(1, dt)} / ({body})"
    if op == "cast":
        return f"{np_dtype(dt)}({args[0]})" if dt != bool else f"{args[0]} != 0"
    if op == "sign":
        x = args[0]
        d = np_dtype(dt)
        return f"{d}({x} > 0) - {d}({x} < 0) if {x} == {x} else {x}"
    return TEMPLATES[op].format(*args)


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
    """One `@cuda.jit` function: its body, and the host expressions its parameters take."""

    def __init__(self, name, title):
        self.name = name
        self.title = title
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
        body = "\n".join(self.lines)
        own = {p for p, _ in self.scalars}
        syms = sorted(set(re.findall(r"\bn\d+\b", body)) - own, key=lambda s: int(s[1:]))
        ps = self.scalars + [(s, s) for s in syms] + list(self.arrays.items())
        return [p for p, _ in ps], [h for _, h in ps]

    def source(self):
        params, _ = self.params()
        return (["", "", f"# {self.title}", "@cuda.jit(cache=True)",
                 f"def {self.name}({', '.join(params)}):"] + ["    " + ln for ln in self.lines])

    def launch(self, grid, block="TPB"):
        _, hosts = self.params()
        return f"{self.name}[{grid}, {block}]({', '.join(hosts)})"


class CudaEmitter:
    def __init__(self, graph, partition, tpb):
        self.graph = graph
        self.part = partition
        self.tpb = tpb
        self.names = graph.names()
        self.sizes = Sizes(graph)
        self.const_args = [n for n in graph.nodes if n.op == "const" and n.value.ndim > 0]
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

    # ---- names ----------------------------------------------------------------------------
    def var(self, node):
        return "v" + self.names[node.id]

    def scalar(self, node):
        return "x" + self.names[node.id]

    def comment(self, node):
        return "# " + self.graph.node_line(node, self.names, dims=self.sizes)

    def shared(self, dtype):
        name = NB_TYPES[acc_dtype(dtype).name]
        return f"sh_{name}", f"cuda.shared.array(TPB, _nt.{name})"

    def is_scalar_const(self, node):
        return node.op == "const" and node.value.ndim == 0

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
        if slot is None:
            return f"_rt.empty({shape}, {dt})"
        return f"_rt.slot(ws, wofs[{slot}], {self.sizes.product(node.shape)} * {node.dtype.itemsize}, {shape}, {dt})"

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
        self.host.append(f"return _rt.outputs(on_device, ({', '.join(outs)},), {tuple(fresh)!r})")
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
            "from codegen import cuda_runtime as _rt",
            "from codegen.cuda_runtime import exp as _exp, expm1 as _expm1, tanh as _tanh, log as _log, "
            "log1p as _log1p",
            "from codegen.cuda_runtime import sqrt as _sqrt, sin as _sin, cos as _cos, tan as _tan, "
            "sinh as _sinh, cosh as _cosh",
            "from codegen.cuda_runtime import atan as _atan, vmax as _max, vmin as _min",
            "",
            f"TPB = {self.tpb}  # threads per block: codegen.cuda_runtime.TPB when this was generated",
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
        k = Kernel(f"k{len(self.kernels)}", title)
        self.kernels.append(k)
        return k

    # ---- one-thread-per-output-point kernels (shape ops, materialized broadcasts) -----------------
    def emit_pointwise(self, node, value, what=None):
        """out[ix] = value(kernel, ix) for every point of node's shape, in a grid-stride loop.
        `value` returns an expression, or (lines, expression)."""
        S = self.sizes
        v = self.var(node)
        k = self.kernel(f"{what or node.op} -> {self.names[node.id]}")
        k.lines.append(self.comment(node))
        total = S.product(node.shape)
        k.scalar("total", total)
        names = [f"i{d}" for d in range(node.ndim)]
        k.lines.append("for p in range(cuda.grid(1), total, cuda.gridsize(1)):")
        lines, ix = unravel("p", node.shape, names, S, "    ")
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
        S = self.sizes
        op, p = node.op, node.p
        v = self.var(node)
        if node.id in self.matmul_t:
            self.host.append(self.comment(node) + "  (the matmuls read the input transposed)")
        elif op == "matmul":
            a, b = node.inputs
            nb = S.product(node.shape[:-2])
            m, kk, n = S(a.shape[-2]), S(a.shape[-1]), S(b.shape[-1])
            operands, flags = [], []
            for x, (r, c) in ((a, (m, kk)), (b, (kk, n))):
                t = x.id in self.matmul_t
                src = self.host_array(x.inputs[0] if t else x)
                operands.append(f"{src}.reshape(({nb}, {c if t else r}, {r if t else c}))")
                flags.append(t)
            extra = "".join(f", {f}={t}" for f, t in zip(("ta", "tb"), flags) if t)
            self.host.append(self.comment(node))
            self.host.append(f"{v} = {self.buffer(node)}")
            self.host.append(f"_rt.matmul({operands[0]}, {operands[1]}, {v}.reshape(({nb}, {m}, {n})){extra})")
        elif op == "reshape":
            x = self.host_array(node.inputs[0])
            self.host.append(self.comment(node))
            self.host.append(f"{v} = {x}.reshape({S.shape(node.shape)})  # a view")
            self.views.add(node.id)
        elif op == "transpose":
            perm = p["perm"]
            x = node.inputs[0]

            def value(k, ix):
                xi = [None] * x.ndim
                for d, src in enumerate(perm):
                    xi[src] = ix[d]
                return self.read(k, x, xi)
            self.emit_pointwise(node, value)
        elif op == "broadcast":
            x = node.inputs[0]
            self.emit_pointwise(node, lambda k, ix: self.read(k, x, ix[node.ndim - x.ndim:]))
        elif op == "slice":
            x = node.inputs[0]

            def value(k, ix):
                xi = []
                for d, (a, c) in enumerate(zip(p["starts"], p["steps"])):
                    t = ix[d] if c == 1 else f"{ix[d]} * {c}"
                    xi.append(t if a == 0 else (f"{a} + {t}" if t != "0" else str(a)))
                return self.read(k, x, xi)
            self.emit_pointwise(node, value)
        elif op == "pad_slice":
            self.emit_pointwise(node, lambda k, ix: self._pad_value(k, node, ix))
        elif op == "concatenate":
            self.emit_pointwise(node, lambda k, ix: self._concat_value(k, node, ix))
        elif op == "gather":
            self.uses_err = True
            self.emit_pointwise(node, lambda k, ix: self._gather_value(k, node, ix))
        elif op == "scatter_add":
            self.uses_err = True
            self._emit_scatter(node)
        elif op in ("scan", "cond", "while", "proj"):
            raise NotSupportedError(
                f"the CUDA target does not support control flow yet ({op!r}: jg.cond, jg.scan, "
                "jg.fori_loop, jg.while_loop); use target='cpu' for this function")
        else:
            raise NotSupportedError(f"codegen: no CUDA lowering for op {op!r}")

    def _pad_value(self, k, node, ix):
        x = node.inputs[0]
        lines, xi, conds = [], [], []
        for d, (a, c) in enumerate(zip(node.p["starts"], node.p["steps"])):
            if a == 0 and c == 1 and x.shape[d] == node.shape[d]:
                xi.append(ix[d])
                continue
            j = f"j{d}"
            off = ix[d] if a == 0 else f"({ix[d]} - {a})"
            lines.append(f"{j} = {off} // {c}" if c != 1 else f"{j} = {off}")
            if c != 1:
                conds.append(f"{off} % {c} == 0")
            conds += [f"{j} >= 0", f"{j} < {self.sizes(x.shape[d])}"]
            xi.append(j)
        if not conds:
            return self.read(k, x, xi)
        lines.append(f"ok = {' and '.join(conds)}")
        return lines, f"{self.read(k, x, xi)} if ok else {literal(0, node.dtype)}"

    def _concat_value(self, k, node, ix):
        axis = node.p["axis"]
        lines, off = [], []
        xs = node.inputs
        for j, x in enumerate(xs):
            xi = list(ix)
            base = " + ".join(off) if off else None
            if base:
                xi[axis] = f"{ix[axis]} - ({base})"
            expr = self.read(k, x, xi)
            off.append(self.sizes(x.shape[axis]))
            if j == len(xs) - 1:
                lines.append(("else:" if j else "if True:"))
            else:
                lines.append(f"{'elif' if j else 'if'} {ix[axis]} < {' + '.join(off)}:")
            lines.append(f"    val = {expr}")
        return lines, "val"

    def _gather_value(self, k, node, ix):
        x, idx = node.inputs
        axis = node.p["axis"]
        m = idx.ndim
        n = self.sizes(x.shape[axis])
        lines = [f"ij = {self.read(k, idx, ix[axis:axis + m])}",
                 "if ij < 0:", f"    ij += {n}",
                 f"ok = ij >= 0 and ij < {n}",
                 "if not ok:", "    err[0] = 1"]
        k.array("err")
        xi = ix[:axis] + ["ij"] + ix[axis + m:]
        return lines, f"{self.read(k, x, xi)} if ok else {literal(0, node.dtype)}"

    def _emit_scatter(self, node):
        """out[pre, idx[j], post] += g[pre, j, post]: one thread per (pre, post) column, j in order."""
        S = self.sizes
        g, idx = node.inputs
        axis = node.p["axis"]
        m = idx.ndim
        v = self.var(node)
        out_shape = node.shape
        cols = tuple(out_shape[:axis]) + tuple(out_shape[axis + 1:])
        k = self.kernel(f"scatter_add -> {self.names[node.id]}")
        k.lines.append(self.comment(node))
        total = S.product(cols)
        k.scalar("total", total)
        rank = len(out_shape)
        names = [f"i{d}" for d in range(rank) if d != axis]
        k.lines.append("for p in range(cuda.grid(1), total, cuda.gridsize(1)):")
        lines, cix = unravel("p", cols, names, S, "    ")
        k.lines += lines
        oix = lambda a: cix[:axis] + [a] + cix[axis:]   # noqa: E731
        k.array(v)
        k.array("err")
        n = S(out_shape[axis])
        k.lines += [f"    for r in range({n}):", f"        {v}[{_index(oix('r'))}] = {literal(0, node.dtype)}"]
        k.lines.append(f"    for j in range({S.product(idx.shape)}):")
        jl, jix = unravel("j", idx.shape, [f"j{d}" for d in range(m)], S, "        ")
        k.lines += jl
        gix = cix[:axis] + jix + cix[axis:]
        k.lines += [f"        ij = {self.read(k, idx, jix)}",
                    "        if ij < 0:", f"            ij += {n}",
                    f"        if ij >= 0 and ij < {n}:",
                    f"            {v}[{_index(oix('ij'))}] += {self.read(k, g, gix)}",
                    "        else:", "            err[0] = 1"]
        self.host.append(self.comment(node))
        self.host.append(f"{v} = {self.buffer(node)}")
        self.host.append(k.launch(f"_rt.blocks({total}, TPB)"))


class GroupKernel:
    """Emits one loop group: its kernel, the host lines launching it, and the combine passes."""

    def __init__(self, em, g):
        self.em, self.g = em, g
        self.S = em.sizes
        self.members = g.members
        self.scalar_sinks, self.col_sinks, self.other_sinks = [], [], []
        self.k = None
        self.flat = False

    # ---- classification -----------------------------------------------------------------------------
    def _lvl(self, x):
        return self.members[x.id] if x.id in self.members else self.g.level_of_shape(x.shape)

    def _classify(self):
        g, em = self.g, self.em
        row = g.k < g.rank
        for s in g.nodes:
            if self.members[s.id] != "sink":
                continue
            x = s.inputs[0]
            axes = tuple(s.p["axes"])
            lx = self._lvl(x)
            if s.size == 1:
                self.scalar_sinks.append(s)
            elif not row and len(axes) < g.rank and axes == tuple(range(len(axes))) and axes \
                    and tuple(x.shape) == g.shape:
                self.col_sinks.append(s)       # flat group, reduced over leading axes
            elif row and lx == 2 and axes == tuple(range(g.k)) and tuple(x.shape) == g.shape:
                self.col_sinks.append(s)       # row group, reduced over the outer axes
            else:
                self.other_sinks.append(s)
                if x.id in self.members:
                    em.stored.add(x.id)

    def _flat_read_ok(self, x, total):
        part = self.em.part
        src = part.resolve(x)
        if src.size == 1:
            return True
        while x.id in part.virtual:
            if x.op == "broadcast" and x.size != x.inputs[0].size:
                return False
            x = x.inputs[0]
        return src.size == total

    def _flat_ok(self):
        g = self.g
        if g.rank <= 1:
            return False
        total = int(np.prod(g.shape, dtype=np.int64))
        for n in g.nodes:
            for x in n.inputs:
                if x.id not in self.members and not self._flat_read_ok(x, total):
                    return False
        return True

    # ---- expressions ------------------------------------------------------------------------------------
    def value(self, x, target_shape):
        if x.id in self.members:
            return self.em.scalar(x)
        off = len(target_shape) - x.ndim
        ix = [f"i{off + d}" for d in range(x.ndim)]
        return self.em.read(self.k, x, ix, flat="p" if self.flat else None)

    def node_line(self, n):
        v = self.em.scalar(n)
        if n.op in ("broadcast", "reshape") or n.op in REDUCE_OPS:
            return f"{v} = {self.value(n.inputs[0], n.shape)}"
        return f"{v} = {elementwise_expr(n, [self.value(x, n.shape) for x in n.inputs])}"

    def store_line(self, n):
        v = self.em.var(n)
        if self.flat:
            self.k.array(v + "_f", f"{v}.reshape({self.S.product(n.shape)})")
            return f"{v}_f[p] = {self.em.scalar(n)}"
        self.k.array(v)
        ix = ["0" if n.shape[d] == 1 else f"i{d}" for d in range(n.ndim)]
        return f"{v}[{_index(ix) if n.ndim else '0'}] = {self.em.scalar(n)}"

    def acc(self, s):
        return f"{self.em.scalar(s)}_acc"

    def part(self, s):
        return f"{self.em.var(s)}_part"

    # ---- emission --------------------------------------------------------------------------------------------
    def emit(self):
        g, em = self.g, self.em
        self._classify()
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
        return f"fused loop over {self.S.shape(g.shape) if g.rank else '()'} ({kind}), {len(g.nodes)} nodes"

    def _members_line(self, n, ind, lines):
        lines.append(ind + self.node_line(n) + "  " + self.em.comment(n))
        if n.id in self.em.stored:
            lines.append(ind + self.store_line(n))

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
        em, S = self.em, self.S
        v = em.var(s)
        em.host.append(f"{v} = {em.buffer(s)}")
        em.host.append(f"_rt.combine({s.op!r}, {self.part(s)}.reshape({part_shape}), "
                       f"{v}.reshape({S.product(s.shape)}))  {em.comment(s)}")

    def emit_flat(self):
        g, em, k, S = self.g, self.em, self.k, self.S
        if not (self.scalar_sinks or self.col_sinks
                or any(self.members[n.id] != "sink" for n in g.nodes)):
            em.kernels.remove(k)   # only sinks reduced by their own kernels
            return
        self.flat = self._flat_ok()
        total = S.product(g.shape)
        seq = g.seq
        lines = k.lines
        k.scalar("T", f"T{seq}")
        k.scalar("total", total)
        lines.append("t = cuda.grid(1)")
        for s in self.scalar_sinks + self.col_sinks:
            lines.append(f"{self.acc(s)} = {reduce_init(s.op, s.dtype)}")
        lines.append("if t < T:")
        lines.append("    for p in range(t, total, T):")
        ind = "        "
        if not self.flat:
            ul, _ = unravel("p", g.shape, [f"i{d}" for d in range(g.rank)], S, ind)
            lines += ul
        for n in g.nodes:
            if self.members[n.id] != "sink":
                self._members_line(n, ind, lines)
        for s in self.scalar_sinks + self.col_sinks:
            x = s.inputs[0]
            upd = REDUCE_UPDATE[s.op].format(a=self.acc(s), v=self.value(x, x.shape))
            lines.append(f"{ind}{self.acc(s)} = {upd}  {em.comment(s)}")
        for s in self.col_sinks:
            # T is a multiple of every column count, so thread t always meets columns t % ncol
            k.array(self.part(s))
            lines += ["if t < T:", f"    {self.part(s)}[t] = {self.acc(s)}"]
        if self.scalar_sinks:
            lines.append("tid = cuda.threadIdx.x")
            self._finish_scalar_sinks(lines)
        # column counts are products of trailing sizes, so the largest is a multiple of the others
        widest = max(self.col_sinks, key=lambda s: s.size, default=None)
        ncol = S.product(widest.shape) if widest is not None else "1"
        em.host.append(f"T{seq} = _rt.flat_threads({total}, {ncol}, TPB)")
        em.host.append(f"B{seq} = -(-T{seq} // TPB)")
        for s in self.scalar_sinks:
            em.host.append(f"{self.part(s)} = _rt.empty((B{seq},), {np_dtype(acc_dtype(s.dtype))})")
        for s in self.col_sinks:
            em.host.append(f"{self.part(s)} = _rt.empty((T{seq},), {np_dtype(acc_dtype(s.dtype))})")
        em.host.append(k.launch(f"B{seq}"))
        for s in self.scalar_sinks:
            self._combine_host(s, f"(B{seq}, 1)")
        for s in self.col_sinks:
            nc = S.product(s.shape)
            self._combine_host(s, f"(T{seq} // max({nc}, 1), {nc})")

    def emit_scalar_group(self):
        g, em, k = self.g, self.em, self.k
        lines = k.lines
        for n in g.nodes:
            if self.members[n.id] == "sink":
                em.host.append(f"{em.var(n)} = {em.buffer(n)}")
            self._members_line(n, "", lines)
        em.host.append(k.launch("1", "1"))

    # ---- row groups ------------------------------------------------------------------------------------
    def emit_rows(self):
        g, em, k, S = self.g, self.em, self.k, self.S
        m = self.members
        seq = g.seq
        lines = k.lines
        nrows, ninner = S.product(g.shape[:g.k]), S.product(g.shape[g.k:])
        k.scalar("nrows", nrows)
        k.scalar("ninner", ninner)
        k.scalar("rw", f"rw{seq}")
        lines += ["tid = cuda.threadIdx.x", "lane = tid % rw", "rpb = TPB // rw",
                  "slot = cuda.blockIdx.x * rpb + tid // rw"]
        shared_decls = set()
        for n in g.nodes:
            if n.op in REDUCE_OPS and m[n.id] == 1:
                shared_decls.add(em.shared(n.dtype))
        for decl in sorted(shared_decls):
            lines.append(f"{decl[0]} = {decl[1]}")
        for s in self.scalar_sinks:
            lines.append(f"{self.acc(s)} = {reduce_init(s.op, s.dtype)}")
        for s in self.col_sinks:
            k.array(self.part(s))
            lines += ["for q in range(lane, ninner, rw):",
                      f"    {self.part(s)}[slot, q] = {reduce_init(s.op, s.dtype)}"]
        lines += ["for row0 in range(cuda.blockIdx.x * rpb, nrows, cuda.gridDim.x * rpb):",
                  "    row = row0 + tid // rw",
                  "    active = row < nrows",
                  "    if not active:",
                  "        row = nrows - 1  # idle threads of the last block read a real row, store nothing"]
        ind = "    "
        ul, _ = unravel("row", g.shape[:g.k], [f"i{d}" for d in range(g.k)], S, ind)
        lines += ul
        self._row_body(lines, ind)
        if self.scalar_sinks:
            self._finish_scalar_sinks(lines)
        em.host.append(f"rw{seq} = _rt.row_width({ninner}, TPB)")
        cols = ", column_sums=True" if self.col_sinks else ""
        em.host.append(f"B{seq} = _rt.row_blocks({nrows}, rw{seq}, TPB{cols})")
        for s in self.scalar_sinks:
            em.host.append(f"{self.part(s)} = _rt.empty((B{seq},), {np_dtype(acc_dtype(s.dtype))})")
        for s in self.col_sinks:
            em.host.append(f"{self.part(s)} = _rt.empty((B{seq} * (TPB // rw{seq}), {ninner}), "
                           f"{np_dtype(acc_dtype(s.dtype))})")
        em.host.append(k.launch(f"B{seq}"))
        for s in self.scalar_sinks:
            self._combine_host(s, f"(B{seq}, 1)")
        for s in self.col_sinks:
            self._combine_host(s, f"(B{seq} * (TPB // rw{seq}), {ninner})")

    def _row_store(self, n, ind, lines):
        if n.id in self.em.stored:
            lines.append(f"{ind}if active and lane == 0:")
            lines.append(f"{ind}    {self.store_line(n)}")

    def _row_body(self, lines, ind):
        g, em, m = self.g, self.em, self.members
        S = self.S
        ready = self.g.pass_ready()
        nodes = g.nodes
        last = max(ready.values())
        for p in range(last + 1):
            for n in nodes:
                if m[n.id] == 1 and ready[n.id] == p and n.op not in REDUCE_OPS:
                    lines.append(ind + self.node_line(n) + "  " + em.comment(n))
                    self._row_store(n, ind, lines)
            for s in self.scalar_sinks:
                x = s.inputs[0]
                if self._lvl(x) == 1 and ready.get(x.id, 0) == p:
                    upd = REDUCE_UPDATE[s.op].format(a=self.acc(s), v=self.value(x, x.shape))
                    lines += [f"{ind}if active and lane == 0:", f"{ind}    {self.acc(s)} = {upd}  {em.comment(s)}"]
            reds = [n for n in nodes if m[n.id] == 1 and n.op in REDUCE_OPS and ready[n.id] == p + 1]
            stores = [n for n in nodes if m[n.id] == 2 and n.id in em.stored and ready[n.id] == p]
            sinks = [s for s in self.scalar_sinks + self.col_sinks
                     if self._lvl(s.inputs[0]) == 2 and ready.get(s.inputs[0].id, 0) == p]
            if not (reds or stores or sinks):
                continue
            lines.append(f"{ind}# pass {p} over the row")
            for r in reds:
                lines.append(f"{ind}{em.scalar(r)} = {reduce_init(r.op, r.dtype)}")
            lines.append(f"{ind}for q in range(lane, ninner if active else 0, rw):")
            d2 = ind + "    "
            ul, _ = unravel("q", g.shape[g.k:], [f"i{d}" for d in range(g.k, g.rank)], S, d2)
            lines += ul
            roots = [r.inputs[0] for r in reds] + stores + [s.inputs[0] for s in sinks]
            for n in self.g.needed(roots):
                lines.append(d2 + self.node_line(n) + "  " + em.comment(n))
                if n in stores:
                    lines.append(d2 + self.store_line(n))
            for r in reds:
                x = r.inputs[0]
                upd = REDUCE_UPDATE[r.op].format(a=em.scalar(r), v=self.value(x, x.shape))
                lines.append(f"{d2}{em.scalar(r)} = {upd}  {em.comment(r)}")
            for s in sinks:
                x = s.inputs[0]
                if s in self.col_sinks:
                    tgt = f"{self.part(s)}[slot, q]"
                    upd = REDUCE_UPDATE[s.op].format(a=tgt, v=self.value(x, x.shape))
                    lines.append(f"{d2}{tgt} = {upd}  {em.comment(s)}")
                else:
                    upd = REDUCE_UPDATE[s.op].format(a=self.acc(s), v=self.value(x, x.shape))
                    lines.append(f"{d2}{self.acc(s)} = {upd}  {em.comment(s)}")
            for r in reds:
                sh, _ = em.shared(r.dtype)
                lines.append(f"{ind}{em.scalar(r)} = {SEGMENT[r.op]}({sh}, tid, lane, rw, {em.scalar(r)})")
                self._row_store(r, ind, lines)

    # ---- sinks of other shapes: a chunked reduction of the stored input ----------------------------------
    def emit_reduction(self, s):
        """s = reduce(x, axes) for a stored (or virtual) x: thread (chunk c, output r) reduces its
        chunk of the reduced points; a second pass combines the chunks in order."""
        em, S = self.em, self.S
        x = s.inputs[0]
        axes = tuple(s.p["axes"])
        kept = [d for d in range(x.ndim) if d not in axes]
        k = em.kernel(f"reduction {self.em.names[s.id]} of group {self.g.seq}")
        nr, nj = S.product([x.shape[d] for d in kept]), S.product([x.shape[d] for d in axes])
        k.scalar("nr", nr)
        k.scalar("nj", nj)
        k.scalar("nch", f"nch_{em.names[s.id]}")
        k.lines.append(em.comment(s))
        k.lines += ["for t in range(cuda.grid(1), nr * nch, cuda.gridsize(1)):", "    r = t % nr", "    c = t // nr"]
        names = [f"i{d}" for d in range(x.ndim)]
        ul, _ = unravel("r", [x.shape[d] for d in kept], [names[d] for d in kept], S, "    ")
        k.lines += ul
        acc = self.acc(s)
        k.lines.append(f"    {acc} = {reduce_init(s.op, s.dtype)}")
        k.lines.append("    for j in range(c * nj // nch, (c + 1) * nj // nch):")
        ul, _ = unravel("j", [x.shape[d] for d in axes], [names[d] for d in axes], S, "        ")
        k.lines += ul
        ix = ["0" if x.shape[d] == 1 else names[d] for d in range(x.ndim)]
        if x.id in self.members:
            k.array(em.var(x))
            val = f"{em.var(x)}[{_index(ix) if x.ndim else '0'}]"
        else:
            val = em.read(k, x, ix)
        k.lines.append(f"        {acc} = {REDUCE_UPDATE[s.op].format(a=acc, v=val)}")
        k.array(self.part(s))
        k.lines.append(f"    {self.part(s)}[c, r] = {acc}")
        name = em.names[s.id]
        em.host.append(f"nch_{name} = _rt.chunks({nr}, {nj}, TPB)")
        em.host.append(f"{self.part(s)} = _rt.empty((nch_{name}, {nr}), {np_dtype(acc_dtype(s.dtype))})")
        em.host.append(k.launch(f"_rt.blocks({nr} * nch_{name}, TPB)"))
        self._combine_host(s, f"(nch_{name}, {nr})")
