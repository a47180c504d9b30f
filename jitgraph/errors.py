"""Exceptions raised by jitgraph, and the helper that points them at user code."""
import dis
import importlib.util
import linecache
import os
import sys

import numpy as np

_PKG_DIRS = tuple(
    os.path.dirname(os.path.abspath(__file__)) if name == "jitgraph"
    else os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), name)
    for name in ("jitgraph", "codegen")
)
_NUMPY_DIR = os.path.dirname(os.path.abspath(__import__("numpy").__file__))
# SciPy's functions call NumPy's on the user's traced values: an error names the user's call
_SCIPY_SPEC = importlib.util.find_spec("scipy")
_SCIPY_DIRS = ((os.path.dirname(os.path.abspath(_SCIPY_SPEC.origin)) + os.sep,)
               if _SCIPY_SPEC is not None and _SCIPY_SPEC.origin else ())


class JitgraphError(Exception):
    """Base class of every error jitgraph raises on purpose."""


class TracingError(JitgraphError):
    """A traced value was used where a concrete Python value is required."""


class NotSupportedError(JitgraphError, NotImplementedError):
    """A NumPy function, ufunc or argument form jitgraph does not implement."""


class ShapeError(JitgraphError, ValueError):
    """Shapes that do not fit together (broadcasting, matmul, reshape, ...)."""


class GradError(JitgraphError, TypeError):
    """A request for a gradient that cannot be honoured (non-scalar output, integer input, ...)."""


# added to the errors a traced Python bool or int argument meets (`if training:`, `x[:n]`)
STATIC_HINT = ("mark that argument static: jg.jit(f, static_argnums=(k,)) compiles once per value.")


class GradientCutWarning(RuntimeWarning):
    """Eagerly, a recorded floating value became a Python number (float(x), x.item(),
    x.tolist(), math.sqrt(x)): what is computed from that number gets no gradient from it."""


_LIBRARY_FILES = {}      # file name -> (jitgraph's or NumPy's, SciPy's)


def is_library_frame(frame, scipy=True):
    """Is this frame jitgraph's or NumPy's (or, with `scipy`, SciPy's): not the user's code?
    Errors name the user's line past SciPy's frames too; a gradient cut inside SciPy's code
    (its float() of a recorded value) is still the user's concern (scipy=False)."""
    name = frame.f_code.co_filename
    known = _LIBRARY_FILES.get(name)
    if known is None:
        fname = os.path.abspath(name)
        ours = fname.startswith(_PKG_DIRS) or fname.startswith(_NUMPY_DIR) or fname.startswith("<__array_function__")
        known = _LIBRARY_FILES[name] = (ours, fname.startswith(_SCIPY_DIRS))
    return known[0] or (scipy and known[1])


def _innermost_user_frame():
    """The innermost frame outside jitgraph and NumPy, or None."""
    frame = sys._getframe(1)
    while frame is not None and is_library_frame(frame):
        frame = frame.f_back
    return frame


def user_frame():
    """(filename, lineno, source line) of the innermost frame outside jitgraph and NumPy, or None."""
    frame = _innermost_user_frame()
    if frame is None:
        return None
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return frame.f_code.co_filename, frame.f_lineno, line


def _at_user_instruction(decode, memo):
    """`decode(code, offset)` of the instruction the user's innermost frame is executing,
    memoized per (code, offset); None without a user frame."""
    frame = _innermost_user_frame()
    if frame is None:
        return None
    key = (frame.f_code, frame.f_lasti)
    if key not in memo:
        memo[key] = decode(frame.f_code, frame.f_lasti)
    return memo[key]


_IN_PLACE = {}


def in_place_statement():
    """Is the user's innermost frame executing an augmented assignment (`a += b`, `a *= b`, ...)?
    Python rebinds `a` to what `a.__iadd__(b)` returns, so that statement needs no write into `a`."""
    return bool(_at_user_instruction(_is_in_place_op, _IN_PLACE))


def _is_in_place_op(code, lasti):
    ins = next((i for i in dis.get_instructions(code) if i.offset == lasti), None)
    return ins is not None and (ins.opname.startswith("INPLACE_") or (
        ins.opname == "BINARY_OP" and ins.argrepr.endswith("=") and ins.argrepr != "=="))


_CALLEE = {}
_CALLS = {"CALL", "CALL_FUNCTION", "CALL_METHOD"}


def numpy_scalar_call():
    """The name of the NumPy scalar type (`float64`, `int32`, ...) the user's innermost frame is
    calling, as in `np.float64(x)`, else None. Read from the bytecode: walking back from the
    call over its arguments' stack effects finds the instruction that loaded the callable."""
    name = _at_user_instruction(_callee_name, _CALLEE)
    typ = getattr(np, name, None) if name else None
    return name if isinstance(typ, type) and issubclass(typ, np.generic) else None


def array_method_hint():
    """When the user's innermost frame is calling a NumPy array's method (`X.dot(W)`, which
    converts its argument with __array__, as no dispatch protocol covers methods), a hint
    naming the function form that jitgraph records; else ''."""
    name = _at_user_instruction(_callee_name, _CALLEE)
    if not name or not hasattr(np.ndarray, name) or name.startswith("_"):
        return ""
    spelled = "X @ W or np.dot(X, W)" if name == "dot" else f"np.{name}(X, ...)" if hasattr(np, name) else None
    return (f"; a NumPy array's method (here `.{name}(...)`) converts a traced argument to an array"
            + (f": write {spelled} instead" if spelled else ""))


def ufunc_list_hint():
    """When the user's innermost frame is calling a ufunc (`np.exp([a, b])`, a scipy.special
    function), which converts a list holding traced values with NumPy, as no protocol looks
    into lists: a hint to give it one array; else ''."""
    name = _at_user_instruction(_callee_name, _CALLEE)
    if not name or name.startswith("_"):
        return ""
    special = sys.modules.get("scipy.special")
    for module, prefix in ((np, "np"), (special, "scipy.special")):
        if module is not None and isinstance(getattr(module, name, None), np.ufunc):
            return (f"; a ufunc (here `{prefix}.{name}`) converts a list or tuple holding traced values "
                    f"to a NumPy array: give it one array, {prefix}.{name}(np.stack([...])), instead")
    return ""


def _callee_name(code, lasti):
    ins = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    at = next((k for k, i in enumerate(ins) if i.offset == lasti), None)
    if at is None or ins[at].opname not in _CALLS or ins[at].arg is None:
        return None
    need, depth = ins[at].arg + 1, 0
    start = at - 1 if at and ins[at - 1].opname == "PRECALL" else at      # the call's own PRECALL
    for k in range(start - 1, -1, -1):
        i = ins[k]
        if i.is_jump_target or "JUMP" in i.opname or i.opname.startswith("POP_JUMP"):
            return None
        try:
            depth += dis.stack_effect(i.opcode, i.arg, jump=False) if i.opcode >= dis.HAVE_ARGUMENT \
                else dis.stack_effect(i.opcode)
        except ValueError:
            return None
        if depth >= need:
            # the callable: this load, or the attribute loads right after it (np.float64)
            name, j = i.argval, k + 1
            while j < start and ins[j].opname in ("LOAD_ATTR", "LOAD_METHOD"):
                name, j = ins[j].argval, j + 1
            return name if isinstance(name, str) else None
    return None


def where():
    """A ' (at FILE:LINE: source)' suffix naming the user's line, or ''."""
    loc = user_frame()
    if loc is None:
        return ""
    fname, lineno, line = loc
    return f" (at {fname}:{lineno}: {line})" if line else f" (at {fname}:{lineno})"
