"""BLAS inside compiled kernels: one thread, so that jitgraph's own threads share the work.

A kernel's products and LAPACK routines call SciPy's OpenBLAS (Numba's np.dot and np.linalg do).
Left to OpenBLAS's own threads they (1) changed results with the thread count (a 300 x 300
weight gradient differed in its last bits between 1 and 2 threads), and (2) fell off a cliff
when another process kept a core busy: OpenBLAS's threads spin, then wait for each other, so a
20000 x 100 matrix-vector product took 8.0 ms on 2 threads and 0.54 ms on 1, and the GP
benchmark 54 ms against 34 ms. So kernels run BLAS on one thread per calling thread, and large
products are split into row (or column) blocks that run on Numba's threads
(`runtime.matmul2d_par`): the blocks depend on the sizes only, so results do not depend on the
thread count, and Numba's threads follow the thread policy of jitgraph/threads.py.

`blas_threads_local(n)` sets the BLAS thread count to `n` and returns the previous one, in
compiled code: OpenBLAS's `openblas_set_num_threads_local` (0.3.27 and later; in a pthreads
build it sets the process-wide count, like the get/set pair used without it), or nothing
where neither exists (the BLAS keeps its own threading). Callers set it on the calling
thread around a whole parallel region, never in its workers (whose set/restore pairs would
race), and hold the GIL meanwhile (kernels do not release it), so two kernels never
interleave their changes. It is an external symbol, so the helpers and kernels calling it
can be cached: the symbol is registered at import, before any of them loads.

`gemm_rows(a, b, out, r0, r1, acc)` is one dgemm/sgemm call (SciPy's, by the same kind of symbol)
on a row block, reading C- or F-ordered operands in place through BLAS's leading dimensions:
Numba's np.dot copies a strided operand (a row block of a transposed matrix) on every call.
`gemm_cols` is the same call on a column block (for products of few rows), at an offset into
b and out, and `gemm_inner` on a block of the inner dimension (for a result too small to
split), at an offset into a and b. With `acc` true, both add the product to what `out` holds (BLAS's beta = 1): a sum
of a value and a product (`runtime.matmul2d_acc`) is made in one pass over `out`.
"""
import ctypes
import importlib.machinery
import importlib.util
import os
import sys

import llvmlite.binding as llvm
import numba
import numpy as np
from numba import types
from numba.extending import get_cython_function_address, overload

SYMBOL = "jitgraph_blas_threads_local"
_KEEP = []          # ctypes and cfunc objects whose addresses are registered


def _cython_blas():
    """SciPy's `scipy.linalg.cython_blas` module. Where `scipy.linalg` is not imported yet, the
    extension is loaded from its file alone and registered under its name: the package's
    __init__ (0.15 s, most of it SciPy's array-API layer) is not needed for BLAS symbols, and
    the compile server's start waits on it. A later `import scipy.linalg` finds it loaded."""
    name = "scipy.linalg.cython_blas"
    if name in sys.modules or "scipy.linalg" in sys.modules:
        return importlib.import_module(name)
    import scipy
    spec = importlib.machinery.PathFinder.find_spec(name, [os.path.join(p, "linalg") for p in scipy.__path__])
    if spec is None:
        return importlib.import_module(name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return sys.modules.setdefault(name, module)


def _blas_library():
    """A handle searching SciPy's BLAS (the library that Numba's np.dot calls), or None."""
    try:
        return ctypes.CDLL(_cython_blas().__file__)
    except (ImportError, OSError):
        return None


def _address(lib, names):
    for name in names:
        try:
            fn = getattr(lib, name)
        except AttributeError:
            continue
        _KEEP.append(fn)
        return ctypes.cast(fn, ctypes.c_void_p).value
    return None


def _register():
    """Register SYMBOL; returns how: "local", "global" or "none"."""
    lib = _blas_library()
    local = _address(lib, ["openblas_set_num_threads_local", "scipy_openblas_set_num_threads_local"]) \
        if lib is not None else None
    if local is not None:
        llvm.add_symbol(SYMBOL, local)
        return "local"
    get = set_ = None
    if lib is not None:
        for prefix in ("scipy_openblas", "openblas", "scipy_openblas64_", "openblas64_"):
            get = _address(lib, [f"{prefix}_get_num_threads"])
            set_ = _address(lib, [f"{prefix}_set_num_threads"])
            if get is not None and set_ is not None:
                break
    if get is not None and set_ is not None:
        llvm.add_symbol("jitgraph_blas_get_threads", get)
        llvm.add_symbol("jitgraph_blas_set_threads", set_)
        get_fn = types.ExternalFunction("jitgraph_blas_get_threads", types.intc())
        set_fn = types.ExternalFunction("jitgraph_blas_set_threads", types.void(types.intc))

        def swap(n):
            prev = get_fn()
            set_fn(n)
            return prev
        how = "global"
    else:
        def swap(n):
            return n
        how = "none"
    cf = numba.cfunc(types.intc(types.intc))(swap)
    _KEEP.append(cf)
    llvm.add_symbol(SYMBOL, cf.address)
    return how


def blas_threads_local(n):
    """Set the calling thread's BLAS thread count to `n` in compiled code; returns the previous
    count. Interpreted code (Python mode, NUMBA_DISABLE_JIT) leaves the BLAS as it is."""
    return n


def gemm_rows(a, b, out, r0, r1, acc):
    """out[r0:r1] = a[r0:r1] @ b (`acc`: out[r0:r1] += ...) for 2-D float arrays of one dtype
    (out C-ordered). Compiled, one BLAS gemm call on the arrays as they are laid out, C- or
    F-ordered (a transposed view): no copy, no allocation. Interpreted: NumPy."""
    if acc:
        out[r0:r1] += a[r0:r1] @ b
    else:
        np.dot(a[r0:r1], b, out[r0:r1])


def gemm_cols(a, b, out, c0, c1, acc):
    """out[:, c0:c1] = a @ b[:, c0:c1] (`acc`: += ...) for 2-D float arrays of one dtype (out C-ordered), for
    products of few rows split into column blocks. Compiled, one BLAS gemm call at the
    block's offset into b and out, with their leading dimensions: no strided view (which
    would be another layout, another instance of the helpers, to compile). Interpreted:
    NumPy."""
    if acc:
        out[:, c0:c1] += a @ b[:, c0:c1]
    else:
        out[:, c0:c1] = a @ b[:, c0:c1]


def gemm_inner(a, b, out, k0, k1, acc):
    """out = a[:, k0:k1] @ b[k0:k1] (`acc`: += ...) for 2-D float arrays of one dtype (out
    C-ordered): a block of the inner dimension, for products whose result is too small to
    split (a weight gradient over a large batch). Compiled, one BLAS gemm call at the block's
    offset into a and b, with their leading dimensions. Interpreted: NumPy."""
    if acc:
        out += a[:, k0:k1] @ b[k0:k1]
    else:
        np.dot(a[:, k0:k1], b[k0:k1], out)


def _layout(x, isz):
    """(op, leading dimension) of x for column-major BLAS, or (0, 0) when x is neither C- nor
    F-ordered: a C-ordered x is x^T to BLAS ('N' of x^T), an F-ordered one x ('T')."""
    rows, cols = x.shape
    if x.strides[1] == isz and (rows <= 1 or x.strides[0] >= cols * isz):
        return ord("N"), max(1, x.strides[0] // isz if rows > 1 else cols)
    if x.strides[0] == isz and (cols <= 1 or x.strides[1] >= rows * isz):
        return ord("T"), max(1, x.strides[1] // isz if cols > 1 else rows)
    return 0, 0


if numba.config.DISABLE_JIT:
    MODE = "none"
else:
    MODE = _register()
    _EXTERNAL = types.ExternalFunction(SYMBOL, types.intc(types.intc))
    # the matrices are passed by address (integers), so that a block can start at an offset
    # into them (gemm_cols); the other arguments by pointer, as Fortran takes them
    _P, _ADDR = types.voidptr, types.intp
    _GEMM_SIG = types.void(*([_P] * 6 + [_ADDR, _P, _ADDR, _P, _P, _ADDR, _P]))
    _GEMM = {}
    for _name, _dt in (("dgemm", types.float64), ("sgemm", types.float32)):
        llvm.add_symbol(f"jitgraph_{_name}", get_cython_function_address("scipy.linalg.cython_blas", _name))
        _GEMM[_dt] = types.ExternalFunction(f"jitgraph_{_name}", _GEMM_SIG)

    @overload(blas_threads_local)
    def _blas_threads_local_compiled(n):
        def impl(n):
            return _EXTERNAL(n)
        return impl

    _layout_jit = numba.njit(_layout)

    @numba.njit
    def _naive(av, b, ov, add):
        """ov = av @ b (`add`: ov += av @ b) by loops: operands BLAS cannot read in place (never
        made by jitgraph's kernels; a copy-and-call path compiled for several seconds per layout)."""
        for i in range(av.shape[0]):
            for j in range(b.shape[1]):
                acc = ov[i, j] if add else av[i, 0] * 0
                for p in range(av.shape[1]):
                    acc += av[i, p] * b[p, j]
                ov[i, j] = acc

    def _gemm_call(out, opb, opa, n, m, k, b_addr, ldb, a_addr, lda, c_addr, ldc, acc):
        """One BLAS gemm call, in column-major terms C' (n x m) = op(B) (n x k) op(A) (k x m)
        (`acc`: C' += ...), with C' at address c_addr (`out` gives the dtype). Compiled only."""

    @overload(_gemm_call)
    def _gemm_call_compiled(out, opb, opa, n, m, k, b_addr, ldb, a_addr, lda, c_addr, ldc, acc):
        fn = _GEMM[out.dtype]

        def impl(out, opb, opa, n, m, k, b_addr, ldb, a_addr, lda, c_addr, ldc, acc):
            chars = np.empty(2, np.uint8)
            chars[0], chars[1] = opb, opa
            ints = np.empty(6, np.int32)
            ints[0], ints[1], ints[2], ints[3], ints[4], ints[5] = n, m, k, ldb, lda, ldc
            scalars = np.empty(2, out.dtype)
            scalars[0], scalars[1] = 1, 1 if acc else 0
            fn(chars[0:].ctypes, chars[1:].ctypes, ints[0:].ctypes, ints[1:].ctypes, ints[2:].ctypes,
               scalars[0:].ctypes, b_addr, ints[3:].ctypes, a_addr, ints[4:].ctypes, scalars[1:].ctypes,
               c_addr, ints[5:].ctypes)
        return impl

    def _blas_types(a, b, out):
        """Do a, b and out (Numba types) have one dtype that BLAS multiplies?"""
        return a.dtype in _GEMM and b.dtype == a.dtype and out.dtype == a.dtype

    def _in_place(a, b, out):
        """Can BLAS read a and b and write out as laid out (C- or F-ordered, out C-ordered)?"""
        return a.layout in "CF" and b.layout in "CF" and out.layout == "C"

    @overload(gemm_rows)
    def _gemm_rows_compiled(a, b, out, r0, r1, acc):
        if not _blas_types(a, b, out):
            return None

        # C- and F-ordered operands and a C-ordered out (all jitgraph's kernels pass) always go
        # to BLAS: their impl leaves out the loop for other layouts, which LLVM vectorizes into
        # ~1,000 lines of IR per instance (8-12% of an MLP kernel's compile)
        blas_only = _in_place(a, b, out)

        def impl(a, b, out, r0, r1, acc):
            # out^T = b^T a^T in column-major terms: C' (n x mb) = op(b) (n x k) op(a) (k x mb)
            av, ov = a[r0:r1], out[r0:r1]
            mb, k, n = av.shape[0], av.shape[1], b.shape[1]
            if mb == 0 or n == 0:
                return
            if k == 0:
                if not acc:
                    for i in range(mb):
                        for j in range(n):
                            ov[i, j] = 0
                return
            isz = av.itemsize
            opa, lda = _layout_jit(av, isz)
            opb, ldb = _layout_jit(b, isz)
            if not blas_only and (opa == 0 or opb == 0 or ov.strides[1] != isz
                                  or (mb > 1 and ov.strides[0] < n * isz)):
                _naive(av, b, ov, acc)
                return
            _gemm_call(ov, opb, opa, n, mb, k, np.intp(b.ctypes.data), ldb, np.intp(av.ctypes.data), lda,
                       np.intp(ov.ctypes.data), max(1, ov.strides[0] // isz if mb > 1 else n), acc)
        return impl

    @overload(gemm_cols)
    def _gemm_cols_compiled(a, b, out, c0, c1, acc):
        if not _blas_types(a, b, out):
            return None
        if not _in_place(a, b, out):
            def naive(a, b, out, c0, c1, acc):
                _naive(a, b[:, c0:c1], out[:, c0:c1], acc)
            return naive

        def impl(a, b, out, c0, c1, acc):
            # as gemm_rows, C' (nb x m) = op(b block) (nb x k) op(a) (k x m), where the block of
            # b (and of out) starts c0 columns in and keeps the whole array's leading dimension
            m, k, nb = a.shape[0], a.shape[1], c1 - c0
            if m == 0 or nb <= 0:
                return
            if k == 0:
                if not acc:
                    for i in range(m):
                        for j in range(c0, c1):
                            out[i, j] = 0
                return
            isz = a.itemsize
            opa, lda = _layout_jit(a, isz)
            opb, ldb = _layout_jit(b, isz)
            _gemm_call(out, opb, opa, nb, m, k, np.intp(b.ctypes.data) + c0 * b.strides[1], ldb,
                       np.intp(a.ctypes.data), lda, np.intp(out.ctypes.data) + c0 * out.strides[1],
                       max(1, out.strides[0] // isz if m > 1 else out.shape[1]), acc)
        return impl

    @overload(gemm_inner)
    def _gemm_inner_compiled(a, b, out, k0, k1, acc):
        if not _blas_types(a, b, out):
            return None
        if not _in_place(a, b, out):
            def naive(a, b, out, k0, k1, acc):
                _naive(a[:, k0:k1], b[k0:k1], out, acc)
            return naive

        def impl(a, b, out, k0, k1, acc):
            # as gemm_rows, C' (n x m) = op(b block) (n x kb) op(a block) (kb x m), where the
            # blocks start k0 columns into a and k0 rows into b and keep the whole arrays'
            # leading dimensions
            m, n, kb = a.shape[0], b.shape[1], k1 - k0
            if m == 0 or n == 0 or kb <= 0:
                return
            isz = a.itemsize
            opa, lda = _layout_jit(a, isz)
            opb, ldb = _layout_jit(b, isz)
            _gemm_call(out, opb, opa, n, m, kb, np.intp(b.ctypes.data) + k0 * b.strides[0], ldb,
                       np.intp(a.ctypes.data) + k0 * a.strides[1], lda, np.intp(out.ctypes.data),
                       max(1, out.strides[0] // isz if m > 1 else n), acc)
        return impl
