"""scipy.stats log-densities, densities and distribution functions on traced values.

`scipy.stats.norm.logpdf(x, loc, scale)` (and `norm(loc, scale).logpdf(x)`) converts its
arguments with NumPy. `install()` wraps the public methods of SciPy's distribution
classes: a call with a traced value among its arguments runs the formula of the table
below, written with jitgraph's functions (so it is traced, differentiated and compiled
like any NumPy code); any other call runs SciPy's method unchanged. Methods and
distributions without a formula here are refused by name.

Each formula follows SciPy's own (its `_logpdf`, `_cdf`, ... in standardized form, and
the masks of `rv_continuous`/`rv_discrete`: NaN for invalid parameters, the values
outside the support), evaluated at safe points where a mask discards it so that
gradients stay finite. Gradients reach x, loc, scale and the shape parameters through
the formulas; the CDFs of t, gamma, beta and poisson have no derivative with respect
to their shape parameters here (a GradError says so).
"""
import functools
import sys

import numpy as np
import scipy.special as sc

from ..core import Tensor
from ..errors import NotSupportedError, is_library_frame
from ..numpy_api import as_operand, broadcast_shapes, broadcast_to, cast, shape_of
from . import special
from .special import has_tensor

LOG_SQRT_2PI = 0.9189385332046728
LOG_2 = 0.6931471805599453


def _location():
    """' (at FILE:LINE: source)' for the innermost frame that is not jitgraph's, NumPy's or
    SciPy's (a frozen distribution's method calls the distribution's from SciPy's code)."""
    scipy_dir = sc.__file__.rsplit("special", 1)[0]
    frame = sys._getframe(1)
    while frame is not None:
        if not is_library_frame(frame) and not frame.f_code.co_filename.startswith(scipy_dir):
            return f" (at {frame.f_code.co_filename}:{frame.f_lineno})"
        frame = frame.f_back
    return ""


# ---- values and masks ------------------------------------------------------------------------------
def _float64(x):
    """x in SciPy's computing dtype: float64 (traced values cast, others converted)."""
    if isinstance(x, Tensor):
        return cast(x, np.float64) if x.dtype != np.float64 else x
    return np.asarray(x, dtype=np.float64)


def _known(cond):
    """True or False if `cond` (a boolean array or traced value) is known to be true or
    false everywhere when tracing, else None."""
    if isinstance(cond, Tensor):
        return None
    cond = np.asarray(cond)
    return True if cond.all() else False if not cond.any() else None


def _select(cond, value, other):
    """np.where(cond, value, other), with the where left out when cond is known."""
    k = _known(cond)
    if k is True:
        return value
    if k is False:
        return other
    return np.where(cond, value, other)


def _isnan(x):
    return np.isnan(x) if isinstance(x, Tensor) else np.isnan(np.asarray(x))


def _safe(cond, x, point):
    """x where cond holds, else a point inside the formula's domain (finite derivatives)."""
    return _select(cond, x, point)


class Continuous:
    """A continuous family: its support, its parameter check, a point inside its support,
    and its formulas in standardized form (z = (x - loc) / scale, shape parameters)."""

    def __init__(self, support, safe_point, argcheck=None, **formulas):
        self.support, self.safe_point = support, safe_point
        self.argcheck = argcheck or (lambda *shapes: _all_positive(shapes))
        self.formulas = formulas


class Discrete:
    """A discrete family on the integers >= 0 (its parameter check and formulas)."""

    def __init__(self, argcheck, safe_shapes, **formulas):
        self.argcheck, self.safe_shapes, self.formulas = argcheck, safe_shapes, formulas


def _all_positive(shapes):
    ok = True
    for s in shapes:
        ok = ok & (s > 0)
    return ok


# ---- the formulas --------------------------------------------------------------------------------
def _norm_logpdf(z):
    return -0.5 * (z * z) - LOG_SQRT_2PI


def _normal_limit(formula, normal):
    """The t distribution's `formula(z, df)`, or the normal distribution's `normal(z)` where df
    is infinite (as SciPy does); the t formula sees df = 1 there."""
    def f(z, df):
        inf = df == np.inf
        if _known(inf) is False:
            return formula(z, df)
        return np.where(inf, normal(z), formula(z, _select(inf, 1.0, df)))
    return f


def _t_logpdf_finite(z, df):
    # log Gamma((df+1)/2) - log Gamma(df/2) = log sqrt(pi) - betaln(df/2, 1/2): no large
    # log-gammas cancel for large df (SciPy writes log(poch(df/2, 1/2)))
    return -sc.betaln(0.5 * df, 0.5) - 0.5 * np.log(df) - 0.5 * (df + 1.0) * np.log1p(z * z / df)


def _t_cdf_finite(z, df):
    # SciPy's stdtr, as Boost computes the t CDF: p = P(T < -|z|) from I_{df/(df+z^2)}(df/2, 1/2),
    # or from its complement in z^2/(df+z^2) where that is the better conditioned argument
    # (at z = 0 the chain rule would multiply the incomplete beta's infinite derivative by
    # d(z^2)/dz = 0: there the CDF is written 1/2 + z pdf(0), exact in value and derivative)
    zero = z == 0
    zs = _select(zero, 1.0, z)
    t2 = zs * zs
    p_small = 0.5 * sc.betaincc(0.5, 0.5 * df, t2 / (df + t2))
    p_large = 0.5 * sc.betainc(0.5 * df, 0.5, df / (df + t2))
    p = _select(df > 2.0 * t2, p_small, p_large)
    cdf = np.where(zs > 0, 1.0 - p, p)
    return _select(zero, 0.5 + z * np.exp(_t_logpdf_finite(0.0 * z, df)), cdf)


_t_logpdf = _normal_limit(_t_logpdf_finite, _norm_logpdf)
_t_cdf = _normal_limit(_t_cdf_finite, sc.ndtr)


def _laplace_cdf(z):
    e = np.exp(-np.abs(z))
    return np.where(z > 0, 1.0 - 0.5 * e, 0.5 * e)


def _logistic_logpdf(z):
    y = -np.abs(z)
    return y - 2.0 * np.log1p(np.exp(y))


def _gamma_logpdf(z, a):
    return sc.xlogy(a - 1.0, z) - z - sc.gammaln(a)


def _beta_logpdf(z, a, b):
    return sc.xlog1py(b - 1.0, -z) + sc.xlogy(a - 1.0, z) - sc.betaln(a, b)


def _poisson_logpmf(k, mu):
    return sc.xlogy(k, mu) - sc.gammaln(k + 1.0) - mu


FAMILIES = {
    "norm": Continuous(
        (-np.inf, np.inf), 0.0, logpdf=_norm_logpdf,
        pdf=lambda z: np.exp(-0.5 * (z * z)) * 0.3989422804014327,
        cdf=sc.ndtr, logcdf=sc.log_ndtr, sf=lambda z: sc.ndtr(-z), logsf=lambda z: sc.log_ndtr(-z)),
    "t": Continuous(
        (-np.inf, np.inf), 0.0, logpdf=_t_logpdf, pdf=lambda z, df: np.exp(_t_logpdf(z, df)),
        cdf=_t_cdf, logcdf=lambda z, df: np.log(_t_cdf(z, df)), sf=lambda z, df: _t_cdf(-z, df),
        logsf=lambda z, df: np.log(_t_cdf(-z, df))),
    "laplace": Continuous(
        (-np.inf, np.inf), 0.0, logpdf=lambda z: -np.abs(z) - LOG_2, pdf=lambda z: 0.5 * np.exp(-np.abs(z)),
        cdf=_laplace_cdf, logcdf=lambda z: np.log(_laplace_cdf(z)), sf=lambda z: _laplace_cdf(-z),
        logsf=lambda z: np.log(_laplace_cdf(-z))),
    "logistic": Continuous(
        (-np.inf, np.inf), 0.0, logpdf=_logistic_logpdf, pdf=lambda z: np.exp(_logistic_logpdf(z)),
        cdf=sc.expit, logcdf=sc.log_expit, sf=lambda z: sc.expit(-z), logsf=lambda z: sc.log_expit(-z)),
    "expon": Continuous(
        (0.0, np.inf), 1.0, logpdf=lambda z: -z, pdf=lambda z: np.exp(-z), cdf=lambda z: -np.expm1(-z),
        logcdf=lambda z: np.log(-np.expm1(-z)), sf=lambda z: np.exp(-z), logsf=lambda z: -z),
    "gamma": Continuous(
        (0.0, np.inf), 1.0, logpdf=_gamma_logpdf, pdf=lambda z, a: np.exp(_gamma_logpdf(z, a)),
        cdf=lambda z, a: sc.gammainc(a, z), logcdf=lambda z, a: np.log(sc.gammainc(a, z)),
        sf=lambda z, a: sc.gammaincc(a, z), logsf=lambda z, a: np.log(sc.gammaincc(a, z))),
    "beta": Continuous(
        (0.0, 1.0), 0.5, logpdf=_beta_logpdf, pdf=lambda z, a, b: np.exp(_beta_logpdf(z, a, b)),
        cdf=lambda z, a, b: sc.betainc(a, b, z), logcdf=lambda z, a, b: np.log(sc.betainc(a, b, z)),
        sf=lambda z, a, b: sc.betaincc(a, b, z), logsf=lambda z, a, b: np.log(sc.betaincc(a, b, z))),
    "poisson": Discrete(
        lambda mu: mu >= 0, (1.0,), logpmf=_poisson_logpmf,
        cdf=lambda k, mu: sc.gammaincc(k + 1.0, mu), sf=lambda k, mu: sc.gammainc(k + 1.0, mu)),
}

CONTINUOUS_METHODS = ("logpdf", "pdf", "logcdf", "cdf", "sf", "logsf")
DISCRETE_METHODS = ("logpmf", "pmf", "logcdf", "cdf", "sf", "logsf")


# ---- rv_continuous and rv_discrete, on traced values ---------------------------------------------------
def _shape_of_all(*xs):
    return broadcast_shapes(*[shape_of(x) for x in xs])


def _finish(out, shape):
    """The result in the shape of all the arguments broadcast together (as SciPy's)."""
    return broadcast_to(as_operand(out), shape)


def continuous(dist, method, x, args, kwds):
    """SciPy's rv_continuous.<method>(x, *args, **kwds), on traced values."""
    family = FAMILIES[dist.name]
    shapes, loc, scale = dist._parse_args(*args, **kwds)
    x, loc, scale = _float64(x), _float64(loc), _float64(scale)
    shapes = [_float64(s) for s in shapes]
    shape = _shape_of_all(x, loc, scale, *shapes)
    ok_shapes = family.argcheck(*shapes)
    positive = scale > 0
    ok = ok_shapes & positive
    z = (x - loc) / _safe(positive, scale, 1.0)
    lo, hi = family.support
    shapes = [_safe(ok_shapes, s, 1.0) for s in shapes]
    if method in ("logpdf", "pdf"):
        inside = ok & (lo <= z) & (z <= hi)
    else:
        inside = ok & (lo < z) & (z < hi)
    z_safe = _safe(inside, z, family.safe_point)
    value = family.formulas[method](z_safe, *shapes)
    if method == "logpdf":
        value = value - np.log(_safe(positive, scale, 1.0))
    elif method == "pdf":
        value = value / _safe(positive, scale, 1.0)
    # outside the support: the density is 0, the CDF 0 below and 1 above, the SF the reverse
    below, above = {"logpdf": (-np.inf, -np.inf), "pdf": (0.0, 0.0), "cdf": (0.0, 1.0),
                    "logcdf": (-np.inf, 0.0), "sf": (1.0, 0.0), "logsf": (0.0, -np.inf)}[method]
    outside = _select(z >= hi if method not in ("logpdf", "pdf") else z > hi, above, below)
    out = _select(inside, value, outside)
    out = _select(np.logical_not(ok) | _isnan(z), np.nan, out)
    return _finish(out, shape)


def discrete(dist, method, k, args, kwds):
    """SciPy's rv_discrete.<method>(k, *args, **kwds), on traced values (integers k >= 0)."""
    family = FAMILIES[dist.name]
    shapes, loc, _ = dist._parse_args(*args, **kwds)
    k, loc = _float64(k), _float64(loc)
    shapes = [_float64(s) for s in shapes]
    shape = _shape_of_all(k, loc, *shapes)
    ok = family.argcheck(*shapes)
    shapes = [_safe(ok, s, safe) for s, safe in zip(shapes, family.safe_shapes)]
    k = k - loc
    if method in ("logpmf", "pmf"):
        # (SciPy evaluates the formula at k = inf too: NaN)
        inside = ok & (k >= 0) & (k == np.floor(k))
        k_safe = np.floor(_safe(inside, k, 0.0))      # k's gradient is 0: it takes integer values
        value = family.formulas["logpmf"](k_safe, *shapes)
        value = np.exp(value) if method == "pmf" else value
        out = _select(inside, value, 0.0 if method == "pmf" else -np.inf)
    else:
        inside = ok & (k >= 0) & (k < np.inf)
        k_safe = np.floor(_safe(inside, k, 0.0))
        base = "cdf" if method in ("cdf", "logcdf") else "sf"
        value = np.clip(family.formulas[base](k_safe, *shapes), 0.0, 1.0)
        value = np.log(value) if method.startswith("log") else value
        at_end = {"cdf": (0.0, 1.0), "logcdf": (-np.inf, 0.0), "sf": (1.0, 0.0), "logsf": (0.0, -np.inf)}
        below, above = at_end[method]
        out = _select(inside, value, _select(k >= np.inf, above, below))
    out = _select(np.logical_not(ok) | _isnan(k), np.nan, out)
    return _finish(out, shape)


def traced_method(dist, method, args, kwds):
    """`dist.method(*args, **kwds)` with traced values among the arguments."""
    family = FAMILIES.get(dist.name)
    if family is not None:
        methods = CONTINUOUS_METHODS if isinstance(family, Continuous) else DISCRETE_METHODS
        if method in methods:
            if not args:
                raise TypeError(f"scipy.stats.{dist.name}.{method}() missing its first argument")
            run = continuous if isinstance(family, Continuous) else discrete
            return run(dist, method, args[0], args[1:], kwds)
    if method == "freeze":
        raise NotSupportedError(f"scipy.stats.{dist.name} with traced parameters is not supported"
                                f"{_location()}")
    raise NotSupportedError(f"scipy.stats.{dist.name}.{method} is not supported on traced values"
                            f"{_location()}")


# ---- installing the wrappers -------------------------------------------------------------------------
def _wrap_method(cls, method):
    original = cls.__dict__[method]
    if getattr(original, "__jitgraph_original__", None) is not None:
        return

    @functools.wraps(original)
    def wrapper(self, *args, **kwds):
        if not has_tensor(args, kwds):
            return original(self, *args, **kwds)
        if method == "freeze" and self.name in FAMILIES:
            return original(self, *args, **kwds)     # the frozen object's methods come back here
        return traced_method(self, method, args, kwds)
    wrapper.__jitgraph_original__ = original
    setattr(cls, method, wrapper)


def _install_distributions():
    infrastructure = sys.modules["scipy.stats._distn_infrastructure"]
    for cls in (infrastructure.rv_generic, infrastructure.rv_continuous, infrastructure.rv_discrete):
        for method, fn in list(vars(cls).items()):
            if not method.startswith("_") and callable(fn) and not isinstance(fn, (type, property)):
                _wrap_method(cls, method)


_INSTALLED = []


def install():
    """Install jitgraph's versions of SciPy's Python functions that convert their arguments:
    scipy.special's logsumexp/softmax/log_softmax/polygamma and, once scipy.stats has been
    imported, the methods of its distributions. Called when a trace or an eager tape starts;
    SciPy's modules are never imported here."""
    if _INSTALLED:
        return
    special.install()
    if "scipy.stats" in sys.modules:
        _install_distributions()
        _INSTALLED.append(True)
