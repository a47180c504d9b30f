"""Write generated source under its content hash, import it as a real module, return the kernel.

Numba's `cache=True` only works for functions defined in real files that are
imported as modules registered in `sys.modules` under their name, so each
kernel module lives at `<cache dir>/kernels/jg_<hash>.py`. A file is written
once (atomically) and never rewritten: the same source always has the same
name, and a new process finds both the module and Numba's compiled code.
"""
import hashlib
import importlib.util
import os
import platform
import sys
import tempfile

import llvmlite
import numba
import numpy as np

_TEMP_DIR = None




def cache_enabled():
    return os.environ.get("JITGRAPH_CACHE", "1") not in ("0", "false", "False", "no")


def cache_dir():
    """Where kernels live: $JITGRAPH_CACHE_DIR, else ~/.cache/jitgraph (a temp dir if caching is off)."""
    global _TEMP_DIR
    if not cache_enabled():
        if _TEMP_DIR is None:
            _TEMP_DIR = tempfile.mkdtemp(prefix="jitgraph-nocache-")
        return _TEMP_DIR
    d = os.environ.get("JITGRAPH_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "jitgraph")
    return d


def source_hash(source):
    from jitgraph import __version__
    h = hashlib.sha256()
    for part in (source, numba.__version__, llvmlite.__version__, np.__version__, __version__,
                 platform.machine(), sys.version.split()[0]):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def load_kernel(source, entry="kernel"):
    """Import `source` as module jg_<hash> from the cache dir; returns (function, module name, path)."""
    modname = "jg_" + source_hash(source)
    mod = sys.modules.get(modname)
    if mod is None:
        kdir = os.path.join(cache_dir(), "kernels")
        os.makedirs(kdir, exist_ok=True)
        path = os.path.join(kdir, modname + ".py")
        if not os.path.exists(path):
            fd, tmp = tempfile.mkstemp(dir=kdir, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                f.write(source)
            os.replace(tmp, path)
        spec = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[modname] = mod     # before exec: Numba's cache locates functions by module
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[modname]
            raise
    return getattr(mod, entry), modname, mod.__file__
