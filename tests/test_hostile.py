"""Hostile and careless inputs: never a wrong number, never a crash, errors that name the mistake.

One test (or a group) per class of defect a probe of the code found: corrupted compiled-code
caches, Python ints that wrapped, ndarray subclasses, random draws frozen at trace time,
aliasing through in-place operators, negative integer powers, a full disk, pickling,
stale attributes of globals, internal errors instead of jitgraph errors. Crash and cache
tests run in subprocesses.
"""
import collections
import os
import pickle
import random
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest
import scipy.special as sc

import jitgraph as jg
from jitgraph.codegen import build

pytestmark = pytest.mark.xdist_group("hostile")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code, env=None, cwd=None, timeout=300):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       env=dict(os.environ, **(env or {})), cwd=cwd, timeout=timeout)
    return r


# ---- 1. corrupted compiled-code caches ------------------------------------------------------------
PROGRAM = """
import warnings, json
warnings.simplefilter("always")
import numpy as np, jitgraph as jg
f = jg.jit_grad(lambda w, x: np.sum(np.tanh(x @ w) ** 2))
w, x = np.linspace(-1, 1, 30).reshape(6, 5), np.cos(np.arange(24.0)).reshape(4, 6)
with warnings.catch_warnings(record=True) as caught:
    v, g = f(w, x)
ref = jg.value_and_grad(lambda w, x: np.sum(np.tanh(x @ w) ** 2))(w, x)
print(json.dumps(dict(ok=bool(abs(v - ref[0]) < 1e-12 and np.allclose(g, ref[1], rtol=1e-12)),
                      native=f.lower(w, x).native,
                      warnings=[type(c.message).__name__ for c in caught])))
"""


def _program(cache):
    r = _run(PROGRAM, env={"JITGRAPH_CACHE_DIR": str(cache)})
    assert r.returncode == 0, r.stderr        # a crash (SIGSEGV) would be a negative code
    import json
    return json.loads(r.stdout.strip().splitlines()[-1])


def _flip(path, count=64):
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    for i in range(count):
        data[mid + i] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["flip-nbc", "truncate-nbc", "truncate-nbi", "garbage-nbi"])
def test_corrupted_compiled_cache_is_discarded_and_recompiled(tmp_path, damage):
    cache = tmp_path / "cache"
    first = _program(cache)
    assert first["ok"] and first["native"] == "compiled"
    assert _program(cache)["native"] == "disk"
    pycache = cache / "kernels" / "__pycache__"
    kind = damage.split("-")[1]
    victim = sorted(pycache.glob(f"*.{kind}"))[0]
    if damage == "flip-nbc":
        _flip(victim)
    elif damage.startswith("truncate"):
        victim.write_bytes(victim.read_bytes()[:37])
    else:
        victim.write_bytes(b"\x80\x04garbage" * 10)
    hurt = _program(cache)
    assert hurt["ok"] and hurt["native"] == "compiled"
    assert "CorruptCacheWarning" in hurt["warnings"]
    healed = _program(cache)        # the recompiled code was saved again
    assert healed["ok"] and healed["native"] == "disk" and not healed["warnings"]


def test_helpers_cache_lives_in_the_jitgraph_cache_dir(tmp_path):
    pkg = os.path.join(ROOT, "codegen", "__pycache__")
    before = set(os.listdir(pkg)) if os.path.isdir(pkg) else set()
    cache = tmp_path / "cache"
    assert _program(cache)["ok"]
    assert any(p.name.startswith("runtime.") for p in (cache / "numba").glob("*.nbi"))
    after = set(os.listdir(pkg)) if os.path.isdir(pkg) else set()
    assert not {f for f in after - before if f.endswith((".nbi", ".nbc"))}


def test_full_disk_computes_without_caching(tmp_path):
    """A write limit far below a kernel's size (EFBIG on every cache write): the answer is
    still computed, with one CacheWriteWarning."""
    code = """
    import resource, warnings
    warnings.simplefilter("always")
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.RLIM_INFINITY))
    import numpy as np, jitgraph as jg
    with warnings.catch_warnings(record=True) as caught:
        v, g = jg.jit_grad(lambda x: np.sum(np.sin(x) ** 2))(np.arange(5.0))
    assert abs(v - np.sum(np.sin(np.arange(5.0)) ** 2)) < 1e-12, v
    assert np.allclose(g, np.sin(2 * np.arange(5.0)), rtol=1e-12)
    names = [type(c.message).__name__ for c in caught]
    assert names.count("CacheWriteWarning") == 1, names
    print("ok")
    """
    r = _run(code, env={"JITGRAPH_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_cache_dir_that_is_a_file_says_so(tmp_path, monkeypatch):
    f = tmp_path / "cachefile"
    f.write_text("not a directory")
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(f))
    with pytest.raises(NotADirectoryError, match="exists and is not a directory"):
        build.load_kernel("def kernel(x):\n    return x * 2.5\n")


def test_disabled_cache_leaves_no_temporary_directory(tmp_path):
    code = """
    import numpy as np, jitgraph as jg
    from jitgraph.codegen import build
    print(build.cache_dir())
    jg.jit(lambda x: x * 2)(np.ones(3))
    """
    r = _run(code, env={"JITGRAPH_CACHE": "0"})
    assert r.returncode == 0, r.stderr
    d = r.stdout.strip().splitlines()[-1]
    assert "jitgraph-nocache" in d and not os.path.exists(d)


# ---- 2. Python ints follow NEP 50, as a literal would -------------------------------------------
def _numpy_or_error(fn):
    try:
        return fn(), None
    except Exception as e:
        return None, type(e)


INT_CASES = [
    (np.array([10, 200, 250], np.uint8), 300), (np.array([10, 200, 250], np.uint8), 3),
    (np.array([1, 2], np.int32), 2 ** 40), (np.array([1, 2], np.int32), -7),
    (np.array([1, 2], np.uint64), 2 ** 63), (np.array([1, 2], np.uint64), -3),
    (np.array([1, 2], np.int64), 2 ** 63), (np.array([1.5, 2.0]), 2 ** 70),
    (np.array([1, 2], np.int64), 2 ** 70), (np.array([1.0, 2.0], np.float32), 2 ** 40),
]


def test_python_int_arguments_follow_nep50():
    f = jg.jit(lambda x, s: x + s)
    for x, s in INT_CASES + INT_CASES[::-1]:      # both call orders (the cache is shared)
        expected, error = _numpy_or_error(lambda: x + s)
        if error is not None:
            with pytest.raises(error):
                f(x, s)
        else:
            got = f(x, s)
            assert got.dtype == expected.dtype and np.array_equal(got, expected), (x.dtype, s)
    # a literal in the function behaves the same
    with pytest.raises(OverflowError, match="Python integer 300 out of bounds for uint8"):
        jg.jit(lambda x: x + 300)(np.array([1], np.uint8))


def test_floating_results_of_small_integers_take_numpys_dtypes():
    """int16 and uint16 give float32 from float ufuncs, as NumPy's loops; true division float64.
    (NumPy's float16 for 8-bit integers and booleans is float64 here: jitgraph has no float16.)"""
    for dt in (np.int16, np.uint16, np.int32, np.uint64):
        a = np.array([1, 2, 7], dt)
        for fn in (np.sqrt, np.exp, lambda a: np.hypot(a, a), lambda a: a / a, lambda a: np.sqrt(a) + a):
            got, want = jg.jit(fn, backend="python")(a), fn(a)
            assert got.dtype == want.dtype, (dt, got.dtype, want.dtype)
            np.testing.assert_allclose(got, want, rtol=1e-6)
    assert jg.jit(np.sqrt, backend="python")(np.array([4], np.int8)).dtype == np.float64


def test_integer_sums_and_products_accumulate_in_numpys_dtypes():
    """Unsigned integers sum and multiply in uint64, signed ones and booleans in int64."""
    for x in (np.array([200, 100, 255], np.uint8), np.array([4_000_000_000] * 3, np.uint32),
              np.array([True, False, True]), np.array([100, -100, 127], np.int8)):
        for fn in (np.sum, np.prod, np.cumsum, lambda a: a.sum(axis=0, keepdims=True)):
            got, expected = jg.jit(fn, backend="python")(x), fn(x)
            assert np.asarray(got).dtype == np.asarray(expected).dtype and np.array_equal(got, expected)


def test_negative_integer_powers_raise():
    ints = np.array([1, -2, 3, 7])
    with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
        jg.jit(lambda x: x ** -1)(ints)
    f = jg.jit(lambda x, p: x ** p)
    np.testing.assert_array_equal(f(ints, 2), ints ** 2)
    assert f(ints, 2).dtype == ints.dtype
    with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
        f(ints, -1)
    with pytest.raises(ValueError, match="Integers to negative integer powers"):
        jg.jit(lambda x, p: x ** p)(ints, np.array([1, 2, -1, 0]))
    np.testing.assert_allclose(f(np.array([2.0]), -1), [0.5])


# ---- 3. ndarray subclasses ---------------------------------------------------------------------------
@pytest.mark.parametrize("make", [lambda: np.ma.masked_array([1.0, 2.0, 100.0], mask=[0, 0, 1]),
                                  lambda: np.matrix([[1.0, 2.0], [3.0, 4.0]])], ids=["masked", "matrix"])
def test_subclasses_with_other_semantics_are_refused(make, tmp_path):
    x = make()
    for run in (lambda: jg.jit(np.sum)(x), lambda: jg.jit_grad(np.sum)(x),
                lambda: jg.value_and_grad(np.sum)(x), lambda: jg.make_graph(np.sum)(x)):
        with pytest.raises(TypeError, match=r"argument 0 .* is a numpy\..*(MaskedArray|matrix)"):
            run()
    f = jg.jit(lambda a: a * 2.0)
    f(np.ones(x.shape))                     # a cached plain-array signature must refuse it too
    with pytest.raises(TypeError, match="ndarray subclass"):
        f(x)
    # as a non-differentiated operand of eager code, or a constant of a traced function
    with pytest.raises(TypeError, match="an operand is a numpy"):
        jg.value_and_grad(lambda w, m: np.sum(w * m))(np.ones(x.shape), x)
    with pytest.raises(TypeError, match="an operand is a numpy"):
        jg.jit(lambda w: np.sum(w * x))(np.ones(x.shape))


def test_memmaps_and_views_are_arrays(tmp_path):
    m = np.memmap(tmp_path / "m.dat", dtype=np.float64, mode="w+", shape=(4,))
    m[:] = [1.0, 2.0, 3.0, 4.0]
    f = jg.jit_grad(lambda x: np.sum(x * x))
    assert f(m)[0] == 30.0 and f(np.arange(8.0)[::2])[0] == np.sum(np.arange(8.0)[::2] ** 2)


# ---- 4. random draws frozen at trace time ------------------------------------------------------------
_RNG = np.random.default_rng(0)


def _draw_np(x):
    return x + np.random.standard_normal(3)


def _draw_generator(x):
    return x + _RNG.normal(size=3)


def _draw_random(x):
    return x + random.random()


@pytest.mark.parametrize("fn", [_draw_np, _draw_generator, _draw_random])
def test_random_draws_while_tracing_are_refused_with_the_line(fn):
    with pytest.raises(jg.TracingError, match=r"draws random numbers .*test_hostile.py:\d+: return x \+"):
        jg.jit(fn)(np.zeros(3))


def test_a_local_seeded_generator_is_deterministic_and_allowed():
    f = jg.jit(lambda x: x + np.random.default_rng(7).normal(size=3))
    np.testing.assert_array_equal(f(np.zeros(3)), np.random.default_rng(7).normal(size=3))


def test_a_local_unseeded_generator_is_refused_when_traced_and_fine_eagerly():
    def noisy(x):
        rng = np.random.default_rng()
        return np.sum(x * rng.standard_normal(3))
    with pytest.raises(jg.TracingError, match=r"np.random.default_rng\(\) without a seed .*rng = np.random"):
        jg.jit(noisy, backend="python")(np.zeros(3))
    assert jg.value_and_grad(noisy)(np.zeros(3))[1].shape == (3,)
    assert isinstance(np.random.default_rng(), np.random.Generator)      # NumPy's own, again


def test_a_traced_seed_is_refused_with_static_argnums_named():
    def noisy(x, seed):
        return np.sum(x * np.random.default_rng(seed).standard_normal(3))
    with pytest.raises(jg.TracingError, match=r"default_rng\(\) with a traced seed.*static_argnums"):
        jg.jit(noisy, backend="python")(np.zeros(3), 4)
    f = jg.jit(noisy, backend="python", static_argnums=1)
    assert f(np.ones(3), 4) == np.sum(np.random.default_rng(4).standard_normal(3))


# ---- 5. aliasing through in-place operators ------------------------------------------------------------
def _aliased(x):
    y = x * 1.0
    z = y
    z += 1.0          # y and z are one array: y sees it
    return np.sum(y * y)


def test_in_place_operators_update_every_alias():
    x = np.arange(3.0)
    v_np = _aliased(x)
    for run in (jg.value_and_grad(_aliased), jg.jit_grad(_aliased)):
        v, g = run(x)
        assert v == v_np
        np.testing.assert_allclose(g, 2 * (x + 1.0))


def _updates_argument(x):
    y = x
    y += 1.0
    return np.sum(x * x)


def _updates_argument_view(x):
    x[1:] = 0.0
    return np.sum(x)


def _updates_broadcast(x):
    b = np.broadcast_to(x * 1.0, (2, 3))
    b[0] = 1.0
    return np.sum(b)


@pytest.mark.parametrize("fn,error,match", [
    (_updates_argument, jg.NotSupportedError, "updates a function argument"),
    (_updates_argument_view, jg.NotSupportedError, "updates a function argument"),
    (_updates_broadcast, ValueError, "read-only")])
def test_in_place_updates_of_arguments_and_read_only_views_are_refused(fn, error, match):
    for run in (jg.value_and_grad(fn), jg.jit_grad(fn)):
        with pytest.raises(error, match=match):
            run(np.arange(3.0))


def _updates_shared_view(x):
    t = x * 2.0
    v = t[1:]
    v += 1.0               # t sees it (a view)
    r = t.reshape(3, 1)
    r[0, 0] = -t[2]        # v sees it through t
    c = t[[0, 2]]          # an index array makes a copy
    c += 10.0
    return np.sum(t * x) + np.sum(v ** 2) + np.sum(c)


def _updates_temporary_view(x):
    v = (x * 2.0)[1:]
    v += 1.0
    return np.sum(v)


@pytest.mark.parametrize("fn", [_updates_shared_view, _updates_temporary_view])
def test_in_place_updates_of_views_follow_numpy(fn):
    x = np.arange(1.0, 4.0)
    eps = 1e-6
    fd = [(fn(x + eps * e) - fn(x - eps * e)) / (2 * eps) for e in np.eye(3)]
    for run in (jg.value_and_grad(fn), jg.jit_grad(fn)):
        v, g = run(x)
        assert v == pytest.approx(fn(x))
        np.testing.assert_allclose(g, fd, atol=1e-6)


def test_indices_out_of_bounds_raise_index_error():
    x = np.arange(12.0).reshape(3, 4)
    f = jg.jit(lambda x, i, j: x[i, j])
    np.testing.assert_array_equal(f(x, np.array([0, -1]), np.array([3, -4])), x[[0, -1], [3, -4]])
    with pytest.raises(IndexError, match="index 4 is out of bounds for axis 1 with size 4"):
        f(x, np.array([0, 1]), np.array([4, 0]))      # in range of the flattened array
    with pytest.raises(IndexError, match="index -4 is out of bounds for axis 0 with size 3"):
        f(x, np.array([-4, 1]), np.array([0, 0]))
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 3"):
        jg.jit(lambda x: x[[0, 3], [0, 0]])(x)
    # the most negative int64 (whose negation overflows) is reported, not a failed allocation
    with pytest.raises(IndexError, match="index -9223372036854775808 is out of bounds"):
        jg.jit(lambda x, i: x[i], backend="python")(x[0], -2 ** 63)


def test_traced_slice_bounds_and_masks_say_what_to_write_instead():
    x = np.arange(5.0)
    with pytest.raises(jg.NotSupportedError, match=r"x\[i \+ np.arange\(n\)\]"):
        jg.jit(lambda x, i: x[i:i + 2])(x, 1)
    with pytest.raises(jg.NotSupportedError, match="np.where"):
        jg.jit(lambda x: x[x > 1.0])(x)
    with pytest.raises(jg.NotSupportedError, match="one value or one"):
        jg.jit(lambda x, y: x.copy().__setitem__(x > 1.0, y))(x, np.ones(2))


def test_nonzero_and_one_argument_where_are_positions():
    """Eagerly the recorded value's positions (no gradient through them); traced, a refusal that
    says to index with the mask itself."""
    x = np.array([-1.0, 2.0, 3.0])

    def f(x):
        return np.sum(x[np.where(x > 0)] ** 2) + np.sum(x[(x > 0).nonzero()])
    v, g = jg.value_and_grad(f)(x)
    assert v == pytest.approx(f(x))
    np.testing.assert_allclose(g, [0.0, 5.0, 7.0])
    with pytest.raises(jg.NotSupportedError, match=r"np.nonzero / np.where\(cond\) of a traced value.*x\[cond\]"):
        jg.jit(f, backend="python")(x)
    with pytest.raises(ValueError, match="either both or neither of x and y should be given"):
        jg.value_and_grad(lambda x: np.sum(np.where(x > 0, x)))(x)


def test_python_flag_and_count_arguments_are_told_to_be_static():
    def loss(x, training, n):
        if training:
            x = x * 0.5
        return np.sum(x[:n] ** 2)
    with pytest.raises(jg.TracingError, match=r"if training:.*static_argnums"):
        jg.jit_grad(loss, backend="python")(np.ones(3), True, 2)
    with pytest.raises(jg.NotSupportedError, match=r"x\[:n\].*static_argnums"):
        jg.jit_grad(loss, static_argnums=(1,), backend="python")(np.ones(3), True, 2)
    v, g = jg.jit_grad(loss, static_argnums=(1, 2), backend="python")(np.ones(3), True, 2)
    assert v == 0.5
    np.testing.assert_allclose(g, [0.5, 0.5, 0.0])


def test_a_ufunc_given_a_list_of_traced_arrays_says_to_stack_them():
    """No protocol looks into a ufunc's list argument: NumPy converts it, and the error names
    the ufunc and the array to give it instead, recorded or traced."""
    x = np.ones(3)
    for f, name in ((lambda a: np.sum(np.exp([a, 2 * a])), r"np\.exp"),
                    (lambda a: np.sum(sc.gammaln((a, a + 1))), r"scipy\.special\.gammaln")):
        with pytest.raises(jg.JitgraphError, match=rf"ufunc \(here `{name}`\).*{name}\(np\.stack"):
            jg.value_and_grad(f)(x)
        with pytest.raises(jg.TracingError, match=rf"ufunc \(here `{name}`\).*{name}\(np\.stack"):
            jg.jit(f)(x)
    # traced scalars in a list become an object array, which jitgraph stacks: it works
    v, g = jg.value_and_grad(lambda a: np.sum(np.exp([a[0], 2 * a[1]])))(x)
    np.testing.assert_allclose(g, [np.e, 2 * np.exp(2.0), 0.0])


# ---- 9. pickling decorated functions ---------------------------------------------------------------------
MODULE = """
import numpy as np
import jitgraph as jg


@jg.jit_grad
def loss(w):
    return np.sum(np.tanh(w) ** 2)
"""


def test_decorated_module_level_functions_pickle_by_name(tmp_path, monkeypatch):
    (tmp_path / "hostile_pickle_mod.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import hostile_pickle_mod as mod
    blob = pickle.dumps(mod.loss)
    assert len(blob) < 200 and pickle.loads(blob) is mod.loss
    code = f"""
    import sys, pickle, numpy as np
    sys.path.insert(0, {str(tmp_path)!r})
    import concurrent.futures as cf, hostile_pickle_mod as mod
    if __name__ == "__main__":
        with cf.ProcessPoolExecutor(1) as ex:
            v, g = ex.submit(mod.loss, np.ones(3)).result()
        assert abs(v - 3 * np.tanh(1.0) ** 2) < 1e-12
        print("ok")
    """
    r = _run(code)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# ---- 10. attributes of globals are guarded ---------------------------------------------------------------
CFG = types.SimpleNamespace(scale=2.0, inner=types.SimpleNamespace(offset=1))


def _scaled(x):
    return x * CFG.scale + CFG.inner.offset


def test_attribute_reads_of_globals_retrace_when_changed():
    f = jg.jit(_scaled)
    x = np.ones(2)
    try:
        np.testing.assert_array_equal(f(x), [3.0, 3.0])
        CFG.scale = 3.0
        np.testing.assert_array_equal(f(x), [4.0, 4.0])
        CFG.inner.offset = 10
        np.testing.assert_array_equal(f(x), [13.0, 13.0])
        f(x)
        assert f.cache_info().traces == 3
    finally:
        CFG.scale, CFG.inner.offset = 2.0, 1


HELPER_SCALE = 5.0


def _helper(x):
    return x * HELPER_SCALE


def _calls_helper(x):
    return np.sum(_helper(x))


class _Model:
    def __init__(self):
        self.scale = 2.0

    def loss(self, x):
        return np.sum(x * self.scale)


def test_globals_of_helpers_and_a_bound_methods_self_are_guarded():
    """A global only a helper function reads, and `self.scale` of a jitted bound method: changing
    either retraces (the compiled function had kept the traced values)."""
    global HELPER_SCALE
    f = jg.jit(_calls_helper, backend="python")
    x = np.ones(3)
    try:
        assert f(x) == 15.0
        HELPER_SCALE = 7.0
        assert f(x) == 21.0
    finally:
        HELPER_SCALE = 5.0
    m = _Model()
    g = jg.jit_grad(m.loss, backend="python")
    assert g(x)[0] == 6.0
    m.scale = 3.0
    v, gr = g(x)
    assert v == 9.0
    np.testing.assert_array_equal(gr, [3.0, 3.0, 3.0])
    assert g.cache_info().traces == 2


def test_attributes_computed_on_every_read_are_not_guarded_by_identity():
    c = np.arange(6.0).reshape(2, 3)
    f = jg.jit_grad(lambda a: np.sum(c.T * a))      # c.T is a new view object on every read
    for _ in range(2):
        v, g = f(np.ones((3, 2)))
        assert v == 15.0
        np.testing.assert_array_equal(g, c.T)
    assert f.cache_info().traces == 1


# ---- 11. jitgraph errors that name the mistake -------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float16, np.longdouble, np.complex128])
def test_dtypes_jitgraph_does_not_compute_in_are_refused(dtype):
    with pytest.raises(jg.NotSupportedError, match=f"dtype {np.dtype(dtype).name}.*does not compute in"):
        jg.jit(lambda x: x * 2)(np.ones(3, dtype))
    with pytest.raises(jg.NotSupportedError, match="does not compute in"):
        jg.jit(lambda x: x.astype(dtype))(np.ones(3))


def test_big_endian_arrays_and_unsigned_indices():
    be = np.arange(4.0).astype(">f8")
    np.testing.assert_array_equal(jg.jit(lambda x: x * 2)(be), be * 2)
    f = jg.jit_grad(lambda x: np.sum(x * x))
    f(np.arange(4.0))
    assert f(be)[0] == 14.0                  # the cached native-order signature converts it
    for dt in (np.uint64, np.uint32, np.uint8):
        idx = np.array([1, 3, 3], dt)
        np.testing.assert_array_equal(jg.jit(lambda x, i: x[i])(np.arange(5.0), idx), [1.0, 3.0, 3.0])


def test_values_that_are_not_arrays_are_clear_errors():
    with pytest.raises(TypeError, match="unsupported operand type .*NoneType.*test_hostile"):
        jg.jit(lambda x: x + None)(np.ones(3))
    with pytest.raises(TypeError, match="returned a str"):
        jg.jit(lambda x: (x, "abc"))(np.ones(3))
    assert jg.jit(lambda x: None)(np.ones(3)) is None
    assert jg.jit(lambda x: ())(np.ones(3)) == ()
    with pytest.raises(jg.ShapeError, match="larger than the maximum possible size"):
        jg.jit(lambda x: np.sum(np.broadcast_to(x, (2 ** 40, 2 ** 40))))(np.ones(1))


def test_namedtuples_are_pytrees():
    P = collections.namedtuple("P", "w b")
    loss = lambda p, x: np.sum((x * p.w + p.b) ** 2)  # noqa: E731
    p, x = P(np.ones(2), 0.5), np.arange(2.0)
    v, g = jg.jit_grad(loss)(p, x)
    v_e, g_e = jg.value_and_grad(loss)(p, x)
    assert isinstance(g, P) and isinstance(g_e, P) and v == v_e == 2.5
    np.testing.assert_array_equal(g.w, g_e.w)
    out = jg.jit(lambda p: P(p.w * 2, p.b))(p)
    assert isinstance(out, P) and np.array_equal(out.w, [2.0, 2.0])


@pytest.mark.parametrize("bad", ["x", 0.0, [0, "a"]])
def test_argnums_of_the_wrong_type(bad):
    with pytest.raises(TypeError, match="argnums must be an int or a tuple of ints"):
        jg.jit_grad(np.sum, argnums=bad)
    with pytest.raises(TypeError, match="argnums must be an int or a tuple of ints"):
        jg.value_and_grad(np.sum, argnums=bad)(np.ones(2))


def test_static_argnums_are_checked_against_the_signature():
    f = jg.jit(lambda x, s: x * s, static_argnums=-1)
    assert f.static_argnums == (1,)
    np.testing.assert_array_equal(f(np.ones(2), 3), [3.0, 3.0])
    with pytest.raises(ValueError, match="static_argnums=5 is out of range: .* takes 2 positional"):
        jg.jit(lambda x, s: x * s, static_argnums=5)


def test_scan_body_returning_only_the_carry():
    body = lambda c, x: c + x  # noqa: E731
    with pytest.raises(TypeError, match="must return a pair"):
        jg.scan(body, 0.0, np.arange(3.0))
    with pytest.raises(TypeError, match="must return a pair"):
        jg.jit(lambda xs: jg.scan(body, 0.0, xs))(np.arange(3.0))


# ---- 12. operations not supported yet name themselves and the line -------------------------------------
@pytest.mark.parametrize("what,fn", [
    ("ndarray.argpartition", lambda x: x.argpartition(1)),
    ("ndarray.resize", lambda x: x.resize(2)),
])
def test_unsupported_operations_are_not_supported_errors(what, fn):
    with pytest.raises(jg.NotSupportedError, match=f"{what}.*test_hostile"):
        jg.jit(fn)(np.ones(3))


def test_copy_is_a_new_array():
    def f(x):
        y = x * 2.0
        z = y.copy()
        z += 1.0
        return np.sum(y) + np.sum(z)
    x = np.arange(3.0)
    assert jg.jit_grad(f)(x)[0] == f(x)


# ---- 13. the command line -------------------------------------------------------------------------------------
def test_show_usage_errors_are_one_line(tmp_path):
    (tmp_path / "notpy").write_text("x\n")
    (tmp_path / "mod.py").write_text("import numpy as np\ndef f(w):\n    return np.sum(w)\n")
    for args in (["./notpy:f", "--shape", "w=3"], ["mod:f", "--shape", "w=100000000000x100000"]):
        r = subprocess.run([sys.executable, "-m", "jitgraph", "show", *args], capture_output=True,
                           text=True, cwd=tmp_path, timeout=120)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "error:" in r.stderr, r.stderr



def _updates_numpy_copy(w, vel):
    v = vel.copy()         # a NumPy array (vel is not differentiated in eager mode)
    v += 0.5 * w           # rebinds v to the traced sum, as NumPy's result would be
    v *= 2.0
    return np.sum(v ** 2)


def _writes_numpy_array_through_out(w):
    a = np.arange(3.0)
    np.add(a, w, out=a)     # no rebinding: `a` would silently keep its old values
    return np.sum(a)


def _widens_numpy_int_array(w):
    a = np.arange(3)
    a += w                  # NumPy refuses float64 -> int64 under same_kind casting
    return np.sum(a)


def test_augmented_assignment_to_a_numpy_array_rebinds_it():
    w, vel = np.ones(3), np.arange(3.0)
    for run in (jg.value_and_grad(_updates_numpy_copy), jg.jit_grad(_updates_numpy_copy)):
        v, g = run(w, vel)
        assert v == pytest.approx(_updates_numpy_copy(w, vel))
        np.testing.assert_allclose(g, 4.0 * (vel + 0.5 * w))
    with pytest.raises(jg.NotSupportedError, match="out=a"):
        jg.value_and_grad(_writes_numpy_array_through_out)(w)
    with pytest.raises(TypeError, match="same_kind"):
        jg.value_and_grad(_widens_numpy_int_array)(w)


def _numpy_scalar_of_traced(x):
    return np.float64(np.sum(x)) * 2.0      # NumPy's scalar would be a constant: no gradient


def test_numpy_scalar_constructor_of_a_traced_value_is_refused_not_a_silent_constant():
    for run in (jg.value_and_grad(_numpy_scalar_of_traced), jg.jit_grad(_numpy_scalar_of_traced, wait=True)):
        with pytest.warns(RuntimeWarning, match=r"np\.float64\(x\) of a traced value"):
            with pytest.raises(ValueError):
                run(np.ones(3))


def test_a_numpy_arrays_method_given_a_traced_value_names_the_function_form():
    """`X.dot(W)` with X a NumPy array converts W with __array__ (methods have no dispatch
    protocol); the error says so and names `X @ W`, in both modes."""
    X = np.arange(6.0).reshape(2, 3)

    def loss(W):
        return np.sum(X.dot(W))

    with pytest.raises(jg.JitgraphError, match=r"here `\.dot\(\.\.\.\)`.*X @ W or np\.dot\(X, W\)"):
        jg.value_and_grad(loss)(np.ones(3))
    with pytest.raises(jg.TracingError, match=r"here `\.dot\(\.\.\.\)`.*X @ W"):
        jg.jit_grad(loss, wait=True)(np.ones(3))
    # the function form records: the same values as NumPy, and the gradient X.sum(0)
    value, grad = jg.value_and_grad(lambda W: np.sum(X @ W))(np.ones(3))
    assert value == np.sum(X.dot(np.ones(3)))
    np.testing.assert_array_equal(grad, X.sum(axis=0))


def test_concatenating_many_pieces_and_indexing_with_ranges():
    """np.concatenate/np.stack of many traced pieces join in a tree of concatenates (one of
    1,000 operands made generated source too deeply nested for Python to compile), and a range
    object indexes as NumPy's integer array does (reads and writes)."""
    def f(x):
        parts = [x[i % 7] * (i + 1.0) for i in range(70)] + [np.ones(3) * i for i in range(40)]
        y = x * 1.0
        y[range(3), range(3)] = 0.0
        return np.sum(np.concatenate(parts) ** 2) * 1e-3 + np.sum(np.stack(parts[:50]) * 2.0) \
            + np.sum(y[range(0, 7, 2)] ** 2)
    x = np.random.default_rng(0).standard_normal((7, 3))
    graph = jg.make_graph(f, grad=True)(x)
    assert max(len(n.inputs) for n in graph.nodes if n.op == "concatenate") <= 32
    v, g = jg.jit_grad(f, backend="python")(x)
    ve, ge = jg.value_and_grad(f)(x)
    np.testing.assert_allclose(v, f(x), rtol=1e-12)
    np.testing.assert_allclose(ve, f(x), rtol=1e-12)
    np.testing.assert_allclose(g, ge, rtol=1e-11, atol=1e-12)


def test_bincount_of_traced_integers_checks_its_bins_when_it_runs():
    """np.bincount(x, minlength=n) of integers that are arguments: n bins, and a run whose values
    need more bins (or are negative) raises instead of returning counts, in both tiers."""
    def f(h, d):
        return np.sum(h / (1.0 + np.bincount(d, minlength=5))) + np.sum(np.bincount(d, h[d % 5], 5) ** 2)
    h, d = np.arange(5.0) + 1, np.array([0, 1, 2, 2, 4, 4, 4])
    want = jg.value_and_grad(f)(h, d)
    for wait in (True, False):
        v, g = jg.jit_grad(f, wait=wait)(h, d)
        np.testing.assert_allclose(v, f(h, d), rtol=1e-13)
        np.testing.assert_allclose(g, want[1], rtol=1e-13)
        with pytest.raises(ValueError, match="needs 8 bins .* minlength=5"):
            jg.jit_grad(f, wait=wait)(h, np.array([0, 7]))
        with pytest.raises(ValueError, match="must have no negative elements"):
            jg.jit_grad(f, wait=wait)(h, np.array([0, -1]))
    with pytest.raises(jg.NotSupportedError, match="needs minlength="):
        jg.jit_grad(lambda h, d: np.sum(h[:3] * np.bincount(d)))(h, d)


def test_as_strided_outside_the_array_raises_and_numpy_gets_its_function_back():
    """as_strided is patched (its code) only while a function is recorded; a read past the
    array's end, which NumPy would make from memory, is an error naming the offsets."""
    from numpy.lib.stride_tricks import as_strided
    code = as_strided.__code__
    x = np.arange(6.0)
    with pytest.raises(jg.NotSupportedError, match="reads outside its array: element offsets 0 to 6"):
        jg.jit(lambda x: as_strided(x, (5, 3), (8, 8)), backend="python")(x)
    assert as_strided.__code__ is code
    np.testing.assert_array_equal(as_strided(x, (2, 2), (16, 8)), [[0.0, 1.0], [2.0, 3.0]])
    out = jg.jit(lambda x: as_strided(x[1:], (2, 2), (16, 8)) * 2, backend="python")(x)
    np.testing.assert_array_equal(out, [[2.0, 4.0], [6.0, 8.0]])
    with pytest.raises(jg.NotSupportedError, match="not multiples of the item size"):
        jg.value_and_grad(lambda x: np.sum(as_strided(x, (2,), (12,))))(x)
    assert as_strided.__code__ is code


def test_decorated_methods_bind_self_and_guard_its_attributes():
    """`@jg.jit_grad(argnums=1)` on a method: one compiled function per instance, argnums and
    static_argnums counting self; what the method reads from self retraces when changed."""
    class Model:
        def __init__(self, scale):
            self.scale = scale

        @jg.jit_grad(argnums=1, backend="python")
        def loss(self, w, x):
            return self.scale * np.sum((x @ w) ** 2)

        @jg.jit(static_argnums=(0, 2), backend="python")
        def forward(self, x, k):
            return x * self.scale * k

    w, x = np.ones((3, 2)), np.ones((2, 3))
    m, other = Model(2.0), Model(5.0)
    v, g = m.loss(w, x)
    assert v == 2.0 * np.sum((x @ w) ** 2)
    np.testing.assert_allclose(g, 2.0 * 2 * x.T @ (x @ w))
    m.scale = 3.0
    assert m.loss(w, x)[0] == 3.0 * np.sum((x @ w) ** 2)
    assert m.loss.cache_info().traces == 2 and m.loss is m.loss
    np.testing.assert_array_equal(m.forward(np.ones(2), 4), [12.0, 12.0])
    np.testing.assert_array_equal(other.forward(np.ones(2), 4), [20.0, 20.0])

    class Bad:
        @jg.jit_grad
        def loss(self, w):
            return np.sum(w)
    with pytest.raises(ValueError, match="position 0 is `self`"):
        Bad().loss(np.ones(2))
