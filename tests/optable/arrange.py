"""Rows: array manipulation (repeat, tile, split, flip, rot90, roll, pad, windows, grids, ranges)."""
import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from . import nondiff, op


def _split_view_write(x):
    y = x * 1.0
    _, b = np.split(y, 2)
    b *= 3.0                                   # a view: y's second half changes
    return y


X = ((4, 6),)
op("np.repeat", lambda x: np.repeat(x, 2, axis=1), X)
op("np.repeat flat", lambda x: np.repeat(x, 3), X)
op("np.repeat counts", lambda x: np.repeat(x, [1, 0, 2, 3], axis=0), X)
op("np.tile", lambda x: np.tile(x, (2, 1, 3)), X)
op("np.tile 1-d", lambda x: np.tile(x[0], 3), X)
op("np.split", lambda x: np.split(x, 3, axis=1)[1] * 2 + np.array_split(x, 3)[2].sum(), X)
op("np.split at", lambda x: np.concatenate(np.split(x, [1, 4], axis=1)[::-1], axis=1), X)
op("np.hsplit/vsplit", lambda x: np.hsplit(x, 2)[0] + np.vsplit(x, 2)[1][:, :3].sum(), X)
op("np.split view", _split_view_write, X)
op("np.flip", lambda x: np.flip(x) + np.flipud(x) * np.fliplr(x), X)
op("np.rot90", lambda x: np.rot90(x).sum(0) + np.rot90(x, 2).sum(1)[:1] + np.rot90(x, 3, axes=(1, 0)).sum(0), X)
op("np.rollaxis", lambda x: np.rollaxis(x.reshape(2, 2, 6), 2).sum(1), X)
op("np.roll", lambda x: np.roll(x, 2, axis=1) + np.roll(x, -1) + np.roll(x, (1, 2), axis=(0, 1)), X)
op("np.roll traced shift", lambda x, s: np.roll(x, s, axis=1), ((4, 6), 4))
op("np.pad constant", lambda x: np.pad(x, ((1, 2), (0, 1)), constant_values=((1., 2.), (3., 4.))), X)
op("np.pad zeros", lambda x: np.pad(x, 2), X)
op("np.pad traced value", lambda x: np.pad(x, 1, constant_values=x[0, 0]), X)
op("np.pad edge", lambda x: np.pad(x, ((2, 1), (3, 0)), mode="edge"), X)
op("np.pad reflect", lambda x: np.pad(x, ((3, 4), (7, 2)), mode="reflect"), X)
op("np.pad symmetric", lambda x: np.pad(x, 5, mode="symmetric"), X)
op("np.pad wrap", lambda x: np.pad(x, ((1, 9), (2, 0)), mode="wrap"), X)
op("np.convolve full", lambda a, v: np.convolve(a, v), ((7,), (3,)), ((3,), (7,)), ((4,), (4,)))
op("np.convolve same", lambda a, v: np.convolve(a, v, "same"), ((7,), (4,)), ((2,), (5,)))
op("np.convolve valid", lambda a, v: np.convolve(a, v, mode="valid"), ((7,), (3,)), ((3,), (6,)))
op("np.convolve constant", lambda a: np.convolve(a, np.array([0.25, 0.5, 0.25])), ((6,),))
op("np.convolve scalar", lambda a, v: np.convolve(a, v), ((), (4,)))
op("np.vander", lambda x: np.vander(x), ((5,),))
op("np.vander N increasing", lambda x: np.vander(x, 3, increasing=True) + np.vander(x, 3).sum(), ((4,),))
op("sliding_window_view 1-d", lambda x: sliding_window_view(x[0], 3) @ x[1, :3], X)
op("sliding_window_view 2-d", lambda x: sliding_window_view(x, (2, 3)).sum(axis=(-1, -2)), X)
op("sliding_window_view axis", lambda x: sliding_window_view(x, 2, axis=0).max(axis=-1), X)
op("as_strided windows", lambda x: as_strided(x, (3, 4, 2, 3), x.strides * 2).sum(axis=(-1, -2)) * x[:3, :4], X)
op("as_strided im2col stride 2", lambda x: as_strided(x, (2, 2, 2, 3), (x.strides[0] * 2, x.strides[1] * 2) + x.strides)
   .reshape(4, 6) @ x[0], X)
op("as_strided overlapping 1-d", lambda x: as_strided(x[1], shape=(4, 3), strides=(x.itemsize, x.itemsize)) ** 2, X)
op("as_strided default strides", lambda x: as_strided(x, (2, 6)) * 2 + as_strided(x)[1:3], X)
op("np.meshgrid", lambda x: sum(a * 2 for a in np.meshgrid(x[0], x[1, :3])), X)
op("np.meshgrid ij sparse", lambda x: sum(np.meshgrid(x[0], x[1, :3], x[2, :2], indexing="ij", sparse=True)), X)
op("np.linspace", lambda x: np.linspace(x[0, 0], x[0, 1], 7) + np.linspace(x[1], x[2], 3, axis=1).sum(), X)
op("np.linspace endpoint=False", lambda x: np.linspace(0.0, x[0, 1], 5, endpoint=False, retstep=True)[0], X)
op("np.logspace", lambda x: np.logspace(x[0, 0], 1.0, 4), X)
op("np.dstack/column_stack", lambda x: np.dstack([x, x ** 2]).sum(-1) + np.column_stack([x[0], x[1]]).sum(), X)
op("np.append", lambda x: np.append(x, x[:1], axis=0).sum(0) + np.append(x[0], x[1, :2]).sum(), X)
op("np.delete", lambda x: np.delete(x, [0, 2], axis=1) + np.delete(x, 1, axis=0).sum(), X)
op("np.resize", lambda x: np.resize(x[0], (3, 4)), X)
def _copy_into_empty(x):
    e = np.empty_like(x)
    e[...] = x ** 2
    return np.copy(x) + e


op("np.copy/empty_like", _copy_into_empty, X)
op("np.unstack", lambda x: np.unstack(x, axis=1)[2], X)
op("np.broadcast_arrays", lambda x: np.broadcast_arrays(x[0], x[:, :1])[1], X)
op("np.atleast_3d", lambda x: np.atleast_3d(x[0]).sum(axis=(0, 2)) + np.atleast_3d(x).sum(-1), X)

# building arrays from traced values: lists, np.array/asarray, np.r_/np.c_, lists given to functions
op("np.array of a list", lambda x: np.array([x[0, 0], x[1, 1] * 2, x[2, 3]]), X)
op("np.array nested", lambda x: np.array([[x[0, 0], x[0, 1]], [x[1, 0], x[3, 3]]]) @ x[:2, :2], X)
op("np.asarray", lambda x: np.asarray([x[0, 0], x[1, 0]]) + np.asarray(x[2]).sum(), X)
op("np.array copy dtype", lambda x: np.array(x, dtype=x.dtype, copy=True)[1:] * 2, X)
op("np.r_", lambda x: np.r_[x[0], x[1, :2], x[2, 2], 2.0], X)
op("np.r_ with a range", lambda x: np.r_[x[0], 0:3].astype(x.dtype), ((6,),))
op("np.r_ directive", lambda x: np.r_["0,2", x[0], x[1]], X)
op("np.c_", lambda x: np.c_[x[0], x[1] ** 2, np.ones((6, 1), x.dtype)], X)
op("np.mean/std/max of lists", lambda x: np.mean([x[0, 0], x[1, 1]]) + np.std([x[0, 2], x[2, 0], x[3, 3]])
   + np.max([x[1, 2], x[2, 1]]), X)
op("np.append of a list", lambda x: np.append(x[0], [x[1, 0], x[2, 0]]), X)
op("np.concatenate lists", lambda x: np.concatenate([[x[0, 0], x[0, 1]], x[1]]), X)

# polynomials, integration, correlation, blocks, piecewise, per-axis application
op("np.polyval", lambda p, x: np.polyval(p, x), ((4,), (5,)), ((3,), ()))
op("np.polyval-const-x", lambda p: np.polyval(p, 0.5), ((4,),))
op("np.polyfit", lambda y: np.polyfit(np.linspace(-1.0, 1.0, 6), y, 2), ((6,),), ((6, 2),))
op("np.polyfit-x-w", lambda x, y, w: np.polyfit(x, y, 1, w=w) + np.polyfit(x, y, 2, full=True)[1],
   ((5,), (5,), (5,)), domain=("real", "real", "positive"))
if hasattr(np, "trapezoid"):
    op("np.trapezoid", lambda y: np.trapezoid(y), ((5,),), ((3, 4),))
    op("np.trapezoid-x-axis", lambda y, x: np.trapezoid(y, x, axis=0), ((4, 3), (4,)))
    op("np.trapezoid-x-nd", lambda y, x: np.trapezoid(y, x) + np.trapezoid(y, dx=0.5, axis=0).sum(),
       ((3, 4), (3, 4)))
op("np.correlate", lambda a, v: np.correlate(a, v), ((6,), (3,)))
op("np.correlate-same-full", lambda a, v: np.concatenate([np.correlate(a, v, "same"), np.correlate(a, v, "full")]),
   ((4,), (3,)), ((2,), (5,)))
op("np.block", lambda a, b: np.block([[a, b], [b, a]]), ((2, 3), (2, 3)))
op("np.block-ranks", lambda a, b: np.block([[a, b], [np.ones(2, a.dtype), 2.0 * b[:1, :1]]]), ((1, 2), (1, 1)))
op("np.piecewise", lambda x: np.piecewise(x, [x < 0, x >= 0], [lambda t: t ** 2, lambda t: np.sin(t)]), ((5,),))
op("np.piecewise-otherwise", lambda x: np.piecewise(x, [x < -0.5, x > 0.5], [lambda t: -t, 0.25, lambda t: t ** 3]),
   ((2, 3),))
op("np.piecewise-const-cond", lambda x: np.piecewise(x, [np.arange(5) < 2], [lambda t: np.exp(t), lambda t: 2 * t]),
   ((5,),))
op("np.apply_along_axis", lambda x: np.apply_along_axis(lambda r: r * np.sum(r ** 2), 1, x), ((3, 4),))
op("np.apply_along_axis-scalar", lambda x: np.apply_along_axis(lambda r: np.max(r) - np.min(r), 0, x), ((3, 2, 4),))
op("np.apply_along_axis-grows", lambda x: np.apply_along_axis(lambda r: np.outer(r, r[:2]), 0, x), ((3, 2),))
op("np.tril_indices_from", lambda x: x[np.tril_indices_from(x)] + x[np.triu_indices_from(x, 1)].sum(), ((3, 3),))
op("np.diag_indices_from", lambda x: x[np.diag_indices_from(x)], ((3, 3),))
op("np.compress", lambda x: np.compress([True, False, True], x, axis=1) + np.compress([1, 0, 1, 1], x)[:2].sum(),
   ((2, 3),))
op("np.extract", lambda x: np.extract(np.arange(6).reshape(2, 3) % 2 == 0, x), ((2, 3),))
op("np.choose", lambda a, b: np.choose(np.array([[0, 1, 1], [1, 0, 2]]), [a, b, 0.5]), ((2, 3), (3,)))
op("np.choose-traced-clip", lambda a, b: np.choose(np.round(a * 2.0).astype(np.int64), [a, b], mode="clip")
   + np.choose(np.round(b * 2.0).astype(np.int64), [b, a, b], mode="wrap"), ((4,), (4,)))
op("np.ediff1d", lambda x: np.ediff1d(x, to_begin=[0.5], to_end=x[0]), ((2, 3),))
op("reshape-order-F", lambda x: x.reshape(3, 4, order="F") @ np.ravel(x, order="F")[:4]
   + np.reshape(x[None], (2, -1), order="F")[:, :3].sum(), ((4, 3),))
op("ndarray.flat", lambda x: x.flat[[1, 4]] * x.flat[2], ((2, 3),))
nondiff("np.digitize", lambda x: np.digitize(x, [-1.0, 0.0, 0.5]) + np.digitize(x, [1.0, 0.0], right=True)
        + np.digitize(x, np.sort(x.ravel())[1:3]).sum(), ((3, 4),))
op("np.insert", lambda x: np.insert(x, [1, 3, 3], x[0, :3] * 2.0, axis=1)[:, :5] + np.insert(x, 2, 0.5)[:5]
   + np.insert(x, 1, x[:, 0], axis=1)[:, :5], ((3, 4),))
op("np.unwrap", lambda x: np.unwrap(x * 4.0, axis=1) + np.unwrap(x * 40.0, period=30.0, axis=0), ((3, 4),))
