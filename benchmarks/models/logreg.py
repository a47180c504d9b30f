"""L2-regularized logistic regression fitted with scipy.optimize.minimize (L-BFGS-B), the
value and gradient coming from one `jg.jit_grad` call (jac=True).

The weights and the bias live in one flat vector (SciPy optimizes a 1-D array); the loss
uses np.logaddexp(0, z) for a stable log(1 + e^z).
"""
import numpy as np
from scipy.optimize import minimize

import jitgraph as jg

from . import jax_numpy

TITLE = "logistic regression (value for scipy L-BFGS-B)"
SIZES = {"small": dict(n=40, d=5), "bench": dict(n=50000, d=100)}
LAM = 1.0


def make_inputs(size="small", seed=0):
    cfg = SIZES[size]
    rng = np.random.default_rng(seed)
    n, d = cfg["n"], cfg["d"]
    X = rng.standard_normal((n, d))
    w_true = rng.standard_normal(d) / np.sqrt(d) * 3
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(X @ w_true + 0.5)))).astype(np.float64)
    params = 0.01 * rng.standard_normal(d + 1)
    return params, X, y


def loss(wb, X, y):
    w, b = wb[:-1], wb[-1]
    z = X @ w + b
    return np.sum(np.logaddexp(0.0, z) - y * z) / len(y) + 0.5 * LAM / len(y) * np.dot(w, w)


def fit(X, y, x0=None, value_and_grad=None, **options):
    """Minimize `loss` with L-BFGS-B; `value_and_grad` defaults to jg.jit_grad(loss)."""
    fun = value_and_grad if value_and_grad is not None else jg.jit_grad(loss)
    x0 = np.zeros(X.shape[1] + 1) if x0 is None else x0
    return minimize(fun, x0, args=(X, y), jac=True, method="L-BFGS-B",
                    options=dict(gtol=1e-10, ftol=1e-14, maxiter=500, **options))


def loss_jax(wb, X, y):
    jnp = jax_numpy()
    w, b = wb[:-1], wb[-1]
    z = X @ w + b
    return jnp.sum(jnp.logaddexp(0.0, z) - y * z) / y.shape[0] + 0.5 * LAM / y.shape[0] * jnp.dot(w, w)
