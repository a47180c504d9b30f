"""Launch constants of the CUDA target, readable without importing numba.cuda.

Launch geometry is a function of the problem sizes and of these constants only
(never of the device's multiprocessor count), so the partial sums of every
reduction, and therefore its rounding, are the same on every run and every GPU.
Under the CUDA simulator (NUMBA_ENABLE_CUDASIM=1, where every thread is a
Python thread) blocks, tiles and grids are made tiny, so that the multi-block,
grid-stride and partial-tile paths all run on the small arrays of the tests.
"""
import os

import numba

SIM = bool(numba.config.ENABLE_CUDASIM)


def _env_int(name, default):
    v = os.environ.get(name)
    return int(v) if v else default


# threads per block (a power of two: block reductions halve it), matmul tile edge, how many
# blocks a grid-stride loop uses at most, and how many partial rows a column reduction uses
TPB = _env_int("JITGRAPH_CUDA_TPB", 8 if SIM else 256)
TILE = _env_int("JITGRAPH_CUDA_TILE", 4 if SIM else 16)
MAX_BLOCKS = _env_int("JITGRAPH_CUDA_MAX_BLOCKS", 3 if SIM else 2048)
MAX_CHUNKS = 4 if SIM else 64
# a row group with column sums keeps one partial row per block slot, updated once per row:
# fewer blocks keep all of those rows resident in L2 (512 x 64 KiB for two float64 sums of
# 4096 columns), at about half the threads an H100/H200 can hold, still enough to stream
COL_BLOCKS = MAX_BLOCKS if SIM else 512
if TPB & (TPB - 1) or TPB < 1:
    raise ValueError(f"JITGRAPH_CUDA_TPB must be a power of two, got {TPB}")
