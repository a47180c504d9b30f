"""Per-op spec table: value and gradient of every supported op, eager and traced.

Each entry is (name, plain-NumPy function, argument specs, input domain, argnums).
An argument spec is a shape tuple (a random floating array of that shape) or a
literal value (an index array, a Python scalar) passed as is and never
differentiated. Non-scalar ops are wrapped as `sum(op(*a) * fixed_weights)`.

For every entry, in float64 and float32, both modes are run:

* eager:  `jg.value_and_grad(f, argnums)(*args)`
* traced: `g = jg.make_graph(f, argnums, grad=True)(*args); g.verify(); jg.eval_graph(g, *args)`

and checked: the value equals plain NumPy `f(*args)`; eager and traced agree
tightly; gradients pass a random-direction central-difference check (computed
in float64); float32 inputs give float32 values and gradients.
"""
import zlib
from collections import namedtuple

import numpy as np
import pytest

import jitgraph as jg

Entry = namedtuple("Entry", "name fn specs domain argnums")


# ---- deterministic randomness ----------------------------------------------------------
def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


_WEIGHTS = {}


def weights(shape, dtype):
    """Fixed random weights for a result shape (exactly representable in float32)."""
    shape = tuple(shape)
    if shape not in _WEIGHTS:
        _WEIGHTS[shape] = _rng("weights", shape).standard_normal(shape).astype(np.float32).astype(np.float64)
    return _WEIGHTS[shape].astype(dtype)


def weighted(op):
    """A scalar loss from a non-scalar op: sum(op(*a) * fixed random weights)."""
    def loss(*a):
        out = op(*a)
        return np.sum(out * weights(np.shape(out), out.dtype))
    return loss


def _sample(rng, shape, domain):
    if domain == "real":
        x = rng.standard_normal(shape)
    elif domain == "positive":
        x = rng.uniform(0.5, 2.0, shape)
    elif domain == "nonzero":
        x = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    elif domain == "unit":
        x = rng.uniform(-0.9, 0.9, shape)
    else:
        raise ValueError(domain)
    # exactly representable in float32, so float32 and float64 runs see the same numbers
    return np.asarray(x).astype(np.float32).astype(np.float64)


def make_args(entry, dtype):
    rng = _rng(entry.name, entry.specs)
    domains = entry.domain if isinstance(entry.domain, tuple) else (entry.domain,) * len(entry.specs)
    return [_sample(rng, s, d).astype(dtype) if isinstance(s, tuple) else s
            for s, d in zip(entry.specs, domains)]


def diff_argnums(entry):
    if entry.argnums is not None:
        return entry.argnums
    return tuple(i for i, s in enumerate(entry.specs) if isinstance(s, tuple))


# ---- the table ---------------------------------------------------------------------------
TABLE = []


def op(name, fn, *spec_sets, domain="real", argnums=None, weight=True):
    f = weighted(fn) if weight else fn
    for specs in spec_sets:
        TABLE.append(Entry(name, f, tuple(specs), domain, argnums))


UNARY_SHAPES = [((),), ((5,),), ((2, 3),)]
BINARY_SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((2, 3, 4), (3, 1)),
                 ((), (3,)), ((3, 4), ())]

# arithmetic
op("add", lambda x, y: x + y, *BINARY_SHAPES)
op("sub", lambda x, y: x - y, *BINARY_SHAPES)
op("mul", lambda x, y: x * y, *BINARY_SHAPES)
op("div", lambda x, y: x / y, *BINARY_SHAPES, domain=("real", "nonzero"))
op("np.add", lambda x, y: np.add(x, y), ((3, 4), (4,)))
op("np.subtract", lambda x, y: np.subtract(x, y), ((3, 1), (4,)))
op("np.multiply", lambda x, y: np.multiply(x, y), ((2, 3), (2, 1)))
op("np.divide", lambda x, y: np.divide(x, y), ((2, 3), (3,)), domain=("real", "nonzero"))
op("scalar-rsub", lambda x: 2.0 - x, *UNARY_SHAPES)
op("scalar-rdiv", lambda x: 1.5 / x, *UNARY_SHAPES, domain="nonzero")
op("scalar-mul-int", lambda x: 3 * x + x * 2, *UNARY_SHAPES)
op("scalar-div", lambda x: x / 4.0 - 1, *UNARY_SHAPES)
op("reciprocal", lambda x: np.reciprocal(x), *UNARY_SHAPES, domain="nonzero")
# powers: scalar and tensor exponents
op("pow2", lambda x: x ** 2, *UNARY_SHAPES)
op("pow3", lambda x: x ** 3, *UNARY_SHAPES)
op("pow-neg", lambda x: x ** -2, *UNARY_SHAPES, domain="nonzero")
op("pow1", lambda x: x ** 1, ((3,),))
op("pow0", lambda x: x ** 0 + x, ((3,),))
op("pow-half", lambda x: x ** 0.5, *UNARY_SHAPES, domain="positive")
op("pow-float", lambda x: x ** 2.5, *UNARY_SHAPES, domain="positive")
op("pow-np-float", lambda x: x ** np.float64(3.0), ((4,),))
op("np.power-int", lambda x: np.power(x, 3), ((4,),))
op("scalar-base", lambda x: 2.0 ** x, *UNARY_SHAPES)
op("pow-tensor", lambda x, y: x ** y, *BINARY_SHAPES, domain=("positive", "real"))
op("np.power-tensor", lambda x, y: np.power(x, y), ((3, 4), (4,)), domain=("positive", "real"))
op("np.float_power", lambda x, y: np.float_power(x, y), ((3,), (3,)), domain=("positive", "real"))
# unary
op("neg", lambda x: -x, *UNARY_SHAPES)
op("np.negative", lambda x: np.negative(x), ((3, 2),))
op("pos", lambda x: +x, ((3,),))
op("abs", lambda x: np.abs(x), *UNARY_SHAPES)
op("abs-builtin", lambda x: abs(x), ((4,),))
op("np.absolute", lambda x: np.absolute(x), ((4,),))
op("sign", lambda x: np.sign(x), *UNARY_SHAPES)
op("sign-times", lambda x: np.sign(x) * x ** 2, ((2, 3),))
op("square", lambda x: np.square(x), *UNARY_SHAPES)
op("sqrt", lambda x: np.sqrt(x), *UNARY_SHAPES, domain="positive")
op("exp", lambda x: np.exp(x), *UNARY_SHAPES)
op("expm1", lambda x: np.expm1(x), *UNARY_SHAPES)
op("log", lambda x: np.log(x), *UNARY_SHAPES, domain="positive")
op("log1p", lambda x: np.log1p(x), *UNARY_SHAPES, domain="positive")
op("sin", lambda x: np.sin(x), *UNARY_SHAPES)
op("cos", lambda x: np.cos(x), *UNARY_SHAPES)
op("tan", lambda x: np.tan(x), *UNARY_SHAPES, domain="unit")
op("tanh", lambda x: np.tanh(x), *UNARY_SHAPES)
op("sinh", lambda x: np.sinh(x), *UNARY_SHAPES)
op("cosh", lambda x: np.cosh(x), *UNARY_SHAPES)
op("arctan", lambda x: np.arctan(x), *UNARY_SHAPES)
op("arctan2", lambda y, x: np.arctan2(y, x), *BINARY_SHAPES, domain=("real", "nonzero"))
op("arctan2-scalar", lambda y: np.arctan2(y, -1.5) + np.arctan2(2.0, y), ((3, 2),), domain="nonzero")
op("hypot", lambda x, y: np.hypot(x, y), *BINARY_SHAPES, domain="nonzero")
op("composite-unary", lambda x: np.exp(np.sin(x)) * np.log(x * x + 1.0), ((3, 2),))
# max / min / clip / where
op("maximum", lambda x, y: np.maximum(x, y), *BINARY_SHAPES)
op("minimum", lambda x, y: np.minimum(x, y), *BINARY_SHAPES)
op("relu", lambda x: np.maximum(x, 0.0), *UNARY_SHAPES)
op("minimum-scalar", lambda x: np.minimum(1.0, x), ((3, 4),))
op("np.fmax", lambda x, y: np.fmax(x, y), ((3,), (3,)))
op("clip", lambda x: np.clip(x, -0.5, 0.5), *UNARY_SHAPES)
op("clip-method", lambda x: x.clip(-0.5, 0.5), ((3, 4),))
op("clip-min-only", lambda x: np.clip(x, 0.0, None), ((3, 4),))
op("clip-tensor-bounds", lambda x, lo: np.clip(x, lo, lo + 1.0), ((3, 4), (4,)))
op("where", lambda x, y: np.where(x > y, x * y, y - x), *BINARY_SHAPES)
op("where-scalar", lambda x: np.where(x > 0, x, 0.0), *UNARY_SHAPES)
op("where-broadcast", lambda x, y: np.where(x > 0, x, y), ((3, 4), (4,)), ((3, 1), (1, 4)))
op("where-cond-numpy", lambda x: np.where(np.arange(4) % 2 == 0, np.exp(x), -x), ((3, 4),))
op("where-compare-ops", lambda x, y: np.where((x <= y) | (x == 0.0), x, y * 2.0)
   + np.where((x >= 0.1) & (y != 0.0), y, x) + np.where(~(x < y), x ** 2, 0.0), ((3, 4), (4,)))

# reductions over (2, 3, 4) with every axis form and keepdims
RED_AXES = [None, 0, 1, -1, (0, 2), (-1, 0), (0, 1, 2)]
for _name, _fn, _dom in [("sum", np.sum, "real"), ("mean", np.mean, "real"), ("max", np.max, "real"),
                         ("min", np.min, "real"), ("prod", np.prod, "nonzero"), ("var", np.var, "real"),
                         ("std", np.std, "real")]:
    for _axis in RED_AXES:
        for _kd in (False, True):
            op(f"{_name}[axis={_axis},keepdims={_kd}]",
               lambda x, _fn=_fn, _axis=_axis, _kd=_kd: _fn(x, axis=_axis, keepdims=_kd),
               ((2, 3, 4),), domain=_dom)
    op(f"{_name}-1d", lambda x, _fn=_fn: _fn(x), ((5,),), domain=_dom)
op("np.amax", lambda x: np.amax(x, axis=1), ((3, 4),))
op("np.amin", lambda x: np.amin(x, 0, keepdims=True), ((3, 4),))
op("var-ddof", lambda x: np.var(x, axis=1, ddof=1), ((3, 4),))
op("std-ddof", lambda x: np.std(x, ddof=1, keepdims=True), ((3, 4),))
op("sum-method", lambda x: x.sum(axis=1), ((3, 4),))
op("sum-method-kd", lambda x: x.sum(-1, keepdims=True), ((3, 4),))
op("mean-method", lambda x: x.mean(axis=0), ((3, 4),))
op("max-method", lambda x: x.max(axis=-1, keepdims=True), ((3, 4),))
op("min-method", lambda x: x.min(0), ((3, 4),))
op("prod-method", lambda x: x.prod(axis=1), ((3, 4),), domain="nonzero")
op("var-method", lambda x: x.var(axis=0), ((3, 4),))
op("std-method", lambda x: x.std(), ((3, 4),))
op("sum-of-scalar", lambda x: np.sum(x), ((),))
op("mean-broadcast-back", lambda x: x - np.mean(x, axis=0, keepdims=True), ((4, 3),))
op("max-reduce-ufunc", lambda x: np.maximum.reduce(x, axis=0), ((3, 4),))
op("add-reduce-ufunc", lambda x: np.add.reduce(x, axis=1), ((3, 4),))

# shape ops on (2, 3, 4)
X3 = ((2, 3, 4),)
op("reshape", lambda x: np.reshape(x, (6, 4)), X3)
op("reshape-(-1)", lambda x: np.reshape(x, (-1,)), X3)
op("reshape-mid-(-1)", lambda x: np.reshape(x, (2, -1, 2)), X3)
op("reshape-method-args", lambda x: x.reshape(4, -1), X3)
op("reshape-method-tuple", lambda x: x.reshape((3, 8)), X3)
op("reshape-scalar", lambda x: np.reshape(x, (1, 1)), ((),))
op("ravel", lambda x: np.ravel(x), X3)
op("ravel-method", lambda x: x.ravel(), X3)
op("flatten", lambda x: x.flatten(), X3)
op(".T", lambda x: x.T, X3, ((3, 4),), ((5,),))
op("np.transpose", lambda x: np.transpose(x), X3)
op("np.transpose-axes", lambda x: np.transpose(x, (1, 2, 0)), X3)
op("np.transpose-neg-axes", lambda x: np.transpose(x, (-1, 0, 1)), X3)
op("transpose-method-args", lambda x: x.transpose(2, 0, 1), X3)
op("transpose-method-tuple", lambda x: x.transpose((0, 2, 1)), X3)
op("swapaxes", lambda x: np.swapaxes(x, 0, 2), X3)
op("moveaxis", lambda x: np.moveaxis(x, 0, -1), X3)
op("expand_dims", lambda x: np.expand_dims(x, 1), X3)
op("expand_dims-neg", lambda x: np.expand_dims(x, -1), X3)
op("expand_dims-tuple", lambda x: np.expand_dims(x, (0, 2)), X3)
op("None-index-front", lambda x: x[None], X3)
op("None-index-mid", lambda x: x[:, None], X3)
op("None-index-ellipsis", lambda x: x[..., None], X3)
op("None-index-multi", lambda x: x[None, :, None], X3)
op("squeeze", lambda x: np.squeeze(x), ((2, 1, 4, 1),))
op("squeeze-axis", lambda x: np.squeeze(x, axis=1), ((2, 1, 4, 1),))
op("squeeze-axes", lambda x: np.squeeze(x, axis=(1, -1)), ((2, 1, 4, 1),))
op("squeeze-method", lambda x: x.squeeze(), ((1, 3, 1),))
op("broadcast_to", lambda x: np.broadcast_to(x, (2, 3, 4)), ((3, 1),), ((4,),), ((),), ((1, 3, 4),))
op("concatenate-0", lambda x, y: np.concatenate([x, y]), ((2, 3), (4, 3)))
op("concatenate-1", lambda x, y: np.concatenate([x, y], axis=1), ((2, 3), (2, 5)))
op("concatenate-neg", lambda x, y: np.concatenate((x, y, x), axis=-1), ((2, 3), (2, 1)))
op("concatenate-None", lambda x, y: np.concatenate([x, y], axis=None), ((2, 3), (4,)))
op("concatenate-with-const", lambda x: np.concatenate([x, np.ones((1, 3))], axis=0), ((2, 3),))
op("stack-0", lambda x, y: np.stack([x, y]), ((2, 3), (2, 3)))
op("stack-1", lambda x, y: np.stack([x, y], axis=1), ((2, 3), (2, 3)))
op("stack-neg-fanout", lambda x, y: np.stack([x, y, x], axis=-1), ((2, 3), (2, 3)))
op("stack-scalars", lambda x, y: np.stack([x, y]), ((), ()))
op("hstack", lambda x, y: np.hstack([x, y]), ((2, 3), (2, 2)))
op("vstack", lambda x, y: np.vstack([x, y]), ((3,), (2, 3)))

# basic slicing on (5, 6) and (3, 4, 5)
X2 = ((5, 6),)
for _label, _fn in [
    ("x[1:4]", lambda x: x[1:4]), ("x[::2]", lambda x: x[::2]), ("x[::-1]", lambda x: x[::-1]),
    ("x[-2:]", lambda x: x[-2:]), ("x[:, 1]", lambda x: x[:, 1]), ("x[1, ::-2]", lambda x: x[1, ::-2]),
    ("x[..., 1:]", lambda x: x[..., 1:]), ("x[-1]", lambda x: x[-1]), ("x[4:0:-2]", lambda x: x[4:0:-2]),
    ("x[0, -1]", lambda x: x[0, -1]), ("x[1:-1, -3::-1]", lambda x: x[1:-1, -3::-1]),
    ("x[..., ::-1]", lambda x: x[..., ::-1]), ("x[4:1]", lambda x: x[4:1]),
    ("x[-100:100]", lambda x: x[-100:100]), ("x[:, ::-3]", lambda x: x[:, ::-3]),
    ("x[2, None, 1:3]", lambda x: x[2, None, 1:3]), ("x[...]", lambda x: x[...]),
]:
    op(f"slice {_label}", _fn, X2)
for _label, _fn in [
    ("x[..., 0, ::2]", lambda x: x[..., 0, ::2]), ("x[1, ...]", lambda x: x[1, ...]),
    ("x[:, None, 2:]", lambda x: x[:, None, 2:]), ("x[::-1, 1, -2:]", lambda x: x[::-1, 1, -2:]),
    ("x[-1, -1, -1]", lambda x: x[-1, -1, -1]),
]:
    op(f"slice {_label}", _fn, ((3, 4, 5),))
op("slice-sum-overlap", lambda x: x[1:] * x[:-1], ((6,),))

# integer-array gather; backward is a scatter-add that accumulates repeats
IDX = np.array([0, 2, 2, 4])
IDX2 = np.array([[0, 1], [1, 5], [0, 0]])
op("gather x[idx]", lambda x: x[IDX], ((5, 3),))
op("gather x[list]", lambda x: x[[4, 4, 1]], ((5, 3),))
op("gather x[:, idx]", lambda x: x[:, [2, 0, 2]], ((5, 3),))
op("gather E[idx2d]", lambda e: e[IDX2], ((6, 3),))
op("gather negative", lambda x: x[np.array([-1, 0, -1])], ((5, 3),))
op("gather 1d", lambda x: x[IDX], ((5,),))
op("gather x[idx, :, 0]", lambda x: x[IDX % 3, :, 0], ((3, 4, 5),))
op("gather x[0, :, idx]", lambda x: x[0, :, IDX], ((3, 4, 5),))
op("gather x[:, idx, 1:3]", lambda x: x[:, IDX % 4, 1:3], ((3, 4, 5),))
op("gather x[1:, idx]", lambda x: x[1:, IDX2 % 4], ((3, 4, 5),))
op("gather x[..., idx]", lambda x: x[..., IDX], ((3, 4, 5),))
op("gather idx input", lambda x, i: x[i], ((5, 3), IDX), ((6, 3), IDX2))
op("gather idx input col", lambda x, i: x[:, i], ((2, 5), IDX))
op("np.take", lambda x: np.take(x, IDX, axis=0), ((5, 3),))
op("np.take axis1", lambda x: np.take(x, [1, 1, 2], axis=1), ((5, 3),))
op("np.take axis-1", lambda x: np.take(x, IDX2, axis=-1), ((2, 6),))
op("np.take flat", lambda x: np.take(x, [0, 7, 7, 14]), ((5, 3),))
op("take method", lambda x: x.take(IDX, axis=0), ((5, 3),))
op("np.take idx input", lambda x, i: np.take(x, i, axis=1), ((2, 5), IDX))

# linear algebra
for _sa, _sb in [((3,), (3,)), ((3,), (3, 4)), ((3, 4), (4,)), ((2, 3), (3, 4)), ((5, 2, 3), (5, 3, 4)),
                 ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)), ((2, 1, 2, 3), (5, 3, 4)), ((3,), (5, 3, 4)),
                 ((5, 2, 3), (3,))]:
    op("matmul @", lambda a, b: a @ b, (_sa, _sb))
op("np.matmul", lambda a, b: np.matmul(a, b), ((2, 3), (3, 4)), ((4, 2, 3), (1, 3, 2)))
op("np.dot", lambda a, b: np.dot(a, b), ((3,), (3,)), ((2, 3), (3, 4)), ((2, 3), (3,)), ((3,), (3, 4)),
   ((), (3,)), ((2, 3), ()))
op("dot-method", lambda a, b: a.dot(b), ((2, 3), (3,)))
op("np.outer", lambda a, b: np.outer(a, b), ((3,), (4,)), ((2, 3), (4,)))
op("matmul-rmatmul-const", lambda a: np.ones((2, 3)) @ a @ np.arange(4.0), ((3, 4),))
op("matmul-self", lambda a: a @ a.T, ((3, 4),))

# stable composites
op("jg.logsumexp", lambda x: jg.logsumexp(x), ((5,),), ((2, 3),))
op("jg.logsumexp-axis", lambda x: jg.logsumexp(x, axis=-1), ((2, 3),))
op("jg.logsumexp-kd", lambda x: jg.logsumexp(x, axis=0, keepdims=True), ((2, 3),))
op("jg.softmax", lambda x: jg.softmax(x), ((5,),), ((2, 3),))
op("jg.softmax-axis0", lambda x: jg.softmax(x, axis=0), ((2, 3),))
op("jg.log_softmax", lambda x: jg.log_softmax(x), ((5,),), ((2, 3),))
op("jg.log_softmax-axis0", lambda x: jg.log_softmax(x, axis=0), ((2, 3),))
op("jg.sigmoid", lambda x: jg.sigmoid(x), *UNARY_SHAPES)

# a few composites mixing several ops and fan-out
op("mlp", lambda w, b, x: np.tanh(x @ w + b), ((4, 3), (3,), (5, 4)))
op("seed-loss", lambda w, x, b, y: (w * x + b - y) ** 2, ((), (), (), ()), argnums=(0, 2))
op("fanout", lambda x: np.sin(x) * x + np.exp(-x) * np.sin(x), ((3,),))
op("only-nondiff-branch", lambda x, y: x * np.exp(y), ((3,), (3,)), argnums=(0,))

# structured control flow: traced, each construct is one node with subgraphs; eager, Python control flow
op("jg.cond", lambda x: jg.cond(np.sum(x) > 0, lambda v: np.sin(v) * 2.0, lambda v: v ** 3, x),
   ((3,),), ((2, 2),))
op("jg.scan", lambda c, xs: jg.scan(lambda c, x: (np.tanh(c * x + 0.5), c * x), c, xs)[1], ((3,), (4, 3)))
op("jg.fori_loop", lambda x: jg.fori_loop(0, 3, lambda i, v: np.sin(v) * 1.5 + v, x), ((4,),))

# functions NumPy does not differentiate, or whose derivative is zero wherever it exists: values only
NonDiff = namedtuple("NonDiff", "name fn specs domain")
NONDIFF = [
    NonDiff("jg.while_loop", lambda x: jg.while_loop(lambda v: np.sum(v) < 10.0, lambda v: v * 2.0 + 1.0, x),
            ((3,),), "positive"),
]


def program_ops(graph):
    """The ops of a graph and of the subgraphs its control nodes hold."""
    ops = set()
    for n in graph.nodes:
        ops.add(n.op)
        for _, v in n.params:
            for g in (v if isinstance(v, tuple) else (v,)):
                if isinstance(g, jg.Graph):
                    ops |= program_ops(g)
    return ops


def _id(entry):
    specs = ",".join(str(s) if isinstance(s, tuple) else "lit" for s in entry.specs)
    return f"{entry.name}-{specs}"


# ---- the checks ----------------------------------------------------------------------------
def run_both(f, args, argnums):
    """(value, grads) eagerly and from the interpreted joint graph."""
    v_e, g_e = jg.value_and_grad(f, argnums)(*args)
    graph = jg.make_graph(f, argnums, grad=True)(*args)
    assert graph.verify() is graph
    v_t, g_t = jg.eval_graph(graph, *args)
    assert isinstance(g_e, tuple) and isinstance(g_t, tuple)
    assert len(g_e) == len(g_t) == len(argnums)
    return v_e, g_e, v_t, g_t


def fd_check(f, args, argnums, grads, rtol, eps=1e-5, trials=2, seed=0):
    """Compare <grad, v> with a float64 central difference along random directions v."""
    args64 = [np.asarray(a, np.float64) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a
              for a in args]
    rng = np.random.default_rng(seed)
    for _ in range(trials):
        vs = [rng.standard_normal(np.shape(args64[i])) for i in argnums]
        plus, minus = list(args64), list(args64)
        for i, v in zip(argnums, vs):
            plus[i] = args64[i] + eps * v
            minus[i] = args64[i] - eps * v
        fd = (float(f(*plus)) - float(f(*minus))) / (2 * eps)
        terms = [np.asarray(g, np.float64) * v for g, v in zip(grads, vs)]
        gv = float(sum(np.sum(t) for t in terms))
        scale = max(abs(fd), float(sum(np.sum(np.abs(t)) for t in terms)), 1.0)
        assert abs(fd - gv) <= rtol * scale, f"<grad, v> = {gv!r} but finite difference gives {fd!r}"


def assert_tree_close(a, b, rtol, atol=0.0):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert np.shape(x) == np.shape(y)
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=rtol, atol=atol)


@pytest.mark.parametrize("entry", TABLE, ids=_id)
def test_op_float64(entry):
    args = make_args(entry, np.float64)
    argnums = diff_argnums(entry)
    expected = entry.fn(*args)
    v_e, g_e, v_t, g_t = run_both(entry.fn, args, argnums)
    for v in (v_e, v_t):
        assert np.shape(v) == () and np.asarray(v).dtype == np.float64
        np.testing.assert_allclose(v, expected, rtol=1e-12, atol=1e-13)
    for g, i in zip(g_e, argnums):
        assert np.shape(g) == np.shape(args[i]) and np.asarray(g).dtype == np.float64
        assert np.all(np.isfinite(g))
    scale = max(1.0, *(float(np.max(np.abs(g), initial=0.0)) for g in g_e))
    assert_tree_close(g_e, g_t, rtol=1e-12, atol=1e-12 * scale)
    fd_check(entry.fn, args, argnums, g_e, rtol=1e-6)


# entries whose plain-NumPy result is float64 for float32 inputs: a float64 NumPy scalar exponent,
# np.float_power, float64 constant arrays
PROMOTES_TO_F64 = {"pow-np-float", "np.float_power", "concatenate-with-const", "matmul-rmatmul-const"}


@pytest.mark.parametrize("entry", TABLE, ids=_id)
def test_op_float32(entry):
    args = make_args(entry, np.float32)
    argnums = diff_argnums(entry)
    expected = entry.fn(*args)
    # float32 unless the entry itself mixes in float64 values (NumPy promotes those)
    assert np.asarray(expected).dtype == (np.float64 if entry.name in PROMOTES_TO_F64 else np.float32)
    v_e, g_e, v_t, g_t = run_both(entry.fn, args, argnums)
    for v in (v_e, v_t):
        assert np.asarray(v).dtype == np.asarray(expected).dtype
        np.testing.assert_allclose(v, expected, rtol=1e-5, atol=1e-5)
    for grads in (g_e, g_t):
        for g, i in zip(grads, argnums):
            assert np.asarray(g).dtype == np.float32, f"gradient of argument {i} is {np.asarray(g).dtype}"
            assert np.shape(g) == np.shape(args[i])
    scale = max(1.0, *(float(np.max(np.abs(g), initial=0.0)) for g in g_e))
    assert_tree_close(g_e, g_t, rtol=1e-5, atol=1e-5 * scale)
    fd_check(entry.fn, args, argnums, g_e, rtol=2e-3)


# ---- comparisons: values only -----------------------------------------------------------------
COMPARISONS = [
    ("<", lambda x, y: x < y), ("<=", lambda x, y: x <= y), (">", lambda x, y: x > y),
    (">=", lambda x, y: x >= y), ("==", lambda x, y: x == y), ("!=", lambda x, y: x != y),
    ("np.less", lambda x, y: np.less(x, y)), ("np.greater_equal", lambda x, y: np.greater_equal(x, y)),
    ("scalar", lambda x, y: x > 0.5), ("rscalar", lambda x, y: 0.5 < y),
    ("and", lambda x, y: (x > 0) & (y > 0)), ("or", lambda x, y: np.logical_or(x > 0, y < 0)),
    ("not", lambda x, y: np.logical_not(x > y)), ("invert", lambda x, y: ~(x > y)),
]


@pytest.mark.parametrize("name,fn", COMPARISONS, ids=[c[0] for c in COMPARISONS])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((), (3,))])
def test_comparison_values(name, fn, shapes):
    rng = np.random.default_rng(1)
    x = np.round(rng.standard_normal(shapes[0]), 1)  # rounded, so == and != see some ties
    y = np.round(rng.standard_normal(shapes[1]), 1)
    if np.shape(x) == np.shape(y):
        y = np.where(rng.random(np.shape(y)) < 0.3, x, y)
    expected = fn(x, y)
    graph = jg.make_graph(fn)(x, y).verify()
    assert graph.outputs[0].dtype == np.bool_
    got = jg.eval_graph(graph, x, y)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, expected)
    # eagerly (inside value_and_grad) the comparison is concrete and matches NumPy
    seen = {}

    def loss(x):
        seen["cmp"] = fn(x, y)
        return np.sum(x)

    jg.value_and_grad(loss)(x)
    np.testing.assert_array_equal(np.asarray(seen["cmp"].value if hasattr(seen["cmp"], "value")
                                             else seen["cmp"]), expected)


def test_comparison_has_no_gradient_path():
    """A loss that only depends on x through a comparison has zero gradient, eager and traced."""
    def f(x):
        return np.sum(np.where(x > 0, 1.0, -1.0))

    x = np.array([-1.0, 2.0, 3.0])
    v, g = jg.value_and_grad(f)(x)
    assert v == 1.0 and np.array_equal(g, np.zeros(3))
    graph = jg.make_graph(f, grad=True)(x).verify()
    v, g = jg.eval_graph(graph, x)
    assert v == 1.0 and np.array_equal(g, np.zeros(3))


# ---- targeted checks ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["eager", "traced"])
def test_gather_backward_accumulates_repeats(mode):
    E = np.arange(12.0).reshape(6, 2)
    idx = np.array([[0, 1], [1, 5], [0, 0]])

    def f(E):
        return np.sum(E[idx])

    if mode == "eager":
        _, g = jg.value_and_grad(f)(E)
    else:
        _, g = jg.eval_graph(jg.make_graph(f, grad=True)(E).verify(), E)
    counts = np.bincount(idx.ravel(), minlength=6).astype(float)
    np.testing.assert_array_equal(g, np.repeat(counts[:, None], 2, axis=1))


@pytest.mark.parametrize("mode", ["eager", "traced"])
def test_max_gradient_splits_ties(mode):
    def f(x):
        return np.max(x) + np.sum(np.maximum(x, 1.0))

    x = np.array([3.0, 1.0, 3.0, 0.0])
    if mode == "eager":
        v, g = jg.value_and_grad(f)(x)
    else:
        v, g = jg.eval_graph(jg.make_graph(f, grad=True)(x).verify(), x)
    assert v == 3.0 + 3 + 1 + 3 + 1
    np.testing.assert_array_equal(g, [1.5, 0.5, 1.5, 0.0])


@pytest.mark.parametrize("mode", ["eager", "traced"])
def test_where_gradient_is_masked(mode):
    def f(x, y):
        return np.sum(np.where(x > y, x * 3.0, y * 5.0))

    x, y = np.array([1.0, -1.0, 2.0]), np.array([0.0, 0.0, 3.0])
    if mode == "eager":
        _, (gx, gy) = jg.value_and_grad(f, (0, 1))(x, y)
    else:
        _, (gx, gy) = jg.eval_graph(jg.make_graph(f, (0, 1), grad=True)(x, y).verify(), x, y)
    np.testing.assert_array_equal(gx, [3.0, 0.0, 0.0])
    np.testing.assert_array_equal(gy, [0.0, 5.0, 5.0])


def _logsumexp_ref(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    r = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis=axis)


def test_stable_composites_match_formulas():
    x = np.random.default_rng(3).standard_normal((3, 4))
    np.testing.assert_allclose(jg.logsumexp(x), np.log(np.sum(np.exp(x))), rtol=1e-13)
    np.testing.assert_allclose(jg.logsumexp(x, axis=1), np.log(np.sum(np.exp(x), axis=1)), rtol=1e-13)
    np.testing.assert_allclose(jg.logsumexp(x, axis=0, keepdims=True),
                               np.log(np.sum(np.exp(x), axis=0, keepdims=True)), rtol=1e-13)
    sm = np.exp(x) / np.sum(np.exp(x), axis=-1, keepdims=True)
    np.testing.assert_allclose(jg.softmax(x), sm, rtol=1e-13)
    np.testing.assert_allclose(jg.softmax(x, axis=0), np.exp(x) / np.sum(np.exp(x), axis=0), rtol=1e-13)
    np.testing.assert_allclose(jg.log_softmax(x), np.log(sm), rtol=1e-12)
    np.testing.assert_allclose(jg.sigmoid(x), 1.0 / (1.0 + np.exp(-x)), rtol=1e-13)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mode", ["eager", "traced"])
def test_stable_composites_do_not_overflow_float32(mode, dtype):
    x = np.array([[1000.0, 0.0, -1000.0], [1000.0, 1000.0, 999.0]], dtype)

    def f(x):
        return np.sum(jg.logsumexp(x, axis=1)) + np.sum(jg.log_softmax(x) * 0.5) + np.sum(jg.sigmoid(x))

    with np.errstate(over="raise", invalid="raise", divide="raise"):
        if mode == "eager":
            v, g = jg.value_and_grad(f)(x)
        else:
            v, g = jg.eval_graph(jg.make_graph(f, grad=True)(x).verify(), x)
    assert np.asarray(v).dtype == dtype and g.dtype == dtype
    assert np.isfinite(v) and np.all(np.isfinite(g))
    ref = f(x.astype(np.float64))
    np.testing.assert_allclose(v, ref, rtol=1e-6)


@pytest.mark.parametrize("mode", ["numpy", "eager", "traced"])
def test_stable_composites_do_not_overflow(mode):
    x = np.array([[1000.0, 0.0, -1000.0], [1000.0, 1000.0, 999.0]])

    def f(x):
        return (np.sum(jg.logsumexp(x, axis=1)) + np.sum(jg.softmax(x) * np.arange(3.0))
                + np.sum(jg.log_softmax(x, axis=0)) + np.sum(jg.sigmoid(x)))

    with np.errstate(over="raise", invalid="raise", divide="raise"):
        if mode == "numpy":
            v, g = f(x), None
        elif mode == "eager":
            v, g = jg.value_and_grad(f)(x)
        else:
            v, g = jg.eval_graph(jg.make_graph(f, grad=True)(x).verify(), x)
    lse = np.array([1000.0, 1000.0 + np.log(2.0 + np.exp(-1.0))])
    assert np.isfinite(v)
    np.testing.assert_allclose(jg.logsumexp(x, axis=1), lse, rtol=1e-15)
    np.testing.assert_allclose(jg.sigmoid(np.array([1000.0, -1000.0, 0.0])), [1.0, 0.0, 0.5])
    np.testing.assert_allclose(jg.softmax(np.array([1000.0, 1000.0])), [0.5, 0.5])
    np.testing.assert_allclose(jg.log_softmax(np.array([1000.0, 0.0])), [0.0, -1000.0])
    if g is not None:
        assert np.all(np.isfinite(g))
        v2, g2 = jg.value_and_grad(f)(x - 1000.0 + 1000.0)
        np.testing.assert_allclose(v, v2)
        # the logsumexp gradient is the softmax: row sums of d lse / dx are 1
        _, g_lse = jg.value_and_grad(lambda x: np.sum(jg.logsumexp(x, axis=1)))(x)
        np.testing.assert_allclose(np.sum(g_lse, axis=1), [1.0, 1.0], rtol=1e-14)
        np.testing.assert_allclose(g_lse[1], np.exp(x[1] - lse[1]), rtol=1e-12)


@pytest.mark.parametrize("entry", NONDIFF, ids=[e.name for e in NONDIFF])
def test_nondiff_values(entry):
    """Values of the entries without a gradient: plain NumPy, the interpreted graph, eagerly."""
    args = make_args(entry, np.float64)
    expected = entry.fn(*args)
    graph = jg.make_graph(entry.fn)(*args).verify()
    np.testing.assert_array_equal(jg.eval_graph(graph, *args), expected)
    seen = {}

    def loss(x, *rest):
        seen["value"] = entry.fn(x, *rest)
        return np.sum(x)

    if np.asarray(args[0]).dtype.kind == "f":
        jg.value_and_grad(loss)(*args)
        v = seen["value"]
        np.testing.assert_array_equal(getattr(v, "value", v), expected)


def test_table_covers_the_spec():
    names = {e.name for e in TABLE}
    for required in ["add", "sub", "mul", "div", "pow2", "pow-tensor", "neg", "abs", "sign", "square",
                     "sqrt", "exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "sinh", "cosh",
                     "arctan", "maximum", "minimum", "clip", "where", "reshape", ".T", "expand_dims",
                     "squeeze", "broadcast_to", "concatenate-0", "stack-0", "gather E[idx2d]", "np.take",
                     "matmul @", "np.dot", "np.outer", "jg.logsumexp", "jg.softmax", "jg.log_softmax",
                     "jg.sigmoid"]:
        assert required in names
    assert len(TABLE) > 250


# ---- second derivatives: the backward pass is itself differentiable ---------------------------------
_W = np.random.default_rng(5).standard_normal((3, 4))
SECOND_ORDER = {
    "tanh-matmul": lambda x: np.sum(np.tanh(x @ _W) ** 2),
    "max-reduce": lambda x: np.sum(np.max(x * x, axis=1) ** 2),
    "maximum": lambda x: np.sum(np.maximum(x, 0.1) ** 3),
    "where": lambda x: np.sum(np.where(x > 0, x ** 3, np.sin(x))),
    "gather": lambda x: np.sum(x[[0, 0, 1]] ** 3),
    "slice-broadcast": lambda x: np.sum((x[::-1, 1:] + x[0, 1:]) ** 3),
    "logsumexp": lambda x: jg.logsumexp(x * x),
    "softmax": lambda x: np.sum(jg.softmax(x) ** 2),
    "var-prod": lambda x: np.var(x) ** 2 + np.prod(x, axis=0)[0] ** 2,
    "pow-tensor": lambda x: np.sum(np.abs(x) ** x),
    "concat-div-sqrt": lambda x: np.sum(np.concatenate([x, 1.0 / (1.0 + x * x)], axis=1) ** 2)
    + np.sum(np.sqrt(x * x + 1)),
}


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
def test_hessian_vector_products(name):
    """grad of <grad f, v>, eagerly (eager inside eager) and traced (eager inside a trace)."""
    f = SECOND_ORDER[name]
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 3)) + 0.1
    v = rng.standard_normal((3, 3))

    def gv(x):
        return np.sum(jg.grad(f)(x) * v)

    h_e = jg.grad(gv)(x)
    _, h_t = jg.eval_graph(jg.make_graph(gv, grad=True)(x).verify(), x)
    eps = 1e-5
    fd = (jg.grad(f)(x + eps * v) - jg.grad(f)(x - eps * v)) / (2 * eps)
    scale = max(1.0, float(np.max(np.abs(fd))))
    np.testing.assert_allclose(h_e, fd, rtol=1e-6, atol=1e-6 * scale)
    np.testing.assert_allclose(h_t, h_e, rtol=1e-10, atol=1e-12 * scale)
