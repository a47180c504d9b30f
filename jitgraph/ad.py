"""The reverse sweep, shared by eager tapes and traced graphs.

`backward` walks recorded nodes in reverse topological order, applies each
primitive's VJP (`Primitive.vjp` in the registry) to the incoming adjoint and
sums the contributions at fan-out. Only nodes on a path from a differentiated
input to the output get adjoints: branches that do not depend on a
differentiated input never produce adjoint work.
"""
import math

from .core import Tracer, bind
from .errors import GradError
from .numpy_api import cast, zeros_like
from .ops.registry import PRIMS, NoGradient

# A padded slice at most this fraction of the adjoint it joins is added into its region (an
# LSTM's four gate slices, a quarter each, stay one fused sum: 1.27x slower as a chain)
_SMALL_PAD = 0.125
# ... once the adjoint holds this many padded slices already: fewer stay terms of one sum, read
# as index views by the loop that reads it (the wrap-around rows and columns of a stencil's
# np.roll, four in 2-D and six in 3-D), where each region added in place would make the
# adjoint an array of its own first; a loop over a sequence's T steps adds T regions
_PADDED_TERMS = 8


def _blocks(op):
    """Does no adjoint flow through `op` (a zero-gradient primitive)?"""
    vjp = PRIMS[op].vjp if op in PRIMS else None
    return isinstance(vjp, NoGradient) and vjp.zero


def depends_on(nodes, wrt):
    """Ids of the nodes whose value depends (differentiably) on any node in `wrt`."""
    live = {n.id for n in wrt}
    for n in nodes:
        if not _blocks(n.op) and any(i.id in live for i in n.inputs):
            live.add(n.id)
    return live


def backward(nodes, out, wrt, value_of, seed):
    """Adjoints of `out` (seeded with `seed`) with respect to each node of `wrt`; see backward_multi."""
    return backward_multi(nodes, [out], wrt, value_of, [seed])


def backward_multi(nodes, outs, wrt, value_of, seeds):
    """Adjoints of `outs` with respect to each node of `wrt`.

    Args:
        nodes: recorded nodes in topological order (must contain the outputs' ancestors).
        outs: the nodes being differentiated.
        wrt: leaf nodes to differentiate with respect to.
        value_of: node -> its value (a NumPy array, or a Tensor when tracing).
        seeds: the adjoint of each of `outs` (ones for a scalar loss).

    A tuple-valued node (cond/scan/while, a library op with several results)
    produces a tuple read by `proj` nodes: the adjoints of its projections are
    collected per element and its rule gets them all at once.

    Returns:
        A list with one adjoint per `wrt` node (zeros where out does not depend on it).
    """
    live = depends_on(nodes, wrt)
    wrt_ids = {n.id for n in wrt}
    adj = {}
    padded = {}     # input id -> how many of its adjoint's contributions were padded slices
    for out, seed in zip(outs, seeds):
        if out.id in live:
            adj[out.id] = seed if out.id not in adj else adj[out.id] + seed
    for node in reversed(nodes):
        if node.id in wrt_ids or node.id not in adj:
            continue
        g = adj.pop(node.id)
        prim = PRIMS[node.op]
        if isinstance(prim.vjp, NoGradient):
            raise GradError(prim.vjp.message(node))
        if prim.kind == "structural":      # proj: element `index` of a tuple-valued node
            parts = adj.setdefault(node.inputs[0].id, {})
            k = node.p["index"]
            parts[k] = g if k not in parts else parts[k] + g
            continue
        if prim.multiple:
            n_out = len(node.p["out_avals"])
            contributions = prim.vjp([g.get(k) for k in range(n_out)], node, value_of)
        else:
            contributions = _contributions(prim.vjp, node, g, live, value_of)
        for inp, c in zip(node.inputs, contributions):
            if c is None or inp.id not in live:
                continue
            if c.dtype != inp.dtype:
                c = cast(c, inp.dtype)
            adj[inp.id] = c if inp.id not in adj else _accumulate(adj[inp.id], c, padded.get(inp.id, 0))
            if isinstance(c, Tracer) and c.node.op == "pad_slice":
                padded[inp.id] = padded.get(inp.id, 0) + 1
    return [adj[w.id] if w.id in adj else zeros_like(value_of(w)) for w in wrt]


def _accumulate(total, c, padded):
    """total + c. Traced, a contribution that is a small slice padded with zeros, along one
    axis (the adjoint of `x[:, t]` read at each step of a Python loop), is added into its
    region of the other, `update_slice(total, total[region] + v)`, instead of a pass over
    the whole array per contribution: the writes run in place (codegen/schedule.py), so a
    loop of T steps costs T slices, not T whole arrays. `padded`: how many contributions
    to this adjoint were padded slices before; the first _PADDED_TERMS stay terms of the sum."""
    for big, small in ((total, c), (c, total)):
        node = small.node if isinstance(small, Tracer) and isinstance(big, Tracer) else None
        if node is None or node.op != "pad_slice" or big.dtype != small.dtype or not _one_axis(node):
            continue
        v = small.rebind(node.inputs[0])
        if math.prod(v.shape) > _SMALL_PAD * math.prod(node.shape) or padded < _PADDED_TERMS:
            continue
        p = {k: node.p[k] for k in ("starts", "stops", "steps")}
        return bind("update_slice", big, bind("slice", big, **p) + v, **p)
    return total + c


def _one_axis(pad):
    """Is the padded region a unit-step range of one axis, whole along the others (x[:, t],
    x[t], x[..., t:t + k]: a loop over a sequence)? Other regions stay padded sums, which
    fuse as index views (strided or many-sided regions as update_slice steps made a Python
    entry fall back to copies: a 12-step loop over reversed and strided windows ran 2.3x slower)."""
    p = pad.p
    cut = [d for d, (a, b, n) in enumerate(zip(p["starts"], p["stops"], pad.shape)) if (a, b) != (0, n)]
    return len(cut) == 1 and all(step == 1 for step in p["steps"])


def _contributions(rules, node, g, live, value_of):
    """Each input's adjoint contribution (None where it has none or needs none)."""
    out, args = [], None
    for i, inp in enumerate(node.inputs):
        rule = rules[i]
        if inp.id not in live or rule is None:
            out.append(None)
            continue
        if args is None:
            args = [value_of(x) for x in node.inputs]
        out.append(rule(g, value_of(node), *args, **node.p))
    return out
