"""Buffer planning: which stored values share memory, and what a call's peak will be.

The steps of a `Partition` run in order. A stored value (a materialized node) is
*live* from the step that produces it to the last step that reads it, reads
through views included (reshapes and transposed views of it). Two values may
share a buffer when their live ranges do not overlap, and, in two cases, when
they touch: a flat elementwise loop may write its result over an operand it
reads for the last time at the same point (an in-place update), because each
point reads before it writes and the chunks of the loop own disjoint points;
and an item assignment (`x[:, k] = v`: update_slice, scatter_set) may write into
the array it updates when that array dies there, which saves copying it.

Buffers are *slots* of one workspace arena. The assignment depends only on the
graph's structure and its symbolic sizes (a slot holds values of one size class,
`n0 * n1` float64 say), never on concrete sizes: a kernel reused for a new
batch size keeps its plan and gets new slot offsets. Slot offsets (bytes,
64-aligned) are computed per set of concrete sizes by `MemoryPlan.layout`.

Not planned, and allocated per call:
* graph outputs (returned to the caller; never views of the workspace), and the
  values they are views of: the caller passes these buffers in (`out_index`)
  and reuses one only when the array it returned last time is no longer
  referenced;
* the carried results of loops and the results of branches (scan/while/cond)
  and of concatenate. A scan's stacked outputs (ys, carry histories) are
  planned: they live from the scan's step on, as its loop writes them row by row.

A subgraph kernel (a loop body, a branch) has a plan of its own, its arena a
slot of its caller's arena, reserved for the call (`MemoryPlan.scratch` with a
key of its own), as are the buffers a loop's carries alternate between: a loop
allocates nothing per iteration (codegen/ops_cpu.py).

Scratch buffers live for one step only (the per-chunk partial sums of a parallel
reduction: MAX_CHUNKS rows each) and share a few slots across all steps.
"""
import heapq
from dataclasses import dataclass, field

import numpy as np

from jitgraph.graph import flops
from jitgraph.ops.registry import PRIMS

from .fusion import INDEX_VIEW_OPS, Group, OpStep, read_by_blas

ALIGN = 64
# ops that leave their result in a buffer the plan provides (see emit_cpu)
# item assignments that may write into the array they update when it dies there
IN_PLACE_UPDATES = ("update_slice", "scatter_set", "scatter_add_to")
PLANNED_OPS = ("matmul", "matmul_add", "transpose", "slice", "pad_slice", "update_slice", "gather", "scatter_add",
               "scatter_add_to",
               "scatter_set", "broadcast")


def _stacked(n):
    """Is `n` a stacked output of a scan (its ys, or the history of a carry)? The scan's loop
    writes it, so it lives from the scan's step on."""
    return n.op == "proj" and n.inputs[0].op == "scan" and n.p["index"] >= n.inputs[0].p["n_carry"]


def _aliased_operands(n):
    """The operands of control node `n` its results may be (or be views of): a scan's
    results never are, except its initial carries when it runs no iteration (its body's
    caller copies a carry passed through; codegen/ops_cpu.py); a branch or a while loop may
    return any operand but a branch's predicate."""
    if n.op == "cond":
        return n.inputs[1:]          # not the predicate
    if n.op != "scan":
        return n.inputs
    p = n.p
    return n.inputs[p["n_consts"]:p["n_consts"] + p["n_carry"]] if p["length"] == 0 else ()


def nbytes(node):
    return max(int(node.size), 1) * node.dtype.itemsize


class Item:
    """One planned or unplanned stored value: its node, live range and size class."""
    __slots__ = ("node", "start", "end", "slot", "cls", "in_place")

    def __init__(self, node, start, end, cls):
        self.node, self.start, self.end, self.cls = node, start, end, cls
        self.slot = None
        self.in_place = False


class MemoryPlan:
    """The workspace plan of one partitioned graph (CPU target).

    Attributes:
        slot_of: node id -> slot index, for values that live in the workspace.
        slots: per slot, the items it holds over the call (in step order).
        fresh: ids of stored values allocated per call (outputs, control flow results).
        last_use: node id -> index of the last step reading it (len(steps) for outputs).
    """

    def __init__(self, graph, partition, sizes, plan=True, views=None, in_place=True, plannable=None,
                 recycle_outputs=True):
        """`views`: ids of the nodes the emitter makes views of their input (default: the
        CPU emitter's reshapes and transposed views for matmuls); `in_place`: whether a
        flat loop may overwrite an operand; `plannable(node)`: whether the emitter takes
        that stored value's buffer from the plan (default: the CPU emitter's choice);
        `recycle_outputs`: whether the caller passes output buffers in (`out_index`)."""
        self.graph, self.part, self.sizes = graph, partition, sizes
        self.enabled = plan
        self.allow_in_place = in_place
        self._views = views
        if plannable is not None:
            self._plannable = plannable
        part = partition
        steps = part.steps
        self.n_steps = len(steps)
        step_index = {s.seq: k for k, s in enumerate(steps)}
        self.step_at = {}          # node id -> index of the step computing it
        for n in graph.nodes:
            s = part.step_of.get(n.id)
            if s is not None:
                self.step_at[n.id] = step_index[s.seq]
        # views: values whose storage is another value's (reshape of a stored value, and
        # the transposed views the emitter gives matmuls)
        self.root = {}
        users = graph.users()
        for n in graph.nodes:
            if n.id not in part.materialized or n.op in ("input", "const"):
                continue
            if self._is_view(n, users):
                self.root[n.id] = self.root_of(part.resolve(n.inputs[0]))
        if self._views is None and in_place:
            self._accumulate_in_place(graph)
        last = {}
        end = self.n_steps
        for n in graph.nodes:
            k = self.step_at.get(n.id)
            if k is None:      # inputs, constants, virtual broadcasts, index views
                continue
            for src in part.reads(n):
                r = self.root_of(src)
                last[r.id] = max(last.get(r.id, -1), k)
        out_roots = self.out_roots = {self.root_of(part.resolve(o)).id for o in graph.outputs}
        for r in out_roots:
            last[r] = end
        self.last_use = last
        self.items = []
        self.scratch_slots = []    # [size class, bytes]: per-step scratch (chunk partial sums)
        self._scratch_index = {}
        self.fresh = set()
        self.slot_of = {}
        self.slots = []
        self.slot_cls = []
        # The results of control flow (cond/scan/while, read through proj) may be their
        # operands themselves or views of them (a loop that runs zero times, a branch returning
        # a reshape): those operands get buffers of their own, never a slot another value
        # could take while a result still points into it
        control_operands = set()
        for n in graph.nodes:
            if n.kind == "control":
                control_operands |= {self.root_of(part.resolve(x)).id for x in _aliased_operands(n)}
        for n in graph.nodes:
            if n.id not in part.materialized or n.op in ("input", "const") or n.id in self.root:
                continue
            k = self.step_at[n.id]
            if _stacked(n):
                k = self.step_at[n.inputs[0].id]     # the loop writes it row by row
            it = Item(n, k, last.get(n.id, k), (sizes.product(n.shape), n.dtype.itemsize))
            self.items.append(it)
            if not plan or n.id in out_roots or n.id in control_operands or not self._plannable(n):
                self.fresh.add(n.id)
        # output buffers: passed in by the caller, who recycles one once the array it
        # returned last time is no longer referenced (jit.py)
        self.out_index = {}
        if plan:
            self._assign()
            for o in (graph.outputs if recycle_outputs else ()):
                r = self.root_of(part.resolve(o))
                if r.op in ("input", "const") or r.id in self.out_index or PRIMS[r.op].multiple \
                        or r.id in control_operands \
                        or r.id not in part.materialized or not self._plannable(r):
                    continue
                self.out_index[r.id] = len(self.out_index)

    # ---- structure ------------------------------------------------------------------------------
    def _is_view(self, n, users):
        if self._views is not None:
            return n.id in self._views
        if n.op == "reshape":
            return True
        if n.op == "transpose" and n.p["perm"] == (1, 0):
            return read_by_blas(n, users[n.id]) and n not in self.graph.outputs
        return False

    def root_of(self, n):
        while n.id in self.root:       # a product added in place onto a view's value: a chain
            n = self.root[n.id]
        return n

    def _accumulate_in_place(self, graph):
        """Let each `matmul_add(c, a, b)` (codegen/products.py) take the buffer of `c`, whose
        value BLAS then adds the product onto, where nothing reads `c` (or a view of it) at or
        after that step but the sum itself, `c` is a value a step computes, and neither `a`
        nor `b` lives in its buffer. The sum is then stored as a view of `c`, so an output's
        buffer is the one `c` is written into. Otherwise the emitter copies `c` first."""
        part = self.part
        readers = {}           # root id -> [(step index, reading node id)]
        for n in graph.nodes:
            k = self.step_at.get(n.id)
            if k is None:
                continue
            for src in part.reads(n):
                readers.setdefault(self.root_of(src).id, []).append((k, n.id))
        for o in graph.outputs:
            readers.setdefault(self.root_of(part.resolve(o)).id, []).append((self.n_steps, None))
        for n in graph.nodes:
            if n.op != "matmul_add" or n.id not in part.materialized:
                continue
            k = self.step_at[n.id]
            c = part.resolve(n.inputs[0])
            r = self.root_of(c)
            if r.op in ("input", "const") or r.kind == "control" or r.op == "proj" \
                    or r.id not in part.materialized or r.id not in self.step_at \
                    or tuple(r.shape) != tuple(n.shape) or r.dtype != n.dtype:
                continue
            if any(self.root_of(part.resolve(x)) is r for x in n.inputs[1:]):
                continue
            if any(j >= k and reader != n.id for j, reader in readers.get(r.id, ())):
                continue
            self.root[n.id] = r
            readers.setdefault(r.id, []).extend(readers.pop(n.id, ()))

    def accumulates_in_place(self, node):
        """Does `matmul_add` node add its product onto its first operand's buffer (no copy)?"""
        return node.id in self.root

    def _plannable(self, n):
        step = self.part.step_of[n.id]
        if isinstance(step, Group):
            return True
        return n.op in PLANNED_OPS or _stacked(n)

    # ---- assignment ---------------------------------------------------------------------------
    def _in_place_ok(self, item, victim):
        """Can `item` (written by a flat loop at step item.start, or an item assignment) overwrite
        `victim`, read there for the last time?"""
        step = self.part.steps[item.start]
        if victim.end != item.start:
            return False
        if isinstance(step, OpStep):
            return self._update_in_place_ok(step.node, victim.node)
        if step.rank == 0 or step.k != step.rank:
            return False
        v = victim.node
        if tuple(v.shape) != step.shape or tuple(item.node.shape) != step.shape \
                or step.members.get(item.node.id) == "sink":
            return False
        # Each point computes the members in order and stores each right after computing it.
        # Every read of the victim must be at the loop point (not through a view, not by a
        # sink, which updates after all stores) and must feed the overwriting member: the
        # store then depends on each load, so no compiler may move a load after it (Numba
        # may tell LLVM that the two arrays do not alias).
        feeds = {item.node.id}
        for n in reversed(step.nodes):
            if n.id in feeds:
                feeds |= {x.id for x in n.inputs if x.id in step.members}
        for n in step.nodes:
            for x in n.inputs:
                for src in self.part.sources(x):
                    if self.root_of(src) is not v:
                        continue
                    if src is not v or self.part.through_view(x) or n.op in INDEX_VIEW_OPS \
                            or step.members[n.id] == "sink" or n.id not in feeds:
                        return False
        return True

    def _update_in_place_ok(self, node, v):
        """An item assignment (update_slice, scatter_set) may write into the array it updates
        (its first operand) when that array dies here and no other operand (the values, the
        indices) is stored in it: the untouched elements are then already in place."""
        if node.op not in IN_PLACE_UPDATES or tuple(node.shape) != tuple(v.shape) \
                or node.dtype != v.dtype:
            return False
        first, *rest = (self.root_of(self.part.resolve(x)) for x in node.inputs)
        return first is v and all(r is not v for r in rest)

    def updates_in_place(self, node):
        """Does item assignment `node` write into its first operand's buffer (no copy first)?"""
        slot = self.slot_of.get(node.id)
        if slot is None or node.op not in IN_PLACE_UPDATES:
            return False
        first = self.root_of(self.part.resolve(node.inputs[0]))
        return self.slot_of.get(first.id) == slot and any(
            it.node is node and it.in_place for it in self.slots[slot])

    def _assign(self):
        by_start = sorted((it for it in self.items if it.node.id not in self.fresh),
                          key=lambda it: (it.start, it.node.id))
        free = {}          # size class -> slots free now
        # The values holding a slot, indexed two ways so that a long program (an unrolled
        # network stores thousands of values) does not rescan all of them per value: a heap
        # by last use, for releasing, and the holders whose last use is a given step, the only
        # candidates for an in-place overwrite there. Both keep the order in which values took
        # their slots (`seq`), which decides ties, so the plan is the same as one list scanned
        # in that order would give.
        ending = []        # heap of (end, seq, slot, item)
        ends_at = {}       # end -> {seq: (slot, item)} of the holders still busy
        seq = 0
        for it in by_start:
            # release the slots whose values died before this step, in the order they were taken
            released = []
            while ending and ending[0][0] < it.start:
                end, k, slot, old = heapq.heappop(ending)
                if ends_at.get(end, {}).pop(k, None) is not None:
                    released.append((k, slot))
            for _, slot in sorted(released):
                free.setdefault(self.slot_cls[slot], []).append(slot)
            slot = None
            pool = free.get(it.cls)
            # an item assignment in place saves copying the array; a loop, only memory
            if pool and it.node.op not in IN_PLACE_UPDATES:
                slot = pool.pop()
            else:
                if self.allow_in_place:
                    # _in_place_ok needs the victim's last read at this very step
                    candidates = ends_at.get(it.start, {})
                    for k, (s, old) in candidates.items():
                        if self.slot_cls[s] == it.cls and self._in_place_ok(it, old):
                            slot = s
                            it.in_place = True
                            del candidates[k]      # its heap entry is skipped when popped
                            break
                if slot is None and pool:
                    slot = pool.pop()
            if slot is None:
                slot = len(self.slots)
                self.slots.append([])
                self.slot_cls.append(it.cls)
            it.slot = slot
            self.slots[slot].append(it)
            self.slot_of[it.node.id] = slot
            heapq.heappush(ending, (it.end, seq, slot, it))
            ends_at.setdefault(it.end, {})[seq] = (slot, it)
            seq += 1

    def scratch(self, k, shape, itemsize, cls):
        """Slot index of the k-th scratch buffer of a step (live during that step only, so
        every step shares the same few): an array of `shape` (concrete sizes) and
        `itemsize`, of size class `cls`."""
        key = (k, cls)
        j = self._scratch_index.get(key)
        if j is None:
            j = self._scratch_index[key] = len(self.scratch_slots)
            self.scratch_slots.append((cls, []))
        self.scratch_slots[j][1].append((tuple(shape), itemsize))
        return len(self.slots) + j

    @property
    def has_workspace(self):
        return bool(self.slots or self.scratch_slots)

    # ---- sizes ----------------------------------------------------------------------------------
    def layout(self, size_values=None):
        """(total bytes, int64 offsets per slot) for concrete sizes; `size_values` are the
        values of n0, n1, ... (default: the sizes the plan was made for)."""
        offsets, total = [], 0
        scale = self._size_map(size_values)
        needs = [max(self._bytes(it.node.shape, it.node.dtype.itemsize, scale) for it in items)
                 for items in self.slots]
        needs += [max(self._bytes(shape, size, scale) for shape, size in uses)
                  for _, uses in self.scratch_slots]
        for need in needs:
            offsets.append(total)
            total += -(-need // ALIGN) * ALIGN
        return total, np.array(offsets or [0], dtype=np.int64)

    def _size_map(self, size_values):
        if size_values is None:
            return None
        return dict(zip(self.sizes.values, size_values))

    @staticmethod
    def _bytes(shape, itemsize, scale):
        n = 1
        for d in shape:
            n *= d if scale is None else scale.get(d, d)
        return max(n, 1) * itemsize

    # ---- the report -----------------------------------------------------------------------------
    def report(self, remat=None):
        """A `MemoryReport` for the sizes the plan was made for."""
        ws, _ = self.layout()
        fresh_out = sum(nbytes(it.node) for it in self.items
                        if it.node.id in self.fresh and it.end == self.n_steps)
        unplanned = sum(nbytes(it.node) for it in self.items
                        if it.node.id in self.fresh and it.end < self.n_steps)
        delta = [0] * (self.n_steps + 2)
        for it in self.items:
            b = nbytes(it.node)
            lo = it.start + (1 if it.in_place else 0)   # shares its first step with its victim
            delta[lo] += b
            delta[min(it.end, self.n_steps) + 1] -= b
        live_peak = run = 0
        for d in delta:
            run += d
            live_peak = max(live_peak, run)
        stored = 0
        boundary = None
        if self.graph.meta.get("grad") and self.graph.outputs:
            v = self.part.resolve(self.graph.outputs[0])
            boundary = self.step_at.get(self.root_of(v).id)
        if boundary is not None:
            stored = sum(nbytes(it.node) for it in self.items
                         if it.start <= boundary < it.end and it.node.id not in self.out_roots)
        return MemoryReport(
            peak_bytes=ws + fresh_out + unplanned, workspace_bytes=ws, output_bytes=fresh_out,
            unplanned_bytes=unplanned, live_peak_bytes=live_peak, stored_bytes=stored,
            values=len(self.items), buffers=len(self.slots) + len(self.scratch_slots),
            in_place=sum(1 for it in self.items if it.in_place),
            forward_flops=sum(flops(n) for n in self.graph.nodes if n.id not in self.graph.adjoint_ids),
            total_flops=sum(flops(n) for n in self.graph.nodes), remat=remat,
            grad=bool(self.graph.meta.get("grad")))


def _fmt_bytes(b):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{b} B"


@dataclass(repr=False)
class MemoryReport:
    """Predicted memory of one compiled call (bytes), and what rematerialization costs.

    peak_bytes: what a call needs beyond its inputs: the workspace, the outputs and
        the unplanned per-call allocations (`workspace + outputs + unplanned`).
    workspace_bytes: the planned buffers (one arena, kept between calls).
    output_bytes: the returned arrays (a call reuses the previous call's buffers only when
        the caller has dropped them).
    unplanned_bytes: per-call allocations outside the plan (control flow, concatenate).
    live_peak_bytes: the most bytes of stored values live at once (the lower bound
        the workspace approaches).
    stored_bytes: values kept across the forward/backward boundary (the activations
        the backward pass reads), 0 for forward-only graphs.
    values, buffers, in_place: stored values, workspace slots, values written in place.
    forward_flops, total_flops: operation counts of the forward and of the whole program.
    remat: the policy and what it recomputed (segments, recomputed_nodes, recompute_flops).
    grad: whether the program is a value-and-gradient one.
    """

    peak_bytes: int
    workspace_bytes: int
    output_bytes: int
    unplanned_bytes: int
    live_peak_bytes: int
    stored_bytes: int
    values: int
    buffers: int
    in_place: int
    forward_flops: int
    total_flops: int
    remat: dict = field(default_factory=dict)
    grad: bool = True

    def __post_init__(self):
        self.remat = dict(self.remat or {})

    @property
    def recompute_flops(self):
        """Operations re-run by rematerialization (0 without remat)."""
        return self.remat.get("recompute_flops", 0)

    def as_dict(self):
        keys = ("peak_bytes", "workspace_bytes", "output_bytes", "unplanned_bytes", "live_peak_bytes",
                "stored_bytes", "values", "buffers", "in_place", "forward_flops", "total_flops",
                "recompute_flops")
        d = {k: getattr(self, k) for k in keys}
        d["remat"] = self.remat.get("policy")
        return d

    def __str__(self):
        rows = [
            ("predicted peak (workspace + outputs + unplanned)", _fmt_bytes(self.peak_bytes)),
            ("  workspace (planned buffers, kept between calls)",
             f"{_fmt_bytes(self.workspace_bytes)} in {self.buffers} buffers for {self.values} values"
             f" ({self.in_place} in place)"),
            ("  outputs (returned; recycled once dropped)", _fmt_bytes(self.output_bytes)),
            ("  unplanned (control flow, concatenate)", _fmt_bytes(self.unplanned_bytes)),
            ("live peak (values alive at once)", _fmt_bytes(self.live_peak_bytes)),
        ]
        if not self.grad:
            rows.append(("flops", f"{self.total_flops:.3g}"))
            w = max(len(r[0]) for r in rows)
            return "\n".join(f"{a.ljust(w)}  {b}" for a, b in rows)
        rows.append(("stored for the backward pass", _fmt_bytes(self.stored_bytes)))
        pol = self.remat.get("policy")
        if pol is None:
            rows.append(("rematerialization", "none"))
        else:
            n_rec = self.remat.get("recomputed_nodes", 0)
            rows.append(("rematerialization", f"{pol!r}: {self.remat.get('segments', 0)} segments, "
                         f"{n_rec} nodes recomputed" if n_rec else f"{pol!r}: nothing recomputed"))
            rows.append(("  recompute cost", f"{self.recompute_flops:.3g} flops "
                         f"({self.recompute_flops / max(self.forward_flops, 1):.2f}x the forward)"))
        rows.append(("flops (forward / forward + backward)",
                     f"{self.forward_flops:.3g} / {self.total_flops:.3g}"))
        w = max(len(r[0]) for r in rows)
        return "\n".join(f"{a.ljust(w)}  {b}" for a, b in rows)

    def __repr__(self):
        return (f"MemoryReport(peak={_fmt_bytes(self.peak_bytes)}, stored={_fmt_bytes(self.stored_bytes)}, "
                f"recompute_flops={self.recompute_flops:.3g})")
