"""The one exception type that means "the user asked for something we cannot do": the CLI prints its message on one
line and exits 2 (no traceback unless --debug). Everything else is a bug and keeps its traceback."""


class UserError(Exception):
    """Bad input or an unmet requirement; the message names the fix."""
