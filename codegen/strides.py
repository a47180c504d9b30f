"""Strided views: a value that reads a stored array through slices, transposes, stacks of
evenly spaced slices, unit reshapes and broadcasts is NumPy's (offset, shape, strides) over
that array's buffer. A batched product reads such an operand in place: BLAS takes a matrix
whose rows or columns have unit stride at any leading dimension, so attention's heads cut
from one (batch, time, 3 * d) array with np.split and np.stack, or a batch of matrices
transposed with swapaxes, reach BLAS without the copy a loop would make of them.

Offsets and strides (in elements) are polynomials in the program's sizes: a dict from a
monomial (the sorted tuple of the sizes > 1 it multiplies; the emitter spells each size by
its symbol, `source.Sizes`) to an integer coefficient (a slice's start, a literal). They are
derived from the view ops alone, so they hold for every set of sizes the generated source
serves; decisions that compare two of them (may two axes merge? are a stack's parts evenly
spaced?) compare them as polynomials, never as the numbers of one trace.
"""
from collections import namedtuple

ZERO = {}
ONE = {(): 1}

StridedView = namedtuple("StridedView", "base offset shape strides")
StridedView.__doc__ = """`base` (a stored, C-ordered value) read at element offset `offset`
with `shape` and element `strides` (polynomials; an axis of size 1 has stride ZERO)."""


def _clean(p):
    return {m: c for m, c in p.items() if c}


def padd(p, q, scale=1):
    """p + scale * q"""
    out = dict(p)
    for m, c in q.items():
        out[m] = out.get(m, 0) + scale * c
    return _clean(out)


def pscale(p, k):
    """k * p, for an integer k"""
    return _clean({m: c * k for m, c in p.items()})


def ptimes(p, size):
    """size * p, `size` a size of the program (a symbol when > 1)"""
    if size == 1:
        return dict(p)
    return {tuple(sorted(m + (size,))): c for m, c in p.items()}


def c_strides(shape):
    """The element strides of a C-ordered array of `shape` (ZERO on its unit axes)."""
    out, step = [], ONE
    for d in reversed(shape):
        out.insert(0, step if d != 1 else ZERO)
        step = ptimes(step, d)
    return out


def value(p):
    """The polynomial's value at the traced sizes."""
    total = 0
    for m, c in p.items():
        for d in m:
            c *= d
        total += c
    return total


def spell(p, sizes):
    """Code for p: its terms `c * n0 * n1`, summed, the sizes spelled by `sizes`."""
    text = ""
    for m, c in sorted(p.items()):
        factors = [sizes(d) for d in m]
        if abs(c) != 1 or not factors:
            factors.insert(0, str(abs(c)))
        term = " * ".join(factors)
        if not text:
            text = term if c > 0 else f"-{term}"
        else:
            text += (" + " if c > 0 else " - ") + term
    return text or "0"


def view_of(part, node, is_base):
    """The StridedView of `node` over a stored value of partition `part` that `is_base(node)`
    accepts (stored in a C-ordered array of its shape), or None: through virtual broadcasts
    and unit reshapes and the index views slice, transpose and concatenate (evenly spaced
    parts of one array: a stack of slices)."""
    if node.id in part.virtual:
        f = view_of(part, node.inputs[0], is_base)
        if f is None:
            return None
        if node.op == "broadcast":
            lead = node.ndim - len(f.shape)
            strides = [ZERO] * lead + [ZERO if node.shape[lead + d] == 1 or f.shape[d] == 1 else s
                                       for d, s in enumerate(f.strides)]
        else:           # a unit reshape: drops or inserts axes of size 1
            kept = [s for s, d in zip(f.strides, f.shape) if d != 1]
            strides = [ZERO if d == 1 else kept.pop(0) for d in node.shape]
        return StridedView(f.base, f.offset, tuple(node.shape), strides)
    if node.id in part.index_views:
        if node.op == "slice":
            f = view_of(part, node.inputs[0], is_base)
            if f is None:
                return None
            p = node.p
            off = f.offset
            for a, s in zip(p["starts"], f.strides):
                off = padd(off, s, a)
            strides = [ZERO if d == 1 else pscale(s, c) for s, c, d in zip(f.strides, p["steps"], node.shape)]
            return StridedView(f.base, off, tuple(node.shape), strides)
        if node.op == "transpose":
            f = view_of(part, node.inputs[0], is_base)
            if f is None:
                return None
            perm = node.p["perm"]
            return StridedView(f.base, f.offset, tuple(node.shape), [f.strides[a] for a in perm])
        if node.op == "concatenate":
            return _stack(part, node, is_base)
        return None
    if not is_base(node):
        return None
    return StridedView(node, ZERO, tuple(node.shape), c_strides(node.shape))


def _stack(part, node, is_base):
    """A concatenate of views of one array with equal shapes and strides whose offsets step
    by one amount: along the axis, a stride of that amount (parts of extent 1: np.stack's
    parts) or the parts' own stride (adjacent ranges)."""
    axis = node.p["axis"]
    parts = [view_of(part, x, is_base) for x in node.inputs]
    if any(f is None for f in parts):
        return None
    first = parts[0]
    if len(parts) == 1:
        return StridedView(first.base, first.offset, tuple(node.shape), first.strides)
    extent = first.shape[axis]
    for f in parts[1:]:
        if f.base is not first.base or f.shape != first.shape \
                or any(f.strides[d] != first.strides[d] for d in range(len(f.shape)) if d != axis):
            return None
    step = padd(parts[1].offset, first.offset, -1)
    for f, g in zip(parts[1:], parts[2:]):
        if padd(g.offset, f.offset, -1) != step:
            return None
    strides = list(first.strides)
    if extent == 1:
        strides[axis] = step
    elif step != pscale(first.strides[axis], extent) or parts[1].strides[axis] != first.strides[axis]:
        return None
    return StridedView(first.base, first.offset, tuple(node.shape), strides)


def batched_matrices(views, batch):
    """The views of a batched product's operands (and result), each (batch..., r, c) with the
    same `batch` dims, as 4-D views (g0, g1, r, c): their batch axes merged into at most two
    groups, merging two adjacent axes only where every view steps over the outer one as over
    the whole inner one. None when more than two groups remain."""
    nb = len(batch)
    keep = [d for d in range(nb) if batch[d] != 1]
    groups = []
    for d in keep:
        if groups and all(v.strides[groups[-1][-1]] == ptimes(v.strides[d], batch[d]) for v in views):
            groups[-1].append(d)
        else:
            groups.append([d])
    if len(groups) > 2:
        return None
    while len(groups) < 2:
        groups.insert(0, [])
    out = []
    for v in views:
        shape, strides = [], []
        for g in groups:
            size = 1
            for d in g:
                size *= batch[d]
            shape.append(size)
            strides.append(v.strides[g[-1]] if g and size != 1 else ZERO)
        out.append(StridedView(v.base, v.offset, tuple(shape) + v.shape[nb:], strides + list(v.strides[nb:])))
    return out, [[batch[d] for d in g] for g in groups]


def blas_readable(v, row_major=False):
    """Are v's matrices (its last two axes, strides as `matrix_strides` gives them) ones BLAS
    reads in place: one axis of unit stride (the last, if `row_major`), the other stepping by
    at least the first's extent (the leading dimension), at the traced sizes? (The runtime
    checks each call's matrices again and multiplies any other layout by loops.)"""
    r, c = v.shape[-2:]
    sr, sc = v.strides[-2:]
    if sc == ONE:
        return value(sr) >= max(c, 1)
    if sr == ONE and not row_major:
        return value(sc) >= max(r, 1)
    return False


def matrix_strides(v):
    """The strides of v's last two axes as BLAS should see them: an axis of size 1 gets the
    stride a C- (or F-) ordered matrix of the same extents would have."""
    r, c = v.shape[-2:]
    sr, sc = v.strides[-2:]
    if c == 1 and r == 1:
        return [ONE, ONE]
    if c == 1:
        return [sr, ONE] if sr != ONE else [ONE, ptimes(ONE, r)]
    if r == 1:
        return [ptimes(sc, c) if sc == ONE else ONE, sc]
    return [sr, sc]
