"""The scalar language of elementwise primitives, and its renderer.

An elementwise primitive states its value at one point once, as a Python
expression over its operands `{0}`, `{1}`, ... (`"atan2({0}, {1})"`,
`"{1} if {0} else {2}"`). The expression may use:

* operators: `+ - * / ** % //` (`%` and `//` with Python's floor semantics, which are
  NumPy's; a zero divisor must be guarded, `{0} % {1} if {1} != 0 else ...`), unary `-`,
  comparisons, `&` `|` (of booleans),
  `not`, and `a if cond else b`;
* numeric literals: a float literal takes the dtype the operation computes in
  (its first non-boolean operand's), so `0.5 * {0}` stays float32 in float32 code;
* the functions in `FUNCTIONS` (C math names), the dtype names in `DTYPES` as
  conversions, and `T(x)`: x converted to the dtype the operation computes in.

Every target renders the same expression: the CPU and CUDA emitters to source
text (`render`, with their own spelling of each function), the ONNX exporter to
ONNX nodes (walking `parse`'s tree). A primitive whose expression uses only
functions a target spells needs nothing else to run there.
"""
import ast
import copy
import functools

import numpy as np


class Fn:
    """A math function of the scalar language: its NumPy ufunc, its name in C's math
    library (and Python's `math`, which Numba compiles on the CPU and the GPU), the
    ONNX operator computing it (None where ONNX has none), and its scipy.special ufunc.

    SciPy's special functions have no C math name: their `c` name is the function of
    jitgraph's math library computing them (`codegen/mathlib.py`, which the CPU emitter
    spells and from which `codegen/cuda_runtime.py` builds the GPU's device functions).
    """

    __slots__ = ("numpy", "c", "onnx", "arity", "scipy")

    def __init__(self, numpy, c, onnx=None, arity=1, scipy=None):
        self.numpy, self.c, self.onnx, self.arity, self.scipy = numpy, c, onnx, arity, scipy


FUNCTIONS = {
    "abs": Fn("absolute", "fabs", "Abs"),
    "sqrt": Fn("sqrt", "sqrt", "Sqrt"),
    "exp": Fn("exp", "exp", "Exp"),
    "exp2": Fn("exp2", "exp2"),
    "expm1": Fn("expm1", "expm1"),
    "log": Fn("log", "log", "Log"),
    "log1p": Fn("log1p", "log1p"),
    "log2": Fn("log2", "log2"),
    "log10": Fn("log10", "log10"),
    "pow": Fn("power", "pow", "Pow", 2),
    "sin": Fn("sin", "sin", "Sin"),
    "cos": Fn("cos", "cos", "Cos"),
    "tan": Fn("tan", "tan", "Tan"),
    "asin": Fn("arcsin", "asin", "Asin"),
    "acos": Fn("arccos", "acos", "Acos"),
    "atan": Fn("arctan", "atan", "Atan"),
    "atan2": Fn("arctan2", "atan2", None, 2),
    "hypot": Fn("hypot", "hypot", None, 2),
    "sinh": Fn("sinh", "sinh", "Sinh"),
    "cosh": Fn("cosh", "cosh", "Cosh"),
    "tanh": Fn("tanh", "tanh", "Tanh"),
    "asinh": Fn("arcsinh", "asinh", "Asinh"),
    "acosh": Fn("arccosh", "acosh", "Acosh"),
    "atanh": Fn("arctanh", "atanh", "Atanh"),
    "floor": Fn("floor", "floor", "Floor"),
    "ceil": Fn("ceil", "ceil", "Ceil"),
    "trunc": Fn("trunc", "trunc"),
    "rint": Fn("rint", "rint", "Round"),
    "copysign": Fn("copysign", "copysign", None, 2),
    "fmod": Fn("fmod", "fmod", None, 2),
    "floordiv": Fn("floor_divide", "floordiv", None, 2),     # a // b of floats (NumPy's)
    "cbrt": Fn("cbrt", "cbrt"),
    "erf": Fn(None, "erf", "Erf", scipy="erf"),
    "erfc": Fn(None, "erfc", scipy="erfc"),
    "lgamma": Fn(None, "lgamma", scipy="gammaln"),     # log |Gamma(x)|
    "gamma": Fn(None, "gamma", scipy="gamma"),        # Gamma(x): Python's raises at poles and on overflow
    # SciPy's special functions (codegen/mathlib.py)
    "erfinv": Fn(None, "erfinv", scipy="erfinv"),
    "ndtr": Fn(None, "ndtr", scipy="ndtr"),
    "log_ndtr": Fn(None, "log_ndtr", scipy="log_ndtr"),
    "digamma": Fn(None, "digamma", scipy="digamma"),
    "polygamma": Fn(None, "polygamma", None, 2, scipy="polygamma"),   # polygamma(n, x), n an int
    "betaln": Fn(None, "betaln", None, 2, scipy="betaln"),
    "gammainc": Fn(None, "gammainc", None, 2, scipy="gammainc"),
    "gammaincc": Fn(None, "gammaincc", None, 2, scipy="gammaincc"),
    "betainc": Fn(None, "betainc", None, 3, scipy="betainc"),
    "betaincc": Fn(None, "betaincc", None, 3, scipy="betaincc"),
    "isnan": Fn("isnan", "isnan", "IsNaN"),
    "isinf": Fn("isinf", "isinf", "IsInf"),
    "sign": Fn("sign", None, "Sign"),
    "max": Fn("maximum", None, None, 2),     # NaN-propagating, like np.maximum
    "min": Fn("minimum", None, None, 2),
}

DTYPES = ("bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float32", "float64")


def arg(k):
    """The name operand `k` has in a parsed expression."""
    return f"_a{k}"


@functools.lru_cache(maxsize=None)
def parse(template):
    """The expression tree of `template` (operands `{k}` become names `_a<k>`); checks that
    it only calls functions of the language."""
    text = template
    for k in range(10):
        text = text.replace("{%d}" % k, arg(k))
    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None)
            if name not in FUNCTIONS and name not in DTYPES and name != "T":
                raise ValueError(f"scalar expression {template!r} calls {ast.unparse(node.func)!r}, "
                                 "which is not a function of the scalar language (ops/scalar.py)")
    return tree


def functions_used(template):
    """Names of the language's math functions `template` calls."""
    return {n.func.id for n in ast.walk(parse(template))
            if isinstance(n, ast.Call) and n.func.id in FUNCTIONS}


def compute_dtype(in_dtypes, out_dtype):
    """The dtype an elementwise operation computes in: its first non-boolean operand's."""
    for d in in_dtypes:
        if np.dtype(d) != np.bool_:
            return np.dtype(d)
    return np.dtype(out_dtype)


class _Render(ast.NodeTransformer):
    def __init__(self, spell, literal, dtype):
        self.spell, self.literal, self.dtype = spell, literal, dtype

    def visit_Name(self, node):
        if node.id.startswith("_a"):
            return ast.Name(id="{" + node.id[2:] + "}")
        return node

    def visit_Constant(self, node):
        if isinstance(node.value, float) and self.dtype.kind == "f":
            return ast.Name(id=self.literal(node.value, self.dtype))
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        name = node.func.id
        if name == "T":
            name = self.dtype.name if self.dtype != np.bool_ else "bool_"
        text, wrap = self.spell(name, self.dtype)
        call = ast.Call(func=ast.Name(id=text), args=node.args, keywords=[])
        if wrap:
            call = ast.Call(func=ast.Name(id=wrap), args=[call], keywords=[])
        return call


def render(template, spell, literal, dtype):
    """`template` as target source: a format string over the operands `{0}`, `{1}`, ....

    `spell(name, dtype)` gives the target's text for a function (or dtype conversion)
    and a conversion to wrap the call in (or None); `literal(value, dtype)` writes a
    float literal of the computing dtype."""
    tree = _Render(spell, literal, np.dtype(dtype)).visit(copy.deepcopy(parse(template)))
    return ast.unparse(ast.fix_missing_locations(tree))


def fill(fmt, args):
    """A rendered expression applied to operand expressions (negative literals bracketed)."""
    return fmt.format(*[f"({a})" if a.startswith("-") else a for a in args])
