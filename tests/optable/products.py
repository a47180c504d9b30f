"""Rows: matrix products."""
import numpy as np

from . import op


# linear algebra
for _sa, _sb in [((3,), (3,)), ((3,), (3, 4)), ((3, 4), (4,)), ((2, 3), (3, 4)), ((5, 2, 3), (5, 3, 4)),
                 ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)), ((2, 1, 2, 3), (5, 3, 4)), ((3,), (5, 3, 4)),
                 ((5, 2, 3), (3,))]:
    op("matmul @", lambda a, b: a @ b, (_sa, _sb))
op("np.matmul", lambda a, b: np.matmul(a, b), ((2, 3), (3, 4)), ((4, 2, 3), (1, 3, 2)))
op("np.dot", lambda a, b: np.dot(a, b), ((3,), (3,)), ((2, 3), (3, 4)), ((2, 3), (3,)), ((3,), (3, 4)),
   ((), (3,)), ((2, 3), ()))
op("dot-method", lambda a, b: a.dot(b), ((2, 3), (3,)))
op("np.outer", lambda a, b: np.outer(a, b), ((3,), (4,)), ((2, 3), (4,)))
op("matmul-rmatmul-const", lambda a: np.ones((2, 3)) @ a @ np.arange(4.0), ((3, 4),))
op("matmul-self", lambda a: a @ a.T, ((3, 4),))
