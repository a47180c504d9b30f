"""Products in BLAS's best forms (codegen/products.py): transposed products computed
transposed, and sums with a product in them as `matmul_add`, one BLAS pass that adds the
product onto the other operand's buffer."""
import numpy as np
import pytest

import jitgraph as jg
from jitgraph import codegen
from jitgraph.codegen import memory, runtime
from jitgraph.codegen.products import accumulate_products, rewrite_products
from jitgraph.interpreter import evaluate


def _l2_mlp(w1, w2, x):
    h = np.tanh(x @ w1)
    return np.sum((h @ w2) ** 2) + 0.1 * np.sum(w1 ** 2) + 0.2 * np.sum(w2 * w2)


def _shared_weight(w, h0, xs):
    """An unrolled recurrence: w's gradient is a sum of one product per step."""
    h = h0
    for t in range(xs.shape[0]):
        h = np.tanh(h @ w + xs[t])
    return np.sum(h ** 2)


def _args_l2(rng):
    return rng.standard_normal((40, 50)) * 0.1, rng.standard_normal((50, 30)) * 0.1, rng.standard_normal((60, 40))


def _args_shared(rng):
    return rng.standard_normal((20, 20)) * 0.3, rng.standard_normal((8, 20)), rng.standard_normal((5, 8, 20))


def _ops(graph):
    return [n.op for n in graph.nodes]


@pytest.mark.parametrize("fn, make, argnums, sums", [(_l2_mlp, _args_l2, (0, 1), 2),
                                                     (_shared_weight, _args_shared, (0,), 4)])
def test_a_sum_with_a_product_becomes_matmul_add(fn, make, argnums, sums):
    """The weight gradients that add an L2 term's or another step's contribution to a product
    are made by `matmul_add`, whose value is the sum's (the reference interpreter on both)."""
    args = make(np.random.default_rng(0))
    graph = jg.make_graph(fn, argnums=argnums, grad=True)(*args)
    new = accumulate_products(graph)
    new.verify()
    assert _ops(new).count("matmul_add") == sums
    assert _ops(new).count("matmul") == _ops(graph).count("matmul") - sums
    for got, want in zip(evaluate(new, *args), evaluate(graph, *args)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_the_sum_takes_its_operands_buffer():
    """Each sum adds its product onto the buffer of its other operand: an output's buffer is
    the one its first addend is written into, a chain of sums shares one buffer, and no
    product has a buffer of its own."""
    args = _args_shared(np.random.default_rng(1))
    graph = jg.make_graph(_shared_weight, argnums=(0,), grad=True)(*args)
    part, source, em = codegen.generate(graph)
    sums = [n for n in em.graph.nodes if n.op == "matmul_add"]
    assert sums and all(em.plan.accumulates_in_place(n) for n in sums)
    roots = {em.plan.root_of(n).id for n in sums}
    assert len(roots) == 1 and roots <= set(em.plan.out_index)
    assert source.count("_rt.matmul2d_acc(") == len(sums) and "_rt.copy(" not in source


def test_a_sum_the_plan_cannot_place_copies_its_operand_first(monkeypatch):
    """Where the plan does not let the sum have its operand's buffer, the operand is copied
    into the sum's and the product added there: the same values."""
    monkeypatch.setattr(memory.MemoryPlan, "_accumulate_in_place", lambda self, graph: None)
    args = _args_l2(np.random.default_rng(2))
    graph = jg.make_graph(_l2_mlp, argnums=(0, 1), grad=True)(*args)
    program = codegen.compile_graph(graph, backend="python")
    assert program.source.count("_rt.copy(") == 2 and program.source.count("_rt.matmul2d_acc(") == 2
    for got, want in zip(program.run(*args), evaluate(graph, *args)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_a_value_read_again_is_not_summed_in_place():
    """A sum's operand read by something else, or a product read twice, keeps `add`: adding
    in place would change what the other reader sees."""
    def loss(w, x):
        g = x @ w
        c = np.sin(w)
        return np.sum(c + x.T @ g) + np.sum(c * 2) + np.sum(g)

    rng = np.random.default_rng(3)
    graph = jg.make_graph(loss)(rng.standard_normal((6, 6)), rng.standard_normal((6, 6)))
    assert "matmul_add" not in _ops(accumulate_products(graph))


@pytest.mark.parametrize("m, n, k, layout", [(300, 40, 30, "CC"), (300, 260, 300, "FC"), (100, 600, 200, "CF"),
                                              (7, 5, 0, "CC")])
def test_blas_adds_the_product_onto_its_output(m, n, k, layout):
    """runtime.matmul2d_acc and its threaded form: out += a @ b, in row blocks, column blocks
    (few rows), on transposed operands and with an empty inner dimension."""
    rng = np.random.default_rng(m + n)
    a = rng.standard_normal((m, k)) if layout[0] == "C" else np.asfortranarray(rng.standard_normal((m, k)))
    b = rng.standard_normal((k, n)) if layout[1] == "C" else np.asfortranarray(rng.standard_normal((k, n)))
    c = rng.standard_normal((m, n))
    for fn in (runtime.matmul2d_acc, runtime.matmul2d_acc_par):
        out = c.copy()
        fn(a, b, out)
        np.testing.assert_allclose(out, c + a @ b, rtol=1e-12, atol=1e-12)


def test_compiled_gradients_with_sums_of_products_match_eager():
    """The compiled program (Numba) agrees with eager value_and_grad."""
    args = _args_shared(np.random.default_rng(4))
    f = jg.jit_grad(_shared_weight, argnums=(0, 1), wait=True)
    (v, grads), (v0, grads0) = f(*args), jg.value_and_grad(_shared_weight, argnums=(0, 1))(*args)
    assert "matmul_add" in f.lower(*args).source or "matmul2d_acc" in f.lower(*args).source
    np.testing.assert_allclose(v, v0, rtol=1e-12)
    for g, g0 in zip(grads, grads0):
        np.testing.assert_allclose(g, g0, rtol=1e-12, atol=1e-12)


def _torch_style(w1, b1, w2, x):
    """Linear layers as PyTorch lays their weights out: x @ W.T, W of shape (out, in)."""
    h = np.tanh(x @ w1.T + b1)
    return np.sum((h @ w2.T) ** 2) + 0.1 * np.sum(w2 ** 2)


def _args_torch(rng):
    return (rng.standard_normal((64, 32)) * 0.2, rng.standard_normal(64), rng.standard_normal((16, 64)) * 0.2,
            rng.standard_normal((128, 32)))


def test_a_transposed_product_is_computed_transposed():
    """The gradients of weights used as `x @ W.T` are `(x.T @ dy).T`: computed as `dy.T @ x`
    (factors read transposed in place), no transposed copy of a product is left, and one of
    them then adds its L2 term by `matmul_add`."""
    args = _args_torch(np.random.default_rng(6))
    graph = jg.make_graph(_torch_style, argnums=(0, 1, 2), grad=True)(*args)
    new = rewrite_products(graph)
    new.verify()
    assert not [n for n in new.nodes if n.op == "transpose" and n.inputs[0].op == "matmul"]
    assert _ops(new).count("matmul_add") == 1
    for got, want in zip(evaluate(new, *args), evaluate(graph, *args)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    _, source, em = codegen.generate(graph)
    assert "_rt.copy(" not in source
    transposes = [n for n in em.graph.nodes if n.op == "transpose"]
    assert transposes and all(em.plan.root_of(n) is not n for n in transposes)     # views BLAS reads
