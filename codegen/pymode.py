"""Run generated kernel source as plain Python (no Numba compile).

`python_kernel(source)` executes a generated module with `njit` as the identity,
chunks run in order, NumPy's own math in place of `jitgraph.codegen.mathlib`, and the
Python bodies of `jitgraph.codegen.runtime`. The kernel computes the same values, slowly
and without compiling anything: the test suite uses it to run every program of
the op table through the generated source, and it is a way to step through a
kernel with pdb. (NUMBA_DISABLE_JIT=1 gives the same for a whole process.)
"""
import types

import numpy as np
import scipy.special

from . import runtime as _runtime
from .mathlib import SPECIAL


def njit(*args, **kwargs):
    if args and callable(args[0]) and len(args) == 1 and not kwargs:
        return args[0]
    return lambda f: f


exp, expm1, tanh = np.exp, np.expm1, np.tanh
maximum, minimum = np.maximum, np.minimum
mathlib = types.SimpleNamespace(**{name: getattr(scipy.special, name) for name in SPECIAL}, sin=np.sin, cos=np.cos,
                                log=np.log, log1p=np.log1p, floordiv=np.floor_divide, cbrt=np.cbrt, hypot=np.hypot)
_RUNTIME = {name: getattr(getattr(_runtime, name), "py_func", getattr(_runtime, name))
            for name in ("matmul2d", "matmul2d_acc", "matmul_batched", "matmul_strided", "gather", "scatter_add", "scatter_set",
                         "copy", "copy_py", "slot_view", "broadcast_into", "contiguous", "combine_parts")}
runtime = types.SimpleNamespace(**_RUNTIME,
                                slot=_runtime.slot_view, c_view=_runtime.c_view_py, call=_runtime.call,
                                strided=_runtime.strided_py, strided_py=_runtime.strided_py,
                                # the threaded products' blocks, one after another: the same results
                                matmul2d_par=_RUNTIME["matmul2d"], matmul2d_acc_par=_RUNTIME["matmul2d_acc"],
                                matmul_batched_par=_RUNTIME["matmul_batched"],
                                matmul_strided_par=_RUNTIME["matmul_strided"],
                                parallel_chunks=_runtime.parallel_chunks_py, parallel_self=_runtime.parallel_chunks_py,
                                chunk_njit=njit, loop_njit=njit, group_njit=njit, native_njit=njit,
                                empty=np.empty, full=np.full,
                                blas_threads_local=_runtime.blas_threads_local)

_IMPORTS = {
    "from numba import njit": "from jitgraph.codegen.pymode import njit",
    "from jitgraph.codegen.mathlib import exp as _exp, expm1 as _expm1, tanh as _tanh":
        "from jitgraph.codegen.pymode import exp as _exp, expm1 as _expm1, tanh as _tanh",
    "from jitgraph.codegen.mathlib import maximum as _max, minimum as _min":
        "from jitgraph.codegen.pymode import maximum as _max, minimum as _min",
    "from jitgraph.codegen import runtime as _rt": "from jitgraph.codegen.pymode import runtime as _rt",
}
# imported only by the kernels that call SciPy's special functions (SciPy's ufuncs here)
_OPTIONAL_IMPORTS = {
    "from jitgraph.codegen import mathlib as _ml": "from jitgraph.codegen.pymode import mathlib as _ml",
}


def python_kernel(source, entry="kernel"):
    """The entry function of generated `source`, as a Python function."""
    for a, b in _IMPORTS.items():
        if a not in source:
            raise ValueError(f"generated source lacks the import {a!r}")
        source = source.replace(a, b)
    for a, b in _OPTIONAL_IMPORTS.items():
        source = source.replace(a, b)
    ns = {"__name__": "jitgraph_pymode_kernel"}
    exec(compile(source, "<jitgraph kernel (python mode)>", "exec"), ns)
    return ns[entry]
