"""Helpers for the concurrency tests: run a function in several threads at once, or on a
given number of Numba's threads."""
import threading

import numba


def run_in_threads(work, n):
    """Call work(k) for k in range(n), each in its own thread, all released together by a
    barrier; returns the results in order, and raises the first exception a thread raised."""
    barrier = threading.Barrier(n)
    results, errors = [None] * n, []

    def target(k):
        try:
            barrier.wait()
            results[k] = work(k)
        except BaseException as e:      # re-raised below, in the calling thread
            errors.append(e)

    threads = [threading.Thread(target=target, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def on_threads(n, fn, *args):
    """fn(*args) with Numba's thread count for the calling thread at n (None: as it is),
    restored after."""
    saved = numba.get_num_threads()
    try:
        if n:
            numba.set_num_threads(n)
        return fn(*args)
    finally:
        numba.set_num_threads(saved)


def launches_chunks(source):
    """Does generated `source` run loop chunks on Numba's threads: a compiled entry's chunk
    functions (`parallel_chunks`), or a Python entry's group launching itself (`parallel_self`)?"""
    return "_rt.parallel_chunks(" in source or "_rt.parallel_self(" in source
