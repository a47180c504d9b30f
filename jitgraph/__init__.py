"""jitgraph: differentiable, compiled NumPy.

Trace plain NumPy functions into a static graph, differentiate them in one
reverse sweep, and run them eagerly (`value_and_grad`) or compiled
(`jit_grad`, `jit`).
"""
import os as _os

if "NUMBA_THREADING_LAYER" not in _os.environ and "NUMBA_THREADING_LAYER_PRIORITY" not in _os.environ:
    # Numba's OpenMP layer first, then its workqueue. The workqueue's threads sleep between
    # launches, and waking one took 100-500 us on a 2-core virtual machine, against 1-7 us
    # for OpenMP's, whose threads spin a while first: the MLP benchmark ran at 19-23 ms
    # against 25-26 ms, the BNN 13 against 21. (Before kernels ran BLAS on one thread, spinning
    # threads competed with BLAS's: the MLP then measured 17-20 ms with OpenMP, 7 ms without.)
    # A forked child runs its launches on the calling thread (codegen/launch.py). Numba reads
    # this when its threads start; NUMBA_THREADING_LAYER(_PRIORITY) choose otherwise.
    _os.environ["NUMBA_THREADING_LAYER_PRIORITY"] = "omp workqueue tbb"
    if "numba.core.config" in __import__("sys").modules:      # numba imported first
        __import__("numba").core.config.THREADING_LAYER_PRIORITY = ["omp", "workqueue", "tbb"]

from ._version import __version__
from .errors import GradError, GradientCutWarning, JitgraphError, NotSupportedError, ShapeError, TracingError
from .graph import Graph, Node
# the op families register their primitives and NumPy functions when imported
from .ops import control as _control, elementwise as _elementwise, index as _index  # noqa: F401
from .ops import products as _products, reduce as _reduce, shape as _shape  # noqa: F401
from .ops import arrange as _arrange, contract as _contract, linalg as _linalg, order as _order  # noqa: F401
from .ops import fft as _fft, masked as _masked, special as _special, stats as _stats  # noqa: F401
from .ops import sets as _sets  # noqa: F401
from .ops.control import cond, fori_loop, scan, while_loop
from .ops.elementwise import sigmoid, stop_gradient
from .ops.reduce import log_softmax, logsumexp, softmax
from .api import eval_graph, grad, make_graph, trace_graph, value_and_grad
from .interpreter import evaluate
from .jit import CacheInfo, JitFunction, Lowered, RetraceWarning, hvp, jit, jit_grad, memory_report
from .tiered import CompileWarning
from .remat import MemoryBudgetError, checkpoint
from .transforms import check_grads, hessian, jacfwd, jacobian, jacrev, jvp, vjp
from . import distributed  # noqa: F401  (Dask is imported only when it is used)
from .onnx_export import export_onnx
from .viz import render, to_dot
from .tree import tree_flatten, tree_map, tree_unflatten

__all__ = [
    "value_and_grad", "grad", "vjp", "jvp", "jacobian", "jacrev", "jacfwd", "hessian", "check_grads",
    "jit", "jit_grad", "CompileWarning", "JitFunction", "Lowered", "CacheInfo", "RetraceWarning",
    "cond", "fori_loop", "scan", "while_loop", "hvp", "checkpoint", "memory_report", "MemoryBudgetError",
    "make_graph", "trace_graph", "eval_graph", "evaluate", "export_onnx", "to_dot", "render",
    "Graph", "Node", "logsumexp", "softmax", "log_softmax", "sigmoid", "stop_gradient",
    "JitgraphError", "TracingError", "NotSupportedError", "ShapeError", "GradError", "GradientCutWarning",
    "tree_flatten", "tree_unflatten", "tree_map",
]
