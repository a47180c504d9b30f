"""NumPy semantics on top of the strict primitives: the layer every op family builds on.

Primitives take operands of one shape and dtype. The helpers here apply NumPy's
rules on the way in (dtype promotion with weak Python scalars as in NEP 50,
broadcasting, axis normalization) by emitting explicit `cast`, `broadcast`,
`reshape` and `transpose` primitives, so derivative rules never repeat that
logic. Every helper accepts Tensors, NumPy arrays and Python scalars; with no
Tensor among its arguments it computes with NumPy, so derivative rules written
with them also run on plain arrays in eager mode.

The op families in `ops/` register the NumPy functions they implement
(`registry.implements`); `apply_ufunc` and `apply_function` dispatch NumPy's
protocol calls (`__array_ufunc__`, `__array_function__`) through those tables.
"""
import builtins
import sys

import numpy as np

from .buffers import Buffer, unwrap
from .core import ARGUMENT, GraphTrace, Tensor, View, bind, innermost
from .errors import NotSupportedError, ShapeError, in_place_statement, where
from .ops.registry import FUNCTIONS, METHODS, UFUNCS, VIEWS, method
from .values import check_array_type, check_dtype


# ---- operands: dtype promotion and broadcasting ----------------------------------
def is_weak(x):
    """A Python scalar, or a value computed only from Python scalars (NEP 50's weak values)."""
    return (isinstance(x, Tensor) and x.weak) or (
        isinstance(x, (bool, int, float)) and not isinstance(x, np.generic))


def _weak_proxy(x):
    """A Python scalar standing for a weak value in np.result_type."""
    if isinstance(x, Tensor):
        return {"b": False, "i": 0, "u": 0}.get(x.dtype.kind, 0.0)
    return x


def as_operand(x):
    """x as a Tensor or an ndarray; a (nested) list or tuple holding Tensors is stacked, and so
    is an object array of traced scalars (what np.array([a, b]) makes of them)."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, Buffer):
        return as_operand(unwrap(x))
    if isinstance(x, (list, tuple)):
        if builtins.any(isinstance(unwrap(e), Tensor) for e in _leaves(x)):
            return np.stack([as_operand(e) for e in x])
    if isinstance(x, np.ndarray) and type(x) is not np.ndarray:
        check_array_type(x, "an operand")
    a = x if isinstance(x, np.ndarray) else np.asarray(x)
    if a.dtype == object and a.size and builtins.any(isinstance(e, Tensor) for e in a.flat):
        return reshape(np.stack([as_operand(e) for e in a.flat]), a.shape)
    if a.dtype.kind in "OUSV":
        raise TypeError(f"unsupported operand type for a NumPy operation on traced values: "
                        f"{type(x).__name__}{where()}")
    return a


def _leaves(x):
    if isinstance(x, (list, tuple)):
        for e in x:
            yield from _leaves(e)
    else:
        yield x


def result_dtype(*xs):
    """np.result_type of the operands, with Python scalars (and weak Tensors) as weak values."""
    strong = [x.dtype if isinstance(x, Tensor) else np.asarray(x).dtype
              for x in xs if not is_weak(x)]
    weak = [_weak_proxy(x) for x in xs if is_weak(x)]
    if not strong:
        # Python scalars alone: bool < int64 < float64
        kinds = {type(w) for w in weak}
        return np.dtype(float) if float in kinds else np.dtype(np.int64) if int in kinds else np.dtype(bool)
    return np.result_type(*strong, *weak)


def keep_weak(t, weak):
    if isinstance(t, Tensor):
        t.weak = weak
    return t


def cast(x, dtype):
    """x converted to `dtype` (a `cast` node for a Tensor of another dtype).

    A weak integer (a Python int argument) meeting a narrower integer type is checked when the
    function runs, as NumPy checks a Python int (`api.run_checks`)."""
    dtype = np.dtype(dtype)
    if isinstance(x, Tensor):
        if x.dtype == dtype:
            return x
        check_dtype(dtype, "the conversion target")
        if x.weak and x.dtype.kind in "iu" and dtype.kind in "iu" and not _holds(dtype, x.dtype):
            runtime_check(x, "range", dtype.name)
        return keep_weak(bind("cast", x, dtype=dtype), x.weak)
    if isinstance(x, int) and not isinstance(x, (bool, np.generic)) and dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not info.min <= x <= info.max:
            raise OverflowError(f"Python integer {x} out of bounds for {dtype.name}")
    return np.asarray(x, dtype=dtype)


def _holds(big, small):
    """Does integer dtype `big` hold every value of integer dtype `small`?"""
    b, s = np.iinfo(big), np.iinfo(small)
    return b.min <= s.min and s.max <= b.max


def runtime_check(x, kind, info):
    """Check Tensor x when the traced function runs (see api.run_checks); eagerly, NumPy checks."""
    if isinstance(x, Tensor) and type(x._trace) is GraphTrace:
        x._trace.checks.append((kind, x.node, info))


def shape_of(x):
    return x.shape if isinstance(x, Tensor) else np.shape(x)


def broadcast_shapes(*shapes):
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise ShapeError(
            "operands could not be broadcast together with shapes "
            + " ".join(str(tuple(s)) for s in shapes) + where()) from None


def broadcast_to(x, shape):
    """x broadcast to `shape` by NumPy's rule (an explicit `broadcast` node)."""
    shape = tuple(int(d) for d in shape)
    xs = tuple(shape_of(x))
    if xs == shape:
        return x
    if len(xs) > len(shape) or builtins.any(a != 1 and a != b for a, b in zip(reversed(xs), reversed(shape))):
        raise ShapeError(f"cannot broadcast shape {xs} to {shape}{where()}")
    if not isinstance(x, Tensor):
        return np.broadcast_to(x, shape)
    return keep_weak(bind("broadcast", x, shape=shape), x.weak)


def lift(xs):
    """Put raw operands into the innermost trace among xs, so a scalar stays a scalar node."""
    top = innermost(xs)
    if top is None:
        return xs
    return [x if isinstance(x, Tensor) else top.lift(x) for x in xs]


def elementwise(op, *xs, dtype=None, float_result=False):
    """Promote (to `dtype` if given; to a floating type if the result must be floating),
    broadcast, and bind elementwise primitive `op`. A floating result of integers is NumPy's
    ufunc loop's: float32 for (u)int16, float64 for wider integers (and, where NumPy computes in
    float16, for booleans and 8-bit integers: jitgraph has no float16); float_result="float64"
    (true division) is float64 for every integer type."""
    weak = builtins.all(is_weak(x) for x in xs)
    xs = [x if is_weak(x) and not isinstance(x, Tensor) else as_operand(x) for x in xs]
    dt = result_dtype(*xs) if dtype is None else np.dtype(dtype)
    if float_result and not np.issubdtype(dt, np.floating):
        dt = np.promote_types(dt, np.float16) if float_result is True and dt.kind in "biu" \
            else np.dtype(np.float64)
        if dt == np.float16:
            dt = np.dtype(np.float64)
    xs = lift([cast(x, dt) for x in xs])
    shape = broadcast_shapes(*[shape_of(x) for x in xs])
    xs = [broadcast_to(x, shape) for x in xs]
    return keep_weak(bind(op, *xs), weak)


def no_out(out, name):
    if out is not None:
        raise NotSupportedError(f"{name} with this out= is not supported: out= takes an array the traced "
                                f"function made, by keyword (not one made outside it, which it would "
                                f"change, nor out given by position); or use the result{where()}")


# ---- axes -------------------------------------------------------------------------------
def norm_axes(axis, ndim):
    """`axis` (None, an int or a sequence) as a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < ndim:
            raise ShapeError(f"axis {a} is out of bounds for an array of dimension {ndim}{where()}")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {axis}{where()}")
    return tuple(sorted(out))


def norm_axis(axis, ndim):
    """One axis, normalized (NumPy's AxisError text as a ShapeError)."""
    return norm_axes(int(axis), ndim)[0]


def keepdims_shape(shape, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


# ---- the shape helpers every family uses --------------------------------------------------
def reshape(x, shape):
    """x reshaped (one -1 allowed); a `reshape` node for a Tensor of another shape."""
    x = as_operand(x)
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    shape = [int(d) for d in shape]
    size = int(np.prod(shape_of(x), dtype=np.int64))
    if shape.count(-1) > 1:
        raise ShapeError(f"can only specify one unknown dimension in reshape {tuple(shape)}{where()}")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise ShapeError(f"cannot reshape array of size {size} into shape {tuple(shape)}{where()}")
        shape[shape.index(-1)] = size // known
    shape = tuple(shape)
    if int(np.prod(shape, dtype=np.int64)) != size:
        raise ShapeError(f"cannot reshape array of size {size} into shape {shape}{where()}")
    if not isinstance(x, Tensor):
        return np.reshape(x, shape)
    if shape == x.shape:
        return x
    return keep_weak(bind("reshape", x, shape=shape), x.weak)


def transpose(x, axes=None):
    """x with its axes permuted (reversed by default)."""
    x = as_operand(x)
    nd = len(shape_of(x))
    if axes is None:
        perm = tuple(reversed(range(nd)))
    else:
        perm = tuple(int(a) % nd if nd else int(a) for a in axes)
        if sorted(perm) != list(range(nd)):
            raise ShapeError(f"axes {tuple(axes)} don't match an array of dimension {nd}{where()}")
    if not isinstance(x, Tensor):
        return np.transpose(x, perm)
    if perm == tuple(range(nd)):
        return x
    return keep_weak(bind("transpose", x, perm=perm), x.weak)


def swapaxes(x, axis1, axis2):
    nd = len(shape_of(x))
    a, b = norm_axis(axis1, nd), norm_axis(axis2, nd)
    perm = list(range(nd))
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


@method("astype")
def astype(x, dtype, order="K", casting="unsafe", subok=True, copy=True):
    r = cast(x, dtype)
    return r.rebind(r.node) if r is x and copy else r


def view_of(result, base, derive, write=None, contiguous=True):
    """Mark `result` (computed from `base` by a function NumPy answers with a view) as that view:
    `derive(base)` recomputes it, `write(base, value)` is base with the view set to `value`
    (None: read-only, like a broadcast); `contiguous`: whether NumPy's view is C-contiguous when
    its base is. See core.View."""
    if isinstance(result, Tensor) and isinstance(base, Tensor) and result is not base:
        result._view = View(base, derive, write, contiguous)
    return result


def is_contiguous(x):
    """Would NumPy's array for x be C-contiguous (x is no transposed or strided view)?"""
    view = x._view if isinstance(x, Tensor) else None
    return view is None or view is ARGUMENT or view.contiguous


@method("assign")
def assign(x, new, symbol):
    """`x <symbol> ...` in place, with `new` the value x takes: NumPy's rules for an output
    operand (same shape, same-kind casting), then x takes the new value. Every name bound to x
    sees it (x is one object), and so does every array x is a view of, and every view of those
    (they derive their value again); function arguments are read-only."""
    new = as_operand(new)
    if tuple(shape_of(new)) != x.shape:
        raise ValueError(f"non-broadcastable output operand with shape {x.shape} doesn't match the "
                         f"broadcast shape {tuple(shape_of(new))}{where()}")
    if new.dtype != x.dtype:
        if not np.can_cast(new.dtype, x.dtype, "same_kind"):
            raise TypeError(f"Cannot cast ufunc output from dtype('{new.dtype}') to dtype('{x.dtype}') "
                            f"with casting rule 'same_kind' (in {symbol}){where()}")
        new = cast(new, x.dtype)
    write_into(x, new, symbol)


def write_into(x, new, symbol):
    """x takes the value `new` (same shape and dtype), and so does what x is a view of."""
    if not isinstance(new, Tensor) or new._trace is not x._trace:
        raise NotSupportedError(f"{symbol} on a value of an enclosing trace is not supported; "
                                f"write x = x ... instead{where()}")
    chain, view = [x], x._view
    while view is not None and view is not ARGUMENT:
        if view.write is None:
            raise ValueError(f"assignment destination is read-only (a broadcast view){where()}")
        chain.append(view.base)
        view = view.base._view
    if view is ARGUMENT:
        raise NotSupportedError(
            f"{symbol} updates a function argument (or a view of one) in place: a traced function "
            f"cannot change its caller's array; update a copy (y = x.copy()) instead{where()}")
    values = [new]
    for t in chain[:-1]:       # the new value of each base, from the view's new value
        values.append(t._view.write(t._view.base, values[-1]))
    for t, v in zip(chain, values):
        t.set_node(v.node)
    for t in chain[:-1]:
        t._view.seen = t._view.base._node


def full_like(x, fill_value, dtype=None, shape=None):
    """An array of x's shape (or `shape`) filled with `fill_value` (x's value is not read)."""
    dt = np.dtype(dtype) if dtype is not None else (x.dtype if isinstance(x, Tensor) else np.asarray(x).dtype)
    c = np.asarray(fill_value, dtype=dt)
    if shape is None:
        shape = tuple(shape_of(x))
    else:
        shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    if isinstance(x, Tensor):
        return broadcast_to(x._trace.lift(c), shape)
    return np.full(shape, c, dtype=dt)


def zeros_like(x, dtype=None):
    return full_like(x, 0, dtype)


def ones_like(x, dtype=None):
    return full_like(x, 1, dtype)


# ---- NumPy protocol dispatch -----------------------------------------------------------------
def np_name(obj):
    """`np.linalg.solve`-style name of a NumPy (or other) function."""
    mod = getattr(obj, "__module__", None) or "numpy"
    name = getattr(obj, "__name__", repr(obj))
    if isinstance(obj, np.ufunc) and getattr(np, name, None) is not obj:
        # a ufunc of another package (scipy.special's, reached through a wrapper such as zeta's)
        special = sys.modules.get("scipy.special")
        public = name.lstrip("_")
        if special is not None and getattr(special, name, None) is obj or getattr(special, public, None):
            return f"scipy.special.{public if getattr(special, public, None) else name}"
    mod = "np" + mod[len("numpy"):] if mod.startswith("numpy") else mod
    return f"{mod}.{name}"


# ufunc.reduce: a NumPy function (its implementation in FUNCTIONS) or an implementation
# (the op families add theirs), called with ufunc.reduce's arguments
UFUNC_REDUCE = {np.add: np.sum, np.multiply: np.prod, np.maximum: np.max, np.minimum: np.min,
                np.logical_and: np.all, np.logical_or: np.any, np.fmax: np.nanmax, np.fmin: np.nanmin}
UFUNC_ACCUMULATE = {np.add: np.cumsum, np.multiply: np.cumprod}
# associative ufuncs whose accumulate runs as log2(n) passes (the identity pads the shifted copy)
UFUNC_SCANS = {np.maximum: -np.inf, np.minimum: np.inf, np.fmax: -np.inf, np.fmin: np.inf,
               np.logaddexp: -np.inf}


def _doubling_scan(ufunc, x, axis):
    """ufunc.accumulate(x, axis) as ceil(log2 n) steps y = ufunc(y, y shifted by 1, 2, 4, ...
    along the axis): max/min exactly as NumPy's running loop, logaddexp to rounding."""
    x = as_operand(x)
    if x.dtype.kind != "f":
        raise NotSupportedError(f"np.{ufunc.__name__}.accumulate of {x.dtype.name} values is not supported"
                                f"{where()}")
    nd = len(shape_of(x))
    axis = norm_axis(axis, nd)
    n = shape_of(x)[axis]
    y, shift = x, 1
    while shift < n:
        pad_shape = tuple(shift if d == axis else s for d, s in enumerate(shape_of(x)))
        head = tuple(slice(0, n - shift) if d == axis else slice(None) for d in range(nd))
        shifted = np.concatenate([np.full(pad_shape, UFUNC_SCANS[ufunc], x.dtype), y[head]], axis=axis)
        y = ufunc(y, shifted)
        shift *= 2
    return y


def _write_out(out, result, name, inputs=()):
    """NumPy's `out=`: the result lands in the array `out` (a traced one), which is returned.

    A NumPy array cannot hold a traced value; `a += t` on one (a constant copied in the function,
    say) still works: the statement rebinds `a` to the traced result, so nothing is written."""
    if isinstance(out, tuple):
        if len(out) != 1:
            raise NotSupportedError(f"{name} with several out= arrays is not supported{where()}")
        out = out[0]
    if isinstance(out, Buffer):
        # an array the function made (np.zeros): it takes the recorded result, as item assignment
        assign(out._promote(result, *inputs), result, f"{name}(..., out=)")
        return out
    if not isinstance(out, Tensor):
        if inputs and out is inputs[0] and isinstance(result, Tensor) and in_place_statement():
            if result.shape != out.shape:
                raise ShapeError(f"{name}: non-broadcastable output operand with shape {out.shape} "
                                 f"doesn't match the broadcast shape {result.shape}{where()}")
            if not np.can_cast(result.dtype, out.dtype, "same_kind"):
                raise TypeError(f"Cannot cast ufunc {name} output from {result.dtype} to {out.dtype} "
                                f"with casting rule 'same_kind'{where()}")
            return _fresh(cast(result, out.dtype) if result.dtype != out.dtype else result, inputs)
        raise NotSupportedError(f"{name}(..., out=a) with a NumPy array a is not supported: a traced "
                                f"function cannot write into an array outside the trace{where()}")
    assign(out, result, f"{name}(..., out=)")
    return out


def _fresh(result, args):
    """`result` of a function whose NumPy result is a new array: a copy where it is one of the
    arrays in `args`, and no longer a view where it was computed as one."""
    if isinstance(result, (tuple, list)):
        items = [_fresh(r, args) for r in result]
        return result._make(items) if hasattr(result, "_make") else type(result)(items)
    if not isinstance(result, Tensor):
        return result
    given = [a for arg in args for a in (arg if isinstance(arg, (tuple, list)) else (arg,))]
    if builtins.any(result is a for a in given):
        return result.rebind(result.node)
    if result._view is not None and result._view is not ARGUMENT:
        result.node             # (up to date) and detached: a copy from here on
        result._view = None
    return result


def is_complex_constant(x):
    """Is x a Python or NumPy complex number, or a complex NumPy array?"""
    return isinstance(x, (complex, np.complexfloating)) or (isinstance(x, np.ndarray) and x.dtype.kind == "c")


def _deferred(xs):
    """Is one of xs an object whose own protocols take precedence (ops/masked.py's selections)?"""
    return any(getattr(type(x), "__jitgraph_defer__", False) for x in xs)


@method("__array_ufunc__")
def apply_ufunc(ufunc, how, inputs, kwargs):
    if _deferred(inputs):
        return NotImplemented
    if how == "__call__" and any(is_complex_constant(x) for x in inputs) and "complex_ufunc" in METHODS:
        return METHODS["complex_ufunc"](ufunc, inputs, kwargs)      # ops/fft.py: pairs of real arrays
    name = np_name(ufunc) if getattr(np, ufunc.__name__, None) is not ufunc else f"np.{ufunc.__name__}"
    out = kwargs.get("out")
    kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    if how == "at":
        return METHODS["ufunc_at"](ufunc, *inputs)
    if how == "reduce" and ufunc in UFUNC_REDUCE:
        kwargs.setdefault("axis", 0)        # ufunc.reduce's default, where np.sum's is None
        reducer = UFUNC_REDUCE[ufunc]
        r = FUNCTIONS.get(reducer, reducer)(*inputs, **kwargs)
    elif how == "reduceat" and ufunc is np.add:
        r = METHODS["add_reduceat"](*inputs, **kwargs)
    elif how == "accumulate" and ufunc in UFUNC_ACCUMULATE and set(kwargs) <= {"axis", "dtype"}:
        r = FUNCTIONS[UFUNC_ACCUMULATE[ufunc]](*inputs, axis=kwargs.get("axis", 0), dtype=kwargs.get("dtype"))
    elif how == "accumulate" and ufunc in UFUNC_SCANS and len(inputs) == 1 and set(kwargs) <= {"axis"}:
        r = _doubling_scan(ufunc, inputs[0], kwargs.get("axis", 0))
    elif how == "outer" and ufunc.nin == 2 and ufunc in UFUNCS and set(kwargs) <= {"dtype"}:
        a, b = (x if isinstance(x, Tensor) else np.asarray(x) for x in inputs)
        # every element of a against all of b: a's axes first, then b's
        r = UFUNCS[ufunc](reshape(a, tuple(shape_of(a)) + (1,) * len(shape_of(b))), b)
        r = cast(r, kwargs["dtype"]) if kwargs.get("dtype") is not None else r
    elif how != "__call__":
        raise NotSupportedError(f"{name}.{how} is not supported{where()}")
    else:
        fn = UFUNCS.get(ufunc)
        if fn is None:
            raise NotSupportedError(f"{name} is not supported{where()}")
        dtype = kwargs.pop("dtype", None)
        accepted = getattr(fn, "ufunc_kwargs", ())      # a gufunc's axis=, for one
        if set(kwargs) - set(accepted):
            raise NotSupportedError(f"{name} with arguments {sorted(set(kwargs) - set(accepted))} "
                                    f"is not supported{where()}")
        r = fn(*inputs, **kwargs)
        r = cast(r, dtype) if dtype is not None else r
    if out is not None:
        return _write_out(out, r, name, inputs)
    return _fresh(r, inputs)


@method("__array_function__")
def apply_function(func, args, kwargs):
    if _deferred(args) or _deferred(kwargs.values()):
        return NotImplemented
    fn = FUNCTIONS.get(func)
    if fn is None:
        raise NotSupportedError(f"{np_name(func)} is not supported{where()}")
    out = kwargs.pop("out", None) if isinstance(kwargs.get("out"), (Tensor, tuple)) else None
    r = fn(*args, **kwargs)
    if out is not None:
        return _write_out(out, r, np_name(func))
    return r if func in VIEWS else _fresh(r, args)
