"""CPU lowerings of the primitives that are steps of their own (not fused into loops).

Each lowering is registered per primitive (`emit_cpu.OPS`) and appends the entry
function's lines for one node: BLAS products and precompiled helpers
(`runtime.py`) for library ops, and real loops and branches around compiled
subgraph functions for structured control flow.
"""
from . import strides
from .emit_cpu import OPS
from .fusion import read_by_blas
from .runtime import GEMM_BLOCK_FLOPS, gemm_blocks
from .source import np_dtype


def _threaded(em, flops, parts):
    """Does a parallel build split this batched product over Numba's threads (`parts` batch
    items)? The helper decides again at run time from the sizes; this only keeps small
    products' programs free of parallel launches."""
    return em.parallel and flops >= GEMM_BLOCK_FLOPS and parts >= 2


def _copy(em):
    """The copy routine a step calls: in a Python entry NumPy's (`runtime.copy_py`, 1.2 us for
    a 32 x 64 slice where the compiled helper's call from Python took 1.8 us: an unrolled
    LSTM's entry makes 650 copies per call), else the compiled `runtime.copy`."""
    return "_rt.copy_py" if em.driver else "_rt.copy"


def _split_2d(em, m, k, n):
    """The suffix of the runtime's 2-D product an (m, k) @ (k, n) product calls: "_par" when
    its blocks (runtime.gemm_blocks, by the same rule) run on Numba's threads, else ""."""
    return "_par" if em.parallel and gemm_blocks(m, n, k) >= 2 else ""


@OPS.register("matmul")
def _matmul(em, node, v, x):
    S = em.sizes
    a, b = node.inputs
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if node.ndim == 2:
        par = _split_2d(em, m, k, n)
        em.body.append(f"{v} = _rt.matmul2d{par}({x[0]}, {x[1]}, {em.buffer(node)})")
        return
    batch = 1
    for d in node.shape[:-2]:
        batch *= d
    par = "_par" if _threaded(em, 2 * batch * m * n * k, batch) else ""
    strided = em.part.strided.get(node.id)
    if strided is not None:
        # operands as strided views (fusion.Partition._strided_product), batch axes in two groups
        g0, g1 = (S.product(g) for g in strided[1])
        out = em.reshape(em.buffer(node), f"({g0}, {g1}, {S(m)}, {S(n)})")
        prod = f"_rt.matmul_strided{par}({x[0]}, {x[1]}, {out})"
        em.body.append(f"{v} = {em.reshape(prod, S.shape(node.shape))}")
        return
    nb = S.product(node.shape[:-2])
    prod = (f"_rt.matmul_batched{par}({em.reshape(x[0], f'({nb}, {S(m)}, {S(k)})')}, "
            f"{em.reshape(x[1], f'({nb}, {S(k)}, {S(n)})')}, "
            f"{em.reshape(em.buffer(node), f'({nb}, {S(m)}, {S(n)})')})")
    em.body.append(f"{v} = {em.reshape(prod, S.shape(node.shape))}")


@OPS.register("matmul_add")
def _matmul_add(em, node, v, x):
    """c + a @ b (codegen/products.py): BLAS adds the product onto c's buffer when the plan
    lets the sum have it, else onto a copy of c."""
    c, a, b = node.inputs
    par = _split_2d(em, a.shape[0], a.shape[1], b.shape[1])
    if em.plan.accumulates_in_place(node):
        em.body.append(f"{v} = {x[0]}  # the product is added onto c's buffer")
    else:
        em.body.append(f"{v} = {_copy(em)}({x[0]}, {em.buffer(node)})")
    em.body.append(f"_rt.matmul2d_acc{par}({x[1]}, {x[2]}, {v})")


@OPS.register("transpose")
def _transpose(em, node, v, x):
    users = em.users[node.id]
    if node.p["perm"] == (1, 0) and read_by_blas(node, users) and node not in em.graph.outputs:
        em.body.append(f"{v} = {x[0]}.T  # a transposed view: BLAS reads it in place")
    else:
        # compiled, never `x.transpose(perm)`: Numba's transpose by an axes tuple made the MLP's
        # compile 3.6 -> 7.6 s. A matrix is `x.T`, more axes a strided view (strides.py)
        perm = tuple(node.p["perm"])
        if perm == (1, 0):
            src = f"{x[0]}.T"
        elif em.driver:
            src = f"{x[0]}.transpose({perm})"
        else:
            base = node.inputs[0]
            cs = strides.c_strides(base.shape)
            src = em.strided(strides.StridedView(base, strides.ZERO, tuple(node.shape), [cs[a] for a in perm]))
        em.body.append(f"{v} = {_copy(em)}({src}, {em.buffer(node)})")


@OPS.register("reshape")
def _reshape(em, node, v, x):
    em.body.append(f"{v} = {em.reshape(x[0], em.sizes.shape(node.shape))}")


@OPS.register("broadcast")
def _broadcast(em, node, v, x):
    em.body.append(f"{v} = _rt.broadcast_into({x[0]}, {em.buffer(node)})")


@OPS.register("slice")
def _slice(em, node, v, x):
    em.body.append(f"{v} = {_copy(em)}({x[0]}[{em.slices(node.p)}], {em.buffer(node)})")


@OPS.register("pad_slice")
def _pad_slice(em, node, v, x):
    em.body += [f"{v} = {em.buffer(node)}", f"{v}[...] = 0", f"{_copy(em)}({x[0]}, {v}[{em.slices(node.p)}])"]


@OPS.register("update_slice")
def _update_slice(em, node, v, x):
    if em.plan.updates_in_place(node) or em.donates(node):
        em.body.append(f"{v} = {x[0]}  # updated in place: its old value is read no more")
    else:
        em.body.append(f"{v} = {_copy(em)}({x[0]}, {em.buffer(node)})")
    em.body.append(f"{_copy(em)}({x[1]}, {v}[{em.slices(node.p)}])")


@OPS.register("concatenate")
def _concatenate(em, node, v, x):
    em.body.append(f"{v} = np.concatenate(({', '.join(x)},), axis={node.p['axis']})")


@OPS.register("gather", "scatter_add", "scatter_set", "scatter_add_to")
def _gather(em, node, v, x):
    S = em.sizes
    axis = node.p["axis"]
    idx = node.inputs[1]
    big = node.inputs[0].shape if node.op == "gather" else node.shape
    pre, post, n = S.product(big[:axis]), S.product(big[axis + 1:]), S(big[axis])
    m = S.product(idx.shape)
    buf = em.buffer(node)
    if node.op == "gather":
        src, dst = em.reshape(x[0], f"({pre}, {n}, {post})"), em.reshape(buf, f"({pre}, {m}, {post})")
    elif node.op == "scatter_add":
        src, dst = em.reshape(x[0], f"({pre}, {m}, {post})"), em.reshape(f"{v}_z", f"({pre}, {n}, {post})")
        em.body += [f"{v}_z = {buf}", f"{v}_z[...] = 0"]
    else:       # scatter_set / scatter_add_to(x, idx, values): x (or a copy of it), then the rows
        src, dst = em.reshape(x[2], f"({pre}, {m}, {post})"), em.reshape(f"{v}_z", f"({pre}, {n}, {post})")
        em.body.append(f"{v}_z = {x[0]}  # updated in place" if em.plan.updates_in_place(node) or em.donates(node)
                       else f"{v}_z = {_copy(em)}({x[0]}, {buf})")
    fn = "scatter_add" if node.op == "scatter_add_to" else node.op
    em.body.append(f"{v} = {em.reshape(f'_rt.{fn}({src}, {em.reshape(x[1], m)}, {dst})', S.shape(node.shape))}")


@OPS.register("proj")
def _proj(em, node, v, x):
    em.body.append(f"{v} = {em.tuple_part(node.inputs[0], node.p['index'])}")


class _LoopBuffers:
    """The output buffers of a loop body (`SubKernel.out_specs`), set up before the loop: a
    stacked output's row at the current iteration, written in place, or else two slots of
    the workspace a carried value alternates between (the body reads the last iteration's
    value while it writes the next). A carry the body passes through from its inputs is
    copied into two slots of its own: its input may be a buffer the body writes later."""

    def __init__(self, em, t, sub, rows, carries):
        """`rows`: buffer index -> its row expression; `carries`: (shape, dtype) of the
        carried values, the body's first outputs."""
        self.pairs, self.kept = [], {}
        for k, (shape, dt) in enumerate(sub.out_specs):
            if k not in rows:
                a, b = f"{t}_o{k}", f"{t}_o{k}_"
                em.body += [f"{a} = {em.reserve((t, 'o', k, 0), shape, dt)}",
                            f"{b} = {em.reserve((t, 'o', k, 1), shape, dt)}"]
                self.pairs.append((a, b))
        self.args = [rows.get(k, f"{t}_o{k}") for k in range(len(sub.out_specs))]
        for j, (shape, dt) in enumerate(carries):
            if sub.out_of[j] is None and sub.aliases_input[j]:
                a, b = f"{t}_k{j}", f"{t}_k{j}_"
                em.body += [f"{a} = {em.reserve((t, 'k', j, 0), shape, dt)}",
                            f"{b} = {em.reserve((t, 'k', j, 1), shape, dt)}"]
                self.kept[j] = (a, b)

    def after_call(self, result, carry, ind):
        """Lines after the body's call `result`: the carries (names `carry`) take its outputs,
        the kept ones as copies, and the slot pairs swap."""
        lines = [f"{ind}{c} = _rt.copy({result}[{j}], {self.kept[j][0]})" if j in self.kept
                 else f"{ind}{c} = {result}[{j}]" for j, c in enumerate(carry)]
        swaps = self.pairs + list(self.kept.values())
        return lines + [f"{ind}{a}, {b} = {b}, {a}" for a, b in swaps]


def _compile_loop(em, t, start, carry, avals):
    """In a Python entry, the loop whose lines start at `em.body[start]` becomes a compiled
    function of the names it reads (run from Python, each iteration's calls cost ~1-10 us:
    an HMM's scan of 19 steps of 3 states took 0.24 ms). The function copies the final
    carries into workspace slots of their own and returns nothing, like the entry's other
    functions (a compile server running another's share of them stubs it out)."""
    if not em.driver:
        return
    lines = em.body[start:]
    del em.body[start:]
    finals = [f"{t}_f{k}" for k in range(len(carry))]
    em.body += [f"{f} = {em.reserve((t, 'f', k), shape, dt)}" for k, (f, (shape, dt)) in enumerate(zip(finals, avals))]
    lines += [f"_rt.copy({c}, {f})" for c, f in zip(carry, finals)]
    params = em.free_names(lines)
    em.body.append(em.function(lines, f"{t}_loop", params, params))
    em.body += [f"{c} = {f}" for c, f in zip(carry, finals)]


def _escaping(em, node, carry):
    """Lines after a loop or branch: a result that is an output of this graph is copied, as
    it may be a view of the workspace (where loops keep their carries)."""
    projs = {u.p["index"]: u for u in em.users[node.id] if u.op == "proj"}
    out = []
    for k, c in enumerate(carry):
        u = projs.get(k)
        if u is not None and u.id in em.plan.out_roots:
            out.append(f"{c} = {c}.copy()  # an output: not a view of the workspace")
    return out


def _invariant(em, t, exprs):
    """Names for loop-invariant argument expressions, evaluated once before the loop (a
    broadcast constant, say, which would otherwise be copied on every iteration)."""
    names = []
    for k, e in enumerate(exprs):
        if e.isidentifier():
            names.append(e)
        else:
            em.body.append(f"{t}_a{k} = {e}")
            names.append(f"{t}_a{k}")
    return names


@OPS.register("scan")
def _scan(em, node, v, x):
    p, S, out = node.p, em.sizes, em.body
    nc, nk, T = p["n_consts"], p["n_carry"], p["length"]
    # the carries' buffers are the loop's: the body may update one in place (Emitter.donates)
    sub = em.subkernel(p["body"], donated=range(1 + nc, 1 + nc + nk))
    x_nodes = node.inputs[nc + nk:]
    avals = p["out_avals"]
    n_y = len(avals) - 2 * nk
    projs = {u.p["index"]: u for u in em.users[node.id] if u.op == "proj"}
    t = "t" + em.names[node.id]
    it = f"{t}_p"
    consts = _invariant(em, t, x[:nc])
    init, xs = x[nc:nc + nk], x[nc + nk:]
    carry = [em.tuple_part(node, k) for k in range(nk)]
    ys = [(nk + k, em.tuple_part(node, nk + k)) for k in range(n_y)]
    hist = [(k, em.tuple_part(node, nk + n_y + k)) for k in range(nk) if nk + n_y + k in projs]
    for k, (c, val) in enumerate(zip(carry, init)):
        if 1 + nc + k in sub.overwritten:       # a buffer of the loop's own, for the body to write
            out.append(f"{c} = {_copy(em)}({val}, {em.reserve((t, 'd', k), avals[k][0], avals[k][1])})")
        else:
            out.append(f"{c} = {val}")
    for k, val in ys + [(nk + n_y + k, h) for k, h in hist]:
        shape, dt = avals[k]
        # a workspace slot (the memory plan's stacked outputs) or, unread, a new array
        buf = em.buffer(projs[k]) if k in projs else em.new_array(S.shape(shape), np_dtype(dt))
        out.append(f"{val} = {buf}")
    # the body writes a stacked output straight into its row (the first output of a buffer)
    rows, in_place = {}, set()
    for k, val in ys:
        b = sub.out_of[k]
        if b is not None and b not in rows:
            rows[b] = f"{val}[{it}:{it} + 1]" if len(avals[k][0]) == 1 else f"{val}[{it}]"
            in_place.add(k)
    bufs = _LoopBuffers(em, t, sub, rows, avals[:nk])
    out.append(f"{t}_i = {em.new_array('1', 'np.int64')}")
    order = f"range({S(T)} - 1, -1, -1)" if p["reverse"] else f"range({S(T)})"
    loop = len(out)
    out.append(f"for {it} in {order}:  # a real loop: the body is {sub.name}")
    for k, h in hist:
        out += em.store_row(h, it, carry[k], avals[k][0])
    slices = [f"{val}[{it}:{it} + 1]" if xn.ndim == 1 else f"{val}[{it}]" for val, xn in zip(xs, x_nodes)]
    out.append(f"    {t}_i[0] = {p['start']} + {it}")
    out.append(f"    {t}_r = {sub.call([f'{t}_i'] + consts + carry + slices, bufs.args)}")
    out += bufs.after_call(f"{t}_r", carry, "    ")
    for k, val in ys:
        if k not in in_place:
            out += em.store_row(val, it, f"{t}_r[{k}]", avals[k][0][1:])
    _compile_loop(em, t, loop, carry, avals[:nk])
    out += _escaping(em, node, carry)


@OPS.register("cond")
def _cond(em, node, v, x):
    gf, gt = node.p["branches"]
    t = "t" + em.names[node.id]
    calls = []
    for g in (gt, gf):
        sub = em.subkernel(g, out_buffers=False)
        calls.append(f"{t}_r = {sub.call(x[1:])}")
    em.body += [f"if {x[0]}[0]:", "    " + calls[0], "else:", "    " + calls[1]]
    results = [em.tuple_part(node, k) for k in range(len(node.p["out_avals"]))]
    for k, r in enumerate(results):
        em.body.append(f"{r} = {t}_r[{k}]")
    em.body += _escaping(em, node, results)     # a branch may return an operand: a loop's carry


@OPS.register("while")
def _while(em, node, v, x):
    p, out = node.p, em.body
    nc = p["n_consts"]
    t = "t" + em.names[node.id]
    consts = _invariant(em, t, x[:nc])
    init = x[nc:]
    cond = em.subkernel(p["cond"], out_buffers=False)
    body = em.subkernel(p["body"])
    carry = [em.tuple_part(node, k) for k in range(len(init))]
    for c, val in zip(carry, init):
        out.append(f"{c} = {val}")
    bufs = _LoopBuffers(em, t, body, {}, p["out_avals"])
    loop = len(out)
    out.append(f"while {cond.call(consts + carry)}[0][0]:")
    out.append(f"    {t}_r = {body.call(consts + carry, bufs.args)}")
    out += bufs.after_call(f"{t}_r", carry, "    ")
    _compile_loop(em, t, loop, carry, p["out_avals"])
    out += _escaping(em, node, carry)
