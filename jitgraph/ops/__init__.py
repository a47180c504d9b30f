"""The primitives, one module per family (`elementwise`, `reduce`, `shape`, `index`, `linalg`,
`control`), the registry they register into (`registry`), and the scalar language of
elementwise expressions (`scalar`).

Importing `jitgraph` imports every family (see `jitgraph/__init__.py`); this package's own
import registers nothing, so that the layers below the families (`graph`, `core`,
`numpy_api`) can read the registry without importing the families that build on them.
Adding a primitive: docs/architecture.md ("Adding a primitive").
"""
