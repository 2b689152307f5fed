"""torchrun worker: train a run with the engine (config given as a YAML file argument)."""

from __future__ import annotations

import sys

from mr2.config import load_config
from mr2.engine import train

if __name__ == "__main__":
    train(load_config(sys.argv[1]), quiet=True)
