"""ONNX export: every program of the per-op spec table, run by ONNX Runtime on fresh inputs.

Each exported model (forward, and the joint graph with `gradient=True`) is run
on new random inputs, not the example arguments it was traced with, and
compared with the reference interpreter on the same graph, in float64 and
float32. Also: NaN semantics of max/min, accuracy of expm1/log1p, input and
output naming for pytrees, atomic writes, and the errors for ops with no
mapping and for a missing `onnx` package.
"""
import os
import re
import sys
import zlib

import numpy as np
import pytest

import jitgraph as jg
from jitgraph import onnx_export
from jitgraph.api import run_checks
from jitgraph.errors import NotSupportedError
from jitgraph.graph import Graph, Node
from jitgraph.interpreter import evaluate
from jitgraph.onnx_export import export_onnx, graph_to_onnx, supported_ops
from jitgraph.ops import registry
from jitgraph.tree import tree_flatten

from optable import TABLE, _id, _sample, diff_argnums, make_args, program_ops

PRIMS = registry.PRIMS

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.xdist_group("onnx")

# (ONNX op, dtype) pairs ONNX Runtime's CPU provider does not implement: the model is valid
# ONNX, but there is nothing to run it with
ORT_GAPS = {("Tan", "float64"), ("Sinh", "float64"), ("Cosh", "float64"), ("Atan", "float64")}

TOL = {np.float64: 1e-12, np.float32: 2e-5}


def session(model):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def run_model(model, leaves):
    """Run `model` on flat leaves; skips for ops ONNX Runtime does not implement for the dtype."""
    try:
        sess = session(model)
    except Exception as exc:   # onnxruntime raises its own exception types
        gaps = [g for g in ORT_GAPS if f"implementation for {g[0]}(" in str(exc)]
        if "NOT_IMPLEMENTED" in str(exc) and gaps:
            pytest.skip(f"ONNX Runtime has no CPU kernel for {gaps[0][0]} in {gaps[0][1]}")
        raise
    feeds = {i.name: v for i, v in zip(model.graph.input, leaves)}
    return sess.run(None, feeds)


def flat_inputs(graph, args):
    leaves, _ = tree_flatten(tuple(args))
    return [np.asarray(v, dtype=n.dtype) for n, v in zip(graph.inputs, leaves)]


def fresh_args(entry, dtype):
    """New random values for the entry's array arguments (literal arguments are kept)."""
    rng = np.random.default_rng(zlib.crc32(repr(("onnx", entry.name, entry.specs)).encode()))
    domains = entry.domain if isinstance(entry.domain, tuple) else (entry.domain,) * len(entry.specs)
    return [_sample(rng, s, d).astype(dtype) if isinstance(s, tuple) else s
            for s, d in zip(entry.specs, domains)]


def assert_outputs_match(got, ref, rtol, atol_scale=None):
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape, (g.dtype, g.shape, r.dtype, r.shape)
        if r.dtype.kind in "biu":
            np.testing.assert_array_equal(g, r)
            continue
        scale = max(1.0, float(np.max(np.abs(r), initial=0.0))) if atol_scale is None else atol_scale
        np.testing.assert_allclose(g, r, rtol=rtol, atol=rtol * scale)


def check_program(fn, example_args, new_args, argnums, dtype, gradient):
    """Export fn, run it on new_args with ONNX Runtime, compare with the interpreter."""
    model = export_onnx(fn, *example_args, gradient=gradient, argnums=argnums)
    graph = jg.make_graph(fn, argnums, grad=gradient)(*example_args)
    leaves = flat_inputs(graph, new_args)
    ref = run_checks(graph, evaluate(graph, *leaves))   # (the checks' values are not exported)
    got = run_model(model, leaves)
    assert_outputs_match(got, ref, TOL[dtype])
    return model, graph


# ---- the spec table ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("entry", TABLE, ids=_id)
def test_table_program(entry, dtype):
    example = make_args(entry, dtype)
    new = fresh_args(entry, dtype)
    argnums = diff_argnums(entry)
    marked = sorted(program_ops(jg.make_graph(entry.fn, argnums, grad=True)(*example))
                    & {name for name, p in PRIMS.items() if p.onnx})
    if marked:      # a primitive marked not exportable: export names one and its reason
        named = "|".join(f"op '{name}' .*: {re.escape(PRIMS[name].onnx)}" for name in marked)
        with pytest.raises(NotSupportedError, match=f"({named})"):
            export_onnx(entry.fn, *example, argnums=argnums)
        return
    for gradient in (False, True):
        model, graph = check_program(entry.fn, example, new, argnums, dtype, gradient)
        names = [o.name for o in model.graph.output]
        if gradient:
            n_checks = len(graph.meta.get("checks") or ())
            assert names == ["value"] + [f"grad_{i}" for i in range(len(graph.outputs) - 1 - n_checks)]
        else:
            assert names == ["value"]


def _extra_programs():
    """(name, fn, example args, new args) for the paths the float table does not reach:
    integers, booleans, casts, integer index inputs, Python scalar arguments."""
    r1, r2 = np.random.default_rng(11), np.random.default_rng(12)
    x, x2 = r1.standard_normal((3, 4)), r2.standard_normal((3, 4))
    i, i2 = r1.integers(-3, 4, (3, 4)), r2.integers(-3, 4, (3, 4))
    j, j2 = r1.integers(-3, 4, (3, 4)), r2.integers(-3, 4, (3, 4))
    return [
        ("int-arith", lambda a, b: (a * b - a + np.maximum(a, b) - np.minimum(a, -b)) ** 3 + abs(a),
         (i, j), (i2, j2)),
        ("int-reduce", lambda a: (np.sum(a, axis=0), np.max(a, axis=1), np.min(a), np.prod(a[:, :2], 1)),
         (i,), (i2,)),
        ("int-compare", lambda a, b: (a < b, a <= b, a > b, a >= b, a == b, a != b), (i, j), (i2, j2)),
        ("mixed-cast", lambda x, a: x * a + a.astype(np.float32), (x, i), (x2, i2)),
        ("bool-logic", lambda x, y: np.logical_and(x > 0, y > 0) | ~(x < y), (x, x2), (x2, x)),
        ("bool-count", lambda x: np.sum(np.where(x > 0, x, 0.0)) + np.sum(x > 0), (x,), (x2,)),
        ("int32-index", lambda x, k: x[k] * 2.0, (x, np.array([-1, 0, 2, -3], np.int32)),
         (x2, np.array([2, -2, 0, 1], np.int32))),
        ("uint8-index", lambda x, k: np.take(x, k, axis=1), (x, np.array([3, 0, 3], np.uint8)),
         (x2, np.array([1, 2, 1], np.uint8))),
        ("scalar-args", lambda x, s, n: x * s + n, (x, 0.5, 3), (x2, -1.25, 7)),
        ("bool-order-reduce", lambda x, y: ((x > 0) < (y > 0), np.maximum(x > 0, y > 0),
                                            np.minimum(x > 0, y > 0), np.max(x > 0, axis=0),
                                            np.min(y > 0, axis=1), np.prod(x > 0)),
         (x, x2), (x2, x)),
        ("uint8-neg", lambda x: -(x > 0).astype(np.uint8), (x,), (x2,)),
    ]


EXTRA = _extra_programs()


@pytest.mark.parametrize("name,fn,args,new", EXTRA, ids=[p[0] for p in EXTRA])
def test_extra_program(name, fn, args, new):
    _, graph = check_program(fn, args, new, 0, np.float64, gradient=False)
    out = graph.outputs[0]
    if len(graph.outputs) == 1 and out.shape == () and out.dtype.kind == "f":
        check_program(fn, args, new, 0, np.float64, gradient=True)


def test_every_prim_maps_and_is_covered():
    """Each primitive, control flow included, has an ONNX mapping, and the tests above run it."""
    unmapped = {name for name, p in PRIMS.items() if not p.onnx} - supported_ops()
    assert not unmapped, f"prims without an ONNX mapping or a not-exportable mark: {sorted(unmapped)}"
    assert {"cond", "scan", "while", "proj"} <= supported_ops()
    covered = set()
    for entry in TABLE:
        args = make_args(entry, np.float64)
        for grad in (False, True):
            covered |= program_ops(jg.make_graph(entry.fn, diff_argnums(entry), grad=grad)(*args))
    for _, fn, args, _ in EXTRA:
        covered |= program_ops(jg.make_graph(fn)(*args))
    for _, fn, args, _, grads in CONTROL:
        for grad in grads:
            covered |= program_ops(jg.make_graph(fn, grad=grad)(*args))
    missing = supported_ops() - covered
    assert not missing, f"mapped prims no test program exercises: {sorted(missing)}"


# ---- control flow: If and Loop -------------------------------------------------------------------
def _control_programs():
    """(name, fn, example args, new args, gradient modes): every control construct, run by
    ONNX Runtime on inputs that differ from the traced ones (a cond takes the other branch)."""
    r1, r2 = np.random.default_rng(21), np.random.default_rng(22)
    x, x2 = r1.standard_normal(4), r2.standard_normal(4)
    y, y2 = r1.standard_normal(4), r2.standard_normal(4)
    xs, xs2 = r1.standard_normal((5, 3)), r2.standard_normal((5, 3))
    pos, neg = np.abs(x) + 0.1, -np.abs(x2) - 0.1
    weights = np.arange(15.0).reshape(5, 3)

    def cond_closure(x, y):
        # both branches close over y; the predicate is computed from the data
        return np.sum(jg.cond(np.sum(x) > 0, lambda a: np.sin(a) * y, lambda a: a * 2.0 + y, x) ** 2)

    def cond_int_pred(x, k):
        return jg.cond(k, lambda a: (a * 3.0, a - 1.0), lambda a: (np.exp(a), a), x)

    def fori(x):
        return np.sum(jg.fori_loop(1, 5, lambda i, c: np.sin(c) * i + x, x))

    def scan_xs_ys(c, xs):
        c2, ys = jg.scan(lambda c, x: (c * np.cos(x) + 1.0, np.tanh(c * x)), c, xs)
        return np.sum(c2) + np.sum(ys ** 2)

    def scan_reverse(c, xs):
        c2, ys = jg.scan(lambda c, x: (c * np.cos(x) + 1.0, np.tanh(c * x)), c, xs, reverse=True)
        return np.sum(c2) + np.sum(ys * weights)       # position-dependent: checks the ys order

    def scan_reverse_ys(c, xs):
        return jg.scan(lambda c, x: (c + x, c * x), c, xs, reverse=True)

    def nested(x):
        inner = lambda c: jg.fori_loop(0, 2, lambda j, d: np.sin(d) + x * j, c)
        return np.sum(jg.fori_loop(0, 3, lambda i, c: inner(c) * 0.5, x))

    def loop_in_cond(x, y):
        return np.sum(jg.cond(np.sum(y) > 0,
                              lambda a: jg.fori_loop(0, 3, lambda i, c: c * y + 1.0, a),
                              lambda a: a - y, x))

    def while_(x):
        return jg.while_loop(lambda c: np.sum(c[0]) < 10.0, lambda c: (c[0] * 1.5 + x, c[1] + 1),
                             (x, 0))

    def fori_traced_bound(x, n):
        return jg.fori_loop(0, n, lambda i, c: c * 0.5 + x * i, x)

    def empty_scan(c, xs):
        return jg.scan(lambda c, x: (c + x, c * x), c, xs)

    both = (False, True)
    return [
        ("cond-closure", cond_closure, (pos, y), (neg, y2), both),
        ("cond-closure-other", cond_closure, (neg, y), (pos, y2), both),
        ("cond-int-pred", cond_int_pred, (x, np.int64(1)), (x2, np.int64(0)), (False,)),
        ("fori_loop", fori, (x,), (x2,), both),
        ("scan-xs-ys", scan_xs_ys, (x[:3], xs), (x2[:3], xs2), both),
        ("scan-reverse", scan_reverse, (x[:3], xs), (x2[:3], xs2), both),
        ("scan-reverse-ys", scan_reverse_ys, (x[:3], xs), (x2[:3], xs2), (False,)),
        ("nested-fori", nested, (x,), (x2,), both),
        ("loop-in-cond", loop_in_cond, (x, pos), (x2, neg), both),
        ("while_loop", while_, (pos,), (np.abs(x2) + 0.2,), (False,)),
        ("fori-traced-bound", fori_traced_bound, (x, np.int64(3)), (x2, np.int64(5)), (False,)),
        ("empty-scan", empty_scan, (x[:3], np.zeros((0, 3))), (x2[:3], np.zeros((0, 3))), (False,)),
    ]


CONTROL = _control_programs()


@pytest.mark.parametrize("name,fn,args,new,grads", CONTROL, ids=[p[0] for p in CONTROL])
def test_control_flow_program(name, fn, args, new, grads):
    for gradient in grads:
        model, graph = check_program(fn, args, new, 0, np.float64, gradient)
        ops = {n.op_type for n in model.graph.node}
        control = {n.op for n in graph.nodes if n.op in ("cond", "scan", "while")}
        assert ("If" in ops) == ("cond" in control)
        if control & {"scan", "while"} and name != "empty-scan":
            assert "Loop" in ops


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_scan_gradient_has_reversed_loop_with_history(dtype):
    rng = np.random.default_rng(5)
    c, xs = rng.standard_normal(3).astype(dtype), rng.standard_normal((4, 3)).astype(dtype)

    def f(c, xs):
        c2, ys = jg.scan(lambda c, x: (np.sin(c) * x, c * x), c, xs)
        return np.sum(c2) + np.sum(ys)

    graph = jg.make_graph(f, grad=True)(c, xs)
    scans = [n for n in graph.nodes if n.op == "scan"]
    assert sorted(n.p["reverse"] for n in scans) == [False, True]
    # the backward scan reads the forward scan's carry history
    hist = [n for n in graph.nodes if n.op == "proj" and n.inputs[0].op == "scan"
            and n.p["index"] >= len(n.inputs[0].p["out_avals"]) - n.inputs[0].p["n_carry"]]
    assert hist
    new = (rng.standard_normal(3).astype(dtype), rng.standard_normal((4, 3)).astype(dtype))
    check_program(f, (c, xs), new, (0, 1), dtype, gradient=True)


def test_unmapped_op_inside_a_loop_body_is_named(monkeypatch):
    monkeypatch.setattr(PRIMS["tanh"], "onnx", "not exportable, for this test")
    with pytest.raises(NotSupportedError, match="'tanh'"):
        export_onnx(lambda x: jg.fori_loop(0, 3, lambda i, c: np.tanh(c), x), np.ones(3))


# ---- semantics ONNX leaves open ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_max_min_propagate_nan_like_numpy(dtype):
    a = np.array([[1.0, np.nan, 2.0], [np.nan, -0.5, 3.0]], dtype)
    b = np.array([[np.nan, 1.0, 3.0], [np.nan, 0.5, -1.0]], dtype)

    def f(a, b):
        return (np.maximum(a, b), np.minimum(a, b), np.max(a, axis=1), np.min(a, axis=0),
                np.max(b), np.min(b[:, 1:]))

    model = export_onnx(f, a, b)
    got = run_model(model, [a, b])
    for g, r in zip(got, f(a, b)):
        assert g.dtype == dtype
        np.testing.assert_array_equal(g, r)     # nan == nan here


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_expm1_log1p_accurate_near_zero_and_at_extremes(dtype):
    x = np.array([0.0, 1e-30, -1e-30, 1e-12, -1e-12, 1e-6, -1e-6, 0.3, -0.3, 1.0, -1.0, 20.0, -50.0,
                  80.0, np.inf, -np.inf, np.nan], dtype)
    y = np.concatenate([np.abs(x), np.array([-0.5, -1.0, -2.0, -1e-9], dtype)])
    model = export_onnx(lambda x, y: (np.expm1(x), np.log1p(y)), x, y)
    with np.errstate(all="ignore"):
        ref = [np.expm1(x), np.log1p(y)]
    eps = np.finfo(dtype).eps
    for got, want in zip(run_model(model, [x, y]), ref):
        finite = np.isfinite(want)
        np.testing.assert_array_equal(got[~finite], want[~finite])
        rel = np.abs(got[finite] - want[finite]) / np.maximum(np.abs(want[finite]), np.finfo(dtype).tiny)
        assert np.max(rel) <= 4 * eps, np.max(rel)


# ---- naming, pytrees, structure -------------------------------------------------------------------
def test_pytree_arguments_and_names():
    rng = np.random.default_rng(2)
    params = {"W": rng.standard_normal((4, 3)), "b": rng.standard_normal(3)}
    batch = (rng.standard_normal((5, 4)), rng.standard_normal((5, 3)))

    def loss(params, batch, scale):
        x, y = batch
        return scale * np.sum((np.tanh(x @ params["W"] + params["b"]) - y) ** 2)

    model = export_onnx(loss, params, batch, 0.5, gradient=True, argnums=0)
    assert [i.name for i in model.graph.input] == ["params.W", "params.b", "batch.0", "batch.1", "scale"]
    assert [o.name for o in model.graph.output] == ["value", "grad_0", "grad_1"]
    docs = {o.name: o.doc_string for o in model.graph.output}
    assert "params.W" in docs["grad_0"] and "params.b" in docs["grad_1"]

    new_params = {"W": rng.standard_normal((4, 3)), "b": rng.standard_normal(3)}
    new_batch = (rng.standard_normal((5, 4)), rng.standard_normal((5, 3)))
    got = run_model(model, [new_params["W"], new_params["b"], *new_batch, np.asarray(2.0)])
    graph = jg.make_graph(loss, 0, grad=True)(params, batch, 0.5)
    v_ref, g_ref = jg.eval_graph(graph, new_params, new_batch, 2.0)
    np.testing.assert_allclose(got[0], v_ref, rtol=1e-12)
    np.testing.assert_allclose(got[1], g_ref["W"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[2], g_ref["b"], rtol=1e-12, atol=1e-12)
    e_v, e_g = jg.value_and_grad(loss)(new_params, new_batch, 2.0)
    np.testing.assert_allclose(got[0], e_v, rtol=1e-12)
    np.testing.assert_allclose(got[1], e_g["W"], rtol=1e-10, atol=1e-12)


def test_argnums_tuple_has_aux_and_multiple_outputs():
    rng = np.random.default_rng(3)
    w, x = rng.standard_normal(4), rng.standard_normal(4)

    def f(w, x):
        r = np.sin(w * x)
        return np.sum(r ** 2), {"r": r, "m": np.max(r)}

    model = export_onnx(f, w, x, gradient=True, argnums=(1, 0), has_aux=True)
    assert [o.name for o in model.graph.output] == ["value", "grad_0", "grad_1", "aux_0", "aux_1"]
    assert "'x'" in model.graph.output[1].doc_string and "'w'" in model.graph.output[2].doc_string
    w2, x2 = rng.standard_normal(4), rng.standard_normal(4)
    got = run_model(model, [w2, x2])
    ((v, aux), (gx, gw)) = jg.value_and_grad(f, argnums=(1, 0), has_aux=True)(w2, x2)
    for g, r in zip(got, [v, gx, gw, aux["m"], aux["r"]]):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-14)

    # outputs that are inputs, repeated nodes or constants each get their own name
    fwd = export_onnx(lambda a, b: (a + b, a * b, a, a + b, np.float64(2.0)), w, x)
    assert [o.name for o in fwd.graph.output] == [f"value_{k}" for k in range(5)]
    got = run_model(fwd, [w2, x2])
    for g, r in zip(got, [w2 + x2, w2 * x2, w2, w2 + x2, np.float64(2.0)]):
        np.testing.assert_array_equal(g, r)


def test_input_names_never_collide_with_outputs():
    model = export_onnx(lambda value, grad_0: np.sum(value * grad_0), np.ones(3), np.ones(3),
                        gradient=True)
    assert [i.name for i in model.graph.input] == ["value_1", "grad_0_1"]
    assert [o.name for o in model.graph.output] == ["value", "grad_0"]
    v, g = run_model(model, [np.full(3, 2.0), np.ones(3)])
    assert v == 6.0 and np.array_equal(g, np.ones(3))


def test_bool_reductions():
    """Bool reductions (any/all) built directly in the IR; the NumPy front end casts before reducing."""
    x = Node("input", [], {"index": 0}, (3, 4), np.bool_)
    ops = ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")
    graph = Graph([x], [Node(op, [x], {"axes": (1,)}, (3,), np.bool_) for op in ops]).verify()
    v = np.array([[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], np.bool_)
    got = run_model(graph_to_onnx(graph), [v])
    assert_outputs_match(got, evaluate(graph, v), 0.0)
    assert [g.tolist() for g in got] == [[True, True, False]] * 2 + [[False, True, False]] * 2


def test_model_keeps_ir_names_and_lines():
    def loss(w, x, b, y):
        return (w * x + b - y) ** 2

    graph = jg.make_graph(loss, argnums=(0, 2), grad=True)(1.5, 2.0, 0.5, 1.0)
    model = graph_to_onnx(graph, input_names=["w", "x", "b", "y"])
    onnx.checker.check_model(model, full_check=True)
    produced = {o for n in model.graph.node for o in n.output}
    assert {"e", "f", "g", "value", "grad_0", "grad_1"} <= produced
    docs = [n.doc_string for n in model.graph.node]
    assert "e:f64[] = mul w x" in docs          # IR line spelled with the model's names
    assert all(n.domain in ("", "ai.onnx") for n in model.graph.node)


def test_writes_file_atomically(tmp_path):
    x = np.linspace(-1, 1, 6).reshape(2, 3)
    path = tmp_path / "model.onnx"
    out = export_onnx(lambda x: np.sum(np.exp(x) * x), x, path=path, gradient=True)
    assert out == str(path) and os.path.isfile(path)
    assert os.listdir(tmp_path) == ["model.onnx"]       # no temporary file left behind
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    v, g = run_model(model, [x])
    np.testing.assert_allclose(v, np.sum(np.exp(x) * x), rtol=1e-12)
    np.testing.assert_allclose(g, np.exp(x) * (x + 1), rtol=1e-12)


# ---- errors ---------------------------------------------------------------------------------------
def test_unmappable_op_raises_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(PRIMS["tanh"], "onnx", "not exportable, for this test")
    path = tmp_path / "m.onnx"
    with pytest.raises(NotSupportedError, match="'tanh'"):
        export_onnx(lambda x: np.tanh(x) * 2.0, np.ones(3), path=path)
    assert not path.exists() and os.listdir(tmp_path) == []

    path.write_bytes(b"previous model")
    with pytest.raises(NotSupportedError, match="no ONNX mapping"):
        export_onnx(lambda x: np.sum(np.tanh(x)), np.ones(3), path=path, gradient=True)
    assert path.read_bytes() == b"previous model" and os.listdir(tmp_path) == ["m.onnx"]


def test_an_op_marked_not_exportable_is_named_with_the_reason(tmp_path, monkeypatch):
    """A primitive with an explicit not-exportable mark fails export with the op, the value and
    the reason, and writes nothing."""
    prim = registry.Primitive("fancy", "elementwise", lambda x: x, lambda x: x, registry.ZERO_GRADIENT,
                              expr="{0}", onnx="it has no ONNX operator")
    monkeypatch.setitem(registry.PRIMS, "fancy", prim)
    x = Node("input", [], {"index": 0}, (3,), np.float64)
    graph = Graph([x], [Node("exp", [Node("fancy", [x], {}, (3,), np.float64)], {}, (3,), np.float64)])
    with pytest.raises(NotSupportedError, match="op 'fancy' .*has no ONNX mapping: it has no ONNX operator"):
        graph_to_onnx(graph)
    monkeypatch.setattr(onnx_export, "trace_graph", lambda *a, **k: graph)
    path = tmp_path / "m.onnx"
    with pytest.raises(NotSupportedError, match="fancy"):
        export_onnx(lambda x: x, np.ones(3), path=path)
    assert not path.exists()


def test_unknown_prim_is_named():
    x = Node("input", [], {"index": 0}, (2,), np.float32)
    graph = Graph([x], [Node("bessel_j0", [x], {}, (2,), np.float32)])
    with pytest.raises(NotSupportedError, match="op 'bessel_j0'.*has no ONNX mapping"):
        graph_to_onnx(graph)


def test_missing_onnx_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "onnx", None)     # makes `import onnx` fail
    with pytest.raises(ModuleNotFoundError, match=r"pip install jitgraph\[onnx\]"):
        export_onnx(lambda x: x + 1.0, np.ones(2), path=tmp_path / "m.onnx")
    assert os.listdir(tmp_path) == []


def test_opset_choice():
    x = np.arange(12.0).reshape(3, 4)

    def f(x):
        return np.max(x, axis=1) + np.prod(x[:, :2], axis=1)

    for opset in (13, 17, 18):
        model = export_onnx(f, x, opset=opset)
        assert model.opset_import[0].version == opset
        np.testing.assert_allclose(run_model(model, [x])[0], f(x))
    with pytest.raises(NotSupportedError, match="opset >= 16"):
        export_onnx(lambda x: np.sum(x[np.array([0, 0, 2])] ** 2), x, gradient=True, opset=13)
    with pytest.raises(ValueError, match="opset"):
        export_onnx(f, x, opset=7)


def test_many_scalar_arguments_keep_one_input_each():
    """jit traces 16+ scalar arguments as one array; the exported model keeps an input per
    argument leaf, named after it."""
    def g(x, ws):
        return sum(w * np.sin(x) for w in ws)
    x, ws = np.ones(3), [0.1 * k for k in range(17)]
    model = export_onnx(g, x, ws)
    assert [i.name for i in model.graph.input][:3] == ["x", "ws.0", "ws.1"]
    np.testing.assert_allclose(run_model(model, [x] + [np.array(w) for w in ws])[0], g(x, ws))
