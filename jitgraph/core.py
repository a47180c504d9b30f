"""Tensors that record, and `bind`: the one entry point for applying a primitive.

Two kinds of recording values share the `Tensor` base class (which gives them
NumPy's protocols and the operator dunders):

* `Tracer`: a symbolic value of a `GraphTrace`. Applying an op appends a node
  to the graph under construction; nothing is computed.
* `EagerBox`: a concrete value (a NumPy array, or a Tracer when eager mode runs
  inside a trace) recorded on an `EagerTrace` tape (define-by-run).

`bind(op, *args, **params)` finds the innermost trace among its arguments
(the one with the highest level) and lets it process the op; with no recording
arguments it simply runs the NumPy implementation. Derivative rules call the
same functions, so one rule serves NumPy values, eager tapes and graphs alike.
"""
import contextlib
import itertools
import math
import os
import sys
import threading
import warnings

import numpy as np

from .errors import (STATIC_HINT, GradientCutWarning, JitgraphError, NotSupportedError, ShapeError,
                     TracingError, array_method_hint, is_library_frame, numpy_scalar_call, ufunc_list_hint, where)
from .dtypes import type_str
from .graph import Node
from .ops.registry import METHODS, PRIMS

_levels = itertools.count(1)
MAX_BYTES = np.iinfo(np.intp).max     # NumPy's limit on an array's size in bytes
# A constant is a copy of the array it was made from, so that the function writing into that
# array later (`c = np.array(..); y = x * c; c[0] = 5`) does not change what was recorded; an
# array larger than this (a dataset the function closes over) is not copied, and is assumed
# not written into while it is traced.
CONST_COPY_BYTES = 64 << 20
# Constants of up to this many elements are one node per distinct value (dtype, shape, bytes):
# the same padding or index array made twice (np.convolve of one signal with two kernels)
# then leads to one concatenate and one gather, which CSE shares.
CONST_CSE_ELEMENTS = 1 << 16


class _Tracing(threading.local):
    depth = 0


_tracing = _Tracing()


@contextlib.contextmanager
def tracing():
    """Marks the code inside as being traced into a graph (see `is_tracing`)."""
    _tracing.depth += 1
    try:
        yield
    finally:
        _tracing.depth -= 1


def is_tracing():
    """Is a graph being traced in this thread? Outside a trace (plain NumPy, eager tapes) the
    structured control-flow constructs run as Python statements."""
    return _tracing.depth > 0


class Trace:
    def __init__(self):
        self.level = next(_levels)


def innermost(values):
    """The innermost trace (highest level) recording any of `values`, or None."""
    top = None
    for a in values:
        if isinstance(a, Tensor) and (top is None or a._trace.level > top.level):
            top = a._trace
    return top


class _Argument:
    """The `_view` of a function argument's Tensor: arguments are read-only (see numpy_api.assign)."""

    def __repr__(self):
        return "ARGUMENT"


ARGUMENT = _Argument()


class View:
    """What a Tensor that NumPy would make a view (x[1:], x.reshape(...), x.T) is a view of.

    `derive(base)` computes the view's value from the base's, `write(base, value)` the base's
    value after the view is set to `value` (None: a read-only view, like a broadcast). `seen`
    is the base's node the view was derived from: when an in-place update has given the base
    another node since, the view derives its value again, so it reads what NumPy's shared
    memory would; updating the view in place updates its base (numpy_api.write_into)."""

    __slots__ = ("base", "derive", "write", "seen", "contiguous")

    def __init__(self, base, derive, write, contiguous=True):
        self.base, self.derive, self.write = base, derive, write
        self.seen = base.node
        # whether NumPy's view would be C-contiguous (a reshape of it is a view too)
        self.contiguous = contiguous and (base._view is None or base._view is ARGUMENT
                                          or base._view.contiguous)


def bind(op, *args, **params):
    """Apply primitive `op` to `args` (arrays or Tensors of matching shape/dtype)."""
    top = innermost(args)
    if top is None:
        return PRIMS[op].impl(*args, **params)
    return top.process(op, args, params)


class GraphTrace(Trace):
    """Builds a graph. Nodes are hash-consed: an identical (op, inputs, params) is reused."""

    def __init__(self):
        super().__init__()
        self.nodes = []
        self._cse = {}
        self.checks = []          # (kind, node, info): run-time checks (api.run_checks)
        self.opaque = set()       # ids of constants that stand for values (never folded)
        self.region = None        # the `checkpoint` region being traced, if any
        self.regions = {}         # node id -> checkpoint region of the nodes made inside one
        self._n_regions = 0

    def new_region(self):
        self._n_regions += 1
        return self._n_regions

    def new_input(self, index, shape, dtype, weak=False):
        node = Node("input", (), {"index": index}, shape, dtype)
        self.nodes.append(node)
        return Tracer(self, node, weak, ARGUMENT)

    def const(self, value):
        given = value
        value = np.asarray(value)
        if value is given or value.base is not None:
            if value.flags.writeable and value.nbytes <= CONST_COPY_BYTES:
                value = value.copy()
        if value.size > 1 and not any(value.strides):
            # a broadcast view (np.broadcast_to of a scalar, folded in a traced body) is a
            # broadcast of its one value: loops read the scalar, where a constant array of
            # the full shape was read from memory, element by element
            one = self.const(np.asarray(value.flat[0], dtype=value.dtype))
            return self.process("broadcast", (Tracer(self, one),), {"shape": value.shape}).node
        key = None
        if value.dtype.kind == "O":
            pass
        elif value.size <= CONST_CSE_ELEMENTS:
            key = ("const", value.dtype.str, value.shape, value.tobytes())
        elif not value.flags.writeable:
            # a read-only array (a memoized index array, ops/arrange.py) is the same value as
            # long as it is the same object; the node keeps it alive, so its id is not reused
            key = ("const id", id(value))
        if key is not None:
            hit = self._cse.get(key)
            if hit is not None:
                return hit
        node = Node("const", (), {}, value.shape, value.dtype, value=value)
        self.nodes.append(node)
        if key is not None:
            self._cse[key] = node
        return node

    def placeholder(self, value):
        """A constant node with `value` that ops never fold: it stands for a value the graph
        is differentiated with respect to (transforms._Transposed's cotangents)."""
        node = Node("const", (), {}, np.shape(value), np.asarray(value).dtype, value=np.array(value))
        self.nodes.append(node)
        self.opaque.add(node.id)
        return node

    def lift(self, x):
        """A raw value as a constant of this graph."""
        return Tracer(self, self.const(x), _is_python_scalar(x))

    def to_node(self, x):
        if isinstance(x, Tensor):
            if x._trace is self:
                return x.node
            raise TracingError(
                f"a value recorded by another, enclosing trace (level {x._trace.level}) was used "
                f"inside a nested trace (level {self.level}); pass it as an argument instead{where()}")
        return self.const(x)

    def process(self, op, args, params):
        nodes = _canonical(op, [self.to_node(a) for a in args])
        same = _peephole(op, nodes, params, self.opaque)
        if same is not None:
            return Tracer(self, same)
        if nodes and all(_const_value(n, self.opaque) is not None for n in nodes):
            folded = self._fold(op, nodes, params)
            if folded is not None:
                return Tracer(self, folded)
        key = (op, tuple(n.id for n in nodes), tuple(sorted(params.items())))
        try:
            hit = self._cse.get(key)
        except TypeError:  # unhashable params: no CSE
            key, hit = None, None
        if hit is None:
            shape, dtype = PRIMS[op].abstract(*[(n.shape, n.dtype) for n in nodes], **params)
            if math.prod(shape) * np.dtype(dtype).itemsize > MAX_BYTES:
                raise ShapeError(f"{op} would make an array of shape {tuple(shape)}: larger than the maximum "
                                 f"possible size ({math.prod(shape):.3g} elements){where()}")
            hit = Node(op, nodes, params, shape, dtype)
            self.nodes.append(hit)
            if self.region is not None:
                self.regions[hit.id] = self.region
            if key is not None:
                self._cse[key] = hit
        return Tracer(self, hit)

    def tracer(self, node):
        return Tracer(self, node)

    def _fold(self, op, nodes, params):
        """op of constants as a constant, or None. Scalar arithmetic (1 / batch_size in a
        mean's gradient) and small arrays: a one-hot vector set in `np.zeros` at a position
        known when tracing (a char-RNN's inputs) is a constant, not a scatter per step. Not
        broadcasts (a broadcast constant stays a broadcast of its one value), nor library
        routines, loops or tuple-valued ops."""
        prim = PRIMS[op]
        if prim.multiple or prim.kind not in FOLDED_KINDS or op == "broadcast":
            return None
        values = [_const_value(n, self.opaque) for n in nodes]
        if prim.kind == "elementwise" and all(n.op == "const" and n.value.ndim == 0 for n in nodes):
            return self.const(prim.impl(*values, **params))
        shape, dtype = prim.abstract(*[(n.shape, n.dtype) for n in nodes], **params)
        if math.prod(shape) > FOLD_MAX_ELEMENTS:
            return None
        with np.errstate(all="ignore"):
            value = np.asarray(prim.impl(*values, **params))
        if value.shape != tuple(shape):
            return None
        value = value.astype(dtype, copy=not value.flags.writeable or value.base is not None)
        if value.size > 1 and value.dtype.itemsize in (1, 2, 4, 8):
            bits = value.reshape(-1).view(f"u{value.dtype.itemsize}")
            if np.all(bits == bits[0]):     # (bit for bit: -0.0 is not 0.0)
                value = np.broadcast_to(value.flat[0], value.shape)    # a broadcast of its value
        return self.const(value)


FOLDED_KINDS = ("elementwise", "reduce", "shape", "index")
FOLD_MAX_ELEMENTS = 1 << 16     # the largest array a trace-time op on constants folds to


class EagerTrace(Trace):
    """A define-by-run tape: every op computes its value now and is recorded as a Node."""

    def __init__(self):
        super().__init__()
        self.nodes = []
        self.values = {}

    def new_input(self, value, weak=False):
        node = Node("input", (), {"index": len(self.nodes)}, np.shape(value), _dtype_of(value))
        self.nodes.append(node)
        self.values[node.id] = value
        return EagerBox(self, node, value, weak, ARGUMENT)

    def lift(self, x):
        """A raw value as a constant on the tape (a Tensor, so NumPy code writing into an array
        made from it, np.zeros_like(x) say, records the writes)."""
        if isinstance(x, Tensor):
            return x
        value = np.asarray(x)
        node = Node("const", (), {}, value.shape, _dtype_of(x), value=value)
        self.values[node.id] = value
        return EagerBox(self, node, value, _is_python_scalar(x))

    def process(self, op, args, params):
        nodes, vals = [], []
        for a in args:
            if isinstance(a, EagerBox) and a._trace is self:
                nodes.append(a.node)
                vals.append(a.value)
            else:
                node = Node("const", (), {}, np.shape(a), _dtype_of(a), value=a)
                self.values[node.id] = a
                nodes.append(node)
                vals.append(a)
        value = bind(op, *vals, **params)
        if PRIMS[op].multiple:      # a tuple (several results), read by proj nodes
            shape, dtype = (), np.dtype(object)
        else:
            if not isinstance(value, Tensor):
                value = np.asarray(value)
            shape, dtype = np.shape(value), _dtype_of(value)
        node = Node(op, nodes, params, shape, dtype)
        self.nodes.append(node)
        self.values[node.id] = value
        return EagerBox(self, node, value)


def _is_python_scalar(x):
    return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)


def _const_value(node, opaque=()):
    """The value of a constant or a broadcast constant (a view), else None (also for the
    `opaque` ones)."""
    if node.op == "broadcast":
        x = node.inputs[0]
        return np.broadcast_to(x.value, node.shape) if x.op == "const" and x.id not in opaque else None
    return node.value if node.op == "const" and node.id not in opaque else None


def _scalar_const(node, opaque=()):
    """The value of a scalar constant (possibly broadcast), else None."""
    while node.op == "broadcast":
        node = node.inputs[0]
    if node.op == "const" and node.value.ndim == 0 and node.id not in opaque:
        return node.value.item()
    return None


def _peephole(op, nodes, params, opaque=()):
    """An existing node equal to op(nodes), for algebraic identities; None otherwise.

    Only identities that are exact in floating point (x*1, x-0, reshape to the
    same shape); x+0 is not one of them (-0.0 + 0.0 is +0.0).
    """
    if op == "mul":
        for a, b in (nodes, nodes[::-1]):
            if _scalar_const(b, opaque) == 1 and b.shape == a.shape:
                return a
    elif op == "sub":
        a, b = nodes
        z = _scalar_const(b, opaque)
        if z == 0 and not np.signbit(z) and b.shape == a.shape:   # x - (+0.0) is x; x - (-0.0) is not
            return a
    elif op == "reshape":
        x = nodes[0]
        if tuple(params["shape"]) == x.shape:
            return x
        if x.op == "reshape" and x.inputs[0].shape == tuple(params["shape"]):
            return x.inputs[0]
    return None


def _canonical(op, nodes):
    """Inputs rewritten so chains collapse: reshape(reshape(x)) reads x directly."""
    if op == "reshape" and nodes[0].op == "reshape":
        return [nodes[0].inputs[0]]
    if op == "broadcast" and nodes[0].op == "broadcast":
        return [nodes[0].inputs[0]]
    return nodes


def _dtype_of(x):
    return x.dtype if isinstance(x, Tensor) else np.asarray(x).dtype


class Tensor:
    """Base of recording values: NumPy's protocols, operators and array methods.

    Every operator and method goes through NumPy's own dispatch (`np.add(self,
    other)` reaches `__array_ufunc__`, `np.sum(self)` reaches
    `__array_function__`), and from there to the implementation the op families
    registered (`ops/registry.py`), so a Tensor behaves exactly as the NumPy
    function called on it.

    `weak` marks values that came from Python scalars: like NumPy's Python
    scalars (NEP 50) they do not widen the dtype of arrays they meet.
    """

    __array_priority__ = 1000
    __slots__ = ("_trace", "_node", "weak", "_view")
    __hash__ = object.__hash__

    @property
    def node(self):
        """The graph node (or tape node) holding this value."""
        view = self._view
        if view is not None and view is not ARGUMENT:
            base = view.base.node          # (a view of a view refreshes its base first)
            if base is not view.seen:
                # the base was updated in place since this view was derived: derive it again
                view.seen = base
                self.set_node(view.derive(view.base)._node)
        return self._node

    def set_node(self, node):
        """This Tensor now holds `node` (an in-place update; names bound to it see it)."""
        self._node = node

    @property
    def shape(self):
        return self.node.shape

    @property
    def dtype(self):
        return self.node.dtype

    @property
    def ndim(self):
        return len(self.node.shape)

    @property
    def size(self):
        return self.node.size

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    # NumPy protocols (NEP 13 / NEP 18)
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return METHODS["__array_ufunc__"](ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return METHODS["__array_function__"](func, args, kwargs)

    # operators
    def __add__(self, other):
        return np.add(self, other)

    def __radd__(self, other):
        return np.add(other, self)

    def __sub__(self, other):
        return np.subtract(self, other)

    def __rsub__(self, other):
        return np.subtract(other, self)

    def __mul__(self, other):
        return np.multiply(self, other)

    def __rmul__(self, other):
        return np.multiply(other, self)

    def __truediv__(self, other):
        return np.true_divide(self, other)

    def __rtruediv__(self, other):
        return np.true_divide(other, self)

    def __floordiv__(self, other):
        return np.floor_divide(self, other)

    def __rfloordiv__(self, other):
        return np.floor_divide(other, self)

    def __mod__(self, other):
        return np.remainder(self, other)

    def __rmod__(self, other):
        return np.remainder(other, self)

    def __divmod__(self, other):
        return np.divmod(self, other)

    def __rdivmod__(self, other):
        return np.divmod(other, self)

    def __pow__(self, other):
        return np.power(self, other)

    def __rpow__(self, other):
        return np.power(other, self)

    def __matmul__(self, other):
        return np.matmul(self, other)

    def __rmatmul__(self, other):
        return np.matmul(other, self)

    def __and__(self, other):
        return np.bitwise_and(self, other)

    def __rand__(self, other):
        return np.bitwise_and(other, self)

    def __or__(self, other):
        return np.bitwise_or(self, other)

    def __ror__(self, other):
        return np.bitwise_or(other, self)

    def __xor__(self, other):
        return np.bitwise_xor(self, other)

    def __rxor__(self, other):
        return np.bitwise_xor(other, self)

    def __lshift__(self, other):
        return np.left_shift(self, other)

    def __rlshift__(self, other):
        return np.left_shift(other, self)

    def __rshift__(self, other):
        return np.right_shift(self, other)

    def __rrshift__(self, other):
        return np.right_shift(other, self)

    def __lt__(self, other):
        return np.less(self, other)

    def __le__(self, other):
        return np.less_equal(self, other)

    def __gt__(self, other):
        return np.greater(self, other)

    def __ge__(self, other):
        return np.greater_equal(self, other)

    def __eq__(self, other):
        return np.equal(self, other)

    def __ne__(self, other):
        return np.not_equal(self, other)

    def __neg__(self):
        return np.negative(self)

    def __pos__(self):
        return np.positive(self)

    def __round__(self, ndigits=None):
        """round(x): np.round; round(x) of a 0-d value is an integer, as of a NumPy scalar (an
        array's round is an array of its dtype, as ndarray's)."""
        if ndigits is None and not self.shape and self.dtype.kind == "f":
            return np.round(self).astype(np.int64)
        return np.round(self, 0 if ndigits is None else ndigits)

    def __floor__(self):
        """math.floor(x) of a one-element value: an integer (0-d), as of a NumPy scalar."""
        return self._integral(np.floor)

    def __ceil__(self):
        return self._integral(np.ceil)

    def __trunc__(self):
        return self._integral(np.trunc)

    def _integral(self, rounding):
        if int(np.prod(self.shape, dtype=np.int64)) != 1:
            raise TypeError("only length-1 arrays can be converted to Python scalars")
        x = self.reshape(())
        return rounding(x).astype(np.int64) if self.dtype.kind == "f" else x.astype(np.int64)

    def __abs__(self):
        return np.absolute(self)

    def __invert__(self):
        return np.invert(self)

    def __getitem__(self, key):
        return METHODS["getitem"](self, key)

    def __setitem__(self, key, value):
        setitem = METHODS.get("setitem")
        if setitem is None:
            raise NotSupportedError(f"item assignment (x[...] = v) is not supported on traced values{where()}")
        setitem(self, key, value)

    # in-place operators: the array takes its new value, and every name bound to it sees it
    def __iadd__(self, other):
        return self._assign(np.add(self, other), "+=")

    def __isub__(self, other):
        return self._assign(np.subtract(self, other), "-=")

    def __imul__(self, other):
        return self._assign(np.multiply(self, other), "*=")

    def __itruediv__(self, other):
        return self._assign(np.true_divide(self, other), "/=")

    def __ifloordiv__(self, other):
        return self._assign(np.floor_divide(self, other), "//=")

    def __imod__(self, other):
        return self._assign(np.remainder(self, other), "%=")

    def __ipow__(self, other):
        return self._assign(np.power(self, other), "**=")

    def __imatmul__(self, other):
        return self._assign(np.matmul(self, other), "@=")

    def __iand__(self, other):
        return self._assign(np.bitwise_and(self, other), "&=")

    def __ior__(self, other):
        return self._assign(np.bitwise_or(self, other), "|=")

    def __ixor__(self, other):
        return self._assign(np.bitwise_xor(self, other), "^=")

    def _assign(self, new, symbol):
        """`self <symbol> other` in place: NumPy's rules (same shape, same-kind casting), then this
        object records the new value, so every name bound to it sees the update."""
        METHODS["assign"](self, new, symbol)
        return self

    def __getattr__(self, name):
        # only called for names the class does not define. NumPy's loops over object arrays
        # (np.exp of an array of traced scalars) call a method named after the ufunc
        ufunc = getattr(np, name, None)
        if isinstance(ufunc, np.ufunc) and ufunc.nin == 1 and ufunc.nout == 1:
            return lambda: ufunc(self)
        if not name.startswith("_") and hasattr(np.ndarray, name):
            raise NotSupportedError(f"ndarray.{name} is not supported on traced values{where()}")
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    # array methods: the NumPy function of the same name
    @property
    def T(self):
        return np.transpose(self)

    @property
    def flat(self):
        """x.flat[key] reads (and x.flat[key] = v writes) the C-ordered elements of x."""
        return _Flat(self)

    @property
    def mT(self):
        return np.swapaxes(self, -1, -2)

    def sum(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return np.sum(self, axis, dtype, out, keepdims, **kw)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return np.prod(self, axis, dtype, out, keepdims, **kw)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return np.mean(self, axis, dtype, out, keepdims, **kw)

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
        return np.var(self, axis, dtype, out, ddof, keepdims, **kw)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
        return np.std(self, axis, dtype, out, ddof, keepdims, **kw)

    def max(self, axis=None, out=None, keepdims=False, **kw):
        return np.max(self, axis, out, keepdims, **kw)

    def min(self, axis=None, out=None, keepdims=False, **kw):
        return np.min(self, axis, out, keepdims, **kw)

    def reshape(self, *shape, order="C", **kw):
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = shape[0]
        return np.reshape(self, shape, order=order, **kw)

    def transpose(self, *axes):
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            axes = axes[0]
        return np.transpose(self, axes if axes else None)

    def swapaxes(self, axis1, axis2):
        return np.swapaxes(self, axis1, axis2)

    def squeeze(self, axis=None):
        return np.squeeze(self, axis)

    def ravel(self, order="C"):
        return np.ravel(self, order)

    def flatten(self, order="C"):
        """A copy flattened to one dimension (np.ravel gives a view)."""
        return np.ravel(self, order).copy()

    def dot(self, b, out=None):
        return np.dot(self, b, out)

    def clip(self, min=None, max=None, out=None, **kw):
        return np.clip(self, min, max, out, **kw)

    def take(self, indices, axis=None, out=None, mode=None):
        return np.take(self, indices, axis, out, mode)

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        return METHODS["astype"](self, dtype, order, casting, subok, copy)

    def copy(self, order="C"):
        """A new array with this value (updating one never changes the other)."""
        return self.rebind(self.node)

    def all(self, axis=None, out=None, keepdims=False, **kw):
        return np.all(self, axis, out, keepdims, **kw)

    def any(self, axis=None, out=None, keepdims=False, **kw):
        return np.any(self, axis, out, keepdims, **kw)

    def argmax(self, axis=None, out=None, keepdims=False):
        return np.argmax(self, axis, out, keepdims=keepdims)

    def argmin(self, axis=None, out=None, keepdims=False):
        return np.argmin(self, axis, out, keepdims=keepdims)

    def argsort(self, axis=-1, kind=None, order=None, **kw):
        return np.argsort(self, axis, kind, order, **kw)

    def cumsum(self, axis=None, dtype=None, out=None):
        return np.cumsum(self, axis, dtype, out)

    def cumprod(self, axis=None, dtype=None, out=None):
        return np.cumprod(self, axis, dtype, out)

    def diagonal(self, offset=0, axis1=0, axis2=1):
        return np.diagonal(self, offset, axis1, axis2)

    def trace(self, offset=0, axis1=0, axis2=1, dtype=None, out=None):
        return np.trace(self, offset, axis1, axis2, dtype, out)

    def repeat(self, repeats, axis=None):
        return np.repeat(self, repeats, axis)

    def round(self, decimals=0, out=None):
        return np.round(self, decimals, out)

    def conj(self):
        return np.conjugate(self)

    conjugate = conj

    def nonzero(self):
        return np.nonzero(self)

    def searchsorted(self, v, side="left", sorter=None):
        return np.searchsorted(self, v, side, sorter)

    def sort(self, axis=-1, kind=None, order=None):
        """Sort in place, like ndarray.sort (every name bound to this array sees it)."""
        METHODS["assign"](self, np.sort(self, axis, kind, order), "sort()")

    def fill(self, value):
        self[...] = value

    def put(self, indices, values, mode="raise"):
        return np.put(self, indices, values, mode)

    @property
    def real(self):
        return np.real(self)

    @property
    def imag(self):
        return np.imag(self)

    @property
    def itemsize(self):
        return self.dtype.itemsize

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    @property
    def strides(self):
        """The byte strides of a C-ordered array of this shape and dtype: a traced value has no
        memory layout, and code deriving strides from these (as_strided's im2col) reads its
        values as NumPy reads those of a C-ordered array."""
        step, out = self.dtype.itemsize, []
        for n in reversed(self.shape):
            out.append(step)
            step *= n
        return tuple(reversed(out))


class Tracer(Tensor):
    """A symbolic value in a graph under construction."""

    __slots__ = ()

    def __init__(self, trace, node, weak=False, view=None):
        self._trace, self._node, self.weak, self._view = trace, node, weak, view

    def rebind(self, node):
        """A new Tensor of this trace holding `node`."""
        return Tracer(self._trace, node, self.weak)

    def _concrete(self, what):
        hint = ""
        if self.weak and not self.node.shape:
            # a Python bool or int argument (a training flag, a layer count) is traced like an array
            hint = (" If it comes from a Python bool or int argument that selects code paths or sizes "
                    f"(a training flag, a count), {STATIC_HINT}")
        raise TracingError(
            f"{what} of a traced value{where()}: the value depends on the function's inputs, "
            "so it is not known while the function is traced into a static graph. Use "
            "np.where for elementwise choices, jg.cond for branches, or the eager "
            "jg.value_and_grad, which follows Python control flow." + hint)

    def __bool__(self):
        self._concrete("bool()")

    def __float__(self):
        _refuse_numpy_conversion("float")
        _refuse_scalar_constructor()
        self._concrete("float()")

    def __int__(self):
        _refuse_numpy_conversion("int")
        _refuse_scalar_constructor()
        self._concrete("int()")

    def __index__(self):
        self._concrete("using as an index/int")

    def __complex__(self):
        self._concrete("complex()")

    @property
    def __array__(self):
        # a 0-d value has no __array__: NumPy then keeps it as an object element, so
        # np.array([a, b]) and np.mean([a, b]) of traced scalars make object arrays, which
        # jitgraph stacks back into one value when they meet (numpy_api.as_operand)
        if not self.node.shape:
            raise AttributeError("__array__")
        return self._refuse_array

    def _refuse_array(self, dtype=None, copy=None):
        _refuse_library_conversion()
        hint = array_method_hint() or ufunc_list_hint()
        if hint:
            raise TracingError(f"conversion to a NumPy array of a traced value{where()}{hint}")
        self._concrete("conversion to a NumPy array")

    def item(self):
        self._concrete(".item()")

    def tolist(self):
        self._concrete(".tolist()")

    def __repr__(self):
        return f"Tracer<{type_str(self.shape, self.dtype)}>"


class EagerBox(Tensor):
    """A concrete value on an eager tape. Python control flow on it works."""

    __slots__ = ("_value",)

    def __init__(self, trace, node, value, weak=False, view=None):
        self._trace, self._node, self._value, self.weak, self._view = trace, node, value, weak, view

    @property
    def value(self):
        """The concrete value (a view updated through its base reads the new value)."""
        if self._view is not None:
            self.node          # derives the value again if its base was updated since
        return self._value

    def rebind(self, node):
        return EagerBox(self._trace, node, self._trace.values[node.id], self.weak)

    def set_node(self, node):
        self._node, self._value = node, self._trace.values[node.id]

    def __bool__(self):
        return bool(self.value)

    def __float__(self):
        _refuse_numpy_conversion("float")
        _refuse_scalar_constructor()
        self._warn_cut("float()")
        return float(self.value)

    def __int__(self):
        _refuse_numpy_conversion("int")
        _refuse_scalar_constructor()
        return int(self.value)

    def __index__(self):
        return int(self.value)

    def _warn_cut(self, how):
        """A floating value turned into a Python number by the user's code (not jitgraph's or
        NumPy's): warn that the number carries no gradient (GradientCutWarning), once per line
        (Python's default filter). Control flow on it (`if x > 0`) is fine and says nothing."""
        if np.asarray(self._value).dtype.kind not in "fc" or is_library_frame(sys._getframe(2), scipy=False):
            return
        warnings.warn(f"{how} of a recorded value that the gradient is taken through gives a Python "
                      "number: nothing computed from it gets a gradient from it (a math function imported "
                      "by name calls float() too); use NumPy operations, or math.f(...) called through "
                      "the module, to keep its gradient",
                      GradientCutWarning, stacklevel=3)

    @property
    def __array__(self):
        if not self.node.shape:      # see Tracer.__array__
            raise AttributeError("__array__")
        return self._refuse_array

    def _refuse_array(self, dtype=None, copy=None):
        if np.asarray(self.value).dtype.kind in "biu":
            # no gradient flows through booleans and integers: a NumPy array indexed by a
            # recorded mask (const[x > 0]) or index array converts it
            return np.asarray(self.value, dtype=dtype)
        _refuse_library_conversion()
        hint = array_method_hint() or ufunc_list_hint() or \
            "; use jitgraph/NumPy operations on it, or .item() for a Python scalar"
        raise JitgraphError(
            f"converting a recorded value to a NumPy array would cut it out of the gradient tape{where()}{hint}")

    def item(self):
        self._warn_cut(".item()")
        return self.value.item() if hasattr(self.value, "item") else self.value

    def tolist(self):
        self._warn_cut(".tolist()")
        return np.asarray(self.value).tolist()

    def __repr__(self):
        return f"EagerBox({self.value!r})"


_NUMPY_DIR = os.path.dirname(np.__file__)


def _refuse_numpy_conversion(kind):
    """NumPy's own Python code turning a recorded scalar into a NumPy scalar (np.mean or np.std of
    a list of traced values ends with `np.float64(result)`) would cut it out of the gradient:
    say what to write instead."""
    caller = sys._getframe(2).f_code.co_filename
    if caller.startswith(_NUMPY_DIR):
        raise NotSupportedError(
            f"NumPy converted a traced value with {kind}() inside one of its functions, which would "
            f"cut it out of the graph: np.mean/np.std of a list of traced values do this. Stack the "
            f"values into one array first, e.g. np.mean(np.stack([a, b])){where()}")


def _refuse_scalar_constructor():
    """np.float64(x) of a recorded value: NumPy makes a constant of it (its constructor calls
    __float__), which would cut it out of the gradient. Say what to write instead."""
    name = numpy_scalar_call()
    if name:
        # NumPy swallows an error from __float__ and goes on to fail with "setting an array
        # element with a sequence" (a Tensor has __getitem__): say what happened first
        msg = (f"np.{name}(x) of a traced value would make a constant of it (NumPy's scalar types "
               f"cannot hold one) and cut it out of the gradient; write np.asarray(x, np.{name}) or "
               f"x.astype(np.{name}){where()}")
        warnings.warn(f"jitgraph: {msg}", RuntimeWarning, stacklevel=3)
        raise NotSupportedError(msg)


LIBRARY_HINTS = {}    # "scipy.special.logsumexp" -> a hint added to its refusal (ops/special.py)


def _refuse_library_conversion():
    """A SciPy function converting a traced value to an array (scipy.stats.norm.ppf(x),
    scipy.stats.zscore(x)) does not support traced values: say which one."""
    scipy = sys.modules.get("scipy")
    if scipy is None:
        return
    root = os.path.dirname(scipy.__file__)
    frame, frames = sys._getframe(2), []       # SciPy's frames, innermost first
    while frame is not None:
        if frame.f_code.co_filename.startswith(root):
            frames.append(frame)
        elif frames and not is_library_frame(frame):     # (NumPy's and jitgraph's frames between)
            break
        frame = frame.f_back
    if not frames:
        return
    # the function the user called: the outermost SciPy frame, decorators' wrappers aside (a
    # wrapper converting the arguments before the call names the function it wraps)
    outer_wrapper = frames[-1] if "wrapper" in frames[-1].f_code.co_name else None
    wrapped = next((v for k, v in (outer_wrapper.f_locals.items() if outer_wrapper else ())
                    if k in ("f", "func", "fun", "function", "wrapped") and callable(v)), None)
    if wrapped is not None and not getattr(wrapped, "__name__", "_").startswith("_") \
            and "." not in getattr(wrapped, "__qualname__", "."):        # (a function, not a method)
        module = getattr(wrapped, "__module__", None) or "scipy"
        name = f"{'.'.join(module.split('.')[:2])}.{wrapped.__name__}"
        raise NotSupportedError(f"{name} is not supported on traced values"
                                f"{'; ' + LIBRARY_HINTS[name] if name in LIBRARY_HINTS else ''}{where()}")
    named = [f for f in frames if not f.f_code.co_name.startswith("_") and "wrapper" not in f.f_code.co_name]
    outer = (named or frames)[-1]
    package = ".".join(outer.f_globals.get("__name__", "scipy").split(".")[:2])
    owner = outer.f_locals.get("self")
    owner = getattr(owner, "dist", owner)
    kind = getattr(owner, "name", None) or type(owner).__name__.removesuffix("_gen")
    name = f"{package}.{kind}.{outer.f_code.co_name}" if owner is not None else \
        f"{package}.{outer.f_code.co_name}"
    hint = f"; {LIBRARY_HINTS[name]}" if name in LIBRARY_HINTS else ""
    while frame is not None and is_library_frame(frame):
        frame = frame.f_back
    at = f" (at {frame.f_code.co_filename}:{frame.f_lineno})" if frame is not None else ""
    raise NotSupportedError(f"{name} is not supported on traced values{hint}{at}")


def known_value(t):
    """The value of t when it is known now: a value recorded eagerly, a traced constant (a mask
    made of constants, folded when tracing), or anything not traced (as an array); None for any
    other traced value."""
    while isinstance(t, EagerBox):
        t = t.value
    if isinstance(t, Tensor):
        node = getattr(t, "node", None)
        value = None if node is None else _const_value(node, getattr(t._trace, "opaque", ()))
        return None if value is None else np.asarray(value)
    return np.asarray(t)


def unbox(x, trace):
    """The value under `trace`'s boxes (leaves other values alone)."""
    if isinstance(x, EagerBox) and x._trace is trace:
        return x.value
    return x


class _Flat:
    """ndarray.flat of a traced array: indexing the flattened view (so an assignment writes x)."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __getitem__(self, key):
        return np.ravel(self.array)[key]

    def __setitem__(self, key, value):
        flat = np.ravel(self.array)
        flat[key] = value

    def __len__(self):
        return self.array.size
