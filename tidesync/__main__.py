"""`python -m tidesync`: the `tidesync` command."""

import sys

from tidesync.entrypoints.cli import main

if __name__ == "__main__":
    sys.exit(main())
