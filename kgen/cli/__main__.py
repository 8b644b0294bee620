"""``python -m kgen.cli``: the `kgen` command."""

import sys

from kgen.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
