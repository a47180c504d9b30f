"""Completeness of the primitive registry: every primitive has every stage.

A primitive needs a shape rule and a NumPy implementation; a VJP or a mark that
it has none; a CPU lowering; a CUDA lowering or a host-only mark; an ONNX
mapping or a not-exportable mark; and a row of the op table (tests/test_ops.py)
whose program uses it. A missing stage fails with the primitive's name and the
stage.
"""
import numpy as np
import pytest

import jitgraph as jg
from jitgraph.codegen import emit_cpu, emit_cuda
from jitgraph.codegen.products import rewrite_products
from jitgraph.codegen.scatters import accumulate_scatters, window_scatters
from jitgraph.onnx_export import supported_ops
from jitgraph.ops import registry, scalar
from jitgraph.ops.reduce import REDUCTIONS
from optable import NONDIFF, TABLE, diff_argnums, make_args, program_ops


def table_ops():
    """The primitives the op table's programs use (forward and joint graphs, and the joint
    graphs as the CPU code generator rewrites them: codegen/products.py, codegen/scatters.py)."""
    ops = set()
    for entry in TABLE:
        args = make_args(entry, np.float64)
        graph = jg.make_graph(entry.fn, diff_argnums(entry), grad=True)(*args)
        ops |= program_ops(graph) | program_ops(accumulate_scatters(window_scatters(rewrite_products(graph))))
    for entry in NONDIFF:
        ops |= program_ops(jg.make_graph(entry.fn)(*make_args(entry, np.float64)))
    return ops


def _spells(target_spell, template):
    """Does a target spell every function an expression uses?"""
    try:
        for f in scalar.functions_used(template):
            target_spell(f, np.dtype(np.float64))
        return True
    except Exception:
        return False


def _has_vjp(prim):
    v = prim.vjp
    if v is None:
        return False
    if isinstance(v, registry.NoGradient) or v is registry.TUPLE_ELEMENT:
        return True
    return callable(v) if prim.multiple else hasattr(v, "__getitem__")


def missing_stages(prim, covered):
    """The stages `prim` lacks (an empty list when it is complete)."""
    missing = []
    if not callable(prim.abstract):
        missing.append("shape rule")
    if not callable(prim.impl):
        missing.append("NumPy implementation")
    if not _has_vjp(prim):
        missing.append("VJP or not-differentiable mark")
    template = prim.expr if isinstance(prim.expr, str) else None
    if prim.kind == "elementwise":
        if prim.expr is None or template is not None and not _spells(emit_cpu.spell, template):
            missing.append("CPU lowering")
        if prim.host_only is None and (prim.expr is None or template is not None
                                       and not _spells(emit_cuda.spell, template)):
            missing.append("CUDA lowering or host-only mark")
    elif prim.kind == "reduce":
        if prim.name not in REDUCTIONS:
            missing.append("CPU lowering")
        if prim.name not in emit_cuda.SEGMENT and prim.host_only is None:
            missing.append("CUDA lowering or host-only mark")
    else:
        if prim.name not in emit_cpu.OPS:
            missing.append("CPU lowering")
        if prim.name not in emit_cuda.OPS and prim.host_only is None:
            missing.append("CUDA lowering or host-only mark")
    if prim.name not in supported_ops() and not isinstance(prim.onnx, str):
        missing.append("ONNX mapping or not-exportable mark")
    if prim.name not in covered:
        missing.append("op table row")
    return missing


@pytest.fixture(scope="module")
def covered():
    return table_ops()


def test_every_primitive_has_every_stage(covered):
    problems = {name: missing_stages(p, covered) for name, p in sorted(registry.PRIMS.items())}
    problems = {k: v for k, v in problems.items() if v}
    assert not problems, "incomplete primitives:\n" + "\n".join(
        f"  {name}: no {', no '.join(stages)}" for name, stages in problems.items())


def test_a_primitive_missing_its_stages_is_reported(covered, monkeypatch):
    """The check above can fail: a primitive registered with nothing but a name is named with
    each stage it lacks."""
    bare = registry.Primitive("bare", "index", None, None, None)
    monkeypatch.setitem(registry.PRIMS, "bare", bare)
    assert missing_stages(bare, covered) == [
        "shape rule", "NumPy implementation", "VJP or not-differentiable mark", "CPU lowering",
        "CUDA lowering or host-only mark", "ONNX mapping or not-exportable mark", "op table row"]
    # sign(): NumPy's ufunc on the CPU and ONNX's Sign, but the GPU's math library has none
    gpu_less = registry.Primitive("odd", "elementwise", lambda x: x, np.sign, registry.ZERO_GRADIENT,
                                  expr="sign({0})")
    monkeypatch.setitem(registry.PRIMS, "odd", gpu_less)
    assert missing_stages(gpu_less, covered) == ["CUDA lowering or host-only mark", "op table row"]
    with pytest.raises(ValueError, match="not a function of the scalar language"):
        scalar.parse("frobnicate({0})")


def test_unknown_primitive_is_a_clear_error():
    with pytest.raises(jg.JitgraphError, match="unknown primitive 'nope'"):
        registry.primitive("nope")
    with pytest.raises(jg.JitgraphError, match="registered twice"):
        registry.register("add", "elementwise", None, None, None)
