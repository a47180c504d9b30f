"""What both emitters (CPU and CUDA) write the same way: size symbols, dtype names, literals,
and the naming contexts of code that becomes a function of its own.

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

    def __init__(self, graph=None, values=()):
        self.sym = {}
        for d in values:
            self.symbol(d)
        for node in graph.nodes if graph is not None else ():
            for d in node.shape:
                self.symbol(d)
        self.values = list(self.sym)

    def symbol(self, d):
        if d > 1 and d not in self.sym:
            self.sym[d] = f"n{len(self.sym)}"
        return self.sym.get(d, str(d))

    def __call__(self, d):
        return self.sym.get(d, str(d))

    def shape(self, shape):
        shape = tuple(shape) or (1,)
        inner = ", ".join(self(d) for d in shape)
        return f"({inner},)" if len(shape) == 1 else f"({inner})"

    def product(self, shape):
        parts = [self(d) for d in shape if d != 1]
        return " * ".join(parts) if parts else "1"


class RecordingSizes(Sizes):
    """Sizes for the body of one function: records which symbols it uses (its parameters)."""

    def __init__(self, base):
        self.base = base
        self.used = {}         # symbol -> symbol of `base` (the argument passed for it)

    def __call__(self, d):
        s = self.base(d)
        if d > 1:
            self.used[s] = s
        return s

    def label(self, d):
        """The symbol of d, for comments (not recorded as used)."""
        return self.base(d)


class LocalSizes(RecordingSizes):
    """Sizes renumbered from n0 in order of first use: a function's text then depends only on
    the pattern of its sizes, so functions of equal structure share one compiled body."""

    def __init__(self, base):
        super().__init__(base)
        self.sym = {}

    def label(self, d):
        if d <= 1:
            return str(d)
        if d not in self.sym:
            self.sym[d] = f"n{len(self.sym)}"
        return self.sym[d]

    def __call__(self, d):
        s = self.label(d)
        if d > 1:
            self.used[s] = self.base(d)
        return s


class LocalNames(dict):
    """Value names given in order of first use (a, b, ..., z, ba, ...), for code that becomes a
    function of its own; see `LocalSizes`."""

    def __missing__(self, key):
        k, s = len(self), ""
        while True:
            s = chr(ord("a") + k % 26) + s
            k //= 26
            if k == 0:
                break
        self[key] = s
        return s


class Names:
    """How a group's code names values: as the entry function does (inline), or in order of first
    use (a group emitted as a function of its own; see `Emitter.function`). Records the entry's
    values the code reads, which such a function takes as parameters."""

    def __init__(self, em, local):
        self.em, self.is_local = em, local
        self.names = LocalNames() if local else em.names
        self.sizes = LocalSizes(em.sizes) if local else RecordingSizes(em.sizes)
        self.params = {}      # name in this code -> the entry's expression for it

    def var(self, node, suffix=""):
        """The entry's array holding node's value (a parameter of a group function)."""
        name = f"v{self.names[node.id]}{suffix}"
        self.params[name] = self.em.var(node) + suffix
        return name

    def local(self, node, prefix, suffix=""):
        """A name the group's own code defines for node."""
        return f"{prefix}{self.names[node.id]}{suffix}"

    def scalar(self, node):
        return self.local(node, "x")

    def const_ref(self, node):
        """A scalar constant: a literal, or (a constant the entry reads at run time) a parameter."""
        if node.id in self.em._hoisted:
            name = self.local(node, "x", "_c")
            self.params[name] = self.em.const_ref(node)
            return name
        return literal(node.value, node.dtype)

    def offset(self, node, d, start):
        """The parameter holding slice `node`'s start `start` along axis d."""
        name = self._offset_name(node, d)
        self.params[name] = str(start)
        return name

    def _offset_name(self, node, d):
        return f"o{self.names[node.id]}_{d}"

    def comment(self, node):
        line = self.em.graph.node_line(node, self.names, dims=self.sizes.label)
        if self.is_local and node.op == "slice" and any(node.p["starts"]):
            # the function serves every offset: the starts are parameters (`offset`), the stops
            # follow from the shape
            starts = [self._offset_name(node, d) if a else "0" for d, a in enumerate(node.p["starts"])]
            head = line.split(" = ", 1)[0]
            line = (f"{head} = slice[starts=({', '.join(starts)}{',' if len(starts) == 1 else ''}), "
                    f"steps={tuple(node.p['steps'])}] {self.names[node.inputs[0].id]}")
        return "# " + line

    def signature(self):
        """(parameters, the entry's arguments for them): sizes, then arrays and constants."""
        ps = list(self.sizes.used.items()) + list(self.params.items())
        return [p for p, _ in ps], [a for _, a in ps]
