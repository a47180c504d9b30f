"""Every held-out realistic NumPy program (benchmarks/models/) runs unmodified in eager
`value_and_grad` and in `jit_grad`, with the NumPy program's value and the right gradient.

References: central finite differences of the plain NumPy program along random directions
(always), and JAX's gradient of the module's `loss_jax` to 1e-9 (when JAX is importable).
Each program is compiled once (small sizes); a model's tests share one xdist worker.
"""
import os
import sys

import numpy as np
import pytest

import jitgraph as jg
from jitgraph.tree import tree_flatten, tree_unflatten

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import models  # noqa: E402  (benchmarks/models/)

_RESULTS = {}


def static_argnums(mod):
    return tuple(getattr(mod, "STATIC_ARGNUMS", ()))


def results(name):
    """(module, args, numpy value, {mode: (value, grad) or exception}, jit function), computed once."""
    if name not in _RESULTS:
        mod = models.load(name)
        args = mod.make_inputs("small", seed=0)
        out = {}
        jit = jg.jit_grad(mod.loss, static_argnums=static_argnums(mod))
        for mode, fn in (("eager", jg.value_and_grad(mod.loss)), ("jit", jit)):
            try:
                out[mode] = fn(*args)
            except Exception as e:       # reported by the test of that mode
                out[mode] = e
        _RESULTS[name] = (mod, args, mod.loss(*args), out, jit)
    return _RESULTS[name]


def computed(name, mode):
    mod, args, value, out, _ = results(name)
    r = out[mode]
    if isinstance(r, Exception):
        raise r
    return mod, args, value, r


def params_of(name, mode):
    return pytest.param(name, mode, marks=[pytest.mark.xdist_group(f"models-{name}")], id=f"{name}-{mode}")


CASES = [params_of(n, m) for n in models.NAMES for m in ("eager", "jit")]


def flat(tree):
    return [np.asarray(x, dtype=np.float64) for x in tree_flatten(tree)[0]]


def central_difference(f, params, direction, h):
    leaves, tree = tree_flatten(params)
    plus = tree_unflatten(tree, [x + h * d for x, d in zip(leaves, direction)])
    minus = tree_unflatten(tree, [x - h * d for x, d in zip(leaves, direction)])
    return (float(f(plus)) - float(f(minus))) / (2 * h)


@pytest.mark.parametrize("name, mode", CASES)
def test_matches_finite_differences(name, mode):
    mod, args, value, (v, grads) = computed(name, mode)
    np.testing.assert_allclose(float(v), float(value), rtol=1e-12, atol=1e-300)
    params, data = args[0], args[1:]
    g = flat(grads)
    p = flat(params)
    assert [x.shape for x in g] == [x.shape for x in p]
    assert all(np.all(np.isfinite(x)) for x in g)
    gnorm = np.sqrt(sum(np.sum(x ** 2) for x in g))
    rng = np.random.default_rng(1)
    for _ in range(3):
        d = [rng.standard_normal(x.shape) for x in p]
        norm = np.sqrt(sum(np.sum(x ** 2) for x in d))
        d = [x / norm for x in d]
        # h small enough not to cross a kink (relu, max pool, np.round) and leave O(h^2) tiny
        fd = central_difference(lambda q: mod.loss(q, *data), params, d, 1e-6)
        exact = sum(float(np.sum(a * b)) for a, b in zip(g, d))
        assert abs(fd - exact) <= 1e-6 * gnorm + 1e-8 * abs(float(value)), (fd, exact, gnorm)


@pytest.mark.parametrize("name, mode", CASES)
def test_matches_jax(name, mode):
    pytest.importorskip("jax")
    import jax
    mod, args, value, (v, grads) = computed(name, mode)
    models.jax_numpy()
    jv, jgrads = jax.jit(jax.value_and_grad(mod.loss_jax), static_argnums=static_argnums(mod))(*args)
    np.testing.assert_allclose(float(v), float(jv), rtol=1e-9)
    ref = [np.asarray(x) for x in jax.tree_util.tree_leaves(jgrads)]
    got = flat(grads)
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * np.max(np.abs(b)))


@pytest.mark.xdist_group("models-md")
def test_md_forces_are_minus_the_energy_gradient():
    mod, args, _, _, _ = results("md")
    params, vel, box = args
    eps, sigma = np.exp(params["log_eps"]), np.exp(params["log_sigma"])
    g = jg.grad(mod.energy)(params["pos"], eps, sigma, box)
    f = mod.forces(params["pos"], eps, sigma, box)
    np.testing.assert_allclose(-g, f, rtol=1e-9, atol=1e-9 * np.max(np.abs(f)))


@pytest.mark.xdist_group("models-lstm_loop")
def test_lstm_scan_and_loop_agree():
    scan, loop = models.load("lstm_scan"), models.load("lstm_loop")
    args = scan.make_inputs("small")
    assert scan.loss(*args) == pytest.approx(loop.loss(*args), rel=1e-14)
    _, _, _, (_, g_loop) = computed("lstm_loop", "jit")
    _, g_scan = jg.value_and_grad(scan.loss)(*args)
    for a, b in zip(flat(g_loop), flat(g_scan)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.xdist_group("models-logreg")
def test_logreg_lbfgs_with_jit_grad():
    mod, (w0, X, y), _, _, jit = results("logreg")
    res = mod.fit(X, y, value_and_grad=jit)
    assert res.success, res.message
    _, g = jit(res.x, X, y)
    assert np.max(np.abs(g)) < 1e-7
    ref = mod.fit(X, y, value_and_grad=jg.value_and_grad(mod.loss))
    np.testing.assert_allclose(res.x, ref.x, rtol=1e-6, atol=1e-8)
    assert jit.cache_info().traces == 1           # scipy's calls all hit the one trace
