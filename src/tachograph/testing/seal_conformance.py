"""The seal-log part of the store conformance suite (SPEC section 9).

Mixed into :class:`~tachograph.testing.conformance.StoreConformance`, so every engine that
runs the suite runs these too. The store keeps rows; these tests check rows, order, indices
and append-only behaviour, and that leaves come back byte for byte (so that a Merkle root
computed from what the store returns is the root computed from what was appended).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..record.merkle import SealLeaf, Tree
from ..store.base import CheckpointRow, SealRow

if TYPE_CHECKING:
    from ..store.base import Store

__all__ = ["SealLogConformance"]


def _seal(run_id: str, seq: int, *, tenant: str = "default", final: bool = False) -> SealRow:
    leaf = SealLeaf(tenant, run_id, seq, "sha256:" + f"{seq:064x}", final)
    return SealRow(run_id, seq, leaf.to_bytes())


class SealLogConformance:
    """Seal-log tests; expects the ``store`` fixture and ``make_store`` of the suite."""

    persistent: bool = True

    def make_store(self, tmp_path: Path) -> Store:  # pragma: no cover - the suite's
        raise NotImplementedError

    def test_a_new_seal_log_is_empty(self, store: Store) -> None:
        assert store.seal_count("default") == 0
        assert store.read_seals("default") == []
        assert store.seals_for_run("default", "run-a") == []
        assert store.latest_checkpoint("default") is None

    def test_appended_seals_are_numbered_in_order_per_tenant(self, store: Store) -> None:
        assert store.append_seals("default", [_seal("run-a", 0), _seal("run-a", 5)]) == 0
        assert store.append_seals("other", [_seal("run-a", 0, tenant="other")]) == 0
        assert store.append_seals("default", [_seal("run-b", 3)]) == 2
        assert store.seal_count("default") == 3
        assert store.seal_count("other") == 1
        rows = store.read_seals("default")
        assert [(r.index, r.run_id, r.seq) for r in rows] == [
            (0, "run-a", 0),
            (1, "run-a", 5),
            (2, "run-b", 3),
        ]
        assert rows[1].leaf == _seal("run-a", 5).leaf
        assert [r.index for r in store.read_seals("default", 1)] == [1, 2]
        assert [r.index for r in store.read_seals("default", 1, 2)] == [1]
        assert store.read_seals("default", 3) == []
        assert [r.seq for r in store.seals_for_run("default", "run-a")] == [0, 5]
        assert store.seals_for_run("other", "run-b") == []

    def test_leaves_come_back_byte_for_byte(self, store: Store) -> None:
        leaves = [bytes([i % 256]) * (i % 7) + b"\x00\xff" for i in range(37)]
        rows = [SealRow(f"run-{i % 3}", i, leaf) for i, leaf in enumerate(leaves)]
        store.append_seals("default", rows[:20])
        store.append_seals("default", rows[20:])
        stored = [r.leaf for r in store.read_seals("default")]
        assert stored == leaves
        assert Tree(_hashes(stored)).root() == Tree(_hashes(leaves)).root()

    def test_an_empty_append_writes_nothing(self, store: Store) -> None:
        store.append_seals("default", [_seal("run-a", 0)])
        assert store.append_seals("default", []) == 1
        assert store.seal_count("default") == 1

    def test_checkpoints_are_kept_once_per_size(self, store: Store) -> None:
        first = CheckpointRow("default", 2, "origin\n2\nroot\n\n- sig\n", "2 aa")
        assert store.put_checkpoint(first)
        assert not store.put_checkpoint(CheckpointRow("default", 2, "another", "2 bb"))
        assert store.latest_checkpoint("default") == first
        assert store.put_checkpoint(CheckpointRow("default", 5, "five", "5 cc"))
        assert store.put_checkpoint(CheckpointRow("default", 3, "three", "3 dd"))
        latest = store.latest_checkpoint("default")
        assert latest is not None
        assert (latest.size, latest.note, latest.frontier) == (5, "five", "5 cc")
        assert store.latest_checkpoint("other") is None

    def test_the_seal_log_is_there_after_reopening(self, tmp_path: Path) -> None:
        if not self.persistent:
            return
        store = self.make_store(tmp_path)
        try:
            store.append_seals("default", [_seal("run-a", 0), _seal("run-a", 1, final=True)])
            store.put_checkpoint(CheckpointRow("default", 2, "note", "2 x"))
        finally:
            store.close()
        again = self.make_store(tmp_path)
        try:
            assert [r.seq for r in again.read_seals("default")] == [0, 1]
            latest = again.latest_checkpoint("default")
            assert latest is not None
            assert latest.size == 2
        finally:
            again.close()


def _hashes(leaves: list[bytes]) -> list[bytes]:
    from ..record.merkle import leaf_hash

    return [leaf_hash(leaf) for leaf in leaves]
