"""Tiered execution: first calls on the interpreter while the kernel compiles (jitgraph/tiered.py)."""
import os
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import jitgraph as jg
from jitgraph import lowering, tiered
from jitgraph.codegen import compile_server, native
from threads import launches_chunks

RNG = np.random.default_rng(5)
W = RNG.standard_normal((6, 4))
X = RNG.standard_normal((8, 6))


def loss(w, x):
    h = np.tanh(x @ w)
    return np.sum(h ** 2) + np.max(h)


@pytest.fixture
def cold_cache(monkeypatch, tmp_path):
    """A cache directory of the test's own: its kernels compile, whatever ran before."""
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_first_calls_interpret_then_switch_to_the_kernel(cold_cache):
    f = jg.jit_grad(loss, wait=False)
    want = jg.value_and_grad(loss)(W, X)
    v, g = f(W, X)                        # returns before the compile: the interpreter
    assert abs(v - want[0]) <= 1e-12 * abs(want[0])
    np.testing.assert_allclose(g, want[1], rtol=1e-12)
    assert f.wait(timeout=600)
    assert f.ready() and f.ready(W, X)
    v2, g2 = f(W, X)
    assert abs(v2 - v) <= 1e-12 * abs(v)
    np.testing.assert_allclose(g2, g, rtol=1e-12, atol=1e-15)
    info = f.cache_info()
    assert info.traces == 1 and info.compiles == 1 and info.interpreted_calls >= 1
    assert f.lower(W, X).native == "compiled"
    f(W, X)
    assert f.cache_info().interpreted_calls == info.interpreted_calls    # the kernel serves now


def test_wait_blocks_and_the_environment_chooses_the_default(monkeypatch):
    f = jg.jit_grad(loss, wait=True)
    f(W, X)
    assert f.ready() and f.cache_info().interpreted_calls == 0
    monkeypatch.setenv("JITGRAPH_WAIT", "0")
    assert jg.jit(loss).wait_compile is False
    monkeypatch.setenv("JITGRAPH_WAIT", "1")
    assert jg.jit(loss).wait_compile is True


def test_a_failed_compile_warns_once_and_the_interpreter_keeps_serving(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("the compiler broke")
    monkeypatch.setattr(sys.modules["jitgraph.jit"], "build", broken)
    f = jg.jit(lambda x: np.sin(x) * 2.0, wait=False)
    x = np.linspace(0.0, 1.0, 5)
    np.testing.assert_allclose(f(x), np.sin(x) * 2.0)
    with pytest.raises(RuntimeError, match="the compiler broke"):
        f.wait(timeout=60)
    with pytest.warns(tiered.CompileWarning, match="the compiler broke"):
        np.testing.assert_allclose(f(x), np.sin(x) * 2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # once only
        f(x)


def test_rebinding_a_global_retraces_on_the_interpreter_too():
    f = jg.jit(_scaled, wait=False)
    assert f(np.ones(2))[0] == 2.0
    global SCALE
    SCALE = 3.0
    try:
        assert f(np.ones(2))[0] == 3.0
        assert f.cache_info().traces == 2
        f.wait(timeout=600)
    finally:
        SCALE = 2.0


SCALE = 2.0


def _scaled(x):
    return x * SCALE


def test_fork_and_exit_while_compiling(tmp_path):
    code = textwrap.dedent("""
        import os, sys, numpy as np, jitgraph as jg
        f = jg.jit(lambda x: np.tanh(x) @ x.T, wait=False)
        x = np.ones((3, 3))
        f(x)
        pid = os.fork()
        if pid == 0:
            ok = np.allclose(f(x), np.tanh(x) @ x.T) and f.wait(timeout=600)
            os._exit(0 if ok and f.ready() else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        g = jg.jit(lambda x: np.cos(x) * 3.0, wait=False)
        print(g(x).sum())
        # exit while g may still be compiling: the daemon thread is abandoned
    """)
    env = dict(os.environ, JITGRAPH_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    assert float(r.stdout) == pytest.approx(9 * np.cos(1.0) * 3.0)


def _big_loss(w):
    # 80,000 points: above PARALLEL_MIN, so its loops run in parallel chunks
    return np.sum(np.tanh(w) ** 2) + np.sum(np.exp(-w * w))


W_BIG = np.random.default_rng(6).standard_normal((400, 200))


def test_serial_first_builds_serially_first_then_threaded(monkeypatch):
    monkeypatch.setenv("JITGRAPH_SERIAL_FIRST", "1")
    f = jg.jit_grad(_big_loss, wait=False)
    want = jg.value_and_grad(_big_loss)(W_BIG)
    seen = set()
    for _ in range(100000):
        v, g = f(W_BIG)
        assert abs(v - want[0]) <= 1e-12 * abs(want[0])
        np.testing.assert_allclose(g, want[1], rtol=1e-12, atol=1e-15)
        entry = next(iter(f._entries.values()))
        if hasattr(entry, "lowered") and not hasattr(entry, "ready"):
            seen.add(entry.lowered.program.threads)
            if entry.lowered.program.threads:
                break
    assert seen == {False, True} or f.ready()      # a serial build served, then the threaded one
    assert f.wait(timeout=600) and f.ready()
    assert f.lower(W_BIG).program.threads and launches_chunks(f.lower(W_BIG).source)
    assert f.cache_info().traces == 1


def test_wait_true_compiles_the_threaded_build_whose_bits_do_not_depend_on_threads(monkeypatch):
    f = jg.jit_grad(_big_loss, wait=True)
    v0, g0 = f(W_BIG)
    assert f.cache_info().interpreted_calls == 0 and f.ready()
    low = f.lower(W_BIG)
    assert low.program.threads and launches_chunks(low.source) and not low.program.upgradable
    monkeypatch.setenv("JITGRAPH_THREADS", "one")
    h = jg.jit_grad(_big_loss, wait=True)
    v1, g1 = h(W_BIG)
    assert h.ready() and h.lower(W_BIG).source == low.source
    assert v1 == v0 and np.array_equal(g1, g0)        # the same chunks: the same bits


def test_tiered_calls_build_the_threaded_build_only(monkeypatch):
    monkeypatch.delenv("JITGRAPH_SERIAL_FIRST", raising=False)
    g = jg.jit_grad(lambda w: _big_loss(w) * 2.0, wait=False)
    g(W_BIG)
    assert g.wait(timeout=600)
    g(W_BIG)
    entry = next(iter(g._entries.values()))
    assert not hasattr(entry, "ready") and entry.lowered.program.threads    # compiled, threaded
    assert not g._upgrades and g.cache_info().compiles == 1                 # no serial build first
    h = jg.jit_grad(lambda w: _big_loss(w) * 3.0, wait=True)
    h(W_BIG)
    assert h.ready() and h.lower(W_BIG).program.threads


def _record_answers(monkeypatch, name):
    """The answers compile_server.<name> gives from now on (a list that grows)."""
    answers, real = [], getattr(compile_server, name)

    def spy(*args, **kwargs):
        answers.append(real(*args, **kwargs))
        return answers[-1]
    monkeypatch.setattr(compile_server, name, spy)
    return answers


def _started_server():
    """The first compile server, started and done starting (a caller that waits compiles in
    its own process while the server starts: lowering._compile_in_server)."""
    server = compile_server.start()
    deadline = time.monotonic() + 300
    while not compile_server.ready() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert compile_server.ready()
    return server


def test_kernels_compile_in_the_compile_server(monkeypatch, cold_cache):
    monkeypatch.setattr(native, "ENABLED", False)     # a compiled entry: Numba compiles it
    _started_server()
    calls = _record_answers(monkeypatch, "compile_remote")
    f = jg.jit(lambda x: np.cosh(x) * 3.0 - x, wait=True)
    x = np.linspace(0.0, 1.0, 7)
    np.testing.assert_allclose(f(x), np.cosh(x) * 3.0 - x)
    assert calls == [True]
    assert f.lower(x).native == "compiled" and f.cache_info().compiles == 1


def test_a_waiting_caller_compiles_here_while_the_server_starts(monkeypatch, cold_cache):
    """wait=True while the server is still importing: the kernel compiles in this process, and
    the server (once started) compiles the loop functions of a kernel with many meanwhile."""
    monkeypatch.setattr(native, "ENABLED", False)     # a compiled entry: Numba compiles it
    monkeypatch.setattr(compile_server, "ready", lambda: False)
    monkeypatch.setattr(compile_server, "compile_remote", None)     # never called
    loops = []
    monkeypatch.setattr(compile_server, "loops_remote", lambda *a: loops.append(a))
    f = jg.jit(lambda x: np.cosh(x) * 2.0 + x, wait=True)
    x = np.linspace(0.0, 1.0, 7)
    np.testing.assert_allclose(f(x), np.cosh(x) * 2.0 + x)
    assert f.lower(x).native == "compiled" and loops == []
    g, (w, x) = _compiled_matches_eager(lambda w, x: 2.0 * _three_loops(w, x), 12, rows=1024, cols=64, scale=0.1)
    assert g.lower(w, x).source.count("@_rt.chunk_njit(") >= lowering.LOOPS_BESIDE_MIN
    (path, function, argtypes), = loops
    assert path == g.lower(w, x).path and function == "kernel" and len(argtypes) > 2


def test_the_compile_server_starts_for_what_numba_compiles(monkeypatch, cold_cache):
    """A program whose loops all compile natively never starts the compile server (whose
    imports took a core from the compile); one with control flow, whose entry Numba compiles,
    starts it as soon as it misses the cache."""
    started = []
    monkeypatch.setattr(compile_server, "start", lambda: started.append(True))
    x = np.linspace(0.0, 1.0, 50)
    plain = jg.jit_grad(lambda x: np.sum(np.tanh(x) ** 2), wait=True)
    np.testing.assert_allclose(plain(x)[1], 2 * np.tanh(x) / np.cosh(x) ** 2, rtol=1e-12)
    assert started == ([] if native.ENABLED else [True])
    started.clear()
    looped = jg.jit_grad(lambda x: np.sum(jg.fori_loop(0, 3, lambda i, v: v * np.sin(v) + i, x)), wait=True)
    looped(x)
    assert started


def test_a_servers_readiness_is_asked_without_waiting():
    server = compile_server._Server()
    try:
        t0 = time.perf_counter()
        server.ready()
        assert time.perf_counter() - t0 < 0.25         # its imports take about half a second
        deadline = time.monotonic() + 300
        while not server.ready() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.ready() and server.booted
        # a request after the boot message was read, and one on a server asked nothing before
        assert server.request(("/nonexistent", "compile", "/nonexistent.py", "kernel", (), None))[0] == "error"
    finally:
        server.close()
    fresh = compile_server._Server()
    try:
        assert fresh.request(("/nonexistent", "compile", "/nonexistent.py", "kernel", (), None))[0] == "error"
        assert fresh.booted
    finally:
        fresh.close()


def test_the_compile_server_starts_without_the_front_end():
    """The server's command line registers jitgraph and jitgraph.codegen without running their
    __init__ (the front end, SciPy's special functions), and loads SciPy's BLAS without the
    scipy.linalg package: a kernel's helper modules import, with BLAS symbols, and nothing else."""
    last = "compile_server.main()\n"
    assert compile_server._BOOT.endswith(last)
    probe = compile_server._BOOT[:-len(last)] + textwrap.dedent("""\
        from jitgraph.codegen import blas, mathlib, runtime
        heavy = ("jitgraph.api", "jitgraph.jit", "jitgraph.core", "scipy.special", "scipy.linalg")
        print(blas.MODE, [m for m in heavy if m in sys.modules])
        """)
    out = subprocess.run([sys.executable, "-c", probe] + compile_server._package_paths(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    mode, loaded = out.stdout.split(maxsplit=1)
    assert mode != "none" and loaded.strip() == "[]", out.stdout


def test_a_dead_compile_server_falls_back_to_compiling_here(monkeypatch, cold_cache):
    server = compile_server.start()
    server.proc.kill()
    server.proc.wait()
    monkeypatch.setattr(compile_server, "_servers", [server])     # dead, as if it had crashed
    monkeypatch.setattr(compile_server, "start", lambda: server)
    f = jg.jit(lambda x: np.sinh(x) * 5.0 + x, wait=True)
    x = np.linspace(0.0, 1.0, 9)
    np.testing.assert_allclose(f(x), np.sinh(x) * 5.0 + x)
    assert f.lower(x).native == "compiled" and f.cache_info().compiles == 1
    monkeypatch.setattr(compile_server, "_failures", 0)
    server.close()


def test_without_the_compile_server(monkeypatch, cold_cache):
    monkeypatch.setenv("JITGRAPH_COMPILE_SERVER", "0")
    monkeypatch.setattr(compile_server, "compile_remote", None)     # never called
    f = jg.jit(lambda x: np.arctan(x) * 4.0, wait=True)
    x = np.linspace(0.0, 1.0, 11)
    np.testing.assert_allclose(f(x), np.arctan(x) * 4.0)
    assert f.lower(x).native == "compiled"


def _deep(w, x):
    h = x
    for _ in range(30):          # 30 matmuls and 30 loops: a Python entry (over 48 steps)
        h = np.tanh(h @ w)
    return np.sum(h ** 2)


def _compiled_matches_eager(fun, seed, rows=4, cols=5, scale=0.3):
    """jit_grad(fun, wait=True) on random (w, x), checked against eager value_and_grad."""
    rng = np.random.default_rng(seed)
    w, x = rng.standard_normal((cols, cols)) * scale, rng.standard_normal((rows, cols))
    f = jg.jit_grad(fun, wait=True)
    v, g = f(w, x)
    want = jg.value_and_grad(fun)(w, x)
    assert v == pytest.approx(want[0], rel=1e-12)
    np.testing.assert_allclose(g, want[1], rtol=1e-10, atol=1e-14)
    return f, (w, x)


def test_a_python_entry_runs_in_the_compile_server(monkeypatch, cold_cache):
    monkeypatch.setenv("JITGRAPH_REROLL", "0")        # the loop's steps unrolled: a long program
    monkeypatch.setattr(native, "ENABLED", False)     # its functions compiled by Numba
    runs = _record_answers(monkeypatch, "run_remote")
    f, (w, x) = _compiled_matches_eager(_deep, 7)
    assert runs == [True]
    assert "calling the compiled" in f.lower(w, x).source and f.lower(w, x).native == "compiled"


_ACTS = (np.tanh, np.sin, np.cos, np.arctan, np.sinh)


def _mixed(w, x):
    h = x
    for k in range(30):          # a Python entry whose layers are 5 different loops
        h = _ACTS[k % 5](h @ w)
    return np.sum(h ** 2)


def test_a_python_entry_compiles_on_several_servers(monkeypatch, cold_cache):
    monkeypatch.setenv("JITGRAPH_REROLL", "0")        # the loop's steps unrolled: a long program
    monkeypatch.setattr(native, "ENABLED", False)     # its functions compiled by Numba
    monkeypatch.setenv("JITGRAPH_COMPILE_JOBS", "2")
    runs = []
    real = compile_server.run_remote

    def spy(path, function, args, parts=None):
        runs.append((parts, real(path, function, args, parts)))
        return runs[-1][1]
    monkeypatch.setattr(compile_server, "run_remote", spy)
    f, (w, x) = _compiled_matches_eager(_mixed, 9)
    (parts, ok), = runs
    assert ok and len(parts) == 2 and all(parts)
    names = [n for p in parts for n in p]
    assert len(names) == len(set(names))        # each function compiled by one server
    assert f.lower(w, x).native == "compiled" and compile_server.running() >= 2


def _three_loops(w, x):
    h = np.tanh(x @ w)                        # a kernel of one entry calling several loop functions
    return np.sum(np.exp(-h ** 2)) + np.sum(np.abs(x) * np.mean(h))


def test_a_kernels_loop_functions_compile_on_a_second_server_meanwhile(monkeypatch, cold_cache):
    monkeypatch.setattr(native, "ENABLED", False)     # a compiled entry: Numba compiles it
    monkeypatch.setenv("JITGRAPH_COMPILE_JOBS", "2")
    _started_server()
    jobs = []
    real = compile_server._ask

    def spy(job, server=None):
        answer = real(job, server)
        jobs.append((job[0], answer))
        return answer
    monkeypatch.setattr(compile_server, "_ask", spy)
    f, (w, x) = _compiled_matches_eager(_three_loops, 11, rows=1024, cols=64, scale=0.1)
    src = f.lower(w, x).source
    assert src.count("@_rt.chunk_njit(") >= lowering.LOOPS_BESIDE_MIN
    assert ("compile", True) in jobs and f.lower(w, x).native == "compiled"
    # the second server's answer arrives on its own thread, after the first's: in a cold cache
    # it compiles the runtime helpers the loops call too, seconds on a loaded machine
    deadline = time.monotonic() + 300
    while not any(kind == "loops" for kind, _ in jobs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ("loops", True) in jobs and compile_server.running() >= 2


def _function(name, params, lines, decorator="@njit"):
    head = f"{decorator}\n" if decorator else ""
    return head + f"def {name}({params}):\n" + "".join(f"    {line}\n" for line in lines) + "\n"


def _stores(n):
    return [f"a[{k}] = {k + 1}" for k in range(n)]


# group_1 and group_2 share a chunk function; group_3 is the longest; `unused` is not called;
# `_views` is plain Python (a Python entry's workspace views), which every server runs
_SPLIT_SOURCE = (_function("group_1_chunk", "ch, nch, a", _stores(6))
                 + _function("group_1", "a", ["_rt.parallel_chunks(group_1_chunk, 2, a)"])
                 + _function("group_2", "a", ["_rt.parallel_chunks(group_1_chunk, 2, a)"])
                 + _function("group_3", "a", _stores(9))
                 + _function("group_4", "a", _stores(1))
                 + _function("group_5", "a", _stores(1))
                 + _function("unused", "a", _stores(1))
                 + _function("_views", "a", ["return (a,) * 20"], decorator=None)
                 + _function("kernel", "a", ["V = _views(a)"] + [f"group_{k}(a)" for k in (1, 3, 2, 4, 5, 1)],
                             decorator=None))


def test_split_entry_deals_each_called_function_to_one_part():
    parts = compile_server.split_entry(_SPLIT_SOURCE, "kernel", 2, started=2)
    assert sorted(n for p in parts for n in p) == ["group_1", "group_2", "group_3", "group_4", "group_5"]
    # the two functions sharing a chunk function go together: the chunk compiles once
    assert any({"group_1", "group_2"} <= set(p) for p in parts)
    assert compile_server.split_entry(_SPLIT_SOURCE, "kernel", 3) is None     # too few to split
    assert compile_server.split_entry(_SPLIT_SOURCE, "kernel", 1) is None
    assert compile_server.split_entry(_SPLIT_SOURCE, "missing", 2) is None


def test_compile_jobs_setting(monkeypatch):
    monkeypatch.setenv("JITGRAPH_COMPILE_JOBS", "3")
    assert compile_server.jobs() == 3
    monkeypatch.setenv("JITGRAPH_COMPILE_JOBS", "many")
    with pytest.raises(ValueError, match="JITGRAPH_COMPILE_JOBS"):
        compile_server.jobs()
    monkeypatch.delenv("JITGRAPH_COMPILE_JOBS")
    assert 1 <= compile_server.jobs() <= 4


def test_run_part_restores_the_functions_it_skipped():
    import types
    mod = types.ModuleType("jg_test_part")
    seen = []
    mod.group_1 = lambda: seen.append(1)
    mod.group_2 = lambda: seen.append(2)
    exec("def kernel():\n    group_1()\n    group_2()\n", vars(mod))
    compile_server._run_part(mod, mod.kernel, (), ("group_2",))
    assert seen == [1]
    mod.kernel()
    assert seen == [1, 1, 2]


def test_the_compile_server_follows_the_cache_directory(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "ENABLED", False)     # a compiled entry: Numba compiles it
    _started_server()               # a server started (and done starting) under the old directory
    monkeypatch.setenv("JITGRAPH_CACHE_DIR", str(tmp_path))
    calls = _record_answers(monkeypatch, "compile_remote")
    f = jg.jit(lambda x: np.log1p(x) * 7.0, wait=True)
    x = np.linspace(0.0, 1.0, 13)
    np.testing.assert_allclose(f(x), np.log1p(x) * 7.0)
    assert calls == [True] and f.lower(x).native == "compiled"       # loaded from tmp_path
    assert list((tmp_path / "kernels").glob("jg_*.py"))


def test_the_compile_server_dies_with_its_parent(tmp_path):
    code = textwrap.dedent("""
        import os, signal, sys, time, numpy as np, jitgraph as jg
        from jitgraph.codegen import compile_server
        f = jg.jit(lambda x: np.tanh(x) @ x.T + np.cosh(x).sum(), wait=False)
        f(np.ones((3, 3)))                          # its compile goes to the server
        print(compile_server.start().proc.pid, flush=True)
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)        # mid-compile, no cleanup
    """)
    env = dict(os.environ, JITGRAPH_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    pid = int(r.stdout.split()[0])
    for _ in range(100):
        if not _running(pid):
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        raise AssertionError("the compile server outlived its parent by 10 s")


def _running(pid):
    """Is process `pid` alive (a zombie nobody reaped counts as dead)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
