"""The design document's running example, L = (w*x + b - y)^2."""
import numpy as np

import jitgraph as jg


def loss(w, x, b, y):
    return (w * x + b - y) ** 2


ARGS = (np.float64(1.5), np.float64(2.0), np.float64(0.5), np.float64(1.0))


def test_eager_gradients_match_closed_form():
    w, x, b, y = ARGS
    value, (gw, gb) = jg.value_and_grad(loss, argnums=(0, 2))(*ARGS)
    r = w * x + b - y
    assert value == r * r
    assert gw == 2 * r * x
    assert gb == 2 * r


def test_joint_graph_has_no_adjoint_for_x_and_y():
    g = jg.make_graph(loss, argnums=(0, 2), grad=True)(*ARGS).verify()
    names = g.names()
    a, x_in, b_in, y_in = g.inputs
    backward = [n for n in g.nodes if n.id in g.adjoint_ids]
    # the backward nodes only compute 2r and 2r*x: one const, two muls
    assert sorted(n.op for n in backward) == ["const", "mul", "mul"]
    # forward graph is mul, add, sub, integer_pow
    fwd = [n.op for n in g.nodes if n.id not in g.adjoint_ids and n.op != "input"]
    assert fwd == ["mul", "add", "sub", "integer_pow"]
    # no backward node consumes y; gradient of w reads x, gradient of b does not
    assert all(y_in not in n.inputs for n in backward)
    gw_node, gb_node = g.outputs[1], g.outputs[2]
    assert x_in in gw_node.inputs
    assert names[gb_node.id] in str(g)
    value, (gw, gb) = jg.eval_graph(g, *ARGS)
    assert (value, gw, gb) == (6.25, 10.0, 5.0)
