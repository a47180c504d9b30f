"""The reverse sweep, shared by eager tapes and traced graphs.

`backward` walks recorded nodes in reverse topological order, applies each
primitive's rule from `rules.VJP` to the incoming adjoint and sums the
contributions at fan-out. Only nodes on a path from a differentiated input to
the output get adjoints: branches that do not depend on a differentiated input
(the seed's requires_grad=False inputs) never produce adjoint work.
"""
from . import numpy_api as jnp
from .control import CONTROL_VJP
from .rules import VJP, NO_GRAD_OPS


def depends_on(nodes, wrt):
    """Ids of the nodes whose value depends (differentiably) on any node in `wrt`."""
    live = {n.id for n in wrt}
    for n in nodes:
        if n.op not in NO_GRAD_OPS and any(i.id in live for i in n.inputs):
            live.add(n.id)
    return live


def backward(nodes, out, wrt, value_of, seed):
    """Adjoints of `out` (seeded with `seed`) with respect to each node of `wrt`; see backward_multi."""
    return backward_multi(nodes, [out], wrt, value_of, [seed])


def backward_multi(nodes, outs, wrt, value_of, seeds):
    """Adjoints of `out` with respect to each node of `wrt`.

    Args:
        nodes: recorded nodes in topological order (must contain the outputs' ancestors).
        outs: the nodes being differentiated.
        wrt: leaf nodes to differentiate with respect to.
        value_of: node -> its value (a NumPy array, or a Tensor when tracing).
        seeds: the adjoint of each of `outs` (ones for a scalar loss).

    A control node (cond/scan/while) produces a tuple read by `proj` nodes: the
    adjoints of its projections are collected per element and its rule
    (control.CONTROL_VJP) gets them all at once.

    Returns:
        A list with one adjoint per `wrt` node (zeros where out does not depend on it).
    """
    live = depends_on(nodes, wrt)
    wrt_ids = {n.id for n in wrt}
    adj = {}
    for out, seed in zip(outs, seeds):
        if out.id in live:
            adj[out.id] = seed if out.id not in adj else adj[out.id] + seed
    for node in reversed(nodes):
        if node.id in wrt_ids or node.id not in adj:
            continue
        g = adj.pop(node.id)
        if node.op == "proj":
            t = node.inputs[0]
            parts = adj.setdefault(t.id, {})
            k = node.p["index"]
            parts[k] = g if k not in parts else parts[k] + g
            continue
        if node.op in CONTROL_VJP:
            n_out = len(node.p["out_avals"])
            cs = CONTROL_VJP[node.op]([g.get(k) for k in range(n_out)], node, value_of)
            for inp, c in zip(node.inputs, cs):
                if c is None or inp.id not in live:
                    continue
                adj[inp.id] = c if inp.id not in adj else adj[inp.id] + c
            continue
        rules = VJP[node.op]
        args = None
        for i, inp in enumerate(node.inputs):
            if inp.id not in live:
                continue
            rule = rules[i]
            if rule is None:
                continue
            if args is None:
                args = [value_of(x) for x in node.inputs]
            c = rule(g, value_of(node), *args, **node.p)
            if c is None:
                continue
            if c.dtype != inp.dtype:
                c = jnp.cast(c, inp.dtype)
            adj[inp.id] = c if inp.id not in adj else adj[inp.id] + c
    return [adj[w.id] if w.id in adj else jnp.zeros_like(value_of(w)) for w in wrt]
