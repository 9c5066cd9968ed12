"""The one exception type that means "the user asked for something we cannot do": the CLI prints its message on one
line and exits 2 (no traceback unless --debug). Everything else is a bug and keeps its traceback."""


class UserError(Exception):
    """Bad input or an unmet requirement; the message names the fix."""


def not_a_file(path, fix: str) -> UserError:
    """A path that should name a file but does not: a folder said as one (it once read "no such file"), or missing."""
    import os

    what = "a folder, not a file" if os.path.isdir(path) else "no such file"
    return UserError(f"{path}: {what}; {fix}")
