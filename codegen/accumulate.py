"""Sums with a product in them, made by BLAS: `c + a @ b` becomes `matmul_add(c, a, b)`.

A reverse sweep sums adjoints where a value fans out, and a weight's adjoint is a product:
a weight used twice (an unrolled recurrence's, 50 times), an L2 penalty's gradient added to
a layer's weight gradient, the three projections of attention's input. Fused as an add, each
such sum is a pass of its own over a product BLAS has just written: the product stored, then
read back with `c`, and the sum written again. BLAS adds a product to what its output holds
(beta = 1) at no extra cost, so `matmul_add` writes the product straight onto `c`: one pass
fewer, and one buffer fewer. The memory plan lets the result take `c`'s buffer
(codegen/memory.py); this rewrite only makes the sums where that can hold, which the plan
checks again on the partitioned program.

The rewrite runs on the CPU target's graphs (codegen.generate, and subgraphs of control flow)
after differentiation: traced programs, their printout and the other targets keep `add`.
"""
import numpy as np

from jitgraph.graph import Graph, Node
from jitgraph.ops.registry import PRIMS

# ops whose value a step computes into a buffer of its own, which a product may then be added
# onto: fused loops and products (not views, leaves, or control flow's results)
_BUFFER_KINDS = ("elementwise", "reduce", "linalg")
_BLAS_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))


def _product(q, users, outputs):
    """Is `q` a 2-D product BLAS makes (float64, float32), read only by one sum?"""
    return q.op == "matmul" and q.ndim == 2 and q.dtype in _BLAS_DTYPES and len(users[q.id]) == 1 \
        and q.id not in outputs


def _addend(p, node, users, outputs):
    """May a product be added onto `p` in place: a value a step writes into a buffer of its own,
    read by this sum alone, of the sum's shape and dtype?"""
    if p.op in ("input", "const") or PRIMS[p.op].kind not in _BUFFER_KINDS or PRIMS[p.op].multiple:
        return False
    return len(users[p.id]) == 1 and p.id not in outputs and p.shape == node.shape and p.dtype == node.dtype


def accumulate_products(graph):
    """`graph` with each `add(c, a @ b)` whose product has no other reader, and whose `c` has no
    other reader and is computed into a buffer of its own, as `matmul_add(c, a, b)`; `graph`
    itself when there is none. Node order is kept (it is the steps' order)."""
    users = graph.users()
    outputs = {o.id for o in graph.outputs}
    found = {}
    for n in graph.nodes:
        if n.op != "add" or n.ndim != 2 or n.inputs[0] is n.inputs[1]:
            continue
        for p, q in (n.inputs, n.inputs[::-1]):
            if _product(q, users, outputs) and _addend(p, n, users, outputs):
                found[n.id] = (p, q)
                break
    if not found:
        return graph
    dropped = {q.id for _, q in found.values()}
    new = {}
    for n in graph.nodes:
        if not n.inputs or n.id in dropped:
            continue
        if n.id in found:
            p, q = found[n.id]
            new[n.id] = Node("matmul_add", [new.get(x.id, x) for x in (p,) + q.inputs], (), n.shape, n.dtype)
        else:
            # every node is made again, in order: ids keep the graph's order (Graph sorts by id)
            new[n.id] = Node(n.op, [new.get(x.id, x) for x in n.inputs], n.params, n.shape, n.dtype, n.value)
    adjoints = {new[i].id for i in graph.adjoint_ids if i in new}
    return Graph(graph.inputs, [new.get(o.id, o) for o in graph.outputs], adjoints, graph.meta)


__all__ = ["accumulate_products"]
