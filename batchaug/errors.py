"""Error types shared by the command line and the modules it drives; imports neither."""
from __future__ import annotations


class CLIError(Exception):
    """A user-facing command-line failure: printed as one line, exit status 2."""

    def __init__(self, message: str, prog: str = "batchaug") -> None:
        super().__init__(message)
        self.prog = prog
