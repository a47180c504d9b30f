"""The `jitgraph` command (bench, show), benchmarks/run.py, and the examples."""
import io
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

import jitgraph as jg
from jitgraph import bench, cli

pytestmark = pytest.mark.xdist_group("cli")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(argv, capsys):
    """(exit status, stdout, stderr) of `jitgraph *argv`, in this process."""
    try:
        rc = cli.main(argv)
    except SystemExit as e:       # argparse's own errors and --help
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def run_py(args, cwd=ROOT, timeout=120):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


LOSSES = textwrap.dedent("""
    import numpy as np

    def loss(w, b, x, y):
        return np.sum((np.tanh(x @ w + b) - y) ** 2)

    def scaled(x, s=2.0, mode="square"):
        return np.sum((x * s) ** 2) if mode == "square" else np.sum(x * s)

    def branchy(x):
        if np.sum(x) > 0:
            return np.sum(x)
        return -np.sum(x)
""")


@pytest.fixture
def losses(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))     # show puts the file's folder on sys.path
    path = tmp_path / "losses.py"
    path.write_text(LOSSES)
    return path


LOSS_SHAPES = ["--shape", "w=4x3", "--shape", "b=3", "--shape", "x=5x4", "--shape", "y=5x3"]


# ---- bench ----------------------------------------------------------------------------------


def ratio_fits(printed, num, den):
    """Whether `printed` (2 decimals) is num/den, both printed with 3 decimals."""
    r = 5e-4
    return (num - r) / (den + r) - 0.005 <= printed <= (num + r) / max(den - r, 1e-12) + 0.005


def test_bench_prints_table_and_saves_plot(tmp_path, capsys):
    png = tmp_path / "bench.png"
    rc, out, err = run_cli(["bench", "--tiny", "--no-peers", "--reps", "2", "--plot", str(png), "w1", "w5"],
                           capsys)
    assert rc == 0, err
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("workload"))
    columns = re.split(r"\s{2,}|\s(?=\S)", lines[head])
    for col in ("numpy", "eager", "jit_grad", "jit", "fwd", "grad/fwd", "np/jit", "eager/jit", "1st", "kernel"):
        assert col in columns, lines[head]
    assert "jax" not in lines[head] and "torch" not in lines[head]   # --no-peers
    rows = {line.split()[0]: line.split() for line in lines[head + 1:head + 3]}
    assert sorted(rows) == ["w1", "w5"]
    for cells in rows.values():
        times = [float(c) for c in cells[1:5]]
        assert all(t > 0 for t in times)
        ratios = [float(c) for c in cells[5:8]]
        assert ratio_fits(ratios[0], times[2], times[3])      # grad/fwd
        assert ratio_fits(ratios[1], times[0], times[2])      # np/jit
        assert ratio_fits(ratios[2], times[1], times[2])      # eager/jit
        assert re.fullmatch(r"\d+\.\d\ds", cells[8]) and cells[9] in ("compiled", "disk", "reused")
    assert "w1   elementwise sum(tanh(x*w+b)^2), 10k" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # progress goes to stderr, one line per step when stderr is not a terminal
    assert "[1/12 " in err and "w5: timing eager value_and_grad" in err


def test_table_columns_follow_the_rows():
    rows = [dict(name="w1", title="t", first_call_s=1.5, native="disk", numpy=4.0, eager=8.0,
                 jit_grad=2.0, jit_fwd=1.0, jax=3.0),
            dict(name="w3", title="t", first_call_s=0.5, native="compiled", numpy=1.0, eager=2.0,
                 jit_grad=1.0, jit_fwd=0.5)]
    text = bench.format_table(rows)
    head, r1, r3 = text.splitlines()[:3]
    assert "jax/jit" in head and "torch" not in head
    assert r1.split() == ["w1", "4.000", "8.000", "2.000", "1.000", "3.000",
                          "2.00", "2.00", "4.00", "1.50", "1.50s", "disk"]
    assert r3.split()[5] == "-" and r3.split()[-3] == "-"     # no JAX time, no JAX ratio
    assert "geometric mean numpy/jit_grad over 2 of w1,w3,w4,w6: 1.41x" in text


def test_a_broken_peer_is_skipped_with_a_note(monkeypatch, capsys):
    def broken(w):
        raise ImportError("jaxlib is missing")

    monkeypatch.setattr(bench, "available_peers", lambda: ["jax"])
    monkeypatch.setattr(bench, "_jax_fn", broken)
    (row,) = bench.run(["w5"], "tiny", reps=1, progress=False)
    assert "jax" not in row and row["jit_grad"] > 0
    assert "# skipping JAX: ImportError: jaxlib is missing" in capsys.readouterr().err


def test_median_time_budget_cuts_repetitions_of_slow_calls():
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.02)

    assert bench.median_time(slow, reps=7, warm=2, budget=0.01) >= 0.02
    assert len(calls) == 2 + 3            # at least 3 timed calls
    calls.clear()
    bench.median_time(slow, reps=1, warm=1, budget=0.01)
    assert len(calls) == 1 + 1            # never more than asked for
    calls.clear()
    bench.median_time(lambda: calls.append(1), reps=7, warm=2, budget=1.0)
    assert len(calls) == 2 + 7            # fast calls keep every repetition


def test_progress_redraws_one_line_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    s = Tty()
    p = bench.Progress(4, stream=s, width=8)
    p.start("w1: first")
    p.done()
    p.done()
    p.start("w2")
    p.close()
    text = s.getvalue()
    assert "\n" not in text
    assert "[........] 0/4" in text and "[####....] 2/4" in text and "w2" in text
    assert text.endswith("\r")        # erased: the table starts on a clean line


def test_benchmarks_run_py_keeps_its_command_line():
    r = run_py(["benchmarks/run.py", "w5", "--no-peers", "--reps", "1"])
    assert r.returncode == 0, r.stderr
    assert "full sizes" in r.stdout and re.search(r"^w5 .* (compiled|disk|reused)$", r.stdout, re.M)
    r = run_py(["benchmarks/run.py", "w7"])
    assert r.returncode == 2 and "unknown workload(s) w7" in r.stderr


def test_workloads_module_is_the_installed_one():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import workloads
    finally:
        sys.path.pop(0)
    assert workloads.WORKLOADS is bench.WORKLOADS
    assert workloads.WORKLOADS["w1"]["title"] == "elementwise sum(tanh(x*w+b)^2), 4M"
    assert bench.size_params("w2", "default") == dict(B=512, D=128, H=256, C=10)


# ---- show -----------------------------------------------------------------------------------


def test_show_prints_graph_groups_and_source(losses, capsys):
    rc, out, err = run_cli(["show", f"{losses}:loss", *LOSS_SHAPES, "--argnums", "w,b", "--source"], capsys)
    assert rc == 0, err
    assert "loss" in out and "value and gradient w.r.t. w, b" in out
    assert "w: float64[4,3]" in out
    assert "{ lambda a:f64[4,3] b:f64[3] c:f64[5,4] d:f64[5,3] ." in out
    assert "# ---- backward (reverse sweep) ----" in out
    # x @ w (4 terms, 3 columns) fuses into the loop; w's gradient (5 terms) is BLAS's
    assert re.search(r"== fusion: 1 fused loop group, \d+ steps ==", out) and ": matmul -> " in out
    assert "== generated source" in out and "def kernel(dims" in out
    assert ("== memory ==" in out) == hasattr(jg.Lowered, "memory")
    assert re.search(r"codegen \+ compile \d+ ms \(kernel: (compiled|disk|reused)\)", out)


def test_show_memory_report_with_remat(losses, capsys):
    rc, out, err = run_cli(["show", f"{losses}:loss", *LOSS_SHAPES, "--grad", "--remat", "1G"], capsys)
    assert rc == 0, err
    assert "== memory ==" in out and "predicted peak" in out and "stored for the backward pass" in out
    assert "rematerialization                                  1000000000:" in out


def test_show_forward_float32_with_defaults(losses, capsys):
    rc, out, err = run_cli(["show", f"{losses}:scaled", "--shape", "x=8", "--dtype", "float32"], capsys)
    assert rc == 0, err
    assert ": forward" in out and "x: float32[8]" in out and "mode = 'square' (default)" in out
    assert "{ lambda a:f32[8] ." in out and "integer_pow[p=2]" in out   # s and mode: constants
    assert "backward" not in out and "generated source" not in out


def test_show_module_syntax_from_the_command_line(losses):
    r = run_py(["-m", "jitgraph", "show", "losses:loss", *LOSS_SHAPES, "--grad", "--no-fusion"],
               cwd=losses.parent)
    assert r.returncode == 0, r.stderr
    assert "value and gradient w.r.t. w\n" in r.stdout and re.search(r"traced graph, \d+ nodes", r.stdout)
    assert "u:f64[4,3] = matmul t s\n  in (k, u) }" in r.stdout      # the gradient of w only
    assert "fusion" not in r.stdout


@pytest.mark.parametrize("argv, message", [
    ([], "choose a command"),
    (["frobnicate"], "invalid choice"),
    (["show", "{losses}:loss", "--shape", "w=4x3"], "no --shape for parameter(s) b, x, y of loss(w, b, x, y)"),
    (["show", "{losses}:loss", *LOSS_SHAPES, "--shape", "z=3"], "--shape given for z, not a positional"),
    (["show", "{losses}:loss", "--shape", "w=4by3"], "'4by3' is not a shape"),
    (["show", "{losses}:loss", "--shape", "w=4x3:complex64"], "dtype complex64 is not supported"),
    (["show", "{losses}:loss", *LOSS_SHAPES, "--dtype", "float99"], "'float99' is not a NumPy dtype"),
    (["show", "{losses}", "--shape", "w=4x3"], "expected MODULE:FUNCTION or path/to/file.py:FUNCTION"),
    (["show", "{losses}:nope"], "has no attribute 'nope' (functions there: branchy, loss, scaled)"),
    (["show", "no_such_module_here:f"], "cannot import module 'no_such_module_here'"),
    (["show", "{missing}:f"], "no such file"),
    (["show", "{losses}:loss", *LOSS_SHAPES, "--argnums", "q"], "'q' is neither a position nor a parameter"),
    (["show", "{losses}:loss", *LOSS_SHAPES, "--argnums", "7"], "position 7 is out of range"),
    (["show", "{losses}:scaled", "--shape", "x=3", "--argnums", "s"], "cannot differentiate s: it has no --shape"),
    (["show", "{losses}:loss", *LOSS_SHAPES, "--source", "--no-fusion"], "--source needs code generation"),
    (["show", "{losses}:branchy", "--shape", "x=3"], "TracingError: bool() of a traced value"),
    (["show", "{losses}:loss", "--shape", "w=4x3", "--shape", "b=3", "--shape", "x=5x3", "--shape", "y=5x3"],
     "ShapeError: matmul"),
    (["show", "{losses}:loss", *LOSS_SHAPES, "--remat", "half"], "--remat takes none, sqrt or a byte budget"),
    (["show", "{losses}:loss", *LOSS_SHAPES, "--remat", "sqrt"], "--remat applies to gradients; add --grad"),
    (["show", "{losses}:loss", *LOSS_SHAPES, "--grad", "--remat", "10"],
     "MemoryBudgetError: remat budget of 10 bytes cannot be met: the smallest predicted peak is"),
    (["bench", "w9"], "unknown workload(s) w9"),
    (["bench", "--reps", "x"], "invalid int value"),
    (["bench", "--plot", "{missing}/b.png"], "does not exist"),
])
def test_errors_are_one_line_and_exit_2(argv, message, losses, capsys):
    argv = [a.format(losses=losses, missing=losses.parent / "missing") for a in argv]
    rc, out, err = run_cli(argv, capsys)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jitgraph") and "error:" in lines[0], err
    assert message in lines[0]
    assert "Traceback" not in err


def test_plot_without_matplotlib_is_a_clear_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bench, "plot_available", lambda: False)
    rc, out, err = run_cli(["bench", "--tiny", "--plot", str(tmp_path / "b.png"), "w5"], capsys)
    assert rc == 2 and "pip install 'jitgraph[plot]'" in err
    assert out == ""     # refused before measuring anything


def test_help_and_entry_points():
    r = run_py(["-m", "jitgraph", "bench", "--help"])
    assert r.returncode == 0 and "--full" in r.stdout and "--plot" in r.stdout and "--tiny" not in r.stdout
    try:
        import tomllib
    except ImportError:      # Python 3.10
        return
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        target = tomllib.load(f)["project"]["scripts"]["jitgraph"]
    assert target == "jitgraph.cli:main" and callable(cli.main)


# ---- examples -------------------------------------------------------------------------------


def test_train_mlp_example():
    r = run_py(["examples/train_mlp.py", "--epochs", "3", "--n", "1024", "--hidden", "16"])
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert re.search(r"median time per epoch: eager [\d.]+ ms, jit_grad [\d.]+ ms", out)
    acc = re.search(r"test accuracy: eager ([\d.]+), jit_grad ([\d.]+)", out)
    assert acc and float(acc.group(1)) > 0.8 and float(acc.group(1)) == float(acc.group(2))
    diff = float(re.search(r"final weights: (\S+)", out).group(1))
    assert diff < 1e-10


def test_checkpointing_example():
    r = run_py(["examples/checkpointing.py", "--depth", "12", "--width", "8", "--batch", "16",
                "--steps", "3", "--reps", "1"])
    assert r.returncode == 0, r.stderr
    out = r.stdout
    rows = re.findall(r"^(store everything|remat=\"sqrt\"|jg.checkpoint per block|remat=\d+ \(bytes\))\s+"
                      r"([\d.]+) MiB\s+([\d.]+) MiB.*(same bits)$", out, re.M)
    assert len(rows) == 4, out
    assert "rematerialization                                  'sqrt'" in out
    losses = [float(v) for v in re.findall(r"loss ([\d.]+)", out)]
    assert len(losses) == 2 and losses[1] < losses[0]
