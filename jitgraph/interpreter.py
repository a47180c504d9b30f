"""The reference interpreter: runs any Graph with NumPy. The oracle for every backend."""
import numpy as np

from .prims import PRIMS


def evaluate(graph, *flat_args):
    """Evaluate `graph` on its flattened inputs; returns the list of output values."""
    if len(flat_args) != len(graph.inputs):
        raise TypeError(f"graph takes {len(graph.inputs)} inputs, got {len(flat_args)}")
    env = {}
    for node, value in zip(graph.inputs, flat_args):
        env[node.id] = np.asarray(value, dtype=node.dtype)
    for node in graph.nodes:
        if node.op == "input":
            continue
        if node.op == "const":
            env[node.id] = node.value
            continue
        value = PRIMS[node.op].impl(*[env[i.id] for i in node.inputs], **node.p)
        # a control node's value is a tuple, read by its proj nodes
        env[node.id] = value if node.dtype == object else np.asarray(value)
    # outputs own their memory: never a view of an input or a read-only broadcast
    outs = []
    for n in graph.outputs:
        v = env[n.id]
        if n.op == "input" or v.base is not None or not v.flags.writeable:
            v = v.copy()
        outs.append(v)
    return outs
