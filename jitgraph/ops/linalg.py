"""Linear algebra: the `np.linalg` functions, their LAPACK primitives and their adjoints.

Primitives (each one LAPACK call per matrix of a stack; the back ends loop over
the batch dimensions):

* `lu` (a) -> (lu, piv): LAPACK's getrf of float64 a (..., n, n): L (unit diagonal, not
  stored) and U in one (..., n, n) array, and the row interchanges (..., n) (int32, 0-based:
  row k was swapped with row piv[k], in order);
* `lu_solve` (a, lu, piv, b) -> x with op(a) x = b (op(a) = a, or a^T with `trans`) for float64
  b (..., n, k), from the factorization of a: np.linalg.solve is `lu` then `lu_solve`, so the
  solves of one matrix (an implicit time step's, and the adjoint solve of its backward pass,
  which uses the same factorization transposed) share one factorization, which CSE finds.
  `a` itself is an operand only for the gradient, which goes to it (`lu` has none);
* `solve_triangular` (a, b) -> x with op(a) x = b, a lower or upper triangular (`lower`),
  op(a) = a or a^T (`trans`), a unit diagonal taken as read (`unit`): SciPy's
  solve_triangular, and `solve` by a Cholesky factor or its transpose;
* `cholesky` (a) -> L, reading the lower triangle;
* `slogdet` (a) -> (sign, logabsdet);
* `eigh` (a) -> (w, v), reading one triangle (`lower`);
* `svd` (a) -> (u, s, vh), or (s,) without `compute_uv`; `hermitian` reads the lower
  triangle, as NumPy's eigh-based path does;
* `qr` (a) -> (q, r) (`complete` only where it changes the shapes: m > n);
* `pinv` (a) -> the pseudo-inverse (its own primitive: the gradient through the SVD
  is undefined at repeated singular values, pinv's is not);
* `lstsq` (a, b) -> (x, residuals, rank, s) for 2-D a and b.

The tuple-valued ones (`Primitive.multiple`) carry `out_avals` and are read by
`proj` nodes, like control flow. NumPy's semantics are kept: integers and
booleans compute in float64, float32 operands give float32 results (NumPy
computes in float64 and rounds, as the compiled routines do), `inv` is `solve`
against the identity (NumPy's own method), `det` is sign * exp(logabsdet)
(NumPy's formula), `norm` is built from elementwise ops, reductions and `svd`.
Eagerly and in the interpreter the values are NumPy's own; compiled, they match
them to rounding (the same LAPACK routines, SciPy's build), except that a matrix
holding inf or nan gives nan results (or NumPy's "SVD did not converge") where
NumPy's exact nan pattern depends on LAPACK's arithmetic.

scipy.linalg's functions (SCIPY_FUNCTIONS) are wrapped in their module once it is imported
(`special.library_functions`), as scipy.signal's are.

Gradients follow the standard matrix-calculus results; where NumPy reads only
one triangle of its operand (cholesky, eigh, hermitian svd/pinv) the adjoint
lands on that triangle. Caveats (undefined points) are in each function's
docstring.
"""
import builtins
import operator
from collections import namedtuple

import numpy as np

from ..core import EagerBox, Tensor, bind
from ..errors import NotSupportedError, ShapeError, where
from ..numpy_api import (as_operand, broadcast_shapes, broadcast_to, cast, keepdims_shape, norm_axes,
                         norm_axis, reshape, shape_of, swapaxes)
from .elementwise import (absolute, add, divide, equal, exp, multiply, not_equal, power, sqrt, subtract,
                          where_)
from .products import dot, matmul
from .reduce import amax, amin, sum
from .registry import ZERO_GRADIENT, implements, register
from .index import getitem
from .shape import concatenate, expand_dims, moveaxis
from .special import library_functions

TUPLE = np.dtype(object)
LinAlgError = np.linalg.LinAlgError

_np_linalg = getattr(np.linalg, "_linalg", None)


def _result_type(name, fields):
    """NumPy's named result tuple (EighResult, ...), or an equal one where NumPy has none."""
    return getattr(_np_linalg, name, None) or namedtuple(name, fields)


EighResult = _result_type("EighResult", "eigenvalues eigenvectors")
SVDResult = _result_type("SVDResult", "U S Vh")
QRResult = _result_type("QRResult", "Q R")
SlogdetResult = _result_type("SlogdetResult", "sign logabsdet")


# ---- operands ---------------------------------------------------------------------------------
def _float_dtype(*xs):
    """The dtype NumPy's linalg returns (`_commonType`): float32 when every operand is float32,
    else float64 (integers and booleans compute in float64)."""
    dts = [np.dtype(x.dtype) for x in xs]
    for d in dts:
        if d.kind == "c":
            raise NotSupportedError(f"np.linalg of complex arrays is not supported{where()}")
        if d.kind == "f" and d not in (np.float32, np.float64):
            raise TypeError(f"array type {d.name} is unsupported in linalg{where()}")
    return np.dtype(np.float32) if all(d == np.float32 for d in dts) else np.dtype(np.float64)


def _operands(*xs):
    return [as_operand(x) for x in xs]


def _traced(*xs):
    return builtins.any(isinstance(x, Tensor) for x in xs)


def _stacked_2d(a):
    nd = len(shape_of(a))
    if nd < 2:
        raise LinAlgError(f"{nd}-dimensional array given. Array must be at least two-dimensional{where()}")


def _stacked_square(a):
    _stacked_2d(a)
    s = shape_of(a)
    if s[-1] != s[-2]:
        raise LinAlgError(f"Last 2 dimensions of the array must be square{where()}")


def _two_d(*xs):
    for x in xs:
        nd = len(shape_of(x))
        if nd != 2:
            raise LinAlgError(f"{nd}-dimensional array given. Array must be two-dimensional{where()}")


def _T(x):
    """Each matrix of a stack transposed."""
    return swapaxes(x, -1, -2)


def _eye(n, dtype):
    return np.eye(n, dtype=dtype)


def _diag_embed(v):
    """(..., n) -> (..., n, n) diagonal matrices."""
    n = shape_of(v)[-1]
    return multiply(expand_dims(v, -1), _eye(n, v.dtype))


def _mask(n, dtype, k=0, upper=False):
    """Constant 0/1 matrix: the lower (upper) triangle from diagonal k (-k)."""
    m = np.tril(np.ones((n, n)), k)
    return (m.T if upper else m).astype(dtype)


def _from_triangle(g, lower):
    """The adjoint for a function that reads one triangle of its square operand and takes the
    other from symmetry, given g, its adjoint as a function of the symmetric matrix: the
    strict triangle gets g + g^T, the diagonal g's own."""
    n = shape_of(g)[-1]
    w = _mask(n, np.float64, -1, upper=not lower) + 0.5 * np.eye(n)
    return multiply(add(g, _T(g)), w.astype(g.dtype))


def _part(t, node, k):
    """Element k of tuple-valued `node`'s value t (arrays, or a recording value)."""
    shape, dtype = node.p["out_avals"][k]
    return bind("proj", t, index=k, shape=tuple(shape), dtype=dtype)


def _bind_multi(op, args, params, avals):
    """Bind tuple-valued primitive `op`; returns its elements (proj values)."""
    avals = tuple((tuple(int(d) for d in s), np.dtype(d)) for s, d in avals)
    t = bind(op, *args, **dict(params, out_avals=avals))
    return [bind("proj", t, index=k, shape=s, dtype=d) for k, (s, d) in enumerate(avals)]


# ---- shape rules -------------------------------------------------------------------------------
def _float_aval(aval, op):
    shape, dtype = tuple(aval[0]), np.dtype(aval[1])
    if dtype not in (np.float32, np.float64):
        raise ShapeError(f"{op}: expected a float32 or float64 operand, got {dtype.name}")
    if len(shape) < 2:
        raise ShapeError(f"{op}: expected a stack of matrices (..., m, n), got shape {shape}")
    return shape, dtype


def _square_aval(aval, op):
    shape, dtype = _float_aval(aval, op)
    if shape[-1] != shape[-2]:
        raise ShapeError(f"{op}: expected square matrices (..., n, n), got shape {shape}")
    return shape, dtype


def _check_avals(op, got, want):
    want = tuple((tuple(s), np.dtype(d)) for s, d in want)
    got = tuple((tuple(s), np.dtype(d)) for s, d in got)
    if got != want:
        raise ShapeError(f"{op}: out_avals {got} do not match the operands ({want})")
    return (), TUPLE


def _solve_abs(a, b, op="solve"):
    sa, da = _square_aval(a, op)
    sb, db = _float_aval(b, op)
    if len(sb) != len(sa) or sb[:-2] != sa[:-2] or sb[-2] != sa[-1] or db != da:
        raise ShapeError(f"{op}: a {da.name}{list(sa)} and b {db.name}{list(sb)} do not fit "
                         "(need (..., n, n) and (..., n, k) of one dtype and equal batch dims)")
    return sb, db


def _lu_avals(shape):
    return [(tuple(shape), np.dtype(np.float64)), (tuple(shape[:-1]), np.dtype(np.int32))]


def _lu_abs(a, out_avals):
    shape, dtype = _square_aval(a, "lu")
    if dtype != np.float64:
        raise ShapeError(f"lu: expected a float64 operand, got {dtype.name}")
    return _check_avals("lu", out_avals, _lu_avals(shape))


def _lu_solve_abs(a, lu, piv, b, trans):
    sa, _ = _square_aval(a, "lu_solve")
    if tuple(lu[0]) != sa or np.dtype(lu[1]) != np.float64 or tuple(piv[0]) != sa[:-1] \
            or np.dtype(piv[1]) != np.int32:
        raise ShapeError(f"lu_solve: the factorization ({lu}, {piv}) is not one of a matrix of shape {sa}")
    sb, db = _solve_abs(a, b, "lu_solve")
    if db != np.float64:
        raise ShapeError(f"lu_solve: expected float64 operands, got {db.name}")
    return sb, db


def _lu_impl(a, out_avals):
    """LAPACK's getrf (SciPy's) on each matrix; a matrix with infinities or NaNs gives a NaN
    factorization (its solves give NaN, as the compiled routine's); LinAlgError("Singular
    matrix") for an exactly singular one, as np.linalg.solve raises."""
    from scipy.linalg.lapack import dgetrf
    a = np.asarray(a, dtype=np.float64)
    lu = np.empty(a.shape)
    piv = np.empty(a.shape[:-1], np.int32)
    for i in np.ndindex(a.shape[:-2]):
        if not np.isfinite(a[i]).all():
            lu[i] = np.nan
            piv[i] = np.arange(a.shape[-1])
            continue
        lu[i], piv[i], info = dgetrf(a[i])
        if info > 0:
            raise np.linalg.LinAlgError("Singular matrix")
    return lu, piv


def _lu_solve_impl(a, lu, piv, b, trans):
    """SciPy's lu_solve (LAPACK's getrs) on each matrix; NaN for a NaN factorization or a
    right-hand side with infinities or NaNs (as the compiled routine)."""
    from scipy.linalg import lu_solve
    x = np.empty(b.shape)
    for i in np.ndindex(b.shape[:-2]):
        if not (np.isfinite(lu[i]).all() and np.isfinite(b[i]).all()):
            x[i] = np.nan
            continue
        x[i] = lu_solve((lu[i], piv[i]), b[i], trans=1 if trans else 0, check_finite=False)
    return x


def _solve_triangular_abs(a, b, lower, trans, unit):
    return _solve_abs(a, b, "solve_triangular")


def _solve_triangular_impl(a, b, lower, trans, unit):
    """SciPy's solve_triangular on each matrix of the stack, in float64 (as the compiled
    routine computes), rounded to the operands' dtype."""
    from scipy.linalg import solve_triangular
    out = np.empty(b.shape, b.dtype)
    for idx in np.ndindex(a.shape[:-2]):
        out[idx] = solve_triangular(a[idx].astype(np.float64), b[idx].astype(np.float64), trans=int(trans),
                                    lower=lower, unit_diagonal=unit, check_finite=False)
    return out


def _cholesky_abs(a):
    return _square_aval(a, "cholesky")


def _slogdet_avals(shape, dtype):
    return [(shape[:-2], dtype), (shape[:-2], dtype)]


def _eigh_avals(shape, dtype):
    return [(shape[:-1], dtype), (shape, dtype)]


def _svd_avals(shape, dtype, full_matrices, compute_uv):
    m, n = shape[-2:]
    k, batch = min(m, n), shape[:-2]
    if not compute_uv:
        return [(batch + (k,), dtype)]
    um, vn = (m, n) if full_matrices else (k, k)
    return [(batch + (m, um), dtype), (batch + (k,), dtype), (batch + (vn, n), dtype)]


def _qr_avals(shape, dtype, complete):
    m, n = shape[-2:]
    k = m if complete else min(m, n)
    return [(shape[:-2] + (m, k), dtype), (shape[:-2] + (k, n), dtype)]


def _lstsq_avals(sa, sb, dtype):
    (m, n), k = sa, sb[-1]
    return [((n, k), dtype), ((k,) if m > n else (0,), dtype), ((), np.dtype(np.int32)),
            ((min(m, n),), dtype)]


def _slogdet_abs(a, out_avals):
    shape, dtype = _square_aval(a, "slogdet")
    return _check_avals("slogdet", out_avals, _slogdet_avals(shape, dtype))


def _eigh_abs(a, lower, out_avals):
    shape, dtype = _square_aval(a, "eigh")
    return _check_avals("eigh", out_avals, _eigh_avals(shape, dtype))


def _svd_abs(a, full_matrices, compute_uv, hermitian, out_avals):
    shape, dtype = (_square_aval if hermitian else _float_aval)(a, "svd")
    return _check_avals("svd", out_avals, _svd_avals(shape, dtype, full_matrices, compute_uv))


def _qr_abs(a, complete, out_avals):
    shape, dtype = _float_aval(a, "qr")
    return _check_avals("qr", out_avals, _qr_avals(shape, dtype, complete))


def _pinv_abs(a, rcond, hermitian):
    shape, dtype = (_square_aval if hermitian else _float_aval)(a, "pinv")
    return shape[:-2] + (shape[-1], shape[-2]), dtype


def _lstsq_abs(a, b, rcond, out_avals):
    sa, da = _float_aval(a, "lstsq")
    sb, db = _float_aval(b, "lstsq")
    if len(sa) != 2 or len(sb) != 2 or sa[0] != sb[0] or da != db:
        raise ShapeError(f"lstsq: a {da.name}{list(sa)} and b {db.name}{list(sb)} do not fit "
                         "(need 2-D (m, n) and (m, k) of one dtype)")
    return _check_avals("lstsq", out_avals, _lstsq_avals(sa, sb, da))


# ---- NumPy reference implementations ---------------------------------------------------------
def _lstsq_impl(a, b, rcond, out_avals):
    a, b = np.asarray(a), np.asarray(b)
    x, res, rank, s = np.linalg.lstsq(a, b, rcond=rcond)
    want = out_avals[1][0]
    if res.shape != want:
        # NumPy leaves them out for a rank-deficient a; the static shape keeps them (see lstsq)
        r = b.astype(np.float64) - a.astype(np.float64) @ x.astype(np.float64)
        res = np.sum(r * r, axis=0).astype(x.dtype)
    return x, res, np.int32(rank), s


def _svd_impl(a, full_matrices, compute_uv, hermitian, out_avals):
    r = np.linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv, hermitian=hermitian)
    return tuple(r) if compute_uv else (r,)


# ---- flop counts (rough: the memory report's estimate) -----------------------------------------
def _cubic(node, x=0):
    """batch * m * n * min(m, n) of input x."""
    shape = node.inputs[x].shape
    m, n = shape[-2:]
    return int(np.prod(shape[:-2], dtype=np.int64)) * m * n * min(m, n)


def _lu_solve_flops(node):
    b = node.inputs[3].shape
    return 2 * int(np.prod(b, dtype=np.int64)) * b[-2]


# ---- adjoints ------------------------------------------------------------------------------------
def _gap_inverse(w):
    """F[..., i, j] = 1 / (w[j] - w[i]) off the diagonal, 0 on it (inf where w repeats)."""
    n = shape_of(w)[-1]
    d = subtract(expand_dims(w, -2), expand_dims(w, -1))
    eye = np.eye(n, dtype=bool)
    return where_(eye, 0.0, divide(1.0, where_(eye, 1.0, d)))


def _lu_solve_b(g, out, a, lu, piv, b, trans):
    """op(a) x = b: b's adjoint is op(a)^-T g, a solve with the same factorization."""
    return bind("lu_solve", a, lu, piv, g, trans=not trans)


def _lu_solve_a(g, out, a, lu, piv, b, trans):
    """-gb x^T for a x = b; -(x gb^T) for a^T x = b (gb: b's adjoint, shared by CSE)."""
    gb = _lu_solve_b(g, out, a, lu, piv, b, trans)
    return -(matmul(out, _T(gb)) if trans else matmul(gb, _T(out)))


def _solve_triangular_b(g, out, a, b, lower, trans, unit):
    return _solve_tri(a, g, lower, not trans, unit)


def _solve_triangular_a(g, out, a, b, lower, trans, unit):
    """x = op(a)^-1 b: op(a)'s adjoint is -op(a)^-T g x^T, on the triangle read (without the
    diagonal when it is taken as ones)."""
    gb = _solve_tri(a, g, lower, not trans, unit)
    ga = matmul(out, _T(gb)) if trans else matmul(gb, _T(out))
    n = shape_of(a)[-1]
    return multiply(ga, -_mask(n, np.float64, -1 if unit else 0, upper=not lower).astype(g.dtype))


def _cholesky_vjp(g, L, a):
    """A = L L^T: dL = L Phi(L^-1 dA L^-T) with Phi the lower triangle, diagonal halved, so the
    adjoint is L^-T Phi(L^T g) L^-1, on the lower triangle (NumPy reads only that one): two
    triangular solves (2 n^3 flops against 5 n^3 through L's inverse and two products)."""
    n = shape_of(L)[-1]
    phi = multiply(matmul(_T(L), g), (_mask(n, np.float64) - 0.5 * np.eye(n)).astype(g.dtype))
    right = _T(_solve_tri(L, _T(phi), True, True))       # Phi L^-1
    return _from_triangle(_solve_tri(L, right, True, True), lower=True)


def _slogdet_vjp(cts, node, value_of):
    """d logabsdet = tr(A^-1 dA); the sign has derivative zero where it is defined."""
    g = cts[1]
    if g is None:
        return [None]
    a = value_of(node.inputs[0])
    n = shape_of(a)[-1]
    inv_t = _solve(_T(a), broadcast_to(_eye(n, a.dtype), shape_of(a)))
    return [multiply(expand_dims(expand_dims(g, -1), -1), inv_t)]


def _eigh_vjp(cts, node, value_of):
    """A = V diag(w) V^T: adjoint V (diag(w_bar) + F o (V^T V_bar)) V^T, F from the eigengaps."""
    gw, gv = cts
    t = value_of(node)
    w, v = _part(t, node, 0), _part(t, node, 1)
    inner = None
    if gw is not None:
        inner = _diag_embed(gw)
    if gv is not None:
        f = multiply(_gap_inverse(w), matmul(_T(v), gv))
        inner = f if inner is None else add(inner, f)
    if inner is None:
        return [None]
    return [_from_triangle(matmul(v, matmul(inner, _T(v))), node.p["lower"])]


def _svd_adjoint(u, s, vh, gu, gs, gvh):
    """The adjoint of A = U diag(s) Vh (reduced: U (m, k), Vh (k, n)) for cotangents gu, gs, gvh
    (None: none), after Townsend, "Differentiating the Singular Value Decomposition" (2016)."""
    m, n = shape_of(u)[-2], shape_of(vh)[-1]
    k = shape_of(s)[-1]
    v = _T(vh)
    gv = _T(gvh) if gvh is not None else None
    inner = _diag_embed(gs) if gs is not None else None
    if gu is not None or gv is not None:
        s2 = multiply(s, s)
        f = _gap_inverse(s2)
        if gu is not None:
            j = multiply(f, matmul(_T(u), gu))
            term = multiply(add(j, _T(j)), expand_dims(s, -2))          # (J + J^T) S
            inner = term if inner is None else add(inner, term)
        if gv is not None:
            kk = multiply(f, matmul(_T(v), gv))
            term = multiply(expand_dims(s, -1), add(kk, _T(kk)))        # S (K + K^T)
            inner = term if inner is None else add(inner, term)
    out = matmul(u, matmul(inner, vh)) if inner is not None else None
    if gu is not None and m > k:        # (I - U U^T) gu S^-1 V^T
        proj = subtract(gu, matmul(u, matmul(_T(u), gu)))
        term = matmul(divide(proj, expand_dims(s, -2)), vh)
        out = term if out is None else add(out, term)
    if gv is not None and n > k:        # U S^-1 gv^T (I - V V^T)
        proj = subtract(gv, matmul(v, matmul(vh, gv)))
        term = matmul(u, divide(_T(proj), expand_dims(s, -1)))
        out = term if out is None else add(out, term)
    return out


def _svd_vjp(cts, node, value_of):
    p = node.p
    a = value_of(node.inputs[0])
    if not p["compute_uv"]:
        if cts[0] is None:
            return [None]
        u, s, vh = svd(a, full_matrices=False, hermitian=p["hermitian"])
        ga = matmul(u, multiply(expand_dims(cts[0], -1), vh))
    else:
        t = value_of(node)
        u, s, vh = (_part(t, node, k) for k in range(3))
        gu, gs, gvh = cts
        m, n = shape_of(a)[-2:]
        k = min(m, n)
        if p["full_matrices"]:
            # the extra columns of U (rows of Vh) are any orthonormal completion: their
            # cotangents are left out, like the zero-derivative rows of a complete QR's R
            u, vh = u[..., :, :k], vh[..., :k, :]
            gu = gu[..., :, :k] if gu is not None else None
            gvh = gvh[..., :k, :] if gvh is not None else None
        ga = _svd_adjoint(u, s, vh, gu, gs, gvh)
    if ga is None:
        return [None]
    return [_from_triangle(ga, lower=True) if p["hermitian"] else ga]


def _copyltu(m):
    """The lower triangle of m mirrored onto the upper one (the upper one is not read: NaN or
    inf there stays out, as in LAPACK's routines that read one triangle)."""
    n = shape_of(m)[-1]
    low = where_(_mask(n, bool), m, 0.0)
    return add(low, _T(where_(_mask(n, bool, -1), m, 0.0)))


def _qr_square_adjoint(q, r, gq, gr):
    """Adjoint of A = Q R for m >= n (Q (m, n), R (n, n)): with M = R gr^T - gq^T Q,
    A_bar = (gq + Q copyltu(M)) R^-T (Liao et al. 2019)."""
    m = None
    if gr is not None:
        m = matmul(r, _T(gr))
    if gq is not None:
        qq = matmul(_T(gq), q)
        m = -qq if m is None else subtract(m, qq)
    b = matmul(q, _copyltu(m))
    if gq is not None:
        b = add(b, gq)
    return _T(_solve(r, _T(b)))


def _qr_vjp(cts, node, value_of):
    """QR's adjoint (R invertible); a wide A = [X | Y] is QR of X with R = [U | Q^T Y]."""
    gq, gr = cts
    if gq is None and gr is None:
        return [None]
    a = value_of(node.inputs[0])
    t = value_of(node)
    q, r = _part(t, node, 0), _part(t, node, 1)
    m, n = shape_of(a)[-2:]
    if m >= n:
        if node.p["complete"]:
            # Q's columns past n complete it arbitrarily (cotangents left out); R's rows past
            # n are zeros
            q, r = q[..., :, :n], r[..., :n, :]
            gq = gq[..., :, :n] if gq is not None else None
            gr = gr[..., :n, :] if gr is not None else None
        return [_qr_square_adjoint(q, r, gq, gr)]
    y, u = a[..., :, m:], r[..., :, :m]
    gu = gr[..., :, :m] if gr is not None else None
    gy = None
    if gr is not None:
        gv = gr[..., :, m:]
        gy = matmul(q, gv)
        extra = matmul(y, _T(gv))
        gq = extra if gq is None else add(gq, extra)
    gx = _qr_square_adjoint(q, u, gq, gu)
    if gy is None:
        gy = np.zeros(shape_of(y), a.dtype)
    return [concatenate([gx, gy], axis=-1)]


def _pinv_adjoint(g, p, a):
    """dP = -P dA P + P P^T dA^T (I - A P) + (I - P A) dA^T P^T P (Golub and Pereyra 1973), where
    the rank is locally constant."""
    t1 = -matmul(_T(p), matmul(g, _T(p)))
    t2 = matmul(matmul(_T(g), p), _T(p))
    t2 = subtract(t2, matmul(a, matmul(p, t2)))
    t3 = matmul(_T(p), matmul(p, _T(g)))
    t3 = subtract(t3, matmul(matmul(t3, p), a))
    return add(add(t1, t2), t3)


def _pinv_vjp(g, out, a, rcond, hermitian):
    if not hermitian:
        return _pinv_adjoint(g, out, a)
    # NumPy's hermitian path (eigh) reads the lower triangle: out is the pseudo-inverse of the
    # symmetric matrix that triangle defines
    return _from_triangle(_pinv_adjoint(g, out, _copyltu(a)), lower=True)


def _lstsq_vjp(cts, node, value_of):
    """x = pinv(a) b (the minimum-norm least-squares solution), residuals = sum((b - a x)^2),
    s = the singular values; valid where the rank is locally constant."""
    gx, gres, _, gs = cts
    a, b = (value_of(i) for i in node.inputs)
    t = value_of(node)
    x = _part(t, node, 0)
    ga = gb = None

    def acc(u, v):
        return v if u is None else add(u, v)

    if gx is not None or gres is not None:
        r = subtract(b, matmul(a, x))
    if gx is not None:
        p = pinv(a, rcond=node.p["rcond"])
        gb = matmul(_T(p), gx)
        ga = add(-matmul(gb, _T(x)), matmul(r, _T(matmul(p, gb))))
        px = matmul(_T(p), x)
        ga = add(ga, matmul(px, _T(subtract(gx, matmul(p, matmul(a, gx))))))
    if gres is not None and shape_of(gres)[0]:
        rg = multiply(r, expand_dims(gres, 0))
        gb = acc(gb, multiply(rg, 2.0))
        ga = acc(ga, multiply(matmul(rg, _T(x)), -2.0))
    if gs is not None:
        u, _, vh = svd(a, full_matrices=False)
        ga = acc(ga, matmul(u, multiply(expand_dims(gs, -1), vh)))
    return [ga, gb]


# ---- primitives ----------------------------------------------------------------------------------
def _marks(onnx):
    """The CUDA and ONNX marks of a LAPACK primitive."""
    return {"host_only": "LAPACK routines (np.linalg.*)", "onnx": onnx}


register("lu", "linalg", _lu_abs, _lu_impl, ZERO_GRADIENT, multiple=True,
         flops=lambda node: 2 * _cubic(node) // 3, **_marks("ONNX has no LU factorization operator"))
register("lu_solve", "linalg", _lu_solve_abs, _lu_solve_impl, (_lu_solve_a, None, None, _lu_solve_b),
         flops=_lu_solve_flops, **_marks("ONNX has no linear-solve operator"))
register("solve_triangular", "linalg", _solve_triangular_abs, _solve_triangular_impl,
         (_solve_triangular_a, _solve_triangular_b),
         flops=lambda node: int(np.prod(node.inputs[1].shape, dtype=np.int64)) * node.inputs[1].shape[-2],
         **_marks("ONNX has no triangular-solve operator"))
register("cholesky", "linalg", _cholesky_abs, lambda a: np.linalg.cholesky(a),
         (lambda g, out, a: _cholesky_vjp(g, out, a),), flops=lambda node: _cubic(node) // 3,
         **_marks("ONNX has no Cholesky operator"))
register("slogdet", "linalg", _slogdet_abs, lambda a, out_avals: tuple(np.linalg.slogdet(a)),
         _slogdet_vjp, multiple=True, flops=lambda node: 2 * _cubic(node) // 3,
         **_marks("ONNX has no log-determinant operator (its Det has no sign/log form, and ONNX "
                  "Runtime runs Det in float32 only)"))
register("eigh", "linalg", _eigh_abs,
         lambda a, lower, out_avals: tuple(np.linalg.eigh(a, "L" if lower else "U")),
         _eigh_vjp, multiple=True, flops=lambda node: 9 * _cubic(node),
         **_marks("ONNX has no eigendecomposition operator"))
register("svd", "linalg", _svd_abs, _svd_impl, _svd_vjp, multiple=True,
         flops=lambda node: 12 * _cubic(node), **_marks("ONNX has no SVD operator"))
register("qr", "linalg", _qr_abs,
         lambda a, complete, out_avals: tuple(np.linalg.qr(a, "complete" if complete else "reduced")),
         _qr_vjp, multiple=True, flops=lambda node: 4 * _cubic(node), **_marks("ONNX has no QR operator"))
register("pinv", "linalg", _pinv_abs,
         lambda a, rcond, hermitian: np.linalg.pinv(a, rcond=rcond, hermitian=hermitian),
         (_pinv_vjp,), flops=lambda node: 14 * _cubic(node), **_marks("ONNX has no pseudo-inverse operator"))
def _expm_impl(a):
    import scipy.linalg
    return scipy.linalg.expm(a)


def _expm_vjp(g, out, a):
    """The adjoint of exp(a) is the Frechet derivative of exp at a^T in the direction g: the
    upper right block of exp([[a^T, g], [0, a^T]]) (Mathias 1996)."""
    n = a.shape[-1]
    at = _T(a)
    top = concatenate([at, g], axis=-1)
    bottom = concatenate([broadcast_to(cast(0.0, a.dtype), tuple(a.shape)), at], axis=-1)
    return bind("expm", concatenate([top, bottom], axis=-2))[..., :n, n:]


register("expm", "linalg", lambda a: _square_aval(a, "expm"), _expm_impl, (_expm_vjp,),
         flops=lambda node: 20 * _cubic(node), **_marks("ONNX has no matrix exponential operator"))
register("lstsq", "linalg", _lstsq_abs, _lstsq_impl, _lstsq_vjp, multiple=True,
         flops=lambda node: 12 * _cubic(node), **_marks("ONNX has no least-squares operator"))


# ---- the NumPy front end -------------------------------------------------------------------------
def _solve(a, b):
    """x with a x = b for a (..., n, n), b (..., n, k) of equal batch dims and one dtype. A
    traced `a` known to be triangular (a Cholesky factor or its transpose) is solved as one:
    n^2 k flops instead of an LU factorization's 2/3 n^3 + 2 n^2 k."""
    if _traced(a, b):
        lower = _triangle(a)
        if lower is not None:
            return _solve_tri(a, b, lower)
        dtype = a.dtype
        a, b = cast(a, np.float64), cast(b, np.float64)
        lu, piv = _bind_multi("lu", [a], {}, _lu_avals(shape_of(a)))
        return cast(bind("lu_solve", a, lu, piv, b, trans=False), dtype)
    return np.linalg.solve(a, b)


def _triangle(a):
    """True (False) when traced `a` is a lower (upper) triangular matrix by construction: a
    Cholesky factor, or one with its last two axes swapped; else None (a constant `a` too)."""
    if not isinstance(a, Tensor):
        return None
    node = a.node
    if node.op == "cholesky":
        return True
    if node.op == "transpose" and node.inputs[0].op == "cholesky":
        nd = len(node.shape)
        if tuple(node.p["perm"]) == tuple(range(nd - 2)) + (nd - 1, nd - 2):
            return False
    return None


def _solve_tri(a, b, lower, trans=False, unit=False):
    """x with op(a) x = b, op(a) = a or a^T (`trans`), a lower or upper triangular (only that
    triangle is read; its diagonal taken as ones if `unit`)."""
    params = dict(lower=bool(lower), trans=bool(trans), unit=bool(unit))
    if _traced(a, b):
        return bind("solve_triangular", a, b, **params)
    return _solve_triangular_impl(np.asarray(a), np.asarray(b), **params)


@implements(np.linalg.solve)
def solve(a, b):
    """np.linalg.solve: b of one dimension is a vector (broadcast against a stack), otherwise a
    (stack of) matrices. A singular matrix raises LinAlgError("Singular matrix")."""
    a, b = _operands(a, b)
    _stacked_square(a)
    if not _traced(a, b):
        return np.linalg.solve(a, b)
    dt = _float_dtype(a, b)
    a, b = cast(a, dt), cast(b, dt)
    sa, sb = tuple(shape_of(a)), tuple(shape_of(b))
    n = sa[-1]
    if len(sb) == 1:
        if sb[0] != n:
            raise ValueError(f"solve1: Input operand 1 has a mismatch in its core dimension 0, with gufunc "
                             f"signature (m,m),(m)->(m) (size {sb[0]} is different from {n}){where()}")
        x = _solve(a, broadcast_to(reshape(b, (n, 1)), sa[:-2] + (n, 1)))
        return reshape(x, sa[:-1])
    if sb[-2] != n:
        raise ValueError(f"solve: Input operand 1 has a mismatch in its core dimension 0, with gufunc "
                         f"signature (m,m),(m,n)->(m,n) (size {sb[-2]} is different from {n}){where()}")
    batch = broadcast_shapes(sa[:-2], sb[:-2])
    return _solve(broadcast_to(a, batch + sa[-2:]), broadcast_to(b, batch + sb[-2:]))


@implements(np.linalg.inv)
def inv(a):
    """np.linalg.inv, as NumPy computes it: a solve against the identity."""
    a = as_operand(a)
    _stacked_square(a)
    if not _traced(a):
        return np.linalg.inv(a)
    a = cast(a, _float_dtype(a))
    n = shape_of(a)[-1]
    return _solve(a, broadcast_to(_eye(n, a.dtype), shape_of(a)))


@implements(np.linalg.slogdet)
def slogdet(a):
    """np.linalg.slogdet: (sign, log|det|). The sign has no gradient; log|det|'s is inv(a)^T,
    which needs an invertible a (LinAlgError otherwise)."""
    a = as_operand(a)
    _stacked_square(a)
    if not _traced(a):
        return np.linalg.slogdet(a)
    a = cast(a, _float_dtype(a))
    sign, logdet = _bind_multi("slogdet", [a], {}, _slogdet_avals(tuple(shape_of(a)), a.dtype))
    return SlogdetResult(sign, logdet)


@implements(np.linalg.det)
def det(a):
    """np.linalg.det, as NumPy computes it: sign * exp(logabsdet). Its gradient det * inv(a)^T
    needs an invertible a (LinAlgError otherwise)."""
    a = as_operand(a)
    _stacked_square(a)
    if not _traced(a):
        return np.linalg.det(a)
    sign, logdet = slogdet(a)
    return multiply(sign, exp(logdet))


@implements(np.linalg.cholesky)
def cholesky(a, /, *, upper=False):
    """np.linalg.cholesky: the lower factor L (a = L L^T), reading only a's lower triangle (with
    upper=True the upper factor, reading the upper triangle). A matrix that is not positive
    definite raises LinAlgError("Matrix is not positive definite"); the gradient lands on
    the triangle read."""
    a = as_operand(a)
    _stacked_square(a)
    if not _traced(a):
        return np.linalg.cholesky(a, upper=upper)
    a = cast(a, _float_dtype(a))
    if upper:
        return _T(bind("cholesky", _T(a)))
    return bind("cholesky", a)


@implements(np.linalg.eigh)
def eigh(a, UPLO="L"):
    """np.linalg.eigh: (eigenvalues ascending, eigenvectors), reading the UPLO triangle.

    Gradients: the eigenvalues' is V diag(w_bar) V^T, defined everywhere; the eigenvectors'
    is undefined where eigenvalues repeat (the eigenvectors are not unique there: expect inf or
    nan). The adjoint lands on the triangle read."""
    UPLO = str(UPLO).upper()
    if UPLO not in ("L", "U"):
        raise ValueError(f"UPLO argument must be 'L' or 'U'{where()}")
    a = as_operand(a)
    _stacked_square(a)
    if not _traced(a):
        return np.linalg.eigh(a, UPLO)
    a = cast(a, _float_dtype(a))
    w, v = _bind_multi("eigh", [a], {"lower": UPLO == "L"}, _eigh_avals(tuple(shape_of(a)), a.dtype))
    return EighResult(w, v)


@implements(np.linalg.eigvalsh)
def eigvalsh(a, UPLO="L"):
    """np.linalg.eigvalsh: the eigenvalues of eigh, ascending; their gradient V diag(w_bar) V^T
    is defined everywhere (repeated eigenvalues included)."""
    return eigh(a, UPLO)[0]


@implements(np.linalg.matrix_power)
def matrix_power(a, n):
    """np.linalg.matrix_power: a to the integer power n by NumPy's products (for n > 3, a's
    powers of two multiplied in bit by bit); a negative n inverts a first, n = 0 is the identity."""
    a = as_operand(a)
    _stacked_square(a)
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"exponent must be an integer{where()}") from None
    if not _traced(a):
        return np.linalg.matrix_power(a, n)
    if n == 0:
        return broadcast_to(_eye(shape_of(a)[-1], a.dtype), shape_of(a))
    if n < 0:
        a, n = inv(a), -n
    if n == 1:
        return a
    if n == 2:
        return matmul(a, a)
    if n == 3:
        return matmul(matmul(a, a), a)
    z = result = None
    while n > 0:
        z = a if z is None else matmul(z, z)
        n, bit = divmod(n, 2)
        if bit:
            result = z if result is None else matmul(result, z)
    return result


@implements(np.linalg.svd)
def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """np.linalg.svd: (U, S, Vh), or S alone without compute_uv; hermitian=True reads a's lower
    triangle (NumPy's eigh-based path).

    Gradients: the singular values' is U diag(s_bar) Vh, defined everywhere; the singular
    vectors' is undefined where singular values repeat (the vectors are not unique there:
    expect inf or nan), and, for a non-square a, where a singular value is 0.
    With full_matrices=True the columns of U (rows of Vh) past min(m, n) are an arbitrary
    orthonormal completion: their cotangents are left out (as PyTorch does)."""
    a = as_operand(a)
    (_stacked_square if hermitian else _stacked_2d)(a)
    if not _traced(a):
        return np.linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv, hermitian=hermitian)
    a = cast(a, _float_dtype(a))
    shape = tuple(shape_of(a))
    # full matrices only where they differ from the reduced ones (NumPy's hermitian path is square)
    full = bool(full_matrices) and shape[-1] != shape[-2] and not hermitian
    params = {"full_matrices": full, "compute_uv": bool(compute_uv), "hermitian": bool(hermitian)}
    parts = _bind_multi("svd", [a], params, _svd_avals(shape, a.dtype, full, bool(compute_uv)))
    return SVDResult(*parts) if compute_uv else parts[0]


@implements(np.linalg.qr)
def qr(a, mode="reduced"):
    """np.linalg.qr with mode 'reduced', 'complete' or 'r' ('raw' is not supported).

    The gradient needs R invertible (a of full rank). For a complete Q of a tall a, Q's
    columns past n are an arbitrary orthonormal completion: their cotangents are left out."""
    if mode in ("f", "full"):
        mode = "reduced"
    if mode not in ("reduced", "complete", "r"):
        if mode in ("raw", "e", "economic"):
            raise NotSupportedError(f"np.linalg.qr(mode={mode!r}) (Householder reflectors) is not "
                                    f"supported; use mode='reduced', 'complete' or 'r'{where()}")
        raise ValueError(f"Unrecognized mode '{mode}'{where()}")
    a = as_operand(a)
    _stacked_2d(a)
    if not _traced(a):
        return np.linalg.qr(a, mode)
    a = cast(a, _float_dtype(a))
    shape = tuple(shape_of(a))
    complete = mode == "complete" and shape[-2] > shape[-1]
    q, r = _bind_multi("qr", [a], {"complete": complete}, _qr_avals(shape, a.dtype, complete))
    return r if mode == "r" else QRResult(q, r)


def _rcond_value(rcond, what):
    if isinstance(rcond, Tensor):
        raise NotSupportedError(f"{what} must be a constant, not a traced value{where()}")
    r = np.asarray(rcond)
    if r.ndim:
        raise NotSupportedError(f"{what} must be a scalar (one cutoff for every matrix){where()}")
    return float(r)


@implements(np.linalg.pinv)
def pinv(a, rcond=None, hermitian=False, *, rtol=np._NoValue):
    """np.linalg.pinv (rcond or rtol, hermitian: a's lower triangle).

    Its gradient is the pseudo-inverse's own (Golub and Pereyra), valid where the rank does not
    change (no singular value at the cutoff); defined at repeated singular values."""
    a = as_operand(a)
    if not _traced(a):
        return np.linalg.pinv(a, rcond=rcond, hermitian=hermitian, rtol=rtol)
    if hermitian:
        _stacked_square(a)
    _stacked_2d(a)
    a = cast(a, _float_dtype(a))
    shape = tuple(shape_of(a))
    if rcond is None:
        if rtol is np._NoValue:
            rcond = 1e-15
        elif rtol is None:
            rcond = max(shape[-2:]) * np.finfo(a.dtype).eps
        else:
            rcond = rtol
    elif rtol is not np._NoValue:
        raise ValueError(f"`rtol` and `rcond` can't be both set.{where()}")
    rcond = _rcond_value(rcond, "pinv's rcond")
    if shape[-1] * shape[-2] == 0:
        return broadcast_to(cast(0.0, a.dtype), shape[:-2] + (shape[-1], shape[-2]))
    return bind("pinv", a, rcond=rcond, hermitian=bool(hermitian))


@implements(np.linalg.lstsq)
def lstsq(a, b, rcond=None):
    """np.linalg.lstsq: (x, residuals, rank, s) for 2-D a and b of one or two dimensions.

    Traced, a value's shape cannot depend on the data: residuals have the shape NumPy gives a
    full-rank a ((k,) when m > n, else (0,)); where a turns out rank-deficient, NumPy returns
    an empty array and jitgraph the residuals' sums of squares all the same. Eagerly the
    result is NumPy's exactly. Gradients (x, residuals, s) hold where the rank is locally
    constant; rank has none."""
    a, b = _operands(a, b)
    if not _traced(a, b):
        return np.linalg.lstsq(a, b, rcond=rcond)
    is_1d = len(shape_of(b)) == 1
    if is_1d:
        b = reshape(b, (-1, 1))
    _two_d(a, b)
    (m, n), k = shape_of(a), shape_of(b)[-1]
    if shape_of(b)[0] != m:
        raise LinAlgError(f"Incompatible dimensions{where()}")
    if m == 0 or n == 0 or k == 0:
        raise NotSupportedError(f"np.linalg.lstsq of empty arrays is not supported on traced values{where()}")
    dt = _float_dtype(a, b)
    a, b = cast(a, dt), cast(b, dt)
    rcond = np.finfo(np.float64).eps * max(m, n) if rcond is None else _rcond_value(rcond, "lstsq's rcond")
    x, res, rank, s = _bind_multi("lstsq", [a, b], {"rcond": float(rcond)},
                                  _lstsq_avals((m, n), (m, k), dt))
    if isinstance(rank, EagerBox) and not isinstance(rank.value, Tensor) and m > n \
            and int(rank.value) != n:
        res = np.zeros((0,), dt)       # eagerly the rank is known: NumPy's empty residuals
    return (reshape(x, (n,)) if is_1d else x), res, rank, s


# ---- norm -----------------------------------------------------------------------------------------
def _safe_sqrt(s):
    """sqrt(s) for s >= 0 whose derivative at 0 is 0 (a subgradient of the 2-norm) rather than
    inf * 0 = nan; the value is sqrt's exactly."""
    zero = equal(s, 0)
    return where_(zero, 0.0, sqrt(where_(zero, 1.0, s)))


def _safe_root(s, p):
    """s ** p (p < 1 a float of s's dtype) with derivative 0 at s == 0."""
    zero = equal(s, 0)
    return where_(zero, 0.0, power(where_(zero, 1.0, s), p))


def _max0(x, axis, keepdims=False):
    """max over axis, 0 for an empty axis (NumPy's initial=0)."""
    if shape_of(x)[axis] == 0:
        shape = keepdims_shape(shape_of(x), (axis,)) if keepdims else \
            [d for i, d in enumerate(shape_of(x)) if i != axis]
        return broadcast_to(cast(0.0, x.dtype), shape)
    return amax(x, axis=axis, keepdims=keepdims)


def _sum_squares(x, axis, keepdims=False):
    return sum(multiply(x, x), axis=axis, keepdims=keepdims)


@implements(np.linalg.norm)
def norm(x, ord=None, axis=None, keepdims=False):
    """np.linalg.norm with every vector and matrix order NumPy accepts for real input.

    The 2-norm (and Frobenius norm, and p-norms) have gradient 0 at x = 0 (a subgradient)
    instead of nan; the matrix 2-, -2- and nuclear norms go through the singular values (no
    degenerate-value caveat: only their own gradient is used)."""
    x = as_operand(x)
    if not _traced(x):
        return np.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)
    if x.dtype.kind == "c":
        raise NotSupportedError(f"np.linalg.norm of complex arrays is not supported{where()}")
    if x.dtype.kind != "f":
        x = cast(x, np.float64)
    nd = x.ndim
    if axis is None:
        if ord is None or (ord in ("f", "fro") and nd == 2) or (ord == 2 and nd == 1):
            r = _safe_sqrt(_sum_squares(reshape(x, (-1,)), 0))
            return reshape(r, [1] * nd) if keepdims else r
        axis = tuple(range(nd))
    elif not isinstance(axis, tuple):
        try:
            axis = (int(axis),)
        except Exception:
            raise TypeError(f"'axis' must be None, an integer or a tuple of integers{where()}") from None
    if len(axis) == 1:
        ax = norm_axis(axis[0], nd)
        if ord == np.inf:
            return _max0(absolute(x), ax, keepdims)
        if ord == -np.inf:
            return amin(absolute(x), axis=ax, keepdims=keepdims)
        if ord == 0:
            return sum(cast(not_equal(x, 0), x.dtype), axis=ax, keepdims=keepdims)
        if ord == 1:
            return sum(absolute(x), axis=ax, keepdims=keepdims)
        if ord is None or ord == 2:
            return _safe_sqrt(_sum_squares(x, ax, keepdims))
        if isinstance(ord, str):
            raise ValueError(f"Invalid norm order '{ord}' for vectors{where()}")
        p = float(ord)
        s = sum(power(absolute(x), p), axis=ax, keepdims=keepdims)
        return _safe_root(s, float(np.reciprocal(np.asarray(p, x.dtype))))
    if len(axis) == 2:
        row, col = norm_axis(axis[0], nd), norm_axis(axis[1], nd)
        if row == col:
            raise ValueError(f"Duplicate axes given.{where()}")
        if ord in (2, -2, "nuc"):
            s = svd(moveaxis(x, (row, col), (-2, -1)), compute_uv=False)
            r = _max0(s, -1 % s.ndim) if ord == 2 else amin(s, axis=-1) if ord == -2 else sum(s, axis=-1)
        elif ord in (1, -1):
            c = col - 1 if col > row else col
            t = sum(absolute(x), axis=row)
            r = _max0(t, c) if ord == 1 else amin(t, axis=c)
        elif ord in (np.inf, -np.inf):
            rr = row - 1 if row > col else row
            t = sum(absolute(x), axis=col)
            r = _max0(t, rr) if ord == np.inf else amin(t, axis=rr)
        elif ord in (None, "fro", "f"):
            r = _safe_sqrt(_sum_squares(x, norm_axes((row, col), nd)))
        else:
            raise ValueError(f"Invalid norm order for matrices.{where()}")
        if keepdims:
            shape = list(shape_of(x))
            shape[row] = shape[col] = 1
            r = reshape(r, shape)
        return r
    raise ValueError(f"Improper number of dimensions to norm.{where()}")


# ---- NumPy 2's array-API names, multi_dot, cond ----------------------------------------------------
@implements(np.linalg.vector_norm)
def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    """np.linalg.vector_norm: the vector `ord`-norm over `axis` (None: every element as one
    vector, whatever x's rank; a tuple: those axes as one vector)."""
    x = as_operand(x)
    if not _traced(x):
        return np.linalg.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord)
    shape = tuple(shape_of(x))
    axes = norm_axes(axis, len(shape))
    if not axes:
        return norm(reshape(x, shape + (1,)), ord=ord, axis=-1)
    rest = tuple(i for i in range(len(shape)) if i not in axes)
    flat = reshape(moveaxis(x, axes, tuple(range(len(rest), len(shape)))),
                   tuple(shape[i] for i in rest) + (-1,))
    r = norm(flat, ord=ord, axis=-1)
    return reshape(r, keepdims_shape(shape, axes)) if keepdims else r


@implements(np.linalg.matrix_norm)
def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    """np.linalg.matrix_norm: the matrix `ord`-norm of the last two axes."""
    x = as_operand(x)
    if not _traced(x):
        return np.linalg.matrix_norm(x, keepdims=keepdims, ord=ord)
    _stacked_2d(x)
    return norm(x, ord=ord, axis=(-2, -1), keepdims=keepdims)


@implements(np.linalg.matrix_rank)
def matrix_rank(A, tol=None, hermitian=False, *, rtol=None):
    """np.linalg.matrix_rank: the singular values above the tolerance (NumPy's default
    S.max() * max(M, N) * eps), counted; an integer, no gradient."""
    A = as_operand(A)
    if not _traced(A):
        return np.linalg.matrix_rank(A, tol=tol, hermitian=hermitian, rtol=rtol)
    if isinstance(tol, Tensor) or isinstance(rtol, Tensor):
        raise NotSupportedError(f"np.linalg.matrix_rank with a traced tolerance is not supported{where()}")
    if len(shape_of(A)) < 2:
        return sum(cast(not_equal(A, 0), np.int64))
    A = cast(A, _float_dtype(A))
    S = svd(A, compute_uv=False, hermitian=hermitian)
    if tol is None:
        m, n = shape_of(A)[-2:]
        r = max(m, n) * np.finfo(S.dtype).eps if rtol is None else rtol
        tol = multiply(amax(S, axis=-1, keepdims=True), r)
    else:
        tol = np.asarray(tol)[..., None]
    from_s = cast(S > tol, np.int64)
    return sum(from_s, axis=-1)


@implements(np.linalg.svdvals)
def svdvals(x, /):
    """np.linalg.svdvals: the singular values of the last two axes, descending."""
    return svd(x, compute_uv=False)


@implements(np.linalg.cond)
def cond(x, p=None):
    """np.linalg.cond: the ratio of the largest to the smallest singular value (p None, 2; -2 the
    inverse), else norm(x, p) * norm(inv(x), p), as NumPy computes them."""
    x = as_operand(x)
    if not _traced(x):
        return np.linalg.cond(x, p)
    _stacked_2d(x)
    if p is None or p == 2 or p == -2:
        s = svd(x, compute_uv=False)
        return divide(s[..., 0], s[..., -1]) if p != -2 else divide(s[..., -1], s[..., 0])
    _stacked_square(x)
    return multiply(norm(x, ord=p, axis=(-2, -1)), norm(inv(x), ord=p, axis=(-2, -1)))


def _chain_order(dims):
    """NumPy's multi_dot order for matrices of shapes (dims[i], dims[i + 1]): the split s[i, j]
    of every sub-chain minimising the scalar multiplications (Cormen's dynamic programme, with
    NumPy's tie-breaking, so the products and their rounding are NumPy's)."""
    n = len(dims) - 1
    cost = np.zeros((n, n))
    split = np.empty((n, n), dtype=np.intp)
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i, j] = np.inf
            for k in range(i, j):
                q = cost[i, k] + cost[k + 1, j] + dims[i] * dims[k + 1] * dims[j + 1]
                if q < cost[i, j]:
                    cost[i, j], split[i, j] = q, k
    return split


@implements(np.linalg.multi_dot)
def multi_dot(arrays, *, out=None):
    """np.linalg.multi_dot: the product of two or more arrays in the cheapest order (NumPy's,
    from the static shapes); a 1-D first array is a row vector, a 1-D last one a column."""
    arrays = [as_operand(a) for a in arrays]
    if not _traced(*arrays):
        return np.linalg.multi_dot(arrays, out=out)
    if out is not None:
        raise NotSupportedError(f"np.linalg.multi_dot with out= is not supported{where()}")
    n = len(arrays)
    if n < 2:
        raise ValueError(f"Expecting at least two arrays.{where()}")
    if n == 2:
        return dot(arrays[0], arrays[1])
    first_1d, last_1d = len(shape_of(arrays[0])) == 1, len(shape_of(arrays[-1])) == 1
    if first_1d:
        arrays[0] = reshape(arrays[0], (1, -1))
    if last_1d:
        arrays[-1] = reshape(arrays[-1], (-1, 1))
    for a in arrays:
        if len(shape_of(a)) != 2:
            raise LinAlgError(f"{len(shape_of(a))}-dimensional array given. Array must be "
                              f"two-dimensional{where()}")
    dims = [shape_of(a)[0] for a in arrays] + [shape_of(arrays[-1])[1]]
    if n == 3:       # NumPy's own rule for three
        a0, a1b0, b1c0, c1 = dims
        left = a0 * a1b0 * b1c0 + a0 * b1c0 * c1
        right = a1b0 * b1c0 * c1 + a0 * a1b0 * c1
        r = matmul(matmul(arrays[0], arrays[1]), arrays[2]) if left < right else \
            matmul(arrays[0], matmul(arrays[1], arrays[2]))
    else:
        split = _chain_order(dims)

        def chain(i, j):
            if i == j:
                return arrays[i]
            return matmul(chain(i, split[i, j]), chain(split[i, j] + 1, j))
        r = chain(0, n - 1)
    if first_1d and last_1d:
        return reshape(r, ())
    if first_1d or last_1d:
        return reshape(r, (-1,))
    return r


@implements(np.linalg.matrix_transpose, np.matrix_transpose)
def matrix_transpose(x, /):
    """The last two axes swapped (a view)."""
    x = as_operand(x)
    if len(shape_of(x)) < 2:
        raise ValueError(f"Input array must be at least 2-dimensional, but it is "
                         f"{len(shape_of(x))}{where()}")
    return swapaxes(x, -1, -2)


@implements(np.linalg.matmul)
def linalg_matmul(x1, x2, /):
    return matmul(x1, x2)


@implements(np.linalg.outer)
def linalg_outer(x1, x2, /):
    """np.linalg.outer: of two 1-D arrays only."""
    x1, x2 = _operands(x1, x2)
    if len(shape_of(x1)) != 1 or len(shape_of(x2)) != 1:
        raise ValueError(f"Input arrays must be one-dimensional, but they are "
                         f"x1.ndim={len(shape_of(x1))} and x2.ndim={len(shape_of(x2))}.{where()}")
    return multiply(reshape(x1, (-1, 1)), x2)


@implements(np.linalg.vecdot)
def linalg_vecdot(x1, x2, /, *, axis=-1):
    """The dot products of x1's and x2's vectors along `axis` (after broadcasting)."""
    return vecdot(x1, x2, axis=axis)


def vecdot(x1, x2, axis=-1, **kw):
    """np.vecdot of real arrays: sum(x1 * x2) along `axis` after broadcasting."""
    if kw:
        raise NotSupportedError(f"np.vecdot with arguments {sorted(kw)} is not supported{where()}")
    x1, x2 = _operands(x1, x2)
    if not len(shape_of(x1)) or not len(shape_of(x2)):
        raise ValueError(f"vecdot: Input operand does not have enough dimensions{where()}")
    n1, n2 = shape_of(x1)[axis], shape_of(x2)[axis]
    if n1 != n2:
        raise ValueError(f"vecdot: Input operand 1 has a mismatch in its core dimension 0, with "
                         f"gufunc signature (n),(n)->() (size {n2} is different from {n1}){where()}")
    x1, x2 = moveaxis(x1, axis, -1), moveaxis(x2, axis, -1)
    return sum(multiply(x1, x2), axis=-1)


vecdot.ufunc_kwargs = ("axis",)
if hasattr(np, "vecdot"):
    implements(np.vecdot)(vecdot)


def _mat_vec(x1, x2, vector_first):
    x1, x2 = _operands(x1, x2)
    v, m = (x1, x2) if vector_first else (x2, x1)
    if len(shape_of(v)) < 1 or len(shape_of(m)) < 2:
        raise ValueError(f"{'vecmat' if vector_first else 'matvec'}: Input operand does not have "
                         f"enough dimensions{where()}")
    if vector_first:
        return matmul(expand_dims(v, -2), m)[..., 0, :]
    return matmul(m, expand_dims(v, -1))[..., 0]


if hasattr(np, "matvec"):
    implements(np.matvec)(lambda x1, x2: _mat_vec(x1, x2, False))
    implements(np.vecmat)(lambda x1, x2: _mat_vec(x1, x2, True))


# ---- scipy.linalg --------------------------------------------------------------------------------
_TRANS = {0: False, 1: True, 2: True, "N": False, "T": True, "C": True}


def _square_2d(a, what):
    s = shape_of(a)
    if len(s) != 2 or s[0] != s[1]:
        raise ValueError(f"expected square matrix{where()}" if what is None
                         else f"Input array is expected to be square but has the shape: {tuple(s)}.{where()}")


def _matrix_rhs(a, b, solve):
    """solve(a, b) for 2-D a and b of shape (n,) or (n, k), as SciPy's solvers take them."""
    n, sb = shape_of(a)[0], tuple(shape_of(b))
    if len(sb) not in (1, 2) or sb[0] != n:
        raise ValueError(f"shapes of a {tuple(shape_of(a))} and b {sb} are incompatible{where()}")
    if len(sb) == 1:
        return reshape(solve(reshape(b, (n, 1))), (n,))
    return solve(b)


def scipy_solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                           check_finite=True):
    """scipy.linalg.solve_triangular: x with op(a) x = b, a (n, n) lower or upper triangular
    (only that triangle is read; its diagonal taken as ones with `unit_diagonal`), b (n,) or
    (n, k), op(a) = a (trans 0 or 'N') or a^T (1, 2, 'T', 'C'). In float64 unless a and b are
    both float32. A zero on the diagonal raises LinAlgError ("singular matrix"). Gradients
    reach a (on the triangle read) and b."""
    a, b = _operands(a, b)
    _square_2d(a, None)
    if trans not in _TRANS:
        raise ValueError(f"Invalid trans argument: {trans!r}{where()}")
    dt = _float_dtype(a, b)
    a, b = cast(a, dt), cast(b, dt)
    return _matrix_rhs(a, b, lambda rhs: _solve_tri(a, rhs, lower, _TRANS[trans], unit_diagonal))


def scipy_cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """scipy.linalg.cholesky: the upper factor U (a = U^T U) reading a's upper triangle, or with
    `lower` the lower factor reading the lower one; zeros in the other triangle."""
    a = as_operand(a)
    _square_2d(a, "cholesky")
    return cholesky(a, upper=not lower)


def scipy_cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """scipy.linalg.cho_factor: (c, lower), c holding the Cholesky factor in the triangle
    `lower` names (SciPy leaves arbitrary values in the other triangle; here zeros)."""
    return scipy_cholesky(a, lower=lower), bool(lower)


def scipy_cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """scipy.linalg.cho_solve: x with a x = b from cho_factor's (c, lower): two triangular
    solves, reading only c's factor triangle."""
    c, lower = c_and_lower
    c, b = _operands(c, b)
    _square_2d(c, None)
    dt = _float_dtype(c, b)
    c, b = cast(c, dt), cast(b, dt)
    if lower:        # a = L L^T
        solve = lambda rhs: _solve_tri(c, _solve_tri(c, rhs, True), True, trans=True)  # noqa: E731
    else:            # a = U^T U
        solve = lambda rhs: _solve_tri(c, _solve_tri(c, rhs, False, trans=True), False)  # noqa: E731
    return _matrix_rhs(c, b, solve)


_SYMMETRIC = ("sym", "her", "pos", "symmetric", "hermitian", "positive definite")


def scipy_solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
                assume_a=None, transposed=False):
    """scipy.linalg.solve: x with a x = b (a^T x = b with `transposed`), a (n, n), b (n,) or (n, k).
    assume_a 'sym'/'her'/'pos' reads only the triangle `lower` names (as SciPy's solvers do),
    'upper triangular'/'lower triangular' and 'diagonal' only those entries; the others
    ('gen', 'general', None, 'banded', 'tridiagonal') the whole matrix. Computed by LU, so
    results agree with SciPy's Cholesky or LDL^T solves to rounding."""
    a, b = _operands(a, b)
    _square_2d(a, None)
    dt = _float_dtype(a, b)
    a, b = cast(a, dt), cast(b, dt)
    kind = (assume_a or "gen").lower()
    if transposed:
        a = _T(a)
    if kind in ("upper triangular", "lower triangular"):
        low = kind.startswith("lower")
        return _matrix_rhs(a, b, lambda rhs: _solve_tri(a, rhs, low))
    if kind == "diagonal":
        n = shape_of(a)[-1]
        d = a[np.arange(n), np.arange(n)]
        return _matrix_rhs(a, b, lambda rhs: divide(rhs, reshape(d, (-1, 1))))
    if kind in _SYMMETRIC:
        # the symmetric matrix SciPy's solver sees: the triangle `lower` names, mirrored (the
        # adjoint lands on that triangle)
        own = _T(a) if transposed else a        # (SciPy reads a's own triangle)
        a = _copyltu(own if lower else _T(own))
    elif kind not in ("gen", "general", "banded", "tridiagonal"):
        raise ValueError(f"{assume_a!r} is not a recognized matrix structure{where()}")
    return _matrix_rhs(a, b, lambda rhs: solve(a, rhs))


def scipy_inv(a, overwrite_a=False, check_finite=True):
    """scipy.linalg.inv (np.linalg.inv's computation)."""
    a = as_operand(a)
    _square_2d(a, None)
    return inv(a)


def scipy_det(a, overwrite_a=False, check_finite=True):
    """scipy.linalg.det (np.linalg.det's computation; float64 for float32 a, as SciPy's)."""
    a = as_operand(a)
    _stacked_square(a)
    return det(cast(a, np.promote_types(a.dtype, np.float64)))


def scipy_eigh(a, b=None, *, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False,
               type=1, check_finite=True, subset_by_index=None, subset_by_value=None, driver=None):
    """scipy.linalg.eigh of one symmetric matrix (reading the `lower` triangle): eigenvalues
    ascending, and eigenvectors unless eigvals_only. The generalized problem (b) and subsets
    are not supported."""
    if b is not None or subset_by_index is not None or subset_by_value is not None:
        raise NotSupportedError(f"scipy.linalg.eigh with b, subset_by_index or subset_by_value is not "
                                f"supported on traced values{where()}")
    w, v = eigh(a, "L" if lower else "U")
    return w if eigvals_only else (w, v)


def scipy_eigvalsh(a, b=None, *, lower=True, overwrite_a=False, overwrite_b=False, type=1,
                   check_finite=True, subset_by_index=None, subset_by_value=None, driver=None):
    """scipy.linalg.eigvalsh: the eigenvalues of scipy_eigh."""
    return scipy_eigh(a, b, lower=lower, eigvals_only=True, subset_by_index=subset_by_index,
                      subset_by_value=subset_by_value)


def scipy_svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True,
              lapack_driver="gesdd"):
    """scipy.linalg.svd: (U, s, Vh), or s alone without compute_uv."""
    a = as_operand(a)
    _stacked_2d(a)
    r = svd(a, full_matrices=full_matrices, compute_uv=compute_uv)
    return tuple(r) if compute_uv else r


def scipy_svdvals(a, overwrite_a=False, check_finite=True):
    return scipy_svd(a, compute_uv=False)


def scipy_qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    """scipy.linalg.qr: mode 'full' (Q of shape (M, M)), 'economic' ((M, K)) or 'r' (the tuple
    (R,), as SciPy returns it); pivoting and 'raw' are not supported."""
    if pivoting or mode == "raw":
        raise NotSupportedError(f"scipy.linalg.qr with pivoting or mode='raw' is not supported on "
                                f"traced values{where()}")
    modes = {"full": "complete", "economic": "reduced", "r": "complete"}
    if mode not in modes:
        raise ValueError(f"Mode argument should be one of ['full', 'r', 'economic', 'raw']{where()}")
    a = as_operand(a)
    _stacked_2d(a)
    q, r = qr(a, modes[mode])
    return (r,) if mode == "r" else (q, r)


def scipy_pinv(a, *, atol=None, rtol=None, return_rank=False, check_finite=True):
    """scipy.linalg.pinv with a relative cutoff (rtol; SciPy's default max(M, N) * eps); an
    absolute cutoff (atol) and return_rank are not supported on traced values."""
    if atol is not None and atol != 0 or return_rank:
        raise NotSupportedError(f"scipy.linalg.pinv with atol or return_rank is not supported on "
                                f"traced values{where()}")
    a = as_operand(a)
    _stacked_2d(a)
    return pinv(a, rtol=rtol)


def scipy_lstsq(a, b, cond=None, overwrite_a=False, overwrite_b=False, check_finite=True,
                lapack_driver=None):
    """scipy.linalg.lstsq: (x, residues, rank, s), by np.linalg.lstsq's SVD solve (cond as its
    rcond). The residues follow NumPy's convention (empty where m <= n)."""
    return lstsq(a, b, rcond=cond)


def scipy_expm(A):
    """scipy.linalg.expm of a (stack of) square matrices: scaling and squaring with the [13/13]
    Pade approximant (SciPy picks the degree by the norm; results agree to rounding). Its
    gradient is the Frechet derivative, through the exponential of a block matrix twice a's size."""
    A = as_operand(A)
    _stacked_square(A)
    return bind("expm", cast(A, _float_dtype(A)))


def scipy_norm(a, ord=None, axis=None, keepdims=False, check_finite=True):
    return norm(a, ord=ord, axis=axis, keepdims=keepdims)


class TracedLUFactor:
    """scipy.linalg.lu_factor's result for a traced matrix: (lu, piv) stand for the factorization
    of `a` and are usable by scipy.linalg.lu_solve, which solves with `a` itself (np.linalg.solve's
    LU, the same computation); the packed factor's and the pivots' entries are not computed."""

    __jitgraph_defer__ = True

    def __init__(self, a, part):
        self.a, self.part = a, part

    def _refuse(self, *args, **kwargs):
        raise NotSupportedError(f"the {self.part} of scipy.linalg.lu_factor of a traced matrix is only usable "
                                f"by scipy.linalg.lu_solve (jitgraph solves with the matrix itself and does not "
                                f"compute the packed factor); for a determinant use np.linalg.det or slogdet"
                                f"{where()}")

    __array__ = __getitem__ = __array_ufunc__ = __array_function__ = __len__ = _refuse

    @property
    def shape(self):
        self._refuse()


def scipy_lu_factor(a, overwrite_a=False, check_finite=True):
    """scipy.linalg.lu_factor of a traced square matrix: (lu, piv) for lu_solve (TracedLUFactor)."""
    a = as_operand(a)
    _square_2d(a, "lu_factor")
    a = cast(a, _float_dtype(a))
    return TracedLUFactor(a, "packed LU factor"), TracedLUFactor(a, "pivot array")


def scipy_lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """scipy.linalg.lu_solve: x with a x = b (a^T x = b for trans 1 or 2). From a traced
    matrix's lu_factor: a solve with the matrix. From NumPy's factor (lu, piv) of a constant
    matrix, with a traced b: b's rows permuted as the pivots swap them, then the unit lower and
    the upper triangular solves, as LAPACK's getrs."""
    lu, piv = lu_and_piv
    if isinstance(lu, TracedLUFactor):
        a = lu.a
        b = as_operand(b)
        dt = _float_dtype(a, b)
        a, b = cast(a, dt), cast(b, dt)
        return _matrix_rhs(a, b, lambda rhs: _solve(_T(a) if _TRANS[trans] else a, rhs))
    if isinstance(lu, Tensor) or isinstance(piv, Tensor):
        raise NotSupportedError(f"scipy.linalg.lu_solve with a traced packed factor or pivots (not from "
                                f"lu_factor of the traced matrix) is not supported{where()}")
    lu, piv = np.asarray(lu), np.asarray(piv)
    n = lu.shape[0]
    perm = np.arange(n)
    for i, p in enumerate(piv):            # LAPACK's row interchanges, in order
        perm[i], perm[p] = perm[p], perm[i]
    b = as_operand(b)
    dt = _float_dtype(lu, b)
    lu_c, b = cast(lu, dt), cast(b, dt)
    inverse = np.argsort(perm)

    def solve(rhs):
        if not _TRANS[trans]:      # L U x = P b
            y = _solve_tri(lu_c, getitem(rhs, perm), True, unit=True)
            return _solve_tri(lu_c, y, False)
        y = _solve_tri(lu_c, rhs, False, trans=True)          # U^T L^T P x = b
        return getitem(_solve_tri(lu_c, y, True, trans=True, unit=True), inverse)
    return _matrix_rhs(lu_c, b, solve)


def _first_axis_values(x):
    """A constructor's 1-d operand (SciPy's toeplitz/hankel/circulant ravel theirs)."""
    x = as_operand(x)
    return reshape(x, (-1,)) if len(shape_of(x)) != 1 else x


def _gathered(values, index):
    """values[index] for a constant integer index array (a gather; its adjoint a scatter-add)."""
    return getitem(values, np.asarray(index, dtype=np.intp))


def scipy_toeplitz(c, r=None):
    """scipy.linalg.toeplitz: T[i, j] = c[i - j] for i >= j, r[j - i] above the diagonal
    (r defaults to c; r[0] is ignored)."""
    c = _first_axis_values(c)
    r = c if r is None else _first_axis_values(r)
    m, n = shape_of(c)[0], shape_of(r)[0]
    dt = np.result_type(c.dtype, r.dtype)
    values = concatenate([cast(c, dt)[::-1], cast(r, dt)[1:]])
    i, j = np.ogrid[:m, :n]
    return _gathered(values, m - 1 - i + j)


def scipy_circulant(c):
    """scipy.linalg.circulant: C[i, j] = c[(i - j) mod n]."""
    c = _first_axis_values(c)
    n = shape_of(c)[0]
    i, j = np.ogrid[:n, :n]
    return _gathered(c, (i - j) % n)


def scipy_hankel(c, r=None):
    """scipy.linalg.hankel: H[i, j] = c[i + j] while i + j < len(c), then r[i + j - len(c) + 1]
    (r defaults to zeros; r[0] is ignored)."""
    c = _first_axis_values(c)
    m = shape_of(c)[0]
    if r is None:
        r = np.zeros(m, c.dtype)
    r = _first_axis_values(r)
    n = shape_of(r)[0]
    dt = np.result_type(c.dtype, r.dtype)
    values = concatenate([cast(c, dt), cast(r, dt)[1:]])
    i, j = np.ogrid[:m, :n]
    return _gathered(values, i + j)


def scipy_block_diag(*arrs):
    """scipy.linalg.block_diag: the arrays (scalars and 1-d arrays as single rows) on the
    diagonal of a zero matrix."""
    blocks = []
    for a in arrs:
        a = as_operand(a)
        nd = len(shape_of(a))
        if nd > 2:
            raise ValueError(f"arguments in the following positions have dimension greater than 2: "
                             f"{[k for k, x in enumerate(arrs) if np.ndim(x) > 2]}")
        blocks.append(reshape(a, (1, -1)) if nd < 2 else a)
    if not blocks:
        return np.empty((1, 0))
    dt = np.result_type(*(b.dtype for b in blocks))
    widths = [shape_of(b)[1] for b in blocks]
    total = builtins.sum(widths)
    rows, left = [], 0
    for b, w in zip(blocks, widths):
        h = shape_of(b)[0]
        parts = [np.zeros((h, left), dt), cast(b, dt), np.zeros((h, total - left - w), dt)]
        rows.append(concatenate(parts, axis=1))
        left += w
    return concatenate(rows, axis=0)


@implements(np.linalg.tensorsolve)
def tensorsolve(a, b, axes=None):
    """np.linalg.tensorsolve: x with tensordot(a, x, x.ndim) = b, as one solve of the
    flattened square system."""
    a, b = as_operand(a), as_operand(b)
    an, bn = len(shape_of(a)), len(shape_of(b))
    if axes is not None:
        order = [k for k in range(an) if k not in [norm_axis(k, an) for k in axes]]
        a = moveaxis(a, [norm_axis(k, an) for k in axes], list(range(len(order), an)))
    old = tuple(shape_of(a))[bn:]
    n = int(np.prod(old))
    if int(np.prod(shape_of(a))) != n * n:
        raise LinAlgError("Input arrays must satisfy the requirement prod(a.shape[b.ndim:]) == "
                          "prod(a.shape[:b.ndim])")
    return reshape(solve(reshape(a, (n, n)), reshape(b, (n,))), old)


@implements(np.linalg.tensorinv)
def tensorinv(a, ind=2):
    """np.linalg.tensorinv: the inverse of a as a matrix of its first `ind` axes by the rest."""
    a = as_operand(a)
    if ind <= 0:
        raise ValueError("Invalid ind argument.")
    s = tuple(shape_of(a))
    n = int(np.prod(s[ind:]))
    return reshape(inv(reshape(a, (n, -1))), s[ind:] + s[:ind])


SCIPY_FUNCTIONS = {"solve_triangular": scipy_solve_triangular, "cholesky": scipy_cholesky,
                   "cho_factor": scipy_cho_factor, "cho_solve": scipy_cho_solve,
                   "solve": scipy_solve, "inv": scipy_inv, "det": scipy_det, "eigh": scipy_eigh,
                   "eigvalsh": scipy_eigvalsh, "svd": scipy_svd, "svdvals": scipy_svdvals,
                   "qr": scipy_qr, "pinv": scipy_pinv, "lstsq": scipy_lstsq, "norm": scipy_norm, "expm": scipy_expm,
                   "toeplitz": scipy_toeplitz, "circulant": scipy_circulant, "hankel": scipy_hankel,
                   "block_diag": scipy_block_diag, "lu_factor": scipy_lu_factor, "lu_solve": scipy_lu_solve}


# installed into scipy.linalg once it is imported: a call with a traced value among its arguments
# runs these, any other SciPy's own
library_functions("scipy.linalg", SCIPY_FUNCTIONS)
