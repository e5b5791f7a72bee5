"""Random bytes for salts and ULIDs, drawn from a per-process buffer of ``os.urandom``.

``os.urandom`` is a system call that releases the GIL: alone it costs under a microsecond,
but with the recorder's writer thread running, every release hands the GIL over and the
caller waits for it back (several microseconds per event). Drawing 4 KiB at a time makes that
one call per 160 events or so. The bytes are the kernel's CSPRNG output either way; each
byte is handed out once.

A forked child must not hand out the bytes its parent will also hand out (two processes
would then salt with the same bytes and mint the same ULID suffixes): ``os.register_at_fork``
empties the buffer in the child, and gives it a fresh lock, since the parent's may have been
held by another thread at the moment of the fork.

Secrets (key secrets, signing keys) keep calling ``os.urandom`` directly: they are rare, and
keeping them out of a shared buffer keeps them out of memory that other draws read from.
"""

from __future__ import annotations

import os
import threading

__all__ = ["POOL_BYTES", "random_bytes"]

POOL_BYTES = 4096
"""How many bytes one refill draws from the kernel."""


class _Pool:
    __slots__ = ("_buf", "_lock", "_pos")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buf = b""
        self._pos = 0

    def take(self, n: int) -> bytes:
        with self._lock:
            pos = self._pos
            end = pos + n
            if end > len(self._buf):
                # Draws are small (10 or 16 bytes): a request never spans two refills, and
                # the few bytes left over are dropped, never handed out.
                self._buf = os.urandom(max(POOL_BYTES, n))
                pos, end = 0, n
            self._pos = end
            return self._buf[pos:end]

    def reset(self) -> None:
        self._lock = threading.Lock()
        self._buf = b""
        self._pos = 0


_POOL = _Pool()
os.register_at_fork(after_in_child=_POOL.reset)

random_bytes = _POOL.take
"""``random_bytes(n)``: ``n`` bytes of ``os.urandom`` output, never handed out twice."""
