"""Gaussian mixture model: mean negative log-likelihood of data under K diagonal Gaussians.

Parameters are unconstrained: means, log standard deviations and mixture logits
(log weights = logits - logsumexp(logits)); the per-point likelihood is a log-sum-exp over
components (scipy.special.logsumexp).
"""
import numpy as np
from scipy.special import logsumexp

from . import jax_numpy

TITLE = "GMM negative log-likelihood (scipy logsumexp)"
SIZES = {"small": dict(n=20, k=3, d=2), "bench": dict(n=20000, k=16, d=8)}


def make_inputs(size="small", seed=0):
    cfg = SIZES[size]
    rng = np.random.default_rng(seed)
    n, k, d = cfg["n"], cfg["k"], cfg["d"]
    centers = 3.0 * rng.standard_normal((k, d))
    X = centers[rng.integers(0, k, size=n)] + rng.standard_normal((n, d))
    params = {"means": X[rng.choice(n, size=k, replace=False)] + 0.1 * rng.standard_normal((k, d)),
              "log_scales": 0.1 * rng.standard_normal((k, d)),
              "logits": 0.1 * rng.standard_normal(k)}
    return params, X


def loss(params, X):
    means, log_scales = params["means"], params["log_scales"]
    log_weights = params["logits"] - logsumexp(params["logits"])
    z = (X[:, None, :] - means[None, :, :]) / np.exp(log_scales)[None, :, :]       # (n, k, d)
    log_norm = -0.5 * np.sum(z ** 2, axis=2) - np.sum(log_scales, axis=1) \
        - 0.5 * X.shape[1] * np.log(2 * np.pi)                                     # (n, k)
    return -np.mean(logsumexp(log_weights + log_norm, axis=1))


def loss_jax(params, X):
    jnp = jax_numpy()
    from jax.scipy.special import logsumexp as lse
    means, log_scales = params["means"], params["log_scales"]
    log_weights = params["logits"] - lse(params["logits"])
    z = (X[:, None, :] - means[None, :, :]) / jnp.exp(log_scales)[None, :, :]
    log_norm = -0.5 * jnp.sum(z ** 2, axis=2) - jnp.sum(log_scales, axis=1) \
        - 0.5 * X.shape[1] * jnp.log(2 * jnp.pi)
    return -jnp.mean(lse(log_weights + log_norm, axis=1))
