"""The API reference (docs/api.md) is generated from docstrings, and every public name has one."""
import inspect
import os
import subprocess
import sys

import jitgraph as jg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_public_name_has_a_docstring():
    missing = [n for n in jg.__all__ if not inspect.getdoc(getattr(jg, n))]
    assert not missing, f"public names without a docstring: {missing}"
    for cls in (jg.JitFunction, jg.Lowered):
        for name, member in vars(cls).items():
            if name.startswith("_"):
                continue
            target = member.fget if isinstance(member, property) else member
            if callable(target):
                assert inspect.getdoc(target), f"{cls.__name__}.{name} has no docstring"


def test_api_reference_is_up_to_date():
    r = subprocess.run([sys.executable, "docs/make_api.py", "--check"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_numpy_surface_in_readme_is_up_to_date():
    r = subprocess.run([sys.executable, "docs/make_surface.py", "--check"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
