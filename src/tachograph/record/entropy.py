"""Random bytes for salts and ULIDs, drawn from a per-process buffer of ``os.urandom``.

``os.urandom`` is a system call that releases the GIL: alone it costs under a microsecond,
but with the recorder's writer thread running, every release hands the GIL over and the
caller waits for it back (several microseconds per event). Drawing 4 KiB at a time makes that
one call per 160 events or so. The bytes are the kernel's CSPRNG output either way; each
byte is handed out once.

A forked child must not hand out the bytes its parent will also hand out (two processes
would then salt with the same bytes and mint the same ULID suffixes): ``os.register_at_fork``
empties the buffer in the child.

Secrets (key secrets, signing keys) keep calling ``os.urandom`` directly: they are rare, and
keeping them out of a shared buffer keeps them out of memory that other draws read from.
"""

from __future__ import annotations

import os
from collections import deque

__all__ = ["POOL_BYTES", "pool", "random_bytes"]

POOL_BYTES = 4096
"""How many bytes one refill draws from the kernel."""


# One deque of ready-cut draws per size. ``deque.popleft`` is atomic, so two threads never
# receive the same draw and no lock is taken on the way; a refill cuts one 4 KiB read.
# Two threads refilling at once each add fresh bytes, which is harmless.
_pools: dict[int, deque[bytes]] = {}


def pool(n: int) -> deque[bytes]:
    """The draws of ``n`` bytes ready to be handed out: a caller on a hot path may take one
    with ``popleft()`` itself and call :func:`random_bytes` when it is empty."""
    found = _pools.get(n)
    return found if found is not None else _pools.setdefault(n, deque())


def random_bytes(n: int) -> bytes:
    """``n`` bytes of ``os.urandom`` output (``0 < n <= POOL_BYTES``), never handed out twice."""
    pool = _pools.get(n)
    if pool is None:
        pool = _pools.setdefault(n, deque())
    try:
        return pool.popleft()
    except IndexError:
        buf = os.urandom(POOL_BYTES)
        # the few bytes beyond the last whole draw are dropped, never handed out
        pool.extend([buf[i : i + n] for i in range(n, POOL_BYTES - n + 1, n)])
        return buf[:n]


def _forget() -> None:
    for pool in _pools.values():
        pool.clear()


os.register_at_fork(after_in_child=_forget)
