"""What jitgraph accepts as array values, and what it refuses (see README, "What jitgraph refuses").

* dtypes: booleans, signed and unsigned integers of 8 to 64 bits, float32 and
  float64. float16, long double, complex, strings, objects and datetimes are
  refused with a clear error (Numba does not compile float16 arithmetic, and
  the others have no meaning for the derivative rules).
* arrays: `numpy.ndarray` and `numpy.memmap` (the same semantics). Subclasses
  that change what operations mean (masked arrays ignore masked elements,
  `np.matrix` makes `*` a matrix product) are refused: computing on their data
  would silently give another answer than NumPy.
* byte order: big-endian arrays are read in the machine's order (the values are
  the same, as in NumPy).
* Python ints are NEP 50 "weak" scalars: an argument in the int64 range is
  traced as a weak int64, one in [2**63, 2**64) as a weak uint64; larger ones are
  specialized on (a retrace per value, as a literal in the function would be).
"""
import numpy as np

from .errors import NotSupportedError

SUPPORTED_KINDS = "biuf"
INT64 = np.iinfo(np.int64)
UINT64 = np.iinfo(np.uint64)


def supported_dtype(dtype):
    dtype = np.dtype(dtype)
    return dtype.kind in SUPPORTED_KINDS and not (dtype.kind == "f" and dtype.itemsize not in (4, 8))


def check_dtype(dtype, what):
    """Raise NotSupportedError for a dtype jitgraph does not compute in."""
    dtype = np.dtype(dtype)
    if not supported_dtype(dtype):
        hint = "; cast it, e.g. x.astype(np.float32)" if dtype.kind in "fc" else ""
        raise NotSupportedError(
            f"{what} has dtype {dtype.name}, which jitgraph does not compute in (supported: bool, "
            f"int8-int64, uint8-uint64, float32, float64){hint}")


def check_array_type(x, what):
    """Refuse ndarray subclasses whose semantics differ from ndarray's."""
    cls = type(x)
    if cls is not np.ndarray and isinstance(x, np.ndarray) and not isinstance(x, np.memmap):
        name = f"{cls.__module__}.{cls.__qualname__}"
        raise TypeError(
            f"{what} is a {name}, an ndarray subclass whose operations mean something else than "
            "ndarray's (a masked array skips masked elements, np.matrix multiplies with *); jitgraph "
            "computes with plain arrays and would silently give another answer. Pass np.asarray(x) "
            "(or x.filled(...) for a masked array) if that is what you mean")


def native(arr):
    """arr in the machine's byte order (big-endian data read as its values)."""
    return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))


def python_int_class(v):
    """How a Python int argument is traced: "i" (a weak int64), "u" (a weak uint64), or None
    (outside both ranges: specialized on, like a literal)."""
    if INT64.min <= v <= INT64.max:
        return "i"
    if 0 <= v <= UINT64.max:
        return "u"
    return None


def is_static_leaf(x):
    """Is this argument leaf specialized on instead of traced (a Python int beyond 64 bits)?"""
    return isinstance(x, int) and not isinstance(x, (bool, np.generic)) and python_int_class(x) is None


def array_value(leaf, what):
    """A validated NumPy array for an argument leaf (ndarray, NumPy or Python number)."""
    if isinstance(leaf, np.ndarray):
        check_array_type(leaf, what)
    arr = np.asarray(leaf)
    check_dtype(arr.dtype, what)
    return native(arr)
