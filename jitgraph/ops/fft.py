"""np.fft on traced values, with the complex arithmetic around it.

jitgraph computes in real dtypes. A complex value in a traced program is a `ComplexPair`:
its real and imaginary parts, two real arrays (traced or constant), standing for one complex
array. np.fft's transforms of traced values return pairs; so do a Python complex number or a
complex NumPy array meeting a traced value (`1j * k * np.fft.rfft(u)`, `np.exp(1j * theta)`).
Pairs support the arithmetic of spectral methods and spectral losses: + - * / and integer
powers, abs, real, imag, conj, angle, exp, log, square; sums and means; indexing, reshapes,
transposes, rolls, flips, fftshift, concatenation, np.where; products with real or complex
matrices (@, dot, tensordot, einsum with two operands); and every transform (fft, ifft, rfft,
irfft, hfft, ihfft and their 2-d and n-d forms, with n/s, axes and norm). A traced program's
result must be real: return abs, .real or .imag of a pair.

A transform along an axis of length n is linear in the real and imaginary parts of its input,
so it is a product with constant matrices: the transform of NumPy's own (pocketfft, so its
conventions for n, norm and the ignored imaginary parts of irfft's first and last inputs) applied
to the identity, computed once per (transform, lengths, norm, dtype). Gradients are then the
adjoint products. The matrices are dense: O(n^2) work per transformed vector, fast through BLAS
for the lengths of spectral methods and losses (up to 4,096 per axis here; longer ones are
refused), where an FFT would be O(n log n). From length 384, a length n1 * n2 is transformed in
four steps (FOUR_STEP_MIN): O(n (n1 + n2)) work, still products, so every target runs them.
"""
import builtins
import functools

import numpy as np

from ..core import Tensor
from ..errors import NotSupportedError, where
from ..numpy_api import as_operand, cast, is_complex_constant, norm_axis, shape_of
from . import elementwise as ew
from . import reduce as rd
from .contract import tensordot
from .index import getitem
from .products import dot, matmul
from .registry import METHODS, implements
from .shape import concatenate, moveaxis, reshape, transpose_

MAX_LENGTH = 4096


def _refuse(what):
    raise NotSupportedError(f"{what} of a complex value is not supported on traced values (complex values "
                            f"are pairs of real arrays here; see jitgraph/ops/fft.py for what is){where()}")


def _float_dtype(*xs):
    dts = [np.asarray(x).dtype if not isinstance(x, (Tensor, ComplexPair)) else x.dtype for x in xs
           if not isinstance(x, (bool, int, float, complex))]
    dt = np.result_type(*dts) if dts else np.dtype(np.float64)
    if dt.kind == "c":
        return np.dtype(np.float32) if dt == np.complex64 else np.dtype(np.float64)
    return dt if dt.kind == "f" else np.dtype(np.float64)


def split(x):
    """(real part, imaginary part) of x: a pair, a complex number or array, or a real value
    (imaginary part 0.0)."""
    if isinstance(x, ComplexPair):
        return x.re, x.im
    if isinstance(x, (complex, np.complexfloating)):
        return float(x.real), float(x.imag)
    if isinstance(x, np.ndarray) and x.dtype.kind == "c":
        return np.ascontiguousarray(x.real), np.ascontiguousarray(x.imag)
    return x, 0.0


def is_complex(x):
    return isinstance(x, ComplexPair) or is_complex_constant(x)


def _zero(x):
    return isinstance(x, float) and x == 0.0


def _add(a, b):
    return a if _zero(b) else b if _zero(a) else a + b


def _sub(a, b):
    return a if _zero(b) else -b if _zero(a) else a - b


def _mul(f, a, b):
    return 0.0 if _zero(a) or _zero(b) else f(a, b)


def _bilinear(f, x, y):
    """f(x, y) for f bilinear (multiply, matmul, tensordot) on complex operands."""
    a, b = split(x)
    c, d = split(y)
    return pair(_sub(_mul(f, a, c), _mul(f, b, d)), _add(_mul(f, a, d), _mul(f, b, c)))


def pair(re, im):
    """A ComplexPair, with a zero imaginary part spelled out as zeros of re's shape."""
    if _zero(im) and not isinstance(re, (int, float)):
        im = ew.multiply(as_operand(re), 0.0) if isinstance(re, Tensor) else np.zeros_like(np.asarray(re, dtype=float))
    if _zero(re) and not isinstance(im, (int, float)):
        re = ew.multiply(as_operand(im), 0.0) if isinstance(im, Tensor) else np.zeros_like(np.asarray(im, dtype=float))
    return ComplexPair(re, im)


class ComplexPair:
    """A complex array in a traced program: real part `re` and imaginary part `im`, real
    arrays (Tensors or NumPy arrays) of one shape and float dtype."""

    __jitgraph_defer__ = True
    __array_priority__ = 2000

    def __init__(self, re, im):
        self.re, self.im = re, im

    @property
    def shape(self):
        return tuple(shape_of(self.re))

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def __len__(self):
        return self.shape[0]

    @property
    def dtype(self):
        return np.dtype(np.complex64) if _float_dtype(self.re) == np.float32 else np.dtype(np.complex128)

    @property
    def real(self):
        return self.re

    @property
    def imag(self):
        return self.im

    @property
    def T(self):
        return ComplexPair(transpose_(self.re), transpose_(self.im))

    def conj(self):
        return ComplexPair(self.re, -self.im)

    conjugate = conj

    def __array__(self, *args, **kwargs):
        _refuse("conversion to a NumPy array (a traced program's result must be real: return abs, .real "
                "or .imag)")

    def __bool__(self):
        _refuse("bool()")

    def __getitem__(self, key):
        return ComplexPair(getitem(self.re, key), getitem(self.im, key))

    def reshape(self, *shape, order="C"):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return _parts(reshape)(self, shape, order=order)

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else (axes or None)
        return _parts(transpose_)(self, axes)

    def sum(self, axis=None, keepdims=False, **kw):
        return _parts(rd.sum)(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims=False, **kw):
        return _parts(rd.mean)(self, axis=axis, keepdims=keepdims)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs.get("out") is not None or "where" in kwargs:
            _refuse(f"np.{ufunc.__name__}.{method}" if method != "__call__" else f"np.{ufunc.__name__} with out=")
        return complex_ufunc(ufunc, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        handler = FUNCTIONS.get(func)
        if handler is None:
            _refuse(getattr(func, "__name__", str(func)))
        return handler(*args, **kwargs)

    def __neg__(self):
        return ComplexPair(-self.re, -self.im)

    def __pos__(self):
        return self

    def __abs__(self):
        return np.absolute(self)

    def __repr__(self):
        return f"ComplexPair(shape={self.shape}, dtype={self.dtype})"


def _binary(ufunc, swap=False):
    def op(self, other):
        return ufunc(other, self) if swap else ufunc(self, other)
    return op


for _name, _ufunc in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("truediv", np.true_divide),
                      ("pow", np.power), ("matmul", np.matmul)]:
    setattr(ComplexPair, f"__{_name}__", _binary(_ufunc))
    setattr(ComplexPair, f"__r{_name}__", _binary(_ufunc, swap=True))
ComplexPair.__hash__ = None


def _power(x, p):
    if isinstance(p, ComplexPair) or is_complex(p) or isinstance(p, Tensor) or not float(p).is_integer():
        _refuse("a power other than a constant integer power")
    p = int(p)
    if p < 0:
        return complex_ufunc(np.true_divide, (1.0, _power(x, -p)), {})
    result, base = None, x
    while p:
        if p & 1:
            result = base if result is None else _bilinear(ew.multiply, result, base)
        p >>= 1
        if p:
            base = _bilinear(ew.multiply, base, base)
    return pair(1.0 + ew.multiply(split(x)[0], 0.0), 0.0) if result is None else result


def _divide(x, y):
    a, b = split(x)
    c, d = split(y)
    if _zero(d):
        return pair(a / c, 0.0 if _zero(b) else b / c)
    den = c * c + d * d
    return pair(_add(_mul(ew.multiply, a, c), _mul(ew.multiply, b, d)) / den,
                _sub(_mul(ew.multiply, b, c), _mul(ew.multiply, a, d)) / den)


def _exp(x):
    a, b = split(x)
    e = ew.exp(a)
    return ComplexPair(e * ew.cos(b), e * ew.sin(b))


def complex_ufunc(ufunc, inputs, kwargs):
    """A ufunc with a complex operand (a pair, a complex number or array) among traced ones."""
    if kwargs.get("out") is not None or builtins.any(k not in ("dtype",) for k in kwargs):
        _refuse(f"np.{ufunc.__name__} with {sorted(kwargs)}")
    if ufunc is np.add:
        (a, b), (c, d) = split(inputs[0]), split(inputs[1])
        return pair(_add(a, c), _add(b, d))
    if ufunc is np.subtract:
        (a, b), (c, d) = split(inputs[0]), split(inputs[1])
        return pair(_sub(a, c), _sub(b, d))
    if ufunc is np.multiply:
        return _bilinear(ew.multiply, *inputs)
    if ufunc is np.matmul:
        return _bilinear(matmul, *inputs)
    if ufunc in (np.true_divide, np.divide):
        return _divide(*inputs)
    if ufunc is np.power:
        return _power(*inputs)
    x = inputs[0]
    a, b = split(x)
    if ufunc is np.negative:
        return pair(-a, -b if not _zero(b) else 0.0)
    if ufunc is np.positive:
        return x
    if ufunc is np.conjugate:
        return pair(a, -b if not _zero(b) else 0.0)
    if ufunc is np.absolute:
        return ew.hypot(a, b)
    if ufunc is np.square:
        return _bilinear(ew.multiply, x, x)
    if ufunc is np.exp:
        return _exp(x)
    if ufunc is np.log:
        return ComplexPair(ew.log(ew.hypot(a, b)), ew.arctan2(b, a))
    _refuse(f"np.{ufunc.__name__}")


# ---- array functions on pairs ---------------------------------------------------------------------
def _parts(fn):
    """An array function applied to the real and imaginary parts alike."""
    def apply(x, *args, **kwargs):
        a, b = split(x)
        return pair(fn(a, *args, **kwargs), 0.0 if _zero(b) else fn(b, *args, **kwargs))
    return apply


def _real(x):
    return split(x)[0]


def _imag(x):
    b = split(x)[1]
    return ew.multiply(as_operand(split(x)[0]), 0.0) if _zero(b) else b


def _angle(z, deg=False):
    a, b = split(z)
    r = ew.arctan2(b, a)
    return r * (180.0 / np.pi) if deg else r


def _concatenate(arrays, axis=0, **kw):
    parts = [split(x) for x in arrays]
    return pair(concatenate([as_operand(p[0]) for p in parts], axis=axis),
                concatenate([pair(p[0], p[1]).im for p in parts], axis=axis))


def _where(cond, x, y):
    (a, b), (c, d) = split(x), split(y)
    return pair(ew.where_(cond, a, c), ew.where_(cond, b, d))


def _dot(a, b, out=None):
    return _bilinear(dot, a, b)


def _tensordot(a, b, axes=2):
    return _bilinear(lambda x, y: tensordot(x, y, axes), a, b)


def _einsum(subscripts, *operands, **kw):
    if len(operands) != 2 or not isinstance(subscripts, str):
        _refuse("np.einsum other than of two operands")
    return _bilinear(lambda x, y: np.einsum(subscripts, x, y), *operands)


def _shifted(x, axes, inverse):
    a, b = split(x)
    nd = len(shape_of(a))
    axes = tuple(range(nd)) if axes is None else (axes,) if isinstance(axes, int) else tuple(axes)
    shifts = [(-(shape_of(a)[ax] // 2) if inverse else shape_of(a)[ax] // 2) for ax in axes]
    return pair(np.roll(a, shifts, axes), 0.0 if _zero(b) else np.roll(b, shifts, axes))


# ---- transforms ----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def _matrices(kind, n_in, n, norm, dtype, complex_input):
    """(from_re, from_im): the (n_in, n_out) complex matrices of np.fft.<kind> of length n applied
    to unit real and unit imaginary inputs, as (real, imaginary) float arrays of `dtype`."""
    fn = getattr(np.fft, kind)
    eye = np.eye(n_in)
    out = []
    for unit in ((eye, 1j * eye) if complex_input else (eye,)):
        t = fn(unit, n=n, axis=-1, norm=norm)
        re = np.ascontiguousarray(np.real(t), dtype=dtype)
        im = np.ascontiguousarray(np.imag(t), dtype=dtype) if np.iscomplexobj(t) else None
        out.append((re, im))
    return tuple(out)


_COMPLEX_INPUT = {"fft": True, "ifft": True, "irfft": True, "hfft": True, "rfft": False, "ihfft": False}

# Transforms of at least this length whose length factors as n1 * n2, both at least FACTOR_MIN,
# are computed in four steps (Bailey's): transforms of length n1 along one axis of the (n1, n2)
# reshape, a product with twiddle factors, transforms of length n2 along the other, a transpose.
# The transforms are dense products still, so the work per element is n1 + n2 instead of n
# (the gradient of log(|rfft| ** 2) plus an rfft/irfft round trip over 2^18 points, ms, four
# steps against one product: length 256 7.1-13.9 against 5.8-6.3, 384 7.8 against 10.5, 512
# 8.4-8.9 against 12.3-13.4, 1024 9.5-9.7 against 21.2-23.1; a log power spectrum of 256 rows of
# 1024, 6.5 -> 3.6 ms, 2.3 ms with rfft through a transform of half the length (_real_dft), JAX
# 2.0-2.1 ms, which runs an FFT proper)
FOUR_STEP_MIN = 384
FACTOR_MIN = 8


def four_step_split(n):
    """(n1, n2) with n1 * n2 == n, n1 <= n2 the divisor closest to sqrt(n), or None where n is
    short or has no such factors (a prime length stays one dense product)."""
    if n < FOUR_STEP_MIN:
        return None
    n1 = max(d for d in range(1, int(n ** 0.5) + 1) if n % d == 0)
    return (n1, n // n1) if n1 >= FACTOR_MIN else None


def _unit_roots(m, n, sign, factor, dtype):
    """factor * exp(sign 2 pi i m / n) for an integer array m, as (real, imaginary) parts of
    `dtype`, exact at quarter turns, so that the imaginary parts NumPy's transform leaves exactly
    zero (a real signal's terms 0 and n/2) are zero here too."""
    m = m % n
    re, im = np.cos(2 * np.pi * m / n), sign * np.sin(2 * np.pi * m / n)
    quarter = (4 * m) % n == 0
    q = (4 * m[quarter]) // n
    re[quarter] = np.array([1.0, 0.0, -1.0, 0.0])[q]
    im[quarter] = sign * np.array([0.0, 1.0, 0.0, -1.0])[q]
    return np.ascontiguousarray(factor * re, dtype=dtype), np.ascontiguousarray(factor * im, dtype=dtype)


@functools.lru_cache(maxsize=64)
def _four_step_constants(n1, n2, sign, scale, dtype):
    """Real and imaginary parts of the (n1, n1) and (n2, n2) transform matrices (the second
    scaled) and the (n2, n1) twiddle factors exp(sign 2 pi i j k / n), of `dtype`."""
    def roots(rows, cols, n, factor=1.0):
        return _unit_roots(np.outer(np.arange(rows), np.arange(cols)), n, sign, factor, dtype)
    return roots(n1, n1, n1), roots(n2, n2, n2, scale), roots(n2, n1, n1 * n2)


def _complex_product(re, im, m, f):
    """(re + i im) f(., m) for m = (real, imaginary) constant parts; im may be 0.0."""
    mr, mi = m
    return _sub(f(re, mr), _mul(f, im, mi)), _add(f(re, mi), _mul(f, im, mr))


def _dft(re, im, n, sign, scale, dtype):
    """The length-n discrete Fourier transform (exponent sign `sign`, times `scale`) of the
    complex value re + i im along its last axis, in four steps (see FOUR_STEP_MIN)."""
    n1, n2 = four_step_split(n)
    f1, f2, tw = _four_step_constants(n1, n2, sign, scale, dtype.str)
    lead = tuple(shape_of(re))[:-1]

    def steps(v):       # element n2 * j1 + j2 at [..., j2, j1]
        return moveaxis(reshape(v, lead + (n1, n2)), -1, -2)
    re, im = steps(re), (0.0 if _zero(im) else steps(im))
    re, im = _complex_product(re, im, f1, matmul)            # [..., j2, k1]
    re, im = _complex_product(re, im, tw, ew.multiply)
    re, im = moveaxis(re, -1, -2), moveaxis(im, -1, -2)       # [..., k1, j2]
    re, im = _complex_product(re, im, f2, matmul)            # [..., k1, k2]: element k1 + n1 * k2
    return reshape(moveaxis(re, -1, -2), lead + (n,)), reshape(moveaxis(im, -1, -2), lead + (n,))


def _fit(v, n):
    """v along its last axis truncated or zero-padded to length n (as np.fft's n does)."""
    if _zero(v):
        return v
    m = shape_of(v)[-1]
    if m >= n:
        return v if m == n else v[..., :n]
    zeros = np.zeros(tuple(shape_of(v))[:-1] + (n - m,), dtype=v.dtype)
    return concatenate([v, zeros], axis=-1)


def _scale(norm, n, inverse):
    norm = norm or "backward"
    if norm not in ("backward", "ortho", "forward"):
        raise ValueError(f'Invalid norm value {norm}; should be "backward", "ortho" or "forward".')
    if norm == "ortho":
        return 1.0 / np.sqrt(n)
    return 1.0 / n if (norm == "backward") == inverse else 1.0


_SWAPPED = {None: "forward", "backward": "forward", "ortho": "ortho", "forward": "backward"}


@functools.lru_cache(maxsize=64)
def _half_twiddles(n, scale, dtype):
    """scale * exp(-2 pi i k / n) for k = 0 .. n / 2, as (real, imaginary) parts."""
    return _unit_roots(np.arange(n // 2 + 1), n, -1, scale, dtype)


def _real_dft(x, n, scale, dtype):
    """rfft of real x (length n, even) along its last axis through a transform of half the
    length: z = x[0::2] + i x[1::2], Z its transform, X[k] = E[k] + W^k O[k] with E the transform
    of the even samples, (Z[k] + conj(Z[n/2 - k])) / 2, and O the odd ones', (Z[k] - conj(Z[n/2 -
    k])) / 2i: half the products of the full-length transform of a real signal, and the
    n / 2 + 1 terms rfft keeps, no more."""
    zr, zi = _dft(x[..., 0::2], x[..., 1::2], n // 2, -1, 1.0, dtype)

    def at_k(v):                   # Z[k mod n/2], k = 0 .. n/2
        return concatenate([v, v[..., :1]], axis=-1)

    def at_minus_k(v):             # Z[(n/2 - k) mod n/2]
        return concatenate([v[..., :1], v[..., ::-1]], axis=-1)
    ar, ai, br, bi = at_k(zr), at_k(zi), at_minus_k(zr), at_minus_k(zi)
    c, s = _half_twiddles(n, scale, dtype.str)
    half = 0.5 * scale
    o_r, o_i = (ai + bi) * 0.5, (br - ar) * 0.5
    return (ar + br) * half + (o_r * c - o_i * s), (ai - bi) * half + (o_i * c + o_r * s)


def _real_idft(a, b, n, scale, dtype):
    """irfft of a + i b (its first n / 2 + 1 terms) to length n (even), through an inverse
    transform of half the length: the even samples' transform E[k] = (X[k] + conj(X[n/2 - k])) / 2
    and the odd ones' O[k] = (X[k] - conj(X[n/2 - k])) conj(W^k) / 2 make z = E + i O, whose
    inverse transform holds the even samples in its real part and the odd ones in its imaginary
    part (`_real_dft` backwards). The imaginary parts of terms 0 and n / 2 are ignored, as NumPy
    does."""
    h = n // 2
    lead = tuple(shape_of(a))[:-1]
    if _zero(b):
        b = np.zeros(lead + (h + 1,), dtype=dtype)
    mask = np.ones(h + 1, dtype=dtype)
    mask[0] = mask[-1] = 0.0
    b = b * mask
    ar, ai, br, bi = a[..., :h], b[..., :h], a[..., 1:][..., ::-1], b[..., 1:][..., ::-1]
    c, s = _half_twiddles(n, 1.0, dtype.str)
    c, s = c[:h], s[:h]
    dr, di = ar - br, ai + bi
    o_r, o_i = (dr * c + di * s) * 0.5, (di * c - dr * s) * 0.5
    zr, zi = (ar + br) * 0.5 - o_i, (ai - bi) * 0.5 + o_r
    xr, xi = _dft(zr, zi, h, 1, 2 * scale, dtype)
    return reshape(concatenate([reshape(xr, lead + (h, 1)), reshape(xi, lead + (h, 1))], axis=-1), lead + (n,))


def _four_step_transform(kind, a, b, n, norm, dtype):
    """np.fft.<kind> of length n along the last axis of a + i b (b may be 0.0), through _dft:
    (re, im), or the real result of irfft and hfft."""
    if kind == "hfft":              # NumPy: irfft of the conjugate, the norm's direction swapped
        return _four_step_transform("irfft", a, _sub(0.0, b), n, _SWAPPED[norm], dtype)
    if kind == "ihfft":             # conj(rfft(a)), the norm's direction swapped
        re, im = _four_step_transform("rfft", a, 0.0, n, _SWAPPED[norm], dtype)
        return re, -im
    if kind == "irfft" and n % 2 == 0 and four_step_split(n // 2) is not None:
        return _real_idft(_fit(a, n // 2 + 1), _fit(b, n // 2 + 1), n, _scale(norm, n, True), dtype)
    if kind == "irfft":
        # the Hermitian spectrum of a real signal from its first n // 2 + 1 terms; its inverse
        # transform's real part ignores the imaginary parts of terms 0 and n / 2, as NumPy does
        h = n // 2 + 1
        a, b = _fit(a, h), _fit(b, h)
        tail_re = a[..., 1:n - n // 2][..., ::-1]
        full_re = concatenate([a, tail_re], axis=-1)
        full_im = 0.0 if _zero(b) else concatenate([b, -b[..., 1:n - n // 2][..., ::-1]], axis=-1)
        re, _ = _dft(full_re, full_im, n, 1, _scale(norm, n, True), dtype)
        return re
    if kind == "rfft" and n % 2 == 0 and four_step_split(n // 2) is not None:
        return _real_dft(_fit(a, n), n, _scale(norm, n, False), dtype)
    inverse = kind == "ifft"
    re, im = _dft(_fit(a, n), _fit(b, n), n, 1 if inverse else -1, _scale(norm, n, inverse), dtype)
    if kind == "rfft":
        return re[..., :n // 2 + 1], im[..., :n // 2 + 1]
    return re, im


def _transform(kind, x, n=None, axis=-1, norm=None):
    """np.fft.<kind>(x, n, axis, norm) of a traced x (real, or a pair)."""
    if isinstance(n, Tensor) or isinstance(axis, Tensor):
        raise NotSupportedError(f"np.fft.{kind} with a traced n or axis is not supported{where()}")
    complex_input = _COMPLEX_INPUT[kind]
    if not complex_input and is_complex(x):
        raise TypeError(f"np.fft.{kind} of complex input: NumPy's {kind} takes real input")
    a, b = split(x)
    a = as_operand(a)
    if a.dtype.kind not in "fc":
        a = cast(a, np.float64)
    nd = len(shape_of(a))
    axis = norm_axis(axis, nd)
    n_in = shape_of(a)[axis]
    n_out = n if n is not None else (2 * (n_in - 1) if kind in ("irfft", "hfft") else n_in)
    if n_out < 1:
        raise ValueError(f"Invalid number of FFT data points ({n_out}) specified.")
    if builtins.max(n_in, n_out) > MAX_LENGTH:
        raise NotSupportedError(f"np.fft.{kind} of length {builtins.max(n_in, n_out)} is not supported on traced "
                                f"values: jitgraph computes transforms as dense products, up to length "
                                f"{MAX_LENGTH}{where()}")
    dtype = _float_dtype(a, b)
    if four_step_split(n_out) is not None:
        def last(v):
            return 0.0 if _zero(v) else moveaxis(cast(as_operand(v), dtype), axis, -1)
        out = _four_step_transform(kind, last(a), last(b) if complex_input else 0.0, n_out, norm, dtype)
        if kind in ("irfft", "hfft"):
            return moveaxis(out, -1, axis)
        return pair(moveaxis(out[0], -1, axis), moveaxis(out[1], -1, axis))
    mats = _matrices(kind, n_in, n, norm, dtype.str, complex_input)

    def apply(v, m):
        return moveaxis(matmul(moveaxis(cast(as_operand(v), dtype), axis, -1), m), -1, axis)

    (pr, pi), = mats[:1]
    re, im = apply(a, pr), (apply(a, pi) if pi is not None else 0.0)
    if complex_input and not _zero(b):
        qr, qi = mats[1]
        re = re + apply(b, qr)
        im = _add(im, apply(b, qi) if qi is not None else 0.0)
    if kind in ("irfft", "hfft"):
        return re          # a real result
    return pair(re, im)


def _one_d(kind):
    def transform(a, n=None, axis=-1, norm=None, out=None):
        if out is not None:
            raise NotSupportedError(f"np.fft.{kind} with out= is not supported on traced values{where()}")
        return _transform(kind, a, n, axis, norm)
    transform.__name__ = kind
    transform.__doc__ = f"np.fft.{kind} of a traced value (a dense product; see the module docstring)."
    return transform


def _axes_and_sizes(x, s, axes, last_default):
    nd = len(shape_of(split(x)[0]))
    if axes is None:
        axes = tuple(range(nd - (len(s) if s is not None else nd), nd)) if last_default is None else last_default
    axes = [norm_axis(a, nd) for a in axes]
    sizes = list(s) if s is not None else [None] * len(axes)
    if len(sizes) != len(axes):
        raise ValueError("Shape and axes have different lengths.")
    return axes, sizes


def _n_d(kind, default_axes=None):
    one = kind.rstrip("n2")         # fft2, fftn -> fft

    def transform(a, s=None, axes=default_axes, norm=None, out=None):
        if out is not None:
            raise NotSupportedError(f"np.fft.{kind} with out= is not supported on traced values{where()}")
        ax, sizes = _axes_and_sizes(a, s, axes, None)
        if one in ("fft", "ifft"):
            for axis, n in zip(ax, sizes):
                a = _transform(one, a, n, axis, norm)
            return a
        if one == "rfft":         # the last axis real-to-complex, then the others complex
            a = _transform("rfft", a, sizes[-1], ax[-1], norm)
            for axis, n in zip(ax[:-1], sizes[:-1]):
                a = _transform("fft", a, n, axis, norm)
            return a
        for axis, n in zip(ax[:-1], sizes[:-1]):       # irfftn: the others first, then the last
            a = _transform("ifft", a, n, axis, norm)
        return _transform("irfft", a, sizes[-1], ax[-1], norm)
    transform.__name__ = kind
    transform.__doc__ = f"np.fft.{kind} of a traced value (1-d transforms along each axis)."
    return transform


TRANSFORMS = {name: _one_d(name) for name in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")}
TRANSFORMS.update({name: _n_d(name) for name in ("fftn", "ifftn", "rfftn", "irfftn")})
TRANSFORMS.update({name: _n_d(name, (-2, -1)) for name in ("fft2", "ifft2", "rfft2", "irfft2")})
TRANSFORMS["fftshift"] = lambda x, axes=None: _shifted(x, axes, inverse=False)
TRANSFORMS["ifftshift"] = lambda x, axes=None: _shifted(x, axes, inverse=True)

for _name, _fn in TRANSFORMS.items():
    implements(getattr(np.fft, _name))(_fn)

FUNCTIONS = {getattr(np.fft, name): fn for name, fn in TRANSFORMS.items()}
FUNCTIONS.update({
    np.real: _real, np.imag: _imag, np.conj: lambda x: complex_ufunc(np.conjugate, (x,), {}),
    np.angle: _angle, np.sum: lambda x, axis=None, keepdims=False, **kw: _parts(rd.sum)(x, axis=axis, keepdims=keepdims),
    np.mean: lambda x, axis=None, keepdims=False, **kw: _parts(rd.mean)(x, axis=axis, keepdims=keepdims),
    np.reshape: lambda x, shape, order="C", **kw: _parts(reshape)(x, shape, order=order),
    np.transpose: lambda x, axes=None: _parts(transpose_)(x, axes),
    np.moveaxis: _parts(moveaxis), np.roll: _parts(np.roll), np.flip: _parts(np.flip),
    np.concatenate: _concatenate, np.where: _where, np.dot: _dot, np.matmul: lambda a, b, **kw: _bilinear(matmul, a, b),
    np.tensordot: _tensordot, np.einsum: _einsum, np.copy: lambda x, **kw: x,
})
if hasattr(np, "conjugate"):
    FUNCTIONS[np.conjugate] = FUNCTIONS[np.conj]

METHODS["complex_ufunc"] = complex_ufunc
