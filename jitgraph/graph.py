"""The graph IR: nodes are primitive applications, edges are the tensors between them.

A `Node` records one primitive application: its op name, its input nodes, its
static parameters and the shape and dtype of the value it produces. Nodes carry
no names; `str(graph)` names them when it prints. A `Graph` is a list of nodes in
topological order with designated inputs and outputs (outputs may repeat nodes or
name inputs directly).
"""
import itertools
import math

import numpy as np

from .dtypes import type_str
from .errors import JitgraphError
from .ops.registry import PRIMS
from .viz import to_dot

_ids = itertools.count()

class Node:
    """One value of the graph: `op` applied to `inputs` with static `params`.

    `params` is a tuple of (name, value) pairs with hashable values, so nodes can
    be compared structurally (CSE, content hashes). Leaf ops: "input" (param
    `index`) and "const" (the array is kept in `value`, not in params).
    """

    __slots__ = ("op", "inputs", "params", "shape", "dtype", "value", "id", "__weakref__")

    def __init__(self, op, inputs, params, shape, dtype, value=None):
        self.op = op
        self.inputs = tuple(inputs)
        self.params = tuple(sorted(params.items())) if isinstance(params, dict) else tuple(params)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.value = value
        self.id = next(_ids)

    @property
    def p(self):
        """The parameters as a dict."""
        return dict(self.params)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def kind(self):
        """"input", "const", or the kind of its primitive ("elementwise", "control", ...)."""
        return self.op if self.op in ("input", "const") else PRIMS[self.op].kind

    @property
    def size(self):
        return math.prod(self.shape)

    def __repr__(self):
        return f"<Node {self.op} {type_str(self.shape, self.dtype)} #{self.id}>"


def flops(node):
    """A rough operation count of one node (multiply-adds count 2; data movement, such as a
    broadcast, a transpose or a slice, counts none)."""
    if node.op in ("input", "const") or PRIMS[node.op].kind in ("shape", "structural"):
        return 0
    return PRIMS[node.op].flops(node)


def _fmt_param(v):
    if isinstance(v, Graph):
        return "\n        ".join(str(v).splitlines())
    if isinstance(v, tuple) and v and all(isinstance(x, Graph) for x in v):
        return "(" + ", ".join(_fmt_param(x) for x in v) + ")"
    if isinstance(v, tuple) and v and all(isinstance(x, tuple) and len(x) == 2 and
                                          isinstance(x[1], np.dtype) for x in v):
        return "(" + ", ".join(type_str(s, d) for s, d in v) + ")"
    if isinstance(v, np.dtype):
        return v.name
    if isinstance(v, type) and issubclass(v, np.generic):
        return np.dtype(v).name
    return repr(v)


def _fmt_const(node):
    v = node.value
    if v is not None and np.ndim(v) == 0:
        return repr(v.item() if hasattr(v, "item") else v)
    return None


def toposort(outputs):
    """Nodes reachable from `outputs`, inputs before users (iterative DFS)."""
    order, seen = [], set()
    for root in outputs:
        if root.id in seen:
            continue
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if node.id in seen:
                continue
            seen.add(node.id)
            stack.append((node, True))
            for inp in reversed(node.inputs):
                if inp.id not in seen:
                    stack.append((inp, False))
    return order


def substitute(nodes, replace):
    """Map node id -> node for `nodes` (a topological order) with the nodes of `replace` (id ->
    replacement) swapped in: a node reading a replaced or rebuilt node is rebuilt on the new
    inputs, every other node is kept. Rebuilt nodes are made in order, so sorting by id stays a
    topological order."""
    new = dict(replace)
    for n in nodes:
        if n.id in new or not n.inputs:
            continue
        ins = [new.get(x.id, x) for x in n.inputs]
        if any(a is not b for a, b in zip(ins, n.inputs)):
            new[n.id] = Node(n.op, ins, n.params, n.shape, n.dtype, n.value)
    return new


class Graph:
    """A static computational graph.

    Attributes:
        inputs: the "input" nodes, in argument order (pytree leaves flattened).
        outputs: the output nodes, in order.
        nodes: every node reachable from the outputs, plus all inputs, in
            topological order.
        adjoint_ids: ids of nodes created by the reverse sweep (for display).
        meta: free-form information (argument tree structure, argnums, ...).
    """

    def __init__(self, inputs, outputs, adjoint_ids=(), meta=None):
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        # creation order is a topological order, and the reverse sweep's: each adjoint is
        # consumed (weight gradients, the next layer's adjoint) right after it is made, so
        # the steps run in this order keep few adjoints alive
        reach = sorted(toposort(self.outputs), key=lambda n: n.id)
        reach_ids = {n.id for n in reach}
        self.nodes = [n for n in self.inputs if n.id not in reach_ids] + reach
        self.adjoint_ids = frozenset(adjoint_ids) & {n.id for n in self.nodes}
        self.meta = dict(meta or {})

    def __iter__(self):
        return iter(self.nodes)

    def __len__(self):
        return len(self.nodes)

    def users(self):
        """Map node id -> list of nodes that consume it (each once per use)."""
        out = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                out[i.id].append(n)
        return out

    def names(self):
        """Printing names: inputs and then every other node in order, a, b, ..., z, ba, ..."""
        names = {}
        for k, node in enumerate(self.inputs + [n for n in self.nodes if n.op != "input"]):
            if node.id in names:
                continue
            s, k2 = "", len(names)
            while True:
                s = chr(ord("a") + k2 % 26) + s
                k2 //= 26
                if k2 == 0:
                    break
            names[node.id] = s
        return names

    def node_line(self, node, names, dims=str):
        """One SSA line for `node`: `c:f64[3] = mul a b` (no indentation).

        `dims` formats each size (code generation names them symbolically)."""
        lhs = f"{names[node.id]}:{type_str(node.shape, node.dtype, dims)}"
        if node.op == "const":
            lit = _fmt_const(node)
            return f"{lhs} = const {lit}" if lit is not None else f"{lhs} = const <array>"
        params = ", ".join(
            f"{k}=({', '.join(dims(d) for d in v)}{',' if len(v) == 1 else ''})" if k == "shape"
            else f"{k}={dims(v)}" if k == "size" else f"{k}={_fmt_param(v)}"
            for k, v in node.params)
        op = f"{node.op}[{params}]" if params else node.op
        args = " ".join(names[i.id] for i in node.inputs)
        return f"{lhs} = {op} {args}".rstrip()

    def __str__(self):
        names = self.names()
        ins = " ".join(f"{names[n.id]}:{type_str(n.shape, n.dtype)}" for n in self.inputs)
        lines = [f"{{ lambda {ins} ."]
        marked = False
        for node in self.nodes:
            if node.op == "input":
                continue
            if node.id in self.adjoint_ids and not marked:
                lines.append("    # ---- backward (reverse sweep) ----")
                marked = True
            lines.append("    " + self.node_line(node, names))
        outs = ", ".join(names[n.id] for n in self.outputs)
        lines.append(f"  in ({outs}) }}")
        return "\n".join(lines)

    __repr__ = __str__

    def to_dot(self, **kw):
        """Graphviz DOT text of this graph; keyword arguments as for `jitgraph.viz.to_dot`."""
        return to_dot(self, **kw)

    def verify(self):
        """Check SSA form, topological order, and every node's shape and dtype.

        Re-derives each node's shape and dtype from its inputs with the
        primitive's shape rule and raises `JitgraphError` on any mismatch.
        Returns the graph, so `make_graph(...)(...).verify()` chains.
        """
        defined = set()
        for n in self.inputs:
            if n.op != "input":
                raise JitgraphError(f"graph input {n!r} is not an 'input' node")
        for node in self.nodes:
            if node.id in defined:
                raise JitgraphError(f"node {node!r} is defined twice (not SSA)")
            for inp in node.inputs:
                if inp.id not in defined:
                    raise JitgraphError(f"node {node!r} uses {inp!r} before it is defined")
            if node.op == "input":
                if node not in self.inputs:
                    raise JitgraphError(f"input node {node!r} is not among the graph inputs")
            elif node.op == "const":
                if node.value is None or np.shape(node.value) != node.shape \
                        or np.asarray(node.value).dtype != node.dtype:
                    raise JitgraphError(f"const node {node!r} does not match its value")
            else:
                prim = PRIMS.get(node.op)
                if prim is None:
                    raise JitgraphError(f"node {node!r} has unknown op {node.op!r}")
                shape, dtype = prim.abstract(*[(i.shape, i.dtype) for i in node.inputs], **node.p)
                if tuple(shape) != node.shape or np.dtype(dtype) != node.dtype:
                    raise JitgraphError(
                        f"node {node!r}: recorded {type_str(node.shape, node.dtype)} but "
                        f"{node.op} of its inputs gives {type_str(shape, dtype)}")
            defined.add(node.id)
        for out in self.outputs:
            if out.id not in defined:
                raise JitgraphError(f"output {out!r} is not defined in the graph")
        return self
