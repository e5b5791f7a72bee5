"""RFC 9162 Merkle trees (SPEC section 9): hashes, roots, inclusion and consistency proofs.

Pure: no I/O, no threads, no globals beyond constants. :class:`Tree` keeps every complete
subtree's hash, so appending is amortized O(1) (O(log n) at worst) and a root, an inclusion
proof or a consistency proof at any size it holds costs O(log^2 n) hashes at most, without
touching the leaves again. :class:`Frontier` keeps only the O(log n) hashes of the right edge:
enough to append and to compute the root, which is what issuing a checkpoint needs.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import ProfileError, SealingError
from .canonical import canonical

__all__ = [
    "EMPTY_ROOT",
    "Frontier",
    "ProofError",
    "SealLeaf",
    "Tree",
    "consistency_from_frontier",
    "leaf_hash",
    "node_hash",
    "root_from_inclusion",
    "verify_consistency",
    "verify_inclusion",
]

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""The root of the empty tree (RFC 9162 section 2.1.1)."""

_MAX_INDEX = 2**64 - 1


class ProofError(SealingError):
    """A proof that does not verify; the message says which step failed."""

    what = "proof"


def leaf_hash(leaf: bytes) -> bytes:
    """``SHA-256(0x00 ‖ leaf)``."""
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 ‖ left ‖ right)``."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


@dataclass(frozen=True, slots=True)
class SealLeaf:
    """A run seal: run ``run_id`` of ``tenant`` had, at ``seq``, the event hashing to ``hash``.

    ``final`` is true only when that event is the run's ``run.finished``.
    """

    tenant: str
    run_id: str
    seq: int
    hash: str
    final: bool

    def to_bytes(self) -> bytes:
        """``JCS({tenant, run_id, seq, hash, final})``: the leaf as logged (the record's own
        RFC 8785 encoder; a seq beyond 2^53 - 1 is outside JCS's numbers and raises
        :class:`~tachograph.errors.ProfileError`)."""
        body = {
            "tenant": self.tenant,
            "run_id": self.run_id,
            "seq": self.seq,
            "hash": self.hash,
            "final": self.final,
        }
        return canonical(body, "seal leaf")

    @classmethod
    def from_bytes(cls, raw: bytes) -> SealLeaf:
        """Parse a logged leaf; it must be exactly its own canonical form."""
        try:
            data: Any = orjson.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:  # orjson.JSONDecodeError is a ValueError
            raise ProofError(f"the seal leaf is not JSON: {exc}") from None
        keys = {"tenant", "run_id", "seq", "hash", "final"}
        if not isinstance(data, dict) or set(data) != keys:
            raise ProofError(f"the seal leaf must have exactly the keys {sorted(keys)}")
        ok = (
            isinstance(data["tenant"], str)
            and isinstance(data["run_id"], str)
            and isinstance(data["seq"], int)
            and not isinstance(data["seq"], bool)
            and data["seq"] >= 0
            and isinstance(data["hash"], str)
            and isinstance(data["final"], bool)
        )
        if not ok:
            raise ProofError("the seal leaf has a value of the wrong type")
        leaf = cls(data["tenant"], data["run_id"], data["seq"], data["hash"], data["final"])
        try:
            canonical_form = leaf.to_bytes()
        except ProfileError as exc:
            raise ProofError(f"the seal leaf has no canonical form (JCS): {exc}") from None
        if canonical_form != raw:
            raise ProofError("the seal leaf is not in canonical form (JCS)")
        return leaf

    @property
    def hash_bytes(self) -> bytes:
        """The leaf hash, ``SHA-256(0x00 ‖ leaf)``."""
        return leaf_hash(self.to_bytes())


class Tree:
    """An append-only Merkle tree holding every complete subtree hash.

    ``levels[k][i]`` is the hash of leaves ``[i*2^k, (i+1)*2^k)``. Memory: about two hashes
    per leaf.
    """

    def __init__(self, leaf_hashes: Iterable[bytes] = ()) -> None:
        self.levels: list[list[bytes]] = [[]]
        for h in leaf_hashes:
            self.append_hash(h)

    def __len__(self) -> int:
        return len(self.levels[0])

    def append(self, leaf: bytes) -> int:
        """Append a leaf (its bytes); returns its index."""
        return self.append_hash(leaf_hash(leaf))

    def append_hash(self, h: bytes) -> int:
        """Append a leaf by its leaf hash; returns its index."""
        index = len(self.levels[0])
        self.levels[0].append(h)
        level, i = 0, index
        while i & 1:
            left = self.levels[level][i - 1]
            right = self.levels[level][i]
            level += 1
            if level == len(self.levels):
                self.levels.append([])
            self.levels[level].append(node_hash(left, right))
            i >>= 1
        return index

    def _range(self, start: int, end: int) -> bytes:
        """MTH of leaves ``[start, end)`` where ``start`` is aligned as RFC 9162 splits are."""
        n = end - start
        if n == 1:
            return self.levels[0][start]
        if n & (n - 1) == 0 and start % n == 0:
            level = n.bit_length() - 1
            return self.levels[level][start >> level]
        k = _split(n)
        return node_hash(self._range(start, start + k), self._range(start + k, end))

    def root(self, size: int | None = None) -> bytes:
        """The root at ``size`` leaves (default: all)."""
        size = len(self) if size is None else size
        if not 0 <= size <= len(self):
            raise ValueError(f"size {size} outside 0..{len(self)}")
        return EMPTY_ROOT if size == 0 else self._range(0, size)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 9162 section 2.1.3.1: the path of leaf ``index`` in the tree of ``size``."""
        size = len(self) if size is None else size
        if not 0 <= index < size <= len(self):
            raise ValueError(f"no leaf {index} in a tree of size {size} (holding {len(self)})")
        path: list[bytes] = []
        start, end = 0, size
        while end - start > 1:
            k = _split(end - start)
            if index < start + k:
                path.append(self._range(start + k, end))
                end = start + k
            else:
                path.append(self._range(start, start + k))
                start += k
        path.reverse()
        return path

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        """RFC 9162 section 2.1.4.1: proof that the tree of ``size1`` is a prefix of ``size2``."""
        size2 = len(self) if size2 is None else size2
        if not 0 < size1 <= size2 <= len(self):
            raise ValueError(f"no consistency proof from {size1} to {size2}")
        proof: list[bytes] = []
        start, end, complete = 0, size2, True
        m = size1
        while True:
            n = end - start
            if m == n:
                if not complete:
                    proof.append(self._range(start, end))
                break
            k = _split(n)
            if m <= k:
                proof.append(self._range(start + k, end))
                end = start + k
            else:
                proof.append(self._range(start, start + k))
                start += k
                m -= k
                complete = False
        proof.reverse()
        return proof

    def frontier(self, size: int | None = None) -> Frontier:
        """The right edge of the tree of ``size`` leaves."""
        size = len(self) if size is None else size
        hashes: list[bytes] = []
        start = 0
        for level in range(size.bit_length() - 1, -1, -1):
            if size >> level & 1:
                hashes.append(self.levels[level][start >> level])
                start += 1 << level
        return Frontier(size, tuple(hashes))


@dataclass(frozen=True, slots=True)
class Frontier:
    """The hashes of the maximal complete subtrees of a tree of ``size`` leaves, left to right.

    A compact range over ``[0, size)``: appending and the root cost O(log n).
    """

    size: int
    hashes: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        if self.size < 0 or len(self.hashes) != bin(self.size).count("1"):
            raise ValueError(
                f"a frontier of size {self.size} has {bin(self.size).count('1')} hashes"
            )

    def append_hashes(self, leaf_hashes: Iterable[bytes]) -> Frontier:
        """The frontier after appending leaves, given by their leaf hashes."""
        size, stack = self.size, list(self.hashes)
        for h in leaf_hashes:
            # Merge with the right edge as long as the subtree on the left has the same height.
            node, i = h, size
            while i & 1:
                node = node_hash(stack.pop(), node)
                i >>= 1
            stack.append(node)
            size += 1
        return Frontier(size, tuple(stack))

    def root(self) -> bytes:
        """The tree's root."""
        if not self.hashes:
            return EMPTY_ROOT
        node = self.hashes[-1]
        for h in reversed(self.hashes[:-1]):
            node = node_hash(h, node)
        return node

    def encode(self) -> str:
        """``size`` then the hashes in base64, space separated (a store keeps it as text)."""
        return " ".join([str(self.size), *(base64.b64encode(h).decode() for h in self.hashes)])

    @classmethod
    def decode(cls, text: str) -> Frontier:
        """Read what :meth:`encode` wrote."""
        parts = text.split(" ")
        return cls(int(parts[0]), tuple(base64.b64decode(p, validate=True) for p in parts[1:]))


def _mth(hashes: Sequence[bytes]) -> bytes:
    n = len(hashes)
    if n == 1:
        return hashes[0]
    k = _split(n)
    return node_hash(_mth(hashes[:k]), _mth(hashes[k:]))


def consistency_from_frontier(old: Frontier, new_hashes: Sequence[bytes]) -> list[bytes]:
    """The consistency proof from the tree ``old`` to it extended by ``new_hashes``.

    Every node of such a proof is either one of the old tree's maximal complete subtrees (its
    frontier) or lies wholly among the new leaves, so the old leaves are not needed: O(log n)
    plus the new leaves.
    """
    m, n = old.size, old.size + len(new_hashes)
    if not 0 < m < n:
        raise ValueError(f"no consistency proof from {m} to {n} leaves")
    known: dict[tuple[int, int], bytes] = {}
    start = 0
    levels = [b for b in range(m.bit_length() - 1, -1, -1) if m >> b & 1]
    for h, level in zip(old.hashes, levels, strict=True):
        known[(start, start + (1 << level))] = h
        start += 1 << level

    def mth(a: int, b: int) -> bytes:
        if b <= m:
            return known[(a, b)]
        if a < m:  # pragma: no cover - never asked for, by the argument above
            raise AssertionError(f"range [{a}, {b}) straddles the old size {m}")
        return _mth(new_hashes[a - m : b - m])

    proof: list[bytes] = []
    lo, hi, complete, rest = 0, n, True, m
    while True:
        if rest == hi - lo:
            if not complete:
                proof.append(mth(lo, hi))
            break
        k = _split(hi - lo)
        if rest <= k:
            proof.append(mth(lo + k, hi))
            hi = lo + k
        else:
            proof.append(mth(lo, lo + k))
            lo += k
            rest -= k
            complete = False
    proof.reverse()
    return proof


def _lsb(n: int) -> int:
    return n & 1


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """The root that an inclusion proof leads to (RFC 9162 section 2.1.3.2), or raise."""
    if not 0 <= index < size or size > _MAX_INDEX:
        raise ProofError(f"leaf index {index} is outside a tree of size {size}")
    if len(leaf) != 32:
        raise ProofError("a leaf hash has 32 bytes")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if len(p) != 32:
            raise ProofError("a proof hash has 32 bytes")
        if sn == 0:
            raise ProofError("the inclusion proof is longer than the tree is deep")
        if _lsb(fn) or fn == sn:
            r = node_hash(p, r)
            if not _lsb(fn):
                while not _lsb(fn) and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the inclusion proof is shorter than the tree is deep")
    return r


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Raise :class:`ProofError` unless ``proof`` leads from leaf hash ``leaf`` to ``root``."""
    if root_from_inclusion(index, size, leaf, proof) != root:
        raise ProofError(f"the inclusion proof of leaf {index} does not lead to the root")


def verify_consistency(
    size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes
) -> None:
    """Raise :class:`ProofError` unless the tree (``size1``, ``root1``) is a prefix of
    (``size2``, ``root2``) by ``proof`` (RFC 9162 section 2.1.4.2).

    A tree of size 0 is refused: it is consistent with anything, so a proof from it proves
    nothing (the conformance vectors reject it); callers treat "no earlier checkpoint" apart.
    """
    if size1 <= 0 or size2 > _MAX_INDEX:
        raise ProofError(f"no consistency proof from size {size1}")
    if size2 < size1:
        raise ProofError(f"the new tree ({size2}) is smaller than the old one ({size1})")
    if size1 == size2:
        if proof:
            raise ProofError("a proof between equal sizes must be empty")
        if root1 != root2:
            raise ProofError(f"two different roots for the same size {size1}")
        return
    if not proof:
        raise ProofError("an empty consistency proof between different sizes")
    if any(len(p) != 32 for p in proof):
        raise ProofError("a proof hash has 32 bytes")
    path = list(proof)
    if size1 & (size1 - 1) == 0:
        path.insert(0, root1)
    fn, sn = size1 - 1, size2 - 1
    while _lsb(fn):
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the consistency proof is longer than the tree is deep")
        if _lsb(fn) or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not _lsb(fn):
                while not _lsb(fn) and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the consistency proof is shorter than the tree is deep")
    if fr != root1:
        raise ProofError(f"the consistency proof does not lead to the old root (size {size1})")
    if sr != root2:
        raise ProofError(f"the consistency proof does not lead to the new root (size {size2})")
