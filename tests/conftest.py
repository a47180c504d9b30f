import os
import shutil

if shutil.which("nvidia-smi") is None:
    # No GPU expected: run the CUDA target's tests (tests/test_cuda.py) on Numba's CUDA
    # simulator. Numba reads this when it is first imported, so it must come first.
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import tempfile

import numpy as np
import pytest

# A fresh compile cache per test run, unless the caller chose one.
os.environ.setdefault("JITGRAPH_CACHE_DIR", tempfile.mkdtemp(prefix="jitgraph-test-cache-"))
# Compile before a first call returns, so counters and sources are there when a test looks;
# tests/test_tiered.py tests the default (tiered) behaviour with wait=False.
os.environ.setdefault("JITGRAPH_WAIT", "1")
# A loop rewrite (jitgraph/reroll.py) that fails is an error here, not a silent fallback.
os.environ.setdefault("JITGRAPH_REROLL", "strict")


@pytest.fixture
def rng():
    return np.random.default_rng(0)
