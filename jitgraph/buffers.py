"""Arrays a recorded function creates with NumPy (`out = np.zeros((n, k))`) and fills with
recorded values (`out[:, j] = f(x)`), or in which it writes recorded values at recorded
positions (`x[idx[t]] = 1`).

NumPy's own `np.zeros` returns a plain ndarray, which cannot hold a traced value. While
a function is recorded, the array creation functions called from the user's code
(`np.zeros`, `ones`, `empty`, `full`, their `_like` forms, `eye`, `identity`) return a
`Buffer` instead (see recording.py), and `value_and_grad` passes the arrays among the
arguments it does not differentiate as Buffers (views, no copies). A new array computed
from Buffers (`np.ones(n) * 0.1`, `np.concatenate` of them) is a Buffer too; a view of one
(`x[1]`, `x.T`) is a plain array. A Buffer is an ndarray that
behaves exactly as one until a recorded value is written into it. From then on it stands
for a recorded value, its `shadow` (the constant contents, updated by item assignment like
any traced array): NumPy functions, ufuncs, operators, indexing and methods on it all read
the shadow, and a function returning it returns the shadow.
"""
import numpy as np

from .core import Tensor, innermost
from .errors import where
from .ops.registry import METHODS


class Buffer(np.ndarray):
    """An ndarray made by the recorded function itself; see the module docstring."""

    def __array_finalize__(self, obj):
        self._shadow = None        # views and copies of a Buffer are plain arrays' equals

    # ---- becoming a recorded value ------------------------------------------------------------
    def _promote(self, *values):
        """The shadow, made from the current contents in the innermost trace of `values`."""
        shadow = self._shadow
        if shadow is None:
            top = innermost([v for v in tensors(values)])
            contents = np.array(self.view(np.ndarray), copy=True)
            shadow = top.lift(contents)
            shadow = shadow.rebind(shadow.node)      # a fresh, writable array
            self._shadow = shadow
        return shadow

    def __setitem__(self, key, value):
        if self._shadow is None and not tensors((key, value)):
            np.ndarray.__setitem__(self, key, value)
            return
        METHODS["setitem"](self._promote(key, value), key, _plain(value))

    # ---- reading: the shadow, once there is one --------------------------------------------------
    def __getattribute__(self, name):
        if name.startswith("_") or name in _OWN:
            return np.ndarray.__getattribute__(self, name)
        shadow = np.ndarray.__getattribute__(self, "_shadow")
        if shadow is not None:
            return getattr(shadow, name)
        return np.ndarray.__getattribute__(self, name)

    def __getitem__(self, key):
        if self._shadow is not None or tensors(key):
            return METHODS["getitem"](self._promote(key), key) if self._shadow is None \
                else self._shadow[key]
        return np.ndarray.__getitem__(self.view(np.ndarray), key)

    def __iter__(self):
        if self._shadow is not None:
            return iter(self._shadow)
        return np.ndarray.__iter__(self.view(np.ndarray))

    def __bool__(self):
        return bool(self._shadow) if self._shadow is not None else bool(self.view(np.ndarray))

    def __float__(self):
        return float(self._shadow if self._shadow is not None else self.view(np.ndarray))

    def __int__(self):
        return int(self._shadow if self._shadow is not None else self.view(np.ndarray))

    def __index__(self):
        return (self._shadow if self._shadow is not None else self.view(np.ndarray)).__index__()

    def __repr__(self):
        if self._shadow is not None:
            return repr(self._shadow)
        return repr(self.view(np.ndarray))

    __str__ = __repr__

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        target = inputs[0] if method == "at" and inputs else None
        if isinstance(target, Buffer) and (target._shadow is not None or tensors(inputs[1:])):
            # np.add.at(buf, idx, v) with a recorded v: an unbuffered update of the shadow
            METHODS["ufunc_at"](ufunc, target._promote(*inputs[1:]), *(_plain(x) for x in inputs[1:]))
            return None
        out = kwargs.pop("out", None)
        inputs = tuple(_plain(x) for x in inputs)
        outs = out if isinstance(out, tuple) else ((out,) if out is not None else ())
        writes = [o for o in outs if isinstance(o, Buffer) and (o._shadow is not None or tensors(inputs))]
        if not writes:
            if outs:
                kwargs["out"] = tuple(_plain(o) if not isinstance(o, Buffer) else o.view(np.ndarray)
                                      for o in outs)
            result = getattr(ufunc, method)(*inputs, **kwargs)
            if outs:
                return outs[0] if len(outs) == 1 and isinstance(outs[0], Buffer) else result
            return _fresh(result)
        if len(outs) != 1:
            raise NotImplementedError(f"np.{ufunc.__name__} with several out= arrays on traced values"
                                      f"{where()}")
        target = outs[0]
        shadow = target._promote(*inputs)
        result = getattr(ufunc, method)(*inputs, **kwargs)
        METHODS["assign"](shadow, result, f"np.{ufunc.__name__}(..., out=)")
        return target

    def dot(self, b, out=None):
        """`a.dot(b)`: NumPy's method converts a recorded `b` to an array (no protocol sees
        it), so a recorded operand (or shadow) goes to `np.dot`, which records it."""
        if self._shadow is None and not tensors(b):
            return self.view(np.ndarray).dot(_plain(b), out=_plain(out))
        if out is not None:
            raise NotImplementedError(f"a.dot(b, out=...) on traced values{where()}")
        return np.dot(_plain(self), _plain(b))

    def __array_function__(self, func, types, args, kwargs):
        return _fresh(func(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()}))


# attributes answered by the Buffer itself, never by its shadow
_OWN = frozenset({"view", "base", "flags", "ctypes", "data", "setflags", "dot"})


def tensors(values):
    """The Tensors among `values` (nested in tuples, lists, dicts, and shadows of Buffers)."""
    found = []
    stack = [values]
    while stack:
        v = stack.pop()
        if isinstance(v, Tensor):
            found.append(v)
        elif isinstance(v, Buffer):
            if v._shadow is not None:
                found.append(v._shadow)
        elif isinstance(v, (tuple, list)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, np.ndarray) and v.dtype == object:
            stack.extend(v.flat)
    return found


def _fresh(result):
    """A new array computed from Buffers (`x = np.ones(n) * 0.1`), as a Buffer: made by the
    recorded function too, it can receive recorded values. Views (`x[2:]`, `x.T`) stay plain
    arrays: a recorded value written into one would not reach the array it views."""
    if type(result) is np.ndarray and result.flags.owndata:
        return result.view(Buffer)
    if type(result) is tuple:
        return tuple(_fresh(r) for r in result)
    return result


def _plain(x):
    """x with every Buffer replaced by its shadow, or by a plain ndarray view of it."""
    if isinstance(x, Buffer):
        return x._shadow if x._shadow is not None else x.view(np.ndarray)
    if isinstance(x, tuple):
        return tuple(_plain(e) for e in x)
    if isinstance(x, list):
        return [_plain(e) for e in x]
    return x


def unwrap(x):
    """A Buffer as the value it stands for (its shadow, or a plain array); anything else as is."""
    return _plain(x) if isinstance(x, Buffer) else x
