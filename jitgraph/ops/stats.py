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
gradients stay finite. Where SciPy has no logcdf or logsf of its own, rv_continuous's
is used: log(cdf) below the median, log1p(-sf) above it. Gradients reach x, loc, scale
and the shape parameters through the formulas; the CDFs of t, gamma, beta, invgamma and
chi2 have no derivative with respect to their shape parameters here, nor binom's and
nbinom's with respect to n (a GradError says so).

The inverse CDFs `ppf` and `isf` (of norm, expon, logistic, laplace, uniform, lognorm,
cauchy, halfnorm, halfcauchy, weibull_min, pareto and gumbel_r: those with a closed form)
follow rv_continuous.ppf/isf: the quantile for q in (0, 1), the ends of the support at 0
and 1, NaN elsewhere. `scipy.stats.entropy` (Shannon entropy and Kullback-Leibler
divergence) is replaced in the module by a wrapper, as scipy.special's Python functions are.

The multivariate `multivariate_normal` and `dirichlet` have their logpdf and pdf here, on
the distribution, frozen with constant parameters, and frozen with traced ones (a
`TracedFrozen`, whose other methods are refused by name).
"""
import functools
import importlib.abc
import importlib.util
import math
import sys

import numpy as np
import scipy.special as sc

from ..core import Tensor
from ..errors import NotSupportedError, is_library_frame
from ..numpy_api import as_operand, broadcast_shapes, broadcast_to, cast, reshape, result_dtype, shape_of
from . import distance, filters, integrate, special  # noqa: F401  (they register SciPy functions)
from .special import has_tensor

LOG_SQRT_2PI = 0.9189385332046728
LOG_2PI = 1.8378770664093453
LOG_2 = 0.6931471805599453
LOG_PI = 1.1447298858494002
SQRT_2PI = 2.5066282746310002
SQRT_2 = 1.4142135623730951
SQRT_2_PI = 0.7978845608028654        # sqrt(2 / pi)
LOG_2_PI = -0.4515827052894548        # log(2 / pi)


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
    and its formulas in standardized form (z = (x - loc) / scale, shape parameters; ppf and isf
    of q in (0, 1)). The support and the point may be functions of the shape parameters, which
    are replaced by `safe_shapes` (default 1.0 each) where the check fails."""

    def __init__(self, support, safe_point, argcheck=None, safe_shapes=None, **formulas):
        self.support, self.safe_point, self.safe_shapes = support, safe_point, safe_shapes
        self.argcheck = argcheck or (lambda *shapes: _all_positive(shapes))
        formulas.setdefault("logcdf", _generic_log(formulas["cdf"], formulas["sf"]))
        formulas.setdefault("logsf", _generic_log(formulas["sf"], formulas["cdf"]))
        self.formulas = formulas

    def support_of(self, *shapes):
        return self.support(*shapes) if callable(self.support) else self.support

    def safe_point_of(self, *shapes):
        return self.safe_point(*shapes) if callable(self.safe_point) else self.safe_point


def _generic_log(f, complement):
    """rv_continuous's logcdf (logsf) from cdf and sf (sf and cdf): log(f) below (above) the median,
    log1p(-complement) from it on; the median is where f reaches 1/2."""
    def log_f(z, *shapes):
        value = f(z, *shapes)
        small = value < 0.5
        return _select(small, np.log(_safe(small, value, 0.5)),
                       np.log1p(-_safe(small, 0.5, complement(z, *shapes))))
    return log_f


class Discrete:
    """A discrete family on the integers: its parameter check, shape parameters inside it, its
    support (a function of the shape parameters: (lowest, highest)) and its formulas: logpmf, and
    cdf or sf, or logsf, for the distribution functions."""

    def __init__(self, argcheck, safe_shapes, support=lambda *shapes: (0.0, np.inf), **formulas):
        self.argcheck, self.safe_shapes, self.support, self.formulas = argcheck, safe_shapes, support, formulas


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


def _lognorm_logpdf(z, s):
    # SciPy's formula, -inf at z = 0
    pos = z > 0
    zs = _safe(pos, z, 1.0)
    lz = np.log(zs)
    return _select(pos, -(lz * lz) / (2.0 * (s * s)) - np.log(s * zs * SQRT_2PI), -np.inf)


def _binom_logpmf(k, n, p):
    # log C(n, k) = -log(n + 1) - betaln(n - k + 1, k + 1): no log-gammas of n cancel (SciPy's
    # gammaln formula loses |log Gamma(n)| ulps of it)
    return -np.log1p(n) - sc.betaln(n - k + 1.0, k + 1.0) + sc.xlogy(k, p) + sc.xlog1py(n - k, -p)


def _binom_check(n, p):
    return (n >= 0) & (n == np.floor(n)) & (p >= 0) & (p <= 1)


def _nbinom_logpmf(k, n, p):
    # log C(k + n - 1, k) = -log(n + k) - betaln(n, k + 1) (SciPy: gammaln(n + k) - gammaln(k + 1)
    # - gammaln(n), which loses |log Gamma(n + k)| ulps)
    return -np.log(n + k) - sc.betaln(n, k + 1.0) + n * np.log(p) + sc.xlog1py(k, -p)


def _nbinom_logcdf(k, n, p):
    # SciPy's: log1p(-I_{1-p}(k + 1, n)) where the CDF I_p(n, k + 1) exceeds 1/2, else its log
    cdf = sc.betainc(n, k + 1.0, p)
    upper = cdf > 0.5
    return _select(upper, np.log1p(-_safe(upper, sc.betainc(k + 1.0, n, 1.0 - p), 0.5)),
                   np.log(_safe(upper, 0.5, cdf)))


def _laplace_ppf(q):
    return np.where(q > 0.5, -np.log(2.0 * (1.0 - q)), np.log(2.0 * q))


def _cauchy_logpdf(z):
    # SciPy's: -log(pi) - log1p(z^2) for |z| < 1, -log(pi) - (2 log|z| + log1p(1/z^2)) beyond
    a = np.abs(z)
    small = a < 1.0
    big = _safe(small, 2.0, a)
    return _select(small, -LOG_PI - np.log1p(a * a),
                   -LOG_PI - (2.0 * np.log(big) + np.log1p((1.0 / big) ** 2)))


def _cauchy_ppf(q):
    # Boost's quantile (SciPy's): -1 / tan(pi P) with P = q, or q - 1 above 1/2; 0 at 1/2 (written
    # pi (q - 1/2), for its derivative)
    half = q == 0.5
    p = _safe(half, 0.25, np.where(q > 0.5, q - 1.0, q))
    return _select(half, np.pi * (q - 0.5), -1.0 / np.tan(np.pi * p))


def _invgamma_logpdf(z, a):
    # SciPy's formula, -inf at z = 0
    pos = z > 0
    zs = _safe(pos, z, 1.0)
    return _select(pos, -(a + 1.0) * np.log(zs) - sc.gammaln(a) - 1.0 / zs, -np.inf)


def _chi2_logpdf(z, df):
    return sc.xlogy(df / 2.0 - 1.0, z) - z / 2.0 - sc.gammaln(df / 2.0) - (LOG_2 * df) / 2.0


def _log_diff(log_p, log_q):
    """log(exp(log_p) - exp(log_q)) for log_p > log_q (SciPy's complex logsumexp); log_p where
    log_q = -inf."""
    none = log_q == -np.inf
    return _select(none, log_p, log_p + np.log1p(-np.exp(_safe(none, -1.0, log_q) - log_p)))


def _log_ndtr_inf(x):
    """log_ndtr(x), -inf at x = -inf with a zero derivative there (log_ndtr's is NaN)."""
    inf = x == -np.inf
    return _select(inf, -np.inf, sc.log_ndtr(_safe(inf, 0.0, x)))


def _log_gauss_mass(a, b):
    """log(ndtr(b) - ndtr(a)) for a < b, as SciPy's truncnorm computes it: in the left tail
    (b <= 0) from log_ndtr, in the right one (a > 0) by symmetry, else log1p(-ndtr(a) - ndtr(-b))."""
    left, right = b <= 0, a > 0
    al, bl = _safe(left, a, -1.0), _safe(left, b, 0.0)
    ar, br = _safe(right, a, 1.0), _safe(right, b, 2.0)
    central = np.logical_not(left | right)
    ac, bc = _safe(central, a, -1.0), _safe(central, b, 1.0)
    return _select(left, _log_diff(sc.log_ndtr(bl), _log_ndtr_inf(al)),
                   _select(right, _log_diff(sc.log_ndtr(-ar), _log_ndtr_inf(-br)),
                           np.log1p(-sc.ndtr(ac) - sc.ndtr(-bc))))


def _truncnorm_logcdf(z, a, b, swap=False):
    # SciPy's: log(mass(a, z) / mass(a, b)), and log1p(-sf) where that exceeds -0.1 (logsf: the
    # mirror image)
    mass = _log_gauss_mass(a, b)
    below, above = _log_gauss_mass(a, z) - mass, _log_gauss_mass(z, b) - mass
    value, other = (above, below) if swap else (below, above)
    near = value > -0.1
    return _select(near, np.log1p(-np.exp(_safe(near, other, -1.0))), value)


def _truncnorm_safe_point(a, b):
    fa, fb = np.isfinite(a), np.isfinite(b)
    return np.where(fa & fb, 0.5 * (a + b), np.where(fa, a + 1.0, np.where(fb, b - 1.0, 0.0)))


FAMILIES = {
    # (logcdf and logsf, where SciPy has no formula of its own for them: rv_continuous's, from cdf and sf)
    "norm": Continuous(
        (-np.inf, np.inf), 0.0, logpdf=_norm_logpdf,
        pdf=lambda z: np.exp(-0.5 * (z * z)) * 0.3989422804014327,
        cdf=sc.ndtr, logcdf=sc.log_ndtr, sf=lambda z: sc.ndtr(-z), logsf=lambda z: sc.log_ndtr(-z),
        ppf=sc.ndtri, isf=lambda q: -sc.ndtri(q)),
    "t": Continuous(
        (-np.inf, np.inf), 0.0, logpdf=_t_logpdf, pdf=lambda z, df: np.exp(_t_logpdf(z, df)),
        cdf=_t_cdf, sf=lambda z, df: _t_cdf(-z, df)),
    "laplace": Continuous(
        (-np.inf, np.inf), 0.0, logpdf=lambda z: -np.abs(z) - LOG_2, pdf=lambda z: 0.5 * np.exp(-np.abs(z)),
        cdf=_laplace_cdf, sf=lambda z: _laplace_cdf(-z), ppf=_laplace_ppf, isf=lambda q: -_laplace_ppf(q)),
    "logistic": Continuous(
        (-np.inf, np.inf), 0.0, logpdf=_logistic_logpdf, pdf=lambda z: np.exp(_logistic_logpdf(z)),
        cdf=sc.expit, logcdf=sc.log_expit, sf=lambda z: sc.expit(-z), logsf=lambda z: sc.log_expit(-z),
        ppf=sc.logit, isf=lambda q: -sc.logit(q)),
    "expon": Continuous(
        (0.0, np.inf), 1.0, logpdf=lambda z: -z, pdf=lambda z: np.exp(-z), cdf=lambda z: -np.expm1(-z),
        sf=lambda z: np.exp(-z), logsf=lambda z: -z, ppf=lambda q: -np.log1p(-q), isf=lambda q: -np.log(q)),
    "gamma": Continuous(
        (0.0, np.inf), 1.0, logpdf=_gamma_logpdf, pdf=lambda z, a: np.exp(_gamma_logpdf(z, a)),
        cdf=lambda z, a: sc.gammainc(a, z), sf=lambda z, a: sc.gammaincc(a, z)),
    "beta": Continuous(
        (0.0, 1.0), 0.5, logpdf=_beta_logpdf, pdf=lambda z, a, b: np.exp(_beta_logpdf(z, a, b)),
        cdf=lambda z, a, b: sc.betainc(a, b, z), sf=lambda z, a, b: sc.betaincc(a, b, z)),
    "uniform": Continuous(
        (0.0, 1.0), 0.5, logpdf=lambda z: 0.0 * z, pdf=lambda z: 0.0 * z + 1.0, cdf=lambda z: z,
        sf=lambda z: 1.0 - z, ppf=lambda q: q, isf=lambda q: 1.0 - q),
    "lognorm": Continuous(
        (0.0, np.inf), 1.0, logpdf=_lognorm_logpdf, pdf=lambda z, s: np.exp(_lognorm_logpdf(z, s)),
        cdf=lambda z, s: sc.ndtr(np.log(z) / s), logcdf=lambda z, s: sc.log_ndtr(np.log(z) / s),
        sf=lambda z, s: sc.ndtr(-np.log(z) / s), logsf=lambda z, s: sc.log_ndtr(-np.log(z) / s),
        ppf=lambda q, s: np.exp(s * sc.ndtri(q)), isf=lambda q, s: np.exp(s * -sc.ndtri(q))),
    "cauchy": Continuous(
        (-np.inf, np.inf), 0.0, logpdf=_cauchy_logpdf, pdf=lambda z: 1.0 / np.pi / (1.0 + z * z),
        cdf=lambda z: np.arctan2(1.0, -z) / np.pi, sf=lambda z: np.arctan2(1.0, z) / np.pi,
        ppf=_cauchy_ppf, isf=lambda q: -_cauchy_ppf(q)),
    "halfnorm": Continuous(
        (0.0, np.inf), 1.0, logpdf=lambda z: 0.5 * LOG_2_PI - z * z / 2.0,
        pdf=lambda z: SQRT_2_PI * np.exp(-z * z / 2.0), cdf=lambda z: sc.erf(z / SQRT_2),
        sf=lambda z: 2.0 * sc.ndtr(-z), ppf=lambda q: sc.ndtri((1.0 + q) / 2.0),
        isf=lambda q: -sc.ndtri(q / 2.0)),
    "halfcauchy": Continuous(
        (0.0, np.inf), 1.0, logpdf=lambda z: LOG_2_PI - np.log1p(z * z),
        pdf=lambda z: 2.0 / np.pi / (1.0 + z * z),
        cdf=lambda z: 2.0 / np.pi * np.arctan(z), sf=lambda z: 2.0 / np.pi * np.arctan2(1.0, z),
        ppf=lambda q: np.tan(np.pi / 2.0 * q), isf=lambda q: 1.0 / np.tan(np.pi * q / 2.0)),
    "invgamma": Continuous(
        (0.0, np.inf), 1.0, logpdf=_invgamma_logpdf, pdf=lambda z, a: np.exp(_invgamma_logpdf(z, a)),
        cdf=lambda z, a: sc.gammaincc(a, 1.0 / z), sf=lambda z, a: sc.gammainc(a, 1.0 / z)),
    "weibull_min": Continuous(
        (0.0, np.inf), 1.0, logpdf=lambda z, c: np.log(c) + sc.xlogy(c - 1.0, z) - z ** c,
        pdf=lambda z, c: c * z ** (c - 1.0) * np.exp(-z ** c), cdf=lambda z, c: -np.expm1(-z ** c),
        sf=lambda z, c: np.exp(-z ** c), logsf=lambda z, c: -z ** c,
        ppf=lambda q, c: (-np.log1p(-q)) ** (1.0 / c), isf=lambda q, c: (-np.log(q)) ** (1.0 / c)),
    "pareto": Continuous(
        (1.0, np.inf), 2.0, logpdf=lambda z, b: np.log(b * z ** (-b - 1.0)),
        pdf=lambda z, b: b * z ** (-b - 1.0),
        cdf=lambda z, b: 1.0 - z ** (-b), sf=lambda z, b: z ** (-b), ppf=lambda q, b: (1.0 - q) ** (-1.0 / b),
        isf=lambda q, b: q ** (-1.0 / b)),
    "gumbel_r": Continuous(
        (-np.inf, np.inf), 0.0, logpdf=lambda z: -z - np.exp(-z), pdf=lambda z: np.exp(-z - np.exp(-z)),
        cdf=lambda z: np.exp(-np.exp(-z)), logcdf=lambda z: -np.exp(-z), sf=lambda z: -np.expm1(-np.exp(-z)),
        ppf=lambda q: -np.log(-np.log(q)), isf=lambda q: -np.log(-np.log1p(-q))),
    "chi2": Continuous(
        (0.0, np.inf), 1.0, logpdf=_chi2_logpdf, pdf=lambda z, df: np.exp(_chi2_logpdf(z, df)),
        cdf=lambda z, df: sc.gammainc(df / 2.0, z / 2.0), sf=lambda z, df: sc.gammaincc(df / 2.0, z / 2.0)),
    # (SciPy's support is (a, b): a function of the shape parameters)
    "truncnorm": Continuous(
        lambda a, b: (a, b), _truncnorm_safe_point, lambda a, b: a < b, (-1.0, 1.0),
        logpdf=lambda z, a, b: _norm_logpdf(z) - _log_gauss_mass(a, b),
        pdf=lambda z, a, b: np.exp(_norm_logpdf(z) - _log_gauss_mass(a, b)),
        logcdf=_truncnorm_logcdf, cdf=lambda z, a, b: np.exp(_truncnorm_logcdf(z, a, b)),
        logsf=lambda z, a, b: _truncnorm_logcdf(z, a, b, swap=True),
        sf=lambda z, a, b: np.exp(_truncnorm_logcdf(z, a, b, swap=True))),
    "poisson": Discrete(
        lambda mu: mu >= 0, (1.0,), logpmf=_poisson_logpmf,
        cdf=lambda k, mu: sc.gammaincc(k + 1.0, mu), sf=lambda k, mu: sc.gammainc(k + 1.0, mu)),
    # P(X <= k) = I_{1-p}(n - k, k + 1), for k < n
    "binom": Discrete(
        _binom_check, (1.0, 0.5), lambda n, p: (0.0, n), logpmf=_binom_logpmf,
        cdf=lambda k, n, p: sc.betaincc(k + 1.0, n - k, p), sf=lambda k, n, p: sc.betainc(k + 1.0, n - k, p)),
    "bernoulli": Discrete(
        lambda p: (p >= 0) & (p <= 1), (0.5,), lambda p: (0.0, 1.0), logpmf=lambda k, p: _binom_logpmf(k, 1.0, p),
        cdf=lambda k, p: sc.betaincc(k + 1.0, 1.0 - k, p), sf=lambda k, p: sc.betainc(k + 1.0, 1.0 - k, p)),
    "geom": Discrete(
        lambda p: (p > 0) & (p <= 1), (0.5,), lambda p: (1.0, np.inf),
        logpmf=lambda k, p: sc.xlog1py(k - 1.0, -p) + np.log(p), cdf=lambda k, p: -np.expm1(np.log1p(-p) * k),
        logsf=lambda k, p: k * np.log1p(-p)),
    # P(X <= k) = I_p(n, k + 1)
    "nbinom": Discrete(
        lambda n, p: (n > 0) & (p > 0) & (p <= 1), (1.0, 0.5), logpmf=_nbinom_logpmf,
        cdf=lambda k, n, p: sc.betainc(n, k + 1.0, p), sf=lambda k, n, p: sc.betaincc(n, k + 1.0, p),
        logcdf=_nbinom_logcdf),
}

CONTINUOUS_METHODS = ("logpdf", "pdf", "logcdf", "cdf", "sf", "logsf")
QUANTILE_METHODS = ("ppf", "isf")        # of the continuous families with a closed form for them
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
    safe_shapes = family.safe_shapes or (1.0,) * len(shapes)
    shapes = [_safe(ok_shapes, s, safe) for s, safe in zip(shapes, safe_shapes)]
    lo, hi = family.support_of(*shapes)
    if method in ("ppf", "isf"):
        return _finish(_quantile(family, method, x, loc, scale, shapes, ok, positive, lo, hi), shape)
    z = (x - loc) / _safe(positive, scale, 1.0)
    if method in ("logpdf", "pdf"):
        inside = ok & (lo <= z) & (z <= hi)
    else:
        inside = ok & (lo < z) & (z < hi)
    z_safe = _safe(inside, z, family.safe_point_of(*shapes))
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


def _bound(end, loc, scale):
    """An end of the support in x: end * scale + loc (an infinite constant end stays itself)."""
    if isinstance(end, float) and not np.isfinite(end):
        return end
    return end * scale + loc


def _quantile(family, method, q, loc, scale, shapes, ok, positive, lo, hi):
    """rv_continuous.ppf or isf: formula(q) * scale + loc for q in (0, 1), the ends of the
    support at q = 0 and 1 (ppf: lower at 0; isf: lower at 1), NaN elsewhere and for invalid
    parameters (or a NaN loc)."""
    ok = ok & (loc == loc)
    inside = ok & (q > 0) & (q < 1)
    value = family.formulas[method](_safe(inside, q, 0.5), *shapes) * _safe(positive, scale, 1.0) + loc
    lower, upper = _bound(lo, loc, scale), _bound(hi, loc, scale)
    at_zero, at_one = (lower, upper) if method == "ppf" else (upper, lower)
    out = _select(inside, value, _select(q == 0, at_zero, _select(q == 1, at_one, np.nan)))
    return _select(np.logical_not(ok), np.nan, out)


def discrete(dist, method, k, args, kwds):
    """SciPy's rv_discrete.<method>(k, *args, **kwds), on traced values (integers k in the support)."""
    family = FAMILIES[dist.name]
    shapes, loc, _ = dist._parse_args(*args, **kwds)
    k, loc = _float64(k), _float64(loc)
    shapes = [_float64(s) for s in shapes]
    shape = _shape_of_all(k, loc, *shapes)
    ok = family.argcheck(*shapes)
    shapes = [_safe(ok, s, safe) for s, safe in zip(shapes, family.safe_shapes)]
    lo, hi = family.support(*shapes)
    k = k - loc
    if method in ("logpmf", "pmf"):
        # (SciPy evaluates the formula at k = inf too: NaN)
        inside = ok & (k >= lo) & (k <= hi) & (k == np.floor(k))
        k_safe = np.floor(_safe(inside, k, lo))      # k's gradient is 0: it takes integer values
        value = family.formulas["logpmf"](k_safe, *shapes)
        value = np.exp(value) if method == "pmf" else value
        out = _select(inside, value, 0.0 if method == "pmf" else -np.inf)
    else:
        inside = ok & (k >= lo) & (k < hi)
        k_safe = np.floor(_safe(inside, k, lo))
        formulas = family.formulas
        if method in formulas:
            value = formulas[method](k_safe, *shapes)
        else:
            base = "cdf" if method in ("cdf", "logcdf") else "sf"
            value = formulas[base](k_safe, *shapes) if base in formulas else np.exp(formulas["log" + base](k_safe, *shapes))
            value = np.clip(value, 0.0, 1.0)
            value = np.log(value) if method.startswith("log") else value
        at_end = {"cdf": (0.0, 1.0), "logcdf": (-np.inf, 0.0), "sf": (1.0, 0.0), "logsf": (0.0, -np.inf)}
        below, above = at_end[method]
        out = _select(inside, value, _select(k >= hi, above, below))
    out = _select(np.logical_not(ok) | _isnan(k), np.nan, out)
    return _finish(out, shape)


def traced_method(dist, method, args, kwds):
    """`dist.method(*args, **kwds)` with traced values among the arguments."""
    family = FAMILIES.get(dist.name)
    if family is not None:
        methods = family.formulas if isinstance(family, Continuous) else DISCRETE_METHODS
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


# ---- multivariate_normal and dirichlet --------------------------------------------------------------------
def _mvn_parameters(dist, mean, cov, allow_singular):
    """(dim, mean, log-determinant of cov, whiten) from multivariate_normal's parameters, as SciPy
    reads them (the dimension from mean, else from cov; a scalar or 1-d cov is diagonal): whiten
    maps deviations (..., dim) to ones of identity covariance. A constant cov is SciPy's own
    (its validation and factorization); a traced one is factored by Cholesky (a scalar or 1-d one
    directly), where a matrix that is not positive definite raises when the function runs."""
    if mean is None:
        dim = 1 if cov is None or len(shape_of(cov)) < 2 else shape_of(cov)[0]
        mean = np.zeros(dim)
    else:
        mean = _float64(mean)
        dim = int(np.prod(shape_of(mean)))
        if dim == 1:
            mean = reshape(mean, (1,))
    if len(shape_of(mean)) != 1:
        raise ValueError(f"Array 'mean' must be a vector of length {dim}.{_location()}")
    if not has_tensor((cov,)):
        _, _, cov_object = dist._process_parameters(np.zeros(dim), 1.0 if cov is None else cov, allow_singular)
        if np.any(cov_object.rank < dim):
            raise NotSupportedError(f"scipy.stats.multivariate_normal with a singular covariance matrix is not "
                                    f"supported on traced values{_location()}")
        u = cov_object.whiten(np.eye(dim))       # (whiten is linear: x @ u)
        return dim, mean, float(cov_object.log_pdet), lambda dev: dev @ u
    cov = _float64(cov)
    if dim == 1:
        cov = reshape(cov, (1,))
    nd = len(shape_of(cov))
    if nd == 0 or nd == 1 and shape_of(cov)[0] == dim:
        logdet = dim * np.log(cov) if nd == 0 else np.sum(np.log(cov))
        sd = np.sqrt(cov)
        return dim, mean, logdet, lambda dev: dev / sd
    if nd != 2 or tuple(shape_of(cov)) != (dim, dim):
        raise ValueError(f"Dimension mismatch: array 'cov' is of shape {tuple(shape_of(cov))}, but 'mean' is a "
                         f"vector of length {dim}.{_location()}")
    chol = np.linalg.cholesky(cov)

    def whiten(dev):
        rows = reshape(dev, (-1, dim))
        return reshape(np.linalg.solve(chol, rows.T).T, shape_of(dev))    # (a triangular solve)
    return dim, mean, 2.0 * np.sum(np.log(np.diagonal(chol))), whiten


def _mvn_value(method, x, dim, mean, logdet, whiten):
    # SciPy's _process_quantiles, _logpdf and _squeeze_output
    x = _float64(x)
    nd = len(shape_of(x))
    if nd == 0:
        x = reshape(x, (1,))
    elif nd == 1:
        x = reshape(x, (-1, 1) if dim == 1 else (1, -1))
    z = whiten(x - mean)
    out = -0.5 * (dim * LOG_2PI + logdet + np.sum(z * z, axis=-1))
    return np.squeeze(np.exp(out) if method == "pdf" else out)


def multivariate_normal(dist, method, x, mean=None, cov=1, allow_singular=False):
    """scipy.stats.multivariate_normal.<logpdf|pdf>(x, mean, cov): -(dim log(2 pi) + log det(cov) +
    |L^-1 (x - mean)|^2) / 2 with cov = L L^T, over the last axis of x (one point: a scalar)."""
    return _mvn_value(method, x, *_mvn_parameters(dist, mean, cov, allow_singular))


def _dirichlet_logpdf(x, alpha):
    # SciPy's: x's first axis holds the components (the last one 1 - sum of the others if missing)
    x, alpha = _float64(x), _float64(alpha)
    k = shape_of(alpha)[0]
    if shape_of(x)[0] == k - 1:
        x = np.concatenate([x, reshape(1.0 - np.sum(x, axis=0), (1,) + tuple(shape_of(x)[1:]))], axis=0)
    lnb = np.sum(sc.gammaln(alpha)) - sc.gammaln(np.sum(alpha))
    return np.squeeze(np.sum(sc.xlogy(alpha - 1.0, x.T).T, axis=0) - lnb)


def dirichlet(dist, method, x, alpha):
    """scipy.stats.dirichlet.<logpdf|pdf>(x, alpha). SciPy's checks of alpha and x (alpha > 0, x in
    the simplex) are made where they are constants; traced values are not checked."""
    from scipy.stats import _multivariate
    if not has_tensor((alpha,)):
        alpha = _multivariate._dirichlet_check_parameters(alpha)
        if not has_tensor((x,)):
            x = _multivariate._dirichlet_check_input(alpha, x)
    if len(shape_of(alpha)) != 1 or shape_of(x)[0] not in (shape_of(alpha)[0], shape_of(alpha)[0] - 1):
        raise ValueError(f"Vector 'x' must have either the same number of entries as, or one entry fewer than, "
                         f"parameter vector 'a', but alpha.shape = {tuple(shape_of(alpha))} and x.shape = "
                         f"{tuple(shape_of(x))}.{_location()}")
    out = _dirichlet_logpdf(x, alpha)
    return np.exp(out) if method == "pdf" else out


class TracedFrozen:
    """`multivariate_normal(mean, cov)` or `dirichlet(alpha)` with traced parameters: logpdf and pdf."""

    def __init__(self, name, logpdf):
        self.name, self._logpdf = name, logpdf

    def logpdf(self, x):
        return self._logpdf(x)

    def pdf(self, x):
        return np.exp(self._logpdf(x))

    def __getattr__(self, attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
        raise NotSupportedError(f"scipy.stats.{self.name}(...).{attr} with traced parameters is not supported"
                                f"{_location()}")


def _frozen_mvn(dist, mean=None, cov=1, allow_singular=False, seed=None, **kwds):
    params = _mvn_parameters(dist, mean, cov, allow_singular)
    return TracedFrozen("multivariate_normal", lambda x: _mvn_value("logpdf", x, *params))


def _frozen_dirichlet(dist, alpha, seed=None):
    return TracedFrozen("dirichlet", lambda x: dirichlet(dist, "logpdf", x, alpha))


def _multivariate_methods():
    """class -> {method: its version for traced arguments (self first)}."""
    from scipy.stats import _multivariate as mv
    return {
        mv.multivariate_normal_gen: {
            "logpdf": lambda self, *a, **k: multivariate_normal(self, "logpdf", *a, **k),
            "pdf": lambda self, *a, **k: multivariate_normal(self, "pdf", *a, **k),
            "__call__": _frozen_mvn},
        mv.multivariate_normal_frozen: {
            "logpdf": lambda self, x: multivariate_normal(self._dist, "logpdf", x, self.mean, self.cov_object,
                                                          self.allow_singular),
            "pdf": lambda self, x: multivariate_normal(self._dist, "pdf", x, self.mean, self.cov_object,
                                                       self.allow_singular)},
        mv.dirichlet_gen: {
            "logpdf": lambda self, x, alpha: dirichlet(self, "logpdf", x, alpha),
            "pdf": lambda self, x, alpha: dirichlet(self, "pdf", x, alpha),
            "__call__": _frozen_dirichlet},
        mv.dirichlet_frozen: {
            "logpdf": lambda self, x: dirichlet(self._dist, "logpdf", x, self.alpha),
            "pdf": lambda self, x: dirichlet(self._dist, "pdf", x, self.alpha)},
    }


# ---- entropy --------------------------------------------------------------------------------------------
def entropy(pk, qk=None, base=None, axis=0, *, nan_policy="propagate", keepdims=False):
    """scipy.stats.entropy(pk, qk=None, base=None, axis=0) on traced values: pk (and qk) normalized
    to sum 1 along axis, then -sum(pk log pk) (scipy.special.entr: 0 log 0 = 0) or, with qk, the
    Kullback-Leibler divergence sum(pk log(pk / qk)) (scipy.special.rel_entr: inf where qk = 0 <
    pk), divided by log(base). As SciPy: pk and qk broadcast together and promoted to a common
    floating dtype, axis=None over all elements, a scalar pk as one of one element."""
    if nan_policy != "propagate":
        raise NotSupportedError(f"scipy.stats.entropy with nan_policy={nan_policy!r} is not supported on traced "
                                f"values (only 'propagate' is){_location()}")
    if base is not None and not isinstance(base, Tensor) and base <= 0:
        raise ValueError("`base` must be a positive number or `None`.")
    xs = [as_operand(pk)] + ([] if qk is None else [as_operand(qk)])
    dt = result_dtype(*xs)
    dt = dt if dt.kind == "f" else np.dtype(np.float64)
    shape = tuple(broadcast_shapes(*[shape_of(x) for x in xs]))
    xs = [broadcast_to(cast(x, dt), shape) for x in xs]
    flat = axis is None and len(shape) > 1
    if axis is None or not shape:
        xs = [reshape(x, (-1,)) for x in xs]
        axis = 0
    pk, qk = xs[0] / np.sum(xs[0], axis=axis, keepdims=True), xs[1:]
    if qk:
        vec = sc.rel_entr(pk, qk[0] / np.sum(qk[0], axis=axis, keepdims=True))
    else:
        vec = sc.entr(pk)
    out = np.sum(vec, axis=axis, keepdims=keepdims)
    if keepdims and flat:
        out = reshape(out, (1,) * len(shape))
    if base is not None:
        out = out / (np.log(base) if isinstance(base, Tensor) else math.log(base))
    return out


TRACED_FUNCTIONS = {"entropy": entropy}


# ---- installing the wrappers -------------------------------------------------------------------------
def _wrap_method(cls, method, traced=None):
    """Wrap cls.method: SciPy's for arguments without traced values, else `traced(self, *args,
    **kwds)` (by default the univariate table's `traced_method`)."""
    original = cls.__dict__[method]
    if getattr(original, "__jitgraph_original__", None) is not None:
        return

    @functools.wraps(original)
    def wrapper(self, *args, **kwds):
        if not has_tensor(args, kwds):
            return original(self, *args, **kwds)
        if traced is not None:
            return traced(self, *args, **kwds)
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
    for cls, methods in _multivariate_methods().items():
        for method, traced in methods.items():
            _wrap_method(cls, method, traced)


_INSTALLED = []
def _watched(name):
    return name == "scipy.stats" or name in special.LIBRARY_FUNCTIONS


class _InstallOnImport(importlib.abc.MetaPathFinder):
    """Installs the wrappers as soon as scipy.stats or a module with functions registered by
    `special.library_functions` (scipy.signal, scipy.spatial.distance, ...) has been imported,
    so that a name imported from it after jitgraph (`from scipy.signal import convolve2d`) is
    jitgraph's wrapper, not SciPy's function, even before the first trace. Only the loader of
    those modules is wrapped; a failure to install never fails SciPy's import."""

    def __init__(self):
        self.finding = set()

    def find_spec(self, name, path=None, target=None):
        if not _watched(name) or name in self.finding:
            return None
        self.finding.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.finding.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _InstallingLoader(spec.loader)
        return spec


class _InstallingLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        try:
            install()
        except Exception:       # the wrappers are then installed when a trace starts
            pass

    def __getattr__(self, name):
        return getattr(self.loader, name)


def install():
    """Install jitgraph's versions of SciPy's Python functions that convert their arguments:
    scipy.special's logsumexp/softmax/log_softmax/polygamma and, once scipy.stats has been
    imported, the methods of its distributions and scipy.stats.entropy. Called when a trace or
    an eager tape starts; SciPy's modules are never imported here. The functions registered by
    `special.library_functions` (scipy.linalg, scipy.signal, scipy.ndimage,
    scipy.spatial.distance, scipy.integrate) likewise."""
    special.install_imported()
    if _INSTALLED:
        return
    special.install()
    if "scipy.stats" in sys.modules:
        _install_distributions()
        special.install_wrappers(sys.modules["scipy.stats"], TRACED_FUNCTIONS)
        _INSTALLED.append(True)


sys.meta_path.insert(0, _InstallOnImport())
install()
