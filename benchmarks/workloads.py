"""The benchmark workloads (float64), as plain NumPy functions plus hand-written gradients.

Each workload: a loss function, the indices of the differentiated arguments, a
function making its arguments at a given scale, and a hand-written NumPy
forward+backward for the reference timing.
"""
import numpy as np


def w1_loss(w, b, x):
    return np.sum(np.tanh(x * w + b) ** 2)


def w1_args(rng, n=4_000_000):
    return (rng.standard_normal(n), np.float64(0.3), rng.standard_normal(n))


def w1_numpy(w, b, x):
    t = np.tanh(x * w + b)
    g = 2 * t * (1 - t * t)
    return (t * t).sum(), (g * x, g.sum())


def w2_loss(W1, b1, W2, b2, X, Y):
    h = X @ W1 + b1
    a = np.maximum(h, 0)
    lo = a @ W2 + b2
    m = lo.max(axis=1, keepdims=True)
    lse = np.log(np.sum(np.exp(lo - m), axis=1, keepdims=True)) + m
    return -np.sum(Y * (lo - lse)) / X.shape[0]


def w2_args(rng, B=1024, D=256, H=512, C=10):
    X = rng.standard_normal((B, D))
    Y = np.eye(C)[rng.integers(0, C, B)]
    return (rng.standard_normal((D, H)) * 0.05, np.zeros(H), rng.standard_normal((H, C)) * 0.05,
            np.zeros(C), X, Y)


def w2_numpy(W1, b1, W2, b2, X, Y):
    B = X.shape[0]
    h = X @ W1 + b1
    a = np.maximum(h, 0)
    lo = a @ W2 + b2
    m = lo.max(1, keepdims=True)
    e = np.exp(lo - m)
    s = e.sum(1, keepdims=True)
    p = e / s
    loss = -(Y * (lo - m - np.log(s))).sum() / B
    dlo = (p - Y) / B
    gW2 = a.T @ dlo
    gb2 = dlo.sum(0)
    da = dlo @ W2.T
    dh = da * (h > 0)
    return loss, (X.T @ dh, dh.sum(0), gW2, gb2)


def w3_loss(A):
    m = A.max(axis=1, keepdims=True)
    return np.sum(np.log(np.sum(np.exp(A - m), axis=1)) + m[:, 0])


def w3_args(rng, n=2048):
    return (rng.standard_normal((n, n)),)


def w3_numpy(A):
    m = A.max(1, keepdims=True)
    e = np.exp(A - m)
    s = e.sum(1, keepdims=True)
    return (np.log(s) + m).sum(), e / s


DEPTH = 50


def w4_loss(z):
    for _ in range(DEPTH):
        z = np.sin(z) * 0.9 + 0.1 * z
    return np.sum(z)


def w4_args(rng, n=1_000_000):
    return (rng.standard_normal(n),)


def w4_numpy(z0):
    zs = [z0]
    z = z0
    for _ in range(DEPTH):
        z = np.sin(z) * 0.9 + 0.1 * z
        zs.append(z)
    g = np.ones_like(z)
    for k in range(DEPTH - 1, -1, -1):
        g = g * (0.9 * np.cos(zs[k]) + 0.1)
    return z.sum(), g


def w5_loss(a):
    return np.sum(np.tanh(a * a + 0.3))


def w5_args(rng):
    return (np.ones(3),)


def w5_numpy(a):
    t = np.tanh(a * a + 0.3)
    return t.sum(), (1 - t * t) * 2 * a


def w6_loss(x, gamma, beta):
    mu = np.mean(x, axis=1, keepdims=True)
    xc = x - mu
    var = np.mean(xc * xc, axis=1, keepdims=True)
    y = xc / np.sqrt(var + 1e-5) * gamma + beta
    return np.sum(y * y)


def w6_args(rng, r=4096, c=1024):
    return (rng.standard_normal((r, c)), rng.standard_normal(c), rng.standard_normal(c))


def w6_numpy(x, gam, bet):
    mu = x.mean(1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(1, keepdims=True)
    r = 1 / np.sqrt(var + 1e-5)
    xh = xc * r
    y = xh * gam + bet
    dy = 2 * y
    dxh = dy * gam
    dx = r * (dxh - dxh.mean(1, keepdims=True) - xh * (dxh * xh).mean(1, keepdims=True))
    return (y * y).sum(), (dx, (dy * xh).sum(0), dy.sum(0))


WORKLOADS = {
    "w1": dict(loss=w1_loss, argnums=(0, 1), args=w1_args, numpy=w1_numpy,
               title="elementwise sum(tanh(x*w+b)^2), 4M"),
    "w2": dict(loss=w2_loss, argnums=(0, 1, 2, 3), args=w2_args, numpy=w2_numpy,
               title="MLP 1024x256x512x10, softmax CE"),
    "w3": dict(loss=w3_loss, argnums=0, args=w3_args, numpy=w3_numpy,
               title="row logsumexp, summed, 2048x2048"),
    "w4": dict(loss=w4_loss, argnums=0, args=w4_args, numpy=w4_numpy,
               title="50-deep sin chain, 1M"),
    "w5": dict(loss=w5_loss, argnums=0, args=w5_args, numpy=w5_numpy,
               title="call overhead, 3 elements (us)"),
    "w6": dict(loss=w6_loss, argnums=(0, 1, 2), args=w6_args, numpy=w6_numpy,
               title="layer norm rows + sum of squares, 4096x1024"),
}
