"""CUDA lowerings of the primitives that are steps of their own (not fused into loops).

Each lowering is registered per primitive (`emit_cuda.OPS`): a host call
(matrix products through `cuda_runtime.matmul`, reshapes as device views), or a
kernel with one thread per output point that reads its input through the
primitive's index map (transpose, broadcast, slicing, padding, a slice's item
assignment, concatenation, gather), or one thread per column (scatter_add and
scatter_set, which apply repeated indices in order).
"""
from .emit_cuda import OPS, _index, unravel
from .source import literal


@OPS.register("matmul")
def _matmul(em, node, v):
    S = em.sizes
    a, b = node.inputs
    nb = S.product(node.shape[:-2])
    m, kk, n = S(a.shape[-2]), S(a.shape[-1]), S(b.shape[-1])
    operands, flags = [], []
    for x, (r, c) in ((a, (m, kk)), (b, (kk, n))):
        t = x.id in em.matmul_t
        src = em.host_array(x.inputs[0] if t else x)
        operands.append(f"{src}.reshape(({nb}, {c if t else r}, {r if t else c}))")
        flags.append(t)
    extra = "".join(f", {f}={t}" for f, t in zip(("ta", "tb"), flags) if t)
    em.host.append(em.comment(node))
    em.host.append(f"{v} = {em.buffer(node)}")
    em.host.append(f"_rt.matmul({operands[0]}, {operands[1]}, {v}.reshape(({nb}, {m}, {n})){extra})")


@OPS.register("reshape")
def _reshape(em, node, v):
    x = em.host_array(node.inputs[0])
    em.host.append(em.comment(node))
    em.host.append(f"{v} = {x}.reshape({em.sizes.shape(node.shape)})  # a view")
    em.views.add(node.id)


@OPS.register("transpose")
def _transpose(em, node, v):
    perm, x = node.p["perm"], node.inputs[0]

    def value(k, ix):
        xi = [None] * x.ndim
        for d, src in enumerate(perm):
            xi[src] = ix[d]
        return em.read(k, x, xi)
    em.emit_pointwise(node, value)


@OPS.register("broadcast")
def _broadcast(em, node, v):
    x = node.inputs[0]
    em.emit_pointwise(node, lambda k, ix: em.read(k, x, ix[node.ndim - x.ndim:]))


@OPS.register("slice")
def _slice(em, node, v):
    x, p = node.inputs[0], node.p

    def value(k, ix):
        xi = []
        for d, (a, c) in enumerate(zip(p["starts"], p["steps"])):
            t = ix[d] if c == 1 else f"{ix[d]} * {c}"
            xi.append(t if a == 0 else (f"{a} + {t}" if t != "0" else str(a)))
        return em.read(k, x, xi)
    em.emit_pointwise(node, value)


def _in_slice(em, node, k, ix, x, outside):
    """(lines, expr) of a pointwise kernel for node: x (the block written into the slice
    node.p of node's shape) at the point ix, and `outside` off the slice."""
    lines, xi, conds = [], [], []
    for d, (a, c) in enumerate(zip(node.p["starts"], node.p["steps"])):
        if a == 0 and c == 1 and x.shape[d] == node.shape[d]:
            xi.append(ix[d])
            continue
        j = f"j{d}"
        off = ix[d] if a == 0 else f"({ix[d]} - {a})"
        lines.append(f"{j} = {off} // {c}" if c != 1 else f"{j} = {off}")
        if c != 1:
            conds.append(f"{off} % {c} == 0")
        conds += [f"{j} >= 0", f"{j} < {k.S(x.shape[d])}"]
        xi.append(j)
    if not conds:
        return em.read(k, x, xi)
    lines.append(f"ok = {' and '.join(conds)}")
    return lines, f"{em.read(k, x, xi)} if ok else {outside}"


@OPS.register("pad_slice")
def _pad_slice(em, node, v):
    em.emit_pointwise(node, lambda k, ix: _in_slice(em, node, k, ix, node.inputs[0],
                                                    literal(0, node.dtype)))


@OPS.register("update_slice")
def _update_slice(em, node, v):
    x, u = node.inputs
    em.emit_pointwise(node, lambda k, ix: _in_slice(em, node, k, ix, u, em.read(k, x, ix)))


@OPS.register("concatenate")
def _concatenate(em, node, v):
    axis = node.p["axis"]

    def value(k, ix):
        lines, off = [], []
        xs = node.inputs
        for j, x in enumerate(xs):
            xi = list(ix)
            base = " + ".join(off) if off else None
            if base:
                xi[axis] = f"{ix[axis]} - ({base})"
            expr = em.read(k, x, xi)
            off.append(k.S(x.shape[axis]))
            if j == len(xs) - 1:
                lines.append(("else:" if j else "if True:"))
            else:
                lines.append(f"{'elif' if j else 'if'} {ix[axis]} < {' + '.join(off)}:")
            lines.append(f"    val = {expr}")
        return lines, "val"
    em.emit_pointwise(node, value)


@OPS.register("gather")
def _gather(em, node, v):
    x, idx = node.inputs
    axis = node.p["axis"]
    em.uses_err = True

    def value(k, ix):
        m = idx.ndim
        n = k.S(x.shape[axis])
        lines = [f"ij = {em.read(k, idx, ix[axis:axis + m])}",
                 "if ij < 0:", f"    ij += {n}",
                 f"ok = ij >= 0 and ij < {n}",
                 "if not ok:", "    err[0] = 1"]
        k.array("err")
        xi = ix[:axis] + ["ij"] + ix[axis + m:]
        return lines, f"{em.read(k, x, xi)} if ok else {literal(0, node.dtype)}"
    em.emit_pointwise(node, value)


@OPS.register("scatter_add", "scatter_set")
def _scatter(em, node, v):
    """One thread per (pre, post) column of the result: zeros (scatter_add) or x's column
    (scatter_set), then the updates added or written with j in order, so repeated indices
    accumulate (scatter_add) or the last one stays (scatter_set), as in NumPy."""
    em.uses_err = True
    if node.op == "scatter_add":
        (g, idx), x, symbol = node.inputs, None, "+="
    else:
        (x, idx, g), symbol = node.inputs, "="
    axis = node.p["axis"]
    m = idx.ndim
    out_shape = node.shape
    cols = tuple(out_shape[:axis]) + tuple(out_shape[axis + 1:])
    k = em.kernel(f"{node.op} -> {em.names[node.id]}")
    S = k.S
    k.lines.append(em.comment(node))
    total = em.sizes.product(cols)
    k.scalar("total", total)
    names = [f"i{d}" for d in range(len(out_shape)) if d != axis]
    k.lines.append("for p in range(cuda.grid(1), total, cuda.gridsize(1)):")
    lines, cix = unravel("p", cols, names, S, "    ")
    k.lines += lines
    oix = lambda a: cix[:axis] + [a] + cix[axis:]   # noqa: E731
    k.array(v)
    k.array("err")
    n = S(out_shape[axis])
    first = literal(0, node.dtype) if x is None else em.read(k, x, oix("r"))
    k.lines += [f"    for r in range({n}):", f"        {v}[{_index(oix('r'))}] = {first}"]
    k.lines.append(f"    for j in range({S.product(idx.shape)}):")
    jl, jix = unravel("j", idx.shape, [f"j{d}" for d in range(m)], S, "        ")
    k.lines += jl
    gix = cix[:axis] + jix + cix[axis:]
    k.lines += [f"        ij = {em.read(k, idx, jix)}",
                "        if ij < 0:", f"            ij += {n}",
                f"        if ij >= 0 and ij < {n}:",
                f"            {v}[{_index(oix('ij'))}] {symbol} {em.read(k, g, gix)}",
                "        else:", "            err[0] = 1"]
    em.host.append(em.comment(node))
    em.host.append(f"{v} = {em.buffer(node)}")
    em.host.append(k.launch(f"_rt.blocks({total}, TPB)"))
