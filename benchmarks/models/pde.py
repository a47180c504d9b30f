"""Finite-difference PDE residual: one backward-Euler step of 2-D viscous Burgers.

u_t + u (u_x + u_y) = nu (u_xx + u_yy) + f on a grid periodic in x (np.roll) with zero
Dirichlet walls in y (np.pad). The loss is the mean squared residual of the implicit step,
the quantity a Newton or least-squares solver drives to zero; its gradient is taken with
respect to the new field u and the log viscosity.
"""
import numpy as np

from . import jax_numpy

TITLE = "2-D Burgers implicit-step residual (np.roll, np.pad)"
SIZES = {"small": dict(n=8), "bench": dict(n=512)}
DT = 1e-3


def make_inputs(size="small", seed=0):
    n = SIZES[size]["n"]
    rng = np.random.default_rng(seed)
    xg = np.linspace(0, 2 * np.pi, n, endpoint=False)
    yg = np.linspace(0, np.pi, n + 2)[1:-1]
    X, Y = np.meshgrid(xg, yg)                      # rows: y, columns: x
    u_old = np.sin(X) * np.sin(Y)
    forcing = 0.1 * np.cos(2 * X) * np.sin(Y)
    params = {"u": u_old + 0.01 * rng.standard_normal((n, n)), "log_nu": np.array(np.log(0.05))}
    h = np.array(2 * np.pi / n)
    return params, u_old, forcing, h


def residual(u, u_old, forcing, nu, h):
    # x: periodic neighbours
    east, west = np.roll(u, -1, axis=1), np.roll(u, 1, axis=1)
    # y: zero Dirichlet walls outside the grid
    padded = np.pad(u, ((1, 1), (0, 0)), mode="constant")
    north, south = padded[2:, :], padded[:-2, :]
    ux = (east - west) / (2 * h)
    uy = (north - south) / (2 * h)
    lap = (east + west + north + south - 4 * u) / h ** 2
    return (u - u_old) / DT + u * (ux + uy) - nu * lap - forcing


def loss(params, u_old, forcing, h):
    r = residual(params["u"], u_old, forcing, np.exp(params["log_nu"]), h)
    return 0.5 * np.mean(r ** 2)


def loss_jax(params, u_old, forcing, h):
    jnp = jax_numpy()
    u, nu = params["u"], jnp.exp(params["log_nu"])
    east, west = jnp.roll(u, -1, axis=1), jnp.roll(u, 1, axis=1)
    padded = jnp.pad(u, ((1, 1), (0, 0)), mode="constant")
    north, south = padded[2:, :], padded[:-2, :]
    r = (u - u_old) / DT + u * ((east - west) / (2 * h) + (north - south) / (2 * h)) \
        - nu * (east + west + north + south - 4 * u) / h ** 2 - forcing
    return 0.5 * jnp.mean(r ** 2)
