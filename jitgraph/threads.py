"""Thread policy of compiled calls: every core or one, chosen per signature by timing its calls.

Inside kernels all parallel work runs on Numba's threads: the fused loops' chunks and, since
BLAS runs one thread per calling thread there (codegen/blas.py), the row blocks of large
products. On a quiet machine all threads are fastest (the MLP benchmark on 2 cores: 12.5 ms,
against 23 ms on one). When another process keeps a core busy, the chunks that must run there
wait for the scheduler and the call with them, so all threads gain little and can lose: with
a busy loop on one of 2 cores, the transformer benchmark took 26.0 ms on all threads and
22.4 ms with this policy, the conv net 10.0 and 11.1 ms. So each compiled signature times its
calls in both modes from its first calls on, keeps the faster mode, and probes the other now
and then (at once when its own calls speed up or slow down), so a load that comes or goes is
followed within a few calls.

The mode changes thread counts. On one thread a kernel's parallel chunks run on the calling
thread, without waking Numba's workers (codegen/launch.py; waking the workqueue layer's
sleeping workers took 100-500 us on this virtual machine). Parallel loops and products split their work
into pieces that depend on the sizes alone, run in any order, so results are the same bits
in both modes.

JITGRAPH_THREADS chooses the policy: "adaptive" (the default), "all" (never lower the thread
count) or "one" (every compiled call on one thread).
"""
import os
import time

import numba

ALL, ONE = 0, 1
MIN_CALL = 200e-6     # calls faster than this keep all threads: timing and switching cost ~2 us
WARM = 3              # first calls not timed: page faults, thread pools starting, lazy loads
EXPLORE = 3           # timed calls in the first mode, before the first probe of the other
SETTLE = 2            # first calls after a change of mode, not counted (threads waking, moving)
RING = 5              # recent call times kept per mode
PROBE = 6             # calls of a probe of the other mode
INTERVAL_FIRST, INTERVAL_MAX = 16, 512     # calls between probes (doubling while they lose)
CHANGE = 1.4          # a median this much above or below the last choice's triggers a probe
MARGIN = 0.9          # the other mode must be this much faster to take over
REJECT = 3.0          # a probe whose first SETTLE calls are this much slower ends there


def policy_name():
    name = os.environ.get("JITGRAPH_THREADS", "adaptive").strip().lower() or "adaptive"
    if name not in ("adaptive", "all", "one"):
        raise ValueError(f"JITGRAPH_THREADS must be 'adaptive', 'all' or 'one', got {name!r}")
    return name


def _one_thread():
    """Run the calling thread's parallel loops on one thread (Numba keeps the count per
    thread); returns the count to restore."""
    saved = numba.get_num_threads()
    numba.set_num_threads(1)
    return saved


def running_threads(exclude=()):
    """How many threads of this process are running now (state R in /proc/self/task/*/stat),
    leaving out those whose native ids (as strings) are in `exclude`. OSError or IndexError
    where it cannot be read (no /proc, a thread gone meanwhile)."""
    count = 0
    for task in os.listdir("/proc/self/task"):
        if task not in exclude:
            with open(f"/proc/self/task/{task}/stat") as f:
                count += f.read().rsplit(")", 1)[1].split()[0] == "R"
    return count


def _no_idle_core():
    """Did other processes keep all cores but one busy when sampled? The running count of
    /proc/loadavg less this process's running threads (its BLAS threads spin a while after
    a product); False where it cannot be read. About 0.1 ms: only the first calls of a
    signature sample it. jitgraph's compile server counts as load: starting beside the
    first calls of a kernel loaded from the disk cache, its imports slowed the transformer
    benchmark's all-thread calls to 24-43 ms for a quarter of a second (one thread: 20 ms;
    all threads once it is idle: 14.5 ms)."""
    try:
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0]) - running_threads()
        return running >= max(1, len(os.sched_getaffinity(0)) - 1)
    except (OSError, ValueError, IndexError, AttributeError):
        return False


def _median(xs):
    s = sorted(xs)
    return s[len(s) // 2]


class ThreadPolicy:
    """The mode of one compiled signature's calls: `begin()` before the kernel call returns
    a token for the mode it set, `end(token, seconds)` after it restores the thread counts
    and learns from the call's time.

    The first 3 calls are not timed (page faults, thread pools starting: the first calls of
    the transformer benchmark took 498, 50 and 87 ms, then 15); each runs on one thread if
    /proc/loadavg showed no idle core at most of them so far, and the mode of the last one
    stays for the next 3, timed. After one thread, all threads are probed at once: one sample
    of /proc/loadavg can catch a passing task on a quiet machine, and a hint trusted until a
    probe 16 calls later had run the transformer benchmark's first 25 calls on one thread (21
    ms, against 12.5 ms on all threads). After all threads, the first probe of one thread
    comes 16 calls later, as later probes do: at once, its 6 calls (2 to settle) ran on one
    thread from the 7th call on, so a benchmark timing a signature's calls 4 to 10 (after a
    first call and 2 warm-up calls) took their median in the slower mode (w4: 440 ms against
    220 ms on all threads).

    Every `interval` calls the other mode runs a probe of 6 calls (2 if both are 3x slower)
    and takes over if its fastest settled call is 10% faster than the current mode's fastest
    recent one (fastest, not median: host noise made probe medians miss a 1.6x gap); the
    interval doubles (to 512) while probes lose and restarts at 16 after a switch. From the
    7th call after a probe, a median of the last 5 calls 40% above or below the mode's pace
    (that median at the 7th call after the probe before, or after a switch) starts a probe
    at once. Signatures whose calls take under 0.2 ms stop measuring (`active` False) and
    keep the default count."""

    __slots__ = ("fixed", "active", "mode", "calls", "times", "base",
                 "interval", "countdown", "probing", "switches", "busy", "on_inactive")

    def __init__(self, name=None, on_inactive=None):
        name = name or policy_name()
        self.fixed = name != "adaptive"
        self.mode = ONE if name == "one" else ALL
        self.active = True
        self.calls = 0
        self.times = ([], [])
        self.base = None
        self.interval = self.countdown = INTERVAL_FIRST
        self.probing = 0
        self.switches = 0
        self.busy = 0         # warm calls that found no idle core
        self.on_inactive = on_inactive

    def exploring(self):
        return self.base is None

    def begin(self):
        if self.fixed:
            mode = self.mode
        elif self.base is None:            # the first calls: the mode the load suggests
            if self.calls < WARM:
                self.busy += _no_idle_core()
                self.mode = ONE if 2 * self.busy > self.calls + 1 else ALL
            mode = self.mode
        elif self.probing:
            mode = 1 - self.mode
        else:
            mode = self.mode
        return mode, (_one_thread() if mode == ONE else None)

    def end(self, token, seconds):
        mode, saved = token
        if saved is not None:
            numba.set_num_threads(saved)
        self.calls += 1
        if self.fixed or self.calls <= WARM:
            return
        ring = self.times[mode]
        ring.append(seconds)
        if len(ring) > RING:
            del ring[0]
        if self.base is None:
            if self.calls == WARM + EXPLORE:
                if min(ring) < MIN_CALL:
                    self.deactivate()
                    return
                self._choose(mode)
                if mode == ONE:
                    self.probing = PROBE   # a load hint can be a passing task: all threads at once
            return
        if self.probing:
            self.probing -= 1
            done = PROBE - self.probing
            current = min(self.times[self.mode])
            if done == SETTLE and min(ring[-SETTLE:]) > REJECT * current:
                self.probing = 0            # far slower from the start: no need to settle
            if self.probing == 0:
                if min(ring[-max(1, done - SETTLE):]) < MARGIN * current:
                    self.switches += 1
                    self._choose(mode)
                else:
                    self.interval = min(2 * self.interval, INTERVAL_MAX)
                    self.countdown = self.interval
            return
        self.countdown -= 1
        since = self.interval - self.countdown
        if self.countdown <= 0:
            self.probing = PROBE
        elif since >= SETTLE + RING:
            now = _median(ring)
            if self.base and not self.base / CHANGE <= now <= self.base * CHANGE:
                self.probing = PROBE
            elif since == SETTLE + RING:
                self.base = now             # the current mode's settled pace

    def _choose(self, mode):
        self.mode = mode
        self.base = 0.0         # its pace is measured once settled
        self.interval = self.countdown = INTERVAL_FIRST

    def deactivate(self):
        """Stop measuring: every later call runs in the default mode."""
        self.active, self.fixed, self.mode = False, True, ALL
        if self.on_inactive is not None:
            self.on_inactive()

    def describe(self):
        if not self.active:
            return "default threads (calls too short to choose)"
        if self.exploring() and not self.fixed:
            return "measuring"
        return ("all threads", "one thread")[self.mode]


clock = time.perf_counter
