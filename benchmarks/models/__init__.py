"""Realistic NumPy programs: the held-out test set and the benchmark of the models harness.

Each module is a plain NumPy program written the way its users write it, and exposes

    TITLE                                  one line saying what it computes
    make_inputs(size="small"|"bench", seed=0) -> (params, *data)   float64 arrays / pytrees
    loss(params, *data) -> float           plain NumPy
    loss_jax(params, *data)                the same in jax.numpy (reference gradient, timing)

The gradient is always taken with respect to `params` (argument 0). `benchmarks/models.py`
times them; `tests/test_models.py` checks them against JAX and finite differences.
"""
import importlib

NAMES = ["mlp", "lstm_scan", "lstm_loop", "gp", "convnet", "attention", "gmm", "bnn_vi",
         "pde", "md", "logreg"]


def load(name):
    """The module `benchmarks/models/<name>.py`."""
    if name not in NAMES:
        raise KeyError(f"unknown model {name!r}; choose from {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{name}")


def jax_numpy():
    """jax.numpy with float64 enabled (imported lazily: JAX is an optional peer)."""
    import jax
    if not jax.config.jax_enable_x64:
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    return jnp
