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

The server starts on first use and serves one compile at a time. It reads its requests
from a pipe and exits when the pipe closes, or within half a second of its parent's
death, even mid-compile: no orphan is left compiling. A forked child starts its own
server when it needs one.
Numba writes each cache file to a temporary name and renames it, so a server killed
mid-compile leaves no half-written file. Whenever the server cannot help (no disk
cache, a Python entry, a crash, an error), `compile_remote` returns False and the
caller compiles in its own process, which also reports any compile error properly.

JITGRAPH_COMPILE_SERVER=0 turns the server off.
"""
import atexit
import os
import pickle
import struct
import subprocess
import sys
import threading
import time

import numpy as np

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


class _Server:
    """A child process compiling on request (see the module doc)."""

    def __init__(self):
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jitgraph.codegen.compile_server"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)

    def alive(self):
        return self.pid == os.getpid() and self.proc.poll() is None

    def request(self, job):
        """The server's answer to `job`, or None when it died."""
        with self.lock:
            try:
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


_server = None
_failures = 0
_server_lock = threading.Lock()


def start():
    """Start the server now (its imports take about a second), if it is enabled and not running."""
    global _server
    if not enabled() or _failures >= 2:
        return None
    with _server_lock:
        if _server is None or not _server.alive():
            if _server is not None and _server.pid == os.getpid():
                _server.close()
            _server = _Server()
        return _server


def _stop():
    if _server is not None and _server.pid == os.getpid():
        _server.close()


atexit.register(_stop)


def compile_remote(path, function, argtypes):
    """Have the server compile `function` of the generated module at `path` for `argtypes`
    (Numba types) into the disk cache. True when it did; False when the caller must compile."""
    return _ask(("compile", path, function, tuple(argtypes)))


class Empty:
    """An argument the server makes itself (np.empty of this shape and dtype): a workspace
    arena or an output buffer, whose contents a call overwrites."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)


def _is_empty(a):
    # by name: the server runs this file as __main__, and unpickles Empty from the package module
    return type(a).__name__ == "Empty" and type(a).__module__.endswith("compile_server")


def run_remote(path, function, args):
    """Have the server call `function` of the module at `path` (a Python entry calling @njit
    functions) on `args`, which compiles those functions into the disk cache. True when it did."""
    return _ask(("run", path, function, tuple(args)))


def _ask(job):
    global _failures
    server = start()
    if server is None:
        return False
    answer = server.request((cache_dir(),) + job)     # the cache directory the caller loads from
    if answer is None:
        _failures += 1        # it died: another one is started next time, twice at most
        return False
    return answer[0] == "ok"


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


def _serve():
    """The server's loop: (cache directory, kind, module path, function, argument types or
    arguments) in, ("ok" | "error", text) out."""
    # nothing but replies on the pipe: replies go to a copy of the pipe's descriptor, and
    # whatever writes to standard output (Python or C) goes to standard error
    sys.stdout.flush()
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    requests = sys.stdin.buffer
    _die_with_parent()
    while True:
        job = _receive(requests)
        if job is None:
            return
        directory, kind, path, function, payload = job
        os.environ["JITGRAPH_CACHE_DIR"] = directory
        try:
            with open(path, encoding="utf-8") as f:
                source = f.read()
            fn, _, _ = load_kernel(source, function)
            if kind == "compile":
                fn.compile(payload)
            else:
                fn(*[np.empty(a.shape, a.dtype) if _is_empty(a) else a for a in payload])
            answer = ("ok", None)
        except BaseException as e:      # the parent compiles again and reports it
            answer = ("error", f"{type(e).__name__}: {e}")
        _send(replies, answer)


if __name__ == "__main__":
    _serve()
