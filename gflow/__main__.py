"""``python -m gflow``: the same as the ``gflow`` command."""

import sys

from .cli import main

sys.exit(main())
