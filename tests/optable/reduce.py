"""Rows: reductions with every axis form and keepdims, and the stable row-wise composites."""
import numpy as np

import jitgraph as jg
from . import UNARY_SHAPES, nondiff, op


# reductions over (2, 3, 4) with every axis form and keepdims
RED_AXES = [None, 0, 1, -1, (0, 2), (-1, 0), (0, 1, 2)]
for _name, _fn, _dom in [("sum", np.sum, "real"), ("mean", np.mean, "real"), ("max", np.max, "real"),
                         ("min", np.min, "real"), ("prod", np.prod, "nonzero"), ("var", np.var, "real"),
                         ("std", np.std, "real")]:
    for _axis in RED_AXES:
        for _kd in (False, True):
            op(f"{_name}[axis={_axis},keepdims={_kd}]",
               lambda x, _fn=_fn, _axis=_axis, _kd=_kd: _fn(x, axis=_axis, keepdims=_kd),
               ((2, 3, 4),), domain=_dom)
    op(f"{_name}-1d", lambda x, _fn=_fn: _fn(x), ((5,),), domain=_dom)
op("np.amax", lambda x: np.amax(x, axis=1), ((3, 4),))
op("np.amin", lambda x: np.amin(x, 0, keepdims=True), ((3, 4),))
op("var-ddof", lambda x: np.var(x, axis=1, ddof=1), ((3, 4),))
op("std-ddof", lambda x: np.std(x, ddof=1, keepdims=True), ((3, 4),))
op("sum-method", lambda x: x.sum(axis=1), ((3, 4),))
op("sum-method-kd", lambda x: x.sum(-1, keepdims=True), ((3, 4),))
op("mean-method", lambda x: x.mean(axis=0), ((3, 4),))
op("max-method", lambda x: x.max(axis=-1, keepdims=True), ((3, 4),))
op("min-method", lambda x: x.min(0), ((3, 4),))
op("prod-method", lambda x: x.prod(axis=1), ((3, 4),), domain="nonzero")
op("var-method", lambda x: x.var(axis=0), ((3, 4),))
op("std-method", lambda x: x.std(), ((3, 4),))
op("sum-of-scalar", lambda x: np.sum(x), ((),))
op("mean-broadcast-back", lambda x: x - np.mean(x, axis=0, keepdims=True), ((4, 3),))
op("max-reduce-ufunc", lambda x: np.maximum.reduce(x, axis=0), ((3, 4),))
op("add-reduce-ufunc", lambda x: np.add.reduce(x, axis=1), ((3, 4),))
op("add-accumulate-ufunc", lambda x: np.add.accumulate(x), ((5,),), ((3, 4),))
op("maximum-accumulate-ufunc", lambda x: np.maximum.accumulate(x, axis=1), ((3, 5),))
op("maximum-accumulate-ufunc-1d", lambda x: np.maximum.accumulate(x), ((7,),))
op("minimum-accumulate-ufunc", lambda x: np.minimum.accumulate(x), ((6, 2),))
op("logaddexp-accumulate-ufunc", lambda x: np.logaddexp.accumulate(x, axis=-1), ((2, 9),))
op("fmax-accumulate-ufunc", lambda x: np.fmax.accumulate(x), ((5,),))
op("multiply-accumulate-ufunc-axis1", lambda x: np.multiply.accumulate(x, axis=1), ((3, 4),), domain="nonzero")
MASK34 = np.array([[True, False, True, True], [False, False, True, False], [True, True, True, False]])
op("sum-where", lambda x: np.sum(x, where=MASK34), ((3, 4),))
op("sum-where-row-initial", lambda x: np.sum(x, axis=1, where=MASK34[0], initial=1.5), ((3, 4),))
op("sum-initial", lambda x: x.sum(axis=0, initial=-2.0), ((3, 4),))
op("prod-where", lambda x: np.prod(x, axis=0, where=MASK34), ((3, 4),), domain="nonzero")
op("max-where-initial", lambda x: np.max(x, axis=1, where=MASK34, initial=-5.0), ((3, 4),))
op("min-initial", lambda x: np.min(x, axis=0, initial=0.25), ((3, 4),))
op("mean-where", lambda x: np.mean(x, where=MASK34), ((3, 4),))
op("mean-where-axis", lambda x: np.mean(x, axis=1, where=MASK34, keepdims=True), ((3, 4),))


# stable composites
op("jg.logsumexp", lambda x: jg.logsumexp(x), ((5,),), ((2, 3),))
op("jg.logsumexp-axis", lambda x: jg.logsumexp(x, axis=-1), ((2, 3),))
op("jg.logsumexp-kd", lambda x: jg.logsumexp(x, axis=0, keepdims=True), ((2, 3),))
op("jg.softmax", lambda x: jg.softmax(x), ((5,),), ((2, 3),))
op("jg.softmax-axis0", lambda x: jg.softmax(x, axis=0), ((2, 3),))
op("jg.log_softmax", lambda x: jg.log_softmax(x), ((5,),), ((2, 3),))
op("jg.log_softmax-axis0", lambda x: jg.log_softmax(x, axis=0), ((2, 3),))
op("jg.sigmoid", lambda x: jg.sigmoid(x), *UNARY_SHAPES)

_BIG = {np.dtype(np.float64): 1e200, np.dtype(np.float32): 1e30}
# ufunc.reduce: axis 0 by default (np.sum's is None), and the other ufuncs' reductions
op("np.add.reduce-default-axis", lambda x: np.add.reduce(x) + np.multiply.reduce(x, axis=1).sum(), ((3, 4),))
op("np.logaddexp.reduce", lambda x: np.logaddexp.reduce(x * 3.0, axis=1), ((3, 4),))
op("np.logaddexp2.reduce", lambda x: np.logaddexp2.reduce(x, axis=None) + np.logaddexp.reduce(x, keepdims=True).sum(),
   ((3, 4),))
op("np.logaddexp.reduce-initial-where", lambda x: np.logaddexp.reduce(x, axis=0, where=x > -0.5, initial=0.0),
   ((3, 4),))
op("np.hypot.reduce", lambda x: np.hypot.reduce(x, axis=1) + np.hypot.reduce(x * _BIG[x.dtype], axis=0).sum() / _BIG[x.dtype],
   ((3, 4),), domain="nonzero")
op("np.fmax.reduce", lambda x: np.fmax.reduce(x, axis=1) + np.fmin.reduce(x).sum(), ((3, 4),))
op("np.add.reduceat", lambda x: np.add.reduceat(x, [0, 2, 3], axis=1), ((3, 5),))
op("np.add.reduceat-unordered", lambda x: np.add.reduceat(x, [0, 4, 1, 5, 5]), ((6, 2),))
nondiff("np.count_nonzero", lambda x: np.count_nonzero(x > 0.2) + np.count_nonzero(np.round(x), axis=0),
        ((3, 4),))
nondiff("np.logical_and.reduce", lambda x: np.logical_and.reduce(x > -1.0, axis=1)
        | np.logical_or.reduce(x > 1.0, axis=1), ((3, 4),))
