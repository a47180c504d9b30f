"""Algebraic rewrites of a traced forward graph, before the reverse sweep.

The graph records what the NumPy code computes, in its order. Where another order computes
the same values with far less work, the forward graph is rewritten before `ad.backward`
runs, so the gradient inherits the cheaper form (`api._trace_graph`).

* **Rows gathered, then multiplied** (`_gather_then_product`): `A[idx] @ W` with more
  indices than A has rows, a graph network's messages `h[src] @ W` over E edges of N nodes,
  multiplies E rows where N would do. `(A @ W)[idx]` computes the same rows (each is a row
  of A times W, in the same order of operations, up to the product's blocking) with
  N / E of the product's flops, and its reverse sweep is a scatter of the output's adjoint
  into N rows followed by an N-row product for W's gradient, where `A[idx].T @ dZ` was an
  E-row one. An embedding's rows for a batch of sequences (`emb[tokens] @ W`, tokens of
  shape (B, T), more tokens than the vocabulary has entries) are the same product, and so
  are the gathered pieces of `concatenate([h[src], h[dst], e], axis=1) @ W` (a
  message-passing layer), which becomes the sum of each piece times its rows of W.

* **Bounds checks of an index array's pieces** (`merge_index_checks`): a loop that indexes
  with a column of one array per step (`logits[rows, tokens[:, t + 1]]`) checks each column's
  largest and smallest value when the function runs, two reductions per step that the
  compiled kernel carries as separate accumulators (80 of them made one 452-line loop that
  took 5-7 s to compile). Slices of one array that tile a box are checked once, over the box.

Values agree with the graph as traced up to rounding.
"""
import itertools
import math

from .core import bind
from .graph import Node, toposort
from .numpy_api import reshape
from .ops.reduce import amax, amin


def _rows_gathered(g, m):
    """(A, idx, count) when `g` is rows of a 2-D A gathered along axis 0 (possibly reshaped
    from an index array of any rank to 2-D) and multiplying them by a (k, m) matrix costs
    more than multiplying A and gathering the products; else None."""
    if g.op == "reshape" and g.inputs[0].op == "gather":
        # (an embedding's rows for a batch of sequences, emb[tokens] @ W, flattened to 2-D)
        g = g.inputs[0] if g.shape == (math.prod(g.inputs[0].shape[:-1]), g.shape[1]) else g
    if g.op != "gather" or g.p["axis"] != 0 or len(g.inputs[0].shape) != 2:
        return None
    a, idx = g.inputs
    (rows, k), e = a.shape, math.prod(idx.shape)
    # flops of the product plus the values the gather moves, before and after
    if rows * k * m + e * m >= e * k * m + e * k:
        return None
    return a, idx, e


def _gather_then_product(trace, n, ins):
    """matmul(gather(A, idx, axis=0), W) as gather(matmul(A, W), idx, axis=0) when that is
    cheaper; None otherwise."""
    if n.op != "matmul" or len(n.shape) != 2:
        return None
    got = _rows_gathered(ins[0], ins[1].shape[1])
    if got is None:
        return None
    a, idx, e = got
    product = bind("matmul", trace.tracer(a), trace.tracer(ins[1]))
    idx = trace.tracer(idx)
    flat = idx if len(idx.shape) == 1 else reshape(idx, (e,))
    return trace.to_node(bind("gather", product, flat, axis=0))


def _concatenated_then_product(trace, n, ins):
    """matmul(concatenate([P1, P2, ...], axis=1), W) as the sum of P_i @ W[rows of P_i] when
    some P_i are gathered rows that `_gather_then_product` multiplies first (a message-passing
    layer's concatenate([h[src], h[dst], e], axis=1) @ W)."""
    if n.op != "matmul" or len(n.shape) != 2:
        return None
    c, w = ins
    m = w.shape[1]
    if c.op != "concatenate" or c.p["axis"] != 1 or not any(_rows_gathered(p, m) for p in c.inputs):
        return None
    total, k0 = None, 0
    for p in c.inputs:
        k = p.shape[1]
        rows = bind("slice", trace.tracer(w), starts=(k0, 0), stops=(k0 + k, m), steps=(1, 1))
        part = trace.to_node(bind("matmul", trace.tracer(p), rows))
        part = trace.tracer(_gather_then_product(trace, part, part.inputs) or part)
        total = part if total is None else total + part
        k0 += k
    return trace.to_node(total)


_RULES = (_gather_then_product, _concatenated_then_product)


def rewrite(trace, roots):
    """`roots` (forward nodes of `trace`) with the rewrites applied; the same list when none
    applies. Run-time checks (`trace.checks`) are remapped."""
    n_roots = len(roots)
    roots = list(roots) + [node for _, node, _ in trace.checks]
    nodes = sorted(toposort(roots), key=lambda n: n.id)
    new, changed = {}, False
    for n in nodes:
        if not n.inputs:
            continue
        ins = [new.get(x.id, x) for x in n.inputs]
        for rule in _RULES:
            out = rule(trace, n, ins)
            if out is not None:
                new[n.id], changed = out, True
                break
        else:
            if any(a is not b for a, b in zip(ins, n.inputs)):
                # a reader of a rewritten node, rebuilt on its new inputs (after them in id order)
                new[n.id] = Node(n.op, ins, n.params, n.shape, n.dtype, n.value)
    if not changed:
        return roots[:n_roots]
    roots = [new.get(r.id, r) for r in roots]
    trace.checks = [(kind, node, info) for (kind, _, info), node in zip(trace.checks, roots[n_roots:])]
    return roots[:n_roots]


def _checked_slice(node):
    """(array, starts, stops) when `node` reduces a unit-step slice of `array` (reshaped) to
    one value."""
    x = node.inputs[0] if node.op in ("reduce_max", "reduce_min") and node.shape == () else None
    while x is not None and x.op in ("reshape", "cast") and x.dtype == x.inputs[0].dtype:
        x = x.inputs[0]
    if x is None or x.op != "slice" or any(s != 1 for s in x.p["steps"]):
        return None
    return x.inputs[0], x.p["starts"], x.p["stops"]


def _tile_box(regions):
    """The box of `regions` (distinct (starts, stops) pairs) if they tile it exactly, else None."""
    starts = tuple(min(r[0][d] for r in regions) for d in range(len(regions[0][0])))
    stops = tuple(max(r[1][d] for r in regions) for d in range(len(regions[0][0])))
    size = math.prod(b - a for a, b in zip(starts, stops))
    if sum(math.prod(b - a for a, b in zip(*r)) for r in regions) != size:
        return None
    for (a0, a1), (b0, b1) in itertools.combinations(regions, 2):
        if all(max(x0, y0) < min(x1, y1) for x0, x1, y0, y1 in zip(a0, a1, b0, b1)):
            return None          # two regions overlap, so they leave part of the box out
    return starts, stops


def merge_index_checks(trace, max_regions=256):
    """Replace the run-time bounds checks (`trace.checks` of kind "index") that reduce slices
    of one array tiling a box, for the same axis size, by one check over the box."""
    groups = {}
    for i, (kind, node, info) in enumerate(trace.checks):
        got = _checked_slice(node) if kind == "index" else None
        if got is not None:
            groups.setdefault((info, node.op, got[0].id), []).append((i, got))
    drop, new = set(), {}
    for (info, op, _), members in groups.items():
        regions = list(dict.fromkeys((m[1][1], m[1][2]) for m in members))
        box = _tile_box(regions) if 1 < len(members) and len(regions) <= max_regions else None
        if box is None:
            continue
        whole = bind("slice", trace.tracer(members[0][1][0]), starts=box[0], stops=box[1],
                     steps=(1,) * len(box[0]))
        new[members[0][0]] = trace.to_node((amax if op == "reduce_max" else amin)(whole))
        drop.update(i for i, _ in members[1:])
    if new:
        trace.checks = [(kind, new.get(i, node), info) for i, (kind, node, info) in enumerate(trace.checks)
                        if i not in drop]
