"""``python -m gflow``: the same as the ``gflow`` command."""

import sys

from gflow.cli.main import main

sys.exit(main())
