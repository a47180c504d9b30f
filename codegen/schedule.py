"""Node order before fusion, for the CPU target (`sink_updates`).

The graph's order is the order its steps run in (fusion places nodes in it). A slice
assignment, `update_slice(x, v)`, writes into x's buffer when nothing reads x's old value
afterwards (codegen/memory.py); otherwise it copies all of x first. The reverse sweep of
`buf[t] = h` in a loop makes such a conflict at every step: the adjoint of the buffer
before the assignment is `update_slice(g, 0)` (g with row t zeroed), made just before
`g[t]`, the adjoint of h, reads row t of g's old value. So each step of the backward loop
copied the whole buffer: 49 copies of 50 x 32 x 64 values per call of the unrolled LSTM
benchmark, 3 ms of its 10.

`sink_updates` moves each such update to just before its own first reader. The reads of
its operand made before that reader then run before it, and where those are all of them
(as in the loop above) the update runs in place.
"""
from .products import rebuild


def _conflicted(graph):
    """Ids of the item assignments (update_slice, scatter_set, scatter_add_to) whose operand
    has a reader after them (in graph order). An update_slice that is an output, or that
    nothing reads, stays; the others move to the end (a loop body's new carry, written into
    its old buffer once every read of that is done: Emitter.donates)."""
    pos = {n.id: k for k, n in enumerate(graph.nodes)}
    users = graph.users()
    outputs = {o.id for o in graph.outputs}
    found = set()
    for n in graph.nodes:
        if n.op not in ("update_slice", "scatter_set", "scatter_add_to") \
                or n.op == "update_slice" and (n.id in outputs or not users[n.id]):
            continue
        x = n.inputs[0]
        if any(pos[u.id] > pos[n.id] for u in users[x.id] if u is not n):
            found.add(n.id)
    return found


def sink_updates(graph):
    """`graph` with each update_slice whose operand is read after it made just before its
    own first reader instead (its operands' readers in between then run before it); `graph`
    itself when there is none."""
    deferred = _conflicted(graph)
    if not deferred:
        return graph
    order, pending = [], {}

    def place(node):
        """Append `node`, after the deferred nodes it reads (a stack, not recursion: a chain
        of deferred updates can be long)."""
        stack = [node]
        while stack:
            n = stack[-1]
            waiting = [pending.pop(x.id) for x in n.inputs if x.id in pending]
            if waiting:
                stack += waiting
                continue
            order.append(stack.pop())

    for n in graph.nodes:
        if n.id in deferred:
            pending[n.id] = n
        else:
            place(n)
    for n in graph.nodes:
        if n.id in pending:
            place(pending.pop(n.id))
    return rebuild(graph, lambda n, new: None, order)


__all__ = ["sink_updates"]
