"""Gaussian-process regression: negative log marginal likelihood, ARD RBF kernel.

The textbook algorithm (Rasmussen & Williams, Alg. 2.1): K = sf^2 exp(-r^2/2) + sn^2 I,
L = cholesky(K), alpha = L^T \\ (L \\ y), NLL = y.alpha/2 + sum(log diag L) + n/2 log(2 pi).
The gradient is taken with respect to the log hyperparameters.
"""
import numpy as np

from . import jax_numpy

TITLE = "GP regression NLL (cholesky + solve)"
SIZES = {"small": dict(n=12, d=2), "bench": dict(n=400, d=3)}


def make_inputs(size="small", seed=0):
    cfg = SIZES[size]
    rng = np.random.default_rng(seed)
    n, d = cfg["n"], cfg["d"]
    X = rng.uniform(-3, 3, size=(n, d))
    y = np.sin(X).sum(axis=1) + 0.1 * rng.standard_normal(n)
    params = {"log_lengthscale": np.log(np.full(d, 1.2)) + 0.1 * rng.standard_normal(d),
              "log_signal": np.array(0.1),
              "log_noise": np.array(np.log(0.2))}
    return params, X, y


def rbf_kernel(X, lengthscale, signal_var):
    Z = X / lengthscale
    sq = np.sum(Z ** 2, axis=1)
    r2 = sq[:, None] + sq[None, :] - 2.0 * Z @ Z.T
    r2 = np.maximum(r2, 0.0)
    return signal_var * np.exp(-0.5 * r2)


def loss(params, X, y):
    n = X.shape[0]
    ell = np.exp(params["log_lengthscale"])
    sf2 = np.exp(2.0 * params["log_signal"])
    sn2 = np.exp(2.0 * params["log_noise"])
    K = rbf_kernel(X, ell, sf2) + (sn2 + 1e-8) * np.eye(n)
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, y))
    return 0.5 * y @ alpha + np.sum(np.log(np.diag(L))) + 0.5 * n * np.log(2 * np.pi)


def loss_jax(params, X, y):
    jnp = jax_numpy()
    n = X.shape[0]
    Z = X / jnp.exp(params["log_lengthscale"])
    sq = jnp.sum(Z ** 2, axis=1)
    r2 = jnp.maximum(sq[:, None] + sq[None, :] - 2.0 * Z @ Z.T, 0.0)
    K = jnp.exp(2.0 * params["log_signal"]) * jnp.exp(-0.5 * r2)
    K = K + (jnp.exp(2.0 * params["log_noise"]) + 1e-8) * jnp.eye(n)
    L = jnp.linalg.cholesky(K)
    alpha = jnp.linalg.solve(L.T, jnp.linalg.solve(L, y))
    return 0.5 * y @ alpha + jnp.sum(jnp.log(jnp.diag(L))) + 0.5 * n * jnp.log(2 * jnp.pi)
