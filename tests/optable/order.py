"""Rows: scans, sorting, order statistics, gathers along an axis, NaN-ignoring reductions, all/any.

Index results (argsort, argmax, searchsorted, ...) and booleans (all/any) have no gradient:
the differentiable rows use them to pick or weight values (take_along_axis, np.where), and
`nondiff` rows check the indices themselves. np.partition/argpartition rows read only what
NumPy promises (the kth elements, and what lies on each side of them), not an arrangement.
NaN rows make their NaNs inside the function (np.where(x > 1, np.nan, x)), so the inputs stay
finite for the finite-difference checks.
"""
import numpy as np

from . import nondiff, op

V = ((6,),)
M = ((3, 4),)
T = ((2, 3, 4),)
COORDS4 = np.array([0.0, 0.5, 1.75, 2.0])
COORDS3 = np.array([-1.0, 0.25, 1.0])


def _nan_big(x):
    """x with NaN where it is above 1 (about one entry in six)."""
    return np.where(x > 1.0, np.nan, x)


def _ties(x):
    """x clipped to [-0.5, 0.5]: about six entries in ten tie at an end."""
    return np.clip(x, -0.5, 0.5)


# ---- scans -------------------------------------------------------------------------------------
for _axis in (None, 0, 1, -1, 2):
    op(f"cumsum[axis={_axis}]", lambda x, _a=_axis: np.cumsum(x, axis=_a), T)
    op(f"cumprod[axis={_axis}]", lambda x, _a=_axis: np.cumprod(x, axis=_a), T, domain="nonzero")
op("cumsum-1d", lambda x: np.cumsum(x), V, ((1,),))
op("cumsum-method", lambda x: x.cumsum(axis=0), M)
op("cumsum-dtype", lambda x: np.cumsum(x, axis=1, dtype=x.dtype), M)
op("cumsum-scalar", lambda x: np.cumsum(x), ((),))
op("cumprod-1d", lambda x: np.cumprod(x), V, domain="nonzero")
op("cumprod-method", lambda x: x.cumprod(axis=1), M)
op("cumprod-zeros", lambda x: np.cumprod(x * np.array([1.0, 0.0, 1.0, 0.0], x.dtype), axis=1), M)
op("cumprod-zero-first", lambda x: np.cumprod(np.where(np.arange(4) == 0, 0.0, x), axis=-1), M)
# zeros that depend on x (so the second-order check differentiates through them): one per row,
# and two per row
op("cumprod-traced-zero", lambda x: np.cumprod(x - x[:, 1:2], axis=1), M)
op("cumprod-traced-zeros", lambda x: np.cumprod((x - x[:, :1]) * (x - x[:, 2:3]), axis=1), ((3, 5),))
op("diff", lambda x: np.diff(x), V, M)
op("diff-n2-axis0", lambda x: np.diff(x, n=2, axis=0), T)
op("diff-n3", lambda x: np.diff(x, 3, axis=-1), T)
op("diff-prepend-append", lambda x, y: np.diff(x, axis=1, prepend=y[:, :1], append=y), ((3, 4), (3, 2)))
op("diff-prepend-scalar", lambda x, s: np.diff(x, prepend=s), ((5,), ()))
op("gradient", lambda x: np.gradient(x), V)
op("gradient-axis", lambda x: np.gradient(x, axis=1), M)
op("gradient-all-axes", lambda x: np.stack(np.gradient(x)), M)
op("gradient-spacing", lambda x: np.gradient(x, 0.5, axis=-1), T)
op("gradient-traced-spacing", lambda x, h: np.gradient(x, h), ((5,), ()), domain=("real", "positive"))
op("gradient-edge2", lambda x: np.gradient(x, edge_order=2), V)
op("gradient-edge2-spacing", lambda x, h: np.gradient(x, h, axis=0, edge_order=2), ((4, 3), ()),
   domain=("real", "positive"))
op("gradient-coords", lambda x: np.gradient(x, COORDS4, axis=1), M)
op("gradient-coords-edge2", lambda x: np.gradient(x, COORDS3, COORDS4, edge_order=2)[0], M)
op("gradient-coords-per-axis", lambda x: np.stack(np.gradient(x, 2.0, COORDS4, axis=(0, 1))), M)

# ---- sorting and selection ------------------------------------------------------------------------
for _axis in (None, 0, 1, -1):
    op(f"sort[axis={_axis}]", lambda x, _a=_axis: np.sort(x, axis=_a), T)
op("sort-1d", lambda x: np.sort(x), V, ((1,),))
op("sort-kind-stable", lambda x: np.sort(x, kind="stable"), M)
op("sort-argsort-gather", lambda x: np.take_along_axis(x, np.argsort(x, axis=0), axis=0), M)
op("sort-argsort-gather-neg", lambda x: np.take_along_axis(x, np.argsort(-x, axis=-1), axis=-1), T)
op("argsort-flat", lambda x: np.ravel(x)[np.argsort(x, axis=None)], M)
op("partition-kth", lambda x: np.partition(x, 2, axis=1)[:, 2], M)
op("partition-kth-seq", lambda x: np.partition(x, (0, -1), axis=0)[[0, -1]], M)
op("partition-sides", lambda x: np.sum(np.partition(x, 2)[..., :2], axis=-1)
   + np.max(np.partition(x, 2)[..., 3:], axis=-1), T)
op("partition-flat", lambda x: np.partition(x, 5, axis=None)[5], M)
op("argpartition-kth", lambda x: np.take_along_axis(x, np.argpartition(x, 1, axis=0), axis=0)[1], M)
for _axis in (None, 0, 1, -1):
    op(f"argmax-pick[axis={_axis}]", lambda x, _a=_axis: np.take(x, np.argmax(x, axis=_a)) if _a is None
       else np.take_along_axis(x, np.argmax(x, axis=_a, keepdims=True), axis=_a), T)
    op(f"argmin-pick[axis={_axis}]", lambda x, _a=_axis: np.take(x, np.argmin(x, axis=_a)) if _a is None
       else np.take_along_axis(x, np.argmin(x, axis=_a, keepdims=True), axis=_a), T)
op("argmax-weights", lambda x: x * np.argmax(x, axis=0).astype(x.dtype), M)
op("argmin-method", lambda x: x * x.argmin(axis=1, keepdims=True).astype(x.dtype), M)
op("take_along_axis", lambda x: np.take_along_axis(x, np.array([[0, 3, 3, -1]]), axis=1), M)
op("take_along_axis-bcast", lambda x: np.take_along_axis(x, np.array([[[2], [0], [-3]]]), axis=2), T)
op("take_along_axis-None", lambda x: np.take_along_axis(x, np.array([11, 0, 0, -2]), axis=None), M)
op("take_along_axis-idx-input", lambda x, i: np.take_along_axis(x, i, axis=0),
   ((3, 4), np.array([[2, 0, 1, 1], [0, 0, -1, 2]])))
op("take-wrap", lambda x: np.take(x, [7, -8, 2], axis=1, mode="wrap"), M)
op("take-clip", lambda x: np.take(x, [7, -8, 2], mode="clip"), M)
op("take-raise", lambda x: np.take(x, [-1, 2], axis=0, mode="raise"), M)
op("take-wrap-traced", lambda x: np.take(x, np.argmax(x, axis=0) + 5, axis=0, mode="wrap"), M)
op("take-clip-traced", lambda x: np.take(x, np.argmin(x, axis=1) * 3 - 2, axis=1, mode="clip"), M)
op("interp", lambda x, fp: np.interp(x * 2.0, COORDS4, fp), ((3, 5), (4,)))
op("interp-left-right-at-points", lambda x, fp: np.interp(np.concatenate([x * 3.0, COORDS4]), COORDS4, fp,
                                                        left=-1.5, right=fp[1] * 2.0), ((7,), (4,)))
op("interp-sample-points", lambda xp, fp: np.interp(np.array([-0.5, 0.3, 1.1, 2.4]), np.cumsum(np.abs(xp) + 0.2),
                                                     fp), ((5,), (5,)))
nondiff("interp-repeated-point", lambda x: np.interp(x, np.array([0.0, 1.0, 1.0, 2.0]), np.array([0.0, 1.0, 3.0, 2.0])),
        ((9,),))
op("searchsorted", lambda a, v: v * np.searchsorted(np.sort(a), v).astype(v.dtype), ((6,), (3, 2)))
op("searchsorted-right-sorter",
   lambda a, v: v * np.searchsorted(a, v, side="right", sorter=np.argsort(a)).astype(v.dtype), ((6,), (4,)))
# longer sorted arrays: a binary search per value (the `searchsorted` primitive)
op("searchsorted-binary", lambda a, v: v * np.searchsorted(np.sort(a), np.concatenate([v, np.sort(a)[3:6]]))[:4]
   .astype(v.dtype) + v * np.searchsorted(np.sort(a), v, side="right").astype(v.dtype), ((40,), (4,)))
op("interp-many-points", lambda x, fp: np.interp(x, np.linspace(-2.0, 2.0, 40), fp), ((3, 5), (40,)))

# ---- order statistics --------------------------------------------------------------------------------
for _axis in (None, 0, 1, -1, (0, 2)):
    for _kd in (False, True):
        op(f"median[axis={_axis},keepdims={_kd}]", lambda x, _a=_axis, _k=_kd: np.median(x, axis=_a, keepdims=_k), T)
op("median-odd-even", lambda x: np.median(x, axis=0) + np.median(x[1:], axis=0), ((5, 2),))
op("median-1", lambda x: np.median(x, axis=1), ((3, 1),))
for _q, _axis, _kd in [(30, None, False), (50, 1, False), (0, 0, True), (100, -1, False), (12.5, (0, 2), True),
                       (np.array([10.0, 50.0, 90.0], np.float32), 1, False),
                       (np.array([[0.0, 33.0], [66.0, 100.0]], np.float32), -1, True)]:
    _label = np.asarray(_q).tolist()
    op(f"percentile[q={_label},axis={_axis},keepdims={_kd}]",
       lambda x, _q=_q, _a=_axis, _k=_kd: np.percentile(x, _q, axis=_a, keepdims=_k), T)
    op(f"quantile[q={_label},axis={_axis},keepdims={_kd}]",
       lambda x, _q=_q, _a=_axis, _k=_kd: np.quantile(x, np.asarray(_q) / np.float32(100) if np.ndim(_q)
                                                       else _q / 100, axis=_a, keepdims=_k), T)
op("quantile-int-q", lambda x: np.quantile(x, 1, axis=0), M)
op("average", lambda x: np.average(x), M)
op("average-axis", lambda x: np.average(x, axis=(0, -1), keepdims=True), T)
op("cov", lambda x: np.cov(x), ((3, 6),), ((6,),))
op("cov-rowvar-bias", lambda x: np.cov(x, rowvar=False, bias=True), ((6, 3),))
op("cov-y-ddof", lambda x, y: np.cov(x, y, ddof=2), ((2, 6), (6,)))
op("cov-fweights-aweights", lambda x, a: np.cov(x, fweights=np.array([1, 2, 1, 3, 1]), aweights=a),
   ((3, 5), (5,)), domain=("real", "positive"))
op("cov-aweights-ddof0", lambda x: np.cov(x, aweights=np.array([0.5, 1.0, 2.0, 1.5]), ddof=0), ((2, 4),))
op("corrcoef", lambda x: np.corrcoef(x), ((3, 6),))
op("corrcoef-xy-rowvar", lambda x, y: np.corrcoef(x, y, rowvar=False), ((6, 2), (6, 1)))
op("average-weights", lambda x, w: np.average(x, weights=w), ((3, 4), (3, 4)), domain=("real", "positive"))
op("average-weights-axis", lambda x, w: np.average(x, axis=1, weights=w), ((3, 4), (4,)),
   domain=("real", "positive"))
op("average-weights-axes", lambda x, w: np.average(x, axis=(2, 0), weights=w), ((2, 3, 4), (4, 2)),
   domain=("real", "positive"))
op("average-returned", lambda x, w: np.stack(np.average(x, axis=0, weights=w, returned=True)),
   ((3, 4), (3,)), domain=("real", "positive"))
op("ptp", lambda x: np.ptp(x), M)
op("ptp-axis", lambda x: np.ptp(x, axis=1), T)
op("ptp-keepdims", lambda x: np.ptp(x, axis=(0, 2), keepdims=True), T)

# ---- NaN-ignoring reductions ------------------------------------------------------------------------
for _axis in (None, 1, -1):
    op(f"nansum[axis={_axis}]", lambda x, _a=_axis: np.nansum(_nan_big(x), axis=_a), T)
    op(f"nanmean[axis={_axis}]", lambda x, _a=_axis: np.nanmean(_nan_big(x), axis=_a), T)
    op(f"nanmax[axis={_axis}]", lambda x, _a=_axis: np.nanmax(_nan_big(x), axis=_a), T)
    op(f"nanmin[axis={_axis}]", lambda x, _a=_axis: np.nanmin(_nan_big(x), axis=_a), T)
    op(f"nanprod[axis={_axis}]", lambda x, _a=_axis: np.nanprod(_nan_big(x), axis=_a), T, domain="nonzero")
    op(f"nanvar[axis={_axis}]", lambda x, _a=_axis: np.nanvar(_nan_big(x), axis=_a), T)
    op(f"nanstd[axis={_axis}]", lambda x, _a=_axis: np.nanstd(_nan_big(x), axis=_a, ddof=1), T)
op("nansum-keepdims", lambda x: np.nansum(_nan_big(x), axis=(0, 2), keepdims=True), T)
op("nanmean-keepdims", lambda x: np.nanmean(_nan_big(x), axis=1, keepdims=True), T)
op("nanmax-keepdims", lambda x: np.nanmax(_nan_big(x), axis=0, keepdims=True), T)
op("nanargmax-pick", lambda x: np.take_along_axis(x, np.nanargmax(_nan_big(x), axis=1, keepdims=True), 1), T)
op("nanargmin-pick", lambda x: np.take(x, np.nanargmin(_nan_big(x))), M)
op("nanvar-ddof-keepdims", lambda x: np.nanvar(_nan_big(x), axis=-1, ddof=1, keepdims=True), M)

# ---- truth reductions ----------------------------------------------------------------------------------
op("any-where", lambda x: np.where(np.any(x > 0.5, axis=1, keepdims=True), x, 2.0 * x), M)
op("all-where", lambda x: np.where(np.all(x > -1.0, axis=0), x, -x), M)
op("all-any-flat", lambda x: x * np.all(x < 3.0) + x * np.any(x > 1.0, axis=(0, 2), keepdims=True), T)
op("any-method", lambda x: np.where(x.any(axis=-1, keepdims=True), x, 0.0), M)

# ---- values only: indices and booleans -------------------------------------------------------------------
for _axis in (None, 0, 1, -1):
    nondiff(f"argsort[axis={_axis}]", lambda x, _a=_axis: np.argsort(x, axis=_a), T)
    nondiff(f"argmax[axis={_axis}]", lambda x, _a=_axis: np.argmax(x, axis=_a), T)
    nondiff(f"argmin[axis={_axis},keepdims]", lambda x, _a=_axis: np.argmin(x, axis=_a, keepdims=True), T)
    nondiff(f"all[axis={_axis}]", lambda x, _a=_axis: np.all(x > -1.5, axis=_a), T)
    nondiff(f"any[axis={_axis}]", lambda x, _a=_axis: np.any(x > 1.5, axis=_a), T)
# ties keep their order: np.argsort(kind="stable"); NumPy's default kind is not stable where it
# sorts with SIMD (x86-simd-sort on AVX-512 machines), jitgraph's argsort always is
nondiff("argsort-ties", lambda x: np.argsort(_ties(x), axis=1, kind="stable"), ((3, 10),), ((2, 40),))
nondiff("argsort-nan", lambda x: np.argsort(_nan_big(_ties(x) * 4.0), axis=0, kind="stable"), ((12, 2),))
nondiff("argmax-nan", lambda x: np.argmax(_nan_big(x), axis=0), ((6, 4),))
nondiff("argmin-ties", lambda x: np.argmin(_ties(x), axis=1), ((4, 6),))
nondiff("argpartition-kth", lambda x: np.argpartition(x, 3, axis=1)[:, 3], ((3, 7),))
nondiff("argpartition-sides", lambda x: np.sort(np.argpartition(x, (1, 4), axis=0)[:2], axis=0), ((7, 2),))
nondiff("median-nan", lambda x: np.median(_nan_big(x), axis=1), ((4, 5),))
nondiff("percentile-nan", lambda x: np.percentile(_nan_big(x), [25.0, 50.0], axis=0), ((6, 3),))
nondiff("nanargmax", lambda x: np.nanargmax(_nan_big(x), axis=1), ((3, 8),))
nondiff("searchsorted-left", lambda a, v: np.searchsorted(np.sort(a), v), ((8,), (3, 5)))
nondiff("searchsorted-right-ties", lambda a, v: np.searchsorted(_ties(np.sort(a)), _ties(v), side="right"),
        ((8,), (6,)))
nondiff("any-nan", lambda x: np.any(np.where(x > 0, np.nan, 0.0), axis=0), M)
nondiff("all-empty", lambda x: np.all(x[:, :0] > 0, axis=1), M)
nondiff("cumsum-bool", lambda x: np.cumsum(x > 0, axis=1), M)
nondiff("diff-bool", lambda x: np.diff(x > 0, axis=0), M)
if hasattr(np, "cumulative_sum"):
    op("np.cumulative_sum", lambda x: np.cumulative_sum(x, axis=1, include_initial=True), ((3, 4),))
    op("np.cumulative_prod", lambda x: np.cumulative_prod(x) + np.cumulative_sum(x), ((5,),))

# the nan order statistics (NaNs put in by a constant mask: each slice a different count)
_HOLES = np.array([[0, 1, 0, 0, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0], [1, 0, 1, 0, 1]], bool)
op("np.nanmedian", lambda x: np.nanmedian(np.where(_HOLES, np.nan, x), axis=1)[[0, 2, 3]]
   + np.nanmedian(np.where(_HOLES, np.nan, x)), ((4, 5),))
op("np.nanpercentile", lambda x: np.nanpercentile(np.where(_HOLES, np.nan, x), [20, 75], axis=1)[:, [0, 2, 3]], ((4, 5),))
op("np.nanquantile-keepdims", lambda x: np.nanquantile(np.where(_HOLES, np.nan, x), 0.4, axis=0, keepdims=True)[..., [0, 2, 4]],
   ((4, 5),))
op("np.quantile-methods", lambda x: np.quantile(x, [0.3, 0.5], axis=1, method="nearest")
   + np.quantile(x, 0.3, axis=1, method="lower") + np.percentile(x, 37, axis=1, method="higher")
   + np.quantile(x, [0.25, 0.6], axis=1, method="midpoint"), ((3, 5),))
