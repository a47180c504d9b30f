"""Products in BLAS's best forms (codegen/products.py): transposed products computed
transposed, and sums with a product in them as `matmul_add`, one BLAS pass that adds the
product onto the other operand's buffer."""
import numpy as np
import pytest

import jitgraph as jg
from jitgraph import codegen
from jitgraph.codegen import memory, runtime, strides
from jitgraph.codegen import products as codegen_products
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


def test_a_transposed_product_is_computed_transposed(monkeypatch):
    """The gradients of weights used as `x @ W.T` are `(x.T @ dy).T`: computed as `dy.T @ x`
    (factors read transposed in place), no transposed copy of a product is left, and one of
    them then adds its L2 term by `matmul_add`. (The forward's W.T, a right factor, stays a
    view here: see the next test for when it is copied.)"""
    from jitgraph.codegen import fusion
    monkeypatch.setattr(fusion, "NT_COPY_ROWS", 10 ** 9)
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


# ---- batched products reading strided views in place (codegen/strides.py) ----------------------

def _heads(x, w, n_heads=2):
    """Multi-head attention scores and weighted values: heads cut with np.split and stacked,
    keys read transposed by einsum, values by a swapaxes."""
    qkv = x @ w
    q, k, v = (np.stack(np.split(a, n_heads, axis=-1), axis=1) for a in np.split(qkv, 3, axis=-1))
    s = np.einsum("bhtd,bhsd->bhts", q, k)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    o = np.einsum("bhts,bhsd->bhtd", p / p.sum(axis=-1, keepdims=True), v)
    return np.sum(o ** 2) + np.sum(np.swapaxes(v, 2, 3) @ o)


def _batch_transposed(h, d):
    """A batch of matrices transposed (np.swapaxes) as a product's operand."""
    return np.sum(np.tanh(np.swapaxes(h, 1, 2) @ d) ** 2)


def _batch_reversed(h, d):
    """Operands read backwards along the batch axis (a negative stride BLAS never sees) and
    along a matrix axis (a negative stride BLAS cannot read: the view is copied)."""
    return np.sum((h[::-1] @ d) ** 2) + np.sum((h[:, ::-1, :] @ d) ** 3)


def _five_d(a, b):
    """Batch axes that no two groups of strides describe: the product keeps its copies."""
    t = np.transpose(a, (2, 1, 0, 3, 4))
    return np.sum(np.tanh(t @ b) ** 2)


STRIDED = [
    (_heads, lambda r: (r.standard_normal((3, 5, 8)), r.standard_normal((8, 24)) * 0.3)),
    (_batch_transposed, lambda r: (r.standard_normal((4, 6, 3)), r.standard_normal((4, 6, 5)))),
    (_batch_reversed, lambda r: (r.standard_normal((4, 6, 3)), r.standard_normal((4, 3, 5)))),
    (_five_d, lambda r: (r.standard_normal((2, 3, 4, 5, 6)), r.standard_normal((4, 3, 2, 6, 2)))),
]


def _strided_products(em):
    return [n for n in em.graph.nodes if n.id in em.part.strided]


def test_products_of_a_few_terms_are_loops_on_the_cpu():
    """The traced graph keeps its products; the CPU target computes one summing at most SMALL_K
    terms per element with a short side or few terms in all (points @ a 3 x 3 matrix), or an
    outer product (one term), as a loop fused with its neighbours, and a larger one (5 terms,
    30 x 7) with BLAS. Values and gradients match eager and finite differences."""
    def f(r, w, x, y):
        return np.sum(np.tanh(x @ r.T) ** 2) + np.sum(np.sin(y @ w) * (y @ w))
    rng = np.random.default_rng(14)
    for k, blas in ((1, False), (3, False), (codegen_products.SMALL_K + 1, True)):
        r, w = rng.standard_normal((3, 3)), rng.standard_normal((k, 7))
        x, y = rng.standard_normal((30, 3)), rng.standard_normal((30, k))
        graph = jg.make_graph(f, argnums=(0, 1), grad=True)(r, w, x, y)
        products = [n for n in graph.nodes if n.op == "matmul" and n.id not in graph.adjoint_ids]
        assert len(products) == 2                       # the traced graph: unchanged
        low = jg.jit_grad(f, argnums=(0, 1), wait=True).lower(r, w, x, y)
        cpu = rewrite_products(low.graph)
        forward = [n for n in cpu.nodes if n.op == "matmul" and n.id not in cpu.adjoint_ids]
        assert [n.inputs[1].shape for n in forward] == ([(k, 7)] if blas else [])
        v, (gr, gw) = jg.jit_grad(f, argnums=(0, 1), wait=True)(r, w, x, y)
        v0, (gr0, gw0) = jg.value_and_grad(f, argnums=(0, 1))(r, w, x, y)
        np.testing.assert_allclose(v, v0, rtol=1e-13)
        np.testing.assert_allclose(gr, gr0, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(gw, gw0, rtol=1e-12, atol=1e-13)
        e = np.zeros_like(w)
        e[0, 1] = 1e-6
        np.testing.assert_allclose(gw[0, 1], (f(r, w + e, x, y) - f(r, w - e, x, y)) / 2e-6, rtol=1e-6)


def test_stacks_of_small_products_are_loops_on_the_cpu():
    """A stack of products of at most SMALL_STACKED_TERMS terms each (per-point 2 x 2 rotations of
    16 points, per-sample 8 x 8 weights) is a loop, forward and backward, not one BLAS call per
    matrix; a stack of 12 x 12 ones stays BLAS's. Values and gradients match eager."""
    def rotate(th, pts):
        c, s = np.cos(th), np.sin(th)
        R = np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)
        return np.sum((np.einsum("nij,nkj->nki", R, pts) - 1.0) ** 2)

    def per_sample(W, x):
        return np.sum(np.tanh(np.einsum("bij,bjk->bik", x, W)) ** 2)

    rng = np.random.default_rng(15)
    cases = ((rotate, (rng.standard_normal(40), rng.standard_normal((40, 16, 2))), False),
             (per_sample, (rng.standard_normal((30, 8, 8)), rng.standard_normal((30, 8, 8))), False),
             (per_sample, (rng.standard_normal((30, 12, 12)), rng.standard_normal((30, 12, 12))), True))
    for f, args, blas in cases:
        low = jg.jit_grad(f, argnums=(0, 1), wait=True).lower(*args)
        stacked = [n for n in rewrite_products(low.graph).nodes if n.op == "matmul" and n.ndim > 2]
        assert bool(stacked) == blas, (f.__name__, [n.shape for n in stacked])
        v, g = jg.jit_grad(f, argnums=(0, 1), wait=True)(*args)
        v0, g0 = jg.value_and_grad(f, argnums=(0, 1))(*args)
        np.testing.assert_allclose(v, v0, rtol=1e-13)
        for a, b in zip(g, g0):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("fn, make", STRIDED, ids=[f.__name__ for f, _ in STRIDED])
def test_batched_products_read_strided_views_in_place(fn, make, monkeypatch):
    """A batched product whose operands are views of stored arrays (slices, stacks of slices,
    transposes, reversals) reads them where they are; compiled, in a Python entry and as
    Python, it computes eager value_and_grad's values."""
    monkeypatch.setattr(codegen_products, "SMALL_K", 0)    # BLAS products at these small sizes
    monkeypatch.setattr(codegen_products, "SMALL_STACKED_TERMS", 0)
    args = make(np.random.default_rng(7))
    graph = jg.make_graph(fn, argnums=(0, 1), grad=True)(*args)
    _, source, em = codegen.generate(graph)
    batched = [n for n in em.graph.nodes if n.op == "matmul" and n.ndim > 2]
    strided = _strided_products(em)
    if fn is _five_d:
        assert len(strided) < len(batched) and "matmul_batched" in source      # the forward product
    else:
        assert strided and "_rt.strided(" in source
    if fn is _heads:
        # the products read the heads in place; a loop stores only the keys transposed as a
        # right factor (OpenBLAS multiplies small matrices slower reading those transposed)
        assert len(strided) >= 4
        stored = [n for n in em.graph.nodes if n.op in ("concatenate", "transpose") and n.ndim > 2
                  and n.id in em.part.materialized]
        assert stored and all(any(u.op == "matmul" and u.inputs[1] is n for u in em.users[n.id]) for n in stored)
    views = [v for n in strided for v in em.part.strided[n.id][0]]
    assert all(strides.value(s) > 0 for v in views for s in v.strides[-2:])
    if fn is _batch_reversed:
        # the batch read backwards in place; the rows read backwards copied for BLAS
        assert any(strides.value(s) < 0 for v in views for s in v.strides[:-2])
    want_v, want_g = jg.value_and_grad(fn, argnums=(0, 1))(*args)
    for program in (codegen.compile_graph(graph), codegen.compile_graph(graph, backend="python")):
        got = program.run(*args)
        np.testing.assert_allclose(got[0], want_v, rtol=1e-12)
        for g, g0 in zip(got[1:], want_g):
            np.testing.assert_allclose(g, g0, rtol=1e-11, atol=1e-12)


def test_a_python_entry_reads_strided_views_with_numpy(monkeypatch):
    """A Python entry (a long program's) makes the same views with NumPy's as_strided."""
    from jitgraph.codegen import emit_cpu
    monkeypatch.setattr(emit_cpu, "NJIT_ENTRY_MAX_STEPS", 0)
    monkeypatch.setattr(codegen_products, "SMALL_STACKED_TERMS", 0)    # BLAS products at these sizes
    args = STRIDED[0][1](np.random.default_rng(8))
    graph = jg.make_graph(_heads, argnums=(0, 1), grad=True)(*args)
    _, source, em = codegen.generate(graph)
    assert em.driver and "_rt.strided_py(" in source
    got = codegen.compile_graph(graph).run(*args)
    want_v, want_g = jg.value_and_grad(_heads, argnums=(0, 1))(*args)
    np.testing.assert_allclose(got[0], want_v, rtol=1e-12)
    for g, g0 in zip(got[1:], want_g):
        np.testing.assert_allclose(g, g0, rtol=1e-11, atol=1e-12)


def test_strided_products_multiply_any_layout():
    """runtime.matmul_strided: items BLAS reads (row- or column-major at any leading
    dimension, batch strides of any sign or zero) and items it cannot (loops)."""
    rng = np.random.default_rng(9)
    big = rng.standard_normal((3, 7, 40, 30))
    cases = [
        (big[:, 1:5, :6, 2:7], big[:, 1:5, 10:15, 20:29]),                     # row-major, ld > cols
        (np.swapaxes(big[:, :4, :5, :6], 2, 3), big[:, 2:6, 10:15, :8]),       # column-major
        (big[::-1, 4:, :6, :5], np.broadcast_to(big[0, 0, :5, :4], (3, 3, 5, 4))),   # negative and zero
        (big[:, :2, :6:2, :5:2], big[:, :2, :3, :3]),                          # no unit stride: loops
    ]
    for a, b in cases:
        want = np.matmul(a, b)
        for fn in (runtime.matmul_strided, runtime.matmul_strided_par):
            out = np.full(want.shape, np.nan)
            fn(a, b, out)
            np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
    view = runtime.strided_py(big, 7 * 40 * 30 + 3, (2, 4, 5), (40 * 30, 1, 30))
    np.testing.assert_array_equal(view, np.swapaxes(big[1, :2, :5, 3:7], 1, 2))


def test_a_transposed_right_factor_of_many_small_products_is_copied_once(monkeypatch):
    """An unrolled recurrence's `dh = dz @ W.T` at every step reads W transposed as the right
    factor of small products, which OpenBLAS multiplies faster from a copy: W.T is stored once
    (fusion.NT_COPY_ROWS); a transposed left factor, or a right factor of few rows, stays a
    view BLAS reads in place."""
    monkeypatch.setattr(codegen_products, "SMALL_K", 0)    # BLAS products at these small sizes
    monkeypatch.setattr(codegen_products, "SMALL_STACKED_TERMS", 0)
    from jitgraph.codegen import fusion
    rng = np.random.default_rng(10)
    w, h0, xs = rng.standard_normal((20, 20)) * 0.3, rng.standard_normal((32, 20)), rng.standard_normal((6, 32, 20))
    graph = jg.make_graph(_shared_weight, argnums=(0, 1), grad=True)(w, h0, xs)
    _, source, em = codegen.generate(graph)
    right = [n for n in em.graph.nodes if n.op == "transpose" and n.inputs[0].op == "input"
             and any(u.inputs[-1] is n for u in em.users[n.id])]
    assert right and all(em.plan.root_of(n) is n for n in right)           # stored: a copy
    assert any(em.plan.root_of(n) is not n for n in em.graph.nodes if n.op == "transpose")   # views remain
    small = jg.make_graph(_shared_weight, argnums=(0, 1), grad=True)(w, h0[:4], xs[:2, :4])
    rows = sum(u.shape[0] for n in small.nodes if n.op == "transpose" for u in small.users()[n.id])
    assert rows < fusion.NT_COPY_ROWS
    _, _, em_small = codegen.generate(small)
    assert all(em_small.plan.root_of(n) is not n for n in em_small.graph.nodes if n.op == "transpose")
    got = codegen.compile_graph(graph).run(w, h0, xs)
    want_v, want_g = jg.value_and_grad(_shared_weight, argnums=(0, 1))(w, h0, xs)
    np.testing.assert_allclose(got[0], want_v, rtol=1e-12)
    for g, g0 in zip(got[1:], want_g):
        np.testing.assert_allclose(g, g0, rtol=1e-11, atol=1e-12)


def test_a_stored_transpose_is_copied_from_a_strided_view(monkeypatch):
    """A transpose stored by a step of its own (its moved axis too long to read in place)
    copies from a strided view in a compiled entry, never Numba's `transpose(axes)`, which
    made a kernel's compile seconds longer; the values are eager's."""
    def f(x, w):
        return np.sum(np.tanh(np.transpose(x, (2, 0, 1)) * w) ** 2)
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((40, 30, 3)), rng.standard_normal((40, 30))
    graph = jg.make_graph(f, argnums=(0, 1), grad=True)(x, w)
    from jitgraph.codegen import fusion
    monkeypatch.setattr(fusion, "TRANSPOSE_REUSE", 1)       # a stored transpose at these small sizes
    _, source, em = codegen.generate(graph)
    program = codegen.compile_graph(graph)
    assert not em.driver and ".transpose(" not in source and "_rt.copy(_rt.strided(" in source
    got = program.run(x, w)
    want_v, want_g = jg.value_and_grad(f, argnums=(0, 1))(x, w)
    np.testing.assert_allclose(got[0], want_v, rtol=1e-12)
    for g, g0 in zip(got[1:], want_g):
        np.testing.assert_allclose(g, g0, rtol=1e-11, atol=1e-12)


def test_a_batched_product_reads_a_transposed_right_factor_of_large_items_in_place(monkeypatch):
    """Items whose result reaches NT_SMALL_OUTPUT elements read a transposed right factor in
    place (OpenBLAS pays nothing for it there); smaller ones copy it."""
    from jitgraph.codegen import fusion
    monkeypatch.setattr(codegen_products, "SMALL_K", 0)    # BLAS products at these small sizes
    monkeypatch.setattr(codegen_products, "SMALL_STACKED_TERMS", 0)

    def f(a, b):
        return np.sum(np.tanh(a @ np.swapaxes(b, 1, 2)) ** 2)
    rng = np.random.default_rng(12)
    args = rng.standard_normal((2, 6, 4)), rng.standard_normal((2, 5, 4))
    graph = jg.make_graph(f, argnums=(0, 1), grad=True)(*args)

    def forward(em):
        return next(n for n in em.graph.nodes if n.op == "matmul" and n.inputs[1].op == "transpose")
    _, _, em = codegen.generate(graph)
    assert forward(em).inputs[1].id in em.part.materialized          # 6 x 5 items: copied
    monkeypatch.setattr(fusion, "NT_SMALL_OUTPUT", 30)
    _, _, em = codegen.generate(graph)
    n = forward(em)
    assert n.id in em.part.strided and n.inputs[1].id not in em.part.materialized
    got = codegen.compile_graph(graph).run(*args)
    want_v, want_g = jg.value_and_grad(f, argnums=(0, 1))(*args)
    np.testing.assert_allclose(got[0], want_v, rtol=1e-12)
    for g, g0 in zip(got[1:], want_g):
        np.testing.assert_allclose(g, g0, rtol=1e-11, atol=1e-12)
