"""Rows: integer-array indexing (gather; its adjoint scatter-adds repeats)."""
import numpy as np

from . import IDX, IDX2, op


# integer-array gather; backward is a scatter-add that accumulates repeats
op("gather x[idx]", lambda x: x[IDX], ((5, 3),))
op("gather x[list]", lambda x: x[[4, 4, 1]], ((5, 3),))
op("gather x[:, idx]", lambda x: x[:, [2, 0, 2]], ((5, 3),))
op("gather E[idx2d]", lambda e: e[IDX2], ((6, 3),))
op("gather negative", lambda x: x[np.array([-1, 0, -1])], ((5, 3),))
op("gather 1d", lambda x: x[IDX], ((5,),))
op("gather x[idx, :, 0]", lambda x: x[IDX % 3, :, 0], ((3, 4, 5),))
op("gather x[0, :, idx]", lambda x: x[0, :, IDX], ((3, 4, 5),))
op("gather x[:, idx, 1:3]", lambda x: x[:, IDX % 4, 1:3], ((3, 4, 5),))
op("gather x[1:, idx]", lambda x: x[1:, IDX2 % 4], ((3, 4, 5),))
op("gather x[..., idx]", lambda x: x[..., IDX], ((3, 4, 5),))
op("gather idx input", lambda x, i: x[i], ((5, 3), IDX), ((6, 3), IDX2))
op("gather idx input col", lambda x, i: x[:, i], ((2, 5), IDX))
op("np.take", lambda x: np.take(x, IDX, axis=0), ((5, 3),))
op("np.take axis1", lambda x: np.take(x, [1, 1, 2], axis=1), ((5, 3),))
op("np.take axis-1", lambda x: np.take(x, IDX2, axis=-1), ((2, 6),))
op("np.take flat", lambda x: np.take(x, [0, 7, 7, 14]), ((5, 3),))
op("take method", lambda x: x.take(IDX, axis=0), ((5, 3),))
op("np.take idx input", lambda x, i: np.take(x, i, axis=1), ((2, 5), IDX))

# several index arrays (one flattened gather), known boolean masks
op("gather x[i, j]", lambda x: x[[0, 1, 3], [1, 2, 2]], ((4, 5),))
op("gather x[i2d, j]", lambda x: x[IDX2 % 4, [1, 0]], ((4, 5),))
op("gather x[i, :, j]", lambda x: x[[0, 1], :, [1, 2]], ((2, 3, 4),))
op("gather x[:, i, j]", lambda x: x[:, [0, 1], [1, 3]], ((2, 3, 4),))
op("gather x[0, i, None]", lambda x: x[0, [1, 0], None], ((2, 3, 4),))
op("gather x[i, None, j]", lambda x: x[[1], None, [0, 1]], ((2, 3, 4),))
op("gather x[-i, -j]", lambda x: x[np.array([-1, -4]), np.array([-2, 0])], ((4, 5),))
op("gather traced i, j", lambda x, i, j: x[i, j], ((4, 5), IDX % 4, IDX))
op("mask x[:, m]", lambda x: x[:, np.array([True, False, True, False, True])], ((4, 5),))
op("mask 2-d", lambda x: x[np.arange(20).reshape(4, 5) % 3 == 0], ((4, 5),))
