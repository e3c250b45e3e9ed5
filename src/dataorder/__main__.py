"""``python -m dataorder``: the same command line as the ``dataorder`` script."""

from __future__ import annotations

from dataorder.tools.cli import main

# The guard matters: `dataorder demo` starts worker processes, and Python's forkserver and spawn
# start methods import the main module in each of them.
if __name__ == "__main__":
    raise SystemExit(main())
