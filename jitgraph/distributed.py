"""Data-parallel value and gradient on Dask: one compiled `jit_grad` per worker, a tree reduction.

    import jitgraph.distributed as jgd

    step = jgd.value_and_grad(loss, argnums=0, reduce="mean")
    value, grads = step(params, X, Y)      # X, Y: Dask arrays chunked along axis 0

Each chunk of the data (a block along axis 0, the sample axis) becomes one task
that calls the compiled gradient on that chunk; the per-chunk results are added
in a tree (`split_every` at a time) and the client receives one NumPy result.

What travels:

* The compiled function is pickled once per `value_and_grad` object (its
  pickle holds the Python function and the options, never native code: see
  `JitFunction.__reduce__`) and rides inside every task as a small bytes blob.
  A worker process unpickles a blob once, keeps the `JitFunction` in a
  per-process registry (`local_functions`), and from then on a task costs one
  dict lookup. The first call in a process traces the function and loads the
  kernel from that machine's `$JITGRAPH_CACHE_DIR` (or compiles it once, if
  that cache does not have it); later tasks reuse the trace.
* The non-data arguments (parameters, constants) are scattered to every
  worker once per call, not sent with each task.

Dask is an optional dependency (`pip install jitgraph[distributed]`) and is
imported only when a distributed function is called, never by `import
jitgraph` or `import jitgraph.distributed`.
"""
import collections
import itertools
import math
import numbers
import os
import pickle
import threading
import uuid

import numpy as np

from .api import _fname
from .jit import JitFunction, jit_grad
from .tree import tree_flatten, tree_unflatten

__all__ = ["value_and_grad", "DataParallelValueAndGrad", "local_functions", "local_cache_info",
           "local_stats"]

# ---- per-process state (on workers, and in the client process for the local schedulers) -----------
#
# jit._SHARED maps tokens to JitFunctions weakly: without a strong reference between tasks, the
# function a task unpickled would be collected when the task ends, and the next task would trace
# again. _FUNCTIONS holds that reference; _SPECS maps a task's blob to what it unpickled to, so a
# blob is unpickled once per process.
_LOCK = threading.Lock()
_FUNCTIONS = collections.OrderedDict()     # token -> JitFunction, LRU
_SPECS = collections.OrderedDict()         # pickled _Spec (bytes) -> _Spec, LRU
_MAX_ENTRIES = 64
WORKER_LOSS_RETRIES = 2     # calls run again after a worker died under them (see __call__)
_COUNTS = collections.Counter()            # "specs": blobs unpickled, "payloads": payloads unpickled


def _token(fn):
    return getattr(fn, "_token", None) or f"id-{id(fn):x}"


def local_functions():
    """The compiled functions this process has received in distributed tasks: {token: JitFunction}.

    The registry keeps them alive between tasks (so each is traced once per signature per
    process); it holds at most 64, least recently used dropped first.
    """
    with _LOCK:
        return dict(_FUNCTIONS)


def local_cache_info():
    """{token: CacheInfo} of the compiled functions this process has received.

    Meant for `client.run(jitgraph.distributed.local_cache_info)`: per worker, how many
    times each function was traced, compiled, or loaded from the disk cache.
    """
    return {tok: fn.cache_info() for tok, fn in local_functions().items()}


def local_stats():
    """Counters of this process: {"specs": task blobs unpickled, "payloads": argument payloads
    unpickled (one per call per worker when scattering works as intended), "functions":
    local_cache_info()}."""
    with _LOCK:
        counts = dict(specs=_COUNTS["specs"], payloads=_COUNTS["payloads"])
    counts["functions"] = local_cache_info()
    return counts


def _remember(fn):
    tok = _token(fn)
    _FUNCTIONS[tok] = fn
    _FUNCTIONS.move_to_end(tok)
    while len(_FUNCTIONS) > _MAX_ENTRIES:
        _FUNCTIONS.popitem(last=False)


_Spec = collections.namedtuple("_Spec", "fn data_pos treedefs mean")


def _load_spec(blob):
    with _LOCK:
        spec = _SPECS.get(blob)
        if spec is None:
            spec = pickle.loads(blob)
            _COUNTS["specs"] += 1
            _SPECS[blob] = spec
            while len(_SPECS) > _MAX_ENTRIES:
                _SPECS.popitem(last=False)
        else:
            _SPECS.move_to_end(blob)
        _remember(spec.fn)
        return spec


class _Payload:
    """The broadcast arguments of one call (None at the data positions)."""

    __slots__ = ("args",)

    def __init__(self, args):
        self.args = args

    def __reduce__(self):
        return _load_payload, (self.args,)


def _load_payload(args):
    with _LOCK:
        _COUNTS["payloads"] += 1
    return _Payload(args)


# ---- tasks --------------------------------------------------------------------------------------

def _chunk_task(blob, payload, *blocks):
    """Value and gradient of one chunk: (n, output leaves, output treedef), or None if empty.

    With reduce="mean" the leaves are multiplied by n, so that adding chunks gives the
    sample-weighted sum and one division at the end gives the mean over all samples.
    """
    spec = _load_spec(blob)
    n = blocks[0].shape[0]
    for b in blocks[1:]:
        if b.shape[0] != n:
            raise ValueError(f"data chunks disagree on the number of samples: {n} vs {b.shape[0]}")
    if n == 0:
        return None
    args = list(payload.args)
    k = 0
    for pos, td in zip(spec.data_pos, spec.treedefs):
        m = td.num_leaves
        args[pos] = tree_unflatten(td, blocks[k:k + m])
        k += m
    leaves, td = tree_flatten(spec.fn(*args))
    if spec.mean:
        leaves = [np.multiply(x, n) for x in leaves]
    return n, leaves, td


def _combine(*parts):
    """Add chunk results (leafwise); None (an empty chunk) contributes nothing."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    n, acc, td = parts[0]
    for m, leaves, td2 in parts[1:]:
        if td2 != td:
            raise ValueError(f"chunks returned different output structures: {td} vs {td2}")
        # new arrays, never in place: an input may be kept by Dask and reused on a retry
        acc = [a + b for a, b in zip(acc, leaves)]
        n += m
    return n, acc, td


# ---- the client side ----------------------------------------------------------------------------

def _default_client():
    try:
        from distributed import default_client
    except ImportError:
        return None
    try:
        return default_client()
    except ValueError:
        return None


def _norm_positions(nums, nargs, what):
    if isinstance(nums, numbers.Integral):
        nums = (nums,)
    out = []
    for a in nums:
        a = int(a)
        if not -nargs <= a < nargs:
            raise ValueError(f"{what} {a} is out of range for {nargs} positional arguments")
        out.append(a % nargs)
    return tuple(sorted(set(out)))


def _chunk_key(chunks):
    return tuple(None if isinstance(c, float) and math.isnan(c) else int(c) for c in chunks)


def _even_chunks(n, parts):
    parts = max(1, min(parts, n))
    base, extra = divmod(n, parts)
    return tuple(base + (1 if i < extra else 0) for i in range(parts))


class DataParallelValueAndGrad:
    """Value and gradient of `fun` over data split into chunks along axis 0, computed on Dask.

    Built by `value_and_grad`; call it like the function it differentiates. Attributes:
    `compiled` (the `jit_grad` function the workers run), `argnums`, `reduce`, `data_argnums`,
    `split_every`.
    """

    def __init__(self, fun, argnums=None, reduce="sum", client=None, data_argnums=None,
                 split_every=4, **jit_options):
        if reduce not in ("sum", "mean"):
            raise ValueError(f"reduce must be 'sum' or 'mean', got {reduce!r}")
        if int(split_every) < 2:
            raise ValueError(f"split_every must be at least 2, got {split_every!r}")
        if isinstance(fun, JitFunction):
            if not fun.grad:
                raise ValueError("fun is a jg.jit (forward only) function; pass the plain function "
                                 "or a jg.jit_grad function")
            if jit_options:
                raise ValueError(f"fun is already compiled; options {sorted(jit_options)} cannot "
                                 "be changed (compile it with them, or pass the plain function)")
            if argnums is not None and _as_tuple(argnums) != _as_tuple(fun.argnums):
                raise ValueError(f"argnums={argnums!r} differs from the compiled function's "
                                 f"argnums={fun.argnums!r}")
            compiled = fun
        else:
            compiled = jit_grad(fun, argnums=0 if argnums is None else argnums, **jit_options)
        if compiled.has_aux:
            raise ValueError("has_aux is not supported: auxiliary outputs have no defined reduction")
        self.compiled = compiled
        self.argnums = compiled.argnums
        self.reduce = reduce
        self.client = client
        self.data_argnums = data_argnums
        self.split_every = int(split_every)
        self._blobs = {}
        self.__name__ = getattr(compiled, "__name__", "fun")

    def __repr__(self):
        return (f"<jitgraph.distributed.value_and_grad of {_fname(self.compiled.fun)} "
                f"(reduce={self.reduce!r})>")

    # -- planning --------------------------------------------------------------------------------

    def _client(self, client=None):
        return client or self.client or _default_client()

    def _classify(self, args):
        """Positions of the data arguments, and the flattened leaves of each."""
        import dask.array as da

        nargs = len(args)
        diff = _norm_positions(self.argnums, nargs, "argnums")
        static = set(self.compiled.static_argnums)
        flat = [tree_flatten(a) for a in args]
        if self.data_argnums is None:
            data_pos = tuple(i for i, (leaves, _) in enumerate(flat)
                             if any(isinstance(x, da.Array) for x in leaves))
        else:
            data_pos = _norm_positions(self.data_argnums, nargs, "data_argnums")
        for i in data_pos:
            if i in diff:
                raise ValueError(
                    f"argument {i} is differentiated (argnums={self.argnums!r}) and is also a data "
                    "argument: parameters must be NumPy arrays on the client, not Dask arrays")
            if i in static:
                raise ValueError(f"argument {i} is static (static_argnums) and cannot be a data argument")
        for i, (leaves, _) in enumerate(flat):
            if i not in data_pos and any(isinstance(x, da.Array) for x in leaves):
                raise ValueError(f"argument {i} holds a Dask array but is not a data argument "
                                 f"(data_argnums={self.data_argnums!r}); add it to data_argnums, or "
                                 "compute it to a NumPy array to broadcast it")
        return data_pos, flat

    def _blocks(self, data_pos, flat, default_parts):
        """Per chunk, the list of leaf blocks (Delayed) of all data arguments, in order.

        `default_parts()`: how many pieces to cut NumPy data into when no Dask data sets the chunks.
        """
        import dask
        import dask.array as da

        leaves = [x for i in data_pos for x in flat[i][0]]
        if not leaves:
            raise ValueError("no data arguments: pass Dask arrays, or name NumPy ones in data_argnums")
        darrs = []
        for k, x in enumerate(leaves):
            if isinstance(x, da.Array):
                if x.ndim == 0:
                    raise ValueError("a data leaf is a 0-d Dask array; data needs a sample axis (axis 0)")
                if any(nb != 1 for nb in x.numblocks[1:]):
                    # one block per chunk of samples: the whole row of each sample in one task
                    x = x.rechunk({ax: -1 for ax in range(1, x.ndim)})
                darrs.append((k, x))
            else:
                if not isinstance(x, np.ndarray) or x.ndim == 0:
                    raise ValueError(f"data leaves must be arrays with a sample axis (axis 0), "
                                     f"got {type(x).__name__} {np.shape(x)}")
        lengths = {x.shape[0] for x in leaves}
        if len(lengths) > 1 and not any(isinstance(n, float) and math.isnan(n) for n in lengths):
            raise ValueError(f"data arguments disagree on the number of samples (axis 0): "
                             f"{sorted(lengths)}")
        if darrs:
            target = darrs[0][1].chunks[0]
            tkey = _chunk_key(target)
            for j, (k, x) in enumerate(darrs):
                if _chunk_key(x.chunks[0]) != tkey:
                    if None in tkey or None in _chunk_key(x.chunks[0]):
                        raise ValueError("data Dask arrays have different, partly unknown chunk sizes "
                                         "along axis 0; call .compute_chunk_sizes() on them first")
                    darrs[j] = (k, x.rechunk({0: target}))
            if None in tkey and len(darrs) < len(leaves):
                raise ValueError("NumPy data cannot be split to match Dask chunks of unknown size; "
                                 "call .compute_chunk_sizes() on the Dask arrays first")
        else:
            target = _even_chunks(leaves[0].shape[0], default_parts())
        per_leaf = [None] * len(leaves)
        for k, x in darrs:
            # unoptimized: data leaves derived from one graph keep their shared keys
            per_leaf[k] = list(x.to_delayed(optimize_graph=False).reshape(-1))
        call_id = uuid.uuid4().hex[:12]
        for k, x in enumerate(leaves):
            if per_leaf[k] is None:
                ends = list(itertools.accumulate(target))
                starts = [0] + ends[:-1]
                per_leaf[k] = [dask.delayed(x[a:b], name=f"jg-data-{call_id}-{k}-{i}")
                               for i, (a, b) in enumerate(zip(starts, ends))]
        return [list(t) for t in zip(*per_leaf)]

    def _blob(self, data_pos, treedefs):
        key = (data_pos, tuple(treedefs))
        blob = self._blobs.get(key)
        if blob is None:
            import cloudpickle
            blob = cloudpickle.dumps(_Spec(self.compiled, data_pos, tuple(treedefs),
                                           self.reduce == "mean"))
            self._blobs[key] = blob
        return blob

    def _build(self, args, client):
        """The computation as one Delayed, and the scattered payload (alive until it has run).

        Computing the Delayed gives (number of samples, summed output leaves, output treedef),
        or None when every chunk is empty.
        """
        import dask

        data_pos, flat = self._classify(args)

        def default_parts():
            if client is None:
                return os.cpu_count() or 1
            workers = client.scheduler_info().get("workers", {}).values()
            return sum(w.get("nthreads", 1) for w in workers) or 1

        chunks = self._blocks(data_pos, flat, default_parts)
        blob = self._blob(data_pos, [flat[i][1] for i in data_pos])
        payload = _Payload([None if i in data_pos else a for i, a in enumerate(args)])
        name = f"jg-{self.__name__}-{uuid.uuid4().hex[:12]}"
        if client is not None:
            # the payload goes to every worker once, and tasks read the local replica; with a
            # replica on each worker, losing a worker does not lose the parameters
            ref = client.scatter([payload], broadcast=True, hash=False)[0]
        else:
            ref = dask.delayed(payload, name=f"{name}-args")
        task = dask.delayed(_chunk_task, pure=False)
        combine = dask.delayed(_combine, pure=False)
        level = [task(blob, ref, *blocks, dask_key_name=f"{name}-chunk-{i}")
                 for i, blocks in enumerate(chunks)]
        depth = 0
        while len(level) > 1:
            depth += 1
            s = self.split_every
            level = [combine(*level[i:i + s], dask_key_name=f"{name}-sum-{depth}-{i // s}")
                     for i in range(0, len(level), s)]
        return level[0], ref

    def __call__(self, *args, client=None):
        """Value and gradient of the reduced objective, as NumPy (the output of `jit_grad`)."""
        import dask

        client = self._client(client)
        if client is None:
            out, = dask.compute(self._build(args, client)[0])
        else:
            from distributed.client import FutureCancelledError
            from distributed.comm import CommClosedError
            for attempt in itertools.count():
                try:
                    final, _payload_ref = self._build(args, client)
                    out = client.compute(final).result()
                    break
                except (CommClosedError, FutureCancelledError):
                    # a worker died while the payload was scattered to it, or with the only
                    # result a task needed: the call runs again on the workers left
                    if attempt >= WORKER_LOSS_RETRIES:
                        raise
        if out is None:
            raise ValueError("the data arguments have no samples (every chunk is empty)")
        n, leaves, td = out
        if self.reduce == "mean":
            leaves = [x / n for x in leaves]
        return tree_unflatten(td, leaves)

    def worker_cache_info(self, client=None):
        """{worker address: CacheInfo of this function on that worker, or None if it has not run there}."""
        client = self._client(client)
        if client is None:
            raise ValueError("no Dask distributed client: pass client= or create one")
        tok = _token(self.compiled)
        return {addr: info.get(tok) for addr, info in client.run(local_cache_info).items()}


def _as_tuple(nums):
    return (int(nums),) if isinstance(nums, numbers.Integral) else tuple(int(a) for a in nums)


def value_and_grad(fun, argnums=None, reduce="sum", client=None, data_argnums=None, *,
                   split_every=4, **jit_options):
    """Data-parallel `jit_grad` on Dask: value and gradients over data chunked along axis 0.

    `fun(*args)` returns a scalar loss for one chunk of samples. The returned callable takes
    the same arguments, with the data as Dask arrays chunked along axis 0 (the sample axis),
    runs the compiled `jit_grad(fun, argnums)` on every chunk on the Dask workers, adds the
    chunk results in a tree, and returns `(value, grads)` as NumPy, structured as `jit_grad`
    returns them: grads is one gradient for an int `argnums`, a tuple for a tuple.

    Args:
        fun: the per-chunk loss (plain NumPy code, traced like `jit_grad`), or an existing
            `jg.jit_grad` function (then its options and argnums are used).
        argnums: differentiated positions (default 0, or those of a `jit_grad` `fun`). They
            are parameters: NumPy arrays, scalars or pytrees of them, on the client.
        reduce: how chunk results combine, matching what `fun` computes per chunk:
            "sum": `fun` returns a sum over its samples; the result is the sum of the chunk
                values and gradients (the sum over all samples).
            "mean": `fun` returns the mean over its samples; each chunk is weighted by its
                number of samples, so the result is the mean over all samples even when
                chunks have different sizes. (With a sum-valued `fun`, use "sum" and divide
                by the number of samples yourself.)
            Either way, the result equals, up to float rounding, `jit_grad` on the
            concatenated data.
        client: a `dask.distributed.Client`; default the current default client, or, when
            there is none, Dask's local scheduler (threads in this process).
        data_argnums: positions of the data arguments, split along axis 0. Default: every
            argument containing a Dask array. Every other argument is broadcast: sent once
            per call to every worker (scattered), not once per task. A data argument may be
            a pytree (e.g. `(X, Y)`); all its leaves must have the same number of samples.
            Dask arrays are rechunked to one block along the other axes, and to the first
            data array's chunks along axis 0 if they differ. NumPy leaves of data arguments
            (e.g. a NumPy array named in `data_argnums`) are split to match the Dask
            chunks, or, with no Dask data at all, into as many even pieces as the cluster
            has worker threads; their pieces travel in the task graph, which suits modest
            sizes (build large data as Dask arrays on the workers, e.g. with
            `dask.array.random` or `map_blocks`).
        split_every: fan-in of the reduction tree (chunk results added per task).
        **jit_options: passed to `jit_grad` (`parallel`, `static_argnums`, ...).
            Static arguments are broadcast.

    Chunks of size 0 are skipped. Worker loss is survived by Dask: a lost chunk task is
    recomputed elsewhere (the parameters have a replica on every worker), and the result
    is unchanged; a call whose scatter or dependencies a dying worker took runs again
    (at most WORKER_LOSS_RETRIES times). The compiled function is traced once per process and signature and its
    kernel loaded from each worker's `$JITGRAPH_CACHE_DIR` (compiled there once if absent);
    chunk sizes are read at run time, so unequal chunks retrace (milliseconds) but do not
    recompile. `has_aux` is not supported, and arguments are positional.

    Build it once and call it in the training loop: workers cache per compiled function, so
    a new `value_and_grad` object per step would retrace on every worker each step. jitgraph
    must be installed on the workers, as for any code Dask runs; give each worker process
    as many Numba threads as Dask threads (e.g. `LocalCluster(..., env={"NUMBA_NUM_THREADS":
    "1"})` with `threads_per_worker=1`), or the processes oversubscribe the cores.

    Returns a `DataParallelValueAndGrad`; `.compiled` is the `jit_grad` function and
    `.worker_cache_info()` its cache counters on each worker.
    """
    return DataParallelValueAndGrad(fun, argnums=argnums, reduce=reduce, client=client,
                                    data_argnums=data_argnums, split_every=split_every, **jit_options)
