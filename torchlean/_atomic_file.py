"""Atomic file replacement that cleans up after killed writers (used by checkpoints).

The bytes go to ``.<name>.<12 hex digits>.tmp`` next to the target, are flushed and ``fsync``-ed,
then ``os.replace``-d onto it, and the directory is fsync-ed where the OS allows: a crash leaves
the old file or the new one, never a mixture. A killed writer leaves its temporary file behind;
the next write to the same target removes it. To tell such a file from one a live writer is
still filling, a writer holds an exclusive ``flock`` on its temporary file until the rename (the
kernel drops it when the process dies), and this process's own live files are also listed in
``_live_tmps``. A file whose lock cannot be taken, or that cannot be locked at all (a file system
without ``flock``), is left alone. On Windows, without ``flock``, an open file cannot be deleted,
which protects live writers the same way.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
from typing import Any, Callable

try:
    import fcntl
except ImportError:  # pragma: no cover  (Windows)
    fcntl = None  # type: ignore[assignment]

__all__ = ["atomic_write"]


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# Temporary files this process is writing right now: the stale-file sweep never opens them (the
# flock below covers other processes and threads too; this set also covers platforms without it).
_live_tmps: set[str] = set()
_live_lock = threading.Lock()


def _temp_pattern(base: str) -> "re.Pattern[str]":
    return re.compile(rf"\.{re.escape(base)}\.[0-9a-f]{{12}}\.tmp\Z")


def _lock(fd: int, wait: bool) -> bool:
    """Take an exclusive advisory lock on ``fd``. True when held (or when the platform or file
    system has no such locks and ``wait`` is set: the writer goes on unprotected); False when
    another open file holds it, or, for the sweep (``wait`` False), when locking is unavailable."""
    if fcntl is None:
        return wait
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        return True
    except BlockingIOError:
        return False
    except OSError:  # e.g. a file system without flock
        return wait


def _same_file(fd: int, path: str) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _remove_stale_temps(directory: str, base: str) -> None:
    """Delete the ``.<base>.<hex>.tmp`` files of ``directory`` that no live save holds: a save
    keeps its temporary file locked until the rename, and the lock dies with its process."""
    pattern = _temp_pattern(base)
    try:
        names = [n for n in os.listdir(directory) if pattern.match(n)]
    except OSError:
        return
    for name in names:
        tmp = os.path.join(directory, name)
        with _live_lock:
            if tmp in _live_tmps:
                continue
        try:
            fd = os.open(tmp, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))
        except OSError:  # gone already, a symbolic link, or not ours to open
            continue
        try:
            # unlink while holding the lock, and only the file we locked: a writer that created
            # this name and had not locked it yet sees it unlinked and picks another name
            if _lock(fd, wait=False) and _same_file(fd, tmp):
                os.unlink(tmp)
        except OSError:
            pass
        finally:
            os.close(fd)


def _open_temp(directory: str, base: str) -> tuple[int, str]:
    """Create and lock a new temporary file for ``base`` (registered in ``_live_tmps``)."""
    while True:
        tmp = os.path.join(directory, f".{base}.{secrets.token_hex(6)}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        with _live_lock:
            _live_tmps.add(tmp)
        try:
            _lock(fd, wait=True)
            if _same_file(fd, tmp):
                return fd, tmp
        except BaseException:
            _discard_temp(fd, tmp)
            raise
        _discard_temp(fd, tmp, unlink=False)  # swept between creation and locking: take a new name


def _discard_temp(fd: int | None, tmp: str, unlink: bool = True) -> None:
    if fd is not None:
        os.close(fd)
    if unlink:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    with _live_lock:
        _live_tmps.discard(tmp)


def atomic_write(path: str, data: bytes, write: Callable[[Any, bytes], None]) -> None:
    """Replace ``path`` by ``data`` atomically (``write(file, data)`` writes the bytes), first
    removing the temporary files of ``path`` that killed writers left (see the module docstring)."""
    directory = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    _remove_stale_temps(directory, base)
    fd, tmp = _open_temp(directory, base)
    try:
        with os.fdopen(fd, "wb") as f:
            fd = None  # the file object owns (and closes) it now
            write(f, data)
            f.flush()
            os.fsync(f.fileno())
            if fcntl is not None:
                os.replace(tmp, path)  # still locked: a sweep can never take a finished file
        if fcntl is None:
            os.replace(tmp, path)  # (Windows: an open file cannot be renamed)
    except BaseException:
        _discard_temp(fd, tmp)
        raise
    with _live_lock:
        _live_tmps.discard(tmp)
    _fsync_dir(directory)
