"""Tiered execution: a new signature's first calls run while its kernel compiles.

A trace takes milliseconds; generating and compiling its native program takes
seconds. With tiering (the default for the Numba CPU target), a trace-cache miss
returns a `TieredEntry` at once: its calls run the traced graph with the NumPy
reference interpreter (the semantics every backend is checked against), while one
background thread per process generates and compiles the program, one signature at
a time. The first call after the compile finishes runs compiled, and the function's
trace cache holds the compiled entry from then on (no tier check on the hot path).

The two tiers compute the same values up to rounding (the compiled loops fuse and may
reassociate sums): a run that switches tiers is not bit-identical across the switch.
`jit(..., wait=True)` (or JITGRAPH_WAIT=1) compiles before the first call returns.

A compile that fails is reported once, as a `CompileWarning` on the next call, and the
function keeps running on the interpreter. A process forked while a compile is
pending compiles again in the child on its next call. The compile thread is a daemon:
at interpreter exit a pending compile is abandoned (the disk cache writes whole files
only, so nothing half-written is left).
"""
import contextlib
import os
import queue
import sys
import threading
import warnings

from .api import graph_inputs, unflatten_outputs
from .entry import Stale
from .interpreter import evaluate
from .lowering import COMPILE_THREAD
from .signature import guards_hold


SWITCH_INTERVAL = 2e-4      # seconds; see _Worker._run


class CompileWarning(RuntimeWarning):
    """A background compile failed: the function keeps running on the interpreter."""


class _Worker:
    """The process's compile thread: builds queued entries one at a time, in order."""

    def __init__(self):
        self.jobs = queue.Queue()
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self._run, name=COMPILE_THREAD, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            job = self.jobs.get()
            # While compiling, the GIL changes hands every 0.2 ms instead of every 5 ms: each
            # NumPy call of the interpreter's thread gives the GIL up and waits for it back, a
            # full interval each time at the default (an MLP's interpreted step took 3.6x its
            # eager time, and slowed the compile 3x).
            interval = sys.getswitchinterval()
            sys.setswitchinterval(min(interval, SWITCH_INTERVAL))
            try:
                job()
            finally:
                sys.setswitchinterval(interval)


_worker = None
_worker_lock = threading.Lock()


def _submit(job):
    global _worker
    with _worker_lock:
        if _worker is None or _worker.pid != os.getpid():     # first use, or a forked child
            _worker = _Worker()
        _worker.jobs.put(job)


class _BackgroundBuild:
    """A build the compile thread runs; `_built(entry)` or `_failed(error)` is called there. A
    forked child runs it again (the compile thread stayed in the parent)."""

    def __init__(self, build):
        self._build = build
        self._done = threading.Event()
        self._pid = None         # the process that queued the build

    def _schedule(self):
        """Queue the build, unless this process did or it is done."""
        if self._pid != os.getpid() and not self._done.is_set():
            self._pid = os.getpid()
            _submit(self._run)

    def _run(self):
        try:
            entry = self._build()
        except BaseException as e:        # reported by _failed, never raised in the compile thread
            self._failed(e)
        else:
            self._built(entry)
        finally:
            self._done.set()

    def ready(self):
        """Has the build finished (successfully or not)?"""
        return self._done.is_set()

    def wait(self, timeout=None):
        """Block until the build finishes; True if it did within `timeout`."""
        self._schedule()
        return self._done.wait(timeout)


class TieredEntry(_BackgroundBuild):
    """A signature whose native program is compiling: calls run the interpreter until then.

    `build()` returns the compiled `Entry`; `on_ready(entry)` is called (in the compile
    thread) when it does, so the owner can put it in its cache. The compile is queued after
    the first interpreted call."""

    def __init__(self, graph, guards, desc, build, on_ready, stats):
        super().__init__(build)
        self.graph = graph
        self.guards = guards
        self.desc = desc
        self._on_ready, self._stats = on_ready, stats
        self.entry = None
        self.error = None
        self._warned = False

    def _built(self, entry):
        self.entry = entry
        self._on_ready(entry)

    def _failed(self, error):
        self.error = error         # reported on the next call and by wait()

    # -- the call path -----------------------------------------------------------------------------
    def call(self, leaves):
        if self._done.is_set():
            if self.entry is not None:
                self._stats["compiled_calls"] += 1
                return self.entry.call(leaves)
            if not self._warned:
                self._warned = True
                warnings.warn(f"jitgraph: compiling {self.graph.meta.get('name', 'the function')} "
                              f"failed ({type(self.error).__name__}: {self.error}); it keeps running on "
                              f"the NumPy interpreter", CompileWarning, stacklevel=3)
        if not guards_hold(self.guards):
            raise Stale
        self._stats["interpreted_calls"] += 1
        if self._done.is_set():        # a failed compile: nothing competes for the cores
            return _interpret(self.graph, leaves)
        try:
            with _blas_threads(max(1, (os.cpu_count() or 1) - 1)):     # a core for the compile
                return _interpret(self.graph, leaves)
        finally:
            # the compile starts after the first interpreted call: generating the program is
            # Python too, and would take turns on the GIL with that call
            self._schedule()

    # -- waiting ---------------------------------------------------------------------------------------
    def wait(self, timeout=None):
        """Block until the compile finishes; True if it did within `timeout`. Re-raises a
        compile error."""
        finished = super().wait(timeout)
        if finished and self.error is not None:
            raise self.error
        return finished

    @property
    def lowered(self):
        self.wait()
        return self.entry.lowered

    @property
    def pool(self):
        return self.entry.pool if self.entry is not None else []

    def release_workspace(self):
        if self.entry is not None:
            self.entry.release_workspace()

    @property
    def obufs(self):
        return self.entry.obufs if self.entry is not None else []


class Upgrade(_BackgroundBuild):
    """The threaded build of a program that runs serially meanwhile (jit's serial-first builds):
    compiled in the compile thread; `install(entry)` is called there when it is ready. A
    failed build leaves the serial one serving, with a `CompileWarning`."""

    def __init__(self, name, build, install):
        super().__init__(build)
        self.name, self._install = name, install
        self._schedule()

    def _built(self, entry):
        self._install(entry)

    def _failed(self, error):
        warnings.warn(f"jitgraph: the multi-threaded build of {self.name} failed ({type(error).__name__}: "
                      f"{error}); it keeps running its single-threaded build", CompileWarning)


_controller = None


def _blas_threads(n):
    """A context limiting NumPy's and SciPy's BLAS to `n` threads (threadpoolctl), or doing
    nothing without threadpoolctl. While the compile server keeps a core busy, a BLAS call
    on as many threads as cores waits on the busy one: on 2 cores, a 20000x100 matrix-vector
    product took 8.0 ms with 2 threads and 0.54 ms with 1; an interpreted transformer block
    step, 3.2x its eager time with 2 threads and 2.0x with 1."""
    global _controller
    if _controller is None:
        try:
            from threadpoolctl import ThreadpoolController
            _controller = ThreadpoolController()
        except Exception:        # not installed, or a BLAS it cannot inspect
            _controller = False
    if not _controller:
        return contextlib.nullcontext()
    return _controller.limit(limits=n, user_api="blas")


def _interpret(graph, leaves):
    """The traced function's outputs for the argument leaves, by the reference interpreter."""
    return unflatten_outputs(graph, evaluate(graph, *graph_inputs(graph, leaves)), leaves)
