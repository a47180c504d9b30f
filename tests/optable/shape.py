"""Rows: reshapes, transposes, broadcasting, concatenation, basic slicing."""
import numpy as np

from . import X2, X3, op


# shape ops on (2, 3, 4)
op("reshape", lambda x: np.reshape(x, (6, 4)), X3)
op("reshape-(-1)", lambda x: np.reshape(x, (-1,)), X3)
op("reshape-mid-(-1)", lambda x: np.reshape(x, (2, -1, 2)), X3)
op("reshape-method-args", lambda x: x.reshape(4, -1), X3)
op("reshape-method-tuple", lambda x: x.reshape((3, 8)), X3)
op("reshape-scalar", lambda x: np.reshape(x, (1, 1)), ((),))
op("ravel", lambda x: np.ravel(x), X3)
op("ravel-method", lambda x: x.ravel(), X3)
op("flatten", lambda x: x.flatten(), X3)
op(".T", lambda x: x.T, X3, ((3, 4),), ((5,),))
op("np.transpose", lambda x: np.transpose(x), X3)
op("np.transpose-axes", lambda x: np.transpose(x, (1, 2, 0)), X3)
op("np.transpose-neg-axes", lambda x: np.transpose(x, (-1, 0, 1)), X3)
op("transpose-method-args", lambda x: x.transpose(2, 0, 1), X3)
op("transpose-method-tuple", lambda x: x.transpose((0, 2, 1)), X3)
op("swapaxes", lambda x: np.swapaxes(x, 0, 2), X3)
op("moveaxis", lambda x: np.moveaxis(x, 0, -1), X3)
op("expand_dims", lambda x: np.expand_dims(x, 1), X3)
op("expand_dims-neg", lambda x: np.expand_dims(x, -1), X3)
op("expand_dims-tuple", lambda x: np.expand_dims(x, (0, 2)), X3)
op("None-index-front", lambda x: x[None], X3)
op("None-index-mid", lambda x: x[:, None], X3)
op("None-index-ellipsis", lambda x: x[..., None], X3)
op("None-index-multi", lambda x: x[None, :, None], X3)
op("squeeze", lambda x: np.squeeze(x), ((2, 1, 4, 1),))
op("squeeze-axis", lambda x: np.squeeze(x, axis=1), ((2, 1, 4, 1),))
op("squeeze-axes", lambda x: np.squeeze(x, axis=(1, -1)), ((2, 1, 4, 1),))
op("squeeze-method", lambda x: x.squeeze(), ((1, 3, 1),))
op("broadcast_to", lambda x: np.broadcast_to(x, (2, 3, 4)), ((3, 1),), ((4,),), ((),), ((1, 3, 4),))
op("concatenate-0", lambda x, y: np.concatenate([x, y]), ((2, 3), (4, 3)))
op("concatenate-1", lambda x, y: np.concatenate([x, y], axis=1), ((2, 3), (2, 5)))
op("concatenate-neg", lambda x, y: np.concatenate((x, y, x), axis=-1), ((2, 3), (2, 1)))
op("concatenate-None", lambda x, y: np.concatenate([x, y], axis=None), ((2, 3), (4,)))
op("concatenate-with-const", lambda x: np.concatenate([x, np.ones((1, 3))], axis=0), ((2, 3),))
op("stack-0", lambda x, y: np.stack([x, y]), ((2, 3), (2, 3)))
op("stack-1", lambda x, y: np.stack([x, y], axis=1), ((2, 3), (2, 3)))
op("stack-neg-fanout", lambda x, y: np.stack([x, y, x], axis=-1), ((2, 3), (2, 3)))
op("stack-scalars", lambda x, y: np.stack([x, y]), ((), ()))
op("hstack", lambda x, y: np.hstack([x, y]), ((2, 3), (2, 2)))
op("vstack", lambda x, y: np.vstack([x, y]), ((3,), (2, 3)))

# basic slicing on (5, 6) and (3, 4, 5)
for _label, _fn in [
    ("x[1:4]", lambda x: x[1:4]), ("x[::2]", lambda x: x[::2]), ("x[::-1]", lambda x: x[::-1]),
    ("x[-2:]", lambda x: x[-2:]), ("x[:, 1]", lambda x: x[:, 1]), ("x[1, ::-2]", lambda x: x[1, ::-2]),
    ("x[..., 1:]", lambda x: x[..., 1:]), ("x[-1]", lambda x: x[-1]), ("x[4:0:-2]", lambda x: x[4:0:-2]),
    ("x[0, -1]", lambda x: x[0, -1]), ("x[1:-1, -3::-1]", lambda x: x[1:-1, -3::-1]),
    ("x[..., ::-1]", lambda x: x[..., ::-1]), ("x[4:1]", lambda x: x[4:1]),
    ("x[-100:100]", lambda x: x[-100:100]), ("x[:, ::-3]", lambda x: x[:, ::-3]),
    ("x[2, None, 1:3]", lambda x: x[2, None, 1:3]), ("x[...]", lambda x: x[...]),
]:
    op(f"slice {_label}", _fn, X2)
for _label, _fn in [
    ("x[..., 0, ::2]", lambda x: x[..., 0, ::2]), ("x[1, ...]", lambda x: x[1, ...]),
    ("x[:, None, 2:]", lambda x: x[:, None, 2:]), ("x[::-1, 1, -2:]", lambda x: x[::-1, 1, -2:]),
    ("x[-1, -1, -1]", lambda x: x[-1, -1, -1]),
]:
    op(f"slice {_label}", _fn, ((3, 4, 5),))
op("slice-sum-overlap", lambda x: x[1:] * x[:-1], ((6,),))
