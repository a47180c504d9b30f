"""The benchmark workloads (float64): plain NumPy losses plus hand-written gradients.

The definitions live in `jitgraph.bench` (installed with the package, used by the
`jitgraph bench` command); this module re-exports them for the scripts and tests
that import `workloads` from this directory.
"""
from jitgraph.bench import (  # noqa: F401
    DEPTH, SIZES, WORKLOADS,
    w1_args, w1_loss, w1_numpy, w2_args, w2_loss, w2_numpy, w3_args, w3_loss, w3_numpy,
    w4_args, w4_loss, w4_numpy, w5_args, w5_loss, w5_numpy, w6_args, w6_loss, w6_numpy,
)

__all__ = ["DEPTH", "SIZES", "WORKLOADS",
           "w1_args", "w1_loss", "w1_numpy", "w2_args", "w2_loss", "w2_numpy", "w3_args", "w3_loss", "w3_numpy",
           "w4_args", "w4_loss", "w4_numpy", "w5_args", "w5_loss", "w5_numpy", "w6_args", "w6_loss", "w6_numpy"]
