"""Elementwise primitives and the NumPy ufuncs built on them.

Each primitive is registered once with its shape rule, its NumPy reference, its
VJP (one rule per operand, written with the functions below, so it runs on
arrays, eager tapes and graphs alike) and its scalar expression (`ops/scalar.py`),
from which every back end renders its lowering.
"""
import operator

import numpy as np

from ..errors import NotSupportedError, ShapeError, TracingError, where
from ..numpy_api import (as_operand, broadcast_shapes, broadcast_to, cast, elementwise, full_like,
                         is_weak, keep_weak, lift, no_out, ones_like, result_dtype, runtime_check,
                         shape_of, zeros_like)
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
    """A floating unary primitive and its ufunc (integers promote as NumPy's loops do:
    numpy_api.elementwise)."""
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


def _integer_pow_impl(x, p):
    """x ** p as the compiled loops compute it: repeated products up to the 4th power."""
    if not 0 < p <= 4:
        return x ** p
    out = x * x if p > 1 else np.array(x, copy=True)
    for _ in range(p - 2):
        out *= x
    return out


elementwise_prim("integer_pow", _integer_pow_expr, _integer_pow_impl,
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
    return elementwise("div", a, b, float_result="float64")


@implements(np.maximum)
def maximum(a, b):
    return elementwise("max", a, b)


@implements(np.minimum)
def minimum(a, b):
    return elementwise("min", a, b)


# np.fmax/np.fmin ignore a NaN operand (NaN only if both are); ties give the first operand
elementwise_prim("fmax", "{0} if ({0} >= {1}) | isnan({1}) else {1}", np.fmax,
                 (lambda g, out, a, b: g * _fmax_share(a, b), lambda g, out, a, b: g * _fmax_share(b, a)),
                 float_same)
elementwise_prim("fmin", "{0} if ({0} <= {1}) | isnan({1}) else {1}", np.fmin,
                 (lambda g, out, a, b: g * _fmax_share(-a, -b), lambda g, out, a, b: g * _fmax_share(-b, -a)),
                 float_same)


def _fmax_share(a, b):
    """Share of the adjoint of fmax(a, b) that goes to a: 1 where a wins or b is NaN, 1/2 at
    ties (as for maximum), else 0."""
    share = where_(a > b, 1.0, where_(a == b, 0.5, 0.0))
    return cast(where_(isnan(b) & ~isnan(a), 1.0, share), a.dtype)


@implements(np.fmax)
def fmax(a, b):
    if result_dtype(a, b).kind != "f":
        return maximum(a, b)        # no NaN to ignore
    return elementwise("fmax", a, b)


@implements(np.fmin)
def fmin(a, b):
    if result_dtype(a, b).kind != "f":
        return minimum(a, b)
    return elementwise("fmin", a, b)


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
        node = getattr(a, "node", None)
        if p % 2 == 0 and node is not None and node.op == "hypot":
            # |z| ** 2 (a power spectrum, np.abs(np.fft.rfft(x)) ** 2) is x*x + y*y: no hypot,
            # a libm call that does not vectorize (12 ns per element with its derivative), and
            # no division by |z| in the derivative
            x, y = (a.rebind(v) for v in node.inputs)
            return power(x * x + y * y, p // 2)
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


def _cbrt_export_expr():
    """The real cube root for ONNX, which has no operator for it: |x|^(1/3) by pow, then one
    Newton step (the exponent 1/3 is not exact: pow alone was off by up to ~1e-14 relative for
    large |x|, and 27 gave 3.0000000000000004); zeros, infinities and NaN are their own roots."""
    y = "pow(abs({0}), 0.3333333333333333)"
    newton = f"({y} - ({y} * {y} * {y} - abs({{0}})) / (3.0 * {y} * {y}))"
    return f"{{0}} if ({{0}} == 0) | isinf({{0}}) | isnan({{0}}) else sign({{0}}) * {newton}"


cbrt = unary_float("cbrt", np.cbrt, "cbrt({0})", (lambda g, out, x: g / (out * out * 3.0),),
                   export_expr=_cbrt_export_expr())
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


@implements(np.logical_xor)
def logical_xor(a, b):
    return not_equal(to_bool(a), to_bool(b))


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


_NOT_GIVEN = object()


@implements(np.where)
def where_(cond, a=_NOT_GIVEN, b=_NOT_GIVEN):
    if a is _NOT_GIVEN and b is _NOT_GIVEN:
        return np.nonzero(cond)         # np.where(cond) is np.nonzero(cond)
    if a is _NOT_GIVEN or b is _NOT_GIVEN:
        raise ValueError("either both or neither of x and y should be given")
    cond = to_bool(cond)
    weak = is_weak(a) and is_weak(b)
    a, b = (x if is_weak(x) and not isinstance(x, Tensor) else as_operand(x) for x in (a, b))
    dt = result_dtype(a, b)
    cond, a, b = lift([cond, cast(a, dt), cast(b, dt)])
    shape = broadcast_shapes(shape_of(cond), shape_of(a), shape_of(b))
    return keep_weak(bind("where", broadcast_to(cond, shape), broadcast_to(a, shape),
                          broadcast_to(b, shape)), weak)


@implements(np.clip)
def clip(a, a_min=np._NoValue, a_max=np._NoValue, out=None, *, min=np._NoValue, max=np._NoValue, **kw):
    """np.clip: minimum(maximum(a, lower), upper), either bound None (or absent) for none,
    given as a_min/a_max or as the min/max keywords; NaN in a or a bound propagates."""
    no_out(out, "np.clip")
    if kw:
        raise NotSupportedError(f"np.clip: arguments {sorted(kw)} are not supported{where()}")
    given = (a_min is not np._NoValue or a_max is not np._NoValue,
             min is not np._NoValue or max is not np._NoValue)
    if all(given):
        raise ValueError("Passing `min` or `max` keyword argument when `a_min` and `a_max` are "
                         f"provided is forbidden.{where()}")
    lower, upper = (min, max) if given[1] else (a_min, a_max)
    lower = None if lower is np._NoValue else lower
    upper = None if upper is np._NoValue else upper
    if lower is not None:
        a = maximum(a, lower)
    if upper is not None:
        a = minimum(a, upper)
    return a


# ---- division: remainder, floor division, fmod --------------------------------------------------
# Floats: `%` and `//` have Python's floor semantics, which are NumPy's (the sign of the divisor,
# the snapped quotient, inf/NaN); a zero divisor gives NumPy's NaN (fmod(a, 0)) and a / 0.
# Integers: NumPy gives 0 for a zero divisor; fmod truncates (C's %), from the floor remainder.
_INT_DIVISION = ("zero divisor: NumPy's integer result 0 has no ONNX Mod/Div equivalent that avoids "
                 "the division")
# (ONNX: composites around Mod(fmod=1), in jitgraph/onnx_export.py)
elementwise_prim("remainder", "{0} % {1} if {1} != 0 else fmod({0}, {1})", np.remainder,
                 (lambda g, out, a, b: g, lambda g, out, a, b: -(g * ((a - out) / b))), float_same)
elementwise_prim("floor_divide", "floordiv({0}, {1}) if {1} != 0 else {0} / {1}", np.floor_divide, ZERO_GRADIENT,
                 float_same)
elementwise_prim("fmod", "fmod({0}, {1})", np.fmod,
                 (lambda g, out, a, b: g, lambda g, out, a, b: -(g * ((a - out) / b))), float_same)
elementwise_prim("int_remainder", "{0} % {1} if {1} != 0 else 0", np.remainder, ZERO_GRADIENT,
                 onnx=_INT_DIVISION)
elementwise_prim("int_floor_divide", "{0} // {1} if {1} != 0 else 0", np.floor_divide, ZERO_GRADIENT,
                 onnx=_INT_DIVISION)
elementwise_prim("int_fmod", "({0} % {1} - {1} if ({0} % {1} != 0) & (({0} < 0) != ({1} < 0)) "
                 "else {0} % {1}) if {1} != 0 else 0", np.fmod, ZERO_GRADIENT, onnx=_INT_DIVISION)


def _division_dtype(a, b):
    dt = result_dtype(a, b)
    return np.dtype(np.int8) if dt == bool else dt     # NumPy has no boolean loops


def _division(float_op, int_op, a, b):
    dt = _division_dtype(a, b)
    return elementwise(float_op if dt.kind == "f" else int_op, a, b, dtype=dt)


@implements(np.remainder)
def remainder(a, b):
    """a % b with the sign of b (np.remainder, np.mod)."""
    return _division("remainder", "int_remainder", a, b)


@implements(np.floor_divide)
def floor_divide(a, b):
    return _division("floor_divide", "int_floor_divide", a, b)


@implements(np.fmod)
def fmod(a, b):
    """The C remainder: the sign of a."""
    return _division("fmod", "int_fmod", a, b)


@implements(np.divmod)
def divmod_(a, b):
    return floor_divide(a, b), remainder(a, b)


# ---- exponentials and logarithms ------------------------------------------------------------------
exp2 = unary_float("exp2", np.exp2, "exp2({0})", (lambda g, out, x: g * out * 0.6931471805599453,),
                   export_expr="2.0 ** {0}")
log2 = unary_float("log2", np.log2, "log2({0})", (lambda g, out, x: g / (x * 0.6931471805599453),),
                   export_expr="log({0}) / log(2.0)")
log10 = unary_float("log10", np.log10, "log10({0})", (lambda g, out, x: g / (x * 2.302585092994046),),
                    export_expr="log({0}) / log(10.0)")

# NumPy's formulas: equal arguments (infinities of one sign included) first, NaN last
elementwise_prim(
    "logaddexp", "{0} + 0.6931471805599453 if {0} == {1} else ({0} + log1p(exp({1} - {0})) if {0} > {1} "
    "else ({1} + log1p(exp({0} - {1})) if {0} < {1} else {0} - {1}))", np.logaddexp,
    (lambda g, out, a, b: g * exp(a - out), lambda g, out, a, b: g * exp(b - out)), float_same)
elementwise_prim(
    "logaddexp2", "{0} + 1.0 if {0} == {1} else ({0} + log1p(exp2({1} - {0})) * 1.4426950408889634 "
    "if {0} > {1} else ({1} + log1p(exp2({0} - {1})) * 1.4426950408889634 if {0} < {1} else {0} - {1}))",
    np.logaddexp2, (lambda g, out, a, b: g * exp2(a - out), lambda g, out, a, b: g * exp2(b - out)),
    float_same)


@implements(np.logaddexp)
def logaddexp(a, b):
    return elementwise("logaddexp", a, b, float_result=True)


@implements(np.logaddexp2)
def logaddexp2(a, b):
    return elementwise("logaddexp2", a, b, float_result=True)


# ---- inverse trigonometric and hyperbolic functions ---------------------------------------------
arcsin = unary_float("arcsin", np.arcsin, "asin({0})", (lambda g, out, x: g / sqrt(1.0 - x * x),))
arccos = unary_float("arccos", np.arccos, "acos({0})", (lambda g, out, x: -(g / sqrt(1.0 - x * x)),))
arcsinh = unary_float("arcsinh", np.arcsinh, "asinh({0})", (lambda g, out, x: g / sqrt(x * x + 1.0),))
arccosh = unary_float("arccosh", np.arccosh, "acosh({0})",
                      (lambda g, out, x: g / (sqrt(x - 1.0) * sqrt(x + 1.0)),))
arctanh = unary_float("arctanh", np.arctanh, "atanh({0})", (lambda g, out, x: g / (1.0 - x * x),))


def _angle(x, factor64, factor32):
    """x times a conversion factor, as NumPy computes it: in float64, or for float32 with the
    factor rounded to float32 (NumPy's float32 loops compute 180/pi in float32)."""
    x = as_operand(x) if not isinstance(x, (int, float)) else x
    dt = result_dtype(x)
    dt = dt if dt.kind == "f" else np.dtype(np.float64)
    factor = np.asarray(factor32 if dt == np.float32 else factor64, dt)
    return multiply(cast(x, dt), factor)


@implements(np.deg2rad, np.radians)
def deg2rad(x):
    return _angle(x, np.pi / 180.0, np.float32(np.pi) / np.float32(180.0))


@implements(np.rad2deg, np.degrees)
def rad2deg(x):
    return _angle(x, 180.0 / np.pi, np.float32(180.0) / np.float32(np.pi))


def _sinc_grad(g, out, x):
    # (cos(pi x) - sinc(x)) / x, by its Taylor series near 0 where the difference cancels
    px2 = (x * x) * 9.869604401089358
    small = absolute(x) < 0.01
    series = x * (-3.289868133696453 + px2 * (3.2469697011334144 - px2 * 1.1446390807043915))
    safe = where_(small, 1.0, x)
    return g * where_(small, series, (cos(safe * 3.141592653589793) - out) / safe)


# np.sinc's own formula: sin(y) / y with y = pi * (x, or 1e-20 at 0)
elementwise_prim("sinc", "sin(3.141592653589793 * ({0} if {0} != 0 else 1e-20)) / "
                 "(3.141592653589793 * ({0} if {0} != 0 else 1e-20))", np.sinc, (_sinc_grad,), float_same)


@implements(np.sinc)
def sinc(x):
    return elementwise("sinc", x, float_result="float64")


# ---- rounding ----------------------------------------------------------------------------------------
def _rounding(name, ufunc, expr, onnx=None, export_expr=None, integer_result=True):
    """floor/ceil/trunc/rint: zero gradient. Integers and booleans: floor, ceil and trunc
    return them unchanged (NumPy 2), rint converts them to float64."""
    elementwise_prim(name, expr, ufunc, ZERO_GRADIENT, float_same, onnx=onnx, export_expr=export_expr)

    @implements(ufunc)
    def f(x):
        dt = result_dtype(x)
        if dt.kind != "f" and integer_result:
            return as_operand(x) if not is_weak(x) else x
        return elementwise(name, x, float_result=True)
    f.__name__ = f.__qualname__ = ufunc.__name__
    return f


floor = _rounding("floor", np.floor, "floor({0})")
ceil = _rounding("ceil", np.ceil, "ceil({0})")
trunc = _rounding("trunc", np.trunc, "trunc({0})", export_expr="floor({0}) if {0} >= 0 else ceil({0})")
rint = _rounding("rint", np.rint, "rint({0})", integer_result=False)     # halves to even


@implements(np.round, np.around)
def round_(a, decimals=0, out=None):
    """NumPy's rounding: rint(a * 10**decimals) / 10**decimals (rint(a / 10**-decimals) *
    10**-decimals for negative decimals), the factor a weak Python float; integers are
    returned unchanged for decimals >= 0, else rounded in float64 and converted back."""
    no_out(out, "np.round")
    decimals = operator.index(decimals)
    dt = result_dtype(a)
    if decimals == 0 and dt.kind == "f":
        return rint(a)
    if dt.kind != "f" and decimals >= 0:
        return a if is_weak(a) else as_operand(a)
    x = cast(a, np.float64) if dt.kind != "f" else a
    f = 10.0 ** abs(decimals)
    r = divide(rint(multiply(x, f)), f) if decimals >= 0 else multiply(rint(divide(x, f)), f)
    return cast(r, dt) if dt.kind != "f" else r


# ---- signs and steps -------------------------------------------------------------------------------
elementwise_prim("copysign", "copysign({0}, {1})", np.copysign,
                 (lambda g, out, a, b: g * copysign(1.0, a) * copysign(1.0, b), None), float_same,
                 onnx="ONNX has no copysign (the sign bit of -0.0 and of NaN is not observable "
                 "through ONNX operators)")


@implements(np.copysign)
def copysign(a, b):
    return elementwise("copysign", a, b, float_result=True)


@implements(np.heaviside)
def heaviside(x1, x2):
    """0 for x1 < 0, x2 at 0, 1 for x1 > 0, NaN for NaN (floating, as NumPy's loops are)."""
    dt = result_dtype(x1, x2)
    dt = dt if dt.kind == "f" else np.dtype(np.float64)
    x1, x2 = cast(as_operand(x1), dt), cast(as_operand(x2), dt)
    step = where_(x1 < 0, 0.0, where_(x1 == 0, x2, where_(x1 > 0, 1.0, x1)))
    return cast(step, dt)


@implements(np.signbit)
def signbit(x):
    """True where the sign bit is set: negative numbers, -0.0 and NaNs with their sign bit."""
    x = as_operand(x) if not isinstance(x, (bool, int, float)) else np.asarray(x)
    if not isinstance(x, Tensor):
        return np.signbit(x)
    if x.dtype.kind != "f":
        return less(x, 0)
    return less(copysign(1.0, x), 0.0)


@implements(np.ldexp)
def ldexp(x1, x2):
    """x1 * 2**x2 for integer x2, as one product by an exact power of two (two where 2**x2 alone
    would over- or underflow, so results in range are NumPy's exactly)."""
    x2 = as_operand(x2) if not isinstance(x2, (bool, int)) else np.asarray(x2)
    if x2.dtype.kind not in "biu":
        raise TypeError(f"ufunc 'ldexp' not supported for the input types: the exponent must be an "
                        f"integer{where()}")
    dt = result_dtype(x1)
    dt = dt if dt.kind == "f" else np.dtype(np.float64)
    x1 = cast(as_operand(x1), dt) if not is_weak(x1) or isinstance(x1, Tensor) else np.asarray(x1, dt)
    e = cast(x2, np.int64)
    lo = floor_divide(e, 2)
    half = exp2(cast(lo, dt))
    return multiply(multiply(x1, half), exp2(cast(subtract(e, lo), dt)))


@implements(np.modf)
def modf(x):
    """(fractional part, integral part), both with x's sign; the fractional part's gradient is 1."""
    x = as_operand(x)
    if not isinstance(x, Tensor):
        return np.modf(x)
    x = cast(x, x.dtype if x.dtype.kind == "f" else np.float64)
    whole = trunc(x)
    frac = where_(isinf(x), copysign(0.0, x), subtract(x, whole))
    return frac, whole


@implements(np.isclose)
def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """NumPy's test |a - b| <= atol + rtol * |b| (finite b), or a == b (infinities), or both NaN
    with equal_nan; no gradient."""
    if isinstance(rtol, Tensor) or isinstance(atol, Tensor):
        raise NotSupportedError(f"np.isclose with traced rtol or atol is not supported{where()}")
    a = as_operand(a) if not isinstance(a, (bool, int, float)) else np.asarray(a)
    b = as_operand(b) if not isinstance(b, (bool, int, float)) else np.asarray(b)
    dt = np.result_type(a.dtype, b.dtype, 1.0)
    a, b = cast(a, dt), cast(b, dt)
    close = less_equal(absolute(subtract(a, b)), add(atol, multiply(rtol, absolute(b))))
    r = logical_or(logical_and(close, isfinite(b)), equal(a, b))
    if equal_nan:
        r = logical_or(r, logical_and(isnan(a), isnan(b)))
    return r


def _python_bool(value, name):
    """bool(value) where it is known now; of a traced value, a TracingError naming `name`."""
    try:
        return bool(value)
    except TracingError:
        raise TracingError(
            f"{name} of traced values{where()}: it returns a Python bool, which depends on the "
            f"function's inputs and so is not known while the function is traced. Keep the test "
            f"as an array (np.all(np.isclose(a, b)) used in np.where), use jg.cond for a branch, or "
            f"the eager jg.value_and_grad") from None


@implements(np.allclose)
def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """np.allclose: a Python bool, so of traced values it is refused as `bool()` of a traced value
    is (eagerly it is the recorded values' answer)."""
    return _python_bool(np.all(isclose(a, b, rtol, atol, equal_nan)), "np.allclose")


@implements(np.array_equal)
def array_equal(a1, a2, equal_nan=False):
    """np.array_equal: same shape and elements (a Python bool, see `allclose`)."""
    a1 = as_operand(a1)
    a2 = as_operand(a2)
    if tuple(shape_of(a1)) != tuple(shape_of(a2)):
        return False
    same = equal(a1, a2)
    if equal_nan and np.result_type(a1.dtype, a2.dtype).kind == "f":
        same = logical_or(same, logical_and(isnan(a1), isnan(a2)))
    return _python_bool(np.all(same), "np.array_equal")


@implements(np.array_equiv)
def array_equiv(a1, a2):
    """np.array_equiv: shapes that broadcast together and equal elements (a Python bool)."""
    a1 = as_operand(a1)
    a2 = as_operand(a2)
    try:
        np.broadcast_shapes(tuple(shape_of(a1)), tuple(shape_of(a2)))
    except ValueError:
        return False
    return _python_bool(np.all(equal(a1, a2)), "np.array_equiv")


@implements(np.fix)
def fix(x, out=None):
    """np.fix: rounding toward zero (np.trunc; integers unchanged); no gradient."""
    no_out(out, "np.fix")
    x = as_operand(x)
    if x.dtype.kind != "f":
        return x
    return trunc(x)


@implements(np.angle)
def angle(z, deg=False):
    """np.angle of real numbers: pi where the sign bit is set (negative numbers and -0.0), else
    0, NaN for NaN (180 and 0 with deg=True); float64 for integers; no gradient."""
    z = as_operand(z)
    dt = z.dtype if z.dtype.kind == "f" else np.dtype(np.float64)
    half_turn = 180.0 if deg else np.pi
    r = where_(signbit(z), np.asarray(half_turn, dt), np.asarray(0.0, dt))
    if z.dtype.kind == "f":
        r = where_(isnan(z), z, r)
    return cast(r, dt)


# ---- NaN and infinities ------------------------------------------------------------------------------
elementwise_prim("isnan", "isnan({0})", np.isnan, ZERO_GRADIENT, predicate)
elementwise_prim("isinf", "isinf({0})", np.isinf, ZERO_GRADIENT, predicate)
elementwise_prim("isfinite", "not (isnan({0}) | isinf({0}))", np.isfinite, ZERO_GRADIENT, predicate)


def _float_predicate(name, ufunc, integer_value):
    @implements(ufunc)
    def f(x):
        x = as_operand(x) if not isinstance(x, (bool, int, float)) else np.asarray(x)
        if not isinstance(x, Tensor):
            return ufunc(x)
        if x.dtype.kind != "f":
            return full_like(x, integer_value, bool)      # integers are finite
        return bind(name, x)
    f.__name__ = f.__qualname__ = ufunc.__name__
    return f


isnan = _float_predicate("isnan", np.isnan, False)
isinf = _float_predicate("isinf", np.isinf, False)
isfinite = _float_predicate("isfinite", np.isfinite, True)


@implements(np.isposinf)
def isposinf(x, out=None):
    no_out(out, "np.isposinf")
    return logical_and(isinf(x), greater(x, 0))


@implements(np.isneginf)
def isneginf(x, out=None):
    no_out(out, "np.isneginf")
    return logical_and(isinf(x), less(x, 0))


@implements(np.real_if_close)
def real_if_close(a, tol=100):
    """Real arrays are returned as they are (complex ones are not supported)."""
    return as_operand(a)


@implements(np.nan_to_num)
def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """NaN, +inf and -inf replaced (by 0.0 and the dtype's largest and smallest finite values
    unless given); integers unchanged. The gradient passes where x is finite."""
    x = as_operand(x)
    if x.dtype.kind != "f":
        return x
    info = np.finfo(x.dtype)
    big = np.asarray(info.max if posinf is None else posinf, x.dtype)
    small = np.asarray(info.min if neginf is None else neginf, x.dtype)
    r = where_(isnan(x), np.asarray(nan, x.dtype), x)
    return where_(x == np.inf, big, where_(x == -np.inf, small, r))


# ---- np.select ---------------------------------------------------------------------------------------
@implements(np.select)
def select(condlist, choicelist, default=0):
    """The choice of the first true condition, else `default` (np.where from the last pair
    to the first); the result type is that of the choices and the default."""
    if len(condlist) != len(choicelist):
        raise ValueError(f"list of cases must be same length as list of conditions{where()}")
    if len(condlist) == 0:
        raise ValueError(f"select with an empty condition list is not possible{where()}")
    conds = [as_operand(c) for c in condlist]
    for i, c in enumerate(conds):
        if c.dtype != bool:
            raise TypeError(f"invalid entry {i} in condlist: should be boolean ndarray{where()}")
    choices = [c if is_weak(c) and not isinstance(c, Tensor) else as_operand(c) for c in choicelist]
    default = default if is_weak(default) and not isinstance(default, Tensor) else as_operand(default)
    dt = result_dtype(*choices, default)
    result = cast(default, dt)
    for c, v in zip(reversed(conds), reversed(choices)):
        result = where_(c, cast(v, dt), result)
    shape = broadcast_shapes(*[shape_of(c) for c in conds], *[shape_of(v) for v in choices],
                             shape_of(default))
    return broadcast_to(as_operand(result), shape)


# ---- stable composites ----------------------------------------------------------------------------
def sigmoid(x):
    """1 / (1 + exp(-x)), computed as 0.5 * tanh(x / 2) + 0.5, which never overflows."""
    return add(multiply(tanh(multiply(x, 0.5)), 0.5), 0.5)
