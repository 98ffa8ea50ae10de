"""Replace a directory so that at every instant its path holds the complete old or new content.

Used by ``DeviceCache.save`` (``batchaug.data.format.save_cache``). The protocol, for ``PATH``
(after following a symlink to its target, so that the link survives and its target is
replaced):

1. Lock: ``flock`` on ``.NAME.lock`` next to ``PATH``, held for the whole save, so two saves of
   one path run one after the other and never touch each other's files.
2. Clean up: under the lock, no other save of ``PATH`` can be running, so any
   ``.NAME.tmp-PID-XXXXXXXX`` / ``.NAME.old-PID-XXXXXXXX`` (or a 0.1.0-style ``.NAME.tmp-`` /
   ``.NAME.old-`` + 12 hex digits) sibling was left by a save that was killed: it is removed if
   it holds nothing but cache files (or the streaming writer's work files) and its process is
   gone, except the staging directory of an interrupted ``write_cache`` (one with completed
   chunks in its ``progress.json``): ``resume=True`` claims it (``replace_directory(claim=...)``)
   and it is renamed and written on; any other save refuses to discard it unless
   ``overwrite=True`` (``keeper``), and ``interrupted_note`` describes it for ``load`` and
   ``batchaug cache info``.
3. Stage: the new content is written and fsynced into a fresh ``.NAME.tmp-PID-XXXXXXXX``.
4. Publish: ``renameat2(RENAME_EXCHANGE)`` swaps the staged directory and ``PATH`` in one atomic
   step (``rename`` when ``PATH`` does not exist yet); the parent directory is fsynced. The
   staged name now holds the old content, which is deleted (its directories made writable first,
   so a read-only old cache goes too). A kill before the swap leaves ``PATH`` old, after it new;
   either way the leftovers are removed by the next save of ``PATH`` (step 2).
5. Unlock: the lock file is removed.

On a filesystem without ``RENAME_EXCHANGE`` (not ext4/xfs/btrfs/tmpfs; NFS, for one) step 4 falls
back to two renames (``PATH`` to ``.NAME.old-...``, then the staged directory to ``PATH``): a kill
between them leaves ``PATH`` missing, the previous content in ``.NAME.old-...`` (which loading
names in its error) until the next save of ``PATH``.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import uuid
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from batchaug.errors import hint

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: saves of one path are not serialised
    fcntl = None  # type: ignore[assignment]

#: Files a cache directory may hold; a leftover holding anything else is never deleted.
CACHE_FILES = frozenset({"images.npy", "labels.npy", "meta.json", "images.bin", "index.npy",
                         "masks.npy", "boxes.npy", "box_valid.npy", "box_labels.npy",
                         "masks.bin"})
#: The streaming writer's work files (``batchaug.data.writer``), never in a published cache.
WORK_FILES = frozenset({"progress.json", "progress.json.new", "labels.part", "index.part",
                        "masks.part", "boxes.part"})
_FORMAT_NAME = "batchaug-cache"
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def _step(name: str) -> None:
    """Called between the protocol's steps; tests replace it to kill the process there."""


def leftover_pattern(name: str) -> "re.Pattern[str]":
    """Names of the hidden siblings a save of ``name`` makes: groups ``kind`` and ``pid``."""
    return re.compile(rf"^\.{re.escape(name)}\.(?P<kind>tmp|old)-"
                      rf"(?:(?P<pid>\d+)-[0-9a-f]{{8}}|[0-9a-f]{{12}})$")


def leftovers(path: Path) -> List[Path]:
    """The hidden siblings of ``path`` that a save of it made (alive or not), sorted."""
    pattern = leftover_pattern(path.name)
    try:
        return sorted(p for p in path.parent.iterdir() if pattern.match(p.name))
    except OSError:
        return []


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        # Not this process's: we hold the lock and have staged nothing yet. An earlier process
        # with the same pid (a restarted container) left it.
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: someone else's live process
        return True
    return True


def _is_ours(path: Path) -> bool:
    """A directory holding only cache files, or a batchaug cache (a user may add a file)."""
    try:
        if path.is_symlink() or not path.is_dir():
            return False
        names = {p.name for p in path.iterdir()}
        if names <= CACHE_FILES | WORK_FILES:
            return True
        meta = json.loads((path / "meta.json").read_text())
        return isinstance(meta, dict) and meta.get("format") == _FORMAT_NAME
    except (OSError, ValueError, RecursionError):
        return False


def remove_tree(path: Path) -> None:
    """``rm -rf path``, making our own read-only directories writable first."""
    if path.is_symlink() or not path.is_dir():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    # Deleting an entry needs write permission on its directory (not on the file); listing
    # one needs read+execute. chmod each directory before it is listed (top-down).
    with contextlib.suppress(OSError):
        os.chmod(path, stat.S_IMODE(path.stat().st_mode) | stat.S_IRWXU)
    for root, dirs, _ in os.walk(path):
        for d in dirs:
            full = os.path.join(root, d)
            if not os.path.islink(full):
                with contextlib.suppress(OSError):
                    os.chmod(full, stat.S_IMODE(os.lstat(full).st_mode) | stat.S_IRWXU)
    shutil.rmtree(path)


def dead_leftovers(path: Path, kind: str = "tmp") -> List[Path]:
    """Leftovers of ``kind`` whose process is gone (call with the lock held), newest first."""
    pattern = leftover_pattern(path.name)
    out = []
    for p in leftovers(path):
        m = pattern.match(p.name)
        if m.group("kind") == kind and not (m.group("pid") and _pid_alive(int(m.group("pid")))):
            out.append(p)
    return sorted(out, key=lambda p: p.stat().st_mtime_ns, reverse=True)


def read_progress(staging: Path) -> Optional[Tuple[int, int]]:
    """``(samples done, samples in all)`` of an interrupted streaming write staged in
    ``staging`` (its ``progress.json``), or None when it holds no completed chunk."""
    try:
        rec = json.loads((staging / "progress.json").read_text())
        chunks, total = int(rec["chunks"]), int(rec["job"]["samples"])
        done = min(total, chunks * int(rec["job"]["chunk_size"]))
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    return (done, total) if chunks > 0 else None


def keeper(path: Path, overwrite: bool) -> Callable[[Path], bool]:
    """A ``claim`` for ``replace_directory`` by a save that does not resume: it refuses
    (``FileExistsError``) to discard the completed chunks of an interrupted streaming write of
    ``path`` (hours of decoding at ImageNet scale) unless ``overwrite``; it never claims one."""
    def claim(leftover: Path) -> bool:
        found = read_progress(leftover)
        if found is None:
            return False  # not a resumable write: removed as any killed save's leftovers
        done, total = found
        what = f"an interrupted write of {path} ({done} of {total} samples done, in {leftover})"
        if not overwrite:
            raise FileExistsError(f"{what} would be lost; " + hint(
                "pass resume=True to continue it, or overwrite=True to discard it and start "
                "over", "add --resume to continue it, or --overwrite to discard it and start "
                "over"))
        warnings.warn(f"{what} is discarded ({hint('overwrite=True', '--overwrite')})",
                      stacklevel=6)
        return False
    return claim


def interrupted_note(path: Path) -> Optional[str]:
    """One sentence about an interrupted streaming write of ``path`` whose process is gone,
    waiting to be resumed (its staging directory and progress, how to continue or discard it),
    or None."""
    try:
        dead = dead_leftovers(path)
    except OSError:  # one vanished meanwhile: a save is cleaning up
        return None
    for staging in dead:
        found = read_progress(staging)
        if found is not None:
            how = hint("write_cache(..., resume=True) continues it, overwrite=True discards it",
                       "`batchaug cache build SRC OUT --resume` continues it, --overwrite "
                       "discards it")
            return (f"an interrupted write of {path} is in {staging} ({found[0]} of {found[1]} "
                    f"samples done); {how}")
    return None


def remove_leftovers(path: Path, keep: Optional[Path] = None) -> None:
    """Delete the leftovers of interrupted saves of ``path`` (call with the lock held)."""
    for p in leftovers(path):
        if p == keep:
            continue
        pid = leftover_pattern(path.name).match(p.name).group("pid")
        if pid is not None and _pid_alive(int(pid)):
            continue  # a live process without our lock (another host, no flock): not ours
        if _is_ours(p):
            try:
                remove_tree(p)
            except OSError as exc:  # e.g. someone else's files: never a reason to fail a save
                warnings.warn(f"could not remove {p}, left by an interrupted save of {path} "
                              f"({exc})", RuntimeWarning, stacklevel=5)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some filesystems refuse fsync on directories
        pass
    finally:
        os.close(fd)


_renameat2: Optional[Callable[..., int]] = None


def _exchange(a: Path, b: Path) -> None:
    """Atomically swap two directory entries (``renameat2(RENAME_EXCHANGE)``; ``OSError`` with
    one of ``_UNSUPPORTED`` where the system or filesystem lacks it)."""
    global _renameat2
    if _renameat2 is None:
        try:
            fn = ctypes.CDLL(None, use_errno=True).renameat2
        except (AttributeError, OSError):
            raise OSError(errno.ENOSYS, "renameat2 is not available") from None
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                       ctypes.c_uint]
        fn.restype = ctypes.c_int
        _renameat2 = fn
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a), None, str(b))


_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}


class _Lock:
    """An exclusive ``flock`` on ``path``, removed on release (safe: re-checked after locking)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> "_Lock":
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except PermissionError:  # another user's lock file: flock works read-only too
                fd = os.open(self.path, os.O_RDONLY)
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX)  # waits for another save of this path
                try:
                    same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
            except BaseException:
                os.close(fd)
                raise
            if same:  # not a lock file its previous holder unlinked while we waited
                self.fd = fd
                with contextlib.suppress(OSError):  # who holds it, for a curious human
                    os.ftruncate(fd, 0)
                    os.write(fd, f"{os.getpid()}\n".encode())
                return self
            os.close(fd)

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # before unlocking: a waiter then sees a stale inode, retries
        os.close(self.fd)


def resolve(path: Path) -> Path:
    """``path`` with symlinks followed: a save replaces a symlink's target, keeps the link."""
    if not path.is_symlink():
        return path
    try:
        return Path(os.path.realpath(path, strict=True))
    except FileNotFoundError:  # a dangling link: the save creates its target
        return Path(os.path.realpath(path))


@contextlib.contextmanager
def replace_directory(path: Path, check: Callable[[Path], None],
                      claim: Optional[Callable[[Path], bool]] = None,
                      keep: Optional[Callable[[BaseException], bool]] = None) -> Iterator[Path]:
    """Yield an empty staging directory; on normal exit, publish it at ``path`` atomically.

    ``check(path)`` runs under the lock before staging (raise to refuse). ``path`` must already
    be resolved (``resolve``). On an exception nothing changes at ``path`` and nothing is left.

    For a resumable write (``batchaug.data.writer``): ``claim(leftover)`` is asked, newest
    first, about each staging directory a dead process left; the first it accepts is renamed
    to this process's staging name and yielded with its content instead of an empty one (the
    other leftovers are removed as usual; ``claim`` may raise to refuse them all). ``keep(exc)``
    true leaves the staging directory in place after an exception, for a later claim; the next
    save of ``path`` that does not claim it removes it (step 2).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with _Lock(path.parent / f".{path.name}.lock"):
        _step("locked")
        reuse = None
        if claim is not None:
            reuse = next((p for p in dead_leftovers(path) if claim(p)), None)
        remove_leftovers(path, keep=reuse)
        _step("cleaned")
        check(path)
        tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        staged = path.parent / f".{path.name}.tmp-{tag}"
        if reuse is not None:
            os.rename(reuse, staged)
        else:
            staged.mkdir()
        _step("staged")
        try:
            yield staged
            _fsync_dir(staged)
            _step("written")
            old = _publish(staged, path, path.parent / f".{path.name}.old-{tag}")
        except BaseException as exc:
            if keep is None or not keep(exc):
                remove_tree(staged)
            raise
        _fsync_dir(path.parent)
        _step("published")
        if old is not None:
            try:
                remove_tree(old)
            except OSError as exc:  # the save itself succeeded; the next one retries
                warnings.warn(f"{path} was replaced but its previous content could not be "
                              f"deleted from {old} ({exc}); the next save of {path} retries",
                              RuntimeWarning, stacklevel=4)
            _step("removed-old")


def _publish(staged: Path, path: Path, aside: Path) -> Optional[Path]:
    """Put ``staged`` at ``path``; return where the old content now is (to delete), if any."""
    if not os.path.lexists(path):
        os.rename(staged, path)
        return None
    try:
        _exchange(staged, path)
        _step("exchanged")
        return staged  # now holds the old content
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            raise
    os.rename(path, aside)  # fallback: two renames, PATH briefly missing
    _step("renamed-aside")
    try:
        os.rename(staged, path)
    except BaseException:
        os.rename(aside, path)  # put the previous content back
        raise
    return aside


def check_removable(path: Path) -> None:
    """Refuse up front to replace a directory owned by someone else that we may not write: it
    would stay behind as a hidden copy (our own read-only one ``remove_tree`` makes writable)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    effective = os.access in os.supports_effective_ids
    if os.access(path, os.W_OK | os.X_OK, effective_ids=effective) or st.st_uid == os.geteuid():
        return
    raise PermissionError(f"{path} is read-only and owned by another user: it could be replaced "
                          f"but not deleted; make it writable or remove it first")


def hash_prefix(fd: int, nbytes: int) -> Optional["hashlib._Hash"]:
    """SHA-256 of the first ``nbytes`` of the file (None if it is shorter): how a resumed write
    checks the part it keeps."""
    h = hashlib.sha256()
    offset = 0
    while offset < nbytes:
        block = os.pread(fd, min(8 * 1024 * 1024, nbytes - offset), offset)
        if not block:
            return None
        h.update(block)
        offset += len(block)
    return h


def pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset`` (``os.pwrite`` may write less than asked)."""
    while data.nbytes:
        k = os.pwrite(fd, data, offset)
        data, offset = data[k:], offset + k


def write_file(path: Path, data: Union[bytes, Iterable[Any]]) -> Dict[str, Any]:
    """Write ``data`` (bytes, or bytes-like chunks, hashed as they are written) to ``path`` and
    fsync it: its ``files`` record (size and SHA-256)."""
    h, size = hashlib.sha256(), 0
    with open(path, "wb") as f:
        for chunk in [data] if isinstance(data, bytes) else data:
            f.write(chunk)
            h.update(chunk)
            size += memoryview(chunk).nbytes
        f.flush()
        os.fsync(f.fileno())
    return {"size": size, "sha256": h.hexdigest()}
