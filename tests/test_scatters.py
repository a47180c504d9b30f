"""Scatters at evenly spaced indices as sums of placed slices (codegen/scatters.py): the
adjoints of window views and of gathers by affine index tables become loops that read their
operand by index, and compute what the scatters computed."""
import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import jitgraph as jg
from jitgraph import codegen
from jitgraph.codegen.scatters import MAX_TERMS, window_scatters


def _conv(x, w):
    """A valid 2-D cross-correlation by windows and einsum (a conv net's im2col)."""
    win = sliding_window_view(x, w.shape[-2:], axis=(2, 3))
    return np.sum(np.tanh(np.einsum("nchwij,ocij->nohw", win, w)) ** 2)


def _strided_windows(x):
    """Windows of 3 every 2 points: the table 2 * j + i."""
    return np.sum(np.sin(sliding_window_view(x, 3, axis=1)[:, ::2]) ** 2)


def _every_third(x):
    """A gather by the affine table 2 + 3 * j: its adjoint is one placed slice."""
    return np.sum(np.exp(np.take(x, np.arange(2, 20, 3), axis=1)))


def _repeats(x):
    """A table with a repeated index: its adjoint stays a scatter."""
    return np.sum(np.take(x, np.array([1, 1, 4, 0]), axis=1) ** 3)


def _long_windows(x):
    """Windows longer than MAX_TERMS on both table axes: the scatter stays."""
    return np.sum(np.cos(sliding_window_view(x, MAX_TERMS + 1, axis=1)) ** 2)


def _savitzky_golay(x, h):
    """np.convolve with a filter of 21 (a Savitzky-Golay window), per row: its adjoint sums 21
    placed slices in one loop."""
    return sum(np.sum(np.convolve(x[c], h, mode="valid") ** 2) for c in range(x.shape[0]))


CASES = [
    (_conv, lambda r: (r.standard_normal((2, 3, 9, 8)), r.standard_normal((4, 3, 3, 2)) * 0.3), (0, 1), 0),
    (_strided_windows, lambda r: (r.standard_normal((3, 21)),), 0, 0),
    (_every_third, lambda r: (r.standard_normal((4, 21)),), 0, 0),
    (_repeats, lambda r: (r.standard_normal((4, 6)),), 0, 1),
    (_long_windows, lambda r: (r.standard_normal((2, 2 * MAX_TERMS + 4)),), 0, 1),
    (_savitzky_golay, lambda r: (r.standard_normal((2, 60)), r.standard_normal(21)), (0, 1), 0),
]


@pytest.mark.parametrize("fn, make, argnums, scatters", CASES, ids=[c[0].__name__ for c in CASES])
def test_affine_scatters_become_placed_slices(fn, make, argnums, scatters):
    args = make(np.random.default_rng(3))
    graph = jg.make_graph(fn, argnums=argnums, grad=True)(*args)
    before = sum(n.op == "scatter_add" for n in graph.nodes)
    assert before >= 1
    new = window_scatters(graph)
    new.verify()
    assert sum(n.op == "scatter_add" for n in new.nodes) == scatters
    part, source, em = codegen.generate(graph)
    if not scatters:
        # the placed slices are read by index by the loops that sum them: none is stored but
        # a gradient itself
        pads = [n for n in em.graph.nodes if n.op == "pad_slice"]
        assert pads and not {n.id for n in pads if n not in em.graph.outputs} & part.materialized
        assert "_rt.scatter_add(" not in source
    want_v, want_g = jg.value_and_grad(fn, argnums=argnums)(*args)
    want_g = want_g if isinstance(argnums, tuple) else (want_g,)
    for program in (codegen.compile_graph(graph), codegen.compile_graph(graph, backend="python")):
        got = program.run(*args)
        np.testing.assert_allclose(got[0], want_v, rtol=1e-12)
        for g, g0 in zip(got[1:], want_g):
            np.testing.assert_allclose(g, g0, rtol=1e-11, atol=1e-12)


def test_scatter_set_gradient_skips_the_winner_search_when_indices_cannot_repeat():
    """The adjoint of the values of `x[idx] = v` keeps the writes that won (the last of
    repeated indices): it finds them with an integer scatter and gather, which one index (a
    rerolled dynamic programme's cell) does not need. Traced indices that may repeat still
    search; gradients match finite differences in each case."""
    rng = np.random.default_rng(3)
    x, v = rng.standard_normal(7), rng.standard_normal(3)

    def f(x, v, idx):
        y = x * 1.0
        y[idx] = v * np.flip(v)
        return np.sum(np.sin(y) * np.arange(7.0))

    for idx, searched in ((np.array([4]), False), (np.array([5, 0, 2]), True), (np.array([1, 5, 1]), True)):
        vv = v[:len(idx)]
        g = jg.jit_grad(f, argnums=(0, 1), backend="python")
        graph = g.lower(x, vv, idx).graph
        assert any(n.op == "scatter_set" and n.dtype == np.int64 for n in graph.nodes) == searched
        _, (gx, gv) = g(x, vv, idx)
        eps = 1e-6
        fd = [(f(x, vv + eps * e, idx) - f(x, vv - eps * e, idx)) / (2 * eps) for e in np.eye(len(idx))]
        np.testing.assert_allclose(gv, fd, rtol=1e-6, atol=1e-9)
        _, (ex, ev) = jg.value_and_grad(f, argnums=(0, 1))(x, vv, idx)
        np.testing.assert_allclose(gx, ex, rtol=1e-12)
        np.testing.assert_allclose(gv, ev, rtol=1e-12)


def test_sums_with_scatters_add_the_rows_in_place():
    """`dense + scatter_add(v, idx)` (an embedding's gradient plus its weight decay; the adjoint
    of a table an iteration gathers from) adds the rows into the dense sum (`scatter_add_to`),
    with no zero-filled table; the values match the Python backend and eager."""
    rng = np.random.default_rng(4)
    E, ids = rng.standard_normal((50, 6)), np.array([3, 7, 3, 0, 49, 7])

    def embed(E, ids):
        return np.sum(np.tanh(E[ids]) ** 2) + 0.01 * np.sum(E ** 2) + np.sum(np.sin(E[ids[::-1] // 2]))

    graph = codegen.accumulate_scatters(jg.make_graph(embed, grad=True)(E, ids))
    assert [n.op for n in graph.nodes].count("scatter_add_to") == 2
    assert "scatter_add" not in [n.op for n in graph.nodes]
    f = jg.jit_grad(embed, wait=True)
    v, g = f(E, ids)
    v_ref, g_ref = jg.value_and_grad(embed)(E, ids)
    np.testing.assert_allclose(v, v_ref, rtol=1e-13)
    np.testing.assert_allclose(g, g_ref, rtol=1e-12, atol=1e-14)
    assert "_rt.scatter_add(" in f.lower(E, ids).source and "scatter_add_to" in f.lower(E, ids).source


def test_a_recursion_into_a_preallocated_array_updates_its_carry_in_place():
    """`s[t] = f(s[t - 1])` into np.empty(T) is rerolled into a scan that carries the array: the
    body writes its cell into the carry's own buffer (and the reverse loop adds its cells into
    the cotangent's), so no step copies the array, and the init the loop starts from is copied
    once. Values and gradients match eager."""
    def garch(th, e):
        s = np.empty(e.shape[0])
        s[0] = 1.0
        for t in range(1, e.shape[0]):
            s[t] = th[0] + th[1] * e[t - 1] ** 2 + th[2] * s[t - 1]
        return np.sum(np.log(s) + e ** 2 / s)

    th, e = np.array([0.05, 0.1, 0.85]), np.random.default_rng(5).standard_normal(40)
    f = jg.jit_grad(garch, wait=True)
    src = f.lower(th, e).source
    forward = src.split("def s0_kernel(")[1].split("@njit")[0]
    reverse = src.split("def s1_kernel(")[1].split("@njit")[0]
    assert "updated in place" in forward and "_rt.copy(" not in forward
    assert "updated in place" in reverse and "_rt.copy(" not in reverse
    v, g = f(th, e)
    v_ref, g_ref = jg.value_and_grad(garch)(th, e)
    np.testing.assert_allclose(v, v_ref, rtol=1e-12)
    np.testing.assert_allclose(g, g_ref, rtol=1e-11)
    v2, g2 = f(th, e[::-1].copy())       # the init copy: a second call starts from s[0] = 1 again
    v2_ref, g2_ref = jg.value_and_grad(garch)(th, e[::-1].copy())
    np.testing.assert_allclose(v2, v2_ref, rtol=1e-12)
    np.testing.assert_allclose(g2, g2_ref, rtol=1e-11)


def test_a_long_running_sum_is_opened_without_recursion():
    """An unrolled running sum is a chain of adds thousands long: the scatter rewrite walks it
    with a stack (it had raised RecursionError past Python's recursion limit)."""
    def f(x):
        t = x[0] * 1.0
        for i in range(1, 1500):
            t = t + x[i] * x[i - 1]
        return t

    x = np.random.default_rng(6).standard_normal(1500)
    graph = jg.make_graph(f, grad=True, reroll=False)(x)
    out = codegen.accumulate_scatters(graph)
    assert out is graph or len(out.nodes) <= len(graph.nodes)
