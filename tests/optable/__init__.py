"""The op spec table: value and gradient of every supported NumPy function, eager and traced.

Each entry is (name, plain-NumPy function, argument specs, input domain, argnums).
An argument spec is a shape tuple (a random floating array of that shape) or a
literal value (an index array, a Python scalar) passed as is and never
differentiated. Non-scalar ops are wrapped as `sum(op(*a) * fixed_weights)`.

The rows live in one module per op family (`elementwise.py`, `reduce.py`, ...),
each adding its entries with `op(...)` (and `nondiff(...)` for functions with no
gradient: values only). tests/test_ops.py checks every row against NumPy's
values and finite-difference gradients, first and second order; test_jit,
test_cuda and test_onnx compile every row for their targets.
"""
import importlib
import zlib
from collections import namedtuple

import numpy as np

import jitgraph as jg

Entry = namedtuple("Entry", "name fn specs domain argnums")
NonDiff = namedtuple("NonDiff", "name fn specs domain")


# ---- deterministic randomness ----------------------------------------------------------
def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


_WEIGHTS = {}


def weights(shape, dtype):
    """Fixed random weights for a result shape (exactly representable in float32)."""
    shape = tuple(shape)
    if shape not in _WEIGHTS:
        _WEIGHTS[shape] = _rng("weights", shape).standard_normal(shape).astype(np.float32).astype(np.float64)
    return _WEIGHTS[shape].astype(dtype)


def weighted(op):
    """A scalar loss from a non-scalar op: sum(op(*a) * fixed random weights)."""
    def loss(*a):
        out = op(*a)
        return np.sum(out * weights(np.shape(out), out.dtype))
    return loss


def _sample(rng, shape, domain):
    if domain == "real":
        x = rng.standard_normal(shape)
    elif domain == "positive":
        x = rng.uniform(0.5, 2.0, shape)
    elif domain == "nonzero":
        x = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    elif domain == "unit":
        x = rng.uniform(-0.9, 0.9, shape)
    else:
        raise ValueError(domain)
    # exactly representable in float32, so float32 and float64 runs see the same numbers
    return np.asarray(x).astype(np.float32).astype(np.float64)


def make_args(entry, dtype):
    rng = _rng(entry.name, entry.specs)
    domains = entry.domain if isinstance(entry.domain, tuple) else (entry.domain,) * len(entry.specs)
    return [_sample(rng, s, d).astype(dtype) if isinstance(s, tuple) else s
            for s, d in zip(entry.specs, domains)]


def diff_argnums(entry):
    if entry.argnums is not None:
        return entry.argnums
    return tuple(i for i, s in enumerate(entry.specs) if isinstance(s, tuple))


# ---- the table ---------------------------------------------------------------------------
TABLE = []
NONDIFF = []


def op(name, fn, *spec_sets, domain="real", argnums=None, weight=True):
    f = weighted(fn) if weight else fn
    for specs in spec_sets:
        TABLE.append(Entry(name, f, tuple(specs), domain, argnums))


def nondiff(name, fn, *spec_sets, domain="real"):
    """Rows of functions with no gradient (values only)."""
    for specs in spec_sets:
        NONDIFF.append(NonDiff(name, fn, tuple(specs), domain))


UNARY_SHAPES = [((),), ((5,),), ((2, 3),)]
BINARY_SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((2, 3, 4), (3, 1)),
                 ((), (3,)), ((3, 4), ())]
X2 = ((5, 6),)
X3 = ((2, 3, 4),)
IDX = np.array([0, 2, 2, 4])
IDX2 = np.array([[0, 1], [1, 5], [0, 0]])


def program_ops(graph):
    """The ops of a graph and of the subgraphs its control nodes hold."""
    ops = set()
    for n in graph.nodes:
        ops.add(n.op)
        for _, v in n.params:
            for g in (v if isinstance(v, tuple) else (v,)):
                if isinstance(g, jg.Graph):
                    ops |= program_ops(g)
    return ops


def _id(entry):
    specs = ",".join(str(s) if isinstance(s, tuple) else "lit" for s in entry.specs)
    return f"{entry.name}-{specs}"


# the rows, family by family (each module adds its entries when imported)
for _family in ("elementwise", "reduce", "shape", "arrange", "index", "inplace", "products", "composite",
                "control", "order", "linalg", "special", "sets"):
    importlib.import_module(f"{__name__}.{_family}")
