"""Rows: membership, histograms, lexsort and multi-indices, polynomials, the array-API names in
np.linalg, NaN-ignoring scans, np.putmask / np.place, and np.vectorize (ops/sets.py,
ops/vectorize.py and their neighbours).

Step functions (histogram counts, np.isin, np.fix) enter as masks or weights of a differentiable
expression, so their values are checked and the gradient reaches what they select; the sampled
points sit away from bin edges and rounding boundaries.
"""
import numpy as np

from . import nondiff, op

_EDGES = [-2.0, -0.55, 0.05, 0.45, 2.0]


def _hist(x):
    counts, _ = np.histogram(x[0], bins=3, weights=x[1])
    per_bin, edges = np.histogram(x, bins=_EDGES, weights=x ** 2)
    _, auto = np.histogram(x[2], bins=4)
    return np.concatenate([counts, per_bin, edges.astype(x.dtype), auto, np.histogram_bin_edges(x, 3)])


def _hist2d(x):
    h, xe, ye = np.histogram2d(x[0], x[1], bins=2, weights=x[2] ** 2)
    hd, _ = np.histogramdd(x.T[:, :2], bins=(2, 3), range=[(-3, 3), (-3, 3)], weights=np.exp(x[2]))
    return np.concatenate([h.ravel(), xe, ye, hd.ravel()])


def _putmask(x):
    b = x * 2.0
    np.putmask(b, x > 0.3, x[0] ** 2)
    c = x * 1.0
    np.place(c, x < -0.2, x[1, :3] * 3.0)
    return b + c * x


_huber = np.vectorize(lambda r, d: np.where(abs(r) < d, 0.5 * r * r, d * (abs(r) - 0.5 * d)))
_norm = np.vectorize(lambda r: np.sqrt(r @ r + 1.0), signature="(n)->()")


op("np.isin", lambda x: x * np.isin(np.round(x * 2), [0.0, 1.0, -1.0])
   + x * np.isin(np.round(x * 2), np.round(x[0] * 2), invert=True)
   + x * np.isin(np.round(x * 8), np.arange(-40.0, 40.0, 2.0)), ((3, 4),))
op("np.histogram", _hist, ((3, 6),))
op("np.histogram density", lambda x: np.histogram(x, bins=_EDGES, weights=np.exp(x), density=True)[0],
   ((3, 4),))
op("np.histogram2d-dd", _hist2d, ((3, 7),))
nondiff("np.lexsort", lambda x: np.lexsort((x[2], np.round(x[1]), np.round(x[0]))), ((3, 8),))
nondiff("np.lexsort 2-d keys", lambda x: np.lexsort(np.round(x * 2), axis=0), ((2, 5, 3),))
nondiff("np.unravel_index", lambda x: np.stack(np.unravel_index(np.argsort(x.ravel()), (3, 4)))
        + np.stack(np.unravel_index(np.argmax(x, axis=1), (2, 2), order="F"))[:, :1], ((3, 4),))
nondiff("np.ravel_multi_index", lambda x: np.ravel_multi_index((np.argmax(x, axis=0), np.arange(4)), (3, 4))
        + np.ravel_multi_index((np.argmin(x, axis=0) + 2, [0, 5, 9, -1]), (3, 4), mode=("wrap", "clip"),
                               order="F"), ((3, 4),))
op("np.polyadd-sub-mul", lambda p, q: np.concatenate([np.polyadd(p, q), np.polysub(q, p), np.polymul(p, q)]),
   ((4,), (2,)))
op("np.polyder-polyint", lambda p: np.concatenate([np.polyder(p), np.polyder(p, 2), np.polyint(p),
                                                    np.polyint(p, 2, k=[0.5, -1.0])]), ((5,),))
op("np.poly", lambda r: np.poly(r), ((4,),))
op("np.linalg array-API names", lambda a, b: np.linalg.trace(a) + np.linalg.diagonal(a, offset=1).sum(-1)
   + np.linalg.tensordot(a, b, axes=1).sum((1, 2)) + np.linalg.cross(a, b[..., :3]).sum((-2, -1)), ((2, 3, 3), (3, 4)))
op("np.nancumsum-nancumprod", lambda x: np.nancumsum(np.where(x > 1.0, np.nan, x), axis=1)
   + np.nancumprod(np.where(x < -1.0, np.nan, x), axis=0), ((3, 5),))
op("np.fix-angle", lambda x: np.fix(x * 3.0) * x + np.angle(x) * x + np.angle(x, deg=True), ((3, 4),))
op("np.putmask-place", _putmask, ((3, 4),))
op("np.vectorize", lambda x, y: _huber(x, 0.6) + np.vectorize(lambda t, s: (np.tanh(t) * s, t * t))(x, y)[1]
   + _norm(x * y)[:, None], ((3, 4), (4,)))
