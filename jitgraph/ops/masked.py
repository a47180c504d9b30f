"""x[mask] for a boolean mask known only when the function runs, as far as it can be compiled.

NumPy's x[mask] has as many rows as the mask has True entries: a shape that depends on the
data, which a traced program must know. Yet most programs only compute with the selected
elements and reduce them: `np.mean((y[m] - pred[m]) ** 2)`, `np.sum(loss[valid])`,
`np.max(np.abs(r[r > 0]))`. So x[mask] on traced values is a `MaskedSelection`: x (all of
it) and the mask, standing for the selected rows. Elementwise operations with other
selections by the same mask, scalars, or arrays broadcasting against one row give selections
again; reductions over the selected rows (sum, mean, max, min, prod, any, all,
count_nonzero, var, std, a vector norm) are reductions of `np.where(mask, x, identity)`, so
the result, and its gradient, are those NumPy computes. Anything needing the selected rows
as an array (their shape, indexing them, a matrix product, returning them) is refused,
saying what is supported. A selection written back under its own mask (`x[x > t] *= 2`,
`x[m] = x[m] ** 2`) is `np.where(mask, f(x), x)` (ops/index.py, `_set_masked`).

Differences from NumPy: the max or min of an empty selection is -inf or +inf (the maximum's
and minimum's identities), where NumPy raises; the mean of one is NaN, as NumPy's (without
its warning).
"""

import numpy as np

from ..core import Tensor
from ..errors import NotSupportedError, where
from ..numpy_api import as_operand, broadcast_to, cast, keepdims_shape, norm_axes, reshape, shape_of
from . import elementwise as ew
from . import reduce as rd

_HELP = ("x[mask] with a mask known only when the function runs has a data-dependent number of "
         "rows; jitgraph supports it in elementwise operations (with other selections by the same "
         "mask, scalars, or arrays broadcasting against one row) followed by reductions over the "
         "selected rows (np.sum, np.mean, np.max, np.min, np.prod, np.any, np.all, np.count_nonzero, "
         "np.var, np.std, np.linalg.norm); otherwise write np.where(mask, x, 0) with reductions")


def _refuse(what):
    raise NotSupportedError(f"{what} of a selection by a traced boolean mask is not supported: {_HELP}{where()}")


class MaskedSelection:
    """The rows x[mask] of a traced x (or array) selected by a traced boolean mask over x's
    leading `len(mask.shape)` axes: `values` is x, `mask` the mask, `row` the shape of one row."""

    __jitgraph_defer__ = True       # jitgraph's Tensor protocols step aside for this class
    __array_priority__ = 2000

    def __init__(self, values, mask):
        self.values, self.mask = values, mask
        m = len(shape_of(mask))
        self.lead = m
        self.row = tuple(shape_of(values))[m:]

    # -- what is unknown --------------------------------------------------------------------
    @property
    def shape(self):
        _refuse("the shape")

    @property
    def size(self):
        _refuse("the size")

    def __len__(self):
        _refuse("len()")

    def __array__(self, *args, **kwargs):
        _refuse("an array")

    def __getitem__(self, key):
        _refuse("indexing")

    def __bool__(self):
        _refuse("bool()")

    def __iter__(self):
        _refuse("iterating")

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def ndim(self):
        return 1 + len(self.row)

    # -- elementwise ------------------------------------------------------------------------
    def _same(self, other):
        return other.mask is self.mask or (isinstance(other.mask, Tensor) and isinstance(self.mask, Tensor)
                                           and other.mask.node is self.mask.node)

    def _operand(self, x, what):
        if isinstance(x, MaskedSelection):
            if not self._same(x) or x.row != self.row:
                _refuse(f"{what} between selections by different masks")
            return x.values
        if isinstance(x, (bool, int, float, complex, np.generic)):
            return x
        x = as_operand(x)
        if len(shape_of(x)) > len(self.row):
            _refuse(f"{what} with an array of shape {tuple(shape_of(x))} (it would broadcast against the "
                    f"selected rows, whose number is unknown)")
        return x

    def _wrap(self, r):
        if isinstance(r, tuple):
            return tuple(MaskedSelection(x, self.mask) for x in r)
        return MaskedSelection(r, self.mask)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs.get("out") is not None or "where" in kwargs:
            _refuse(f"np.{ufunc.__name__}.{method}" if method != "__call__" else f"np.{ufunc.__name__} with out= or where=")
        if ufunc.signature is not None:
            self._check_matmul(ufunc, inputs)
            return self._wrap(ufunc(self.values, inputs[1], **kwargs))
        args = [self._operand(x, f"np.{ufunc.__name__}") for x in inputs]
        return self._wrap(ufunc(*args, **kwargs))

    def _check_matmul(self, ufunc, inputs):
        """A product of each selected row with a matrix or vector (sel @ W: the rows are the
        stacked operand) is row by row; any other gufunc, or one contracting the rows, is not."""
        a, b = inputs if len(inputs) == 2 else (None, None)
        if ufunc is not np.matmul or a is not self or isinstance(b, MaskedSelection) or not self.row \
                or len(shape_of(as_operand(b))) > 2:
            _refuse(f"np.{ufunc.__name__} (other than selection @ matrix, row by row)")

    def __array_function__(self, func, types, args, kwargs):
        handler = _FUNCTIONS.get(func)
        if handler is None:
            _refuse(getattr(func, "__name__", str(func)))
        return handler(*args, **kwargs)

    def astype(self, dtype, *args, **kwargs):
        return MaskedSelection(cast(as_operand(self.values), np.dtype(dtype)), self.mask)

    def _full_mask(self, values):
        """The mask broadcast over the row axes of `values`."""
        m = self.lead
        shape = tuple(shape_of(values))
        return broadcast_to(reshape(self.mask, shape[:m] + (1,) * (len(shape) - m)), shape)

    def _axes(self, axis):
        """The axes of `values` a reduction over `axis` of the selection reduces, and whether the
        selected rows (axis 0) are among them."""
        axes = norm_axes(axis, 1 + len(self.row))
        m = self.lead
        rows = 0 in axes
        vaxes = (tuple(range(m)) if rows else ()) + tuple(a - 1 + m for a in axes if a > 0)
        return vaxes, rows

    def _reduce(self, reducer, identity, axis, keepdims, values=None):
        values = as_operand(self.values if values is None else values)
        vaxes, rows = self._axes(axis)
        if keepdims:
            _refuse("a reduction with keepdims=True")
        filled = ew.where_(self._full_mask(values), values, identity) if rows else values
        r = reducer(filled, axis=vaxes)
        return r if rows else MaskedSelection(r, self.mask)

    def _count(self, axis):
        """How many selected elements a reduction over `axis` (the selected rows among its axes)
        reduces, per result element."""
        vaxes, _ = self._axes(axis)
        ones = cast(self._full_mask(as_operand(self.values)), np.float64)
        return rd.sum(ones, axis=vaxes)

    def sum(self, axis=None, dtype=None, out=None, keepdims=False):
        _no_out(out)
        values = self.values if dtype is None else cast(as_operand(self.values), np.dtype(dtype))
        return self._reduce(rd.sum, 0, axis, keepdims, values)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False):
        _no_out(out)
        values = self.values if dtype is None else cast(as_operand(self.values), np.dtype(dtype))
        return self._reduce(rd.prod, 1, axis, keepdims, values)

    def max(self, axis=None, out=None, keepdims=False):
        _no_out(out)
        return self._reduce(rd.amax, _extreme(self.dtype, low=True), axis, keepdims)

    def min(self, axis=None, out=None, keepdims=False):
        _no_out(out)
        return self._reduce(rd.amin, _extreme(self.dtype, low=False), axis, keepdims)

    def any(self, axis=None, out=None, keepdims=False):
        _no_out(out)
        return self._reduce(rd.amax, False, axis, keepdims, ew.to_bool(as_operand(self.values)))

    def all(self, axis=None, out=None, keepdims=False):
        _no_out(out)
        return self._reduce(rd.amin, True, axis, keepdims, ew.to_bool(as_operand(self.values)))

    def mean(self, axis=None, dtype=None, out=None, keepdims=False):
        _no_out(out)
        values = as_operand(self.values)
        if values.dtype.kind not in "fc" or dtype is not None:
            values = cast(values, np.float64 if dtype is None else np.dtype(dtype))
        if not self._axes(axis)[1]:
            return self._reduce(rd.mean, 0, axis, keepdims, values)
        total = self._reduce(rd.sum, 0, axis, keepdims, values)
        return total / cast(self._count(axis), total.dtype)

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        _no_out(out)
        vaxes, rows = self._axes(axis)
        if not rows:
            return self._reduce(lambda v, axis: rd.var(v, axis=axis, ddof=ddof), 0, axis, keepdims)
        values = as_operand(self.values)
        if values.dtype.kind not in "fc":
            values = cast(values, np.float64)
        mask = self._full_mask(values)
        count = cast(self._count(axis), values.dtype)
        mu = rd.sum(ew.where_(mask, values, 0), axis=vaxes, keepdims=True) / reshape(
            count, keepdims_shape(tuple(shape_of(values)), vaxes))
        dev = ew.where_(mask, values - mu, 0)
        return rd.sum(dev * dev, axis=vaxes) / (count - ddof)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        return ew.sqrt(self.var(axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims))

    # -- operators --------------------------------------------------------------------------
    def __neg__(self):
        return np.negative(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return np.absolute(self)

    def __invert__(self):
        return np.invert(self)

    def __matmul__(self, other):
        return np.matmul(self, other)

    def __rmatmul__(self, other):
        return np.matmul(other, self)


def _no_out(out):
    if out is not None:
        _refuse("a reduction with out=")


def _extreme(dtype, low):
    if dtype.kind == "f":
        return -np.inf if low else np.inf
    if dtype == bool:
        return not low
    info = np.iinfo(dtype)
    return info.min if low else info.max


def _binary(ufunc, swap=False):
    def op(self, other):
        return ufunc(other, self) if swap else ufunc(self, other)
    return op


for _name, _ufunc in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("truediv", np.true_divide),
                      ("floordiv", np.floor_divide), ("mod", np.remainder), ("pow", np.power),
                      ("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor)]:
    setattr(MaskedSelection, f"__{_name}__", _binary(_ufunc))
    setattr(MaskedSelection, f"__r{_name}__", _binary(_ufunc, swap=True))
for _name, _ufunc in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal),
                      ("eq", np.equal), ("ne", np.not_equal)]:
    setattr(MaskedSelection, f"__{_name}__", _binary(_ufunc))
MaskedSelection.__hash__ = None


def _method(name):
    def fn(a, *args, **kwargs):
        if not isinstance(a, MaskedSelection):
            _refuse(name)
        return getattr(a, name)(*args, **kwargs)
    return fn


def _where(cond, x=None, y=None):
    if x is None or y is None:
        _refuse("np.where with one argument")
    sel = next(a for a in (cond, x, y) if isinstance(a, MaskedSelection))
    args = [sel._operand(a, "np.where") for a in (cond, x, y)]
    return MaskedSelection(ew.where_(*args), sel.mask)


def _clip(a, a_min=None, a_max=None, **kwargs):
    sel = next(x for x in (a, a_min, a_max) if isinstance(x, MaskedSelection))
    lo = None if a_min is None else sel._operand(a_min, "np.clip")
    hi = None if a_max is None else sel._operand(a_max, "np.clip")
    return MaskedSelection(ew.clip(sel._operand(a, "np.clip"), lo, hi), sel.mask)


def _count_nonzero(a, axis=None, *, keepdims=False):
    return (a != 0).astype(np.int64).sum(axis=axis, keepdims=keepdims)


def _norm(x, ord=None, axis=None, keepdims=False):
    if not isinstance(x, MaskedSelection) or x.row or ord not in (None, 2, 1, np.inf):
        _refuse("np.linalg.norm other than a vector norm (ord None, 1, 2 or inf)")
    if ord == 1:
        return np.abs(x).sum(keepdims=keepdims)
    if ord == np.inf:
        return np.abs(x).max(keepdims=keepdims)
    return ew.sqrt((x * x).sum(keepdims=keepdims))


def _average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    if weights is not None or returned:
        _refuse("np.average with weights or returned")
    return a.mean(axis=axis, keepdims=keepdims)


_FUNCTIONS = {np.sum: _method("sum"), np.prod: _method("prod"), np.max: _method("max"), np.amax: _method("max"),
              np.min: _method("min"), np.amin: _method("min"), np.any: _method("any"), np.all: _method("all"),
              np.mean: _method("mean"), np.var: _method("var"), np.std: _method("std"),
              np.where: _where, np.clip: _clip, np.count_nonzero: _count_nonzero, np.linalg.norm: _norm,
              np.average: _average}
