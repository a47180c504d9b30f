"""Bayesian neural network fitted by black-box variational inference (reparameterization).

In the spirit of autograd's Bayesian neural net example: the variational posterior q is a
diagonal Gaussian over the flattened weights, (mean, log_std); S weight samples
w = mean + exp(log_std) * eps are unpacked by slicing, pushed through a tanh network at
once (a batched matmul over samples), and the ELBO = E_q[log p(y|w) + log p(w)] + H[q]
is estimated by their average. The noise eps is drawn outside and passed in.
"""
import numpy as np

from . import jax_numpy

TITLE = "Bayesian NN, black-box VI (reparameterized ELBO)"
STATIC_ARGNUMS = (4,)       # the layer sizes (a tuple of ints) select the graph
SIZES = {"small": dict(samples=3, n=8, layers=(1, 6, 1)),
         "bench": dict(samples=32, n=400, layers=(1, 50, 50, 1))}
NOISE_VAR = 0.01
PRIOR_VAR = 1.0


def shapes(layers):
    return [(m, n) for m, n in zip(layers[:-1], layers[1:])]


def num_weights(layers):
    return sum((m + 1) * n for m, n in shapes(layers))


def make_inputs(size="small", seed=0):
    cfg = SIZES[size]
    rng = np.random.default_rng(seed)
    layers = cfg["layers"]
    P = num_weights(layers)
    params = (0.3 * rng.standard_normal(P), np.full(P, -3.0) + 0.1 * rng.standard_normal(P))
    x = np.linspace(-4, 4, cfg["n"]).reshape(-1, 1)
    y = np.cos(x) + 0.1 * rng.standard_normal(x.shape)
    eps = rng.standard_normal((cfg["samples"], P))
    return params, x, y, eps, layers


def unpack(weights, layers):
    """(S, P) weight samples -> [(W (S, m, n), b (S, 1, n)), ...]"""
    S, start = weights.shape[0], 0
    out = []
    for m, n in shapes(layers):
        W = weights[:, start:start + m * n].reshape(S, m, n)
        start += m * n
        b = weights[:, start:start + n].reshape(S, 1, n)
        start += n
        out.append((W, b))
    return out


def predict(weights, inputs, layers):
    h = inputs                                  # (N, D), broadcast against (S, D, H)
    layer_params = unpack(weights, layers)
    for W, b in layer_params[:-1]:
        h = np.tanh(h @ W + b)
    W, b = layer_params[-1]
    return h @ W + b                            # (S, N, 1)


def log_gaussian(x, mean, var):
    return -0.5 * (np.log(2 * np.pi * var) + (x - mean) ** 2 / var)


def loss(params, x, y, eps, layers):
    mean, log_std = params
    weights = mean + np.exp(log_std) * eps                        # (S, P)
    log_prior = np.sum(log_gaussian(weights, 0.0, PRIOR_VAR), axis=1)
    preds = predict(weights, x, layers)
    log_lik = np.sum(log_gaussian(y, preds, NOISE_VAR), axis=(1, 2))
    P = mean.shape[0]
    entropy = 0.5 * P * (1.0 + np.log(2 * np.pi)) + np.sum(log_std)
    elbo = np.mean(log_prior + log_lik) + entropy
    return -elbo / len(y)


def loss_jax(params, x, y, eps, layers):
    jnp = jax_numpy()

    def log_gauss(x, mean, var):
        return -0.5 * (jnp.log(2 * jnp.pi * var) + (x - mean) ** 2 / var)

    mean, log_std = params
    w = mean + jnp.exp(log_std) * eps
    S, start, h = w.shape[0], 0, x
    shp = shapes(layers)
    for k, (m, n) in enumerate(shp):
        W = w[:, start:start + m * n].reshape(S, m, n)
        start += m * n
        b = w[:, start:start + n].reshape(S, 1, n)
        start += n
        h = h @ W + b if k == len(shp) - 1 else jnp.tanh(h @ W + b)
    log_prior = jnp.sum(log_gauss(w, 0.0, PRIOR_VAR), axis=1)
    log_lik = jnp.sum(log_gauss(y, h, NOISE_VAR), axis=(1, 2))
    P = mean.shape[0]
    entropy = 0.5 * P * (1.0 + jnp.log(2 * jnp.pi)) + jnp.sum(log_std)
    return -(jnp.mean(log_prior + log_lik) + entropy) / y.shape[0]
