"""Control flow in compiled graphs: a differentiable ODE solve with `jg.fori_loop`,
a recurrent scan with `jg.scan`, a data-dependent branch with `jg.cond`, and a
Hessian-vector product.

    python examples/control_flow.py
"""
import time

import numpy as np

import jitgraph as jg

STEPS, DT = 10_000, 1e-4


def ode_loss(k, y0):
    """Explicit Euler for dy/dt = -k*y + sin(t); loss = |y(T)|^2. One real loop, not unrolled."""
    def step(i, y):
        return y + DT * (-k * y + np.sin(DT * i))
    return np.sum(jg.fori_loop(0, STEPS, step, y0) ** 2)


def rnn_loss(w, u, xs):
    """A tiny recurrent net over the rows of xs; loss = sum of squared outputs."""
    def cell(h, x):
        h = np.tanh(h * w + x @ u)
        return h, np.sum(h * h)
    _, ys = jg.scan(cell, np.zeros(w.shape), xs)
    return np.sum(ys)


def clipped(x, w):
    """Branch on data: a different formula when the response is large."""
    r = np.sum(x * w)
    y = jg.cond(r > 1.0, lambda a: np.log1p(a * a) * w, lambda a: a * w, x)
    return np.sum(y ** 2)


def main():
    k, y0 = np.linspace(0.5, 2.0, 4), np.linspace(-1.0, 1.0, 4)
    f = jg.jit_grad(ode_loss, argnums=(0, 1), wait=True)     # time the compile
    t0 = time.perf_counter()
    v, (gk, gy) = f(k, y0)
    print(f"ODE, {STEPS} Euler steps: loss {v:.6f}, first call (trace+compile) "
          f"{time.perf_counter() - t0:.2f} s, graph of {len(f.lower(k, y0).graph.nodes)} nodes")
    print("  d loss / d k  =", gk)
    print("  d loss / d y0 =", gy)

    rng = np.random.default_rng(0)
    w, u, xs = rng.standard_normal(3) * 0.5, rng.standard_normal((2, 3)), rng.standard_normal((20, 2))
    v, (gw, gu) = jg.jit_grad(rnn_loss, argnums=(0, 1))(w, u, xs)
    v_eager, (gw_eager, _) = jg.value_and_grad(rnn_loss, argnums=(0, 1))(w, u, xs)
    print(f"RNN scan over 20 steps: loss {v:.6f} (eager {v_eager:.6f}), "
          f"max |grad w - eager| = {np.max(np.abs(gw - gw_eager)):.1e}")

    g = jg.jit_grad(clipped, argnums=1)
    x, w = np.array([0.5, 1.0, 2.0]), np.array([1.0, 0.5, 0.25])
    print("cond, large branch:", g(x, w), " small branch:", g(x * 0.1, w),
          f" ({g.cache_info().traces} trace)")

    hv = jg.hvp(lambda w: clipped(x, w))(w, np.array([1.0, 0.0, 0.0]))
    print("Hessian-vector product (first column of the Hessian):", hv)


if __name__ == "__main__":
    main()
