"""Emit one Python/Numba source module for a partitioned graph (CPU target).

Layout of a generated module:

* the entry function, `kernel(dims, *inputs, *consts, ws, wofs)`, runs the steps
  in order: library ops (BLAS matmul, slicing, gathers; precompiled helpers in
  `codegen/runtime.py`) and the fused loop groups. A group's outer loop is
  split into a fixed number of chunks, each accumulating its reductions into
  its own slot of a partial buffer; with `prange` the chunks run on all cores.
  The chunk count depends only on sizes, never on the thread count, so results
  are identical for any number of threads. Stored values live in slots of the
  workspace arena `ws` at byte offsets `wofs`, as planned by
  `codegen/memory.py`; outputs are new arrays.
* Up to NJIT_ENTRY_MAX_STEPS steps, the entry is one `@njit` function with the
  loops inline (one function compiles faster than several). Longer programs
  (deep networks) get a plain Python entry that calls one `@njit` function per
  loop group, and groups whose code is the same up to the names of their arrays
  share one function: the layers of a deep network compile one loop per
  distinct layer, not one per layer, and Numba's compile time, which grows
  faster than linearly with a function's length, stays out of the entry.

The one place the source depends on sizes beyond their equality pattern: a
group whose loop (at trace time) has fewer than PARALLEL_MIN points runs
serially, without `prange`. Parallel loops cost ~5 us to launch and ~0.2 s to
compile each, which only pays for large loops; a later call with large arrays
retraces (the cache key has the size class) and gets the parallel source.

Every computed line is one SSA assignment with a comment naming the graph node.
All sizes come from `dims` at run time (one symbol per distinct size > 1), so a
new batch size reuses the same source, and therefore the same compiled code,
whenever the graph's structure is unchanged. Zero-dimensional values are stored
as 1-element arrays.
"""
import re

import numpy as np

from .fusion import Group, REDUCE_OPS
from .memory import MemoryPlan
from .source import OPERATOR_TEMPLATES, Sizes, literal, np_dtype

# reductions: identity, update statement, and how chunk partials combine
def reduce_init(op, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return {"reduce_sum": "0.0", "reduce_prod": "1.0", "reduce_max": "-np.inf",
                "reduce_min": "np.inf"}[op]
    if dtype == bool:
        return {"reduce_sum": "0", "reduce_prod": "1", "reduce_max": "False", "reduce_min": "True"}[op]
    info = np.iinfo(dtype)
    return {"reduce_sum": "0", "reduce_prod": "1", "reduce_max": str(info.min),
            "reduce_min": str(info.max)}[op]


REDUCE_UPDATE = {
    "reduce_sum": "{acc} += {v}",
    "reduce_prod": "{acc} *= {v}",
    "reduce_max": "{acc} = _max({acc}, {v})",
    "reduce_min": "{acc} = _min({acc}, {v})",
}
REDUCE_COMBINE = {"reduce_sum": "{a} + {b}", "reduce_prod": "{a} * {b}",
                  "reduce_max": "_max({a}, {b})", "reduce_min": "_min({a}, {b})"}

# elementwise ops: one scalar expression each (op-to-template table)
TEMPLATES = {
    **OPERATOR_TEMPLATES,
    "sqrt": "np.sqrt({0})", "log": "np.log({0})", "log1p": "np.log1p({0})",
    "sin": "np.sin({0})", "cos": "np.cos({0})", "tan": "np.tan({0})",
    "sinh": "np.sinh({0})", "cosh": "np.cosh({0})", "arctan": "np.arctan({0})",
}
# ops whose template returns float64 whatever the input: cast back for float32 graphs
F64_RESULT = {"exp", "expm1", "tanh"}

GRAIN = 32768          # points per chunk, at least
MAX_CHUNKS = 16
# Entry functions with more steps run as Python, not compiled: Numba's compile time grows
# faster than linearly with the length of a function (a depth-256 residual MLP's entry took
# 190 s), while a Python entry costs a few microseconds per step at run time.
NJIT_ENTRY_MAX_STEPS = 48
OUTLINE_LINES = 40         # parallel chunk bodies longer than this become their own function
PARALLEL_MIN = 2 * GRAIN   # smaller loops run serially


def _elementwise_expr(node, args):
    op = node.op
    if op == "integer_pow":
        p = node.p["p"]
        x = args[0]
        body = " * ".join([x] * abs(p)) if abs(p) <= 4 else f"{x} ** {abs(p)}"
        return body if p > 0 else f"1.0 / ({body})"
    if op == "cast":
        return f"{np_dtype(node.dtype)}({args[0]})" if node.dtype != bool else f"{args[0]} != 0"
    if op == "sign":
        x = args[0]
        dt = np_dtype(node.dtype)
        return f"{dt}({x} > 0) - {dt}({x} < 0) if {x} == {x} else {x}"
    expr = TEMPLATES[op].format(*args)
    if op in F64_RESULT and node.dtype != np.float64:
        expr = f"{np_dtype(node.dtype)}({expr})"
    return expr


# names the emitter gives values (v<name>, x<name>, with suffixes) and sizes (n<k>)
_NAME = re.compile(r"\b(?:[vx][a-z]+(?:_[a-z]+)?|n\d+)\b")
_ASSIGNED = re.compile(r"^\s*([vx][a-z]+(?:_[a-z]+)?)\s*=(?!=)", re.M)


def _strip_comment(line):
    k = line.find("#")
    return line if k < 0 else line[:k].rstrip()


def _owned(a):
    """A constant as the kernel takes it: C-contiguous and writable (not a broadcast view)."""
    a = np.asarray(a)
    if not a.flags.c_contiguous or not a.flags.writeable:
        a = np.array(a, order="C", copy=True)
    return a


class Emitter:
    def __init__(self, graph, partition, parallel=True, fastmath=("reassoc", "contract", "arcp"),
                 cache=True, prefix="", shared=None):
        self.graph = graph
        # loop functions by canonical text, shared with the emitters of subgraphs
        self.shared = {} if shared is None else shared
        self.prefix = prefix       # for the functions of subgraphs (loop bodies, branches)
        self.extra_consts = []     # (name, array) passed after the const args: subgraph data
        self.n_subs = 0
        self.part = partition
        self.parallel = parallel
        self.fastmath = tuple(fastmath)
        self.cache = cache
        self.names = graph.names()
        self.sizes = Sizes(graph)
        # the entry function's buffers come from one workspace arena (`ws`, slot offsets
        # `wofs`); subgraph kernels (loop bodies, branches) allocate theirs
        self.plan = MemoryPlan(graph, partition, self.sizes, plan=not prefix)
        self.const_args = [n for n in graph.nodes if n.op == "const" and n.value.ndim > 0]
        # Floating scalar constants other than 0 and 1 are read at run time from `svals`, not
        # written as literals: they often derive from shapes (a mean's 1/batch) or from user
        # globals, and as literals every new batch size or setting would be new source and a
        # new native compile. Reading a scalar once per call costs nothing measurable.
        self.scalar_consts = [n for n in graph.nodes if n.op == "const" and n.value.ndim == 0
                              and n.dtype.kind == "f" and n.value.item() not in (0.0, 1.0)]
        self._hoisted = {n.id for n in self.scalar_consts}
        self.body = []            # lines of the entry function
        self.users = graph.users()
        self.functions = []       # module-level functions: loop groups, subgraph kernels
        self.uses_prange = False
        self.driver = False

    # ---- names -------------------------------------------------------------------------------
    def var(self, node):
        """The array holding node's stored value."""
        return "v" + self.names[node.id]

    def scalar(self, node):
        """The local scalar holding node's value at the current loop point."""
        return "x" + self.names[node.id]

    def array(self, node):
        """An expression for node's value as an array (expanding virtual broadcasts/reshapes)."""
        src = self.part.resolve(node)
        if src is not node and self.is_scalar_const(src):
            # a filled array: Numba compiles np.full far faster than broadcast_to + a copy
            return f"np.full({self.sizes.shape(node.shape)}, {self.const_ref(src)}, {np_dtype(node.dtype)})"
        if node.id in self.part.virtual:
            inner = self.array(node.inputs[0])
            shape = self.sizes.shape(node.shape)
            if node.op == "broadcast":
                return f"np.ascontiguousarray(np.broadcast_to({inner}, {shape}))"
            return f"{inner}.reshape({shape})"
        if self.is_scalar_const(node):
            return f"np.full(1, {self.const_ref(node)}, {np_dtype(node.dtype)})"
        return self.var(node)

    def buffer(self, node, shape=None):
        """An expression for a new array holding node's value: its workspace slot, the
        output buffer the caller passes (`o<k>`), or a new array when the plan leaves it
        out (subgraph kernels, control flow)."""
        shape = node.shape if shape is None else shape
        dt = np_dtype(node.dtype)
        out = self.plan.out_index.get(node.id)
        if out is not None and tuple(shape) == tuple(node.shape):
            return f"o{out}"
        slot = self.plan.slot_of.get(node.id)
        if slot is None:
            return f"np.empty({self.sizes.shape(shape)}, {dt})"
        size = f"{self.sizes.product(shape)} * {node.dtype.itemsize}"
        return f"_rt.slot(ws, wofs[{slot}], {size}, {self.sizes.shape(shape)}, {dt})"

    def scratch(self, k, shape, dtype):
        """An expression for the k-th scratch array (of `shape`) of the current step: a shared
        workspace slot, or a new array without a plan."""
        dt = np_dtype(dtype)
        dtype = np.dtype(dtype)
        if not self.plan.enabled:
            return f"np.empty({self.sizes.shape(shape)}, {dt})"
        cls = (self.sizes.product(shape), dtype.itemsize)
        slot = self.plan.scratch(k, shape, dtype.itemsize, cls)
        size = f"{self.sizes.product(shape)} * {dtype.itemsize}"
        return f"_rt.slot(ws, wofs[{slot}], {size}, {self.sizes.shape(shape)}, {dt})"

    def const_ref(self, node):
        """A scalar constant's value in code: a literal, or the local read from `svals`."""
        if node.id in self._hoisted:
            return f"x{self.names[node.id]}_c"
        return literal(node.value, node.dtype)

    def first(self, node):
        """Its only element, for a stored value of size 1 (0-d values are stored with shape (1,))."""
        return f"{self.var(node)}[{', '.join(['0'] * max(node.ndim, 1))}]"

    def is_scalar_const(self, node):
        return node.op == "const" and node.value.ndim == 0

    def comment(self, node):
        """`# c:f64[n0,n1] = mul a b`: the node, with sizes as the same symbols the code uses."""
        if node.dtype == object:     # a control node: its subgraphs are emitted as functions
            args = " ".join(self.names[i.id] for i in node.inputs)
            small = ", ".join(f"{k}={v!r}" for k, v in node.params
                              if isinstance(v, (int, bool, str)))
            return f"# {self.names[node.id]}:tuple = {node.op}[{small}] {args}"
        return "# " + self.graph.node_line(node, self.names, dims=self.sizes)

    # ---- entry function ----------------------------------------------------------------------
    def emit(self):
        # a long program's entry runs as Python (see the module docstring)
        self.driver = not self.prefix and len(self.part.steps) > NJIT_ENTRY_MAX_STEPS
        dead = self._dead_after() if self.driver else {}
        for k, step in enumerate(self.part.steps):
            if isinstance(step, Group):
                self.emit_group(step)
            else:
                self.emit_op(step.node)
            if dead.get(k):
                self.body.append(f"del {', '.join(dead[k])}")
        outs = []
        seen = set()
        for n in self.graph.outputs:
            v = self.array(n)
            if n.op in ("input", "const") and v == self.var(n) or v in seen:
                v = f"{v}.copy()"
            seen.add(v)
            outs.append(v)
        self.body.append(f"return ({', '.join(outs)},)")
        return self.render()

    def _dead_after(self):
        """Step index -> names of the entry's arrays read for the last time by that step (a
        Python entry frees them there; Numba frees dead arrays by itself)."""
        last, made = {}, {}
        plan = self.plan
        for n in self.graph.nodes:
            k = plan.step_at.get(n.id)
            if k is None:
                continue
            if n.id in self.part.materialized and n.op not in ("input", "const") \
                    and n.dtype != object:
                made[n.id] = n
            if n.id in self.part.virtual:
                continue
            for x in n.inputs:
                x = self.part.resolve(x)
                last[x.id] = max(last.get(x.id, -1), k)
        keep = {self.part.resolve(o).id for o in self.graph.outputs}
        dead = {}
        for i, n in made.items():
            if i not in keep and i in last:
                dead.setdefault(last[i], []).append(self.var(n))
        return dead

    def render(self):
        fm = "{" + ", ".join(repr(f) for f in self.fastmath) + "}" if self.fastmath else "False"
        head = [
            f"# Generated by jitgraph from graph {self.graph.meta.get('name', '?')!r}. Do not edit:",
            "# this file is named after the hash of its content and rewritten never.",
            "import numpy as np",
            "from numba import njit, prange",
            "from codegen.mathlib import exp as _exp, expm1 as _expm1, tanh as _tanh",
            "from codegen.mathlib import maximum as _max, minimum as _min",
            "from codegen import runtime as _rt",
            "",
            f"_OPTS = dict(cache={self.cache}, error_model='numpy', fastmath={fm}, boundscheck=False)",
            "_PARALLEL = dict(prange=True, numpy=False, reduction=False, setitem=False, stencil=False,",
            "                 fusion=False, comprehension=False, inplace_binop=False)",
            "",
        ]
        src = list(head)
        for block in self.functions:
            src += [""] + block + [""]
        if self.driver:
            src += ["", f"# {len(self.part.steps)} steps: the entry runs as Python, calling the compiled "
                    "loops and library routines above"]
        else:
            par = "_PARALLEL" if self.uses_prange else "False"
            src += ["", f"@njit(parallel={par}, **_OPTS)"]
        src += self.kernel_lines()
        return "\n".join(src) + "\n"

    def outline(self, lines, parallel, label):
        """Run a group's `lines`: inline in a compiled entry (one function compiles faster
        than several), or as a shared module function (see `function`) called from a
        Python entry."""
        if self.driver:
            self.body.append(self.function(lines, parallel, label))
        else:
            self.uses_prange |= parallel
            self.body += lines

    def function(self, lines, parallel, label, lead=()):
        """Make `lines` a module function; returns the call expression.

        Its parameters are `lead` then the names it reads but never assigns (arrays,
        sizes, scalar constants); it writes its results into arrays it is given.
        Functions whose text is the same up to a consistent renaming of those names and
        locals are emitted once: the layers of a deep network share one compiled loop
        per distinct layer shape, so compile time does not grow with depth. Parallel
        functions are the only ones with `prange`: Numba's automatic conversion of array
        expressions into parallel loops would compile a kernel per allocation for nothing.
        """
        code = "\n".join(_strip_comment(ln) for ln in lines)
        names = list(dict.fromkeys(_NAME.findall(code)))
        assigned = set(_ASSIGNED.findall(code))
        params = list(lead) + [n for n in names if n not in assigned]
        rename = {n: f"_{k}" for k, n in enumerate(names)}
        canon = _NAME.sub(lambda m: rename[m.group(0)], code)
        key = (canon, parallel, tuple(lead))
        entry = self.shared.get(key)
        if entry is None:
            fname = f"{self.prefix}{label}"
            par = "parallel=_PARALLEL, " if parallel else ""
            block = [f"# {fname}", f"@njit({par}**_OPTS)",
                     f"def {fname}({', '.join(params)}):"] + ["    " + ln for ln in lines]
            entry = self.shared[key] = (fname, block)
            self.functions.append(block)
        else:
            fname, block = entry
            block[0] += f", also for {self.prefix}{label}"
        return f"{fname}({', '.join(params)})"

    def kernel_params(self):
        """Names of the entry function's parameters after the inputs: consts, subgraph data, svals."""
        out = [self.var(n) for n in self.const_args] + [name for name, _ in self.extra_consts]
        out += ["svals"] if self.scalar_consts else []
        out += ["ws", "wofs"] if self.plan.has_workspace else []
        return out + [f"o{k}" for k in range(len(self.plan.out_index))]

    def const_values(self):
        """The values for `kernel_params()`, in order."""
        out = [_owned(n.value) for n in self.const_args] + [v for _, v in self.extra_consts]
        if self.scalar_consts:
            out.append(np.array([n.value.item() for n in self.scalar_consts], dtype=np.float64))
        return out

    def kernel_lines(self):
        src = []
        args = ["dims"] + [self.var(n) for n in self.graph.inputs] + self.kernel_params()
        src.append(f"def {self.prefix}kernel({', '.join(args)}):")
        for k, d in enumerate(self.sizes.values):
            src.append(f"    {self.sizes(d)} = dims[{k}]")
        for k, n in enumerate(self.scalar_consts):
            v = f"svals[{k}]" if n.dtype == np.float64 else f"{np_dtype(n.dtype)}(svals[{k}])"
            src.append(f"    {self.const_ref(n)} = {v}  # const {self.names[n.id]} (value not in the source)")
        src += ["    " + line for line in self.body]
        return src

    # ---- library ops (one per step) -------------------------------------------------------------
    def emit_op(self, node):
        v = self.var(node)
        x = [self.array(i) for i in node.inputs]
        S = self.sizes
        op, p = node.op, node.p
        out = self.body
        out.append(self.comment(node))
        if op == "matmul":
            if node.ndim == 2:
                out.append(f"{v} = _rt.matmul2d({x[0]}, {x[1]}, {self.buffer(node)})")
            else:
                a, b = node.inputs
                nb = S.product(node.shape[:-2])
                m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
                out += [f"{v} = _rt.matmul_batched({x[0]}.reshape(({nb}, {S(m)}, {S(k)})), "
                        f"{x[1]}.reshape(({nb}, {S(k)}, {S(n)})), "
                        f"{self.buffer(node)}.reshape(({nb}, {S(m)}, {S(n)})))"
                        f".reshape({S.shape(node.shape)})"]
        elif op == "transpose":
            users = self.users[node.id]
            if p["perm"] == (1, 0) and users and all(u.op == "matmul" and u.ndim == 2 for u in users) \
                    and node not in self.graph.outputs:
                out.append(f"{v} = {x[0]}.T  # a transposed view: BLAS reads it in place")
            else:
                out += [f"{v} = _rt.copy({x[0]}.transpose({tuple(p['perm'])}), {self.buffer(node)})"]
        elif op == "reshape":
            out.append(f"{v} = {x[0]}.reshape({S.shape(node.shape)})")
        elif op == "broadcast":
            out.append(f"{v} = np.ascontiguousarray(np.broadcast_to({x[0]}, {S.shape(node.shape)}))")
        elif op == "slice":
            out.append(f"{v} = _rt.copy({x[0]}[{self._slices(p)}], {self.buffer(node)})")
        elif op == "pad_slice":
            out += [f"{v} = {self.buffer(node)}", f"{v}[...] = 0", f"_rt.copy({x[0]}, {v}[{self._slices(p)}])"]
        elif op == "concatenate":
            out.append(f"{v} = np.concatenate(({', '.join(x)},), axis={p['axis']})")
        elif op in ("gather", "scatter_add"):
            self._emit_gather(node, v, x)
        elif op == "proj":
            out.append(f"{v} = {self._tuple_part(node.inputs[0], p['index'])}")
        elif op == "scan":
            self._emit_scan(node, x)
        elif op == "cond":
            self._emit_cond(node, x)
        elif op == "while":
            self._emit_while(node, x)
        else:
            raise NotImplementedError(f"codegen: no CPU lowering for op {op!r}")

    # ---- control flow: subgraphs become functions of this module --------------------------------
    def subkernel(self, graph):
        """Emit `graph` as a function of this module; returns (call prefix args, trailing args, name).

        The function has the entry-function convention (dims, inputs, consts); its sizes and
        constants are passed from this kernel's own parameters, so the source stays free of
        concrete sizes and values."""
        from .fusion import Partition
        prefix = f"{self.prefix}s{self.n_subs}_"
        self.n_subs += 1
        sub = Emitter(graph, Partition(graph), parallel=False, fastmath=self.fastmath,
                      cache=self.cache, prefix=prefix, shared=self.shared)
        sub.emit()
        self.functions.extend(sub.functions)
        self.functions.append(["@njit(**_OPTS)"] + sub.kernel_lines())
        dims = f"{prefix}dims"
        self.extra_consts.append((dims, np.array(sub.sizes.values or [0], dtype=np.int64)))
        trailing = []
        for name, value in zip(sub.kernel_params(), sub.const_values()):
            pname = name if name.startswith(prefix) else prefix + name
            self.extra_consts.append((pname, value))
            trailing.append(pname)
        return dims, trailing, f"{prefix}kernel"

    def _tuple_part(self, t, k):
        return f"t{self.names[t.id]}_{k}"

    def _used_parts(self, node):
        return {u.p["index"] for u in self.users[node.id] if u.op == "proj"}

    def _emit_scan(self, node, x):
        p, S, out = node.p, self.sizes, self.body
        dims, trailing, fname = self.subkernel(p["body"])
        nc, nk, T = p["n_consts"], p["n_carry"], p["length"]
        consts, init, xs = x[:nc], x[nc:nc + nk], x[nc + nk:]
        x_nodes = node.inputs[nc + nk:]
        avals = p["out_avals"]
        n_y = len(avals) - 2 * nk
        used = self._used_parts(node)
        t = "t" + self.names[node.id]
        it = f"{t}_p"
        carry = [self._tuple_part(node, k) for k in range(nk)]
        ys = [(nk + k, self._tuple_part(node, nk + k)) for k in range(n_y)]
        hist = [(k, self._tuple_part(node, nk + n_y + k)) for k in range(nk) if nk + n_y + k in used]
        for c, v in zip(carry, init):
            out.append(f"{c} = {v}")
        for k, v in ys + [(nk + n_y + k, h) for k, h in hist]:
            shape, dt = avals[k]
            out.append(f"{v} = np.empty({S.shape(shape)}, {np_dtype(dt)})")
        order = f"range({S(T)} - 1, -1, -1)" if p["reverse"] else f"range({S(T)})"
        out.append(f"for {it} in {order}:  # a real loop: the body is {fname}")
        for k, h in hist:
            out += self._store_row(h, it, carry[k], avals[k][0])
        slices = [f"{v}[{it}:{it} + 1]" if xn.ndim == 1 else f"{v}[{it}]" for v, xn in zip(xs, x_nodes)]
        args = [dims, f"np.full(1, {p['start']} + {it}, np.int64)"] + consts + carry + slices + trailing
        out.append(f"    {t}_r = {fname}({', '.join(args)})")
        for k, c in enumerate(carry):
            out.append(f"    {c} = {t}_r[{k}]")
        for k, v in ys:
            out += self._store_row(v, it, f"{t}_r[{k}]", avals[k][0][1:])

    def _store_row(self, stacked, it, value, shape):
        """Loop-body lines writing `value` (an array of `shape`; 0-d values are stored with
        shape (1,)) into row `it` of `stacked`, element by element: Numba compiles a
        row assignment `stacked[it] = value` about 1 s slower."""
        if not shape:
            return [f"    {stacked}[{it}] = {value}[0]"]
        size = self.sizes.product(shape)
        return [f"    {stacked}_row = {stacked}[{it}].reshape({size})",
                f"    {stacked}_val = {value}.reshape({size})",
                f"    for {stacked}_q in range({size}):",
                f"        {stacked}_row[{stacked}_q] = {stacked}_val[{stacked}_q]"]

    def _emit_cond(self, node, x):
        out = self.body
        gf, gt = node.p["branches"]
        t = "t" + self.names[node.id]
        calls = []
        for g in (gt, gf):
            dims, trailing, fname = self.subkernel(g)
            calls.append(f"{t}_r = {fname}({', '.join([dims] + x[1:] + trailing)})")
        out += [f"if {x[0]}[0]:", "    " + calls[0], "else:", "    " + calls[1]]
        for k in range(len(node.p["out_avals"])):
            out.append(f"{self._tuple_part(node, k)} = {t}_r[{k}]")

    def _emit_while(self, node, x):
        p, out = node.p, self.body
        nc = p["n_consts"]
        consts, init = x[:nc], x[nc:]
        cdims, ctrail, cname = self.subkernel(p["cond"])
        bdims, btrail, bname = self.subkernel(p["body"])
        t = "t" + self.names[node.id]
        carry = [self._tuple_part(node, k) for k in range(len(init))]
        for c, v in zip(carry, init):
            out.append(f"{c} = {v}")
        out.append(f"while {cname}({', '.join([cdims] + consts + carry + ctrail)})[0][0]:")
        out.append(f"    {t}_r = {bname}({', '.join([bdims] + consts + carry + btrail)})")
        for k, c in enumerate(carry):
            out.append(f"    {c} = {t}_r[{k}]")

    def _slices(self, p):
        parts = []
        for a, b, c in zip(p["starts"], p["stops"], p["steps"]):
            stop = "" if b < 0 else str(b)
            parts.append(f"{a}:{stop}:{c}")
        return ", ".join(parts)

    def _emit_gather(self, node, v, x):
        S = self.sizes
        axis = node.p["axis"]
        idx = node.inputs[1]
        big = node.inputs[0].shape if node.op == "gather" else node.shape
        pre, post, n = S.product(big[:axis]), S.product(big[axis + 1:]), S(big[axis])
        m = S.product(idx.shape)
        dt = np_dtype(node.dtype)
        buf = self.buffer(node)
        if node.op == "gather":
            src, dst = f"{x[0]}.reshape(({pre}, {n}, {post}))", f"{buf}.reshape(({pre}, {m}, {post}))"
        else:
            src, dst = f"{x[0]}.reshape(({pre}, {m}, {post}))", f"{v}_z.reshape(({pre}, {n}, {post}))"
            self.body += [f"{v}_z = {buf}", f"{v}_z[...] = 0"]
        self.body.append(f"{v} = _rt.{node.op}({src}, {x[1]}.reshape({m}), {dst})"
                         f".reshape({S.shape(node.shape)})")

    # ---- loop groups -----------------------------------------------------------------------
    def emit_group(self, g):
        GroupEmitter(self, g).emit()


class GroupEmitter:
    """Emits one loop group inline in the entry function.

    A member's value at the current point is the local scalar `x<name>`; a
    stored member is written to the array `v<name>`; values stored by earlier
    steps are read by indexing their arrays `v<name>`.
    """

    def __init__(self, em, g):
        self.em, self.g = em, g
        self.S = em.sizes
        self.mat = em.part.materialized
        self.members = g.members
        self.reads = {}           # external node id -> node (arrays read)
        self.writes = {}          # member id -> node (stored outputs)
        self.partials = {}        # sink id -> node (reduced over the chunked axis: per-chunk slots)
        self.scalar_accs = {}     # sink id -> node (size-1 result: a local accumulator per chunk)
        self.direct_sinks = {}    # sink id -> node (each chunk owns its output rows)
        self.size = int(np.prod(g.shape, dtype=np.int64))
        self.flat = self._flat_ok()
        self.parallel = em.parallel and self.size >= PARALLEL_MIN

    # ---- structure -----------------------------------------------------------------------------
    def _flat_ok(self):
        """A group with no inner axes whose reads are all full-size or size 1 runs as one 1-D loop."""
        g = self.g
        if g.k != g.rank or g.rank <= 1:
            return False
        for n in g.nodes:
            for x in n.inputs:
                if x.id not in self.members and not self._flat_read_ok(x, self.size):
                    return False
            if g.members[n.id] == "sink" and n.size != 1:
                return False
        return True

    def _flat_read_ok(self, x, total):
        src = self.em.part.resolve(x)
        if src.size == 1:
            return True
        # the same elements in the same order: only unit reshapes between the group and src
        while x.id in self.em.part.virtual:
            if x.op == "broadcast" and x.size != x.inputs[0].size:
                return False
            x = x.inputs[0]
        return src.size == total

    def _lvl(self, x):
        """Level of x in this group: its member level, or the level its shape reads at."""
        return self.members[x.id] if x.id in self.members else self.g.level_of_shape(x.shape)

    def _is_scalar_read(self, x):
        return x.size == 1 and tuple(x.shape) != self.g.shape

    def _is_full(self, x):
        return x.size == self.size and x.size != 1 or tuple(x.shape) == self.g.shape

    def flat_name(self, x):
        return f"{self.em.var(x)}_f" if self.flat and self._is_full(x) else self.em.var(x)

    def read(self, x, target_shape):
        """Expression reading value x, stored by an earlier step, at the current point."""
        em = self.em
        # index of x at this point: x's dims are right-aligned with the target's
        off = len(target_shape) - x.ndim
        x, ix = em.part.resolve_index(x, [f"i{off + d}" for d in range(x.ndim)])
        if em.is_scalar_const(x):
            return em.const_ref(x)
        self.reads[x.id] = x
        if self._is_scalar_read(x):
            return f"{em.scalar(x)}_s"
        if self.flat:
            return f"{self.flat_name(x)}[i]"
        return f"{em.var(x)}[{', '.join(ix) if ix else '0'}]"

    def value(self, x, target_shape):
        return self.em.scalar(x) if x.id in self.members else self.read(x, target_shape)

    def node_line(self, n):
        """The SSA line computing member n."""
        v = self.em.scalar(n)
        if n.op in ("broadcast", "reshape"):
            return f"{v} = {self.value(n.inputs[0], n.shape)}"
        args = [self.value(x, n.shape) for x in n.inputs]
        return f"{v} = {_elementwise_expr(n, args)}"

    def point_index(self, shape, skip=()):
        """Index of an array of `shape` (prefix-aligned with the domain) at the current point."""
        if self.flat:
            return "i"
        ix = ["0" if shape[d] == 1 else f"i{d}" for d in range(len(shape)) if d not in skip]
        return ", ".join(ix) if ix else "0"

    # ---- emission ---------------------------------------------------------------------------------
    def emit(self):
        g = self.g
        if g.rank == 0:
            return self.emit_scalar_group()
        for s in g.nodes:
            if self.members[s.id] != "sink":
                continue
            if s.size == 1:
                self.scalar_accs[s.id] = s
            elif 0 in s.p["axes"] and g.shape[0] != 1 and self.parallel:
                self.partials[s.id] = s
            else:
                self.direct_sinks[s.id] = s
        ind = "    "
        first = "range(lo, hi)" if self.parallel else \
            f"range({self.S.product(g.shape) if self.flat else self.S(g.shape[0])})"
        if self.flat:
            body = [f"for i in {first}:"]
            body += self._flat_body(ind)
        else:
            body = [f"for i0 in {first}:"]
            depth = ind
            for d in range(1, g.k):
                body.append(depth + f"for i{d} in range({self.S(g.shape[d])}):")
                depth += ind
            body += self._flat_body(depth) if g.k == g.rank else self._row_body(depth)
        self._finish(body)

    def _store(self, n, ind, lines):
        if n.id in self.mat:
            self.writes[n.id] = n
            lines.append(ind + f"{self.flat_name(n)}[{self.point_index(n.shape)}] = {self.em.scalar(n)}")

    def _emit_members(self, nodes, ind, lines):
        for n in nodes:
            lines.append(ind + self.node_line(n) + "  " + self.em.comment(n))
            self._store(n, ind, lines)

    def _sink_update(self, s, ind):
        em = self.em
        x = s.inputs[0]
        v = self.value(x, x.shape)
        if s.id in self.scalar_accs:
            target = f"{em.scalar(s)}_acc"
        elif s.id in self.partials:
            target = f"{em.var(s)}_part[ch, {self.point_index(x.shape, skip=s.p['axes'])}]"
        else:
            target = f"{em.var(s)}[{self.point_index(x.shape, skip=s.p['axes'])}]"
        return ind + REDUCE_UPDATE[s.op].format(acc=target, v=v) + "  " + em.comment(s)

    def _flat_body(self, ind):
        """No inner axes: every member and sink once per point."""
        lines = []
        self._emit_members([n for n in self.g.nodes if self.members[n.id] != "sink"], ind, lines)
        for s in self.g.nodes:
            if self.members[s.id] == "sink":
                lines.append(self._sink_update(s, ind))
        return lines

    def _row_body(self, ind):
        """Row group: per-row values between passes over the inner axes."""
        g, em, m = self.g, self.em, self.members
        ready = self.g.pass_ready()
        nodes = g.nodes
        lines = []
        last = max(ready.values())
        for p in range(last + 1):
            # per-row values that become available at p (after the previous pass)
            for n in nodes:
                if m[n.id] == 1 and ready[n.id] == p and n.op not in REDUCE_OPS:
                    self._emit_members([n], ind, lines)
            for s in nodes:
                if m[s.id] == "sink" and self._lvl(s.inputs[0]) == 1 and ready.get(s.inputs[0].id, 0) == p:
                    lines.append(self._sink_update(s, ind))
            # pass p over the inner axes: row reductions, stores and sinks of per-point values
            reds = [n for n in nodes if m[n.id] == 1 and n.op in REDUCE_OPS and ready[n.id] == p + 1]
            stores = [n for n in nodes if m[n.id] == 2 and n.id in self.mat and ready[n.id] == p]
            sinks = [s for s in nodes if m[s.id] == "sink" and self._lvl(s.inputs[0]) == 2
                     and ready.get(s.inputs[0].id, 0) == p]
            if not (reds or stores or sinks):
                continue
            lines.append(ind + f"# pass {p} over the row")
            for r in reds:
                lines.append(ind + f"{em.scalar(r)} = {reduce_init(r.op, r.dtype)}")
            depth = ind
            for d in range(g.k, g.rank):
                lines.append(depth + f"for i{d} in range({self.S(g.shape[d])}):")
                depth += "    "
            roots = [r.inputs[0] for r in reds] + stores + [s.inputs[0] for s in sinks]
            for n in self.g.needed(roots):
                lines.append(depth + self.node_line(n) + "  " + em.comment(n))
                if n in stores:
                    self._store(n, depth, lines)
            for r in reds:
                x = r.inputs[0]
                lines.append(depth + REDUCE_UPDATE[r.op].format(acc=em.scalar(r), v=self.value(x, x.shape))
                             + "  " + em.comment(r))
            for s in sinks:
                lines.append(self._sink_update(s, depth))
            for r in reds:
                self._store(r, ind, lines)
        return lines

    def _finish(self, body):
        """Allocate the group's stored outputs in the entry function and run the loop as a
        function of the module (chunks over prange, or serial), which combines the partials."""
        g, em, S = self.g, self.em, self.S
        total = S.product(g.shape)
        extent = total if self.flat else S(g.shape[0])
        accs = list(self.scalar_accs.values())
        out = em.body
        mode = "parallel chunks" if self.parallel else "serial"
        kind = "flattened" if self.flat else f"outer axes {tuple(range(g.k))}"
        out.append(f"# group {g.seq}: fused loop over {S.shape(g.shape)} ({kind}, {mode}), "
                   f"{len(g.nodes)} nodes")
        for n in self.writes.values():
            out.append(f"{em.var(n)} = {em.buffer(n)}")
        for s in self.direct_sinks.values():
            out += [f"{em.var(s)} = {em.buffer(s)}", f"{em.var(s)}[...] = {reduce_init(s.op, s.dtype)}"]
        for s in accs + list(self.partials.values()):
            out.append(f"{em.var(s)} = {em.buffer(s)}")
        fn = []
        if self.flat:
            for x in list(self.reads.values()) + list(self.writes.values()):
                if self._is_full(x):
                    fn.append(f"{self.flat_name(x)} = {em.var(x)}.reshape({total})")
        for x in self.reads.values():
            if self._is_scalar_read(x):
                fn.append(f"{em.scalar(x)}_s = {em.first(x)}")
        if not self.parallel:
            fn += [f"{em.scalar(s)}_acc = {reduce_init(s.op, s.dtype)}" for s in accs]
            fn += body
            fn += [f"{em.var(s)}[{self._zeros(s)}] = {em.scalar(s)}_acc" for s in accs]
        else:
            fn.append(f"nch = max(1, min({MAX_CHUNKS}, ({total}) // {GRAIN}, {extent}))")
            # per-chunk partials: scratch of MAX_CHUNKS rows (nch of them used)
            for k, s in enumerate(accs + list(self.partials.values())):
                v = f"{em.var(s)}_part"
                shape = (MAX_CHUNKS,) + (tuple(s.shape) if s.id in self.partials else ())
                out.append(f"{v} = {em.scratch(k, shape, s.dtype)}")
                if s.id in self.partials:
                    fn.append(f"{v}[...] = {reduce_init(s.op, s.dtype)}")
            ind = "    "
            chunk = [f"lo = ch * {extent} // nch", f"hi = (ch + 1) * {extent} // nch"]
            chunk += [f"{em.scalar(s)}_acc = {reduce_init(s.op, s.dtype)}" for s in accs]
            chunk += body
            chunk += [f"{em.var(s)}_part[ch] = {em.scalar(s)}_acc" for s in accs]
            fn.append("for ch in prange(nch):")
            if len(chunk) > OUTLINE_LINES:
                # Numba's parfor passes slow down with the size of a prange body: a long body
                # compiles faster as its own function; prange's index is unsigned, pass int64
                call = em.function(chunk, False, f"group_{g.seq}_chunk", lead=("ch", "nch"))
                fn.append(ind + call.replace("(ch, ", "(np.int64(ch), ", 1))
            else:
                fn += [ind + ln for ln in chunk]
            for s in accs:
                v = em.var(s)
                comb = REDUCE_COMBINE[s.op].format(a=f"{v}_t", b=f"{v}_part[c]")
                fn += [f"{v}_t = {v}_part[0]", "for c in range(1, nch):", f"    {v}_t = {comb}",
                       f"{v}[{self._zeros(s)}] = {v}_t"]
            for s in self.partials.values():
                # element loops: Numba compiles an array assignment or an in-place array
                # operator with its broadcasting machinery, about 1-2 s each
                v, size = em.var(s), S.product(s.shape)
                comb = REDUCE_COMBINE[s.op].format(a=f"{v}_t", b=f"{v}_pf[c, q]")
                fn += [f"{v}_f = {v}.reshape({size})", f"{v}_pf = {v}_part.reshape(({MAX_CHUNKS}, {size}))",
                       f"for q in range({size}):", f"    {v}_t = {v}_pf[0, q]",
                       "    for c in range(1, nch):", f"        {v}_t = {comb}", f"    {v}_f[q] = {v}_t"]
        em.outline(fn, self.parallel, f"group_{g.seq}")

    def _zeros(self, node):
        return ", ".join(["0"] * max(node.ndim, 1))

    def emit_scalar_group(self):
        """A group over shape (): straight-line code in the entry function."""
        g, em = self.g, self.em
        out = em.body
        out.append(f"# group {g.seq}: scalar ops")

        def val(x):
            if x.id in self.members:
                return em.scalar(x)
            x = em.part.resolve(x)
            if em.is_scalar_const(x):
                return em.const_ref(x)
            return em.first(x)

        for n in g.nodes:
            if n.op in REDUCE_OPS or n.op in ("broadcast", "reshape"):
                expr = val(n.inputs[0])
            else:
                expr = _elementwise_expr(n, [val(x) for x in n.inputs])
            out.append(f"{em.scalar(n)} = {expr}  {em.comment(n)}")
            if n.id in self.mat:
                out += [f"{em.var(n)} = {em.buffer(n)}", f"{em.var(n)}[{self._zeros(n)}] = {em.scalar(n)}"]
