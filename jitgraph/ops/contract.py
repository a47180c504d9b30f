"""Tensor contractions (einsum, tensordot, kron, cross) and diagonals and triangles (trace,
diagonal, diag, tril, triu): composites of existing primitives, so their derivatives of every
order follow from those primitives' rules.

einsum parses its subscripts into labels, takes the diagonals an operand's repeated labels
ask for, applies NumPy's broadcasting of size-1 axes, sums labels only one operand has, and
then contracts the operands two at a time in a greedy order (`products.contract_pair`:
transposes, reshapes and a batched matmul, or a broadcast product and a sum).

A diagonal is a strided slice of the flattened pair of axes: element (i, i + k) of an
(n, m) block is element k + i * (m + 1) of its n * m values, so `diagonal` is a reshape and a
`slice` (whose adjoint, `pad_slice`, writes it back into zeros) and `diag` of a vector is a
`pad_slice`: exact, and no index array.
"""
import builtins
import operator
import sys
import warnings
from collections import Counter

import numpy as np

from ..core import Tensor, bind
from ..errors import ShapeError, is_library_frame, where
from ..numpy_api import as_operand, broadcast_shapes, broadcast_to, cast, no_out, norm_axis, reshape, shape_of, \
    transpose
from .elementwise import multiply, negative, subtract, where_
from .index import getitem
from .products import broadcast_labels, contract_pair, contract_to, finish, permute, product_dtype, sum_labels
from .reduce import sum
from .registry import implements
from .shape import moveaxis, ravel, stack


def _any_tensor(xs):
    return builtins.any(isinstance(x, Tensor) for x in xs)


def _size(shape):
    return int(np.prod(shape, dtype=np.int64))


# ---- einsum: subscripts ---------------------------------------------------------------------------
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _sublist_term(sub):
    """One einsum sublist (ints in [0, 52) and Ellipsis) as subscript text; 0-25 are 'A'-'Z'
    and 26-51 'a'-'z', as NumPy's C implementation numbers them (ascending labels sort the
    implicit output the same way)."""
    out = []
    for s in sub:
        if s is Ellipsis:
            out.append("...")
            continue
        try:
            i = operator.index(s)
        except TypeError:
            raise TypeError(f"For this input type lists must contain either int or Ellipsis{where()}") from None
        if not 0 <= i < len(LETTERS):
            raise ValueError(f"subscript is not within the valid range [0, 52){where()}")
        out.append(LETTERS[i])
    return "".join(out)


def _split_operands(args):
    """(subscripts text, operands) of einsum's arguments: a subscripts string and operands, or
    operands interleaved with sublists (op0, sub0, op1, sub1, ..., [sub_out])."""
    if not args:
        raise ValueError(f"No input operands{where()}")
    if isinstance(args[0], str):
        return args[0], list(args[1:])
    operands, terms = list(args[0::2]), [_sublist_term(s) for s in args[1::2]]
    text = ",".join(terms[:len(operands)])
    if len(args) % 2:                 # a trailing output sublist
        operands, out = operands[:-1], _sublist_term(args[-1])
        text = ",".join(terms[:len(operands)]) + "->" + out
    return text, operands


def _ellipsis(k):
    """The label of the k-th axis from the end of an ellipsis (k = 1 is the last)."""
    return ("...", k)


def _parse_term(term, what):
    """(letters before '...', whether there is one, letters after) of one term."""
    if term.count(".") and (term.count("...") != 1 or term.count(".") != 3):
        raise ValueError(f"einstein sum subscripts string contains a '.' that is not part of an "
                         f"ellipsis ('...') in {what}{where()}")
    head, dots, tail = term.partition("...")
    for c in head + tail:
        if c not in LETTERS:
            raise ValueError(f"invalid subscript '{c}' in einstein sum subscripts string, "
                             f"subscripts must be letters{where()}")
    return head, bool(dots), tail


def parse_subscripts(subscripts, shapes):
    """(labels of each operand's axes, labels of the output) for einsum subscripts.

    A label is a letter, or ("...", k) for the k-th axis from the end of an ellipsis (ellipses
    align on the right, as broadcasting does)."""
    text = subscripts.replace(" ", "")
    if text.count("->") > 1 or text.replace("->", "").count("-") or text.replace("->", "").count(">"):
        raise ValueError(f"einstein sum subscript string does not contain proper '->' output "
                         f"specified{where()}")
    inputs, arrow, output = text.partition("->")
    terms = inputs.split(",")
    if len(terms) < len(shapes):
        raise ValueError(f"more operands provided to einstein sum function than specified in the "
                         f"subscripts string{where()}")
    if len(terms) > len(shapes):
        raise ValueError(f"fewer operands provided to einstein sum function than specified in the "
                         f"subscripts string{where()}")
    labels, n_ellipsis = [], 0
    for i, (term, shape) in enumerate(zip(terms, shapes)):
        head, dots, tail = _parse_term(term, f"operand {i}")
        nd = len(shape)
        if len(head) + len(tail) > nd:
            raise ValueError(f"einstein sum subscripts string contains too many subscripts for "
                             f"operand {i}{where()}")
        if not dots and len(head) + len(tail) < nd:
            raise ValueError("operand has more dimensions than subscripts given in einstein sum, but "
                             "no '...' ellipsis provided to broadcast the extra dimensions."
                             + where())
        k = nd - len(head) - len(tail)
        n_ellipsis = builtins.max(n_ellipsis, k)
        labels.append(tuple(head) + tuple(_ellipsis(j) for j in range(k, 0, -1)) + tuple(tail))
    dims = tuple(_ellipsis(j) for j in range(n_ellipsis, 0, -1))
    if not arrow:
        counts = Counter(lab for ls in labels for lab in ls if isinstance(lab, str))
        return labels, dims + tuple(sorted(c for c, n in counts.items() if n == 1))
    head, dots, tail = _parse_term(output, "the output")
    seen = {lab for ls in labels for lab in ls}
    for i, c in enumerate(head + tail):
        if c in (head + tail)[:i]:
            raise ValueError(f"einstein sum subscripts string includes output subscript '{c}' "
                             f"multiple times{where()}")
        if c not in seen:
            raise ValueError(f"einstein sum subscripts string included output subscript '{c}' which "
                             f"never appeared in an input{where()}")
    if not dots and n_ellipsis:
        raise ValueError("output has more dimensions than subscripts given in einstein sum, but no "
                         "'...' ellipsis provided to broadcast the extra dimensions." + where())
    return labels, tuple(head) + (dims if dots else ()) + tuple(tail)


# ---- einsum: the contraction --------------------------------------------------------------------
def take_diagonals(x, labels, index):
    """x with each repeated label's axes replaced by their diagonal (one axis, where the first
    occurrence was); returns (x, labels, each label once)."""
    shape = tuple(shape_of(x))
    unique = list(dict.fromkeys(labels))
    if len(unique) == len(labels):
        return x, tuple(labels)
    groups = [[i for i, lab in enumerate(labels) if lab == u] for u in unique]
    for u, g in zip(unique, groups):
        if len({shape[i] for i in g}) > 1:
            name = u if isinstance(u, str) else "..."
            raise ValueError(f"dimensions in operand {index} for collapsing index '{name}' don't match "
                             f"({shape[g[0]]} != {[shape[i] for i in g if shape[i] != shape[g[0]]][0]})"
                             f"{where()}")
    x = transpose(x, [i for g in groups for i in g])
    x = reshape(x, [shape[g[0]] ** len(g) for g in groups])
    key = []
    for g in groups:
        n, r = shape[g[0]], len(g)
        # (i, i, ..., i) of an n**r block is element i * (1 + n + ... + n**(r-1)) of it
        step = builtins.sum(n ** j for j in range(r)) if n > 1 else 1
        key.append(slice(0, (n - 1) * step + 1, step) if n > 0 else slice(0, 0))
    return getitem(x, tuple(key)), tuple(unique)


def _greedy_path(labels, sizes, out):
    """NumPy's path form [(i, j), ...] (each step removes operands i and j and appends their
    product): at each step the pair whose product costs the fewest multiplications, then
    the smallest result."""
    labels = [set(ls) for ls in labels]
    path = []
    while len(labels) > 1:
        best = None
        for i in range(len(labels)):
            for j in range(i + 1, len(labels)):
                keep = set(out).union(*[ls for k, ls in enumerate(labels) if k not in (i, j)])
                both = labels[i] | labels[j]
                cost = (_size([sizes[lab] for lab in both]), _size([sizes[lab] for lab in both if lab in keep]))
                if best is None or cost < best[0]:
                    best = (cost, i, j, {lab for lab in both if lab in keep})
        _, i, j, result = best
        labels = [ls for k, ls in enumerate(labels) if k not in (i, j)] + [result]
        path.append((i, j))
    return path


def _path(optimize, labels, sizes, out):
    """The contraction path: a list of tuples of operand positions (NumPy's einsum_path form)."""
    if isinstance(optimize, (list, tuple)) and not isinstance(optimize, str):
        if not optimize or optimize[0] != "einsum_path":
            raise TypeError(f"Did not understand the path: {optimize}{where()}")
        path, n = [], len(labels)
        for step in optimize[1:]:
            step = tuple(int(i) for i in step)
            if len(set(step)) != len(step) or builtins.any(not 0 <= i < n for i in step):
                raise ValueError(f"einsum_path step {step} does not name distinct operands among "
                                 f"{n}{where()}")
            path.append(step)
            n = n - len(step) + 1
        if n != 1:
            raise RuntimeError(f"Invalid einsum_path is specified: {n - 1} more operands has to be "
                               f"contracted.{where()}")
        return path
    if optimize not in (True, False, None, "greedy", "optimal"):
        raise TypeError(f"Did not understand the path: {optimize}{where()}")
    # every strategy contracts greedily: the order changes the cost, not the value
    return _greedy_path(labels, sizes, out)


def contract(xs, labels, out, dtype, optimize=False):
    """The einsum of operands xs (axes labelled `labels`) into the labels `out`, in `dtype`."""
    xs, dt = product_dtype(xs, dtype)
    xs, labels = map(list, zip(*[take_diagonals(x, ls, i) for i, (x, ls) in enumerate(zip(xs, labels))]))
    xs, labels = broadcast_labels(xs, labels)
    # labels only one operand has and the output lacks are summed right away
    counts = Counter(lab for ls in labels for lab in ls)
    for i, (x, ls) in enumerate(zip(xs, labels)):
        xs[i], labels[i] = sum_labels(x, ls, {lab for lab in ls if counts[lab] == 1 and lab not in out})
    sizes = {}
    for x, ls in zip(xs, labels):
        sizes.update(zip(ls, shape_of(x)))
    for step in _path(optimize, labels, sizes, out):
        group = [(xs[i], labels[i]) for i in step]
        rest = [k for k in range(len(xs)) if k not in step]
        xs, labels = [xs[k] for k in rest], [labels[k] for k in rest]
        x, lx = group[0]
        for k, (y, ly) in enumerate(group[1:]):
            keep = set(out).union(*labels, *[ls for _, ls in group[k + 2:]])
            x, lx = contract_pair(x, lx, y, ly, keep, prefer=out)
        xs.append(x)
        labels.append(lx)
    (x,), (lx,) = xs, labels
    x, lx = sum_labels(x, lx, set(lx) - set(out))
    return finish(permute(x, lx, out), dt)


@implements(np.einsum)
def einsum(*operands, out=None, optimize=False, dtype=None, order="K", casting="safe"):
    """np.einsum on traced values: any subscripts (implicit or explicit output, ellipses,
    repeated labels for diagonals and traces), the sublist form, `dtype` and `casting`, and
    `optimize` (False, True, "greedy", "optimal" or an explicit ["einsum_path", ...] path:
    operands are always contracted pairwise, in that path's order or greedily)."""
    no_out(out, "np.einsum")
    subscripts, xs = _split_operands(operands)
    xs = [as_operand(x) for x in xs]
    if not _any_tensor(xs):
        return np.einsum(*operands, optimize=optimize, dtype=dtype, order=order, casting=casting)
    labels, out_labels = parse_subscripts(subscripts, [shape_of(x) for x in xs])
    if dtype is not None:
        dtype = np.dtype(dtype)
        for i, x in enumerate(xs):
            if not np.can_cast(x.dtype, dtype, casting):
                raise TypeError(f"Iterator operand {i} dtype could not be cast from dtype('{x.dtype}') to "
                                f"dtype('{dtype}') according to the rule '{casting}'{where()}")
    return contract(xs, labels, out_labels, dtype, optimize)


def _proxy(x):
    return np.broadcast_to(np.zeros((), x.dtype), x.shape) if isinstance(x, Tensor) else x


@implements(np.einsum_path)
def einsum_path(*operands, optimize="greedy", einsum_call=False):
    """np.einsum_path with traced operands: NumPy's, on stand-ins of their shapes and dtypes
    (a path depends on nothing else)."""
    return np.einsum_path(*[_proxy(x) for x in operands], optimize=optimize, einsum_call=einsum_call)


# ---- tensordot, kron ------------------------------------------------------------------------------
def _axis_list(axes):
    try:
        return list(axes)
    except TypeError:
        return [axes]


@implements(np.tensordot)
def tensordot(a, b, axes=2):
    """np.tensordot: the sum over axes[0] of a and axes[1] of b (an int N: a's last N axes and
    b's first N), with a's remaining axes, then b's, in the result."""
    a, b = as_operand(a), as_operand(b)
    if not _any_tensor([a, b]):
        return np.tensordot(a, b, axes)
    sa, sb = tuple(shape_of(a)), tuple(shape_of(b))
    try:
        axes_a, axes_b = axes
    except TypeError:
        n = operator.index(axes)
        axes_a, axes_b = list(range(-n, 0)), list(range(0, n))
    axes_a, axes_b = _axis_list(axes_a), _axis_list(axes_b)
    if len(axes_a) != len(axes_b):
        raise ShapeError(f"shape-mismatch for sum: {len(axes_a)} axes of a and {len(axes_b)} of b{where()}")
    axes_a = [norm_axis(i, len(sa)) for i in axes_a]
    axes_b = [norm_axis(i, len(sb)) for i in axes_b]
    if len(set(axes_a)) != len(axes_a) or len(set(axes_b)) != len(axes_b):
        raise ShapeError(f"duplicate axes are not allowed in tensordot{where()}")
    for i, j in zip(axes_a, axes_b):
        if sa[i] != sb[j]:
            raise ShapeError(f"shape-mismatch for sum: axis {i} of a has {sa[i]} elements and axis {j} "
                             f"of b has {sb[j]}{where()}")
    la = [("a", i) for i in range(len(sa))]
    lb = [("b", j) for j in range(len(sb))]
    for k, (i, j) in enumerate(zip(axes_a, axes_b)):
        la[i] = lb[j] = ("sum", k)
    out = tuple(lab for lab in la if lab[0] == "a") + tuple(lab for lab in lb if lab[0] == "b")
    return contract_to(a, tuple(la), b, tuple(lb), out, None)


@implements(np.kron)
def kron(a, b):
    """np.kron: the Kronecker product (a's shape and b's padded with leading ones to one rank)."""
    a, b = as_operand(a), as_operand(b)
    if not _any_tensor([a, b]):
        return np.kron(a, b)
    (a, b), dt = product_dtype([a, b])
    sa, sb = tuple(shape_of(a)), tuple(shape_of(b))
    if not sa or not sb:
        return finish(multiply(a, b), dt)
    nd = builtins.max(len(sa), len(sb))
    sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
    # a[i] * b[j] at i * len(b) + j: a's axes interleaved with b's, then merged in pairs
    a = reshape(a, [d for s in sa for d in (s, 1)])
    b = reshape(b, [d for s in sb for d in (1, s)])
    return finish(reshape(multiply(a, b), [p * q for p, q in zip(sa, sb)]), dt)


# ---- diagonals and triangles ------------------------------------------------------------------
def _axis(axis, nd, name):
    try:
        return norm_axis(axis, nd)
    except ShapeError as e:
        raise ShapeError(f"{name}: {e}") from None


@implements(np.diagonal)
def diagonal(a, offset=0, axis1=0, axis2=1):
    """np.diagonal: the elements (i, i + offset) of axes (axis1, axis2), as a last axis after
    the others."""
    a = as_operand(a)
    if not isinstance(a, Tensor):
        return np.diagonal(a, offset, axis1, axis2)
    shape = tuple(shape_of(a))
    nd = len(shape)
    if nd < 2:
        raise ShapeError(f"diag requires an array of at least two dimensions{where()}")
    a1, a2 = _axis(axis1, nd, "axis1"), _axis(axis2, nd, "axis2")
    if a1 == a2:
        raise ShapeError(f"axis1 and axis2 cannot be the same{where()}")
    offset = operator.index(offset)
    n, m = shape[a1], shape[a2]
    if offset >= 0:
        count, start = builtins.max(0, builtins.min(n, m - offset)), offset
    else:
        count, start = builtins.max(0, builtins.min(n + offset, m)), -offset * m
    diag = slice(start, start + (count - 1) * (m + 1) + 1, m + 1) if count else slice(0, 0)
    if a2 == a1 + 1:
        # adjacent axes in order: merge them where they are, and move the (short) result
        flat = reshape(a, shape[:a1] + (n * m,) + shape[a2 + 1:])
        return moveaxis(getitem(flat, (slice(None),) * a1 + (diag,)), a1, -1)
    others = [i for i in range(nd) if i not in (a1, a2)]
    flat = reshape(transpose(a, others + [a1, a2]), [shape[i] for i in others] + [n * m])
    return getitem(flat, (Ellipsis, diag))


@implements(np.trace)
def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    """np.trace: the sum of `diagonal(a, offset, axis1, axis2)` (integers sum as int64)."""
    no_out(out, "np.trace")
    a = as_operand(a)
    if not isinstance(a, Tensor):
        return np.trace(a, offset, axis1, axis2, dtype)
    return sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


@implements(np.diag)
def diag(v, k=0):
    """np.diag: a 1-D v on the k-th diagonal of a square matrix of zeros, or the k-th diagonal
    of a 2-D v."""
    v = as_operand(v)
    if not isinstance(v, Tensor):
        return np.diag(v, k)
    shape = tuple(shape_of(v))
    if len(shape) == 2:
        return diagonal(v, k)
    if len(shape) != 1:
        raise ShapeError(f"Input must be 1- or 2-d.{where()}")
    k = operator.index(k)
    n = shape[0]
    size = n + abs(k)
    start = k if k >= 0 else -k * size
    if n == 0:
        return reshape(bind("pad_slice", v, shape=(size * size,), starts=(0,), stops=(0,), steps=(1,)),
                       (size, size))
    stop = start + (n - 1) * (size + 1) + 1
    flat = bind("pad_slice", v, shape=(size * size,), starts=(start,), stops=(stop,), steps=(size + 1,))
    return reshape(flat, (size, size))


@implements(np.diagflat)
def diagflat(v, k=0):
    """np.diagflat: the flattened v on the k-th diagonal of a square matrix of zeros."""
    v = as_operand(v)
    if not isinstance(v, Tensor):
        return np.diagflat(v, k)
    return diag(ravel(v), k)


def _triangle(m, mask):
    """NumPy's tril/triu: m where `mask` (over its last two axes) holds, 0 elsewhere."""
    return where_(mask, m, np.zeros(1, m.dtype))


@implements(np.tril)
def tril(m, k=0):
    """np.tril: m with the elements above the k-th diagonal of its last two axes zeroed."""
    m = as_operand(m)
    if not isinstance(m, Tensor):
        return np.tril(m, k)
    return _triangle(m, np.tri(*shape_of(m)[-2:], k=k, dtype=bool))


@implements(np.triu)
def triu(m, k=0):
    """np.triu: m with the elements below the k-th diagonal of its last two axes zeroed."""
    m = as_operand(m)
    if not isinstance(m, Tensor):
        return np.triu(m, k)
    return _triangle(m, ~np.tri(*shape_of(m)[-2:], k=k - 1, dtype=bool))


# ---- cross --------------------------------------------------------------------------------------
@implements(np.cross)
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """np.cross of 3-vectors (and NumPy's deprecated 2-vectors, taken as 3-vectors with z = 0;
    two 2-vectors give the z component only) along axisa of a and axisb of b, the result's
    vectors along axisc."""
    a, b = as_operand(a), as_operand(b)
    if not _any_tensor([a, b]):
        return np.cross(a, b, axisa, axisb, axisc, axis)
    if axis is not None:
        axisa = axisb = axisc = axis
    a = moveaxis(a, _axis(axisa, len(shape_of(a)), "axisa"), -1)
    b = moveaxis(b, _axis(axisb, len(shape_of(b)), "axisb"), -1)
    da, db = shape_of(a)[-1], shape_of(b)[-1]
    if da not in (2, 3) or db not in (2, 3):
        raise ShapeError(f"incompatible dimensions for cross product\n(dimension must be 2 or 3){where()}")
    if da == 2 or db == 2:
        level, frame = 1, sys._getframe()
        while frame is not None and is_library_frame(frame):     # the warning names the user's line
            level, frame = level + 1, frame.f_back
        warnings.warn("Arrays of 2-dimensional vectors are deprecated. Use arrays of 3-dimensional "
                      "vectors instead. (deprecated in NumPy 2.0)", DeprecationWarning, stacklevel=level)
    dt = np.promote_types(a.dtype, b.dtype)
    a, b = cast(a, dt), cast(b, dt)
    shape = broadcast_shapes(shape_of(a)[:-1], shape_of(b)[:-1])
    ac = [broadcast_to(getitem(a, (Ellipsis, i)), shape) for i in range(da)]
    bc = [broadcast_to(getitem(b, (Ellipsis, i)), shape) for i in range(db)]
    z = subtract(multiply(ac[0], bc[1]), multiply(ac[1], bc[0]))
    if da == 2 and db == 2:
        return z
    if da == 2:
        x, y = multiply(ac[1], bc[2]), negative(multiply(ac[0], bc[2]))
    elif db == 2:
        x, y = negative(multiply(ac[2], bc[1])), multiply(ac[2], bc[0])
    else:
        x = subtract(multiply(ac[1], bc[2]), multiply(ac[2], bc[1]))
        y = subtract(multiply(ac[2], bc[0]), multiply(ac[0], bc[2]))
    c = stack([x, y, z], axis=-1)
    return moveaxis(c, -1, _axis(axisc, len(shape) + 1, "axisc"))


# ---- the array-API forms in np.linalg (NumPy 2) -------------------------------------------------
@implements(np.linalg.trace)
def linalg_trace(x, /, *, offset=0, dtype=None):
    """np.linalg.trace: the trace over the last two axes."""
    return trace(x, offset, -2, -1, dtype)


@implements(np.linalg.diagonal)
def linalg_diagonal(x, /, *, offset=0):
    """np.linalg.diagonal: the diagonal of the last two axes."""
    return diagonal(x, offset, -2, -1)


@implements(np.linalg.tensordot)
def linalg_tensordot(x1, x2, /, *, axes=2):
    return tensordot(x1, x2, axes)


@implements(np.linalg.cross)
def linalg_cross(x1, x2, /, *, axis=-1):
    """np.linalg.cross: the cross product of 3-vectors along `axis` (2-vectors are refused, as NumPy
    refuses them)."""
    for x in (x1, x2):
        s = shape_of(x)
        if not s or s[_axis(axis, len(s), "axis")] != 3:
            raise ValueError(f"Both input arrays must be (arrays of) 3-dimensional vectors, but they "
                             f"are {shape_of(x1)[axis] if shape_of(x1) else ()} and "
                             f"{shape_of(x2)[axis] if shape_of(x2) else ()} dimensional instead.")
    return cross(x1, x2, axis=axis)
