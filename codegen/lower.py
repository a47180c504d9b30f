"""The target-neutral lowering core: what every emitter writes the same way.

`EmitterBase` holds the per-graph facts both emitters share: value names
(`v<name>` arrays, `x<name>` scalars), size symbols, node comments, and the
rendering of elementwise expressions and reduction updates from the registry
(each target supplies only its spelling of the scalar language's functions).

`GroupPlan` is one loop group's plan, computed once and rendered by each target:
the level of every value, whether the group runs as one flat loop, which
values are read from storage and how (`read`), and, for row groups, the
schedule of passes over each row (`passes`): which per-row values, row
reductions, stores and sinks each pass computes, and which per-point members
it must recompute. The emitters turn a plan into loops (CPU: chunked loops on
Numba's threads; CUDA: grid-stride kernels with block reductions).
"""
import functools

import numpy as np

from jitgraph.ops.reduce import REDUCTIONS, identity
from jitgraph.ops.registry import PRIMS
from jitgraph.ops.scalar import compute_dtype, fill, render

from .fusion import INDEX_VIEW_OPS
from .source import Sizes, literal, np_dtype


class EmitterBase:
    """Names, sizes and scalar expressions of one graph, for one target.

    Subclasses set `spell(name, dtype) -> (text, wrap)`: the target's text for a
    function of the scalar language, and a conversion to wrap its result in (or None)."""

    def __init__(self, graph, partition):
        self.graph = graph
        self.part = partition
        self.names = graph.names()
        self.sizes = Sizes(graph)
        # constant arrays are parameters of the kernel (scalars are written into the code)
        self.const_args = [n for n in graph.nodes if n.op == "const" and n.value.ndim > 0]
        self._render = functools.lru_cache(maxsize=None)(
            lambda template, dtype: render(template, self.spell, literal, dtype))

    # ---- names ------------------------------------------------------------------------------
    def var(self, node):
        """The array holding node's stored value."""
        return "v" + self.names[node.id]

    def scalar(self, node):
        """The local scalar holding node's value at the current loop point."""
        return "x" + self.names[node.id]

    def is_scalar_const(self, node):
        return node.op == "const" and node.value.ndim == 0

    def slot(self, slot, shape, dtype):
        """The workspace view of planned slot `slot` holding an array of `shape` and `dtype`."""
        dtype = np.dtype(dtype)
        return (f"_rt.slot(ws, wofs[{slot}], {self.sizes.product(shape)} * {dtype.itemsize}, "
                f"{self.sizes.shape(shape)}, {np_dtype(dtype)})")

    def comment(self, node):
        """`# c:f64[n0,n1] = mul a b`: the node, with sizes as the symbols the code uses."""
        if PRIMS[node.op].multiple:     # a tuple, read by proj nodes (control flow: subgraphs)
            args = " ".join(self.names[i.id] for i in node.inputs)
            small = ", ".join(f"{k}={v!r}" for k, v in node.params if isinstance(v, (int, bool, str)))
            return f"# {self.names[node.id]}:tuple = {node.op}[{small}] {args}"
        return "# " + self.graph.node_line(node, self.names, dims=self.sizes)

    # ---- scalar expressions -------------------------------------------------------------------
    def expr(self, node, args):
        """The value of elementwise node `node` from its operands' expressions `args`."""
        template = PRIMS[node.op].template(node.p)
        dtype = compute_dtype([x.dtype for x in node.inputs], node.dtype)
        return fill(self._render(template, dtype), args)

    def reduce_init(self, op, dtype):
        """The identity of reduction `op` as a literal of its accumulator's dtype."""
        acc = acc_dtype(dtype)
        if np.dtype(dtype) == bool:    # max/min of booleans start at False/True, not at int64's range
            return literal(int(identity(op, dtype)), acc)
        return literal(identity(op, acc), acc)

    def combine(self, op, a, b, dtype):
        """The expression combining two partial results of reduction `op`."""
        return fill(self._render(REDUCTIONS[op].combine, acc_dtype(dtype)), [a, b])

    def reduce_update(self, op, acc, v, dtype):
        """The statement adding value `v` into accumulator `acc`."""
        return f"{acc} = {self.combine(op, acc, v, dtype)}"


def acc_dtype(dtype):
    """The dtype a reduction accumulates in: booleans are counted in int64."""
    return np.dtype(np.int64) if np.dtype(dtype) == bool else np.dtype(dtype)


class Pass:
    """One pass over the inner axes of a row group, and the per-row work before it.

    `row`: per-row members that become known before the pass; `row_sinks`: sinks of
    per-row values updated then; `reds`: row reductions the pass computes; `stores`:
    per-point members it stores; `sinks`: sinks of per-point values it updates;
    `needed`: the per-point members it computes (recomputed in every pass needing them)."""

    __slots__ = ("index", "row", "row_sinks", "reds", "stores", "sinks", "needed")

    def __init__(self, index, **kw):
        self.index = index
        for k, v in kw.items():
            setattr(self, k, v)

    @property
    def empty(self):
        return not (self.reds or self.stores or self.sinks)


class GroupPlan:
    """The target-neutral plan of one loop group (see the module docstring).

    `stored`: ids of the values the target stores (the partition's materialized
    values, plus any the target adds). `index_sinks`: whether the target's flat loop
    must give sinks their own index (the CPU's flat loop has one linear index, so a
    sink reduced to more than one value keeps the nested loops)."""

    def __init__(self, em, group, stored, index_sinks):
        self.em, self.g = em, group
        self.members = group.members
        self.stored = stored
        self.size = int(np.prod(group.shape, dtype=np.int64))
        self.sinks = [n for n in group.nodes if self.members[n.id] == "sink"]
        self.loop_sinks = self.sinks     # the sinks the group's own loop updates
        self.flat = self._flat_ok(index_sinks)

    # ---- structure ------------------------------------------------------------------------------
    def _flat_ok(self, index_sinks):
        """A group with no inner axes whose reads are all full-size or size 1 runs as one 1-D loop."""
        g = self.g
        if g.k != g.rank or g.rank <= 1:
            return False
        if index_sinks and any(s.size != 1 for s in self.sinks):
            return False
        if any(self.is_gather(n) for n in g.nodes):
            return False
        return all(x.id in self.members or self._flat_read_ok(x) for n in g.nodes for x in n.inputs)

    def _flat_read_ok(self, x):
        part = self.em.part
        src = part.resolve(x)
        if src.id in part.recomputed:
            # computed from its operands at the same point (fusion's _recompute_cheap)
            return src.size == self.size and all(self._flat_read_ok(y) for y in src.inputs)
        if src.id in part.index_views and src.size != 1:
            return False            # shifted indices need the loop's nested indices
        if src.size == 1:
            return True
        # the same elements in the same order: only unit reshapes between the group and src
        while x.id in part.virtual:
            if x.op == "broadcast" and x.size != x.inputs[0].size:
                return False
            x = x.inputs[0]
        return src.size == self.size

    def level(self, x):
        """Level of x in this group: its member level, or the level its shape reads at."""
        return self.members[x.id] if x.id in self.members else self.g.level_of_shape(x.shape)

    def is_full(self, x):
        return x.size == self.size and x.size != 1 or tuple(x.shape) == self.g.shape

    def is_scalar_read(self, x):
        return x.size == 1 and tuple(x.shape) != self.g.shape

    # ---- values ----------------------------------------------------------------------------------
    def source(self, x, target_shape):
        """(stored value, its index expressions) read for value x at the current point of a
        loop over `target_shape` (x's dims right-aligned with it; loop indices i<d>)."""
        off = len(target_shape) - x.ndim
        return self.em.part.resolve_index(x, [f"i{off + d}" for d in range(x.ndim)])

    def is_gather(self, n):
        """A member that is an index view made stored (fusion's `_need_array`): its value at a
        point is read from its operands at shifted indices."""
        return n.op in INDEX_VIEW_OPS

    def node_line(self, n, value, names):
        """The SSA line computing member n, with `value(x, shape)` the expression for operand x
        and `names` the code's naming (its `scalar(node)` and `comment(node)`); a gather
        member's value is `names.gather(n)`."""
        if self.is_gather(n):
            rhs = names.gather(n)
        elif n.op in ("broadcast", "reshape") or n.kind == "reduce":
            rhs = value(n.inputs[0], n.shape)
        else:
            rhs = self.em.expr(n, [value(x, n.shape) for x in n.inputs])
        return f"{names.scalar(n)} = {rhs}  {names.comment(n)}"

    # ---- row groups --------------------------------------------------------------------------------
    def passes(self):
        """The passes over each row of a row group, in order (empty passes left out)."""
        g, m = self.g, self.members
        ready = g.pass_ready()
        out = []
        for p in range(max(ready.values()) + 1):
            ps = Pass(
                p,
                row=[n for n in g.nodes if m[n.id] == 1 and ready[n.id] == p and n.kind != "reduce"],
                row_sinks=[s for s in self.loop_sinks if self.level(s.inputs[0]) == 1
                           and ready.get(s.inputs[0].id, 0) == p],
                reds=[n for n in g.nodes if m[n.id] == 1 and n.kind == "reduce" and ready[n.id] == p + 1],
                stores=[n for n in g.nodes if m[n.id] == 2 and n.id in self.stored and ready[n.id] == p],
                sinks=[s for s in self.loop_sinks if self.level(s.inputs[0]) == 2
                       and ready.get(s.inputs[0].id, 0) == p])
            roots = [r.inputs[0] for r in ps.reds] + ps.stores + [s.inputs[0] for s in ps.sinks]
            ps.needed = g.needed(roots) if not ps.empty else []
            out.append(ps)
        return out

    def row_body(self, r, ind):
        """The body of a row group's loop for one row (at indentation `ind`), rendered by `r`:
        the per-row values and sinks known before each pass, then the pass over the row's
        points (its row reductions, stores and sinks). The renderer supplies the target's
        parts: `scalar`, `comment`, `value` (naming), `store(n, ind)` and `row_store(n, ind)`
        (lines storing a per-point or per-row member), `update(s)` (a sink's or row
        reduction's update statement), `row_update(s, ind)` (lines updating a sink of a
        per-row value), `open_pass(ind)` (lines opening the loop over a row, and the indent
        inside it) and `close_pass(reds, ind)` (lines finishing the pass's row reductions)."""
        em, lines = self.em, []
        for ps in self.passes():
            for n in ps.row:
                lines.append(ind + self.node_line(n, r.value, r))
                lines += r.row_store(n, ind)
            for s in ps.row_sinks:
                lines += r.row_update(s, ind)
            if ps.empty:
                continue
            lines.append(f"{ind}# pass {ps.index} over the row")
            lines += [f"{ind}{r.scalar(red)} = {em.reduce_init(red.op, red.dtype)}" for red in ps.reds]
            head, inner = r.open_pass(ind)
            lines += head
            for n in ps.needed:
                lines.append(inner + self.node_line(n, r.value, r))
                if n in ps.stores:
                    lines += r.store(n, inner)
            lines += [inner + r.update(x) for x in ps.reds + ps.sinks]
            lines += r.close_pass(ps.reds, ind)
        return lines
