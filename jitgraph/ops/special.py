"""SciPy's special functions on traced values.

The functions of `scipy.special` that are NumPy ufuncs (`expit`, `erf`, `gammaln`, ...)
reach jitgraph through `__array_ufunc__` like NumPy's own: each is one elementwise
primitive here, with its scalar expression (the special functions Numba's math lacks
come from `codegen/mathlib.py`, on the CPU and, compiled from the same source, on the
GPU), its SciPy reference implementation and its derivative. Ufuncs of scipy.special
without an implementation here are refused by name.

`logsumexp`, `softmax`, `log_softmax` and `polygamma` are Python functions that convert
their arguments with NumPy; `install()` replaces them in the `scipy.special` module by
wrappers that run jitgraph's versions when a traced value is among the arguments, and
SciPy's function otherwise. (A name bound with `from scipy.special import logsumexp`
before the wrappers were installed still refers to SciPy's function.)
"""
import functools

import numpy as np
import scipy.special as sc

from ..core import LIBRARY_HINTS, Tensor, bind
from ..errors import GradError, NotSupportedError, where
from ..numpy_api import (_weak_proxy, as_operand, broadcast_to, cast, elementwise, is_weak, norm_axes,
                         reshape, result_dtype, shape_of, zeros_like)
from . import elementwise as ew
from . import reduce as rd
from .elementwise import elementwise_prim, float_same
from .registry import UFUNCS, implements

LOG_SQRT_2PI = 0.9189385332046728      # log(sqrt(2 pi))
TWO_SQRT_PI = 1.1283791670955126       # 2 / sqrt(pi)
SQRT_PI_2 = 0.886226925452758          # sqrt(pi) / 2


def _no_gradient(fn, arg):
    """A VJP rule for an argument whose derivative has no closed form: a GradError if asked."""
    def rule(g, out, *inputs, **params):
        raise GradError(f"scipy.special.{fn} has no derivative with respect to its argument {arg!r} "
                        f"(it has no closed form); differentiate with respect to x only{where()}")
    return rule


def loop_dtype(ufunc, xs):
    """The dtype `ufunc` computes in for operands xs (Python scalars and weak values weak):
    SciPy's ufuncs list their loops in their own order (xlogy's float64 loop comes first, so
    xlogy(float32 array, 2.0) is float64), which NumPy's resolution follows."""
    xs = [x if isinstance(x, (Tensor, bool, int, float)) else as_operand(x) for x in xs]
    key = tuple(type(_weak_proxy(x)) if is_weak(x) else x.dtype for x in xs)
    return np.dtype(ufunc.resolve_dtypes(key + (None,))[-1])


def _special_prim(name, arity, expr, vjp, onnx="ONNX has no operator for it", **kw):
    """A scipy.special ufunc as an elementwise primitive. ONNX: its export_expr, an emitter in
    jitgraph/onnx_export.py (onnx=None), or the reason it has none."""
    ufunc = getattr(sc, name)
    mark = None if kw.get("export_expr") or onnx is None else f"scipy.special.{name}: {onnx}"
    elementwise_prim(name, expr, ufunc, vjp, float_same, onnx=mark, **kw)

    @implements(ufunc)
    def f(*xs):
        if len(xs) != arity:
            raise TypeError(f"scipy.special.{name} takes {arity} arguments, got {len(xs)}{where()}")
        return elementwise(name, *xs, dtype=loop_dtype(ufunc, xs))
    f.__name__ = f.__qualname__ = name
    return f


def _safe(cond, x, fill):
    """x where cond, else `fill` (a point where a derivative formula stays finite)."""
    return ew.where_(cond, x, fill)


# ---- the logistic function and its inverse -----------------------------------------------------------
expit = _special_prim("expit", 1, "1.0 / (1.0 + exp(-{0}))", (lambda g, out, x: g * out * (1.0 - out),),
                      export_expr="1.0 / (1.0 + exp(-{0}))")
# SciPy's formula: log(x / (1 - x)), and log1p(2d) - log1p(-2d) with d = x - 1/2 near 1/2
logit = _special_prim("logit", 1, "log({0} / (1.0 - {0})) if ({0} < 0.3) | ({0} > 0.65) else "
                      "log1p(2.0 * ({0} - 0.5)) - log1p(-2.0 * ({0} - 0.5))",
                      (lambda g, out, x: g / (x * (1.0 - x)),), onnx=None)


@implements(sc.log_expit)
def log_expit(x):
    """log(expit(x)) = min(x, 0) - log1p(exp(-|x|)), without overflow on either side."""
    x = as_operand(x) if not isinstance(x, (int, float)) else x
    dt = result_dtype(x)
    x = cast(x, dt if dt.kind == "f" else np.float64)
    return ew.minimum(x, 0.0) - ew.log1p(ew.exp(-ew.absolute(x)))


# ---- the error function and the normal distribution ------------------------------------------------
def _gauss(x):
    return ew.exp(-(x * x))


erf = _special_prim("erf", 1, "erf({0})", (lambda g, out, x: g * TWO_SQRT_PI * _gauss(x),),
                    onnx="ONNX Runtime implements Erf for float32 only (a float64 model would not run)")
erfc = _special_prim("erfc", 1, "erfc({0})", (lambda g, out, x: -(g * TWO_SQRT_PI * _gauss(x)),),
                     onnx="ONNX has no erfc (1 - Erf loses every digit in the upper tail)")
erfinv = _special_prim("erfinv", 1, "erfinv({0})", (lambda g, out, x: g * SQRT_PI_2 * ew.exp(out * out),))
ndtr = _special_prim("ndtr", 1, "ndtr({0})",
                     (lambda g, out, x: g * ew.exp(-0.5 * (x * x) - LOG_SQRT_2PI),),
                     onnx="ONNX has no erfc (an Erf formula loses every digit in the lower tail)")
# d/dx log ndtr(x) = phi(x) / ndtr(x), as exp(log phi - log ndtr): finite far into both tails
log_ndtr = _special_prim("log_ndtr", 1, "log_ndtr({0})",
                         (lambda g, out, x: g * ew.exp(-0.5 * (x * x) - LOG_SQRT_2PI - out),))


# ---- gamma and beta functions -------------------------------------------------------------------------
gammaln = _special_prim("gammaln", 1, "lgamma({0})", (lambda g, out, x: g * digamma(x),))
digamma = _special_prim("digamma", 1, "digamma({0})", (lambda g, out, x: g * _polygamma(1, x),))
betaln = _special_prim("betaln", 2, "betaln({0}, {1})", (
    lambda g, out, a, b: g * (digamma(a) - digamma(a + b)),
    lambda g, out, a, b: g * (digamma(b) - digamma(a + b))))
elementwise_prim("polygamma", lambda n: "polygamma(%d, {0})" % n,
                 lambda x, n: sc.polygamma(n, x).astype(np.asarray(x).dtype),
                 (lambda g, out, x, n: g * _polygamma(n + 1, x),),
                 lambda x, n: float_same(x), onnx="scipy.special.polygamma: ONNX has no operator for it")


def _polygamma(n, x):
    """The n-th derivative of digamma at x (n a non-negative Python int)."""
    if n == 0:
        return digamma(x)
    if not isinstance(x, Tensor):
        x = np.asarray(x)
        return sc.polygamma(n, x).astype(x.dtype if x.dtype.kind == "f" else np.float64)
    x = cast(x, x.dtype if x.dtype.kind == "f" else np.float64)
    return bind("polygamma", x, n=int(n))


def polygamma(n, x):
    """scipy.special.polygamma(n, x) for an integer order n known when tracing."""
    if isinstance(n, Tensor):
        raise NotSupportedError(f"scipy.special.polygamma with a traced order n is not supported; "
                                f"the order must be a Python int{where()}")
    orders = np.unique(np.asarray(n))
    if orders.size != 1 or orders[0] != int(orders[0]) or orders[0] < 0:
        raise NotSupportedError(f"scipy.special.polygamma on traced values needs one non-negative "
                                f"integer order, got n={n!r}{where()}")
    r = cast(_polygamma(int(orders[0]), x), np.float64)     # SciPy's result is float64
    return broadcast_to(r, np.broadcast_shapes(np.shape(n), shape_of(r)))


def _gamma_density(a, x):
    # x^(a-1) e^-x / Gamma(a): the x-derivative of the regularized incomplete gamma function
    return ew.exp(xlogy(a - 1.0, x) - x - gammaln(a))


def _beta_density(a, b, x):
    # x^(a-1) (1-x)^(b-1) / B(a, b): the x-derivative of the regularized incomplete beta function
    return ew.exp(xlogy(a - 1.0, x) + xlog1py(b - 1.0, -x) - betaln(a, b))


gammainc = _special_prim("gammainc", 2, "gammainc({0}, {1})", (
    _no_gradient("gammainc", "a"), lambda g, out, a, x: g * _gamma_density(a, x)))
gammaincc = _special_prim("gammaincc", 2, "gammaincc({0}, {1})", (
    _no_gradient("gammaincc", "a"), lambda g, out, a, x: -(g * _gamma_density(a, x))))
betainc = _special_prim("betainc", 3, "betainc({0}, {1}, {2})", (
    _no_gradient("betainc", "a"), _no_gradient("betainc", "b"),
    lambda g, out, a, b, x: g * _beta_density(a, b, x)))
betaincc = _special_prim("betaincc", 3, "betaincc({0}, {1}, {2})", (
    _no_gradient("betaincc", "a"), _no_gradient("betaincc", "b"),
    lambda g, out, a, b, x: -(g * _beta_density(a, b, x))))


# ---- x log y and entropy --------------------------------------------------------------------------------
def _xlog_dy(g, x, denominator):
    # g x / denominator, 0 where x = 0 (the function is 0 there for every y)
    zero = x == 0.0
    return ew.where_(zero, 0.0, g * x / ew.where_(zero, 1.0, denominator))


# SciPy's definitions: 0 where x = 0 (unless y is NaN), else x log(y)
xlogy = _special_prim("xlogy", 2, "0.0 if ({0} == 0) & ({1} == {1}) else {0} * log({1})", (
    lambda g, out, x, y: g * ew.log(y), lambda g, out, x, y: _xlog_dy(g, x, y)),
    export_expr="0.0 if ({0} == 0) & ({1} == {1}) else {0} * log({1})")
xlog1py = _special_prim("xlog1py", 2, "0.0 if ({0} == 0) & ({1} == {1}) else {0} * log1p({1})", (
    lambda g, out, x, y: g * ew.log1p(y), lambda g, out, x, y: _xlog_dy(g, x, y + 1.0)), onnx=None)


def _entr_grad(g, out, x):
    pos = x > 0.0
    return ew.where_(pos, -(g * (ew.log(_safe(pos, x, 1.0)) + 1.0)), 0.0)


# -x log x for x > 0, 0 at 0, -inf below (1e999 is the float literal inf)
entr = _special_prim("entr", 1, "-({0} * log({0})) if {0} > 0 else (0.0 if {0} == 0 else "
                     "({0} if {0} != {0} else -1e999))", (_entr_grad,),
                     export_expr="-({0} * log({0})) if {0} > 0 else (0.0 if {0} == 0 else "
                     "({0} if {0} != {0} else -1e999))")


# ---- scipy.special's other ufuncs: refused by name ----------------------------------------------------
def _refuse(name):
    def f(*args, **kwargs):
        raise NotSupportedError(f"scipy.special.{name} is not supported on traced values{where()}")
    f.refused = True      # (not listed as supported: docs/make_surface.py)
    return f


for _name in dir(sc):
    _u = getattr(sc, _name)
    if isinstance(_u, np.ufunc) and _u not in UFUNCS and not _name.startswith("_"):
        UFUNCS[_u] = _refuse(_u.__name__)


# ---- SciPy's Python functions: logsumexp, softmax, log_softmax, polygamma --------------------------------
def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """scipy.special.logsumexp: log(sum(b * exp(a), axis)), with the largest finite value of a
    subtracted first (and, with return_sign, the sign of the sum as a second result)."""
    a = as_operand(a)
    if b is not None:
        b = as_operand(b)
        dt = result_dtype(a, b)
        dt = dt if dt.kind == "f" else np.dtype(np.float64)
        a, b = cast(a, dt), cast(b, dt)
        shape = np.broadcast_shapes(shape_of(a), shape_of(b))
        a, b = broadcast_to(a, shape), broadcast_to(b, shape)
    elif a.dtype.kind != "f":
        a = cast(a, np.float64)
    if not shape_of(a):
        a = broadcast_to(a, (1,))
        b = broadcast_to(b, (1,)) if b is not None else None
    axes = norm_axes(axis, len(shape_of(a)))
    if any(shape_of(a)[k] == 0 for k in axes):
        s = rd.sum(zeros_like(a), axis=axes, keepdims=True)
        out, sgn = ew.log(s), ew.sign(s)
    else:
        m = rd.amax(a, axis=axes, keepdims=True)
        m = ew.stop_gradient(ew.where_(ew.isfinite(m), m, 0.0))
        e = ew.exp(a - m)
        s = rd.sum(e * b if b is not None else e, axis=axes, keepdims=True)
        sgn = ew.sign(s) if return_sign else None
        out = ew.log(ew.absolute(s) if return_sign else s) + m
    if not keepdims:
        keep = [d for k, d in enumerate(shape_of(out)) if k not in axes]
        out = reshape(out, keep)
        sgn = reshape(sgn, keep) if return_sign else None
    return (out, sgn) if return_sign else out


def softmax(x, axis=None):
    """scipy.special.softmax (axis=None: over all elements)."""
    return rd.softmax(x, axis=axis)


def log_softmax(x, axis=None):
    """scipy.special.log_softmax: x - max - log(sum(exp(x - max))), the max taken as 0 where it
    is not finite."""
    x = as_operand(x)
    m = rd.amax(x, axis=axis, keepdims=True)
    m = ew.stop_gradient(ew.where_(ew.isfinite(m), m, 0.0))
    t = x - m
    return t - ew.log(rd.sum(ew.exp(t), axis=axis, keepdims=True))


TRACED_FUNCTIONS = {"logsumexp": logsumexp, "softmax": softmax, "log_softmax": log_softmax,
                    "polygamma": polygamma}


def has_tensor(args, kwargs=None):
    """Is a traced value among these arguments (in lists, tuples and dicts too)?"""
    stack = list(args) + list((kwargs or {}).values())
    while stack:
        a = stack.pop()
        if isinstance(a, Tensor):
            return True
        if isinstance(a, (list, tuple)):
            stack.extend(a)
        elif isinstance(a, dict):
            stack.extend(a.values())
    return False


def traced_wrapper(original, traced, name):
    """`original` for arguments without traced values, `traced` for arguments with some."""
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if has_tensor(args, kwargs):
            return traced(*args, **kwargs)
        return original(*args, **kwargs)
    wrapper.__jitgraph_original__ = original
    wrapper.__jitgraph_name__ = name
    return wrapper


def install_wrappers(module, functions):
    """Put jitgraph's wrappers of `module`'s Python functions (name -> the version for traced
    arguments) into the module, once each, with the refusal hint for names imported before."""
    for name, traced in functions.items():
        current = getattr(module, name)
        full = f"{module.__name__}.{name}"
        if getattr(current, "__jitgraph_original__", None) is None:
            setattr(module, name, traced_wrapper(current, traced, full))
            LIBRARY_HINTS[full] = (
                f"jitgraph supports {full} when it is called through the module "
                f"({full}(...)); a name imported from it before jitgraph was imported "
                f"still refers to SciPy's function")


def install():
    """Put jitgraph's wrappers of scipy.special's Python functions into the module (once)."""
    install_wrappers(sc, TRACED_FUNCTIONS)

install()
