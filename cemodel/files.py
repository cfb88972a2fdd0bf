"""The one writer of every file cemodel writes for its user (posteriors, checkpoints,
generated modules, diagrams, plots, the kernel cache's modules).

A file is written to a temporary file beside it (``.NAME.XXXXXXXX.tmp``, same directory,
so the rename cannot cross file systems) and renamed over the target with ``os.replace``:
a reader sees the old file or the new one, never half of one. An OS error (a full or
read-only file system, a directory at the path, a path under a regular file, a name too
long) becomes ``CemWriteError`` — ``error: cannot write PATH: REASON`` — and the temporary
file is removed, so nothing partial is left. A path that exists and is not a regular
file (``/dev/null``, a FIFO) is written into, never replaced.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from .errors import CemError


class CemWriteError(CemError):
    """A file could not be written: names the path and the operating system's reason."""

    def __init__(self, path: str | Path, reason: str, *, hint: str | None = None) -> None:
        super().__init__(f"cannot write {path}: {reason}", hint=hint)
        self.path = str(path)
        self.reason = reason


class CemCacheWarning(UserWarning):
    """The kernel cache (CEMODEL_CACHE) cannot be written: the model is compiled in memory."""


# the reasons, in words, of the errors a user can cause by the path they give
_REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EROFS: "the file system is read-only",
    errno.EISDIR: "it is a directory",
    errno.ENOTDIR: "a part of the path is a file, not a directory",
    errno.EEXIST: "a part of the path is a file, not a directory",
    errno.ENAMETOOLONG: "the file name is too long",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EDQUOT: "the disk quota is exceeded",
}


def reason(exc: OSError) -> str:
    """An OSError in words, without Python's ``[Errno N]`` prefix or the repeated path."""
    return _REASONS.get(exc.errno or -1) or exc.strerror or str(exc)


def temporary_name(path: str | Path) -> re.Pattern[str]:
    """The names of the temporary files the writer makes for ``path`` (tempfile's eight
    characters between the prefix and the suffix): what a killed writer may leave."""
    return re.compile(re.escape(f".{Path(path).name}.") + r"[a-z0-9_]{8}\.tmp")


# the two steps a fault strikes (a full disk the write, a read-only file system or a
# directory at the path the rename): module attributes, so that tests can inject faults
def _write(handle: BinaryIO, data: bytes) -> None:
    handle.write(data)


_replace = os.replace


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_MODE = 0o666 & ~_umask()  # read once, at import: os.umask can only be read by setting it


def write_bytes(path: str | Path, data: bytes, *, sync: bool = False) -> None:
    """Write ``data`` to ``path`` atomically (temporary file, rename); ``sync`` flushes it to
    the disk first (a checkpoint must survive a power cut). Raises CemWriteError."""
    path = Path(path)
    tmp = None
    try:
        if path.is_dir():  # before any temporary file is made
            raise OSError(errno.EISDIR, "")
        if path.exists() and not path.is_file():  # /dev/null, a FIFO: written into, as
            with open(path, "wb") as handle:      # a shell's > does (a rename would put a
                _write(handle, data)              # regular file in the device's place)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, _MODE)  # mkstemp's is 0600: the file gets the mode open() would give
        with os.fdopen(fd, "wb") as handle:
            _write(handle, data)
            if sync:
                handle.flush()
                os.fsync(handle.fileno())
        _replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise CemWriteError(path, reason(exc)) from None
    finally:  # also on KeyboardInterrupt: never a temporary file left behind
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl-C (SIGINT) held back until the block ends, then handled as it would have been.
    A KeyboardInterrupt inside zipfile's constructor leaves a half-built ZipFile whose
    ``__del__`` prints a traceback ("'ZipFile' object has no attribute '_writing'") after the
    clean "interrupted" message. The Python-level handler is swapped, not the signal mask: a
    signal sent to the process reaches whichever thread does not block it (BLAS's, the
    shares' pool). Outside the main thread (where handlers cannot be set) nothing is held."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is None):  # None: a handler set outside Python
        yield
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            if callable(previous):
                previous(signal.SIGINT, None)  # Python's default raises KeyboardInterrupt
            elif previous == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)


def write_npz(path: str | Path, arrays: dict[str, Any], *, sync: bool = False) -> None:
    """``write_bytes`` of ``np.savez(**arrays)`` (uncompressed), the archive built in memory
    with Ctrl-C deferred (``interrupts_deferred``)."""
    import io

    import numpy as np

    buffer = io.BytesIO()
    with interrupts_deferred():
        np.savez(buffer, **arrays)
    write_bytes(path, buffer.getvalue(), sync=sync)


def write_text(path: str | Path, text: str) -> None:
    """``write_bytes`` of ``text`` in UTF-8."""
    write_bytes(path, text.encode("utf-8"))


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file: where both exist, the same file (a link, ``./``,
    another spelling); otherwise the same resolved path."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:  # unreadable: not provably the same
        return False
    return os.path.realpath(a) == os.path.realpath(b)


Labelled = tuple[str, str | Path | None]  # (the option or argument, its path; None: not given)


def refuse_overwriting(outputs: list[Labelled], inputs: list[Labelled]) -> None:
    """Refuse, before any work, an output that is one of the command's inputs or another of
    its outputs (``-o d.npz --data d.npz`` would replace the data by the posterior), naming
    both. A device or FIFO at the path is written into, not replaced: it is never refused."""
    for i, (option, path) in enumerate(outputs):
        if path is None or (os.path.exists(path) and not os.path.isfile(path)):
            continue
        for other, given in (*outputs[:i], *inputs):
            if given is not None and same_file(path, given):
                why = ("one would overwrite the other" if (other, given) in outputs else
                       "writing it would destroy that input")
                raise CemError(f"{option} {path} is the same file as {other} {given}: {why}",
                               hint=f"give {option} another path")


def probe_directory(directory: str | Path) -> None:
    """Raise CemWriteError unless a file can be created, written and synced in ``directory``
    (a full file system refuses the first block; a read-only one the file)."""
    try:
        with tempfile.TemporaryFile(dir=directory) as handle:
            handle.write(b"0")
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        raise CemWriteError(directory, reason(exc)) from None


def remove_stale_temporaries(path: str | Path) -> list[Path]:
    """Remove the temporary files of ``path`` a killed writer left beside it (only names of
    ``temporary_name(path)``); returns them. A directory that cannot be listed is left be."""
    path = Path(path)
    pattern = temporary_name(path)
    removed = []
    try:
        names = os.listdir(path.parent)
    except OSError:
        return removed
    for name in names:
        if pattern.fullmatch(name):
            try:
                os.unlink(path.parent / name)
                removed.append(path.parent / name)
            except OSError:
                pass
    return removed
