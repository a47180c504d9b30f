"""Write generated source under its content hash, import it as a real module, return the kernel.

Numba's disk cache only works for functions defined in real files that are
imported as modules registered in `sys.modules` under their name, so each
kernel module lives at `<cache dir>/kernels/jg_<hash>.py`. A file is written
once (atomically) and never rewritten: the same source always has the same
name, and a new process finds both the module and Numba's compiled code
(`<cache dir>/kernels/__pycache__`, checked files: `numba_cache.py`).

Compiled functions are shared between kernels. Each compiled function of a kernel module
but its entry (a chunk body, an outlined loop, a Python entry's group function) is also
written as a module of its own, `jg_l_<hash>.py`, holding only that function (renamed
`loop`), the imports it reads and the shared modules of the functions it calls, and the
kernel module calls that module's function in its place (`shared_loops`). The same text in
another program, or in another version of this one (a loss with one more term, a model
with one more layer), is then the same module, compiled once: loaded from the disk cache,
or already compiled in this process. The kernel module keeps every function's text, so it
still reads whole.

When the cache cannot be written (a full disk, a file size limit), the module
is compiled from memory, uncached, with one `CacheWriteWarning`.
"""
import ast
import atexit
import functools
import hashlib
import importlib.util
import linecache
import marshal
import os
import platform
import re
import shutil
import stat
import sys
import tempfile
import threading
import types
import warnings

import llvmlite
import llvmlite.binding as llvm
import numba
import numpy as np

from jitgraph._version import __version__

from . import numba_cache
from .numba_cache import CacheDirError, CacheWriteWarning, CorruptCacheWarning  # noqa: F401

_TEMP_DIR = None
_LOAD_LOCK = threading.RLock()
_CHECKED_DIRS = set()


def cache_enabled():
    return os.environ.get("JITGRAPH_CACHE", "1") not in ("0", "false", "False", "no")


def cache_dir():
    """Where kernels live: $JITGRAPH_CACHE_DIR, else ~/.cache/jitgraph (a temp dir if caching is off)."""
    global _TEMP_DIR
    if not cache_enabled():
        if _TEMP_DIR is None:
            _TEMP_DIR = tempfile.mkdtemp(prefix="jitgraph-nocache-")
            atexit.register(shutil.rmtree, _TEMP_DIR, ignore_errors=True)
        return _TEMP_DIR
    d = os.environ.get("JITGRAPH_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "jitgraph")
    return d


def private_dir(path):
    """Create `path` (mode 0700) or check an existing one: it must belong to this user and not be
    writable by others, since the modules in it are imported and executed."""
    if path in _CHECKED_DIRS:
        return path
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(
            f"jitgraph's cache directory {path!r} exists and is not a directory; remove it, point "
            "JITGRAPH_CACHE_DIR at a directory, or set JITGRAPH_CACHE=0")
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    owner_ok = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    if not owner_ok or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheDirError(
            f"jitgraph refuses to use the cache directory {path!r}: it is "
            + ("owned by another user" if not owner_ok else
               f"writable by other users (mode {stat.S_IMODE(st.st_mode):o})")
            + ", and jitgraph imports and runs the code stored there. Make it private "
            "(chmod 700), point JITGRAPH_CACHE_DIR at a private directory, or set JITGRAPH_CACHE=0.")
    _CHECKED_DIRS.add(path)
    return path


@functools.cache
def host_cpu():
    """This machine's CPU name as LLVM targets it (asked of LLVM once)."""
    return llvm.get_host_cpu_name()




def source_hash(source):
    h = hashlib.sha256()
    # HELPERS_STAMP: Numba links a called helper into its caller, so a changed helper module is
    # never run from an old kernel, even where the version number did not change (an editable install)
    for part in (source, numba.__version__, llvmlite.__version__, np.__version__, __version__,
                 numba_cache.HELPERS_STAMP, platform.machine(), host_cpu(), sys.version.split()[0]):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def load_kernel(source, entry="kernel"):
    """Import `source` as module jg_<hash> from the cache dir; returns (function, module name, path)."""
    return _load(source, "jg_" + source_hash(source), entry)


def load_cached_kernel(modname, entry="kernel", prefix="jg_"):
    """(function, module name, path) of kernel module `modname` when its file is in the cache
    directory and intact (its content hashes to its name, after `prefix`), else None."""
    with _LOAD_LOCK:
        imported = modname in sys.modules
    source = None
    if not imported:
        path = os.path.join(cache_dir(), "kernels", modname + ".py")
        try:
            with open(path, encoding="utf-8", newline="") as f:
                source = f.read()
        except (OSError, UnicodeDecodeError):
            return None
        if prefix + source_hash(source) != modname:
            return None
    return _load(source, modname, entry, on_disk=True)


def _load(source, modname, entry, on_disk=False):
    with _LOAD_LOCK:
        mod = sys.modules.get(modname)
        if mod is None:
            mod = _import(source, modname, on_disk)
    return getattr(mod, entry), modname, mod.__file__


def _write(kdir, path, data):
    """Write `data` (text, or bytes) to `path` in directory `kdir`, atomically."""
    # temp file + rename: readers see the old file or the whole new one, never a partial one
    fd, tmp = tempfile.mkstemp(dir=kdir, suffix=".tmp")
    try:
        with (os.fdopen(fd, "wb") if isinstance(data, bytes)
              else os.fdopen(fd, "w", encoding="utf-8", newline="")) as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def helpers_cache_dir():
    """Where Numba caches jitgraph's own helpers (runtime.py, mathlib.py): beside the kernels."""
    return os.path.join(cache_dir(), "numba")


def enable_cache(functions, path):
    """Cache these Numba functions in directory `path` (checked files; see numba_cache.py)."""
    numba_cache.enable(functions, path, check=private_dir)


# the decorators of the compiled functions that kernels share (see the module docstring)
SHARED_DECORATORS = ("_rt.chunk_njit(", "_rt.loop_njit(", "_rt.group_njit(", "_rt.native_njit(", "njit(")
SHARED_NAME = "loop"        # a shared function's name in its own module
SHARED_PREFIX = "jg_l_"


def shared_loops(source, entry="kernel"):
    """[(name, module name, module source)], callees first: the compiled functions of kernel
    `source` (all but its entry) that kernels share, each with the text of its own module:
    the kernel's imports that the function reads (and the runtime's, for its decorator), its
    `_OPTS`, the shared modules of the functions it calls (imported as `loop_<k>`), and the
    function, named SHARED_NAME. A function reading another of the module's names (a table, a
    plain Python function) is not shared, nor is one calling a function that is not."""
    # the entry comes last (emit_cpu.Emitter.render) and is the longest part by far (an unrolled
    # LSTM's, 6,000 lines): only what precedes it is read
    cut = source.rfind(f"\ndef {entry}(")
    if cut < 0:
        return []
    source = source[:cut + 1]
    if source.rstrip("\n").rsplit("\n", 1)[-1].startswith("@"):     # the entry's decorator
        source = source.rstrip("\n").rsplit("\n", 1)[0] + "\n"
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    lines = source.splitlines()

    def text(node):
        return "\n".join(lines[node.lineno - 1:node.end_lineno])
    imports, opts, defined, funcs = [], None, set(), {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = {(a.asname or a.name).split(".")[0] for a in node.names}
            imports.append((names, text(node)))
        elif isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["_OPTS"]:
            opts = text(node)
        elif isinstance(node, ast.FunctionDef):
            defined.add(node.name)
            funcs[node.name] = node
        elif isinstance(node, ast.Assign):
            defined |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    if opts is None:
        return []
    imported = set().union(*(names for names, _ in imports)) if imports else set()
    reads = {}
    for name, node in funcs.items():
        read = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        local = {a.arg for a in node.args.args} | {n.id for n in ast.walk(node)
                                                   if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        reads[name] = read - local
    out, done = [], {}        # done: function name -> its module's name, or None (not shared)

    def share(name):
        if name in done:
            return done[name]
        done[name] = None
        node = funcs[name]
        deco = lines[node.decorator_list[0].lineno - 1].lstrip("@") if len(node.decorator_list) == 1 else ""
        if not deco.startswith(SHARED_DECORATORS) or node.args.vararg or node.args.kwarg:
            return None
        calls = sorted(reads[name] & set(funcs) - {name})     # itself: a group launching its chunks
        if reads[name] & (defined - {"_OPTS"}) - set(funcs) or any(share(c) is None for c in calls):
            return None
        text = lines[node.decorator_list[0].lineno - 1:node.end_lineno]
        k, head = node.lineno - node.decorator_list[0].lineno, f"def {name}("
        if not text[k].startswith(head):
            return None
        text[k] = f"def {SHARED_NAME}(" + text[k][len(head):]
        renamed = {c: f"{SHARED_NAME}_{k}" for k, c in enumerate(calls)}
        renamed[name] = SHARED_NAME
        if renamed:
            pattern = re.compile(r"\b(" + "|".join(map(re.escape, renamed)) + r")\b")
            text = [pattern.sub(lambda m: renamed[m.group(1)], ln) for ln in text]
        used = reads[name] & imported | {"_rt"}
        mod = ["# A function generated by jitgraph, shared by every kernel holding this text",
               "# (codegen/build.py). Do not edit: this file is named after the hash of its content."]
        mod += [seg for names, seg in imports if names & used]
        mod += [f"from {done[c]} import {SHARED_NAME} as {renamed[c]}" for c in calls]
        mod += ["", opts, "", ""] + text
        mod_source = "\n".join(mod) + "\n"
        done[name] = SHARED_PREFIX + source_hash(mod_source)
        out.append((name, done[name], mod_source))
        return done[name]
    for name in funcs:
        share(name)
    return out


def module_dispatchers(mod):
    """The Numba dispatchers of a generated module: those it defines (its entry, when compiled)
    and the shared ones it holds in their place, not the helpers it imports."""
    def generated(v):
        owner = getattr(getattr(v, "py_func", None), "__module__", None) or ""
        return owner == mod.__name__ or owner.startswith(SHARED_PREFIX)
    return [v for v in vars(mod).values() if hasattr(v, "overloads") and hasattr(v, "stats") and generated(v)]


_REPLACED = threading.local()     # .names: (module, names) of the functions _import replaces


def replaced_on_import(fn):
    """Is `fn` a kernel module's own copy of a shared function, which the module's import
    replaces by the shared module's as soon as the module has run (its decorator need not
    compile anything for it)?"""
    held = getattr(_REPLACED, "names", None)
    return held is not None and fn.__module__ == held[0] and fn.__name__ in held[1]


def _import(source, modname, on_disk=False):
    """Import kernel module `modname` from its file in the cache dir, writing `source` there
    first unless the file holds it (on_disk=True: it was just read and checked). Its shared
    loop functions come from their own modules (`shared_loops`)."""
    kdir = private_dir(os.path.join(private_dir(cache_dir()), "kernels"))
    path = os.path.join(kdir, modname + ".py")
    if not on_disk:
        try:
            with open(path, "rb") as f:
                held = f.read()
        except FileNotFoundError:
            held = None
        try:
            if held is None:
                _write(kdir, path, source)
            elif held != source.encode():
                # the name is the hash of the source: a mismatch is a truncated or corrupted
                # file. Never run it; its new content also changes Numba's source stamp, so the
                # compiled code cached for the old file is not loaded either.
                warnings.warn(f"jitgraph: cached kernel {path} is corrupted (its content does not "
                              "match its hash); rewriting and recompiling it", CorruptCacheWarning,
                              stacklevel=6)
                _write(kdir, path, source)
        except OSError as e:
            numba_cache.warn_write_failed(path, e)
            return _import_from_memory(source, modname)
    code = _code(kdir, path, source, modname)
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod     # before exec: Numba's cache locates functions by module
    try:
        shared = [] if modname.startswith(SHARED_PREFIX) else _shared_modules(kdir, modname, source)
        _REPLACED.names = (modname, {name for name, _ in shared})
        try:
            exec(code, mod.__dict__)
        finally:
            _REPLACED.names = None
        for name, loop_mod in shared:
            setattr(mod, name, getattr(loop_mod, SHARED_NAME))
    except BaseException:
        del sys.modules[modname]
        raise
    if cache_enabled():
        own = [v for v in vars(mod).values() if getattr(getattr(v, "py_func", None), "__module__", None) == modname]
        enable_cache(own, os.path.join(kdir, "__pycache__"))
    return mod


SHARED_MAGIC = b"JGSL1\n"   # then the SHA-256 of the marshalled [(name, module name)], then it


def _shared_modules(kdir, modname, source):
    """[(name, imported module)] of kernel `modname`'s shared functions (`shared_loops`). Which
    they are is kept in the cache as a checked file, so that a new process loading the kernel
    reads their modules without parsing the kernel's source again (an unrolled LSTM's: 0.17 s)."""
    lpath = os.path.join(kdir, "__pycache__", f"{modname}.shared")
    payload = numba_cache.read_checked(lpath, SHARED_MAGIC, "list of shared loop modules", "finding them again")
    if payload is not None:
        try:
            listed = marshal.loads(payload)
            out = []
            for name, loop_name in listed:
                loop_mod = sys.modules.get(loop_name)
                if loop_mod is None:
                    loaded = load_cached_kernel(loop_name, SHARED_NAME, prefix=SHARED_PREFIX)
                    if loaded is None:
                        raise LookupError(loop_name)
                    loop_mod = sys.modules[loop_name]
                out.append((name, loop_mod))
            return out
        except (EOFError, ValueError, TypeError, LookupError):
            pass
    out = []
    for name, loop_name, loop_source in shared_loops(source):
        out.append((name, sys.modules.get(loop_name) or _import(loop_source, loop_name)))
    try:
        _write(private_dir(os.path.join(kdir, "__pycache__")), lpath, numba_cache.checked(
            SHARED_MAGIC, marshal.dumps([(name, m.__name__) for name, m in out])))
    except OSError as e:
        numba_cache.warn_write_failed(lpath, e)
    return out


CODE_MAGIC = b"JGPC1\n"     # then the SHA-256 of the marshalled code object, then the code


def _code(kdir, path, source, modname):
    """The kernel module's code object, compiled from `source` once and then kept in the cache
    as a checked file. Python's own .pyc is not relied on: PYTHONDONTWRITEBYTECODE turns it
    off, and it carries no checksum. (Compiling a 1,300-line kernel module takes about 70 ms,
    a fifth of a warm process's first call.)"""
    cdir = private_dir(os.path.join(kdir, "__pycache__"))
    # the bytecode format is the interpreter's: its magic number is part of the name
    cpath = os.path.join(cdir, f"{modname}.{importlib.util.MAGIC_NUMBER.hex()}.code")
    payload = numba_cache.read_checked(cpath, CODE_MAGIC, "compiled kernel module", "compiling it again")
    if payload is not None:
        try:
            code = marshal.loads(payload)
            if isinstance(code, types.CodeType) and code.co_filename == path:
                return code
        except (EOFError, ValueError, TypeError):
            pass
    code = compile(source, path, "exec", dont_inherit=True)
    try:
        _write(cdir, cpath, numba_cache.checked(CODE_MAGIC, marshal.dumps(code)))
    except OSError as e:
        numba_cache.warn_write_failed(cpath, e)
    return code


def _import_from_memory(source, modname):
    """The module, compiled from `source` without a file (and without Numba's disk cache)."""
    filename = f"<jitgraph kernel {modname}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    mod = types.ModuleType(modname)
    mod.__file__ = filename
    sys.modules[modname] = mod
    try:
        exec(compile(source, filename, "exec"), vars(mod))
    except BaseException:
        del sys.modules[modname]
        raise
    return mod
