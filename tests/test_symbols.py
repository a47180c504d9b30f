"""Calls between compiled functions through process-wide symbols (codegen/symbols.py)."""
import json
import os
import subprocess
import sys

import numba
import numpy as np
import pytest

from jitgraph.codegen import symbols
from jitgraph.codegen.launch import chunk_njit, parallel_chunks


@numba.njit
def _double_into(x, out):
    for i in range(x.shape[0]):
        if x[i] < 0:
            raise ValueError("negative input")
        out[i] = 2.0 * x[i]
    return out


@numba.njit
def _outer(x, out):
    y = symbols.call(_double_into, x, out)
    return y.sum()


_DOUBLE = symbols.by_symbol(_double_into)


@numba.njit
def _outer_by_wrapper(x, out):
    return _DOUBLE(x, out)[0] + 1.0


def _library(dispatcher):
    return next(iter(dispatcher.overloads.values())).library


def test_a_call_by_symbol_runs_the_callee_without_linking_its_code():
    x, out = np.arange(4.0), np.empty(4)
    assert _outer(x, out) == 12.0 and out.tolist() == [0.0, 2.0, 4.0, 6.0]
    ir = _library(_outer).get_llvm_str()
    defined = [line for line in ir.splitlines() if line.startswith("define")]
    assert not any("_double_into" in line for line in defined)       # not linked in
    needs = symbols.required(_library(_outer))
    assert len(needs) == 1
    name, module, qualname, argtypes = needs[0]
    assert name.startswith(symbols.PREFIX) and "declare" in ir and name in ir
    assert (module, qualname) == (__name__, "_double_into")
    assert argtypes == (numba.typeof(x), numba.typeof(out))
    assert name == symbols.symbol(_double_into, argtypes, numba.typeof(out))
    symbols.ensure(needs)       # loaded already: nothing to do


def test_an_exception_in_the_callee_reaches_the_caller():
    with pytest.raises(ValueError, match="negative input"):
        _outer(np.array([1.0, -1.0]), np.empty(2))


def test_a_wrapped_function_is_called_by_symbol_from_compiled_code_and_directly_from_python():
    x = np.array([3.0, 4.0])
    assert _DOUBLE(x, np.empty(2)).tolist() == [6.0, 8.0]          # Python: the dispatcher
    assert _outer_by_wrapper(x, np.empty(2)) == 7.0
    assert _DOUBLE.py_func is _double_into.py_func
    assert not any("_double_into" in line for line in _library(_outer_by_wrapper).get_llvm_str().splitlines()
                   if line.startswith("define"))


def test_a_requirement_that_cannot_be_met_is_an_error_not_a_crash():
    argtypes = (numba.typeof(np.zeros(2)), numba.typeof(np.zeros(2)))
    with pytest.raises(symbols.SymbolError, match="not available"):
        symbols.ensure([(symbols.PREFIX + "0" * 32, "no_such_module_for_jitgraph", "f", argtypes)])
    with pytest.raises(symbols.SymbolError, match="no longer returns"):     # the recorded name differs
        symbols.ensure([(symbols.PREFIX + "1" * 32, __name__, "_double_into", argtypes)])


@chunk_njit()
def _ramp_loop(n, out):
    for i in range(n):
        out[i] = i


@chunk_njit()
def _twice_chunk(ch, nch, x, out):
    for i in range(ch * x.shape[0] // nch, (ch + 1) * x.shape[0] // nch):
        out[i] = 2.0 * x[i]


@numba.njit
def _kernel_of_loops(x, out, out2):
    symbols.call(_ramp_loop, x.shape[0], out)
    parallel_chunks(_twice_chunk, 2, x, out2)
    return out.sum() + out2.sum()


def test_loop_functions_are_found_by_typing_alone_and_compiled_where_their_calls_are_lowered():
    x, out, out2 = np.arange(5.0), np.empty(5), np.empty(5)
    argtypes = tuple(numba.typeof(a) for a in (x, out, out2))
    found = symbols.loop_functions(_kernel_of_loops, argtypes)
    i64 = numba.types.int64
    assert found == [(_ramp_loop, (i64, argtypes[1])), (_twice_chunk, (i64, i64, argtypes[0], argtypes[2]))]
    # typing the kernel compiled nothing: a second process can compile these meanwhile
    assert not _ramp_loop.overloads and not _twice_chunk.overloads and not _kernel_of_loops.overloads
    assert _kernel_of_loops(x, out, out2) == 10.0 + 20.0
    assert _ramp_loop.overloads and _twice_chunk.overloads
    assert symbols.loop_functions(_kernel_of_loops, argtypes) == []      # compiled: nothing to type


CALLEE = """
import numba
@numba.njit
def scale(x):
    return {body}
"""

CALLER = """
import numba
from jitgraph.codegen import symbols
from jitgraph.codegen.launch import chunk_njit, parallel_chunks
from callee import scale
@numba.njit
def total(x):
    return symbols.call(scale, x) + 1
"""

RUNNER = """
import json, sys, warnings
sys.path.insert(0, sys.argv[1])
import numpy as np
from jitgraph.codegen import numba_cache
import callee, caller
numba_cache.enable([callee.scale, caller.total], sys.argv[2])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    value = caller.total(np.array([1.5, 2.0]))
print(json.dumps(dict(value=float(value), type=type(value).__name__, hits=caller.total.stats.cache_hits[
    next(iter(caller.total.overloads))] if caller.total.overloads else 0,
    warnings=[str(w.message) for w in caught])))
"""


def test_a_cached_caller_loads_its_callee_in_a_new_process_and_recompiles_when_it_changed(tmp_path):
    mods, cache = tmp_path / "mods", tmp_path / "cache"
    mods.mkdir()
    (mods / "caller.py").write_text(CALLER)
    (tmp_path / "runner.py").write_text(RUNNER)

    def run(body):
        (mods / "callee.py").write_text(CALLEE.format(body=body))
        r = subprocess.run([sys.executable, "-B", str(tmp_path / "runner.py"), str(mods), str(cache)],
                           capture_output=True, text=True, timeout=300,
                           env={k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_JIT"})
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    cold = run("x[0] * 2.0")
    assert cold["value"] == 4.0 and cold["hits"] == 0
    warm = run("x[0] * 2.0")        # the caller's code from the cache, its callee loaded first
    assert warm["value"] == 4.0 and warm["hits"] == 1 and not warm["warnings"]
    same_types = run("x[1] * 3.0")  # the callee changed, its signature did not: the new code runs
    assert same_types["value"] == 7.0 and same_types["hits"] == 1
    # the callee now returns an integer: the cached caller's symbol no longer exists, so the
    # caller is compiled again, quietly (never loaded with a call LLVM cannot resolve)
    changed = run("int(x[0] * 2.0)")
    assert changed["value"] == 4.0 and changed["type"] == "int" and changed["hits"] == 0
    assert not changed["warnings"]
    again = run("int(x[0] * 2.0)")  # and saved again
    assert again["value"] == 4.0 and again["hits"] == 1
