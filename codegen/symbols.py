"""Calls from compiled code to other compiled functions through a process-wide symbol.

When one Numba function calls another, Numba links the callee's whole LLVM module into the
caller's, optimizes it again there and makes machine code for it again: an MLP's gradient
kernel was 18,300 lines of LLVM IR, 5,200 of them its own, the rest its loop functions
(compiled once already) and the BLAS and gather helpers (compiled once per machine), re-made
in every kernel. Here a caller declares the callee under a stable name instead and calls it
with Numba's calling convention; the callee's code, compiled (or loaded from the disk cache)
once, is registered under that name with LLVM (`llvm.add_symbol`), as Numba registers its
own runtime's functions. The MLP's kernel IR is 7,700 lines this way; over the eleven
programs of benchmarks/models/, `wait=True` first calls took 0.87x as long (geometric mean of
side-by-side runs), the cost being more cache entries to load in a new process (one per
callee: about 5 ms each).

The name is a hash of the callee's module, name and signature, the same in every process.
A cached caller records the names it needs (`required`); before its machine code loads, the
cache (`numba_cache.py`) makes each one's callee ready (`ensure`): a callee that cannot be
made ready for the recorded signature makes the load fail, and the caller compiles again,
so code never loads with a name LLVM cannot resolve.

`call(fn, *args)` calls the dispatcher `fn` this way from compiled code (from Python it is
the plain call); `by_symbol(dispatcher)` is a callable that compiled code calls this way.

A caller's code needs only a callee's signature, so a loop function (a generated loop,
marked by `mark_loop_function`, which returns nothing) is compiled where its call is lowered,
not where its caller is typed: `loop_functions` finds what a kernel calls by typing it
alone, and a second compile server compiles those while the first lowers the kernel.
"""
import hashlib
import importlib
import sys
import threading

import llvmlite.binding as llvm
import numba
from numba import types
from numba.core import cgutils
from numba.core.extending import _Intrinsic
from numba.core.imputils import impl_ret_new_ref

PREFIX = "jitgraph_fn_"
_LOADED = {}        # symbol -> the compile result registered under it now
_KEPT = []          # every compile result ever registered: code resolved to it may still call it
_SPECS = {}         # symbol -> (module, qualified name, argument types): how to load it


class SymbolError(RuntimeError):
    """A cached caller needs a function that cannot be loaded under the recorded signature."""


def symbol(dispatcher, argtypes, restype):
    """The stable name of `dispatcher` compiled for `argtypes`, returning `restype`."""
    f = dispatcher.py_func
    key = f"{f.__module__}:{f.__qualname__}:{tuple(argtypes)!r}->{restype!r}"
    return PREFIX + hashlib.sha256(key.encode()).hexdigest()[:32]


def export(dispatcher, argtypes):
    """Compile `dispatcher` for `argtypes` (Numba types, exact) or load it from its cache, and
    register its code under its symbol; returns (symbol, compile result)."""
    argtypes = tuple(argtypes)
    cres = dispatcher.overloads.get(argtypes)
    if cres is None:
        dispatcher.compile(argtypes)
        cres = dispatcher.overloads[argtypes]
    name = symbol(dispatcher, cres.signature.args, cres.signature.return_type)
    if _LOADED.get(name) is not cres:
        llvm.add_symbol(name, cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name))
        _LOADED[name] = cres
        _KEPT.append(cres)
        f = dispatcher.py_func
        _SPECS[name] = (f.__module__, f.__qualname__, tuple(cres.signature.args))
    return name, cres


def required(library):
    """The symbols a compiled library calls, with how to load each: [(symbol, module,
    qualified name, argument types)]."""
    return [(fn.name,) + _SPECS[fn.name] for fn in library._final_module.functions
            if fn.is_declaration and fn.name.startswith(PREFIX)]


def ensure(requirements):
    """Make every required symbol resolvable (before code calling it loads): load or compile
    each callee; SymbolError if one cannot be found or no longer has the recorded signature."""
    for name, module, qualname, argtypes in requirements:
        if name in _LOADED:
            continue
        try:
            mod = sys.modules.get(module) or importlib.import_module(module)
            obj = mod
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as e:
            raise SymbolError(f"{module}.{qualname} is not available ({e})") from None
        disp = getattr(obj, "dispatcher", obj)
        if not isinstance(disp, numba.core.registry.CPUDispatcher):
            raise SymbolError(f"{module}.{qualname} is not a compiled function")
        got, _ = export(disp, argtypes)
        if got != name:
            raise SymbolError(f"{module}.{qualname} no longer returns what its cached callers expect")


class _Recorded(Exception):
    """Raised where a recording compile (`loop_functions`) would start lowering its caller."""


_state = threading.local()      # .recording: the list a `loop_functions` call collects into


def mark_loop_function(dispatcher):
    """Mark `dispatcher` (a generated loop or chunk function, which returns nothing) as one
    whose compile waits until its caller's code is lowered (see `call_type`)."""
    dispatcher._jitgraph_loop_function = True
    return dispatcher


def call_type(typingctx, fntype, args):
    """The call signature of dispatcher type `fntype` on `args`, or None.

    A loop function is not compiled here, where its caller is typed, but where the call is
    lowered (`export`): its caller's type inference needs no more than its argument types
    (it returns nothing), so a second process can compile the loop functions a kernel calls
    while this one lowers the kernel (`loop_functions`)."""
    if not isinstance(fntype, types.Dispatcher):
        return None
    disp = fntype.dispatcher
    if getattr(disp, "_jitgraph_loop_function", False):
        argtypes = tuple(types.unliteral(a) for a in args)
        recording = getattr(_state, "recording", None)
        if recording is not None and (disp, argtypes) not in recording:
            recording.append((disp, argtypes))
        return types.none(*argtypes)
    return fntype.get_call_type(typingctx, tuple(args), {})


def _lowering(builder):
    """Stop a recording compile where its own function's lowering starts (functions it
    compiles on the way, a loop's body say, compile in full)."""
    tags = getattr(_state, "recording_tags", None)
    if tags and all(t in builder.function.name for t in tags):
        raise _Recorded()


def loop_functions(dispatcher, argtypes):
    """The loop functions (dispatcher, argument types) that `dispatcher` calls for `argtypes`,
    in the order its code calls them: found by type inference alone (its compile stops
    where lowering would start)."""
    _state.recording = found = []
    # the parts of its mangled LLVM name (Numba's: the length, then the text, of each part)
    parts = dispatcher.py_func.__module__.split(".") + dispatcher.py_func.__qualname__.split(".")
    _state.recording_tags = [f"{len(p)}{p}" for p in parts]
    try:
        dispatcher.compile(tuple(argtypes))
    except Exception:           # _Recorded, as Numba wraps it: the caller's typing is done
        pass
    finally:
        _state.recording = _state.recording_tags = None
        getattr(dispatcher._compiler, "_failed_cache", {}).pop((tuple(argtypes), None), None)
    return found


def declare_callee(context, builder, dispatcher, callsig):
    """The LLVM function, declared in the builder's module, of `dispatcher` compiled for
    `callsig` (`call_type`'s signature): a declaration of its symbol."""
    _lowering(builder)
    name, cres = export(dispatcher, callsig.args)
    if cres.signature.return_type != callsig.return_type:
        raise TypeError(f"{cres.fndesc.qualname} returns {cres.signature.return_type}, its caller "
                        f"expected {callsig.return_type}")
    fnty = context.call_conv.get_function_type(callsig.return_type, callsig.args)
    return cgutils.get_or_insert_function(builder.module, fnty, name)


def _call_codegen(dispatcher, callsig, args, star):
    """The codegen of a call of `dispatcher` through its symbol, its arguments (of types `args`)
    in the star-argument tuple at position `star`; an exception it raises propagates."""
    def codegen(context, builder, sig, llargs):
        vals = [context.cast(builder, v, t, ft) for v, t, ft in
                zip(cgutils.unpack_tuple(builder, llargs[star], len(args)), args, callsig.args)]
        fn = declare_callee(context, builder, dispatcher, callsig)
        status, ret = context.call_conv.call_function(builder, fn, callsig.return_type, callsig.args, vals)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return impl_ret_new_ref(context, builder, callsig.return_type, ret)
    return codegen


class _Call(_Intrinsic):
    """`call(fn, *args)`: `fn(*args)`, through `fn`'s symbol in compiled code."""

    def __init__(self):
        def call(typingctx, fn, *args):
            callsig = call_type(typingctx, fn, args)
            if callsig is None:
                return None
            return (callsig.return_type(fn, types.StarArgTuple.from_types(tuple(args))),
                    _call_codegen(fn.dispatcher, callsig, args, 1))
        super().__init__("call", call)
        self._register()

    def __call__(self, fn, *args):
        return fn(*args)

    def __reduce__(self):
        return "call"       # the module attribute


class BySymbol(_Intrinsic):
    """A compiled function that compiled code calls through its symbol; Python calls it as it is."""

    def __init__(self, dispatcher):
        self.dispatcher = dispatcher

        def typer(typingctx, *args):
            callsig = call_type(typingctx, typingctx.resolve_value_type(dispatcher), args)
            if callsig is None:
                return None
            return (callsig.return_type(types.StarArgTuple.from_types(tuple(args))),
                    _call_codegen(dispatcher, callsig, args, 0))
        typer.__name__ = typer.__qualname__ = dispatcher.py_func.__name__
        typer.__module__ = dispatcher.py_func.__module__
        typer.__doc__ = dispatcher.py_func.__doc__
        super().__init__(dispatcher.py_func.__name__, typer)
        self._register()

    def __call__(self, *args):
        return self.dispatcher(*args)

    @property
    def py_func(self):
        return self.dispatcher.py_func

    def __reduce__(self):
        return self.__qualname__       # the module attribute of the same name

    def __repr__(self):
        return f"<compiled {self.__module__}.{self.__qualname__}, called by symbol>"


if numba.config.DISABLE_JIT:
    def call(fn, *args):
        """`fn(*args)` (Python mode: no compiled code)."""
        return fn(*args)

    def by_symbol(fn):
        return fn
else:
    call = _Call()

    def by_symbol(dispatcher):
        """`dispatcher`, called through its symbol from compiled code."""
        return BySymbol(dispatcher)
