"""The call signature of a compiled function: its cache key, and why a call retraced.

A trace is valid for one *signature*: the pytree structure of the arguments,
each array's shape and dtype, the kind of each Python scalar, and the values of
the `static_argnums` arguments. `Signature.key(args)` computes it on the call
path (a fast path for plain arrays); `Signature.explain` tells, when a call
misses, which argument changed (JITGRAPH_LOG=recompiles logs every retrace, and
a `RetraceWarning` names the argument that changes most once a function has
been traced JITGRAPH_RETRACE_WARN times).

`guards(fun)` lists the globals and closure cells a function reads directly:
a trace stays valid only while each is still bound to the same object.
"""
import collections
import dis
import inspect
import logging
import os
import random
import sys
import sysconfig
import types
import warnings

import numpy as np

from .core import Tensor
from .tree import tree_flatten
from .values import python_int_class

log = logging.getLogger("jitgraph")


def env_int(name, default):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def debug_level():
    """JITGRAPH_DEBUG: 1 prints graphs, 2 adds fusion groups, 3 adds source, 4 adds timings."""
    return env_int("JITGRAPH_DEBUG", 0)


def log_enabled(topic):
    return topic in os.environ.get("JITGRAPH_LOG", "").replace(",", " ").split()


def log_message(msg):
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    log.info(msg)


class RetraceWarning(UserWarning):
    """A compiled function has been traced more times than JITGRAPH_RETRACE_WARN allows."""


class Inline(Exception):
    """The compiled function was called with recording values (inside another trace)."""


MISSING = object()


def cuda_leaf(x):
    iface = getattr(x, "__cuda_array_interface__", None)
    if iface is None:
        return None
    return tuple(iface["shape"]), np.dtype(iface["typestr"])


def _leaf_key(x):
    if isinstance(x, (np.ndarray, np.generic)):     # np.float64 is a Python float too: first
        return (x.shape, x.dtype.char)
    if isinstance(x, bool):
        return ("b",)
    if isinstance(x, int):
        cls = python_int_class(x)
        return (cls,) if cls is not None else ("static", x)
    if isinstance(x, float):
        return ("f",)
    dev = cuda_leaf(x)
    if dev is not None:
        return (dev[0], dev[1].char, "cuda")
    if isinstance(x, Tensor):
        raise Inline
    a = np.asarray(x)
    return (a.shape, a.dtype.char, "np")


def _leaf_text(x):
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        return f"Python {type(x).__name__}"
    dev = cuda_leaf(x)
    if dev is not None:
        return f"device array shape {dev[0]} {dev[1].name}"
    a = np.asarray(x)
    return f"shape {a.shape} {a.dtype.name}"


def _codes(code):
    """A code object and the code objects nested in it (lambdas, comprehensions, inner defs)."""
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


def _attribute_chains(code, self_name=None):
    """(opname, name, attrs): each global or closure variable read, with the attribute names
    read from it in a row (`cfg.model.scale` gives ("LOAD_GLOBAL", "cfg", ("model", "scale"))),
    and of the local `self_name` (a bound method's self: ("LOAD_FAST", "self", ("scale",)))."""
    out = []
    chain = None
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_DEREF", "LOAD_NAME") or (
                self_name is not None and ins.opname == "LOAD_FAST" and ins.argval == self_name):
            chain = [ins.opname, ins.argval, []]
            out.append(chain)
            continue
        if chain is not None and ins.opname == "LOAD_ATTR" and not (
                sys.version_info >= (3, 12) and ins.arg & 1):       # 3.12+: a method load
            chain[2].append(ins.argval)
            continue
        chain = None
    return [(op, name, tuple(attrs)) for op, name, attrs in out]


def _attr_guards(obj, attrs, out):
    """Guards on the values of `obj.a.b...` (stopping at modules and failing reads)."""
    for attr in attrs:
        if isinstance(obj, types.ModuleType):
            return
        try:
            value = getattr(obj, attr)
            if getattr(obj, attr) is not value:
                # computed afresh on every read (ndarray.T, a property): no identity to guard;
                # its inputs are the object itself, which is guarded
                return
        except Exception:
            return
        out.append(("attr", obj, attr, value))
        obj = value


HELPER_DEPTH = 3      # helper functions called from helpers, whose globals guard a trace too


def guards(fun, _depth=0, _visited=None):
    """What a trace of `fun` depends on besides its arguments, as (kind, container, key, object):
    the globals ("global": dict, name) and closure cells ("cell": cell) it reads, and the
    attributes it reads from them ("attr": the object, the attribute name), so that
    `cfg.scale = 3` after a trace makes the next call retrace, like rebinding `cfg` does. Also
    those of the user's functions it calls (read as globals or closure variables, HELPER_DEPTH
    deep: a global only a helper reads), and, for a bound method, the attributes it reads from
    its `self` (`m.scale = 3` after `jg.jit(m.loss)`)."""
    self_obj = getattr(fun, "__self__", None) if inspect.ismethod(fun) else None
    fun = inspect.unwrap(getattr(fun, "__func__", fun))
    code = getattr(fun, "__code__", None)
    if code is None:
        return []
    visited = set() if _visited is None else _visited
    if code in visited:
        return []
    visited.add(code)
    g = fun.__globals__
    cells = dict(zip(code.co_freevars, fun.__closure__ or ()))
    self_name = code.co_varnames[0] if self_obj is not None and code.co_argcount else None
    out, seen = [], set()
    for c in _codes(code):
        for op, name, attrs in _attribute_chains(c, self_name if c is code else None):
            if op == "LOAD_FAST":
                key = (op, name, attrs)
                if key not in seen:
                    seen.add(key)
                    _attr_guards(self_obj, attrs, out)
                continue
            if op == "LOAD_DEREF":
                cell = cells.get(name)
                if cell is None:
                    continue
                try:
                    obj = cell.cell_contents
                except ValueError:     # an empty cell (a name assigned after the function was defined)
                    continue
                guard = ("cell", cell, None, obj)
            else:
                obj = g.get(name, MISSING)
                if obj is MISSING:
                    continue
                guard = ("global", g, name, obj)
            if isinstance(obj, types.ModuleType):
                continue
            key = (op, name, attrs)
            if key in seen:
                continue
            seen.add(key)
            if (op, name) not in seen:
                seen.add((op, name))
                out.append(guard)
                if _depth < HELPER_DEPTH and isinstance(obj, types.FunctionType) and _users(obj):
                    out += guards(obj, _depth + 1, visited)
            _attr_guards(obj, attrs, out)
    return out


def _users(fn):
    """Is `fn` the user's code (not jitgraph's, NumPy's or an installed package's)?"""
    name = fn.__code__.co_filename
    return not (name.startswith(_INSTALLED) or name.startswith(_OWN) or name.startswith("<frozen"))


_INSTALLED = tuple(os.path.abspath(p) + os.sep for p in {sysconfig.get_paths()["purelib"],
                                                         sysconfig.get_paths()["platlib"],
                                                         sysconfig.get_paths()["stdlib"]})
_OWN = os.path.dirname(os.path.abspath(__file__)) + os.sep


def guard_value(kind, container, key):
    """What a guard reads now: the global, the closure variable, or the attribute."""
    if kind == "global":
        return container.get(key, MISSING)
    if kind == "cell":
        return container.cell_contents
    return getattr(container, key, MISSING)


def guards_hold(guards_):
    """Does every guard still read the object the trace read? (Entry checks the same in the
    code it generates, for speed.)"""
    return all(guard_value(kind, container, key) is obj for kind, container, key, obj in guards_)


def stale_names(guards_):
    """Names of the guards that no longer hold (for the retrace log)."""
    what = {"global": "global `{}`", "cell": "a closure variable", "attr": "attribute `.{}` of a global"}
    return [what[kind].format(key) for kind, container, key, obj in guards_
            if guard_value(kind, container, key) is not obj]


def fname(fun):
    return getattr(fun, "__qualname__", getattr(fun, "__name__", repr(fun)))


class Signature:
    """Cache keys and retrace explanations for the calls of one function."""

    def __init__(self, fun, static_argnums):
        self.fun = fun
        self.static_argnums = static_argnums
        try:
            self._params = [p.name for p in inspect.signature(fun).parameters.values()]
        except (TypeError, ValueError):
            self._params = []
        self._last_desc = None
        self._changed = collections.Counter()
        self._warned = False

    def reset(self):
        self._last_desc = None

    def key(self, args):
        """(cache key, flattened dynamic leaves) of a call."""
        dyn, statics = args, []
        if not self.static_argnums:
            try:
                # fast path: arrays (and NumPy scalars), keyed on shape and dtype
                return tuple([(a.shape, a.dtype.char) for a in args]), args
            except AttributeError:
                pass
        else:
            dyn = []
            for i, a in enumerate(args):
                if i not in self.static_argnums:
                    dyn.append(a)
                    continue
                try:
                    hash(a)
                except TypeError:
                    raise TypeError(
                        f"static argument {i}{self.argname(i)} of {fname(self.fun)} must be "
                        f"hashable (it is part of the cache key), got a {type(a).__name__}; "
                        "pass a tuple instead of a list, or make it a traced argument") from None
                statics.append((i, a))
        leaves, tree = tree_flatten(tuple(dyn))
        return (tree, tuple(_leaf_key(x) for x in leaves), tuple(statics)), leaves

    def bind(self, args, kwargs):
        """Positional arguments of a call with keywords (defaults applied)."""
        try:
            ba = inspect.signature(self.fun).bind(*args, **kwargs)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{fname(self.fun)}: {e}") from None
        ba.apply_defaults()
        if ba.kwargs:
            raise TypeError(f"{fname(self.fun)}: keyword-only arguments {sorted(ba.kwargs)} are not "
                            "supported by jit; make them positional")
        return ba.args

    def argname(self, i):
        return f" `{self._params[i]}`" if i < len(self._params) else ""

    def describe(self, args):
        desc = []
        for i, a in enumerate(args):
            if i in self.static_argnums:
                desc.append(("static", repr(a)))
                continue
            leaves, tree = tree_flatten(a)
            if tree.kind == "leaf":
                desc.append(("leaf", _leaf_text(a)))
            else:
                desc.append(("tree", repr(tree), tuple(_leaf_text(x) for x in leaves)))
        return tuple(desc)

    def changes(self, old, new):
        if old is None:
            return []
        if len(old) != len(new):
            return [(None, f"number of arguments {len(old)} -> {len(new)}")]
        out = []
        for i, (o, n) in enumerate(zip(old, new)):
            if o == n:
                continue
            what = f"argument {i}{self.argname(i)}"
            if o[0] == "static" or n[0] == "static":
                out.append((i, f"static {what}: {o[1]} -> {n[1]}"))
            elif o[0] != n[0] or (o[0] == "tree" and o[1] != n[1]):
                out.append((i, f"{what}: structure {o[1] if o[0] == 'tree' else '*'} -> "
                               f"{n[1] if n[0] == 'tree' else '*'}"))
            elif o[0] == "leaf":
                out.append((i, f"{what}: {o[1]} -> {n[1]}"))
            else:
                diffs = [f"leaf {k}: {a} -> {b}" for k, (a, b) in enumerate(zip(o[2], n[2])) if a != b]
                out.append((i, f"{what}: " + "; ".join(diffs)))
        return out

    def explain(self, desc, traces):
        """Log and count what changed since the last traced call; warn once past the limit."""
        changes = self.changes(self._last_desc, desc)
        self._last_desc = desc
        for i, _ in changes:
            self._changed[i] += 1
        name = fname(self.fun)
        if changes and log_enabled("recompiles"):
            log_message(f"jitgraph: retracing {name}: " + "; ".join(c for _, c in changes))
        limit = env_int("JITGRAPH_RETRACE_WARN", 16)
        if not self._warned and traces + 1 > limit > 0:
            self._warned = True
            blame = ""
            if self._changed:
                i, n = self._changed.most_common(1)[0]
                if i is not None:
                    blame = (f"; argument {i}{self.argname(i)} changed in {n} of them (if it is a "
                             "size or a flag, consider static_argnums; if it is an array of varying "
                             "shape, consider padding it to a few fixed sizes)")
            warnings.warn(f"jitgraph: {name} has been traced {traces + 1} times"
                          f"{blame}. Set JITGRAPH_LOG=recompiles to see each retrace, or "
                          "JITGRAPH_RETRACE_WARN to change this threshold.", RetraceWarning, stacklevel=4)

    def split_static(self, args, argnums, grad):
        """(function of the dynamic arguments, dynamic args, argnums among them)."""
        if not self.static_argnums:
            return self.fun, args, argnums
        statics = {i: args[i] for i in self.static_argnums if i < len(args)}
        dyn_pos = [i for i in range(len(args)) if i not in statics]
        fun = self.fun

        def dynamic(*dyn):
            full = list(dyn)
            for i in sorted(statics):
                full.insert(i, statics[i])
            return fun(*full)

        dynamic.__name__ = getattr(fun, "__name__", "fun")
        dynamic.__qualname__ = fname(fun)
        if grad:
            remap = {p: j for j, p in enumerate(dyn_pos)}
            if isinstance(argnums, (int, np.integer)):
                argnums = remap[int(argnums) % len(args)]
            else:
                argnums = tuple(remap[int(a) % len(args)] for a in argnums)
        return dynamic, tuple(args[i] for i in dyn_pos), argnums


# ---- random generators a trace could advance -----------------------------------------------------
def random_generators(fun):
    """The random generators a trace could advance: NumPy's and Python's global ones, and the
    Generator/RandomState/random.Random objects `fun` reads from its globals and closure."""
    gens = [np.random.mtrand._rand, random._inst]
    for _, _, _, obj in guards(fun):
        if isinstance(obj, (np.random.Generator, np.random.RandomState, np.random.BitGenerator,
                            random.Random)):
            gens.append(obj)
    return gens


def _state(gen):
    if isinstance(gen, np.random.Generator):
        return repr(gen.bit_generator.state)
    if isinstance(gen, np.random.BitGenerator):
        return repr(gen.state)
    if isinstance(gen, np.random.RandomState):
        return repr(gen.get_state(legacy=False))
    return repr(gen.getstate())


def rng_states(fun):
    """The states of the generators `fun` could advance (`random_generators`): equal before and
    after a trace that drew nothing."""
    return [_state(g) for g in random_generators(fun)]
