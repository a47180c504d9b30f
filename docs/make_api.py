"""Write docs/api.md, the API reference, from the docstrings of jitgraph's public names.

    python docs/make_api.py          # rewrite docs/api.md
    python docs/make_api.py --check  # exit 1 if docs/api.md is out of date (the tests run this)

Sections follow `jitgraph.__all__` (plus `jitgraph.distributed`); classes list their
public methods and properties. Nothing here is written by hand: edit the docstrings.
"""
import inspect
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import jitgraph as jg  # noqa: E402
from jitgraph.codegen.memory import MemoryReport  # noqa: E402

SECTIONS = [
    ("Differentiation and compilation", ["value_and_grad", "grad", "jit_grad", "jit", "hvp", "JitFunction",
                                         "Lowered", "CacheInfo", "RetraceWarning", "CompileWarning"]),
    ("Derivatives beyond the gradient", ["vjp", "jvp", "jacobian", "jacrev", "jacfwd", "hessian",
                                         "check_grads"]),
    ("Memory", ["checkpoint", "memory_report", "MemoryBudgetError", MemoryReport]),
    ("Control flow", ["cond", "fori_loop", "scan", "while_loop"]),
    ("Graphs", ["make_graph", "trace_graph", "eval_graph", "evaluate", "Graph", "Node"]),
    ("Export and pictures", ["export_onnx", "to_dot", "render"]),
    ("Numerics", ["logsumexp", "softmax", "log_softmax", "sigmoid", "stop_gradient"]),
    ("Pytrees", ["tree_flatten", "tree_unflatten", "tree_map"]),
    ("Errors", ["JitgraphError", "TracingError", "NotSupportedError", "ShapeError", "GradError",
                "GradientCutWarning"]),
    ("Past one machine (jitgraph.distributed)", [jg.distributed.value_and_grad]),
]


def _signature(obj):
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


def _members(cls):
    out = []
    for name, member in sorted(vars(cls).items()):
        if name.startswith("_"):
            continue
        doc = inspect.getdoc(member.fget if isinstance(member, property) else member)
        if not doc:
            continue
        if isinstance(member, property):
            out.append((f"`.{name}`", doc))
        elif callable(member):
            out.append((f"`.{name}{_signature(member)}`", doc))
    return out


def _entry(obj, qual):
    doc = inspect.getdoc(obj) or ""
    if inspect.isclass(obj):
        head = f"### class `{qual}`"
        if not issubclass(obj, BaseException):
            sig = _signature(obj)
            head = f"### class `{qual}{sig}`" if sig != "(...)" else head
        lines = [head, "", doc, ""]
        for name, mdoc in _members(obj):
            lines += [f"- {name}: " + mdoc.replace("\n", "\n  "), ""]
        return lines
    return [f"### `{qual}{_signature(obj)}`", "", doc, ""]


def build():
    if set(jg.__all__) - {n for _, names in SECTIONS for n in names if isinstance(n, str)}:
        missing = set(jg.__all__) - {n for _, names in SECTIONS for n in names if isinstance(n, str)}
        raise SystemExit(f"docs/make_api.py: public names without a section: {sorted(missing)}")
    lines = ["# jitgraph API reference", "",
             "Generated from the docstrings by `python docs/make_api.py`; `help(jg.<name>)` shows the same.",
             "`import jitgraph as jg`.", ""]
    for title, names in SECTIONS:
        lines += [f"## {title}", ""]
        for n in names:
            if isinstance(n, str):
                lines += _entry(getattr(jg, n), f"jg.{n}")
            else:
                mod = n.__module__
                qual = f"{'jg.distributed' if mod == 'jitgraph.distributed' else mod}.{n.__qualname__}"
                lines += _entry(n, qual)
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    path = os.path.join(HERE, "api.md")
    text = build()
    if "--check" in argv:
        with open(path, encoding="utf-8") as f:
            if f.read() != text:
                print("docs/api.md is out of date: run python docs/make_api.py", file=sys.stderr)
                return 1
        return 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
