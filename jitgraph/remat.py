"""Rematerialization (gradient checkpointing): store fewer activations, recompute the rest.

The joint forward+backward graph of `jit_grad` keeps every forward value the
backward pass reads (a *residual*) alive from the forward pass until its use in
the backward pass: a depth-n network holds O(n) activations at the boundary.
This pass cuts the forward pass into *segments*. The residuals of a recomputed
segment are not kept: the backward pass reads clones of them, recomputed from
the values that cross into the segment (its checkpoints, which stay stored), so
only the checkpoints and one segment's residuals are alive at a time.

The clones are new nodes made, in creation order, right before the first
backward node that reads them; graphs list their nodes in creation order, so a
segment's recomputation runs just before its part of the backward pass and its
memory is free again before the next one.

Policies (`jit_grad(..., remat=...)`):

* None: store every residual (unless `checkpoint` marks regions).
* "sqrt": about sqrt(n) segments along the forward pass, where n is the total
  bytes of the residuals over the median bytes crossing a cut (the number of
  layers of a network, say); each cut is placed where the fewest bytes cross
  near its target (between layers), and the last segment, whose backward runs
  right after the forward, is not recomputed.
* an int: a byte budget for the predicted peak (`MemoryReport.peak_bytes`): the
  least recomputation that meets it, or `MemoryBudgetError` naming the smallest
  budget the graph can meet.

`checkpoint(fn)` marks everything `fn` computes as recomputed (the semantics of
`jax.checkpoint`): only its inputs, and its outputs when later forward code
needs them, are stored.
"""
import functools
import math

from .core import GraphTrace, Tensor, innermost
from .errors import JitgraphError
from .graph import Graph, Node, flops
from .tree import tree_flatten

_VIEW_OPS = ("input", "const", "broadcast", "reshape", "transpose")


class MemoryBudgetError(JitgraphError):
    """A `remat=<bytes>` budget that no rematerialization of the graph meets."""


def checkpoint(fun):
    """Recompute what `fun` computes during the backward pass instead of storing it.

    Like `jax.checkpoint`: `checkpoint(f)(*args)` returns `f(*args)`; under
    `jit_grad` the values `f` computes are not kept for the backward pass (only its
    inputs, and outputs that later code reads), and are recomputed from the inputs when
    the backward pass needs them. Gradients are unchanged. Outside a traced function
    (plain NumPy, eager `value_and_grad`) it simply calls `f`.
    """

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        trace = innermost([leaf for leaf in tree_flatten((args, kwargs))[0]
                           if isinstance(leaf, Tensor) and isinstance(leaf._trace, GraphTrace)])
        if trace is None:
            return fun(*args, **kwargs)
        prev = trace.region
        trace.region = trace.new_region()
        try:
            return fun(*args, **kwargs)
        finally:
            trace.region = prev

    return wrapped


def _value_bytes(n):
    # broadcasts, reshapes and transposes of stored values are views or fused away
    return 0 if n.op in _VIEW_OPS else max(n.size, 1) * n.dtype.itemsize


class _Forward:
    """The forward part of a joint graph: positions, residuals, values crossing each cut."""

    def __init__(self, graph):
        adj = graph.adjoint_ids
        self.graph = graph
        self.nodes = [n for n in graph.nodes if n.id not in adj]
        self.pos = {n.id: i for i, n in enumerate(self.nodes)}
        n_fwd = len(self.nodes)
        self.last_fwd = {}
        for i, n in enumerate(self.nodes):
            for x in n.inputs:
                self.last_fwd[x.id] = i
        for o in graph.outputs:       # outputs stay alive to the end of the forward pass
            if o.id in self.pos:
                self.last_fwd[o.id] = n_fwd
        self.residuals = set()
        for n in graph.nodes:
            if n.id in adj:
                for x in n.inputs:
                    if x.id in self.pos and x.op not in ("input", "const"):
                        self.residuals.add(x.id)

    @functools.cached_property
    def cuts(self):
        """(rows, total): for each position p strictly inside the forward pass (a cut before
        forward node p with residuals on both sides), (p, bytes crossing the cut, residual
        bytes before p); and the total residual bytes."""
        n = len(self.nodes)
        cross = [0] * (n + 2)
        res_before = [0] * (n + 2)
        for i, node in enumerate(self.nodes):
            b = _value_bytes(node)
            last = self.last_fwd.get(node.id, i)
            if last > i and b:
                cross[i + 1] += b
                cross[last + 1] -= b
            if node.id in self.residuals:
                res_before[i + 1] += b
        run_c = run_r = 0
        rows = []
        for p in range(n + 1):
            run_c += cross[p]
            run_r += res_before[p]
            rows.append((p, run_c, run_r))
        total = run_r
        return [row for row in rows if 0 < row[2] < total], total

    def chain_length(self):
        """About how many cut points of typical size the residuals span: total residual
        bytes over the median bytes crossing a cut (the n of "O(sqrt n)")."""
        rows, total = self.cuts
        sizes = sorted(c for _, c, _ in rows if c > 0)
        if not sizes:
            return 0
        return total / sizes[len(sizes) // 2]


def segments_for(fwd, k):
    """Cut positions splitting the residual bytes into about k equal segments, each cut
    where the fewest bytes cross within half a segment of its target."""
    rows, total = fwd.cuts
    if k <= 1 or not rows:
        return []
    cuts = []
    for j in range(1, k):
        lo, hi = total * (j - 0.5) / k, total * (j + 0.5) / k
        target = total * j / k
        window = [row for row in rows if lo <= row[2] <= hi and (not cuts or row[0] > cuts[-1])]
        if not window:
            continue
        p = min(window, key=lambda row: (row[1], abs(row[2] - target), row[0]))[0]
        cuts.append(p)
    return cuts


def rematerialize(graph, cuts=(), recompute_segments=None, fwd=None):
    """A copy of joint `graph` whose backward pass recomputes residuals.

    Args:
        cuts: positions in the forward pass (indices into its nodes in order) where
            automatic segments start; segment j runs from cuts[j-1] to cuts[j].
        recompute_segments: which automatic segments to recompute (default: all but the
            last). Regions marked with `checkpoint` are always recomputed.

    `fwd` is graph's `_Forward`, when the caller has it. Returns the graph unchanged when
    nothing is recomputed.
    """
    regions = graph.meta.get("checkpoint_regions") or {}
    cuts = list(cuts)
    if not cuts and not regions:
        return graph
    fwd = fwd or _Forward(graph)
    n_auto = len(cuts) + 1
    if recompute_segments is None:
        recompute_segments = set(range(n_auto - 1)) if cuts else set()
    seg, seg_end = {}, {}
    bounds = cuts + [len(fwd.nodes)]
    j = 0
    for i, n in enumerate(fwd.nodes):
        while i >= bounds[j]:
            j += 1
        key = ("region", regions[n.id]) if n.id in regions else ("auto", j)
        if key[0] == "region" or j in recompute_segments:
            seg[n.id] = key
            seg_end[key] = i
    if not seg:
        return graph

    def recomputed(x):
        # a value of a recomputed segment that does not outlive it in the forward pass
        # (values that do are the next segments' checkpoints: stored anyway)
        key = seg.get(x.id)
        return key is not None and x.op not in ("input", "const") \
            and fwd.last_fwd.get(x.id, -1) <= seg_end[key]

    clones = {}

    def clone(root):
        stack = [root]
        while stack:
            n = stack[-1]
            if n.id in clones:
                stack.pop()
                continue
            todo = [x for x in n.inputs if recomputed(x) and seg[x.id] == seg[n.id] and x.id not in clones]
            if todo:
                stack += todo
                continue
            stack.pop()
            ins = [clones[x.id] if x.id in clones and seg.get(x.id) == seg[n.id] else x for x in n.inputs]
            clones[n.id] = Node(n.op, ins, n.params, n.shape, n.dtype, n.value)
        return clones[root.id]

    new = {}

    def mapped(x):
        if x.id in new:
            return new[x.id]
        if x.id in fwd.residuals and recomputed(x):
            return clone(x)
        return x

    for n in graph.nodes:
        if n.id in graph.adjoint_ids:
            new[n.id] = Node(n.op, [mapped(x) for x in n.inputs], n.params, n.shape, n.dtype, n.value)
    outputs = [new.get(o.id, o) for o in graph.outputs]
    meta = dict(graph.meta)
    n_segments = (len(cuts) + 1 if cuts else 0) + len(set(regions.values()))
    meta["remat"] = dict(meta.get("remat") or {}, segments=n_segments, recomputed_nodes=len(clones),
                         recompute_flops=sum(flops(c) for c in clones.values()))
    adjoint = set(n.id for n in new.values()) | {c.id for c in clones.values()}
    return Graph(graph.inputs, outputs, adjoint_ids=adjoint, meta=meta)


def apply_policy(graph, policy, report_of):
    """The graph `jit_grad(remat=policy)` compiles (see the module docstring).

    `report_of(graph)` returns the MemoryReport of a graph as compiled (for budgets).
    """
    if not graph.meta.get("grad"):
        if policy is not None:
            raise ValueError("remat applies to jit_grad (a forward-only graph stores no activations)")
        return graph
    if policy is None:
        out = rematerialize(graph)
        out.meta["remat"] = dict(out.meta.get("remat") or {}, policy=None if out is graph else "checkpoint")
        return out
    fwd = _Forward(graph)
    n = fwd.chain_length()
    if isinstance(policy, str):
        if policy != "sqrt":
            raise ValueError(f"remat must be None, 'sqrt' or a byte budget (int), got {policy!r}")
        k = max(2, round(math.sqrt(n)))
        out = rematerialize(graph, segments_for(fwd, k), fwd=fwd)
        out.meta["remat"] = dict(out.meta.get("remat") or {}, policy="sqrt")
        return out
    if isinstance(policy, bool) or not isinstance(policy, int) or policy <= 0:
        raise ValueError(f"remat must be None, 'sqrt' or a positive byte budget (int), got {policy!r}")
    return _fit_budget(graph, fwd, n, int(policy), report_of)


def _fit_budget(graph, fwd, n, budget, report_of):
    """The least recomputation whose predicted peak fits `budget` bytes."""
    tried = []

    def fits(g, label):
        peak = report_of(g).peak_bytes
        tried.append((peak, label))
        return peak <= budget

    def chosen(g):
        g.meta["remat"] = dict(g.meta.get("remat") or {}, policy=budget)
        return g

    base = rematerialize(graph, fwd=fwd)
    if fits(base, "no recomputation"):
        return chosen(base)
    if n < 1:
        raise MemoryBudgetError(_budget_message(budget, tried))
    # about sqrt(n) segments, recomputing the earliest m of them (their activations are
    # stored longest): the smallest m that fits, by bisection on the predicted peak
    k = max(2, round(math.sqrt(n)))
    cuts = segments_for(fwd, k)
    lo, hi, found = 1, len(cuts), None
    while lo <= hi:
        m = (lo + hi) // 2
        g = rematerialize(graph, cuts, set(range(m)), fwd=fwd)
        if fits(g, f"{m} of {len(cuts) + 1} segments recomputed"):
            found, hi = g, m - 1
        else:
            lo = m + 1
    if found is not None:
        return chosen(found)
    # finer segments: more checkpoints, smaller segments
    k2, most = k, max(k, int(n))
    while k2 < most:
        k2 = min(most, k2 * 2)
        g = rematerialize(graph, segments_for(fwd, k2), fwd=fwd)
        if fits(g, f"{k2} segments"):
            return chosen(g)
    raise MemoryBudgetError(_budget_message(budget, tried))


def _budget_message(budget, tried):
    best, label = min(tried)
    return (f"remat budget of {budget:,} bytes cannot be met: the smallest predicted peak is "
            f"{best:,} bytes ({label}); pass remat={best} or more, or reduce the batch")
