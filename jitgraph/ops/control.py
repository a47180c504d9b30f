"""Structured control flow: `cond`, `fori_loop`, `scan`, `while_loop`.

Signatures and semantics follow `jax.lax`. Inside a traced function (`jit`,
`jit_grad`, `make_graph`) each construct becomes one node whose parameters hold
the traced subgraphs (branches, loop bodies); code generation turns it into a
real `if` or loop around compiled subgraph functions, so compile time does not
grow with the trip count. Outside a trace (plain NumPy, or the eager
`value_and_grad` tape) they simply run as Python control flow.

A subgraph's inputs are its explicit operands followed by the values it closes
over from enclosing traces ("captured"): the node lists those as ordinary
inputs, so AD, CSE and code generation see every dependence.

A control node produces a tuple; `proj[index]` nodes pick its elements. The
reverse-mode rules here build new control nodes (the backward of a loop is a
loop running the other way; the backward of `cond` is a `cond`), so gradients
of gradients work too.
"""
import numpy as np

from ..ad import backward_multi
from ..core import EagerBox, GraphTrace, Tensor, Tracer, bind, innermost, is_tracing
from ..errors import ShapeError, TracingError
from ..graph import Graph, Node, flops, substitute
from ..interpreter import evaluate, run_graph
from ..numpy_api import cast, zeros_like
from ..tree import tree_flatten, tree_unflatten
from .registry import PRIMS, TUPLE_ELEMENT, NoGradient, register

TUPLE = np.dtype(object)     # the dtype of a control node's value: a tuple of arrays


class SubTrace(GraphTrace):
    """Traces a branch or loop body; values of enclosing traces become extra inputs."""

    def __init__(self, n_explicit):
        super().__init__()
        self.n_explicit = n_explicit
        self.captured = []         # the outer values, in input order
        self._cap = {}

    def to_node(self, x):
        if isinstance(x, Tensor) and x._trace is not self:
            key = (id(x._trace), x.node.id)
            node = self._cap.get(key)
            if node is None:
                node = Node("input", (), {"index": self.n_explicit + len(self.captured)},
                            x.shape, x.dtype)
                self.nodes.append(node)
                self._cap[key] = node
                self.captured.append(x)
            return node
        return super().to_node(x)


def _aval(v):
    """(shape, dtype, weak) of an operand."""
    if isinstance(v, Tensor):
        return tuple(v.shape), np.dtype(v.dtype), bool(v.weak)
    if isinstance(v, (bool, int, float)) and not isinstance(v, np.generic):
        return (), np.asarray(v).dtype, True
    a = np.asarray(v)
    return a.shape, a.dtype, False


def trace_subgraph(fun, avals, name):
    """Trace `fun(*tracers)` on abstract inputs; returns (graph, out_tree, captured values)."""
    tr = SubTrace(len(avals))
    ins = [tr.new_input(k, s, d, w) for k, (s, d, w) in enumerate(avals)]
    out = fun(*ins)
    leaves, tree = tree_flatten(out)
    outs = [tr.to_node(v) if isinstance(v, Tensor) else tr.const(np.asarray(v)) for v in leaves]
    cap_nodes = [tr._cap[(id(x._trace), x.node.id)] for x in tr.captured]
    graph = Graph([t.node for t in ins] + cap_nodes, outs, meta={"name": name})
    return graph, tree, list(tr.captured)


def _traced(values):
    """Does any value belong to a graph trace (so the construct must become a node)?"""
    return any(isinstance(v, Tracer) for v in values)


def _trace_bodies(operands, bodies):
    """Trace each (function, avals, name) of `bodies` with `trace_subgraph`; returns the list
    of (graph, out_tree, captured), or None when the construct should simply run as Python:
    outside a trace (plain NumPy, an eager tape), without tracing anything; inside one, when
    nothing is traced, neither an operand nor a value a body captures (a TracingError is then
    data-dependent Python control flow on concrete values, which Python runs fine)."""
    if not is_tracing():
        return None
    traced_ops = _traced(operands)
    try:
        out = [trace_subgraph(f, avals, name) for f, avals, name in bodies]
    except TracingError:
        if traced_ops:
            raise
        return None
    if not traced_ops and not _traced([c for _, _, caps in out for c in caps]):
        return None
    return out


def _bind_control(op, inputs, params, out_avals):
    """Append control node `op` to the innermost trace; returns its outputs as tracers."""
    params = dict(params, out_avals=tuple((tuple(s), np.dtype(d)) for s, d in out_avals))
    t = innermost(inputs).process(op, inputs, params)
    return [bind("proj", t, index=k, shape=tuple(s), dtype=np.dtype(d))
            for k, (s, d) in enumerate(out_avals)]


def _out_avals(graph):
    return [(n.shape, n.dtype) for n in graph.outputs]


def _check_same(kind, what_a, a, what_b, b, tree_a, tree_b):
    if tree_a != tree_b:
        raise ShapeError(f"{kind}: {what_a} returns structure {tree_a} but {what_b} returns {tree_b}")
    for k, ((sa, da), (sb, db)) in enumerate(zip(a, b)):
        if tuple(sa) != tuple(sb) or np.dtype(da) != np.dtype(db):
            raise ShapeError(
                f"{kind}: output {k} of {what_a} is {np.dtype(da).name}{list(sa)} but {what_b} gives "
                f"{np.dtype(db).name}{list(sb)}; both must have the same shapes and dtypes")


def _fname(f):
    return getattr(f, "__qualname__", getattr(f, "__name__", "function"))


# ---- cond ---------------------------------------------------------------------------------------------
def cond(pred, true_fun, false_fun, *operands):
    """`true_fun(*operands)` if `pred` else `false_fun(*operands)`, like `jax.lax.cond`.

    Traced, both branches become subgraphs with identical output shapes and dtypes
    and only the taken one runs; gradients flow through the taken branch. Outside a
    trace it is the `if` statement.
    """
    if not is_tracing():
        if isinstance(pred, Tracer):
            _truth(pred, "cond's predicate")
        return true_fun(*operands) if pred else false_fun(*operands)
    leaves, in_tree = tree_flatten(tuple(operands))
    avals = [_aval(v) for v in leaves]

    def branch(fun):
        return lambda *xs: fun(*tree_unflatten(in_tree, list(xs)))

    def run_python():
        p = pred.value if isinstance(pred, EagerBox) else pred
        if isinstance(p, Tensor):
            raise TracingError("cond's predicate is a traced value inside a nested eager "
                               "value_and_grad; call value_and_grad outside jit, or use jit_grad")
        return true_fun(*operands) if bool(np.asarray(p)) else false_fun(*operands)

    traced = _trace_bodies([pred] + leaves, [(branch(true_fun), avals, _fname(true_fun)),
                                             (branch(false_fun), avals, _fname(false_fun))])
    if traced is None:
        return run_python()
    (gt, tt, ct), (gf, tf, cf) = traced
    _check_same("cond", f"true_fun {_fname(true_fun)}", _out_avals(gt),
                f"false_fun {_fname(false_fun)}", _out_avals(gf), tt, tf)
    pred_shape = tuple(np.shape(pred)) if not isinstance(pred, Tensor) else tuple(pred.shape)
    if pred_shape != ():
        raise ShapeError(f"cond's predicate must be a scalar, got shape {pred_shape}")
    p = cast(pred, np.dtype(bool)) if np.dtype(_aval(pred)[1]) != bool else pred
    # both branches take the operands, then everything either one captured
    caps = _merge_captures(ct, cf)
    gt = _with_inputs(gt, len(leaves), ct, caps)
    gf = _with_inputs(gf, len(leaves), cf, caps)
    outs = _bind_control("cond", [p] + leaves + caps, {"branches": (gf, gt)}, _out_avals(gt))
    return tree_unflatten(tt, outs)


def _merge_captures(*lists):
    out, seen = [], set()
    for lst in lists:
        for x in lst:
            key = (id(x._trace), x.node.id)
            if key not in seen:
                seen.add(key)
                out.append(x)
    return out


def _with_inputs(graph, n_explicit, captured, all_caps):
    """`graph` re-headed to take the explicit inputs then `all_caps` (adding unused inputs)."""
    mine = {(id(x._trace), x.node.id): graph.inputs[n_explicit + k] for k, x in enumerate(captured)}
    ins = list(graph.inputs[:n_explicit])
    for k, x in enumerate(all_caps):
        node = mine.get((id(x._trace), x.node.id))
        if node is None:
            node = Node("input", (), {"index": n_explicit + k}, x.shape, x.dtype)
        ins.append(node)
    return Graph(ins, graph.outputs, meta=graph.meta)


# ---- loops ---------------------------------------------------------------------------------------------
def _static_int(v, what):
    if isinstance(v, Tensor):
        return None
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)
    a = np.asarray(v)
    if a.shape == () and a.dtype.kind in "iu":
        return int(a)
    raise TypeError(f"{what} must be an integer, got {v!r}")


def _truth(v, what):
    """bool(v) for a concrete value (an eager box follows its recorded value)."""
    if isinstance(v, Tracer):
        raise TracingError(f"{what} is a traced value outside the function being traced")
    return bool(v)


def fori_loop(lower, upper, body_fun, init_val):
    """`for i in range(lower, upper): val = body_fun(i, val)`; returns val (like `jax.lax.fori_loop`).

    Traced with integer bounds, this compiles to one real loop (not unrolled) and is
    differentiable (the per-iteration carries are stored for the reverse loop). With a
    traced bound it runs as a `while_loop`: fine in `jit`, not differentiable. Outside a
    trace it is the `for` statement.
    """
    if not is_tracing():
        val = init_val
        for i in range(int(lower), int(upper)):
            val = body_fun(i, val)
        return val
    lo, hi = _static_int(lower, "fori_loop's lower"), _static_int(upper, "fori_loop's upper")
    if lo is not None and hi is not None:
        length = max(hi - lo, 0)

        def step(i, carry, x):
            return body_fun(i, carry), None

        carry, _ = _scan(step, init_val, None, length, False, lo, "fori_loop", body_fun)
        return carry

    def cond_fun(c):
        return c[0] < c[1]

    def wbody(c):
        i, u, val = c
        return i + 1, u, body_fun(i, val)

    i0 = cast(lower, np.dtype(np.int64)) if isinstance(lower, Tensor) else np.int64(lower)
    u0 = cast(upper, np.dtype(np.int64)) if isinstance(upper, Tensor) else np.int64(upper)
    return _while(cond_fun, wbody, (i0, u0, init_val), "fori_loop")[2]


def scan(f, init, xs=None, length=None, reverse=False):
    """`jax.lax.scan`: `carry, y = f(carry, x)` over the leading axis of `xs`; returns (carry, ys).
    Outside a trace it is a `for` loop over the rows of `xs`."""
    x_leaves, _ = tree_flatten(xs)
    lengths = {int(np.shape(x)[0]) if not isinstance(x, Tensor) else x.shape[0] for x in x_leaves}
    if length is not None:
        lengths.add(int(length))
    if len(lengths) != 1:
        raise ShapeError(f"scan: xs leading axes and length disagree: {sorted(lengths)}"
                         if lengths else "scan needs xs or a length")
    T = lengths.pop()

    def step(i, carry, x):
        return f(carry, x)

    return _scan(step, init, xs, T, bool(reverse), 0, "scan", f)


def _scan(step, init, xs, T, reverse, start, kind, user_fun):
    """Shared by scan and fori_loop: step(i, carry, x) -> (carry, y)."""
    init_leaves, c_tree = tree_flatten(init)
    x_leaves, x_tree = tree_flatten(xs)
    nc = len(init_leaves)

    def checked_step(i, carry, x):
        out = step(i, carry, x)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"{kind}: the body {_fname(user_fun)} must return a pair (new_carry, y) "
                            f"(y may be None), but it returned {type(out).__name__}"
                            + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
        return out

    def body(i, *flat):
        carry = tree_unflatten(c_tree, list(flat[:nc]))
        x = tree_unflatten(x_tree, list(flat[nc:]))
        new, y = checked_step(i, carry, x)
        return new, y

    def run_python():
        carry, ys = init, []
        order = range(T - 1, -1, -1) if reverse else range(T)
        for p in order:
            x = xs[p] if x_tree.kind == "leaf" else tree_unflatten(x_tree, [v[p] for v in x_leaves])
            carry, y = checked_step(start + p, carry, x)
            ys.append(y)
        if reverse:
            ys = ys[::-1]
        if not ys:
            return carry, None
        if isinstance(ys[0], (np.ndarray, np.generic, Tensor)):
            return carry, np.stack(ys)
        y_leaves0 = tree_flatten(ys[0])[0]
        if not y_leaves0:
            return carry, ys[0]
        trees = [tree_flatten(y) for y in ys]
        stacked = [np.stack([t[0][k] for t in trees]) for k in range(len(y_leaves0))]
        return carry, tree_unflatten(trees[0][1], stacked)

    if not is_tracing():
        return run_python()
    c_avals = [_aval(v) for v in init_leaves]
    x_avals = [(_aval(v)[0][1:], _aval(v)[1], False) for v in x_leaves]
    i_aval = ((), np.dtype(np.int64), False)

    traced = _trace_bodies(init_leaves + x_leaves,
                           [(body, [i_aval] + c_avals + x_avals, _fname(user_fun))])
    if traced is None:
        return run_python()
    (g, out_tree, caps), = traced
    carry_tree_out = out_tree.children[0]
    if carry_tree_out != c_tree:
        raise ShapeError(f"{kind}: the body {_fname(user_fun)} takes a carry of structure {c_tree} "
                         f"but returns {carry_tree_out}")
    outs = _out_avals(g)
    for k in range(nc):
        want = (tuple(c_avals[k][0]), np.dtype(c_avals[k][1]))
        if (tuple(outs[k][0]), np.dtype(outs[k][1])) != want:
            if c_avals[k][2] and tuple(outs[k][0]) == want[0]:
                # a Python scalar's init takes the dtype the body computes (weak typing)
                init_leaves[k] = np.asarray(init_leaves[k], outs[k][1])
                init = tree_unflatten(c_tree, init_leaves)
                return _scan(step, init, xs, T, reverse, start, kind, user_fun)
            raise ShapeError(
                f"{kind}: carry {k} enters the body {_fname(user_fun)} as "
                f"{want[1].name}{list(want[0])} but leaves as {np.dtype(outs[k][1]).name}"
                f"{list(outs[k][0])}; the carry must keep its shape and dtype")
    y_avals = [((T,) + tuple(s), d) for s, d in outs[nc:]]
    hist_avals = [((T,) + tuple(s), np.dtype(d)) for s, d, _ in c_avals]
    # inputs: captured, init carry, xs; outputs: carry, ys, carry history
    g = _captured_first(g, 1, 1 + nc + len(x_leaves))
    g, caps, x_leaves = _hoist_products(g, caps, nc, x_leaves)
    params = dict(body=g, length=T, reverse=reverse, start=start, n_consts=len(caps), n_carry=nc)
    res = _bind_control("scan", caps + init_leaves + x_leaves, params,
                        [(s, d) for s, d, _ in c_avals] + y_avals + hist_avals)
    carry = tree_unflatten(c_tree, res[:nc])
    ys = tree_unflatten(out_tree.children[1], res[nc:nc + len(y_avals)])
    return carry, ys


# a product hoisted out of a loop body is stored for every iteration: at most this many elements
HOIST_MAX_SIZE = 1 << 24


def _hoist_products(g, caps, nc, x_leaves):
    """A scan body's products of an iteration's data with a captured weight (`x_t @ Wx`, or
    `Wx @ x_t` of a vector x_t) depend on no carry: they are one product of the whole data
    sequence with the weight before the loop (one large GEMM, where there was one small one
    per iteration, as cuDNN does an RNN's input projection), which the body reads as one more
    data sequence. Its reverse is outside the loop too (dWx = X^T dP, one product). `g` has
    inputs (i, captured..., carries..., xs...); returns the body, the captured values and the
    xs, without the weights and data the body no longer reads."""
    ins = g.inputs
    n_caps = len(caps)
    weight = {ins[1 + k].id: caps[k] for k in range(n_caps)}
    data = {ins[1 + n_caps + nc + k].id: x_leaves[k] for k in range(len(x_leaves))}
    hoisted = []
    for n in g.nodes:
        if n.op != "matmul" or np.dtype(n.dtype).kind != "f":
            continue
        a, b = n.inputs
        if a.id in data and b.id in weight and a.ndim in (1, 2) and b.ndim == 2:
            X, W = data[a.id], weight[b.id]
        elif a.id in weight and b.id in data and a.ndim == 2 and b.ndim == 1:
            X, W = data[b.id], np.transpose(weight[a.id])         # W @ x_t = x_t @ W^T
        else:
            continue
        if np.shape(X)[0] * n.size > HOIST_MAX_SIZE or np.dtype(X.dtype) != n.dtype or np.dtype(W.dtype) != n.dtype:
            continue
        P = np.matmul(X, W)
        if tuple(np.shape(P)[1:]) == tuple(n.shape) and np.dtype(P.dtype) == n.dtype:
            hoisted.append((n, P))
    if not hoisted:
        return g, caps, x_leaves
    new_ins = [Node("input", (), {"index": len(ins) + k}, n.shape, n.dtype) for k, (n, _) in enumerate(hoisted)]
    nodes = substitute(g.nodes, {n.id: x for (n, _), x in zip(hoisted, new_ins)})
    outs = [nodes.get(o.id, o) for o in g.outputs]
    read = {x.id for n in Graph(list(ins) + new_ins, outs).nodes for x in n.inputs} | {o.id for o in outs}
    keep_caps = [k for k in range(n_caps) if ins[1 + k].id in read]
    keep_xs = [k for k in range(len(x_leaves)) if ins[1 + n_caps + nc + k].id in read]
    body_ins = ([ins[0]] + [ins[1 + k] for k in keep_caps] + list(ins[1 + n_caps:1 + n_caps + nc])
                + [ins[1 + n_caps + nc + k] for k in keep_xs] + new_ins)
    return (Graph(body_ins, outs, meta=g.meta), [caps[k] for k in keep_caps],
            [x_leaves[k] for k in keep_xs] + [P for _, P in hoisted])


def _captured_first(g, lead, n_explicit):
    """Subgraph inputs (lead..., explicit..., captured...) -> (lead..., captured..., explicit...):
    the layout of the control nodes (scan bodies lead with the index i)."""
    ins = g.inputs
    new = list(ins[:lead]) + list(ins[n_explicit:]) + list(ins[lead:n_explicit])
    return Graph(new, g.outputs, meta=g.meta)


def while_loop(cond_fun, body_fun, init_val):
    """`while cond_fun(val): val = body_fun(val)`; returns val (like `jax.lax.while_loop`).

    Compiles to a real loop in `jit`; not reverse-differentiable (the trip count is
    only known at run time): use `fori_loop` with static bounds or `scan` for gradients.
    Outside a trace it is the `while` statement.
    """
    if not is_tracing():
        val = init_val
        while _truth(cond_fun(val), "while_loop's condition"):
            val = body_fun(val)
        return val
    return _while(cond_fun, body_fun, init_val, "while_loop")


def _while(cond_fun, body_fun, init_val, kind):
    leaves, tree = tree_flatten(init_val)
    avals = [_aval(v) for v in leaves]

    def wrap(fun):
        return lambda *xs: fun(tree_unflatten(tree, list(xs)))

    def run_python():
        val = init_val
        while True:
            c = cond_fun(val)
            c = c.value if isinstance(c, EagerBox) else c
            if isinstance(c, Tensor):
                raise TracingError(f"{kind}'s condition is a traced value inside a nested eager "
                                   "value_and_grad")
            if not bool(np.asarray(c)):
                return val
            val = body_fun(val)

    traced = _trace_bodies(leaves, [(wrap(cond_fun), avals, _fname(cond_fun)),
                                    (wrap(body_fun), avals, _fname(body_fun))])
    if traced is None:
        return run_python()
    (gc, tc, cc), (gb, tb, cb) = traced
    if tb != tree:
        raise ShapeError(f"{kind}: the body takes structure {tree} but returns {tb}")
    outs = _out_avals(gb)
    for k, ((s, d, weak), (so, do)) in enumerate(zip(avals, outs)):
        if (tuple(s), np.dtype(d)) != (tuple(so), np.dtype(do)):
            if weak and tuple(s) == tuple(so):
                leaves[k] = np.asarray(leaves[k], do)
                return _while(cond_fun, body_fun, tree_unflatten(tree, leaves), kind)
            raise ShapeError(f"{kind}: value {k} enters the body as {np.dtype(d).name}{list(s)} but "
                             f"leaves as {np.dtype(do).name}{list(so)}")
    c_out = _out_avals(gc)
    if len(c_out) != 1 or tuple(c_out[0][0]) != ():
        raise ShapeError(f"{kind}: the condition must return one scalar, got {c_out}")
    caps = _merge_captures(cc, cb)
    gc = _captured_first(_with_inputs(gc, len(leaves), cc, caps), 0, len(leaves))
    gb = _captured_first(_with_inputs(gb, len(leaves), cb, caps), 0, len(leaves))
    params = dict(cond=gc, body=gb, n_consts=len(caps), kind=kind)
    res = _bind_control("while", caps + leaves, params, [(s, d) for s, d, _ in avals])
    return tree_unflatten(tree, res)


# ---- primitives: shape rules and reference implementations -----------------------------------------
def _tuple_abs(*avals, **params):
    return (), TUPLE


def _cond_impl(pred, *ops, branches, out_avals):
    return tuple(evaluate(branches[int(bool(pred))], *ops))


def _scan_impl(*args, body, length, reverse, start, n_consts, n_carry, out_avals):
    consts = list(args[:n_consts])
    carry = [np.asarray(c) for c in args[n_consts:n_consts + n_carry]]
    xs = args[n_consts + n_carry:]
    n_y = len(out_avals) - 2 * n_carry
    ys = [np.empty(s, d) for s, d in out_avals[n_carry:n_carry + n_y]]
    hist = [np.empty(s, d) for s, d in out_avals[n_carry + n_y:]]
    order = range(length - 1, -1, -1) if reverse else range(length)
    for p in order:
        for h, c in zip(hist, carry):
            h[p] = c
        out = evaluate(body, np.int64(start + p), *consts, *carry, *[x[p] for x in xs])
        carry = out[:n_carry]
        for y, v in zip(ys, out[n_carry:]):
            y[p] = v
    return tuple(carry) + tuple(ys) + tuple(hist)


def _while_impl(*args, cond, body, n_consts, kind, out_avals):
    consts = list(args[:n_consts])
    val = [np.asarray(v) for v in args[n_consts:]]
    while bool(evaluate(cond, *consts, *val)[0]):
        val = evaluate(body, *consts, *val)
    return tuple(val)


def _proj_abs(t, index, shape, dtype):
    return tuple(shape), np.dtype(dtype)


def _proj_impl(t, index, shape, dtype):
    return t[index]


# ---- reverse mode ---------------------------------------------------------------------------------------
def inline(graph, args, env=None):
    """Apply `graph`'s nodes to `args` with `bind`: records them on the current trace (`env`,
    when given, receives each node's value by node id)."""
    return run_graph(graph, args, lambda node, xs: bind(node.op, *xs, **node.p), env)


def _is_float(dtype):
    return np.dtype(dtype).kind == "f"


def _vjp_graph(graph, diff_mask, name, saved=()):
    """A graph (inputs..., cotangents of outputs..., residuals...) -> cotangents of the inputs
    in diff_mask; returns it and the list of the saved nodes it reads.

    It recomputes graph's forward values from its inputs, then runs the reverse sweep. The
    `saved` nodes of `graph` are values the caller can store instead (a loop body's
    products, say): where the sweep reads one of them, the graph reads a residual input in
    its place, and the forward work only that value needed is gone."""
    ins = graph.inputs
    out_float = [_is_float(n.dtype) for n in graph.outputs]
    avals = [(n.shape, n.dtype, False) for n in ins]
    avals += [(n.shape, n.dtype, False) for n, f in zip(graph.outputs, out_float) if f]
    env = {}

    def fun(*xs):
        if not xs:          # a graph with no inputs has nothing to differentiate
            return []
        trace = xs[0]._trace
        primal = list(xs[:len(ins)])
        cts = list(xs[len(ins):])
        start = len(trace.nodes)
        outs = inline(graph, primal, env)
        wrt = [p.node for p, m in zip(primal, diff_mask) if m]
        seeds, out_nodes = [], []
        it = iter(cts)
        for o, f in zip(outs, out_float):
            if f:
                ct = next(it)
                if isinstance(o, Tensor) and o._trace is trace:
                    out_nodes.append(o.node)
                    seeds.append(ct)
        return backward_multi(trace.nodes[start:], out_nodes, wrt, trace.tracer, seeds)

    g, _, caps = trace_subgraph(fun, avals, name)
    if caps:
        raise AssertionError("a VJP subgraph captured outer values")
    # the recomputed values of the saved nodes, and which of them the graph still reads
    # once they are inputs (the walk from the outputs stops at them)
    recomputed = {}
    for r in saved:
        v = env.get(r.id)
        if isinstance(v, Tensor) and v.node.op not in ("input", "const"):
            recomputed.setdefault(v.node.id, r)
    read, seen, stack = set(), set(), list(g.outputs)
    while stack:
        n = stack.pop()
        if n.id in seen:
            continue
        seen.add(n.id)
        if n.id in recomputed:
            read.add(n.id)
        else:
            stack.extend(n.inputs)
    if not read:
        return g, []
    order = [n for n in g.nodes if n.id in read]
    res_inputs = [Node("input", (), {"index": len(g.inputs) + k}, n.shape, n.dtype)
                  for k, n in enumerate(order)]
    new = substitute(g.nodes, {n.id: r for n, r in zip(order, res_inputs)})
    g = Graph(g.inputs + res_inputs, [new.get(o.id, o) for o in g.outputs], meta=g.meta)
    return g, [recomputed[n.id] for n in order]


# a gather reading at most 1/GATHER_SAVE_RATIO of its array is stored per iteration (`_saveable`)
GATHER_SAVE_RATIO = 4


def _saveable(body, n_consts):
    """The nodes of a loop body worth storing per iteration for the reverse loop rather than
    recomputing there: results of library routines (products, solves, factorizations) that
    depend on the iteration, as JAX's "save dots" policy. Elementwise work is recomputed from
    them in the reverse loop's fused loops, where it costs little.

    A product read only by a sum of its shape (an RNN's `x @ Wx + h @ Wh + b`) is stored as
    that sum instead: a sum's reverse sweep reads none of its operands, so the sum is all the
    reverse loop needs, one array where there was one per product, and no pass adding them
    again there.

    So are gathers of a few elements of a large array (the cells of a dynamic programme's
    table an iteration reads): then the reverse loop may not need the array at all, and the
    forward loop stores no copy of it per iteration (`scan_vjp`)."""
    variant = {n.id for n in body.inputs[:1] + body.inputs[1 + n_consts:]}
    users = body.users()
    outputs = {o.id for o in body.outputs}
    out, seen = [], set()
    for n in body.nodes:
        if n.op in ("input", "const") or not any(x.id in variant for x in n.inputs):
            continue
        variant.add(n.id)
        if not _is_float(n.dtype):
            continue
        if n.kind == "linalg" and not PRIMS[n.op].multiple:
            while n.id not in outputs and len(users[n.id]) == 1:
                u = users[n.id][0]
                if u.op not in ("add", "sub") or u.shape != n.shape or u.dtype != n.dtype:
                    break
                n = u
        elif n.op != "gather" or n.inputs[0].size < GATHER_SAVE_RATIO * n.size:
            continue
        if n.id not in seen:
            seen.add(n.id)
            out.append(n)
    return out


def scan_vjp(cts, node, value_of):
    """Reverse of a scan: a scan the other way over the stored carries, accumulating the
    cotangents of captured values; per-iteration cotangents of xs come out as its ys.

    The products the reverse body reads (`_saveable`) are stored by the forward loop: the
    rule binds the same scan with them as extra ys, and `loop_passes.merge_scans` makes that
    scan and `node` one loop once the graph is traced."""
    p = node.p
    body, T, nc, nk = p["body"], p["length"], p["n_consts"], p["n_carry"]
    args = [value_of(x) for x in node.inputs]
    consts, xs = args[:nc], args[nc + nk:]
    avals = p["out_avals"]
    n_y = len(avals) - 2 * nk
    # body inputs: i, consts, carry, x; differentiate float consts, carries, xs
    b_ins = body.inputs
    mask = [False] + [_is_float(n.dtype) for n in b_ins[1:]]
    vjp, saved = _vjp_graph(body, mask, f"{body.meta.get('name', 'body')}_vjp", _saveable(body, nc))
    if saved:
        ys_ids = [o.id for o in body.outputs[nk:]]
        extra = [r for r in saved if r.id not in ys_ids]
        params = {k: v for k, v in p.items() if k != "out_avals"}
        params["body"] = Graph(body.inputs, body.outputs + extra, meta=body.meta)
        res = _bind_control("scan", args, params, list(avals[:nk + n_y])
                            + [((T,) + r.shape, r.dtype) for r in extra] + list(avals[nk + n_y:]))
        residuals = [res[nk + ys_ids.index(r.id)] if r.id in ys_ids else res[nk + n_y + extra.index(r)]
                     for r in saved]
        hist = res[nk + n_y + len(extra):]
    else:
        residuals = []
        t = value_of(node)
        hist = [bind("proj", t, index=nk + n_y + k, shape=avals[nk + n_y + k][0],
                     dtype=avals[nk + n_y + k][1]) for k in range(nk)]
    # a carry the reverse body does not read (its gathers are stored) needs no stored history
    v_users = vjp.users()
    read = [bool(v_users.get(vjp.inputs[1 + nc + k].id)) for k in range(nk)]
    hist_all, hist = hist, [h for h, r in zip(hist, read) if r]
    out_float = [_is_float(n.dtype) for n in body.outputs]
    ct = [c if c is not None else np.zeros(s, d) for c, (s, d) in zip(cts, avals)]
    ct_carry = [ct[k] for k in range(nk) if out_float[k]]
    ct_ys = [ct[nk + k] for k in range(n_y) if out_float[nk + k]]
    fc = [k for k in range(nc) if mask[1 + k]]            # differentiated consts
    fk = [k for k in range(nk) if mask[1 + nc + k]]       # differentiated carries
    fx = [k for k in range(len(xs)) if mask[1 + nc + nk + k]]

    # cotangents of the stored carries themselves (a higher derivative reads them):
    # hist[p] is the carry entering position p, so its cotangent adds to that carry's
    ct_hist = [cts[nk + n_y + k] for k in fk]
    use_hist = any(c is not None for c in ct_hist)
    ct_hist = [c if c is not None else np.zeros(avals[nk + n_y + k][0], avals[nk + n_y + k][1])
               for c, k in zip(ct_hist, fk)] if use_hist else []

    # a captured weight's cotangent that is a product per iteration (an RNN's dh_t h_{t-1}^T,
    # or h^T dz over a batch) is not accumulated in the loop, a read and a write of the whole
    # weight per step: its two factors are stacked outputs, and one product after the loop
    # sums them (`_factored`)
    # (a factor that is one of the reverse body's inputs, a history, a data sequence, a ys
    # cotangent or a stored product, is stacked outside the loop already: not stored again)
    n_x = len(vjp.outputs) - len(fc) - len(fk)
    v_in = vjp.inputs
    outside = {v_in[1 + nc + k].id: hist_all[k] for k in range(nk)}
    outside.update({v_in[1 + nc + nk + k].id: xs[k] for k in range(len(xs))})
    n_in = len(body.inputs) + len(fk)
    outside.update({v_in[n_in + k].id: c for k, c in enumerate(ct_ys + residuals)})
    # (and so are the cotangents of xs it computes, its ys: known once it has run)
    ct_x_ids = [o.id for o in vjp.outputs[len(fc) + len(fk):]]
    outside.update(dict.fromkeys(ct_x_ids))
    # (and a factor stored for one weight is free for the others: dz_t of x_t @ Wx + h @ Wh).
    # A cotangent that is stacked itself (a bias's dz_t) is one sum after the loop.
    factors = {}
    stored = []          # the factors the reverse loop stacks as extra ys
    while True:
        free = set(outside) | {f.id for f in stored}
        more = {j: ((vjp.outputs[j], False), None, "sum") if vjp.outputs[j].id in free
                else _factored(vjp.outputs[j], free) for j in range(len(fc)) if j not in factors}
        more = {j: got + (vjp.outputs[j].shape,) for j, got in more.items() if got is not None}
        if not more:
            break
        factors.update(more)
        for j in more:
            for f, _ in filter(None, more[j][:2]):
                if f.id not in free and all(f is not g for g in stored):
                    stored.append(f)
    if stored:
        vjp = Graph(vjp.inputs, vjp.outputs + stored, meta=vjp.meta)

    # a carry the body only writes (a value read after the loop from its last iteration,
    # reroll's `plan.last`) has a cotangent in the last iteration only: it is not a carry of
    # the reverse loop, whose every other step would make and copy an array of zeros
    b_users = body.users()
    written = [] if use_hist or T == 0 else [j for j, k in enumerate(fk) if not b_users.get(b_ins[1 + nc + k].id)]
    last = p["start"] + (0 if p["reverse"] else T - 1)

    def bstep(i, carry, x):
        ctc, acc = carry
        hc, xv, cty, cth, rows = x
        stored = iter(hc)       # (an unread carry's value: zeros the reverse body never reads)
        hc = [next(stored) if r else np.zeros(avals[nk + n_y + k][0], avals[nk + n_y + k][1])
              for k, r in enumerate(read)]
        looped = iter(ctc)
        ctc = [np.where(i == last, ct_carry[j], 0) if j in written else next(looped) for j in range(len(fk))]
        primal = [i] + list(consts) + list(hc) + list(xv)
        res = inline(vjp, primal + list(ctc) + list(cty) + list(rows))
        r_c, r_k = res[:len(fc)], res[len(fc):len(fc) + len(fk)]
        r_x = res[len(fc) + len(fk):]
        # a carry keeps its dtype, so the float carries are exactly the differentiated ones
        new_ctc = [a + b for a, b in zip(r_k, cth)] if cth else list(r_k)
        new_ctc = [c for j, c in enumerate(new_ctc) if j not in written]
        summed = [r for j, r in enumerate(r_c) if j not in factors]
        return (new_ctc, [a + r for a, r in zip(acc, summed)]), list(r_x)

    acc0 = [zeros_like(consts[k]) for j, k in enumerate(fc) if j not in factors]
    xs_b = (hist, list(xs), ct_ys, ct_hist, residuals)
    looped0 = [c for j, c in enumerate(ct_carry) if j not in written]
    (ct_looped, ct_consts), ct_xs = _scan(bstep, (looped0, acc0), xs_b, T, not p["reverse"],
                                          p["start"], "scan", body)
    looped = iter(ct_looped)
    ct_init = [zeros_like(ct_carry[j]) if j in written else next(looped) for j in range(len(fk))]
    ct_xs, stacked = ct_xs[:n_x], ct_xs[n_x:]
    outside.update({f.id: v for f, v in zip(stored, stacked)})
    outside.update(zip(ct_x_ids, ct_xs))
    accumulated = iter(ct_consts)
    out = [None] * len(node.inputs)
    for j, k in enumerate(fc):
        if j in factors:
            (x, tx), y, kind, shape = factors[j]
            if kind == "sum":      # the cotangent itself is stacked: a captured addend's
                out[k] = np.sum(outside[x.id], axis=0)
            else:
                out[k] = _factored_sum(outside[x.id], outside[y[0].id], kind, shape, tx, y[1])
        else:
            out[k] = next(accumulated)
    for j, k in enumerate(fk):
        out[nc + k] = ct_init[j]
    for j, k in enumerate(fx):
        out[nc + nk + k] = ct_xs[j]
    return out


def _factored(node, outside):
    """((x, tx), (y, ty), kind) when `node`, a weight's cotangent in one iteration, is a
    product of two per-iteration values whose sum over the iterations is one product of their
    stacks: kind "outer" for x * y broadcast over complementary axes (each axis longer than 1
    comes from one of them: dh h^T), "matmul" for x @ y of 2-D operands (h^T dz over a batch),
    where a factor `tx` (`ty`) true is read transposed: the product is x^T @ y, as a matmul's
    weight cotangent is. The transpose is done by the product after the loop, reading the
    stack in place, not by a copy per iteration. Only when the factors that are not
    `outside` the loop already (by id: inputs of the reverse body stacked there) are none, or
    no larger than twice the product, which is not tiny. Else None."""
    if node.op == "reshape":
        node = node.inputs[0]
    if not _is_float(node.dtype):
        return None
    if node.op == "matmul" and all(x.ndim == 2 and x.dtype == node.dtype for x in node.inputs):
        factors = [(x.inputs[0], True) if x.op == "transpose" and tuple(x.p["perm"]) == (1, 0) else (x, False)
                   for x in node.inputs]
        kind = "matmul"
    elif node.op == "mul":
        ins = []
        for x in node.inputs:
            if x.op == "broadcast":
                x = x.inputs[0]
            if x.ndim > node.ndim or x.dtype != node.dtype:
                return None
            ins.append(x)
        x, y = ins
        xs, ys = (1,) * (node.ndim - x.ndim) + x.shape, (1,) * (node.ndim - y.ndim) + y.shape
        if any(a > 1 and b > 1 for a, b in zip(xs, ys)) or x.size * y.size != node.size:
            return None
        factors = [(x, False), (y, False)]
        kind = "outer"
    else:
        return None
    stored = sum(f.size for f, _ in factors if f.id not in outside)
    if stored and (node.size < FACTORED_MIN_SIZE or stored > 2 * node.size):
        return None
    return factors[0], factors[1], kind


# a weight's per-iteration product cotangent of at least this size is summed after the loop
# (of any size when its factors are stacked already)
FACTORED_MIN_SIZE = 64


def _factored_sum(X, Y, kind, shape, tx=False, ty=False):
    """The sum over t of the product (`_factored`'s kind) of X[t] and Y[t], in `shape`;
    `tx`/`ty`: X[t]/Y[t] enter the matmul transposed."""
    T = X.shape[0]
    if kind == "matmul":       # sum_t A[t] @ B[t] = [A[0] .. A[T-1]] @ [B[0]; ..; B[T-1]]
        if tx:                 # A[t] = X[t]^T: the rows of X's stack, read transposed
            k = X.shape[1]
            a = np.transpose(np.reshape(X, (T * k, X.shape[2])))
        else:
            k = X.shape[2]
            a = np.reshape(np.transpose(X, (1, 0, 2)), (X.shape[1], T * k))
        if ty:                 # B[t] = Y[t]^T
            b = np.transpose(np.reshape(np.transpose(Y, (1, 0, 2)), (Y.shape[1], T * k)))
        else:
            b = np.reshape(Y, (T * k, Y.shape[2]))
        return np.reshape(np.matmul(a, b), shape)
    r = len(shape)
    xs = (1,) * (r - (X.ndim - 1)) + tuple(X.shape[1:])
    ys = (1,) * (r - (Y.ndim - 1)) + tuple(Y.shape[1:])
    xd = [d for d in range(r) if xs[d] > 1]
    yd = [d for d in range(r) if ys[d] > 1]
    m = np.matmul(np.transpose(np.reshape(X, (T, -1))), np.reshape(Y, (T, -1)))
    m = np.reshape(m, tuple(shape[d] for d in xd) + tuple(shape[d] for d in yd))
    order = xd + yd
    m = np.transpose(m, [order.index(d) for d in sorted(order)])
    return np.reshape(m, shape)


def cond_vjp(cts, node, value_of):
    """Reverse of a cond: a cond on the same predicate over the branches' VJP graphs."""
    gf, gt = node.p["branches"]
    args = [value_of(x) for x in node.inputs]
    pred, ops = args[0], args[1:]
    avals = node.p["out_avals"]
    mask = [_is_float(n.dtype) for n in node.inputs[1:]]
    vf, _ = _vjp_graph(gf, mask, "false_vjp")
    vt, _ = _vjp_graph(gt, mask, "true_vjp")
    ct = [c if c is not None else np.zeros(s, d) for c, (s, d) in zip(cts, avals)
          if _is_float(d)]
    n = len(ops)
    res = cond(pred, lambda *a: inline(vt, list(a)), lambda *a: inline(vf, list(a)), *ops, *ct)
    out = [None]
    it = iter(res)
    for m in mask:
        out.append(next(it) if m else None)
    assert len(out) == n + 1
    return out


# A control node's value is a tuple: its rule gets the cotangents of every element at once
# and returns one adjoint per input; `proj` routes an element's adjoint into that tuple.
_HOST_ONLY = "control flow (jg.cond, jg.scan, jg.fori_loop, jg.while_loop)"
def _graph_flops(g):
    return sum(flops(n) for n in g.nodes)


# operation counts: a scan's body times its length, a branch's larger one, a while loop's one
# iteration (its trip count is known at run time only)
register("cond", "control", _tuple_abs, _cond_impl, cond_vjp, host_only=_HOST_ONLY,
         flops=lambda node: max(_graph_flops(g) for g in node.p["branches"]))
register("scan", "control", _tuple_abs, _scan_impl, scan_vjp, host_only=_HOST_ONLY,
         flops=lambda node: node.p["length"] * _graph_flops(node.p["body"]))


def _while_not_differentiable(node):
    what = "fori_loop with a traced bound" if node.p["kind"] == "fori_loop" else "while_loop"
    return (f"{what} is not reverse-differentiable: its trip count is only known when it runs, so "
            "the carries to store cannot be planned; use fori_loop with Python-int bounds, or scan")


register("while", "control", _tuple_abs, _while_impl, NoGradient(zero=False, why=_while_not_differentiable),
         host_only=_HOST_ONLY, flops=lambda node: _graph_flops(node.p["cond"]) + _graph_flops(node.p["body"]))
register("proj", "structural", _proj_abs, _proj_impl, TUPLE_ELEMENT, flops=lambda node: 0,
         host_only=_HOST_ONLY)
