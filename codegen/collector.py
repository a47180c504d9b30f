"""Python's cyclic garbage collector around jitgraph's allocation-heavy phases.

Tracing, differentiating, generating and loading a program allocate many objects that stay
alive (graph nodes, Numba's IR, types and dispatchers). Each burst of allocations makes the
collector run, and its full passes walk every object of a process that holds NumPy, SciPy
and Numba. In a new process's first call of the unrolled LSTM benchmark (a 3,900-node graph,
its program loaded from the disk cache) 47 collections took 0.13-0.16 s of 0.43-0.51 s.

`paused()` turns the collector off for such a phase: reentrant and for any thread (it is on
again when the last phase ends, if it was on when the first began). A phase is bounded (a
trace, a load, a code generation), so what it leaves for the collector is collected after;
a compile in this process inside one runs `resumed()`, with the collector on.
The compile server, whose whole life is Numba's compiles, keeps it on but collects less
often (`compile_thresholds`): compiling a transformer block's 19 functions took 5.9-6.5 s
that way against 6.9-8.0 s (alternating processes, three rounds).
"""
import contextlib
import gc
import threading

# the first generation's threshold in the compile server (Python's default is 700)
COMPILE_THRESHOLD = 50_000

_lock = threading.Lock()
_depth = 0
_restore = False


@contextlib.contextmanager
def paused():
    """Run the block with the cyclic garbage collector off (see the module doc)."""
    global _depth, _restore
    with _lock:
        if _depth == 0:
            _restore = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _restore:
                gc.enable()


@contextlib.contextmanager
def resumed():
    """Run the block with the collector on again if a pause turned it off, then off again: a
    compile in this process inside a paused phase (a `wait=True` call without the compile
    server), whose garbage grows with the program (about 2.8 MB a function, uncollected,
    for the transformer block's)."""
    with _lock:
        turn_on = _depth > 0 and _restore and not gc.isenabled()
        if turn_on:
            gc.enable()
    try:
        yield
    finally:
        with _lock:
            if turn_on and _depth > 0:
                gc.disable()


def compile_thresholds():
    """The compile server's collector thresholds: the first generation's COMPILE_THRESHOLD."""
    _, second, third = gc.get_threshold()
    gc.set_threshold(COMPILE_THRESHOLD, second, third)
