"""Library routines that generated kernels call, compiled once per machine (Numba disk cache).

Kept out of the generated modules so that each new kernel links them instead of
compiling them again: Numba's `np.dot` and the gather/scatter loops cost a good
fraction of a second each to compile.
"""
import numpy as np
from numba import njit

from .build import enable_cache, helpers_cache_dir

_OPTS = dict(error_model="numpy", boundscheck=False)     # cached below, in jitgraph's cache dir


@njit(**_OPTS)
def matmul2d(a, b, out):
    """out = a @ b for 2-D arrays (C or F ordered: transposed views go to BLAS without a
    copy); `out` is C-ordered and shares no memory with a or b."""
    np.dot(a, b, out)
    return out


@njit(**_OPTS)
def slot(ws, offset, nbytes, shape, dtype):
    """The array of `shape` and `dtype` at byte `offset` of the workspace arena `ws` (a view).
    One compiled helper per dtype and rank: inline slicing and viewing in every kernel
    added about 0.1 s of compile per buffer."""
    return ws[offset:offset + nbytes].view(dtype).reshape(shape)


def slot_view(ws, offset, nbytes, shape, dtype):
    """`slot` for a Python caller (a Python entry): the same view, made by NumPy."""
    return ws[offset:offset + nbytes].view(dtype).reshape(shape)


@njit(**_OPTS)
def _copy_row(s, d):
    for j in range(s.shape[0]):
        d[j] = s[j]


@njit(**_OPTS)
def copy(src, dst):
    """dst[...] = src for arrays of one shape (any layouts); returns dst. A loop over the last
    axis per leading index: contiguous rows copy at np.copyto's speed (an element loop over
    np.ndindex ran at a fifth of it), and it compiles faster than Numba's array assignment."""
    if src.ndim == 0 or src.size == 0:
        for idx in np.ndindex(src.shape):
            dst[idx] = src[idx]
        return dst
    for idx in np.ndindex(src.shape[:-1]):
        _copy_row(src[idx], dst[idx])
    return dst


@njit(**_OPTS)
def matmul_batched(a, b, out):
    """out[i] = a[i] @ b[i] for 3-D C-ordered arrays."""
    for i in range(a.shape[0]):
        out[i] = np.dot(a[i], b[i])
    return out


@njit(**_OPTS)
def _check_index(idx, n):
    for j in range(idx.shape[0]):
        if idx[j] < -n or idx[j] >= n:
            raise IndexError("index out of bounds in gather/scatter_add/scatter_set")


@njit(**_OPTS)
def gather(x, idx, out):
    """out[p, j, q] = x[p, idx[j], q] (negative indices count from the end)."""
    n = x.shape[1]
    _check_index(idx, n)
    for p in range(x.shape[0]):
        for j in range(idx.shape[0]):
            ij = idx[j] + n if idx[j] < 0 else idx[j]
            for q in range(x.shape[2]):
                out[p, j, q] = x[p, ij, q]
    return out


@njit(**_OPTS)
def scatter_add(g, idx, out):
    """out[p, idx[j], q] += g[p, j, q]; repeated indices accumulate."""
    n = out.shape[1]
    _check_index(idx, n)
    for p in range(g.shape[0]):
        for j in range(idx.shape[0]):
            ij = idx[j] + n if idx[j] < 0 else idx[j]
            for q in range(g.shape[2]):
                out[p, ij, q] += g[p, j, q]
    return out


@njit(**_OPTS)
def scatter_set(v, idx, out):
    """out[p, idx[j], q] = v[p, j, q] in order of j: of repeated indices the last one stays."""
    n = out.shape[1]
    _check_index(idx, n)
    for p in range(v.shape[0]):
        for j in range(idx.shape[0]):
            ij = idx[j] + n if idx[j] < 0 else idx[j]
            for q in range(v.shape[2]):
                out[p, ij, q] = v[p, j, q]
    return out


enable_cache(list(globals().values()), helpers_cache_dir)
