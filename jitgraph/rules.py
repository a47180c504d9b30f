"""Reverse-mode derivative rules: one short rule per primitive and input.

`VJP[op]` is a tuple with one entry per input: a function
`rule(g, out, *inputs, **params)` returning the adjoint contribution for that
input, or `None` when the input has no derivative (indices, conditions,
comparison operands). `g` is the incoming adjoint (shape of `out`), `out` the
primitive's output and `inputs` its operands.

Rules are written with NumPy operations and the primitive-level helpers below.
The same rule therefore computes NumPy values in eager mode and builds backward
nodes when tracing (the backward pass is an ordinary graph, so it can be
differentiated again). Because primitives take operands of equal shape, the
only rule that sums over broadcast axes is `broadcast`'s own.
"""
import numpy as np

from . import numpy_api as jnp
from .core import bind


def _expand(g, x_shape, axes):
    """Undo a reduction over `axes`: reshape with keepdims, then broadcast to x_shape."""
    if tuple(axes) == tuple(range(len(axes))):  # leading axes: broadcasting adds them back
        return jnp.broadcast_to(g, x_shape)
    keep = tuple(1 if i in axes else d for i, d in enumerate(x_shape))
    return jnp.broadcast_to(jnp.reshape(g, keep), x_shape)


def _unbroadcast(g, x_shape):
    """Sum g over the axes that `broadcast` added or stretched, back to x_shape."""
    lead = len(g.shape) - len(x_shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(x_shape) if d == 1 and g.shape[lead + i] != 1)
    return jnp.reshape(jnp.sum(g, axis=axes), x_shape) if axes else jnp.reshape(g, x_shape)


def _max_tie(a, b):
    """Share of the adjoint of max(a, b) that goes to a: 1, 0, or 1/2 at ties."""
    return jnp.cast(jnp.where_(a > b, 1.0, jnp.where_(a == b, 0.5, 0.0)), a.dtype)


def _reduce_select(g, out, x, axes):
    """Adjoint of max/min reductions: split evenly between the positions that attain it."""
    hit = jnp.cast(jnp.equal(x, _expand(out, x.shape, axes)), x.dtype)
    return _expand(g, x.shape, axes) * hit / _expand(jnp.sum(hit, axis=axes), x.shape, axes)


def _concat_part(i):
    def rule(g, out, *xs, axis):
        start = sum(x.shape[axis] for x in xs[:i])
        starts, stops, steps = [0] * len(g.shape), list(g.shape), [1] * len(g.shape)
        starts[axis], stops[axis] = start, start + xs[i].shape[axis]
        return bind("slice", g, starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))
    return rule


class _ConcatRules:
    """Concatenate has any number of inputs: rule i slices out input i's part."""

    def __getitem__(self, i):
        return _concat_part(i)


def _swap(x):
    return jnp.swapaxes(x, -1, -2)


VJP = {
    "neg": (lambda g, out, x: -g,),
    "abs": (lambda g, out, x: g * jnp.sign(x),),
    "sign": (None,),
    "stop_gradient": (None,),
    "sqrt": (lambda g, out, x: g / (out * 2.0),),
    "exp": (lambda g, out, x: g * out,),
    "expm1": (lambda g, out, x: g * (out + 1.0),),
    "log": (lambda g, out, x: g / x,),
    "log1p": (lambda g, out, x: g / (x + 1.0),),
    "sin": (lambda g, out, x: g * jnp.cos(x),),
    "cos": (lambda g, out, x: -(g * jnp.sin(x)),),
    "tan": (lambda g, out, x: g * (out * out + 1.0),),
    "tanh": (lambda g, out, x: g * (1.0 - out * out),),
    "sinh": (lambda g, out, x: g * jnp.cosh(x),),
    "cosh": (lambda g, out, x: g * jnp.sinh(x),),
    "arctan": (lambda g, out, x: g / (x * x + 1.0),),
    "integer_pow": (lambda g, out, x, p: g * (p * jnp.power(x, p - 1) if p != 2 else x * 2.0),),
    "cast": (lambda g, out, x, dtype: jnp.cast(g, x.dtype) if x.dtype.kind == "f" else None,),
    "add": (lambda g, out, a, b: g, lambda g, out, a, b: g),
    "sub": (lambda g, out, a, b: g, lambda g, out, a, b: -g),
    "mul": (lambda g, out, a, b: g * b, lambda g, out, a, b: g * a),
    "div": (lambda g, out, a, b: g / b, lambda g, out, a, b: -(g * out) / b),
    "pow": (lambda g, out, a, b: g * b * jnp.power(a, b - 1.0),
            # d/db a**b = a**b log a, taken as 0 where a <= 0 (there it is undefined or 0**b)
            lambda g, out, a, b: g * out * jnp.log(jnp.where_(a > 0, a, 1.0))),
    "max": (lambda g, out, a, b: g * _max_tie(a, b), lambda g, out, a, b: g * _max_tie(b, a)),
    "min": (lambda g, out, a, b: g * _max_tie(b, a), lambda g, out, a, b: g * _max_tie(a, b)),
    "where": (None, lambda g, out, c, a, b: jnp.where_(c, g, 0.0),
              lambda g, out, c, a, b: jnp.where_(c, 0.0, g)),
    "reduce_sum": (lambda g, out, x, axes: _expand(g, x.shape, axes),),
    "reduce_max": (lambda g, out, x, axes: _reduce_select(g, out, x, axes),),
    "reduce_min": (lambda g, out, x, axes: _reduce_select(g, out, x, axes),),
    # prod / x_i is the product of the others; like autograd, this rule is exact only for
    # nonzero x (a zero entry gives inf/nan there).
    "reduce_prod": (lambda g, out, x, axes: _expand(g * out, x.shape, axes) / x,),
    "reshape": (lambda g, out, x, shape: jnp.reshape(g, x.shape),),
    "transpose": (lambda g, out, x, perm: jnp.transpose(g, tuple(np.argsort(perm))),),
    "broadcast": (lambda g, out, x, shape: _unbroadcast(g, x.shape),),
    "slice": (lambda g, out, x, starts, stops, steps: bind(
        "pad_slice", g, shape=x.shape, starts=starts, stops=stops, steps=steps),),
    "pad_slice": (lambda g, out, x, shape, starts, stops, steps: bind(
        "slice", g, starts=starts, stops=stops, steps=steps),),
    "concatenate": _ConcatRules(),
    "gather": (lambda g, out, x, idx, axis: bind(
        "scatter_add", g, idx, axis=axis, size=x.shape[axis]), None),
    "scatter_add": (lambda g, out, u, idx, axis, size: bind("gather", g, idx, axis=axis), None),
    "matmul": (lambda g, out, a, b: jnp.matmul(g, _swap(b)),
               lambda g, out, a, b: jnp.matmul(_swap(a), g)),
}

NO_GRAD_OPS = frozenset({"lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not", "sign",
                         "stop_gradient"})
for _op in NO_GRAD_OPS:
    VJP.setdefault(_op, (None, None))
