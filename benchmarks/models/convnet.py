"""Small conv net: two valid convolutions (sliding_window_view + einsum), ReLU, 2x2 max
pooling by reshape/max, a dense read-out and softmax cross-entropy.

Images are NCHW. The convolution is the usual NumPy idiom: take every k x k window with
`np.lib.stride_tricks.sliding_window_view` and contract windows with the filters in one einsum.
"""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from . import jax_numpy

TITLE = "conv net: 2 conv (window view + einsum), max pool, softmax CE"
# image side, (channels, kernel) per conv layer; each conv output side must be even for pooling
SIZES = {"small": dict(batch=3, side=12, convs=((1, 3), (3, 3), (4, 2)), classes=4),
         "bench": dict(batch=64, side=28, convs=((1, 3), (8, 3), (16, 4)), classes=10)}


def make_inputs(size="small", seed=0):
    cfg = SIZES[size]
    rng = np.random.default_rng(seed)
    (c0, _), (c1, k1), (c2, k2) = cfg["convs"]
    side = cfg["side"]
    s1 = (side - k1 + 1) // 2
    s2 = (s1 - k2 + 1) // 2
    params = {
        "conv1": rng.standard_normal((c1, c0, k1, k1)) / np.sqrt(c0 * k1 * k1),
        "b1": 0.1 * rng.standard_normal(c1),
        "conv2": rng.standard_normal((c2, c1, k2, k2)) / np.sqrt(c1 * k2 * k2),
        "b2": 0.1 * rng.standard_normal(c2),
        "dense": rng.standard_normal((c2 * s2 * s2, cfg["classes"])) / np.sqrt(c2 * s2 * s2),
        "bd": np.zeros(cfg["classes"]),
    }
    images = rng.standard_normal((cfg["batch"], c0, side, side))
    labels = rng.integers(0, cfg["classes"], size=cfg["batch"])
    return params, images, labels


def conv2d(x, w, b):
    """Valid cross-correlation: x (N, C, H, W), w (O, C, k, k) -> (N, O, H-k+1, W-k+1)."""
    k = w.shape[-1]
    windows = sliding_window_view(x, (k, k), axis=(2, 3))      # (N, C, H', W', k, k)
    return np.einsum("nchwij,ocij->nohw", windows, w) + b[None, :, None, None]


def maxpool2(x):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def loss(params, images, labels):
    h = maxpool2(np.maximum(conv2d(images, params["conv1"], params["b1"]), 0.0))
    h = maxpool2(np.maximum(conv2d(h, params["conv2"], params["b2"]), 0.0))
    logits = h.reshape(h.shape[0], -1) @ params["dense"] + params["bd"]
    logits = logits - logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -logp[np.arange(len(labels)), labels].mean()


def loss_jax(params, images, labels):
    import jax
    jnp = jax_numpy()

    def conv(x, w, b):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), "VALID",
                                         precision=jax.lax.Precision.HIGHEST)
        return y + b[None, :, None, None]

    def pool(x):
        n, c, h, w = x.shape
        return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))

    h = pool(jnp.maximum(conv(images, params["conv1"], params["b1"]), 0.0))
    h = pool(jnp.maximum(conv(h, params["conv2"], params["b2"]), 0.0))
    logits = h.reshape(h.shape[0], -1) @ params["dense"] + params["bd"]
    logits = logits - logits.max(axis=1, keepdims=True)
    logp = logits - jnp.log(jnp.exp(logits).sum(axis=1, keepdims=True))
    return -logp[jnp.arange(labels.shape[0]), labels].mean()
