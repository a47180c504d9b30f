"""Rows: structured control flow (traced, each construct is one node with subgraphs)."""
import numpy as np

import jitgraph as jg
from . import nondiff, op


# structured control flow: traced, each construct is one node with subgraphs; eager, Python control flow
op("jg.cond", lambda x: jg.cond(np.sum(x) > 0, lambda v: np.sin(v) * 2.0, lambda v: v ** 3, x),
   ((3,),), ((2, 2),))
op("jg.scan", lambda c, xs: jg.scan(lambda c, x: (np.tanh(c * x + 0.5), c * x), c, xs)[1], ((3,), (4, 3)))
op("jg.fori_loop", lambda x: jg.fori_loop(0, 3, lambda i, v: np.sin(v) * 1.5 + v, x), ((4,),))


# functions NumPy does not differentiate, or whose derivative is zero wherever it exists: values only
nondiff("jg.while_loop", lambda x: jg.while_loop(lambda v: np.sum(v) < 10.0, lambda v: v * 2.0 + 1.0, x),
        ((3,),), domain="positive")
