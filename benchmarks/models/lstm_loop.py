"""The same LSTM unrolled with a Python for-loop, hidden states written into a buffer.

`hs = np.zeros(...)`, `hs[t] = h` in the loop, then one read-out matmul: how the
recurrence is written without a scan primitive. Same inputs and loss as lstm_scan.
"""
import numpy as np

from . import jax_numpy
from .lstm_scan import SIZES, lstm_cell, lstm_cell_jax, make_inputs  # noqa: F401  (same model and data)

TITLE = "LSTM (Python loop, unrolled), MSE"


def loss(params, xs, targets):
    T, batch = xs.shape[0], xs.shape[1]
    hidden = params["Wh"].shape[0]
    h = np.zeros((batch, hidden))
    c = np.zeros((batch, hidden))
    hs = np.zeros((T, batch, hidden))
    for t in range(T):
        h, c = lstm_cell(params, h, c, xs[t])
        hs[t] = h
    ys = hs @ params["Wy"] + params["by"]
    return np.mean((ys - targets) ** 2)


def loss_jax(params, xs, targets):
    jnp = jax_numpy()
    T, batch = xs.shape[0], xs.shape[1]
    hidden = params["Wh"].shape[0]
    h = c = jnp.zeros((batch, hidden))
    hs = []
    for t in range(T):          # unrolled too (JAX has no in-place buffer: a list, then stack)
        h, c = lstm_cell_jax(params, h, c, xs[t])
        hs.append(h)
    ys = jnp.stack(hs) @ params["Wy"] + params["by"]
    return jnp.mean((ys - targets) ** 2)
