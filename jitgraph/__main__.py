"""`python -m jitgraph`: the `jitgraph` command (see jitgraph/cli.py)."""
from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
