"""Property-based tests: random expression DAGs, eager vs traced vs finite differences.

A program is a list of steps over a growing list of values (the inputs first).
Each step applies a unary, binary or reduction op to earlier values, chosen at
random, so values fan out (are reused), shapes broadcast ((3, 4), (4,), (3, 1),
() and what reductions make of them) and reductions keep or drop dims. The same
program runs on plain NumPy arrays, under eager `jg.value_and_grad` and traced
into a joint forward+backward graph run by the interpreter.
"""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import jitgraph as jg

SHAPES = [(3, 4), (4,), (3, 1), ()]

# every op is smooth on the whole real line (no domain restrictions needed)
UNARY = {
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "neg": lambda x: -x,
    "square": np.square,
    "cube": lambda x: x ** 3,
    "sqrt1p": lambda x: np.sqrt(x * x + 1.0),
    "log1p_sq": lambda x: np.log1p(x ** 2),
    "exp_tanh": lambda x: np.exp(np.tanh(x)),
    "sigmoid": jg.sigmoid,
    "arctan": np.arctan,
    "scale": lambda x: 0.5 * x - 1.0,
    "abs": np.abs,
    # shape-preserving data movement: slicing, concatenation, gather with repeats, transpose twice
    "flip": lambda x: x[::-1] if np.ndim(x) else x,
    "rotate": lambda x: np.concatenate([x[1:], x[:1]]) if np.ndim(x) else x,
    "gather": lambda x: x[np.arange(np.shape(x)[0])[::-1] // 2] if np.ndim(x) else x,
    "transpose2": lambda x: np.transpose(x.T * 2.0),
}
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (1.0 + b * b),
    "maximum": np.maximum,
    "minimum": np.minimum,
    "where_max": lambda a, b: np.where(a > b, a, b),
    "pow": lambda a, b: (a * a + 1.0) ** np.tanh(b),
}
REDUCE = {
    "sum": np.sum,
    "mean": np.mean,
    "max": np.max,
    "min": np.min,
    "var": np.var,
}


def _broadcastable(s, t):
    try:
        np.broadcast_shapes(s, t)
        return True
    except ValueError:
        return False


def _reduce_shape(shape, axis, keepdims):
    axes = range(len(shape)) if axis is None else [a % len(shape) for a in (axis if isinstance(axis, tuple) else (axis,))]
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes)


@st.composite
def programs(draw, max_inputs=3, max_steps=7):
    shapes = draw(st.lists(st.sampled_from(SHAPES), min_size=1, max_size=max_inputs))
    cur = list(shapes)
    steps = []
    for _ in range(draw(st.integers(1, max_steps))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce"]))
        # bias operand choice towards recent values, but any earlier value can be reused
        i = draw(st.integers(0, len(cur) - 1) | st.just(len(cur) - 1))
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(sorted(UNARY))), (i,), {}))
            cur.append(cur[i])
        elif kind == "binary":
            partners = [j for j in range(len(cur)) if _broadcastable(cur[i], cur[j])]
            j = draw(st.sampled_from(partners))
            a, b = (i, j) if draw(st.booleans()) else (j, i)
            steps.append(("binary", draw(st.sampled_from(sorted(BINARY))), (a, b), {}))
            cur.append(np.broadcast_shapes(cur[a], cur[b]))
        else:
            nd = len(cur[i])
            axes = [None] + list(range(-nd, nd)) + ([(0, 1)] if nd == 2 else [])
            axis = draw(st.sampled_from(axes))
            keepdims = draw(st.booleans())
            steps.append(("reduce", draw(st.sampled_from(sorted(REDUCE))), (i,),
                          {"axis": axis, "keepdims": keepdims}))
            cur.append(_reduce_shape(cur[i], axis, keepdims))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    return shapes, steps, seed


def run_program(steps, *inputs):
    """Evaluate a program with whatever NumPy-like values it is given; returns a scalar loss."""
    vals = list(inputs)
    for kind, name, operands, params in steps:
        args = [vals[k] for k in operands]
        if kind == "unary":
            vals.append(UNARY[name](*args))
        elif kind == "binary":
            vals.append(BINARY[name](*args))
        else:
            vals.append(REDUCE[name](*args, **params))
    # the last value, weighted, plus a little of every other intermediate (more fan-out)
    last = vals[-1]
    w = np.linspace(-1.0, 1.5, int(np.prod(np.shape(last), dtype=int))).reshape(np.shape(last))
    loss = np.sum(last * w.astype(last.dtype))
    for v in vals[len(inputs):-1]:
        loss = loss + 0.25 * np.mean(v)
    return loss


def make_inputs(shapes, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.5, 1.5, s).astype(np.float32).astype(dtype) for s in shapes]


def _numpy_reference(steps, xs):
    with np.errstate(all="ignore"):
        value = run_program(steps, *xs)
    # keep to moderate values, where finite differences are meaningful
    assume(np.isfinite(value) and abs(value) < 1e6)
    return value


def _fd_check(steps, xs, grads, rng, rtol, eps=1e-6):
    vs = [rng.standard_normal(np.shape(x)) for x in xs]
    xs64 = [np.asarray(x, np.float64) for x in xs]
    with np.errstate(all="ignore"):
        fp = run_program(steps, *[x + eps * v for x, v in zip(xs64, vs)])
        fm = run_program(steps, *[x - eps * v for x, v in zip(xs64, vs)])
    fd = (fp - fm) / (2 * eps)
    terms = [np.asarray(g, np.float64) * v for g, v in zip(grads, vs)]
    gv = sum(float(np.sum(t)) for t in terms)
    scale = max(abs(fd), sum(float(np.sum(np.abs(t))) for t in terms), 1.0)
    assert abs(fd - gv) <= rtol * scale, (fd, gv)


@settings(max_examples=50, deadline=None)
@given(programs())
def test_random_dag_gradients_agree(prog):
    shapes, steps, seed = prog
    xs = make_inputs(shapes, seed)
    expected = _numpy_reference(steps, xs)

    def f(*xs):
        return run_program(steps, *xs)

    argnums = tuple(range(len(xs)))
    v_e, g_e = jg.value_and_grad(f, argnums)(*xs)
    graph = jg.make_graph(f, argnums, grad=True)(*xs)
    graph.verify()
    v_t, g_t = jg.eval_graph(graph, *xs)

    np.testing.assert_allclose(v_e, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(v_t, expected, rtol=1e-12, atol=1e-12)
    scale = max([1.0] + [float(np.max(np.abs(g))) for g in g_e])
    for x, ge, gt in zip(xs, g_e, g_t):
        assert np.shape(ge) == np.shape(gt) == np.shape(x)
        assert np.asarray(ge).dtype == np.asarray(gt).dtype == np.float64
        assert np.all(np.isfinite(ge))
        np.testing.assert_allclose(ge, gt, rtol=1e-10, atol=1e-10 * scale)
    _fd_check(steps, xs, g_e, np.random.default_rng(seed + 1), rtol=1e-5)


@settings(max_examples=30, deadline=None)
@given(programs(max_steps=5))
def test_random_dag_float32_keeps_dtype_and_tracks_float64(prog):
    shapes, steps, seed = prog
    xs64 = make_inputs(shapes, seed)
    _numpy_reference(steps, xs64)
    xs32 = [x.astype(np.float32) for x in xs64]

    def f(*xs):
        return run_program(steps, *xs)

    argnums = tuple(range(len(xs32)))
    _, g64 = jg.value_and_grad(f, argnums)(*xs64)
    with np.errstate(all="ignore"):
        v_e, g_e = jg.value_and_grad(f, argnums)(*xs32)
        graph = jg.make_graph(f, argnums, grad=True)(*xs32).verify()
        v_t, g_t = jg.eval_graph(graph, *xs32)
    assert np.asarray(v_e).dtype == np.asarray(v_t).dtype == np.float32
    scale = max([1.0] + [float(np.max(np.abs(g))) for g in g64])
    for ge, gt, gref in zip(g_e, g_t, g64):
        assert np.asarray(ge).dtype == np.asarray(gt).dtype == np.float32
        # float32 rounding, amplified by the program's conditioning: a loose, scale-relative check
        np.testing.assert_allclose(ge, gref, rtol=1e-3, atol=1e-3 * scale)
        np.testing.assert_allclose(gt, gref, rtol=1e-3, atol=1e-3 * scale)


@settings(max_examples=30, deadline=None)
@given(programs(max_inputs=3, max_steps=5), st.data())
def test_differentiating_one_input(prog, data):
    """Differentiating one input gives that input's part of the full gradient, with no more
    backward work than differentiating all of them; an unused input costs no backward nodes."""
    shapes, steps, seed = prog
    xs = make_inputs(shapes, seed)
    _numpy_reference(steps, xs)
    k = data.draw(st.integers(0, len(xs) - 1))

    def f(*xs):
        return run_program(steps, *xs)

    all_nums = tuple(range(len(xs)))
    g_one = jg.make_graph(f, k, grad=True)(*xs).verify()
    g_all = jg.make_graph(f, all_nums, grad=True)(*xs).verify()
    v_t, gk_t = jg.eval_graph(g_one, *xs)
    _, g_full = jg.value_and_grad(f, all_nums)(*xs)
    v_e, gk_e = jg.value_and_grad(f, k)(*xs)
    np.testing.assert_allclose(v_t, v_e, rtol=1e-12)
    tol = 1e-10 * max(1.0, float(np.max(np.abs(g_full[k]))))
    np.testing.assert_allclose(gk_e, g_full[k], rtol=1e-12, atol=tol)
    np.testing.assert_allclose(gk_t, g_full[k], rtol=1e-10, atol=tol)
    assert len(g_one.outputs) == 2 and g_one.outputs[1].shape == np.shape(xs[k])
    assert len(g_one.adjoint_ids) <= len(g_all.adjoint_ids)
    # forward parts are identical
    assert len(g_one.nodes) - len(g_one.adjoint_ids) == len(g_all.nodes) - len(g_all.adjoint_ids)
    used = {i for _, _, operands, _ in steps for i in operands}
    if k not in used:
        # the loss does not read x_k: its gradient is a constant zero, no adjoint sweep at all
        assert np.array_equal(gk_t, np.zeros(np.shape(xs[k])))
        assert all(n.op in ("const", "broadcast") for n in g_one.nodes if n.id in g_one.adjoint_ids)


def test_program_strategy_covers_broadcasting_and_fanout():
    """Sanity check of the generator itself: it produces fan-out, broadcasting and keepdims."""
    seen = {"fanout": False, "broadcast": False, "keepdims": False}

    @settings(max_examples=60, deadline=None)
    @given(programs())
    def collect(prog):
        shapes, steps, _ = prog
        cur = list(shapes)
        used = set()
        for kind, name, operands, params in steps:
            if any(o in used for o in operands) or len(set(operands)) < len(operands):
                seen["fanout"] = True
            used.update(operands)
            if kind == "binary" and cur[operands[0]] != cur[operands[1]]:
                seen["broadcast"] = True
            if kind == "reduce" and params["keepdims"]:
                seen["keepdims"] = True
            if kind == "reduce":
                cur.append(_reduce_shape(cur[operands[0]], params["axis"], params["keepdims"]))
            elif kind == "binary":
                cur.append(np.broadcast_shapes(cur[operands[0]], cur[operands[1]]))
            else:
                cur.append(cur[operands[0]])

    collect()
    assert all(seen.values()), seen


@pytest.mark.parametrize("steps,shapes", [
    # hand-picked programs with heavy fan-out and all broadcast shapes at once
    ([("binary", "mul", (0, 1), {}), ("binary", "add", (4, 2), {}), ("binary", "sub", (5, 3), {}),
      ("reduce", "max", (6,), {"axis": 0, "keepdims": True}), ("binary", "mul", (7, 6), {}),
      ("binary", "div", (8, 4), {})], [(3, 4), (4,), (3, 1), ()]),
    ([("unary", "tanh", (0,), {}), ("binary", "mul", (1, 1), {}), ("binary", "add", (2, 1), {}),
      ("reduce", "var", (3,), {"axis": -1, "keepdims": False}), ("binary", "pow", (1, 0), {})], [(3, 4)]),
])
def test_fixed_programs(steps, shapes):
    xs = make_inputs(shapes, 7)
    expected = run_program(steps, *xs)
    f = lambda *xs: run_program(steps, *xs)  # noqa: E731
    argnums = tuple(range(len(xs)))
    v_e, g_e = jg.value_and_grad(f, argnums)(*xs)
    v_t, g_t = jg.eval_graph(jg.make_graph(f, argnums, grad=True)(*xs).verify(), *xs)
    np.testing.assert_allclose([v_e, v_t], [expected, expected], rtol=1e-12)
    for ge, gt in zip(g_e, g_t):
        np.testing.assert_allclose(ge, gt, rtol=1e-10, atol=1e-12)
    _fd_check(steps, xs, g_e, np.random.default_rng(0), rtol=1e-5)


@settings(max_examples=40, deadline=None)
@given(programs(max_steps=9), st.sampled_from([None, "sqrt"]))
def test_random_dag_through_generated_code(prog, remat):
    """The generated source (run as Python: backend="python", no compile), with its buffer
    plan (shared slots, in-place loops, recycled outputs) and rematerialization, against
    the eager gradients; two calls, so recycled buffers are exercised too."""
    shapes, steps, seed = prog
    xs = make_inputs(shapes, seed)
    _numpy_reference(steps, xs)

    def f(*xs):
        return run_program(steps, *xs)

    argnums = tuple(range(len(xs)))
    v_e, g_e = jg.value_and_grad(f, argnums)(*xs)
    fc = jg.jit_grad(f, argnums=argnums, backend="python", remat=remat)
    for _ in range(2):
        v_c, g_c = fc(*xs)
        assert v_c == pytest.approx(float(v_e), rel=1e-10, abs=1e-10)
        scale = max([1.0] + [float(np.max(np.abs(g))) for g in g_e])
        for ge, gc in zip(g_e, g_c):
            np.testing.assert_allclose(gc, ge, rtol=1e-9, atol=1e-9 * scale)
