"""Rows: item assignment, in-place operators and views (NumPy's shared-memory semantics).

Every row updates a fresh array (function arguments are read-only in a traced
function), through a basic or advanced index, a mask, a view (slice, reshape,
transpose) or an in-place NumPy function, and returns something the update
reaches, so both the written values and what they overwrote are differentiated.
"""
import numpy as np

import jitgraph as jg

from . import IDX, op

MASK = np.array([True, False, True, True, False])
ROWS = np.array([[0], [1], [2], [3]])


def _basic(x):
    y = x * 1.0
    y[1] = x[0] ** 2
    y[:, 1:3] = 0.5
    y[-1, ::-2] = x[0, :3]
    return y


def _reversed(x):
    y = x * 1.0
    y[::-1] = x * 2.0
    return y


def _whole(x):
    y = x * 1.0
    y[...] = x ** 2
    y[0, ...] = 1.0
    y[None, 1] = x[2]
    return y


def _rows(x):
    y = x * 1.0
    y[IDX % 4] = x[:4] * 3.0          # a repeated row: the last write stays
    return y


def _points(x):
    y = x * 1.0
    y[[0, 1, 1], [2, 0, 0]] = np.array([1.0, 2.0, 3.0]) * x[0, 0]
    return y


def _mixed(x):
    y = x * 1.0
    y[1:3, [0, 4]] = x[0, 0]
    y[[0, 3], 1:2] = x[1:2, 0:1] ** 2
    return y


def _traced_mask(x):
    y = x * 1.0
    y[x > 0.5] = 0.25
    y[x[:, 0] < 0] = x[0] * 2.0       # one row for every selected row
    return y


def _known_mask(x):
    y = x * 1.0
    y[:, MASK] = x[:, :3] * -1.0
    return y


def _slice_view(x):
    y = x * 1.0
    z = y[1:]
    z *= x[:3]
    return y


def _reshape_view(x):
    y = x * 1.0
    w = y.reshape(5, 4)
    w[0] = 7.0
    w[1:, 1:] *= x[0, :3]
    return y


def _transpose_view(x):
    y = x * 1.0
    y.T[0] = x[:, 1]
    np.swapaxes(y, 0, 1)[2, 1:] += 1.0
    return y


def _view_of_view(x):
    y = x * 1.0
    y[1:][::2] += x[0]
    y[:, 1:].reshape(-1)[::3] *= 2.0
    return y


def _sibling_views(x):
    y = x * 1.0
    a, b = y[:2], y[1:]
    a += x[:2] ** 2
    return b                         # b shares row 1 with a


def _ufunc_at(x):
    y = x * 1.0
    np.add.at(y, IDX % 4, x[:4])     # repeated rows accumulate
    np.subtract.at(y, (0, [1, 1]), x[0, 0])
    return y


def _extreme_at(x):
    y = x * 1.0
    np.maximum.at(y, IDX % 4, x[:4] * 2.0)     # repeated rows: the largest update wins
    np.minimum.at(y, (0, [1, 1, 3]), x[1, :3])
    return y


def _segment_max(x):
    s = np.zeros((6, 5), x.dtype)          # a segment max into a buffer the function makes
    np.maximum.at(s, IDX, x)
    return s


def _copyto(x):
    y = x * 1.0
    np.copyto(y, x ** 2, where=MASK)
    return y


def _out(x):
    y = x * 1.0
    np.multiply(y, x, out=y)
    np.exp(y, out=y)
    np.add(y[0], 1.0, out=y[1])
    return y


def _fill_diagonal(x):
    y = x[:4, :4] * 1.0
    np.fill_diagonal(y, x[0, 0])
    return y


def _put_along_axis(x):
    y = x * 1.0
    np.put_along_axis(y, ROWS, x[:, :1] * 2.0, axis=1)
    return y


def _python_loop(x):
    y = x * 1.0
    for i in range(1, 4):
        y[i] = y[i - 1] * x[i]
    return y


def _fori_loop(x):
    def body(i, y):
        y = y.copy()
        y[i] = y[i - 1] * 0.5 + x[i]
        return y
    return jg.fori_loop(1, 4, body, x * 1.0)


def _zeros_then_fill(x):
    y = np.zeros_like(x)
    y[:, 0] = x.sum(axis=1)
    y += x
    y[2].fill(3.0)
    return y


def _in_place_sort(x):
    y = x * 1.0
    y[1].sort()                      # sorts row 1 of y (a view)
    y[:, 2:].sort(axis=0)
    return y


def _zeros_filled(x):
    out = np.zeros((4, 3), x.dtype)  # a NumPy array the function fills with traced values
    out[:, 0] = x[:, 0] ** 2
    out[1:, 1] = np.sin(x[:3, 1])
    out[2] += x[2, :3]
    return out


def _empty_loop(x):
    out = np.empty(5, dtype=x.dtype)
    for i in range(5):
        out[i] = x[i % 4, i] * (i + 1)
    return out * out.sum()


def _ones_out(x):
    r = np.ones((4, 5), x.dtype)
    np.multiply(r, x, out=r)
    r += x
    return r.T @ r[:, :2]


def _eye_rows(x):
    e = np.eye(4, dtype=x.dtype)
    e[0] = x[0, :4]
    rows = [row * 2.0 for row in e]   # iterating reads the filled array
    return np.stack(rows) @ x[:, :4] + np.zeros_like(e)


def _zeros_add_at(x):
    s = np.zeros((6, 5), x.dtype)        # a NumPy array the function makes
    np.add.at(s, IDX, x)                  # repeated rows accumulate into it
    np.subtract.at(s, (5, [1, 1]), x[0, 0])
    return s


def _bincount(x):
    return np.bincount(IDX % 3, weights=x[:, 1] * x[:, 2], minlength=5) + np.bincount(IDX, weights=x[:, 0])[:5]


def _constant_buffer(x):
    c = np.zeros(5, x.dtype)
    c[1] = 2.0                         # only constants: stays a NumPy array
    return x * c


for _name, _fn in [("setitem basic", _basic), ("setitem reversed", _reversed), ("setitem whole", _whole),
                   ("setitem rows", _rows), ("setitem points", _points), ("setitem mixed", _mixed),
                   ("setitem traced mask", _traced_mask), ("setitem known mask", _known_mask),
                   ("view slice", _slice_view), ("view reshape", _reshape_view),
                   ("view transpose", _transpose_view), ("view of view", _view_of_view),
                   ("view siblings", _sibling_views), ("np.add.at", _ufunc_at), ("np.maximum.at", _extreme_at),
                   ("np.maximum.at into np.zeros", _segment_max), ("np.copyto", _copyto),
                   ("ufunc out=", _out), ("np.fill_diagonal", _fill_diagonal),
                   ("np.put_along_axis", _put_along_axis), ("setitem python loop", _python_loop),
                   ("setitem fori_loop", _fori_loop), ("setitem zeros_like", _zeros_then_fill),
                   ("sort in place", _in_place_sort), ("np.zeros filled", _zeros_filled),
                   ("np.empty filled in a loop", _empty_loop), ("np.ones out=", _ones_out),
                   ("np.eye rows", _eye_rows), ("np.zeros constant", _constant_buffer),
                   ("np.add.at into np.zeros", _zeros_add_at), ("np.bincount weights", _bincount)]:
    op(_name, _fn, ((4, 5),))
# integers known only when the function runs: minlength bins (run-time checks for the rest)
op("np.bincount traced ints", lambda w, i: np.bincount(i, weights=w, minlength=7) + np.bincount(i, minlength=7),
   ((6,), np.array([0, 2, 2, 5, 1, 6])))
