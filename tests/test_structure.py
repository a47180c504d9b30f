"""The module graph: acyclic, no project module imported inside a function, every module importable
first in a fresh interpreter, and an import name a user's own `codegen.py` cannot shadow."""
import ast
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# folder -> the package it installs as (pyproject.toml maps codegen/ to jitgraph.codegen)
PACKAGES = {"jitgraph": "jitgraph", "codegen": "jitgraph.codegen"}


def _modules():
    """{module name: (path, is_package)} of every project module."""
    out = {}
    for folder, package in PACKAGES.items():
        base = os.path.join(ROOT, folder)
        for dirpath, _, files in os.walk(base):
            rel = os.path.relpath(dirpath, base)
            pkg = package if rel == "." else package + "." + rel.replace(os.sep, ".")
            for f in files:
                if f.endswith(".py"):
                    name = pkg if f == "__init__.py" else f"{pkg}.{f[:-3]}"
                    out[name] = (os.path.join(dirpath, f), f == "__init__.py")
    return out


MODULES = _modules()


def _resolve(module, is_package, node):
    """The project modules an import statement names (full dotted names)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "jitgraph"]
    base = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
    if target is None or target.split(".")[0] != "jitgraph":
        return []
    # `from package import submodule` imports the submodule
    subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
    return subs or [target]


def _imports(module):
    """(module-level imports, (line, name) of imports inside functions) of a project module."""
    path, is_package = MODULES[module]
    tree = ast.parse(open(path, encoding="utf-8").read())
    top, local = set(), []
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    inside = {id(n) for f in funcs for n in ast.walk(f) if n is not f}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = _resolve(module, is_package, node)
            if id(node) in inside:
                local += [(node.lineno, n) for n in names]
            else:
                top.update(names)
    return top, local


def test_no_project_module_is_imported_inside_a_function():
    found = [f"{os.path.relpath(MODULES[m][0], ROOT)}:{line} imports {name}"
             for m in MODULES for line, name in _imports(m)[1]]
    assert not found, "function-local imports of project modules:\n" + "\n".join(found)


def test_module_graph_is_acyclic():
    """Module-level imports between project modules form no cycle (the package's own
    __init__ imports its public modules; nothing imports it back)."""
    edges = {m: {t for t in _imports(m)[0] if t in MODULES and t != m} for m in MODULES}
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == "open":
                cycle = stack[stack.index(t):] + [t]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = "done"

    for m in sorted(MODULES):
        if m not in state:
            visit(m)


def test_the_code_generator_does_not_import_the_public_package():
    """codegen reads the IR and the registry, never jitgraph/__init__ (the version too)."""
    for m in MODULES:
        if m.startswith("jitgraph.codegen"):
            assert "jitgraph" not in _imports(m)[0], f"{m} imports the jitgraph package"


def test_every_module_imports_first_in_a_fresh_interpreter():
    """Imported first, each module pulls in what it needs in a working order (an import
    cycle hidden behind the package's import order would fail here)."""
    optional = ("cuda_runtime",)          # imports numba.cuda: only generated CUDA modules do
    names = sorted(m for m in MODULES if not m.endswith(optional) and not m.endswith("__main__"))
    code = textwrap.dedent(f"""
        import importlib, sys
        failed = []
        for name in {names!r}:
            for m in [m for m in sys.modules if m == "jitgraph" or m.startswith("jitgraph.")]:
                del sys.modules[m]
            try:
                importlib.import_module(name)
            except Exception as e:
                failed.append(f"{{name}}: {{type(e).__name__}}: {{e}}")
        print("\\n".join(failed))
        sys.exit(1 if failed else 0)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_users_codegen_module_does_not_shadow_the_code_generator(tmp_path):
    """A script beside its own codegen.py (and json.py-style generic names) still compiles."""
    (tmp_path / "codegen.py").write_text("raise ImportError('the user codegen module was imported')\n")
    (tmp_path / "script.py").write_text(textwrap.dedent("""
        import numpy as np
        import jitgraph as jg

        @jg.jit_grad
        def loss(w):
            return np.sum(np.tanh(w) ** 2)

        v, g = loss(np.linspace(-1.0, 1.0, 5))
        assert np.isclose(v, np.sum(np.tanh(np.linspace(-1.0, 1.0, 5)) ** 2))
        print("ok")
    """))
    r = subprocess.run([sys.executable, "script.py"], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
