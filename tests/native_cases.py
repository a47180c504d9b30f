"""Loop functions in the language codegen/native.py translates, each decorated twice: compiled
natively (`nat_*`) and by Numba (`nb_*`), for tests/test_native.py to compare. (In a module
of their own: the decorator reads a function's source from its file.)"""
import math  # noqa: F401  (the generated language's names)

import numpy as np
from numba import njit

from jitgraph.codegen import mathlib as _ml  # noqa: F401
from jitgraph.codegen import runtime as _rt
from jitgraph.codegen.mathlib import exp as _exp, expm1 as _expm1, tanh as _tanh  # noqa: F401
from jitgraph.codegen.mathlib import maximum as _max, minimum as _min  # noqa: F401

_OPTS = dict(error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'}, boundscheck=False, no_cfunc_wrapper=True)
_EXACT_OPTS = dict(error_model='numpy', fastmath=False, boundscheck=False, no_cfunc_wrapper=True)


def binops(n0, va, vb, vo):
    for i in range(n0):
        vo[0, i] = va[i] + vb[i]
        vo[1, i] = va[i] - vb[i]
        vo[2, i] = va[i] * vb[i]
        vo[3, i] = va[i] / vb[i]
        vo[4, i] = va[i] if va[i] < vb[i] else vb[i]
        vo[5, i] = _max(va[i], vb[i])
        vo[6, i] = _min(va[i], vb[i])
        vo[7, i] = va[i] == vb[i]
        vo[8, i] = va[i] != vb[i]
        vo[9, i] = va[i] >= vb[i]


def integers(n0, va, vb, vo):
    for i in range(n0):
        vo[0, i] = va[i] // vb[i] if vb[i] != 0 else 0
        vo[1, i] = va[i] % vb[i] if vb[i] != 0 else 0
        vo[2, i] = abs(va[i]) + -vb[i]
        vo[3, i] = np.int64(va[i] < 0) * 3
        vo[4, i] = va[i] * vb[i] - 7
        vo[5, i] = (va[i] > 0) & (vb[i] > 0) | (not va[i] == vb[i])
        vo[6, i] = va[-1 - i]
        vo[7, i] = 0 <= va[i] < 5 or (vb[i] != 0 and va[i] // vb[i] > 1)
    for i in range(n0 - 1, -1, -2):
        vo[8, i] = i


def math_functions(n0, va, vo):
    for i in range(n0):
        x = va[i]
        vo[0, i] = _exp(x)
        vo[1, i] = _expm1(x)
        vo[2, i] = _tanh(x)
        vo[3, i] = _ml.log(abs(x) + 0.5)
        vo[4, i] = _ml.log1p(abs(x))
        vo[5, i] = _ml.sin(x) + _ml.cos(x)
        vo[6, i] = np.sqrt(abs(x)) + np.floor(x) + np.ceil(x) + np.trunc(x) + np.rint(x)
        vo[7, i] = np.sinh(x) + np.arctan(x) + np.log(abs(x) + 1.0) + np.exp2(x)
        vo[8, i] = np.copysign(1.5, x) + np.fmod(x, 0.75) + np.arctan2(x, 0.3)
        vo[9, i] = np.float64(np.isnan(x)) + np.float64(np.isinf(x)) + np.inf * 0.0 if x > 100.0 else -x
        vo[10, i] = x ** 1.5 if x > 0.0 else np.float32(x) * np.float32(0.5)


def reductions(n0, n1, va, vs, vm):
    for i0 in range(n0):
        acc = 0.0
        top = -np.inf
        for i1 in range(n1):
            acc = acc + va[i0, i1]
            top = _max(top, va[i0, i1])
        vs[i0] = acc
        vm[i0] = top


def views_and_fills(n0, n1, va, vo, vz):
    va_f = _rt.c_view(va, (n0 * n1,))
    vo_f = _rt.c_view(vo, (n0 * n1,))
    for i in range(n0 * n1):
        vo_f[i] = va_f[i] * 2.0
    vz[...] = 0.25


def strided(n0, n1, va, vo):
    for i0 in range(n0):
        for i1 in range(n1):
            vo[i1, i0] = va[i0, i1] + va.shape[1]


def float32_sums(n0, va, vo):
    acc = np.float32(0.0)
    for i in range(n0):
        acc = acc + va[i] * np.float32(0.1)
    vo[0] = acc


def parallel_group(ch, nch, n0, va, vo, vs_part, vs):
    if ch < 0:
        nch = _max(1, _min(_min(16, n0 // 1024), n0))
        _rt.parallel_self(parallel_group, nch, n0, va, vo, vs_part, vs)
        _rt.combine_parts(_rt.c_view(vs_part, (16, 1)), nch, vs, 0)
        return
    lo = ch * n0 // nch
    hi = (ch + 1) * n0 // nch
    acc = 0.0
    for i in range(lo, hi):
        x = _tanh(va[i]) * 1.5
        vo[i] = x
        acc = acc + x
    vs_part[ch] = acc


def scalars(n0, flag, scale, va):
    for i in range(n0):
        va[i] = va[i] * scale if flag else -va[i]


def calls_unknown(n0, va):
    for i in range(n0):
        va[i] = len(va)


def mixed_types(n0, va):
    x = 0
    for i in range(n0):
        x = va[i]
    va[0] = x


def _pair(fn, native_options, numba_decorator):
    return _rt.native_njit(**native_options)(fn), numba_decorator(fn)


nat_binops, nb_binops = _pair(binops, dict(noalias=False, **_OPTS), njit(**_OPTS))
nat_integers, nb_integers = _pair(integers, dict(noalias=False, **_OPTS), njit(**_OPTS))
nat_math, nb_math = _pair(math_functions, dict(noalias=False, **_OPTS), njit(**_OPTS))
nat_math_exact, nb_math_exact = _pair(math_functions, dict(noalias=False, **_EXACT_OPTS), njit(**_EXACT_OPTS))
nat_reductions, nb_reductions = _pair(reductions, _OPTS, _rt.loop_njit(**_OPTS))
nat_views, nb_views = _pair(views_and_fills, _OPTS, _rt.loop_njit(**_OPTS))
nat_strided, nb_strided = _pair(strided, dict(noalias=False, **_OPTS), njit(**_OPTS))
nat_f32, nb_f32 = _pair(float32_sums, dict(noalias=False, **_OPTS), njit(**_OPTS))
# the group launches its chunks on the function its own name refers to: Numba's here
parallel_group = _rt.group_njit(**_OPTS)(parallel_group)
nb_parallel = parallel_group
nat_parallel = _rt.native_njit(parallel=True, **_OPTS)(parallel_group.py_func)
nat_scalars, nb_scalars = _pair(scalars, dict(noalias=False, **_OPTS), njit(**_OPTS))
nat_unknown = _rt.native_njit(noalias=False, **_OPTS)(calls_unknown)
nat_mixed = _rt.native_njit(noalias=False, **_OPTS)(mixed_types)
