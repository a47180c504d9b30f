"""Library routines that generated kernels call, compiled once per machine (Numba disk cache).

Kept out of the generated modules so that each new kernel calls them instead of
compiling them again: Numba's `np.dot` and the gather/scatter loops cost a good
fraction of a second each to compile. Kernels call them through process-wide symbols
(`symbols.py`), so their code is not even linked into each kernel and optimized there again.
"""
import numba
import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.core.imputils import impl_ret_borrowed, impl_ret_new_ref
from numba.extending import intrinsic, register_jitable
from numba.np.arrayobj import _empty_nd_impl, populate_array

from .blas import blas_threads_local, gemm_cols, gemm_inner, gemm_rows
from .build import enable_cache, helpers_cache_dir
from .launch import COMBINE_MAX, COMBINE_MIN, COMBINE_PROD, COMBINE_SUM  # noqa: F401  (emit_cpu's op codes)
from .launch import chunk_njit, group_njit, loop_njit, parallel_chunks, parallel_chunks_py, parallel_self  # noqa: F401  (used by generated kernels)
from .native import native_njit  # noqa: F401  (used by generated kernels)
from .symbols import by_symbol, call  # noqa: F401  (used by generated kernels)

_OPTS = dict(error_model="numpy", boundscheck=False)     # cached below, in jitgraph's cache dir


# Products split into row blocks (blas.py): more than GEMM_BLOCK_FLOPS (about 0.35 ms on one
# core, several times a parallel loop's start), at least GEMM_BLOCK_ROWS rows per block, a
# power of two of them (even shares on 2, 4 or 8 threads). Each block is one BLAS call that
# packs all of b again, so few blocks are best: a 256 x 784 x 512 product took 2.01, 2.12 and
# 2.25 ms in 2, 4 and 8 row blocks on 2 threads (column blocks: 2.12-2.33; OpenBLAS's own 2
# threads: 2.20; one thread: 3.95). A product of fewer than 2 * GEMM_BLOCK_ROWS rows (a weight
# gradient, x^T @ dy, whose rows are a layer's width) is split into column blocks of at least
# GEMM_BLOCK_COLS instead: a 128 x 512 x 384 one took 1.00 ms on one thread and 0.53 ms in two
# column blocks on two (0.61 ms in four blocks of 96 columns). A result too small for either
# (a narrow layer's weight gradient over a large batch) is split into blocks of the inner
# dimension, each block's product into a buffer of its own, then summed in block order. A
# product moving more than GEMM_BLOCK_ELEMS elements is split even under GEMM_BLOCK_FLOPS:
# a tall-skinny one is bound by memory, which one core does not saturate.
GEMM_BLOCK_FLOPS = 1 << 24
GEMM_BLOCK_ELEMS = 1 << 18
GEMM_BLOCK_ROWS = 128
GEMM_BLOCK_COLS = 128
GEMM_BLOCK_INNER = 256
GEMM_MAX_BLOCKS = 8
GEMM_ROWS, GEMM_COLS, GEMM_INNER = 0, 1, 2


@register_jitable
def gemm_blocks(m, n, k):
    """The number of blocks of an (m, k) @ (k, n) product (cut as `gemm_split` says): a
    function of the sizes only, so results do not depend on the thread count. Plain Python
    too: the code generator (ops_cpu) asks the same rule."""
    if 2 * m * n * k < GEMM_BLOCK_FLOPS and m * k + k * n + m * n < GEMM_BLOCK_ELEMS:
        return 1
    split = gemm_split(m, n, k)
    limit = m // GEMM_BLOCK_ROWS if split == GEMM_ROWS else (
        n // GEMM_BLOCK_COLS if split == GEMM_COLS else k // GEMM_BLOCK_INNER)
    nb = 1
    while 2 * nb <= min(GEMM_MAX_BLOCKS, limit):
        nb *= 2
    return nb


@register_jitable
def gemm_split(m, n, k):
    """How an (m, k) @ (k, n) product's blocks cut it: GEMM_ROWS (row blocks of the result),
    GEMM_COLS (column blocks, for too few rows) or GEMM_INNER (blocks of k, for a result too
    small for either)."""
    if m >= 2 * GEMM_BLOCK_ROWS:
        return GEMM_ROWS
    if n >= 2 * GEMM_BLOCK_COLS:
        return GEMM_COLS
    if k >= 2 * GEMM_BLOCK_INNER:
        return GEMM_INNER
    return GEMM_ROWS


@njit(**_OPTS)
def _gemm_block(t, nb, a, b, out, acc, parts):
    """Block t of nb of out = a @ b (`acc`: out += a @ b), a chunk of `parallel_chunks`. An
    inner block t > 0 writes its product to parts[t - 1]."""
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    split = gemm_split(m, n, k)
    if nb > 1 and split == GEMM_COLS:
        gemm_cols(a, b, out, t * n // nb, (t + 1) * n // nb, acc)
    elif nb > 1 and split == GEMM_INNER:
        if t == 0:
            gemm_inner(a, b, out, 0, k // nb, acc)
        else:
            gemm_inner(a, b, parts[t - 1], t * k // nb, (t + 1) * k // nb, False)
    else:
        gemm_rows(a, b, out, t * m // nb, (t + 1) * m // nb, acc)


@register_jitable
def _gemm_parts(nb, a, b, out):
    """The buffers of a product's inner blocks after the first (none for other splits)."""
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    count = nb - 1 if nb > 1 and gemm_split(m, n, k) == GEMM_INNER else 0
    return np.empty((count, m, n), out.dtype)


@register_jitable
def _gemm_sum(out, parts):
    """out += parts[0], then parts[1], ...: the inner blocks' products in block order."""
    for p in range(parts.shape[0]):
        for i in range(out.shape[0]):
            for j in range(out.shape[1]):
                out[i, j] += parts[p, i, j]


@register_jitable
def _matmul2d(a, b, out, acc):
    nb = gemm_blocks(a.shape[0], b.shape[1], a.shape[1])
    parts = _gemm_parts(nb, a, b, out)
    prev = blas_threads_local(1)
    for t in range(nb):
        _gemm_block(t, nb, a, b, out, acc, parts)
    blas_threads_local(prev)
    _gemm_sum(out, parts)
    return out


@register_jitable
def _matmul2d_par(a, b, out, acc):
    nb = gemm_blocks(a.shape[0], b.shape[1], a.shape[1])
    parts = _gemm_parts(nb, a, b, out)
    prev = blas_threads_local(1)
    parallel_chunks(_gemm_block, nb, a, b, out, acc, parts)
    blas_threads_local(prev)
    _gemm_sum(out, parts)
    return out


@njit(**_OPTS)
def matmul2d(a, b, out):
    """out = a @ b for 2-D arrays (C or F ordered: transposed views go to BLAS without a
    copy); `out` is C-ordered and shares no memory with a or b. One BLAS thread, the
    blocks of `gemm_blocks` one after another (the same blocks as `matmul2d_par`)."""
    return _matmul2d(a, b, out, False)


@njit(**_OPTS)
def matmul2d_par(a, b, out):
    """`matmul2d` with its blocks on Numba's threads (one block runs on the calling thread,
    launch.py). The calling thread sets the BLAS thread count around the whole region
    (blas.py)."""
    return _matmul2d_par(a, b, out, False)


@njit(**_OPTS)
def matmul2d_acc(a, b, out):
    """out += a @ b, as `matmul2d` otherwise: the sum of a value (already in `out`) and a
    product in one BLAS pass over `out` (beta = 1), no buffer for the product."""
    return _matmul2d(a, b, out, True)


@njit(**_OPTS)
def matmul2d_acc_par(a, b, out):
    """`matmul2d_acc` with its blocks on Numba's threads, as `matmul2d_par`."""
    return _matmul2d_par(a, b, out, True)


def _scalar_type(dtype):
    """The Numba scalar type that the typed `dtype` argument names (np.float64, a dtype), or None."""
    if isinstance(dtype, types.NumberClass):
        return dtype.instance_type
    if isinstance(dtype, types.DType):
        return dtype.dtype
    return None


@intrinsic
def slot(typingctx, ws, offset, nbytes, shape, dtype):
    """The C-ordered array of `shape` and `dtype` at byte `offset` of the workspace arena `ws`
    (a uint8 array), a view of it; `nbytes` (its size) is for `slot_view`. The memory plan
    sized the arena, so no checks. An intrinsic, whose few instructions are written at each
    call: as a compiled helper (`ws[offset:offset + nbytes].view(dtype).reshape(shape)`) each
    call site cost ~0.15 s of compile (100 of them: 14.7 s against 0.7 s)."""
    dt = _scalar_type(dtype)
    if dt is None or not isinstance(shape, types.BaseTuple) or not isinstance(ws, types.Array):
        return None
    nd = len(shape)
    result = types.Array(dt, nd, "C")

    def codegen(context, builder, sig, args):
        arena, off, _, dims, _ = args
        src = context.make_array(sig.args[0])(context, builder, arena)
        llty = context.get_data_type(dt)
        data = builder.bitcast(builder.gep(src.data, [off]), llty.as_pointer())
        dims = [context.cast(builder, d, t, types.intp)
                for d, t in zip(cgutils.unpack_tuple(builder, dims, nd), sig.args[3])]
        itemsize = context.get_constant(types.intp, context.get_abi_sizeof(llty))
        strides, step = [], itemsize
        for d in reversed(dims):
            strides.insert(0, step)
            step = builder.mul(step, d)
        out = context.make_array(result)(context, builder)
        populate_array(out, data=data, shape=dims, strides=strides, itemsize=itemsize, meminfo=src.meminfo)
        return impl_ret_borrowed(context, builder, result, out._getvalue())

    return result(ws, offset, nbytes, shape, dtype), codegen


@intrinsic
def c_view(typingctx, a, shape):
    """`a.reshape(shape)` for a C-ordered `a` whose size `shape` keeps (the generator's shapes
    agree by construction): the same data and owner under new C strides, no checks. Numba's
    reshape inlines its shape normalization and a C call at each site: a function's first one
    cost ~0.3 s of compile and each further ~15-50 ms (an MD kernel had 72 of them). An
    F-ordered array goes through Numba's reshape, and other layouts are refused as Numba's
    reshape refuses them."""
    if not isinstance(a, types.Array) or a.layout not in "CF" or not isinstance(shape, types.BaseTuple) \
            or not all(isinstance(t, types.Integer) for t in shape):
        return None
    nd = len(shape)
    result = a.copy(ndim=nd)
    sig = result(a, shape)

    def codegen(context, builder, sig, args):
        if a.layout != "C":
            return context.compile_internal(builder, lambda x, s: x.reshape(s), sig, args)
        src = context.make_array(a)(context, builder, args[0])
        dims = [context.cast(builder, d, t, types.intp)
                for d, t in zip(cgutils.unpack_tuple(builder, args[1], nd), shape)]
        itemsize = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(a.dtype)))
        strides, step = [], itemsize
        for d in reversed(dims):
            strides.insert(0, step)
            step = builder.mul(step, d)
        out = context.make_array(result)(context, builder)
        populate_array(out, data=src.data, shape=dims, strides=strides, itemsize=itemsize, meminfo=src.meminfo)
        return impl_ret_borrowed(context, builder, result, out._getvalue())

    return sig, codegen


def c_view_py(a, shape):
    """`c_view` for Python callers (NUMBA_DISABLE_JIT)."""
    return a.reshape(shape)


def _new_array_type(shape, dtype):
    """The type of a new C-ordered array of `shape` (an integer or a tuple of integers) and
    `dtype` (a NumPy scalar type), or None."""
    dt = _scalar_type(dtype)
    if dt is None:
        return None
    if isinstance(shape, types.Integer):
        return types.Array(dt, 1, "C")
    if isinstance(shape, types.BaseTuple) and all(isinstance(t, types.Integer) for t in shape):
        return types.Array(dt, len(shape), "C")
    return None


def _allocate(context, builder, arrtype, shape_type, shape):
    dims = [shape] if isinstance(shape_type, types.Integer) else cgutils.unpack_tuple(builder, shape, arrtype.ndim)
    types_ = [shape_type] if isinstance(shape_type, types.Integer) else list(shape_type)
    dims = [context.cast(builder, d, t, types.intp) for d, t in zip(dims, types_)]
    return _empty_nd_impl(context, builder, arrtype, dims)


@intrinsic
def empty(typingctx, shape, dtype):
    """`np.empty(shape, dtype)` in compiled code, written at the call site. Numba compiles its
    own `np.empty` (an overload) once per process and signature: 0.1-0.2 s of every kernel's
    compile, in every compile server."""
    result = _new_array_type(shape, dtype)
    if result is None:
        return None

    def codegen(context, builder, sig, args):
        ary = _allocate(context, builder, result, sig.args[0], args[0])
        return impl_ret_new_ref(context, builder, result, ary._getvalue())

    return result(shape, dtype), codegen


@intrinsic
def full(typingctx, shape, value, dtype):
    """`np.full(shape, value, dtype)` in compiled code: `empty`, then one loop storing `value`
    (Numba's own `np.full`, an overload compiled once per process and signature, took
    0.1-0.15 s of a kernel's compile)."""
    result = _new_array_type(shape, dtype)
    if result is None or not isinstance(value, (types.Number, types.Boolean)):
        return None

    def codegen(context, builder, sig, args):
        ary = _allocate(context, builder, result, sig.args[0], args[0])
        v = context.cast(builder, args[1], sig.args[1], result.dtype)
        data = ary.data
        with cgutils.for_range(builder, ary.nitems) as loop:
            builder.store(context.get_value_as_data(builder, result.dtype, v), builder.gep(data, [loop.index]))
        return impl_ret_new_ref(context, builder, result, ary._getvalue())

    return result(shape, value, dtype), codegen


@intrinsic
def strided(typingctx, base, offset, shape, steps):
    """The view of C-ordered `base` at element `offset` with `shape` and element strides
    `steps` (NumPy's as_strided, in elements): a batched product's operand read in place
    (codegen/strides.py). The generator derived offset and strides from the view ops, so no
    checks. Its layout is 'A', one type for every view of a rank."""
    if not isinstance(base, types.Array) or base.layout != "C" or not isinstance(offset, types.Integer) \
            or not isinstance(shape, types.BaseTuple) or not isinstance(steps, types.BaseTuple) \
            or len(shape) != len(steps) or not all(isinstance(t, types.Integer) for t in tuple(shape) + tuple(steps)):
        return None
    nd = len(shape)
    result = base.copy(ndim=nd, layout="A")

    def codegen(context, builder, sig, args):
        src = context.make_array(base)(context, builder, args[0])
        off = context.cast(builder, args[1], offset, types.intp)
        dims = [context.cast(builder, d, t, types.intp)
                for d, t in zip(cgutils.unpack_tuple(builder, args[2], nd), shape)]
        itemsize = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(base.dtype)))
        strides_ = [builder.mul(context.cast(builder, s, t, types.intp), itemsize)
                    for s, t in zip(cgutils.unpack_tuple(builder, args[3], nd), steps)]
        out = context.make_array(result)(context, builder)
        populate_array(out, data=builder.gep(src.data, [off]), shape=dims, strides=strides_, itemsize=itemsize,
                       meminfo=src.meminfo)
        return impl_ret_borrowed(context, builder, result, out._getvalue())

    return result(base, offset, shape, steps), codegen


def strided_py(base, offset, shape, steps):
    """`strided` for Python callers (a Python entry, NUMBA_DISABLE_JIT): NumPy's as_strided."""
    flat = base.reshape(-1)
    return np.lib.stride_tricks.as_strided(flat[offset:], shape, tuple(s * base.itemsize for s in steps),
                                           writeable=False)


def copy_py(src, dst):
    """`copy` for a Python entry: NumPy's copyto (no dispatch through Numba's type checks)."""
    np.copyto(dst, src, casting="unsafe")
    return dst


def slot_view(ws, offset, nbytes, shape, dtype):
    """`slot` for a Python caller (a Python entry): the same view, made by NumPy."""
    return ws[offset:offset + nbytes].view(dtype).reshape(shape)


# Precompiled forms of Numba's own overloads that generated kernels would otherwise inline:
# those compile in every new process (np.broadcast_to with np.ascontiguousarray cost ~1 s of
# a kernel's first compile), where the disk cache keeps these once per signature.
@njit(**_OPTS)
def broadcast_into(x, out):
    """out[...] = x broadcast by NumPy's rules to out's shape; returns out."""
    out[...] = np.broadcast_to(x, out.shape)
    return out


@njit(**_OPTS)
def contiguous(x):
    """x as a C-ordered array (itself when it already is one), like np.ascontiguousarray."""
    return np.ascontiguousarray(x)


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
def _batch_items(a, b, out):
    for i in range(a.shape[0]):
        gemm_rows(a[i], b[i], out[i], 0, a.shape[1], False)


@njit(**_OPTS)
def matmul_batched(a, b, out):
    """out[i] = a[i] @ b[i] for 3-D C-ordered arrays, on one BLAS thread."""
    prev = blas_threads_local(1)
    _batch_items(a, b, out)
    blas_threads_local(prev)
    return out


@njit(**_OPTS)
def _batch_item(i, n, a, b, out):
    gemm_rows(a[i], b[i], out[i], 0, a.shape[1], False)


@njit(**_OPTS)
def matmul_batched_par(a, b, out):
    """`matmul_batched` with the items on Numba's threads when they are worth a parallel
    launch (GEMM_BLOCK_FLOPS in all)."""
    prev = blas_threads_local(1)
    if a.shape[0] < 2 or 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2] < GEMM_BLOCK_FLOPS:
        _batch_items(a, b, out)
    else:
        parallel_chunks(_batch_item, a.shape[0], a, b, out)
    blas_threads_local(prev)
    return out


@njit(**_OPTS)
def _strided_item(t, nt, a, b, out):
    i, j = divmod(t, a.shape[1])
    gemm_rows(a[i, j], b[i, j], out[i, j], 0, a.shape[2], False)


@njit(**_OPTS)
def _strided_items(a, b, out):
    nt = a.shape[0] * a.shape[1]
    for t in range(nt):
        _strided_item(t, nt, a, b, out)


@njit(**_OPTS)
def matmul_strided(a, b, out):
    """out[i, j] = a[i, j] @ b[i, j] for 4-D a and b of any strides whose matrices BLAS reads
    in place (the generator's strided views; any other layout is multiplied by loops) and a
    C-ordered out, on one BLAS thread."""
    prev = blas_threads_local(1)
    _strided_items(a, b, out)
    blas_threads_local(prev)
    return out


@njit(**_OPTS)
def matmul_strided_par(a, b, out):
    """`matmul_strided` with the items on Numba's threads when they are worth a parallel
    launch (GEMM_BLOCK_FLOPS in all)."""
    prev = blas_threads_local(1)
    nt = a.shape[0] * a.shape[1]
    if nt < 2 or 2 * nt * a.shape[2] * a.shape[3] * b.shape[3] < GEMM_BLOCK_FLOPS:
        _strided_items(a, b, out)
    else:
        parallel_chunks(_strided_item, nt, a, b, out)
    blas_threads_local(prev)
    return out


@register_jitable
def _int_text(v):
    """str(v) of an int64 (Numba's str negates a negative value first: -2**63 overflowed)."""
    if v == -9223372036854775807 - 1:
        return "-9223372036854775808"
    return str(v)


@njit(**_OPTS)
def _check_index(idx, n):
    for j in range(idx.shape[0]):
        if idx[j] < -n or idx[j] >= n:
            raise IndexError("index " + _int_text(idx[j]) + " is out of bounds for an axis of size " + str(n))


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


# A parallel reduction's per-chunk partial results (emit_cpu's launches), combined in chunk
# order: out[q] = part[0, q] op part[1, q] op ... op part[nch - 1, q], the order of the inline
# loop this replaces (each such loop cost its kernel's compile 30-80 ms; a call of a helper
# compiled once per machine costs about 8 ms). `op`: one of the COMBINE_* codes (launch.py).


@njit(**_OPTS)
def combine_parts(part, nch, out, op):
    for q in range(out.shape[0]):
        v = part[0, q]
        for c in range(1, nch):
            if op == COMBINE_SUM:
                v = v + part[c, q]
            elif op == COMBINE_PROD:
                v = v * part[c, q]
            elif op == COMBINE_MAX:         # np.maximum's: a NaN wins (written so Python runs it too)
                p = part[c, q]
                v = v if v >= p or v != v else p
            else:
                p = part[c, q]
                v = v if v <= p or v != v else p
        out[q] = v


enable_cache(list(globals().values()), helpers_cache_dir)

# generated code calls these through their symbols (symbols.py): compiled once per machine, not
# linked into every kernel and compiled there again
(matmul2d, matmul2d_par, matmul2d_acc, matmul2d_acc_par, matmul_batched, matmul_batched_par, matmul_strided,
 matmul_strided_par, broadcast_into, contiguous, copy, gather, scatter_add, scatter_set, combine_parts) = map(
    by_symbol, (matmul2d, matmul2d_par, matmul2d_acc, matmul2d_acc_par, matmul_batched, matmul_batched_par,
                matmul_strided, matmul_strided_par, broadcast_into, contiguous, copy, gather, scatter_add,
                scatter_set, combine_parts))

if numba.config.DISABLE_JIT:
    slot = slot_view        # kernels run as Python (NUMBA_DISABLE_JIT): intrinsics have no Python form
    strided = strided_py
    c_view = c_view_py
    empty, full = np.empty, np.full
    parallel_chunks = parallel_self = parallel_chunks_py
