"""Partition a graph into steps: fused loop groups and single library ops.

A `Group` is one loop nest over a domain shape S, split at `k` into outer axes
S[:k] (the first is chunked across threads) and inner axes S[k:]. Its members
have a level:

* level 2: a value per point of S (elementwise ops, broadcasts into S);
* level 1: a value per outer index (shape S[:k], or S[:k] followed by ones),
  from reductions over exactly the inner axes and elementwise ops on those;
  these are what make row-wise softmax, logsumexp and layer norm one row loop
  with a few passes over each row, not one pass per op;
* sink: a reduction whose result leaves the group (accumulated across the
  loop, e.g. the loss, or a bias gradient summed over rows).

When k == len(S) there are no inner axes and levels 1 and 2 coincide (a flat
elementwise loop). The forward and backward parts of an elementwise region land
in the same group, so intermediates needed only elementwise are never stored.

A broadcast of a stored value (an input, a constant, or the output of an
earlier step), or a reshape of one that only adds or drops unit dimensions, is
*virtual*: it belongs to no step, and every loop that reads it
indexes the stored value directly (broadcast dimensions read index 0), so a
bias or a scalar is never expanded in memory.

A basic slice, a `pad_slice` (a slice's adjoint: zeros with a slice written), a
concatenate, a transpose (unless only matmuls read it, or it moves a large axis
inside) or a gather by constant in-range indices is an *index view*: it too
belongs to no step, and a loop that reads it reads the stored values at shifted
indices (`b[i0, i1 + 1]`, `(a[i0] if i0 < 7 else 0.0)`, `x[i0 + i2, i1]`), so
stencils, rolls, pads, windows and their adjoints are index arithmetic inside
the fused loops, never copies. A view that a library op, a graph output or
control flow needs as an array is materialized by a loop group of its own,
placed just before that reader.

A cheap elementwise member that later loops read, made of values stored anyway, is
*recomputed* by those loops instead of stored (`_recompute_cheap`, after placement): an
index view whose expression is the op's own, at the reader's index.

Everything else (matmul, the other transposes and gathers, scatter, reshape of a
stored value) is an `OpStep`. A node may join a group only if every
value it reads from outside the group is produced by an earlier step, so the
steps run in list order.
"""
import numpy as np

from . import strides
from .source import literal

SIBLING_WINDOW = 4   # how many recent steps a node with only stored inputs may join
# ... and how many such nodes a group may take: independent chains of the same code (a
# loop's per-step index arithmetic) then make several groups that share one compiled
# function, where one group holding them all compiled as long as their sum (a character
# model's 40 steps of target indices: one loop of 211 lines, 2.7 s of compile)
SIBLING_MAX = 8
INDEX_VIEW_OPS = ("slice", "pad_slice", "concatenate", "transpose", "gather")
# OpenBLAS multiplies a small product (a result under NT_SMALL_OUTPUT elements) 1.25-1.6x
# slower when its right factor is a transposed matrix (32x256 @ 256x64: 37.5 against 22.8 us;
# 64x16 @ 16x256: 18.7 against 14.4 us; 256 x k @ k x 512 products and larger ones 0.99-1.13x),
# while a transposed copy costs about 2 ns per element: a matrix transpose that small
# products of NT_COPY_ROWS rows in all read as their right factor is copied once (an unrolled
# recurrence's W.T, read by every step's dh = dz @ W.T)
NT_SMALL_OUTPUT = 1 << 16
NT_COPY_ROWS = 128
# batched products read operands that are views of stored arrays in place (_strided_product)
STRIDED_PRODUCTS = True
TRANSPOSE_REUSE = 512   # cache lines (32 KB: L1) a transposed read may touch before reusing one
# Cheap elementwise values that later loops recompute from stored values instead of reading
# them stored (`Partition._recompute_cheap`), and the most reads of stored arrays (counted
# with repeats) and operations one such value may take to recompute
RECOMPUTE_OPS = frozenset(("add", "sub", "mul", "div", "neg", "abs", "max", "min", "where", "integer_pow",
                           "cast", "gt", "lt", "ge", "le", "eq", "ne", "and", "or", "not"))
RECOMPUTE = True        # False: every value a later step reads stays stored (for comparisons)
ROW_BROADCASTS_BY_ROW = True    # False: row broadcasts later loops read stay stored (comparisons)
# ... for rows of at least this many points: a later loop reading a row broadcast by row loops
# over the row's axes apart (MD's broadcast over 3 coordinates, read by flat loops before: its
# calls 2.4-2.7 ms against 3.1-3.5 ms read by row)
ROW_BROADCAST_MIN = 16
RECOMPUTE_MAX_READS = 4
RECOMPUTE_MAX_OPS = 6
# reads of stored values in a recomputed value's inlined expression, counted per path: a value
# read through views is inlined once per read (u' = u + roll(u, 1) + roll(u, -1), recomputed
# step after step, would grow 3x per step)
RECOMPUTE_MAX_EXPANDED = 16
# likewise for an index view: np.roll twice nested is 4 reads, 12 times 4,096
VIEW_MAX_EXPANDED = 32


def unit_reshape(node):
    """A reshape that only inserts or removes dimensions of size 1 (an index relabelling)."""
    return [d for d in node.shape if d != 1] == [d for d in node.inputs[0].shape if d != 1]


class Group:
    def __init__(self, seq, shape, k):
        self.seq = seq
        self.shape = tuple(shape)
        self.k = k
        self.members = {}     # node id -> level: 1, 2 or "sink"
        self.siblings = 0     # members that joined reading no other member (SIBLING_MAX)
        self.nodes = []       # members in topological order

    @property
    def rank(self):
        return len(self.shape)

    def is_level1_shape(self, t):
        k = self.k
        return len(t) >= k and tuple(t[:k]) == self.shape[:k] and all(d == 1 for d in t[k:]) \
            and len(t) <= self.rank

    def level_of_shape(self, t):
        if tuple(t) == self.shape:
            return 2 if self.k < self.rank else 1
        if self.k < self.rank and self.is_level1_shape(t):
            return 1
        return None

    def add(self, node, level):
        self.members[node.id] = level
        self.nodes.append(node)

    def pass_ready(self):
        """Row groups: node id -> the pass over the row after which its value is known
        (each per-row reduction of per-point values adds one pass)."""
        ready = {}
        for n in self.nodes:
            r = max([ready[x.id] for x in n.inputs if x.id in ready] + [0])
            if n.kind == "reduce" and self.members[n.id] == 1:
                r += 1
            ready[n.id] = r
        return ready

    def needed(self, roots):
        """Per-point members needed to compute `roots` (recomputed in every pass that needs them)."""
        need, stack = set(), list(roots)
        while stack:
            n = stack.pop()
            if n.id in need or self.members.get(n.id) != 2:
                continue
            need.add(n.id)
            stack += [x for x in n.inputs if self.members.get(x.id) == 2]
        return [n for n in self.nodes if n.id in need]

    def __repr__(self):
        return f"<Group #{self.seq} shape={self.shape} k={self.k} n={len(self.nodes)}>"


class OpStep:
    def __init__(self, seq, node):
        self.seq = seq
        self.node = node
        self.nodes = [node]

    def __repr__(self):
        return f"<OpStep #{self.seq} {self.node.op}>"


def _inner_axes(g):
    return tuple(range(g.k, g.rank))


def _blas_view(v):
    """StridedView `v` with its matrix axes' strides as BLAS is to see them."""
    return v._replace(strides=list(v.strides[:-2]) + strides.matrix_strides(v))


def products_only(node, users):
    """Is every reader of `node` (its `users`) a 2-D product taking it as a factor?"""
    return bool(users) and all(u.ndim == 2 and (u.op == "matmul" or u.op == "matmul_add" and u.inputs[0] is not node)
                               for u in users)


def read_by_blas(node, users):
    """Is every reader of `node` (its `users`) a 2-D product taking it as a factor, and does
    reading it transposed in place cost the small ones less than a copy would? (see
    NT_COPY_ROWS)"""
    if not products_only(node, users):
        return False
    rows = sum(u.shape[0] for u in users if u.inputs[-1] is node and u.size < NT_SMALL_OUTPUT)
    return rows < NT_COPY_ROWS


def _distinct(gather):
    """Are a constant gather's indices all different (a reversal, a permutation)?"""
    idx = gather.inputs[1]
    if idx.op != "const":
        return False
    n = gather.inputs[0].shape[gather.p["axis"]]
    table = np.where(idx.value < 0, idx.value + n, idx.value).ravel()
    return len(np.unique(table)) == table.size


class Partition:
    """The steps of a graph, in execution order, and which values they must store."""

    def __init__(self, graph, index_views=True, recompute=None):
        self.graph = graph
        self.steps = []
        self.step_of = {}           # node id -> step
        self.virtual = set()        # ids of broadcasts read in place by their consumers
        self.index_views = set()    # ids of slices, pads, concatenates, ... read by index
        self._view_reads = {}       # _expanded_reads' memo while views are placed
        self.recomputed = set()     # ids of cheap values later loops recompute (_recompute_cheap)
        self.gather_maps = {}       # gather view id -> (c, coefs): index c + sum coefs * j, or None
        self._allow_views = index_views
        # batched products reading their operands as strided views of stored arrays (with index
        # views): node id -> ((a, b) as 4-D StridedViews, the batch sizes of their two groups)
        self.strided = {}
        self.users = graph.users()
        for node in graph.nodes:
            if node.op in ("input", "const"):
                continue
            step = self._place(node)
            if step is not None:
                self.step_of[node.id] = step
        for o in graph.outputs:
            self._need_array(o)
        if ROW_BROADCASTS_BY_ROW:
            self._row_broadcasts_by_row()
        if RECOMPUTE if recompute is None else recompute:
            self._recompute_cheap()
        self.materialized = self._materialized()

    def resolve(self, node):
        """The stored value (or index view) a chain of virtual broadcasts and reshapes reads."""
        while node.id in self.virtual:
            node = node.inputs[0]
        return node

    def sources(self, node):
        """The stored values reading `node` reads: through virtual broadcasts and reshapes,
        and through index views to each of their operands."""
        # depth first, each view once: views (recomputed values among them) form a DAG whose
        # paths can be exponentially many (a chain of u = v * v), and chains can be long
        out, found, expanded = [], set(), set()
        stack = [iter((node,))]
        while stack:
            for x in stack[-1]:
                x = self.resolve(x)
                if x.id in self.index_views:
                    if x.id not in expanded:
                        expanded.add(x.id)
                        stack.append(iter(x.inputs))
                        break
                elif x.id not in found:
                    found.add(x.id)
                    out.append(x)
            else:
                stack.pop()
        return out

    def reads(self, node):
        """The stored values the step computing `node` reads: a loop group reads through
        index views, a library op reads arrays (an index view it reads is materialized)."""
        by_index = isinstance(self.step_of.get(node.id), Group)
        if node.id in self.strided:
            # a strided operand reads its base; one stored first (the view's base is itself)
            # reads what its array is made of, as any product's operand
            out = []
            for x, v in zip(node.inputs, self.strided[node.id][0]):
                src = self.resolve(x) if v.base is x else v.base
                if all(src is not o for o in out):
                    out.append(src)
            return out
        out = []
        for x in node.inputs:
            out += self.sources(x) if by_index else [self.resolve(x)]
        return out

    def through_view(self, node):
        """Does reading `node` go through an index view (at indices other than the loop's)?"""
        node = self.resolve(node)
        return node.id in self.index_views

    def resolve_index(self, node, ix):
        """(stored value, its index) for reading `node` at index `ix` (one expression per dim of
        node): follows virtual broadcasts (their new and size-1 dims read index "0") and unit
        reshapes (which drop or insert size-1 dims) down to the stored array."""
        ix = ["0" if node.shape[d] == 1 else ix[d] for d in range(node.ndim)]
        while node.id in self.virtual:
            src = node.inputs[0]
            if node.op == "broadcast":
                lead = node.ndim - src.ndim
                ix = ["0" if src.shape[d] == 1 else ix[lead + d] for d in range(src.ndim)]
            else:
                kept = [i for i, d in zip(ix, node.shape) if d != 1]
                ix = ["0" if d == 1 else kept.pop(0) for d in src.shape]
            node = src
        return node, ix

    def read_expr(self, node, ix, leaf, offset=None, expr=None):
        """The expression for node's element at index `ix` (one expression per dim of node):
        virtual broadcasts and reshapes as `resolve_index`, index views as shifted indices
        and conditions, recomputed values as `expr(node, operand expressions)`, down to stored
        values, each read spelled by `leaf(stored, ix)`. `offset(slice, d, start)`, where
        given, spells a slice's nonzero start along axis d (a parameter name, so that code
        reading slices at other offsets is the same text)."""
        node, ix = self.resolve_index(node, ix)
        if node.id not in self.index_views:
            return leaf(node, ix)
        return self.index_expr(node, ix, leaf, offset, expr)

    def index_expr(self, node, ix, leaf, offset=None, expr=None):
        """The expression for element `ix` of index-view op `node` (slice, pad_slice, transpose,
        gather or concatenate) or recomputed value, read from its operands (see `read_expr`)."""
        p = node.p
        if node.id in self.recomputed:
            # an elementwise op: its operands have its shape, read at the same index
            return f"({expr(node, [self.read_expr(x, ix, leaf, offset, expr) for x in node.inputs])})"
        if node.op == "slice":
            starts = [offset(node, d, a) if a and offset is not None else a
                      for d, a in enumerate(p["starts"])]
            return self.read_expr(node.inputs[0], [
                _affine(a, c, i) for a, c, i in zip(starts, p["steps"], ix)], leaf, offset, expr)
        if node.op == "pad_slice":
            x = node.inputs[0]
            conds, inner = [], []
            for d, (a, c, i) in enumerate(zip(p["starts"], p["steps"], ix)):
                n = x.shape[d]
                if c == 1 and a == 0 and n == node.shape[d]:
                    inner.append(i)
                    continue
                off = _offset(i, -a)
                if c == 1:
                    conds.append(f"{a} <= {i} < {a + n}")
                    inner.append(off)
                elif c == -1:
                    conds.append(f"{a - n} < {i} <= {a}")
                    inner.append(f"{a} - {_atom(i)}")
                else:
                    lo, hi = (a, a + c * (n - 1)) if c > 0 else (a + c * (n - 1), a)
                    conds.append(f"{lo} <= {i} <= {hi} and ({off}) % {abs(c)} == 0")
                    inner.append(f"({off}) // {c}")
            value = self.read_expr(x, inner, leaf, offset, expr)
            if not conds:
                return value
            return f"({value} if {' and '.join(conds)} else {literal(0, node.dtype)})"
        if node.op == "transpose":
            src = [None] * node.ndim
            for d, a in enumerate(p["perm"]):
                src[a] = ix[d]
            return self.read_expr(node.inputs[0], src, leaf, offset, expr)
        if node.op == "gather":
            x, idx = node.inputs
            a, k = p["axis"], idx.ndim
            pos = ix[a:a + k]
            affine = self.gather_maps[node.id]
            if affine is None:
                at = leaf(idx, pos)          # the table (all its entries in range, >= 0)
            else:
                c, coefs = affine
                terms = [str(c)] if c else []
                terms += [_affine(0, m, j) for m, j in zip(coefs, pos) if m and j != "0"]
                at = " + ".join(terms) if terms else "0"
            return self.read_expr(x, ix[:a] + [at] + ix[a + k:], leaf, offset, expr)
        # concatenate: the part whose range along the axis holds the index
        axis = p["axis"]
        i = ix[axis]
        parts, start = [], 0
        for x in node.inputs:
            jx = list(ix)
            jx[axis] = _offset(i, -start)
            parts.append((start + x.shape[axis], self.read_expr(x, jx, leaf, offset, expr)))
            start += x.shape[axis]
        out = parts[-1][1]
        for stop, value in reversed(parts[:-1]):
            out = f"({value} if {i} < {stop} else {out})"
        return out



    # ---- placement -----------------------------------------------------------------------
    def _avail(self, node, group):
        """Can `group` read node's stored value? (produced before the group starts, or by a
        later step that `_hoist` can move in front of the group)"""
        for src in self.sources(node):
            if src.op in ("input", "const"):
                continue
            step = self.step_of[src.id]
            if step is group or (step.seq > group.seq and not self._hoistable(step, group)):
                return False
        return True

    def _hoistable(self, step, group):
        """Could `step` (placed after `group`) run just before it? Only if everything it reads
        is produced before `group`. Typically a small step on parameters alone (a cast or
        reshape of a layer norm's scale) that the greedy placement put after the big row
        loop; left there, every loop over the rows reading it would be a loop of its own."""
        for n in step.nodes:
            for src in self.reads(n):
                if src.op in ("input", "const"):
                    continue
                s = self.step_of.get(src.id)
                if s is not step and (s is None or s.seq >= group.seq):
                    return False
        return True

    def _hoist(self, node, group):
        """Move the steps after `group` that produce what `node` reads in front of it (see
        `_hoistable`; `node` is joining `group`)."""
        for x in node.inputs:
            if x.id in group.members:
                continue
            for src in self.sources(x):
                step = self.step_of.get(src.id)
                if step is not None and step is not group and step.seq > group.seq:
                    self.steps.remove(step)
                    self.steps.insert(group.seq, step)
                    for i, s in enumerate(self.steps):
                        s.seq = i

    def _view_ok(self, node):
        """Can `node` be an index view? (real, integer and boolean dtypes, whose zero a pad
        writes as a literal) For a gather that can, records its index map in `gather_maps`."""
        if not (self._allow_views and node.op in INDEX_VIEW_OPS and node.dtype.kind in "biuf"):
            return False
        if sum(self._expanded_reads(x, (), self._view_reads) for x in node.inputs) > VIEW_MAX_EXPANDED:
            return False
        if node.op == "transpose":
            # a matrix transpose only matmuls read is BLAS's strided view already (or a copy
            # by the precompiled helper, read_by_blas)
            perm, users = node.p["perm"], self.users[node.id]
            if perm == (1, 0) and products_only(node, users):
                return False
            # read in place, a cache line of the operand's last axis is reused when the loop
            # over the result's axis d it moved to advances: after the points of the axes
            # inside d. Within L1 (TRANSPOSE_REUSE lines) that is cheap; a large moved axis
            # (a big matrix transposed) is a tiled copy instead
            d = perm.index(node.ndim - 1)
            return int(np.prod(node.shape[d + 1:], dtype=np.int64)) <= TRANSPOSE_REUSE
        if node.op == "gather":
            # a gather by constant in-range indices (windows, reversals, edge/reflect/wrap
            # pads): the index is an affine function of the position, or a table lookup
            idx, n = node.inputs[1], node.inputs[0].shape[node.p["axis"]]
            if idx.op != "const" or idx.size == 0 or not ((idx.value >= -n) & (idx.value < n)).all():
                return False
            table = np.where(idx.value < 0, idx.value + n, idx.value).astype(np.int64)
            affine = affine_map(table)
            if affine is None and (idx.value < 0).any():
                return False
            self.gather_maps[node.id] = affine
            return True
        return True

    def _need_array(self, node):
        """A reader that takes `node` as an array (a library op, an output, control flow)
        is being placed: an index view it reads becomes a stored value, computed by a loop
        group of its own placed now (its operands are all stored already)."""
        src = self.resolve(node)
        if src.id not in self.index_views:
            return
        if src.id in self.step_of:
            return
        # it stays a view for the loops reading it by index (some may be placed already)
        g = Group(len(self.steps), src.shape, src.ndim)
        self.steps.append(g)
        g.add(src, 2)
        self.step_of[src.id] = g

    def _role(self, group, node):
        """The level `node` would have in `group`, or None if it cannot join."""
        op = node.op
        ins = node.inputs
        mem = group.members
        if op == "broadcast":
            lvl = group.level_of_shape(node.shape)
            x = ins[0]
            if lvl is None:
                return None
            if x.id in mem:
                # a per-row value broadcast across the row; of a lower rank it would be
                # right-aligned (NumPy's rule), so a (n,) value meets the (n, n) domain's columns
                if lvl == 2 and mem[x.id] == 1 and group.level_of_shape(x.shape) == 1 \
                        and x.ndim == node.ndim:
                    return 2
                return None
            return lvl if self._avail(x, group) else None
        if op == "reshape":
            x = ins[0]
            if group.k < group.rank and x.id in mem and mem[x.id] == 1 \
                    and group.level_of_shape(node.shape) == 1:
                return 1
            return None
        if node.kind == "reduce":
            x = ins[0]
            axes = tuple(node.p["axes"])
            if x.id in mem:
                lx = mem[x.id]
                if lx == "sink":
                    return None
            elif self._avail(x, group) and group.level_of_shape(x.shape) is not None:
                lx = group.level_of_shape(x.shape)
            else:
                return None
            if lx == 2 and axes == _inner_axes(group) and axes:
                return 1
            if lx == 1 and group.k < group.rank and tuple(x.shape) != group.shape:
                # reduce per-row values over outer axes (and their unit trailing axes)
                if all(a < group.k or x.shape[a] == 1 for a in axes):
                    return "sink"
                return None
            return "sink"
        if node.kind == "elementwise":
            lvl = group.level_of_shape(node.shape)
            if lvl is None:
                return None
            for x in ins:
                if x.id in mem:
                    if mem[x.id] != lvl:
                        return None
                elif not self._avail(x, group):
                    return None
            return lvl
        return None

    def _try_row_split(self, group, node):
        """A flat group meeting a reduction over its trailing axes becomes a row group."""
        if node.kind != "reduce" or group.k != group.rank:
            return None
        x = node.inputs[0]
        axes = tuple(node.p["axes"])
        if tuple(x.shape) != group.shape or not axes or axes[0] == 0 \
                or axes != tuple(range(axes[0], group.rank)):
            return None
        if not (x.id in group.members or self._avail(x, group)):
            return None
        if x.id in group.members and group.members[x.id] == "sink":
            return None
        group.k = axes[0]
        for n in group.nodes:   # flat members were level 1 == 2; now they are per-point values
            if group.members[n.id] == 1:
                group.members[n.id] = 2
        return 1

    def _new_group(self, node):
        if node.kind == "reduce":
            x = node.inputs[0]
            axes = tuple(node.p["axes"])
            shape = x.shape
            k = axes[0] if axes and axes == tuple(range(axes[0], len(shape))) and axes[0] > 0 \
                else len(shape)
        else:
            shape, k = node.shape, len(node.shape)
        g = Group(len(self.steps), shape, k)
        self.steps.append(g)
        role = self._role(g, node)
        if role is None:
            raise AssertionError(f"cannot start a group with {node!r}")
        g.add(node, role)
        return g

    def _place(self, node):
        if self._view_ok(node):
            self.index_views.add(node.id)
            return None
        fusible = node.kind in ("elementwise", "reduce") or node.op in ("broadcast", "reshape")
        if fusible:
            # candidate groups: those holding an input, newest first
            cands = []
            for x in node.inputs:
                s = self.step_of.get(x.id)
                if isinstance(s, Group) and s not in cands:
                    cands.append(s)
            if not cands and node.op != "broadcast":
                # all inputs are stored values: share the loop of a recent group with this domain
                cands = [s for s in self.steps[-SIBLING_WINDOW:]
                         if isinstance(s, Group) and s.siblings < SIBLING_MAX]
            cands.sort(key=lambda s: -s.seq)
            for g in cands:
                role = None
                if node.kind == "reduce" and g.k == g.rank:
                    role = self._try_row_split(g, node)
                if role is None:
                    role = self._role(g, node)
                if role is not None:
                    self._hoist(node, g)
                    g.add(node, role)
                    g.siblings += not any(x.id in g.members for x in node.inputs)
                    return g
            if node.op == "broadcast" or (node.op == "reshape" and unit_reshape(node)):
                # its input's group (if any) was a candidate and could not take it: read in place
                self.virtual.add(node.id)
                return None
            if node.op != "reshape":
                return self._new_group(node)
        strided = self._strided_product(node)
        if strided is not None:
            self.strided[node.id] = strided
        else:
            for x in node.inputs:
                self._need_array(x)
        step = OpStep(len(self.steps), node)
        self.steps.append(step)
        return step

    def _strided_product(self, node):
        """For a batched product one of whose operands is a view (an index view, a virtual
        broadcast or reshape) of a stored array that BLAS reads in place: its operands as 4-D
        strided views (codegen/strides.py; an operand BLAS cannot read so is stored first, as
        every operand of a product otherwise is) and its batch groups; else None."""
        if node.op != "matmul" or node.ndim <= 2 or not self._allow_views or not STRIDED_PRODUCTS:
            return None
        views, direct = [], []
        for k, x in enumerate(node.inputs):
            v = None
            if x.id in self.virtual or x.id in self.index_views:
                v = strides.view_of(self, x, self._c_base)
                merged = v and strides.batched_matrices([v], node.shape[:-2])
                # a right factor read transposed made OpenBLAS's small products 1.35-1.55x
                # slower (32 items of 400x50 @ 50x50, attention's 64x32 @ 32x64) where a left
                # one cost nothing, and larger ones no slower (8 items of 512x128 @ 128x128: 3.25
                # against 3.32 ms): a transposed right factor of small items is copied
                small = node.shape[-2] * node.shape[-1] < NT_SMALL_OUTPUT
                if not merged or not strides.blas_readable(_blas_view(merged[0][0]), row_major=k == 1 and small):
                    v = None
            direct.append(v is not None)
            if v is None:
                if not (x.id in self.virtual or x.id in self.index_views or self._c_base(self.resolve(x))):
                    return None
                v = strides.StridedView(x, strides.ZERO, tuple(x.shape), strides.c_strides(x.shape))
            views.append(v)
        if not any(direct):
            return None
        merged = strides.batched_matrices(views, node.shape[:-2])
        if merged is None:
            return None
        for x, d in zip(node.inputs, direct):
            if not d:
                self._need_array(x)
        return [_blas_view(v) for v in merged[0]], merged[1]

    def _c_base(self, node):
        """Is `node` stored in a C-ordered array of its own shape, at the point a product placed
        now reads it: an argument or array constant, a loop's stored value, a product's result or
        a reshape of an array (a C-ordered view)?"""
        if node.op in ("input", "const"):
            return node.op == "input" or node.size > 1
        step = self.step_of.get(node.id)
        if isinstance(step, Group):
            return True
        return isinstance(step, OpStep) and node.op in ("matmul", "matmul_add", "reshape")

    # ---- recomputation ----------------------------------------------------------------------
    def _expanded_reads(self, node, inlined, memo):
        """How many reads of stored values the expression reading `node` has, once its index
        views, recomputed values and the values in `inlined` are inlined, each once per path
        (`memo`: node id -> count, for the same views and `inlined`)."""
        def inner(n):
            n = self.resolve(n)
            return n if n.id in self.index_views or n.id in inlined else None

        root = inner(node)
        if root is None:
            return 1
        stack = [root]          # (chains of views can be longer than Python's recursion limit)
        while stack:
            n = stack[-1]
            if n.id in memo:
                stack.pop()
                continue
            ins = [inner(x) for x in n.inputs]
            pending = [x for x in ins if x is not None and x.id not in memo]
            if pending:
                stack += pending
                continue
            memo[n.id] = sum(1 if x is None else memo[x.id] for x in ins)
            stack.pop()
        return memo[root.id]

    def _reads_repeat(self, step, node):
        """Can loop group `step` read an element of `node` at more than one of its points?
        Through a broadcast that expands it (a layer's bias read at every row) or a gather whose
        indices repeat (windows, edge pads), yes; through slices, pads, concatenations,
        transposes and reversals, which map each point to its own element, no: a loop over a
        padded stencil's larger domain reads each element of its operand once, at a shifted
        index."""
        seen = set()
        stack = [x for n in step.nodes for x in n.inputs]
        while stack:
            x = stack.pop()
            while x.id in self.virtual:
                if x.op == "broadcast" and x.size > x.inputs[0].size and self._reaches(x, node):
                    return True
                x = x.inputs[0]
            if x is node or x.id in seen or x.id not in self.index_views:
                continue
            seen.add(x.id)
            if x.op == "gather" and not _distinct(x) and self._reaches(x, node):
                return True
            stack += x.inputs
        return False

    def _reaches(self, view, node):
        """Does reading `view` read `node`, through virtual values and index views?"""
        return any(src is node for src in self.sources(view))

    def _recompute_cheap(self):
        """Values that later loops recompute instead of reading them stored.

        A loop group stores a member when a later step reads it. When that member is a cheap
        elementwise function (RECOMPUTE_OPS) of values stored anyway (read by other steps too,
        or arguments and constants), every later step reading it is a loop, and the arrays
        those loops would read to recompute it (the ones they do not read already) are fewer
        bytes than the member's array written once and read by each of them, those loops
        compute it where they read it and nothing stores it. Typically a derivative the
        reverse sweep builds from a forward value (tanh's 1 - y*y, the sigmoid's s*(1 - s), a
        ReLU's mask), which placement puts in the forward loop beside that value, while its
        product with the incoming adjoint runs in the backward pass. The group keeps the member
        where its own members use it. A recomputed value is an index view read at the reader's
        own index (`index_expr`), so everything that follows views (`sources`, `reads`, buffer
        reuse) follows it to its operands."""
        stored = self._materialized()
        outputs = {self.resolve(o).id for o in self.graph.outputs}
        readers = {}        # stored value id -> the other steps reading it
        group_reads = {}    # loop group -> ids of the arrays it reads
        for node in self.graph.nodes:
            s = self.step_of.get(node.id)
            if s is None:
                continue
            for src in self.reads(node):
                group_reads.setdefault(s, set()).add(src.id)
                if src.op not in ("input", "const") and self.step_of[src.id] is not s:
                    readers.setdefault(src.id, set()).add(s)

        def leaves(node, group, taken, found):
            """Operations to recompute `node` (a member of `group`, or a value recomputed
            already) from stored arrays, which it adds to `found` (id -> (node, reads)), and
            the members of `group` it recomputes through to `taken`; None when it cannot be."""
            if node.id not in self.recomputed and node.id not in taken and (
                    node.kind != "elementwise" or node.op not in RECOMPUTE_OPS or node.size <= 1
                    or self.step_of.get(node.id) is not group or group.members[node.id] == "sink"):
                return None
            ops = 1
            for x in node.inputs:
                for src in self.sources(x):
                    if src.id in self.recomputed or (src.id not in stored and self.step_of.get(src.id) is group):
                        sub = leaves(src, group, taken, found)
                        if sub is None:
                            return None
                        ops += sub
                    elif src.op in ("input", "const") or src.id in stored:
                        if src.size > 1:
                            found[src.id] = (src, found.get(src.id, (src, 0))[1] + 1)
                    else:
                        return None
                    if ops > RECOMPUTE_MAX_OPS or sum(k for _, k in found.values()) > RECOMPUTE_MAX_READS:
                        return None
            taken.add(node.id)
            return ops

        def nbytes(node):
            return node.size * node.dtype.itemsize

        for node in self.graph.nodes:
            group = self.step_of.get(node.id)
            steps = readers.get(node.id)
            if node.id not in stored or node.id in outputs or not isinstance(group, Group) \
                    or not steps or not all(isinstance(s, Group) for s in steps):
                continue
            taken, found = set(), {}
            if leaves(node, group, taken, found) is None:
                continue
            if self._expanded_reads(node, taken, {}) > RECOMPUTE_MAX_EXPANDED:
                continue
            # One array written and read by each reader less, against the arrays a reader must
            # read to recompute it and did not read already: fewer bytes, and per point of a
            # reader's loop at most one new load for the one it saves. A reader reading an
            # element at several of its points (through a broadcast: the bias of a layer, read
            # at every row) would recompute it each time from values it reads from the caches
            # anyway (a Bayesian net's sampled weights: its loops 1.6-2.5x slower); one looping
            # over more points through a pad reads each element once (_reads_repeat)
            new = [[x for x, _ in found.values() if x.id not in group_reads[s]] for s in steps]
            if any(self._reads_repeat(s, node) or len(xs) > 1 for s, xs in zip(steps, new)):
                continue
            if sum(nbytes(x) for xs in new for x in xs) >= nbytes(node) * (1 + len(steps)):
                continue
            self.recomputed |= taken
            self.index_views |= taken
            for s in steps:
                group_reads[s] |= set(found)
        # a group no longer computes the recomputed members none of its other members read
        for group in self.groups():
            used = set()
            for n in reversed(group.nodes):
                if n.id not in self.recomputed or n.id in used:
                    used |= {x.id for x in n.inputs}
            for n in [n for n in group.nodes if n.id in self.recomputed and n.id not in used]:
                group.nodes.remove(n)
                del group.members[n.id]
                del self.step_of[n.id]
        if any(not s.nodes for s in self.steps):
            self.steps = [s for s in self.steps if s.nodes]
            for k, s in enumerate(self.steps):
                s.seq = k

    def _row_broadcasts_by_row(self):
        """A group member broadcasting one of the group's per-row values across the row
        (softmax's row sum, layer norm's mean and scale: what the reverse sweep reads back)
        is read by later loops as that per-row value, at index 0 along the broadcast axes,
        instead of being stored at every point of the row: it becomes virtual for them, the
        per-row value is stored, and the group keeps computing the member where its own
        members use it. (The transformer block's softmax stored two 1 MB row broadcasts for
        its backward loop.) Only where every later step reading it is a loop group: a
        library op would get it expanded into a new array on every call."""
        outputs = {o.id for o in self.graph.outputs}
        for g in self.groups():
            for n in g.nodes:
                if n.op != "broadcast" or g.members[n.id] != 2 or n.id in outputs:
                    continue
                x = n.inputs[0]
                if g.members.get(x.id) != 1 or n.size < ROW_BROADCAST_MIN * x.size:
                    continue
                readers = [self.step_of.get(u.id) for u in self.users[n.id]]
                outside = [r for r in readers if r is not g]
                if outside and all(isinstance(r, Group) for r in outside):
                    self.virtual.add(n.id)

    # ---- storage ---------------------------------------------------------------------------
    def _materialized(self):
        """Ids of nodes whose value must be stored in an array."""
        out = {self.resolve(n).id for n in self.graph.outputs}
        for node in self.graph.nodes:
            s = self.step_of.get(node.id)
            if s is None:       # inputs, constants, virtual broadcasts, index views
                continue
            for src in self.reads(node):
                if src.op not in ("input", "const") and self.step_of[src.id] is not s:
                    out.add(src.id)
        for s in self.steps:
            if isinstance(s, Group):
                for n in s.nodes:
                    if s.members[n.id] == "sink":
                        out.add(n.id)
        return out

    def groups(self):
        return [s for s in self.steps if isinstance(s, Group)]

    def describe(self):
        """One line per step (for JITGRAPH_DEBUG=2 and tests)."""
        names = self.graph.names()
        lines = []
        if self.virtual:
            lines.append("virtual broadcasts: " + " ".join(
                names[n.id] for n in self.graph.nodes if n.id in self.virtual))
        if self.index_views - self.recomputed:
            lines.append("index views: " + " ".join(
                names[n.id] for n in self.graph.nodes if n.id in self.index_views - self.recomputed))
        if self.recomputed:
            lines.append("recomputed by their readers: " + " ".join(
                names[n.id] for n in self.graph.nodes if n.id in self.recomputed))
        for s in self.steps:
            if isinstance(s, Group):
                lv = " ".join(f"{names[n.id]}{'' if s.members[n.id] == 2 else '@' + str(s.members[n.id])}"
                              for n in s.nodes)
                lines.append(f"group {s.seq}: loop over {s.shape} (outer {s.shape[:s.k]}): {lv}")
            else:
                lines.append(f"step {s.seq}: {s.node.op} -> {names[s.node.id]}")
        return "\n".join(lines)


def _atom(i):
    """Index expression `i` as an operand of `*` or unary minus."""
    return i if i.isidentifier() or i.isdigit() else f"({i})"


def _offset(i, k):
    """Index expression `i + k` (k an int), simplified."""
    if k == 0:
        return i
    if i == "0":
        return str(k)
    return f"{i} + {k}" if k > 0 else f"{i} - {-k}"


def _affine(start, step, i):
    """Index expression `start + step * i`, simplified (`start` an int or a parameter's name)."""
    if step == 1 and not isinstance(start, str):
        return _offset(i, start)
    if i == "0":
        return str(start)
    term = _atom(i) if step == 1 else f"{step} * {_atom(i)}" if step != -1 else f"-{_atom(i)}"
    return f"{start} + {term}" if start else term


def affine_map(table):
    """(c, coefs) with table[j] == c + sum(coefs[k] * j[k]) for every position j, or None."""
    c = int(table.flat[0])
    coefs = []
    for k, n in enumerate(table.shape):
        e = [0] * table.ndim
        if n > 1:
            e[k] = 1
        coefs.append(int(table[tuple(e)]) - c if n > 1 else 0)
    grid = np.indices(table.shape, sparse=True)
    expect = c + sum(m * g for m, g in zip(coefs, grid))
    return (c, tuple(coefs)) if np.array_equal(table, np.broadcast_to(expect, table.shape)) else None
