"""A helper for the concurrency tests: run a function in several threads at once."""
import threading


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
