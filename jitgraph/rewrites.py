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
  shape (B, T), more tokens than the vocabulary has entries) are the same product.

Values agree with the graph as traced up to rounding.
"""
import math

from .core import bind
from .graph import Node, toposort
from .numpy_api import reshape


def _gather_then_product(trace, n, ins):
    """matmul(gather(A, idx, axis=0), W) as gather(matmul(A, W), idx, axis=0) when that is
    cheaper; None otherwise."""
    if n.op != "matmul" or len(n.shape) != 2:
        return None
    g, w = ins
    if g.op == "reshape" and g.inputs[0].op == "gather":
        # (an embedding's rows for a batch of sequences, emb[tokens] @ W, flattened to 2-D)
        g = g.inputs[0] if g.shape == (math.prod(g.inputs[0].shape[:-1]), g.shape[1]) else g
    if g.op != "gather" or g.p["axis"] != 0:
        return None
    a, idx = g.inputs
    if len(a.shape) != 2:
        return None
    (rows, k), e, m = a.shape, math.prod(idx.shape), w.shape[1]
    # flops of the product plus the values the gather moves, before and after
    if rows * k * m + e * m >= e * k * m + e * k:
        return None
    product = bind("matmul", trace.tracer(a), trace.tracer(w))
    idx = trace.tracer(idx)
    flat = idx if len(idx.shape) == 1 else reshape(idx, (e,))
    return trace.to_node(bind("gather", product, flat, axis=0))


_RULES = (_gather_then_product,)


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
