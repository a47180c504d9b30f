"""Lowerings of the order family's primitives (jitgraph/ops/order.py): scans, the stable
argsort, gathers/scatter-adds along an axis, and binary searches (searchsorted).

CPU: each op is one call of a precompiled helper below (cached like runtime.py's), on
(pre, n, post) views of its C-contiguous operands; the generated module imports this module
as `_ord`. CUDA: a kernel with one thread per independent row along the axis (a grid-stride
loop over the (pre, post) positions), except take_along, one thread per output point.

Every lowering computes what the primitive's NumPy reference does, in the same order: running
sums and products add and multiply in index order (like np.cumsum), the sort is stable with
NaN last (np.argsort(kind="stable")), and scatter-adds accumulate repeated indices in index
order, so results are bitwise those of the reference interpreter.
"""
import numpy as np
from numba import njit

from .build import enable_cache, helpers_cache_dir
from .emit_cpu import OPS as CPU
from .emit_cuda import OPS as CUDA, _index, unravel
from .source import literal
from .symbols import by_symbol

_OPTS = dict(error_model="numpy", boundscheck=False)     # no fastmath: sums keep their order
RUN = 16          # argsort: insertion-sorted runs, then merged pairwise


# ---- precompiled helpers (CPU) ---------------------------------------------------------------------
@njit(**_OPTS)
def cumsum(x, out, reverse):
    """out[p, :, q] = running sums of x[p, :, q] (from the end when `reverse`)."""
    pre, n, post = x.shape
    for p in range(pre):
        for jj in range(n):
            j = n - 1 - jj if reverse else jj
            if jj == 0:
                for q in range(post):
                    out[p, j, q] = x[p, j, q]
            else:
                k = j + 1 if reverse else j - 1
                for q in range(post):
                    out[p, j, q] = out[p, k, q] + x[p, j, q]
    return out


@njit(**_OPTS)
def cumprod(x, out):
    """out[p, :, q] = running products of x[p, :, q]."""
    pre, n, post = x.shape
    for p in range(pre):
        for j in range(n):
            if j == 0:
                for q in range(post):
                    out[p, j, q] = x[p, j, q]
            else:
                for q in range(post):
                    out[p, j, q] = out[p, j - 1, q] * x[p, j, q]
    return out


@njit(**_OPTS)
def _before(a, b):
    """a sorts before b: NaN after every number."""
    return a < b or (b != b and a == a)


@njit(**_OPTS)
def _sort_row(keys, perm, kbuf, pbuf):
    """Sort the row `keys` in place and set perm to its stable sorting permutation:
    insertion-sorted runs of RUN, then bottom-up merges of (key, index) pairs (an element of
    the right run goes first only if strictly smaller), moving keys with their indices so
    that every comparison reads contiguous memory."""
    n = keys.shape[0]
    for j in range(n):
        perm[j] = j
    for lo in range(0, n, RUN):
        hi = min(lo + RUN, n)
        for i in range(lo + 1, hi):
            kt, t = keys[i], perm[i]
            j = i - 1
            while j >= lo and _before(kt, keys[j]):
                keys[j + 1], perm[j + 1] = keys[j], perm[j]
                j -= 1
            keys[j + 1], perm[j + 1] = kt, t
    width = RUN
    sk, sp, dk, dp = keys, perm, kbuf, pbuf
    flips = 0
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j, k = lo, mid, lo
            if mid == hi or not _before(sk[mid], sk[mid - 1]):
                for q in range(lo, hi):         # already in order
                    dk[q], dp[q] = sk[q], sp[q]
                continue
            while i < mid and j < hi:
                if _before(sk[j], sk[i]):
                    dk[k], dp[k] = sk[j], sp[j]
                    j += 1
                else:
                    dk[k], dp[k] = sk[i], sp[i]
                    i += 1
                k += 1
            while i < mid:
                dk[k], dp[k] = sk[i], sp[i]
                i += 1
                k += 1
            while j < hi:
                dk[k], dp[k] = sk[j], sp[j]
                j += 1
                k += 1
        sk, sp, dk, dp = dk, dp, sk, sp
        flips += 1
        width *= 2
    if flips % 2:
        for j in range(n):
            perm[j] = pbuf[j]


@njit(**_OPTS)
def argsort(x, out):
    """out[p, :, q] = the stable sorting permutation of x[p, :, q] (NaN last)."""
    pre, n, post = x.shape
    keys = np.empty(n, x.dtype)
    kbuf = np.empty(n, x.dtype)
    perm = np.empty(n, np.int64)
    pbuf = np.empty(n, np.int64)
    for p in range(pre):
        for q in range(post):
            for j in range(n):
                keys[j] = x[p, j, q]
            _sort_row(keys, perm, kbuf, pbuf)
            for j in range(n):
                out[p, j, q] = perm[j]
    return out


@njit(**_OPTS)
def take_along(x, idx, out):
    """out[p, j, q] = x[p, idx[p, j, q], q] (negative indices count from the end)."""
    pre, n, post = x.shape
    m = idx.shape[1]
    for p in range(pre):
        for j in range(m):
            for q in range(post):
                i = idx[p, j, q]
                if i < 0:
                    i += n
                if i < 0 or i >= n:
                    raise IndexError("index out of bounds in take_along_axis")
                out[p, j, q] = x[p, i, q]
    return out


@njit(**_OPTS)
def put_along_add(g, idx, out):
    """out = zeros, then out[p, idx[p, j, q], q] += g[p, j, q] in index order."""
    pre, n, post = out.shape
    m = idx.shape[1]
    for p in range(pre):
        for i in range(n):
            for q in range(post):
                out[p, i, q] = 0
        for j in range(m):
            for q in range(post):
                i = idx[p, j, q]
                if i < 0:
                    i += n
                if i < 0 or i >= n:
                    raise IndexError("index out of bounds in take_along_axis (gradient)")
                out[p, i, q] += g[p, j, q]
    return out


@njit(**_OPTS)
def searchsorted(a, v, out, right):
    """out[i] = the position of v[i] in sorted a (NaN last): the count of a's elements before
    it ("left"), or not after it (`right`), by binary search."""
    n = a.shape[0]
    for i in range(v.shape[0]):
        x = v[i]
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if (not _before(x, a[mid])) if right else _before(a[mid], x):
                lo = mid + 1
            else:
                hi = mid
        out[i] = lo
    return out


enable_cache([cumsum, cumprod, _before, _sort_row, argsort, take_along, put_along_add, searchsorted],
             helpers_cache_dir)
# generated code calls these through their symbols (symbols.py), not linked into each kernel
cumsum, cumprod, argsort, take_along, put_along_add, searchsorted = map(
    by_symbol, (cumsum, cumprod, argsort, take_along, put_along_add, searchsorted))


# ---- CPU lowerings -----------------------------------------------------------------------------------
def _helpers(em):
    """Make the generated module import this module as `_ord`."""
    em.require("from jitgraph.codegen import ops_order as _ord  # scans, sorts, gathers along an axis")


def _rows(em, shape, axis):
    """The (pre, n, post) view shape of an array of `shape` around `axis`."""
    S = em.sizes
    return f"({S.product(shape[:axis])}, {S(shape[axis])}, {S.product(shape[axis + 1:])})"


def _call(em, node, v, fn, *operands):
    """v = _ord.fn(operands..., node's buffer), each on its (pre, n, post) view."""
    _helpers(em)
    axis = node.p["axis"]
    args = [em.reshape(x, _rows(em, s, axis)) for x, s in operands]
    args.append(em.reshape(em.buffer(node), _rows(em, node.shape, axis)))
    call = f"_ord.{fn}({', '.join(args)})"
    em.body.append(f"{v} = {em.reshape(call, em.sizes.shape(node.shape))}")


@CPU.register("cumsum")
def _cumsum_cpu(em, node, v, x):
    _helpers(em)
    axis = node.p["axis"]
    view = _rows(em, node.shape, axis)
    call = f"_ord.cumsum({em.reshape(x[0], view)}, {em.reshape(em.buffer(node), view)}, {bool(node.p['reverse'])})"
    em.body.append(f"{v} = {em.reshape(call, em.sizes.shape(node.shape))}")


@CPU.register("cumprod", "argsort")
def _rowwise_cpu(em, node, v, x):
    _call(em, node, v, node.op, (x[0], node.inputs[0].shape))


@CPU.register("take_along", "put_along_add")
def _along_cpu(em, node, v, x):
    a, idx = node.inputs
    _call(em, node, v, node.op, (x[0], a.shape), (x[1], idx.shape))


@CPU.register("searchsorted")
def _searchsorted_cpu(em, node, v, x):
    _helpers(em)
    S = em.sizes
    a, vals = node.inputs
    flat = f"({S.product(vals.shape)},)"
    call = (f"_ord.searchsorted({em.reshape(x[0], f'({S(a.shape[0])},)')}, {em.reshape(x[1], flat)}, "
            f"{em.reshape(em.buffer(node), flat)}, {bool(node.p['right'])})")
    em.body.append(f"{v} = {em.reshape(call, S.shape(node.shape))}")


# ---- CUDA lowerings ----------------------------------------------------------------------------------
class _Rows:
    """A kernel with one thread per row along `axis` of `shape` (grid-stride over the rows)."""

    def __init__(self, em, node, shape, axis):
        self.em, self.axis = em, axis
        self.k = k = em.kernel(f"{node.op} -> {em.names[node.id]}")
        k.lines.append(em.comment(node))
        cols = tuple(shape[:axis]) + tuple(shape[axis + 1:])
        self.total = em.sizes.product(cols)
        k.scalar("total", self.total)
        k.lines.append("for p in range(cuda.grid(1), total, cuda.gridsize(1)):")
        lines, self.cix = unravel("p", cols, [f"i{d}" for d in range(len(cols))], k.S, "    ")
        k.lines += lines

    def ix(self, j):
        """The index of element j of the thread's row."""
        return self.cix[:self.axis] + [j] + self.cix[self.axis:]

    def at(self, array, j):
        """array[the row's element j], for an array of the row shape stored as `array`."""
        self.k.array(array)
        return f"{array}[{_index(self.ix(j))}]"

    def read(self, x, j):
        """Value x (a graph node) at the row's element j."""
        return self.em.read(self.k, x, self.ix(j))

    def launch(self, node, v, *pre):
        em = self.em
        em.host.append(em.comment(node))
        em.host += list(pre)
        em.host.append(f"{v} = {em.buffer(node)}")
        em.host.append(self.k.launch(f"_rt.blocks({self.total}, TPB)"))


@CUDA.register("cumsum", "cumprod")
def _scan_cuda(em, node, v):
    x = node.inputs[0]
    axis = node.p["axis"]
    r = _Rows(em, node, node.shape, axis)
    n = r.k.S(node.shape[axis])
    symbol = "*" if node.op == "cumprod" else "+"
    rev = node.op == "cumsum" and node.p["reverse"]
    j = f"{n} - 1 - jj" if rev else "jj"
    r.k.lines += [
        f"    acc = {literal(0, node.dtype)}  # typed; never combined (the first element is kept)",
        f"    for jj in range({n}):",
        f"        j = {j}",
        f"        t = {r.read(x, 'j')}",
        "        if jj > 0:",
        f"            t = acc {symbol} t",
        "        acc = t",
        f"        {r.at(v, 'j')} = acc"]
    r.launch(node, v)


def _before_expr(a, b, dtype):
    return f"{a} < {b} or ({b} != {b} and {a} == {a})" if np.dtype(dtype).kind == "f" else f"{a} < {b}"


@CUDA.register("argsort")
def _argsort_cuda(em, node, v):
    """Per row: insertion-sorted runs of RUN, then bottom-up merges into a scratch array and
    back (stable: the right run's element goes first only if strictly smaller)."""
    x = node.inputs[0]
    axis = node.p["axis"]
    r = _Rows(em, node, node.shape, axis)
    n = r.k.S(node.shape[axis])
    t = f"{v}_t"
    r.k.array(t)
    less = _before_expr("ka", "kb", x.dtype)
    L = r.k.lines
    L += [f"    for j in range({n}):", f"        {r.at(v, 'j')} = j",
          f"    for lo in range(0, {n}, {RUN}):",
          f"        hi = _min(lo + {RUN}, {n})",
          "        for i in range(lo + 1, hi):",
          f"            e = {r.at(v, 'i')}",
          f"            ka = {r.read(x, 'e')}",
          "            j = i - 1",
          "            while j >= lo:",
          f"                u = {r.at(v, 'j')}",
          f"                kb = {r.read(x, 'u')}",
          f"                if not ({less}):",
          "                    break",
          f"                {r.at(v, 'j + 1')} = u",
          "                j -= 1",
          f"            {r.at(v, 'j + 1')} = e",
          f"    width = {RUN}",
          f"    while width < {n}:",
          f"        for lo in range(0, {n}, 2 * width):",
          f"            mid = _min(lo + width, {n})",
          f"            hi = _min(lo + 2 * width, {n})",
          "            i = lo",
          "            j = mid",
          "            k = lo",
          "            while i < mid and j < hi:",
          f"                a = {r.at(v, 'i')}",
          f"                b = {r.at(v, 'j')}",
          f"                ka = {r.read(x, 'b')}",
          f"                kb = {r.read(x, 'a')}",
          f"                if {less}:",
          f"                    {r.at(t, 'k')} = b",
          "                    j += 1",
          "                else:",
          f"                    {r.at(t, 'k')} = a",
          "                    i += 1",
          "                k += 1",
          "            while i < mid:",
          f"                {r.at(t, 'k')} = {r.at(v, 'i')}",
          "                i += 1",
          "                k += 1",
          "            while j < hi:",
          f"                {r.at(t, 'k')} = {r.at(v, 'j')}",
          "                j += 1",
          "                k += 1",
          f"        for j in range({n}):",
          f"            {r.at(v, 'j')} = {r.at(t, 'j')}",
          "        width *= 2"]
    r.launch(node, v, f"{t} = _rt.empty({em.sizes.shape(node.shape)}, np.int64)  # merge scratch")


@CUDA.register("take_along")
def _take_along_cuda(em, node, v):
    x, idx = node.inputs
    axis = node.p["axis"]
    em.uses_err = True

    def value(k, ix):
        n = k.S(x.shape[axis])
        k.array("err")
        lines = [f"ij = {em.read(k, idx, ix)}", "if ij < 0:", f"    ij += {n}",
                 f"ok = ij >= 0 and ij < {n}", "if not ok:", "    err[0] = 1"]
        xi = ix[:axis] + ["ij"] + ix[axis + 1:]
        return lines, f"{em.read(k, x, xi)} if ok else {literal(0, node.dtype)}"
    em.emit_pointwise(node, value)


@CUDA.register("searchsorted")
def _searchsorted_cuda(em, node, v):
    """One thread per value: a binary search of the sorted array."""
    a, vals = node.inputs

    def value(k, ix):
        n = k.S(a.shape[0])
        before = (f"not ({_before_expr('ss_x', 'ss_a', a.dtype)})" if node.p["right"]
                  else _before_expr("ss_a", "ss_x", a.dtype))
        lines = [f"ss_x = {em.read(k, vals, ix)}", "ss_lo = 0", f"ss_hi = {n}", "while ss_lo < ss_hi:",
                 "    ss_mid = (ss_lo + ss_hi) // 2", f"    ss_a = {em.read(k, a, ['ss_mid'])}",
                 f"    if {before}:", "        ss_lo = ss_mid + 1", "    else:", "        ss_hi = ss_mid"]
        return lines, "ss_lo"
    em.emit_pointwise(node, value)


@CUDA.register("put_along_add")
def _put_along_cuda(em, node, v):
    """Per row: zeros, then g's row added at the indices in order (repeats accumulate)."""
    g, idx = node.inputs
    axis = node.p["axis"]
    em.uses_err = True
    r = _Rows(em, node, node.shape, axis)
    n, m = r.k.S(node.shape[axis]), r.k.S(idx.shape[axis])
    r.k.array("err")
    r.k.lines += [f"    for i in range({n}):", f"        {r.at(v, 'i')} = {literal(0, node.dtype)}",
                  f"    for j in range({m}):",
                  f"        ij = {r.read(idx, 'j')}",
                  "        if ij < 0:", f"            ij += {n}",
                  f"        if ij >= 0 and ij < {n}:",
                  f"            {r.at(v, 'ij')} += {r.read(g, 'j')}",
                  "        else:", "            err[0] = 1"]
    r.launch(node, v)
