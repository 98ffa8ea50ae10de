"""Error types shared by the command line and the modules it drives; imports neither.

Also the one way a message tells the user what to change: ``hint(python, cli)`` gives the
Python wording (``"pass overwrite=True"``) in Python and the flag wording (``"add
--overwrite"``) while the command line runs (``command_line()``), so a library message
raised under ``batchaug cache build`` speaks flags and the same message raised in a script
speaks arguments.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

_ON_COMMAND_LINE: "contextvars.ContextVar[bool]" = contextvars.ContextVar(
    "batchaug_on_command_line", default=False)


class CLIError(Exception):
    """A user-facing command-line failure: printed as one line, exit status 2."""

    def __init__(self, message: str, prog: str = "batchaug") -> None:
        super().__init__(message)
        self.prog = prog


@contextlib.contextmanager
def command_line() -> Iterator[None]:
    """Within this block, ``hint`` gives the command-line wording (``batchaug.cli`` uses it)."""
    token = _ON_COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _ON_COMMAND_LINE.reset(token)


def on_command_line() -> bool:
    """True while ``batchaug``'s command line runs (inside ``command_line()``)."""
    return _ON_COMMAND_LINE.get()


def hint(python: str, cli: str) -> str:
    """``python`` in a script, ``cli`` under the command line: the wording of a fix.

    Example:
        >>> f"{hint('pass overwrite=True', 'add --overwrite')} to replace it"
        'pass overwrite=True to replace it'
    """
    return cli if _ON_COMMAND_LINE.get() else python
