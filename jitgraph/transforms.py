"""Transformations beyond the gradient: `vjp`, `jvp`, `jacobian`, `hessian`, and `check_grads`.

All of them are built on the one reverse sweep (`ad.backward_multi`), with JAX's
signatures, eagerly on NumPy values and traced inside `jit` (where a sweep adds
its nodes to the enclosing graph):

* `vjp` records `fun` once and returns a pullback that runs a reverse sweep per
  cotangent.
* `jvp` is the transpose of the pullback: the pullback of a cotangent `u` is
  linear in `u` (J^T u), so the reverse sweep of <J^T u, v> with respect to `u`
  gives J v. The pullback is recorded once, on a tape (or trace) of its own, and
  swept once: one forward pass and two reverse sweeps.
* `jacobian` builds the Jacobian by rows (one reverse sweep per output element)
  when there are no more outputs than inputs, else by columns (one sweep of the
  recorded pullback per input element, as `jvp` does).
* `hessian` is the Jacobian of the gradient.
* `check_grads` compares `jvp` and `vjp` with central differences in random
  directions, to first or second order, like JAX's `check_grads`.
"""
import functools

import numpy as np

from .ad import backward_multi
from .buffers import unwrap
from .recording import recording
from .api import _check_diff_leaf, _fname, _leaf_value, _norm_argnums, grad
from .core import EagerTrace, Tensor, Tracer, bind, unbox
from .errors import GradError
from .tree import tree_flatten, tree_unflatten


class _Recording:
    """`fun(*args)` recorded for reverse sweeps with respect to the leaves of args[nums]:
    on a tape of its own (eager), or in the trace the arguments belong to (traced)."""

    def __init__(self, fun, args, nums, has_aux, kwargs, fname):
        args = list(args)
        self.trees, self.wrt, self.wrt_leaves = [], [], []
        leaves_of = {a: tree_flatten(args[a]) for a in nums}
        traced = [x for a in nums for x in leaves_of[a][0] if isinstance(x, Tracer)]
        self.trace = traced[0]._trace if traced else EagerTrace()
        self.start = len(self.trace.nodes)
        for a in nums:
            leaves, td = leaves_of[a]
            boxed = []
            for k, leaf in enumerate(leaves):
                where_ = f"argument {a} of {fname}" + (f" (leaf {k})" if len(leaves) > 1 else "")
                if traced:
                    if not isinstance(leaf, Tracer) or leaf._trace is not self.trace:
                        raise GradError(f"{where_} mixes traced and concrete values")
                    _check_diff_leaf(leaf, where_)
                    # a fresh node: ops on it are new nodes, never hits on nodes computed before
                    box = bind("cast", leaf, dtype=leaf.dtype)
                    box.weak = leaf.weak
                else:
                    value, weak = _leaf_value(leaf, where_)
                    _check_diff_leaf(value, where_)
                    box = self.trace.new_input(value, weak)
                self.wrt.append(box.node)
                self.wrt_leaves.append(leaf)
                boxed.append(box)
            self.trees.append(td)
            args[a] = tree_unflatten(td, boxed)
        with recording():
            out = fun(*args, **kwargs)
        out = tree_map_leaves(out, unwrap)
        if has_aux:
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise GradError(f"{fname} has has_aux=True, so it must return a pair (value, aux)")
            out, aux = out
            self.aux = tree_map_leaves(aux, self.unbox)
        self.out_leaves, self.out_tree = tree_flatten(out)
        for k, o in enumerate(self.out_leaves):
            dt = o.dtype if isinstance(o, Tensor) else np.asarray(o).dtype
            if dt.kind != "f":
                raise GradError(f"output {k} of {fname} has dtype {dt.name}: only floating outputs "
                                f"can be differentiated")
        self.nums = nums

    @property
    def eager(self):
        return isinstance(self.trace, EagerTrace)

    def unbox(self, v):
        return unbox(v, self.trace) if self.eager else v

    def value_of(self, node):
        return self.trace.values[node.id] if self.eager else self.trace.tracer(node)

    def nodes(self):
        return self.trace.nodes[self.start:]

    def recorded(self, o):
        """The node of output leaf o, if it was computed from the differentiated arguments."""
        if isinstance(o, Tensor) and o._trace is self.trace:
            return o.node
        return None

    def seed(self, value, like):
        """A cotangent for output `like` (cast to its dtype; a node of the trace when traced)."""
        dt = like.dtype if isinstance(like, Tensor) else np.asarray(like).dtype
        shape = tuple(np.shape(like)) if not isinstance(like, Tensor) else like.shape
        if isinstance(value, Tensor):
            if tuple(value.shape) != shape:
                raise ValueError(f"cotangent of shape {tuple(value.shape)} for an output of shape {shape}")
            return value if value.dtype == dt else bind("cast", value, dtype=dt)
        value = np.asarray(value, dtype=dt)
        if value.shape != shape:
            raise ValueError(f"cotangent of shape {value.shape} for an output of shape {shape}")
        return value if self.eager else self.trace.tracer(self.trace.const(value))

    def pullback(self, cotangents):
        """J^T ct for each differentiated leaf: one reverse sweep."""
        outs, seeds = [], []
        for o, ct in zip(self.out_leaves, cotangents):
            node = self.recorded(o)
            if node is not None and ct is not None:
                outs.append(node)
                seeds.append(self.seed(ct, o))
        if not outs:
            return [_zeros_like_leaf(self, n) for n in self.wrt]
        grads = backward_multi(self.nodes(), outs, self.wrt, self.value_of, seeds)
        return [self.unbox(g) for g in grads]

    def by_argument(self, flat):
        """Per-leaf values for the differentiated leaves, regrouped into each argument's tree."""
        out, k = [], 0
        for td in self.trees:
            out.append(tree_unflatten(td, flat[k:k + td.num_leaves]))
            k += td.num_leaves
        return out


def _zeros_like_leaf(rec, node):
    return np.zeros(node.shape, node.dtype) if rec.eager else rec.trace.tracer(
        rec.trace.const(np.zeros(node.shape, node.dtype)))


def tree_map_leaves(tree, fn):
    leaves, td = tree_flatten(tree)
    return tree_unflatten(td, [fn(x) for x in leaves])


def _to_caller(v, rec):
    """A result leaf as the caller sees it: NumPy arrays (scalars as 0-d arrays' items) eagerly."""
    v = rec.unbox(v)
    if isinstance(v, Tensor):
        return v
    return np.array(v, copy=True) if isinstance(v, np.ndarray) else v


# ---- vjp ---------------------------------------------------------------------------------------
def vjp(fun, *primals, has_aux=False):
    """`(primals_out, vjp_fn)`, or `(primals_out, vjp_fn, aux)` with `has_aux` (JAX's signature).

    `vjp_fn(cotangents)` takes cotangents with the structure of `primals_out` and returns a
    tuple with one entry per primal: J^T cotangent, in the primal's structure. `fun` runs
    once; each call of `vjp_fn` is one reverse sweep. Eager on NumPy values; traced inside
    `jit`."""
    fname = _fname(fun)
    rec = _Recording(fun, primals, tuple(range(len(primals))), has_aux, {}, fname)
    out = tree_unflatten(rec.out_tree, [_to_caller(o, rec) for o in rec.out_leaves])

    def vjp_fn(cotangents):
        leaves, td = tree_flatten(cotangents)
        if td != rec.out_tree:
            raise ValueError(f"vjp of {fname}: cotangents must have the structure of its output "
                             f"({rec.out_tree}), got {td}")
        return tuple(rec.by_argument([_to_caller(g, rec) for g in rec.pullback(leaves)]))

    return (out, vjp_fn, rec.aux) if has_aux else (out, vjp_fn)


# ---- jvp: the transposed pullback -----------------------------------------------------------------
class _Transposed:
    """The pullback of a recording, itself recorded as a function of the cotangents `u`, so
    that reverse sweeps with respect to `u` give J v (one sweep per tangent v)."""

    def __init__(self, rec):
        self.rec = rec
        outer = EagerTrace() if rec.eager else rec.trace
        self.trace = outer
        self.u, self.u_nodes = [], []
        for o in rec.out_leaves:
            shape = tuple(np.shape(o)) if not isinstance(o, Tensor) else o.shape
            dt = o.dtype if isinstance(o, Tensor) else np.asarray(o).dtype
            if rec.eager:
                u = outer.new_input(np.zeros(shape, dt))
            else:
                # a fresh node that no constant folding reaches
                u = outer.tracer(outer.placeholder(np.zeros(shape, dt)))
            self.u.append(u)
            self.u_nodes.append(u.node)
        self.start = len(outer.nodes)
        self.g = rec.pullback(self.u)

    def apply(self, tangents):
        """J v for the tangents v of the differentiated leaves (one reverse sweep)."""
        outs, seeds = [], []
        for g, v in zip(self.g, tangents):
            if isinstance(g, Tensor) and g._trace is self.trace:
                outs.append(g.node)
                seeds.append(self._seed(v, g))
        if not outs:
            return [self._zeros(n) for n in self.u_nodes]
        value_of = (lambda n: self.trace.values[n.id]) if self.rec.eager else self.trace.tracer
        res = backward_multi(self.trace.nodes[self.start:] if not self.rec.eager else self.trace.nodes,
                             outs, self.u_nodes, value_of, seeds)
        return [unbox(r, self.trace) if self.rec.eager else r for r in res]

    def _seed(self, v, like):
        if isinstance(v, Tensor):
            return v if v.dtype == like.dtype else bind("cast", v, dtype=like.dtype)
        v = np.asarray(v, dtype=like.dtype)
        if v.shape != tuple(like.shape):
            raise ValueError(f"tangent of shape {v.shape} for an argument of shape {tuple(like.shape)}")
        return v if self.rec.eager else self.trace.tracer(self.trace.const(v))

    def _zeros(self, node):
        z = np.zeros(node.shape, node.dtype)
        return z if self.rec.eager else self.trace.tracer(self.trace.const(z))


def jvp(fun, primals, tangents, has_aux=False):
    """`(primals_out, tangents_out)` (JAX's signature): fun's value and its directional
    derivative J v at `primals` along `tangents` (a tuple with one tangent per primal, each of
    its primal's structure); with `has_aux`, `(primals_out, tangents_out, aux)`.

    Computed from the reverse-mode rules: one forward pass, then the pullback recorded and
    swept once in reverse (J v is the gradient of <J^T u, v> with respect to u)."""
    fname = _fname(fun)
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ValueError(f"jvp of {fname}: {len(primals)} primals but {len(tangents)} tangents")
    rec = _Recording(fun, primals, tuple(range(len(primals))), has_aux, {}, fname)
    v = []
    for p, t in zip(primals, tangents):
        pl, ptd = tree_flatten(p)
        tl, ttd = tree_flatten(t)
        if ptd != ttd:
            raise ValueError(f"jvp of {fname}: a tangent's structure {ttd} differs from its primal's {ptd}")
        v += tl
    out = tree_unflatten(rec.out_tree, [_to_caller(o, rec) for o in rec.out_leaves])
    tan = _Transposed(rec).apply(v)
    tan = tree_unflatten(rec.out_tree, [_to_caller(t, rec) for t in tan])
    return (out, tan, rec.aux) if has_aux else (out, tan)


# ---- jacobian and hessian -------------------------------------------------------------------------
def _size(x):
    return int(np.prod(x.shape if isinstance(x, Tensor) else np.shape(x), dtype=np.int64))


def _shape(x):
    return tuple(x.shape) if isinstance(x, Tensor) else tuple(np.shape(x))


def _stack(parts, shape, eager):
    """Stack the per-element results `parts` (each of one shape) into an array of `shape`."""
    if not parts:
        return np.zeros(shape) if eager else None
    if eager:
        return np.stack([np.asarray(p) for p in parts]).reshape(shape)
    return np.stack(parts).reshape(shape)


def jacobian(fun, argnums=0, has_aux=False):
    """The Jacobian of `fun` with respect to the `argnums` arguments (JAX's `jax.jacobian`).

    For an output leaf of shape O and an argument leaf of shape I, the block has shape O + I.
    The result has the output's structure with each leaf replaced by the Jacobian blocks, in
    the argument's structure (a tuple of those for a tuple `argnums`); with `has_aux`, the
    pair `(jacobian, aux)`. Built by rows (a reverse sweep per output element) when the outputs
    have no more elements than the arguments, else by columns (a sweep of the recorded pullback
    per argument element). Eager on NumPy values; traced inside `jit`."""
    fname = _fname(fun)

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        single, nums = _norm_argnums(argnums, len(args), fname)
        nums_once = tuple(dict.fromkeys(nums))
        rec = _Recording(fun, args, nums_once, has_aux, kwargs, fname)
        outs, ins = rec.out_leaves, [rec.value_of(n) if not rec.eager else rec.trace.values[n.id]
                                     for n in rec.wrt]
        m, n = sum(_size(o) for o in outs), sum(_size(x) for x in ins)
        blocks = [[None] * len(ins) for _ in outs]      # [output leaf][argument leaf]
        if m <= n:
            for i, o in enumerate(outs):
                rows = [[] for _ in ins]
                for e in range(_size(o)):
                    seed = np.zeros(_size(o), _dtype(o))
                    seed[e] = 1
                    cts = [seed.reshape(_shape(o)) if k == i else None for k in range(len(outs))]
                    for r, g in zip(rows, rec.pullback(cts)):
                        r.append(g)
                for j, x in enumerate(ins):
                    blocks[i][j] = _stack(rows[j], _shape(o) + _shape(x), rec.eager) if rows[j] \
                        else _zero_block(rec, _shape(o) + _shape(x), _dtype(o))
        else:
            tr = _Transposed(rec)
            cols = [[[] for _ in ins] for _ in outs]    # [output leaf][argument leaf] -> columns
            for j, x in enumerate(ins):
                for e in range(_size(x)):
                    t = np.zeros(_size(x), _dtype(x))
                    t[e] = 1
                    tangents = [t.reshape(_shape(x)) if k == j else np.zeros(_shape(y), _dtype(y))
                                for k, y in enumerate(ins)]
                    for i, c in enumerate(tr.apply(tangents)):
                        cols[i][j].append(c)
            for i, o in enumerate(outs):
                for j, x in enumerate(ins):
                    ndo, ndx = len(_shape(o)), len(_shape(x))
                    if cols[i][j]:
                        stacked = _stack(cols[i][j], _shape(x) + _shape(o), rec.eager)
                        perm = tuple(range(ndx, ndx + ndo)) + tuple(range(ndx))
                        blocks[i][j] = np.transpose(stacked, perm)
                    else:
                        blocks[i][j] = _zero_block(rec, _shape(o) + _shape(x), _dtype(o))
        per_out = []
        for i in range(len(outs)):
            by_arg = rec.by_argument([_to_caller(b, rec) for b in blocks[i]])
            by_num = dict(zip(nums_once, by_arg))
            per_out.append(by_num[nums[0]] if single else tuple(by_num[a] for a in nums))
        jac = tree_unflatten(rec.out_tree, per_out)
        return (jac, rec.aux) if has_aux else jac

    return wrapped


def _dtype(x):
    return x.dtype if isinstance(x, Tensor) else np.asarray(x).dtype


def _zero_block(rec, shape, dtype):
    z = np.zeros(shape, dtype)
    return z if rec.eager else rec.trace.tracer(rec.trace.const(z))


jacrev = jacfwd = jacobian


def hessian(fun, argnums=0, has_aux=False):
    """The Hessian of scalar `fun` with respect to the `argnums` arguments (JAX's
    `jax.hessian`): the Jacobian of its gradient. For arguments of shapes I and K the block
    is I + K. Eager on NumPy values; traced inside `jit`."""
    return jacobian(grad(fun, argnums, has_aux), argnums, has_aux)


# ---- check_grads ------------------------------------------------------------------------------------
_TOL = {np.dtype(np.float32): 2e-2, np.dtype(np.float64): 1e-5}
_EPS = {np.dtype(np.float32): 3e-3, np.dtype(np.float64): 1e-4}


def check_grads(f, args, order, modes=("fwd", "rev"), atol=None, rtol=None, eps=None):
    """Check `f`'s derivatives against central differences in random directions (JAX's
    `check_grads`): "fwd" compares `jvp` along a random tangent with the difference quotient
    along it, "rev" compares <vjp(u), v> with <u, J v> for a random cotangent u. With
    `order=2` the first-order derivative functions are checked the same way (second
    derivatives), and so on. Raises AssertionError naming the mode, order and mismatch.

    Args:
        f: a function of the arrays in `args` (a tuple) returning floating arrays.
        order: how many orders of derivatives to check (1, 2, ...).
        modes: "fwd" and/or "rev".
        atol, rtol: tolerances (default 1e-5 in float64, 2e-2 in float32).
        eps: the difference step (default 1e-4 in float64, 3e-3 in float32).
    """
    args = tuple(args)
    rng = np.random.default_rng(0)
    for mode in ((modes,) if isinstance(modes, str) else tuple(modes)):
        if mode not in ("fwd", "rev"):
            raise ValueError(f"check_grads: unknown mode {mode!r} (use 'fwd' or 'rev')")
        _check(f, args, order, mode, atol, rtol, eps, rng, 1)


def _random_like(rng, leaves):
    return [rng.standard_normal(np.shape(x)).astype(np.asarray(x).dtype) if np.asarray(x).dtype.kind == "f"
            else np.zeros(np.shape(x)) for x in leaves]


def _check(f, args, order, mode, atol, rtol, eps, rng, level):
    leaves, td = tree_flatten(args)
    dtypes = [np.asarray(x).dtype for x in leaves if np.asarray(x).dtype.kind == "f"]
    if not dtypes:
        raise ValueError("check_grads: no floating arguments to differentiate")
    low = min(dtypes, key=lambda d: d.itemsize)
    eps = _EPS.get(low, 1e-4) if eps is None else eps
    tol_a = _TOL.get(low, 1e-5) if atol is None else atol
    tol_r = _TOL.get(low, 1e-5) if rtol is None else rtol
    v = _random_like(rng, leaves)

    def shifted(s):
        return tree_unflatten(td, [np.asarray(x) + s * t if np.asarray(x).dtype.kind == "f" else x
                                   for x, t in zip(leaves, v)])

    plus, minus = f(*shifted(eps)), f(*shifted(-eps))
    fd = [(np.asarray(p, np.float64) - np.asarray(q, np.float64)) / (2 * eps)
          for p, q in zip(tree_flatten(plus)[0], tree_flatten(minus)[0])]
    tangents = tree_unflatten(td, v)
    if mode == "fwd":
        out, tan = jvp(f, args, tangents)
        got = [np.asarray(t, np.float64) for t in tree_flatten(tan)[0]]
        _compare(got, fd, tol_a, tol_r, f"JVP (order {level})")
        follow = functools.partial(_jvp_of, f, tangents)
    else:
        out, pull = vjp(f, *args)
        u = _random_like(rng, tree_flatten(out)[0])
        cts = pull(tree_unflatten(tree_flatten(out)[1], u))
        got = sum(float(np.vdot(np.asarray(c, np.float64), t)) for c, t in zip(tree_flatten(cts)[0], v))
        want = sum(float(np.vdot(ui, d)) for ui, d in zip(u, fd))
        _compare([np.asarray(got)], [np.asarray(want)], tol_a, tol_r, f"VJP (order {level})")
        follow = functools.partial(_vjp_of, f, tree_unflatten(tree_flatten(out)[1], u))
    if order > 1:
        _check(follow, args, order - 1, mode, atol, rtol, eps, rng, level + 1)


def _jvp_of(f, tangents, *args):
    return jvp(f, args, tangents)[1]


def _vjp_of(f, cotangents, *args):
    return vjp(f, *args)[1](cotangents)


def _compare(got, want, atol, rtol, what):
    for g, w in zip(got, want):
        if g.shape != w.shape:
            raise AssertionError(f"check_grads: {what} has shape {g.shape}, differences {w.shape}")
        err = np.abs(g - w)
        bound = atol + rtol * np.abs(w)
        if not np.all(err <= bound):
            k = np.argmax(err - bound)
            raise AssertionError(
                f"check_grads: {what} does not match central differences: {g.reshape(-1)[k]!r} against "
                f"{w.reshape(-1)[k]!r} (error {err.reshape(-1)[k]:.3g} > atol {atol:g} + rtol {rtol:g} * "
                f"|expected|)")


