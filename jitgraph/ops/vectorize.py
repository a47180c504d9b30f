"""np.vectorize of recorded values.

NumPy's `np.vectorize` calls the Python function once per element, handing it Python scalars
(a float for every floating dtype, an int for every integer one), and builds the output's dtype
from the first result unless `otypes` says. While a function is recorded, calls with recorded
values come here (`recording.py` swaps `np.vectorize.__call__`), with the same semantics:

* Traced (`jit`, `jit_grad`): the function is traced once on 0-d inputs, weak as Python scalars
  are (NEP 50). If every operation it applies to them is elementwise, those operations are applied
  to the whole broadcast arrays: one fused loop, as if the function had been written with arrays.
  Otherwise (a gather from a closed-over table, `jg.cond`, a `signature`) it runs as a `scan`
  over the elements: one compiled loop. Branching on an element's value (`if x > 0:`) cannot be
  traced; the error says to write it with `np.where`.
* Eagerly (`jg.value_and_grad`): the same whole-array form where the function traces on scalars
  and is elementwise; otherwise it runs on each element, as NumPy runs it, so Python control flow
  on the values works, and the gradient reaches every element.

`excluded` arguments are passed as they are; a `signature` maps core dimensions as NumPy's does.
"""
import builtins

import numpy as np

from ..buffers import unwrap
from ..core import Tracer, bind
from ..errors import NotSupportedError, TracingError, where
from ..interpreter import run_graph
from ..numpy_api import as_operand, broadcast_shapes, broadcast_to, cast, reshape, shape_of
from ..signature import rng_states
from .control import scan, trace_subgraph
from .registry import PRIMS


def _element_dtype(dtype):
    """The dtype of the Python scalar NumPy hands the function for an element of `dtype`."""
    kind = np.dtype(dtype).kind
    return np.dtype(bool) if kind == "b" else np.dtype(np.int64) if kind in "iu" else np.dtype(np.float64)


def _otypes(vec, nout):
    otypes = vec.otypes
    if not otypes:
        return None
    otypes = [np.dtype(t) for t in otypes]
    if len(otypes) != nout:
        raise ValueError(f"Invalid number of outputs: the function returns {nout}, otypes has {len(otypes)}")
    return otypes


def vectorized_call(vec, args, kwargs):
    """`vec(*args, **kwargs)` for an np.vectorize object `vec`, some argument recorded."""
    pyfunc = vec.pyfunc
    name = getattr(pyfunc, "__name__", "function")
    excluded = vec.excluded
    pos = [i for i in range(len(args)) if i not in excluded]
    names = [k for k in kwargs if k not in excluded]

    def call(*values):
        a, kw = list(args), dict(kwargs)
        for i, v in zip(pos, values[:len(pos)]):
            a[i] = v
        for k, v in zip(names, values[len(pos):]):
            kw[k] = v
        return pyfunc(*a, **kw)

    operands = [as_operand(unwrap(args[i])) for i in pos] + [as_operand(unwrap(kwargs[k])) for k in names]
    if vec.signature is not None:
        return _with_signature(vec, call, operands, name)
    shape = broadcast_shapes(*[tuple(shape_of(o)) for o in operands])
    size = int(np.prod(shape, dtype=np.int64))
    if size == 0 and not vec.otypes:
        raise ValueError("cannot call `vectorize` on size 0 inputs unless `otypes` is set")
    elements = [cast(o, _element_dtype(o.dtype)) for o in operands]
    traced = builtins.any(isinstance(o, Tracer) for o in operands)
    dtypes = None if size == 0 else _output_dtypes(call, operands, traced, name)
    outs = None if size == 0 else _elementwise_body(call, pyfunc, elements, shape, name, traced)
    if outs is None:
        flat = [reshape(broadcast_to(e, shape), (size,)) for e in elements]
        values, several = _mapped(call, flat, size, name)
        for v in values:
            if len(shape_of(v)) != 1:
                raise ValueError(f"np.vectorize({name}): the function returned an array where NumPy "
                                 f"expects a scalar per element (give a signature)")
        outs = [reshape(v, shape) for v in values], several
    return _finish(vec, *outs, dtypes)


def _output_dtypes(call, operands, traced, name):
    """The output dtypes NumPy gives: those of the function's results for the first elements as
    NumPy scalars of the arguments' dtypes (NumPy calls it on them first to find out; the values
    come from calls on Python scalars)."""
    if traced:
        graph, _, _ = _traced_body(call, [((), np.dtype(o.dtype), False) for o in operands], name)
        return [n.dtype for n in graph.outputs]
    first = call(*[reshape(o, (-1,))[0] if len(shape_of(o)) else o for o in operands])
    return [np.dtype(getattr(v, "dtype", None) or np.asarray(v).dtype)
            for v in (first if isinstance(first, tuple) else (first,))]


def _finish(vec, values, several, dtypes=None):
    """The outputs (a tuple of arrays when the function returns a tuple), cast to `otypes` or,
    without them, to `dtypes`."""
    otypes = _otypes(vec, len(values))
    if otypes is None and dtypes is not None and len(dtypes) == len(values):
        otypes = dtypes
    if otypes is not None:
        values = [cast(as_operand(v), t) for v, t in zip(values, otypes)]
    values = [as_operand(v) for v in values]
    return tuple(values) if several else values[0]


def _traced_body(call, avals, name):
    try:
        return trace_subgraph(call, avals, f"vectorize({name})")
    except TracingError as e:
        raise TracingError(f"np.vectorize({name}) of traced values: {_what(e)}. {_PER_ELEMENT}") from None


# the refusal of a function that needs its elements' values
_PER_ELEMENT = ("The function is traced once, on scalars standing for every element, so it cannot branch "
                "on their values or make Python numbers of them (float(), math.*): write choices with "
                "np.where (np.where(x > 0, a, b)) and math functions with NumPy's (np.log1p), or use the "
                "eager jg.value_and_grad, which runs it per element (where math.* gives no gradient)")


def _what(error):
    """What a TracingError says went wrong, and where, without its general advice."""
    text = str(error)
    return text.split("): ", 1)[0] + ")" if "): " in text else text.rstrip(".")


def _elementwise_body(call, pyfunc, elements, shape, name, traced):
    """The function's outputs over the whole arrays, when every operation it applies to its
    inputs is elementwise (see the module docstring); None otherwise. Eagerly (not `traced`) a
    function that cannot be traced on scalars (it branches on their values) gives None too: it
    then runs per element."""
    avals = [((), np.dtype(e.dtype), True) for e in elements]
    before = rng_states(pyfunc)
    if traced:
        graph, tree, captured = _traced_body(call, avals, name)
    else:
        try:
            graph, tree, captured = trace_subgraph(call, avals, f"vectorize({name})")
        except Exception:       # (branching on a value, a NumPy array indexed by one): per element
            return None
    if rng_states(pyfunc) != before:
        # one draw traced would be every element's: NumPy draws per element
        if traced:
            raise TracingError(f"np.vectorize({name}) draws random numbers{where()}: traced once, every "
                               f"element would get the same draw, and a compiled function the same "
                               f"numbers on every call. Draw them outside and pass them as an argument, "
                               f"or use the eager jg.value_and_grad")
        return None
    # the graph's nodes applied to the whole arrays: a node reading an element is computed for
    # every element (its other operands broadcast), the others (constants, captured values) once
    batched = {n.id for n in graph.inputs[:len(elements)]}

    def apply(node, xs):
        if builtins.any(i.id in batched for i in node.inputs):
            if PRIMS[node.op].kind != "elementwise":
                raise _NotElementwise
            xs = [v if i.id in batched else broadcast_to(as_operand(v), shape) for i, v in zip(node.inputs, xs)]
            batched.add(node.id)
        return bind(node.op, *xs, **node.p)

    try:
        outs = run_graph(graph, [broadcast_to(e, shape) for e in elements] + list(captured), apply)
    except _NotElementwise:
        return None
    outs = [v if n.id in batched else broadcast_to(as_operand(v), shape) for n, v in zip(graph.outputs, outs)]
    return outs, tree.kind == "tuple"


class _NotElementwise(Exception):
    """A node reading an element is not elementwise: the function runs per element."""


def _mapped(call, flat, size, name):
    """call over the rows of the arrays `flat` (a scan; eagerly, a Python loop): (the outputs
    stacked along a first axis of `size`, whether the function returns a tuple)."""
    if size == 0:
        return [np.zeros((0,))], False
    first = []

    def step(carry, xs):
        out = call(*xs)
        if not first:
            first.append(isinstance(out, tuple))
        return carry, out

    try:
        _, ys = scan(step, (), tuple(flat))
    except TracingError as e:
        raise TracingError(f"np.vectorize({name}) of traced values: {_what(e)}. {_PER_ELEMENT}") from None
    several = bool(first and first[0])
    return (list(ys) if several else [ys]), several


def _with_signature(vec, call, operands, name):
    """np.vectorize with a gufunc signature: the function maps core dimensions (the last ones of
    each argument) and loops over the broadcast leading ones."""
    from numpy.lib._function_base_impl import _parse_gufunc_signature
    in_core, out_core = _parse_gufunc_signature(vec.signature.replace(" ", ""))
    if len(in_core) != len(operands):
        raise TypeError(f"wrong number of positional arguments: expected {len(in_core)}, got {len(operands)}")
    sizes, loops = {}, []
    for o, dims in zip(operands, in_core):
        s = tuple(shape_of(o))
        if len(s) < len(dims):
            raise ValueError(f"input with shape {s} does not have enough dimensions for all core "
                             f"dimensions {dims} of the signature")
        core = s[len(s) - len(dims):]
        for d, n in zip(dims, core):
            if sizes.setdefault(d, n) != n:
                raise ValueError(f"inconsistent size for core dimension {d!r}: {n} vs {sizes[d]}")
        loops.append(s[:len(s) - len(dims)])
    loop = broadcast_shapes(*loops)
    count = int(np.prod(loop, dtype=np.int64))
    flat = []
    for o, dims in zip(operands, in_core):
        core = tuple(sizes[d] for d in dims)
        flat.append(reshape(broadcast_to(o, loop + core), (count,) + core))
    if count == 0:
        raise NotSupportedError(f"np.vectorize({name}) with a signature over empty loop dimensions "
                                f"is not supported{where()}")
    values, several = _mapped(call, flat, count, name)
    if len(values) != len(out_core):
        raise ValueError(f"wrong number of outputs from the function: expected {len(out_core)}, "
                         f"got {len(values)}")
    shaped = []
    for v, dims in zip(values, out_core):
        core = tuple(shape_of(v))[1:]
        if len(core) != len(dims):
            raise ValueError(f"wrong number of dimensions: expected {len(dims)}, got {len(core)}")
        shaped.append(reshape(v, loop + core))
    return _finish(vec, shaped, several)
