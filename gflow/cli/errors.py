"""Errors that the command line reports in one line with exit status 2."""


class UsageError(ValueError):
    """A bad setting from the user: the message names the setting and the fix."""
