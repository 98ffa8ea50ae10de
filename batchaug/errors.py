"""Every exception batchaug raises on purpose, in one place (each is also importable where you
meet it: ``batchaug.CacheFormatError``, ``batchaug.data.DiskFullError``...). Imports nothing
from batchaug.

Each subclasses the built-in error it refines, so ``except ValueError`` / ``except OSError``
keep working.

Example:
    >>> import batchaug
    >>> from batchaug.errors import CacheFormatError
    >>> try:
    ...     batchaug.DeviceCache.load("no-such-cache")
    ... except CacheFormatError as exc:
    ...     print("not a cache:", exc.path)
    not a cache: no-such-cache
"""
from __future__ import annotations

import os
from typing import Union

__all__ = ["BadImageError", "CacheFormatError", "CLIError", "DeviceMemoryError", "DiskFullError"]


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
