"""Graph pictures: DOT text structure, forward/backward styling, fusion clusters, rendering."""
import os
import re
import shutil

import numpy as np
import pytest

import jitgraph as jg
from jitgraph import viz
from jitgraph.errors import JitgraphError
from jitgraph.viz import GraphvizError, GraphvizNotFoundError, STYLES, render, to_dot

pytestmark = pytest.mark.xdist_group("viz")

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' is not installed")

NODE_RE = re.compile(r'^\s*"([^"]+)" \[(.*)\];$')
EDGE_RE = re.compile(r'^\s*"([^"]+)" -> "([^"]+)"(?: \[(.*)\])?;$')
ATTR_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse(dot):
    """(nodes: id -> attrs, edges: [(src, dst, attrs)], clusters: name -> [ids]) from to_dot's text."""
    nodes, edges, clusters = {}, [], {}
    current = None
    for line in dot.splitlines():
        m = re.match(r'^\s*subgraph "(cluster_[^"]+)" \{$', line)
        if m:
            current = m.group(1)
            clusters[current] = []
            continue
        if line.strip() == "}":
            current = None
            continue
        m = NODE_RE.match(line)
        if m and " -> " not in line:
            nodes[m.group(1)] = dict(ATTR_RE.findall(m.group(2)))
            if current:
                clusters[current].append(m.group(1))
            continue
        m = EDGE_RE.match(line)
        if m:
            edges.append((m.group(1), m.group(2), dict(ATTR_RE.findall(m.group(3) or ""))))
    return nodes, edges, clusters


def seed_loss(w, x, b, y):
    return (w * x + b - y) ** 2


SEED_ARGS = (1.5, 2.0, 0.5, 1.0)


@pytest.fixture
def joint():
    return jg.make_graph(seed_loss, argnums=(0, 2), grad=True)(*SEED_ARGS)


def mlp_loss(w, b, x, y):
    return np.sum((np.tanh(x @ w + b) - y) ** 2)


def mlp_args():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((4, 3)), rng.standard_normal(3), rng.standard_normal((5, 4)),
            rng.standard_normal((5, 3)))


def test_dot_text_structure(joint):
    dot = to_dot(joint)
    assert dot.startswith('digraph "seed_loss" {') and dot.rstrip().endswith("}")
    assert dot.count("{") == dot.count("}")
    nodes, edges, _ = parse(dot)
    names = joint.names()
    ids = {names[n.id] for n in joint.nodes}
    outs = {f"out_{k}" for k in range(len(joint.outputs))}
    assert set(nodes) == ids | outs
    visible = [(s, d) for s, d, a in edges if a.get("style") != "invis"]
    expected = [(names[i.id], names[n.id]) for n in joint.nodes for i in n.inputs]
    expected += [(names[n.id], f"out_{k}") for k, n in enumerate(joint.outputs)]
    assert visible == expected                   # operand order kept (graph ordering="in")
    assert 'ordering="in"' in dot
    # labels follow print(graph): "e = mul" and the type
    assert nodes["e"]["label"] == "e = mul\\nf64[]"
    assert nodes["h"]["label"] == "h = integer_pow[p=2]\\nf64[]"
    assert nodes["h"]["tooltip"] == "h:f64[] = integer_pow[p=2] g"
    assert to_dot(joint) == dot                  # deterministic
    assert joint.to_dot() == dot                 # the Graph method delegates


def test_forward_and_backward_nodes_are_distinct(joint):
    nodes, edges, _ = parse(to_dot(joint))
    names = joint.names()
    n_backward = 0
    for n in joint.nodes:
        attrs = nodes[names[n.id]]
        if n.op == "input":
            assert attrs["class"] == "jg-input" and attrs["shape"] == STYLES["input"]["shape"]
        elif n.op == "const":
            assert attrs["class"] == "jg-const" and attrs["shape"] == STYLES["const"]["shape"]
        elif n.id in joint.adjoint_ids:
            n_backward += 1
            assert attrs["class"] == "jg-backward"
            assert attrs["fillcolor"] == STYLES["backward"]["fillcolor"] and "dashed" in attrs["style"]
        else:
            assert attrs["class"] == "jg-forward"
            assert attrs["fillcolor"] == STYLES["forward"]["fillcolor"] and "dashed" not in attrs["style"]
    assert n_backward == 2                       # j = mul g 2, k = mul j x
    assert STYLES["backward"]["fillcolor"] != STYLES["forward"]["fillcolor"]
    for src, dst, attrs in edges:
        if dst in ("j", "k"):
            assert attrs["color"] == "#b91c1c"
        elif not dst.startswith("out_") and attrs.get("style") != "invis":
            assert "color" not in attrs
    # the forward graph has no backward styling at all
    fwd_nodes, _, _ = parse(to_dot(jg.make_graph(seed_loss)(*SEED_ARGS)))
    assert not any(a["class"] == "jg-backward" for a in fwd_nodes.values())


def test_inputs_constants_outputs(joint):
    nodes, edges, _ = parse(to_dot(joint, input_names=["w", "x", "b", "y"]))
    assert [nodes[k]["label"] for k in "abcd"] == ["w\\nf64[]", "x\\nf64[]", "b\\nf64[]", "y\\nf64[]"]
    assert nodes["i"]["label"] == "i = 2.0\\nf64[]" and nodes["i"]["shape"] == "note"
    out = [nodes[f"out_{k}"] for k in range(3)]
    assert [o["label"] for o in out] == ["value", "grad w", "grad b"]
    assert all(o["class"] == "jg-output" and o["shape"] == "invhouse" for o in out)
    assert {(s, d) for s, d, _ in edges if d.startswith("out_")} == {("h", "out_0"), ("k", "out_1"),
                                                                     ("j", "out_2")}
    assert len({STYLES[r]["shape"] for r in ("input", "const", "forward", "output")}) == 4
    with pytest.raises(JitgraphError, match="input_names"):
        to_dot(joint, input_names=["w"])
    fwd = to_dot(jg.make_graph(lambda x: (x + 1.0, x * 2.0))(np.ones(2)))
    fwd_nodes, _, _ = parse(fwd)
    assert fwd_nodes["out_0"]["label"] == "value 0" and fwd_nodes["out_1"]["label"] == "value 1"


def test_title_is_escaped(joint):
    dot = to_dot(joint, title='say "hi" \\ bye')
    assert 'label="say \\"hi\\" \\\\ bye"' in dot


def test_legend_lists_roles_present(joint):
    nodes, _, clusters = parse(to_dot(joint, legend=True))
    assert clusters["cluster_legend"] == ["legend_input", "legend_const", "legend_forward",
                                          "legend_backward", "legend_output"]
    nodes, _, clusters = parse(to_dot(jg.make_graph(seed_loss)(*SEED_ARGS), legend=True))
    assert "legend_backward" not in clusters["cluster_legend"]


def test_fusion_groups_are_clusters():
    from jitgraph.codegen import generate

    graph = jg.make_graph(mlp_loss, argnums=(0, 1), grad=True)(*mlp_args())
    part, _, _ = generate(graph)                  # partition and source; nothing is compiled
    groups = part.groups()
    assert groups
    # the groups are drawn on the graph they partition: the CPU target's rewrite of `graph`
    # (at these sizes the first layer's product, 4 terms per element, is a loop)
    drawn = part.graph
    assert drawn is not graph and to_dot(graph, groups=part) == to_dot(drawn, groups=part)
    nodes, _, clusters = parse(to_dot(graph, groups=part))
    names = drawn.names()
    assert list(clusters) == [f"cluster_group_{k}" for k in range(len(groups))]
    for k, g in enumerate(groups):
        assert clusters[f"cluster_group_{k}"] == [names[n.id] for n in g.nodes]
        assert f'label="group {g.seq}: loop over {g.shape}"' in to_dot(graph, groups=part)
    # every node is drawn exactly once, clustered or not
    assert set(nodes) == {names[n.id] for n in drawn.nodes} | {f"out_{k}" for k in range(3)}
    names = graph.names()
    # plain lists of nodes work too
    mine = [[n for n in graph.nodes if n.op == "mul"]]
    _, _, clusters = parse(to_dot(graph, groups=mine))
    assert clusters == {"cluster_group_0": [names[n.id] for n in mine[0]]}
    other = jg.make_graph(seed_loss)(*SEED_ARGS)
    with pytest.raises(JitgraphError, match="not a node of this graph"):
        to_dot(graph, groups=[other.nodes[-1:]])


@needs_dot
def test_render_svg_and_png(joint, tmp_path):
    svg = tmp_path / "joint.svg"
    assert render(joint, svg, input_names=["w", "x", "b", "y"], legend=True) == str(svg)
    text = svg.read_text()
    assert "<svg" in text and "grad w" in text
    assert re.search(r'class="node jg(-|&#45;)backward"', text)     # dot escapes "-" in SVG
    png = render(to_dot(joint), str(tmp_path / "joint.png"))
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert sorted(os.listdir(tmp_path)) == ["joint.png", "joint.svg"]   # no temporary files


@needs_dot
def test_render_errors(joint, tmp_path):
    bad = tmp_path / "bad.svg"
    with pytest.raises(GraphvizError, match="dot -Tsvg failed"):
        render("digraph { a -> }", bad)
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match="image format"):
        render(joint, tmp_path / "x.unknown")
    with pytest.raises(TypeError, match="DOT text"):
        render("digraph {}", tmp_path / "y.svg", legend=True)


def test_missing_dot_says_how_to_install(joint, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out = tmp_path / "g.svg"
    with pytest.raises(GraphvizNotFoundError) as info:
        render(joint, out)
    msg = str(info.value)
    assert "apt install graphviz" in msg and "brew install graphviz" in msg and "conda" in msg
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, JitgraphError)
    assert not out.exists()
    monkeypatch.setattr(viz.shutil, "which", lambda name: None)
    with pytest.raises(GraphvizNotFoundError, match="not on PATH"):
        viz.find_dot()
    assert to_dot(joint).startswith("digraph")    # DOT text needs no Graphviz
