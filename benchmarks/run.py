"""Benchmark runner: eager vs hand-written NumPy vs jit_grad (vs JAX and PyTorch when installed).

    python benchmarks/run.py                 # published sizes, all workloads
    python benchmarks/run.py --quick         # small sizes (a smoke run)
    python benchmarks/run.py w1 w3 --reps 5

Prints one table of medians (ms; w5 in us per call) measured side by side in
this process, plus first-call (trace + codegen + compile) time and the ratios
the codegen issue sets as targets. Peers run in this process too, so compare
ratios, not absolute numbers across runs. Timing never fails anything: this is
a benchmark, not a test.

The workloads and the runner live in `jitgraph.bench`; `jitgraph bench` runs the
same measurements (smaller sizes by default, `--full` for these).
"""
import argparse

from jitgraph.bench import WORKLOADS, report


def main(argv=None):
    """Parse the command line, run the benchmark, print the table; returns the rows."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="*", default=list(WORKLOADS), metavar="workload",
                   help=f"workloads to run (default: all of {', '.join(WORKLOADS)})")
    p.add_argument("--quick", action="store_true", help="small sizes")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--no-peers", action="store_true", help="skip JAX and PyTorch")
    a = p.parse_args(argv)
    bad = [w for w in a.workloads if w not in WORKLOADS]
    if bad:
        p.error(f"unknown workload(s) {', '.join(bad)}; choose from {', '.join(WORKLOADS)}")
    return report(a.workloads, "quick" if a.quick else "full", a.reps, not a.no_peers)


if __name__ == "__main__":
    main()
