"""scipy.spatial.distance on traced values: cdist, pdist, squareform and the metrics between
two vectors.

No primitives of their own. A metric is written once, over two operands broadcast against
each other and reduced along their last axis: `cdist` broadcasts XA[:, None, :] against
XB[None, :, :] (the difference is fused into the reduction, never stored), `pdist` computes
the same for X against itself and gathers the upper triangle, and the two-vector functions
(`euclidean(u, v)`) call the metric on u and v.

Values agree with SciPy's to rounding (SciPy sums a pair's terms in its own order). Each
metric's dtype is SciPy's: cdist and pdist compute in float64; the two-vector functions
keep a float32 input's dtype where SciPy does.

Gradients where SciPy's formula has none: a root of a zero sum (the euclidean, minkowski,
seuclidean and mahalanobis distances between equal vectors, as on cdist(X, X)'s diagonal)
has gradient zero, as torch.cdist's, instead of NaN from 0 * inf; canberra's 0/0 terms
(SciPy's nansum drops them) contribute nothing. hamming and jaccard (which compares nonzero-ness, as
SciPy's) count unequal entries and have gradient zero.

`squareform` converts without SciPy's `checks` (a traced matrix's symmetry and zero diagonal
are not known while tracing). A callable metric and `out=` are refused.
"""
import builtins

import numpy as np

from ..core import Tensor
from ..errors import NotSupportedError, where
from ..numpy_api import as_operand, cast, reshape, shape_of, transpose, zeros_like
from . import elementwise as ew
from . import reduce as rd
from .index import getitem
from .linalg import inv
from .order import cov
from .shape import concatenate
from .special import library_functions, rel_entr

_FLOAT64 = np.dtype(np.float64)


def _traced(*xs):
    return builtins.any(isinstance(x, Tensor) for x in xs)


def _safe_root(s, p=2.0):
    """s ** (1 / p) for s >= 0, with gradient 0 where s == 0 (not 0 * inf)."""
    pos = ew.greater(s, 0.0)
    safe = ew.where_(pos, s, 1.0)
    root = ew.sqrt(safe) if p == 2.0 else ew.power(safe, 1.0 / p)
    return ew.where_(pos, root, 0.0)


def _normalized(w):
    return w / rd.sum(w)


def _weighted_sum(t, w):
    return rd.sum(t if w is None else t * w, axis=-1)


def _minkowski(d, p, w):
    if p <= 0:
        raise ValueError("p must be greater than 0")
    a = ew.absolute(d)
    if p == np.inf:
        return rd.amax(a if w is None else a * ew.not_equal(w, 0.0), axis=-1)
    if p == 1:
        return _weighted_sum(a, w)
    if p == 2:
        return _safe_root(_weighted_sum(d * d, w))
    return _safe_root(_weighted_sum(ew.power(a, float(p)), w), float(p))


def _cosine_like(u, v, w, centered):
    if w is not None:
        w = _normalized(w)
    if centered:
        um = rd.mean(u, axis=-1, keepdims=True) if w is None else rd.sum(u * w, axis=-1, keepdims=True)
        vm = rd.mean(v, axis=-1, keepdims=True) if w is None else rd.sum(v * w, axis=-1, keepdims=True)
        u, v = u - um, v - vm
    uv, uu, vv = _weighted_sum(u * v, w), _weighted_sum(u * u, w), _weighted_sum(v * v, w)
    return ew.clip(1.0 - uv / ew.sqrt(uu * vv), 0.0, 2.0)


def _canberra(u, v, w):
    den = ew.absolute(u) + ew.absolute(v)
    pos = ew.greater(den, 0.0)
    t = ew.where_(pos, ew.absolute(u - v) / ew.where_(pos, den, 1.0), 0.0)
    return _weighted_sum(t, w)


def _count_fraction(unequal, counted, w):
    """sum(w * unequal) / sum(w * counted) (0 where nothing is counted)."""
    a = _weighted_sum(cast(unequal, _FLOAT64), w)
    b = _weighted_sum(cast(counted, _FLOAT64), w)
    nonzero = ew.not_equal(b, 0.0)
    return ew.where_(nonzero, a / ew.where_(nonzero, b, 1.0), 0.0)


def _jensenshannon(p, q, base, axis=-1, keepdims=False):
    p = p / rd.sum(p, axis=axis, keepdims=True)
    q = q / rd.sum(q, axis=axis, keepdims=True)
    m = (p + q) / 2.0
    js = rd.sum(rel_entr(p, m), axis=axis, keepdims=keepdims) + rd.sum(rel_entr(q, m), axis=axis, keepdims=keepdims)
    if base is not None:
        js = js / float(np.log(base))
    return _safe_root(js / 2.0)


def _metric(name, u, v, p=None, w=None, V=None, VI=None):
    """The distance `name` between u and v (broadcast together) along their last axis."""
    d = u - v
    if name in ("euclidean", "sqeuclidean"):
        s = _weighted_sum(d * d, w)
        return s if name == "sqeuclidean" else _safe_root(s)
    if name == "seuclidean":
        return _safe_root(_weighted_sum(d * d / V, w))
    if name == "cityblock":
        return _weighted_sum(ew.absolute(d), w)
    if name == "chebyshev":
        a = ew.absolute(d)
        return rd.amax(a if w is None else a * ew.greater(w, 0.0), axis=-1)
    if name == "minkowski":
        return _minkowski(d, 2.0 if p is None else p, w)
    if name in ("cosine", "correlation"):
        return _cosine_like(u, v, w, name == "correlation")
    if name == "braycurtis":
        return _weighted_sum(ew.absolute(d), w) / _weighted_sum(ew.absolute(u + v), w)
    if name == "canberra":
        return _canberra(u, v, w)
    if name == "mahalanobis":
        n = shape_of(d)[-1]
        dv = reshape(reshape(d, (-1, n)) @ VI, shape_of(d))
        return _safe_root(rd.sum(dv * d, axis=-1))
    if name == "hamming":
        unequal = ew.not_equal(u, v)
        if w is None:
            return rd.mean(cast(unequal, _FLOAT64), axis=-1)
        return _weighted_sum(cast(unequal, _FLOAT64), _normalized(w))
    if name == "jaccard":
        nu, nv = ew.not_equal(u, 0.0), ew.not_equal(v, 0.0)
        return _count_fraction(ew.logical_xor(nu, nv), ew.logical_or(nu, nv), w)
    if name == "jensenshannon":
        return _jensenshannon(u, v, None)
    raise AssertionError(name)


_METRICS = ("braycurtis", "canberra", "chebyshev", "cityblock", "correlation", "cosine", "euclidean",
            "hamming", "jaccard", "jensenshannon", "mahalanobis", "minkowski", "seuclidean", "sqeuclidean")
_ALIASES = {"euclid": "euclidean", "eu": "euclidean", "e": "euclidean", "sqe": "sqeuclidean",
            "sqeuclid": "sqeuclidean", "cblock": "cityblock", "cb": "cityblock", "c": "cityblock",
            "manhattan": "cityblock", "chebychev": "chebyshev", "cheby": "chebyshev", "cheb": "chebyshev",
            "ch": "chebyshev", "mi": "minkowski", "minkowski": "minkowski", "pnorm": "minkowski",
            "cos": "cosine", "co": "correlation", "corr": "correlation", "bray": "braycurtis",
            "canb": "canberra", "mahal": "mahalanobis", "mah": "mahalanobis", "se": "seuclidean",
            "hamm": "hamming", "ha": "hamming", "h": "hamming", "jacc": "jaccard", "ja": "jaccard",
            "j": "jaccard", "js": "jensenshannon", "jensen-shannon": "jensenshannon"}


def _metric_name(metric, fn):
    if callable(metric):
        raise NotSupportedError(f"scipy.spatial.distance.{fn} with a callable metric is not supported on "
                                f"traced values; write the distances with NumPy operations{where()}")
    if not isinstance(metric, str):
        raise TypeError("2nd argument metric must be a string identifier or a function.")
    name = metric.lower()
    name = _ALIASES.get(name, name)
    if name not in _METRICS:
        if name in ("dice", "rogerstanimoto", "russellrao", "sokalsneath", "yule", "kulczynski1",
                    "sokalmichener"):
            raise NotSupportedError(f"scipy.spatial.distance.{fn} with the boolean metric {metric!r} is not "
                                    f"supported on traced values{where()}")
        raise ValueError(f"Unknown Distance Metric: {metric}")
    return name


def _options(name, X, kwargs, fn):
    """The metric's keyword arguments as float64 operands, with SciPy's defaults for
    seuclidean's V (the variances of X's columns) and mahalanobis' VI (the inverse covariance)."""
    allowed = {"p", "w", "V", "VI"}
    unknown = set(kwargs) - allowed
    if unknown:
        raise TypeError(f"{fn}() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    opts = {}
    for key in ("w", "V", "VI"):
        if kwargs.get(key) is not None:
            opts[key] = cast(as_operand(kwargs[key]), _FLOAT64)
    if kwargs.get("p") is not None:
        p = kwargs["p"]
        if isinstance(p, Tensor):
            raise NotSupportedError(f"scipy.spatial.distance.{fn} with a traced p is not supported{where()}")
        opts["p"] = float(p)
    if name == "seuclidean" and "V" not in opts:
        opts["V"] = rd.var(X(), axis=0, ddof=1)
    if name == "mahalanobis" and "VI" not in opts:
        opts["VI"] = transpose(inv(cov(transpose(X()))))
    return opts


def _float64_2d(x, what):
    x = as_operand(x)
    if x.dtype.kind == "c":
        raise NotSupportedError(f"scipy.spatial.distance of complex arrays is not supported{where()}")
    if len(shape_of(x)) != 2:
        raise ValueError(f"{what} must be a 2-dimensional array.")
    return cast(x, _FLOAT64)


def _no_out(out, fn):
    if out is not None:
        raise NotSupportedError(f"scipy.spatial.distance.{fn} with out= is not supported on traced "
                                f"values{where()}")


def cdist(XA, XB, metric="euclidean", *, out=None, **kwargs):
    """scipy.spatial.distance.cdist: the (mA, mB) matrix of distances between the rows of XA
    and the rows of XB."""
    _no_out(out, "cdist")
    XA, XB = _float64_2d(XA, "XA"), _float64_2d(XB, "XB")
    (ma, n), (mb, nb) = shape_of(XA), shape_of(XB)
    if n != nb:
        raise ValueError("XA and XB must have the same number of columns (i.e. feature dimension.)")
    name = _metric_name(metric, "cdist")
    opts = _options(name, lambda: concatenate([XA, XB], axis=0), kwargs, "cdist")
    return _metric(name, reshape(XA, (ma, 1, n)), reshape(XB, (1, mb, n)), **opts)


def _upper_pairs(m):
    return np.triu_indices(m, 1)


def pdist(X, metric="euclidean", *, out=None, **kwargs):
    """scipy.spatial.distance.pdist: the condensed vector of distances between the rows of X,
    pairs (i, j) with i < j in row-major order."""
    _no_out(out, "pdist")
    X = _float64_2d(X, "A 2-dimensional array must be passed. X")
    m, n = shape_of(X)
    name = _metric_name(metric, "pdist")
    opts = _options(name, lambda: X, kwargs, "pdist")
    full = _metric(name, reshape(X, (m, 1, n)), reshape(X, (1, m, n)), **opts)
    return getitem(full, _upper_pairs(m))


def squareform(X, force="no", checks=True):
    """scipy.spatial.distance.squareform: a condensed distance vector to its symmetric matrix
    (zero diagonal), or a square matrix to the condensed vector of its upper triangle. SciPy's
    `checks` of a matrix (symmetry, zero diagonal) are not made on traced values."""
    X = as_operand(X)
    s = tuple(shape_of(X))
    if force.lower() == "tomatrix" and len(s) != 1:
        raise ValueError("Forcing 'tomatrix' but input X is not a distance vector.")
    if force.lower() == "tovector" and len(s) != 2:
        raise ValueError("Forcing 'tovector' but input X is not a distance matrix.")
    if len(s) == 1:
        k = s[0]
        m = int(np.ceil(np.sqrt(k * 2)))
        if m * (m - 1) != k * 2:
            raise ValueError("Incompatible vector size. It must be a binomial coefficient n choose 2 "
                             "for some integer n >= 2.")
        if k == 0:
            return np.zeros((1, 1), X.dtype)
        # position 0 holds the diagonal's zero, position 1 + k pair k
        index = np.zeros((m, m), dtype=np.intp)
        i, j = _upper_pairs(m)
        index[i, j] = index[j, i] = np.arange(1, k + 1)
        padded = concatenate([zeros_like(getitem(X, slice(0, 1))), X])
        return getitem(padded, index)
    if len(s) == 2:
        if s[0] != s[1]:
            raise ValueError("The matrix argument must be square.")
        return getitem(X, _upper_pairs(s[0]))
    raise ValueError(f"The first argument must be one or two dimensional array. A {len(s)}-dimensional "
                     f"array is not permitted")


def _vectors(*xs):
    out = []
    for x in xs:
        x = as_operand(x)
        if len(shape_of(x)) != 1:
            raise ValueError("Input vector should be 1-D.")
        out.append(x)
    return out


def _float_dtype(*xs):
    dt = np.result_type(*(x.dtype for x in xs))
    return dt if dt.kind == "f" and dt.itemsize >= 4 else _FLOAT64


def _two_vectors(name, keep_dtype):
    """The two-vector function scipy.spatial.distance.<name>(u, v, [p], w=None): float64, or
    the inputs' float dtype where SciPy keeps it."""
    def distance(u, v, *args, **kwargs):
        u, v = _vectors(u, v)
        dt = _float_dtype(u, v) if keep_dtype else _FLOAT64
        params = ("p", "w") if name == "minkowski" else ("V",) if name == "seuclidean" else \
            ("VI",) if name == "mahalanobis" else ("w",)
        if len(args) > len(params):
            raise TypeError(f"{name}() takes at most {2 + len(params)} positional arguments")
        kwargs.update(zip(params, args))
        if name == "seuclidean" and kwargs.get("V") is None or name == "mahalanobis" and kwargs.get("VI") is None:
            raise TypeError(f"{name}() missing 1 required argument: {params[0]!r}")
        opts = _options(name, None, kwargs, name)
        return cast(_metric(name, cast(u, _FLOAT64), cast(v, _FLOAT64), **opts), dt)
    distance.__name__ = distance.__qualname__ = name
    distance.__doc__ = f"scipy.spatial.distance.{name} of two 1-d arrays."
    return distance


def jensenshannon(p, q, base=None, *, axis=0, keepdims=False):
    """scipy.spatial.distance.jensenshannon along `axis` of p and q (each normalized to sum 1)."""
    p, q = as_operand(p), as_operand(q)
    dt = _float_dtype(p, q)
    return _jensenshannon(cast(p, dt), cast(q, dt), base, axis, keepdims)


_KEEPS_DTYPE = ("sqeuclidean", "cityblock", "chebyshev", "cosine", "correlation")
FUNCTIONS = {"cdist": cdist, "pdist": pdist, "squareform": squareform, "jensenshannon": jensenshannon}
FUNCTIONS.update({name: _two_vectors(name, name in _KEEPS_DTYPE) for name in _METRICS
                  if name != "jensenshannon"})

library_functions("scipy.spatial.distance", FUNCTIONS)
