"""The CLI's one error type: raised anywhere below a command, printed once by main()."""

from __future__ import annotations


class CliError(Exception):
    """A one-line message for the user and the exit code it means (2 bad input, 3 no GPU...)."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code
