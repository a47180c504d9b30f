"""CPU lowerings of the primitives that are steps of their own (not fused into loops).

Each lowering is registered per primitive (`emit_cpu.OPS`) and appends the entry
function's lines for one node: BLAS products and precompiled helpers
(`runtime.py`) for library ops, and real loops and branches around compiled
subgraph functions for structured control flow.
"""
from .emit_cpu import OPS
from .runtime import GEMM_BLOCK_FLOPS, GEMM_BLOCK_ROWS
from .source import np_dtype


def _threaded(em, flops, parts):
    """Does a parallel build split this product over Numba's threads (runtime.gemm_blocks:
    `parts` row blocks or batch items)? The helper decides again at run time from the sizes;
    this only keeps small products' programs free of parallel launches."""
    return em.parallel and flops >= GEMM_BLOCK_FLOPS and parts >= 2


@OPS.register("matmul")
def _matmul(em, node, v, x):
    S = em.sizes
    a, b = node.inputs
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if node.ndim == 2:
        par = "_par" if _threaded(em, 2 * m * n * k, m // GEMM_BLOCK_ROWS) else ""
        em.body.append(f"{v} = _rt.matmul2d{par}({x[0]}, {x[1]}, {em.buffer(node)})")
        return
    batch = 1
    for d in node.shape[:-2]:
        batch *= d
    par = "_par" if _threaded(em, 2 * batch * m * n * k, batch) else ""
    nb = S.product(node.shape[:-2])
    em.body.append(f"{v} = _rt.matmul_batched{par}({x[0]}.reshape(({nb}, {S(m)}, {S(k)})), "
                   f"{x[1]}.reshape(({nb}, {S(k)}, {S(n)})), "
                   f"{em.buffer(node)}.reshape(({nb}, {S(m)}, {S(n)})))"
                   f".reshape({S.shape(node.shape)})")


@OPS.register("transpose")
def _transpose(em, node, v, x):
    users = em.users[node.id]
    if node.p["perm"] == (1, 0) and users and all(u.op == "matmul" and u.ndim == 2 for u in users) \
            and node not in em.graph.outputs:
        em.body.append(f"{v} = {x[0]}.T  # a transposed view: BLAS reads it in place")
    else:
        em.body.append(f"{v} = _rt.copy({x[0]}.transpose({tuple(node.p['perm'])}), {em.buffer(node)})")


@OPS.register("reshape")
def _reshape(em, node, v, x):
    em.body.append(f"{v} = {x[0]}.reshape({em.sizes.shape(node.shape)})")


@OPS.register("broadcast")
def _broadcast(em, node, v, x):
    em.body.append(f"{v} = np.ascontiguousarray(np.broadcast_to({x[0]}, {em.sizes.shape(node.shape)}))")


@OPS.register("slice")
def _slice(em, node, v, x):
    em.body.append(f"{v} = _rt.copy({x[0]}[{em.slices(node.p)}], {em.buffer(node)})")


@OPS.register("pad_slice")
def _pad_slice(em, node, v, x):
    em.body += [f"{v} = {em.buffer(node)}", f"{v}[...] = 0", f"_rt.copy({x[0]}, {v}[{em.slices(node.p)}])"]


@OPS.register("update_slice")
def _update_slice(em, node, v, x):
    if em.plan.updates_in_place(node):
        em.body.append(f"{v} = {x[0]}  # updated in place: its old value is read no more")
    else:
        em.body.append(f"{v} = _rt.copy({x[0]}, {em.buffer(node)})")
    em.body.append(f"_rt.copy({x[1]}, {v}[{em.slices(node.p)}])")


@OPS.register("concatenate")
def _concatenate(em, node, v, x):
    em.body.append(f"{v} = np.concatenate(({', '.join(x)},), axis={node.p['axis']})")


@OPS.register("gather", "scatter_add", "scatter_set")
def _gather(em, node, v, x):
    S = em.sizes
    axis = node.p["axis"]
    idx = node.inputs[1]
    big = node.inputs[0].shape if node.op == "gather" else node.shape
    pre, post, n = S.product(big[:axis]), S.product(big[axis + 1:]), S(big[axis])
    m = S.product(idx.shape)
    buf = em.buffer(node)
    if node.op == "gather":
        src, dst = f"{x[0]}.reshape(({pre}, {n}, {post}))", f"{buf}.reshape(({pre}, {m}, {post}))"
    elif node.op == "scatter_add":
        src, dst = f"{x[0]}.reshape(({pre}, {m}, {post}))", f"{v}_z.reshape(({pre}, {n}, {post}))"
        em.body += [f"{v}_z = {buf}", f"{v}_z[...] = 0"]
    else:       # scatter_set(x, idx, values): x (or a copy of it), then the rows written in order
        src, dst = f"{x[2]}.reshape(({pre}, {m}, {post}))", f"{v}_z.reshape(({pre}, {n}, {post}))"
        em.body.append(f"{v}_z = {x[0]}  # updated in place" if em.plan.updates_in_place(node)
                       else f"{v}_z = _rt.copy({x[0]}, {buf})")
    em.body.append(f"{v} = _rt.{node.op}({src}, {x[1]}.reshape({m}), {dst})"
                   f".reshape({S.shape(node.shape)})")


@OPS.register("proj")
def _proj(em, node, v, x):
    em.body.append(f"{v} = {em.tuple_part(node.inputs[0], node.p['index'])}")


@OPS.register("scan")
def _scan(em, node, v, x):
    p, S, out = node.p, em.sizes, em.body
    dims, trailing, fname = em.subkernel(p["body"])
    nc, nk, T = p["n_consts"], p["n_carry"], p["length"]
    consts, init, xs = x[:nc], x[nc:nc + nk], x[nc + nk:]
    x_nodes = node.inputs[nc + nk:]
    avals = p["out_avals"]
    n_y = len(avals) - 2 * nk
    used = {u.p["index"] for u in em.users[node.id] if u.op == "proj"}
    t = "t" + em.names[node.id]
    it = f"{t}_p"
    carry = [em.tuple_part(node, k) for k in range(nk)]
    ys = [(nk + k, em.tuple_part(node, nk + k)) for k in range(n_y)]
    hist = [(k, em.tuple_part(node, nk + n_y + k)) for k in range(nk) if nk + n_y + k in used]
    for c, val in zip(carry, init):
        out.append(f"{c} = {val}")
    for k, val in ys + [(nk + n_y + k, h) for k, h in hist]:
        shape, dt = avals[k]
        out.append(f"{val} = np.empty({S.shape(shape)}, {np_dtype(dt)})")
    order = f"range({S(T)} - 1, -1, -1)" if p["reverse"] else f"range({S(T)})"
    out.append(f"for {it} in {order}:  # a real loop: the body is {fname}")
    for k, h in hist:
        out += em.store_row(h, it, carry[k], avals[k][0])
    slices = [f"{val}[{it}:{it} + 1]" if xn.ndim == 1 else f"{val}[{it}]" for val, xn in zip(xs, x_nodes)]
    args = [dims, f"np.full(1, {p['start']} + {it}, np.int64)"] + consts + carry + slices + trailing
    out.append(f"    {t}_r = {fname}({', '.join(args)})")
    for k, c in enumerate(carry):
        out.append(f"    {c} = {t}_r[{k}]")
    for k, val in ys:
        out += em.store_row(val, it, f"{t}_r[{k}]", avals[k][0][1:])


@OPS.register("cond")
def _cond(em, node, v, x):
    gf, gt = node.p["branches"]
    t = "t" + em.names[node.id]
    calls = []
    for g in (gt, gf):
        dims, trailing, fname = em.subkernel(g)
        calls.append(f"{t}_r = {fname}({', '.join([dims] + x[1:] + trailing)})")
    em.body += [f"if {x[0]}[0]:", "    " + calls[0], "else:", "    " + calls[1]]
    for k in range(len(node.p["out_avals"])):
        em.body.append(f"{em.tuple_part(node, k)} = {t}_r[{k}]")


@OPS.register("while")
def _while(em, node, v, x):
    p, out = node.p, em.body
    nc = p["n_consts"]
    consts, init = x[:nc], x[nc:]
    cdims, ctrail, cname = em.subkernel(p["cond"])
    bdims, btrail, bname = em.subkernel(p["body"])
    t = "t" + em.names[node.id]
    carry = [em.tuple_part(node, k) for k in range(len(init))]
    for c, val in zip(carry, init):
        out.append(f"{c} = {val}")
    out.append(f"while {cname}({', '.join([cdims] + consts + carry + ctrail)})[0][0]:")
    out.append(f"    {t}_r = {bname}({', '.join([bdims] + consts + carry + btrail)})")
    for k, c in enumerate(carry):
        out.append(f"    {c} = {t}_r[{k}]")
