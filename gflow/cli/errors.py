"""Errors that the command line reports in one line with exit status 2."""

from gflow.runs.config import ConfigError


class UsageError(ConfigError):
    """A bad option or setting from the user: the message names it and the fix.

    A ``ConfigError`` raised by a configuration reads the same way; the command
    line prints either in one line, exit status 2.
    """
