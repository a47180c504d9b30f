"""Golden files of emitted source (tests/golden/): compare, or rewrite on request."""
import os

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")


def assert_golden(src, filename, what):
    """`src` must equal tests/golden/<filename>; JITGRAPH_UPDATE_GOLDEN=1 (or a missing file)
    writes it instead, after a deliberate change to the emitted code."""
    path = os.path.join(GOLDEN, filename)
    if os.environ.get("JITGRAPH_UPDATE_GOLDEN") == "1" or not os.path.exists(path):
        with open(path, "w") as f:
            f.write(src)
    with open(path) as f:
        assert src == f.read(), f"emitted {what} changed; review and update {path}"
