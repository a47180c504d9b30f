"""codegen/native.py: loop functions compiled without Numba must compute what Numba computes.

Each case of tests/native_cases.py runs compiled both ways on the same inputs, and the
results are compared bit for bit where both run the same instructions, else to a few ulps
(the math library's libm calls). Then: the fallbacks (text and argument types outside the
language), the disk cache, and programs whose Python entry calls native functions.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import native_cases as nc
import jitgraph as jg
from jitgraph.codegen import build, native
from jitgraph.codegen.native import NativeFunction, Unsupported, promote, unify

pytestmark = pytest.mark.skipif(not native.ENABLED, reason="JITGRAPH_NATIVE=0")

TYPES = {"f8": np.float64, "f4": np.float32, "i8": np.int64, "b1": np.bool_}


def _values(dtype, n=24, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.integers(0, 2, n).astype(bool)
    if np.dtype(dtype).kind == "i":
        return rng.integers(-9, 10, n).astype(dtype)
    x = (rng.standard_normal(n) * 3).astype(dtype)
    x[:3] = [0.1, -0.0, 1 / 3]
    return x


def _same(a, b):
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


def _both(nat, nb, *args, out=()):
    """Run the native and the Numba function on `args`, each with its own copies of the
    arrays at positions `out` (which they write); those arrays of each run."""
    a1 = [a.copy() if k in out else a for k, a in enumerate(args)]
    a2 = [a.copy() if k in out else a for k, a in enumerate(args)]
    nat(*a1)
    nb(*a2)
    return [(a1[k], a2[k]) for k in out]


@pytest.mark.parametrize("ta", TYPES)
@pytest.mark.parametrize("tb", TYPES)
def test_binary_operations_type_and_round_as_numba(ta, tb):
    """Numba's scalar rules (float32 op int64 is float64, bool + bool is int64, ...): the
    results, stored in float64, carry the rounding of the type each operation ran in."""
    a, b = _values(TYPES[ta], seed=1), _values(TYPES[tb], seed=2)
    if TYPES[tb] != np.bool_:
        b[b == 0] = 3
    (got, ref), = _both(nc.nat_binops, nc.nb_binops, len(a), a, b, np.zeros((10, len(a))), out=(3,))
    _same(got, ref)
    assert nc.nat_binops.refused is None and nc.nat_binops.variants


def test_promotion_table_matches_numba():
    from numba import njit
    from numba.core.typing import typeof
    f = njit(lambda a, b: a + b)
    g = njit(lambda c, a, b: a if c else b)
    names = {np.float64: native.F8, np.float32: native.F4, np.int64: native.I8, np.bool_: native.B1}
    for x in TYPES.values():
        for y in TYPES.values():
            f(x(1), y(1))
            g(True, x(1), y(1))
    got = {(str(s.args[0]), str(s.args[1])): str(s.return_type) for s in f.nopython_signatures}
    for x in TYPES.values():
        for y in TYPES.values():
            tx, ty = str(typeof.typeof(x(1))), str(typeof.typeof(y(1)))
            assert got[(tx, ty)] == names_str(promote(names[x], names[y])), (tx, ty)
    got = {(str(s.args[1]), str(s.args[2])): str(s.return_type) for s in g.nopython_signatures}
    for x in TYPES.values():
        for y in TYPES.values():
            tx, ty = str(typeof.typeof(x(1))), str(typeof.typeof(y(1)))
            assert got[(tx, ty)] == names_str(unify(names[x], names[y])), (tx, ty)


def names_str(dt):
    return "bool" if dt == np.bool_ else dt.name


def test_integer_division_remainder_and_wraparound():
    a = np.array([7, -7, 7, -7, 0, 5, -9223372036854775807, 3], dtype=np.int64)
    b = np.array([2, 2, -2, -2, 3, 0, 2, 1], dtype=np.int64)
    (got, ref), = _both(nc.nat_integers, nc.nb_integers, len(a), a, b, np.zeros((9, len(a)), np.int64), out=(3,))
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got[0, :4], [3, -4, -4, 3])
    np.testing.assert_array_equal(got[1, :4], [1, 1, -1, -1])
    np.testing.assert_array_equal(got[6], a[::-1])
    np.testing.assert_array_equal(got[8], [0, 1, 0, 3, 0, 5, 0, 7])


@pytest.mark.parametrize("exact", [False, True], ids=["fastmath", "strict"])
def test_math_functions(exact):
    x = np.concatenate([np.linspace(-30, 30, 61), [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-300, 200.0]])
    nat, nb = (nc.nat_math_exact, nc.nb_math_exact) if exact else (nc.nat_math, nc.nb_math)
    (got, ref), = _both(nat, nb, len(x), x, np.zeros((11, len(x))), out=(2,))
    # mathlib's functions are the same instructions: the same bits (NaNs compared as NaN)
    for row in range(6):
        np.testing.assert_array_equal(got[row], ref[row], err_msg=f"row {row}")
    for row in range(6, 11):
        np.testing.assert_allclose(got[row], ref[row], rtol=4e-16, atol=0, equal_nan=True, err_msg=f"row {row}")


def test_reductions_views_fills_and_strided_arrays():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 7))
    for (got, ref) in _both(nc.nat_reductions, nc.nb_reductions, 5, 7, a, np.zeros(5), np.zeros(5), out=(3, 4)):
        _same(got, ref)
    (got, ref), (zeros, zeros_ref) = _both(nc.nat_views, nc.nb_views, 5, 7, a, np.zeros((5, 7)), np.zeros((3, 2)),
                                           out=(3, 4))
    _same(got, ref)
    _same(zeros, zeros_ref)
    np.testing.assert_array_equal(zeros, np.full((3, 2), 0.25))
    big = rng.standard_normal((9, 12))
    strided_in = big[::2, 1::3]                         # strides (192, 24), not contiguous
    (got, ref), = _both(nc.nat_strided, nc.nb_strided, 5, 4, strided_in, np.zeros((4, 5)), out=(3,))
    _same(got, ref)
    np.testing.assert_array_equal(got, strided_in.T + 4)
    assert any(not s[3] for spec in nc.nat_strided.variants for s in spec if s[0] == "a")


def test_float32_accumulates_in_float32():
    a = np.linspace(0, 1, 1001, dtype=np.float32)
    (got, ref), = _both(nc.nat_f32, nc.nb_f32, len(a), a, np.zeros(1, np.float32), out=(2,))
    # the same float32 additions, perhaps vectorized in another order (reassoc): float32's
    # rounding, not float64's
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=2e-6)


def test_parallel_group_chunks_as_numba_on_any_thread_count():
    import numba
    x = np.random.default_rng(4).standard_normal(50_000)
    outs = []
    for threads in (1, numba.config.NUMBA_NUM_THREADS):
        numba.set_num_threads(threads)
        try:
            outs.append(_both(nc.nat_parallel, nc.nb_parallel, -1, 0, len(x), x, np.zeros(len(x)), np.zeros(16),
                              np.zeros(1), out=(4, 6)))
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    for run in outs:
        (values, values_ref), (total, total_ref) = run
        _same(values, values_ref)
        # a sum under `reassoc` is vectorized as LLVM chooses for each module: the same
        # terms, grouped perhaps otherwise than in Numba's build
        np.testing.assert_allclose(total, total_ref, rtol=1e-14)
    # the same bits on one thread and on all of them
    _same(outs[0][1][0], outs[1][1][0])
    assert nc.nat_parallel.refused is None


def test_text_outside_the_language_is_numba_compiled():
    from numba.core.registry import CPUDispatcher
    assert isinstance(nc.nat_unknown, CPUDispatcher)
    a = np.zeros(3)
    nc.nat_unknown(3, a)
    np.testing.assert_array_equal(a, 3.0)


def test_types_outside_the_language_run_through_numba():
    f = nc.nat_mixed          # int then float: one variable, two types
    assert isinstance(f, NativeFunction)
    a = np.array([1.5, 2.5])
    f(2, a)
    assert a[0] == 2.5 and f.refused and "assigned" in f.refused
    with pytest.raises(Unsupported):
        native.arg_spec(np.zeros(3, np.int32))


def test_scalar_arguments_of_every_python_and_numpy_type():
    """Python and NumPy scalars alike (ints of any width, bools, float64 and float32, which
    types the arithmetic as Numba does); an int past int64 raises as Numba's call does."""
    calls = [(3, True, 2.0), (np.int64(3), np.bool_(True), np.float64(2.5)), (np.int32(3), False, 2.0),
             (3, np.bool_(False), np.float32(1.1)), (3, True, np.float32(1.1))]
    for dt in (np.float64, np.float32):
        for n, flag, scale in calls:
            (got, ref), = _both(nc.nat_scalars, nc.nb_scalars, n, flag, scale, np.linspace(-1, 1, 5).astype(dt),
                                out=(3,))
            _same(got, ref)
    assert nc.nat_scalars.refused is None and len(nc.nat_scalars.variants) >= 4
    with pytest.raises(OverflowError):
        nc.nat_scalars(2 ** 70, True, 1.0, np.zeros(3))


def test_a_new_argument_type_compiles_a_new_variant():
    f = nc.nat_reductions
    for dt in (np.float64, np.float32):
        a = np.arange(12, dtype=dt).reshape(3, 4)
        s, m = np.zeros(3, dt), np.zeros(3, dt)
        f(3, 4, a, s, m)
        np.testing.assert_allclose(s, a.sum(1))
        np.testing.assert_array_equal(m, a.max(1))
    sub = np.arange(12.0).reshape(3, 4).view(np.matrix)     # a subclass: passed as its base array
    s = np.zeros(3)
    f(3, 4, sub, s, np.zeros(3))
    np.testing.assert_array_equal(s, [6, 22, 38])
    assert len(f.variants) >= 2 and f.refused is None


def test_compiled_objects_are_loaded_from_the_disk_cache(tmp_path):
    code = textwrap.dedent("""
        import sys, numpy as np
        sys.path.insert(0, sys.argv[1])
        import native_cases as nc
        a = np.arange(6.0).reshape(2, 3)
        s, m = np.zeros(2), np.zeros(2)
        nc.nat_reductions(2, 3, a, s, m)
        assert s.tolist() == [3.0, 12.0] and m.tolist() == [2.0, 5.0]
        print(nc.nat_reductions.compiled, nc.nat_reductions.loaded)
    """)
    env = dict(os.environ, JITGRAPH_CACHE_DIR=str(tmp_path), JITGRAPH_CACHE="1")
    here = os.path.dirname(__file__)
    runs = [subprocess.run([sys.executable, "-c", code, here], env=env, capture_output=True, text=True,
                           check=True).stdout.split() for _ in range(2)]
    assert runs == [["1", "0"], ["0", "1"]]
    assert nc.nat_reductions.__class__ is NativeFunction


def test_a_corrupted_cached_object_is_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    key = "0" * 32
    native._write_cached(key, b"object", "text")
    path = os.path.join(native._native_dir(), key + ".o")
    with open(path, "r+b") as f:
        f.seek(-1, 2)
        f.write(b"X")
    with pytest.warns(Warning, match="corrupted"):
        assert native._read_cached(key) is None


# batches tests/test_jit.py does not compile with Numba (NUMBA_BATCHES): the program index would
# find those programs compiled, with their compiled entries
@pytest.mark.parametrize("batch,dtype", [(1, np.float64), (13, np.float64), (27, np.float64), (5, np.float32)],
                         ids=["batch1-float64", "batch13-float64", "batch27-float64", "batch5-float32"])
def test_table_programs_through_native_python_entries(monkeypatch, batch, dtype):
    """Op-table programs (tests/test_jit.py's batches) built as Python entries whose loop
    functions compile natively: values and gradients against the reference interpreter.
    (tests/test_jit.py builds them with compiled entries; these sizes would not pick a
    Python entry by themselves.)"""
    import jitgraph as jg
    from jitgraph import codegen
    from test_jit import NUMBA_BATCHES, TOL, _batched, _batches
    assert batch not in NUMBA_BATCHES[dtype]
    monkeypatch.setattr(codegen, "python_entry_pays", lambda graph, part: True)
    entries = _batches()[batch]
    loss, flat, argnums, owners = _batched(entries, dtype)
    graph = jg.make_graph(loss, argnums, grad=True, has_aux=True)(*flat)
    (v_ref, values_ref), g_ref = jg.eval_graph(graph, *flat)
    f = jg.jit_grad(loss, argnums=argnums, has_aux=True, wait=True)
    (v, values), g = f(*flat)
    low = f.lower(*flat)
    mod = sys.modules[low.program.module]
    natives = [fn for fn in vars(mod).values() if isinstance(fn, NativeFunction)]
    assert "calling the compiled loops" in low.source and natives
    assert all(fn.refused is None or "floor division" in fn.refused for fn in natives)
    rtol = TOL[dtype]
    for e, got, ref in zip(entries, values, values_ref):
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * max(1.0, abs(float(ref))), err_msg=e.name)
    for k, (got, ref) in enumerate(zip(g, g_ref)):
        scale = max(1.0, float(np.max(np.abs(ref), initial=0.0)))
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * scale, err_msg=owners[k].name)


def test_a_kernels_own_copies_of_its_shared_functions_are_not_compiled(monkeypatch, tmp_path):
    """A kernel module's loop functions come from their shared modules (codegen/build.py): its
    own copies, replaced as soon as it has run, are not read or translated."""
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    read = []
    real = native._function_tree
    monkeypatch.setattr(native, "_function_tree", lambda fn: read.append(fn.__module__) or real(fn))
    x = np.linspace(0.0, 1.0, 5000)
    f = jg.jit_grad(lambda x: np.sum(np.tanh(x) ** 2) + np.sum(np.exp(-x) * x), wait=True)
    v, g = f(x)
    v0, g0 = jg.value_and_grad(lambda x: np.sum(np.tanh(x) ** 2) + np.sum(np.exp(-x) * x))(x)
    np.testing.assert_allclose(g, g0, rtol=1e-12)
    assert read and all(m.startswith(build.SHARED_PREFIX) for m in read), read
