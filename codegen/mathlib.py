"""Scalar math that LLVM can vectorize, called from generated kernels.

Numba lowers `np.exp`/`np.tanh` to scalar libm calls (PyPI's llvmlite has no
SVML), which keeps transcendental-heavy loops scalar. These versions use only
arithmetic, `floor`, selects and a bit cast, so loops calling them vectorize.

exp: Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, a degree-11
polynomial for e^r (see _POLY), and 2^n built from exponent bits in two halves (so
subnormal results and overflow to inf come out right). Measured max relative
error against NumPy: 2.2e-16 over [-700, 700]; 7x faster than libm exp in a
4M-element loop on this machine (5.9 ms vs 40.6 ms).
expm1 and tanh are built on the same polynomial without cancellation near 0; tanh
evaluates it once (e^y - 1 = 2^n q + (2^n - 1), exact for n = 0): 1.76 ns per element in a
cached loop against 3.19 ns when it computed expm1's two branches, max relative error
4.7e-16 against NumPy over [-25, 25] and tiny arguments.
NaN and +-inf propagate as in NumPy.

log, log1p: fdlibm's e_log.c method (exponent bits, s = f / (2 + f) and a minimax polynomial
in s**2), log1p as log(u) + c/u with u = 1 + x rounded and c its rounding error. Measured against
mpmath: log within 0.76 ulp (subnormals to the largest double), log1p within 1.14 ulp; in a 1M-
element loop 2.0 ms against libm's 5.5 ms (log), 2.4 ms against 14.2 ms (log1p).

sin, cos: the argument is reduced by pi/2 with a table of (2**E 2/pi) mod 4 (Payne-Hanek,
branch-free: the row is a gather) and fdlibm's polynomials evaluated on the two-word remainder.
Measured against mpmath: at most 0.73 ulp over every binade, including doubles within 2**-61 of
a multiple of pi/2; 2.6x faster than libm in a 1M-element loop of arguments in [-10, 10]
(6.3 ms vs 16.4 ms). Each call site inlines about 130 instructions: see emit_cpu.INLINE_MATH_MAX.

hypot: sqrt(x*x + y*y) by one fused multiply-add, the operands scaled by an exact power of two
where the squares would overflow or underflow. Within 1 ulp of mpmath's over every binade;
8x libm's speed in a 1M-element loop (2.9 ms vs 24.1 ms), and np.abs of a complex value is it.
"""
import functools
import math

import numba
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .build import enable_cache, helpers_cache_dir

LOG2E = 1.4426950408889634
LN2_HI = 0.6931471803691238      # high bits of ln 2: n * LN2_HI is exact for |n| < 2**11
LN2_LO = 1.9082149292705877e-10


# ---- exp, expm1, tanh, maximum, minimum: LLVM instructions emitted at each call ----------------
# Numba-inlined @njit functions cost ~0.2 s of type inference and lowering per call site (a
# program has dozens); an intrinsic writes the same arithmetic as LLVM IR directly, which LLVM
# inlines and vectorizes as before, at almost no compile cost. (Python callers, and kernels run
# as Python under NUMBA_DISABLE_JIT, get NumPy's functions instead: see below.)
_F64 = ir.DoubleType()
_I64 = ir.IntType(64)
# e^r - 1 = r q(r), |r| <= ln2/2: q of degree 10, the coefficients innermost (r^10) first. q
# interpolates (e^r - 1) / r at the 11 Chebyshev nodes of the interval, solved in 60-digit
# arithmetic (mpmath) and rounded to doubles: |q - (e^r - 1) / r| <= 2.0e-17 on the interval,
# so r q(r) is within 7e-18 of e^r - 1. The degree-13 Taylor polynomial it replaces took
# three more multiply-adds: exp 13.4 -> 11.6 us, tanh 15.4 -> 13.5 us for 12,288 values, the
# same maximum errors against NumPy (2.2e-16 for exp, 4.4e-16 for tanh over [-20, 20]).
_POLY = (2.510520637395701e-08, 2.7626357241447223e-07, 2.7557255425746435e-06, 2.4801504346997686e-05,
         0.00019841269874800493, 0.0013888888932488599, 0.008333333333326141, 0.04166666666657314,
         0.1666666666666667, 0.5000000000000006, 1.0)


def _const(v):
    return ir.Constant(_F64, v)


def _ir_call(builder, name, *args):
    fn = builder.module.declare_intrinsic(name, [_F64])
    return builder.call(fn, list(args))


def _ir_clamp(builder, x, lo, hi):
    """min(max(x, lo), hi) as Numba computes it for floats."""
    m = builder.select(builder.fcmp_ordered(">", x, _const(lo)), x, _const(lo))
    return builder.select(builder.fcmp_ordered("<", m, _const(hi)), m, _const(hi))


def _ir_exp_poly(builder, r):
    acc = _const(_POLY[0])
    for c in _POLY[1:]:
        acc = builder.fadd(_const(c), builder.fmul(r, acc))
    return builder.fmul(r, acc)


def _ir_round_log2e(builder, x):
    """(n as a double, n as an int64) for n = x log2(e) rounded to the nearest integer, |x| <= 1100:
    adding 1.5 * 2**52 leaves n in the low bits of the sum (`_ROUNDER`'s ulp is 1). Unlike
    floor + fptosi, it vectorizes on AVX2 too (a double-to-int64 conversion needs AVX-512).
    Exact instructions, or reassociation would fold (y + C) - C to y."""
    add, sub, mul, _ = _ir_exact(builder)
    t = add(mul(x, _const(LOG2E)), _const(_ROUNDER))
    n = builder.sub(builder.bitcast(t, _I64), ir.Constant(_I64, _ROUNDER_BITS))
    return sub(t, _const(_ROUNDER)), n


_ROUNDER = 6755399441055744.0                        # 1.5 * 2**52
_ROUNDER_BITS = int(np.float64(_ROUNDER).view(np.int64))


def _ir_exp(builder, x):
    xc = _ir_clamp(builder, x, -1100.0, 1100.0)
    nf, n = _ir_round_log2e(builder, xc)
    r = builder.fsub(builder.fsub(xc, builder.fmul(nf, _const(LN2_HI))), builder.fmul(nf, _const(LN2_LO)))
    p = builder.fadd(_const(1.0), _ir_exp_poly(builder, r))
    n1 = builder.ashr(n, ir.Constant(_I64, 1))
    n2 = builder.sub(n, n1)
    scale = [builder.bitcast(builder.shl(builder.add(k, ir.Constant(_I64, 1023)), ir.Constant(_I64, 52)), _F64)
             for k in (n1, n2)]
    res = builder.fmul(builder.fmul(p, scale[0]), scale[1])
    return builder.select(builder.fcmp_ordered("==", x, x), res, x)


def _ir_expm1(builder, x):
    small = _ir_exp_poly(builder, _ir_clamp(builder, x, -0.35, 0.35))
    big = builder.fsub(_ir_exp(builder, x), _const(1.0))
    ax = _ir_call(builder, "llvm.fabs", x)
    return builder.select(builder.fcmp_ordered("<=", ax, _const(0.34657359027997264)), small, big)


def _ir_expm1_positive(builder, y):
    """e^y - 1 for 0 <= y <= 40 with one polynomial: y = n ln2 + r, |r| <= ln2/2, n in 0..58,
    and e^y - 1 = 2^n q + (2^n - 1) with q = e^r - 1. For n = 0 that is q itself (no
    cancellation near 0); otherwise 2^n - 1 is exact and both terms have the sign of the sum."""
    nf = _ir_call(builder, "llvm.floor", builder.fadd(builder.fmul(y, _const(LOG2E)), _const(0.5)))
    r = builder.fsub(builder.fsub(y, builder.fmul(nf, _const(LN2_HI))), builder.fmul(nf, _const(LN2_LO)))
    q = _ir_exp_poly(builder, r)
    n = builder.fptosi(nf, _I64)
    scale = builder.bitcast(builder.shl(builder.add(n, ir.Constant(_I64, 1023)), ir.Constant(_I64, 52)), _F64)
    return builder.fadd(builder.fmul(scale, q), builder.fsub(scale, _const(1.0)))


def _ir_tanh(builder, x):
    ax = _ir_call(builder, "llvm.fabs", x)
    ax = builder.select(builder.fcmp_ordered("<", ax, _const(20.0)), ax, _const(20.0))   # tanh(20) rounds to 1
    em = _ir_expm1_positive(builder, builder.fmul(_const(2.0), ax))
    t = builder.fdiv(em, builder.fadd(em, _const(2.0)))
    copysign = builder.module.declare_intrinsic("llvm.copysign", [_F64], ir.FunctionType(_F64, [_F64, _F64]))
    t = builder.call(copysign, [t, x])          # tanh(-0.0) is -0.0
    return builder.select(builder.fcmp_ordered("==", x, x), t, x)


# ---- sin, cos: Cody-Waite/Payne-Hanek reduction by a table, fdlibm's kernels ------------------
# Numba's fastmath pass gives every float instruction without flags the kernel's flags
# (reassoc among them), and reassociation would fold the compensated sums below to zero error.
# So these instructions carry `arcp` (which only affects division) and the pass leaves them as
# written; products that must be exact are fused multiply-adds.
_EXACT = ("arcp",)
_STRICT = ("contract",)     # no licence that changes a result (see floordiv)
PIO2 = (1.5707963267948966, 6.123233995736766e-17)      # pi/2 = PIO2[0] + PIO2[1] + O(2**-108)
# fdlibm's minimax coefficients for sin and cos on [-pi/4, pi/4] (k_sin.c, k_cos.c)
_SIN = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
        2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
_COS = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
        -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)
_TRIG_EMIN = -53          # x = m 2**E with m a 53-bit integer; |x| >= pi/4 means E >= -53
_TRIG_EMAX = 1023 - 52


@functools.cache
def _two_over_pi_mod4_table():
    """Row E - _TRIG_EMIN: (2**E * 2/pi) mod 4 as four doubles, within 2**-215 relative or
    2**-240 absolute, whichever is larger (times a 53-bit m: below 2**-160 of m times the row).

    2/pi comes from Machin's formula in integer arithmetic, to 1,400 bits (the largest E is
    971, and the reduction uses 240 bits below the binary point)."""
    prec, guard = 1400, 32
    one = 1 << (prec + guard)

    def arctan_inv(k):         # arctan(1/k) * one
        total, term, n = 0, one // k, 1
        while term:
            total += term // n if n % 4 == 1 else -(term // n)
            term //= k * k
            n += 2
        return total
    pi = 16 * arctan_inv(5) - 4 * arctan_inv(239)
    two_over_pi = (2 * one * one // pi) >> guard           # 2/pi * 2**prec
    frac_bits = 240
    rows = []
    for e in range(_TRIG_EMIN, _TRIG_EMAX + 1):
        shift = prec - e - frac_bits
        r = (two_over_pi >> shift) & ((1 << (frac_bits + 2)) - 1)   # (2**e 2/pi mod 4) * 2**240
        row = []
        for _ in range(4):
            t = math.ldexp(float(r), -frac_bits)
            row.append(t)
            r -= int(math.ldexp(t, frac_bits))
        rows.append(row)
    return np.array(rows, dtype=np.float64)


def _ir_exact(builder):
    """fadd, fsub, fmul and fma as written (not reassociated), for compensated arithmetic."""
    fma = builder.module.declare_intrinsic("llvm.fma", [_F64], ir.FunctionType(_F64, [_F64] * 3))
    return (lambda a, b: builder.fadd(a, b, flags=_EXACT), lambda a, b: builder.fsub(a, b, flags=_EXACT),
            lambda a, b: builder.fmul(a, b, flags=_EXACT), lambda a, b, c: builder.call(fma, [a, b, c]))


def _ir_two_sum(builder, a, b):
    """s + e == a + b exactly, s = fl(a + b)."""
    add, sub, _, _ = _ir_exact(builder)
    s = add(a, b)
    bb = sub(s, a)
    return s, add(sub(a, sub(s, bb)), sub(b, bb))


def _ir_trig_table(module):
    name = "_jitgraph_two_over_pi_mod4"
    if name in module.globals:
        return module.globals[name]
    values = _two_over_pi_mod4_table().ravel()     # built on the first compile that needs it
    ty = ir.ArrayType(_F64, values.size)
    table = ir.GlobalVariable(module, ty, name)
    table.linkage = "internal"
    table.global_constant = True
    table.initializer = ir.Constant(ty, [_const(float(v)) for v in values])
    return table


def _ir_reduce_pio2(builder, x):
    """x = k pi/2 + (hi + lo), |hi + lo| <= pi/4, hi + lo within 2**-100 relative of the exact
    remainder for every finite |x| >= pi/4; returns hi, lo and k mod 4 (int64).

    Payne-Hanek without branches: x = m 2**E with m an integer below 2**53, so
    x * 2/pi = m * ((2**E 2/pi) mod 4) (mod 4), and the table holds that factor as four doubles
    t0..t3. m*t0 and m*t1 are exact as fma pairs; whole numbers are taken out of the running sum
    after each term (exactly: s - rint(s)), and the rounding errors are kept in a second and
    third word, so the remainder keeps its precision when it is tiny (x within 2**-61 of a
    multiple of pi/2, the closest any double comes). The table row is a gather, so loops vectorize."""
    add, sub, mul, fma = _ir_exact(builder)
    i64 = lambda v: ir.Constant(_I64, v)    # noqa: E731
    rint = lambda v: _ir_call(builder, "llvm.rint", v)    # noqa: E731
    e = builder.sub(builder.and_(builder.lshr(builder.bitcast(x, _I64), i64(52)), i64(0x7ff)), i64(1023 + 52))
    e = builder.select(builder.icmp_signed("<", e, i64(_TRIG_EMIN)), i64(_TRIG_EMIN), e)
    e = builder.select(builder.icmp_signed(">", e, i64(_TRIG_EMAX)), i64(_TRIG_EMAX), e)
    table = _ir_trig_table(builder.module)
    row = builder.mul(builder.sub(e, i64(_TRIG_EMIN)), i64(4))
    t = [builder.load(builder.gep(table, [ir.Constant(ir.IntType(32), 0), builder.add(row, i64(j))], inbounds=True))
         for j in range(4)]
    m = mul(x, builder.bitcast(builder.shl(builder.sub(i64(1023), e), i64(52)), _F64))    # x * 2**-E
    p0 = mul(m, t[0])
    terms = [fma(m, t[0], builder.fneg(p0))]
    p1 = mul(m, t[1])
    terms += [p1, fma(m, t[1], builder.fneg(p1))]
    p2 = mul(m, t[2])
    terms.append(p2)
    tail = add(fma(m, t[2], builder.fneg(p2)), mul(m, t[3]))
    # p0 - 4 rint(p0 / 4) is exact (|result| <= 2 <= |p0| when the multiple is not 0)
    hi = sub(p0, mul(_const(4.0), rint(mul(p0, _const(0.25)))))
    k = rint(hi)
    hi = sub(hi, k)
    lo = lo2 = None
    for term in terms:
        hi, err = _ir_two_sum(builder, hi, term)
        if lo is None:
            lo = err
        else:
            lo, err2 = _ir_two_sum(builder, lo, err)
            lo2 = err2 if lo2 is None else add(lo2, err2)
        whole = rint(hi)
        hi = sub(hi, whole)
        k = add(k, whole)
    hi, lo = _ir_two_sum(builder, hi, lo)
    whole = rint(hi)
    hi = sub(hi, whole)
    k = add(k, whole)
    lo = add(lo, add(lo2, tail))
    f_hi = add(hi, lo)                       # the fraction of a quarter turn, |f| <= 1/2
    f_lo = sub(lo, sub(f_hi, hi))
    r_hi = mul(f_hi, _const(PIO2[0]))         # times pi/2, in two words
    r_lo = add(fma(f_hi, _const(PIO2[0]), builder.fneg(r_hi)), add(mul(f_hi, _const(PIO2[1])), mul(f_lo, _const(PIO2[0]))))
    r = add(r_hi, r_lo)
    return r, sub(r_lo, sub(r, r_hi)), builder.fptosi(k, _I64)


def _ir_sin_cos_kernels(builder, x, y):
    """sin and cos of x + y for |x + y| <= pi/4, y a correction below ulp(x) (fdlibm's forms)."""
    add, sub, mul, fma = _ir_exact(builder)

    def horner(z, coefs):
        acc = _const(coefs[-1])
        for c in reversed(coefs[:-1]):
            acc = fma(acc, z, _const(c))
        return acc
    z = mul(x, x)
    v = mul(z, x)
    sin = sub(x, sub(sub(mul(z, sub(mul(_const(0.5), y), mul(v, horner(z, _SIN[1:])))), y), mul(v, _const(_SIN[0]))))
    z2 = mul(z, z)
    r = add(mul(z, horner(z, _COS[:3])), mul(mul(z2, z2), horner(z, _COS[3:])))
    hz = mul(_const(0.5), z)
    w = sub(_const(1.0), hz)
    cos = add(w, add(sub(sub(_const(1.0), w), hz), sub(mul(z, r), mul(x, y))))
    return sin, cos


def _ir_sin_or_cos(builder, x, cosine):
    ax = _ir_call(builder, "llvm.fabs", x)
    hi, lo, k = _ir_reduce_pio2(builder, x)
    small = builder.fcmp_ordered("<", ax, _const(PIO2[0] / 2))
    hi = builder.select(small, x, hi)
    lo = builder.select(small, _const(0.0), lo)
    k = builder.select(small, ir.Constant(_I64, 0), k)
    sin, cos = _ir_sin_cos_kernels(builder, hi, lo)
    if cosine:
        k = builder.add(k, ir.Constant(_I64, 1))
    odd = builder.trunc(k, ir.IntType(1))
    res = builder.select(odd, cos, sin)
    negate = builder.trunc(builder.lshr(k, ir.Constant(_I64, 1)), ir.IntType(1))
    res = builder.select(negate, builder.fneg(res), res)
    if not cosine:
        res = builder.select(builder.fcmp_ordered("<", ax, _const(2.0 ** -27)), x, res)   # sin(-0.0) is -0.0
    return builder.select(builder.fcmp_ordered("<", ax, _const(math.inf)), res, builder.fsub(x, x))


def _ir_sin(builder, x):
    return _ir_sin_or_cos(builder, x, False)


def _ir_cos(builder, x):
    return _ir_sin_or_cos(builder, x, True)


# ---- log, log1p: fdlibm's reduction and polynomial (e_log.c) ---------------------------------------
# x = 2**k m, sqrt(2)/2 < m < sqrt(2) (exponent bits; subnormals scaled by 2**54 first), f = m - 1,
# s = f / (2 + f) and log(m) = f - f**2/2 + s (f**2/2 + R(s**2)), R fdlibm's minimax polynomial.
_LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
       2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
       1.479819860511658591e-01)


def _ir_log_positive(builder, x):
    """log(x) for finite x > 0 (other x give garbage: _ir_log selects their values)."""
    add, sub, mul, _ = _ir_exact(builder)
    tiny = builder.fcmp_ordered("<", x, _const(2.0 ** -1022))
    xs = builder.select(tiny, builder.fmul(x, _const(2.0 ** 54), flags=_EXACT), x)
    ix = builder.bitcast(xs, _I64)
    e = builder.and_(builder.lshr(ix, ir.Constant(_I64, 52)), ir.Constant(_I64, 0x7FF))
    m = builder.bitcast(builder.or_(builder.and_(ix, ir.Constant(_I64, (1 << 52) - 1)),
                                    ir.Constant(_I64, 1023 << 52)), _F64)          # [1, 2)
    big = builder.fcmp_ordered(">", m, _const(math.sqrt(2.0)))
    m = builder.select(big, mul(m, _const(0.5)), m)
    k = builder.add(builder.sub(e, builder.select(tiny, ir.Constant(_I64, 1023 + 54), ir.Constant(_I64, 1023))),
                    builder.zext(big, _I64))
    kf = builder.sitofp(k, _F64)
    f = sub(m, _const(1.0))
    s = builder.fdiv(f, add(_const(2.0), f), flags=_EXACT)
    z = mul(s, s)
    w = mul(z, z)
    t1 = mul(w, add(_const(_LG[1]), mul(w, add(_const(_LG[3]), mul(w, _const(_LG[5]))))))
    t2 = mul(z, add(_const(_LG[0]), mul(w, add(_const(_LG[2]), mul(w, add(_const(_LG[4]), mul(w, _const(_LG[6]))))))))
    hfsq = mul(mul(_const(0.5), f), f)
    inner = sub(sub(hfsq, add(mul(s, add(hfsq, add(t2, t1))), mul(kf, _const(LN2_LO)))), f)
    return sub(mul(kf, _const(LN2_HI)), inner)


def _ir_log(builder, x):
    res = _ir_log_positive(builder, x)
    res = builder.select(builder.fcmp_ordered("==", x, _const(math.inf)), x, res)
    res = builder.select(builder.fcmp_ordered("==", x, _const(0.0)), _const(-math.inf), res)
    res = builder.select(builder.fcmp_ordered("<", x, _const(0.0)), _const(math.nan), res)
    return builder.select(builder.fcmp_unordered("uno", x, x), x, res)


def _ir_log1p(builder, x):
    """log(u) + c / u, u = fl(1 + x) and c = x - (u - 1) its rounding error (exact)."""
    add, sub, _, _ = _ir_exact(builder)
    u = add(_const(1.0), x)
    c = sub(x, sub(u, _const(1.0)))
    res = add(_ir_log_positive(builder, u), builder.fdiv(c, u, flags=_EXACT))
    res = builder.select(builder.fcmp_ordered("==", x, _const(math.inf)), x, res)
    res = builder.select(builder.fcmp_ordered("==", x, _const(0.0)), x, res)        # log1p(-0.0) is -0.0
    res = builder.select(builder.fcmp_ordered("==", x, _const(-1.0)), _const(-math.inf), res)
    res = builder.select(builder.fcmp_ordered("<", x, _const(-1.0)), _const(math.nan), res)
    return builder.select(builder.fcmp_unordered("uno", x, x), x, res)


# hypot(x, y) = sqrt(x*x + y*y) with its operands scaled by a power of two (exact) when the
# larger is outside [2**-500, 2**500], so that the squares neither overflow nor underflow; x*x
# + y*y as one fused multiply-add. C99's: inf if either is infinite (a NaN beside included),
# else NaN if either is NaN. Within 1 ulp of the exact value (mpmath) over every binade,
# subnormals included; libm's hypot does not vectorize (12 ns per element of |z| and its
# derivative in a loop, against 1-2 ns for this)
_HYPOT_HI, _HYPOT_LO = 2.0 ** 500, 2.0 ** -500


def _ir_hypot(builder, x, y):
    fabs = builder.module.declare_intrinsic("llvm.fabs", [_F64])
    ax, ay = builder.call(fabs, [x]), builder.call(fabs, [y])
    x_bigger = builder.fcmp_unordered(">", ax, ay)
    big, small = builder.select(x_bigger, ax, ay), builder.select(x_bigger, ay, ax)
    scale = builder.select(builder.fcmp_ordered(">", big, _const(_HYPOT_HI)), _const(2.0 ** -600),
                           builder.select(builder.fcmp_ordered("<", big, _const(_HYPOT_LO)),
                                          _const(2.0 ** 600), _const(1.0)))
    b, sm = builder.fmul(big, scale), builder.fmul(small, scale)
    fma = builder.module.declare_intrinsic("llvm.fma", [_F64], ir.FunctionType(_F64, [_F64] * 3))
    root = _ir_call(builder, "llvm.sqrt", builder.call(fma, [b, b, builder.fmul(sm, sm)]))
    r = builder.fdiv(root, scale)
    inf = builder.or_(builder.fcmp_ordered("==", ax, _const(math.inf)),
                      builder.fcmp_ordered("==", ay, _const(math.inf)))
    return builder.select(inf, _const(math.inf), r)


def _float_intrinsic(emit, doc, arity=1):
    """A function of `arity` numbers computed as float64 by `emit(builder, *args)`. (Typing
    functions take named parameters: a *args one would pass the call's arguments as a tuple.)"""
    def typed(*xs):
        if not all(isinstance(t, (types.Number, types.Boolean)) for t in xs):
            return None

        def codegen(context, builder, signature, args):
            return emit(builder, *(context.cast(builder, v, t, types.float64) for v, t in zip(args, signature.args)))
        return types.float64(*xs), codegen

    if arity == 1:
        def fn(typingctx, x):
            return typed(x)
    else:
        def fn(typingctx, x, y):
            return typed(x, y)
    fn = intrinsic(fn)
    fn.__doc__ = doc
    return fn


exp = _float_intrinsic(_ir_exp, "e**x, vectorizable (max relative error 2.2e-16 against NumPy)")
expm1 = _float_intrinsic(_ir_expm1, "e**x - 1 without cancellation near 0")
tanh = _float_intrinsic(_ir_tanh, "tanh(x) from expm1")
sin = _float_intrinsic(_ir_sin, "sin(x), vectorizable, within 1 ulp for every double")
cos = _float_intrinsic(_ir_cos, "cos(x), vectorizable, within 1 ulp for every double")
log = _float_intrinsic(_ir_log, "log(x), vectorizable, within 0.8 ulp (fdlibm's method)")
log1p = _float_intrinsic(_ir_log1p, "log(1 + x) without cancellation, vectorizable, within 1.2 ulp")
hypot = _float_intrinsic(_ir_hypot, "sqrt(x*x + y*y) without overflow or underflow, vectorizable, within 1 ulp", 2)


def _extremum(greater):
    """np.maximum (greater=True) / np.minimum of two scalars: NaN if either is NaN."""
    @intrinsic
    def fn(typingctx, a, b):
        if not all(isinstance(t, (types.Number, types.Boolean)) for t in (a, b)):
            return None
        ty = typingctx.unify_pairs(a, b)
        if ty is None:
            return None

        def codegen(context, builder, signature, args):
            x, y = (context.cast(builder, v, t, ty) for v, t in zip(args, signature.args))
            op = ">=" if greater else "<="
            if isinstance(ty, types.Float):
                keep = builder.or_(builder.fcmp_ordered(op, x, y), builder.fcmp_unordered("!=", x, x))
            else:
                cmp = builder.icmp_signed if isinstance(ty, types.Integer) and ty.signed else builder.icmp_unsigned
                keep = cmp(op, x, y)
            return builder.select(keep, x, y)
        return ty(a, b), codegen
    return fn


maximum = _extremum(True)
minimum = _extremum(False)


@intrinsic
def floordiv(typingctx, a, b):
    """a // b of floats, NumPy's (npy_divmod): the quotient of a - fmod(a, b), snapped to the
    nearest integer, with its divisions exact. Python's `//` in a kernel divides twice by b,
    which the kernels' `arcp` flag lets LLVM turn into one reciprocal and two products:
    3.0 // -1e-300 gave -2.9999999999999996e+300."""
    if not all(isinstance(t, (types.Float, types.Integer, types.Boolean)) for t in (a, b)):
        return None
    ty = typingctx.unify_pairs(a, b)
    ty = ty if isinstance(ty, types.Float) else types.float64

    def codegen(context, builder, signature, args):
        x, y = (context.cast(builder, v, t, ty) for v, t in zip(args, signature.args))
        lty = x.type
        zero, one, half = (ir.Constant(lty, c) for c in (0.0, 1.0, 0.5))
        floor = builder.module.declare_intrinsic("llvm.floor", [lty])
        copysign = builder.module.declare_intrinsic("llvm.copysign", [lty], ir.FunctionType(lty, [lty, lty]))
        # Numba's fastmath pass flags every floating-point instruction that has no flags:
        # "contract" (nothing here to fuse) keeps "arcp" off these
        f = _STRICT
        mod = builder.frem(x, y, flags=f)
        div = builder.fdiv(builder.fsub(x, mod, flags=f), y, flags=f)
        # a remainder of the other sign than the divisor: one less
        flip = builder.and_(builder.fcmp_unordered("!=", mod, zero, flags=f),
                            builder.xor(builder.fcmp_ordered("<", y, zero, flags=f),
                                        builder.fcmp_ordered("<", mod, zero, flags=f)))
        div = builder.select(flip, builder.fsub(div, one, flags=f), div)
        fl = builder.call(floor, [div])
        fl = builder.select(builder.fcmp_ordered(">", builder.fsub(div, fl, flags=f), half, flags=f),
                            builder.fadd(fl, one, flags=f), fl)
        # a zero quotient has the sign of a / b
        sign = builder.fmul(builder.call(copysign, [one, x]), builder.call(copysign, [one, y]), flags=f)
        return builder.select(builder.fcmp_ordered("==", div, zero, flags=f), builder.call(copysign, [zero, sign]), fl)
    return ty(a, b), codegen


@intrinsic
def cbrt(typingctx, a):
    """The real cube root: the C library's cbrt, then one Newton step whose residual x - y^3 is
    computed exactly (y^2 as a sum of two doubles by fused multiply-adds), in instructions LLVM
    may not reassociate. glibc's cbrt is off by up to 2 ulp (27 gave 3.0000000000000004; 1,816
    of 3,500 random arguments not correctly rounded); with the step 2 were, both subnormal, by
    1 ulp (NumPy's SIMD cbrt on this machine: 16). Numba's own np.cbrt is a power 1/3 (up to ~1e-14
    relative), and a power written in a kernel cannot be corrected: the kernels' reassociation
    folds pow(x, 1/3) cubed back into x. float32: cbrtf, and the step in float64."""
    if not isinstance(a, (types.Float, types.Integer, types.Boolean)):
        return None
    ty = a if a == types.float32 else types.float64

    def codegen(context, builder, signature, args):
        x = context.cast(builder, args[0], signature.args[0], ty)
        lty = x.type
        name = "cbrtf" if ty == types.float32 else "cbrt"
        fn = builder.module.globals.get(name) or ir.Function(builder.module, ir.FunctionType(lty, [lty]), name)
        y = builder.call(fn, [x])
        if ty == types.float32:
            return y
        f = _STRICT
        fma = builder.module.declare_intrinsic("llvm.fma", [lty], ir.FunctionType(lty, [lty, lty, lty]))
        t_hi = builder.fmul(y, y, flags=f)
        t_lo = builder.call(fma, [y, y, builder.fneg(t_hi, flags=f)])        # y^2 = t_hi + t_lo
        resid = builder.call(fma, [t_hi, y, builder.fneg(x, flags=f)])       # t_hi y - x
        resid = builder.call(fma, [t_lo, y, resid])                          # + t_lo y
        step = builder.fdiv(resid, builder.fmul(ir.Constant(lty, 3.0), t_hi, flags=f), flags=f)
        better = builder.fsub(y, step, flags=f)
        # zeros, infinities and NaN (and subnormal roots' tiny squares) keep the library's value
        ok = builder.and_(builder.fcmp_ordered("!=", t_hi, ir.Constant(lty, 0.0), flags=f),
                          builder.fcmp_ordered("<", builder.call(
                              builder.module.declare_intrinsic("llvm.fabs", [lty]), [better]),
                              ir.Constant(lty, math.inf), flags=f))
        return builder.select(ok, better, y)
    return ty(a), codegen


if numba.config.DISABLE_JIT:
    # NUMBA_DISABLE_JIT=1 runs generated kernels as plain Python (for pdb and readable
    # tracebacks); intrinsics have no Python form, so use NumPy's functions there.
    cbrt = np.cbrt
    exp, expm1, tanh, sin, cos, log, log1p = np.exp, np.expm1, np.tanh, np.sin, np.cos, np.log, np.log1p
    hypot = np.hypot
    maximum, minimum = np.maximum, np.minimum
    floordiv = np.floor_divide


# ---- SciPy's special functions -------------------------------------------------------------------
# The scalar language's special functions (jitgraph/ops/scalar.py) that Numba's math lacks.
# Each is written with arithmetic and the `math` module only, so that the same Python source
# compiles for the CPU (the `njit` functions below) and for the GPU: codegen/cuda_runtime.py
# builds device functions from each function's `.py_func`, with the device versions of the
# helpers it calls. They compute in float64 (a float32 program rounds the result once) and
# give SciPy's values at the edges (NaN, infinities, poles, the ends of the domain) without
# raising, also when run as Python. tests/test_special.py measures them against SciPy.
SPECIAL = {}     # name in the scalar language -> compiled function
HELPERS = {}     # the helpers they call, by name (for the GPU build)
_SPECIAL_OPTS = dict(error_model="numpy")    # not inlined: callers' fastmath flags stay out

PI = 3.141592653589793
SQRT_PI_2 = 0.886226925452758         # sqrt(pi) / 2
TWO_SQRT_PI = 1.1283791670955126      # 2 / sqrt(pi)
SQRT1_2 = 0.7071067811865476
SQRT1_2_LO = -4.833646656726457e-17   # 1 / sqrt(2) - SQRT1_2
SQRT1_2_HI_SPLIT = 0.7071067839860916  # SQRT1_2's Dekker halves (26 and 27 bits)
SQRT1_2_LO_SPLIT = SQRT1_2 - SQRT1_2_HI_SPLIT
LOG_SQRT_2PI = 0.9189385332046728     # log(sqrt(2 pi))
EULER = 0.5772156649015329

# psi(x) = sum_n DIGAMMA_ROOT_SERIES[n-1] (x - x0)^n near its positive root x0 = ROOT_HI + ROOT_LO;
# the coefficients are (-1)^(n+1) zeta(n+1, x0) (Hurwitz zeta), computed to 40 digits.
DIGAMMA_ROOT_HI = 1.4616321449683622
DIGAMMA_ROOT_LO = 9.549995429965697e-17
DIGAMMA_ROOT_SERIES = (
    0.9676722454476212, -0.4427631689835921, 0.258499760955651, -0.16394270544240652,
    0.10782405069126237, -0.07219956125645471, 0.04880428816414311, -0.03316112647484736,
    0.022597648232218104, -0.01542476590494896, 0.010538791616612175, -0.007204534386356869,
    0.004926781395729853, -0.003369801655439328, 0.002305126326734928, -0.0015769367714301972,
    0.0010788252019162967, -0.0007380709389960052, 0.000504953265834602, -0.0003454680251063077,
    0.00023635601564027053, -0.00016170622091974803, 0.0001106337276874741, -7.569179582195066e-05,
    5.178575795222081e-05, -3.5430070947659604e-05, 2.424006611860132e-05, -1.6584242271854135e-05,
    1.134638458466385e-05, -7.762817668462094e-06, 5.3110609208898636e-06, -3.6336507898010456e-06,
    2.486022733129538e-06, -1.7008538854332607e-06, 1.1636675363548843e-06, -7.96142543124197e-07,
    5.446941930669446e-07, -3.7266161283438227e-07, 2.549626552021554e-07)
# the same about psi's root x1 = NEG_ROOT_HI + NEG_ROOT_LO in (-1, 0), for |x - x1| < 0.15 (where
# the reflection formula would cancel): psi^(n)(x1) / n!
DIGAMMA_NEG_ROOT_HI = -0.5040830082644554
DIGAMMA_NEG_ROOT_LO = -8.15428206243813e-18
DIGAMMA_NEG_ROOT_SERIES = (
    8.939798558792134, -0.8093454625306507, 32.258572064915505, -2.761011648790828,
    128.27342343090902, -14.70672173553036, 513.2704629562862, -75.37700066344631,
    2055.5357119463315, -368.5783503832191, 8234.667099203069, -1743.364608867363,
    32997.785655255044, -8051.818155363498, 132262.95480834588, -36529.94596948565,
    530280.3912420176, -163451.79342700253, 2126602.3725968753, -723318.8861804305,
    8530604.878543982, -3172131.3155744765, 34228316.69580112, -13807481.997263888,
    137373435.87411496, -59721085.411294304, 551481251.858545, -256915093.79875362,
    2214464568.013911, -1100067148.941634, 8894384049.698206, -4691108165.464208,
    35733149689.19971, -19932951831.31562, 143593265361.61188)
# log Gamma(1 + a) = -EULER a + sum_k LGAM1P_SERIES[k-2] a^k for |a| <= 0.2: (-1)^k zeta(k) / k
LGAM1P_SERIES = (
    0.8224670334241132, -0.40068563438653143, 0.27058080842778454, -0.20738555102867398,
    0.1695571769974082, -0.1440498967688461, 0.12550966952474304, -0.11133426586956469,
    0.1000994575127818, -0.09095401714582904, 0.083353840546109, -0.0769325164113522,
    0.07143294629536133, -0.06666870588242046, 0.06250095514121304, -0.058823978658684585,
    0.055555767627403614, -0.05263167937961666, 0.05000004769810169, -0.047619070330142226,
    0.04545455629320467, -0.04347826605304026, 0.04166666915034121, -0.04000000119214014)
# Bernoulli numbers B_2k / (2k)!, k = 1..10, for the Euler-Maclaurin tail of the Hurwitz zeta
BERNOULLI_2K_FACT = (
    1.0 / 12, -1.0 / 720, 1.0 / 30240, -1.0 / 1209600, 1.0 / 47900160, -691.0 / 1307674368000,
    1.0 / 74724249600, -3617.0 / 10670622842880000, 43867.0 / 5109094217170944000,
    -174611.0 / 802857662698291200000)

MAX_ITERATIONS = 100000      # series and continued fractions (they converge in O(sqrt(a)) steps)


def _special(fn):
    """Compile a special function of the scalar language (and keep it for the GPU build)."""
    compiled = njit(**_SPECIAL_OPTS)(fn)
    SPECIAL[fn.__name__] = compiled
    return compiled


def _helper(fn):
    compiled = njit(**_SPECIAL_OPTS)(fn)
    HELPERS[fn.__name__] = compiled
    return compiled


@_helper
def _nearest(x):
    # the integer nearest x as a float (ties up); exact for |x| < 2**52, where it is used
    return (x + 0.5) // 1.0


@_helper
def _stirling_corr(x):
    # lgamma(x) - ((x - 1/2) log x - x + log sqrt(2 pi)) for x >= 10; the first omitted term
    # of the series is below 3e-17 there
    r = 1.0 / x
    r2 = r * r
    return r * (1.0 / 12 + r2 * (-1.0 / 360 + r2 * (1.0 / 1260 + r2 * (-1.0 / 1680 + r2 * (
        1.0 / 1188 + r2 * (-691.0 / 360360 + r2 * (1.0 / 156)))))))


@_helper
def _log1pmx(t):
    # log(1 + t) - t without the cancellation near t = 0: with u = t / (2 + t),
    # log(1 + t) = 2 atanh(u) = 2u + 2u^3/3 + 2u^5/5 + ... and t = 2u / (1 - u), so
    # log(1 + t) - t = -2u^2 / (1 - u) + 2u^3 (1/3 + u^2/5 + u^4/7 + ...)
    if abs(t) >= 0.5:
        return math.log1p(t) - t
    u = t / (2.0 + t)
    u2 = u * u
    s = 0.0
    p = 1.0
    k = 3.0
    while True:
        term = p / k
        s += term
        if abs(term) <= 1e-17 * abs(s):
            break
        p *= u2
        k += 2.0
    return -2.0 * u2 / (1.0 - u) + 2.0 * u * u2 * s


@_helper
def _log_ratio_mx(r, t):
    # log(r) - t for r = 1 + t, each computed from the caller's operands with relative accuracy
    # (r as a ratio, t as a difference): log1pmx(t) near r = 1, log(r) - t away from it
    if abs(t) < 0.5:
        return _log1pmx(t)
    return math.log(r) - t


@_helper
def _lgam1p(a):
    # log Gamma(1 + a), accurate for small |a| (where lgamma(1 + a) would lose 1 + a's rounding)
    if abs(a) > 0.2:
        return math.lgamma(1.0 + a)
    s = 0.0
    p = a * a
    for c in LGAM1P_SERIES:
        s += c * p
        p *= a
    return s - EULER * a


@_helper
def _lgamma(x):
    # log |Gamma(x)|, +inf at the poles (where Python's math.lgamma raises)
    if x <= 0.0 and x == x // 1.0:
        return math.inf
    return math.lgamma(x)


@_special
def gammaln(x):
    """log |Gamma(x)|: +inf at the poles, and SciPy's -inf at -inf (where Numba's math.lgamma
    gives NaN and Python's raises)."""
    x = float(x)
    if x == -math.inf:
        return -math.inf
    return _lgamma(x)


@_special
def erfinv(x):
    """The inverse of erf on (-1, 1); +-inf at +-1, NaN outside."""
    x = float(x)
    ax = abs(x)
    if not ax < 1.0:
        if ax == 1.0:
            return math.copysign(math.inf, x)
        return math.nan          # |x| > 1, or NaN
    if ax < 1e-4:
        # sqrt(pi)/2 (x + pi x^3/12 + 7 pi^2 x^5/480): the next term is below 1e-17 relative
        x2 = x * x
        return SQRT_PI_2 * x * (1.0 + x2 * (0.2617993877991494 + x2 * 0.14393173084921979))
    # Winitzki's closed form (about 2e-3 relative), then Halley steps on erf(y) = |x|; above
    # 0.5 on erfc(y) = 1 - |x|, where 1 - |x| is exact and erf(y) has lost the digits of y
    l = math.log1p(-ax * ax) if ax < 0.5 else math.log((1.0 - ax) * (1.0 + ax))
    t = 4.330746750799873 + 0.5 * l          # 2 / (pi a) + l / 2, a = 0.147
    v = -l / 0.147
    if t > 0.0:
        y = math.sqrt(v / (math.sqrt(t * t + v) + t))
    else:
        y = math.sqrt(math.sqrt(t * t + v) - t)
    for _ in range(3):
        if ax <= 0.5:
            f = math.erf(y) - ax
        else:
            f = (1.0 - ax) - math.erfc(y)
        d = f / (TWO_SQRT_PI * math.exp(-y * y))
        y = y - d / (1.0 + y * d)
    return math.copysign(y, x)


@_helper
def _split(x):
    # x = hi + lo with hi holding 26 bits (Dekker), so products of halves are exact
    c = 134217729.0 * x
    hi = c - (c - x)
    return hi, x - hi


@_special
def ndtr(x):
    """The standard normal CDF: erf near 0, erfc in the tails, where the rounding of the
    argument x / sqrt(2) is corrected (it would cost 2 t^2 ulps at t = x / sqrt(2))."""
    x = float(x)
    t = x * SQRT1_2
    z = abs(t)
    if z < SQRT1_2:
        return 0.5 + 0.5 * math.erf(t)
    y = 0.5 * math.erfc(z)
    if y > 0.0 and z < 27.0:
        # |x| / sqrt(2) = z + e exactly (Dekker's product, and the low part of 1 / sqrt(2)), and
        # erfc(z + e) = erfc(z) (1 - e 2/sqrt(pi) exp(-z^2) / erfc(z)) to first order
        ax = abs(x)
        xh, xl = _split(ax)
        e = ((xh * SQRT1_2_HI_SPLIT - z) + xh * SQRT1_2_LO_SPLIT + xl * SQRT1_2_HI_SPLIT
             + xl * SQRT1_2_LO_SPLIT) + ax * SQRT1_2_LO
        y -= e * (TWO_SQRT_PI * 0.5) * math.exp(-z * z)
    return 1.0 - y if t > 0.0 else y


@_special
def log_ndtr(x):
    """log of the standard normal CDF, accurate in both tails."""
    x = float(x)
    if x > -1.0:
        # log(1 - q), q = ndtr(-x) computed directly (no digits lost to 1 - q)
        return math.log1p(-ndtr(-x))
    if x > -20.0:
        return math.log(ndtr(x))
    # ndtr(x) = phi(x) / -x * (1 - 1/x^2 + 3/x^4 - 15/x^6 + ...); at x <= -20 the asymptotic
    # series reaches 1e-17 within 12 terms
    r = 1.0 / (x * x)
    s = 0.0
    term = 1.0
    k = 1.0
    while k < 40.0:
        term *= -(2.0 * k - 1.0) * r
        s += term
        if abs(term) <= 1e-17:
            break
        k += 1.0
    return -0.5 * x * x - math.log(-x) - LOG_SQRT_2PI + math.log1p(s)


@_helper
def _digamma_positive(x):
    # psi(x) for x > 0: the series about the root x0 on [x0 - 1/2, x0 + 1/2], reached by the
    # recurrence psi(x + 1) = psi(x) + 1/x; the asymptotic series from 10 on
    if x >= 10.0:
        r = 1.0 / (x * x)
        tail = r * (1.0 / 12 + r * (-1.0 / 120 + r * (1.0 / 252 + r * (-1.0 / 240 + r * (
            1.0 / 132 + r * (-691.0 / 32760 + r * (1.0 / 12)))))))
        return math.log(x) - 0.5 / x - tail
    shift = 0.0
    while x > DIGAMMA_ROOT_HI + 0.5:
        x -= 1.0
        shift += 1.0 / x
    if x < DIGAMMA_ROOT_HI - 0.5:
        shift = -1.0 / x
        x += 1.0
    d = (x - DIGAMMA_ROOT_HI) - DIGAMMA_ROOT_LO
    s = 0.0
    for k in range(len(DIGAMMA_ROOT_SERIES) - 1, -1, -1):
        s = s * d + DIGAMMA_ROOT_SERIES[k]
    return s * d + shift


@_special
def digamma(x):
    """psi(x) = d/dx log Gamma(x): NaN at the poles (non-positive integers), -inf at +0."""
    x = float(x)
    if x != x or x == math.inf:
        return x
    if x == 0.0:
        return math.copysign(math.inf, -x)
    if x > 0.0:
        return _digamma_positive(x)
    if x == -math.inf or x == x // 1.0:
        return math.nan
    d = (x - DIGAMMA_NEG_ROOT_HI) - DIGAMMA_NEG_ROOT_LO
    if abs(d) < 0.15:
        s = 0.0
        for k in range(len(DIGAMMA_NEG_ROOT_SERIES) - 1, -1, -1):
            s = s * d + DIGAMMA_NEG_ROOT_SERIES[k]
        return s * d
    # reflection: psi(x) = psi(1 - x) - pi cot(pi x), with x - round(x) for an exact argument
    r = x - _nearest(x)
    return _digamma_positive(1.0 - x) - PI / math.tan(PI * r)


@_helper
def _hurwitz_zeta(s, q):
    # zeta(s, q) = sum_k (q + k)^-s for integer s >= 2 and q not a non-positive integer: the
    # terms up to q + n >= 2s + 20, then the Euler-Maclaurin tail (its terms shrink like
    # (s + 2j)^2 / (2 pi (q + n))^2, below 1e-17 relative after 10)
    total = 0.0
    while q < 2.0 * s + 20.0:
        total += (1.0 / q) ** s
        q += 1.0
    # the tail, factored as q^(1-s) (1/(s-1) + 1/(2q) + sum_j B_2j/(2j)! s...(s+2j-2) q^-2j) so
    # that it does not underflow before the result does
    inv = 1.0 / q
    inv2 = inv * inv
    tail = 1.0 / (s - 1.0) + 0.5 * inv
    fac = s * inv2                      # s (s+1) ... (s+2j-2) q^-2j, j = 1
    j = 0
    for b in BERNOULLI_2K_FACT:
        tail += b * fac
        fac *= (s + 2.0 * j + 1.0) * (s + 2.0 * j + 2.0) * inv2
        j += 1
    total += tail * inv ** (s - 1.0)
    return total


@_special
def polygamma(n, x):
    """The n-th derivative of digamma: (-1)^(n+1) n! zeta(n+1, x)."""
    x = float(x)
    k = int(n)
    if k == 0:
        return digamma(x)
    if x != x or k < 0:
        return math.nan
    sign = 1.0 if k % 2 == 1 else -1.0
    if x == math.inf:
        return 0.0
    if x == -math.inf or x <= 0.0 and x == x // 1.0:
        return sign * math.inf          # the poles (and SciPy's value at -inf)
    if x < 0.0 and k == 1:
        # reflection: psi1(x) + psi1(1 - x) = pi^2 / sin^2(pi x)
        sr = math.sin(PI * (x - _nearest(x)))
        return PI * PI / (sr * sr) - _hurwitz_zeta(2.0, 1.0 - x)
    return sign * math.gamma(k + 1.0) * _hurwitz_zeta(k + 1.0, x)


@_helper
def _betaln_finite(a, b):
    # log |B(a, b)| for finite a <= b, a not a non-positive integer
    if a <= 0.0 or a < 1e-300:
        return _lgamma(a) + _lgamma(b) - _lgamma(a + b)
    if a >= 10.0:
        # both large: Stirling's formula, arranged so that nothing large cancels
        c = a + b
        corr = _stirling_corr(a) + _stirling_corr(b) - _stirling_corr(c)
        return ((a - 0.5) * math.log(a / c) - (b - 0.5) * math.log1p(a / b) - 0.5 * math.log(c)
                + LOG_SQRT_2PI + corr)
    if b >= 10.0:
        # lgamma(b) - lgamma(a + b) from Stirling's formula for both
        c = a + b
        corr = _stirling_corr(b) - _stirling_corr(c)
        return math.lgamma(a) - (b - 0.5) * math.log1p(a / b) - a * math.log(c) + a + corr
    c = a + b
    g = math.gamma(a) * (math.gamma(b) / math.gamma(c))
    if g > 0.0 and g < math.inf:
        return math.log(g)
    return _lgamma(a) + _lgamma(b) - _lgamma(c)


@_helper
def _betaln_pole(p, q):
    # log |B(p, q)| for p a non-positive integer or -inf, as SciPy (Cephes) defines it: finite
    # only for an integer q with 1 - p - q > 0, where |B(p, q)| = B(1 - p - q, q); else +inf
    # (also for a NaN q)
    if p != -math.inf and q == q // 1.0 and 1.0 - p - q > 0.0:
        r = 1.0 - p - q
        return _betaln_finite(min(r, q), max(r, q))
    return math.inf


@_special
def betaln(a, b):
    """log |B(a, b)| = log |Gamma(a) Gamma(b) / Gamma(a + b)|, without the cancellation of
    the log-gammas when an argument is large; SciPy's values at the poles and infinities."""
    a = float(a)
    b = float(b)
    if a <= 0.0 and (a == a // 1.0 or a == -math.inf):
        return _betaln_pole(a, b)
    if b <= 0.0 and (b == b // 1.0 or b == -math.inf):
        return _betaln_pole(b, a)
    if a > b:
        a, b = b, a
    if a != a or b != b:
        return math.nan
    if b == math.inf:
        if a == math.inf:
            return math.nan
        return -math.inf if a > 0.0 else math.inf
    return _betaln_finite(a, b)


@_helper
def _igam_prefactor(a, x):
    # x^a e^-x / Gamma(a) for a > 0, x > 0
    if a >= 10.0:
        # x^a e^-x / Gamma(a) = exp(a log1pmx((x - a) / a) - corr(a)) sqrt(a / (2 pi)): no large
        # logs cancel, so the result keeps its relative accuracy near the peak x = a
        lr = _log_ratio_mx(x / a, (x - a) / a)
        return math.exp(a * lr - _stirling_corr(a)) * math.sqrt(a / (2.0 * PI))
    if x < 700.0 and a > 1e-300:
        p = x ** a * math.exp(-x)
        if p > 1e-300:
            return p / math.gamma(a)
    return math.exp(a * math.log(x) - x - _lgamma(a))


@_helper
def _igam_series(a, x):
    # P(a, x) = x^a e^-x / Gamma(a + 1) * sum_n x^n / ((a + 1) ... (a + n)), for x < a + 1
    term = 1.0
    s = 1.0
    n = 1.0
    while n < MAX_ITERATIONS:
        term *= x / (a + n)
        s += term
        if term <= 1e-17 * s:
            break
        n += 1.0
    if a < 1.0:
        # x^a e^-x / Gamma(a + 1) directly: through Gamma(a) / a, a tiny a would round twice
        return math.exp(a * math.log(x) - x - _lgam1p(a)) * s
    return _igam_prefactor(a, x) * s / a


@_helper
def _igamc_fraction(a, x):
    # Q(a, x) = x^a e^-x / Gamma(a) / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / ...)),
    # evaluated by the modified Lentz method, for x >= a + 1 > 1
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    i = 1.0
    while i < MAX_ITERATIONS:
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        if abs(d) < tiny:
            d = tiny
        c = b + an / c
        if abs(c) < tiny:
            c = tiny
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) <= 1e-16:
            break
        i += 1.0
    return _igam_prefactor(a, x) * h


@_helper
def _igamc_small_x(a, x):
    # Q(a, x) for x < 1.1 and x < a + 1, where 1 - P would cancel when P is near 1 (a near 0):
    # 1 - x^a / Gamma(a + 1) = -expm1(a log x - lgamma(1 + a)), minus the rest of P's series
    # x^a / Gamma(a) * sum_{n >= 1} (-x)^n / (n! (a + n))
    s = 0.0
    term = 1.0
    n = 1.0
    while n < 200.0:
        term *= -x / n
        t = term / (a + n)
        s += t
        if abs(t) <= 1e-17 * abs(s):
            break
        n += 1.0
    lx = math.log(x)
    head = -math.expm1(a * lx - _lgam1p(a))
    return head - math.exp(a * lx - _lgamma(a)) * s


@_helper
def _igam_edge(a, x, lower):
    # NaN, negative and infinite arguments, and a = 0 / x = 0 (SciPy's values); 2.0 for "none"
    if a != a or x != x or a < 0.0 or x < 0.0:
        return math.nan
    if a == 0.0:
        if x > 0.0:
            return 1.0 if lower else 0.0
        return math.nan
    if x == 0.0:
        return 0.0 if lower else 1.0
    if a == math.inf:
        if x == math.inf:
            return math.nan
        return 0.0 if lower else 1.0
    if x == math.inf:
        return 1.0 if lower else 0.0
    return 2.0


@_special
def gammainc(a, x):
    """The regularized lower incomplete gamma function P(a, x)."""
    a = float(a)
    x = float(x)
    edge = _igam_edge(a, x, True)
    if edge != 2.0:
        return edge
    if x > 1.0 and x > a:
        return 1.0 - _igamc_fraction(a, x)
    return _igam_series(a, x)


@_special
def gammaincc(a, x):
    """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x)."""
    a = float(a)
    x = float(x)
    edge = _igam_edge(a, x, False)
    if edge != 2.0:
        return edge
    if x < 1.0 or x < a:
        if x < 1.1 and a < 0.5:
            return _igamc_small_x(a, x)
        return 1.0 - _igam_series(a, x)
    return _igamc_fraction(a, x)


@_helper
def _ibeta_prefactor(a, b, x, y):
    # x^a y^b / B(a, b) for y = 1 - x (both given exactly), a, b > 0, 0 < x < 1
    if a >= 10.0 and b >= 10.0:
        # with x = p0 (1 + u), y = q0 (1 + v), p0 = a / (a + b), q0 = b / (a + b): a u + b v = 0,
        # so x^a y^b / (p0^a q0^b) = exp(a log1pmx(u) + b log1pmx(v)), and Stirling gives the rest
        c = a + b
        lu = _log_ratio_mx(x * c / a, (x * c - a) / a)
        lv = _log_ratio_mx(y * c / b, (y * c - b) / b)
        corr = _stirling_corr(a) + _stirling_corr(b) - _stirling_corr(c)
        return (math.exp(a * lu + b * lv - corr)
                * math.sqrt(a / c * b / (2.0 * PI)))
    if a < 10.0 and b < 10.0 and a > 1e-300 and b > 1e-300:
        p = x ** a * y ** b
        if p > 1e-300:
            return p * (math.gamma(a + b) / math.gamma(a) / math.gamma(b))
    lx = math.log1p(-y) if y < 0.5 else math.log(x)
    ly = math.log1p(-x) if x < 0.5 else math.log(y)
    return math.exp(a * lx + b * ly - betaln(a, b))


@_helper
def _ibeta_fraction(a, b, x, limit):
    # the continued fraction of I_x(a, b) a B(a, b) / (x^a (1 - x)^b) (Abramowitz-Stegun 26.5.8),
    # by the modified Lentz method: (value, converged within `limit` steps); it converges fast
    # for x < (a + 1) / (a + b + 2), and more slowly above
    tiny = 1e-300
    c = 1.0
    d = 1.0 - (a + b) * x / (a + 1.0)
    if abs(d) < tiny:
        d = tiny
    d = 1.0 / d
    h = d
    m = 1.0
    while m < limit:
        m2 = 2.0 * m
        an = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2))
        d = 1.0 + an * d
        if abs(d) < tiny:
            d = tiny
        c = 1.0 + an / c
        if abs(c) < tiny:
            c = tiny
        d = 1.0 / d
        h *= d * c
        an = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))
        d = 1.0 + an * d
        if abs(d) < tiny:
            d = tiny
        c = 1.0 + an / c
        if abs(c) < tiny:
            c = tiny
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) <= 1e-16:
            return h, True
        m += 1.0
    return h, False


@_helper
def _ibeta(a, b, x, complement):
    # I_x(a, b), or 1 - I_x(a, b) when `complement`
    if a != a or b != b or x != x or a < 0.0 or b < 0.0 or x < 0.0 or x > 1.0:
        return math.nan
    if a == 0.0 and b == 0.0 or a == math.inf and b == math.inf:
        return math.nan
    if a == 0.0 or b == math.inf:
        r = 1.0 if x > 0.0 else 0.0
    elif b == 0.0 or a == math.inf:
        r = 1.0 if x >= 1.0 else 0.0
    elif x == 0.0:
        r = 0.0
    elif x == 1.0:
        r = 1.0
    else:
        y = 1.0 - x
        if x > (a + 1.0) / (a + b + 2.0):
            # I_x(a, b) = 1 - I_(1-x)(b, a): the fraction on the side where it converges fast
            a, b, x, y = b, a, y, x
            complement = not complement
        r = min(_ibeta_prefactor(a, b, x, y) * _ibeta_fraction(a, b, x, MAX_ITERATIONS)[0] / a, 1.0)
        if complement and r > 0.5:
            # 1 - r would lose digits: the other side's fraction, if it converges soon enough
            h, done = _ibeta_fraction(b, a, y, 200.0 + 20.0 * math.sqrt(a + b))
            if done:
                return _ibeta_prefactor(b, a, y, x) * h / b
        return 1.0 - r if complement else r
    return 1.0 - r if complement else r


@_special
def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b)."""
    return _ibeta(float(a), float(b), float(x), False)


@_special
def betaincc(a, b, x):
    """1 - I_x(a, b), computed directly (no digits lost where I_x(a, b) is near 1)."""
    return _ibeta(float(a), float(b), float(x), True)


enable_cache(list(HELPERS.values()) + list(SPECIAL.values()), helpers_cache_dir)
