"""Elementwise primitives and the NumPy ufuncs built on them.

Each primitive is registered once with its shape rule, its NumPy reference, its
VJP (one rule per operand, written with the functions below, so it runs on
arrays, eager tapes and graphs alike) and its scalar expression (`ops/scalar.py`),
from which every back end renders its lowering.
"""
import numpy as np

from ..errors import NotSupportedError, ShapeError, where
from ..numpy_api import (as_operand, broadcast_shapes, broadcast_to, cast, elementwise, is_weak,
                         keep_weak, lift, no_out, ones_like, result_dtype, runtime_check, shape_of,
                         zeros_like)
from ..core import Tensor, bind
from .registry import ZERO_GRADIENT, implements, register


# ---- shape rules ------------------------------------------------------------------------
def same(*avals):
    """Operands of one shape and dtype; the result has them too."""
    shape, dtype = avals[0]
    for s, d in avals[1:]:
        if tuple(s) != tuple(shape) or np.dtype(d) != np.dtype(dtype):
            raise ShapeError(f"elementwise operands differ: {avals}")
    return tuple(shape), np.dtype(dtype)


def float_same(*avals):
    """`same`, for floating operands only."""
    shape, dtype = same(*avals)
    if not np.issubdtype(dtype, np.floating):
        raise ShapeError(f"expected floating operands, got {dtype.name}")
    return shape, dtype


def predicate(*avals):
    """Operands of one shape and dtype; a boolean result."""
    shape, _ = same(*avals)
    return shape, np.dtype(bool)


def elementwise_prim(name, expr, impl, vjp, abstract=same, **kw):
    """Register an elementwise primitive."""
    return register(name, "elementwise", abstract, impl, vjp, expr=expr, **kw)


# ---- NumPy front-end helpers ---------------------------------------------------------------
def unary_float(name, ufunc, expr, vjp, **kw):
    """A floating unary primitive and its ufunc (integers promote to float64, as in NumPy)."""
    elementwise_prim(name, expr, lambda x: ufunc(x), vjp, float_same, **kw)

    @implements(ufunc)
    def f(x):
        return elementwise(name, x, float_result=True)
    f.__name__ = f.__qualname__ = ufunc.__name__
    return f


# ---- arithmetic --------------------------------------------------------------------------------
elementwise_prim("add", "{0} + {1}", np.add, (lambda g, out, a, b: g, lambda g, out, a, b: g))
elementwise_prim("sub", "{0} - {1}", np.subtract, (lambda g, out, a, b: g, lambda g, out, a, b: -g))
elementwise_prim("mul", "{0} * {1}", np.multiply,
                 (lambda g, out, a, b: g * b, lambda g, out, a, b: g * a))
elementwise_prim("div", "{0} / {1}", np.divide,
                 (lambda g, out, a, b: g / b, lambda g, out, a, b: -(g * out) / b))
elementwise_prim("pow", "{0} ** {1}", np.power, (
    lambda g, out, a, b: g * b * power(a, b - 1.0),
    # d/db a**b = a**b log a, taken as 0 where a <= 0 (there it is undefined or 0**b)
    lambda g, out, a, b: g * out * log(where_(a > 0, a, 1.0))))
elementwise_prim("max", "max({0}, {1})", np.maximum,
                 (lambda g, out, a, b: g * _max_tie(a, b), lambda g, out, a, b: g * _max_tie(b, a)))
elementwise_prim("min", "min({0}, {1})", np.minimum,
                 (lambda g, out, a, b: g * _max_tie(b, a), lambda g, out, a, b: g * _max_tie(a, b)))


def _max_tie(a, b):
    """Share of the adjoint of max(a, b) that goes to a: 1, 0, or 1/2 at ties."""
    return cast(where_(a > b, 1.0, where_(a == b, 0.5, 0.0)), a.dtype)


def _integer_pow_expr(p):
    body = " * ".join(["{0}"] * abs(p)) if abs(p) <= 4 else "{0} ** %d" % abs(p)
    return body if p > 0 else f"1.0 / ({body})"


elementwise_prim("integer_pow", _integer_pow_expr, lambda x, p: x ** p,
                 (lambda g, out, x, p: g * (p * power(x, p - 1) if p != 2 else x * 2.0),),
                 abstract=lambda x, p: same(x))


@implements(np.add)
def add(a, b):
    return elementwise("add", a, b)


@implements(np.subtract)
def subtract(a, b):
    return elementwise("sub", a, b)


@implements(np.multiply)
def multiply(a, b):
    return elementwise("mul", a, b)


@implements(np.true_divide)
def divide(a, b):
    return elementwise("div", a, b, float_result=True)


@implements(np.maximum, np.fmax)
def maximum(a, b):
    return elementwise("max", a, b)


@implements(np.minimum, np.fmin)
def minimum(a, b):
    return elementwise("min", a, b)


@implements(np.power)
def power(a, b):
    """a ** b; an integral scalar exponent becomes `integer_pow` (exact repeated products).
    Integers to negative integer powers raise NumPy's ValueError (checked when the function
    runs if the exponent is traced)."""
    if result_dtype(a, b).kind in "iu":
        if isinstance(b, Tensor):
            runtime_check(np.min(b) if b.ndim else b, "nonnegative", None)
        elif np.any(np.asarray(b) < 0):
            raise ValueError(f"Integers to negative integer powers are not allowed.{where()}")
    if isinstance(b, (int, float, np.integer, np.floating)) and not isinstance(b, bool) \
            and float(b) == int(b) and abs(int(b)) <= 64 and isinstance(a, Tensor):
        p = int(b)
        a_dt = result_dtype(a, b) if not isinstance(b, np.generic) else np.result_type(a.dtype, b)
        a = cast(a, a_dt)
        if p == 1:
            return a
        if p == 0:
            return ones_like(a)
        return keep_weak(bind("integer_pow", a, p=p), a.weak)
    return elementwise("pow", a, b)


@implements(np.float_power)
def float_power(a, b):
    return power(cast(a, np.float64), b)


@implements(np.square)
def square(x):
    return power(x, 2)


@implements(np.reciprocal)
def reciprocal(x):
    return divide(1.0, x)


# ---- unary ------------------------------------------------------------------------------------------
elementwise_prim("neg", "-{0}", np.negative, (lambda g, out, x: -g,))
elementwise_prim("abs", "abs({0})", np.abs, (lambda g, out, x: g * sign(x),))
elementwise_prim("sign", "T({0} > 0) - T({0} < 0) if {0} == {0} else {0}", np.sign, ZERO_GRADIENT,
                 export_expr="sign({0})")
elementwise_prim("stop_gradient", "{0}", lambda x: x, ZERO_GRADIENT, flops=lambda node: 0)


@implements(np.negative)
def negative(x):
    return elementwise("neg", x)


@implements(np.positive)
def positive(x):
    return x


@implements(np.conjugate)
def conjugate(x):
    """Real values are their own conjugate (complex dtypes are not supported)."""
    return x


@implements(np.real, view=True)
def real(x):
    return x


@implements(np.imag)
def imag(x):
    return zeros_like(x)


@implements(np.absolute, np.fabs)
def absolute(x):
    return elementwise("abs", x)


@implements(np.sign)
def sign(x):
    return elementwise("sign", x)


def stop_gradient(x):
    """x, with a zero derivative: gradients do not flow through it."""
    return elementwise("stop_gradient", x)


sqrt = unary_float("sqrt", np.sqrt, "sqrt({0})", (lambda g, out, x: g / (out * 2.0),))
exp = unary_float("exp", np.exp, "exp({0})", (lambda g, out, x: g * out,))
expm1 = unary_float("expm1", np.expm1, "expm1({0})", (lambda g, out, x: g * (out + 1.0),))
log = unary_float("log", np.log, "log({0})", (lambda g, out, x: g / x,))
log1p = unary_float("log1p", np.log1p, "log1p({0})", (lambda g, out, x: g / (x + 1.0),))
sin = unary_float("sin", np.sin, "sin({0})", (lambda g, out, x: g * cos(x),))
cos = unary_float("cos", np.cos, "cos({0})", (lambda g, out, x: -(g * sin(x)),))
tan = unary_float("tan", np.tan, "tan({0})", (lambda g, out, x: g * (out * out + 1.0),))
tanh = unary_float("tanh", np.tanh, "tanh({0})", (lambda g, out, x: g * (1.0 - out * out),))
sinh = unary_float("sinh", np.sinh, "sinh({0})", (lambda g, out, x: g * cosh(x),))
cosh = unary_float("cosh", np.cosh, "cosh({0})", (lambda g, out, x: g * sinh(x),))
arctan = unary_float("arctan", np.arctan, "atan({0})", (lambda g, out, x: g / (x * x + 1.0),))


def _over_norm2(g, a, b):
    """g * a / (a^2 + b^2), taken as 0 where a = b = 0 (no derivative there; 0 is a subgradient)."""
    d = a * a + b * b
    return where_(d == 0.0, 0.0, g * a / where_(d == 0.0, 1.0, d))


def _over(g, a, r):
    """g * a / r, taken as 0 where r = 0."""
    return where_(r == 0.0, 0.0, g * a / where_(r == 0.0, 1.0, r))


elementwise_prim("arctan2", "atan2({0}, {1})", np.arctan2,
                 (lambda g, out, y, x: _over_norm2(g, x, y), lambda g, out, y, x: -_over_norm2(g, y, x)),
                 float_same, onnx="ONNX has no atan2 operator (an Atan-based formula would lose "
                 "NumPy's signed-zero and quadrant results)")
elementwise_prim("hypot", "hypot({0}, {1})", np.hypot,
                 (lambda g, out, x, y: _over(g, x, out), lambda g, out, x, y: _over(g, y, out)),
                 float_same, onnx="ONNX has no hypot operator (sqrt(x*x + y*y) overflows where "
                 "np.hypot does not)")


@implements(np.arctan2)
def arctan2(y, x):
    return elementwise("arctan2", y, x, float_result=True)


@implements(np.hypot)
def hypot(x, y):
    return elementwise("hypot", x, y, float_result=True)


# ---- comparisons and logic ----------------------------------------------------------------------
_COMPARE = {"lt": ("<", np.less), "le": ("<=", np.less_equal), "gt": (">", np.greater),
            "ge": (">=", np.greater_equal), "eq": ("==", np.equal), "ne": ("!=", np.not_equal)}


def _comparison(name, symbol, ufunc):
    elementwise_prim(name, "{0} %s {1}" % symbol, ufunc, ZERO_GRADIENT, predicate)

    @implements(ufunc)
    def f(a, b):
        weak = is_weak(a) and is_weak(b)
        a, b = (x if is_weak(x) and not isinstance(x, Tensor) else as_operand(x) for x in (a, b))
        dt = result_dtype(a, b)
        a, b = lift([cast(a, dt), cast(b, dt)])
        shape = broadcast_shapes(shape_of(a), shape_of(b))
        return keep_weak(bind(name, broadcast_to(a, shape), broadcast_to(b, shape)), weak)
    f.__name__ = f.__qualname__ = ufunc.__name__
    return f


less, less_equal, greater, greater_equal, equal, not_equal = (
    _comparison(name, symbol, ufunc) for name, (symbol, ufunc) in _COMPARE.items())

elementwise_prim("and", "{0} & {1}", np.logical_and, ZERO_GRADIENT, predicate)
elementwise_prim("or", "{0} | {1}", np.logical_or, ZERO_GRADIENT, predicate)
elementwise_prim("not", "not {0}", np.logical_not, ZERO_GRADIENT, lambda x: (tuple(x[0]), np.dtype(bool)))


def to_bool(x):
    """x != 0 as a boolean array (x itself when it is boolean)."""
    x = as_operand(x) if not isinstance(x, (bool, int, float)) else np.asarray(x)
    return x if x.dtype == bool else not_equal(x, 0)


@implements(np.logical_and)
def logical_and(a, b):
    return elementwise("and", to_bool(a), to_bool(b), dtype=bool)


@implements(np.logical_or)
def logical_or(a, b):
    return elementwise("or", to_bool(a), to_bool(b), dtype=bool)


@implements(np.logical_not)
def logical_not(x):
    return bind("not", to_bool(x))


def _boolean_only(name, fn):
    @implements(getattr(np, name))
    def f(*xs):
        if all(np.dtype(result_dtype(x)) == bool for x in xs):
            return fn(*xs)
        raise NotSupportedError(f"np.{name} of integers (a bitwise operation) is not supported; "
                                f"it is supported on booleans{where()}")
    f.__name__ = f.__qualname__ = name
    return f


_boolean_only("bitwise_and", logical_and)
_boolean_only("bitwise_or", logical_or)
_boolean_only("invert", logical_not)
_boolean_only("bitwise_xor", lambda a, b: not_equal(a, b))


# ---- selection and conversion ---------------------------------------------------------------------
def _where_abs(c, a, b):
    if tuple(c[0]) != tuple(a[0]):
        raise ShapeError(f"where: condition shape {c[0]} differs from {a[0]}")
    return same(a, b)


elementwise_prim("where", "{1} if {0} else {2}", lambda c, a, b: np.where(c, a, b),
                 (None, lambda g, out, c, a, b: where_(c, g, 0.0),
                  lambda g, out, c, a, b: where_(c, 0.0, g)), abstract=_where_abs)


def _cast_expr(dtype):
    dtype = np.dtype(dtype)
    return "{0} != 0" if dtype == bool else f"{dtype.name}({{0}})"


elementwise_prim("cast", _cast_expr, lambda x, dtype: np.asarray(x).astype(dtype),
                 (lambda g, out, x, dtype: cast(g, x.dtype) if x.dtype.kind == "f" else None,),
                 abstract=lambda x, dtype: (tuple(x[0]), np.dtype(dtype)))


@implements(np.where)
def where_(cond, a, b):
    cond = to_bool(cond)
    weak = is_weak(a) and is_weak(b)
    a, b = (x if is_weak(x) and not isinstance(x, Tensor) else as_operand(x) for x in (a, b))
    dt = result_dtype(a, b)
    cond, a, b = lift([cond, cast(a, dt), cast(b, dt)])
    shape = broadcast_shapes(shape_of(cond), shape_of(a), shape_of(b))
    return keep_weak(bind("where", broadcast_to(cond, shape), broadcast_to(a, shape),
                          broadcast_to(b, shape)), weak)


@implements(np.clip)
def clip(x, a_min=None, a_max=None, out=None, **kw):
    no_out(out, "np.clip")
    if a_min is None and "min" in kw:
        a_min = kw.pop("min")
    if a_max is None and "max" in kw:
        a_max = kw.pop("max")
    if kw:
        raise NotSupportedError(f"np.clip: arguments {sorted(kw)} are not supported{where()}")
    if a_min is not None:
        x = maximum(x, a_min)
    if a_max is not None:
        x = minimum(x, a_max)
    return x


# ---- stable composites ----------------------------------------------------------------------------
def sigmoid(x):
    """1 / (1 + exp(-x)), computed as 0.5 * tanh(x / 2) + 0.5, which never overflows."""
    return add(multiply(tanh(multiply(x, 0.5)), 0.5), 0.5)
