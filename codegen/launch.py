"""Parallel chunks without a parfor: `parallel_chunks(fn, nch, *args)` runs
`fn(ch, nch, *args)` for ch in range(nch) on Numba's threads.

A `prange` loop costs Numba's parfor passes 0.15-0.8 s of compile each (a gufunc built,
typed and lowered per loop, whatever its body), which made a program's multi-threaded
build take 2-4x as long as its serial one. This intrinsic compiles to a call of the
threading layer's own `parallel_for` (the function Numba's parfors call, with the same
contract under workqueue, OpenMP and TBB) and a small wrapper that runs a thread's share
of the chunks: `fn` is an ordinary compiled function, so a multi-threaded kernel costs
about what its serial build costs, and a launch ~2 us instead of ~9 us.

The chunk a call computes depends on `ch` and `nch` only, never on the thread that runs
it, so the result is the same bits on any number of threads. On one thread (the thread
policy's one-thread mode, `numba.set_num_threads(1)`) or with one chunk the wrapper runs
on the calling thread and no worker is woken.

The layer's threads: jitgraph asks for OpenMP's (jitgraph/__init__.py), whose workers spin a
while after a launch: the next launch started them in 1-7 us, where the workqueue layer's
sleeping workers took 100-500 us to wake on a 2-core virtual machine. GNU OpenMP's threads
do not survive a fork, and Numba terminates a forked child that launches on them: a fork
clears `_PARALLEL_OK` in the child, whose launches then run on the calling thread.

`fn` must not raise: generated chunk bodies cannot (NumPy's error model, no bounds
checks, no allocation); a status it returned would be dropped. The calling thread keeps
the GIL while the workers run (they never take it), so no other Python thread starts a
kernel meanwhile: the BLAS thread count a kernel sets around its region stays its own
(codegen/blas.py).
"""
import ctypes
import os

import llvmlite.binding as llvm
import numba
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.core.dispatcher import _FunctionCompiler
from numba.extending import intrinsic
from numba.np.ufunc import parallel as _parallel

from .symbols import call_type, declare_callee, mark_loop_function

# 1 while launches may use the threading layer; 0 in a process forked from one that may have
# started its threads (GNU OpenMP's threads do not survive a fork: Numba terminates a forked
# child that launches on them). Launchers read it through an external symbol, so kernels
# loaded from the disk cache link to it as they link to the layer's functions.
_PARALLEL_OK = ctypes.c_int(1)
PARALLEL_OK_SYMBOL = "jitgraph_parallel_ok"


def _after_fork_in_child():
    _PARALLEL_OK.value = 0


if not numba.config.DISABLE_JIT:
    # registers `numba_parallel_for` and `get_num_threads` with LLVM: kernels loaded from
    # the disk cache link against them
    _parallel._launch_threads()
    llvm.add_symbol(PARALLEL_OK_SYMBOL, ctypes.addressof(_PARALLEL_OK))
    os.register_at_fork(after_in_child=_after_fork_in_child)

_I32 = ir.IntType(32)
# how a parallel reduction's per-chunk partial results combine (runtime.combine_parts, and
# its inline form in codegen/native.py)
COMBINE_SUM, COMBINE_PROD, COMBINE_MAX, COMBINE_MIN = range(4)


def threading_layer():
    """The name of Numba's threading layer ("omp", "workqueue", "tbb"), or "none" without JIT."""
    if numba.config.DISABLE_JIT:
        return "none"
    return numba.threading_layer()


def threads_usable():
    """False in a process forked after the threading layer started: its launches run their
    chunks on the calling thread."""
    return bool(_PARALLEL_OK.value)


def _field(builder, ptr, k):
    return builder.gep(ptr, [ir.Constant(_I32, 0), ir.Constant(_I32, k)])


@intrinsic
def parallel_chunks(typingctx, fn, nch, *args):
    """fn(ch, nch, *args) for ch in range(nch), on Numba's threads (see the module doc)."""
    if not isinstance(fn, types.Dispatcher) or not isinstance(nch, types.Integer):
        return None
    argtys = tuple(args)
    callsig = call_type(typingctx, fn, (types.int64, types.int64) + argtys)

    def codegen(context, builder, signature, llargs):
        llnch = context.cast(builder, llargs[1], nch, types.int64)
        vals = [builder.extract_value(llargs[2], k) for k in range(len(argtys))]
        # the chunk function's own code is called through its symbol, not linked in (symbols.py)
        callee = declare_callee(context, builder, fn.dispatcher, callsig)
        packer = context.get_arg_packer(argtys)
        launch = _launcher(context, builder.module, callee, callsig, [v.type for v in vals], packer)
        builder.call(launch, [llnch] + list(packer.as_arguments(builder, vals)))
        return context.get_dummy_value()

    return types.none(fn, nch, types.StarArgTuple.from_types(argtys)), codegen


@intrinsic
def parallel_self(typingctx, fn, nch, *args):
    """fn(ch, nch, *args) for ch in range(nch), on Numba's threads, where `fn` is the function
    whose code makes this call and `args` its own parameters after `ch, nch`, in order: a
    Python entry's group function runs its chunks in itself (`if ch < 0:` the launch, else
    one chunk), so that it is one compiled function, not a chunk function and a launcher of
    it. The call is to the function being compiled, in its own LLVM module (no symbol, no
    compile of `fn`, which is under way), with the values the function received: `args`
    only type the call (a call whose types are not the function's own is a TypeError)."""
    # inside its own compile, Numba types the function's name as a recursive call
    if not isinstance(fn, (types.Dispatcher, types.RecursiveCall)) or not isinstance(nch, types.Integer):
        return None
    callsig = types.none(types.int64, types.int64, *args)

    def codegen(context, builder, signature, llargs):
        callee = builder.function
        if callee.function_type != context.call_conv.get_function_type(types.none, callsig.args):
            raise TypeError(f"parallel_self: {callee.name} must pass its own parameters after ch "
                            "and nch, in order, and return nothing")
        llnch = context.cast(builder, llargs[1], nch, types.int64)
        packer = context.get_arg_packer(callsig.args)
        own = packer.from_arguments(builder, context.call_conv.get_arguments(callee))[2:]
        packer = context.get_arg_packer(callsig.args[2:])
        launch = _launcher(context, builder.module, callee, callsig, [v.type for v in own], packer)
        builder.call(launch, [llnch] + list(packer.as_arguments(builder, own)))
        return context.get_dummy_value()

    return types.none(fn, nch, types.StarArgTuple.from_types(tuple(args))), codegen


def _launcher(context, mod, callee, callsig, val_types, packer):
    """The module's launcher of one Numba-compiled chunk function: void(intp nch, the
    arguments as Numba passes them), built once per module and chunk function. A call site
    only calls it. (Building the argument block at every call site instead made LLVM's
    function passes quadratic in the stores: a kernel of 60 launches of 22 arrays compiled in
    6.7 s against 2.9 s.)"""
    def call_chunk(builder, ch, nch, vals):
        context.call_conv.call_function(builder, callee, callsig.return_type, callsig.args,
                                        [ch, nch] + vals, attrs=("noinline",))
    return build_launcher(mod, f"jg_launch_{callee.name}", f"jg_chunks_{callee.name}",
                          context.get_value_type(types.intp), list(packer.argument_types), val_types,
                          packer.from_arguments, call_chunk)


def build_launcher(mod, name, chunks_name, intp, arg_types, val_types, unpack, call_chunk):
    """The launcher `name` in module `mod` (made once; later calls return it): void(intp nch,
    *arg_types). `unpack(builder, args)` gives, from its arguments after nch, the values (of
    `val_types`) every chunk receives; `call_chunk(builder, ch, nch, values)` calls the chunk
    function. On one thread, with one chunk or in a forked child (`_PARALLEL_OK`), the chunks
    run on the calling thread, else on the threading layer's `parallel_for`. Numba-compiled
    kernels (`_launcher`) and natively compiled groups (codegen/native.py) both launch this way."""
    i8p = ir.IntType(8).as_pointer()
    lfn = cgutils.get_or_insert_function(mod, ir.FunctionType(ir.VoidType(), [intp] + list(arg_types)), name)
    if not lfn.is_declaration:
        return lfn
    lfn.linkage = "internal"
    lfn.attributes.add("noinline")
    data_t = ir.LiteralStructType(list(val_types) + [intp])

    # The wrapper: void(char **args, intp *dims, intp *steps, void *data), the gufunc
    # contract of parallel_for. A thread gets args[0] = (char *) first chunk (base NULL,
    # step 1) and dims[0] = its count of chunks. Neither the wrapper nor the chunk
    # function is inlined into its caller, so the workers and the calling thread (on
    # one thread) run the same instructions: the same bits.
    wty = ir.FunctionType(ir.VoidType(), [i8p.as_pointer(), intp.as_pointer(), intp.as_pointer(), i8p])
    wfn = cgutils.get_or_insert_function(mod, wty, chunks_name)
    if wfn.is_declaration:
        wfn.linkage = "internal"
        wfn.attributes.add("noinline")
        wb = ir.IRBuilder(wfn.append_basic_block("entry"))
        wargs, wdims, _, wdata = wfn.args
        first = wb.ptrtoint(wb.load(wargs), intp)
        count = wb.load(wdims)
        data = wb.bitcast(wdata, data_t.as_pointer())
        vals = [wb.load(_field(wb, data, k)) for k in range(len(val_types))]
        total = wb.load(_field(wb, data, len(val_types)))
        with cgutils.for_range(wb, count) as loop:
            call_chunk(wb, wb.add(first, loop.index), total, vals)
        wb.ret_void()

    b = ir.IRBuilder(lfn.append_basic_block("entry"))
    nch = lfn.args[0]
    data = cgutils.alloca_once(b, data_t)
    for k, v in enumerate(unpack(b, lfn.args[1:])):
        b.store(v, _field(b, data, k))
    b.store(nch, _field(b, data, len(val_types)))
    argv = cgutils.alloca_once(b, i8p)
    b.store(ir.Constant(i8p, None), argv)
    dims = cgutils.alloca_once(b, intp)
    b.store(nch, dims)
    steps = cgutils.alloca_once(b, intp)
    b.store(ir.Constant(intp, 1), steps)
    wargs = [argv, dims, steps, b.bitcast(data, i8p)]
    # get_num_threads returns a C int (a parfor in the same module declares it intp)
    get_num_threads = cgutils.get_or_insert_function(mod, ir.FunctionType(_I32, []), "get_num_threads")
    nthreads = b.call(get_num_threads, [])
    if nthreads.type != intp:
        nthreads = b.sext(nthreads, intp)
    ok = mod.globals.get(PARALLEL_OK_SYMBOL)
    if ok is None:
        ok = ir.GlobalVariable(mod, _I32, PARALLEL_OK_SYMBOL)
    serial = b.or_(b.or_(b.icmp_signed("<=", nthreads, ir.Constant(intp, 1)),
                         b.icmp_signed("<=", nch, ir.Constant(intp, 1))),
                   b.icmp_signed("==", b.load(ok), ir.Constant(_I32, 0)))
    with b.if_else(serial) as (on_this_thread, on_threads):
        with on_this_thread:
            b.call(wfn, wargs)
        with on_threads:
            pfor = cgutils.get_or_insert_function(
                mod, ir.FunctionType(ir.VoidType(), [i8p] * 5 + [intp] * 3), "numba_parallel_for")
            b.call(pfor, [b.bitcast(wfn, i8p)] + [b.bitcast(a, i8p) for a in wargs]
                   + [ir.Constant(intp, 0), ir.Constant(intp, 1), nthreads])
    b.ret_void()
    return lfn


class _NoAliasCompiler(_FunctionCompiler):
    def _customize_flags(self, flags):
        flags.noalias = True
        return flags


def chunk_njit(**options):
    """`njit(**options)` for a chunk body, which compiled code calls, never Python.

    Without the Python and C wrappers Numba would build for it: ~75 ms of compile for a
    chunk of 13 arrays (a call from Python would jump to the missing wrapper and crash).
    With its array arguments compiled as `noalias` (LLVM may assume no two of them share
    memory), as Numba compiles a prange body whose arrays its alias analysis finds
    distinct: without it a chunk of the GMM benchmark's loops ran 1.3x slower than the
    same loop in a prange. Chunk arguments are distinct buffers of the memory plan; the
    one overlap it makes, an elementwise loop writing over an operand at the point it
    reads it (codegen/memory.py), reads each element before it writes it."""
    def decorate(fn):
        d = njit(**dict(options, no_cpython_wrapper=True, no_cfunc_wrapper=True))(fn)
        if isinstance(getattr(d, "_compiler", None), _FunctionCompiler):
            d._compiler.__class__ = _NoAliasCompiler
        return mark_loop_function(d)
    return decorate


def loop_njit(**options):
    """`njit(**options)` for an outlined serial loop that a Python entry calls itself: its
    arrays `noalias`, as a chunk body's (`chunk_njit`), with the Python wrapper that call needs."""
    def decorate(fn):
        d = njit(**dict(options, no_cfunc_wrapper=True))(fn)
        if isinstance(getattr(d, "_compiler", None), _FunctionCompiler):
            d._compiler.__class__ = _NoAliasCompiler
        return d
    return decorate


def group_njit(**options):
    """`njit(**options)` for a Python entry's parallel group, which runs one chunk of its loop
    (`ch >= 0`) or, called from Python with `ch = -1`, launches its chunks on itself
    (`parallel_self`): compiled as `loop_njit` compiles (noalias arrays, a Python wrapper)."""
    return loop_njit(**options)


def parallel_chunks_py(fn, nch, *args):
    """The Python form (NUMBA_DISABLE_JIT, codegen/pymode.py): the chunks in order."""
    for ch in range(nch):
        fn(ch, nch, *args)
