"""Compact sets for numbering repeated idempotency keys (SPEC section 5: ``#1``, ``#2``...).

A run must remember every key base it has issued, to tell the first call with some
arguments from a repeat. Kept as a dict of full strings that costs about 134 bytes per call
for the life of the run. Here a default key is remembered by what distinguishes it inside the
run, the tool's name and the 64-bit hash ``h`` that the key already carries, in an
open-addressing table of unsigned 64-bit integers: 8 bytes per slot, at most two thirds full,
so 12 to 24 bytes per call. Only keys that do repeat get a count in a dict. Custom key parts
(arbitrary text) are remembered by a 128-bit BLAKE2b digest instead of the text.

Both are exact for the keys they stand for: a default base is the triple (run, name, ``h``)
and the run is fixed, so the pair (name, ``h``) is the base itself.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable
from typing import Protocol

from .compiled import NATIVE

__all__ = ["IntSet", "RepeatCounter", "U64Set", "new_u64_set"]

_START = 64  # slots in a new table (a power of two)


class U64Set:
    """A set of integers in ``[0, 2**64)``, stored in one ``array('Q')``."""

    __slots__ = ("_has_zero", "_mask", "_size", "_slots")

    def __init__(self) -> None:
        self._slots = array("Q", bytes(8 * _START))
        self._mask = _START - 1
        self._size = 0
        self._has_zero = False  # 0 marks an empty slot, so it is kept aside

    def __len__(self) -> int:
        return self._size + self._has_zero

    def add(self, x: int) -> bool:
        """Add ``x``; True if it was not there yet."""
        if x == 0:
            new = not self._has_zero
            self._has_zero = True
            return new
        slots, mask = self._slots, self._mask
        # The low bits of a hash are as good as any: no mixing needed for SHA-256 output.
        i = x & mask
        while True:
            v = slots[i]
            if v == 0:
                slots[i] = x
                self._size += 1
                if self._size * 3 > mask * 2:
                    self._grow()
                return True
            if v == x:
                return False
            i = (i + 1) & mask

    def _grow(self) -> None:
        old = self._slots
        size = (self._mask + 1) * 2
        slots = array("Q", bytes(8 * size))
        mask = size - 1
        for x in old:
            if x:
                i = x & mask
                while slots[i]:
                    i = (i + 1) & mask
                slots[i] = x
        self._slots, self._mask = slots, mask

    def nbytes(self) -> int:
        """The bytes of the table (for the memory figures)."""
        return self._slots.itemsize * len(self._slots)


class IntSet(Protocol):
    """What :class:`RepeatCounter` needs of a set of 64-bit integers."""

    def add(self, x: int) -> bool: ...  # pragma: no cover - a protocol

    def nbytes(self) -> int: ...  # pragma: no cover - a protocol

    def __len__(self) -> int: ...  # pragma: no cover - a protocol


new_u64_set: Callable[[], IntSet] = NATIVE.U64Set if NATIVE is not None else U64Set
"""A new set: the compiled twin of :class:`U64Set` where it is built (the same table, without a
Python frame per ``add``: tests/record/test_keycount.py holds the two to the same answers)."""


class RepeatCounter:
    """How many times each key base of one run has been issued before."""

    __slots__ = ("_custom", "_custom_repeats", "_repeats", "_seen")

    def __init__(self) -> None:
        self._seen: dict[str, IntSet] = {}
        self._custom: set[int] = set()
        self._repeats: dict[tuple[str, int], int] = {}
        self._custom_repeats: dict[int, int] = {}

    def table(self, name: str) -> IntSet:
        """The ``h`` issued for ``name`` so far (a new set on first use). ``setdefault``, so
        that two threads asking at once get the one set: KeyDeriver.fresh_key adds to it
        without the session's lock."""
        table = self._seen.get(name)
        if table is None:
            table = self._seen.setdefault(name, new_u64_set())
        return table

    def default(self, name: str, h: int) -> int:
        """Count one issue of the default key ``(name, h)``; returns the issues before it."""
        table = self._seen.get(name)
        if table is None:
            table = self.table(name)
        if table.add(h):
            return 0
        n = self._repeats.get((name, h), 1)
        self._repeats[name, h] = n + 1
        return n

    def custom(self, base: str) -> int:
        """Count one issue of the custom key base ``base``; returns the issues before it."""
        digest = int.from_bytes(
            hashlib.blake2b(base.encode("utf-8", "surrogatepass"), digest_size=16).digest(),
            "big",
        )
        if digest not in self._custom:
            self._custom.add(digest)
            return 0
        n = self._custom_repeats.get(digest, 1)
        self._custom_repeats[digest] = n + 1
        return n
