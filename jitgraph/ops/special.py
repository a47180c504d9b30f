"""SciPy's special functions on traced values.

The functions of `scipy.special` that are NumPy ufuncs (`expit`, `erf`, `gammaln`, ...)
reach jitgraph through `__array_ufunc__` like NumPy's own: each is one elementwise
primitive here, with its scalar expression (the special functions Numba's math lacks
come from `codegen/mathlib.py`, on the CPU and, compiled from the same source, on the
GPU; ndtri, erfcx, exprel and the modified Bessel functions i0, i0e, i1, i1e, k0, k0e, k1, k1e
are expressions of the scalar language itself), its SciPy reference implementation and its
derivative (np.i0, NumPy's Python function, is scipy.special.i0 on traced values). A few
(kl_div, rel_entr, the Huber losses, the Box-Cox transforms) are composites of primitives,
evaluated in float64 as SciPy's loops are. Ufuncs of scipy.special without an implementation
here are refused by name.

`logsumexp`, `softmax`, `log_softmax`, `polygamma` and `multigammaln` are Python functions that convert
their arguments with NumPy; `install()` replaces them in the `scipy.special` module by
wrappers that run jitgraph's versions when a traced value is among the arguments, and
SciPy's function otherwise. (A name bound with `from scipy.special import logsumexp`
before the wrappers were installed still refers to SciPy's function.)
"""
import fractions
import functools
import math
import sys

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
SQRT_2PI = 2.5066282746310002          # sqrt(2 pi)


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


def _special_prim(name, arity, expr, vjp, onnx="ONNX has no operator for it", in_float64=False, **kw):
    """A scipy.special ufunc as an elementwise primitive. ONNX: its export_expr, an emitter in
    jitgraph/onnx_export.py (onnx=None), or the reason it has none. `in_float64`: the primitive
    computes in float64 only (its expression needs no float64() conversions), its float32 results
    rounded from float64 ones, as SciPy's float32 loops of the function compute in double."""
    ufunc = getattr(sc, name)
    mark = None if kw.get("export_expr") or onnx is None else f"scipy.special.{name}: {onnx}"
    elementwise_prim(name, expr, ufunc, vjp, float_same, onnx=mark, **kw)

    @implements(ufunc)
    def f(*xs):
        if len(xs) != arity:
            raise TypeError(f"scipy.special.{name} takes {arity} arguments, got {len(xs)}{where()}")
        dt = loop_dtype(ufunc, xs)
        if in_float64 and dt != np.float64:
            return cast(elementwise(name, *xs, dtype=np.float64), dt)
        return elementwise(name, *xs, dtype=dt)
    f.__name__ = f.__qualname__ = name
    return f


def _safe(cond, x, fill):
    """x where cond, else `fill` (a point where a derivative formula stays finite)."""
    return ew.where_(cond, x, fill)


def _composite(ufunc, formula, *xs):
    """A scipy.special ufunc written as a composite `formula(*xs)`: evaluated in float64 (as
    SciPy's float32 loops are) and rounded once to the dtype of SciPy's loop for xs (`loop_dtype`)."""
    dt = loop_dtype(ufunc, xs)
    return cast(formula(*[cast(as_operand(x), np.float64) for x in xs]), dt)


def _horner(coefs, t):
    """c[0] + t (c[1] + t (c[2] + ...)) as scalar-language text (t: the text of an operand)."""
    text = repr(float(coefs[-1]))
    for c in reversed(coefs[:-1]):
        text = f"{float(c)!r} + {t} * ({text})"
    return f"({text})"


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

# ndtri: Wichura's algorithm AS 241 (PPND16, 1e-16 relative): a rational function of q = p - 1/2
# for |q| <= 0.425, else of r = sqrt(-log(min(p, 1 - p))), one for r <= 5 and one beyond
_AS241 = (
    (3.3871328727963666080e0, 1.3314166789178437745e+2, 1.9715909503065514427e+3, 1.3731693765509461125e+4,
     4.5921953931549871457e+4, 6.7265770927008700853e+4, 3.3430575583588128105e+4, 2.5090809287301226727e+3),
    (1.0, 4.2313330701600911252e+1, 6.8718700749205790830e+2, 5.3941960214247511077e+3,
     2.1213794301586595867e+4, 3.9307895800092710610e+4, 2.8729085735721942674e+4, 5.2264952788528545610e+3),
    (1.42343711074968357734e0, 4.63033784615654529590e0, 5.76949722146069140550e0, 3.64784832476320460504e0,
     1.27045825245236838258e0, 2.41780725177450611770e-1, 2.27238449892691845833e-2, 7.74545014278341407640e-4),
    (1.0, 2.05319162663775882187e0, 1.67638483018380384940e0, 6.89767334985100004550e-1,
     1.48103976427480074590e-1, 1.51986665636164571966e-2, 5.47593808499534494600e-4, 1.05075007164441684324e-9),
    (6.65790464350110377720e0, 5.46378491116411436990e0, 1.78482653991729133580e0, 2.96560571828504891230e-1,
     2.65321895265761230930e-2, 1.24266094738807843860e-3, 2.71155556874348757815e-5, 2.01033439929228813265e-7),
    (1.0, 5.99832206555887937690e-1, 1.36929880922735805310e-1, 1.48753612908506148525e-2,
     7.86869131145613259100e-4, 1.84631831751005468180e-5, 1.42151175831644588870e-7, 2.04426310338993978564e-15))


def _ndtri_expr():
    a, b, c, d, e, f = _AS241
    q = "(P - 0.5)"
    rc = f"(0.180625 - {q} * {q})"
    r = "sqrt(-log(P if P < 0.5 else 1.0 - P))"
    near, far = f"({r} - 1.6)", f"({r} - 5.0)"
    tail = f"({_horner(c, near)} / {_horner(d, near)} if {r} <= 5.0 else {_horner(e, far)} / {_horner(f, far)})"
    body = (f"{q} * {_horner(a, rc)} / {_horner(b, rc)} if abs({q}) <= 0.425 else "
            f"(1.0 if P > 0.5 else -1.0) * {tail}")
    return f"-1e999 if P == 0.0 else (1e999 if P == 1.0 else ({body}))".replace("P", "{0}")


_NDTRI = _ndtri_expr()
ndtri = _special_prim("ndtri", 1, _NDTRI, (lambda g, out, p: g * (SQRT_2PI * ew.exp(0.5 * (out * out))),),
                      export_expr=_NDTRI)


def _erfcx_expr():
    # exp(x^2) erfc(x) below 9, else the asymptotic series 1/(x sqrt(pi)) sum_k (-1)^k (2k-1)!! /
    # (2x^2)^k, whose 15 terms reach 1.5e-16 at x = 9. In float64 for float32 too (x^2's rounding
    # costs 2e-14 at most there); the CPU rounds exp's result to the program's dtype, and exp(81)
    # is a float32.
    x = "float64({0})"
    coefs = [1.0]
    for k in range(1, 15):
        coefs.append(-coefs[-1] * (2 * k - 1))
    series = f"0.5641895835477563 / {x} * {_horner(coefs, f'(0.5 / ({x} * {x}))')}"
    return f"T(exp({x} * {x}) * erfc({x}) if {x} < 9.0 else {series})"


erfcx = _special_prim("erfcx", 1, _erfcx_expr(), (lambda g, out, x: g * (2.0 * x * out - TWO_SQRT_PI),),
                      onnx="ONNX has no erfc (an Erf formula loses every digit for x > 0)")


# ---- modified Bessel functions ----------------------------------------------------------------------------
# Computed in float64 for float32 too (in_float64), as SciPy's float32 loops do. I_nu for |x| <= 12 by
# its power series, whose terms are all positive: I0 = sum_k y^k / k!^2, I1 = x/2 sum_k y^k / (k! (k+1)!),
# y = x^2 / 4 (27 terms: 1e-18 at 12). K_nu for 0 < x <= 1 by A&S 9.6.13 and 9.6.11 with
# L = log(x / 2) + gamma and H_k the harmonic numbers: K0 = -L I0 + sum_k>=1 H_k y^k / k!^2,
# K1 = 1/x + L I1 - x/4 sum_k>=0 (H_k + H_k+1) y^k / (k! (k+1)!) (12 terms: 1e-19 at 1; the sums
# would cancel 3 digits at 2, none at 1). Beyond, e^-|x| sqrt|x| I_nu (|x| > 12) and e^x sqrt(x) K_nu
# (x > 1) are polynomials in t = 24/|x| - 1 (of degree 17) and t = 2/x - 1 (degree 31): Chebyshev
# interpolants over all of (12, inf) and (1, inf), computed with mpmath at 50 digits, in the
# monomial basis, where the sums of the |coefficients| are within 2% of their values at t = -1 (x =
# inf), so Horner's rule loses nothing (1 ulp). As SciPy: I0 and I1 overflow where e^|x| does
# (from 709.78; the fit's value is below 1/2, so no order of the product overflows sooner) and are
# NaN at +-inf (e^inf / sqrt(inf)); K is NaN for x < 0, inf at +-0, and underflows with e^-x.
_I_FIT = (
    (0.4010710650668474, 0.0021821681721169426, 5.598482533364579e-05, 2.797707018723217e-06,
     2.1716050330438626e-07, 2.3688437138529013e-08, 3.4434288960480876e-09, 6.480594489084545e-10,
     1.5625009897783602e-10, 4.793431885757478e-11, 1.86786960871825e-11, 1.1567225133595174e-11,
     8.731478514943598e-12, 1.160616007503719e-12, -4.776314955436403e-12, -2.643642822555006e-12,
     6.513895669865593e-13, 5.651639972768679e-13),
    (0.39262449420411655, -0.006405453603482373, -9.124755355074322e-05, -3.827951354766477e-06,
     -2.726845483614065e-07, -2.8253705687513596e-08, -3.967546482654758e-09, -7.281746097010025e-10,
     -1.7218260229843336e-10, -5.200740998856461e-11, -1.995906955937782e-11, -1.2179489345971289e-11,
     -9.241888378982641e-12, -1.3598828015317703e-12, 4.949031304204529e-12, 2.7950069920716694e-12,
     -6.631028143987137e-13, -5.901323139685153e-13))
_K_FIT = (
    (1.1901571834152027, -0.052279011491757815, 0.00806738654837646, -0.0019084014862549323,
     0.000569239888071041, -0.00019727982151060316, 7.608266876993985e-05, -3.181478532361619e-05,
     1.4181438734805009e-05, -6.659255387847134e-06, 3.267660229031733e-06, -1.6632563954211314e-06,
     8.615308067039192e-07, -4.631497497824284e-07, 3.157082012666388e-07, -1.8798921780075736e-07,
     -9.48666769646887e-08, 8.250536185290395e-08, 4.587240239818765e-07, -3.336853793275968e-07,
     -7.261567971800021e-07, 5.353669405614478e-07, 9.14598109250296e-07, -6.718701210881975e-07,
     -7.865960043326464e-07, 5.779135428976599e-07, 4.574182615615955e-07, -3.3557820589409827e-07,
     -1.5957778044808175e-07, 1.1694322027882922e-07, 2.615966984471053e-08, -1.9114064072754094e-08),
    (1.4615569735231244, 0.1879789065457187, -0.01585285456598806, 0.003112006645603092,
     -0.0008443927410758253, 0.0002760388409426186, -0.00010227196388846232, 4.1523137243087766e-05,
     -1.8092612665926288e-05, 8.342834958953014e-06, -4.0329228462429105e-06, 2.0272397584928273e-06,
     -1.0404064824844836e-06, 5.543798063523467e-07, -3.688799303916287e-07, 2.1759799265517333e-07,
     9.614027603325258e-08, -8.574556153653085e-08, -5.009267961434374e-07, 3.636083908547871e-07,
     7.891296819841184e-07, -5.811655322772845e-07, -9.95141923525979e-07, 7.300929605704825e-07,
     8.558027770114144e-07, -6.279736495108733e-07, -4.97888516897262e-07, 3.647992504961002e-07,
     1.737529550394376e-07, -1.271668162414002e-07, -2.850932126969143e-08, 2.0802812688029366e-08))
_BESSEL_Y = "(0.25 * {0} * {0})"
_BESSEL_ONNX = "ONNX has no operator for it (its series are beyond an export expression)"


def _bessel_series(nu, harmonic=False, terms=27):
    """The coefficients 1 / (k! (k+nu)!), or (H_k + H_k+nu) / (k! (k+nu)!), k = 0, 1, ...: exact, then
    rounded."""
    h = [fractions.Fraction(0)]
    for k in range(1, terms + 2):
        h.append(h[-1] + fractions.Fraction(1, k))
    return [float((h[k] + h[k + nu] if harmonic else 1) / (math.factorial(k) * math.factorial(k + nu)))
            for k in range(terms)]


def _bessel_i_expr(nu, scaled):
    small = _horner(_bessel_series(nu), _BESSEL_Y)
    if nu == 1:
        small = f"0.5 * {{0}} * {small}"
    fit = f"{_horner(_I_FIT[nu], '(24.0 / abs({0}) - 1.0)')} / sqrt(abs({{0}}))"
    if scaled:
        small = f"exp(-abs({{0}})) * {small}"
    else:
        fit = f"exp(abs({{0}})) * {fit}"
    if nu == 1:
        fit = f"(1.0 if {{0}} > 0 else -1.0) * {fit}"
    return f"{small} if abs({{0}}) <= 12.0 else {fit}"


def _bessel_k_expr(nu, scaled):
    y = _BESSEL_Y
    L = "(log({0}) - 0.11593151565841245)"     # log(x / 2) + gamma (x / 2 would be 0 at 5e-324)
    if nu == 0:
        small = (f"0.5 * {y} * {_horner(_bessel_series(0, True, 12)[1:], y)} - "
                 f"{L} * {_horner(_bessel_series(0, terms=12), y)}")
    else:
        small = (f"1.0 / {{0}} + 0.5 * {{0}} * ({L} * {_horner(_bessel_series(1, terms=12), y)} - "
                 f"0.5 * {_horner(_bessel_series(1, True, 12), y)})")
    fit = f"{_horner(_K_FIT[nu], '(2.0 / {0} - 1.0)')} / sqrt({{0}})"
    if scaled:
        small = f"exp({{0}}) * ({small})"
    else:
        fit = f"exp(-{{0}}) * {fit}"
    # (NaN and inf by name: Python's math, which the GPU's source runs as, raises at log(0) and 1/0)
    return f"(1e999 - 1e999) if {{0}} < 0.0 else (1e999 if {{0}} == 0.0 else ({small} if {{0}} <= 1.0 else {fit}))"


def _i1_prime_series(x):
    # I1'(x) = sum_k (2k + 1) y^k / (2 k! (k + 1)!), y = x^2 / 4: to 1e-18 for |x| < 0.1 (where
    # I0 - I1 / x, differentiated again, would lose digits to cancellation)
    y = 0.25 * (x * x)
    coefs = [(2 * k + 1) / 2 * c for k, c in enumerate(_bessel_series(1, terms=6))]
    s = coefs[-1]
    for c in reversed(coefs[:-1]):
        s = s * y + c
    return s


def _i1_grad(g, out, x):
    # I1' = I0 - I1 / x (1/2 at 0)
    small = ew.absolute(x) < 0.1
    return g * ew.where_(small, _i1_prime_series(x), i0(x) - out / _safe(small, 1.0, x))


def _i1e_grad(g, out, x):
    # I1e' = I0e - I1e (sign(x) + 1/x) = e^-|x| I1' - sign(x) I1e (1/2 at 0)
    small = ew.absolute(x) < 0.1
    near = ew.exp(-ew.absolute(x)) * _i1_prime_series(x)
    return g * (ew.where_(small, near, i0e(x) - out / _safe(small, 1.0, x)) - ew.sign(x) * out)


def _bessel(name, expr, vjp):
    return _special_prim(name, 1, expr, (vjp,), onnx=_BESSEL_ONNX, in_float64=True)


i0 = _bessel("i0", _bessel_i_expr(0, False), lambda g, out, x: g * i1(x))
i0e = _bessel("i0e", _bessel_i_expr(0, True), lambda g, out, x: g * (i1e(x) - ew.sign(x) * out))
i1 = _bessel("i1", _bessel_i_expr(1, False), _i1_grad)
i1e = _bessel("i1e", _bessel_i_expr(1, True), _i1e_grad)
k0 = _bessel("k0", _bessel_k_expr(0, False), lambda g, out, x: -(g * k1(x)))
k0e = _bessel("k0e", _bessel_k_expr(0, True), lambda g, out, x: g * (out - k1e(x)))
k1 = _bessel("k1", _bessel_k_expr(1, False), lambda g, out, x: -(g * (k0(x) + out / x)))
k1e = _bessel("k1e", _bessel_k_expr(1, True), lambda g, out, x: g * (out * (1.0 - 1.0 / x) - k0e(x)))


@implements(np.i0)
def np_i0(x):
    """np.i0 (NumPy's Python function) on a traced value: scipy.special.i0, float32 for float32 and
    float64 for integers as NumPy's (whose float32 values round a float32 exp: a few ulps off)."""
    return i0(x)


# ---- gamma and beta functions -------------------------------------------------------------------------
gammaln = _special_prim("gammaln", 1, "lgamma({0})", (lambda g, out, x: g * digamma(x),))
digamma = _special_prim("digamma", 1, "digamma({0})", (lambda g, out, x: g * _polygamma(1, x),))
# NaN at the poles (non-positive integers, -inf), 1/x near 0 (+-inf at +-0), inf beyond the
# largest finite value (Python's math.gamma raises at each of these; SciPy's edges)
gamma = _special_prim("gamma", 1, "(1e999 - 1e999) if ({0} < 0.0) & ({0} == floor({0})) else (1.0 / {0} "
                      "if abs({0}) < 1e-20 else (1e999 if {0} >= 171.6243769563027 else gamma({0})))",
                      (lambda g, out, x: g * out * digamma(x),))
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


def _entropy_edges(x, y, ok, value, at_zero):
    """SciPy's kl_div/rel_entr: `value` where x, y > 0, `at_zero` where x = 0 <= y, inf elsewhere,
    NaN where x or y is NaN."""
    out = ew.where_(ok, value, ew.where_((x == 0.0) & (y >= 0.0), at_zero, np.inf))
    return ew.where_(ew.isnan(x) | ew.isnan(y), np.nan, out)


def _kl_div(x, y):
    ok = (x > 0.0) & (y > 0.0)
    xs, ys = _safe(ok, x, 1.0), _safe(ok, y, 1.0)
    return _entropy_edges(x, y, ok, xs * ew.log(xs / ys) - xs + ys, y)


@implements(sc.kl_div)
def kl_div(x, y):
    """scipy.special.kl_div: x log(x / y) - x + y for x, y > 0, y where x = 0 <= y, else inf."""
    return _composite(sc.kl_div, _kl_div, x, y)


def _rel_entr(x, y):
    ok = (x > 0.0) & (y > 0.0)
    xs, ys = _safe(ok, x, 1.0), _safe(ok, y, 1.0)
    ratio = xs / ys
    near = ok & (ratio > 0.5) & (ratio < 2.0)
    normal = ok & (ratio > 2.2250738585072014e-308) & (ratio < np.inf)
    xn, yn = _safe(normal, x, 1.0), _safe(normal, y, 1.0)
    log_ratio = ew.where_(near, ew.log1p(_safe(near, (xn - yn) / yn, 0.0)),
                          ew.where_(normal, ew.log(xn / yn), ew.log(xs) - ew.log(ys)))
    return _entropy_edges(x, y, ok, xs * log_ratio, 0.0)


@implements(sc.rel_entr)
def rel_entr(x, y):
    """scipy.special.rel_entr: x log(x / y) for x, y > 0, 0 where x = 0 <= y, else inf. As SciPy:
    log1p((x - y) / y) for x / y in (1/2, 2), log(x) - log(y) where x / y is not a normal float."""
    return _composite(sc.rel_entr, _rel_entr, x, y)


# ---- exponentials and logarithms ----------------------------------------------------------------------
@implements(sc.log1p)
def log1p(x):
    """scipy.special.log1p: NumPy's, in SciPy's loop dtype (float64 for integers)."""
    return ew.log1p(cast(as_operand(x), loop_dtype(sc.log1p, (x,))))


@implements(sc.expm1)
def expm1(x):
    """scipy.special.expm1: NumPy's, in SciPy's loop dtype (float64 for integers)."""
    return ew.expm1(cast(as_operand(x), loop_dtype(sc.expm1, (x,))))


def _exprel_grad(g, out, x):
    # (exp(x) - exprel(x)) / x, by its Taylor series near 0 where the difference cancels
    small = ew.absolute(x) < 0.01
    series = 0.5 + x * (1.0 / 3 + x * (0.125 + x * (1.0 / 30 + x * (1.0 / 144 + x * (1.0 / 840)))))
    safe = _safe(small, 1.0, x)
    return g * ew.where_(small, series, (ew.exp(safe) - out) / safe)


# SciPy's: 1 for |x| < 1e-16, inf where expm1 overflows; e^x / x from x = 40 on as the product of
# two halves, in float64 (float32 results are finite up to 93.4, e^x up to 88.7)
exprel = _special_prim("exprel", 1, "1.0 if abs({0}) < 1e-16 else (1e999 if {0} > 709.782712893384 else "
                       "(expm1({0}) / {0} if {0} < 40.0 else "
                       "T(float64(exp(0.5 * {0})) * float64(exp(0.5 * {0})) / float64({0}))))",
                       (_exprel_grad,), onnx="ONNX has no expm1 (exp(x) - 1 loses every digit near 0)")


# ---- Huber losses ---------------------------------------------------------------------------------------
def _huber(delta, r):
    a = ew.absolute(r)
    return ew.where_(delta < 0.0, np.inf, ew.where_(a <= delta, 0.5 * (r * r), delta * (a - 0.5 * delta)))


@implements(sc.huber)
def huber(delta, r):
    """scipy.special.huber: r^2 / 2 for |r| <= delta, delta (|r| - delta / 2) beyond; inf for
    delta < 0."""
    return _composite(sc.huber, _huber, delta, r)


def _pseudo_huber(delta, r):
    ok = (delta != 0.0) & (r != 0.0)
    d = _safe(ok, delta, 1.0)
    v = r / d
    value = d * d * ew.expm1(0.5 * ew.log1p(v * v))
    return ew.where_(delta < 0.0, np.inf, ew.where_(ok, value, 0.0))


@implements(sc.pseudo_huber)
def pseudo_huber(delta, r):
    """scipy.special.pseudo_huber: delta^2 (sqrt(1 + (r / delta)^2) - 1), as SciPy computes it
    (expm1(log1p(v^2) / 2)); 0 where delta or r is 0, inf for delta < 0."""
    return _composite(sc.pseudo_huber, _pseudo_huber, delta, r)


# ---- Box-Cox transforms ---------------------------------------------------------------------------------
def _box_cox_of_log(lx, lmbda, plain):
    """(exp(lmbda lx) - 1) / lmbda of lx = log(x) or log1p(x), as SciPy computes it: lx where
    `plain`, expm1(lmbda lx) / lmbda while lmbda lx < 709.78, sign(lmbda) exp(lmbda lx -
    log|lmbda|) - 1 / lmbda above."""
    lm = _safe(plain, 1.0, lmbda)
    t = lm * lx
    big = t >= 709.78
    huge = ew.sign(lm) * ew.exp(_safe(big, t, 0.0) - ew.log(ew.absolute(lm))) - 1.0 / lm
    return ew.where_(plain, lx, ew.where_(big, huge, ew.expm1(_safe(big, 0.0, t)) / lm))


def _boxcox(x, lmbda):
    return _box_cox_of_log(ew.log(x), lmbda, ew.absolute(lmbda) < 1e-19)


@implements(sc.boxcox)
def boxcox(x, lmbda):
    """scipy.special.boxcox: (x^lmbda - 1) / lmbda, log(x) for |lmbda| < 1e-19."""
    return _composite(sc.boxcox, _boxcox, x, lmbda)


def _boxcox1p(x, lmbda):
    lx = ew.log1p(x)
    al = ew.absolute(lmbda)
    return _box_cox_of_log(lx, lmbda, (al < 1e-19) | ((ew.absolute(lx) < 1e-289) & (al < 1e273)))


@implements(sc.boxcox1p)
def boxcox1p(x, lmbda):
    """scipy.special.boxcox1p: ((1 + x)^lmbda - 1) / lmbda, log1p(x) for |lmbda| < 1e-19 (and,
    as SciPy, where |log1p(x)| < 1e-289 and |lmbda| < 1e273)."""
    return _composite(sc.boxcox1p, _boxcox1p, x, lmbda)


def _inv_boxcox(y, lmbda):
    zero = lmbda == 0.0
    lm = _safe(zero, 1.0, lmbda)
    return ew.where_(zero, ew.exp(y), ew.exp(ew.log1p(_safe(zero, 0.0, lm * y)) / lm))


@implements(sc.inv_boxcox)
def inv_boxcox(y, lmbda):
    """scipy.special.inv_boxcox: (1 + lmbda y)^(1 / lmbda), exp(y) for lmbda = 0."""
    return _composite(sc.inv_boxcox, _inv_boxcox, y, lmbda)


def _inv_boxcox1p(y, lmbda):
    ly = lmbda * y
    zero = lmbda == 0.0
    tiny = ew.absolute(ly) < 1e-154
    plain = zero | tiny
    lm = _safe(plain, 1.0, lmbda)
    value = ew.expm1(ew.log1p(_safe(plain, 0.0, ly)) / lm)
    return ew.where_(zero, ew.expm1(y), ew.where_(tiny, y, value))


@implements(sc.inv_boxcox1p)
def inv_boxcox1p(y, lmbda):
    """scipy.special.inv_boxcox1p: (1 + lmbda y)^(1 / lmbda) - 1, expm1(y) for lmbda = 0 and y
    itself where |lmbda y| < 1e-154."""
    return _composite(sc.inv_boxcox1p, _inv_boxcox1p, y, lmbda)


# ---- gamma-function relatives, inverse erfc, and SciPy's spellings of NumPy functions ---------------------
def _nonpositive_integer(x):
    return ew.logical_and(ew.less_equal(x, 0.0), ew.equal(x, ew.floor(x)))


def _gammasgn(x):
    """The sign of Gamma(x): 1 for x > 0 (and 0), NaN at the negative integers (poles), else -1
    where floor(x) is odd."""
    fl = ew.floor(x)
    negative = ew.where_(ew.equal(ew.remainder(fl, 2.0), 1.0), -1.0, 1.0)
    at_pole = ew.where_(ew.equal(x, 0.0), ew.where_(ew.signbit(x), -1.0, 1.0), np.nan)
    sign = ew.where_(ew.greater(x, 0.0), 1.0, ew.where_(ew.equal(x, fl), at_pole, negative))
    return ew.where_(ew.isnan(x), x, sign)


@implements(sc.gammasgn)
def gammasgn(x):
    """scipy.special.gammasgn: the sign of the gamma function (no gradient)."""
    return _composite(sc.gammasgn, _gammasgn, x)


def _rgamma(x):
    pole = _nonpositive_integer(x)
    safe = ew.where_(pole, 1.0, x)
    return ew.where_(pole, 0.0, _gammasgn(safe) * ew.exp(-gammaln(safe)))


@implements(sc.rgamma)
def rgamma(x):
    """scipy.special.rgamma: 1 / Gamma(x), sign(Gamma) exp(-gammaln(x)), 0 at the poles."""
    return _composite(sc.rgamma, _rgamma, x)


def _loggamma(x):
    negative = ew.less(x, 0.0)
    return ew.where_(negative, np.nan, gammaln(ew.where_(negative, 1.0, x)))


@implements(sc.loggamma)
def loggamma(x):
    """scipy.special.loggamma of real x: gammaln for x >= 0, NaN for negative x (SciPy's real
    loop; its complex values are not supported)."""
    return _composite(sc.loggamma, _loggamma, x)


def _beta(a, b):
    """SciPy's: Gamma(a) Gamma(b) / Gamma(a + b) as sign * exp(betaln); where a is a pole (a
    non-positive integer) and b an integer with 1 - a - b > 0, the poles cancel:
    (-1)^b B(1 - a - b, b) (and with a and b swapped); at other poles inf."""
    def cancelling(p, q):
        return ew.logical_and(_nonpositive_integer(p), ew.logical_and(ew.equal(q, ew.floor(q)),
                                                                     ew.greater(1.0 - p - q, 0.0)))

    def regular(p, q):
        sign = _gammasgn(p) * _gammasgn(q) * ew.where_(_nonpositive_integer(p + q), 1.0, _gammasgn(p + q))
        return sign * ew.exp(betaln(p, q))

    a_pole, b_pole = _nonpositive_integer(a), _nonpositive_integer(b)
    at_pole = ew.logical_or(a_pole, b_pole)
    a_, b_ = ew.where_(at_pole, 1.0, a), ew.where_(at_pole, 1.0, b)
    # the cancelling poles: p the pole, q the integer; (-1)^q B(1 - p - q, q), both arguments >= 1
    p, q = ew.where_(a_pole, a, b), ew.where_(a_pole, b, a)
    cancel = cancelling(p, q)
    p_, q_ = ew.where_(cancel, 1.0 - p - q, 1.0), ew.where_(cancel, q, 1.0)
    reflected = ew.where_(ew.equal(ew.remainder(q_, 2.0), 1.0), -1.0, 1.0) * regular(p_, q_)
    return ew.where_(at_pole, ew.where_(cancel, reflected, np.inf), regular(a_, b_))


@implements(sc.beta)
def beta(a, b):
    """scipy.special.beta: sign * exp(betaln(a, b)) (relative error a few ulps times |betaln|)."""
    return _composite(sc.beta, _beta, a, b)


@implements(sc.erfcinv)
def erfcinv(y):
    """scipy.special.erfcinv(y) = -ndtri(y / 2) / sqrt(2), accurate for small y."""
    return _composite(sc.erfcinv, lambda v: -ndtri(0.5 * v) * (1.0 / math.sqrt(2.0)), y)


@implements(sc.cosm1)
def cosm1(x):
    """scipy.special.cosm1: cos(x) - 1 as -2 sin(x / 2)**2, accurate near 0."""
    return _composite(sc.cosm1, lambda v: -2.0 * ew.square(ew.sin(0.5 * v)), x)


@implements(sc.exp2)
def exp2(x):
    return _composite(sc.exp2, ew.exp2, x)


@implements(sc.exp10)
def exp10(x):
    """scipy.special.exp10: 10**x."""
    return _composite(sc.exp10, lambda v: ew.power(10.0, v), x)


@implements(sc.cbrt)
def cbrt(x):
    return _composite(sc.cbrt, ew.cbrt, x)


def factorial(n, exact=False, extend="zero"):
    """scipy.special.factorial(n, exact=False): Gamma(n + 1), 0 for negative n, in float64."""
    if exact or extend != "zero":
        raise NotSupportedError(f"scipy.special.factorial(..., exact=True) or extend= of traced values is "
                                f"not supported; exact=False is{where()}")
    n = as_operand(n)
    if n.dtype == bool:
        raise ValueError("Unsupported data type for `n` in factorial: bool")
    v = cast(n, np.float64)           # (SciPy's result is float64 for every dtype)
    return ew.where_(ew.less(v, 0.0), 0.0, gamma(v + 1.0))


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


# ---- SciPy's Python functions: logsumexp, softmax, log_softmax, polygamma, multigammaln -------------------
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


def multigammaln(a, d):
    """scipy.special.multigammaln(a, d): the log of the multivariate gamma function of dimension
    d (an integer known when tracing), d (d - 1) / 4 log(pi) + sum over j < d of
    gammaln(a - j / 2). SciPy raises where a <= (d - 1) / 2; on traced values that test would
    depend on the data, so it is not made (as in JAX): gammaln's values are returned there."""
    if isinstance(d, Tensor):
        raise NotSupportedError(f"scipy.special.multigammaln with a traced dimension d is not "
                                f"supported; d must be a Python int{where()}")
    dim = np.asarray(d)[()]
    if not np.isscalar(dim) or np.floor(dim) != dim:
        raise ValueError("d should be a positive integer (dimension)")
    dim = int(dim)
    a = as_operand(a)
    out = dim * (dim - 1) * 0.25 * math.log(math.pi)
    for j in range(dim):
        out = out + gammaln(a - 0.5 * j)
    return out


TRACED_FUNCTIONS = {"logsumexp": logsumexp, "softmax": softmax, "log_softmax": log_softmax,
                    "polygamma": polygamma, "multigammaln": multigammaln, "factorial": factorial}


def has_tensor(args, kwargs=None):
    """Is a traced value among these arguments (in lists, tuples and dicts too)? Objects standing
    for traced values (masked selections, complex pairs, LU factors) count."""
    stack = list(args) + list((kwargs or {}).values())
    while stack:
        a = stack.pop()
        if isinstance(a, Tensor) or getattr(type(a), "__jitgraph_defer__", False):
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


# a SciPy module's name -> {function name: the version for traced arguments}, installed into the
# module once it has been imported (jitgraph never imports scipy.signal, scipy.spatial, ...)
LIBRARY_FUNCTIONS = {}
_INSTALLED_MODULES = set()


def library_functions(module_name, functions):
    """Register jitgraph's versions of Python functions of SciPy module `module_name`; they are
    installed by `install_imported` (now, if the module is imported already)."""
    LIBRARY_FUNCTIONS.setdefault(module_name, {}).update(functions)
    install_imported()


def install_imported():
    """Install the registered functions of every registered module imported so far (once each).
    Called when a trace or an eager tape starts, and by an import hook (ops/stats.py)."""
    for name, functions in LIBRARY_FUNCTIONS.items():
        if name not in _INSTALLED_MODULES and name in sys.modules:
            install_wrappers(sys.modules[name], functions)
            _INSTALLED_MODULES.add(name)


def install():
    """Put jitgraph's wrappers of scipy.special's Python functions into the module (once)."""
    install_wrappers(sc, TRACED_FUNCTIONS)

install()
