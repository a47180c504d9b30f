"""MLP classifier: tanh hidden layers, softmax cross-entropy on integer labels, L2 penalty.

In the spirit of the classic autograd / JAX MNIST example (a list of (W, b) layers,
log-softmax by subtracting a log-sum-exp), with labels picked by fancy indexing.
"""
import numpy as np

from . import jax_numpy

TITLE = "MLP classifier, softmax cross-entropy"
SIZES = {"small": dict(batch=16, layers=(12, 10, 8, 5)),
         "bench": dict(batch=256, layers=(784, 512, 512, 10))}
L2 = 1e-4


def init_params(layer_sizes, rng, scale=1.0):
    return [(scale * rng.standard_normal((m, n)) / np.sqrt(m), 0.1 * rng.standard_normal(n))
            for m, n in zip(layer_sizes[:-1], layer_sizes[1:])]


def make_inputs(size="small", seed=0):
    cfg = SIZES[size]
    rng = np.random.default_rng(seed)
    layers = cfg["layers"]
    params = init_params(layers, rng)
    x = rng.standard_normal((cfg["batch"], layers[0]))
    labels = rng.integers(0, layers[-1], size=cfg["batch"])
    return params, x, labels


def predict(params, inputs):
    activations = inputs
    for w, b in params[:-1]:
        activations = np.tanh(activations @ w + b)
    w, b = params[-1]
    logits = activations @ w + b
    # log-softmax: subtract the log-sum-exp of each row
    m = np.max(logits, axis=1, keepdims=True)
    lse = m + np.log(np.sum(np.exp(logits - m), axis=1, keepdims=True))
    return logits - lse


def loss(params, inputs, labels):
    logp = predict(params, inputs)
    nll = -np.mean(logp[np.arange(len(labels)), labels])
    penalty = sum(np.sum(w ** 2) for w, _ in params)
    return nll + L2 * penalty


def loss_jax(params, inputs, labels):
    jnp = jax_numpy()
    act = inputs
    for w, b in params[:-1]:
        act = jnp.tanh(act @ w + b)
    w, b = params[-1]
    logits = act @ w + b
    m = jnp.max(logits, axis=1, keepdims=True)
    logp = logits - (m + jnp.log(jnp.sum(jnp.exp(logits - m), axis=1, keepdims=True)))
    nll = -jnp.mean(logp[jnp.arange(labels.shape[0]), labels])
    return nll + L2 * sum(jnp.sum(w ** 2) for w, _ in params)
