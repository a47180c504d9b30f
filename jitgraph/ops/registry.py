"""The primitive registry: one `Primitive` object per IR op, read by every stage.

A primitive carries what the front end and the reverse sweep need to know about
it: its shape/dtype rule, its NumPy reference implementation (the semantics the
interpreter, eager mode and every backend are checked against), its
vector-Jacobian product, and, for elementwise primitives, one scalar expression
(`ops/scalar.py`) from which the CPU, CUDA and ONNX lowerings are all rendered.
Target-specific lowerings of library ops (BLAS calls, gathers, LAPACK) live in
the back ends, registered per primitive name; `tests/test_registry.py` checks
that every primitive has every stage.

The NumPy front end is registered here too: `implements(np.f)` maps a NumPy
function or ufunc to the function that runs it on traced values, and
`method(name)` supplies the few operations with no NumPy protocol behind them
(indexing, item assignment).
"""
import numpy as np

from ..errors import JitgraphError

KINDS = ("elementwise", "reduce", "shape", "index", "linalg", "control", "structural")


class NoGradient:
    """A VJP mark: no adjoint flows through this primitive.

    `zero=True`: the derivative is zero wherever it exists (comparisons, sign,
    floor): the reverse sweep skips the node. `zero=False`: the function is not
    differentiable at all (its trip count or output is only known at run time):
    a gradient path through it is a `GradError` saying `why` (a text, or a function of
    the node giving one).
    """

    __slots__ = ("zero", "why")

    def __init__(self, zero=True, why=""):
        self.zero, self.why = zero, why

    def message(self, node):
        why = self.why(node) if callable(self.why) else self.why
        return why or f"{node.op} is not differentiable"

    def __repr__(self):
        return "ZERO_GRADIENT" if self.zero else f"NotDifferentiable({self.why!r})"


ZERO_GRADIENT = NoGradient()


class Primitive:
    """One IR op.

    Attributes:
        name: the op name nodes carry (`node.op`).
        kind: one of KINDS; the back ends decide fusion and lowering by it.
        abstract: `abstract(*avals, **params) -> (shape, dtype)`, each aval a
            `(shape, dtype)` pair. It raises `ShapeError` on operands the primitive
            does not accept (primitives are strict: elementwise operands have one
            shape and dtype; the NumPy front end inserts broadcasts and casts).
        impl: `impl(*arrays, **params)`, the NumPy reference implementation.
        vjp: one rule per input, `rule(g, out, *inputs, **params)` returning that
            input's adjoint contribution (or None: no derivative for that input);
            a `NoGradient` mark; or, for tuple-valued primitives (`multiple`), one rule
            `rule(cotangents, node, value_of)` returning every input's adjoint.
        expr: elementwise only: the scalar expression over operands `{0}`, `{1}`, ...
            in the language of `ops/scalar.py`, or a function of the node's params
            returning one.
        export_expr: elementwise only, optional: an exact equivalent of `expr`
            written with functions ONNX has, for export.
        host_only: what the CUDA target does not support, naming the user's function (it
            refuses the op saying so), or None when it has a lowering.
        onnx: why the op has no ONNX export (a string), or None.
        flops: `flops(node) -> int`, a rough operation count (memory report).
        multiple: the value is a tuple of arrays (control flow, and library ops with several
            results such as eigh): `abstract` returns ((), object), `impl` a tuple, `proj`
            nodes (params index, shape, dtype) pick the elements, and `vjp` is one rule
            `rule(cotangents, node, value_of)` (a cotangent per element, None for elements no
            path reads) returning every input's adjoint (None for none).
    """

    __slots__ = ("name", "kind", "abstract", "impl", "vjp", "expr", "export_expr", "host_only",
                 "onnx", "flops", "multiple", "__weakref__")

    def __init__(self, name, kind, abstract, impl, vjp, expr=None, export_expr=None, host_only=None,
                 onnx=None, flops=None, multiple=False):
        if kind not in KINDS:
            raise ValueError(f"primitive {name!r}: unknown kind {kind!r}")
        self.name, self.kind, self.abstract, self.impl = name, kind, abstract, impl
        self.vjp, self.expr, self.export_expr = vjp, expr, export_expr
        self.host_only, self.onnx = host_only, onnx
        self.flops = flops if flops is not None else _size_flops
        self.multiple = multiple or kind == "control"

    @property
    def differentiable(self):
        return not isinstance(self.vjp, NoGradient)

    def template(self, params):
        """The scalar expression for a node with these params (elementwise primitives)."""
        return self.expr(**params) if callable(self.expr) else self.expr

    def __repr__(self):
        return f"<Primitive {self.name} ({self.kind})>"


def _size_flops(node):
    return int(node.size)


PRIMS = {}


def register(name, kind, abstract, impl, vjp, **kw):
    """Create and register a primitive; returns it."""
    if name in PRIMS:
        raise JitgraphError(f"primitive {name!r} is registered twice")
    prim = PRIMS[name] = Primitive(name, kind, abstract, impl, vjp, **kw)
    return prim


def primitive(name):
    """The registered primitive called `name` (a clear error for an unknown op)."""
    try:
        return PRIMS[name]
    except KeyError:
        raise JitgraphError(f"unknown primitive {name!r}") from None


class Lowerings(dict):
    """A back end's table of per-primitive lowerings: op name -> function (CPU, CUDA, ONNX)."""

    def register(self, *ops):
        """Decorator: the lowering of these ops."""
        def deco(fn):
            for op in ops:
                self[op] = fn
            return fn
        return deco


# ---- the NumPy front end -------------------------------------------------------------------
UFUNCS = {}      # np.ufunc -> function of the same arguments on traced values
FUNCTIONS = {}   # NumPy function (dispatched through __array_function__) -> implementation
METHODS = {}     # name -> function, for operations without a NumPy protocol ("getitem", ...)
VIEWS = set()    # the NumPy functions whose result is a view of their argument (NumPy's answer)


def implements(*np_funcs, view=False):
    """Decorator: the decorated function runs these NumPy functions/ufuncs on traced values.

    `view=True`: NumPy answers with a view of the argument (np.reshape, np.split): results the
    implementation marks as views stay views (`numpy_api.view_of`); of any other function,
    results are copies."""
    def deco(fn):
        for f in np_funcs:
            table = UFUNCS if isinstance(f, np.ufunc) else FUNCTIONS
            table[f] = fn
            if view:
                VIEWS.add(f)
        return fn
    return deco


def method(name):
    """Decorator: the implementation of Tensor operation `name` (see `core.Tensor`)."""
    def deco(fn):
        METHODS[name] = fn
        return fn
    return deco


class _TupleElement:
    """The VJP mark of `proj`: its adjoint is element `index` of the adjoint of its control node's
    tuple, which the reverse sweep collects for the control node's rule."""

    def __repr__(self):
        return "TUPLE_ELEMENT"


TUPLE_ELEMENT = _TupleElement()
