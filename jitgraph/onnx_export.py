"""Export traced graphs to ONNX.

`export_onnx(fun, *args, path=...)` traces `fun` exactly as `make_graph` does
and writes one ONNX model: the forward graph, or with `gradient=True` the joint
forward+backward graph, whose outputs are the value followed by the flattened
gradients. `graph_to_onnx(graph)` converts an already traced `Graph`.

Every primitive maps to a small fixed pattern of standard ONNX operators (the
default domain only), chosen to reproduce the reference interpreter's NumPy
semantics where plain ONNX operators leave them open:

* `max`/`min` propagate NaN like `np.maximum`/`np.minimum` (select by an explicit
  comparison instead of ONNX Max/Min), and `reduce_max`/`reduce_min` return NaN
  for a slice containing NaN, like `np.max`/`np.min`;
* `expm1` and `log1p` (no ONNX operators) use Kahan's compensated forms, which
  stay accurate near zero instead of cancelling;
* `pad_slice` (the adjoint of strided slicing) is built from Pad, Reshape and
  Slice, `scatter_add` (the adjoint of gather) from ScatterElements with
  `reduction="add"`, so repeated indices accumulate;
* item assignment: `update_slice` is a Where between the array and the padded
  block, `scatter_set` a ScatterElements (with repeated indices ONNX leaves the
  winner open; onnxruntime writes in order, so the last stays, as in NumPy).

Control flow maps to ONNX subgraphs, converted recursively with the same
mapping (so nested loops and gradients of loops export too):

* `cond` -> `If` (then_branch: the true graph, else_branch: the false graph);
* `scan` (`scan`, `fori_loop` with static bounds) -> `Loop` with trip count
  `length`: the carries are loop-carried values, the ys (and the carry history,
  when a `proj` reads it) are scan outputs; `reverse=True` visits position
  `length-1-iter` and the stacked outputs are reversed back into position order;
* `while` (`while_loop`, `fori_loop` with traced bounds) -> `Loop` with no trip
  count, whose condition is the cond graph evaluated before the loop and again
  at the end of every iteration;
* `proj` -> an Identity of the control node's chosen output.

Subgraphs read operands, captured values and constants from the enclosing
scopes by name; every value name is unique across the whole model.

Each ONNX node is named after the IR value it computes (the names `print(graph)`
uses) and carries that IR line as its doc string; IR values keep their IR names
inside the model, so a model in Netron reads like the printed graph.

`onnx` is imported only when exporting (`pip install jitgraph[onnx]`).
"""
import ast
import inspect
import itertools
import os
import uuid

import numpy as np

from ._version import __version__
from .api import trace_graph
from .errors import NotSupportedError
from .graph import Graph
from .ops import scalar
from .ops.registry import PRIMS, Lowerings
from .tree import tree_flatten

DEFAULT_OPSET = 18
MIN_OPSET = 13          # ReduceSum axes and Pad pads are inputs from here on

_INT64_MIN = -(2 ** 63)


def _import_onnx():
    try:
        import onnx
        from onnx import helper, numpy_helper
    except ImportError as exc:
        raise ModuleNotFoundError(
            "ONNX export needs the 'onnx' package: pip install jitgraph[onnx] "
            "(or pip install onnx)", name="onnx") from exc
    return onnx, helper, numpy_helper


# ---- errors ----------------------------------------------------------------------------------
def _unsupported_error(nodes, names):
    """One NotSupportedError naming every op of `nodes` (first occurrence and its location)."""
    first = {}
    for n in nodes:
        first.setdefault(n.op, n)
    parts = []
    for op, n in first.items():
        why = PRIMS[op].onnx if op in PRIMS else None
        parts.append(f"op '{op}' (value {names.get(n.id, '?')}) has no ONNX mapping"
                     + (f": {why}" if why else ""))
    return NotSupportedError("ONNX export failed: " + "; ".join(parts))


# ---- the model builder -------------------------------------------------------------------
class _Builder:
    """Collects ONNX nodes and initializers with unique value names."""

    def __init__(self, helper, numpy_helper, opset):
        self.helper, self.numpy_helper, self.opset = helper, numpy_helper, opset
        self.nodes, self.initializers = [], []
        self.used = set()
        self._small = {}          # (dtype, shape, bytes) -> name, so helper constants are shared
        self.scope, self.doc = "", ""
        self._counter = itertools.count(1)

    def child(self):
        """A builder for a subgraph: its own node list, but the value names, initializers,
        shared constants and node numbering of the whole model (subgraphs read the
        initializers from the outer scope, and no name is ever reused)."""
        c = object.__new__(_Builder)
        c.__dict__.update(self.__dict__)
        c.nodes = []
        c.scope, c.doc = self.scope, ""
        return c

    def fresh(self, base):
        """A value name not used yet: `base`, or `base_1`, `base_2`, ..."""
        name, k = base, 0
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name

    def initializer(self, value, name):
        # not np.ascontiguousarray: it turns 0-d arrays into 1-d ones
        value = np.array(value, order="C", copy=True)
        self.initializers.append(self.numpy_helper.from_array(value, name))
        return name

    def const(self, value, dtype=None):
        """A small helper constant (shapes, axes, fill values), shared by all its uses."""
        value = np.asarray(value, dtype=dtype)
        key = (value.dtype.str, value.shape, value.tobytes())
        if key not in self._small:
            self._small[key] = self.initializer(value, self.fresh(f"{self.scope or 'k'}_const"))
        return self._small[key]

    def ints(self, values):
        return self.const(np.asarray(list(values), dtype=np.int64).reshape(-1))

    def op(self, op_type, inputs, out=None, **attrs):
        """Append one node; returns its (single) output name."""
        if out is None:
            out = self.fresh(f"{self.scope}_{op_type.lower()}" if self.scope else op_type.lower())
        return self.op_multi(op_type, inputs, [out], **attrs)[0]

    def op_multi(self, op_type, inputs, outs, **attrs):
        """Append one node with several (already named) outputs; returns them."""
        self.nodes.append(self.helper.make_node(
            op_type, list(inputs), list(outs),
            name=f"{self.scope or 'node'}/{op_type}_{next(self._counter)}",
            doc_string=self.doc, **attrs))
        return list(outs)

    def value_info(self, name, shape, dtype):
        return self.helper.make_tensor_value_info(name, self.tensor_type(dtype), list(shape))

    def tensor_type(self, dtype):
        return self.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))

    def cast(self, x, from_dtype, to_dtype):
        if np.dtype(from_dtype) == np.dtype(to_dtype):
            return x
        return self.op("Cast", [x], to=self.tensor_type(to_dtype))

    def fill(self, shape, value, dtype, out=None):
        """A constant-filled tensor of a static shape, without storing its elements."""
        v = self.numpy_helper.from_array(np.full((1,), value, dtype=np.dtype(dtype)), "value")
        return self.op("ConstantOfShape", [self.ints(shape)], out, value=v)


# ---- emitters: one per primitive; each writes the node's value into `out` ------------------
_EMITTERS = Lowerings()
_emits = _EMITTERS.register


def _is_float(dtype):
    return np.dtype(dtype).kind == "f"


@_emits("matmul")
def _matmul(b, node, ins, out):
    b.op("MatMul", ins, out)


# ---- elementwise primitives: from their scalar expression (ops/scalar.py) ------------------------
_BINARY = {ast.Add: "Add", ast.Sub: "Sub", ast.Mult: "Mul", ast.Div: "Div", ast.Pow: "Pow",
           ast.BitAnd: "And", ast.BitOr: "Or"}
_COMPARE = {ast.Lt: "Less", ast.LtE: "LessOrEqual", ast.Gt: "Greater", ast.GtE: "GreaterOrEqual",
            ast.Eq: "Equal", ast.NotEq: "Equal"}


def _expression(b, node, ins, out):
    """An elementwise node as ONNX operators: its primitive's scalar expression (or the
    equivalent `export_expr`), each function mapped to the ONNX operator the scalar language
    names for it. Constants take the dtype the operation computes in."""
    prim = PRIMS[node.op]
    dtype = scalar.compute_dtype([x.dtype for x in node.inputs], node.dtype)
    operands = {scalar.arg(k): (name, x.dtype) for k, (name, x) in enumerate(zip(ins, node.inputs))}
    tree = scalar.parse(prim.export_expr or prim.template(node.p)).body
    name, dt = _expr(b, tree, operands, dtype, node, out if tree.__class__ is not ast.Name else None)
    if dt != node.dtype:
        name = b.cast(name, dt, node.dtype)
    if name != out:
        b.op("Identity", [name], out)


def _expr(b, e, operands, dtype, node, out=None):
    """(value name, dtype) of expression tree `e`; `out` names the root's value."""
    if isinstance(e, ast.Name):
        return operands[e.id]
    if isinstance(e, ast.Constant):
        dt = np.dtype(bool) if isinstance(e.value, bool) else dtype
        return b.const(e.value, dt), dt
    if isinstance(e, ast.BinOp):
        (x, dx), (y, _) = _expr(b, e.left, operands, dtype, node), _expr(b, e.right, operands, dtype, node)
        if isinstance(e.op, ast.Div) and dx.kind != "f":
            # ONNX Div truncates integers; NumPy's true division would not
            raise NotSupportedError(f"ONNX export: {node.op} of {dx.name} operands has no exact ONNX mapping")
        if type(e.op) not in _BINARY:
            raise NotSupportedError(f"ONNX export: {node.op} uses {type(e.op).__name__}, which has no "
                                    "ONNX mapping")
        return b.op(_BINARY[type(e.op)], [x, y], out), dx
    if isinstance(e, ast.UnaryOp):
        x, dx = _expr(b, e.operand, operands, dtype, node)
        if isinstance(e.op, ast.USub):
            if dx.kind == "u":      # ONNX Neg has no unsigned types; 0 - x wraps like NumPy
                return b.op("Sub", [b.const(0, dx), x], out), dx
            return b.op("Neg", [x], out), dx
        return b.op("Not", [b.cast(x, dx, np.bool_)], out), np.dtype(bool)
    if isinstance(e, ast.Compare):
        (x, dx), (y, dy) = _expr(b, e.left, operands, dtype, node), _expr(b, e.comparators[0], operands,
                                                                           dtype, node)
        op = type(e.ops[0])
        if dx == np.bool_ and op not in (ast.Eq, ast.NotEq):
            # ONNX orderings have no bool type; False < True as 0 < 1
            x, y = b.cast(x, dx, np.uint8), b.cast(y, dy, np.uint8)
        if op is ast.NotEq:
            return b.op("Not", [b.op("Equal", [x, y])], out), np.dtype(bool)
        return b.op(_COMPARE[op], [x, y], out), np.dtype(bool)
    if isinstance(e, ast.IfExp):
        c, dc = _expr(b, e.test, operands, dtype, node)
        (x, dx), (y, _) = _expr(b, e.body, operands, dtype, node), _expr(b, e.orelse, operands, dtype, node)
        return b.op("Where", [b.cast(c, dc, np.bool_), x, y], out), dx
    if isinstance(e, ast.Call):
        args = [_expr(b, a, operands, dtype, node) for a in e.args]
        fn = e.func.id
        if fn == "T" or fn in scalar.DTYPES:
            to = dtype if fn == "T" else np.dtype(fn)
            return b.cast(args[0][0], args[0][1], to) if out is None else \
                b.op("Cast", [args[0][0]], out, to=b.tensor_type(to)), to
        op = scalar.FUNCTIONS[fn].onnx
        if op is None:
            raise NotSupportedError(f"ONNX export: {node.op} uses {fn}, which ONNX has no operator for")
        result_dt = np.dtype(bool) if op in ("IsNaN", "IsInf") else args[0][1]
        return b.op(op, [a for a, _ in args], out), result_dt
    raise NotSupportedError(f"ONNX export: {node.op}'s expression has no ONNX mapping")


def _exportable(prim):
    """Can an elementwise primitive be exported from its expression? (An expression made per
    node from its params is checked when it is exported.)"""
    if prim.kind != "elementwise" or prim.onnx is not None:
        return False
    template = prim.export_expr or prim.expr
    return callable(template) or all(scalar.FUNCTIONS[f].onnx for f in scalar.functions_used(template))


@_emits("expm1")
def _expm1(b, node, ins, out):
    # Kahan: with u = exp(x), expm1(x) = (u - 1) * x / log(u), exact to a few ulps near 0;
    # u == 1 means |x| below rounding (answer x), u - 1 == -1 underflow (answer -1), and
    # u - 1 == u overflow or +inf (answer u)
    x = ins[0]
    dt = node.dtype
    one = b.const(1, dt)
    u = b.op("Exp", [x])
    um1 = b.op("Sub", [u, one])
    r = b.op("Div", [b.op("Mul", [um1, x]), b.op("Log", [u])])
    r = b.op("Where", [b.op("Equal", [um1, b.const(-1, dt)]), b.const(-1, dt), r])
    r = b.op("Where", [b.op("Equal", [um1, u]), u, r])
    b.op("Where", [b.op("Equal", [u, one]), x, r], out)


@_emits("log1p")
def _log1p(b, node, ins, out):
    # Kahan: with u = 1 + x, log1p(x) = log(u) * x / (u - 1); u == 1 means x below rounding
    # (answer x); u - 1 == x means no rounding happened, incl. x = +-inf (answer log(u))
    x = ins[0]
    one = b.const(1, node.dtype)
    u = b.op("Add", [x, one])
    um1 = b.op("Sub", [u, one])
    lu = b.op("Log", [u])
    r = b.op("Div", [b.op("Mul", [lu, x]), um1])
    r = b.op("Where", [b.op("Equal", [um1, x]), lu, r])
    b.op("Where", [b.op("Equal", [u, one]), x, r], out)


@_emits("integer_pow")
def _integer_pow(b, node, ins, out):
    p = int(node.p["p"])
    x = ins[0]
    if p == 0:                      # NumPy: x ** 0 == 1 even for nan and inf
        b.fill(node.shape, 1, node.dtype, out)
    elif p == 1:
        b.op("Identity", [x], out)
    elif p == 2:                    # what NumPy computes for ** 2: one rounding, like np.square
        b.op("Mul", [x, x], out)
    elif p == -1 and _is_float(node.dtype):
        b.op("Reciprocal", [x], out)
    elif p < 0 and not _is_float(node.dtype):
        raise NotSupportedError(f"ONNX export: integer_pow with p={p} on {node.dtype.name} "
                                f"(NumPy raises for negative integer powers)")
    else:
        b.op("Pow", [x, b.const(p, node.dtype)], out)


_MINMAX = {"max": ("Max", "Greater", "Or"), "min": ("Min", "Less", "And")}


@_emits("max", "min")
def _maxmin(b, node, ins, out):
    onnx_op, cmp_op, bool_op = _MINMAX[node.op]
    a, c = ins
    if node.dtype == np.bool_:
        b.op(bool_op, ins, out)
    elif _is_float(node.dtype):
        # np.maximum(a, b) is a if (a > b or isnan(a)) else b: NaN in either operand propagates
        # (ONNX Max leaves NaN unspecified), and ties (incl. -0.0 vs 0.0) give b, as NumPy does
        take_a = b.op("Or", [b.op(cmp_op, [a, c]), b.op("IsNaN", [a])])
        b.op("Where", [take_a, a, c], out)
    else:
        b.op(onnx_op, ins, out)


# ---- reductions ----------------------------------------------------------------------------
_REDUCE = {"reduce_sum": "ReduceSum", "reduce_max": "ReduceMax", "reduce_min": "ReduceMin",
           "reduce_prod": "ReduceProd"}


def _reduce(b, op_type, x, axes, out=None):
    # ReduceSum takes axes as an input from opset 13, the others from opset 18
    if op_type == "ReduceSum" or b.opset >= 18:
        return b.op(op_type, [x, b.ints(axes)], out, keepdims=0)
    return b.op(op_type, [x], out, axes=list(axes), keepdims=0)


@_emits(*_REDUCE)
def _reduction(b, node, ins, out):
    axes = tuple(node.p["axes"])
    x, dt = ins[0], node.dtype
    op_type = _REDUCE[node.op]
    if not axes:                    # ONNX would read empty axes as "all axes"
        b.op("Identity", [x], out)
    elif dt == np.bool_:
        # the IR's bool reductions cast NumPy's result back to bool: sum and max are "any",
        # prod and min are "all"; ONNX reductions take no bools, so reduce 0/1 integers
        any_all = "ReduceMax" if node.op in ("reduce_sum", "reduce_max") else "ReduceMin"
        r = _reduce(b, any_all, b.cast(x, dt, np.int32), axes)
        b.op("Cast", [r], out, to=b.tensor_type(np.bool_))
    elif _is_float(dt) and node.op in ("reduce_max", "reduce_min"):
        # np.max of a slice containing NaN is NaN; ONNX leaves it unspecified
        r = _reduce(b, op_type, x, axes)
        has_nan = _reduce(b, "ReduceMax", b.cast(b.op("IsNaN", [x]), np.bool_, dt), axes)
        b.op("Where", [b.cast(has_nan, dt, np.bool_), b.const(np.nan, dt), r], out)
    else:
        _reduce(b, op_type, x, axes, out)


# ---- shape ops ---------------------------------------------------------------------------------
@_emits("reshape")
def _reshape(b, node, ins, out):
    attrs = {"allowzero": 1} if 0 in node.shape and b.opset >= 14 else {}
    if 0 in node.shape and b.opset < 14:
        # before opset 14 a 0 in the target shape means "copy that input dim"
        b.fill(node.shape, 0, node.dtype, out)
        return
    b.op("Reshape", [ins[0], b.ints(node.shape)], out, **attrs)


@_emits("transpose")
def _transpose(b, node, ins, out):
    b.op("Transpose", ins, out, perm=list(node.p["perm"]))


@_emits("broadcast")
def _broadcast(b, node, ins, out):
    # Expand broadcasts like NumPy, including the leading dims `broadcast` may add
    b.op("Expand", [ins[0], b.ints(node.shape)], out)


def _slice_ranges(in_shape, starts, stops, steps):
    """Per axis (start, end, step) for ONNX Slice, or None where the axis is kept whole.

    The IR keeps Python's normalized `slice.indices` triples, where a negative step
    may stop at -1 ("before index 0"); ONNX would read -1 as "the last index", so
    that end becomes INT64_MIN, which ONNX clamps to before index 0.
    """
    out = []
    for n, a, e, c in zip(in_shape, starts, stops, steps):
        count = len(range(a, e, c))
        if count == n and c == 1:
            out.append(None)
        elif count == 0:
            out.append((0, 0, 1))
        elif c > 0:
            out.append((a, a + (count - 1) * c + 1, c))
        else:
            last = a + (count - 1) * c        # smallest index read, >= 0
            out.append((a, last - 1 if last >= 1 else _INT64_MIN, c))
    return out


@_emits("slice")
def _slice(b, node, ins, out):
    p = node.p
    ranges = _slice_ranges(node.inputs[0].shape, p["starts"], p["stops"], p["steps"])
    axes = [i for i, r in enumerate(ranges) if r is not None]
    if not axes:
        b.op("Identity", ins, out)
        return
    b.op("Slice", [ins[0], b.ints(ranges[i][0] for i in axes), b.ints(ranges[i][1] for i in axes),
                   b.ints(axes), b.ints(ranges[i][2] for i in axes)], out)


@_emits("pad_slice")
def _pad_slice(b, node, ins, out):
    _padded(b, ins[0], node.inputs[0].shape, node.shape, node.p, node.dtype, out)


@_emits("update_slice")
def _update_slice(b, node, ins, out):
    # where(the slice's positions, v padded out to x's shape, x)
    vs = node.inputs[1].shape
    padded = _padded(b, ins[1], vs, node.shape, node.p, node.dtype)
    mask = _padded(b, b.fill(vs, 1, np.float32), vs, node.shape, node.p, np.float32)
    b.op("Where", [b.cast(mask, np.float32, np.bool_), padded, ins[0]], out)


def _padded(b, x, xs, full, p, dtype, out=None):
    """Zeros of shape `full` with x (of shape xs) written into the slice p (starts, stops, steps)."""
    xs = list(xs)
    if 0 in xs or 0 in full:        # nothing is written: all zeros
        return b.fill(full, 0, dtype, out)
    # 1. reverse the axes read with a negative step, so every axis is written in ascending order
    rev = [i for i, c in enumerate(p["steps"]) if c < 0 and xs[i] > 1]
    if rev:
        x = b.op("Slice", [x, b.ints([-1] * len(rev)), b.ints([_INT64_MIN] * len(rev)), b.ints(rev),
                           b.ints([-1] * len(rev))])
    lo, hi = [], []
    for i, (a, c) in enumerate(zip(p["starts"], p["steps"])):
        n, s = xs[i], abs(c)
        first = a if c > 0 else a + (n - 1) * c
        lo.append(first)
        hi.append(first + (n - 1) * s + 1)
        if s > 1 and n > 1:
            # 2. dilate: (.., n, ..) -> (.., n, 1, ..) -> pad to (.., n, s, ..) -> (.., n*s, ..),
            # then drop the s-1 zeros after the last element
            split = xs[:i + 1] + [1] + xs[i + 1:]
            x = b.op("Reshape", [x, b.ints(split)])
            pads = [0] * (2 * len(split))
            pads[len(split) + i + 1] = s - 1
            x = b.op("Pad", [x, b.ints(pads)])
            x = b.op("Reshape", [x, b.ints(xs[:i] + [n * s] + xs[i + 1:])])
            x = b.op("Slice", [x, b.ints([0]), b.ints([(n - 1) * s + 1]), b.ints([i]), b.ints([1])])
            xs[i] = (n - 1) * s + 1
    # 3. zero padding around the written block
    pads = lo + [f - h for f, h in zip(full, hi)]
    if any(pads):
        return b.op("Pad", [x, b.ints(pads)], out)
    return b.op("Identity", [x], out) if out is not None else x


@_emits("concatenate")
def _concatenate(b, node, ins, out):
    b.op("Concat", ins, out, axis=int(node.p["axis"]))


def _index(b, name, dtype):
    """An index tensor as int64 (ONNX indexing ops take int32 or int64 only)."""
    return name if np.dtype(dtype) in (np.int32, np.int64) else b.cast(name, dtype, np.int64)


@_emits("gather")
def _gather(b, node, ins, out):
    # np.take and ONNX Gather agree, negative indices included
    b.op("Gather", [ins[0], _index(b, ins[1], node.inputs[1].dtype)], out, axis=int(node.p["axis"]))


@_emits("scatter_add", "scatter_set")
def _scatter(b, node, ins, out):
    if node.op == "scatter_add":
        if b.opset < 16:
            raise NotSupportedError(f"ONNX export: scatter_add (the gradient of indexing) needs opset "
                                    f">= 16 for ScatterElements(reduction='add'), got opset {b.opset}")
        (g, idx), (data, upd_in, idx_in), reduction = node.inputs, (None, ins[0], ins[1]), "add"
    else:
        # scatter_set(x, idx, v): of repeated indices ONNX leaves the winner unspecified
        # (onnxruntime writes in order, the last one staying, as NumPy does)
        (_, idx, g), (data, upd_in, idx_in), reduction = node.inputs, (ins[0], ins[2], ins[1]), "none"
    axis = int(node.p["axis"])
    k = idx.ndim
    count = idx.size
    if count == 0:
        if data is None:
            b.fill(node.shape, 0, node.dtype, out)
        else:
            b.op("Identity", [data], out)
        return
    # updates: g with the index dims flattened to one axis; indices: idx along that axis, the
    # same for every other position; repeated indices accumulate through reduction="add"
    upd_shape = list(g.shape[:axis]) + [count] + list(g.shape[axis + k:])
    upd = upd_in if list(g.shape) == upd_shape else b.op("Reshape", [upd_in, b.ints(upd_shape)])
    ind_shape = [1] * axis + [count] + [1] * (len(upd_shape) - axis - 1)
    ind = b.op("Reshape", [_index(b, idx_in, idx.dtype), b.ints(ind_shape)])
    if ind_shape != upd_shape:
        ind = b.op("Expand", [ind, b.ints(upd_shape)])
    if data is None:
        data = b.fill(node.shape, 0, node.dtype)
    attrs = {"reduction": reduction} if reduction != "none" else {}
    b.op("ScatterElements", [data, ind, upd], out, axis=axis, **attrs)


# ---- the order family (ops/order.py): scans, sorts, gathers along an axis ----------------------
@_emits("cumsum")
def _cumsum(b, node, ins, out):
    b.op("CumSum", [ins[0], b.const(node.p["axis"], np.int64)], out, reverse=int(node.p["reverse"]))


@_emits("cumprod")
def _cumprod(b, node, ins, out):
    # ONNX has no cumulative product: out[.., i, ..] = the product over j of x[.., j, ..] where
    # j <= i and 1 elsewhere (an (n, n) mask; memory grows with n**2)
    axis, n = node.p["axis"], node.shape[node.p["axis"]]
    if n == 0:
        b.fill(node.shape, 0, node.dtype, out)
        return
    rows = b.op("Unsqueeze", [ins[0], b.ints([axis])])          # (.., 1, n, ..): j after i
    mask = np.tril(np.ones((n, n), bool)).reshape((n, n) + (1,) * (node.ndim - axis - 1))
    terms = b.op("Where", [b.const(mask), rows, b.const(1, node.dtype)])
    _reduce(b, "ReduceProd", terms, [axis + 1], out)


def _stable_topk(b, key, axis, n):
    """The ascending permutation of `key` along `axis`: TopK puts the lower index first among
    equal keys, which makes it a stable sort."""
    vals = b.fresh("sorted")
    return b.op_multi("TopK", [key, b.ints([n])], [vals, b.fresh("perm")], axis=axis, largest=0,
                      sorted=1)[1]


@_emits("argsort")
def _argsort(b, node, ins, out):
    x, dt = ins[0], node.inputs[0].dtype
    axis, n = node.p["axis"], node.shape[node.p["axis"]]
    if dt.kind != "f":
        if dt == np.uint64:
            raise NotSupportedError("ONNX export: argsort of uint64 values (ONNX TopK has no uint64, "
                                    "and int64 would reorder values above 2**63)")
        perm = _stable_topk(b, b.cast(x, dt, np.int64) if dt not in (np.int32, np.int64) else x, axis, n)
        b.op("Identity", [perm], out)
        return
    # NaN last, stably: sort by value with NaN as +inf, then stably by NaN-ness (two passes of
    # a stable sort sort by the pair)
    nan = b.op("IsNaN", [x])
    first = _stable_topk(b, b.op("Where", [nan, b.const(np.inf, dt), x]), axis, n)
    flag = b.cast(b.op("GatherElements", [nan, first], axis=axis), np.bool_, np.int64)
    second = _stable_topk(b, flag, axis, n)
    b.op("GatherElements", [first, second], out, axis=axis)


@_emits("searchsorted")
def _searchsorted(b, node, ins, out):
    # ONNX has no binary search: every value compared with every element, counted (NaN last)
    a, v = ins
    dt = node.inputs[0].dtype
    nd = len(node.inputs[1].shape)
    vv = b.op("Unsqueeze", [v, b.ints([nd])])

    def before(x, y):
        lt = b.op("Less", [x, y])
        if dt.kind != "f":
            return lt
        return b.op("Or", [lt, b.op("And", [b.op("IsNaN", [y]), b.op("Not", [b.op("IsNaN", [x])])])])
    counted = before(a, vv) if not node.p["right"] else b.op("Not", [before(vv, a)])
    _reduce(b, "ReduceSum", b.cast(counted, np.bool_, np.int64), (nd,), out)


@_emits("take_along")
def _take_along(b, node, ins, out):
    # GatherElements counts negative indices from the end, like np.take_along_axis
    b.op("GatherElements", ins, out, axis=int(node.p["axis"]))


@_emits("put_along_add")
def _put_along_add(b, node, ins, out):
    if b.opset < 16:
        raise NotSupportedError(f"ONNX export: put_along_add (the gradient of take_along_axis and "
                                f"sort) needs opset >= 16 for ScatterElements(reduction='add'), got "
                                f"opset {b.opset}")
    zeros = b.fill(node.shape, 0, node.dtype)
    b.op("ScatterElements", [zeros, ins[1], ins[0]], out, axis=int(node.p["axis"]), reduction="add")


@_emits("wrap_index")
def _wrap_index(b, node, ins, out):
    # integer Mod with fmod=0 takes the divisor's sign, like np.mod
    b.op("Mod", [ins[0], b.const(node.p["n"], node.dtype)], out, fmod=0)


# ---- elementwise math and SciPy's special functions (jitgraph/ops/elementwise.py, special.py) ------
# Composites of ONNX operators where the scalar expression calls functions ONNX lacks (log1p, a
# floor-semantics Mod) or that ONNX Runtime runs only in float32 (Asin, Acos, Asinh, Acosh, Atanh).
_LN2 = 0.6931471805599453


def _c(b, node, value):
    return b.const(value, node.dtype)


def _log1p_of(b, node, x):
    """log1p(x) (Kahan's formula, as the log1p emitter writes it) into a fresh value."""
    out = b.fresh("log1p")
    _log1p(b, node, [x], out)
    return out


def _inverse_trig(float32_op, composite):
    def emit(b, node, ins, out):
        if node.dtype == np.float32:
            b.op(float32_op, ins, out)
        else:
            b.op("Identity", [composite(b, node, ins[0])], out)
    return emit


def _asin(b, node, x):
    # atan(x / sqrt((1 - x)(1 + x))): +-pi/2 at +-1, NaN beyond
    one = _c(b, node, 1.0)
    root = b.op("Sqrt", [b.op("Mul", [b.op("Sub", [one, x]), b.op("Add", [one, x])])])
    return b.op("Atan", [b.op("Div", [x, root])])


def _acos(b, node, x):
    # 2 atan(sqrt((1 - x) / (1 + x))): accurate near x = 1, pi at -1
    one = _c(b, node, 1.0)
    ratio = b.op("Div", [b.op("Sub", [one, x]), b.op("Add", [one, x])])
    return b.op("Mul", [_c(b, node, 2.0), b.op("Atan", [b.op("Sqrt", [ratio])])])


def _asinh(b, node, x):
    # sign(x) log1p(|x| + x^2 / (1 + sqrt(1 + x^2))), and log(2|x|) where x^2 would overflow
    a = b.op("Abs", [x])
    one = _c(b, node, 1.0)
    a2 = b.op("Mul", [a, a])
    y = b.op("Add", [a, b.op("Div", [a2, b.op("Add", [one, b.op("Sqrt", [b.op("Add", [one, a2])])])])])
    r = _log1p_of(b, node, y)
    big = b.op("Greater", [a, _c(b, node, 1e150)])
    r = b.op("Where", [big, b.op("Add", [b.op("Log", [a]), _c(b, node, _LN2)]), r])
    return b.op("Where", [b.op("Less", [x, _c(b, node, 0.0)]), b.op("Neg", [r]), r])


def _acosh(b, node, x):
    # log1p(t + sqrt(t (t + 2))) with t = x - 1, and log(2x) where t^2 would overflow
    t = b.op("Sub", [x, _c(b, node, 1.0)])
    y = b.op("Add", [t, b.op("Sqrt", [b.op("Mul", [t, b.op("Add", [t, _c(b, node, 2.0)])])])])
    big = b.op("Greater", [x, _c(b, node, 1e150)])
    return b.op("Where", [big, b.op("Add", [b.op("Log", [x]), _c(b, node, _LN2)]), _log1p_of(b, node, y)])


def _atanh(b, node, x):
    # log1p(2x / (1 - x)) / 2
    ratio = b.op("Div", [b.op("Mul", [_c(b, node, 2.0), x]), b.op("Sub", [_c(b, node, 1.0), x])])
    return b.op("Mul", [_c(b, node, 0.5), _log1p_of(b, node, ratio)])


for _name, _op, _composite in [("arcsin", "Asin", _asin), ("arccos", "Acos", _acos),
                                ("arcsinh", "Asinh", _asinh), ("arccosh", "Acosh", _acosh),
                                ("arctanh", "Atanh", _atanh)]:
    _emits(_name)(_inverse_trig(_op, _composite))


def _logaddexp_like(base2):
    def emit(b, node, ins, out):
        # NumPy's formula: a + log(2) (a + 1) for a == b, max + log1p(exp(-|a - b|)) otherwise,
        # and a - b (NaN) when either is NaN
        a, c = ins
        d = b.op("Sub", [a, c])
        neg = b.op("Neg", [b.op("Abs", [d])])
        if base2:
            e = b.op("Pow", [_c(b, node, 2.0), neg])
            tail = b.op("Div", [_log1p_of(b, node, e), _c(b, node, _LN2)])
        else:
            tail = _log1p_of(b, node, b.op("Exp", [neg]))
        r = b.op("Add", [b.op("Where", [b.op("Greater", [a, c]), a, c]), tail])
        r = b.op("Where", [b.op("IsNaN", [d]), d, r])
        same = b.op("Add", [a, _c(b, node, 1.0 if base2 else _LN2)])
        b.op("Where", [b.op("Equal", [a, c]), same, r], out)
    return emit


_emits("logaddexp")(_logaddexp_like(False))
_emits("logaddexp2")(_logaddexp_like(True))


@_emits("logit")
def _logit(b, node, ins, out):
    # SciPy's: log(x / (1 - x)), and log1p(2d) - log1p(-2d) with d = x - 1/2 on [0.3, 0.65]
    x = ins[0]
    one = _c(b, node, 1.0)
    plain = b.op("Log", [b.op("Div", [x, b.op("Sub", [one, x])])])
    s = b.op("Mul", [_c(b, node, 2.0), b.op("Sub", [x, _c(b, node, 0.5)])])
    near = b.op("Sub", [_log1p_of(b, node, s), _log1p_of(b, node, b.op("Neg", [s]))])
    middle = b.op("And", [b.op("GreaterOrEqual", [x, _c(b, node, 0.3)]),
                          b.op("LessOrEqual", [x, _c(b, node, 0.65)])])
    b.op("Where", [middle, near, plain], out)


@_emits("xlog1py")
def _xlog1py(b, node, ins, out):
    x, y = ins
    zero = b.op("And", [b.op("Equal", [x, _c(b, node, 0.0)]), b.op("Not", [b.op("IsNaN", [y])])])
    b.op("Where", [zero, _c(b, node, 0.0), b.op("Mul", [x, _log1p_of(b, node, y)])], out)


@_emits("fmod")
def _fmod(b, node, ins, out):
    b.op("Mod", ins, out, fmod=1)


def _floor_mod(b, node, a, c):
    """(NumPy's remainder, the quotient a - remainder over c, before flooring) of floats."""
    zero = _c(b, node, 0.0)
    mod = b.op("Mod", [a, c], fmod=1)
    fix = b.op("And", [b.op("Not", [b.op("Equal", [mod, zero])]),
                       b.op("Not", [b.op("Equal", [b.op("Less", [c, zero]), b.op("Less", [mod, zero])])])])
    return mod, fix


@_emits("remainder")
def _remainder(b, node, ins, out):
    # C's fmod, moved by the divisor where the signs differ; a zero takes the divisor's sign
    a, c = ins
    mod, fix = _floor_mod(b, node, a, c)
    r = b.op("Where", [fix, b.op("Add", [mod, c]), mod])
    signed_zero = b.op("Where", [b.op("Less", [c, _c(b, node, 0.0)]), _c(b, node, -0.0), _c(b, node, 0.0)])
    b.op("Where", [b.op("Equal", [r, _c(b, node, 0.0)]), signed_zero, r], out)


@_emits("floor_divide")
def _floor_divide(b, node, ins, out):
    # NumPy's: (a - fmod(a, c)) / c, one less where the remainder moves, floored and snapped to
    # the nearest integer; a / c for a zero divisor
    a, c = ins
    mod, fix = _floor_mod(b, node, a, c)
    div = b.op("Div", [b.op("Sub", [a, mod]), c])
    div = b.op("Where", [fix, b.op("Sub", [div, _c(b, node, 1.0)]), div])
    fl = b.op("Floor", [div])
    fl = b.op("Where", [b.op("Greater", [b.op("Sub", [div, fl]), _c(b, node, 0.5)]),
                        b.op("Add", [fl, _c(b, node, 1.0)]), fl])
    quotient = b.op("Div", [a, c])
    zero = b.op("Mul", [quotient, _c(b, node, 0.0)])     # the zero quotient with a / c's sign
    fl = b.op("Where", [b.op("Equal", [div, _c(b, node, 0.0)]), zero, fl])
    b.op("Where", [b.op("Equal", [c, _c(b, node, 0.0)]), quotient, fl], out)


# ---- control flow -----------------------------------------------------------------------------
# A control node's value is a tuple: its emitter returns one ONNX value name per element
# (`out_avals`), and `proj` nodes pick from that list.
_CONTROL_EMITTERS = Lowerings()
_emits_control = _CONTROL_EMITTERS.register


@_emits("proj")
def _proj(b, node, ins, out):
    b.op("Identity", [ins[0][int(node.p["index"])]], out)


def _emit_subgraph(b, graph, in_names, prefix):
    """Emit `graph` applied to the values `in_names` into builder `b`.

    Returns one fresh name per graph output, each produced by a node of `b` (an
    ONNX subgraph output must be computed inside that subgraph, even when the IR
    output is an input, a constant or a value repeated among the outputs).
    """
    value = {n.id: nm for n, nm in zip(graph.inputs, in_names)}
    _emit_graph(b, graph, value, prefix=prefix)
    b.scope, b.doc = prefix.rstrip("."), ""
    return [b.op("Identity", [value[o.id]], b.fresh(f"{prefix}out{k}"))
            for k, o in enumerate(graph.outputs)]


def _make_subgraph(b, c, name, inputs, outputs):
    """The ONNX GraphProto of child builder `c`; inputs/outputs are (name, shape, dtype)."""
    return b.helper.make_graph(c.nodes, name, [b.value_info(*v) for v in inputs],
                               [b.value_info(*v) for v in outputs])


def _out_avals(node):
    return [(tuple(s), np.dtype(d)) for s, d in node.p["out_avals"]]


@_emits_control("cond")
def _cond(b, node, ins, used):
    scope = b.scope
    pred, args = ins[0], ins[1:]
    avals = _out_avals(node)
    if not avals:
        raise NotSupportedError("ONNX export: a cond with no outputs (ONNX If needs at least one)")
    false_graph, true_graph = node.p["branches"]
    attrs = {}
    for attr, g, role in (("then_branch", true_graph, "true"), ("else_branch", false_graph, "false")):
        c = b.child()
        # operands and captured values are read from the outer scope by name
        res = _emit_subgraph(c, g, args, f"{scope}.{role}.")
        attrs[attr] = _make_subgraph(b, c, f"{scope}_{role}_branch", [],
                                     [(r, s, d) for r, (s, d) in zip(res, avals)])
    outs = [b.fresh(f"{scope}.{k}") for k in range(len(avals))]
    b.scope = scope
    return b.op_multi("If", [b.cast(pred, node.inputs[0].dtype, np.bool_)], outs, **attrs)


def _reverse_axis0(b, x):
    return b.op("Slice", [x, b.ints([-1]), b.ints([_INT64_MIN]), b.ints([0]), b.ints([-1])])


@_emits_control("scan")
def _scan(b, node, ins, used):
    p = node.p
    scope = b.scope
    T, nc, nk = int(p["length"]), int(p["n_consts"]), int(p["n_carry"])
    reverse, start = bool(p["reverse"]), int(p["start"])
    consts, init, xs = ins[:nc], ins[nc:nc + nk], ins[nc + nk:]
    avals = _out_avals(node)
    n_y = len(avals) - 2 * nk
    if T == 0:
        # no iteration: the carries pass through, the stacked outputs are empty
        return ([b.op("Identity", [x]) for x in init] +
                [b.fill(s, 0, d) for s, d in avals[nk:]])
    # the carry history (the carry entering each position) is a scan output only when read
    hist = [k for k in range(nk) if nk + n_y + k in used]
    c = b.child()
    it, cond_in = c.fresh(f"{scope}.iter"), c.fresh(f"{scope}.cond_in")
    carry_in = [c.fresh(f"{scope}.carry{k}") for k in range(nk)]
    pos = c.op("Sub", [c.const(T - 1, np.int64), it]) if reverse else it
    i_val = c.op("Add", [pos, c.const(start, np.int64)]) if start else pos
    x_slices = [c.op("Gather", [x, pos], axis=0) for x in xs]
    res = _emit_subgraph(c, p["body"], [i_val] + consts + carry_in + x_slices, f"{scope}.body.")
    c.scope = scope
    cond_out = c.op("Identity", [cond_in])
    hist_out = [c.op("Identity", [carry_in[k]]) for k in hist]
    carry_avals = avals[:nk]
    step_avals = [(s[1:], d) for s, d in avals[nk:nk + n_y]] + [carry_avals[k] for k in hist]
    # Loop body: (iter, cond, carries...) -> (cond, carries..., per-iteration scan outputs...)
    body_ins = [(it, (), np.int64), (cond_in, (), np.bool_)]
    body_ins += [(n, s, d) for n, (s, d) in zip(carry_in, carry_avals)]
    body_outs = [(cond_out, (), np.bool_)] + [(n, s, d) for n, (s, d) in zip(res[:nk], carry_avals)]
    body_outs += [(n, s, d) for n, (s, d) in zip(res[nk:] + hist_out, step_avals)]
    body = _make_subgraph(b, c, f"{scope}_body", body_ins, body_outs)
    b.scope = scope
    finals = [b.fresh(f"{scope}.{k}") for k in range(nk)]
    stacked = [b.fresh(f"{scope}.{k}") for k in list(range(nk, nk + n_y)) + [nk + n_y + k for k in hist]]
    b.op_multi("Loop", [b.const(T, np.int64), b.const(True, np.bool_)] + init, finals + stacked, body=body)
    if reverse and T > 1:
        # iteration `it` visited position T-1-it: put the stacked values back in position order
        stacked = [_reverse_axis0(b, x) for x in stacked]
    outs = finals + stacked[:n_y] + [None] * nk
    for k, x in zip(hist, stacked[n_y:]):
        outs[nk + n_y + k] = x
    return outs


@_emits_control("while")
def _while(b, node, ins, used):
    p = node.p
    scope = b.scope
    nc = int(p["n_consts"])
    consts, init = ins[:nc], ins[nc:]
    cond_graph, body_graph = p["cond"], p["body"]
    c_dtype = cond_graph.outputs[0].dtype
    avals = _out_avals(node)
    # the condition before the first iteration, computed in the enclosing graph
    first = _emit_subgraph(b, cond_graph, consts + init, f"{scope}.cond0.")[0]
    b.scope = scope
    first = b.cast(first, c_dtype, np.bool_)
    c = b.child()
    it, cond_in = c.fresh(f"{scope}.iter"), c.fresh(f"{scope}.cond_in")
    carry_in = [c.fresh(f"{scope}.carry{k}") for k in range(len(init))]
    new = _emit_subgraph(c, body_graph, consts + carry_in, f"{scope}.body.")
    again = _emit_subgraph(c, cond_graph, consts + new, f"{scope}.cond.")[0]
    c.scope = scope
    if c_dtype != np.bool_:
        again = c.op("Cast", [again], to=b.tensor_type(np.bool_))
    body = _make_subgraph(
        b, c, f"{scope}_body",
        [(it, (), np.int64), (cond_in, (), np.bool_)] + [(n, s, d) for n, (s, d) in zip(carry_in, avals)],
        [(again, (), np.bool_)] + [(n, s, d) for n, (s, d) in zip(new, avals)])
    b.scope = scope
    outs = [b.fresh(f"{scope}.{k}") for k in range(len(avals))]
    # no trip count (""): the loop runs while the condition holds
    return b.op_multi("Loop", ["", first] + init, outs, body=body)


def _subgraphs(node):
    for _, v in node.params:
        if isinstance(v, Graph):
            yield v
        elif isinstance(v, tuple):
            yield from (g for g in v if isinstance(g, Graph))


def _unmapped_nodes(graph, supported=None):
    """Nodes of `graph` and of its subgraphs (recursively) that have no ONNX mapping."""
    supported = supported_ops() if supported is None else supported
    out = []
    for n in graph.nodes:
        if n.op in ("input", "const"):
            continue
        if n.op not in supported:
            out.append(n)
        for g in _subgraphs(n):
            out += _unmapped_nodes(g, supported)
    return out


def supported_ops():
    """The primitive names `graph_to_onnx` can export."""
    by_expression = {name for name, prim in PRIMS.items() if _exportable(prim)}
    return frozenset(_EMITTERS) | frozenset(_CONTROL_EMITTERS) | by_expression


def _emit_graph(b, graph, value, direct=None, prefix=""):
    """Emit every node of `graph` into `b`; `value` maps the bound input ids to names and
    receives every node's name (a list of names for a control node).

    `direct` maps node ids to the name they must take (top-level outputs). Returns the
    value_info of the tensors named here, for the top level graph.
    """
    direct = direct or {}
    ir_names = graph.names()
    labels = {k: v for k, v in value.items()}
    proj_used = {}
    for n in graph.nodes:
        if n.op == "proj":
            proj_used.setdefault(n.inputs[0].id, set()).add(int(n.p["index"]))
    value_info = []
    for node in graph.nodes:
        if node.op == "input":
            continue
        ir = prefix + ir_names[node.id]
        if node.op == "const":
            value[node.id] = labels[node.id] = b.initializer(node.value, b.fresh(ir))
            continue
        ins = [value[i.id] for i in node.inputs]
        control = PRIMS[node.op].multiple
        out = None if control else direct.get(node.id) or b.fresh(ir)
        labels[node.id] = ir if control else out
        # the doc string is the IR line spelled with the model's value names
        b.scope, b.doc = ir, graph.node_line(node, labels)
        if control:
            value[node.id] = _CONTROL_EMITTERS[node.op](b, node, ins, proj_used.get(node.id, set()))
            continue
        value[node.id] = out
        _EMITTERS.get(node.op, _expression)(b, node, ins, out)
        if node.id not in direct:
            value_info.append(b.value_info(out, node.shape, node.dtype))
    b.scope, b.doc = "", ""
    return value_info


# ---- graph -> model ------------------------------------------------------------------------
def _unique(names, reserved=()):
    """`names` made distinct from each other and from `reserved` by `_1`, `_2`, ... suffixes."""
    seen, out = set(reserved), []
    for n in names:
        base, k = n, 0
        while n in seen:
            k += 1
            n = f"{base}_{k}"
        seen.add(n)
        out.append(n)
    return out


def default_output_names(graph):
    """`value`, `grad_0`, ..., `aux_0`, ... for a joint graph; `value` or `value_0`, ... otherwise."""
    n = len(graph.outputs)
    if graph.meta.get("grad"):
        n_grads = len(_grad_inputs(graph)) if graph.meta.get("in_tree") is not None else n - 1
        names = ["value"] + [f"grad_{i}" for i in range(n_grads)]
        return names + [f"aux_{i}" for i in range(n - len(names))]
    return ["value"] if n == 1 else [f"value_{i}" for i in range(n)]


def graph_to_onnx(graph, input_names=None, output_names=None, opset=None, name=None):
    """Convert a traced `Graph` into a checked `onnx.ModelProto`.

    Args:
        graph: a graph from `trace_graph` / `make_graph` (forward or joint).
        input_names: one name per `graph.inputs` (default `input_0`, ...).
        output_names: one name per `graph.outputs` (default: `value`, then
            `grad_0`, ... for a joint graph, then `aux_0`, ...).
        opset: ONNX opset version of the default domain (default 18; at least 13,
            and 16 where the graph has `scatter_add`).
        name: the ONNX graph name (default: the traced function's name).

    Raises:
        NotSupportedError: an op without an ONNX mapping (also inside branches and
            loop bodies); the message names every such op and, where recorded,
            the user line.
    """
    onnx, helper, numpy_helper = _import_onnx()
    opset = DEFAULT_OPSET if opset is None else int(opset)
    if not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise ValueError(f"opset must be between {MIN_OPSET} and {onnx.defs.onnx_opset_version()} "
                         f"(the installed onnx), got {opset}")
    checks = graph.meta.get("checks")
    if checks:
        # the values jitgraph's run-time checks read (index bounds, Python int ranges) are extra
        # outputs; a model has no way to raise, so they are left out (onnxruntime refuses an
        # out-of-range Gather index itself)
        meta = {k: v for k, v in graph.meta.items() if k != "checks"}
        graph = Graph(graph.inputs, graph.outputs[:len(graph.outputs) - len(checks)],
                      graph.adjoint_ids, meta)
    ir_names = graph.names()
    missing = _unmapped_nodes(graph)
    if missing:
        raise _unsupported_error(missing, ir_names)

    # output names are the model's documented interface: an input that collides is renamed
    output_names = _unique(output_names or default_output_names(graph))
    input_names = _unique(input_names or [f"input_{i}" for i in range(len(graph.inputs))],
                          reserved=output_names)
    if len(input_names) != len(graph.inputs) or len(output_names) != len(graph.outputs):
        raise ValueError(f"graph has {len(graph.inputs)} inputs and {len(graph.outputs)} outputs, "
                         f"got {len(input_names)} input names and {len(output_names)} output names")

    b = _Builder(helper, numpy_helper, opset)
    b.used.update(input_names)
    b.used.update(output_names)
    value = {n.id: nm for n, nm in zip(graph.inputs, input_names)}
    # an output computed by a node takes the output's name directly; inputs, constants and
    # repeated outputs get an Identity
    direct = {}
    for node, nm in zip(graph.outputs, output_names):
        if node.op not in ("input", "const") and node.id not in direct:
            direct[node.id] = nm

    value_info = _emit_graph(b, graph, value, direct)
    for node, nm in zip(graph.outputs, output_names):
        if direct.get(node.id) != nm:
            b.op("Identity", [value[node.id]], nm)

    grad_of = _grad_inputs(graph)
    outputs = []
    for k, (node, nm) in enumerate(zip(graph.outputs, output_names)):
        vi = helper.make_tensor_value_info(nm, b.tensor_type(node.dtype), node.shape)
        if k in grad_of:
            vi.doc_string = f"gradient with respect to input '{input_names[grad_of[k]]}'"
        outputs.append(vi)
    inputs = [helper.make_tensor_value_info(nm, b.tensor_type(n.dtype), n.shape)
              for n, nm in zip(graph.inputs, input_names)]
    gname = name or graph.meta.get("name") or "jitgraph"
    onnx_graph = helper.make_graph(
        b.nodes, str(gname), inputs, outputs, initializer=b.initializers, value_info=value_info,
        doc_string=("joint forward+backward graph" if graph.meta.get("grad") else "forward graph")
        + f" of {gname}, traced by jitgraph")
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(
        onnx_graph, opset_imports=opsets, producer_name="jitgraph", producer_version=__version__,
        ir_version=helper.find_min_ir_version_for(opsets))
    onnx.checker.check_model(model, full_check=True)
    return model


def _grad_inputs(graph):
    """Map output position -> input position for the gradient outputs of a joint graph."""
    if not graph.meta.get("grad") or graph.meta.get("in_tree") is None:
        return {}
    in_tree = graph.meta["in_tree"]
    starts, k = [], 0
    for child in in_tree.children:
        starts.append(k)
        k += child.num_leaves
    leaves = [starts[a] + j for a in graph.meta.get("argnums", ())
              for j in range(in_tree.children[a].num_leaves)]
    return {1 + i: leaf for i, leaf in enumerate(leaves)}


def argument_input_names(fun, args):
    """Sensible names for the flattened leaves of `args`: parameter names, then pytree paths.

    `f(w, params, xs)` with `params = {"W": ., "b": .}` and `xs = (x0, x1)` gives
    `w`, `params.W`, `params.b`, `xs.0`, `xs.1`. Arguments beyond the named
    parameters (or of a function without a signature) are `arg0`, `arg1`, ...
    """
    params = []
    try:
        sig = inspect.signature(fun)
    except (TypeError, ValueError):
        sig = None
    if sig is not None:
        for p in sig.parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                params.append(p.name)
            elif p.kind == p.VAR_POSITIONAL:
                params += [f"{p.name}{i}" for i in range(len(args) - len(params))]
                break
    names = []

    def walk(td, prefix):
        if td.kind == "leaf":
            names.append(prefix)
        elif td.kind == "dict":
            for key, child in zip(td.meta, td.children):
                walk(child, f"{prefix}.{key}")
        else:
            for i, child in enumerate(td.children):
                walk(child, f"{prefix}.{i}")

    for a, arg in enumerate(args):
        walk(tree_flatten(arg)[1], params[a] if a < len(params) else f"arg{a}")
    return _unique(names)


def export_onnx(fun, *example_args, path=None, gradient=False, argnums=0, has_aux=False, opset=None):
    """Trace `fun` on `example_args` and export the graph as an ONNX model.

    Args:
        fun: a NumPy function, as for `make_graph`.
        *example_args: arguments fixing the shapes and dtypes (pytrees allowed);
            their values are not stored, only constants computed inside `fun` are.
        path: where to write the `.onnx` file. The file is written atomically (a
            temporary file beside it, then renamed), so a failed export leaves
            `path` untouched. With `path=None` nothing is written and the
            `onnx.ModelProto` is returned.
        gradient: export the joint forward+backward graph: outputs are the value
            (`value`), then the gradients of the `argnums` leaves in order
            (`grad_0`, `grad_1`, ...), then aux leaves (`aux_0`, ...).
        argnums, has_aux: as for `value_and_grad` (used with `gradient=True`).
        opset: ONNX opset (default 18).

    The model's inputs are every argument's pytree leaves in order, differentiated
    or not, named after the parameters (`w`, `params.W`, `xs.0`, ...). Without
    `gradient`, the outputs are the leaves of `fun`'s result (`value`, or
    `value_0`, `value_1`, ...).

    Returns:
        `path` (as a string), or the `ModelProto` when `path` is None.

    Raises:
        NotSupportedError: `fun` uses an op with no ONNX mapping; nothing is
            written.
        ModuleNotFoundError: the `onnx` package is missing (`pip install jitgraph[onnx]`).
    """
    _import_onnx()
    graph = trace_graph(fun, example_args, argnums, has_aux, grad=gradient, reroll=False, pack_scalars=False)
    model = graph_to_onnx(graph, input_names=argument_input_names(fun, example_args), opset=opset)
    if path is None:
        return model
    path = os.fspath(path)
    _write_atomically(model, path)
    return path


def _write_atomically(model, path):
    directory = os.path.dirname(os.path.abspath(path))
    # same directory, so os.replace is a rename on one file system; "xb" honours the umask
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(model.SerializeToString())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


__all__ = ["export_onnx", "graph_to_onnx", "argument_input_names", "supported_ops"]
