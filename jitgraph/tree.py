"""Pytrees: nested tuples, namedtuples, lists and dicts of arrays and scalars.

`tree_flatten` returns the leaves in a fixed order (dict keys sorted) and a
hashable `TreeDef` that `tree_unflatten` uses to rebuild the same structure.
"""


class TreeDef:
    __slots__ = ("kind", "meta", "children")

    def __init__(self, kind, meta, children):
        self.kind, self.meta, self.children = kind, meta, tuple(children)

    def _key(self):
        return (self.kind, self.meta, self.children)

    def __eq__(self, other):
        return isinstance(other, TreeDef) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    @property
    def num_leaves(self):
        return 1 if self.kind == "leaf" else sum(c.num_leaves for c in self.children)

    def __repr__(self):
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = ", ".join(repr(c) for c in self.children)
        if self.kind == "dict":
            inner = ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.meta, self.children))
            return "{" + inner + "}"
        if self.kind == "namedtuple":
            return f"{self.meta.__name__}({inner})"
        return f"[{inner}]" if self.kind == "list" else f"({inner})"


LEAF = TreeDef("leaf", None, ())


def tree_flatten(x):
    """(leaves, treedef): the non-container values of nested tuples/lists/dicts, in order
    (dict keys sorted by repr; None is an empty subtree), and the structure that
    `tree_unflatten` rebuilds from them."""
    leaves = []

    def rec(v):
        if isinstance(v, tuple):
            if hasattr(v, "_fields"):       # a namedtuple: its fields, rebuilt as its type
                return TreeDef("namedtuple", type(v), [rec(e) for e in v])
            return TreeDef("tuple", None, [rec(e) for e in v])
        if isinstance(v, list):
            return TreeDef("list", None, [rec(e) for e in v])
        if isinstance(v, dict):
            keys = tuple(sorted(v, key=repr))
            return TreeDef("dict", keys, [rec(v[k]) for k in keys])
        if v is None:
            return TreeDef("none", None, ())
        leaves.append(v)
        return LEAF

    return leaves, rec(x)


def tree_unflatten(treedef, leaves):
    """The nested structure `treedef` (from `tree_flatten`) with `leaves` in place."""
    it = iter(leaves)

    def rec(t):
        if t.kind == "leaf":
            return next(it)
        if t.kind == "none":
            return None
        kids = [rec(c) for c in t.children]
        if t.kind == "dict":
            return dict(zip(t.meta, kids))
        if t.kind == "namedtuple":
            return t.meta(*kids)
        return kids if t.kind == "list" else tuple(kids)

    return rec(treedef)


def tree_map(f, x):
    """`x` with `f` applied to every leaf (same structure)."""
    leaves, td = tree_flatten(x)
    return tree_unflatten(td, [f(v) for v in leaves])
