"""LSTM sequence regression, the recurrence written with `jg.scan` (lax.scan style).

One LSTM layer (input, forget, output gates and a tanh candidate from one fused
matmul, split with np.split), a linear read-out at every step, mean squared error.
"""
import numpy as np

import jitgraph as jg

from . import jax_numpy

TITLE = "LSTM (jg.scan), MSE over the sequence"
SIZES = {"small": dict(T=4, batch=3, d_in=5, hidden=6, d_out=2),
         "bench": dict(T=50, batch=32, d_in=16, hidden=64, d_out=4)}


def make_inputs(size="small", seed=0):
    cfg = SIZES[size]
    rng = np.random.default_rng(seed)
    d, h, o = cfg["d_in"], cfg["hidden"], cfg["d_out"]
    params = {
        "Wx": rng.standard_normal((d, 4 * h)) / np.sqrt(d),
        "Wh": rng.standard_normal((h, 4 * h)) / np.sqrt(h),
        "b": np.concatenate([np.zeros(h), np.ones(h), np.zeros(2 * h)]),   # forget-gate bias 1
        "Wy": rng.standard_normal((h, o)) / np.sqrt(h),
        "by": np.zeros(o),
    }
    xs = rng.standard_normal((cfg["T"], cfg["batch"], d))
    targets = rng.standard_normal((cfg["T"], cfg["batch"], o))
    return params, xs, targets


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def lstm_cell(params, h, c, x):
    z = x @ params["Wx"] + h @ params["Wh"] + params["b"]
    i, f, o, g = np.split(z, 4, axis=1)
    c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    h = sigmoid(o) * np.tanh(c)
    return h, c


def jax_sigmoid(x):
    return 1.0 / (1.0 + jax_numpy().exp(-x))


def lstm_cell_jax(params, h, c, x):
    """`lstm_cell` in jax.numpy (for both LSTM programs' JAX versions)."""
    jnp = jax_numpy()
    z = x @ params["Wx"] + h @ params["Wh"] + params["b"]
    i, f, o, g = jnp.split(z, 4, axis=1)
    c = jax_sigmoid(f) * c + jax_sigmoid(i) * jnp.tanh(g)
    h = jax_sigmoid(o) * jnp.tanh(c)
    return h, c


def loss(params, xs, targets):
    batch, hidden = xs.shape[1], params["Wh"].shape[0]
    h0 = np.zeros((batch, hidden))
    c0 = np.zeros((batch, hidden))

    def step(carry, x):
        h, c = lstm_cell(params, *carry, x)
        return (h, c), h

    _, hs = jg.scan(step, (h0, c0), xs)
    ys = hs @ params["Wy"] + params["by"]
    return np.mean((ys - targets) ** 2)


def loss_jax(params, xs, targets):
    import jax
    jnp = jax_numpy()

    def step(carry, x):
        h, c = lstm_cell_jax(params, *carry, x)
        return (h, c), h

    batch, hidden = xs.shape[1], params["Wh"].shape[0]
    zeros = jnp.zeros((batch, hidden))
    _, hs = jax.lax.scan(step, (zeros, zeros), xs)
    ys = hs @ params["Wy"] + params["by"]
    return jnp.mean((ys - targets) ** 2)
