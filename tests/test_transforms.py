"""vjp, jvp, jacobian, hessian and check_grads, eager and compiled, against differences."""
import numpy as np
import pytest

import jitgraph as jg

RNG = np.random.default_rng(3)
W = RNG.standard_normal((3, 4))
X = RNG.standard_normal(4)
V = RNG.standard_normal(4)
EPS = 1e-6


def f(x):
    return np.tanh(W @ x) * x[:3]


def wide(x):                       # 10 outputs from 4 inputs: the Jacobian by columns
    return np.concatenate([f(x), f(x) ** 2, np.sin(x)])


def scalar(x):
    return np.sum(np.tanh(W @ x) ** 2) + np.prod(x)


def fd_jacobian(fn, x):
    return np.stack([(fn(x + EPS * e) - fn(x - EPS * e)) / (2 * EPS) for e in np.eye(x.size)], axis=-1)


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_jvp_vjp_jacobian_hessian(mode):
    run = (lambda fn: fn) if mode == "eager" else jg.jit
    out, tan = run(lambda x, v: jg.jvp(f, (x,), (v,)))(X, V)
    np.testing.assert_allclose(out, f(X))
    np.testing.assert_allclose(tan, (f(X + EPS * V) - f(X - EPS * V)) / (2 * EPS), atol=1e-8)
    u = RNG.standard_normal(3)
    ct = run(lambda x, u: jg.vjp(f, x)[1](u)[0])(X, u)
    np.testing.assert_allclose(ct, fd_jacobian(f, X).T @ u, atol=1e-8)
    for fn in (f, wide):
        np.testing.assert_allclose(run(jg.jacobian(fn))(X), fd_jacobian(fn, X), atol=1e-7)
    grad = jg.grad(scalar)
    np.testing.assert_allclose(run(jg.hessian(scalar))(X), fd_jacobian(grad, X), atol=1e-6)


def test_structures_argnums_and_aux():
    def g(p, x, k):
        y = np.tanh(p["w"] @ x + p["b"])
        return (y, np.sum(y) * k), {"k": k}
    p = {"w": W, "b": RNG.standard_normal(3)}
    jac, aux = jg.jacobian(g, argnums=(0, 1), has_aux=True)(p, X, 2.0)
    assert aux == {"k": 2.0}
    (dy_dp, dy_dx), (ds_dp, ds_dx) = jac
    assert dy_dp["w"].shape == (3, 3, 4) and dy_dx.shape == (3, 4) and ds_dp["b"].shape == (3,)
    np.testing.assert_allclose(dy_dx, fd_jacobian(lambda x: g(p, x, 2.0)[0][0], X), atol=1e-8)
    np.testing.assert_allclose(ds_dp["w"], jg.grad(lambda p: g(p, X, 2.0)[0][1])(p)["w"], atol=1e-12)
    (out, tan, aux) = jg.jvp(lambda p: g(p, X, 1.0), (p,), ({"w": np.ones_like(W), "b": np.zeros(3)},),
                             has_aux=True)
    assert tan[0].shape == (3,) and np.ndim(tan[1]) == 0
    np.testing.assert_allclose(tan[1], np.sum(tan[0]), atol=1e-12)
    out, pull = jg.vjp(lambda a, b: a * b, X, V)
    ga, gb = pull(np.ones(4))
    np.testing.assert_array_equal(ga, V)
    np.testing.assert_array_equal(gb, X)


def test_check_grads_passes_and_names_a_wrong_rule():
    jg.check_grads(scalar, (X,), order=2)
    jg.check_grads(wide, (X,), order=2, modes=["fwd", "rev"])
    jg.check_grads(lambda x: x ** 3, (X.astype(np.float32),), order=1)
    wrong = lambda x: np.sum(x * jg.stop_gradient(x))      # noqa: E731  (its rule drops a term)
    for mode in ("fwd", "rev"):
        with pytest.raises(AssertionError, match=("JVP" if mode == "fwd" else "VJP") + " .order 1."):
            jg.check_grads(wrong, (X,), order=1, modes=(mode,))


def test_gradients_of_one_element_outputs():
    w = np.ones((1, 3))
    for run in (jg.value_and_grad, jg.jit_grad):
        v, g = run(lambda w: (w @ w.T) * 2.0)(w)        # shape (1, 1), as autograd allows
        assert v.shape == (1, 1) and v[0, 0] == 6.0
        np.testing.assert_array_equal(g, 4.0 * w)
    with pytest.raises(jg.GradError, match="one element"):
        jg.grad(lambda w: w * 2.0)(np.ones(2))
