"""Rows: programs mixing several ops, with fan-out."""
import numpy as np
import scipy.integrate as si
import scipy.spatial.distance as ssd

from . import op


# a few composites mixing several ops and fan-out
op("mlp", lambda w, b, x: np.tanh(x @ w + b), ((4, 3), (3,), (5, 4)))
op("seed-loss", lambda w, x, b, y: (w * x + b - y) ** 2, ((), (), (), ()), argnums=(0, 2))
op("fanout", lambda x: np.sin(x) * x + np.exp(-x) * np.sin(x), ((3,),))
op("only-nondiff-branch", lambda x, y: x * np.exp(y), ((3,), (3,)), argnums=(0,))

# scipy.spatial.distance and scipy.integrate (through their modules: jitgraph's wrappers)
op("scipy.spatial.distance", lambda a, b: ssd.cdist(a, b, "sqeuclidean") + ssd.cdist(a, b, "cityblock")
   + ssd.squareform(ssd.pdist(np.concatenate([a, b]), "minkowski", p=3))[:3, :2], ((3, 2), (2, 2)))
op("scipy.spatial.distance-cosine-euclid", lambda a, b: ssd.cdist(a, b, "cosine") + ssd.cdist(a, b), ((3, 4), (2, 4)))
op("scipy.integrate", lambda y: si.simpson(y, dx=0.5) + si.simpson(y, x=np.array([0.0, 0.3, 1.0, 1.2, 2.0]))
   + si.cumulative_trapezoid(y, initial=0)[:, 2] + si.trapezoid(y, axis=-1), ((3, 5),))

# np.fft and complex arithmetic (pairs of real arrays; dense transform products)
op("np.fft-spectral", lambda x: np.fft.irfft(1j * np.arange(4.0) * np.fft.rfft(x), n=6) + np.abs(np.fft.fft(x)) ** 2,
   ((2, 6),))
op("np.fft-2d", lambda x: np.fft.irfft2(np.fft.rfft2(x) * np.exp(-0.5j * np.arange(3.0)), s=(3, 4)) + np.angle(np.fft.fft2(x) + 0.5),
   ((3, 4),))
