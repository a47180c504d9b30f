"""The compile server: Numba compiles a generated kernel in another process.

A kernel compile is seconds of Python (Numba's type inference and lowering) that holds
the GIL. Run in a thread of the user's process (tiered execution, jit's background
builds), it slows every call the user makes meanwhile, and is slowed by them. So a
kernel whose compiled code can go through the disk cache is compiled by a child
process instead: the parent sends the generated module's path, the entry function's
name and its argument types; the child imports the module (the same file, so the same
Numba source stamp), compiles the function for those types, which saves it in the disk
cache, and answers. The parent then loads the compiled code from the cache (a tenth of
a second for a large program). A Python entry (a long program calling one @njit function
per loop) is run instead, on the call's arguments (workspace and output buffers made
there), which compiles every function it calls.

A Python entry whose loop functions are many is compiled by several servers at once, one
per core (JITGRAPH_COMPILE_JOBS sets the count): each runs the entry with the loop
functions of the others replaced by a no-op (`split_entry` deals them out by their
lines), so each compiles its share: on 2 cores the unrolled LSTM benchmark's `wait=True`
compile took 5.8-5.9 s on two servers against 8.0-8.5 s on one. The extra servers start
when a split first needs them. A kernel's loop functions compile on a second server while
the first lowers the kernel (`compile_remote`'s `loops_beside`).

A server starts on first use and serves one compile at a time. Its first message says
that it has started (`ready()` asks without waiting: a caller waiting for a compile
does it itself meanwhile, jitgraph/lowering.py). It reads its requests
from a pipe and exits when the pipe closes, or within half a second of its parent's
death, even mid-compile: no orphan is left compiling. A forked child starts its own
server when it needs one.
Numba writes each cache file to a temporary name and renames it, so a server killed
mid-compile leaves no half-written file. Whenever the server cannot help (no disk
cache, a Python entry, a crash, an error), `compile_remote` returns False and the
caller compiles in its own process, which also reports any compile error properly.

JITGRAPH_COMPILE_SERVER=0 turns the server off.
"""
import ast
import atexit
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time

import numpy as np

from numba.core.registry import cpu_target

from . import collector, mathlib, numba_cache, runtime, symbols  # noqa: F401  (every kernel imports mathlib and runtime)
from .build import cache_dir, load_kernel

_LEN = struct.Struct("<Q")


def _send(stream, obj):
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LEN.pack(len(data)) + data)
    stream.flush()


def _receive(stream):
    head = stream.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    (n,) = _LEN.unpack(head)
    data = stream.read(n)
    if len(data) < n:
        return None
    return pickle.loads(data)


def enabled():
    return os.environ.get("JITGRAPH_COMPILE_SERVER", "1") not in ("0", "false", "False", "no")


# The server's command line. It registers the packages jitgraph and jitgraph.codegen at
# their paths without running their __init__: the whole front end, SciPy's special functions
# and the lowering tables, which no compile needs (the server started in 1.45 s, against
# 0.55 s for NumPy and Numba alone). A kernel's own imports load the modules it uses.
_BOOT = """import sys, types
for name, path in zip(sys.argv[1::2], sys.argv[2::2]):
    package = types.ModuleType(name)
    package.__path__ = [path]
    sys.modules[name] = package
    parent, _, attr = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], attr, package)
from jitgraph.codegen import compile_server
compile_server.main()
"""


def _package_paths():
    """(name, folder) pairs, flattened, of the packages _BOOT registers."""
    out = []
    for name in (__package__.rpartition(".")[0], __package__):
        out += [name, list(sys.modules[name].__path__)[0]]
    return out


class _Server:
    """A child process compiling on request (see the module doc)."""

    def __init__(self):
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.booted = False       # its first message, once its imports are done, was read
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT] + _package_paths(), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)

    def alive(self):
        return self.pid == os.getpid() and self.proc.poll() is None

    def _read_boot(self):
        if not self.booted:
            if _receive(self.proc.stdout) is None:
                raise EOFError("the compile server died while starting")
            self.booted = True

    def ready(self):
        """Has the server finished starting (imports and Numba's contexts)? Never waits."""
        if self.booted:
            return True
        if not self.lock.acquire(blocking=False):
            return False        # a request is under way: it reads the boot message
        try:
            if self.booted or not self.alive():
                return self.booted
            if select.select([self.proc.stdout], [], [], 0)[0]:
                self._read_boot()
            return self.booted
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):
            return False
        finally:
            self.lock.release()

    def request(self, job):
        """The server's answer to `job`, or None when it died."""
        with self.lock:
            try:
                self._read_boot()
                _send(self.proc.stdin, job)
                return _receive(self.proc.stdout)
            except (OSError, ValueError, EOFError, pickle.UnpicklingError):
                return None

    def close(self):
        """Close the pipe (the server exits after its current compile); kill it after 1 s."""
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:      # a dead server: the buffered request cannot be flushed
                pass
        try:
            self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_servers = []           # the pool: _servers[0] serves every request, the others split entries
_failures = 0
_server_lock = threading.Lock()


def jobs():
    """How many servers compile a Python entry's functions at once: JITGRAPH_COMPILE_JOBS,
    else the cores this process may run on (at most 4)."""
    value = os.environ.get("JITGRAPH_COMPILE_JOBS", "").strip()
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            raise ValueError(f"JITGRAPH_COMPILE_JOBS must be a positive integer, got {value!r}") from None
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


def _pool(n):
    """The first n servers of the pool, started where they are not running (empty when the
    server is off or has failed twice)."""
    if not enabled() or _failures >= 2:
        return []
    with _server_lock:
        for k in range(n):
            if k < len(_servers) and _servers[k].alive():
                continue
            if k < len(_servers) and _servers[k].pid == os.getpid():
                _servers[k].close()
            server = _Server()
            if k < len(_servers):
                _servers[k] = server
            else:
                _servers.append(server)
        return _servers[:n]


def running():
    """How many servers of the pool are running (for this process)."""
    with _server_lock:
        return sum(server.alive() for server in _servers)


def ready():
    """Is the first server of the pool running and done starting? Never waits."""
    with _server_lock:
        server = _servers[0] if _servers else None
    return server is not None and server.alive() and server.ready()


def start():
    """Start the first server now (its imports take about a second), if it is enabled and not
    running."""
    pool = _pool(1)
    return pool[0] if pool else None


def _stop():
    for server in _servers:
        if server.pid == os.getpid():
            server.close()


atexit.register(_stop)


def compile_remote(path, function, argtypes, loops_beside=False):
    """Have the server compile `function` of the generated module at `path` for `argtypes`
    (Numba types) into the disk cache. True when it did; False when the caller must compile.

    With `loops_beside` and a second server (`jobs()`), that one compiles the loop functions
    `function` calls meanwhile, last first (`symbols.loop_functions`): the first server types
    the kernel without compiling them and compiles each where it lowers its call, so it
    loads the ones the second has cached by then. Nobody waits for the second server."""
    job = ("compile", path, function, tuple(argtypes), None)
    if loops_beside and jobs() >= 2:
        pool = _pool(2)
        if len(pool) >= 2:
            _loops_meanwhile(path, function, argtypes, pool[1])
            return _ask(job, pool[0])
    return _ask(job)


def loops_remote(path, function, argtypes):
    """Have the first server compile the loop functions that `function` of the generated module
    at `path` calls for `argtypes`, last first, into the disk cache, while the caller compiles
    the function itself (and loads those the server has cached by then). Returns at once;
    nobody waits for the answer."""
    pool = _pool(1)
    if pool:
        _loops_meanwhile(path, function, argtypes, pool[0])


def _loops_meanwhile(path, function, argtypes, server):
    """`server` compiles the loop functions `function` calls, on a thread of its own."""
    threading.Thread(target=_ask, args=(("loops", path, function, tuple(argtypes), None), server),
                     daemon=True).start()


class Empty:
    """An argument the server makes itself (np.empty of this shape and dtype): a workspace
    arena or an output buffer, whose contents a call overwrites."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)


def _is_empty(a):
    # by name: a server run as `python -m` has this file as __main__, and unpickles Empty from the package module
    return type(a).__name__ == "Empty" and type(a).__module__.endswith("compile_server")


def run_remote(path, function, args, parts=None):
    """Have the server call `function` of the module at `path` (a Python entry calling @njit
    functions) on `args`, which compiles those functions into the disk cache. With `parts`
    (lists of function names, from `split_entry`), one server per part runs the entry
    calling only that part's functions, all at once. True when they all did."""
    if not parts or len(parts) < 2:
        return _ask(("run", path, function, tuple(args), None))
    servers = _pool(len(parts))
    if len(servers) < len(parts):
        return False
    answers = [None] * len(parts)

    def ask(k):
        skip = tuple(name for j, part in enumerate(parts) if j != k for name in part)
        answers[k] = _ask(("run", path, function, tuple(args), skip), servers[k])
    threads = [threading.Thread(target=ask, args=(k,), daemon=True) for k in range(1, len(parts))]
    for t in threads:
        t.start()
    ask(0)
    for t in threads:
        t.join()
    return all(answers)


def _ask(job, server=None):
    global _failures
    server = server or start()
    if server is None:
        return False
    answer = server.request((cache_dir(),) + job)     # the cache directory the caller loads from
    if answer is None:
        with _server_lock:
            _failures += 1        # it died: another one is started next time, twice at most
        return False
    return answer[0] == "ok"


# Lines a new server could compile while it imports (~1 s at ~28 ms a line): its head start
STARTUP_LINES = 40


def split_entry(source, entry, parts, started=1):
    """Deal the @njit functions that the Python entry `entry` of `source` calls into at most
    `parts` lists of names, balancing their lines: a function's own lines plus those of the
    functions it names (its chunk functions), counted once per part. Servers past the
    `started` ones get STARTUP_LINES of load first. None when there is nothing to split."""
    tree = ast.parse(source)
    defs = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    top = defs.get(entry)
    if top is None or parts < 2:
        return None
    # compiled functions only: the entry's plain Python helpers (its `_views`) always run
    funcs = {name: node for name, node in defs.items() if node.decorator_list or name == entry}

    def named(node):
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in funcs and n.id != node.name}

    def lines(node):
        return node.end_lineno - node.lineno + 1
    called = sorted(named(top) - {entry})
    if len(called) < 2 * parts:
        return None
    deps = {name: named(funcs[name]) for name in called}
    load = [0 if k < started else STARTUP_LINES for k in range(parts)]
    owned = [set() for _ in range(parts)]
    out = [[] for _ in range(parts)]
    for name in sorted(called, key=lambda n: -(lines(funcs[n]) + sum(lines(funcs[d]) for d in deps[n]))):
        def cost(k):
            return lines(funcs[name]) + sum(lines(funcs[d]) for d in deps[name] - owned[k])
        k = min(range(parts), key=lambda k: (load[k] + cost(k), k))
        load[k] += cost(k)
        owned[k] |= deps[name] | {name}
        out[k].append(name)
    return [p for p in out if p]


def _die_with_parent(period=0.5):
    """Exit when the parent dies (even by SIGKILL, mid-compile): a watchdog thread sees the
    server re-parented. (Linux's PR_SET_PDEATHSIG would fire when the parent's *thread*
    that started the server ends, which may be any thread.)"""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(period)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def _skip(*args):
    """Stands in for a loop function another server compiles (loop functions return nothing)."""


def _run_part(mod, fn, args, skip):
    """Run the entry `fn` of module `mod` on `args`, the module's functions named in `skip`
    (another server's share) doing nothing meanwhile."""
    saved = {name: getattr(mod, name) for name in skip or ()}
    try:
        vars(mod).update({name: _skip for name in saved})
        fn(*args)
    finally:
        vars(mod).update(saved)


def _serve():
    """The server's loop: (cache directory, kind, module path, function, argument types or
    arguments) in, ("ok" | "error", text) out; its first message, ("ready", None), says that
    it has started."""
    # nothing but replies on the pipe: replies go to a copy of the pipe's descriptor, and
    # whatever writes to standard output (Python or C) goes to standard error
    sys.stdout.flush()
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    requests = sys.stdin.buffer
    _die_with_parent()
    _send(replies, ("ready", None))      # the parent's _Server.ready()
    while True:
        job = _receive(requests)
        if job is None:
            return
        directory, kind, path, function, payload, skip = job
        os.environ["JITGRAPH_CACHE_DIR"] = directory
        try:
            with open(path, encoding="utf-8") as f:
                source = f.read()
            fn, modname, _ = load_kernel(source, function)
            if kind == "compile":
                fn.compile(payload)
            elif kind == "loops":
                for disp, argtypes in reversed(symbols.loop_functions(fn, payload)):
                    if numba_cache.in_cache(disp, argtypes) is False:
                        disp.compile(argtypes)
            else:
                args = [np.empty(a.shape, a.dtype) if _is_empty(a) else a for a in payload]
                _run_part(sys.modules[modname], fn, args, skip)
            answer = ("ok", None)
        except BaseException as e:      # the parent compiles again and reports it
            answer = ("error", f"{type(e).__name__}: {e}")
        _send(replies, answer)


def main():
    """The server process: Numba's contexts are refreshed (with the kernels' helper modules
    imported above) before the first request is read, while the parent is still generating
    code (a first compile's refresh alone took 0.4 s)."""
    collector.compile_thresholds()
    cpu_target.typing_context.refresh()
    cpu_target.target_context.refresh()
    _serve()


if __name__ == "__main__":
    main()
