"""Products in the forms BLAS makes best, for the CPU target (`rewrite_products`).

Two rewrites of 2-D products, each removing a pass over a product's result:

* **Transposed products** are computed transposed: `(a @ b).T` becomes `b.T @ a.T`, whose
  factors BLAS reads in place (a transpose of a transpose is its operand). A weight used as
  `x @ W.T` (PyTorch's layout for a linear layer) gets its gradient as a transposed product,
  `(x.T @ dy).T`: it was stored, then copied transposed into the gradient's buffer.
* **Sums with a product in them** are one BLAS call: `c + a @ b` becomes `matmul_add(c, a, b)`.
  A reverse sweep sums adjoints where a value fans out, and a weight's adjoint is a product:
  a weight used twice (an unrolled recurrence's, at every step), an L2 penalty's gradient
  added to a layer's weight gradient. Fused as an add, each such sum was a pass of its own
  over a product BLAS had just stored. BLAS adds a product to what its output holds (beta =
  1) at no extra cost, so `matmul_add` writes the product onto `c`: the memory plan lets the
  sum take `c`'s buffer (codegen/memory.py). The rewrite only makes the sums where that can
  hold (neither the product nor `c` has another reader), which the plan checks again on the
  partitioned program.

The rewrites run on the CPU target's graphs (codegen.generate, and the subgraphs of control
flow) after differentiation: traced programs, their printout and the other targets keep
`transpose`, `matmul` and `add`.
"""
import numpy as np

from jitgraph.graph import Graph, Node
from jitgraph.ops.registry import PRIMS

# ops whose value a step computes into a buffer of its own, which a product may then be added
# onto: fused loops and products (not views, leaves, or control flow's results)
_BUFFER_KINDS = ("elementwise", "reduce", "linalg")
_BLAS_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))


def _product(q, users, outputs):
    """Is `q` a 2-D product BLAS makes (float64, float32), read by one node only?"""
    return q.op == "matmul" and q.ndim == 2 and q.dtype in _BLAS_DTYPES and len(users[q.id]) == 1 \
        and q.id not in outputs


def _is_matrix_transpose(n):
    return n.op == "transpose" and n.p["perm"] == (1, 0)


def _addend(p, node, users, outputs):
    """May a product be added onto `p` in place: a value a step writes into a buffer of its own,
    read by this sum alone, of the sum's shape and dtype?"""
    if p.op in ("input", "const") or PRIMS[p.op].kind not in _BUFFER_KINDS or PRIMS[p.op].multiple:
        return False
    return len(users[p.id]) == 1 and p.id not in outputs and p.shape == node.shape and p.dtype == node.dtype


def rebuild(graph, make, order=None):
    """`graph` with each node for which `make(node, new)` returns a node replaced by it (`new`
    maps the ids of nodes made so far to theirs; it returns None to keep a node). Every node
    is made again, in order (`order`, a topological order of graph.nodes, where given), so
    that ids keep that order (Graph sorts nodes by id)."""
    new = {}
    for n in (graph.nodes if order is None else order):
        if not n.inputs:
            continue
        made = make(n, new)
        new[n.id] = made if made is not None else \
            Node(n.op, [new.get(x.id, x) for x in n.inputs], n.params, n.shape, n.dtype, n.value)
    adjoints = {new[i].id for i in graph.adjoint_ids if i in new}
    return Graph(graph.inputs, [new.get(o.id, o) for o in graph.outputs], adjoints, graph.meta)


def _transposed(x, new):
    """A node for x.T (x 2-D, made already): the operand of a transpose, or a new transpose."""
    if _is_matrix_transpose(x):
        return new.get(x.inputs[0].id, x.inputs[0])
    x = new.get(x.id, x)
    return Node("transpose", [x], {"perm": (1, 0)}, x.shape[::-1], x.dtype)


def transposed_products(graph):
    """`graph` with each `transpose(a @ b)` of a 2-D product read by the transpose alone as
    `b.T @ a.T`; `graph` itself when there is none."""
    users = graph.users()
    outputs = {o.id for o in graph.outputs}
    found = {n.id for n in graph.nodes if _is_matrix_transpose(n) and _product(n.inputs[0], users, outputs)}
    if not found:
        return graph

    def make(n, new):
        if n.id not in found:
            return None
        a, b = n.inputs[0].inputs
        return Node("matmul", [_transposed(b, new), _transposed(a, new)], (), n.shape, n.dtype)
    return rebuild(graph, make)


def accumulate_products(graph):
    """`graph` with each `add(c, a @ b)` whose product has no other reader, and whose `c` has no
    other reader and is computed into a buffer of its own, as `matmul_add(c, a, b)`; `graph`
    itself when there is none."""
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

    def make(n, new):
        if n.id not in found:
            return None
        p, q = found[n.id]
        return Node("matmul_add", [new.get(x.id, x) for x in (p,) + q.inputs], (), n.shape, n.dtype)
    # the products added are no longer read: Graph drops them
    return rebuild(graph, make)


def rewrite_products(graph):
    """`graph` with its transposed products computed transposed, then its sums with a product
    in them as `matmul_add` (see the module doc)."""
    return accumulate_products(transposed_products(graph))


__all__ = ["rewrite_products", "transposed_products", "accumulate_products"]
