"""Products in the forms BLAS makes best, for the CPU target (`rewrite_products`).

First, **products of a few terms are loops**: a product summing at most SMALL_K terms per
element whose result has rows or columns of at most SMALL_SIDE elements, or holds at most
SMALL_TERMS terms in all, or an outer product (one term per element), or a stack of products
of at most SMALL_STACKED_TERMS terms each (per-point rotations, per-sample weights), becomes a broadcast
multiply and a sum over its last axis, which fuse with the loops around it (codegen's
TINY_ROW vectorizes their short rows) instead of a BLAS call with its fixed cost (3.3 us for
a (64, 2) @ (2, 64) product). Then two rewrites of 2-D products, each removing a pass over a
product's result:

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


# See the module doc. Side by side (medians, ms per gradient): points @ a 3 x 3 rotation
# (100,000 points) 0.56 -> 0.46, a Kalman filter's 4 x 4 products 1.35 -> 0.94, a neural ODE's
# (64, 2) states @ (2, 64) 4.97 -> 2.42. Larger products stay BLAS's: as loops, the gradient of
# tanh(A @ B) with (n, 4) @ (4, n) ran 1.3x (n = 64) to 2.6x (n = 1024) slower.
SMALL_K = 4
SMALL_SIDE = 8
SMALL_TERMS = 8192
# A stack of products each of at most this many terms (m * k * n) is a loop too, whatever k: BLAS
# is called once per matrix of the stack (0.2 us each at least), and the loop runs a few terms per
# nanosecond. The gradient of 5,000 per-point 2 x 2 rotations of 16 points each (its weight
# gradient 5,000 (2, 16) @ (16, 2) products): 1.33 -> 0.48 ms (JAX 0.97); tanh of 2,000 per-sample
# 8 x 8 products, gradient: 0.97 -> 0.23 ms (JAX 0.90). Not larger: 2,000 12 x 12 ones ran 2.56 ms as
# loops against 1.40 ms from BLAS (rows past TINY_ROW, whose literal extents vectorize)
SMALL_STACKED_TERMS = 512


def _few_terms(n):
    """Is `n` a product that runs faster as a loop (see SMALL_K)?"""
    if n.op != "matmul" or n.dtype not in _BLAS_DTYPES:
        return False
    m, k, cols = n.shape[-2], n.inputs[0].shape[-1], n.shape[-1]
    terms = int(np.prod(n.shape, dtype=np.int64)) * k
    stacked = int(np.prod(n.shape[:-2], dtype=np.int64)) > 1 and m * k * cols <= SMALL_STACKED_TERMS
    return stacked or (k <= SMALL_K and (k == 1 or min(m, cols) <= SMALL_SIDE or terms <= SMALL_TERMS))


def small_products(graph):
    """`graph` with each product of a few terms (see SMALL_K) as a broadcast multiply and a
    sum over its last axis; `graph` itself when there is none."""
    found = {n.id for n in graph.nodes if _few_terms(n)}
    if not found:
        return graph

    def make(n, new):
        if n.id not in found:
            return None
        a, b = (new.get(x.id, x) for x in n.inputs)
        batch, (m, k), cols, nd = tuple(a.shape[:-2]), a.shape[-2:], b.shape[-1], a.ndim - 2
        full = batch + (m, cols, k)
        a = Node("reshape", [a], {"shape": batch + (m, 1, k)}, batch + (m, 1, k), a.dtype)
        if nd == 0:
            bt = _transposed(n.inputs[1], new)
        else:
            bt = Node("transpose", [b], {"perm": tuple(range(nd)) + (nd + 1, nd)}, batch + (cols, k), b.dtype)
        b = Node("reshape", [bt], {"shape": batch + (1, cols, k)}, batch + (1, cols, k), bt.dtype)
        terms = Node("mul", [Node("broadcast", [x], {"shape": full}, full, x.dtype) for x in (a, b)], (),
                     full, n.dtype)
        return Node("reduce_sum", [terms], {"axes": (nd + 2,)}, n.shape, n.dtype)
    return rebuild(graph, make)


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
    """`graph` with its products of a few terms as loops, its transposed products computed
    transposed, then its sums with a product in them as `matmul_add` (see the module doc)."""
    return accumulate_products(transposed_products(small_products(graph)))


__all__ = ["rewrite_products", "small_products", "transposed_products", "accumulate_products"]
