"""The ``gflow`` sub-commands: one module each, each with ``register(subparsers)``.

A module's ``register`` adds its parser and sets ``handler=run``; ``run(args)`` returns
the exit status. Add a command by writing a module and listing it here.
"""

from gflow.cli import compare, flow, report, sweep, text, train

COMMANDS = [flow, sweep, compare, text, train, report]
