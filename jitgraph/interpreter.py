"""The reference interpreter: runs any Graph with NumPy. The oracle for every backend."""
import threading
import weakref

import numpy as np

from .ops.registry import PRIMS


def run_graph(graph, args, apply, env=None):
    """The values of `graph`'s outputs for input values `args`, computing every node that is
    not an input or a constant as `apply(node, input_values)`. `env`, when given, is a dict
    that receives every node's value by node id."""
    # without a caller's env, each value is dropped after its last use: the live values of a
    # long program are far fewer than its nodes (w4's 451 values of 1.6 MB: fresh pages for
    # every one of them took more time than its arithmetic)
    dead_after = None if env is not None else _dead_after(graph)
    env = {} if env is None else env
    env.update((n.id, a) for n, a in zip(graph.inputs, args))
    for k, node in enumerate(graph.nodes):
        if node.op == "input":
            continue
        if node.op == "const":
            env[node.id] = node.value
            continue
        env[node.id] = apply(node, [env[i.id] for i in node.inputs])
        if dead_after is not None:
            for i in dead_after.get(k, ()):
                del env[i]
    return [env[n.id] for n in graph.outputs]


_DEAD_AFTER = weakref.WeakKeyDictionary()   # graph -> _dead_after(graph) (graphs are not mutated)
_LOCK = threading.Lock()


def _dead_after(graph):
    """Position in graph.nodes -> ids of the values last read there (outputs live on);
    computed once per graph (a loop body is run once per iteration)."""
    with _LOCK:
        out = _DEAD_AFTER.get(graph)
    if out is None:
        out = _last_reads(graph)
        with _LOCK:
            _DEAD_AFTER[graph] = out
    return out


def _last_reads(graph):
    last = {}
    for k, node in enumerate(graph.nodes):
        for i in node.inputs:
            last[i.id] = k
    for n in graph.outputs:
        last.pop(n.id, None)
    out = {}
    for nid, k in last.items():
        out.setdefault(k, []).append(nid)
    return out


def _apply_impl(node, values):
    prim = PRIMS[node.op]
    value = prim.impl(*values, **node.p)
    # a tuple-valued node (control flow, several results) is read by its proj nodes
    return value if prim.multiple else np.asarray(value)


def evaluate(graph, *flat_args):
    """Evaluate `graph` on its flattened inputs; returns the list of output values."""
    if len(flat_args) != len(graph.inputs):
        raise TypeError(f"graph takes {len(graph.inputs)} inputs, got {len(flat_args)}")
    args = [np.asarray(v, dtype=n.dtype) for n, v in zip(graph.inputs, flat_args)]
    outs = run_graph(graph, args, _apply_impl)
    # outputs own their memory: never a view of an input or a read-only broadcast
    return [v.copy() if n.op == "input" or v.base is not None or not v.flags.writeable else v
            for n, v in zip(graph.outputs, outs)]
