"""Scatters at evenly spaced indices as sums of placed slices, for the CPU target
(`window_scatters`).

The adjoint of a gather by windows (`sliding_window_view`, a convolution's im2col) is a
`scatter_add` whose index table is affine, `c + s * j + t * i` for the window's position `j`
and its offset `i`: each window's values land on the output shifted by their offset. As a
library step the scatter wants its index axes contiguous, so its operand was first stored
transposed (a conv net's weight-sized gradient: two transposed copies and two scatters, 2.5
of 9.5 ms per call). Written as the sum over the smaller index axis of one `pad_slice` per
offset (window offset `i`: the slice of the operand at `i`, placed from `c + t * i` every `s`
along the scattered axis), it is index views and adds, which one fused loop computes while
reading the operand by index: no copy, no scatter. A one-axis affine table is one
`pad_slice`. Tables whose summed axis is long (over MAX_TERMS), or that place two indices on
one point within a term (`s` below 1: repeats or a reversed order), stay scatters.

The rewrite runs on the CPU target's graphs after differentiation, as codegen/products.py's.

`accumulate_scatters`: a sum with scatter_adds among its terms (the adjoint of an array an
iteration gathers a few cells from, added to the array's cotangent; an embedding's gradient
added to its weight decay) adds each scatter's rows into the sum of the other terms
(`scatter_add_to`) instead of scattering into zeros and adding whole arrays: in a rerolled
dynamic programme's reverse loop, three zero-filled tables and a pass adding four per cell.
Where the sum's other terms die there, the rows are added in place (codegen/memory.py).
"""
import numpy as np

from jitgraph.graph import Node

from .fusion import affine_map
from .products import rebuild

# Terms of one fused sum: up to 32 covers filter lengths up to 31 (a Savitzky-Golay window of
# 21 over 16 channels of 8,000 samples, np.convolve's gradient: 14.5 ms as scatters, 6.3 ms as
# sums, compiles no longer)
MAX_TERMS = 32


def _plan(n):
    """(table axis summed over, c, its coefficient, the other axis's coefficient) for a
    scatter_add `n` this rewrite takes, else None."""
    g, idx = n.inputs
    if n.op != "scatter_add" or idx.op != "const" or idx.ndim not in (1, 2) or idx.size == 0 \
            or n.dtype.kind not in "iuf":
        return None
    size = n.p["size"]
    table = np.asarray(idx.value)
    if not ((table >= -size) & (table < size)).all():
        return None
    table = np.where(table < 0, table + size, table).astype(np.int64)
    m = affine_map(table)
    if m is None:
        return None
    c, coefs = m
    if idx.ndim == 1:
        return (None, c, 0, coefs[0]) if coefs[0] >= 1 or table.size == 1 else None
    q = int(np.argmin(table.shape))
    if table.shape[q] > MAX_TERMS or (coefs[1 - q] < 1 and table.shape[1 - q] > 1):
        return None
    return q, c, coefs[q], coefs[1 - q]


def _placed(x, n, axis, start, step):
    """x (n's shape but `axis`) placed into zeros of n's shape from `start` every `step`."""
    count = x.shape[axis]
    starts = [0] * n.ndim
    stops = list(n.shape)
    steps = [1] * n.ndim
    starts[axis] = start
    steps[axis] = max(step, 1)
    stops[axis] = start + steps[axis] * (count - 1) + 1
    return Node("pad_slice", [x], {"shape": n.shape, "starts": tuple(starts), "stops": tuple(stops),
                                   "steps": tuple(steps)}, n.shape, n.dtype)


def _terms(n, g, plan):
    """The pad_slices whose sum is scatter_add `n` of `g` (made already)."""
    q, c, coef_q, step = plan
    axis = n.p["axis"]
    if q is None:
        return [_placed(g, n, axis, c, step)]
    cut = axis + q                    # the axis of g summed over
    out = []
    for i in range(g.shape[cut]):
        starts = [0] * g.ndim
        stops = list(g.shape)
        starts[cut], stops[cut] = i, i + 1
        part = Node("slice", [g], {"starts": tuple(starts), "stops": tuple(stops), "steps": (1,) * g.ndim},
                    tuple(1 if d == cut else s for d, s in enumerate(g.shape)), g.dtype)
        shape = g.shape[:cut] + g.shape[cut + 1:]
        part = Node("reshape", [part], {"shape": shape}, shape, g.dtype)
        out.append(_placed(part, n, axis, c + coef_q * i, step))
    return out


def window_scatters(graph):
    """`graph` with each scatter_add by an affine index table (see the module doc) as a sum of
    pad_slices; `graph` itself when there is none."""
    plans = {n.id: p for n in graph.nodes if n.op == "scatter_add" for p in [_plan(n)] if p is not None}
    if not plans:
        return graph

    def make(n, new):
        if n.id not in plans:
            return None
        terms = _terms(n, new.get(n.inputs[0].id, n.inputs[0]), plans[n.id])
        total = terms[0]
        for t in terms[1:]:
            total = Node("add", [total, t], (), n.shape, n.dtype)
        return total
    return rebuild(graph, make)


__all__ = ["window_scatters"]


def _scatter_terms(n, users, outputs):
    """(dense terms, scatter_adds) of the sum `n`, left to right: its add nodes read by one
    add of the sum only are opened up; scatter_adds read by the sum alone are its scatter
    terms. (A stack, not recursion: an unrolled running sum is a chain thousands long.)"""
    dense, scat = [], []
    stack = [(n, True)]
    while stack:
        x, top = stack.pop()
        alone = top or (len(users[x.id]) == 1 and x.id not in outputs)
        if x.op == "scatter_add" and not top and alone:
            scat.append(x)
        elif x.op == "add" and alone and x.inputs[0] is not x.inputs[1]:
            stack += [(x.inputs[1], False), (x.inputs[0], False)]
        else:
            dense.append(x)
    return dense, scat


def accumulate_scatters(graph):
    """`graph` with each sum of terms among which are scatter_adds read by it alone made as the
    sum of its other terms with each scatter's rows added in (`scatter_add_to`); `graph`
    itself when there is none."""
    users = graph.users()
    outputs = {o.id for o in graph.outputs}
    found = {}
    for n in graph.nodes:
        if n.op != "add" or n.dtype.kind not in "iuf":
            continue
        up = users[n.id]
        if len(up) == 1 and up[0].op == "add" and n.id not in outputs:
            continue        # inside a larger sum: its top rewrites it
        dense, scat = _scatter_terms(n, users, outputs)
        if scat and any(s.shape != n.shape or s.dtype != n.dtype for s in scat + dense):
            continue
        if scat and (dense or len(scat) > 1):
            found[n.id] = (dense, scat)
    if not found:
        return graph

    def make(n, new):
        if n.id not in found:
            return None
        dense, scat = found[n.id]
        get = lambda x: new.get(x.id, x)
        if dense:
            total = get(dense[0])
            for d in dense[1:]:
                total = Node("add", [total, get(d)], {}, n.shape, n.dtype)
        else:
            total, scat = get(scat[0]), scat[1:]
        for q in scat:
            g, idx = q.inputs
            total = Node("scatter_add_to", [total, get(idx), get(g)], {"axis": q.p["axis"]}, n.shape, n.dtype)
        return total
    return rebuild(graph, make)
