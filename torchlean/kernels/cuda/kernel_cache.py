"""The on-disk cache of compiled kernels: which files may be loaded from it. Needs no CuPy.

Threat model. A cached cubin is GPU machine code that the process loads and runs, so the cache
must never hand back bytes that someone other than this user could have put there, nor bytes
that are not what compiling would give now:

* Other users. The cache directory (``$TORCHLEAN_KERNEL_CACHE``, default
  ``~/.cache/torchlean/kernels``) is created owner-only (0o700), and it is used only if it is a
  directory owned by this user that neither group nor others can write. Otherwise nothing is read
  from it or written to it: every kernel is compiled afresh, with one warning naming the directory
  and the reason. (Where the OS has no POSIX owners and modes, Windows, this check is skipped.)
  Entries that are symbolic links are not followed.
* Corruption, truncation and mismatch. An entry is one file: a header holding the SHA-256 of
  the compile identity (the full source, the options, the architecture, the compiler's versions)
  and the SHA-256 and length of the cubin, then the cubin. It is loaded only when that identity
  is the one we would compile now and the cubin's bytes match the recorded digest; anything else
  (a torn write, a flipped bit, another kernel's entry copied under this name, a file from an
  older torchlean) is compiled again and replaced atomically (write to a temporary file, rename).
* Not covered: whoever can write files as this user (or as root). They could equally edit
  torchlean's own Python files, and a MAC key stored under the same account would be theirs to
  read, so the digests are integrity checks, not signatures.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Callable, Sequence

__all__ = ["cache_dir", "unsafe_reason", "identity", "entry_path", "pack", "unpack", "read_entry",
           "write_entry", "compile_cached"]

_MAGIC = b"TLCUBIN\x01"
_HEADER = len(_MAGIC) + 32 + 32 + 8  # magic, identity digest, cubin digest, cubin length

_warned: set[tuple[str, str]] = set()


def cache_dir() -> Path:
    return Path(os.environ.get("TORCHLEAN_KERNEL_CACHE") or Path.home() / ".cache" / "torchlean" / "kernels")


def unsafe_reason(directory: Path) -> str | None:
    """Why ``directory`` must not be used as a kernel cache, or None when it may."""
    try:
        st = os.stat(directory)
    except OSError as exc:
        return f"it cannot be read ({type(exc).__name__}: {exc})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if hasattr(os, "getuid"):
        if st.st_uid != os.getuid():
            return f"it is owned by user id {st.st_uid}, not by this user ({os.getuid()})"
        who = [name for bit, name in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others")) if st.st_mode & bit]
        if who:
            # (not made safe by a chmod: whatever was planted while it was open would be blessed)
            return (f"it is writable by {' and '.join(who)} (mode {stat.S_IMODE(st.st_mode):o}); remove it or "
                    f"run 'chmod go-w' on it if you trust its contents")
    return None


def _prepare(directory: Path) -> str | None:
    """Create ``directory`` owner-only if it is missing; then ``unsafe_reason``."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        return f"it cannot be created ({type(exc).__name__}: {exc})"
    return unsafe_reason(directory)


def identity(source: str, options: Sequence[str], arch: str, compiler: str) -> bytes:
    """The SHA-256 of everything that determines the cubin."""
    return hashlib.sha256("\0".join(["torchlean kernel cache 2", source, " ".join(options), arch,
                                     compiler]).encode()).digest()


def entry_path(directory: Path, stem: str, arch: str, ident: bytes) -> Path:
    return directory / f"{stem}-sm{arch}-{ident.hex()[:32]}.cubin"


def pack(ident: bytes, cubin: bytes) -> bytes:
    return _MAGIC + ident + hashlib.sha256(cubin).digest() + len(cubin).to_bytes(8, "little") + cubin


def unpack(data: bytes, ident: bytes) -> bytes | None:
    """The cubin of an entry, or None unless the entry is intact and was compiled for ``ident``."""
    if len(data) < _HEADER or not data.startswith(_MAGIC):
        return None
    at = len(_MAGIC)
    if data[at:at + 32] != ident:
        return None
    want, n = data[at + 32:at + 64], int.from_bytes(data[at + 64:_HEADER], "little")
    cubin = data[_HEADER:]
    if len(cubin) != n or hashlib.sha256(cubin).digest() != want:
        return None
    return cubin


def read_entry(path: Path, ident: bytes) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))
    except OSError:  # missing, or a symbolic link
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            data = f.read()
        except OSError:
            return None
    return unpack(data, ident)


def write_entry(path: Path, ident: bytes, cubin: bytes) -> None:
    """Replace ``path`` atomically: readers see the old entry or the new one, never a mixture."""
    tmp = None
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp",
                                         delete=False) as f:
            tmp = f.name
            f.write(pack(ident, cubin))
        os.replace(tmp, path)
    except OSError:  # an unwritable cache only costs a compile next time
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def compile_cached(stem: str, source: str, options: Sequence[str], arch: str, compiler: str,
                   compile_fn: Callable[[], bytes], directory: Path | None = None) -> bytes:
    """The cubin of ``source``: from the cache when a verified entry exists, else ``compile_fn()``
    (then stored). With an unsafe cache directory, always ``compile_fn()`` (see the module doc)."""
    directory = cache_dir() if directory is None else Path(directory)
    reason = _prepare(directory)
    if reason is not None:
        if (str(directory), reason) not in _warned:
            _warned.add((str(directory), reason))
            warnings.warn(f"torchlean: not using the kernel cache {str(directory)!r}: {reason}; kernels are "
                          f"compiled on every start", RuntimeWarning, stacklevel=2)
        return compile_fn()
    ident = identity(source, options, arch, compiler)
    path = entry_path(directory, stem, arch, ident)
    cubin = read_entry(path, ident)
    if cubin is None:
        cubin = compile_fn()
        write_entry(path, ident, cubin)
    return cubin
