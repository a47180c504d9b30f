"""Graph passes over loops (`scan` nodes), run on every traced graph.

* **One loop per computation.** The reverse-mode rule of a scan (`ops.control.scan_vjp`)
  binds a second scan over the same operands whose body is the forward body with extra
  ys: the products the reverse loop reads, stored per iteration instead of recomputed.
  Scans with the same operands, parameters, body inputs and carried outputs differ only
  in the ys they stack; they become one scan stacking the union.
* **No unused ys.** A stacked output nobody reads (the cotangent of a data sequence the
  program does not differentiate, say) leaves the loop body, and with it the work only it
  needed.
* **Invariants broadcast in the body.** A captured value that is a broadcast of a smaller one
  (a bias over the batch) is passed small and broadcast in the body (`sink_broadcasts`).

All recurse into the bodies of control flow nodes. Nodes downstream of a rewritten
scan are rebuilt and keep their place in the joint graph: forward or reverse sweep,
checkpoint region.
"""
from .graph import Graph, Node, substitute


def _loop_key(n):
    """Scans with equal keys compute the same carries over the same iterations."""
    p, body = n.p, n.p["body"]
    nk = p["n_carry"]
    return (tuple(x.id for x in n.inputs), p["length"], p["reverse"], p["start"], p["n_consts"], nk,
            tuple(x.id for x in body.inputs), tuple(o.id for o in body.outputs[:nk]))


class _Loop:
    """The scan that replaces a group of scans: its parameters, and where each member's
    outputs are among its outputs."""

    def __init__(self, members, users):
        first = members[0]
        p = first.p
        nk, body = p["n_carry"], p["body"]
        ys, pos = [], {}                # the union of the used ys, by body node
        self.index = {}                 # member id -> {its output index: merged output index}
        for m in members:
            mb, avals = m.p["body"], m.p["out_avals"]
            n_y = len(avals) - 2 * nk
            used = {u.p["index"] for u in users[m.id] if u.op == "proj"}
            index = {k: k for k in range(nk)}
            for j in range(n_y):
                if nk + j in used:
                    y = mb.outputs[nk + j]
                    if y.id not in pos:
                        pos[y.id] = len(ys)
                        ys.append(y)
                    index[nk + j] = nk + pos[y.id]
            self.index[m.id] = index
        for m in members:
            n_y = len(m.p["out_avals"]) - 2 * nk
            self.index[m.id].update({nk + n_y + k: nk + len(ys) + k for k in range(nk)})
        new_body = Graph(body.inputs, list(body.outputs[:nk]) + ys, meta=body.meta)
        new_body = merge_scans(new_body)
        avals = p["out_avals"]
        self.changed = len(members) > 1 or new_body.outputs != body.outputs or new_body.nodes != body.nodes
        T = p["length"]
        self.params = dict(p, body=new_body,
                           out_avals=tuple(avals[:nk]) + tuple(((T,) + y.shape, y.dtype) for y in ys)
                           + (tuple(avals[len(avals) - nk:]) if nk else ()))
        self.members = members
        self.node = None
        self.projs = {}


def _with_bodies(n, apply):
    """The parameters of control node `n` with its subgraphs passed through the graph pass
    `apply`, or None when none changes."""
    changed, params = False, n.p
    for k, v in n.p.items():
        if isinstance(v, Graph):
            new = apply(v)
            if new is not v:
                params = dict(params, **{k: new})
                changed = True
        elif isinstance(v, tuple) and v and all(isinstance(g, Graph) for g in v):
            new = tuple(apply(g) for g in v)
            if any(a is not b for a, b in zip(new, v)):
                params = dict(params, **{k: new})
                changed = True
    return params if changed else None


def _rebuilt(graph, new, adjoint_drop=()):
    """`graph` with nodes replaced by `new` (old id -> node); each rebuilt node keeps its
    sweep (forward or reverse) and checkpoint region. `adjoint_drop`: ids of new nodes that
    are in the forward sweep whatever they replace."""
    adjoint = set(graph.adjoint_ids)
    regions = dict(graph.meta.get("checkpoint_regions") or {})
    for old, node in new.items():
        if old in adjoint:
            adjoint.add(node.id)
        if old in regions:
            regions.setdefault(node.id, regions[old])
    adjoint -= set(adjoint_drop)
    meta = dict(graph.meta)
    if regions:
        meta["checkpoint_regions"] = regions
    return Graph(graph.inputs, [new.get(o.id, o) for o in graph.outputs], adjoint_ids=adjoint, meta=meta)


def merge_scans(graph):
    """`graph` with scans that differ only in their stacked outputs merged and stacked
    outputs nobody reads dropped (see the module docstring); `graph` itself when nothing
    changes."""
    users = graph.users()
    groups = {}
    for n in graph.nodes:
        if n.op == "scan":
            groups.setdefault(_loop_key(n), []).append(n)
    loop_of = {}
    for members in groups.values():
        loop = _Loop(members, users)
        if loop.changed:
            loop_of.update((m.id, loop) for m in members)
    body_params = {}
    for n in graph.nodes:
        if n.kind == "control" and n.op != "scan":      # (scans: `_Loop`)
            params = _with_bodies(n, merge_scans)
            if params is not None:
                body_params[n.id] = params
    if not loop_of and not body_params:
        return graph

    new = {}
    for n in graph.nodes:
        if not n.inputs:
            continue
        ins = [new.get(x.id, x) for x in n.inputs]
        if n.id in loop_of:
            loop = loop_of[n.id]
            if loop.node is None:
                loop.node = Node("scan", ins, loop.params, n.shape, n.dtype)
            new[n.id] = loop.node
        elif n.op == "proj" and n.inputs[0].id in loop_of:
            loop = loop_of[n.inputs[0].id]
            k = loop.index[n.inputs[0].id][n.p["index"]]
            if k not in loop.projs:
                loop.projs[k] = Node("proj", (loop.node,), dict(n.p, index=k), n.shape, n.dtype)
            new[n.id] = loop.projs[k]
        elif n.id in body_params or any(a is not b for a, b in zip(ins, n.inputs)):
            new[n.id] = Node(n.op, ins, body_params.get(n.id, n.params), n.shape, n.dtype, n.value)

    # a merged scan (and what reads its outputs) is in the forward sweep when one of its
    # members is
    forward = set()
    for loop in {id(lp): lp for lp in loop_of.values()}.values():
        if any(m.id not in graph.adjoint_ids for m in loop.members):
            forward |= {loop.node.id} | {p.id for p in loop.projs.values()}
    return _rebuilt(graph, new, forward)


def _sunk(n):
    """Scan node `n`'s (inputs, body) with its captured broadcasts made inside the body, or
    None: a captured value that is a broadcast of a smaller one (a bias over the batch, an
    invariant of a rerolled loop, which tracing records outside the body) was an array of
    the full shape, made before the loop and read by every pass over it; the body broadcasts
    the small value instead, index arithmetic in its fused loops (sinkhorn's iterations ran
    1.25x as long with the large operands)."""
    nc, body = n.p["n_consts"], n.p["body"]
    sink = [k for k in range(nc) if n.inputs[k].op == "broadcast"
            and n.inputs[k].inputs[0].size < n.inputs[k].size]
    if not sink:
        return None
    ins, b_ins, replace = list(n.inputs), list(body.inputs), {}
    for k in sink:
        outer = n.inputs[k]
        small = outer.inputs[0]
        old = body.inputs[1 + k]
        new_in = Node("input", (), dict(old.p), small.shape, small.dtype)
        replace[old.id] = Node("broadcast", (new_in,), dict(outer.p), old.shape, old.dtype)
        ins[k], b_ins[1 + k] = small, new_in
    nodes = substitute(body.nodes, replace)
    new_body = Graph(b_ins, [nodes.get(o.id, o) for o in body.outputs], meta=body.meta)
    return ins, new_body


def sink_broadcasts(graph):
    """`graph` with every scan's captured broadcasts made in its body (`_sunk`), in nested
    bodies too; `graph` itself when nothing changes."""
    new = {}
    for n in graph.nodes:
        if not n.inputs:
            continue
        ins = [new.get(x.id, x) for x in n.inputs]
        params = (_with_bodies(n, sink_broadcasts) if n.kind == "control" else None) or n.params
        if n.op == "scan":
            got = _sunk(Node(n.op, ins, params, n.shape, n.dtype))
            if got is not None:
                ins, body = got
                params = dict(params, body=body)
        if params is not n.params or any(a is not b for a, b in zip(ins, n.inputs)):
            new[n.id] = Node(n.op, ins, params, n.shape, n.dtype, n.value)
    return _rebuilt(graph, new) if new else graph
