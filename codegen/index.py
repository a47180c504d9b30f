"""The program index: a traced graph's fingerprint -> what building it produced.

A kernel module is cached under the hash of its source, so finding it means generating
that source first: fusion, the memory plan and emission, which for a long program (an
unrolled LSTM: 3,900 nodes) take longer than loading the compiled code. The index skips
them. After a build, `store` writes a small record under the fingerprint of the graph and
the build options: the kernel module's name and the values the program passes its
kernel (size values, where the constants come from, the workspace layout, the output
buffers). A later build of an identical graph, in any process, `load`s the record and
imports the module it names. The partition, the memory plan and the source are made
again only when something inspects them (`Program` makes them lazily).

The fingerprint covers everything code generation reads: each node's op, parameters,
shape, dtype and operands, constant values (bytes), the nested graphs of control flow,
the graph's name and gradient flag, and which nodes are adjoints. A graph holding a
parameter of a type not listed in `_param` (an object whose repr may not identify it)
has no fingerprint and is never indexed. The key adds the build options, a hash of
jitgraph's own source files (an edited code generator never reuses a record), the back
end's module-level settings as they are at the build (`_settings`), and the versions and
CPU that name kernel modules (`build.source_hash`).

Records are pickles in `<cache dir>/kernels/index/`, written atomically beside the modules
they name (deleting `kernels/` deletes both), behind a SHA-256 of their bytes like the
compiled-code files (a record failing it is deleted with a `CorruptCacheWarning`), and read
only from directories private to the user. A record that cannot be read, or whose module
is gone, is a miss: the program is generated as if there were no index.
"""
import hashlib
import importlib
import os
import pickle
import threading
import weakref

import numpy as np

import jitgraph.graph
from jitgraph.graph import Graph

from . import build
from .numba_cache import checked, read_checked

FORMAT = 1
MAGIC = b"JGIX1\n"        # then the SHA-256 of the pickled record, then the record
_STAMP = None
_LOCK = threading.Lock()
_FINGERPRINTS = weakref.WeakKeyDictionary()     # graph -> its fingerprint (graphs are not mutated)


class Unindexable(Exception):
    """The graph holds a parameter the fingerprint cannot identify."""


def _code_stamp():
    """A hash of jitgraph's and the back end's source files (computed once per process)."""
    global _STAMP
    if _STAMP is None:
        h = hashlib.sha256()
        here = os.path.dirname(os.path.abspath(__file__))
        front = os.path.dirname(os.path.abspath(jitgraph.graph.__file__))
        try:
            for d in sorted({here, front, os.path.join(front, "ops")}):
                for name in sorted(os.listdir(d)):
                    if name.endswith(".py"):
                        h.update(name.encode())
                        with open(os.path.join(d, name), "rb") as f:
                            h.update(f.read())
        except OSError:          # sources not readable as files (a zipped install): the version
            h = hashlib.sha256(f"jitgraph {build.__version__}".encode())
        _STAMP = h.hexdigest()[:16]
    return _STAMP


_SIMPLE = (bool, int, float, str, type(None))


# the modules whose settings shape the generated CPU program
GENERATORS = ("", ".emit_cpu", ".fusion", ".memory", ".lower", ".ops_cpu", ".ops_order", ".scatters",
              ".ops_linalg", ".launch", ".source", ".mathlib")


def _settings():
    """The code generator's module-level settings (public upper-case names of plain values,
    such as `emit_cpu.NJIT_ENTRY_MAX_STEPS`) as they are now: a program is generated with
    them, and a caller may change one at run time."""
    out = []
    for suffix in GENERATORS:
        mod = importlib.import_module(__package__ + suffix)
        for var, v in sorted(vars(mod).items()):
            if var.isupper() and not var.startswith("_") and (
                    isinstance(v, _SIMPLE) or isinstance(v, tuple) and all(isinstance(x, _SIMPLE) for x in v)):
                out.append(f"{suffix}.{var}={v!r}")
    return hashlib.sha256("\n".join(out).encode()).hexdigest()[:16]


def _param(h, v):
    """Hash one parameter value; raises Unindexable for a type not known to identify its value."""
    if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
        h.update(f"{type(v).__name__}:{v!r};".encode())
    elif isinstance(v, np.dtype):
        h.update(f"dtype:{v.str};".encode())
    elif isinstance(v, np.generic):
        h.update(f"np:{v.dtype.str}:{v.item()!r};".encode())
    elif isinstance(v, type) and issubclass(v, np.generic):
        h.update(f"sctype:{np.dtype(v).str};".encode())
    elif isinstance(v, slice):
        h.update(b"slice(")
        for x in (v.start, v.stop, v.step):
            _param(h, x)
        h.update(b")")
    elif v is Ellipsis:
        h.update(b"...;")
    elif isinstance(v, (tuple, list)):
        h.update(f"{type(v).__name__}{len(v)}(".encode())
        for x in v:
            _param(h, x)
        h.update(b")")
    elif isinstance(v, frozenset):
        parts = []
        for x in v:
            hx = hashlib.sha256()
            _param(hx, x)
            parts.append(hx.digest())
        h.update(b"frozenset(" + b"".join(sorted(parts)) + b")")
    elif isinstance(v, np.ndarray):
        _array(h, v)
    elif isinstance(v, Graph):
        _graph(h, v)
    else:
        raise Unindexable(type(v).__name__)


def _array(h, a):
    a = np.asarray(a)
    if a.dtype.hasobject:
        raise Unindexable("object array")
    h.update(f"array:{a.dtype.str}:{a.shape};".encode())
    h.update(np.ascontiguousarray(a).tobytes())


def _graph(h, graph):
    pos = {}
    h.update(f"graph(name={graph.meta.get('name')!r},grad={bool(graph.meta.get('grad'))};".encode())
    for k, n in enumerate(graph.nodes):
        pos[n.id] = k
        h.update(f"{k}={n.op}:{n.dtype.str}:{n.shape}:{[pos[x.id] for x in n.inputs]}:"
                 f"{'adj' if n.id in graph.adjoint_ids else ''};".encode())
        for name, v in n.params:
            h.update(name.encode() + b"=")
            _param(h, v)
        if n.op == "const":
            _array(h, n.value)
    h.update(f"in={[pos[n.id] for n in graph.inputs]};out={[pos[n.id] for n in graph.outputs]})".encode())


def fingerprint(graph):
    """The content hash of `graph` (see the module docstring), or None; kept per graph object."""
    with _LOCK:
        fp = _FINGERPRINTS.get(graph, False)
    if fp is not False:
        return fp
    h = hashlib.sha256()
    try:
        _graph(h, graph)
        fp = h.hexdigest()
    except Unindexable:
        fp = None
    with _LOCK:
        _FINGERPRINTS[graph] = fp
    return fp


def key(graph, **options):
    """The index key of building `graph` with these build options, or None when the graph
    cannot be fingerprinted (then it is never indexed)."""
    fp = fingerprint(graph)
    if fp is None:
        return None
    h = hashlib.sha256(fp.encode())
    h.update(repr(sorted(options.items())).encode())
    h.update(f"{FORMAT};{_code_stamp()};{_settings()};".encode())
    h.update(build.source_hash("").encode())     # the versions and CPU kernel modules depend on
    return h.hexdigest()[:32]


def _dir():
    return os.path.join(build.cache_dir(), "kernels", "index")


def load(k):
    """The record stored under key `k`, or None."""
    if k is None or not build.cache_enabled():
        return None
    d = _dir()
    if not os.path.isdir(d):
        return None
    # records are unpickled: only from directories private to this user (else CacheDirError)
    kernels = os.path.dirname(d)
    for path in (os.path.dirname(kernels), kernels, d):
        build.private_dir(path)
    try:
        # a damaged record is discarded: its sizes and offsets could send the kernel out of bounds
        payload = read_checked(os.path.join(d, k + ".pkl"), MAGIC, "program index record",
                               "generating the program again")
    except OSError:
        return None
    if payload is None:
        return None
    try:
        rec = pickle.loads(payload)
    except Exception:
        return None
    if not isinstance(rec, dict) or rec.get("format") != FORMAT:
        return None
    return rec


def store(k, rec):
    """Write record `rec` under key `k` (atomically; a failed write only loses the record)."""
    if k is None or not build.cache_enabled():
        return
    try:
        d = build.private_dir(_dir())
        payload = pickle.dumps(dict(rec, format=FORMAT), protocol=pickle.HIGHEST_PROTOCOL)
        build._write(d, os.path.join(d, k + ".pkl"), checked(MAGIC, payload))
    except OSError:
        pass
