"""jitgraph: differentiable, compiled NumPy.

Trace plain NumPy functions into a static graph, differentiate them in one
reverse sweep, and run them eagerly (`value_and_grad`) or compiled
(`jit_grad`, `jit`).
"""
from . import core as _core
from .api import eval_graph, grad, make_graph, trace_graph, value_and_grad
from .errors import GradError, JitgraphError, NotSupportedError, ShapeError, TracingError
from .graph import Graph, Node
from .interpreter import evaluate
from .jit import JitFunction, Lowered, jit, jit_grad
from .numpy_api import log_softmax, logsumexp, sigmoid, softmax, stop_gradient
from .tree import tree_flatten, tree_map, tree_unflatten

_core._install_methods()

__version__ = "0.1.0"

__all__ = [
    "value_and_grad", "grad", "jit", "jit_grad", "JitFunction", "Lowered", "make_graph", "trace_graph", "eval_graph", "evaluate",
    "Graph", "Node", "logsumexp", "softmax", "log_softmax", "sigmoid", "stop_gradient",
    "JitgraphError", "TracingError", "NotSupportedError", "ShapeError", "GradError",
    "tree_flatten", "tree_unflatten", "tree_map",
]
