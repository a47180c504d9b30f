"""LAPACK routines that generated kernels call: loops over a stack of matrices, compiled once per
machine as C callbacks.

A kernel that called Numba-compiled helpers (as it calls `runtime.py`'s) would link their LLVM
code into its own and optimize it again. Numba's np.linalg functions are large: a kernel
calling two of them took about 1 s longer to compile than one calling them as C functions.
So each routine here is a C callback (Numba's `cfunc`), compiled on first use for its dtype
and cached in jitgraph's cache directory (checked files, `numba_cache.py`), and registered as
a process-wide symbol. A kernel module declares the routines it uses at import
(`external(name, dtype, njit, abi)`) and calls them with pointers and sizes: its own compile
sees only an external call, and a cached kernel finds the symbol when it loads.

Every routine computes in float64, as NumPy does for float32 operands too, and returns a
status: 0, or 1 for the failure NumPy reports as a LinAlgError (`ROUTINES[name].message`,
NumPy's text), which the kernel raises. Matrices with infinities or NaNs give NaN results
(NumPy's exact NaN pattern depends on LAPACK's arithmetic), or, where NumPy reports "SVD did
not converge" for them (svd, pinv, lstsq), that error.

Numba's np.linalg calls LAPACK through SciPy's bindings; where it lacks an option NumPy has
(eigh's UPLO='U', singular values without vectors, a complete QR) the routines call the same
LAPACK entry points it uses (`numba.np.linalg._LAPACK`), as NumPy does, so that results match
NumPy's to rounding, eigenvector signs included.

In Python mode (`pymode.py`) `external` returns a Python function taking the same
arguments (NumPy's `.ctypes` objects and ints): the routines then run as Python with NumPy.
"""
import ctypes
import hashlib
import threading

import llvmlite.binding as llvm
import numba
import numpy as np
from numba import carray, types
from numba.core import sigutils
from numba.core.ccallback import CFunc
from numba.extending import get_cython_function_address, overload, register_jitable
from numba.np.linalg import _LAPACK, _dummy_liveness_func, ensure_lapack

from .blas import blas_threads_local
from .build import helpers_cache_dir, private_dir
from .numba_cache import CheckedCache

with open(__file__, "rb") as _f:
    ABI = hashlib.sha256(_f.read()).hexdigest()[:12]
"""Changes with this file: kernels name it when they declare a routine, so a kernel compiled
against other routines is never reused (its source, hence its cache entry, differs)."""


# ---- shared pieces ---------------------------------------------------------------------------------
@register_jitable
def _put(dst, src):
    """dst[...] = src for 2-D arrays of one shape (any layouts; converts to dst's dtype)."""
    for p in range(src.shape[0]):
        for q in range(src.shape[1]):
            dst[p, q] = src[p, q]


@register_jitable
def _fill(dst, value):
    for p in range(dst.shape[0]):
        for q in range(dst.shape[1]):
            dst[p, q] = value


@register_jitable
def _eye(dst):
    for p in range(dst.shape[0]):
        for q in range(dst.shape[1]):
            dst[p, q] = 1.0 if p == q else 0.0


@register_jitable
def _finite(a):
    # element by element: np.isfinite(a).all() made a temporary array per matrix
    for v in a.flat:
        if not np.isfinite(v):
            return False
    return True


# Matrices up to this order are factored, solved and their determinants taken by the loops
# below, without a LAPACK or BLAS call and without temporary arrays (each of those calls made
# about ten: a stack of 4,000 3 x 3 solves and log-determinants with their gradient took 13.3
# ms, against JAX's 3.2)
SMALL_N = 16


@register_jitable
def _lu_small(a, lu, piv):
    """LU with partial pivoting of a small matrix into lu and piv, as `_getrf` gives them (L
    below the diagonal, U on and above it, C order; piv 0-based row interchanges, the first
    largest magnitude chosen as LAPACK's idamax does); returns getrf's info: 0, or k + 1 for
    the first zero pivot."""
    n = a.shape[0]
    for p in range(n):
        for q in range(n):
            lu[p, q] = a[p, q]
    info = 0
    for k in range(n):
        m, big = k, abs(lu[k, k])
        for r in range(k + 1, n):
            if abs(lu[r, k]) > big:
                m, big = r, abs(lu[r, k])
        piv[k] = m
        if m != k:
            for q in range(n):
                lu[k, q], lu[m, q] = lu[m, q], lu[k, q]
        d = lu[k, k]
        if d == 0.0:
            if info == 0:
                info = k + 1
            continue
        for r in range(k + 1, n):
            f = lu[r, k] / d
            lu[r, k] = f
            for q in range(k + 1, n):
                lu[r, q] -= f * lu[k, q]
    return info


@register_jitable
def _trsm_small(a, x, c0, c1, lower, trans, unit):
    """`trsm_cols` by substitution, for small matrices."""
    n = a.shape[0]
    forward = lower != trans          # op(a) lower triangular
    for c in range(c0, c1):
        for t in range(n):
            i = t if forward else n - 1 - t
            s = x[i, c]
            lo, hi = (0, i) if forward else (i + 1, n)
            for j in range(lo, hi):
                s -= (a[j, i] if trans else a[i, j]) * x[j, c]
            x[i, c] = s if unit else s / a[i, i]


def _syevd(a, lower, vectors):
    """(w, v, info): eigenvalues (and eigenvectors) of float64 matrix a from one triangle."""
    uplo = "L" if lower else "U"
    try:
        if vectors:
            w, v = np.linalg.eigh(a, uplo)
        else:
            w, v = np.linalg.eigvalsh(a, uplo), a
    except np.linalg.LinAlgError:
        return a[0], a, 1
    return w, v, 0


@overload(_syevd)
def _syevd_jit(a, lower, vectors):
    ensure_lapack()
    evd = _LAPACK().numba_ez_xxxevd(types.float64)

    def impl(a, lower, vectors):
        n = a.shape[0]
        acpy = np.asfortranarray(a)
        w = np.empty(n)
        if n == 0:
            return w, acpy, 0
        info = evd(ord("d"), ord("V") if vectors else ord("N"), ord("L") if lower else ord("U"), n,
                   acpy.ctypes, n, w.ctypes)
        _dummy_liveness_func([acpy.size, w.size])
        return w, acpy, info
    return impl


def _gesdd_values(a):
    """(s, info): singular values of float64 matrix a, without vectors."""
    try:
        return np.linalg.svd(a, compute_uv=False), 0
    except np.linalg.LinAlgError:
        return a[0], 1


@overload(_gesdd_values)
def _gesdd_values_jit(a):
    ensure_lapack()
    gesdd = _LAPACK().numba_ez_gesdd(types.float64)

    def impl(a):
        m, n = a.shape
        s = np.empty(min(m, n))
        if m == 0 or n == 0:
            return s, 0
        acpy = np.asfortranarray(a)
        u = np.empty((1, 1))      # not referenced with jobz 'N', but must exist
        vt = np.empty((1, 1))
        info = gesdd(ord("d"), ord("N"), m, n, acpy.ctypes, m, s.ctypes, u.ctypes, m, vt.ctypes, 1)
        _dummy_liveness_func([acpy.size, s.size, u.size, vt.size])
        return s, info
    return impl


def _geqrf_orgqr(a, complete):
    """(q, r): NumPy's QR of float64 matrix a, reduced or complete."""
    q, r = np.linalg.qr(a, "complete" if complete else "reduced")
    return q, r


@overload(_geqrf_orgqr)
def _geqrf_orgqr_jit(a, complete):
    ensure_lapack()
    geqrf = _LAPACK().numba_ez_geqrf(types.float64)
    orgqr = _LAPACK().numba_ez_xxgqr(types.float64)

    def impl(a, complete):
        m, n = a.shape
        k = min(m, n)
        mc = m if complete else k
        q = np.zeros((mc, m)).T            # Fortran order, as LAPACK writes it
        r = np.zeros((mc, n))
        if m == 0 or n == 0:
            _eye(q)
            return q, r
        acpy = np.asfortranarray(a)
        tau = np.empty(k)
        geqrf(ord("d"), m, n, acpy.ctypes, m, tau.ctypes)
        for i in range(mc):
            for j in range(i, n):
                r[i, j] = acpy[i, j]
        for j in range(min(n, mc)):
            for i in range(m):
                q[i, j] = acpy[i, j]
        orgqr(ord("d"), m, mc, k, q.ctypes, m, tau.ctypes)
        _dummy_liveness_func([acpy.size, tau.size, q.size])
        return q, r
    return impl


@register_jitable
def _gesdd(a, full):
    """(u, s, vh, info): np.linalg.svd of float64 matrix a, with C-ordered factors."""
    u, s, vh = np.empty((0, 0)), np.empty(0), np.empty((0, 0))
    ok = True
    try:
        uf, sf, vf = np.linalg.svd(a, full)
        u, s, vh = np.ascontiguousarray(uf), np.ascontiguousarray(sf), np.ascontiguousarray(vf)
    except Exception:
        ok = False
    return u, s, vh, 0 if ok else 1


@register_jitable
def _svd_factors(a, full, hermitian):
    """(u, s, vh, info) of float64 matrix a, as np.linalg.svd(a, full, hermitian=...) gives them."""
    if hermitian:
        return _hermitian_svd(a, True)
    return _gesdd(a, full)


@register_jitable
def _hermitian_svd(a, vectors):
    """(u, s, vh, info) of symmetric float64 a (its lower triangle) as NumPy's hermitian path
    makes them: eigh, singular values |w| in descending order, the signs moved into vh."""
    n = a.shape[0]
    w, v, info = _syevd(a, True, vectors)
    order = np.argsort(np.abs(w))[::-1]
    s = np.empty(n)
    u = np.empty((n, n))
    vh = np.empty((n, n))
    for j in range(n):
        s[j] = abs(w[order[j]])
        if vectors:
            sg = -1.0 if w[order[j]] < 0 else 1.0
            for i in range(n):
                u[i, j] = v[i, order[j]]
                vh[j, i] = sg * v[i, order[j]]
    return u, s, vh, info


# ---- BLAS dtrsm (triangular solves): Numba's np.linalg has none -----------------------------------
def _register_dtrsm():
    """Register SciPy's dtrsm as a process-wide symbol (kernels calling it can be cached)."""
    addr = get_cython_function_address("scipy.linalg.cython_blas", "dtrsm")
    llvm.add_symbol("jitgraph_dtrsm", addr)
    return types.ExternalFunction("jitgraph_dtrsm", types.void(*([types.voidptr] * 11)))


def _register_dpotrf():
    """Register LAPACK's dpotrf (SciPy's) as a process-wide symbol, as dtrsm."""
    addr = get_cython_function_address("scipy.linalg.cython_lapack", "dpotrf")
    llvm.add_symbol("jitgraph_dpotrf", addr)
    return types.ExternalFunction("jitgraph_dpotrf", types.void(*([types.voidptr] * 5)))


def potrf_lower(x):
    """x <- its lower Cholesky factor in place (the upper triangle zeroed), for a C-ordered
    float64 symmetric x; returns 0, or LAPACK's info > 0 when x is not positive definite.
    Python mode: NumPy."""
    try:
        x[...] = np.linalg.cholesky(x)
    except np.linalg.LinAlgError:
        return 1
    return 0


def trsm_cols(a, x, c0, c1, lower, trans, unit):
    """x[:, c0:c1] <- op(a)^-1 x[:, c0:c1] in place, for C-ordered float64 a (n, n) and x (n, k):
    op(a) is a or a^T, a lower or upper triangular, with a unit diagonal if `unit` (not read).
    A block of columns is one block of a solve whose right-hand sides are split over threads.
    Python mode: SciPy's solve_triangular."""
    from scipy.linalg import solve_triangular
    x[:, c0:c1] = solve_triangular(a, x[:, c0:c1], trans=1 if trans else 0, lower=bool(lower),
                                   unit_diagonal=bool(unit))


if not numba.config.DISABLE_JIT:
    _DTRSM = _register_dtrsm()
    _DPOTRF = _register_dpotrf()

    @overload(potrf_lower)
    def _potrf_lower_compiled(x):
        def impl(x):
            # column-major LAPACK sees the C-ordered symmetric x as itself: its upper factor U
            # (U^T U = x) is, read in rows, the lower factor L = U^T
            n = x.shape[0]
            if n == 0:
                return 0
            uplo = np.full(1, ord("U"), np.uint8)
            n_, lda, info = np.full(1, n, np.int32), np.full(1, n, np.int32), np.zeros(1, np.int32)
            _DPOTRF(uplo.ctypes, n_.ctypes, x.ctypes, lda.ctypes, info.ctypes)
            for i in range(n):
                for j in range(i + 1, n):
                    x[i, j] = 0.0
            return info[0]
        return impl

    @overload(trsm_cols)
    def _trsm_cols_compiled(a, x, c0, c1, lower, trans, unit):
        def impl(a, x, c0, c1, lower, trans, unit):
            # Column-major BLAS sees the C-ordered a as a^T and x as x^T: op(a) x = b is
            # x^T op(a)^T = b^T, a right-side solve with a^T's triangle (the other one), here on
            # the rows c0:c1 of x^T: c0 elements from x's start, the leading dimension still
            # x's row length
            n, k = x.shape
            if n == 0 or c1 <= c0:
                return
            if n <= SMALL_N:
                _trsm_small(a, x, c0, c1, lower, trans, unit)
                return
            side, uplo = np.full(1, ord("R"), np.uint8), np.full(1, ord("U" if lower else "L"), np.uint8)
            tra, diag = np.full(1, ord("T" if trans else "N"), np.uint8), np.full(1, ord("U" if unit else "N"), np.uint8)
            m_, n_ = np.full(1, c1 - c0, np.int32), np.full(1, n, np.int32)
            lda, ldb = np.full(1, n, np.int32), np.full(1, k, np.int32)
            alpha = np.ones(1)
            _DTRSM(side.ctypes, uplo.ctypes, tra.ctypes, diag.ctypes, m_.ctypes, n_.ctypes, alpha.ctypes,
                   a.ctypes, lda.ctypes, x[:, c0:].ctypes, ldb.ctypes)
        return impl


@register_jitable
def trsm(a, x, lower, trans, unit):
    """`trsm_cols` on every column of x."""
    trsm_cols(a, x, 0, x.shape[1], lower, trans, unit)


@register_jitable
def _singular(a, unit):
    """Is triangular `a` singular for a solve: a zero on its diagonal (unless `unit`), as for
    SciPy's solve_triangular?"""
    if not unit:
        for j in range(a.shape[0]):
            if a[j, j] == 0.0:
                return True
    return False


# ---- LAPACK getrf (LU with partial pivoting) -------------------------------------------------------
def _getrf(a):
    """(lu, piv, info) of float64 matrix a: LAPACK's getrf, lu C-ordered as a's rows (L below
    the diagonal, unit diagonal not stored; U on and above it), piv 0-based, info > 0 for an
    exactly singular a. Python mode: SciPy's."""
    from scipy.linalg.lapack import dgetrf
    lu, piv, info = dgetrf(a)
    return np.ascontiguousarray(lu), piv.astype(np.int32), info


@overload(_getrf)
def _getrf_jit(a):
    ensure_lapack()
    getrf = _LAPACK().numba_xxgetrf(types.float64)

    def impl(a):
        n = a.shape[0]
        acpy = np.asfortranarray(a)          # column-major LAPACK factors a itself
        ipiv = np.empty(n, np.int32)
        info = 0
        if n > 0:
            info = getrf(ord("d"), n, n, acpy.ctypes, n, ipiv.ctypes)
        _dummy_liveness_func([acpy.size, ipiv.size])
        return np.ascontiguousarray(acpy), ipiv - 1, info
    return impl


# ---- the routines (one stack of matrices each; every array C-ordered) ------------------------------
@register_jitable
def lu_core(a, lu, piv):
    """The LU factorization of each float64 matrix (`_getrf`); a matrix with infinities or NaNs
    gets a NaN factorization (its solves are NaN, as NumPy's solve gives NaN for it), an
    exactly singular one the status 1 (NumPy's "Singular matrix")."""
    n = a.shape[1]
    for i in range(a.shape[0]):
        if not _finite(a[i]):
            _fill(lu[i], np.nan)
            for k in range(n):
                piv[i, k] = k
            continue
        if n <= SMALL_N:
            if _lu_small(a[i], lu[i], piv[i]) > 0:
                return 1
            continue
        f, p, info = _getrf(a[i])
        if info > 0:
            return 1
        _put(lu[i], f)
        for k in range(n):
            piv[i, k] = p[k]
    return 0


@register_jitable
def lu_solve_core(lu, piv, b, x, trans):
    """x = op(a)^-1 b from a's factorization (`lu_core`): P a = L U, so a x = b is
    U^-1 L^-1 P b, and a^T x = b is P^T L^-T U^-T b; NaN where the factorization or b holds
    infinities or NaNs."""
    n = lu.shape[1]
    for i in range(lu.shape[0]):
        if not (_finite(lu[i]) and _finite(b[i])):
            _fill(x[i], np.nan)
            continue
        xi = x[i]
        _put(xi, b[i])
        if trans:
            trsm(lu[i], xi, False, True, False)
            trsm(lu[i], xi, True, True, True)
            for k in range(n - 1, -1, -1):
                _swap_rows(xi, k, piv[i, k])
        else:
            for k in range(n):
                _swap_rows(xi, k, piv[i, k])
            trsm(lu[i], xi, True, False, True)
            trsm(lu[i], xi, False, False, False)
    return 0


@register_jitable
def _swap_rows(x, k, p):
    if p != k:
        for q in range(x.shape[1]):
            x[k, q], x[p, q] = x[p, q], x[k, q]


@register_jitable
def cholesky_core(a, out):
    """LAPACK's dpotrf on a float64 copy of each matrix (NumPy's and Numba's np.linalg.cholesky
    copied twice more: 2.3-2.4 ms against 1.0 ms at n = 400 on one thread)."""
    n = a.shape[1]
    w = np.empty((n, n), np.float64)
    for i in range(a.shape[0]):
        ai = a[i]
        if not _finite(ai):
            _fill(out[i], np.nan)
            continue
        _put(w, ai)
        if potrf_lower(w) != 0:
            return 1
        _put(out[i], w)
    return 0


@register_jitable
def solve_triangular_core(a, b, x, lower, trans, unit):
    """x = op(a)^-1 b with op(a) = a or a^T (`trans`), a lower or upper triangular; a zero on
    the diagonal (unless `unit`) is a singular matrix, as for SciPy's solve_triangular."""
    for i in range(a.shape[0]):
        ai, bi = np.ascontiguousarray(a[i].astype(np.float64)), b[i].astype(np.float64)
        if not (_finite(ai) and _finite(bi)):
            _fill(x[i], np.nan)
            continue
        if _singular(ai, unit):
            return 1
        xi = np.ascontiguousarray(bi)
        trsm(ai, xi, lower, trans, unit)
        _put(x[i], xi)
    return 0


@register_jitable
def solve_triangular_ready(a, b, unit):
    """Before a solve split into column blocks, the matrices in order as `solve_triangular_core`
    takes them: 2 at the first with an infinity or a NaN in a or b (the whole routine then
    runs: it fills such a matrix's solution with NaN, and raises for a later singular one), 1
    at the first singular one before it, else 0."""
    for i in range(a.shape[0]):
        if not (_finite(a[i]) and _finite(b[i])):
            return 2
        if _singular(a[i], unit):
            return 1
    return 0


@register_jitable
def solve_triangular_cols(a, b, x, c0, c1, lower, trans, unit):
    """x[..., c0:c1] = op(a)^-1 b[..., c0:c1]: one column block of a float64 solve whose
    operands `solve_triangular_ready` passed. It runs on a worker thread: no BLAS thread count
    is set here (the caller sets it around the region, blas.py)."""
    for i in range(a.shape[0]):
        _put(x[i][:, c0:c1], b[i][:, c0:c1])
        trsm_cols(a[i], x[i], c0, c1, lower, trans, unit)
    return 0


@register_jitable
def slogdet_core(a, sign, logdet):
    n = a.shape[1]
    w, piv = np.empty((n, n), np.float64), np.empty(n, np.int32)
    for i in range(a.shape[0]):
        ai = a[i]
        if not _finite(ai):
            sign[i] = np.nan
            logdet[i] = np.nan
            continue
        if n <= SMALL_N:
            # NumPy's: the product of U's diagonal and the interchanges' signs; sign 0 and
            # log-determinant -inf for a singular matrix
            _lu_small(ai, w, piv)
            sg, ld = 1.0, 0.0
            for k in range(n):
                if piv[k] != k:
                    sg = -sg
                if w[k, k] == 0.0:
                    sg, ld = 0.0, -np.inf
                    break
                if w[k, k] < 0.0:
                    sg = -sg
                ld += np.log(abs(w[k, k]))
            sign[i] = sg
            logdet[i] = ld
            continue
        sg, ld = np.linalg.slogdet(ai.astype(np.float64))
        sign[i] = sg
        logdet[i] = ld
    return 0


@register_jitable
def eigh_core(a, lower, w, v):
    for i in range(a.shape[0]):
        ai = a[i].astype(np.float64)
        if not _finite(ai):
            _fill(v[i], np.nan)
            for j in range(w.shape[1]):
                w[i, j] = np.nan
            continue
        wi, vi, info = _syevd(ai, lower != 0, True)
        if info != 0:
            return 1
        _put(v[i], vi)
        for j in range(w.shape[1]):
            w[i, j] = wi[j]
    return 0


@register_jitable
def svd_core(a, full, hermitian, u, s, vh):
    m, n = a.shape[1], a.shape[2]
    for i in range(a.shape[0]):
        ai = a[i].astype(np.float64)
        if m == 0 or n == 0:
            _eye(u[i])
            _eye(vh[i])
            continue
        if not _finite(ai):
            return 1
        ui, si, vhi, info = _svd_factors(ai, full != 0, hermitian != 0)
        if info != 0:
            return 1
        _put(u[i], ui)
        _put(vh[i], vhi)
        for j in range(s.shape[1]):
            s[i, j] = si[j]
    return 0


@register_jitable
def svdvals_core(a, hermitian, s):
    for i in range(a.shape[0]):
        ai = a[i].astype(np.float64)
        if not _finite(ai):
            return 1
        if hermitian:
            _, si, _, info = _hermitian_svd(ai, False)
        else:
            si, info = _gesdd_values(ai)
        if info != 0:
            return 1
        for j in range(s.shape[1]):
            s[i, j] = si[j]
    return 0


@register_jitable
def qr_core(a, complete, q, r):
    for i in range(a.shape[0]):
        ai = a[i].astype(np.float64)
        if not _finite(ai):
            _fill(q[i], np.nan)
            _fill(r[i], np.nan)
            continue
        qi, ri = _geqrf_orgqr(ai, complete != 0)
        _put(q[i], qi)
        _put(r[i], ri)
    return 0


@register_jitable
def pinv_core(a, rcond, hermitian, out):
    """NumPy's pinv: the SVD's factors in the result's dtype, the cutoff rcond * max(s) in
    float64, the product V diag(1/s) U^T in the result's dtype."""
    for i in range(a.shape[0]):
        ai = a[i].astype(np.float64)
        if not _finite(ai):
            return 1
        u, s, vh, info = _svd_factors(ai, False, hermitian != 0)
        if info != 0:
            return 1
        ut, sd, vt = u.astype(out.dtype), s.astype(out.dtype), vh.astype(out.dtype)
        cutoff = rcond * np.float64(sd.max())
        inv = np.zeros(sd.shape[0], out.dtype)
        for j in range(sd.shape[0]):
            if np.float64(sd[j]) > cutoff:
                inv[j] = 1.0 / sd[j]
        scaled = np.empty((sd.shape[0], ut.shape[0]), out.dtype)
        for j in range(sd.shape[0]):
            for p in range(ut.shape[0]):
                scaled[j, p] = inv[j] * ut[p, j]
        _put(out[i], np.dot(np.ascontiguousarray(vt.T), scaled))
    return 0


@register_jitable
def lstsq_core(a, b, rcond, x, res, rank, s):
    """NumPy's lstsq of 2-D a (m, n) and b (m, k); residuals as sums of squares whenever m > n
    (the shape a traced graph gives them; NumPy leaves them out for a rank-deficient a)."""
    ai, bi = a.astype(np.float64), b.astype(np.float64)
    if not (_finite(ai) and _finite(bi)):
        return 1
    m, n = ai.shape
    ok = True
    try:
        xs, rs, rk, sv = np.linalg.lstsq(ai, bi, rcond)
        _put(x, xs)
        rank[0] = rk
        for j in range(s.shape[0]):
            s[j] = sv[j]
        if m > n and rs.shape[0] == res.shape[0]:
            for j in range(res.shape[0]):
                res[j] = rs[j]
        elif m > n:
            r = bi - np.dot(ai, np.ascontiguousarray(xs))
            for j in range(res.shape[0]):
                acc = 0.0
                for p in range(m):
                    acc += r[p, j] * r[p, j]
                res[j] = acc
    except Exception:
        ok = False
    return 0 if ok else 1


# the [13/13] Pade approximant's coefficients and the largest 1-norm it serves unscaled (Higham 2005)
_PADE13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0,
           129060195264000.0, 10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0,
           40840800.0, 960960.0, 16380.0, 182.0, 1.0)
_THETA13 = 5.371920351148152


@register_jitable
def _expm_one(a):
    """exp(a) by scaling and squaring (Higham 2005): a / 2^s with 1-norm at most theta_13, its
    [13/13] Pade approximant (U + V) / (V - U) by one solve, squared s times."""
    n = a.shape[0]
    norm = 0.0
    for q in range(n):
        col = 0.0
        for p in range(n):
            col += abs(a[p, q])
        norm = max(norm, col)
    squarings = 0
    if norm > _THETA13:
        squarings = int(np.ceil(np.log2(norm / _THETA13)))
    x = a * (0.5 ** squarings)
    b = _PADE13
    ident = np.eye(n)
    x2 = np.dot(x, x)
    x4 = np.dot(x2, x2)
    x6 = np.dot(x4, x2)
    u = np.dot(x, np.dot(x6, b[13] * x6 + b[11] * x4 + b[9] * x2)
               + b[7] * x6 + b[5] * x4 + b[3] * x2 + b[1] * ident)
    v = np.dot(x6, b[12] * x6 + b[10] * x4 + b[8] * x2) + b[6] * x6 + b[4] * x4 + b[2] * x2 \
        + b[0] * ident
    r = np.ascontiguousarray(np.linalg.solve(v - u, v + u))
    for _ in range(squarings):
        r = np.dot(r, r)
    return r


@register_jitable
def expm_core(a, out):
    for i in range(a.shape[0]):
        ai = np.ascontiguousarray(a[i].astype(np.float64))
        if not _finite(ai):
            _fill(out[i], np.nan)
            continue
        ok = True
        try:
            _put(out[i], _expm_one(ai))
        except Exception:
            ok = False
        if not ok:
            _fill(out[i], np.nan)
    return 0


# ---- C entry points: pointers and sizes in, a status out ------------------------------------------
def _lu_c(ap, lup, pivp, nb, n):
    prev = blas_threads_local(1)      # see blas.py
    status = lu_core(carray(ap, (nb, n, n)), carray(lup, (nb, n, n)), carray(pivp, (nb, n)))
    blas_threads_local(prev)
    return status


def _lu_solve_c(lup, pivp, bp, xp, nb, n, k, trans):
    prev = blas_threads_local(1)      # see blas.py
    status = lu_solve_core(carray(lup, (nb, n, n)), carray(pivp, (nb, n)), carray(bp, (nb, n, k)),
                           carray(xp, (nb, n, k)), trans)
    blas_threads_local(prev)
    return status


def _cholesky_c(ap, op, nb, n):
    prev = blas_threads_local(1)      # see blas.py
    status = cholesky_core(carray(ap, (nb, n, n)), carray(op, (nb, n, n)))
    blas_threads_local(prev)
    return status


def _solve_triangular_c(ap, bp, xp, nb, n, k, lower, trans, unit):
    prev = blas_threads_local(1)      # see blas.py
    status = solve_triangular_core(carray(ap, (nb, n, n)), carray(bp, (nb, n, k)), carray(xp, (nb, n, k)),
                                   lower, trans, unit)
    blas_threads_local(prev)
    return status


def _solve_triangular_ready_c(ap, bp, nb, n, k, unit):
    return solve_triangular_ready(carray(ap, (nb, n, n)), carray(bp, (nb, n, k)), unit)


def _solve_triangular_cols_c(ap, bp, xp, nb, n, k, c0, c1, lower, trans, unit):
    return solve_triangular_cols(carray(ap, (nb, n, n)), carray(bp, (nb, n, k)), carray(xp, (nb, n, k)),
                                 c0, c1, lower, trans, unit)


def _slogdet_c(ap, sp, lp, nb, n):
    prev = blas_threads_local(1)      # see blas.py
    status = slogdet_core(carray(ap, (nb, n, n)), carray(sp, (nb,)), carray(lp, (nb,)))
    blas_threads_local(prev)
    return status


def _eigh_c(ap, wp, vp, nb, n, lower):
    prev = blas_threads_local(1)      # see blas.py
    status = eigh_core(carray(ap, (nb, n, n)), lower, carray(wp, (nb, n)), carray(vp, (nb, n, n)))
    blas_threads_local(prev)
    return status


def _svd_c(ap, up, sp, vp, nb, m, n, full, hermitian):
    prev = blas_threads_local(1)      # see blas.py
    k = min(m, n)
    um, vn = (m, n) if full else (k, k)
    status = svd_core(carray(ap, (nb, m, n)), full, hermitian, carray(up, (nb, m, um)), carray(sp, (nb, k)),
                      carray(vp, (nb, vn, n)))
    blas_threads_local(prev)
    return status


def _svdvals_c(ap, sp, nb, m, n, hermitian):
    prev = blas_threads_local(1)      # see blas.py
    status = svdvals_core(carray(ap, (nb, m, n)), hermitian, carray(sp, (nb, min(m, n))))
    blas_threads_local(prev)
    return status


def _qr_c(ap, qp, rp, nb, m, n, complete):
    prev = blas_threads_local(1)      # see blas.py
    mc = m if complete else min(m, n)
    status = qr_core(carray(ap, (nb, m, n)), complete, carray(qp, (nb, m, mc)), carray(rp, (nb, mc, n)))
    blas_threads_local(prev)
    return status


def _pinv_c(ap, op, nb, m, n, rcond, hermitian):
    prev = blas_threads_local(1)      # see blas.py
    status = pinv_core(carray(ap, (nb, m, n)), rcond, hermitian, carray(op, (nb, n, m)))
    blas_threads_local(prev)
    return status


def _expm_c(ap, op, nb, n):
    prev = blas_threads_local(1)      # see blas.py
    status = expm_core(carray(ap, (nb, n, n)), carray(op, (nb, n, n)))
    blas_threads_local(prev)
    return status


def _lstsq_c(ap, bp, xp, resp, rankp, sp, m, n, k, nres, rcond):
    prev = blas_threads_local(1)      # see blas.py
    status = lstsq_core(carray(ap, (m, n)), carray(bp, (m, k)), rcond, carray(xp, (n, k)), carray(resp, (nres,)),
                        carray(rankp, (1,)), carray(sp, (min(m, n),)))
    blas_threads_local(prev)
    return status


class Routine:
    """A C entry point: its function, its argument kinds (D: pointer to the routine's dtype,
    I: pointer to int32, i: int64, f: float64) and NumPy's message for a failure status."""

    __slots__ = ("fn", "kinds", "message")

    def __init__(self, fn, kinds, message):
        self.fn, self.kinds, self.message = fn, kinds, message


ROUTINES = {
    "lu": Routine(_lu_c, "DDIii", "Singular matrix"),
    "lu_solve": Routine(_lu_solve_c, "DIDDiiii", None),
    "cholesky": Routine(_cholesky_c, "DDii", "Matrix is not positive definite"),
    "solve_triangular": Routine(_solve_triangular_c, "DDDiiiiii", "singular matrix"),
    # a float64 solve with many right-hand sides, in column blocks on Numba's threads
    # (ops_linalg): the checks first, then one block per call
    "solve_triangular_ready": Routine(_solve_triangular_ready_c, "DDiiii", None),
    "solve_triangular_cols": Routine(_solve_triangular_cols_c, "DDDiiiiiiii", None),
    "slogdet": Routine(_slogdet_c, "DDDii", None),
    "eigh": Routine(_eigh_c, "DDDiii", "Eigenvalues did not converge"),
    "svd": Routine(_svd_c, "DDDDiiiii", "SVD did not converge"),
    "svdvals": Routine(_svdvals_c, "DDiiii", "SVD did not converge"),
    "qr": Routine(_qr_c, "DDDiiii", "Incorrect argument found while performing QR factorization"),
    "pinv": Routine(_pinv_c, "DDiiifi", "SVD did not converge"),
    "lstsq": Routine(_lstsq_c, "DDDDIDiiiif", "SVD did not converge in Linear Least Squares"),
    "expm": Routine(_expm_c, "DDii", None),
}

_NB = {"D": None, "I": types.CPointer(types.int32), "i": types.int64, "f": types.float64}
_OPTS = {"error_model": "numpy"}
_LOCK = threading.Lock()
_COMPILED = {}      # (name, dtype) -> CFunc (kept alive: kernels call its address)


def _symbol(name, dtype):
    return f"jitgraph_la_{name}_{np.dtype(dtype).name}_{ABI}"


def _c_signature(kinds, dtype, pointer):
    scalar = numba.from_dtype(np.dtype(dtype))
    args = [(pointer(scalar) if k == "D" else pointer(types.int32) if k == "I" else _NB[k]) for k in kinds]
    return types.int64(*args)


def compiled(name, dtype):
    """The C callback of routine `name` for `dtype`, compiled (or loaded from the cache) and
    registered under its symbol."""
    key = (name, np.dtype(dtype).name)
    with _LOCK:
        cf = _COMPILED.get(key)
        if cf is None:
            r = ROUTINES[name]
            sig = sigutils.normalize_signature(_c_signature(r.kinds, dtype, types.CPointer))
            cf = CFunc(r.fn, sig, locals={}, options=dict(_OPTS))
            cf._cache = CheckedCache(r.fn, helpers_cache_dir(), check=private_dir)
            cf.compile()
            llvm.add_symbol(_symbol(name, dtype), cf.address)
            _COMPILED[key] = cf
    return cf


def _pointer_args(name, dtype):
    """A function turning the arguments a kernel passes (NumPy's `.ctypes` objects of arrays,
    sizes, floats) into the C routine's (typed pointers, ints, floats)."""
    kinds = ROUTINES[name].kinds
    ptr = {"D": ctypes.POINTER(np.ctypeslib.as_ctypes_type(np.dtype(dtype))), "I": ctypes.POINTER(ctypes.c_int32)}
    conv = {"i": int, "f": float}

    def convert(args):
        return [a.data_as(ptr[k]) if k in ptr else conv[k](a) for k, a in zip(kinds, args)]
    return convert


def _python_routine(name, dtype, fn):
    convert = _pointer_args(name, dtype)

    def call(*args):
        return fn(*convert(args))
    call.__name__ = f"{name}_{np.dtype(dtype).name}"
    return call


def _address_routine(name, dtype, address):
    """A Python function calling the compiled routine at `address` with the arguments a kernel
    passes: arrays' `.ctypes` objects go in as their addresses (`void *`), not converted to
    typed pointers (`data_as`): a 2 x 2 solve's call took 8.5 us that way, 5.2 us this way."""
    kinds = ROUTINES[name].kinds
    c_arg = {"D": ctypes.c_void_p, "I": ctypes.c_void_p, "i": ctypes.c_int64, "f": ctypes.c_double}
    fn = ctypes.CFUNCTYPE(ctypes.c_int64, *(c_arg[k] for k in kinds))(address)
    pointers = tuple(k in "DI" for k in kinds)

    def call(*args):
        return fn(*[a.data if p else a for p, a in zip(pointers, args)])
    call.__name__ = f"{name}_{np.dtype(dtype).name}"
    return call


def external(name, dtype, njit, abi, python=False):
    """What a kernel module calls routine `name` for `dtype` through, compiling or loading the
    routine now (so its symbol exists before the kernel compiles or loads): a Numba external
    function for compiled code, or, with `python` (an entry function that runs as Python), a
    Python function calling the compiled routine. When `njit` is not Numba's (Python mode) the
    routine itself runs as Python on NumPy. `abi` is the ABI the kernel was generated against
    (this module's)."""
    if abi != ABI:
        raise RuntimeError(f"jitgraph: a kernel generated for linalg routines {abi} met routines {ABI}")
    if njit is not numba.njit:
        return _python_routine(name, dtype, ROUTINES[name].fn)
    cf = compiled(name, dtype)
    if python:
        return _address_routine(name, dtype, cf.address)
    sig = _c_signature(ROUTINES[name].kinds, dtype, lambda t: types.voidptr)
    return types.ExternalFunction(_symbol(name, dtype), sig)
