"""The version of jitgraph (pyproject.toml reads it from here)."""
__version__ = "0.1.0"
