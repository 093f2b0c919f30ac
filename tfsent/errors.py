"""The one base class for mistakes a user can fix (a missing file, a bad key or value, a bad checkpoint or row).

Entry points print such an error as one line, ``error: <message>``, and exit with status 2
(:mod:`tfsent.runtime.cli`); anything else is a bug and keeps its traceback. Each concern keeps its own subclass
(``DataError``, ``ConfigError``, ``CheckpointError``, ...) next to the code that raises it.
"""


class UserError(ValueError):
    """A mistake in the user's input, config or files; the message names the file, line or key.

    Attributes:
        hint: an optional one-line suggestion printed under the message (e.g. the override that fixes it).
    """

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.hint = hint
