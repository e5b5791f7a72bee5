"""Compact sets for numbering repeated idempotency keys (SPEC section 5: ``#1``, ``#2``...).

A run must remember every key base it has issued, to tell the first call with some
arguments from a repeat. Kept as a dict of full strings that costs about 134 bytes per call
for the life of the run. Here a default key is remembered by what distinguishes it inside the
run, the tool's name and the 64-bit hash ``h`` that the key already carries, in a set of
unsigned 64-bit integers kept in sorted blocks: about 9 bytes per call, growing a block at a
time. Only keys that do repeat get a count in a dict. Custom key parts
(arbitrary text) are remembered by a 128-bit BLAKE2b digest instead of the text.

Both are exact for the keys they stand for: a default base is the triple (run, name, ``h``)
and the run is fixed, so the pair (name, ``h``) is the base itself.
"""

from __future__ import annotations

import hashlib
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Protocol

from .compiled import NATIVE

__all__ = ["IntSet", "RepeatCounter", "U64Set", "new_u64_set"]

_BLOCK = 512  # values in a full block
_START = 16  # values the first block starts with, doubling while it is the only one


class U64Set:
    """A set of integers in ``[0, 2**64)``, in sorted blocks of ``array('Q')``.

    The blocks are found through their first values (``bisect``). A full block hands values to
    a neighbour with room for two or more (half the difference), else splits in two; the first
    block starts small and doubles while it is the only one. Random keys fill the blocks to
    about seven eighths: about 9 bytes a value, and no step ever holds two copies of the set
    (a hash table doubling into a new table held the old and the new at once).
    """

    __slots__ = ("_blocks", "_cap0", "_firsts", "_size")

    def __init__(self) -> None:
        self._blocks: list[array[int]] = [array("Q")]
        self._firsts: list[int] = [0]  # _firsts[b] == _blocks[b][0] for b > 0
        self._cap0 = _START  # the first block's room while it is the only one
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, x: int) -> bool:
        """Add ``x``; True if it was not there yet."""
        if x < 0 or x >> 64:
            raise OverflowError(f"U64Set.add() takes an integer in [0, 2**64), not {x}")
        firsts = self._firsts
        b = bisect_right(firsts, x, 1) - 1
        block = self._blocks[b]
        i = bisect_left(block, x)
        if i < len(block) and block[i] == x:
            return False
        blocks = len(self._blocks)
        if len(block) == (self._cap0 if blocks == 1 else _BLOCK):
            if blocks == 1 and self._cap0 < _BLOCK:
                self._cap0 *= 2
            else:
                self._make_room(b)
                b = bisect_right(firsts, x, 1) - 1
                block = self._blocks[b]
                i = bisect_left(block, x)
        block.insert(i, x)
        if i == 0:
            firsts[b] = x
        self._size += 1
        return True

    def _make_room(self, b: int) -> None:
        blocks, firsts = self._blocks, self._firsts
        block = blocks[b]
        if b + 1 < len(blocks) and len(blocks[b + 1]) < _BLOCK - 1:
            after = blocks[b + 1]
            k = (_BLOCK - len(after)) // 2
            after[0:0] = block[_BLOCK - k :]
            del block[_BLOCK - k :]
            firsts[b + 1] = after[0]
        elif b > 0 and len(blocks[b - 1]) < _BLOCK - 1:
            before = blocks[b - 1]
            k = (_BLOCK - len(before)) // 2
            before.extend(block[:k])
            del block[:k]
            firsts[b] = block[0]
        else:
            upper = block[_BLOCK // 2 :]
            del block[_BLOCK // 2 :]
            blocks.insert(b + 1, upper)
            firsts.insert(b + 1, upper[0])

    def nbytes(self) -> int:
        """The bytes of the blocks, each at its full room (for the memory figures)."""
        values = self._cap0 if len(self._blocks) == 1 else len(self._blocks) * _BLOCK
        return 8 * values


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
