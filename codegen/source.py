"""What both emitters (CPU and CUDA) write the same way: size symbols, dtype names, literals.

The size numbering is part of the kernels' calling convention: `dims[k]` holds the
value of symbol `nk`, so both targets must name sizes identically.
"""
import numpy as np


def np_dtype(dtype):
    """The NumPy expression for a dtype (`np.float64`, `np.bool_`)."""
    return f"np.{np.dtype(dtype).name}" if np.dtype(dtype) != bool else "np.bool_"


def literal(value, dtype):
    """A scalar as source text of the given dtype (`2.0`, `np.float32(0.5)`, `-np.inf`, `True`)."""
    dtype = np.dtype(dtype)
    v = np.asarray(value).item()
    if dtype == bool:
        return "True" if v else "False"
    if dtype.kind in "iu":
        return str(int(v))
    if np.isnan(v):
        s = "np.nan"
    elif np.isinf(v):
        s = "np.inf" if v > 0 else "-np.inf"
    else:
        s = repr(float(v))
    return s if dtype == np.float64 else f"{np_dtype(dtype)}({s})"


class Sizes:
    """Symbols for sizes: each distinct size > 1, named n0, n1, ... in order of first appearance."""

    def __init__(self, graph):
        self.sym = {}
        for node in graph.nodes:
            for d in node.shape:
                if d > 1 and d not in self.sym:
                    self.sym[d] = f"n{len(self.sym)}"
        self.values = list(self.sym)

    def __call__(self, d):
        return self.sym.get(d, str(d))

    def shape(self, shape):
        shape = tuple(shape) or (1,)
        inner = ", ".join(self(d) for d in shape)
        return f"({inner},)" if len(shape) == 1 else f"({inner})"

    def product(self, shape):
        parts = [self(d) for d in shape if d != 1]
        return " * ".join(parts) if parts else "1"
