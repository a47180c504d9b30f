"""Loop rerolling: a Python loop that tracing unrolled becomes one `scan` node again.

A traced `for t in range(T):` records its body's nodes T times. Compiled as it is, a
loop of small operations (a Kalman filter, an HMM, a Sinkhorn iteration) runs thousands
of tiny steps, each a call from a Python entry; written with `jg.scan` the same program
is one compiled loop (a Kalman filter of 25 steps: 2.5 ms against 0.9 ms per gradient).
This pass finds the repetition in the traced forward graph and rewrites it as a scan
before the reverse sweep, so the gradient is a scan as well (`api._trace_graph`).

Finding it (`_candidates`). The forward nodes in creation order (constants and inputs
left out) are a sequence whose period is the loop body: the pass looks for long runs
where node i and node i + p have the same op, shape and dtype, for the periods p that
occur most often as the distance between two nodes of the same kind.

Checking it (`_plan`). The run is cut into k blocks of p nodes. Offsets whose inputs all
come from outside the run (or from other such offsets) are *hoisted*: they stay where
they are and reach the body as invariants (when every block computes the same value) or
as rows of a stacked input (a slice `ys[t]` becomes one strided slice, a constant such
as `dt * t` one constant array). Every other offset is the body, and in every block it
must read the same things: a node of its own block at the same offset, a node of the
previous block (a carry; the first block reads its initial value from outside the run)
or the same outside slot, with the same parameters. A value of block b that a node after
the run reads becomes the scan's final carry (the last block's carries) or a row of a
stacked output. Anything else (a block reading two blocks back, a carry changing shape)
fails the check, and the run is tried again without its first block.

Moving positions. A loop that writes into a preallocated array (`traj[t + 1] = f(traj[t])`,
a dynamic programme's `R[i, j] = ... R[i - 1, j - 1] ...`, a backward recursion `G[t] = r[t] +
gamma * G[t + 1]`) slices and updates the array at positions that change per iteration. Such
a slice or slice update (the same steps and extents, another start) is a gather from, or a
scatter into, its array flattened, at a row of a constant index array: the carry is the
whole array. Its rows of stacked input (`D[i - 1, j - 1]`, `(a[i] - b[j]) ** 2`) are made at
once (`_stacked`): one gather, and the elementwise ops on them applied to the stacked rows.
Views of the arguments (`a[i]`) are left out of the period search: tracing makes each where
it is first used and reuses it, so they occur irregularly (at the first cell of each row).

Growing it. Tracing makes the first iteration differ: values that only read the
function's arguments (`A.T`) are made there and reused after, and NumPy has already
reshaped plain initial arrays (`np.zeros(n)`). So the run is grown by dataflow, not by
signatures (`_match`): the block before the first is the nodes that computed the first
block's initial carries, matched offset by offset against the body (a constant where
the body reshapes or broadcasts its carry stands for the carry shaped back); the block
after the last is the nodes that read the last block's carries, when they make a whole
block (a last iteration whose updates nothing reads stays unrolled: the scan would
compute them, and a dead sqrt(0) made the reverse sweep's 0 * inf a NaN).
The signature run may start inside an iteration; `_best_rotation` tries later starts
and keeps the run that grows to the most iterations.

When it pays (`_pays`): see TINY_S and REROLL_MAX_S. A body of elementwise ops only
stays unrolled (one fused loop) unless the run is long (ELEMENTWISE_MAX_NODES: its
compile would grow with it). `jit_grad(reroll=False)`, a `remat` policy or a
`checkpoint` region keep loops unrolled; $JITGRAPH_REROLL=0 turns the pass off, and
JITGRAPH_REROLL=strict (the test suite's) makes a rewrite that fails an error instead of
a silent fallback to the unrolled program.

The scan computes the same operations per iteration in the same order; compiled, it
may round differently from the unrolled program where fusion differs (values and
gradients agreed within 1e-14 relative on the programs tried).
"""
import os

import numpy as np

from .codegen.emit_cpu import EST_LIBRARY_FLOPS, EST_LOOP_FLOPS
from .core import bind
from .graph import Node, flops, substitute, toposort
from .numpy_api import cast
from .ops.control import _scan
from .ops.index import _normalized
from .ops.registry import PRIMS

MIN_TRIPS = 3           # blocks a run needs to become a scan
MIN_NODES = 24          # body nodes times trips
MAX_LOOPS = 8           # runs rerolled per trace
MAX_DROPPED = 2         # first blocks a failed check drops before the run is given up
_CANDIDATE_PERIODS = 16
_KTH_NEXT = 32          # occurrences of one kind per iteration the period search looks across
_ROTATION_WORK = 200_000    # node visits spent looking for a run's best rotation
# kinds of op that end a fused loop: a body holding one runs a step per iteration anyway
_STEP_KINDS = ("reduce", "index", "linalg", "control")
# An iteration's estimated time (its flops at codegen's estimated rates) under which a scan
# runs faster than the unrolled steps, whose fixed costs (a Python entry's call of each step,
# ~5 us) then dominate: a Kalman filter of 4 x 4 matrices (0.1 us per iteration) ran 2.5 ->
# 0.9 ms (0.26 ms with its last step in the scan too). Above it, a body with a product stays
# unrolled: an LSTM and a GRU of 16 x 64 states (5 and 10 us) ran 1.3x and 1.12x slower as scans. Bodies without products
# are rerolled up to REROLL_MAX_S: an HMM's (11 us) and a heat equation's (4 us) ran 1.16x and
# 1.2x faster; a Lennard-Jones step of 216 particles (420 us) ran 3.5x slower as a scan.
TINY_S = 2e-6
# An elementwise body unrolled is one fused loop (an explicit Euler integration of 8 states:
# 0.02 ms per gradient for 1,000 steps, against 4 ms for 10,000 as a fori_loop), but its
# compile grows with its length: 2.8 s for 100 steps (1,110 nodes), 77 s for 1,000. Runs of
# at least this many nodes become scans.
ELEMENTWISE_MAX_NODES = 2000
# A scalar recursion (`s = w + a * e[t - 1] ** 2 + b * s`, collected in a list) unrolled is
# straight-line code whose compile took 59 s for 100 steps (a body of 2 nodes: the terms
# without s are hoisted; 1,713 nodes with the reverse sweep) and 250 s for 200; as a scan,
# about a microsecond per step. Runs of at least this many scalar nodes become scans.
SCALAR_MAX_NODES = 48
REROLL_MAX_S = 50e-6
# A slice or slice update whose position moves per iteration (`R[i, j] = f(R[i - 1, j - 1])`)
# is a gather from, or a scatter into, its whole array in the scan; its reverse sweep makes
# an adjoint of the whole array each iteration. Seconds per element of that array, added to
# the body's estimate: a scan over a large preallocated array with small updates stays unrolled.
MOVE_S = 1e-9
FOLD_MAX = 4096        # elements of an invariant made of constants that the body holds as a constant


def enabled():
    """False under JITGRAPH_REROLL=0."""
    return os.environ.get("JITGRAPH_REROLL", "1") != "0"


def reroll_loops(trace, roots):
    """`roots` (forward nodes of `trace`) with repeated loop bodies rewritten as scans;
    the same list when nothing is rerolled. Run-time checks (`trace.checks`) are remapped."""
    if not enabled() or trace.regions:
        return list(roots)
    n_roots = len(roots)
    roots = list(roots) + [node for _, node, _ in trace.checks]
    for _ in range(MAX_LOOPS):
        nodes = sorted(toposort(roots), key=lambda n: n.id)
        plan = _find(nodes, roots)
        if plan is None:
            break
        n_checks = len(trace.checks)
        new = _rebuild(trace, nodes, plan)
        if new is None:
            break
        # (and the checks the rewrite made: the bounds of a stacked scatter's positions)
        roots = [new.get(r.id, r) for r in roots] + [node for _, node, _ in trace.checks[n_checks:]]
    trace.checks = [(kind, node, info) for (kind, _, info), node in zip(trace.checks, roots[n_roots:])]
    return roots[:n_roots]


# ---- finding a run ------------------------------------------------------------------------------------
def _find(nodes, roots):
    # Views of the arguments and constants (`a[i]`, `x.T`) stay where they are, as hoisted
    # offsets would, and out of the sequence whose period is searched: tracing makes each one
    # where it is first needed and reuses it after (`a[i - 1]` at the first cell of row i of a
    # double loop over a[i - 1] and b[j - 1]), which would break the period around it.
    views = set()
    for n in nodes:
        if n.op in ("input", "const") or (n.inputs and PRIMS[n.op].kind == "shape"
                                          and all(i.id in views for i in n.inputs)):
            views.add(n.id)
    seq = [n for n in nodes if n.id not in views]
    if len(seq) < MIN_NODES:
        return None
    users = {}
    for n in nodes:
        for i in n.inputs:
            users.setdefault(i.id, []).append(n)
    root_ids = {r.id for r in roots}
    for _, p, start, k in _candidates(seq):
        # a first block that differs is dropped (at most MAX_DROPPED: a run that fails for
        # another reason would fail as often as it has blocks); _extend_front takes back the
        # ones that match after all
        for _ in range(MAX_DROPPED + 1):
            if k < MIN_TRIPS:
                break
            plan = _plan(seq, start, p, k, users, root_ids)
            if plan is not None:
                return _best_rotation(plan, seq, start, p, k, users, root_ids)
            start, k = start + p, k - 1
    return None


def _best_rotation(plan, seq, start, p, k, users, root_ids):
    """The plan with the most blocks among `plan` and the runs that start s = 1, 2, ... nodes
    later (k - 1 blocks before growing). The first block that signatures find may straddle
    two iterations (it starts with the last node of an iteration that tracing interleaved
    with hoisted values); shifted to an iteration's start, the iterations before and after
    the run match as whole blocks and the scan covers them all. Among runs of as many blocks,
    the one carrying the fewest bytes from block to block: log-domain Sinkhorn cut after its
    broadcast `g[None, :]` carried, and stored for the reverse sweep, a 128 x 96 matrix per
    iteration where `g` is 96 values."""
    if k - 1 < MIN_TRIPS:
        return plan
    shifts = min(p - 1, max(1, _ROTATION_WORK // (p * k)))
    for s in range(1, shifts + 1):
        other = _plan(seq, start + s, p, k - 1, users, root_ids)
        if other is not None and (other.k, -_carried_bytes(other)) > (plan.k, -_carried_bytes(plan)):
            plan = other
    return plan


def _carried_bytes(plan):
    """Bytes a run's iteration passes to the next or stacks for after it."""
    return sum(plan.template[r].size * plan.template[r].dtype.itemsize for r in set(plan.carried) | set(plan.ys))


def _candidates(seq):
    """(covered nodes, period, start, trips) of the longest periodic run for each likely
    period, most nodes first."""
    kinds = {}
    sig = np.array([kinds.setdefault((n.op, n.shape, n.dtype.str, len(n.inputs)), len(kinds)) for n in seq])
    n = len(sig)
    nxt = {}
    dist = np.zeros(n, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        j = nxt.get(sig[i])
        if j is not None:
            dist[i] = j - i
        nxt[sig[i]] = i
    counts = np.bincount(dist[dist > 1])
    periods = [int(p) for p in np.argsort(counts)[::-1][:_CANDIDATE_PERIODS] if counts[p] >= MIN_TRIPS - 1]
    # A body in which every kind of node occurs several times (an RK4 step: four evaluations
    # of one function) has no node whose next of its kind is one period on: the period is
    # the distance to the k-th next, k the kind's count per iteration. Those distances, for
    # every k up to _KTH_NEXT, vote for further periods.
    votes = _kth_next_distances(sig)
    if votes.size:
        extra = [int(p) for p in np.argsort(votes)[::-1][:_CANDIDATE_PERIODS]
                 if votes[p] >= MIN_TRIPS - 1 and p > 1 and int(p) not in periods]
        periods += extra
    found = []
    for p in periods:
        if 2 * p > n:
            continue
        eq = np.concatenate(([False], sig[:-p] == sig[p:], [False]))
        edges = np.flatnonzero(np.diff(eq.astype(np.int8)))
        starts, ends = edges[::2], edges[1::2]
        if not len(starts):
            continue
        best = int(np.argmax(ends - starts))
        start, length = int(starts[best]), int(ends[best] - starts[best])
        k = (length + p) // p
        if k >= MIN_TRIPS:
            found.append((k * p, p, start, k))
    found.sort(key=lambda c: (-c[0], c[1]))
    return found


def _kth_next_distances(sig):
    """Counts, per distance d, of the pairs of nodes of one kind d apart with at most
    _KTH_NEXT - 1 nodes of that kind between them."""
    order = np.argsort(sig, kind="stable")
    pos, kind = order, sig[order]
    parts = []
    for k in range(2, _KTH_NEXT + 1):
        if k >= len(pos):
            break
        same = kind[k:] == kind[:-k]
        parts.append((pos[k:] - pos[:-k])[same])
    if not parts:
        return np.zeros(0, dtype=np.int64)
    return np.bincount(np.concatenate(parts))


# ---- checking a run -----------------------------------------------------------------------------------
class _Plan:
    """A checked run. blocks[b] maps each body offset r to its node in block b; `template`
    is the block the others are checked against, `slots[r]`
    what each input of offset r reads: ("in", r2) a node of the same block, ("prev", r2) one
    of the previous block (the first block reads `inits[r2]`), ("inv", node) the same value
    in every block, ("x", i) row b of stacked input i, whose rows are `xrows[i]`."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def _plan(seq, start, p, k, users, root_ids):
    blocks = [seq[start + b * p: start + (b + 1) * p] for b in range(k)]
    pos = {n.id: (b, r) for b, blk in enumerate(blocks) for r, n in enumerate(blk)}

    hoisted = [False] * p
    changed = True
    while changed:
        changed = False
        for r in range(p):
            if not hoisted[r] and all(i.id not in pos or hoisted[pos[i.id][1]]
                                      for blk in blocks for i in blk[r].inputs):
                hoisted[r] = changed = True
    body = [r for r in range(p) if not hoisted[r]]
    if not body:
        return None
    moving = set()
    for r in body:
        t = blocks[1][r]
        if any(blk[r].op != t.op or blk[r].shape != t.shape or blk[r].dtype != t.dtype
               or len(blk[r].inputs) != len(t.inputs) for blk in blocks):
            return None
        if any(blk[r].params != t.params for blk in blocks):
            if not all(_moves_like(blk[r], t) for blk in blocks):
                return None
            moving.add(r)
    if not _pays([blocks[0][r] for r in body], k, [blocks[0][r] for r in moving]):
        return None
    in_body = {blk[r].id for blk in blocks for r in body}

    slots, inits, xrows, xkeys = {}, {}, [], {}
    for r in body:
        t = blocks[1][r]
        slots[r] = []
        for j in range(len(t.inputs)):
            got = []
            for b, blk in enumerate(blocks):
                u = blk[r].inputs[j]
                if u.id in in_body:
                    bu, ru = pos[u.id]
                    if bu == b:
                        got.append(("in", ru))
                    elif bu == b - 1:
                        got.append(("prev", ru))
                    else:
                        return None
                else:
                    got.append(("out", u))
            kind = got[1][0]
            if any(g[0] != kind or (kind != "out" and g[1] != got[1][1]) for g in got[1:]):
                return None
            if kind == "prev":
                if got[0][0] != "out":
                    return None
                ru, u0 = got[1][1], got[0][1]
                if ru in inits and not _same_value(inits[ru], u0):
                    return None
                inits[ru] = u0
                slots[r].append(("prev", ru))
            elif kind == "in":
                if got[0] != got[1]:
                    return None
                slots[r].append(got[1])
            else:
                if got[0][0] != "out":
                    return None
                us = [g[1] for g in got]
                if all(_same_value(us[0], u) for u in us[1:]):
                    slots[r].append(("inv", us[0]))
                elif all(u.shape == us[0].shape and u.dtype == us[0].dtype for u in us):
                    key = tuple(u.id for u in us)
                    if key not in xkeys:
                        xkeys[key] = len(xrows)
                        xrows.append(us)
                    slots[r].append(("x", xkeys[key]))
                else:
                    return None
    plan = _Plan(blocks=[{r: blk[r] for r in body} for blk in blocks], body=body,
                 template={r: blocks[1][r] for r in body}, slots=slots, inits=inits, xrows=xrows,
                 moving=moving)
    while _extend_front(plan, users):
        pass
    while _extend_back(plan, users):
        pass
    return _finish(plan, users, root_ids)


def _match(plan, seeds, taken, fixed_prev):
    """Offsets -> nodes of a new block, grown from `seeds` [(offset, node)] by the slots: an
    "in" input must be the same block's node of that offset. Returns (block, prev, rows,
    folded): the block, the nodes it reads as its previous block's carries (`fixed_prev`:
    those known, offset -> node) and as stacked rows, and the offsets it holds as constants;
    None where a node or input disagrees."""
    block, prev, rows, folded = {}, dict(fixed_prev or {}), {}, set()
    work = list(seeds)
    while work:
        r, node = work.pop()
        if r in block:
            if block[r] is not node:
                return None
            continue
        t = plan.template[r]
        if node.op == "const" and t.op in ("reshape", "transpose", "broadcast") \
                and plan.slots[r][0][0] in ("prev", "in"):
            # NumPy reshaped or broadcast a plain array (a loop's initial np.zeros) where later
            # iterations do so to the carried value: the initial carry is that array shaped back
            kind, src = plan.slots[r][0]
            u = _unshaped(node, t, plan.template[src])
            if u is None:
                return None
            folded.add(r)
            if kind == "in":
                work.append((src, u))
                continue
            if src in prev and not _same_value(prev[src], u):
                return None
            prev.setdefault(src, u)
            continue
        if node.id in taken or node.op != t.op or node.shape != t.shape \
                or node.dtype != t.dtype or len(node.inputs) != len(t.inputs):
            return None
        if node.params != t.params and not (r in plan.moving and _moves_like(node, t)):
            return None
        block[r] = node
        for s, u in zip(plan.slots[r], node.inputs):
            if s[0] == "in":
                work.append((s[1], u))
            elif s[0] == "prev":
                if s[1] in prev and not (fixed_prev and prev[s[1]] is u) and not _same_value(prev[s[1]], u):
                    return None
                prev.setdefault(s[1], u)
            elif s[0] == "inv":
                if not _same_value(s[1], u):
                    return None
            else:
                row = plan.xrows[s[1]][0]
                if u.shape != row.shape or u.dtype != row.dtype or rows.get(s[1], u) is not u:
                    return None
                rows[s[1]] = u
    return block, prev, rows, folded


def _unshaped(const, op, operand):
    """A constant node `c` such that `op` (a reshape, transpose or broadcast node) applied to
    it gives the value of `const`, in the shape and dtype of `op`'s operand `operand`; None
    where there is none (a broadcast whose value varies along the axes it broadcasts)."""
    v = np.asarray(const.value)
    if op.op == "reshape":
        v = v.reshape(operand.shape)
    elif op.op == "transpose":
        v = np.transpose(v, np.argsort(op.p["perm"]))
    else:
        lead = v.ndim - len(operand.shape)
        v = v[(0,) * lead + tuple(slice(0, 1) if d == 1 else slice(None) for d in operand.shape)]
        if v.shape != operand.shape or np.broadcast_to(v, const.shape).tobytes() != \
                np.asarray(const.value).tobytes():
            return None
    if v.shape != operand.shape or v.dtype != operand.dtype:
        return None
    return Node("const", (), {}, v.shape, v.dtype, value=np.ascontiguousarray(v))


def _extend_front(plan, users):
    """Add the block before the first when the first block's initial carries are the
    carried nodes of a full block matching the template (a first iteration that tracing
    interleaved with values it hoisted); True if added."""
    taken = {n.id for blk in plan.blocks for n in blk.values()}
    got = _match(plan, [(ru, u) for ru, u in plan.inits.items()], taken, None)
    if got is None:
        return False
    block, prev, rows, folded = _grow(plan, got, taken, users, None)
    ids = {n.id for n in block.values()}
    if not block or len(block) + len(folded) < len(plan.body) or len(rows) < len(plan.xrows) or any(u.id in ids for u in prev.values()) \
            or any(s[0] == "inv" and s[1].id in ids for ss in plan.slots.values() for s in ss) \
            or any(u.id in ids for us in plan.xrows for u in us) \
            or _reaches([s[1] for ss in plan.slots.values() for s in ss if s[0] == "inv"]
                        + [u for us in plan.xrows for u in us] + list(rows.values()), ids, min(ids)):
        return False
    plan.blocks.insert(0, block)
    plan.inits = prev
    for i, us in enumerate(plan.xrows):
        us.insert(0, rows[i])
    return True


def _extend_back(plan, users):
    """Add the block after the last one: the nodes that read the last block's carries as the
    template does, and their users as far as they match; True if added. Only a whole block:
    a last iteration that left values dead stays unrolled after the scan, which would compute
    them (a dead sqrt(0) gave the reverse sweep 0 * inf = NaN), and code after a loop that
    starts as the body does is not taken for one more iteration."""
    last = plan.blocks[-1]
    taken = {n.id for blk in plan.blocks for n in blk.values()}
    seeds = []
    for r in plan.body:
        for j, s in enumerate(plan.slots[r]):
            if s[0] == "prev" and s[1] in last:
                cands = [v for v in users.get(last[s[1]].id, ()) if v.op == plan.template[r].op
                         and len(v.inputs) > j and v.inputs[j] is last[s[1]]]
                if len(cands) == 1:
                    seeds.append((r, cands[0]))
    if not seeds:
        return False
    got = _match(plan, seeds, taken, last)
    if got is None:
        return False
    block, prev, rows, _ = _grow(plan, got, taken, users, last)
    ids = {n.id for n in block.values()}
    if len(block) < len(plan.body) or any(prev[ru] is not last.get(ru) for ru in prev) \
            or len(rows) < len(plan.xrows) or _reaches(list(rows.values()), ids, min(ids)):
        return False
    plan.blocks.append(block)
    for i, us in enumerate(plan.xrows):
        us.append(rows[i])
    return True


def _grow(plan, got, taken, users, fixed_prev):
    """`_match`'s result `got` with the offsets no seed reaches through its inputs added, as
    long as a reader of the block's nodes (`_readers`) matches one of them."""
    while len(got[0]) + len(got[3]) < len(plan.body):
        block, folded = got[0], got[3]
        trials = (_match(plan, [(r, cand)] + list(block.items()), taken, fixed_prev)
                  for r in plan.body if r not in block and r not in folded
                  for cand in _readers(plan, r, block, users))
        trial = next((t for t in trials if t is not None), None)
        if trial is None:
            return got
        got = trial
    return got


def _readers(plan, r, block, users):
    """Nodes that could be offset r of a block being matched: users of a node of the block
    that offset r reads through an "in" slot, at that input."""
    for j, s in enumerate(plan.slots[r]):
        if s[0] == "in" and s[1] in block:
            src = block[s[1]]
            return [v for v in users.get(src.id, ()) if v.op == plan.template[r].op
                    and len(v.inputs) > j and v.inputs[j] is src and v not in block.values()]
    return []


def _finish(plan, users, root_ids):
    """The carries, the stacked outputs and the outside reads of a checked run (None when an
    initial carry does not fit)."""
    blocks, k = plan.blocks, len(plan.blocks)
    plan.k = k
    if len(plan.body) * k < MIN_NODES:
        return None
    plan.carried = sorted(plan.inits)
    for ru in plan.carried:
        readers = [plan.template[r] for r in plan.body if ("prev", ru) in plan.slots[r]]
        if not _init_fits(plan.inits[ru], plan.template[ru], readers):
            return None
    plan.in_body = {n.id for blk in blocks for n in blk.values()}
    plan.outside = {}
    for b, blk in enumerate(blocks):
        for r, n in blk.items():
            if n.id in root_ids or any(v.id not in plan.in_body for v in users.get(n.id, ())):
                plan.outside.setdefault(r, []).append(b)
    plan.ys = [r for r, bs in sorted(plan.outside.items()) if any(b != k - 1 for b in bs)]
    # a value read after the run only from the last iteration (sinkhorn's `f[:, None]`, which
    # tracing reused for the plan after the loop) is a carry the body overwrites, not a
    # stacked output of every iteration: 50 x 128 x 96 stored for one 128 x 96 read
    plan.last = [r for r, bs in sorted(plan.outside.items()) if r not in plan.ys and r not in plan.inits]
    if any(_tuple_valued(plan.template[r]) for r in plan.ys + plan.carried + plan.last):
        return None         # (a tuple node read after the loop: its element is read there, not stacked)
    plan.first = min(n.id for n in blocks[0].values())
    return plan


def _tuple_valued(node):
    return node.op in PRIMS and PRIMS[node.op].multiple


def _pays(body, trips, moving=()):
    """Is a scan of this body (one iteration's nodes) expected to beat its unrolled steps?
    `moving` are its slices and slice updates whose position changes per iteration."""
    kinds = [PRIMS[n.op].kind for n in body]
    if not moving and not any(k in _STEP_KINDS for k in kinds):
        # elementwise: one fused loop unrolled, T passes as a scan; but the unrolled loop's
        # compile grows faster than its length, and fastest of all that of a chain of scalars
        # (straight-line code, nothing to vectorize)
        if all(n.ndim == 0 for n in body):
            return len(body) * trips >= SCALAR_MAX_NODES
        return len(body) * trips >= ELEMENTWISE_MAX_NODES
    products = any(n.op in ("matmul", "matmul_add") for n in body)
    if moving and not products and len(body) * trips >= ELEMENTWISE_MAX_NODES:
        # however large the array, its unrolled steps would compile for minutes (a 150 x 150
        # dynamic programme: 22,500 cells of ~25 nodes)
        return True
    seconds = sum(flops(n) / (EST_LIBRARY_FLOPS if k == "linalg" else EST_LOOP_FLOPS) for n, k in zip(body, kinds))
    seconds += sum(MOVE_S * n.inputs[0].size for n in moving)
    if seconds <= TINY_S:
        return True
    return seconds <= REROLL_MAX_S and not products


def _moves_like(node, t):
    """Is `node` the slice or slice update `t` at another position (the same steps, the same
    extents, an array of the same shape)?"""
    if node.op not in ("slice", "update_slice") or node.op != t.op:
        return False
    a, b = node.p, t.p
    return a["steps"] == b["steps"] and all(i.shape == j.shape for i, j in zip(node.inputs, t.inputs))


def _flat_positions(node):
    """The flat (C-order) positions in its array of the elements a slice or slice update
    `node` reads or writes, in the slice's own C order (made from the slice's extents: a
    grid of the whole array per iteration was k times its size)."""
    shape = node.inputs[0].shape
    extents = node.shape if node.op == "slice" else node.inputs[1].shape
    strides = np.cumprod((1,) + tuple(shape[:0:-1]), dtype=np.int64)[::-1]
    p = node.p
    pos = np.zeros((), dtype=np.int64)
    for start, step, n, stride in zip(p["starts"], p["steps"], extents, strides):
        pos = pos[..., None] + (start + step * np.arange(n, dtype=np.int64)) * stride
    return pos.reshape(-1)


def _moved(t, ins, idx):
    """`t` (a slice or slice update) at the flat positions `idx`, a row of a stacked input:
    a gather from, or a scatter into, its array flattened."""
    x = ins[0]
    flat = np.reshape(x, (-1,))
    if t.op == "slice":
        return np.reshape(bind("gather", flat, idx, axis=0), t.shape)
    v = np.reshape(ins[1], (-1,))
    return np.reshape(bind("scatter_set", flat, idx, v, axis=0), t.shape)


def _init_fits(u, carry, readers):
    """Can `u` start the carry `carry` (a node of block 0) that `readers` read? It must have
    the carry's shape and dtype, or be a scalar that every reader combines elementwise."""
    if u.shape == carry.shape and u.dtype == carry.dtype:
        return True
    if u.shape != () or not np.can_cast(u.dtype, carry.dtype, "same_kind"):
        return False
    return all(PRIMS[n.op].kind == "elementwise" for n in readers)


def _same_value(a, b, depth=0):
    """Do nodes `a` and `b` certainly hold the same value (the same node, equal constants, or
    the same op with the same parameters on inputs that hold the same values, looking at
    most 32 nodes deep)?"""
    if a is b:
        return True
    if depth > 32 or a.op != b.op or a.shape != b.shape or a.dtype != b.dtype or a.params != b.params:
        return False
    if a.op == "const":
        return np.asarray(a.value).tobytes() == np.asarray(b.value).tobytes()
    if a.op == "input" or len(a.inputs) != len(b.inputs):
        return False
    return all(_same_value(x, y, depth + 1) for x, y in zip(a.inputs, b.inputs))


# ---- rewriting --------------------------------------------------------------------------------------
def _rebuild(trace, nodes, plan):
    """The scan for `plan` bound in `trace`; returns the map old node id -> new node for the
    nodes after the run (None if the body does not replay to the same shapes)."""
    k, n_checks = plan.k, len(trace.checks)
    try:
        init = []
        for ru in plan.carried:
            u, c = trace.tracer(plan.inits[ru]), plan.template[ru]
            if u.dtype != c.dtype:
                u = cast(u, c.dtype)
            init.append(np.broadcast_to(u, c.shape) if u.shape != c.shape else u)
        for r in plan.last:
            c = plan.template[r]
            init.append(np.broadcast_to(trace.tracer(trace.const(np.zeros((), c.dtype))), c.shape))
        xs = []
        spread = {}
        for row, us in enumerate(plan.xrows):
            u0 = us[0]
            if u0.op == "broadcast" and all(u.op == "broadcast" and u.params == u0.params
                                            and u.inputs[0].shape == u0.inputs[0].shape for u in us):
                # rows that broadcast a small value (a layer's vector over the batch): the small
                # values are stacked and the body broadcasts its row, where stacked broadcasts
                # were a large array (or, lifted, a view of stride 0 that kept the body's loops
                # scalar: a planar flow's scans ran 2.5x slower)
                us, spread[row] = [u.inputs[0] for u in us], u0.p
            x = _stacked(trace, us)
            xs.append(np.stack([trace.tracer(u) for u in us]) if x is None else x)
        moves = {}
        for r in sorted(plan.moving):
            moves[r] = len(xs)
            xs.append(trace.tracer(trace.const(np.stack([_flat_positions(blk[r]) for blk in plan.blocks]))))

        # an invariant computed from constants (a broadcast scalar) is a constant of the body,
        # not an operand: the reverse sweep would compute its adjoint (and 0 * inf there, where
        # the body's values are infinite, as soft-DTW's are, warns).
        folded = {}
        for ss in plan.slots.values():
            for s in ss:
                if s[0] == "inv" and s[1].op != "const" and s[1] not in folded and s[1].size <= FOLD_MAX:
                    v = _constant(s[1])
                    if v is not None:
                        folded[s[1]] = v

        def step(i, carry, x):
            env = {}
            for r in plan.body:
                t = plan.template[r]
                ins = []
                for s in plan.slots[r]:
                    if s[0] == "in":
                        ins.append(env[s[1]])
                    elif s[0] == "prev":
                        ins.append(carry[plan.carried.index(s[1])])
                    elif s[0] == "x":
                        ins.append(bind("broadcast", x[s[1]], **spread[s[1]]) if s[1] in spread else x[s[1]])
                    elif s[1].op == "const":
                        ins.append(s[1].value)
                    elif s[1] in folded:
                        ins.append(folded[s[1]])
                    elif s[1].op == "broadcast" and s[1].inputs[0].op == "const":
                        # a large broadcast constant: a constant of the body, broadcast there
                        ins.append(np.broadcast_to(s[1].inputs[0].value, s[1].shape))
                    else:
                        ins.append(trace.tracer(s[1]))
                v = _moved(t, ins, x[moves[r]]) if r in moves else bind(t.op, *ins, **t.p)
                if tuple(np.shape(v)) != t.shape or np.dtype(v.dtype) != t.dtype:
                    raise _Mismatch(t)
                env[r] = v
            return [env[r] for r in plan.carried + plan.last], [env[r] for r in plan.ys]

        step.__qualname__ = "rerolled_loop"
        carry, ys = _scan(step, init, xs, k, False, 0, "scan", step)
    except Exception:
        # the unrolled program stays as it was traced; JITGRAPH_REROLL=strict (the test
        # suite's setting) makes a failed rewrite an error instead
        del trace.checks[n_checks:]
        if os.environ.get("JITGRAPH_REROLL") == "strict":
            raise
        return None
    replace = {}
    for r, bs in plan.outside.items():
        for b in bs:
            if b == k - 1 and r in plan.inits:
                replace[plan.blocks[b][r].id] = trace.to_node(carry[plan.carried.index(r)])
            elif r in plan.last:
                replace[plan.blocks[b][r].id] = trace.to_node(carry[len(plan.carried) + plan.last.index(r)])
            else:
                replace[plan.blocks[b][r].id] = trace.to_node(ys[plan.ys.index(r)][b])
    after = [n for n in nodes if n.id > plan.first and n.id not in plan.in_body]
    return substitute(after, replace)


def _constant(node, depth=0):
    """The value of a node computed from constants only (a broadcast of dt * t), else None."""
    if node.op == "const":
        return np.asarray(node.value)
    if node.op == "input" or depth > 8 or PRIMS[node.op].multiple or PRIMS[node.op].kind == "control":
        return None
    args = [_constant(i, depth + 1) for i in node.inputs]
    if any(a is None for a in args):
        return None
    return np.asarray(PRIMS[node.op].impl(*args, **node.p), dtype=node.dtype)


def _reaches(roots, ids, floor):
    """Does a node of `roots` depend on one of `ids`? (Only nodes made after `floor` are walked.)"""
    seen, work = set(), list(roots)
    while work:
        n = work.pop()
        if n.id in ids:
            return True
        if n.id >= floor and n.id not in seen:
            seen.add(n.id)
            work.extend(n.inputs)
    return False


def _row_slices(us):
    """The slices that the rows `us` are, when each is a slice (or the reshape of one) of the
    same array; else None."""
    if any(u.op != us[0].op for u in us):
        return None
    vs = [u.inputs[0] if us[0].op == "reshape" else u for u in us]
    if any(v.op != "slice" for v in vs) or any(v.inputs[0] is not vs[0].inputs[0] for v in vs):
        return None
    return vs


def _strided(trace, us):
    """`np.stack(us)` as one strided slice when each of `us` is row `s0 + b * d` (b = 0, 1, ...)
    of the same array along one axis (`ys[t]`, `x[:, t]`, optionally reshaped): the stacked
    copy and its adjoint (a `pad_slice` per row) become one slice and one `pad_slice`.
    None for any other `us`."""
    vs = _row_slices(us)
    if vs is None:
        return None
    k = len(vs)
    starts = np.array([v.p["starts"] for v in vs])
    stops = np.array([v.p["stops"] for v in vs])
    steps = vs[0].p["steps"]
    if any(v.p["steps"] != steps for v in vs):
        return None
    moving = np.flatnonzero((starts != starts[0]).any(axis=0))
    if len(moving) != 1:
        return None
    i = int(moving[0])
    d = int(starts[1, i] - starts[0, i])
    if d < 1 or vs[0].shape[i] != 1 or (starts[:, i] != starts[0, i] + d * np.arange(k)).any() \
            or (np.delete(stops, i, axis=1) != np.delete(stops[0], i)).any():
        return None
    lo = int(starts[0, i])
    x = bind("slice", trace.tracer(vs[0].inputs[0]), starts=tuple(int(v) for v in starts[0]),
             stops=tuple(lo + d * (k - 1) + 1 if a == i else int(v) for a, v in enumerate(stops[0])),
             steps=tuple(d if a == i else int(v) for a, v in enumerate(steps)))
    if i:
        x = np.moveaxis(x, i, 0)
    return np.reshape(x, (k,) + us[0].shape)


def _stacked(trace, us, depth=0):
    """`np.stack(us)` (the rows of a stacked input) made at once, or None: a constant per
    iteration (dt * t) is one constant array, slices are one strided slice or one gather, and
    the same elementwise op on such rows is that op on the stacked rows (`(a[i] - b[j]) ** 2`
    per cell of a double loop: four nodes, where the rows apart were four per cell)."""
    values = [_constant(u) for u in us]
    if all(v is not None for v in values):
        return trace.tracer(trace.const(np.stack(values)))
    for make in (_strided, _gathered):
        x = make(trace, us)
        if x is not None:
            return x
    if all(u.op == "input" for u in us):
        # the arguments of each iteration (a char-RNN's Python-int positions): one stack of them
        return np.stack([trace.tracer(u) for u in us])
    return _lifted(trace, us, depth)


def _lifted(trace, us, depth):
    """`np.stack(us)` as their common elementwise op (or reshape, or broadcast) applied to their
    operands stacked (`_stacked`; an operand that every row shares is broadcast), or None."""
    u0, k = us[0], len(us)
    if depth >= 8 or u0.op in ("input", "const"):
        return None
    if u0.op == "gather" and all(u.op == "gather" and u.inputs[0] is u0.inputs[0] and u.params == u0.params
                                 and u.inputs[1].shape == u0.inputs[1].shape for u in us):
        # one array's rows at each row's indices (logB[:, obs[t]]): one gather at the stacked indices
        idx = _stacked(trace, [u.inputs[1] for u in us], depth + 1)
        if idx is None:
            return None
        axis = u0.p["axis"]
        return np.moveaxis(bind("gather", trace.tracer(u0.inputs[0]), idx, axis=axis), axis, 0)
    if u0.op == "scatter_set" and u0.p["axis"] == 0 and u0.inputs[1].ndim <= 1 \
            and all(u.op == "scatter_set" and _same_value(u.inputs[0], u0.inputs[0]) and u.params == u0.params
                    and u.inputs[1].shape == u0.inputs[1].shape and u.inputs[2].shape == u0.inputs[2].shape
                    for u in us):
        # one array set at each row's positions (a one-hot vector per step): one scatter into the
        # rows laid end to end, at the positions offset by each row's start
        n, shape = u0.shape[0], u0.shape
        idx = _stacked(trace, [u.inputs[1] for u in us], depth + 1)
        vals = _stacked(trace, [u.inputs[2] for u in us], depth + 1)
        if idx is None or vals is None:
            return None
        # (each row's positions counted from its end and checked against its length first)
        idx = np.reshape(_normalized(idx, n, 0), (k, -1)) + np.arange(0, k * n, n, dtype=np.int64)[:, None]
        base = np.reshape(np.broadcast_to(trace.tracer(u0.inputs[0]), (k,) + shape), (k * n,) + shape[1:])
        vals = np.reshape(vals, (-1,) + shape[1:])
        return np.reshape(bind("scatter_set", base, np.reshape(idx, (-1,)), vals, axis=0), (k,) + shape)
    if PRIMS[u0.op].kind == "reduce" and all(u.op == u0.op and u.params == u0.params
                                             and u.inputs[0].shape == u0.inputs[0].shape for u in us):
        # the same reduction of each row (a product with a one-hot vector, as a sum): of the rows
        x = _stacked(trace, [u.inputs[0] for u in us], depth + 1)
        if x is None:
            return None
        return bind(u0.op, x, **dict(u0.p, axes=tuple(a + 1 for a in u0.p["axes"])))
    # (a broadcast only as an elementwise op's operand: stacked as a row itself, it would be a
    # view of stride 0, which keeps the body's loops scalar)
    if depth == 0 and u0.op == "broadcast" or PRIMS[u0.op].multiple \
            or (PRIMS[u0.op].kind != "elementwise" and u0.op not in ("reshape", "broadcast")) \
            or any(u.op != u0.op or u.params != u0.params or u.shape != u0.shape or u.dtype != u0.dtype
                   or len(u.inputs) != len(u0.inputs) for u in us):
        return None
    ins = []
    for j, i0 in enumerate(u0.inputs):
        vs = [u.inputs[j] for u in us]
        if all(v is i0 for v in vs):
            ins.append(np.broadcast_to(trace.tracer(i0), (k,) + i0.shape))
            continue
        if any(v.shape != i0.shape or v.dtype != i0.dtype for v in vs):
            return None
        x = _stacked(trace, vs, depth + 1)
        if x is None:
            return None
        ins.append(x)
    if u0.op == "reshape":
        return np.reshape(ins[0], (k,) + u0.shape)
    if u0.op == "broadcast":
        lead = len(u0.shape) - len(i0.shape)
        return np.broadcast_to(np.reshape(ins[0], (k,) + (1,) * lead + i0.shape), (k,) + u0.shape)
    return bind(u0.op, *ins, **u0.p)


def _gathered(trace, us):
    """`np.stack(us)` as one gather when each of `us` is a slice of one array (optionally
    reshaped) of the same shape at any position (`D[i - 1, j - 1]` in a double loop): one
    node and one scatter-add adjoint, where a stack of k slices has k pad-slice adjoints.
    None for any other `us`."""
    vs = _row_slices(us)
    if vs is None or any(v.shape != vs[0].shape for v in vs):
        return None
    idx = np.stack([_flat_positions(v) for v in vs])
    flat = np.reshape(trace.tracer(vs[0].inputs[0]), (-1,))
    rows = bind("gather", flat, trace.tracer(trace.const(idx)), axis=0)
    return np.reshape(rows, (len(us),) + us[0].shape)


class _Mismatch(Exception):
    """A replayed body node came out with another shape or dtype than the one it replays."""
