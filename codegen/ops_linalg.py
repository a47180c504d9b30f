"""CPU lowerings of the LAPACK primitives (np.linalg): calls of the C routines of `linalg_runtime.py`.

Each lowering passes its operands (C-ordered, any number of leading batch dimensions) and its
result buffers as pointers with their sizes, and raises NumPy's LinAlgError on a failure
status. The routines a module calls are declared once at its top
(`_la.external(name, dtype, njit, abi)`), so a kernel loaded from Numba's cache finds their
symbols. The tuple-valued primitives write their parts into the names `em.tuple_part` gives
(`proj` reads them); 0-d parts are stored with shape (1,), like every 0-d value.
"""
import numpy as np

from .emit_cpu import OPS, SELF
from .linalg_runtime import ABI, ROUTINES
from .runtime import GEMM_BLOCK_FLOPS
from .source import np_dtype

# A float64 triangular solve with many right-hand sides (a Cholesky factor's backward: two
# n x n solves) splits them into column blocks of at least SOLVE_BLOCK_COLS on Numba's threads,
# as products are split (runtime.py): one BLAS dtrsm per block, each block's columns solved
# exactly as in one call. A 400 x 400 solve took 4.5 ms on one thread.
SOLVE_BLOCK_COLS = 128
SOLVE_MAX_BLOCKS = 8

_IMPORT = "from jitgraph.codegen import linalg_runtime as _la  # LAPACK routines (C callbacks)"


def _routine(em, name, dtype, compiled=False):
    """The module-level name of routine `name` for `dtype` (declared at the module's top once).
    An entry function that runs as Python (`em.driver`) calls it through ctypes, unless the
    name is for a compiled function it calls (`compiled`)."""
    dt = np.dtype(dtype).name
    python = em.driver and not em.prefix and not compiled
    var = f"_la{'py' if python else ''}_{name}_{dt}"
    key = ("linalg routine", var)
    if key not in em.shared:
        block = []
        if ("linalg import",) not in em.shared:
            em.shared[("linalg import",)] = True
            block.append(_IMPORT)
        flag = ", python=True" if python else ""
        block.append(f'{var} = _la.external("{name}", "{dt}", njit, "{ABI}"{flag})')
        em.shared[key] = var
        em.functions.append(block)
    return var


def _call(em, name, dtype, args):
    r = ROUTINES[name]
    call = f"{_routine(em, name, dtype)}({', '.join(str(a) for a in args)})"
    if r.message is None:
        em.body.append(call)
    else:
        em.body += [f"if {call} != 0:", f"    raise np.linalg.LinAlgError({r.message!r})"]


def _operands(em, v, x):
    """Names bound to the operands as C-ordered arrays."""
    names = []
    for k, expr in enumerate(x):
        names.append(f"{v}_in{k}")
        em.body.append(f"{names[-1]} = _rt.contiguous({expr})")
    return names


def _parts(em, node):
    """Allocate the parts of a tuple-valued node; returns their names."""
    names = []
    for k, (shape, dtype) in enumerate(node.p["out_avals"]):
        names.append(em.tuple_part(node, k))
        em.body.append(f"{names[-1]} = {em.new_array(em.sizes.shape(shape), np_dtype(dtype))}")
    return names


def _sizes(em, shape):
    """(batch count, m, n) of a stack of matrices, as the code spells them."""
    S = em.sizes
    return S.product(shape[:-2]), S(shape[-2]), S(shape[-1])


def _ptrs(names):
    return [f"{n}.ctypes" for n in names]


def _into_buffer(em, node, v, x, name, args):
    """v = the node's buffer, written by routine `name` from the operands; `args` (sizes, flags)
    after the pointers."""
    ins = _operands(em, v, x)
    em.body.append(f"{v} = {em.buffer(node)}")
    _call(em, name, node.inputs[0].dtype, _ptrs(ins + [v]) + list(args))


def _solve_call(em, node, v, x, name, flags=()):
    """x = a^-1 b by routine `name` (a (..., n, n), b and x (..., n, k)), `flags` after the sizes."""
    a, b = node.inputs
    nb, n, _ = _sizes(em, a.shape)
    _into_buffer(em, node, v, x, name, [nb, n, em.sizes(b.shape[-1]), *flags])


@OPS.register("lu_solve")
def _lu_solve(em, node, v, x):
    """From the factorization (its operands after the matrix, which only its gradient reads)."""
    a, _, _, b = node.inputs
    nb, n, _ = _sizes(em, a.shape)
    _into_buffer(em, node, v, x[1:], "lu_solve", [nb, n, em.sizes(b.shape[-1]), int(node.p["trans"])])


@OPS.register("solve_triangular")
def _solve_triangular(em, node, v, x):
    """A float64 solve with many right-hand sides: a check pass, then dtrsm on the result's
    buffer, in column blocks on Numba's threads (see SOLVE_BLOCK_COLS), or in one block in a
    serial compiled entry (a serial Python entry calls the whole routine). A Python entry
    launches the blocks from a parallel group function of their own, which compiles without
    Numba (codegen/native.py). Other solves call the whole routine: the check, the branch
    to the whole routine for non-finite operands and the block call take about 8 lines of the
    entry where the routine's call takes 2, and a vector's solve gains nothing measurable."""
    p = node.p
    flags = (int(p["lower"]), int(p["trans"]), int(p["unit"]))
    a, b = node.inputs
    k = b.shape[-1]
    if (em.driver and not em.parallel) or node.dtype != np.float64 or a.dtype != np.float64 \
            or k < 2 * SOLVE_BLOCK_COLS or node.size * a.shape[-1] < GEMM_BLOCK_FLOPS:
        _solve_call(em, node, v, x, "solve_triangular", flags)
        return
    nb, n, ks = _sizes(em, b.shape)
    ins = _operands(em, v, x)
    em.body.append(f"{v} = {em.buffer(node)}")
    ready = _routine(em, "solve_triangular_ready", node.dtype)
    cols = _routine(em, "solve_triangular_cols", node.dtype)
    em.body += [f"{v}_st = {ready}({ins[0]}.ctypes, {ins[1]}.ctypes, {nb}, {n}, {ks}, {flags[2]})",
                f"if {v}_st == 1:",
                f"    raise np.linalg.LinAlgError({ROUTINES['solve_triangular'].message!r})"]
    # a matrix with infinities or NaNs: the whole routine, which gives NaN results as NumPy does
    em.body.append(f"elif {v}_st == 2:")
    body, em.body = em.body, []
    _call(em, "solve_triangular", a.dtype, _ptrs(ins + [v]) + [nb, n, ks, *flags])
    body += ["    " + line for line in em.body]
    flag_args = ", ".join(map(str, flags))
    # one column block of the solve, chunk `ch` of `nch` (of a block count the sizes fix)
    params = ["ch", "nch", "a", "b", "x", "nb", "n", "k", "lower", "trans", "unit"]
    args = f"{ins[0]}, {ins[1]}, {v}, {nb}, {n}, {ks}, {flag_args}"

    def blocks(maximum, minimum):
        """The block count, written with Python's max and min (a Python entry's line) or with
        mathlib's (compiled code, where Numba's overloads compile once per process)."""
        return f"{maximum}(1, {minimum}({SOLVE_MAX_BLOCKS}, {ks} // {SOLVE_BLOCK_COLS}))"

    def block(routine):
        return f"{routine}(a.ctypes, b.ctypes, x.ctypes, nb, n, k, ch * k // nch, (ch + 1) * k // nch, lower, trans, unit)"
    if em.driver:
        # a Python entry: the blocks launched by a parallel group of their own (a native
        # function, codegen/native.py), which sets the BLAS thread count around its launch
        group = em.function_name(
            ["if ch < 0:",
             "    blas_prev = _rt.blas_threads_local(1)",
             f"    _rt.parallel_self({SELF}, {', '.join(params[1:])})",
             "    _rt.blas_threads_local(blas_prev)",
             "    return",
             block(_routine(em, "solve_triangular_cols", node.dtype, compiled=True))],
            "solve_triangular_blocks", params, chunk="group")
        em.body = body + ["else:", f"    {group}(-1, {blocks('max', 'min')}, {args})"]
        return
    if em.parallel:
        chunk = em.function_name([block(cols)], "solve_triangular_chunk", params, chunk=True)
        solve = f"_rt.parallel_chunks({chunk}, {blocks('_max', '_min')}, {args})"
    else:
        solve = f"{cols}({ins[0]}.ctypes, {ins[1]}.ctypes, {v}.ctypes, {nb}, {n}, {ks}, 0, {ks}, {flag_args})"
    em.body = body + ["else:", f"    {v}_prev = _rt.blas_threads_local(1)", f"    {solve}",
                      f"    _rt.blas_threads_local({v}_prev)"]


@OPS.register("cholesky")
def _cholesky(em, node, v, x):
    nb, n, _ = _sizes(em, node.shape)
    ins = _operands(em, v, x)
    em.body.append(f"{v} = {em.buffer(node)}")
    _call(em, "cholesky", node.dtype, _ptrs(ins + [v]) + [nb, n])


@OPS.register("slogdet", "lu")
def _square_parts(em, node, v, x):
    """A stack of square matrices into the node's tuple parts, by the routine of its name."""
    a = node.inputs[0]
    nb, n, _ = _sizes(em, a.shape)
    ins = _operands(em, v, x)
    _call(em, node.op, a.dtype, _ptrs(ins + _parts(em, node)) + [nb, n])


@OPS.register("eigh")
def _eigh(em, node, v, x):
    a = node.inputs[0]
    nb, n, _ = _sizes(em, a.shape)
    ins = _operands(em, v, x)
    _call(em, "eigh", a.dtype, _ptrs(ins + _parts(em, node)) + [nb, n, int(node.p["lower"])])


@OPS.register("svd")
def _svd(em, node, v, x):
    a, p = node.inputs[0], node.p
    nb, m, n = _sizes(em, a.shape)
    ins = _operands(em, v, x)
    parts = _ptrs(ins + _parts(em, node))
    if p["compute_uv"]:
        _call(em, "svd", a.dtype, parts + [nb, m, n, int(p["full_matrices"]), int(p["hermitian"])])
    else:
        _call(em, "svdvals", a.dtype, parts + [nb, m, n, int(p["hermitian"])])


@OPS.register("qr")
def _qr(em, node, v, x):
    a = node.inputs[0]
    nb, m, n = _sizes(em, a.shape)
    ins = _operands(em, v, x)
    _call(em, "qr", a.dtype, _ptrs(ins + _parts(em, node)) + [nb, m, n, int(node.p["complete"])])


@OPS.register("pinv")
def _pinv(em, node, v, x):
    nb, m, n = _sizes(em, node.inputs[0].shape)
    _into_buffer(em, node, v, x, "pinv", [nb, m, n, repr(float(node.p["rcond"])), int(node.p["hermitian"])])


@OPS.register("lstsq")
def _lstsq(em, node, v, x):
    a, b = node.inputs
    S = em.sizes
    ins = _operands(em, v, x)
    nres = node.p["out_avals"][1][0][0]
    _call(em, "lstsq", a.dtype, _ptrs(ins + _parts(em, node))
          + [S(a.shape[0]), S(a.shape[1]), S(b.shape[1]), S(nres), repr(float(node.p["rcond"]))])


@OPS.register("expm")
def _expm(em, node, v, x):
    nb, n, _ = _sizes(em, node.inputs[0].shape)
    _into_buffer(em, node, v, x, "expm", [nb, n])
