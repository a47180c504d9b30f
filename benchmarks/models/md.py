"""Molecular dynamics: Lennard-Jones particles in a periodic box, velocity Verlet.

Pair displacements by broadcasting, minimum image with np.round, energy and analytic forces
(F = -dU/dx, checked against jitgraph's gradient in the test), a few velocity-Verlet steps
with in-place updates, positions wrapped back into the box. The loss is the potential energy
after the steps; its gradient is taken w.r.t. the initial positions and the log LJ
parameters (epsilon, sigma): a differentiable simulation.
"""
import numpy as np

from . import jax_numpy

TITLE = "Lennard-Jones MD: energy, forces, 5 velocity-Verlet steps"
SIZES = {"small": dict(cells=3), "bench": dict(cells=6)}       # N = cells**3 particles
DENSITY = 0.8
DT = 0.004
N_STEPS = 5


def make_inputs(size="small", seed=0):
    m = SIZES[size]["cells"]
    rng = np.random.default_rng(seed)
    n = m ** 3
    box = (n / DENSITY) ** (1 / 3)
    grid = np.arange(m) * (box / m)
    lattice = np.stack(np.meshgrid(grid, grid, grid, indexing="ij"), axis=-1).reshape(n, 3)
    params = {"pos": lattice + 0.05 * rng.standard_normal((n, 3)),
              "log_eps": np.array(0.0), "log_sigma": np.array(0.0)}
    vel = 0.5 * rng.standard_normal((n, 3))
    vel -= vel.mean(axis=0)
    return params, vel, np.array(box)


def pair_terms(x, eps, sigma, box):
    """Minimum-image displacements d_ij = x_i - x_j, (sigma/r)^6 and 1/r^2 for i != j."""
    n = x.shape[0]
    d = x[:, None, :] - x[None, :, :]
    d = d - box * np.round(d / box)
    r2 = np.sum(d ** 2, axis=-1) + np.eye(n)        # the diagonal is masked below
    off = 1.0 - np.eye(n)
    inv_r2 = off / r2
    s6 = (sigma ** 2 * inv_r2) ** 3
    return d, s6, inv_r2


def energy(x, eps, sigma, box):
    _, s6, _ = pair_terms(x, eps, sigma, box)
    return 2.0 * eps * np.sum(s6 ** 2 - s6)          # 4 eps sum_{i<j} (s^12 - s^6)


def forces(x, eps, sigma, box):
    d, s6, inv_r2 = pair_terms(x, eps, sigma, box)
    coef = 24.0 * eps * (2.0 * s6 ** 2 - s6) * inv_r2
    return np.einsum("ij,ijk->ik", coef, d)


def loss(params, vel, box):
    eps, sigma = np.exp(params["log_eps"]), np.exp(params["log_sigma"])
    x = params["pos"].copy()
    v = vel.copy()
    f = forces(x, eps, sigma, box)
    for _ in range(N_STEPS):
        v += 0.5 * DT * f
        x += DT * v
        x -= box * np.floor(x / box)                 # wrap into the box
        f = forces(x, eps, sigma, box)
        v += 0.5 * DT * f
    return energy(x, eps, sigma, box)


def loss_jax(params, vel, box):
    jnp = jax_numpy()

    def terms(x, sigma):
        n = x.shape[0]
        d = x[:, None, :] - x[None, :, :]
        d = d - box * jnp.round(d / box)
        r2 = jnp.sum(d ** 2, axis=-1) + jnp.eye(n)
        inv_r2 = (1.0 - jnp.eye(n)) / r2
        return d, (sigma ** 2 * inv_r2) ** 3, inv_r2

    def force(x, eps, sigma):
        d, s6, inv_r2 = terms(x, sigma)
        return jnp.einsum("ij,ijk->ik", 24.0 * eps * (2.0 * s6 ** 2 - s6) * inv_r2, d)

    eps, sigma = jnp.exp(params["log_eps"]), jnp.exp(params["log_sigma"])
    x, v = params["pos"], vel
    f = force(x, eps, sigma)
    for _ in range(N_STEPS):
        v = v + 0.5 * DT * f
        x = x + DT * v
        x = x - box * jnp.floor(x / box)
        f = force(x, eps, sigma)
        v = v + 0.5 * DT * f
    _, s6, _ = terms(x, sigma)
    return 2.0 * eps * jnp.sum(s6 ** 2 - s6)
