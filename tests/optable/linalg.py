"""Rows: np.linalg (solve, inv, det, slogdet, cholesky, eigh, svd, pinv, qr, lstsq, norm).

Inputs are made well-conditioned inside each row (finite differences of a factorization are
only stable away from singular matrices and repeated eigenvalues): `spd` builds a symmetric
positive definite matrix a a^T + n I from the random argument, `wc` a diagonally dominated
one. Functions of eigenvectors and singular vectors are written sign-invariantly (v * v,
u diag(s) vh), as their signs are a convention of the LAPACK build.
"""
import numpy as np
import scipy.linalg as sla

from . import op


def spd(a):
    n = a.shape[-1]
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n, dtype=a.dtype)


def wc(a):
    return a + 3.0 * np.eye(a.shape[-1], dtype=a.dtype)


def upper_noise(a):
    """spd(a) plus junk above the diagonal: functions reading the lower triangle ignore it."""
    n = a.shape[-1]
    return spd(a) + a * np.triu(np.ones((n, n), a.dtype), 1)


SQ = [((3, 3),), ((2, 4, 4),), ((1, 1),)]
RECT = [((3, 3),), ((4, 3),), ((3, 4),), ((2, 4, 3),), ((2, 2, 3, 4),)]

# solve and inv
for _sa, _sb in [((3, 3), (3,)), ((3, 3), (3, 2)), ((2, 3, 3), (2, 3, 2)), ((2, 3, 3), (3,)),
                 ((2, 1, 3, 3), (4, 3, 2)), ((3, 3), (2, 3, 1))]:
    op("linalg.solve", lambda a, b: np.linalg.solve(wc(a), b), (_sa, _sb))
op("linalg.solve-spd", lambda a, b: np.linalg.solve(spd(a), b), ((4, 4), (4, 3)))
op("linalg.inv", lambda a: np.linalg.inv(wc(a)), *SQ)
op("linalg.inv-spd", lambda a: np.linalg.inv(spd(a)), ((3, 3),))

# determinants
op("linalg.det", lambda a: np.linalg.det(wc(a)), *SQ)
op("linalg.det-scalar", lambda a: np.linalg.det(wc(a)) ** 2, ((3, 3),))
op("linalg.slogdet", lambda a: np.linalg.slogdet(wc(a))[1], *SQ)
op("linalg.slogdet-sign", lambda a: np.linalg.slogdet(-wc(a)).sign * np.linalg.slogdet(-wc(a)).logabsdet,
   ((3, 3),))

# Cholesky
op("linalg.cholesky", lambda a: np.linalg.cholesky(spd(a)), *SQ)
op("linalg.cholesky-upper", lambda a: np.linalg.cholesky(spd(a), upper=True), ((3, 3),), ((2, 3, 3),))
op("linalg.cholesky-lower-read", lambda a: np.linalg.cholesky(upper_noise(a)), ((3, 3),))
op("linalg.cholesky-solve", lambda a, b: np.linalg.solve(np.linalg.cholesky(spd(a)), b), ((4, 4), (4, 2)))
# a solve by a Cholesky factor or its transpose is a triangular solve (rewritten when traced)
op("linalg.cholesky-solve-T", lambda a, b: np.linalg.solve(np.swapaxes(np.linalg.cholesky(spd(a)), -1, -2), b),
   ((4, 4), (4, 2)), ((2, 3, 3), (2, 3, 1)))
op("linalg.cholesky-inv", lambda a: np.linalg.inv(np.linalg.cholesky(spd(a))), ((3, 3),))

# scipy.linalg's triangular and Cholesky solvers (called through the module, as jitgraph wraps them)
op("scipy.linalg.solve_triangular", lambda a, b: sla.solve_triangular(wc(a), b), ((3, 3), (3, 2)))
op("scipy.linalg.solve_triangular-lower-T", lambda a, b: sla.solve_triangular(wc(a), b, trans="T", lower=True),
   ((4, 4), (4,)))
op("scipy.linalg.solve_triangular-unit", lambda a, b: sla.solve_triangular(a, b, trans=1, lower=True,
                                                                         unit_diagonal=True), ((3, 3), (3, 2)))
op("scipy.linalg.cholesky", lambda a: sla.cholesky(spd(a)), ((3, 3),))
op("scipy.linalg.cholesky-lower", lambda a: sla.cholesky(upper_noise(a), lower=True), ((3, 3),))
op("scipy.linalg.cho_solve", lambda a, b: sla.cho_solve(sla.cho_factor(spd(a)), b), ((4, 4), (4, 2)))
op("scipy.linalg.cho_solve-lower", lambda a, b: sla.cho_solve(sla.cho_factor(spd(a), lower=True), b),
   ((3, 3), (3,)))

# symmetric eigendecomposition
op("linalg.eigh-w", lambda a: np.linalg.eigh(spd(a))[0], *SQ)
op("linalg.eigh-vv", lambda a: np.linalg.eigh(spd(a)).eigenvectors ** 2, ((3, 3),), ((2, 4, 4),))
op("linalg.eigvalsh", lambda a: np.linalg.eigvalsh(spd(a)), *SQ)
op("linalg.eigvalsh-U", lambda a: np.linalg.eigvalsh(spd(a), UPLO="U"), ((3, 3),))
for _n in (0, 1, 2, 3, 5, -1, -3):
    op(f"linalg.matrix_power[{_n}]", lambda a, _n=_n: np.linalg.matrix_power(wc(a) * 0.3, _n), ((3, 3),), ((2, 3, 3),))
op("linalg.eigh-recon", lambda a: (lambda w, v: (v * w[..., None, :]) @ np.swapaxes(v, -1, -2))(
    *np.linalg.eigh(spd(a))), ((3, 3),))
op("linalg.eigh-L-read", lambda a: np.linalg.eigh(upper_noise(a))[1] ** 2, ((3, 3),))
op("linalg.eigh-U", lambda a: np.linalg.eigh(np.swapaxes(upper_noise(a), -1, -2), UPLO="U")[0]
   + np.sum(np.linalg.eigh(np.swapaxes(upper_noise(a), -1, -2), "U")[1] ** 2, axis=-1), ((3, 3),))


# singular value decomposition
def _svd_parts(a, full):
    u, s, vh = np.linalg.svd(a, full_matrices=full)
    k = s.shape[-1]
    uk, vk = u[..., :, :k], vh[..., :k, :]
    # sign-invariant: U diag(s) Vh, the columns' squares, and s
    return np.concatenate([((uk * s[..., None, :]) @ vk).reshape(a.shape[:-2] + (-1,)),
                           (uk * uk).reshape(a.shape[:-2] + (-1,)), s * s], axis=-1)


op("linalg.svd-s", lambda a: np.linalg.svd(a)[1], *RECT)
op("linalg.svd", lambda a: _svd_parts(a, False), *RECT)
op("linalg.svd-full", lambda a: _svd_parts(a, True), ((4, 3),), ((3, 4),), ((2, 3, 3),))
op("linalg.svd-vh", lambda a: np.linalg.svd(a, full_matrices=False)[2] ** 2, ((3, 4),), ((4, 3),))
op("linalg.svd-uv=False", lambda a: np.linalg.svd(a, compute_uv=False), *RECT)
op("linalg.svd-hermitian", lambda a: np.linalg.svd(wc(a) + np.swapaxes(wc(a), -1, -2), hermitian=True)[1],
   ((3, 3),), ((2, 3, 3),))
op("linalg.svd-hermitian-uv=False",
   lambda a: np.linalg.svd(-upper_noise(a), compute_uv=False, hermitian=True), ((3, 3),))

# pseudo-inverse
op("linalg.pinv", lambda a: np.linalg.pinv(a), *RECT)
op("linalg.pinv-rcond", lambda a: np.linalg.pinv(a, rcond=1e-10), ((4, 3),))
op("linalg.pinv-rtol", lambda a: np.linalg.pinv(a, rtol=None), ((3, 4),))
op("linalg.pinv-hermitian", lambda a: np.linalg.pinv(-upper_noise(a), hermitian=True),
   ((3, 3),))
op("linalg.pinv-orthogonal", lambda a: np.linalg.pinv(np.linalg.qr(a)[0] * 2.0), ((3, 3),))


# QR
def _qr_complete(a):
    q, r = np.linalg.qr(a, mode="complete")
    n = a.shape[-1]
    return np.concatenate([q[..., :, :n].reshape(a.shape[:-2] + (-1,)), r.reshape(a.shape[:-2] + (-1,))], -1)


op("linalg.qr-q", lambda a: np.linalg.qr(a)[0], *RECT)
op("linalg.qr-r", lambda a: np.linalg.qr(a).R, *RECT)
op("linalg.qr-qr", lambda a: np.linalg.qr(a)[0] @ np.linalg.qr(a)[1] * 0.5 + np.linalg.qr(a)[1][..., :1, :],
   ((4, 3),), ((3, 4),))
op("linalg.qr-mode-r", lambda a: np.linalg.qr(a, mode="r"), ((4, 3),), ((3, 4),))
op("linalg.qr-complete", _qr_complete, ((4, 3),), ((3, 3),), ((2, 5, 2),))


# least squares
def _lstsq_parts(a, b, **kw):
    x, res, rank, s = np.linalg.lstsq(a, b, **kw)
    return np.concatenate([x.ravel(), res, s])


op("linalg.lstsq", _lstsq_parts, ((5, 3), (5,)), ((5, 3), (5, 2)), ((3, 5), (3, 2)), ((4, 4), (4, 1)))
op("linalg.lstsq-rcond", lambda a, b: _lstsq_parts(a, b, rcond=1e-12), ((6, 2), (6, 3)))
op("linalg.lstsq-x", lambda a, b: np.linalg.lstsq(a, b)[0], ((5, 3), (5, 2)))

# norms: every vector order, every matrix order, every axis form, keepdims
for _ord in [None, 2, 1, np.inf, -np.inf, 3, 0.5, -1.5]:
    op(f"linalg.norm-vec[ord={_ord}]", lambda x, _o=_ord: np.linalg.norm(x, ord=_o), ((5,),), domain="nonzero")
    op(f"linalg.norm-vec-axis[ord={_ord}]", lambda x, _o=_ord: np.linalg.norm(x, ord=_o, axis=-1),
       ((2, 3, 4),), domain="nonzero")
    op(f"linalg.norm-vec-axis-kd[ord={_ord}]", lambda x, _o=_ord: np.linalg.norm(x, _o, 1, True),
       ((2, 3, 4),), domain="nonzero")
op("linalg.norm-vec[ord=0]", lambda x: np.linalg.norm(x, 0) + np.sum(x), ((5,),), domain="nonzero")
op("linalg.norm-vec[ord=2]-2d", lambda x: np.linalg.norm(x, axis=0), ((3, 4),))
for _ord in [None, "fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf]:
    op(f"linalg.norm-mat[ord={_ord}]", lambda x, _o=_ord: np.linalg.norm(x, ord=_o), ((3, 4),))
    op(f"linalg.norm-mat-axes[ord={_ord}]", lambda x, _o=_ord: np.linalg.norm(x, ord=_o, axis=(2, 0)),
       ((3, 2, 4),))
    op(f"linalg.norm-mat-axes-kd[ord={_ord}]", lambda x, _o=_ord: np.linalg.norm(x, _o, (-2, -1), True),
       ((2, 3, 4),))
op("linalg.norm-all", lambda x: np.linalg.norm(x), ((2, 3, 4),))
op("linalg.norm-all-kd", lambda x: np.linalg.norm(x, keepdims=True), ((2, 3),))
op("linalg.norm-fro-tuple", lambda x: np.linalg.norm(x, "fro", axis=(0, 1)), ((3, 4),))

# scipy.linalg's general functions, through the module
op("scipy.linalg.solve", lambda a, b: sla.solve(wc(a), b), ((3, 3), (3,)), ((3, 3), (3, 2)))
op("scipy.linalg.solve-T", lambda a, b: sla.solve(wc(a), b, transposed=True), ((3, 3), (3, 2)))
# (the symmetric solvers read one triangle: junk in the other is ignored)
op("scipy.linalg.solve-pos-upper", lambda a, b: sla.solve(spd(a) + np.tril(a, -1), b, assume_a="pos"),
   ((3, 3), (3, 2)))
op("scipy.linalg.solve-sym-lower", lambda a, b: sla.solve(upper_noise(a), b, assume_a="sym", lower=True),
   ((3, 3), (3,)))
op("scipy.linalg.solve-lower-triangular", lambda a, b: sla.solve(np.tril(wc(a)), b, assume_a="lower triangular"),
   ((3, 3), (3, 2)))
op("scipy.linalg.inv-det", lambda a: sla.inv(wc(a)) * sla.det(wc(a)), ((3, 3),))
op("scipy.linalg.eigh", lambda a: sla.eigh(spd(a))[0] + sla.eigh(spd(a))[1] ** 2, ((3, 3),))
op("scipy.linalg.eigh-upper-vals", lambda a: sla.eigh(spd(a), lower=False, eigvals_only=True)
   + sla.eigvalsh(spd(a)), ((3, 3),))
op("scipy.linalg.svd", lambda a: sla.svd(a, compute_uv=False) + sla.svdvals(a), ((4, 3),))
op("scipy.linalg.svd-uv", lambda a: (lambda u, s, vh: (u * s) @ vh)(*sla.svd(a, full_matrices=False)), ((3, 4),))
op("scipy.linalg.qr-economic", lambda a: (lambda q, r: q @ r + np.abs(r).sum())(*sla.qr(a, mode="economic")),
   ((4, 3),))
op("scipy.linalg.qr-r", lambda a: np.abs(sla.qr(a, mode="r")[0]), ((4, 3),))
op("scipy.linalg.pinv-lstsq", lambda a, b: sla.pinv(a) @ b + sla.lstsq(a, b)[0], ((4, 3), (4, 2)))
op("scipy.linalg.norm", lambda a: sla.norm(a) + sla.norm(a, 1, axis=0), ((3, 4),))

# NumPy 2's names, multi_dot, cond
op("linalg.vector_norm", lambda x: np.linalg.vector_norm(x), ((2, 3),))
op("linalg.vector_norm-axes", lambda x: np.linalg.vector_norm(x, axis=(0, 2), keepdims=True, ord=3),
   ((2, 3, 4),), domain="nonzero")
op("linalg.vector_norm-inf", lambda x: np.linalg.vector_norm(x, axis=1, ord=np.inf), ((3, 4),))
op("linalg.matrix_norm", lambda x: np.linalg.matrix_norm(x) + np.linalg.matrix_norm(x, ord=1), ((2, 3, 4),))
op("linalg.svdvals", lambda x: np.linalg.svdvals(x), ((3, 4),))
op("linalg.cond", lambda a: np.linalg.cond(wc(a)) + np.linalg.cond(wc(a), 1), ((3, 3),))
op("linalg.multi_dot", lambda a, b, c, d: np.linalg.multi_dot([a, b, c, d]),
   ((2, 5), (5, 3), (3, 4), (4, 1)))
op("linalg.multi_dot-3-vectors", lambda a, b, c: np.linalg.multi_dot([a, b, c]), ((4,), (4, 3), (3,)))
op("linalg.multi_dot-2", lambda a, b: np.linalg.multi_dot([a, b]), ((3, 4), (4, 2)))
op("matrix_transpose", lambda x: np.matrix_transpose(x) @ x + np.linalg.matrix_transpose(x) @ x, ((2, 3, 4),))
op("linalg.vecdot", lambda a, b: np.linalg.vecdot(a, b) + np.vecdot(a, b, axis=0).sum(), ((3, 4), (3, 4)))
op("linalg.outer-matmul", lambda a, b: np.linalg.outer(a, b) @ np.linalg.matmul(np.linalg.outer(b, a), a[:, None]),
   ((3,), (4,)))
if hasattr(np, "matvec"):
    op("matvec-vecmat", lambda m, v: np.matvec(m, v)[..., :3] + np.vecmat(v[..., :3], m), ((2, 3, 3), (3,)))
op("linalg.matrix_rank", lambda a: a * np.linalg.matrix_rank(a) + a * np.linalg.matrix_rank(a[:, :1] * a[:1, :])
   + np.linalg.matrix_rank(a, tol=0.5), ((3, 4),))
op("scipy.linalg.expm", lambda a: sla.expm(a), ((3, 3),), ((2, 2, 2),))
op("scipy.linalg.expm-scaled", lambda a: sla.expm(4.0 * a) * 0.01 + sla.expm(np.zeros((2, 2), a.dtype) + a[:2, :2]).sum(),
   ((3, 3),))
op("scipy.linalg.toeplitz-circulant-hankel", lambda c, r: sla.toeplitz(c, r)[:, :3] + sla.toeplitz(c)[:, 1:]
   + sla.circulant(c)[:, :3] * 0.5 + sla.hankel(c)[:, :3] - sla.hankel(c, r)[:, 2:], ((4,), (5,)))
op("scipy.linalg.block_diag", lambda a, b, c: sla.block_diag(a, b, c, 2.0), ((2, 3), (1, 2), (3,)))
op("linalg.tensorsolve", lambda a, b: np.linalg.tensorsolve(wc(a.reshape(6, 6)).reshape(2, 3, 6), b), ((2, 3, 6), (2, 3)))
op("linalg.tensorsolve-axes", lambda a, b: np.linalg.tensorsolve(wc(a.reshape(6, 6)).reshape(6, 2, 3), b, axes=(0,)),
   ((6, 2, 3), (2, 3)))
op("linalg.tensorinv", lambda a: np.linalg.tensorinv(wc(a.reshape(6, 6)).reshape(3, 2, 6), ind=2), ((3, 2, 6),))
op("scipy.linalg.lu_factor-lu_solve", lambda a, b: sla.lu_solve(sla.lu_factor(wc(a)), b)
   + sla.lu_solve(sla.lu_factor(wc(a)), b, trans=1), ((3, 3), (3, 2)), ((3, 3), (3,)))
_LU_CONST = sla.lu_factor(np.array([[0.5, 2.0, 0.1], [3.0, 0.2, 1.0], [1.0, 1.0, 4.0]]))
op("scipy.linalg.lu_solve-constant-factor", lambda b: sla.lu_solve(_LU_CONST, b) + sla.lu_solve(_LU_CONST, b, trans=2),
   ((3, 2),))
