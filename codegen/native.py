"""A Python entry's loop functions compiled straight to machine code, without Numba.

A Python entry (emit_cpu: a long program, or one whose steps are heavy) calls one compiled
function per fused loop group. Numba spends 0.1-0.2 s on each of them, most of it typing
and lowering its own IR; the functions themselves are a small language: `for` loops over
`range`, scalar assignments, array loads and stores, arithmetic, comparisons, conditional
expressions, casts and the math library. This module translates that language's Python
syntax tree to LLVM IR directly (llvmlite) and has LLVM compile it: about 10-20 ms a
function, where Numba took 100-200 ms.

`native_njit(noalias, parallel, **options)` decorates such a function. The decorator checks
the text once (`supported`); a function using anything else is returned as Numba compiles
it (`loop_njit`, `group_njit` or `njit`), so nothing here must cover every construct. A
function is compiled on its first call for the argument types of that call, as Numba
compiles, and again for new types; a call whose types the translation does not cover (an
int32 array, a reshape of a strided view) runs the function through Numba instead, from
then on.

Semantics are Numba's, so that both compile the same source to the same values:
* scalar types follow Numba's rules (float32 op int64 is float64, bool + bool is int64,
  int / int is float64), checked against Numba in tests/test_native.py;
* a variable keeps one type: a source assigning it two is left to Numba;
* integers `//` and `%` floor as Python's do, and a zero divisor gives 0 (NumPy's result);
* negative indices count from the end (Numba's wraparound), without bounds checks;
* floating-point instructions carry the function's fastmath flags, as Numba's fastmath pass
  sets them, and the math library (mathlib's `_ir_*` builders, LLVM's intrinsics, libm) is
  the same code Numba's kernels call.

Arrays are passed as the NumPy objects themselves: the process's argument reader (one
function shared by every compiled entry, compiled once per machine) reads their data
pointer, shape and strides from the array struct and checks their dtype, dimension count and
(for a C-contiguous variant) contiguity against the variant's table of argument kinds; when
they do not match, the Python side compiles the variant the call needs. Besides the loop
language, a function may call a compiled LAPACK routine of linalg_runtime by its symbol (a
Python entry's solve in column blocks, ops_linalg) and set the BLAS thread count. A parallel group (`parallel=True`, called with
`ch = -1`) launches its chunks with `_rt.parallel_self` on Numba's threading layer, as the
Numba-compiled group does (codegen/launch.py: the same chunking, so the same bits on any
number of threads).

Compiled objects are kept in the disk cache (`<cache>/kernels/__pycache__/native/`) as
checked files named after the hash of the function's text, its argument types and this
machine's LLVM target, so a new process loads them in about a millisecond each.
"""
import ast
import ctypes
import functools
import hashlib
import inspect
import linecache
import os
import textwrap
import threading

import llvmlite
import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils

from jitgraph._version import __version__

from . import blas, build, mathlib, numba_cache
from .launch import COMBINE_MAX, COMBINE_PROD, COMBINE_SUM, build_launcher, group_njit, loop_njit

F8, F4, I8, B1 = (np.dtype(t) for t in ("float64", "float32", "int64", "bool"))
_LL = {F8: ir.DoubleType(), F4: ir.FloatType(), I8: ir.IntType(64), B1: ir.IntType(1)}
_MEM = {F8: ir.DoubleType(), F4: ir.FloatType(), I8: ir.IntType(64), B1: ir.IntType(8)}
_TYPE_NUMS = {F8: (12,), F4: (11,), I8: (7, 9), B1: (0,)}      # NumPy's type numbers (long, longlong)
_I64 = ir.IntType(64)
_I32 = ir.IntType(32)
_I8P = ir.IntType(8).as_pointer()
# PyArrayObject's fields (NumPy 1.x and 2.x): data, nd, dimensions, strides, descr, flags;
# PyArray_Descr's type_num
_DATA, _ND, _DIMS, _STRIDES, _DESCR, _FLAGS, _TYPE_NUM = 16, 24, 32, 40, 56, 64, 28
_C_CONTIGUOUS = 0x1
ENABLED = os.environ.get("JITGRAPH_NATIVE", "1") not in ("0", "false", "False", "no")
MAGIC = b"JGNO3\n"
DEBUG = os.environ.get("JITGRAPH_NATIVE_DEBUG", "0") not in ("0", "")


class Unsupported(Exception):
    """The function (or this call's argument types) is outside the translated language."""


# ---- what the language holds (checked once per function, from its text) -----------------------
_UNARY_MATH = {"_exp": mathlib._ir_exp, "_expm1": mathlib._ir_expm1, "_tanh": mathlib._ir_tanh,
               "_ml.log": mathlib._ir_log, "_ml.log1p": mathlib._ir_log1p, "_ml.sin": mathlib._ir_sin,
               "_ml.cos": mathlib._ir_cos}
_BINARY_MATH = {"_ml.hypot": mathlib._ir_hypot}
# NumPy's functions, as Numba lowers them for float arguments: an LLVM intrinsic or a libm call
_INTRINSICS = {"np.sqrt": "llvm.sqrt", "np.floor": "llvm.floor", "np.ceil": "llvm.ceil", "np.trunc": "llvm.trunc",
               "np.rint": "llvm.rint", "np.exp2": "llvm.exp2", "np.log": "llvm.log", "np.exp": "llvm.exp",
               "np.sin": "llvm.sin", "np.cos": "llvm.cos", "np.log2": "llvm.log2", "np.log10": "llvm.log10"}
_LIBM = {"np.log1p": "log1p", "np.expm1": "expm1", "np.sinh": "sinh", "np.cosh": "cosh", "np.tan": "tan",
         "np.arctan": "atan", "np.arcsin": "asin", "np.arccos": "acos", "np.arcsinh": "asinh",
         "np.arccosh": "acosh", "np.arctanh": "atanh"}
_CASTS = {"np.float64": F8, "np.float32": F4, "np.int64": I8, "np.bool_": B1}
_CALLS = set(_UNARY_MATH) | set(_BINARY_MATH) | set(_INTRINSICS) | set(_LIBM) | set(_CASTS) | {
    "_max", "_min", "abs", "np.isnan", "np.isinf", "np.copysign", "np.fmod", "np.arctan2", "range",
    "_rt.c_view", "_rt.parallel_self", "_rt.combine_parts", "_rt.blas_threads_local"}
_CONSTANTS = {"np.inf": np.inf, "np.nan": np.nan, "math.inf": np.inf, "math.nan": np.nan, "math.pi": np.pi,
              "math.e": np.e}
_NODES = (ast.Module, ast.FunctionDef, ast.arguments, ast.arg, ast.Assign, ast.For, ast.If, ast.Return,
          ast.Expr, ast.Pass, ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp,
          ast.BoolOp, ast.Call, ast.Subscript, ast.Tuple, ast.Attribute, ast.Load, ast.Store,
          ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd, ast.Not,
          ast.BitAnd, ast.BitOr, ast.And, ast.Or, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _dotted(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def supported(tree):
    """Is the function `tree` (an ast.FunctionDef) written in the translated language, as far
    as its text tells (types are checked when it is compiled)?"""
    fn = tree
    args = fn.args
    if len(fn.decorator_list) > 1 or args.vararg or args.kwarg or args.kwonlyargs or args.defaults \
            or args.posonlyargs:
        return False
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]             # a docstring
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if not isinstance(node, _NODES):
            return False
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if not (name in _CALLS or _external_name(name)) or node.keywords:
                return False
        elif isinstance(node, ast.Attribute):
            name = _dotted(node)
            if name not in _CONSTANTS and name not in _CALLS and not (
                    isinstance(node.value, ast.Name) and node.attr in ("shape", "ctypes")):
                return False
        elif isinstance(node, ast.For):
            if node.orelse or not isinstance(node.target, ast.Name) or not (
                    isinstance(node.iter, ast.Call) and _dotted(node.iter.func) == "range"
                    and 1 <= len(node.iter.args) <= 3):
                return False
            if len(node.iter.args) == 3 and _step(node.iter.args[2]) is None:
                return False
        elif isinstance(node, ast.Assign):
            if len(node.targets) != 1 or not isinstance(node.targets[0], (ast.Name, ast.Subscript)):
                return False
        elif isinstance(node, ast.Return):
            if node.value is not None:
                return False
        elif isinstance(node, ast.Constant):
            if not isinstance(node.value, (bool, int, float, type(Ellipsis))):
                return False
    return True


def _external_name(name):
    """Is `name` a module's name for a compiled C routine (a LAPACK routine of linalg_runtime,
    declared as a Numba external function: ops_linalg's `_la_<routine>_<dtype>`)?"""
    return name is not None and name.startswith("_la_")


def _step(node):
    """A range's step: a nonzero integer literal (or its negation), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        step = _step(node.operand)
        return None if step is None else -step
    if isinstance(node, ast.Constant) and type(node.value) is int and node.value != 0:
        return node.value
    return None


# ---- scalar typing (Numba's rules) ----------------------------------------------------------
def promote(a, b):
    """The type Numba computes `a op b` in (+, -, *, and conditional expressions of numbers)."""
    if a.kind == "f" or b.kind == "f":
        return F8 if F8 in (a, b) or I8 in (a, b) else F4
    return I8


def unify(a, b):
    """The type of `x if c else y`, or of _max(x, y) (Numba's unification)."""
    return B1 if a == b == B1 else promote(a, b)


class _Arr:
    """An array in the function: dtype, ndim, C-contiguous?, and its LLVM data pointer (of
    its element type), shape and strides (bytes; empty where contiguity fixes them)."""

    def __init__(self, dtype, ndim, contig, data=None, shape=(), strides=()):
        self.dtype, self.ndim, self.contig = dtype, ndim, contig
        self.data, self.shape, self.strides = data, list(shape), list(strides)


def arg_spec(value):
    """The type of one argument for compiling: ("a", dtype, ndim, contiguous) for an array,
    ("s", dtype) for a scalar; raises Unsupported for others."""
    if isinstance(value, np.ndarray):
        dt = value.dtype
        if dt not in _LL or not dt.isnative or value.ndim == 0:
            raise Unsupported(f"array of {dt}, {value.ndim}-d")
        return ("a", dt, value.ndim, bool(value.flags.c_contiguous))
    if isinstance(value, (bool, np.bool_)):
        return ("s", B1)
    if isinstance(value, (int, np.integer)):
        return ("s", I8)
    if isinstance(value, (float, np.float64)):
        return ("s", F8)
    if isinstance(value, np.float32):
        return ("s", F4)
    raise Unsupported(f"argument of type {type(value).__name__}")


# ---- translation ------------------------------------------------------------------------------
class _Translator:
    """One function's syntax tree, for one variant of argument types, as an LLVM module."""

    def __init__(self, tree, specs, name, noalias, globals_=None):
        self.tree, self.specs, self.name, self.noalias = tree, specs, name, noalias
        self.globals = globals_ or {}        # the module's names (for its compiled routines)
        self.module = ir.Module(name=name)
        self.module.triple = _triple()
        self.params = [a.arg for a in tree.args.args]
        if len(self.params) != len(specs):
            raise Unsupported("argument count")

    # -- functions --
    def build(self):
        params = []
        for spec in self.specs:
            if spec[0] == "a":
                _, dt, nd, contig = spec
                params.append(_MEM[dt].as_pointer())
                params += [_I64] * (nd if contig else 2 * nd)
            else:
                params.append(_LL[spec[1]] if spec[1] != B1 else ir.IntType(8))
        self.inner_type = ir.FunctionType(ir.VoidType(), params)
        self.inner = ir.Function(self.module, self.inner_type, f"{self.name}_body")
        self.inner.linkage = "internal"
        self._body()
        self._entry()
        return self.module

    def _body(self):
        fn = self.inner
        entry = fn.append_basic_block("entry")
        self.allocas = ir.IRBuilder(entry)
        start = fn.append_basic_block("start")
        self.b = ir.IRBuilder(start)
        self.vars = {}        # scalar name -> (alloca, dtype)
        self.arrays = {}      # array name -> _Arr
        self.depth = 0
        k = 0
        for name, spec in zip(self.params, self.specs):
            if spec[0] == "a":
                _, dt, nd, contig = spec
                data = fn.args[k]
                if self.noalias:
                    data.add_attribute("noalias")
                shape = list(fn.args[k + 1:k + 1 + nd])
                strides = list(fn.args[k + 1 + nd:k + 1 + 2 * nd]) if not contig else []
                k += 1 + (nd if contig else 2 * nd)
                self.arrays[name] = _Arr(dt, nd, contig, data, shape, strides)
            else:
                v = fn.args[k]
                if spec[1] == B1:
                    v = self.b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
                k += 1
                self._assign(name, v, spec[1])
        self._block(self.tree.body)
        if not self.b.block.is_terminated:
            self.b.ret_void()
        self.allocas.branch(start)

    def _entry(self):
        """The function Python calls, a METH_FASTCALL builtin: PyObject *(self, args, nargs).
        The process's argument reader (`_reader_module`) reads each array's struct and each
        scalar object into a buffer, checking their types against this variant's codes; the
        entry then calls the body with the buffer's values and returns None. For arguments of
        other types it returns what the Python callable held in `<name>_slow` returns for them
        (NativeFunction._slow). One shared reader, not straight-line checks per argument here:
        those were half of every function's optimized IR and of its compile time."""
        mod = self.module
        fn = ir.Function(mod, ir.FunctionType(_I8P, [_I8P, _I8P.as_pointer(), _I64]), self.name)
        _, argv, nargs = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        codes, slots = _arg_codes(self.specs)
        table = ir.GlobalVariable(mod, ir.ArrayType(_I32, len(codes)), f"{self.name}_codes")
        table.initializer = ir.Constant(ir.ArrayType(_I32, len(codes)), codes)
        table.global_constant = True
        table.linkage = "internal"
        buf = b.alloca(_I64, size=ir.Constant(_I64, max(slots, 1)))
        reader = _c_function(mod, READER, _I32, [_I8P.as_pointer(), _I64, _I32.as_pointer(), _I64, _I64.as_pointer()])
        status = b.call(reader, [argv, nargs, b.bitcast(table, _I32.as_pointer()),
                                 ir.Constant(_I64, len(self.specs)), buf])
        slow = fn.append_basic_block("slow")
        sb = ir.IRBuilder(slow)
        slow_ref = ir.GlobalVariable(mod, _I8P, f"{self.name}_slow")
        slow_ref.initializer = ir.Constant(_I8P, None)
        vectorcall = _c_function(mod, "PyObject_Vectorcall", _I8P, [_I8P, _I8P.as_pointer(), _I64, _I8P])
        sb.ret(sb.call(vectorcall, [sb.load(slow_ref), argv, nargs, ir.Constant(_I8P, None)]))
        failed = fn.append_basic_block("failed")
        ir.IRBuilder(failed).ret(ir.Constant(_I8P, None))
        ok = fn.append_basic_block("ok")
        switch = b.switch(status, failed)
        switch.add_case(ir.Constant(_I32, 0), ok)
        switch.add_case(ir.Constant(_I32, 1), slow)
        b.position_at_end(ok)

        slot = iter(range(slots))

        def value(ty):
            return b.load(b.bitcast(b.gep(buf, [ir.Constant(_I64, next(slot))]), ty.as_pointer()))

        call = []
        for spec in self.specs:
            if spec[0] == "s":
                call.append(value(_LL[spec[1]] if spec[1] != B1 else ir.IntType(8)))
                continue
            _, dt, nd, contig = spec
            call.append(value(_MEM[dt].as_pointer()))
            call += [value(_I64) for _ in range(nd if contig else 2 * nd)]
        b.call(self.inner, call)
        none = b.load(mod.globals.get(_TYPE_SYMBOLS["None"]) or ir.GlobalVariable(mod, _I8P, _TYPE_SYMBOLS["None"]))
        b.call(_c_function(mod, "Py_IncRef", ir.VoidType(), [_I8P]), [none])
        b.ret(none)

    # -- statements --
    def _block(self, stmts):
        for s in stmts:
            if self.b.block.is_terminated:
                return
            self._stmt(s)

    def _stmt(self, s):
        b = self.b
        if isinstance(s, ast.Assign):
            target = s.targets[0]
            if isinstance(target, ast.Name):
                if isinstance(s.value, ast.Call) and _dotted(s.value.func) == "_rt.c_view":
                    if self.depth or target.id in self.vars:
                        raise Unsupported("an array view made in a loop or branch")
                    self.arrays[target.id] = self._c_view(s.value)
                    return
                if target.id in self.arrays:
                    raise Unsupported(f"{target.id} is an array and a scalar")
                v, t = self._expr(s.value)
                self._assign(target.id, v, t)
            else:
                self._store(target, s.value)
        elif isinstance(s, ast.For):
            self._for(s)
        elif isinstance(s, ast.If):
            cond = self._truth(*self._expr(s.test))
            self.depth += 1
            with b.if_else(cond) as (then, other):
                with then:
                    self._block(s.body)
                with other:
                    self._block(s.orelse)
            self.depth -= 1
        elif isinstance(s, ast.Return):
            b.ret_void()
        elif isinstance(s, ast.Expr):
            if isinstance(s.value, ast.Constant):
                return
            name = _dotted(s.value.func) if isinstance(s.value, ast.Call) else None
            if name == "_rt.parallel_self":
                self._parallel_self(s.value)
            elif name == "_rt.combine_parts":
                self._combine_parts(s.value)
            elif name == "_rt.blas_threads_local" or _external_name(name):
                self._call(s.value)
            else:
                raise Unsupported(ast.unparse(s))
        elif isinstance(s, ast.Pass):
            return
        else:
            raise Unsupported(ast.unparse(s))

    def _assign(self, name, v, t):
        held = self.vars.get(name)
        if held is None:
            slot = self.allocas.alloca(_LL[t], name=name)
            held = self.vars[name] = (slot, t)
        elif held[1] != t:
            raise Unsupported(f"{name} assigned {held[1]} and {t}")
        self.b.store(v, held[0])

    def _for(self, s):
        b = self.b
        args = [self._int(a) for a in s.iter.args[:2]]
        lo, hi = (ir.Constant(_I64, 0), args[0]) if len(args) == 1 else args
        step = _step(s.iter.args[2]) if len(s.iter.args) == 3 else 1
        name = s.target.id
        if name in self.arrays:
            raise Unsupported("loop variable shadows an array")
        if name not in self.vars:
            self.vars[name] = (self.allocas.alloca(_I64, name=name), I8)
        elif self.vars[name][1] != I8:
            raise Unsupported(f"{name} is a loop index and a {self.vars[name][1]}")
        head = b.append_basic_block("for.head")
        body = b.append_basic_block("for.body")
        end = b.append_basic_block("for.end")
        pre = b.block
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(_I64, name=f"{name}.i")
        i.add_incoming(lo, pre)
        b.cbranch(b.icmp_signed("<" if step > 0 else ">", i, hi), body, end)
        b.position_at_end(body)
        b.store(i, self.vars[name][0])
        self.depth += 1
        self._block(s.body)
        self.depth -= 1
        if not b.block.is_terminated:
            nxt = b.add(i, ir.Constant(_I64, step), flags=("nsw",))
            i.add_incoming(nxt, b.block)
            b.branch(head)
        b.position_at_end(end)
        # after the loop, Python's loop variable holds the last value; no generated code reads it

    # -- arrays --
    def _array(self, node):
        name = node.id if isinstance(node, ast.Name) else None
        arr = self.arrays.get(name)
        if arr is None:
            raise Unsupported(f"{ast.unparse(node)} is not an array")
        return arr

    def _c_view(self, call):
        if len(call.args) != 2 or not isinstance(call.args[1], ast.Tuple):
            raise Unsupported("c_view")
        src = self._array(call.args[0])
        if not src.contig:
            raise Unsupported("a reshaped strided array")
        shape = [self._int(e) for e in call.args[1].elts]
        return _Arr(src.dtype, len(shape), True, src.data, shape)

    def _address(self, arr, index):
        b = self.b
        idx = index.elts if isinstance(index, ast.Tuple) else [index]
        if len(idx) != arr.ndim:
            raise Unsupported("partial or fancy indexing")
        zero = ir.Constant(_I64, 0)
        vals = []
        for e, dim in zip(idx, arr.shape):
            v = self._int(e)
            if not (isinstance(v, ir.Constant) and v.constant >= 0):
                v = b.select(b.icmp_signed("<", v, zero), b.add(v, dim), v)      # wraparound
            vals.append(v)
        return _element(b, arr, vals)

    def _load(self, node):
        arr = self._array(node.value)
        v = self.b.load(self._address(arr, node.slice))
        if arr.dtype == B1:
            v = self.b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
        return v, arr.dtype

    def _store(self, target, value):
        arr = self._array(target.value)
        if isinstance(target.slice, ast.Constant) and target.slice.value is Ellipsis:
            self._fill(arr, value)
            return
        v, t = self._expr(value)
        v = self._mem(self._cast(v, t, arr.dtype), arr.dtype)
        self.b.store(v, self._address(arr, target.slice))

    def _mem(self, v, t):
        return self.b.zext(v, ir.IntType(8)) if t == B1 else v

    def _fill(self, arr, value):
        """arr[...] = value: a loop nest over arr's shape."""
        v, t = self._expr(value)
        v = self._mem(self._cast(v, t, arr.dtype), arr.dtype)
        b = self.b
        idx = []

        def nest(d):
            if d == arr.ndim:
                b.store(v, _element(b, arr, idx))
                return
            with cgutils.for_range(b, arr.shape[d]) as loop:
                idx.append(loop.index)
                nest(d + 1)
                idx.pop()
        nest(0)

    # -- expressions --
    def _int(self, node):
        v, t = self._expr(node)
        if t != I8:
            raise Unsupported(f"{ast.unparse(node)} is a {t}, not an integer")
        return v

    def _truth(self, v, t):
        b = self.b
        if t == B1:
            return v
        if t.kind == "f":
            return b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
        return b.icmp_signed("!=", v, ir.Constant(v.type, 0))

    def _cast(self, v, src, dst):
        b = self.b
        if src == dst:
            return v
        lt = _LL[dst]
        if dst == B1:
            return self._truth(v, src)
        if src == B1:
            return b.uitofp(v, lt) if dst.kind == "f" else b.zext(v, lt)
        if src.kind == "f" and dst.kind == "f":
            return b.fpext(v, lt) if dst == F8 else b.fptrunc(v, lt)
        if src.kind == "f":
            return b.fptosi(v, lt)
        if dst.kind == "f":
            return b.sitofp(v, lt)
        raise Unsupported(f"cast {src} -> {dst}")

    def _expr(self, node):
        b = self.b
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool):
                return ir.Constant(ir.IntType(1), int(v)), B1
            if isinstance(v, int):
                if not -2 ** 63 <= v < 2 ** 63:
                    raise Unsupported("integer literal out of int64's range")
                return ir.Constant(_I64, v), I8
            if isinstance(v, float):
                return ir.Constant(ir.DoubleType(), v), F8
            raise Unsupported(repr(v))
        if isinstance(node, ast.Name):
            if node.id in self.vars:
                slot, t = self.vars[node.id]
                return b.load(slot), t
            raise Unsupported(f"name {node.id}")
        if isinstance(node, ast.Attribute):
            name = _dotted(node)
            if name in _CONSTANTS:
                return ir.Constant(ir.DoubleType(), _CONSTANTS[name]), F8
            raise Unsupported(name)
        if isinstance(node, ast.Subscript):
            if isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
                arr = self._array(node.value.value)
                if not isinstance(node.slice, ast.Constant) or not 0 <= node.slice.value < arr.ndim:
                    raise Unsupported("shape index")
                return arr.shape[node.slice.value], I8
            return self._load(node)
        if isinstance(node, ast.BinOp):
            return self._binop(node.op, *self._expr(node.left), *self._expr(node.right))
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
                    and type(node.operand.value) in (int, float):
                return self._expr(ast.Constant(-node.operand.value))      # -9223372036854775808
            v, t = self._expr(node.operand)
            if isinstance(node.op, ast.Not):
                return b.not_(self._truth(v, t)), B1
            if isinstance(node.op, ast.UAdd):
                if t == B1:
                    raise Unsupported("+bool")
                return v, t
            if t == B1:
                v, t = b.zext(v, _I64), I8
            return (b.fneg(v) if t.kind == "f" else b.neg(v)), t
        if isinstance(node, ast.Compare):
            # a < b < c: (a < b) and (b < c), b evaluated once (both sides: no side effects)
            left = self._expr(node.left)
            out = None
            for op, right in zip(node.ops, node.comparators):
                right = self._expr(right)
                c = self._compare(op, *left, *right)
                out = c if out is None else b.and_(out, c)
                left = right
            return out, B1
        if isinstance(node, ast.BoolOp):
            return self._boolop(node)
        if isinstance(node, ast.IfExp):
            return self._ifexp(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        raise Unsupported(ast.unparse(node))

    def _boolop(self, node):
        """`a and b` / `a or b` of booleans, short-circuit as in Python (b may read an array
        at an index a checks)."""
        b = self.b
        is_and = isinstance(node.op, ast.And)
        end = b.append_basic_block("bool.end")
        incoming = []
        for k, e in enumerate(node.values):
            v, t = self._expr(e)
            if t != B1:
                raise Unsupported("and/or of non-booleans")
            if k == len(node.values) - 1:
                incoming.append((v, b.block))
                b.branch(end)
                break
            nxt = b.append_basic_block("bool.next")
            incoming.append((v, b.block))
            if is_and:
                b.cbranch(v, nxt, end)
            else:
                b.cbranch(v, end, nxt)
            b.position_at_end(nxt)
        b.position_at_end(end)
        phi = b.phi(ir.IntType(1))
        for v, block in incoming:
            phi.add_incoming(v, block)
        return phi, B1

    def _ifexp(self, node):
        """`a if c else b` with branches, as Numba lowers it: an untaken branch may read out of
        bounds, or divide an integer by zero, and computes nothing (LLVM's vectorizer
        if-converts what it may speculate). Selects of both values made a softplus row loop,
        an exp and a log1p in each branch, 1.2x slower than Numba's build."""
        b = self.b
        cond = self._truth(*self._expr(node.test))
        then_bb = b.append_basic_block("if.then")
        else_bb = b.append_basic_block("if.else")
        end_bb = b.append_basic_block("if.end")
        b.cbranch(cond, then_bb, else_bb)
        b.position_at_end(then_bb)
        v1, t1 = self._expr(node.body)
        then_end = b.block
        b.position_at_end(else_bb)
        v2, t2 = self._expr(node.orelse)
        else_end = b.block
        t = unify(t1, t2)
        b.position_at_end(then_end)
        v1 = self._cast(v1, t1, t)
        b.branch(end_bb)
        then_end = b.block
        b.position_at_end(else_end)
        v2 = self._cast(v2, t2, t)
        b.branch(end_bb)
        else_end = b.block
        b.position_at_end(end_bb)
        phi = b.phi(_LL[t])
        phi.add_incoming(v1, then_end)
        phi.add_incoming(v2, else_end)
        return phi, t

    def _binop(self, op, x, tx, y, ty):
        b = self.b
        if isinstance(op, (ast.BitAnd, ast.BitOr)):
            if tx != B1 or ty != B1:
                raise Unsupported("bitwise operation of integers")
            return (b.and_(x, y) if isinstance(op, ast.BitAnd) else b.or_(x, y)), B1
        if isinstance(op, ast.Div):
            t = promote(tx, ty) if tx.kind == "f" or ty.kind == "f" else F8
            return b.fdiv(self._cast(x, tx, t), self._cast(y, ty, t)), t
        t = promote(tx, ty)
        x, y = self._cast(x, tx, t), self._cast(y, ty, t)
        if isinstance(op, ast.Pow):
            if t.kind != "f" or tx.kind != "f" or ty.kind != "f":
                raise Unsupported("a power of integers")
            fn = self.module.declare_intrinsic("llvm.pow", [_LL[t]])
            return b.call(fn, [x, y]), t
        if t.kind == "f":
            if isinstance(op, ast.Mod):
                return self._float_mod(x, y), t
            if isinstance(op, ast.FloorDiv):
                raise Unsupported("floor division of floats")
            f = {ast.Add: b.fadd, ast.Sub: b.fsub, ast.Mult: b.fmul}[type(op)]
            return f(x, y), t
        if isinstance(op, (ast.FloorDiv, ast.Mod)):
            return self._floor_divmod(x, y, isinstance(op, ast.Mod)), t
        f = {ast.Add: b.add, ast.Sub: b.sub, ast.Mult: b.mul}[type(op)]
        return f(x, y), t

    def _floor_divmod(self, x, y, mod):
        """Python's floor division (or remainder) of int64s; a zero divisor gives 0."""
        b = self.b
        zero, one = ir.Constant(_I64, 0), ir.Constant(_I64, 1)
        is_zero = b.icmp_signed("==", y, zero)
        ys = b.select(is_zero, one, y)
        q = b.sdiv(x, ys)
        r = b.srem(x, ys)
        adjust = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(r, ys), zero))
        out = b.select(adjust, b.add(r, ys), r) if mod else b.select(adjust, b.sub(q, one), q)
        return b.select(is_zero, zero, out)

    def _float_mod(self, x, y):
        """Python's x % y of floats, as Numba computes it (CPython's float_divmod): the
        remainder takes the divisor's sign; a zero divisor gives NaN."""
        b = self.b
        zero = ir.Constant(x.type, 0.0)
        mod = b.frem(x, y)
        flip = b.and_(b.fcmp_unordered("!=", mod, zero),
                      b.xor(b.fcmp_ordered("<", y, zero), b.fcmp_ordered("<", mod, zero)))
        mod = b.select(flip, b.fadd(mod, y), mod)
        signed_zero = b.select(b.fcmp_ordered("<", y, zero), ir.Constant(x.type, -0.0), zero)
        mod = b.select(b.fcmp_ordered("==", mod, zero), signed_zero, mod)
        return b.select(b.fcmp_ordered("==", y, zero), b.frem(x, y), mod)

    def _compare(self, op, x, tx, y, ty):
        b = self.b
        t = promote(tx, ty)
        x, y = self._cast(x, tx, t), self._cast(y, ty, t)
        sym = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}[type(op)]
        if t.kind == "f":
            return b.fcmp_unordered(sym, x, y) if sym == "!=" else b.fcmp_ordered(sym, x, y)
        return b.icmp_signed(sym, x, y)

    def _call(self, node):
        b = self.b
        name = _dotted(node.func)
        args = node.args
        if name in _CASTS:
            if len(args) != 1:
                raise Unsupported(name)
            v, t = self._expr(args[0])
            return self._cast(v, t, _CASTS[name]), _CASTS[name]
        if name in _UNARY_MATH:
            v, t = self._expr(args[0])
            return _UNARY_MATH[name](b, self._cast(v, t, F8)), F8
        if name in _BINARY_MATH:
            (x, tx), (y, ty) = (self._expr(a) for a in args)
            return _BINARY_MATH[name](b, self._cast(x, tx, F8), self._cast(y, ty, F8)), F8
        if name in ("_max", "_min"):
            (x, tx), (y, ty) = (self._expr(a) for a in args)
            t = unify(tx, ty)
            x, y = self._cast(x, tx, t), self._cast(y, ty, t)
            op = ">=" if name == "_max" else "<="
            if t.kind == "f":
                keep = b.or_(b.fcmp_ordered(op, x, y), b.fcmp_unordered("!=", x, x))
            elif t == B1:
                keep = b.icmp_unsigned(op, x, y)
            else:
                keep = b.icmp_signed(op, x, y)
            return b.select(keep, x, y), t
        if name == "abs":
            v, t = self._expr(args[0])
            if t == B1:
                raise Unsupported("abs of a bool")
            if t == I8:
                return b.select(b.icmp_signed("<", v, ir.Constant(_I64, 0)), b.neg(v), v), I8
            return b.call(self.module.declare_intrinsic("llvm.fabs", [_LL[t]]), [v]), t
        if name in _INTRINSICS or name in _LIBM:
            v, t = self._expr(args[0])
            t2 = t if t.kind == "f" else F8
            v = self._cast(v, t, t2)
            if name in _INTRINSICS:
                fn = self.module.declare_intrinsic(_INTRINSICS[name], [_LL[t2]])
            else:
                fn = self._libm(_LIBM[name], t2, 1)
            return b.call(fn, [v]), t2
        if name in ("np.isnan", "np.isinf"):
            v, t = self._expr(args[0])
            if t.kind != "f":
                return ir.Constant(ir.IntType(1), 0), B1
            if name == "np.isnan":
                return b.fcmp_unordered("uno", v, v), B1
            fabs = self.module.declare_intrinsic("llvm.fabs", [_LL[t]])
            return b.fcmp_ordered("==", b.call(fabs, [v]), ir.Constant(_LL[t], np.inf)), B1
        if name in ("np.copysign", "np.fmod", "np.arctan2"):
            (x, tx), (y, ty) = (self._expr(a) for a in args)
            t = promote(tx, ty)
            t = t if t.kind == "f" else F8
            x, y = self._cast(x, tx, t), self._cast(y, ty, t)
            if name == "np.fmod":
                return b.frem(x, y), t
            if name == "np.copysign":
                fn = self.module.declare_intrinsic("llvm.copysign", [_LL[t]], ir.FunctionType(_LL[t], [_LL[t]] * 2))
            else:
                fn = self._libm("atan2", t, 2)
            return b.call(fn, [x, y]), t
        if name == "_rt.blas_threads_local":
            # blas.py's symbol: int set(int), the calling thread's BLAS thread count
            (v, t), = (self._expr(a) for a in args)
            fn = _c_function(self.module, blas.SYMBOL, _I32, [_I32])
            return b.sext(b.call(fn, [b.trunc(self._cast(v, t, I8), _I32)]), _I64), I8
        if _external_name(name):
            return self._external(name, args)
        raise Unsupported(name)

    def _external(self, name, args):
        """A call of a compiled C routine through its symbol (a Numba external function of the
        module: the symbol is registered when the module declares it, before any call):
        arrays' `.ctypes` go in as their data pointers, numbers converted to its parameter
        types; its integer status comes back as an int64."""
        fn = self.globals.get(name)
        if not isinstance(fn, numba.core.types.ExternalFunction):
            raise Unsupported(f"{name} is not a compiled routine")
        sig = fn.sig
        if len(args) != len(sig.args):
            raise Unsupported(f"{name}: argument count")
        lowered = {numba.types.voidptr: _I8P, numba.types.int64: _I64, numba.types.intc: _I32,
                   numba.types.float64: ir.DoubleType()}
        if sig.return_type not in (numba.types.int64, numba.types.intc) \
                or any(t not in lowered for t in sig.args):
            raise Unsupported(f"{name}: signature {sig}")
        b = self.b
        values = []
        for a, t in zip(args, sig.args):
            if t == numba.types.voidptr:
                if not (isinstance(a, ast.Attribute) and a.attr == "ctypes" and isinstance(a.value, ast.Name)):
                    raise Unsupported(f"{name}: a pointer argument other than an array's .ctypes")
                arr = self._array(a.value)
                if not arr.contig:
                    raise Unsupported(f"{name}: a strided array's pointer")
                values.append(b.bitcast(arr.data, _I8P))
                continue
            v, vt = self._expr(a)
            if t == numba.types.float64:
                values.append(self._cast(v, vt, F8))
            else:
                v = self._cast(v, vt, I8)
                values.append(v if t == numba.types.int64 else b.trunc(v, _I32))
        ret = lowered[sig.return_type]
        result = b.call(_c_function(self.module, fn.symbol, ret, [lowered[t] for t in sig.args]), values)
        return (result if ret == _I64 else b.sext(result, _I64)), I8

    def _libm(self, name, t, arity):
        cname = name + ("f" if t == F4 else "")
        fn = self.module.globals.get(cname)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(_LL[t], [_LL[t]] * arity), cname)
        return fn

    # -- parallel groups --
    def _parallel_self(self, call):
        """`_rt.parallel_self(<this function>, nch, <its parameters after ch, nch>)`: each
        chunk ch < nch a call of the body, on Numba's threading layer (codegen/launch.py)."""
        if len(call.args) != len(self.params) or self.params[:2] != ["ch", "nch"] or \
                [getattr(a, "id", None) for a in call.args[2:]] != self.params[2:]:
            raise Unsupported("parallel_self must pass the function's own parameters")
        nch = self._int(call.args[1])
        own = list(self.inner.args[2:])

        def call_chunk(builder, ch, total, vals):
            builder.call(self.inner, [ch, total] + vals)
        launch = build_launcher(self.module, f"{self.name}_launch", f"{self.name}_chunks", _I64,
                                [v.type for v in own], [v.type for v in own], lambda b, args: args, call_chunk)
        self.b.call(launch, [nch] + own)

    def _combine_parts(self, call):
        """`_rt.combine_parts(part, nch, out, op)` (runtime.combine_parts), inline: out[q] =
        part[0, q] op ... op part[nch - 1, q], in chunk order, without fastmath licence."""
        if len(call.args) != 4 or not isinstance(call.args[3], ast.Constant):
            raise Unsupported("combine_parts")
        part, out = (self._c_view(a) if isinstance(a, ast.Call) and _dotted(a.func) == "_rt.c_view"
                     else self._array(a) for a in (call.args[0], call.args[2]))
        nch = self._int(call.args[1])
        op = call.args[3].value
        if part.ndim != 2 or out.ndim != 1 or part.dtype != out.dtype or not part.contig:
            raise Unsupported("combine_parts operands")
        b = self.b
        t = out.dtype
        if t == B1:
            raise Unsupported("combine_parts of booleans")

        slot = self.allocas.alloca(_LL[t])
        with cgutils.for_range(b, out.shape[0]) as row:
            q = row.index
            b.store(b.load(_element(b, part, [ir.Constant(_I64, 0), q])), slot)
            with cgutils.for_range(b, nch, start=ir.Constant(_I64, 1)) as chunk:
                v = b.load(slot)
                p = b.load(_element(b, part, [chunk.index, q]))
                if op in (COMBINE_SUM, COMBINE_PROD):
                    if t.kind == "f":
                        r = (b.fadd if op == COMBINE_SUM else b.fmul)(v, p, flags=("contract",))
                    else:
                        r = (b.add if op == COMBINE_SUM else b.mul)(v, p)
                else:
                    sym = ">=" if op == COMBINE_MAX else "<="
                    if t.kind == "f":
                        keep = b.or_(b.fcmp_ordered(sym, v, p, flags=("contract",)),
                                     b.fcmp_unordered("!=", v, v, flags=("contract",)))
                    else:
                        keep = b.icmp_signed(sym, v, p)
                    r = b.select(keep, v, p)
                b.store(r, slot)
            b.store(b.load(slot), _element(b, out, [q]))


def _element(b, arr, idx):
    """The address of arr[idx] (an int64 per axis, nonnegative): a flat index into a
    C-contiguous array, else a byte offset from its strides."""
    if arr.contig:
        flat = idx[0]
        for i, dim in zip(idx[1:], arr.shape[1:]):
            flat = b.add(b.mul(flat, dim), i)
        return b.gep(arr.data, [flat], inbounds=True)
    off = None
    for i, st in zip(idx, arr.strides):
        t = b.mul(i, st)
        off = t if off is None else b.add(off, t)
    return b.bitcast(b.gep(b.bitcast(arr.data, _I8P), [off], inbounds=True), arr.data.type)


def _c_function(module, name, ret, args):
    """A function of the C API (resolved in the process when the object is loaded)."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
    return fn


# objects the compiled entries compare arguments with, as symbols holding their addresses
_TYPE_OBJECTS = {"ndarray": np.ndarray, "float": float, "float64": np.float64, "float32": np.float32,
                 "int": int, "int64": np.int64, "bool_": np.bool_, "True": True, "False": False, "None": None}
_TYPE_SYMBOLS = {k: f"jitgraph_object_{k}" for k in _TYPE_OBJECTS}
_TYPE_CELLS = {k: ctypes.c_void_p(id(v)) for k, v in _TYPE_OBJECTS.items()}


# ---- the argument reader: one function per process, shared by every compiled entry -----------
READER = "jitgraph_native_read_args"
# argument kinds in a variant's code table (4 int32 per argument: kind, ndim, two type numbers)
_K_INT, _K_F8, _K_F4, _K_BOOL, _K_ARRAY, _K_CARRAY = range(6)
_SCALAR_KINDS = {I8: _K_INT, F8: _K_F8, F4: _K_F4, B1: _K_BOOL}


def _arg_codes(specs):
    """(code table, buffer slots) of a variant: what the reader checks and reads per argument.
    A scalar fills one 8-byte slot (read back as its own type), an array its data pointer,
    then its shape, then (strided) its strides."""
    codes, slots = [], 0
    for spec in specs:
        if spec[0] == "s":
            codes += [_SCALAR_KINDS[spec[1]], 0, 0, 0]
            slots += 1
            continue
        _, dt, nd, contig = spec
        nums = _TYPE_NUMS[dt]
        codes += [_K_CARRAY if contig else _K_ARRAY, nd, nums[0], nums[-1]]
        slots += 1 + (nd if contig else 2 * nd)
    return codes, slots


def _reader_module():
    """int32 read(PyObject **argv, int64 nargs, int32 *codes, int64 n, int64 *out): 0 when the
    n arguments match their codes (their values then in `out`), 1 when one does not (the
    caller hands them to Python), 2 when reading one raised (an int past int64)."""
    mod = ir.Module(name=READER)
    mod.triple = _triple()
    i8 = ir.IntType(8)
    fn = ir.Function(mod, ir.FunctionType(_I32, [_I8P.as_pointer(), _I64, _I32.as_pointer(), _I64,
                                                 _I64.as_pointer()]), READER)
    argv, nargs, codes, n, out = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    mismatch = fn.append_basic_block("mismatch")
    ir.IRBuilder(mismatch).ret(ir.Constant(_I32, 1))
    raised = fn.append_basic_block("raised")
    ir.IRBuilder(raised).ret(ir.Constant(_I32, 2))
    slot_var = b.alloca(_I64)
    b.store(ir.Constant(_I64, 0), slot_var)

    def known(name):
        g = mod.globals.get(_TYPE_SYMBOLS[name]) or ir.GlobalVariable(mod, _I8P, _TYPE_SYMBOLS[name])
        return b.load(g)

    def field(obj, offset, ty):
        return b.bitcast(b.gep(obj, [ir.Constant(_I64, offset)]), ty.as_pointer())

    def check(cond):
        ok = fn.append_basic_block("ok")
        b.cbranch(cond, ok, mismatch)
        b.position_at_end(ok)

    def slot_ptr(offset, ty):
        return b.bitcast(b.gep(out, [b.add(b.load(slot_var), offset)]), ty.as_pointer())

    check(b.icmp_signed("==", nargs, n))
    with cgutils.for_range(b, n) as loop:
        k = loop.index
        obj = b.load(b.gep(argv, [k]))
        kind_of = b.load(field(obj, 8, _I8P))                    # ob_type
        code = [b.load(b.gep(codes, [b.add(b.mul(k, ir.Constant(_I64, 4)), ir.Constant(_I64, j))]))
                for j in range(4)]
        kind, nd32, num_a, num_b = code
        nd = b.sext(nd32, _I64)
        done = fn.append_basic_block("next")
        cases = {kd: fn.append_basic_block(f"kind{kd}") for kd in range(6)}
        switch = b.switch(kind, mismatch)
        for kd, block in cases.items():
            switch.add_case(ir.Constant(_I32, kd), block)
        one = ir.Constant(_I64, 1)

        # a Python int (PyLong_AsLongLong: OverflowError past int64) or NumPy's int64
        b.position_at_end(cases[_K_INT])
        is_long = b.icmp_unsigned("==", kind_of, known("int"))
        check(b.or_(is_long, b.icmp_unsigned("==", kind_of, known("int64"))))
        with b.if_else(is_long) as (py_int, np_int):
            with py_int:
                v1 = b.call(_c_function(mod, "PyLong_AsLongLong", _I64, [_I8P]), [obj])
                bb1 = b.block
            with np_int:
                v2 = b.load(field(obj, 16, _I64))
                bb2 = b.block
        v = b.phi(_I64)
        v.add_incoming(v1, bb1)
        v.add_incoming(v2, bb2)
        with b.if_then(b.icmp_signed("==", v, ir.Constant(_I64, -1))):
            err = b.call(_c_function(mod, "PyErr_Occurred", _I8P, []), [])
            no_error = fn.append_basic_block("no_error")
            b.cbranch(b.icmp_unsigned("==", err, ir.Constant(_I8P, None)), no_error, raised)
            b.position_at_end(no_error)
        b.store(v, slot_ptr(ir.Constant(_I64, 0), _I64))
        b.store(b.add(b.load(slot_var), one), slot_var)
        b.branch(done)

        # a Python float (ob_fval) or NumPy's float64 (its obval), both at offset 16
        b.position_at_end(cases[_K_F8])
        check(b.or_(b.icmp_unsigned("==", kind_of, known("float")),
                    b.icmp_unsigned("==", kind_of, known("float64"))))
        b.store(b.load(field(obj, 16, ir.DoubleType())), slot_ptr(ir.Constant(_I64, 0), ir.DoubleType()))
        b.store(b.add(b.load(slot_var), one), slot_var)
        b.branch(done)

        b.position_at_end(cases[_K_F4])
        check(b.icmp_unsigned("==", kind_of, known("float32")))
        b.store(b.load(field(obj, 16, ir.FloatType())), slot_ptr(ir.Constant(_I64, 0), ir.FloatType()))
        b.store(b.add(b.load(slot_var), one), slot_var)
        b.branch(done)

        b.position_at_end(cases[_K_BOOL])
        is_true = b.icmp_unsigned("==", obj, known("True"))
        is_bool = b.or_(is_true, b.icmp_unsigned("==", obj, known("False")))
        check(b.or_(is_bool, b.icmp_unsigned("==", kind_of, known("bool_"))))
        scalar = b.icmp_unsigned("!=", b.load(field(obj, 16, i8)), ir.Constant(i8, 0))
        b.store(b.zext(b.select(is_bool, is_true, scalar), i8), slot_ptr(ir.Constant(_I64, 0), i8))
        b.store(b.add(b.load(slot_var), one), slot_var)
        b.branch(done)

        for kd in (_K_ARRAY, _K_CARRAY):
            b.position_at_end(cases[kd])
            check(b.icmp_unsigned("==", kind_of, known("ndarray")))
            check(b.icmp_signed("==", b.load(field(obj, _ND, _I32)), nd32))
            num = b.load(field(b.load(field(obj, _DESCR, _I8P)), _TYPE_NUM, _I32))
            check(b.or_(b.icmp_signed("==", num, num_a), b.icmp_signed("==", num, num_b)))
            if kd == _K_CARRAY:
                flags = b.load(field(obj, _FLAGS, _I32))
                check(b.icmp_unsigned("!=", b.and_(flags, ir.Constant(_I32, _C_CONTIGUOUS)), ir.Constant(_I32, 0)))
            b.store(b.load(field(obj, _DATA, _I8P)), slot_ptr(ir.Constant(_I64, 0), _I8P))
            dims = b.bitcast(b.load(field(obj, _DIMS, _I8P)), _I64.as_pointer())
            with cgutils.for_range(b, nd) as d:
                b.store(b.load(b.gep(dims, [d.index])), slot_ptr(b.add(d.index, one), _I64))
            if kd == _K_ARRAY:
                strides = b.bitcast(b.load(field(obj, _STRIDES, _I8P)), _I64.as_pointer())
                with cgutils.for_range(b, nd) as d:
                    b.store(b.load(b.gep(strides, [d.index])), slot_ptr(b.add(b.add(d.index, nd), one), _I64))
                b.store(b.add(b.load(slot_var), b.add(b.add(nd, nd), one)), slot_var)
            else:
                b.store(b.add(b.load(slot_var), b.add(nd, one)), slot_var)
            b.branch(done)
        b.position_at_end(done)
    b.ret(ir.Constant(_I32, 0))
    return mod


def _fast_flags(module, flags):
    """Numba's fastmath pass: `flags` on every floating-point operation written without any,
    and on calls returning floats (numba.core.fastmathpass)."""
    if not flags:
        return
    # fneg too (Numba negates with fsub -0.0, x): InstCombine drops the flags of a product it
    # merges with an unflagged negation, and a division left without `arcp` costs its
    # reciprocal (an LSTM cell's backward loop ran 1.8x slower)
    binops = {"fadd", "fsub", "fmul", "fdiv", "frem", "fcmp", "fneg"}
    for fn in module.functions:
        for block in fn.blocks:
            for instr in block.instructions:
                if instr.opname in binops and not instr.flags:
                    instr.flags.extend(flags)
                elif isinstance(instr, ir.CallInstr) and instr.type in (ir.FloatType(), ir.DoubleType()):
                    for f in flags:
                        instr.fastmath.add(f)


# ---- LLVM: one target machine and one execution engine per process ---------------------------
_LOCK = threading.RLock()
_ENGINE = None
_TM = None
_LOADED = {}     # symbol -> address


@functools.cache
def _triple():
    """The process's target triple (asked of LLVM once)."""
    return llvm.get_process_triple()


def _target():
    global _TM, _ENGINE
    if _TM is None:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        target = llvm.Target.from_triple(_triple())
        _TM = target.create_target_machine(cpu=build.host_cpu(),
                                           features=llvm.get_host_cpu_features().flatten(),
                                           opt=3, reloc="static", codemodel="jitdefault")
        for key, cell in _TYPE_CELLS.items():
            llvm.add_symbol(_TYPE_SYMBOLS[key], ctypes.addressof(cell))
        empty = llvm.parse_assembly("")
        empty.triple = _triple()
        _ENGINE = llvm.create_mcjit_compiler(empty, _TM)
    return _TM




def target_stamp():
    """What compiled objects depend on besides the source: versions, this translator's code
    and the helpers' it emits (mathlib's builders, launch.py's launcher; numba_cache's
    HELPERS_STAMP), and the machine."""
    with open(__file__, "rb") as f:
        own = hashlib.sha256(f.read()).hexdigest()[:16]
    return "\0".join((llvmlite.__version__, numba.__version__, np.__version__, __version__, own,
                      numba_cache.HELPERS_STAMP, _triple(), build.host_cpu(),
                      llvm.get_host_cpu_features().flatten(), MAGIC.decode()))


_stamp = functools.cache(target_stamp)


def _pass_builder(tm, speed, loop_vectorize):
    opts = llvm.create_pipeline_tuning_options(speed_level=speed)
    opts.loop_vectorization = loop_vectorize
    opts.slp_vectorization = False
    return llvm.create_pass_builder(tm, opts)


def _compile_object(module):
    tm = _target()
    mod = llvm.parse_assembly(str(module))
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    # Numba's pipeline (numba.core.codegen, at its defaults): O3's function passes on each
    # function, then a cheap module pipeline at O0 (loops rotated, instructions combined), then
    # O3 with the loop vectorizer, the SLP vectorizer off. Without the function passes, an LSTM
    # cell's backward loop divided four times per element where Numba's build divides three
    # times (reciprocals shared); with the cheap round at O1 instead of O0, a loop over a row
    # of 16 was unrolled before it was vectorized, and ran 2.2x as long.
    fpm_pb = _pass_builder(tm, 3, True)
    fpm = fpm_pb.getFunctionPassManager()
    for fn in mod.functions:
        if not fn.is_declaration:
            fpm.run(fn, fpm_pb)
    pb = _pass_builder(tm, 0, False)
    pm = pb.getModulePassManager()
    pm.add_loop_rotate_pass()
    pm.add_instruction_combine_pass()
    pm.add_jump_threading_pass()
    pm.run(mod, pb)
    pb = _pass_builder(tm, 3, True)
    pb.getModulePassManager().run(mod, pb)
    return tm.emit_object(mod)


def _load_reader():
    """Load the argument reader (compiled once per machine, kept in the disk cache) and make
    its symbol known to the objects loaded after it."""
    if READER in _LOADED:
        return
    key = hashlib.sha256(("reader\0" + _stamp()).encode()).hexdigest()[:32]
    d = _native_dir(helpers=True)
    obj = _read_cached(key, d)
    if obj is None:
        obj = _compile_object(_reader_module())
        _write_cached(key, obj, directory=d)
    _ENGINE.add_object_file(llvm.ObjectFileRef.from_data(obj))
    _ENGINE.finalize_object()
    addr = _ENGINE.get_function_address(READER)
    llvm.add_symbol(READER, addr)
    _LOADED[READER] = addr


def _load_object(obj, symbol):
    """(entry address, address of its `_slow` global) of a compiled object, loaded once."""
    with _LOCK:
        addrs = _LOADED.get(symbol)
        if addrs is None:
            _target()
            _load_reader()
            _ENGINE.add_object_file(llvm.ObjectFileRef.from_data(obj))
            _ENGINE.finalize_object()
            addrs = _LOADED[symbol] = (_ENGINE.get_function_address(symbol),
                                       _ENGINE.get_global_value_address(f"{symbol}_slow"))
        return addrs


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p), ("ml_flags", ctypes.c_int),
                ("ml_doc", ctypes.c_char_p)]


_METH_FASTCALL = 0x0080
_new_builtin = ctypes.pythonapi.PyCFunction_NewEx
_new_builtin.restype = ctypes.py_object
_new_builtin.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]


class _Variant:
    """A loaded variant: `call`, the builtin function of its compiled entry, with the method
    table and the Python objects its compiled code points to kept alive here."""

    def __init__(self, addr, slow_addr, name, slow):
        self.slow = slow               # the compiled entry holds its address (the `_slow` global)
        ctypes.c_void_p.from_address(slow_addr).value = id(slow)
        self.name = name.encode()
        self.method = _MethodDef(self.name, addr, _METH_FASTCALL, None)
        self.call = _new_builtin(ctypes.addressof(self.method), None, None)


# ---- the decorated function ---------------------------------------------------------------------
class NativeFunction:
    """A generated loop function compiled by `_Translator` per variant of argument types (see
    the module docstring); `fallback()` is the same function as Numba compiles it."""

    def __init__(self, py_func, tree, noalias, parallel, options):
        self.py_func = py_func
        self.__name__ = py_func.__name__
        self.__module__ = py_func.__module__
        self.__doc__ = py_func.__doc__
        self.tree = tree
        self.noalias, self.parallel, self.options = noalias, parallel, options
        fastmath = options.get("fastmath") or ()
        self.fastmath = ("fast",) if fastmath is True else tuple(sorted(fastmath))
        self._text = None
        self.variants = {}       # tuple of arg specs -> (ctypes function, check of float scalars)
        self.compiled = 0        # variants compiled here / loaded from the disk cache
        self.loaded = 0
        self._numba = None
        self.refused = None      # why it compiles with Numba instead (after fallback())
        self._call = self._first
        self._lock = threading.Lock()

    def __repr__(self):
        return f"<jitgraph native function {self.__name__}>"

    @property
    def text(self):
        """The function's text (without decorators), which names its compiled variants."""
        if self._text is None:
            self._text = ast.unparse(self.tree)
        return self._text

    def __call__(self, *args):
        return self._call(*args)

    def fallback(self, reason=None):
        """The Numba-compiled function (made once). Its module's name for it becomes Numba's
        dispatcher: a parallel group launches its chunks on the function that name holds."""
        if self._numba is None:
            self.refused = reason
            if DEBUG:
                print(f"jitgraph native: {self.__module__}.{self.__name__} compiles with Numba: {reason}")
            opts = dict(self.options)
            deco = group_njit(**opts) if self.parallel else loop_njit(**opts) if self.noalias \
                else numba.njit(**opts)
            self._numba = deco(self.py_func)
            if self.py_func.__globals__.get(self.__name__) is self:
                self.py_func.__globals__[self.__name__] = self._numba
            if build.cache_enabled() and self.__module__ != "__main__":
                numba_cache.enable([self._numba], os.path.join(build.cache_dir(), "kernels", "__pycache__"),
                                   check=build.private_dir)
        return self._numba

    def _first(self, *args):
        return self._slow(args)

    def _slow(self, args):
        """A call the current variant's entry refused (or the first): the variant of these
        argument types, compiled or loaded, called. Arguments are made canonical first (an
        ndarray subclass as its base class, other NumPy integers as Python ints), so that
        the variant's own checks accept them; a refusal then would be a bug, not a loop."""
        if self._numba is not None:
            return self._numba(*args)
        args = tuple(_canonical(a) for a in args)
        try:
            specs = tuple(arg_spec(a) for a in args)
        except Unsupported as e:
            self._call = self.fallback(str(e))
            return self._numba(*args)
        with self._lock:
            variant = self.variants.get(specs)
            if variant is None:
                try:
                    variant = self._variant(specs)
                except Unsupported as e:
                    self._call = self.fallback(str(e))
                    return self._numba(*args)
                self.variants[specs] = variant
        self._call = variant.call
        if getattr(_REFUSALS, "depth", 0):
            raise RuntimeError(f"jitgraph: native function {self.__name__} refused the argument types it "
                               "was compiled for")
        _REFUSALS.depth = 1
        try:
            return variant.call(*args)
        finally:
            _REFUSALS.depth = 0

    def _key(self, specs):
        h = hashlib.sha256()
        for part in (self.text, repr([(s[0], str(s[1])) + tuple(s[2:]) for s in specs]), repr(self.noalias),
                     repr(self.fastmath), _stamp()):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:32]

    def _variant(self, specs):
        key = self._key(specs)
        symbol = f"jg_native_{key}"
        obj = _read_cached(key)
        if obj is None:
            module = _Translator(self.tree, specs, symbol, self.noalias, self.py_func.__globals__).build()
            _fast_flags(module, self.fastmath)
            obj = _compile_object(module)
            _write_cached(key, obj, self.text)
            self.compiled += 1
        else:
            self.loaded += 1
        addr, slow_addr = _load_object(obj, symbol)
        return _Variant(addr, slow_addr, self.__name__, lambda *args: self._slow(args))

    # for lowering.py's bookkeeping (compiled here, or loaded from the disk cache)
    def cached_on_disk(self):
        """Does the disk cache hold a compiled variant of this function?"""
        index = _index_path(self.text)
        return index is not None and os.path.exists(index)


_REFUSALS = threading.local()      # inside _slow's call of a variant (a refusal there is a bug)


def _canonical(a):
    """An argument as compiled entries take it: an ndarray subclass as an ndarray, a NumPy
    integer other than int64 as a Python int."""
    if isinstance(a, np.ndarray):
        return a if type(a) is np.ndarray else a.view(np.ndarray)
    if isinstance(a, np.integer) and type(a) is not np.int64:
        return int(a)
    return a


# ---- disk cache of compiled objects ------------------------------------------------------------
def _native_dir(helpers=False):
    """Where compiled objects are kept: beside the kernels, or (`helpers`: the argument reader,
    compiled once per machine) beside the runtime helpers Numba caches."""
    if not build.cache_enabled():
        return None
    try:
        if helpers:
            return build.private_dir(os.path.join(build.private_dir(build.helpers_cache_dir()), "native"))
        kdir = build.private_dir(os.path.join(build.private_dir(build.cache_dir()), "kernels"))
        return build.private_dir(os.path.join(build.private_dir(os.path.join(kdir, "__pycache__")), "native"))
    except OSError:
        return None


def _index_path(text):
    d = _native_dir()
    if d is None:
        return None
    return os.path.join(d, hashlib.sha256(text.encode()).hexdigest()[:32] + ".any")


def _read_cached(key, d=None):
    d = d or _native_dir()
    if d is None:
        return None
    return numba_cache.read_checked(os.path.join(d, key + ".o"), MAGIC, "compiled native loop", "compiling it again")


def _write_cached(key, obj, text=None, directory=None):
    """Keep a compiled object, and mark its function (of `text`) as having one (`cached_on_disk`)."""
    d = directory or _native_dir()
    if d is None:
        return
    path = os.path.join(d, key + ".o")
    try:
        build._write(d, path, numba_cache.checked(MAGIC, obj))
        index = text is not None and _index_path(text)
        if index and not os.path.exists(index):
            build._write(d, index, b"")
    except OSError as e:
        numba_cache.warn_write_failed(path, e)


# ---- the decorator --------------------------------------------------------------------------------
_MODULE_DEFS = (None, {})       # the last module file read: (its text, {first line: its FunctionDef})
_PARSED_MODULE_MAX = 16384      # characters: larger modules' functions are read one by one


def _function_tree(fn):
    """The syntax tree of function `fn` (without its decorators), or None. A module's functions
    are decorated one after another as it runs, so its file is parsed once for all of them
    (inspect.getsource tokenizes the file's lines for each: a third of a decoration's time)."""
    global _MODULE_DEFS
    code = getattr(fn, "__code__", None)
    tree = None
    text = "".join(linecache.getlines(code.co_filename, fn.__globals__)) if code is not None else ""
    # (a kernel module's own copies of its shared functions are decorated too: its file, an
    # entry of up to thousands of lines, is left to inspect's reading of each function)
    if code is not None and len(text) <= _PARSED_MODULE_MAX:
        held = _MODULE_DEFS           # (one read: another thread may replace it)
        if held[0] != text:
            try:
                body = ast.parse(text).body if text else []
            except SyntaxError:
                body = []
            held = _MODULE_DEFS = (text, {min([d.lineno for d in node.decorator_list] + [node.lineno]): node
                                          for node in body if isinstance(node, ast.FunctionDef)})
        tree = held[1].get(code.co_firstlineno)
        if tree is not None and tree.name != fn.__name__:
            tree = None
    if tree is None:                    # a nested function, one in a large module or a string
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
        except (OSError, TypeError, SyntaxError, IndexError):
            return None
        if not isinstance(tree, ast.FunctionDef):
            return None
    tree.decorator_list = []
    return tree


def native_njit(noalias=True, parallel=False, **options):
    """Decorate a generated loop function: compiled by this module where its text is in the
    translated language, else by Numba as `loop_njit` (noalias), `group_njit` (parallel) or
    `njit` compile it."""
    def decorate(fn):
        if build.replaced_on_import(fn):
            return fn          # (replaced by its shared module's function before anything runs)
        tree = _function_tree(fn) if ENABLED and not numba.config.DISABLE_JIT else None
        if tree is None or not supported(tree):
            deco = group_njit(**options) if parallel else loop_njit(**options) if noalias else numba.njit(**options)
            return deco(fn)
        return NativeFunction(fn, tree, noalias, parallel, options)
    return decorate
