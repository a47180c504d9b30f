"""Pre-norm transformer block: causal multi-head self-attention and a GELU MLP, each with
layer norm and a residual connection; loss = mean squared error against targets.

Heads are cut with np.split and stacked, scores and the weighted sum are einsums, the
causal mask is np.where(mask, scores, -inf), softmax subtracts the row max.
"""
import numpy as np

from . import jax_numpy

TITLE = "transformer block: causal MHA + MLP, layer norm, residual"
STATIC_ARGNUMS = (3,)      # n_heads selects the graph (np.split needs a Python int)
SIZES = {"small": dict(batch=2, T=5, d=8, heads=2),
         "bench": dict(batch=8, T=64, d=128, heads=4)}


def make_inputs(size="small", seed=0):
    cfg = SIZES[size]
    rng = np.random.default_rng(seed)
    d = cfg["d"]
    params = {
        "ln1_g": 1.0 + 0.1 * rng.standard_normal(d), "ln1_b": 0.1 * rng.standard_normal(d),
        "W_qkv": rng.standard_normal((d, 3 * d)) / np.sqrt(d), "b_qkv": np.zeros(3 * d),
        "W_o": rng.standard_normal((d, d)) / np.sqrt(d), "b_o": np.zeros(d),
        "ln2_g": 1.0 + 0.1 * rng.standard_normal(d), "ln2_b": 0.1 * rng.standard_normal(d),
        "W_1": rng.standard_normal((d, 4 * d)) / np.sqrt(d), "b_1": np.zeros(4 * d),
        "W_2": rng.standard_normal((4 * d, d)) / np.sqrt(4 * d), "b_2": np.zeros(d),
    }
    x = rng.standard_normal((cfg["batch"], cfg["T"], d))
    y = rng.standard_normal((cfg["batch"], cfg["T"], d))
    return params, x, y, cfg["heads"]


def layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def attention(p, x, n_heads):
    B, T, D = x.shape
    qkv = x @ p["W_qkv"] + p["b_qkv"]
    q, k, v = np.split(qkv, 3, axis=-1)
    # (B, T, D) -> (B, H, T, D/H)
    q, k, v = (np.stack(np.split(a, n_heads, axis=-1), axis=1) for a in (q, k, v))
    scores = np.einsum("bhtd,bhsd->bhts", q, k) / np.sqrt(D // n_heads)
    causal = np.tril(np.ones((T, T), dtype=bool))
    scores = np.where(causal, scores, -np.inf)
    out = np.einsum("bhts,bhsd->bhtd", softmax(scores), v)
    out = np.concatenate([out[:, h] for h in range(n_heads)], axis=-1)   # (B, T, D)
    return out @ p["W_o"] + p["b_o"]


def loss(params, x, y, n_heads):
    h = x + attention(params, layer_norm(x, params["ln1_g"], params["ln1_b"]), n_heads)
    z = layer_norm(h, params["ln2_g"], params["ln2_b"])
    h = h + gelu(z @ params["W_1"] + params["b_1"]) @ params["W_2"] + params["b_2"]
    return np.mean((h - y) ** 2)


def loss_jax(params, x, y, n_heads):
    jnp = jax_numpy()

    def ln(x, g, b, eps=1e-5):
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + eps) * g + b

    p = params
    B, T, D = x.shape
    a = ln(x, p["ln1_g"], p["ln1_b"])
    q, k, v = jnp.split(a @ p["W_qkv"] + p["b_qkv"], 3, axis=-1)
    q, k, v = (jnp.stack(jnp.split(t, n_heads, axis=-1), axis=1) for t in (q, k, v))
    s = jnp.einsum("bhtd,bhsd->bhts", q, k) / jnp.sqrt(D // n_heads)
    s = jnp.where(jnp.tril(jnp.ones((T, T), dtype=bool)), s, -jnp.inf)
    e = jnp.exp(s - s.max(axis=-1, keepdims=True))
    o = jnp.einsum("bhts,bhsd->bhtd", e / e.sum(axis=-1, keepdims=True), v)
    o = jnp.concatenate([o[:, i] for i in range(n_heads)], axis=-1)
    h = x + o @ p["W_o"] + p["b_o"]
    z = ln(h, p["ln2_g"], p["ln2_b"])
    u = z @ p["W_1"] + p["b_1"]
    u = 0.5 * u * (1.0 + jnp.tanh(jnp.sqrt(2.0 / jnp.pi) * (u + 0.044715 * u ** 3)))
    return jnp.mean((h + u @ p["W_2"] + p["b_2"] - y) ** 2)
