"""The design document's running example, L = (w*x + b - y)^2, forward and backward.

Prints the traced forward graph, the joint forward+backward graph, and the
gradients dL/dw = 2(wx+b-y)x and dL/db = 2(wx+b-y) computed eagerly and from
the graph. x and y are not differentiated, so no adjoint nodes exist for them.
"""
import numpy as np

import jitgraph as jg


def loss(w, x, b, y):
    return (w * x + b - y) ** 2


def main():
    w, x, b, y = np.float64(1.5), np.float64(2.0), np.float64(0.5), np.float64(1.0)
    print("L = (w*x + b - y)^2 at w=%g x=%g b=%g y=%g" % (w, x, b, y))
    print("\nforward graph:")
    print(jg.make_graph(loss)(w, x, b, y))
    joint = jg.make_graph(loss, argnums=(0, 2), grad=True)(w, x, b, y).verify()
    print("\nforward + backward graph (gradients w.r.t. w and b):")
    print(joint)
    value, (gw, gb) = jg.value_and_grad(loss, argnums=(0, 2))(w, x, b, y)
    r = w * x + b - y
    print(f"\neager:       L = {value:g}, dL/dw = {gw:g}, dL/db = {gb:g}")
    gvalue, (ggw, ggb) = jg.eval_graph(joint, w, x, b, y)
    print(f"graph:       L = {gvalue:g}, dL/dw = {ggw:g}, dL/db = {ggb:g}")
    print(f"closed form: L = {r * r:g}, dL/dw = 2(wx+b-y)x = {2 * r * x:g}, dL/db = 2(wx+b-y) = {2 * r:g}")


if __name__ == "__main__":
    main()
