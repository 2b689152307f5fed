"""``python -m mr2 ...``: the same as the ``mr2`` console script."""

from __future__ import annotations

import sys

from mr2.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
