"""Rows: programs mixing several ops, with fan-out."""
import numpy as np

from . import op


# a few composites mixing several ops and fan-out
op("mlp", lambda w, b, x: np.tanh(x @ w + b), ((4, 3), (3,), (5, 4)))
op("seed-loss", lambda w, x, b, y: (w * x + b - y) ** 2, ((), (), (), ()), argnums=(0, 2))
op("fanout", lambda x: np.sin(x) * x + np.exp(-x) * np.sin(x), ((3,),))
op("only-nondiff-branch", lambda x, y: x * np.exp(y), ((3,), (3,)), argnums=(0,))
