"""``python -m spmlkit``: the same command line as ``spmlkit`` (and what ``torchrun -m`` launches)."""

import sys

from .cli import main

sys.exit(main())
