"""Public front-end API: eager `value_and_grad`, `grad`, and `make_graph`."""
import functools
import linecache
import numbers

import numpy as np

from .ad import backward
from .buffers import Buffer, unwrap
from .recording import recording
from .reroll import reroll_loops
from .rewrites import merge_index_checks, rewrite
from .core import EagerBox, EagerTrace, GraphTrace, Tensor, Tracer, bind, tracing, unbox
from .errors import GradError, JitgraphError, TracingError, is_library_frame
from .graph import Graph, toposort
from .interpreter import evaluate
from .loop_passes import merge_scans, sink_broadcasts
from .numpy_api import as_operand, keep_weak, ones_like, reshape, shape_of, zeros_like
from .ops import stats as scipy_functions
from .ops.sets import RANGE_MESSAGES
from .tree import TreeDef, tree_flatten, tree_unflatten
from .values import array_value, is_static_leaf, python_int_class, supported_dtype


def check_argnums(argnums, what="argnums"):
    """argnums as given must be an int or a sequence of ints (a clear TypeError otherwise)."""
    ok = _is_int(argnums) or isinstance(argnums, (tuple, list)) and all(_is_int(a) for a in argnums)
    if not ok:
        raise TypeError(f"{what} must be an int or a tuple of ints, got {argnums!r}")


def _is_int(a):
    return isinstance(a, (int, np.integer)) and not isinstance(a, bool)


def _norm_argnums(argnums, nargs, fname):
    check_argnums(argnums)
    single = isinstance(argnums, (int, np.integer))
    nums = (int(argnums),) if single else tuple(int(a) for a in argnums)
    for a in nums:
        if not -nargs <= a < nargs:
            raise GradError(f"argnums={argnums!r} but {fname} was called with {nargs} positional arguments")
    return single, tuple(a % nargs for a in nums)


def _fname(fun):
    return getattr(fun, "__qualname__", getattr(fun, "__name__", repr(fun)))


def _leaf_value(leaf, where_):
    """(value, weak) for an argument leaf: arrays keep their dtype; Python scalars are weak
    (a Python int as int64, or uint64 above the int64 range). A Buffer (an array an eager
    recording passes to a function it calls) is the value it stands for."""
    leaf = unwrap(leaf)
    if isinstance(leaf, Tensor):
        return leaf, leaf.weak
    if isinstance(leaf, (bool, int, float)) and not isinstance(leaf, np.generic):
        if isinstance(leaf, int) and not isinstance(leaf, bool):
            return np.asarray(leaf, np.int64 if python_int_class(leaf) == "i" else np.uint64), True
        return np.asarray(leaf), True
    if isinstance(leaf, (np.ndarray, np.generic, numbers.Number)):
        return array_value(leaf, where_), False
    raise JitgraphError(
        f"{where_} is a {type(leaf).__name__}; arguments must be NumPy arrays, Python scalars, "
        "or tuples/lists/dicts of them")


def _scalar_packs(leaves, arg_of_leaf, nums, fname):
    """{leaf index: (leaf indices, dtype, weak)} for the scalar leaves traced as one array input:
    at least PACK_MIN_SCALARS undifferentiated numbers of one dtype (a char-RNN's list of
    Python-int positions). Each is a slice of that input; a compiled entry with one array
    parameter per number compiled for seconds (210 of them took 3.3 s), and the rows of a
    rerolled loop read them as one strided slice."""
    groups = {}
    for k, leaf in enumerate(leaves):
        if arg_of_leaf[k] in nums or isinstance(leaf, Tensor) or is_static_leaf(leaf) \
                or not isinstance(leaf, (int, float, np.integer, np.floating)) or isinstance(leaf, bool):
            continue
        value, weak = _leaf_value(leaf, f"argument {arg_of_leaf[k]} of {fname}")
        groups.setdefault((value.dtype.str, weak), []).append(k)
    out = {}
    for (dtype, weak), ks in groups.items():
        if len(ks) >= PACK_MIN_SCALARS:
            out.update({k: (ks, np.dtype(dtype), weak) for k in ks})
    return out


PACK_MIN_SCALARS = 16


def graph_inputs(graph, leaves):
    """The values of `graph`'s inputs for a call's argument leaves (`input_leaves`: a leaf's
    position, or a tuple of positions of scalars packed in one array)."""
    picked = graph.meta.get("input_leaves")
    if picked is None:
        return list(leaves)
    return [leaves[k] if isinstance(k, int) else
            np.array([leaves[j] for j in k], graph.inputs[i].dtype) for i, k in enumerate(picked)]


# NumPy's message for an index it cannot convert, a traced value among them
_NUMPY_INDEX_ERROR = "only integers, slices"


def _traceback_where(exc):
    """' (at FILE:LINE: source)' of the innermost frame of `exc`'s traceback in the user's
    code, or ''."""
    found = ""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if not is_library_frame(frame):
            line = linecache.getline(frame.f_code.co_filename, tb.tb_lineno).strip()
            found = f" (at {frame.f_code.co_filename}:{tb.tb_lineno}: {line})"
        tb = tb.tb_next
    return found


def _check_diff_leaf(value, where_):
    if value.dtype.kind != "f":
        raise GradError(
            f"{where_} has dtype {np.dtype(value.dtype).name} but is listed in argnums: only floating "
            "arguments can be differentiated (pass integer arrays, e.g. indices, as non-differentiated "
            "arguments)")


def _check_loss(out, fname):
    shape = tuple(shape_of(out)) if not isinstance(out, (int, float)) else ()
    dtype = out.dtype if isinstance(out, Tensor) else np.asarray(out).dtype
    if int(np.prod(shape, dtype=np.int64)) != 1 or dtype.kind != "f":
        raise GradError(
            f"{fname} must return a floating scalar (one element: shape (), (1,), (1, 1), ...) to be "
            f"differentiated, but it returned "
            f"shape {shape} and dtype {np.dtype(dtype).name}; reduce it (e.g. np.sum) or use has_aux=True "
            "to return extra outputs")


def _split_aux(out, has_aux, fname):
    if not has_aux:
        return out, None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise GradError(f"{fname} has has_aux=True, so it must return a pair (value, aux)")
    return out[0], out[1]


def _to_numpy(v, like=None):
    """A result as the caller should see it: arrays owned and writable; 0-d as a NumPy scalar,
    except the gradient of an ndarray argument (`like`), which is an array like it."""
    if isinstance(v, Tensor):
        return v
    if not isinstance(v, np.ndarray):
        v = np.asarray(v)
    if v.ndim == 0 and type(like) is not np.ndarray:
        return v[()]
    if v.base is not None or not v.flags.writeable:
        return v.copy()
    return v


def _data_buffers(arg):
    """An argument that is not differentiated, with its NumPy arrays as Buffers (views): their
    methods that take an array, which NumPy's convert (`X.dot(W)` with a recorded W), then
    record; in a trace for `jit` every argument is traced and has them already."""
    if type(arg) is np.ndarray:
        return arg.view(Buffer)
    if not isinstance(arg, (tuple, list, dict)):
        return arg
    leaves, td = tree_flatten(arg)
    if not any(type(x) is np.ndarray for x in leaves):
        return arg
    return tree_unflatten(td, [x.view(Buffer) if type(x) is np.ndarray else x for x in leaves])


def value_and_grad(fun, argnums=0, has_aux=False):
    """Eager (define-by-run) value and reverse-mode gradient of `fun`.

    `fun` runs on real values while its NumPy operations are recorded on a
    tape, so any Python control flow works, including on data. One reverse
    sweep over the tape then yields all requested gradients.

    Args:
        fun: a function of NumPy arrays, Python scalars and pytrees of them,
            returning a floating scalar (or `(scalar, aux)` with `has_aux`).
        argnums: int or tuple of ints, the positional arguments to
            differentiate. Each may be a pytree of floating arrays.
        has_aux: `fun` returns `(value, aux)`; aux is returned undifferentiated.

    Returns:
        A function returning `(value, grads)`, or `((value, aux), grads)` with
        `has_aux`. `grads` has the structure of the differentiated argument for
        an int `argnums`, and is a tuple of such for a tuple `argnums`.
    """
    fname = _fname(fun)

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        scipy_functions.install()
        single, nums = _norm_argnums(argnums, len(args), fname)
        if any(isinstance(x, Tracer) for a in nums for x in tree_flatten(args[a])[0]):
            return _traced_value_and_grad(fun, args, kwargs, single, nums, has_aux, fname)
        trace = EagerTrace()
        args = list(args)
        wrt, trees, wrt_leaves = [], [], []
        for a in dict.fromkeys(nums):     # each argument once, even if argnums repeats it
            leaves, td = tree_flatten(args[a])
            wrt_leaves += leaves
            boxed = []
            for k, leaf in enumerate(leaves):
                value, weak = _leaf_value(leaf, f"argument {a} of {fname}")
                _check_diff_leaf(value, f"argument {a} of {fname}" + (f" (leaf {k})" if len(leaves) > 1 else ""))
                box = trace.new_input(value, weak)
                wrt.append(box.node)
                boxed.append(box)
            trees.append(td)
            args[a] = tree_unflatten(td, boxed)
        for a in range(len(args)):
            if a not in nums:
                args[a] = _data_buffers(args[a])
        with recording():
            out, aux = _split_aux(fun(*args, **kwargs), has_aux, fname)
        out = unwrap(out)
        _check_loss(out, fname)
        if isinstance(out, EagerBox) and out._trace is trace:
            seed = ones_like(out.value)
            flat = backward(trace.nodes, out.node, wrt, lambda n: trace.values[n.id], seed)
            value = out.value
        else:
            flat = [zeros_like(trace.values[n.id]) for n in wrt]
            value = out
        by_arg, k = {}, 0
        for a, td in zip(dict.fromkeys(nums), trees):
            by_arg[a] = tree_unflatten(td, [_to_numpy(g, like) for g, like in
                                            zip(flat[k:k + td.num_leaves], wrt_leaves[k:k + td.num_leaves])])
            k += td.num_leaves
        grads = by_arg[nums[0]] if single else tuple(by_arg[a] for a in nums)
        value = _to_numpy(unbox(value, trace))
        if has_aux:
            aux_leaves, aux_td = tree_flatten(aux)
            aux = tree_unflatten(aux_td, [_to_numpy(unbox(unwrap(v), trace)) for v in aux_leaves])
            return (value, aux), grads
        return value, grads

    return wrapped


def _traced_value_and_grad(fun, args, kwargs, single, nums, has_aux, fname):
    """value_and_grad called on traced values (inside jit, or a higher derivative): the reverse
    sweep runs on the enclosing graph itself, so its control flow stays symbolic."""
    args = list(args)
    trace, wrt, trees = None, [], []
    for a in dict.fromkeys(nums):
        leaves, td = tree_flatten(args[a])
        fresh = []
        for leaf in leaves:
            if not isinstance(leaf, Tracer):
                raise GradError(f"argument {a} of {fname} mixes traced and concrete values")
            _check_diff_leaf(leaf, f"argument {a} of {fname}")
            trace = leaf._trace
            # a fresh node for the differentiated value: ops on it are new nodes, never
            # CSE hits on nodes computed before this call (those must not get adjoints)
            t = bind("cast", leaf, dtype=leaf.dtype)
            t.weak = leaf.weak
            wrt.append(t.node)
            fresh.append(t)
        trees.append(td)
        args[a] = tree_unflatten(td, fresh)
    start = len(trace.nodes)
    out, aux = _split_aux(fun(*args, **kwargs), has_aux, fname)
    out = unwrap(out)
    _check_loss(out, fname)
    if isinstance(out, Tracer) and out._trace is trace:
        seed = trace.tracer(trace.const(np.ones(out.shape, dtype=out.dtype)))
        flat = backward(trace.nodes[start:], out.node, wrt, trace.tracer, seed)
    else:
        flat = [zeros_like(trace.tracer(n)) for n in wrt]
    by_arg, k = {}, 0
    for a, td in zip(dict.fromkeys(nums), trees):
        by_arg[a] = tree_unflatten(td, flat[k:k + td.num_leaves])
        k += td.num_leaves
    grads = by_arg[nums[0]] if single else tuple(by_arg[a] for a in nums)
    return ((out, aux), grads) if has_aux else (out, grads)


def grad(fun, argnums=0, has_aux=False):
    """Eager gradient of `fun` (the second element of `value_and_grad`)."""
    vg = value_and_grad(fun, argnums, has_aux)

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        (value_aux, grads) = vg(*args, **kwargs)
        return (grads, value_aux[1]) if has_aux else grads

    return wrapped


def trace_graph(fun, args, argnums=0, has_aux=False, grad=False, kwargs=None, reroll=True, pack_scalars=True):
    """Trace `fun` on abstract versions of `args` into a `Graph`.

    With `grad=False` the outputs are the leaves of `fun`'s result. With
    `grad=True` this is the joint forward+backward graph: its outputs are the
    value, then the gradient leaves (then aux leaves with `has_aux`), and
    `graph.meta["out_tree"]` rebuilds the `value_and_grad` structure.
    reroll=False keeps Python loops unrolled (see reroll.py). pack_scalars=False keeps one
    input per scalar argument (`_scalar_packs`; ONNX export names one input per argument leaf).
    """
    scipy_functions.install()
    with tracing(), recording():
        graph = _trace_graph(fun, args, argnums, has_aux, grad, kwargs, reroll, pack_scalars)
    return sink_broadcasts(merge_scans(graph))


def _trace_graph(fun, args, argnums, has_aux, grad, kwargs, reroll, pack_scalars):
    fname = _fname(fun)
    trace = GraphTrace()
    leaves, in_tree = tree_flatten(tuple(args))
    single, nums = _norm_argnums(argnums, len(args), fname) if grad else (True, ())
    arg_of_leaf = []
    for a, arg in enumerate(args):
        arg_of_leaf += [a] * len(tree_flatten(arg)[0])
    tracers, inputs, input_leaves = [], [], []
    packs, unpacked = _scalar_packs(leaves, arg_of_leaf, nums, fname) if pack_scalars else {}, {}
    for k, leaf in enumerate(leaves):
        if is_static_leaf(leaf) and arg_of_leaf[k] not in nums:
            tracers.append(leaf)        # a Python int beyond 64 bits: a literal of this trace
            continue
        if k in packs:
            ks, dtype, weak = packs[k]
            if k == ks[0]:
                packed = trace.new_input(len(inputs), (len(ks),), dtype)
                inputs.append(packed.node)
                input_leaves.append(tuple(ks))
                for i, j in enumerate(ks):
                    unpacked[j] = keep_weak(reshape(bind("slice", packed, starts=(i,), stops=(i + 1,), steps=(1,)),
                                                    ()), weak)
            tracers.append(unpacked[k])
            continue
        value, weak = _leaf_value(leaf, f"argument {arg_of_leaf[k]} of {fname}")
        if arg_of_leaf[k] in nums:
            _check_diff_leaf(value, f"argument {arg_of_leaf[k]} of {fname}")
        t = trace.new_input(len(inputs), value.shape, value.dtype, weak)
        tracers.append(t)
        inputs.append(t.node)
        input_leaves.append(k)
    targs = tree_unflatten(in_tree, tracers)
    try:
        out = fun(*targs, **(kwargs or {}))
    except IndexError as e:
        if not str(e).startswith(_NUMPY_INDEX_ERROR):
            raise
        raise TracingError(f"{e}{_traceback_where(e)}. If the position is a traced value (it depends on the "
                           "function's inputs), the array written or read is a plain NumPy array: a view "
                           "(x[1], x.T, x.reshape(...)) of an array the function made, or an array from "
                           "outside it. Write into the array the function made (x[1, i] = v rather than "
                           "row = x[1]; row[i] = v), or compute the result with NumPy operations "
                           "(np.where, a comparison with np.arange for a one-hot)") from e
    meta = {"in_tree": in_tree, "argnums": nums, "has_aux": has_aux, "grad": grad, "name": fname}
    if len(input_leaves) != len(leaves):
        meta["input_leaves"] = input_leaves
    if not grad:
        out_leaves, out_tree = tree_flatten(out)
        meta["out_tree"] = out_tree
        outputs = [_as_node(trace, v, fname) for v in out_leaves]
        outputs = rewrite(trace, reroll_loops(trace, outputs) if reroll else outputs)
        return Graph(inputs, outputs + _checks(trace, meta), meta=meta)

    value, aux = _split_aux(out, has_aux, fname)
    _check_loss(value, fname)
    if trace.regions:
        meta["checkpoint_regions"] = dict(trace.regions)
    aux_leaves, aux_tree = tree_flatten(aux) if has_aux else ([], None)
    value_node, *aux_nodes = [_as_node(trace, v, fname) for v in [value] + aux_leaves]
    if reroll:
        value_node, *aux_nodes = reroll_loops(trace, [value_node] + aux_nodes)
    value_node, *aux_nodes = rewrite(trace, [value_node] + aux_nodes)
    n_forward = len(trace.nodes)
    wrt, grad_trees, grad_leaves = [], [], []
    for a in nums:
        idx = [j for j, k in enumerate(input_leaves) if isinstance(k, int) and arg_of_leaf[k] == a]
        wrt += [inputs[j] for j in idx]
        grad_leaves += [input_leaves[j] for j in idx]
        grad_trees.append(tree_flatten(args[a])[1])
    seed = trace.const(np.ones(value_node.shape, dtype=value_node.dtype))
    forward = sorted(toposort([value_node] + wrt), key=lambda n: n.id)
    flat = backward(forward, value_node, wrt, trace.tracer, trace.tracer(seed))
    grad_nodes = [_as_node(trace, g, fname) for g in flat]
    adjoint_ids = {n.id for n in trace.nodes[n_forward:]}
    outputs = [value_node] + grad_nodes + aux_nodes
    meta["grad_leaves"] = grad_leaves       # the argument leaf of each gradient output
    grads_def = grad_trees[0] if single else _tuple_def(grad_trees)
    value_def = _tuple_def([_leaf_def(), aux_tree]) if has_aux else _leaf_def()
    meta["out_tree"] = _tuple_def([value_def, grads_def])
    # the flat output order is value, grads, aux; out_tree's leaf order is value, aux, grads
    meta["out_order"] = ([0] + list(range(1 + len(grad_nodes), len(outputs)))
                         + list(range(1, 1 + len(grad_nodes)))) if has_aux else list(range(len(outputs)))
    return Graph(inputs, outputs + _checks(trace, meta), adjoint_ids=adjoint_ids, meta=meta)


def _checks(trace, meta):
    """The values the run-time checks read (extra outputs after the function's own), and their
    list in meta["checks"]: (kind, info) per extra output (see `run_checks`)."""
    if not trace.checks:
        return []
    merge_index_checks(trace)
    meta["checks"] = [(kind, info) for kind, _, info in trace.checks]
    return [node for _, node, _ in trace.checks]


def run_checks(graph, flat):
    """Raise NumPy's error where a run-time check fails (a Python int out of range for the array
    it met, a negative integer power); returns the function's own outputs of `flat`."""
    checks = graph.meta.get("checks")
    if not checks:
        return flat
    n = len(flat) - len(checks)
    for (kind, info), v in zip(checks, flat[n:]):
        v = np.asarray(v).reshape(-1)[0].item()
        if kind == "range":
            lo, hi = np.iinfo(info).min, np.iinfo(info).max
            if not lo <= v <= hi:
                raise OverflowError(f"Python integer {v} out of bounds for {info}")
        elif kind == "nonnegative" and v < 0:
            raise ValueError("Integers to negative integer powers are not allowed.")
        elif kind == "index" and not -info[0] <= v < info[0]:
            raise IndexError(f"index {v} is out of bounds for axis {info[1]} with size {info[0]}")
        elif kind == "bincount_negative" and v < 0:
            raise ValueError("'list' argument must have no negative elements")
        elif kind in ("unravel_low", "multi_index_low") and v < 0 or \
                kind in ("unravel_high", "multi_index_high") and v >= info:
            raise ValueError(RANGE_MESSAGES[kind.rsplit("_", 1)[0]].format(index=v, size=info))
        elif kind == "histogram_bins" and v < 0:
            raise ValueError("`bins` must increase monotonically, when an array")
        elif kind == "histogram_range" and not np.isfinite(v):
            raise ValueError("autodetected range is not finite: the data hold NaN or infinities (or a "
                             f"range too wide for {info} finite-sized bins)")
        elif kind == "bincount_bins" and v >= info:
            raise ValueError(f"np.bincount: the value {v} needs {v + 1} bins but the traced function "
                             f"makes minlength={info} (its result's size was fixed when tracing); pass a "
                             f"minlength above every value")
    return flat[:n]


def _leaf_def():
    return tree_flatten(0)[1]


def _tuple_def(children):
    return TreeDef("tuple", None, children)


def _as_node(trace, v, fname="the function"):
    v = unwrap(v)
    if isinstance(v, Tensor) and v._trace is trace:
        return v.node
    if isinstance(v, Tensor):
        raise JitgraphError("an output of the traced function belongs to another trace")
    if isinstance(v, np.ndarray) and v.dtype == object:     # an object array of traced values
        return _as_node(trace, as_operand(v), fname)
    value = np.asarray(v)
    if not supported_dtype(value.dtype):
        raise TypeError(f"{fname} returned a {type(v).__name__} ({v!r:.40}): a traced function returns "
                        "arrays and numbers, and tuples, lists and dicts of them")
    return trace.const(value)


def unflatten_outputs(graph, flat, leaves=None):
    """Rebuild the traced function's output structure from the graph's flat outputs (gradients
    of ndarray argument leaves, among `leaves`, stay arrays)."""
    flat = run_checks(graph, flat)
    likes = [None] * len(flat)
    for k, leaf in enumerate(graph.meta.get("grad_leaves", ())):
        likes[1 + k] = leaves[leaf] if leaves is not None else None
    flat = [_to_numpy(v, like) for v, like in zip(flat, likes)]
    order = graph.meta.get("out_order")
    if order is not None:
        flat = [flat[i] for i in order]
    return tree_unflatten(graph.meta["out_tree"], flat)


def make_graph(fun, argnums=0, grad=False, has_aux=False, reroll=True):
    """Returns a function that traces `fun` for its arguments' shapes and dtypes into a `Graph`.

    `print(make_graph(f, grad=True)(*args))` shows the joint forward+backward IR;
    reroll=False keeps Python loops unrolled, as `jit_grad(reroll=False)`.
    """

    @functools.wraps(fun)
    def make(*args, **kwargs):
        return trace_graph(fun, args, argnums, has_aux, grad, kwargs, reroll)

    return make


def eval_graph(graph, *args):
    """Run `graph` with the reference interpreter on pytree arguments; returns fun's structure."""
    leaves, _ = tree_flatten(tuple(args))
    return unflatten_outputs(graph, evaluate(graph, *graph_inputs(graph, leaves)), leaves)
