"""Files that hold a record (exports, evidence, corpus fixtures, blobs): written whole or not
at all, and readable by their owner only, as the store itself is."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["make_private_dirs", "write_whole"]


def make_private_dirs(folder: Path) -> None:
    """Create ``folder`` and each missing parent with mode 0700 (``mkdir(parents=True,
    mode=...)`` gives the mode to the last folder only, the parents the umask's)."""
    missing: list[Path] = []
    current = folder
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process
            path.mkdir(mode=0o700)


_CREATE = (
    os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
)


@contextlib.contextmanager
def write_whole(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """A binary handle whose bytes replace ``path`` once the block ends without an error.

    They are written under a fresh name beside the file (64 random bits, ``O_EXCL``, mode
    0600: never a file or a link already there) and renamed over it after an fsync; a
    symbolic link at ``path`` is followed, so the file it names is replaced, not the link. On
    an error nothing is left, Ctrl-C and SIGTERM included: the name is chosen before the file
    is created, inside the clean-up's reach (``tempfile.mkstemp`` creates it first and names
    it after, and a stop in between left the file behind). A ``path`` that is there and is
    not a regular file (a device, a FIFO, a folder) is refused with an ``OSError``.
    """
    real = Path(os.path.realpath(path))
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        # a device, a FIFO, a folder: renaming a file over it would replace it for everyone
        # (``/dev/full`` became a regular file); a caller that means to write into one says so
        raise OSError(errno.EINVAL, "not a regular file, and not replaced by one", str(path))
    tmp = real.with_name(f".{real.name}.{secrets.token_hex(8)}.partial")
    try:
        fd = os.open(tmp, _CREATE, 0o600)
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, real)
    finally:
        tmp.unlink(missing_ok=True)
