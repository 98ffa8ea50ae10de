"""Every exception batchaug raises on purpose, in one place (each is also importable where you
meet it: ``batchaug.CacheFormatError``, ``batchaug.data.DiskFullError``...). Imports nothing
from batchaug.

Each subclasses the built-in error it refines, so ``except ValueError`` / ``except OSError``
keep working.

Also the one way a message tells the user what to change: ``hint(python, cli)`` gives the
Python wording (``"pass overwrite=True"``) in Python and the flag wording (``"add
--overwrite"``) while the command line runs (``command_line()``), so a library message
raised under ``batchaug cache build`` speaks flags and the same message raised in a script
speaks arguments.

Example:
    >>> from batchaug.errors import CacheFormatError
    >>> issubclass(CacheFormatError, ValueError)
    True
"""
from __future__ import annotations

import contextlib
import contextvars
import os
from typing import Iterator, Union

__all__ = ["BadImageError", "CacheFormatError", "CLIError", "DeviceMemoryError", "DiskFullError"]

_ON_COMMAND_LINE: "contextvars.ContextVar[bool]" = contextvars.ContextVar(
    "batchaug_on_command_line", default=False)


class CLIError(Exception):
    """A user-facing command-line failure: printed as one line, exit status 2."""

    def __init__(self, message: str, prog: str = "batchaug") -> None:
        super().__init__(message)
        self.prog = prog


class CacheFormatError(ValueError):
    """A cache directory is missing, truncated, corrupted, foreign or from a newer version.

    ``path`` is the offending file (or directory).
    """

    def __init__(self, path: Union[str, os.PathLike], problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)


class DeviceMemoryError(MemoryError):
    """Raised before allocating a cache that does not fit in the device's free memory."""

    def __init__(self, message: str, needed: int, free: int) -> None:
        super().__init__(message)
        self.needed = needed
        self.free = free


class BadImageError(ValueError):
    """An image file that cannot be read or decoded; the message names the file."""


class DiskFullError(OSError):
    """Not enough free space for the cache; nothing is left behind at or next to ``path``."""


@contextlib.contextmanager
def command_line() -> Iterator[None]:
    """Within this block, ``hint`` gives the command-line wording (``batchaug.cli`` uses it)."""
    token = _ON_COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _ON_COMMAND_LINE.reset(token)


def hint(python: str, cli: str) -> str:
    """``python`` in a script, ``cli`` under the command line: the wording of a fix.

    Example:
        >>> f"{hint('pass overwrite=True', 'add --overwrite')} to replace it"
        'pass overwrite=True to replace it'
    """
    return cli if _ON_COMMAND_LINE.get() else python
