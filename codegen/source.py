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


# elementwise ops written the same way by every target (operators, comparisons, selects);
# each emitter adds its math functions (`np.sqrt` on the CPU, `math.sqrt` on the GPU, ...)
OPERATOR_TEMPLATES = {
    "neg": "-{0}", "abs": "abs({0})", "stop_gradient": "{0}",
    "exp": "_exp({0})", "expm1": "_expm1({0})", "tanh": "_tanh({0})",
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}",
    "pow": "{0} ** {1}", "max": "_max({0}, {1})", "min": "_min({0}, {1})",
    "lt": "{0} < {1}", "le": "{0} <= {1}", "gt": "{0} > {1}", "ge": "{0} >= {1}",
    "eq": "{0} == {1}", "ne": "{0} != {1}",
    "and": "{0} & {1}", "or": "{0} | {1}", "not": "not {0}",
    "where": "{1} if {0} else {2}",
}
