"""Pictures of graphs: Graphviz DOT text, and rendering it with Graphviz's `dot`.

`to_dot(graph)` draws one box per node, labelled like its `print(graph)` line
(`e = mul`, then the type `f64[5,3]`), with edges from operands to users in
operand order. The roles are visually distinct:

* inputs: blue ellipses; constants: grey note shapes;
* forward ops: white rounded boxes;
* backward (adjoint) ops, the nodes the reverse sweep created
  (`graph.adjoint_ids`, the part after "---- backward" in `print(graph)`):
  red dashed rounded boxes, and the edges into them are red;
* outputs: green `invhouse` shapes named `value`, `grad <input>`, `aux k`
  (joint graphs) or `out k`, fed by bold green edges;
* fused loop groups (a `codegen.fusion.Partition`): dashed purple clusters.

`render(graph_or_dot, "out.svg")` runs `dot` (svg, png, pdf, ...) and needs
Graphviz installed; `to_dot` needs nothing.
"""
import os
import shutil
import subprocess
import uuid

from .errors import JitgraphError
from .dtypes import type_str

# role -> node attributes; roles are also written as the `class` attribute (used by SVG output)
STYLES = {
    "input": {"shape": "ellipse", "style": "filled", "fillcolor": "#dbeafe", "color": "#1e40af"},
    "const": {"shape": "note", "style": "filled", "fillcolor": "#f3f4f6", "color": "#6b7280"},
    "forward": {"shape": "box", "style": "rounded,filled", "fillcolor": "#ffffff", "color": "#374151"},
    "backward": {"shape": "box", "style": "rounded,filled,dashed", "fillcolor": "#fee2e2",
                 "color": "#b91c1c", "fontcolor": "#7f1d1d"},
    "output": {"shape": "invhouse", "style": "filled", "fillcolor": "#dcfce7", "color": "#15803d"},
}
EDGE_STYLES = {
    "forward": {},
    "backward": {"color": "#b91c1c"},
    "output": {"color": "#15803d", "style": "bold"},
}
CLUSTER_STYLE = {"style": "dashed,rounded", "color": "#7c3aed", "fontcolor": "#5b21b6"}

RENDER_FORMATS = ("svg", "png", "pdf", "ps", "eps", "jpg", "jpeg", "gif", "dot", "plain")


class GraphvizError(JitgraphError, RuntimeError):
    """Graphviz's `dot` failed to render a picture."""


class GraphvizNotFoundError(GraphvizError, FileNotFoundError):
    """Graphviz's `dot` program is not installed (or not on PATH)."""


def _quote(text):
    """A DOT double-quoted string; newlines become DOT's centred line breaks."""
    text = str(text).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + text.replace("\n", "\\n") + '"'


def _attrs(attrs):
    return "[" + ", ".join(f"{k}={_quote(v)}" for k, v in attrs.items()) + "]"


def _op_text(graph, node, names):
    """`mul`, `broadcast[shape=(5, 3)]`: the op part of the node's printed line."""
    rhs = graph.node_line(node, names).split(" = ", 1)[1]
    args = " ".join(names[i.id] for i in node.inputs)
    return rhs[:-len(args) - 1] if args and rhs.endswith(" " + args) else rhs


def _const_text(node):
    v = node.value
    if v is not None and getattr(v, "ndim", 0) == 0:
        return repr(v.item() if hasattr(v, "item") else v)
    return "const"


def _output_labels(graph, input_labels):
    """`value`, `grad <input>`, ..., `aux k` for a joint graph; `out k` otherwise."""
    n = len(graph.outputs)
    meta = graph.meta
    if not meta.get("grad") or meta.get("in_tree") is None:
        return ["value"] if n == 1 else [f"value {k}" for k in range(n)]
    in_tree = meta["in_tree"]
    starts, k = [], 0
    for child in in_tree.children:
        starts.append(k)
        k += child.num_leaves
    wrt = [starts[a] + j for a in meta.get("argnums", ()) for j in range(in_tree.children[a].num_leaves)]
    labels = ["value"] + [f"grad {input_labels[i]}" for i in wrt]
    return labels + [f"aux {k}" for k in range(n - len(labels))]


def _group_list(groups, graph):
    """[(label, [node, ...])] from a Partition, a Lowered, or an iterable of groups / node lists."""
    if groups is None:
        return []
    if hasattr(groups, "partition"):            # a jit Lowered
        groups = groups.partition
    if callable(getattr(groups, "groups", None)):
        groups = groups.groups()
    by_id = {n.id: n for n in graph.nodes}
    out = []
    for k, g in enumerate(groups):
        members = list(g.nodes) if hasattr(g, "nodes") else list(g)
        nodes = []
        for m in members:
            mid = getattr(m, "id", m)
            if mid not in by_id:
                raise JitgraphError(f"fusion group {k} contains {m!r}, which is not a node of this graph "
                                    "(pass the partition of the same graph)")
            nodes.append(by_id[mid])
        if hasattr(g, "shape") and hasattr(g, "seq"):
            label = f"group {g.seq}: loop over {tuple(g.shape)}"
        else:
            label = f"group {k}"
        out.append((label, nodes))
    return out


def _drawn_graph(graph, groups):
    """The graph to draw with `groups`: `graph`, or, when they are a Partition (or a Lowered's)
    made from a graph the CPU target rewrote (products of a few terms as loops, transposed
    products, `matmul_add`: codegen/products.py), that rewritten graph, whose nodes the groups
    hold."""
    part = groups.partition if hasattr(groups, "partition") else groups
    own = getattr(part, "graph", None)
    if own is None or own is graph or not hasattr(own, "nodes"):
        return graph
    ids = {n.id for n in graph.nodes}
    return graph if all(n.id in ids for n in own.nodes) else own


def to_dot(graph, groups=None, *, input_names=None, title=None, rankdir="TB", legend=False):
    """Graphviz DOT text for `graph`.

    Args:
        graph: a `Graph` (forward or joint forward+backward).
        groups: optional fused groups, drawn as clusters: a
            `codegen.fusion.Partition` (its loop groups), a `jit` `Lowered`, or
            an iterable of groups (objects with `.nodes`) or of node lists.
        input_names: display names for `graph.inputs` (default: the printing
            names a, b, ...), e.g. the function's parameter names.
        title: a caption (default: none).
        rankdir: Graphviz layout direction, "TB" (top to bottom) or "LR".
        legend: add a small legend of the node styles.

    Node ids in the text are the printing names of `print(graph)`, so the text
    is deterministic for a given graph structure. Groups of a graph the CPU target
    rewrote (a product of a few terms as a loop, say) are drawn on that graph.
    """
    graph = _drawn_graph(graph, groups)
    names = graph.names()
    labels = {n.id: names[n.id] for n in graph.nodes}
    if input_names is not None:
        if len(input_names) != len(graph.inputs):
            raise JitgraphError(f"input_names has {len(input_names)} names for {len(graph.inputs)} inputs")
        labels.update({n.id: str(nm) for n, nm in zip(graph.inputs, input_names)})
    adjoint = graph.adjoint_ids

    def role(node):
        if node.op in ("input", "const"):
            return node.op
        return "backward" if node.id in adjoint else "forward"

    def node_stmt(node):
        r = role(node)
        typ = type_str(node.shape, node.dtype)
        if r == "input":
            label = f"{labels[node.id]}\n{typ}"
        elif r == "const":
            label = f"{names[node.id]} = {_const_text(node)}\n{typ}"
        else:
            label = f"{names[node.id]} = {_op_text(graph, node, names)}\n{typ}"
        if r != "input":
            tooltip = graph.node_line(node, names)
        elif labels[node.id] != names[node.id]:
            tooltip = f"input {names[node.id]} ({labels[node.id]}): {typ}"
        else:
            tooltip = f"input {names[node.id]}: {typ}"
        attrs = dict(STYLES[r], label=label, tooltip=tooltip)
        attrs["class"] = f"jg-{r}"
        if r == "const" and node.id in adjoint:
            attrs["color"] = STYLES["backward"]["color"]
        return f"{_quote(names[node.id])} {_attrs(attrs)};"

    lines = [f"digraph {_quote(graph.meta.get('name') or 'graph')} {{"]
    gattrs = {"rankdir": rankdir, "ordering": "in", "fontname": "Helvetica", "fontsize": "11",
              "nodesep": "0.25", "ranksep": "0.3"}
    if title:
        gattrs.update(label=title, labelloc="t")
    lines.append(f"  graph {_attrs(gattrs)};")
    lines.append(f"  node {_attrs({'fontname': 'Helvetica', 'fontsize': '10', 'height': '0.3'})};")
    lines.append(f"  edge {_attrs({'color': '#4b5563', 'arrowsize': '0.6'})};")

    clustered = set()
    for k, (label, nodes) in enumerate(_group_list(groups, graph)):
        members = [n for n in nodes if n.id not in clustered and n.op not in ("input", "const")]
        if not members:
            continue
        lines.append(f"  subgraph {_quote(f'cluster_group_{k}')} {{")
        lines.append(f"    graph {_attrs(dict(CLUSTER_STYLE, label=label))};")
        for n in members:
            lines.append("    " + node_stmt(n))
            clustered.add(n.id)
        lines.append("  }")
    for node in graph.nodes:
        if node.id not in clustered:
            lines.append("  " + node_stmt(node))

    out_labels = _output_labels(graph, [labels[n.id] for n in graph.inputs])
    for k, (node, label) in enumerate(zip(graph.outputs, out_labels)):
        attrs = dict(STYLES["output"], label=label, tooltip=f"output {k}: {names[node.id]}")
        attrs["class"] = "jg-output"
        lines.append(f"  {_quote(f'out_{k}')} {_attrs(attrs)};")

    for node in graph.nodes:
        style = EDGE_STYLES["backward" if node.id in adjoint else "forward"]
        for inp in node.inputs:
            lines.append(f"  {_quote(names[inp.id])} -> {_quote(names[node.id])}"
                         + (f" {_attrs(style)}" if style else "") + ";")
    for k, node in enumerate(graph.outputs):
        lines.append(f"  {_quote(names[node.id])} -> {_quote(f'out_{k}')} {_attrs(EDGE_STYLES['output'])};")

    # inputs on the first rank and outputs on the last, each in order (invisible edges within a
    # rank fix the left-to-right order), so the picture reads like the argument list
    for rank, ids in (("source", [names[n.id] for n in graph.inputs]),
                      ("sink", [f"out_{k}" for k in range(len(graph.outputs))])):
        if ids:
            chain = f" {' -> '.join(_quote(i) for i in ids)} [style=\"invis\"];" if len(ids) > 1 else ""
            lines.append(f"  {{rank={rank}; {' '.join(_quote(i) for i in ids)};{chain}}}")
    if legend:
        present = {role(n) for n in graph.nodes} | ({"output"} if graph.outputs else set())
        lines += _legend(present)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _legend(present):
    items = [(r, text) for r, text in (("input", "input"), ("const", "constant"), ("forward", "forward op"),
                                       ("backward", "backward (adjoint) op"), ("output", "output"))
             if r in present]
    lines = ["  subgraph \"cluster_legend\" {",
             f"    graph {_attrs({'label': 'legend', 'style': 'rounded', 'color': '#d1d5db'})};"]
    for r, text in items:
        attrs = dict(STYLES[r], label=text)
        attrs["class"] = f"jg-legend-{r}"
        lines.append(f"    {_quote(f'legend_{r}')} {_attrs(attrs)};")
    if len(items) > 1:
        chain = " -> ".join(_quote(f"legend_{r}") for r, _ in items)
        lines.append(f"    {chain} [style=\"invis\"];")
    lines.append("  }")
    return lines


def find_dot():
    """Path of Graphviz's `dot` program; raises GraphvizNotFoundError when it is missing."""
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizNotFoundError(
            "rendering needs Graphviz's 'dot' program, which is not on PATH. Install Graphviz: "
            "'apt install graphviz' (Debian/Ubuntu), 'brew install graphviz' (macOS), "
            "'conda install -c conda-forge graphviz', or see https://graphviz.org/download/ "
            "(the 'graphviz' pip package alone does not provide 'dot'). to_dot() needs no Graphviz: "
            "its text can be rendered elsewhere")
    return exe


def render(graph_or_dot, path, format=None, **to_dot_kw):
    """Render a graph (or DOT text) to an image file with Graphviz's `dot`.

    Args:
        graph_or_dot: a `Graph` (drawn with `to_dot(graph, **to_dot_kw)`) or DOT text.
        path: output file; its extension picks the format (`.svg`, `.png`, `.pdf`, ...)
            unless `format` is given. Written atomically (temporary file, then rename).
        format: a Graphviz output format, overriding the extension.

    Returns:
        `path`, as a string.

    Raises:
        GraphvizNotFoundError: `dot` is not installed (the message says how to install it).
        GraphvizError: `dot` rejected the input or failed.
    """
    path = os.fspath(path)
    fmt = (format or os.path.splitext(path)[1].lstrip(".")).lower()
    if fmt not in RENDER_FORMATS:
        raise ValueError(f"cannot tell the image format from {path!r}: use one of the extensions "
                         f"{', '.join('.' + f for f in RENDER_FORMATS)} or pass format=")
    if isinstance(graph_or_dot, str):
        if to_dot_kw:
            raise TypeError(f"to_dot options {sorted(to_dot_kw)} given with DOT text")
        text = graph_or_dot
    else:
        text = to_dot(graph_or_dot, **to_dot_kw)
    exe = find_dot()
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    try:
        proc = subprocess.run([exe, f"-T{fmt}", "-o", tmp], input=text.encode(), capture_output=True)
        if proc.returncode != 0:
            raise GraphvizError(f"dot -T{fmt} failed (exit {proc.returncode}): "
                                f"{proc.stderr.decode(errors='replace').strip()}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


__all__ = ["to_dot", "render", "find_dot", "GraphvizError", "GraphvizNotFoundError", "STYLES"]
