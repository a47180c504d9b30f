"""The program index (codegen/index.py): a graph built before is loaded, not generated."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import jitgraph as jg
from jitgraph import lowering
from jitgraph.api import trace_graph
from jitgraph.codegen import build, index
from jitgraph.codegen.program import IndexedProgram
from jitgraph.graph import Graph, Node

RNG = np.random.default_rng(11)
W = RNG.standard_normal((5, 4))
X = RNG.standard_normal((7, 5))
TABLE = RNG.standard_normal(4)


def loss(w, x):
    h = np.tanh(x @ w) * TABLE
    return np.sum(h ** 2) + 0.25 * np.sum(w[1:3] ** 2)


def _scanned(w, x, table):
    def body(c, row):
        c = np.tanh(row @ w + c * table)
        return c, np.sum(c)
    c, ys = jg.scan(body, np.zeros(w.shape[1]), x)
    return np.sum(ys) + np.sum(c ** 2)


def _graph(fun, *args):
    return trace_graph(fun, [lowering._abstract(a) for a in args], (0,), False, True)


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_fingerprint_is_the_content_of_the_graph():
    a, b = _graph(loss, W, X), _graph(loss, W, X)
    assert a is not b and index.key(a) == index.key(b) is not None
    assert index.key(a, parallel=True) != index.key(a, parallel=False)
    assert index.key(_graph(loss, W, X[:6])) != index.key(a)           # a shape
    assert index.key(_graph(lambda w, x: loss(w, x) * 2.0, W, X)) != index.key(a)    # a scalar

    def other_table(w, x):
        h = np.tanh(x @ w) * (TABLE + 1e-9)
        return np.sum(h ** 2) + 0.25 * np.sum(w[1:3] ** 2)
    assert index.key(_graph(other_table, W, X)) != index.key(a)       # an array constant's bytes

    def other_slice(w, x):
        h = np.tanh(x @ w) * TABLE
        return np.sum(h ** 2) + 0.25 * np.sum(w[1:4] ** 2)
    assert index.key(_graph(other_slice, W, X)) != index.key(a)       # a parameter


def test_the_code_generators_settings_are_in_the_key(monkeypatch):
    from jitgraph.codegen import emit_cpu
    g = _graph(loss, W, X)
    before = index.key(g)
    monkeypatch.setattr(emit_cpu, "NJIT_ENTRY_MAX_STEPS", 1)      # a Python entry instead
    assert index.key(g) != before
    monkeypatch.undo()
    assert index.key(g) == before


def test_constants_inside_a_loop_body_are_in_the_fingerprint():
    x = RNG.standard_normal((6, 5))
    base = index.key(_graph(lambda w: _scanned(w, x, TABLE), W))
    assert base is not None
    assert index.key(_graph(lambda w: _scanned(w, x, TABLE), W)) == base
    assert index.key(_graph(lambda w: _scanned(w, x, TABLE * 1.5), W)) != base


def test_a_parameter_of_unknown_type_is_never_indexed():
    x = Node("input", (), {"index": 0}, (3,), np.float64)
    opaque = Node("neg", (x,), {"hook": object()}, (3,), np.float64)
    assert index.key(Graph([x], [opaque])) is None
    assert index.key(Graph([x], [Node("neg", (x,), {}, (3,), np.float64)])) is not None


def test_a_second_build_of_the_same_graph_loads_the_indexed_program(cache):
    first = jg.jit_grad(loss)
    want = first(W, X)
    low1 = first.lower(W, X)
    assert not isinstance(low1.program, IndexedProgram)
    second = jg.jit_grad(loss)            # a new function object: it traces and builds again
    got = second(W, X)
    low2 = second.lower(W, X)
    assert isinstance(low2.program, IndexedProgram)
    assert low2.native == "reused" and second.cache_info().compiles == 0
    assert got[0] == want[0] and np.array_equal(got[1], want[1])
    # what inspection reads is made again on demand, the same as the first build's
    assert low2.source == low1.source and low2.path == low1.path
    assert low2.describe() == low1.describe()
    assert len(low2.groups) == len(low1.groups)
    assert low2.memory.peak_bytes == low1.memory.peak_bytes


def _forget_kernel_modules(monkeypatch):
    """Drop the kernel modules imported so far (restored after the test): a module already
    imported holds its compiled code in memory, whatever the cache directory holds."""
    for name in list(sys.modules):
        if name.startswith("jg_"):
            monkeypatch.delitem(sys.modules, name)


def test_a_missing_module_or_a_damaged_record_is_a_miss(cache, monkeypatch):
    _forget_kernel_modules(monkeypatch)
    jg.jit_grad(loss)(W, X)
    (record,) = (cache / "kernels" / "index").iterdir()
    low = jg.jit_grad(loss).lower(W, X)
    assert isinstance(low.program, IndexedProgram)
    raw = bytearray(record.read_bytes())
    raw[-3] ^= 1                       # one flipped bit: the checksum catches it
    record.write_bytes(bytes(raw))
    f = jg.jit_grad(loss)
    with pytest.warns(build.CorruptCacheWarning, match="index record"):
        v, g = f(W, X)
    assert not record.exists() or record.read_bytes() != bytes(raw)
    assert not isinstance(f.lower(W, X).program, IndexedProgram)       # generated again
    want = jg.value_and_grad(loss)(W, X)
    assert abs(v - want[0]) <= 1e-12 * abs(want[0])
    # the record was written again; now its module's file goes: a miss, generated again
    assert isinstance(jg.jit_grad(loss).lower(W, X).program, IndexedProgram)
    rec = index.load(record.stem)
    path = cache / "kernels" / (rec["module"] + ".py")
    os.unlink(path)
    sys.modules.pop(rec["module"], None)
    f = jg.jit_grad(loss)
    np.testing.assert_allclose(f(W, X)[1], want[1], rtol=1e-12)
    assert not isinstance(f.lower(W, X).program, IndexedProgram) and path.exists()


SCRIPT = """
import json, sys, time
import numpy as np
import jitgraph as jg
sys.path.insert(0, sys.argv[1])
from test_index import loss, W, X
f = jg.jit_grad(loss)
t0 = time.perf_counter()
v, g = f(W, X)
first = time.perf_counter() - t0
ready = f.ready()
# a load from the disk cache skips Numba's registry refresh (which imports its implementations)
unrefreshed = "numba.np.npyimpl" not in sys.modules
want = jg.value_and_grad(loss)(W, X)
f.wait()
low = f.lower(W, X)
info = f.cache_info()._asdict()
# ... and a compile after it in the same process still works (it refreshes for itself)
v2, g2 = jg.jit_grad(loss, wait=True)(W, X[:3])
want2 = jg.value_and_grad(loss)(W, X[:3])
print(json.dumps(dict(ready=ready, native=low.native, indexed=type(low.program).__name__,
                      ok=bool(abs(v - want[0]) <= 1e-12 * abs(want[0])
                              and np.allclose(g, want[1], rtol=1e-12)),
                      ok2=bool(np.allclose(v2, want2[0], rtol=1e-12) and np.allclose(g2, want2[1], rtol=1e-12)),
                      unrefreshed=unrefreshed, **info)))
"""


def test_a_new_process_starts_compiled_when_the_disk_cache_holds_the_program(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, JITGRAPH_CACHE_DIR=str(tmp_path / "cache"), JITGRAPH_WAIT="0")
    env.pop("NUMBA_CACHE_DIR", None)

    def run():
        r = subprocess.run([sys.executable, str(script), os.path.dirname(__file__)],
                           capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    cold = run()            # tiered: the first call runs on the interpreter
    assert cold["ok"] and cold["interpreted_calls"] == 1 and cold["compiles"] == 1
    assert cold["indexed"] == "Program"
    warm = run()            # the first call runs the kernel loaded from the disk cache
    assert warm["ok"] and warm["ready"] and warm["interpreted_calls"] == 0
    assert warm["native"] == "disk" and warm["disk_hits"] == 1 and warm["compiles"] == 0
    assert warm["indexed"] == "IndexedProgram" and warm["unrefreshed"] and warm["ok2"]
    # the kernel module's code object is cached beside Numba's files (checked, like them)
    assert list((tmp_path / "cache" / "kernels" / "__pycache__").glob("jg_*.code"))


def test_tiered_functions_whose_program_is_not_compiled_yet_still_interpret(tmp_path, monkeypatch):
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    _forget_kernel_modules(monkeypatch)
    jg.jit_grad(loss)(W, X)
    # the index and the module are there, Numba's compiled code is not
    pycache = tmp_path / "kernels" / "__pycache__"
    for p in pycache.iterdir():
        p.unlink()
    f = jg.jit_grad(loss, wait=False)
    _forget_kernel_modules(monkeypatch)
    f(W, X)
    assert f.cache_info().interpreted_calls == 1
    assert f.wait(timeout=600)
    f(W, X)
    assert f.cache_info().interpreted_calls == 1 and f.cache_info().compiles == 1


def test_records_are_read_only_from_a_private_directory(cache, monkeypatch):
    _forget_kernel_modules(monkeypatch)
    jg.jit_grad(loss)(W, X)
    d = cache / "kernels" / "index"
    os.chmod(d, 0o777)
    monkeypatch.setattr(build, "_CHECKED_DIRS", set())
    try:
        with pytest.raises(build.CacheDirError, match="writable by other users"):
            jg.jit_grad(loss, wait=True)(W, X)
    finally:
        os.chmod(d, 0o700)


def test_a_damaged_compiled_module_is_compiled_again(cache, monkeypatch):
    _forget_kernel_modules(monkeypatch)
    want = jg.jit_grad(loss)(W, X)
    (code,) = (cache / "kernels" / "__pycache__").glob("jg_*.code")
    raw = bytearray(code.read_bytes())
    raw[-5] ^= 1
    code.write_bytes(bytes(raw))
    _forget_kernel_modules(monkeypatch)
    with pytest.warns(build.CorruptCacheWarning, match="compiled kernel module"):
        got = jg.jit_grad(loss)(W, X)
    assert got[0] == want[0] and np.array_equal(got[1], want[1])
    assert code.read_bytes() != bytes(raw)           # written again, whole
