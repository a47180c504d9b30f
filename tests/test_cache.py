"""The trace cache and the native (disk) cache: keys, reuse, persistence, staleness, safety."""
import json
import logging
import os
import pickle
import stat
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

import jitgraph as jg
from threads import run_in_threads
from jitgraph.codegen import build
from jitgraph.jit import RetraceWarning

pytestmark = pytest.mark.xdist_group("cache")


def _mlp(w, x):
    return np.sum(np.tanh(x @ w) ** 2)


def test_new_batch_sizes_retrace_but_compile_at_most_twice(monkeypatch, caplog):
    monkeypatch.setenv("JITGRAPH_LOG", "recompiles")
    f = jg.jit_grad(_mlp)
    w = np.linspace(-1, 1, 24).reshape(8, 3)
    with caplog.at_level(logging.INFO, logger="jitgraph"):
        for n in (32, 64, 5, 100, 2000, 9000):
            x = np.cos(np.arange(n * 8.0)).reshape(n, 8)
            v, g = f(w, x)
            v_ref, g_ref = jg.value_and_grad(_mlp)(w, x)
            np.testing.assert_allclose(v, v_ref, rtol=1e-12)
            np.testing.assert_allclose(g, g_ref, rtol=1e-12, atol=1e-14)
        f(w, x)
    info = f.cache_info()
    assert info.traces == 6 and info.hits == 1 and info.entries == 6
    assert info.compiles + info.disk_hits <= 2
    assert info.kernel_reuses >= 4
    assert "argument 1 `x`: shape (32, 8) float64 -> shape (64, 8) float64" in caplog.text


def test_python_scalars_are_traced_not_baked_in():
    f = jg.jit_grad(lambda x, s: np.sum(x * s))
    x = np.ones(3)
    assert f(x, 2.0)[0] == 6.0
    assert f(x, 5.0)[0] == 15.0
    assert f.cache_info().traces == 1
    f(x, 5)     # an int is another kind of scalar: a new trace, still correct
    assert f(x, 4)[0] == 12.0 and f.cache_info().traces == 2


def test_static_argnums_select_the_graph_and_key_the_cache():
    def loss(w, x, mode, power):
        y = x @ w
        return np.sum(np.tanh(y) ** power if mode == "tanh" else y ** power)

    f = jg.jit_grad(loss, static_argnums=(2, 3))
    w, x = np.full((4, 2), 0.1), np.ones((3, 4))
    for mode in ("tanh", "lin", "tanh"):
        for power in (2, 3):
            v, g = f(w, x, mode, power)
            v_ref, g_ref = jg.value_and_grad(loss)(w, x, mode, power)
            np.testing.assert_allclose(v, v_ref, rtol=1e-12)
            np.testing.assert_allclose(g, g_ref, rtol=1e-12)
    assert f.cache_info().traces == 4 and f.cache_info().hits == 2
    # keyword call binds to the same positions
    assert f(w, x, power=2, mode="lin")[0] == pytest.approx(f(w, x, "lin", 2)[0])


def test_unhashable_static_argument_is_a_clear_error():
    f = jg.jit(lambda x, sizes: np.sum(x) * len(sizes), static_argnums=1)
    with pytest.raises(TypeError, match=r"static argument 1 `sizes` of .* must be hashable.*list"):
        f(np.ones(3), [1, 2])
    assert f(np.ones(3), (1, 2)) == 6.0


def test_argnum_cannot_be_static():
    with pytest.raises(ValueError, match="both in argnums and static_argnums"):
        jg.jit_grad(lambda x, n: np.sum(x) * n, argnums=1, static_argnums=1)


def test_retrace_warning_names_the_argument(monkeypatch):
    monkeypatch.setenv("JITGRAPH_RETRACE_WARN", "3")
    f = jg.jit(lambda a, x: np.sum(x) + np.sum(a), backend="python")
    a = np.ones(2)
    with pytest.warns(RetraceWarning, match=r"traced 4 times; argument 1 `x` changed in 3"):
        for n in range(1, 6):
            f(a, np.ones(n))


def test_trace_cache_is_lru_bounded():
    f = jg.jit(lambda x: np.sum(x * 2), backend="python", cache_size=2)
    for n in (1, 2, 3, 2, 1):
        assert f(np.ones(n)) == 2 * n
    info = f.cache_info()
    # 1, 2, 3 (evicts 1), 2 (hit), 1 (miss, evicts 3)
    assert (info.traces, info.hits, info.entries, info.maxsize, info.evictions) == (4, 1, 2, 2, 2)


def test_rebinding_a_global_or_closure_value_retraces():
    env = {"np": np}
    exec("scale = 2.0\ndef h(x):\n    return np.sum(x * scale)\n", env)
    f = jg.jit(env["h"])
    assert f(np.ones(3)) == 6.0
    env["scale"] = 3.0
    assert f(np.ones(3)) == 9.0
    assert f.cache_info().traces == 2

    def make(k):
        return lambda x: np.sum(x * k)

    g = jg.jit(make(4.0), backend="python")
    assert g(np.ones(2)) == 8.0


def test_eight_threads_on_a_cold_function_trace_and_compile_once():
    c = 1.0 + uuid.uuid4().int % 1000 / 1e4     # a constant no other test compiled
    f = jg.jit_grad(lambda x: np.sum(np.sin(x) * c))
    x = np.linspace(0, 1, 50)
    results = run_in_threads(lambda k: f(x), 8)
    info = f.cache_info()
    # one native build: compiled, or loaded from a disk cache that outlived an earlier run
    assert info.traces == 1 and info.compiles + info.disk_hits == 1 and info.hits == 7
    for v, g in results:
        assert v == pytest.approx(np.sum(np.sin(x)) * c, rel=1e-12)
        np.testing.assert_allclose(g, np.cos(x) * c, rtol=1e-12)


def test_pickle_sends_the_function_not_native_code():
    f = jg.jit_grad(_mlp)
    w, x = np.full((3, 2), 0.2), np.ones((4, 3))
    f(w, x)
    blob = pickle.dumps(f)
    assert len(blob) < 2000
    g = pickle.loads(blob)
    assert g is f                       # copies in one process share one cache
    np.testing.assert_allclose(g(w, x)[1], f(w, x)[1])


def test_compiled_function_inside_another_trace_is_inlined():
    inner = jg.jit(lambda x: np.tanh(x) * 2)

    def outer(x):
        return np.sum(inner(x) ** 2)

    x = np.linspace(-1, 1, 5)
    v, g = jg.value_and_grad(outer)(x)
    v2, g2 = jg.jit_grad(outer)(x)
    ref = 4 * np.tanh(x) ** 2
    assert v == pytest.approx(ref.sum()) and v2 == pytest.approx(ref.sum())
    np.testing.assert_allclose(g, 8 * np.tanh(x) * (1 - np.tanh(x) ** 2), rtol=1e-12)
    np.testing.assert_allclose(g2, g, rtol=1e-12)


# ---- the build layer: directory safety and corrupted files ------------------------------------------
def _source(c):
    return f"from numba import njit\n\n\n@njit(cache=True)\ndef kernel(x):\n    return x * {c!r}\n"


def test_cache_dir_is_created_private(tmp_path, monkeypatch):
    d = tmp_path / "fresh" / "jg"
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(d))
    kernel, modname, path = build.load_kernel(_source(uuid.uuid4().int % 10 ** 6 + 0.5))
    assert kernel(2.0) > 0
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(d / "kernels").st_mode) == 0o700
    assert os.path.dirname(path) == str(d / "kernels")


def test_cache_dir_writable_by_others_is_refused(tmp_path, monkeypatch):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o777)
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(d))
    with pytest.raises(build.CacheDirError, match="writable by other users.*chmod 700"):
        build.load_kernel(_source(0.25 + uuid.uuid4().int % 10 ** 6))
    assert not (d / "kernels").exists()


def test_corrupted_kernel_file_is_detected_and_rewritten(tmp_path, monkeypatch):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path / "c"))
    src = _source(3.0 + uuid.uuid4().int % 10 ** 6)
    kernel, modname, path = build.load_kernel(src)
    expected = kernel(1.0)
    del sys.modules[modname]
    with open(path, "w") as f:        # truncated, and what is left would be wrong if it ran
        f.write(src[: len(src) // 2].replace("kernel", "_k") + "\ndef kernel(x):\n    return -1.0\n")
    with pytest.warns(build.CorruptCacheWarning, match="corrupted"):
        kernel2, _, path2 = build.load_kernel(src)
    assert path2 == path and kernel2(1.0) == expected
    with open(path) as f:
        assert f.read() == src


def test_cache_disabled_uses_a_private_temporary_directory(monkeypatch):
    monkeypatch.setenv("JITGRAPH_CACHE", "0")
    d = build.cache_dir()
    assert "jitgraph-nocache" in d and stat.S_IMODE(os.stat(d).st_mode) == 0o700


# ---- across processes --------------------------------------------------------------------------------
RUNNER = """
import json, sys
import numpy as np
import jitgraph as jg
sys.path.insert(0, sys.argv[1])
import usermod
f = jg.jit_grad(usermod.loss, argnums=(0, 1))
w, b = np.linspace(-1, 1, 12).reshape(4, 3), np.array([0.1, 0.2, 0.3])
x = np.cos(np.arange(20.0)).reshape(5, 4)
v, (gw, gb) = f(w, b, x)
v_ref, (gw_ref, gb_ref) = jg.value_and_grad(usermod.loss, argnums=(0, 1))(w, b, x)
low = f.lower(w, b, x)
print(json.dumps(dict(v=float(v), ok=bool(np.allclose(gw, gw_ref, rtol=1e-12) and
                                          np.allclose(gb, gb_ref, rtol=1e-12) and
                                          abs(v - v_ref) <= 1e-12 * abs(v_ref)),
                      native=low.native, path=low.path, graph=low.graph_hash,
                      **f.cache_info()._asdict())))
"""

MODULE = """
import numpy as np
SCALE = {scale}
def loss(w, b, x):
    return np.sum(np.{fn}(x @ w + b) ** 2) * SCALE
"""


def test_new_process_loads_from_disk_and_edits_are_never_stale(tmp_path):
    cache = tmp_path / "cache"
    mod_dir = tmp_path / "mods"
    mod_dir.mkdir()
    (tmp_path / "runner.py").write_text(RUNNER)
    env = dict(os.environ, JITGRAPH_CACHE_DIR=str(cache))
    env.pop("NUMBA_CACHE_DIR", None)
    env.pop("JITGRAPH_CACHE", None)

    def run(scale, fn):
        (mod_dir / "usermod.py").write_text(MODULE.format(scale=scale, fn=fn))
        r = subprocess.run([sys.executable, "-B", str(tmp_path / "runner.py"), str(mod_dir)],
                           capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    cold = run(1.5, "tanh")
    assert cold["ok"] and cold["native"] == "compiled" and cold["compiles"] == 1
    warm = run(1.5, "tanh")
    assert warm["ok"] and warm["native"] == "disk" and warm["compiles"] == 0 and warm["disk_hits"] == 1
    assert warm["v"] == cold["v"] and warm["path"] == cold["path"]
    assert warm["graph"] == cold["graph"]
    # a global the function reads changed: a new graph; floating constants are passed to the
    # kernel at run time, so the same native code runs with the new value
    edited_const = run(2.5, "tanh")
    assert edited_const["ok"] and edited_const["graph"] != cold["graph"]
    assert edited_const["v"] == pytest.approx(cold["v"] * 2.5 / 1.5, rel=1e-12)
    assert edited_const["native"] == "disk" and edited_const["path"] == cold["path"]
    edited_code = run(1.5, "sin")          # the function's code changed: new graph, new code
    assert edited_code["ok"] and edited_code["native"] == "compiled"
    assert edited_code["graph"] not in (cold["graph"], edited_const["graph"])
    assert edited_code["path"] != cold["path"]
    kernels = cache / "kernels"
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert not [p for p in os.listdir(kernels) if p.endswith(".tmp")]


def test_two_processes_compiling_at_once_agree(tmp_path):
    script = tmp_path / "race.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, jitgraph as jg
        f = jg.jit_grad(lambda x: np.sum(np.cos(x) * 1.2345678))
        x = np.linspace(0, 1, 7)
        v, g = f(x)
        assert abs(v - np.sum(np.cos(x)) * 1.2345678) < 1e-12
        assert np.allclose(g, -np.sin(x) * 1.2345678, rtol=1e-12)
        print("ok")
    """))
    env = dict(os.environ, JITGRAPH_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("NUMBA_CACHE_DIR", None)
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == "ok", err
    files = os.listdir(tmp_path / "cache" / "kernels")
    assert len([f for f in files if f.endswith(".py") and not f.startswith(build.SHARED_PREFIX)]) == 1
    assert not [f for f in files if f.endswith(".tmp")]


def test_compiled_code_is_stale_when_a_helper_module_changes(tmp_path, monkeypatch):
    # code compiled from one file holds code of the helper modules (blas.py's gemm inside
    # runtime.py's products): a change to any of them must not leave the old code cached
    import importlib
    from numba import njit, types
    from jitgraph.codegen import numba_cache
    mod_dir = tmp_path / "mods"
    mod_dir.mkdir()
    name = f"stampmod_{uuid.uuid4().hex}"
    (mod_dir / f"{name}.py").write_text("def twice(x):\n    return 2.0 * x\n")
    monkeypatch.syspath_prepend(str(mod_dir))
    fn = njit(importlib.import_module(name).twice)
    argtypes = (types.float64,)
    numba_cache.enable([fn], str(tmp_path / "cache"))
    assert fn(1.5) == 3.0 and numba_cache.in_cache(fn, argtypes) is True
    monkeypatch.setattr(numba_cache, "HELPERS_STAMP", numba_cache.HELPERS_STAMP + "-changed")
    numba_cache.enable([fn], str(tmp_path / "cache"))
    assert numba_cache.in_cache(fn, argtypes) is False


# ---- functions shared between kernels (build.shared_loops) ---------------------------------------------
SHARING = """
import math
import numpy as np
from numba import njit
from jitgraph.codegen import runtime as _rt

_OPTS = dict(error_model='numpy', boundscheck=False, no_cfunc_wrapper=True)
_TABLE = np.arange(3.0) + {c}


# {chunk}
@_rt.chunk_njit(**_OPTS)
def {chunk}(ch, nch, n0, va, vb):
    for i in range(ch * n0 // nch, (ch + 1) * n0 // nch):
        vb[i] = math.exp(va[i])  # b = exp a


@njit(**_OPTS)
def {group}(n0, va, vb):
    _rt.parallel_chunks({chunk}, 2, n0, va, vb)


@njit(**_OPTS)
def reads_table(vb):
    vb[0] += _TABLE[0]


@njit(**_OPTS)
def kernel(dims, va, vb):
    {group}(dims[0], va, vb)
    reads_table(vb)
    return (vb,)
"""


def _sharing(c, group, chunk):
    return SHARING.format(c=c, group=group, chunk=chunk)


def test_shared_loops_are_named_by_their_text_not_their_kernel():
    a = build.shared_loops(_sharing(1.0, "group_1", "group_1_chunk"))
    b = build.shared_loops(_sharing(2.0, "group_7", "group_9_chunk"))
    assert [name for name, _, _ in a] == ["group_1_chunk", "group_1"]      # callees first
    assert [name for name, _, _ in b] == ["group_9_chunk", "group_7"]
    assert [(m, text) for _, m, text in a] == [(m, text) for _, m, text in b]
    chunk, group = a[0][2], a[1][2]
    assert "def loop(ch, nch, n0, va, vb):" in chunk and "import math" in chunk
    assert "import numpy" not in chunk and "_TABLE" not in chunk       # only the imports it reads
    assert f"from {a[0][1]} import loop as loop_0" in group
    assert "_rt.parallel_chunks(loop_0, 2, n0, va, vb)" in group
    # the entry, and a function reading a module-level table, stay in the kernel's module
    assert {name for name, _, _ in a}.isdisjoint({"kernel", "reads_table"})


SELF_LAUNCHING = """
import numpy as np
from jitgraph.codegen import runtime as _rt

_OPTS = dict(error_model='numpy', boundscheck=False, no_cfunc_wrapper=True)


# {name}
@_rt.group_njit(**_OPTS)
def {name}(ch, nch, n0, va, vb):
    if ch < 0:
        nch = 2
        _rt.parallel_self({name}, nch, n0, va, vb)
        return
    for i in range(ch * n0 // nch, (ch + 1) * n0 // nch):
        vb[i] = np.exp(va[i])  # b = exp a


def kernel(dims, va, vb):
    {name}(-1, 0, dims[0], va, vb)
    return (vb,)
"""


def test_a_group_launching_itself_is_shared_under_the_shared_name(tmp_path, monkeypatch):
    a = build.shared_loops(SELF_LAUNCHING.format(name="group_3"))
    b = build.shared_loops(SELF_LAUNCHING.format(name="group_8"))
    assert [name for name, _, _ in a] == ["group_3"] and [name for name, _, _ in b] == ["group_8"]
    assert a[0][1:] == b[0][1:]
    text = a[0][2]
    assert "def loop(ch, nch, n0, va, vb):" in text and "_rt.parallel_self(loop, nch, n0, va, vb)" in text
    assert "import loop" not in text and "group_3" not in text
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path / "c"))
    x = np.linspace(-1.0, 1.0, 11)
    for src in (SELF_LAUNCHING.format(name="group_3"), SELF_LAUNCHING.format(name="group_8")):
        kernel, modname, _ = build.load_kernel(src)
        (out,) = kernel(np.array([11]), x, np.zeros(11))
        np.testing.assert_allclose(out, np.exp(x), rtol=1e-15)
    assert kernel.__globals__["group_8"].py_func.__module__ == a[0][1]      # one shared function


def test_two_kernels_share_one_compiled_loop(tmp_path, monkeypatch):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path / "c"))
    tag = uuid.uuid4().int % 10 ** 6      # modules of their own, whatever ran before in this process
    ka, mod_a, _ = build.load_kernel(_sharing(1.0, "group_1", f"group_{tag}_chunk"))
    kb, mod_b, _ = build.load_kernel(_sharing(2.0, "group_4", f"group_{tag + 1}_chunk"))
    assert mod_a != mod_b
    x = np.linspace(-1, 1, 9)
    (ya,) = ka(np.array([9]), x, np.empty(9))
    (yb,) = kb(np.array([9]), x, np.empty(9))
    np.testing.assert_allclose(ya[1:], np.exp(x[1:]), rtol=1e-15)
    assert ya[0] == np.exp(x[0]) + 1.0 and yb[0] == np.exp(x[0]) + 2.0
    ga, gb = sys.modules[mod_a].group_1, sys.modules[mod_b].group_4
    assert ga is gb and len(ga.overloads) == 1          # compiled once, for both kernels
    assert ga.py_func.__module__.startswith(build.SHARED_PREFIX)
    assert sys.modules[mod_a].reads_table is not sys.modules[mod_b].reads_table


def test_a_damaged_list_of_shared_modules_is_found_again(tmp_path, monkeypatch):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path / "c"))
    tag = uuid.uuid4().int % 10 ** 6
    src = _sharing(3.0, "group_2", f"group_{tag}_chunk")
    kernel, modname, path = build.load_kernel(src)
    x = np.linspace(0, 1, 5)
    expected = kernel(np.array([5]), x, np.empty(5))[0].copy()
    listed = os.path.join(os.path.dirname(path), "__pycache__", modname + ".shared")
    assert os.path.isfile(listed)
    for name in [modname] + [m for _, m, _ in build.shared_loops(src)]:     # as in a new process
        del sys.modules[name]
    with open(listed, "r+b") as f:      # one byte changed: the checksum fails
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    with pytest.warns(build.CorruptCacheWarning, match="shared loop modules"):
        kernel2, _, _ = build.load_cached_kernel(modname)
    np.testing.assert_array_equal(kernel2(np.array([5]), x, np.empty(5))[0], expected)
    assert sys.modules[modname].group_2.py_func.__module__.startswith(build.SHARED_PREFIX)
