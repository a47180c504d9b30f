"""Draw the README's pictures of the running example L = (w*x + b - y)^2.

Writes, beside this script:

* images/seed_forward.svg: the traced forward graph;
* images/seed_backward.svg: the joint forward+backward graph for the gradients
  with respect to w and b (x and y are not differentiated, so no adjoint nodes
  exist for them).

Run from anywhere with Graphviz installed: `python docs/make_images.py`.
"""
import os

import numpy as np

import jitgraph as jg
from jitgraph.viz import render

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES = ["w", "x", "b", "y"]


def loss(w, x, b, y):
    return (w * x + b - y) ** 2


def main():
    args = (np.float64(1.5), np.float64(2.0), np.float64(0.5), np.float64(1.0))
    out_dir = os.path.join(HERE, "images")
    os.makedirs(out_dir, exist_ok=True)
    forward = jg.make_graph(loss)(*args).verify()
    joint = jg.make_graph(loss, argnums=(0, 2), grad=True)(*args).verify()
    pictures = [
        ("seed_forward.svg", forward, "forward graph of L = (w*x + b - y)^2"),
        ("seed_backward.svg", joint, "forward + backward graph: dL/dw and dL/db in one reverse sweep"),
    ]
    for fname, graph, title in pictures:
        path = render(graph, os.path.join(out_dir, fname), input_names=NAMES, title=title,
                      legend=True)
        print("wrote", os.path.relpath(path, os.getcwd()))


if __name__ == "__main__":
    main()
