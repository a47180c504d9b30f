"""Emit one Python/Numba source module for a partitioned graph (CPU target).

Layout of a generated module:

* the entry function, `kernel(dims, *inputs, *consts, ws, wofs)`, runs the steps
  in order: library ops (BLAS matmul, slicing, gathers; precompiled helpers in
  `codegen/runtime.py`) and the fused loop groups. A group's outer loop is
  split into a fixed number of chunks, each accumulating its reductions into
  its own slot of a partial buffer. The chunk body is a function of its own
  (`@_rt.chunk_njit`) that `_rt.parallel_chunks` runs on all cores
  (codegen/launch.py; no `prange`, whose parfor passes cost 0.15-0.8 s of compile
  per loop). The chunk count depends only on sizes, never on the thread count, so
  results are identical for any number of threads. Stored values live in slots
  of the workspace arena `ws` at byte offsets `wofs`, as planned by
  `codegen/memory.py`; outputs are new arrays.
* A serial loop (under PARALLEL_MIN points) that touches many arrays runs in a function
  of its own compiled like a chunk body, its arrays `noalias` parameters (OUTLINE_MIN):
  inline, LLVM would not vectorize it. Smaller loops stay inline.
* Up to NJIT_ENTRY_MAX_STEPS steps, the entry is one `@njit` function with the
  loops inline, unless the steps are heavy enough that Python's cost per step is lost in
  them, or few native loops cost less from Python than the compiled entry's own dispatch
  (`python_entry_pays`; without native compiles, only where that function is also long,
  ENTRY_MAX_LINES). Longer programs (deep networks), and those, get a plain Python entry
  that calls one compiled function per loop group, compiled without Numba where
  codegen/native.py translates it (`native_functions`), and groups whose code is the same
  up to the names of their arrays
  share one function: the layers of a deep network compile one loop per
  distinct layer, not one per layer, and Numba's compile time, which grows
  faster than linearly with a function's length, stays out of the entry. A parallel
  group's function there is its own chunk body too: called with `ch = -1` it launches
  its chunks on itself (`_rt.parallel_self`), one compiled function per group. Such an entry
  makes its workspace views once per arena and sizes, not once per step (`_views`).

Two places where the source depends on sizes beyond their equality pattern: a
loop over rows of at most TINY_ROW points writes their sizes as literals (below), and a
group whose loop (at trace time) has fewer than PARALLEL_MIN points runs
serially, in one piece. A parallel launch costs ~2 us and its chunk function
~0.2 s of compile, which only pays for large loops; a later call with large arrays
retraces (the cache key has the size class) and gets the parallel source.

Every computed line is one SSA assignment with a comment naming the graph node.
All sizes come from `dims` at run time (one symbol per distinct size > 1), so a
new batch size reuses the same source, and therefore the same compiled code,
whenever the graph's structure is unchanged. Zero-dimensional values are stored
as 1-element arrays.
"""
import ast
import builtins
import re

import numpy as np

from jitgraph.graph import flops
from jitgraph.ops.registry import PRIMS, Lowerings
from jitgraph.ops.scalar import DTYPES, FUNCTIONS

from . import native, strides
from .fusion import Group, Partition
from .lower import EmitterBase, GroupPlan, acc_dtype
from .memory import IN_PLACE_UPDATES, MemoryPlan
from .products import rewrite_products
from .runtime import COMBINE_MAX, COMBINE_MIN, COMBINE_PROD, COMBINE_SUM
from .scatters import accumulate_scatters, window_scatters
from .schedule import sink_updates
from .source import Names, literal, np_dtype

GRAIN = 32768          # points per chunk, at least
MAX_CHUNKS = 16
# a launch's per-chunk partial results are combined by a runtime helper compiled once per machine
# (`_rt.combine_parts`, with these op codes): as an inline loop each combine cost the kernel's
# compile 30-80 ms. Boolean reductions, which accumulate in int64, keep their inline loop.
COMBINE_OPS = {"reduce_sum": COMBINE_SUM, "reduce_prod": COMBINE_PROD, "reduce_max": COMBINE_MAX,
               "reduce_min": COMBINE_MIN}
# Entry functions with more steps run as Python, not compiled: Numba's compile time grows
# faster than linearly with the length of a function (a depth-256 residual MLP's entry took
# 190 s), while a Python entry costs a few microseconds per step at run time.
NJIT_ENTRY_MAX_STEPS = 48
# A shorter program gets a Python entry too when its steps are heavy enough that Python's cost
# per step is lost in them: its loop functions then compile without Numba (codegen/native.py),
# about 6x faster (the MLP's `wait=True` first call 1.8 -> 0.65 s). With JITGRAPH_NATIVE=0,
# only when its compiled entry would be long (over ENTRY_MAX_LINES lines: loops inline in
# it): Numba's compile of a function grows faster than its length, and the group functions
# compile apart, on one compile server per core. MD's 381-line entry
# (32 steps) ran compiled 4.5-4.9 s after its first call this way against 6.9-7.1 s, its
# calls taking 1.05x as long. Entries of 150-230 lines (the MLP, the GP, the BNN) gained
# nothing in the default tiered build, whose interpreted calls hold a core: more functions,
# as much compile. Control flow keeps a compiled entry (a scanned LSTM's steps ran 1.25x
# slower from Python).
ENTRY_MAX_LINES = 300
PY_ENTRY_STEP_S = 5e-6        # a Python step's cost: a library op's (a Numba helper's typed call)
# ... a loop group's, calling its native function (codegen/native.py: 0.1-0.2 us in C for 15
# arrays, the rest Python's call); the compiled entry pays Numba's dispatch instead, once per
# call (w5, one loop: 1.5 us per call from a Python entry, 2.1 us from a compiled one)
PY_ENTRY_NATIVE_STEP_S = 0.5e-6
COMPILED_ENTRY_CALL_S = 2e-6
PY_ENTRY_MAX_SHARE = 0.05     # of the program's estimated time
EST_LOOP_FLOPS = 4e9          # rates of the time estimate: fused loops (flop/s) ...
EST_LIBRARY_FLOPS = 40e9      # ... and BLAS/LAPACK products and factorizations
PARALLEL_MIN = 2 * GRAIN   # smaller loops run serially
# Serial loops of at least this many points (at trace time) that touch many arrays run in a
# function of their own whose arrays are `noalias` parameters, like a chunk body
# (launch.chunk_njit). Inline in the entry, or after reshapes in a group function, such a
# loop stays scalar: LLVM's vectorizer gives up on the run-time overlap checks of so many
# pointers (an LSTM cell's loop of 20 arrays over 32 x 64 points: 172 us inline, 43 us
# outlined). Loops of a few arrays get their checks from LLVM and stay inline.
OUTLINE_MIN = 256
OUTLINE_CHECKS = 8         # LLVM's -runtime-memory-check-threshold
VIEWS_KEPT = 8             # arenas whose views a Python entry keeps (Emitter.views_lines)
# A nested loop whose last axes (after the first) span at most this many points (2-D points,
# 3-D coordinates: arrays of shape (n, 2) or (n, 3), or (n, m, 2)) runs them over literal
# extents and reads its arrays through views whose trailing sizes are literals: LLVM then
# unrolls the short loops and vectorizes the loop around them, where a stride known only at
# run time kept it scalar (a planar flow's row loop, tanh and log per row of 2: 57 us -> 16 us
# for 2,000 rows).
# A different short size is then a different source: a new compile.
TINY_ROW = 9
SELF = "_self_"            # in a function's lines (Emitter.function_name): the function's own name
HEAD_IMPORTS = (
    "import math",
    "import numpy as np",
    "from numba import njit",
    "from jitgraph.codegen.mathlib import exp as _exp, expm1 as _expm1, tanh as _tanh",
    "from jitgraph.codegen.mathlib import maximum as _max, minimum as _min",
    "from jitgraph.codegen import runtime as _rt",
)


def _short_suffix(shape):
    """How many trailing axes of `shape`, the first axis left out, span at most TINY_ROW points."""
    k = 0
    while k < len(shape) - 1 and int(np.prod(shape[len(shape) - k - 1:])) <= TINY_ROW:
        k += 1
    return k


def estimated_seconds(graph):
    """A rough time of one call of `graph` at its traced sizes: its operation count at a
    fused loop's rate, its library ops' (products, factorizations) at BLAS's."""
    loop = library = 0
    for n in graph.nodes:
        if n.op in ("input", "const"):
            continue
        if PRIMS[n.op].kind == "linalg":
            library += flops(n)
        else:
            loop += flops(n)
    return loop / EST_LOOP_FLOPS + library / EST_LIBRARY_FLOPS


# ops whose lowering in a compiled entry does more than a Python entry's (none now: a float64
# solve with many right-hand sides runs in column blocks on Numba's threads from either entry,
# ops_linalg; the GP's Python entry had taken 1.3x its compiled entry's time without them)
COMPILED_ENTRY_OPS = frozenset()


def compiled_entry_ops(graph):
    """The nodes of `graph` that keep its entry compiled when native compiles would make it a
    Python entry (COMPILED_ENTRY_OPS)."""
    return [n for n in graph.nodes if n.op in COMPILED_ENTRY_OPS]


def has_control_flow(graph):
    """Does `graph` hold a loop or branch (scan, while, cond: a compiled entry's, always)?"""
    return any(n.kind == "control" for n in graph.nodes)


def python_entry_pays(graph, part):
    """May this program's entry run as Python, for its compile's sake: its steps' Python
    cost at most PY_ENTRY_MAX_SHARE of its estimated time, and no control flow?"""
    if has_control_flow(graph):
        return False
    loops = sum(isinstance(step, Group) for step in part.steps) if native.ENABLED else 0
    cost = loops * PY_ENTRY_NATIVE_STEP_S + (len(part.steps) - loops) * PY_ENTRY_STEP_S
    return cost <= PY_ENTRY_MAX_SHARE * estimated_seconds(graph) + COMPILED_ENTRY_CALL_S


def chunk_count(limit, extent, most=MAX_CHUNKS):
    """Text of a launch's chunk count: `limit` (text), at most `most` and `extent` (text), at
    least 1. Written with mathlib's integer-exact `_max`/`_min` (intrinsics) where Python's
    `max`/`min` are overloads Numba compiles once per process and signature."""
    return f"_max(1, _min(_min({most}, {limit}), {extent}))"


# A Python entry's loop functions compile with codegen/native.py (falling back to Numba for what
# it does not translate): the decorators Numba would compile them with, and theirs
NATIVE_DECORATORS = {"@_rt.loop_njit(**_OPTS)": "@_rt.native_njit(**_OPTS)",
                     "@_rt.group_njit(**_OPTS)": "@_rt.native_njit(parallel=True, **_OPTS)",
                     "@njit(**_OPTS)": "@_rt.native_njit(noalias=False, **_OPTS)"}


def native_functions(blocks):
    """A Python entry's function blocks with native decorators on those that only Python
    calls: a function another compiled function calls (a loop body's) stays Numba's."""
    names = {}
    for k, block in enumerate(blocks):
        for ln in block:
            if ln.startswith("def "):
                names[ln[4:ln.index("(")]] = k
                break
    word = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
    called = set()
    for k, block in enumerate(blocks):
        for ln in block:
            if not ln.startswith(("def ", "#", "@")):
                called |= {w for w in word.findall(ln) if names.get(w, k) != k}
    out = []
    for k, block in enumerate(blocks):
        new = list(block)
        for i, ln in enumerate(block):
            if ln.startswith("def "):
                name = ln[4:ln.index("(")]
                if i and block[i - 1] in NATIVE_DECORATORS and name not in called:
                    new[i - 1] = NATIVE_DECORATORS[block[i - 1]]
                break
        out.append(new)
    return out


def uses_threads(source):
    """Does this generated module run work on Numba's threads: chunks of its loops
    (codegen/launch.py; a Python entry's parallel groups launch their own), or runtime
    helpers splitting products? (Such a program's calls follow the thread policy.)"""
    return any(f"_rt.{name}(" in source for name in ("parallel_chunks", "parallel_self", "matmul2d_par",
                                                          "matmul2d_acc_par", "matmul_batched_par",
                                                          "matmul_strided_par"))


# The CPU's spelling of the scalar language (jitgraph/ops/scalar.py): NumPy's ufuncs, which
# Numba compiles to libm calls, except the functions of codegen/mathlib.py, whose arithmetic
# forms vectorize. mathlib's return float64: a float32 program converts their results back.
MATHLIB = {"exp": "_exp", "expm1": "_expm1", "tanh": "_tanh", "max": "_max", "min": "_min",
           "sin": "_ml.sin", "cos": "_ml.cos", "log": "_ml.log", "log1p": "_ml.log1p", "lgamma": "_ml.gammaln",
           "floordiv": "_ml.floordiv", "cbrt": "_ml.cbrt", "hypot": "_ml.hypot",
           **{name: f"_ml.{name}" for name in ("erfinv", "ndtr", "log_ndtr", "digamma", "polygamma",
                                               "betaln", "gammainc", "gammaincc", "betainc", "betaincc")}}
SPECIAL_IMPORT = "from jitgraph.codegen import mathlib as _ml"   # only where `_ml.` is used
F64_RESULT = ("exp", "expm1", "tanh", "sin", "cos", "log", "log1p", "hypot", "lgamma", "erfinv", "ndtr", "log_ndtr", "digamma", "polygamma",
              "betaln", "gammainc", "gammaincc", "betainc", "betaincc")

# sin and cos inline about 130 LLVM instructions each (mathlib's table-driven reduction), log
# and log1p about 40, which vectorize: 2.6x libm's speed in a loop of arguments in [-10, 10]
# (sin), 2.7x and 6x (log, log1p). Their compile cost grows faster than the count of call
# sites (+0.3 s for a program of 14 sin/cos, +7.5 s for the 100 of w4's 50-deep chain, whose
# small arguments glibc's sin also handles fast; 100 log/log1p sites 3.9 s against 1.6 s); a
# graph (a program, or a loop body or branch of one) with more sites than this calls libm instead.
INLINE_MATH = ("sin", "cos", "log", "log1p")
INLINE_MATH_MAX = 32


def spell_libm_math(name, dtype):
    """spell(), with INLINE_MATH's functions as NumPy's ufuncs (libm calls)."""
    return (f"np.{name}", None) if name in INLINE_MATH else spell(name, dtype)


# op name -> lowering of a library op (a step of its own): fn(em, node, v, x); see ops_cpu.py
OPS = Lowerings()


def spell(name, dtype):
    """The CPU's text for a function of the scalar language (and a conversion to wrap its
    result in, or None)."""
    if name in DTYPES:
        return f"np.{name}", None
    if name in MATHLIB:
        return MATHLIB[name], np_dtype(dtype) if name in F64_RESULT and dtype != np.float64 else None
    if name == "abs":
        return "abs", None
    fn = FUNCTIONS[name]
    if fn.numpy is None and fn.c is None:
        raise NotImplementedError(f"codegen: the scalar function {name!r} has no CPU spelling")
    return (f"np.{fn.numpy}" if fn.numpy else f"math.{fn.c}"), None



def _owned(a):
    """A constant as the kernel takes it: C-contiguous and writable (not a broadcast view)."""
    a = np.asarray(a)
    if not a.flags.c_contiguous or not a.flags.writeable:
        a = np.array(a, order="C", copy=True)
    return a


class Emitter(EmitterBase):
    def __init__(self, graph, partition, parallel=True, fastmath=("reassoc", "contract", "arcp"),
                 prefix="", shared=None, out_buffers=True, python_entry=False, donated=()):
        super().__init__(graph, partition)
        # positions of inputs whose buffers the caller gives up (a loop's carries): an item
        # assignment that is their only reader writes into them (`donates`), those it does are
        # `overwritten`
        self.donated, self.overwritten, self.in_donated = frozenset(donated), set(), set()
        self.python_entry = python_entry   # a Python entry whatever the number of steps
        # loop functions by text, shared with the emitters of subgraphs
        self.shared = {} if shared is None else shared
        self.prefix = prefix       # for the functions of subgraphs (loop bodies, branches)
        self.extra_consts = []     # (name, array) passed after the const args: subgraph data
        self.n_subs = 0
        self.parallel = parallel
        self.fastmath = tuple(fastmath)
        # buffers come from one workspace arena (`ws`, slot offsets `wofs`); a subgraph's
        # arena is a slot of its caller's. The caller passes the output buffers (`o<k>`),
        # except to branches (out_buffers=False: their outputs are new arrays)
        self.plan = MemoryPlan(graph, partition, self.sizes, recycle_outputs=out_buffers)
        self.out_buffers = out_buffers
        # Floating scalar constants other than 0 and 1 are read at run time from `svals`, not
        # written as literals: they often derive from shapes (a mean's 1/batch) or from user
        # globals, and as literals every new batch size or setting would be new source and a
        # new native compile. Reading a scalar once per call costs nothing measurable.
        self.scalar_consts = [n for n in graph.nodes if n.op == "const" and n.value.ndim == 0
                              and n.dtype.kind == "f" and n.value.item() not in (0.0, 1.0)]
        self._hoisted = {n.id for n in self.scalar_consts}
        self.body = []            # lines of the entry function
        self.users = graph.users()
        self.functions = []       # module-level functions: loop groups, subgraph kernels
        self.imports = []         # module-level imports lowerings need (`require`)
        self.driver = False
        self.driver_views = {}    # a Python entry's workspace views: expression -> index in V
        if sum(n.op in INLINE_MATH for n in graph.nodes) > INLINE_MATH_MAX:
            self.spell = spell_libm_math

    spell = staticmethod(spell)

    def slot(self, slot, shape, dtype):
        # A Python entry (driver) makes its views with NumPy (a call of the compiled helper
        # from Python costs ~8 us of argument type checks, the NumPy view ~1 us), once per
        # arena and sizes: `V[k]` reads the k-th of the views `_views` keeps (see render).
        expr = super().slot(slot, shape, dtype)
        if not self.driver:
            return expr
        expr = expr.replace("_rt.slot(", "_rt.slot_view(", 1)
        return f"V[{self.driver_views.setdefault(expr, len(self.driver_views))}]"

    def reshape(self, expr, shape):
        """Text reshaping array `expr` to `shape` (a tuple's text, or one size's): in compiled
        code `_rt.c_view`, a view without Numba's reshape machinery (runtime.py), in a Python
        entry NumPy's reshape."""
        if self.driver:
            return f"{expr}.reshape({shape})"
        return f"_rt.c_view({expr}, {shape if shape.startswith('(') else f'({shape},)'})"

    def require(self, line):
        """Have the generated module run the import `line` (a lowering's helper module)."""
        if line not in self.imports:
            self.imports.append(line)

    # ---- values in the entry function -----------------------------------------------------------
    def new_array(self, shape, dtype, fill=None):
        """Text making a new C-ordered array of `shape` and `dtype` (their texts), filled with
        `fill` (a value's text) if given: NumPy's in a Python entry, the runtime's intrinsics in
        compiled code (Numba compiles its own `np.empty` and `np.full` once per process and
        signature: 0.2-0.35 s of each kernel's compile, in every compile server)."""
        lib = "np" if self.driver else "_rt"
        return f"{lib}.empty({shape}, {dtype})" if fill is None else f"{lib}.full({shape}, {fill}, {dtype})"

    def array(self, node):
        """An expression for node's value as an array (expanding virtual broadcasts/reshapes)."""
        src = self.part.resolve(node)
        if src is not node and self.is_scalar_const(src):
            # a filled array: far cheaper to compile than broadcast_to + a copy
            return self.new_array(self.sizes.shape(node.shape), np_dtype(node.dtype), self.const_ref(src))
        if node.id in self.part.virtual:
            inner = self.array(node.inputs[0])
            shape = self.sizes.shape(node.shape)
            if node.op == "broadcast":
                return f"_rt.broadcast_into({inner}, {self.new_array(shape, np_dtype(node.dtype))})"
            return self.reshape(inner, shape)
        if self.is_scalar_const(node):
            return self.new_array("1", np_dtype(node.dtype), self.const_ref(node))
        return self.var(node)

    def buffer(self, node, shape=None):
        """An expression for a new array holding node's value: its workspace slot, the
        output buffer the caller passes (`o<k>`), or a new array when the plan leaves it
        out (subgraph kernels, control flow)."""
        shape = node.shape if shape is None else shape
        dt = np_dtype(node.dtype)
        out = self.plan.out_index.get(node.id)
        if out is not None and tuple(shape) == tuple(node.shape):
            return f"o{out}"
        slot = self.plan.slot_of.get(node.id)
        if slot is None:
            return self.new_array(self.sizes.shape(shape), dt)
        return self.slot(slot, shape, node.dtype)

    def scratch(self, k, shape, dtype):
        """An expression for the k-th scratch array (of `shape`) of the current step: a shared
        workspace slot, or a new array without a plan."""
        dtype = np.dtype(dtype)
        if not self.plan.enabled:
            return self.new_array(self.sizes.shape(shape), np_dtype(dtype))
        cls = (self.sizes.product(shape), dtype.itemsize)
        return self.slot(self.plan.scratch(k, shape, dtype.itemsize, cls), shape, dtype)

    def reserve(self, key, shape, dtype):
        """An expression for a workspace slot of its own (no other value shares it during the
        call) holding an array of `shape`: the buffers control flow writes its loops' results
        into. `key` names it; a second call with the same key gives the same slot."""
        dtype = np.dtype(dtype)
        shape = tuple(shape) or (1,)
        key = ("reserved",) + tuple(key)
        return self.slot(self.plan.scratch(key, shape, dtype.itemsize, key), shape, dtype)

    def const_ref(self, node):
        """A scalar constant's value in code: a literal, or the local read from `svals`."""
        if node.id in self._hoisted:
            return f"x{self.names[node.id]}_c"
        return literal(node.value, node.dtype)

    def first(self, node):
        """Its only element, for a stored value of size 1 (0-d values are stored with shape (1,))."""
        return f"{self.var(node)}[{', '.join(['0'] * max(node.ndim, 1))}]"

    # ---- entry function ----------------------------------------------------------------------
    def emit(self):
        # a long program's entry runs as Python (see the module docstring)
        self.driver = not self.prefix and (self.python_entry or len(self.part.steps) > NJIT_ENTRY_MAX_STEPS)
        dead = self._dead_after() if self.driver else {}
        for k, step in enumerate(self.part.steps):
            if isinstance(step, Group):
                GroupEmitter(self, step, local=self.driver).emit()
            else:
                self.emit_op(step.node)
            if dead.get(k):
                self.body.append(f"del {', '.join(dead[k])}")
        outs = []
        seen = set()
        for n in self.graph.outputs:
            v = self.array(n)
            # a loop body's caller copies what it keeps (SubKernel); the others own their results
            if not (self.prefix and self.out_buffers) and \
                    (n.op in ("input", "const") and v == self.var(n) or v in seen):
                v = f"{v}.copy()"
            seen.add(v)
            outs.append(v)
        self.body.append(f"return ({', '.join(outs)},)" if outs else "return ()")
        return self.render()

    def _dead_after(self):
        """Step index -> names of the entry's arrays read for the last time by that step (a
        Python entry frees them there; Numba frees dead arrays by itself)."""
        last, made = {}, {}
        plan = self.plan
        for n in self.graph.nodes:
            k = plan.step_at.get(n.id)
            if k is None:
                continue
            if n.id in self.part.materialized and n.kind not in ("input", "const") \
                    and not PRIMS[n.op].multiple:
                made[n.id] = n
            for src in self.part.reads(n):
                last[src.id] = max(last.get(src.id, -1), k)
        keep = {self.part.resolve(o).id for o in self.graph.outputs}
        dead = {}
        for i, n in made.items():
            if i not in keep and i in last:
                dead.setdefault(last[i], []).append(self.var(n))
        return dead

    def render(self):
        if any("_ml." in line for block in self.functions for line in block) or \
                any("_ml." in line for line in self.body):
            self.require(SPECIAL_IMPORT)
        fm = "{" + ", ".join(repr(f) for f in self.fastmath) + "}" if self.fastmath else "False"
        # no C-callable wrapper (nothing calls generated functions through a C pointer): an
        # MLP's kernel lost 500 of its 19,000 lines of LLVM IR and ~8% of its compile time
        head = [
            f"# Generated by jitgraph from graph {self.graph.meta.get('name', '?')!r}. Do not edit:",
            "# this file is named after the hash of its content and rewritten never.",
            *HEAD_IMPORTS,
            *self.imports,
            "",
            "# Numba's disk cache is attached when jitgraph imports this module (codegen/build.py)",
            f"_OPTS = dict(error_model='numpy', fastmath={fm}, boundscheck=False, no_cfunc_wrapper=True)",
            "",
        ]
        src = list(head)
        functions = native_functions(self.functions) if self.driver and native.ENABLED else self.functions
        for block in functions:
            src += [""] + block + [""]
        if self.driver:
            src += self.views_lines()
            src += ["", f"# {len(self.part.steps)} steps: the entry runs as Python, calling the compiled "
                    "loops and library routines above"]
        else:
            src += ["", "@njit(**_OPTS)"]
        src += self.kernel_lines()
        return "\n".join(src) + "\n"

    def function(self, lines, label, params, args):
        """Make `lines` a module function of `params`; returns its call with `args`."""
        return f"{self.function_name(lines, label, params)}({', '.join(args)})"

    def function_name(self, lines, label, params, chunk=False):
        """The name of a module function of `params` running `lines`.

        Functions with the same text are emitted once: a group emitted as a function names
        its values and sizes in order of first use (`source.LocalNames`), so the layers of a
        deep network share one compiled loop per distinct layer shape and compile time does
        not grow with depth. A chunk body (`chunk=True`) compiles with its arrays as `noalias`
        (launch.py), and so does an outlined loop that a Python entry calls (`chunk="entry"`),
        with the Python wrapper that call needs, and a Python entry's parallel group
        (`chunk="group"`), which launches its chunks on itself (SELF in its lines names it).
        """
        key = ("\n".join(lines), tuple(params), chunk)
        entry = self.shared.get(key)
        if entry is None:
            fname = f"{self.prefix}{label}"
            deco = {True: "@_rt.chunk_njit(**_OPTS)", "entry": "@_rt.loop_njit(**_OPTS)",
                    "group": "@_rt.group_njit(**_OPTS)"}.get(chunk, "@njit(**_OPTS)")
            block = [f"# {fname}", deco,
                     f"def {fname}({', '.join(params)}):"] + ["    " + ln.replace(SELF, fname) for ln in lines]
            entry = self.shared[key] = (fname, block)
            self.functions.append(block)
        else:
            fname, block = entry
            block[0] += f", also for {self.prefix}{label}"
        return fname

    def free_names(self, lines):
        """The names a block of statements `lines` reads from the entry function's locals, in
        order of first use: those it reads before it assigns them (a loop's carries) or never
        assigns, other than the module's own names (its imports and functions) and builtins."""
        first = {}
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.Name):
                # one statement a line: in a line, its reads come before its assignments
                key = (node.lineno, isinstance(node.ctx, ast.Store), node.col_offset)
                if node.id not in first or key < first[node.id][0]:
                    first[node.id] = (key, isinstance(node.ctx, ast.Load))
        module = set(dir(builtins)) | {"_OPTS"}
        for node in ast.walk(ast.parse("\n".join(HEAD_IMPORTS + tuple(self.imports)))):
            if isinstance(node, ast.alias):
                module.add(node.asname or node.name)
        module |= {ln[4:ln.index("(")] for block in self.functions for ln in block if ln.startswith("def ")}
        return [name for name, (_, read) in sorted(first.items(), key=lambda kv: kv[1][0])
                if read and name not in module]

    def kernel_params(self):
        """Names of the entry function's parameters after the inputs: consts, subgraph data, svals."""
        out = [self.var(n) for n in self.const_args] + [name for name, _ in self.extra_consts]
        out += ["svals"] if self.scalar_consts else []
        out += ["ws", "wofs"] if self.plan.has_workspace else []
        return out + [f"o{k}" for k in range(len(self.plan.out_index))]

    def const_values(self):
        """The values for `kernel_params()`, in order."""
        out = [_owned(n.value) for n in self.const_args] + [v for _, v in self.extra_consts]
        if self.scalar_consts:
            out.append(np.array([n.value.item() for n in self.scalar_consts], dtype=np.float64))
        return out

    def kernel_lines(self):
        src = []
        args = ["dims"] + [self.var(n) for n in self.graph.inputs] + self.kernel_params()
        src.append(f"def {self.prefix}kernel({', '.join(args)}):")
        for k, d in enumerate(self.sizes.values):
            src.append(f"    {self.sizes(d)} = dims[{k}]")
        for k, n in enumerate(self.scalar_consts):
            v = f"svals[{k}]" if n.dtype == np.float64 else f"{np_dtype(n.dtype)}(svals[{k}])"
            src.append(f"    {self.const_ref(n)} = {v}  # const {self.names[n.id]} (value not in the source)")
        if self.driver_views:
            src.append("    V = _views(ws, wofs, dims)")
        src += ["    " + line for line in self.body]
        return src

    def views_lines(self):
        """A Python entry's `_views(ws, wofs, dims)`: the tuple of its workspace views, made
        on an arena's first call with these sizes and kept in `_VIEWS` (by the arena's id,
        holding the arena, so the id stays its own) for the next calls: an unrolled LSTM's
        entry made 2,145 views per call. `_VIEWS` keeps the views of at most VIEWS_KEPT
        arenas; `release_views()` (jit's `release_buffers`) empties it."""
        if not self.driver_views:
            return []
        src = ["", "_VIEWS = {}", "", "",
               "def release_views():",
               "    _VIEWS.clear()", "", "",
               "def _views(ws, wofs, dims):",
               "    key = dims.tobytes()",
               "    hit = _VIEWS.get(id(ws))",
               "    if hit is not None and hit[1] == key:",
               "        return hit[2]"]
        for k, d in enumerate(self.sizes.values):
            src.append(f"    {self.sizes(d)} = dims[{k}]")
        src.append("    views = (")
        src += [f"        {expr}," for expr in self.driver_views]
        src += ["    )",
                f"    if len(_VIEWS) >= {VIEWS_KEPT}:",
                "        _VIEWS.clear()",
                "    _VIEWS[id(ws)] = (ws, key, views)",
                "    return views"]
        return src

    # ---- library ops (one per step) -------------------------------------------------------------
    def emit_op(self, node):
        lower = OPS.get(node.op)
        if lower is None:
            raise NotImplementedError(f"codegen: no CPU lowering for op {node.op!r}")
        self.body.append(self.comment(node))
        strided = self.part.strided.get(node.id)
        x = [self.strided(v, strided[1]) for v in strided[0]] if strided else [self.array(i) for i in node.inputs]
        lower(self, node, self.var(node), x)

    def strided(self, view, groups=()):
        """An expression for a StridedView (codegen/strides.py): its base's array read at the
        view's offset, shape and strides, by `_rt.strided` (NumPy's as_strided in a Python
        entry). The base is C-ordered (Partition._c_base). `groups`: the sizes each of its
        leading axes merges (strides.batched_matrices), whose product is its extent."""
        fn = "_rt.strided_py" if self.driver else "_rt.strided"
        S = self.sizes
        shape = ", ".join([S.product(g) for g in groups] + [S(d) for d in view.shape[len(groups):]])
        steps = ", ".join(strides.spell(p, S) for p in view.strides)
        return f"{fn}({self.array(view.base)}, {strides.spell(view.offset, S)}, ({shape},), ({steps},))"

    def slices(self, p):
        parts = []
        for a, b, c in zip(p["starts"], p["stops"], p["steps"]):
            stop = "" if b < 0 else str(b)
            parts.append(f"{a}:{stop}:{c}")
        return ", ".join(parts)

    def donates(self, node):
        """Does item assignment `node` (an IN_PLACE_UPDATES op) write into the buffer of a
        donated input, its first operand (or an update already made in that buffer), which
        nothing reads after it (itself, or through views) and no output returns? Then the update
        needs no copy of the array: a loop that writes one cell of a table per iteration (a
        dynamic programme, `s[t] = f(s[t - 1])`, and their reverse loops) does work per
        iteration, not per element of its table."""
        if not self.donated or node.op not in IN_PLACE_UPDATES:
            return False
        part, ins = self.part, self.graph.inputs
        shares = lambda n: n.op == "reshape" or n.id in self.in_donated or self.plan.updates_in_place(n)
        first = part.resolve(node.inputs[0])
        while shares(first):
            first = part.resolve(first.inputs[0])
        if first.op != "input" or not any(x is first for k, x in enumerate(ins) if k in self.donated) \
                or node.size != first.size or node.dtype != first.dtype:
            return False
        held = {first.id}        # the input, its views and the updates made in its buffer
        for n in self.graph.nodes:
            if n is not node and (part.resolve(n).id in held or shares(n) and part.resolve(n.inputs[0]).id in held):
                held.add(n.id)
        at = self.plan.step_at
        for n in self.graph.nodes:         # readers of the old values must all run before it
            if n is not node and n.id not in held and any(part.resolve(x).id in held for x in n.inputs) \
                    and not at.get(n.id, len(self.part.steps)) < at.get(node.id, -1):
                return False
        if any(part.resolve(x).id in held for x in node.inputs[1:]) \
                or any(part.resolve(o).id in held for o in self.graph.outputs):
            return False
        self.in_donated.add(node.id)
        self.overwritten.add(next(k for k, x in enumerate(ins) if x is first))
        return True

    # ---- control flow: subgraphs become functions of this module --------------------------------
    def subkernel(self, graph, out_buffers=True, donated=()):
        """Emit `graph` as a function of this module (a loop body, a branch); returns its
        `SubKernel`.

        The function has the entry-function convention (dims, inputs, consts, ws, wofs,
        output buffers); its sizes, constants and slot offsets are passed from this kernel's
        own parameters, so the source stays free of concrete sizes and values. Its workspace
        arena is a slot of this kernel's: a loop allocates nothing per iteration for it."""
        prefix = f"{self.prefix}s{self.n_subs}_"
        self.n_subs += 1
        graph = sink_updates(accumulate_scatters(window_scatters(rewrite_products(graph))))
        sub = Emitter(graph, Partition(graph), parallel=False, fastmath=self.fastmath,
                      prefix=prefix, shared=self.shared, out_buffers=out_buffers, donated=donated)
        sub.emit()
        self.functions.extend(sub.functions)
        for line in sub.imports:
            self.require(line)
        self.functions.append(["@njit(**_OPTS)"] + sub.kernel_lines())
        dims = f"{prefix}dims"
        self.extra_consts.append((dims, np.array(sub.sizes.values or [0], dtype=np.int64)))
        consts = []
        for name, value in zip(sub.kernel_params(), sub.const_values()):
            pname = name if name.startswith(prefix) else prefix + name
            self.extra_consts.append((pname, value))
            consts.append(pname)
        if sub.plan.has_workspace:
            nbytes, offsets = sub.plan.layout()
            key = ("subgraph", prefix)
            slot = self.plan.scratch(key, (nbytes,), 1, key)
            self.extra_consts.append((f"{prefix}wofs", offsets))
            consts += [f"ws[wofs[{slot}]:]", f"{prefix}wofs"]
        plan, part = sub.plan, sub.part
        by_id = {n.id: n for n in graph.nodes}
        specs = [(tuple(by_id[nid].shape) or (1,), by_id[nid].dtype)
                 for nid, _ in sorted(plan.out_index.items(), key=lambda kv: kv[1])]
        out_of, aliases_input = [], []
        for n in graph.outputs:
            r = plan.root_of(part.resolve(n))
            k = plan.out_index.get(r.id)
            out_of.append(k if k is not None and r is part.resolve(n) and r.shape == n.shape else None)
            aliases_input.append(r.op == "input")
        out = SubKernel(f"{prefix}kernel", dims, consts, out_of, specs, aliases_input)
        out.overwritten = frozenset(sub.overwritten)
        return out

    def tuple_part(self, t, k):
        return f"t{self.names[t.id]}_{k}"

    def store_row(self, stacked, it, value, shape):
        """Loop-body lines writing `value` (an array of `shape`; 0-d values are stored with
        shape (1,)) into row `it` of `stacked`, element by element: Numba compiles a
        row assignment `stacked[it] = value` about 1 s slower. A Python entry calls the
        compiled copy instead (a Python element loop would run at a thousandth the speed)."""
        if self.driver:
            row = f"{stacked}[{it}:{it} + 1]" if not shape else f"{stacked}[{it}]"
            return [f"    _rt.copy({value}, {row})"]
        if not shape:
            return [f"    {stacked}[{it}] = {value}[0]"]
        size = self.sizes.product(shape)
        return [f"    {stacked}_row = {self.reshape(f'{stacked}[{it}]', size)}",
                f"    {stacked}_val = {self.reshape(value, size)}",
                f"    for {stacked}_q in range({size}):",
                f"        {stacked}_row[{stacked}_q] = {stacked}_val[{stacked}_q]"]


class SubKernel:
    """A subgraph emitted as a function of the module (`Emitter.subkernel`), and how to call it.

    Attributes:
        name: the function's name.
        out_of: per output of the subgraph, the index of the output buffer (`o<k>`) the
            function writes it into, or None (a new array, an input passed through, a view).
        out_specs: (shape, dtype) of each output buffer the caller passes, in order.
        aliases_input: per output, whether the function returns (a view of) one of its inputs.
    """

    def __init__(self, name, dims, consts, out_of, out_specs, aliases_input):
        self.name, self.dims, self.consts = name, dims, consts
        self.out_of, self.out_specs, self.aliases_input = out_of, out_specs, aliases_input

    def call(self, args, buffers=()):
        """The call expression on input expressions `args` and output buffers `buffers`."""
        return f"_rt.call({self.name}, {', '.join([self.dims] + list(args) + self.consts + list(buffers))})"


# ---- loop groups -----------------------------------------------------------------------------------
class GroupEmitter:
    """Emits one loop group, inline in the entry function or as a function of the module.

    A member's value at the current point is the local scalar `x<name>`; a stored member is
    written to the array `v<name>`; values stored by earlier steps are read by indexing their
    arrays `v<name>`. The group's outputs are allocated by the entry function.
    """

    def __init__(self, em, g, local=False):
        self.em, self.g, self.local = em, g, local
        self.n = Names(em, local)
        self.S = self.n.sizes
        self.plan = GroupPlan(em, g, em.part.materialized, index_sinks=True)
        self.members = g.members
        self.flat = self.plan.flat
        self.reads = {}           # external node id -> node (arrays read)
        self.writes = {}          # member id -> node (stored outputs)
        self.partials = {}        # sink id -> node (reduced over the chunked axis: per-chunk slots)
        self.scalar_accs = {}     # sink id -> node (size-1 result: a local accumulator per chunk)
        self.direct_sinks = {}    # sink id -> node (each chunk owns its output rows)
        self.views = {}           # name -> (node, prefix, suffix): what the group defines before its loop
        self.parallel = em.parallel and self.plan.size >= PARALLEL_MIN    # in chunks
        # trailing axes (after the first) of at most TINY_ROW points: literal extents from
        # axis `tiny_from` on, and views with literal trailing sizes (`arr`)
        self.tiny_from = g.rank - _short_suffix(g.shape)
        self.tiny = not self.flat and any(d > 1 for d in g.shape[self.tiny_from:])
        self.tiny_views = {}      # name -> expression: the views `arr` reads through

    def extent(self, d):
        """The extent of loop axis d in the source: a literal for a short row's axes."""
        return str(self.g.shape[d]) if self.tiny and d >= self.tiny_from else self.S(self.g.shape[d])

    def arr(self, x):
        """The array indexed for stored value x in the loop: in a loop over short rows, a view
        of it whose trailing sizes (at most TINY_ROW points) are literals."""
        name = self.n.var(x)
        if not self.tiny or x.ndim < 2:
            return name
        lit = _short_suffix(x.shape)
        if all(d == 1 for d in x.shape[x.ndim - lit:]):
            return name
        shape = [self.S(d) for d in x.shape[:x.ndim - lit]] + [str(d) for d in x.shape[x.ndim - lit:]]
        view = self.n.local(x, "v", "_r")
        self.tiny_views[view] = f"_rt.c_view({name}, ({', '.join(shape)}))"
        return view

    # ---- values ------------------------------------------------------------------------------------
    def flat_name(self, x):
        if self.flat and self.plan.is_full(x):
            return self.view(x, "v", "_f")
        return self.arr(x)

    def read(self, x, target_shape):
        """Expression reading value x, stored by an earlier step, at the current point."""
        part = self.em.part
        src = part.resolve(x)
        if self.flat and src.id in part.recomputed:
            # (a flat loop reads recomputed values whose operands it reads flat: lower.py)
            return f"({self.em.expr(src, [self.read(y, src.shape) for y in src.inputs])})"
        x, ix = self.plan.source(x, target_shape)
        if x.id in part.index_views:
            return part.read_expr(x, ix, self._leaf, self._offset, self.em.expr)
        if self.em.is_scalar_const(x):
            return self.n.const_ref(x)
        self.reads[x.id] = x
        if self.plan.is_scalar_read(x):
            return self.view(x, "x", "_s")
        if self.flat:
            return f"{self.flat_name(x)}[i]"
        return f"{self.arr(x)}[{', '.join(ix) if ix else '0'}]"

    def _leaf(self, x, ix):
        """A stored value read at index `ix` inside an index view's expression."""
        if self.em.is_scalar_const(x):
            return self.n.const_ref(x)
        if x.op == "const" and x.size and x.value.flat[0] in (0, 1) and (x.value == x.value.flat[0]).all():
            return literal(x.value.flat[0], x.dtype)      # a pad's zeros: no array to read
        self.reads[x.id] = x
        return f"{self.arr(x)}[{', '.join(ix) if ix else '0'}]"

    def gather(self, n):
        """The value of gather member n (an index view made stored) at the current point."""
        return self.em.part.index_expr(n, [f"i{d}" for d in range(n.ndim)], self._leaf, self._offset,
                                       self.em.expr)

    @property
    def _offset(self):
        """How a slice's start is spelled: in a function of its own, a parameter (`Names.offset`),
        so that one function serves every offset (an unrolled recurrence's x[t] and gate slices);
        inline, a literal."""
        return self.n.offset if self.local else None

    def value(self, x, target_shape):
        return self.n.scalar(x) if x.id in self.members else self.read(x, target_shape)

    def point_index(self, shape, skip=()):
        """Index of an array of `shape` (prefix-aligned with the domain) at the current point."""
        if self.flat:
            return "i"
        ix = ["0" if shape[d] == 1 else f"i{d}" for d in range(len(shape)) if d not in skip]
        return ", ".join(ix) if ix else "0"

    # ---- emission ---------------------------------------------------------------------------------
    def emit(self):
        g, em = self.g, self.em
        if g.rank == 0:
            return self.emit_scalar_group()
        alloc, pre, chunk, post = self._parts()
        em.body += alloc
        if self.local and chunk is not None and not self.parallel:
            # a Python entry calls an outlined loop itself: a group function around it would
            # be one more compiled function (lstm_loop's cost 0.6-0.9 s each) that only calls it
            params, args = self.n.signature()
            em.body.append(f"{em.function_name(chunk, f'group_{g.seq}', params, chunk='entry')}({', '.join(args)})")
            return
        if self.local and chunk is not None:
            # a Python entry's parallel group: one function that launches its chunks on
            # itself (ch < 0) or runs one (launch.parallel_self)
            params, args = self.n.signature()
            launch = [f"_rt.parallel_self({SELF}, nch, {', '.join(params)})"]
            lines = ["if ch < 0:"] + ["    " + ln for ln in pre + launch + post + ["return"]] + chunk
            fname = em.function_name(lines, f"group_{g.seq}", ["ch", "nch"] + params, chunk="group")
            em.body.append(f"{fname}(-1, 0, {', '.join(args)})")
            return
        fn = pre
        if chunk is not None:
            fn.append(self._chunk_call(chunk))
            fn += post
        if self.local:
            params, args = self.n.signature()
            em.body.append(em.function(fn, f"group_{g.seq}", params, args))
        else:
            em.body += fn

    def _chunk_call(self, chunk):
        """The chunks on Numba's threads: the chunk body as a function `f(ch, nch, ...)` that
        `_rt.parallel_chunks` calls (codegen/launch.py). Its text names values locally (so
        that equal chunks share one function); in an inline group the arguments are the
        entry's. An outlined serial loop is such a function without `ch, nch`, called directly."""
        label, lead = (f"group_{self.g.seq}_chunk", ["ch", "nch"]) if self.parallel else \
            (f"group_{self.g.seq}_loop", [])
        if self.local:
            params = lead + self.n.signature()[0]
            lines, args = chunk, params[len(lead):]
        else:
            local = GroupEmitter(self.em, self.g, local=True)
            _, _, lines, _ = local._parts()
            lparams, args = local.n.signature()
            params = lead + lparams
        fname = self.em.function_name(lines, label, params, chunk=True)
        if not self.parallel:
            return f"_rt.call({fname}, {', '.join(args)})"
        return f"_rt.parallel_chunks({fname}, nch, {', '.join(args)})"

    def _body(self):
        """The loop over the group's domain (chunk bounds lo, hi when parallel)."""
        g = self.g
        for s in self.plan.sinks:
            if s.size == 1:
                self.scalar_accs[s.id] = s
            elif 0 in s.p["axes"] and g.shape[0] != 1 and self.parallel:
                self.partials[s.id] = s
            else:
                self.direct_sinks[s.id] = s
        ind = "    "
        first = "range(lo, hi)" if self.parallel else \
            f"range({self.S.product(g.shape) if self.flat else self.S(g.shape[0])})"
        if self.flat:
            return [f"for i in {first}:"] + self._flat_body(ind)
        body = [f"for i0 in {first}:"]
        depth = ind
        for d in range(1, g.k):
            body.append(depth + f"for i{d} in range({self.extent(d)}):")
            depth += ind
        return body + (self._flat_body(depth) if g.k == g.rank else self.plan.row_body(self, depth))

    # ---- the parts GroupPlan.row_body renders with ------------------------------------------------
    def scalar(self, n):
        return self.n.scalar(n)

    def comment(self, n):
        return self.n.comment(n)

    def store(self, n, ind):
        if n.id not in self.em.part.materialized:
            return []
        self.writes[n.id] = n
        return [ind + f"{self.flat_name(n)}[{self.point_index(n.shape)}] = {self.n.scalar(n)}"]

    row_store = store

    def update(self, s):
        """The statement adding the current point's value into sink (or row reduction) s."""
        x = s.inputs[0]
        if s.kind == "reduce" and self.members[s.id] == 1:
            target = self.n.scalar(s)
        elif s.id in self.scalar_accs:
            target = self.n.local(s, "x", "_acc")
        elif s.id in self.partials:
            target = f"{self.n.var(s, '_part')}[ch, {self.point_index(x.shape, skip=s.p['axes'])}]"
        else:
            target = f"{self.arr(s)}[{self.point_index(x.shape, skip=s.p['axes'])}]"
        return self.em.reduce_update(s.op, target, self.value(x, x.shape), s.dtype) + "  " + self.n.comment(s)

    def row_update(self, s, ind):
        return [ind + self.update(s)]

    def open_pass(self, ind):
        lines, g = [], self.g
        for d in range(g.k, g.rank):
            lines.append(ind + f"for i{d} in range({self.extent(d)}):")
            ind += "    "
        return lines, ind

    def close_pass(self, reds, ind):
        return [ln for r in reds for ln in self.store(r, ind)]

    def _flat_body(self, ind):
        """No inner axes: every member and sink once per point."""
        lines = []
        for n in self.g.nodes:
            if self.members[n.id] != "sink":
                lines.append(ind + self.plan.node_line(n, self.value, self))
                lines += self.store(n, ind)
        return lines + [ind + self.update(s) for s in self.plan.sinks]

    def view(self, x, prefix, suffix):
        """A name the group function defines before its loop for node x (a flat view, a scalar)."""
        name = self.n.local(x, prefix, suffix)
        self.views[name] = (x, prefix, suffix)
        return name

    def _parts(self):
        """(allocations in the entry, the code before the loop, the chunk body or None when
        serial, the code after it): chunks on threads combine their partial results after
        the loop."""
        body = self._body()
        g, em, S, n = self.g, self.em, self.S, self.n
        total = S.product(g.shape)
        extent = total if self.flat else S(g.shape[0])
        accs = list(self.scalar_accs.values())
        alloc = [f"# group {g.seq}: fused loop over {em.sizes.shape(g.shape)} "
                 f"({'flattened' if self.flat else f'outer axes {tuple(range(g.k))}'}, "
                 f"{'parallel chunks' if self.parallel else 'serial'}), "
                 f"{len(g.nodes)} nodes"]
        for x in self.writes.values():
            alloc.append(f"{em.var(x)} = {em.buffer(x)}")
        for s in self.direct_sinks.values():
            alloc += [f"{em.var(s)} = {em.buffer(s)}", f"{em.var(s)}[...] = {em.reduce_init(s.op, s.dtype)}"]
        for s in accs + list(self.partials.values()):
            alloc.append(f"{em.var(s)} = {em.buffer(s)}")
        # flat views and scalar reads: where the loop runs (an outlined loop or a chunk makes
        # them from its own noalias arguments; a c_view keeps the pointer they are based on)
        views = []
        if self.flat:
            for x in list(self.reads.values()) + list(self.writes.values()):
                if self.plan.is_full(x):
                    views.append(f"{self.view(x, 'v', '_f')} = _rt.c_view({n.var(x)}, ({total},))")
        for x in self.reads.values():
            if self.plan.is_scalar_read(x):
                views.append(f"{self.view(x, 'x', '_s')} = {n.var(x)}[{', '.join(['0'] * max(x.ndim, 1))}]")
        views += [f"{name} = {expr}" for name, expr in self.tiny_views.items()]
        zeros = lambda s: ", ".join(["0"] * max(s.ndim, 1))  # noqa: E731
        if not self.parallel:
            loop = [f"{n.local(s, 'x', '_acc')} = {em.reduce_init(s.op, s.dtype)}" for s in accs]
            loop += body
            loop += [f"{n.var(s)}[{zeros(s)}] = {n.local(s, 'x', '_acc')}" for s in accs]
            if self._outlined():
                return alloc, [], views + loop, []
            return alloc, views + loop, None, []
        pre = [f"nch = {chunk_count(f'({total}) // {GRAIN}', extent)}"]
        # per-chunk partials: scratch of MAX_CHUNKS rows (nch of them used)
        for k, s in enumerate(accs + list(self.partials.values())):
            shape = (MAX_CHUNKS,) + (tuple(s.shape) if s.id in self.partials else ())
            alloc.append(f"{em.var(s)}_part = {em.scratch(k, shape, s.dtype)}")
            if s.id in self.partials:
                pre.append(f"{n.var(s, '_part')}[...] = {em.reduce_init(s.op, s.dtype)}")
        chunk = views + [f"lo = ch * {extent} // nch", f"hi = (ch + 1) * {extent} // nch"]
        chunk += [f"{n.local(s, 'x', '_acc')} = {em.reduce_init(s.op, s.dtype)}" for s in accs]
        chunk += body
        chunk += [f"{n.var(s, '_part')}[ch] = {n.local(s, 'x', '_acc')}" for s in accs]
        post = []
        def helped(s):
            return s.op in COMBINE_OPS and acc_dtype(s.dtype) == s.dtype

        for s in accs:
            v, part = n.local(s, "v", "_t"), n.var(s, "_part")
            if helped(s):
                post.append(f"_rt.combine_parts(_rt.c_view({part}, ({MAX_CHUNKS}, 1)), nch, {n.var(s)}, "
                            f"{COMBINE_OPS[s.op]})")
                continue
            comb = em.combine(s.op, v, f"{part}[c]", s.dtype)
            post += [f"{v} = {part}[0]", "for c in range(1, nch):", f"    {v} = {comb}",
                     f"{n.var(s)}[{zeros(s)}] = {v}"]
        for s in self.partials.values():
            # element loops: Numba compiles an array assignment or an in-place array
            # operator with its broadcasting machinery, about 1-2 s each
            size = S.product(s.shape)
            if helped(s):
                post.append(f"_rt.combine_parts(_rt.c_view({n.var(s, '_part')}, ({MAX_CHUNKS}, {size})), "
                            f"nch, _rt.c_view({n.var(s)}, ({size},)), {COMBINE_OPS[s.op]})")
                continue
            v, vf, pf = n.local(s, "v", "_t"), n.local(s, "v", "_f"), n.local(s, "v", "_pf")
            comb = em.combine(s.op, v, f"{pf}[c, q]", s.dtype)
            post += [f"{vf} = _rt.c_view({n.var(s)}, ({size},))",
                     f"{pf} = _rt.c_view({n.var(s, '_part')}, ({MAX_CHUNKS}, {size}))",
                     f"for q in range({size}):", f"    {v} = {pf}[0, q]",
                     "    for c in range(1, nch):", f"        {v} = {comb}", f"    {vf}[q] = {v}"]
        return alloc, pre, chunk, post

    def _outlined(self):
        """Does this (serial) loop run in a function of its own (see OUTLINE_MIN)? When it is
        large enough and LLVM would need more run-time overlap checks than it makes (8 pairs:
        each array written against every other array the loop touches)."""
        if self.plan.size < OUTLINE_MIN:
            return False
        written = len(self.writes) + len(self.direct_sinks)
        read = len([x for x in self.reads.values() if not self.plan.is_scalar_read(x)])
        return written * (written - 1) // 2 + written * read > OUTLINE_CHECKS

    def emit_scalar_group(self):
        """A group over shape (): straight-line code in the entry function, or in a compiled
        function of its own when the entry runs as Python (the scalar language's functions,
        `_exp` and the like, are compiled code only, and Python's `math` raises where NumPy's
        error model gives inf or nan)."""
        g, em = self.g, self.em
        allocs, lines, params = [], [], []

        def use(name):
            if name not in params:
                params.append(name)

        def leaf(x, ix=None):
            if em.is_scalar_const(x):
                ref = em.const_ref(x)
                if x.id in em._hoisted:
                    use(ref)
                return ref
            use(em.var(x))
            return em.first(x) if ix is None else f"{em.var(x)}[{', '.join(ix) if ix else '0'}]"

        def val(x):
            if x.id in self.members:
                return em.scalar(x)
            x = em.part.resolve(x)
            if x.id in em.part.index_views:     # one element of a slice, say
                return em.part.read_expr(x, ["0"] * x.ndim, leaf, expr=em.expr)
            return leaf(x)

        for node in g.nodes:
            if node.kind == "reduce" or node.op in ("broadcast", "reshape"):
                expr = val(node.inputs[0])
            else:
                expr = em.expr(node, [val(x) for x in node.inputs])
            lines.append(f"{em.scalar(node)} = {expr}  {em.comment(node)}")
            if node.id in em.part.materialized:
                alloc = f"{em.var(node)} = {em.buffer(node)}"
                allocs.append(alloc)
                lines += [alloc, f"{em.var(node)}[{', '.join(['0'] * max(node.ndim, 1))}] = {em.scalar(node)}"]
                use(em.var(node))
        em.body.append(f"# group {g.seq}: scalar ops")
        if not self.local:
            em.body += lines
            return
        em.body += allocs
        em.body.append(em.function([ln for ln in lines if ln not in allocs],
                                   f"group_{g.seq}", params, params))
