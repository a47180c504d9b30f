import os
import tempfile

import numpy as np
import pytest

# A fresh compile cache per test run, unless the caller chose one.
os.environ.setdefault("JITGRAPH_CACHE_DIR", tempfile.mkdtemp(prefix="jitgraph-test-cache-"))


@pytest.fixture
def rng():
    return np.random.default_rng(0)
