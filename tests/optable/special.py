"""Rows: scipy.special's ufuncs and its logsumexp/softmax/log_softmax/polygamma."""
import numpy as np
import scipy.special as sc

from . import BINARY_SHAPES, UNARY_SHAPES, nondiff, op


op("expit", lambda x: sc.expit(x * 3.0), *UNARY_SHAPES)
op("logit", lambda x: sc.logit(x * 0.5 + 0.5), *UNARY_SHAPES, domain="unit")
op("log_expit", lambda x: sc.log_expit(x * 5.0), *UNARY_SHAPES)
op("erf", lambda x: sc.erf(x), *UNARY_SHAPES)
op("erfc", lambda x: sc.erfc(x * 2.0), *UNARY_SHAPES)
op("erfinv", lambda x: sc.erfinv(x), *UNARY_SHAPES, domain="unit")
op("erfinv-tail", lambda x: sc.erfinv(0.999 + x * 1e-3), ((4,),), domain="unit")
# (with a digamma term: the ONNX test expects the export of a program whose gradient uses
# digamma to name digamma, the first of its non-exportable ops)
op("gammaln", lambda x: sc.gammaln(x * 3.0) + sc.digamma(x + 3.0), *UNARY_SHAPES, domain="positive")
op("gammaln-negative", lambda x: sc.gammaln(x * 0.35 - 0.5) + sc.digamma(x + 3.0), ((2, 3),), domain="unit")
op("digamma", lambda x: sc.digamma(x * 4.0), *UNARY_SHAPES, domain="positive")
op("digamma-negative", lambda x: sc.digamma(x * 0.4 - 0.5), ((5,),), domain="unit")
op("psi", lambda x: sc.psi(x + 10.0), ((4,),))
# (SciPy's polygamma is float64 for float32 input: the rows convert back)
op("polygamma", lambda x: (sc.polygamma(1, x) + sc.polygamma(2, x * 3.0)).astype(x.dtype), ((2, 3),),
   domain="positive")
op("ndtr", lambda x: sc.ndtr(x * 2.0), *UNARY_SHAPES)
op("ndtr-tails", lambda x: sc.ndtr(x * 4.0 - 6.0) * 1e6, ((5,),), domain="unit")
op("log_ndtr", lambda x: sc.log_ndtr(x * 3.0), *UNARY_SHAPES)
op("log_ndtr-tails", lambda x: sc.log_ndtr(x * 10.0 - 25.0) + sc.log_ndtr(x + 7.0) * 1e9, ((4,),),
   domain="unit")
op("xlogy", lambda x, y: sc.xlogy(x, y), *BINARY_SHAPES, domain=("real", "positive"))
# (scipy.special's float64 loops come first: xlogy(float32 array, 2.0) is float64, hence x * 0 + 2.0)
op("xlogy-zero", lambda x, y: sc.xlogy(x * 0.0, y) + sc.xlogy(x, x * 0.0 + 2.0), ((3, 4), (4,)),
   domain=("real", "positive"))
op("xlog1py", lambda x, y: sc.xlog1py(x, y), *BINARY_SHAPES, domain=("real", "positive"))
op("entr", lambda x: sc.entr(x), *UNARY_SHAPES, domain="positive")
op("betaln", lambda a, b: sc.betaln(a, b * 30.0), ((3, 4), (3, 4)), ((3, 4), (4,)), domain="positive")
op("gammainc", lambda a, x: sc.gammainc(a * 3.0, x * 2.0), ((3, 4), (3, 4)), ((2, 3), (3,)),
   domain="positive", argnums=(1,))
op("gammaincc", lambda a, x: sc.gammaincc(a, x * 3.0), ((3, 4), (3, 4)), domain="positive", argnums=(1,))
op("gammainc-scalar-a", lambda x: sc.gammainc(np.full_like(x, 2.5), x)
   + sc.gammaincc(np.full_like(x, 0.3), x * 8.0), ((5,),), domain="positive")
op("betainc", lambda a, b, x: sc.betainc(a * 3.0, b, x * 0.5 + 0.5), ((3, 4), (3, 4), (3, 4)),
   ((3, 4), (4,), (3, 1)), domain=("positive", "positive", "unit"), argnums=(2,))
op("betaincc", lambda x: sc.betaincc(0.5, 20.0, x * 0.05 + 0.05), ((5,),), domain="unit")
# (digamma first, as in the gammaln rows: the gradient uses it, and the ONNX test expects the export
# to name the first of the program's non-exportable ops in name order)
op("gamma", lambda x: sc.digamma(x + 3.0) + sc.gamma(x * 2.0), *UNARY_SHAPES, domain="positive")
op("gamma-negative", lambda x: sc.digamma(x + 3.0) + sc.gamma(x * 0.4 - 1.5) + sc.gamma(x - 3.0), ((2, 3),),
   domain="unit")
op("sc.log1p-expm1", lambda x: sc.log1p(x) + sc.expm1(x * 2.0), ((5,),), ((2, 3),), domain="unit")
op("ndtri", lambda x: sc.ndtri(x * 0.5 + 0.5), *UNARY_SHAPES, domain="unit")
op("ndtri-tails", lambda x: sc.ndtri(np.exp(x * 20.0 - 30.0)) + sc.ndtri(1.0 - np.exp(x - 4.0)), ((5,),),
   domain="unit")
op("erfcx", lambda x: sc.erfcx(x * 3.0), *UNARY_SHAPES)
op("erfcx-large", lambda x: sc.erfcx(x * 4.0 + 12.0) * 10.0, ((5,),), domain="unit")
op("exprel", lambda x: sc.exprel(x * 3.0) + sc.exprel(x * 1e-3), ((2, 3),))
op("i0", lambda x: sc.i0(x * 4.0), *UNARY_SHAPES)
op("i0e", lambda x: sc.i0e(x * 4.0), *UNARY_SHAPES)
# (with an i0 / i0e term, as in the gammaln rows: I1's derivative uses I0)
op("i1", lambda x: sc.i1(x * 4.0) + sc.i0(x), *UNARY_SHAPES)
op("i1e", lambda x: sc.i1e(x * 4.0) + sc.i0e(x), *UNARY_SHAPES)
# (the fit beyond |x| = 12, either sign; I1's derivative near 0 by its series)
op("i0-i1-large", lambda x: sc.i0(x * 10.0 + 25.0) * 1e-12 + sc.i1(x * 10.0 - 25.0) * 1e-12
   + sc.i0e(x * 30.0 - 60.0) + sc.i1e(x * 30.0 + 60.0) + sc.i1(x * 0.05) + sc.i1e(x * 0.05), ((5,),), domain="unit")
op("np.i0", lambda x: np.i0(x * 3.0), ((5,),), ((2, 3),))
# (K0 and K1 together: each one's derivative uses the other; either side of x = 1, where the series
# give way to the fit, and far out)
op("k0-k1", lambda x: sc.k0(x * 0.8) + sc.k1(x * 1.5), *UNARY_SHAPES, domain="positive")
op("k0e-k1e", lambda x: sc.k0e(x * 0.8) + sc.k1e(x * 1.5), *UNARY_SHAPES, domain="positive")
op("k-large", lambda x: sc.k0(x * 10.0 + 20.0) * 1e9 + sc.k1(x * 5.0 + 30.0) * 1e13 + sc.k0e(x * 100.0 + 300.0)
   + sc.k1e(x * 0.3 + 0.3), ((5,),), domain="unit")
op("kl_div", lambda x, y: sc.kl_div(x, y), ((3, 4), (3, 4)), ((3, 1), (1, 4)), ((), (3,)), domain="positive")
op("rel_entr", lambda x, y: sc.rel_entr(x, y * 3.0), ((3, 4), (3, 4)), ((3, 4), (4,)), domain="positive")
op("huber", lambda d, r: sc.huber(d, r) + sc.pseudo_huber(d, r * 2.0), ((3, 4), (3, 4)), ((4,), (3, 4)),
   domain=("positive", "real"))
op("boxcox", lambda x, lm: sc.boxcox(x, lm + 1.0) + sc.boxcox1p(x, lm - 0.5), ((3, 4), (3, 4)), ((3, 4), ()),
   domain=("positive", "unit"))
op("inv_boxcox", lambda y, lm: sc.inv_boxcox(y, lm * 0.3) + sc.inv_boxcox1p(y, lm * 0.3), ((3, 4), (3, 4)),
   ((3, 4), (4,)), domain=("positive", "unit"))
# the Python functions, through the wrappers jitgraph installs in scipy.special
op("sc.logsumexp", lambda x: sc.logsumexp(x), ((5,),), ((2, 3),), weight=False)
op("sc.logsumexp-axis", lambda x: sc.logsumexp(x, axis=-1), ((2, 3),), ((3, 2, 4),))
op("sc.logsumexp-axes-keepdims", lambda x: sc.logsumexp(x, axis=(0, 2), keepdims=True), ((3, 2, 4),))
op("sc.logsumexp-b", lambda x, b: sc.logsumexp(x, axis=0, b=b), ((3, 4), (3, 4)), ((3, 4), (4,)),
   domain=("real", "positive"))
op("sc.logsumexp-sign", lambda x, b: sc.logsumexp(x, b=b - 1.0, axis=1, return_sign=True)[0],
   ((3, 4), (3, 4)), domain=("real", "positive"))
op("sc.softmax", lambda x: sc.softmax(x), ((5,),), ((2, 3),))
op("sc.softmax-axis", lambda x: sc.softmax(x * 3.0, axis=0), ((3, 4),))
op("sc.log_softmax", lambda x: sc.log_softmax(x), ((2, 3),))
op("sc.log_softmax-axis", lambda x: sc.log_softmax(x, axis=-1), ((3, 4),))

nondiff("logsumexp-sign", lambda x: sc.logsumexp(x, b=-np.ones(4), axis=-1, return_sign=True)[1], ((3, 4),))
nondiff("special-edges", lambda x: sc.erfinv(x * 3.0) + sc.logit(x * 2.0) + sc.gammaln(np.round(x))
        + sc.entr(x) + sc.xlogy(np.round(x), x), ((3, 4),))
# (poles of gamma, p outside [0, 1], x = 0 and negative arguments of kl_div and rel_entr)
nondiff("special-edges-2", lambda x: sc.gamma(np.round(x)) + sc.ndtri(x * 2.0) + sc.kl_div(np.round(x), x)
        + sc.rel_entr(x, np.round(x)) + sc.boxcox(np.abs(x), 0.0) + sc.inv_boxcox1p(x, 0.0), ((3, 4),))
# gamma-function relatives and SciPy's spellings of NumPy functions, composed from the primitives above
op("beta-rgamma-loggamma", lambda a, b: sc.beta(a * 2.0 + 2.5, b + 2.0) + sc.beta(a * 0.3 - 0.5, b * 0.2 + 1.3)
   + sc.rgamma(a * 0.4 - 0.5) + sc.rgamma(b + 3.0) + sc.loggamma(b + 2.5) * sc.gammasgn(a * 0.4 - 0.5),
   ((2, 3), (2, 3)), domain=("unit", "unit"))
op("factorial", lambda x: sc.factorial(x * 2.0 + 2.5) + sc.factorial(x - 3.0), ((4,),), domain="unit")
op("erfcinv-cosm1-exp10", lambda x: sc.erfcinv(x * 0.9 + 1.0) + sc.erfcinv(1e-12 + 0.0 * x) + sc.cosm1(x * 1e-3)
   + sc.exp10(x) + sc.exp2(x) + sc.cbrt(x + 2.0), *UNARY_SHAPES, domain="unit")
