"""Numba's disk cache for jitgraph's compiled functions, in a directory jitgraph controls and checks.

Numba caches a compiled function as an index file (`.nbi`) and data files
(`.nbc`) holding pickled machine code. A corrupted or truncated one would be
loaded as it is (a flipped byte in machine code crashes the process, a truncated
pickle raises on every run), and a full disk fails the compile that tried to
save. For jitgraph's functions (generated kernels, and the runtime and math
helpers) this module replaces Numba's cache object with one that:

* writes each file with a SHA-256 of its contents in front, and never loads a
  file that does not match it: the file is deleted, a `CorruptCacheWarning`
  says so, and the function is compiled again (and saved again);
* keeps the files of jitgraph's own helpers under jitgraph's private cache
  directory (`<cache dir>/numba`), not in the installed package;
* treats a failed write (a full disk, a file size limit, a read-only directory)
  as a cache miss: the function runs uncached, with one `CacheWriteWarning` per
  process.

It builds on Numba's `numba.core.caching` classes (stable across 0.60-0.68).
"""
import functools
import hashlib
import os
import pickle
import warnings

from numba.core.caching import (CompileResultCacheImpl, FunctionCache, IndexDataCacheFile, _CacheLocator,
                                _SourceFileBackedLocatorMixin)
from numba.core.registry import CPUDispatcher
from numba.core.runtime.nrt import rtsys

from . import symbols

MAGIC = b"JGNB2\n"      # 2: compile results carry the symbols they call


class CacheDirError(PermissionError):
    """The kernel cache directory is not private to this user."""


class CorruptCacheWarning(UserWarning):
    """A cached file did not match its checksum (or content hash): it was discarded and its
    function compiled again."""


class CacheWriteWarning(UserWarning):
    """The disk cache could not be written (a full disk, a size limit, a read-only directory):
    compiled functions run without being cached."""


_WARNED_WRITE = []


def warn_write_failed(path, exc):
    if not _WARNED_WRITE:
        _WARNED_WRITE.append(True)
        warnings.warn(f"jitgraph: cannot write the kernel cache ({path}: {exc.strerror or exc}); "
                      "compiling without caching from now on in this process", CacheWriteWarning,
                      stacklevel=3)


# The modules whose code Numba compiles into jitgraph's cached functions besides their own
# file: the helpers, the overloads and intrinsics they call (blas.py's gemm into runtime.py's
# products, launch.py's parallel launch, symbols.py's calls), and mathlib.py's functions.
HELPER_SOURCES = ("runtime.py", "mathlib.py", "blas.py", "linalg_runtime.py", "cuda_runtime.py",
                  "launch.py", "symbols.py", "ops_order.py")


def _helpers_stamp():
    """A hash of HELPER_SOURCES' contents."""
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in HELPER_SOURCES:
        try:
            with open(os.path.join(here, name), "rb") as f:
                h.update(f.read())
        except OSError:
            h.update(name.encode())
    return h.hexdigest()[:16]


HELPERS_STAMP = _helpers_stamp()


class _Locator(_SourceFileBackedLocatorMixin, _CacheLocator):
    """A function's cache files live in a directory jitgraph chose; freshness is Numba's source
    stamp (a hash of the source file's content) and HELPERS_STAMP: code compiled from one file
    holds code of the others (an edited blas.py had left runtime.py's cached products calling a
    BLAS symbol that no longer existed, a crash), so a change to any of them compiles it again."""

    def get_source_stamp(self):
        return (super().get_source_stamp(), HELPERS_STAMP)

    cache_path = None

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno

    def get_cache_path(self):
        return self.cache_path

    @classmethod
    def from_function(cls, py_func, py_file):
        return cls(py_func, py_file)        # the directory is made when the first file is saved


class _LinkedResultImpl(CompileResultCacheImpl):
    """Compile results saved with the symbols their code calls (codegen/symbols.py), each made
    resolvable before the code loads."""

    def reduce(self, cres):
        return symbols.required(cres.library), super().reduce(cres)

    def rebuild(self, target_context, payload):
        needs, inner = payload
        symbols.ensure(needs)
        return super().rebuild(target_context, inner)


@functools.lru_cache(maxsize=None)
def _impl_class(cache_path):
    """Numba's cache implementation with the one locator placing files in `cache_path`."""
    locator = type("Locator", (_Locator,), {"cache_path": cache_path})
    return type("CacheImpl", (_LinkedResultImpl,), {"_locator_classes": [locator]})


def checked(magic, payload):
    """`payload` as a checked file holds it: `magic`, the SHA-256 of `payload`, `payload`."""
    return magic + hashlib.sha256(payload).digest() + payload


def read_checked(path, magic, what, then):
    """The payload of the checked file `path` (written as `checked(magic, payload)`), or None:
    when it is missing, or in another version's format (a miss, overwritten when saved
    again), or when it fails its check: then it is removed, with a `CorruptCacheWarning`
    naming it as `what` and saying `then` (what happens instead)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    head = len(magic) + 32
    if raw[:len(magic)] == magic and hashlib.sha256(raw[head:]).digest() == raw[len(magic):head]:
        return raw[head:]
    if raw[:4] == magic[:4] and raw[len(magic) - 1:len(magic)] == b"\n" and raw[:len(magic)] != magic:
        return None         # another version's format
    warnings.warn(f"jitgraph: the {what} {path} is corrupted (it does not match its checksum); "
                  f"discarding it and {then}", CorruptCacheWarning, stacklevel=3)
    try:
        os.unlink(path)
    except OSError:
        pass
    return None


class _CheckedFile(IndexDataCacheFile):
    """Index and data files, each written as `checked(MAGIC, payload)`."""

    def _read_checked(self, path):
        """The payload of `path`, or None (missing); a file failing its check is removed."""
        return read_checked(path, MAGIC, "compiled-code cache file", "compiling again")

    def _write_checked(self, path, payload):
        try:
            with self._open_for_write(path) as f:
                f.write(checked(MAGIC, payload))
        except OSError as e:
            warn_write_failed(path, e)

    def _load_index(self):
        payload = self._read_checked(self._index_path)
        if payload is None:
            return {}
        try:
            version, stamp, overloads = pickle.loads(payload)
        except Exception:        # a checksummed file jitgraph did not write: start afresh
            return {}
        if version != self._version or stamp != self._source_stamp:
            return {}
        return overloads

    def _save_index(self, overloads):
        self._write_checked(self._index_path, pickle.dumps(
            (self._version, self._source_stamp, overloads), protocol=-1))

    def _load_data(self, name):
        payload = self._read_checked(self._data_path(name))
        if payload is None:
            raise OSError(f"no valid cache file {name}")     # IndexDataCacheFile.load: a miss
        return pickle.loads(payload)

    def _save_data(self, name, data):
        self._write_checked(self._data_path(name), self._dump(data))


class CheckedCache(FunctionCache):
    """Numba's function cache with checked files in a given directory (see the module doc)."""

    def __init__(self, py_func, cache_path, check=None):
        self._impl_class = _impl_class(cache_path)     # read by Cache.__init__
        self._check = check
        super().__init__(py_func)
        self._cache_file = _CheckedFile(cache_path=self._cache_path, filename_base=self._impl.filename_base,
                                        source_stamp=self._impl.locator.get_source_stamp())

    def _usable(self):
        """Is the cache directory usable? It is refused (CacheDirError) when others could write
        to it, and skipped (a warning) when it cannot be created."""
        if self._check is None:
            return True
        try:
            self._check(self._cache_path)
            return True
        except (CacheDirError, NotADirectoryError):
            raise
        except OSError as e:
            warn_write_failed(self._cache_path, e)
            return False

    def load_overload(self, sig, target_context):
        if not self._usable():
            return None
        try:
            return self._load_unrefreshed(sig, target_context)
        except symbols.SymbolError:     # a function its code calls changed its signature: a miss
            return None
        except Exception:               # perhaps something the refresh registers: the full path
            pass
        try:
            return super().load_overload(sig, target_context)
        except symbols.SymbolError:
            return None
        except Exception as e:        # never let a bad cache entry stop a compile
            warnings.warn(f"jitgraph: could not load {self._name} from the cache ({type(e).__name__}: "
                          f"{e}); compiling it again", CorruptCacheWarning, stacklevel=2)
            return None

    def _load_unrefreshed(self, sig, target_context):
        """Numba's `Cache.load_overload` without its `target_context.refresh()`. A process's
        first refresh imports and registers Numba's whole library of implementations (about
        0.2 s, most of a warm process's first call), which only compiling needs, and every
        compile refreshes the contexts itself. Loaded machine code needs only the runtime
        (NRT) symbols, which `rtsys.initialize` installs."""
        rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)

    def save_overload(self, sig, data):
        if not self._usable():
            return
        try:
            super().save_overload(sig, data)
        except OSError as e:
            warn_write_failed(self._cache_path, e)


class _Deferred:
    """A CheckedCache made when the function is first compiled: `cache_path()` (the cache
    directory, which an environment variable may still change) is only read then."""

    def __init__(self, py_func, cache_path, check):
        self._args, self._cache = (py_func, cache_path, check), None

    def _get(self):
        if self._cache is None:
            py_func, path, check = self._args
            self._cache = CheckedCache(py_func, path(), check)
        return self._cache

    def load_overload(self, sig, target_context):
        return self._get().load_overload(sig, target_context)

    def save_overload(self, sig, data):
        return self._get().save_overload(sig, data)

    def __getattr__(self, name):
        return getattr(self._get(), name)


def enable(dispatchers, cache_path, check=None):
    """Cache these Numba CPU dispatchers in `cache_path` (a directory, or a function returning
    one when the first of them compiles), with checked files; `check(path)` (if given)
    validates the directory before each load and save."""
    for d in dispatchers:
        if isinstance(d, CPUDispatcher):
            d._cache = (_Deferred(d.py_func, cache_path, check) if callable(cache_path)
                        else CheckedCache(d.py_func, cache_path, check))


def _checked_cache(dispatcher):
    """The dispatcher's usable jitgraph disk cache, or None."""
    cache = getattr(dispatcher, "_cache", None)
    if isinstance(cache, _Deferred):
        cache = cache._get()
    return cache if isinstance(cache, CheckedCache) and cache._usable() else None


def in_cache(dispatcher, argtypes):
    """Does the disk cache hold `dispatcher` compiled for `argtypes` (a tuple of Numba types)?
    None when the dispatcher has no usable jitgraph disk cache."""
    cache = _checked_cache(dispatcher)
    if cache is None:
        return None
    try:
        key = cache._index_key(tuple(argtypes), dispatcher.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:       # an unreadable index: a miss
        return False


def has_cached(dispatcher):
    """Does the disk cache hold `dispatcher` compiled for any argument types?"""
    cache = _checked_cache(dispatcher)
    try:
        return cache is not None and bool(cache._cache_file._load_index())
    except Exception:       # an unreadable index: a miss
        return False
