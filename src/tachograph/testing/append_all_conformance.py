"""The ``append_all`` part of the store conformance suite: several batches as one atomic unit.

Mixed into :class:`~tachograph.testing.conformance.StoreConformance`, so every engine that
runs the suite runs these too. ``tacho import`` stores a file whole or not at all through
:meth:`~tachograph.store.base.Store.append_all`; these tests hold every engine to that, for a
conflict in a later batch, a failure of the producer of the batches midway, and duplicates.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..errors import DuplicateConflict, SequenceConflict
from . import build_run

if TYPE_CHECKING:
    from ..record.event import Event
    from ..store.base import Store

__all__ = ["AppendAllConformance"]


class _ProducerFailed(Exception):
    """Raised by a batch producer midway, standing for a reader that fails mid-file."""


class AppendAllConformance:
    """``append_all`` tests; expects the ``store`` fixture and ``make_store`` of the suite."""

    def make_store(self, tmp_path: Path) -> Store:  # pragma: no cover - the suite's
        raise NotImplementedError

    def test_append_all_stores_every_batch_and_counts(self, store: Store) -> None:
        run_a, run_b = build_run("run-a", 5), build_run("run-b", 3)
        ticks: list[int] = []
        written, duplicates = store.append_all(
            iter([run_a[:2], run_a[2:], run_b]), progress=ticks.append
        )
        assert (written, duplicates) == (8, 0)
        assert sum(ticks) == 8
        assert list(store.read("run-a")) == run_a
        assert list(store.read("run-b")) == run_b
        assert store.head("run-a") == (4, run_a[-1].hash)

    def test_append_all_of_nothing_stores_nothing(self, store: Store) -> None:
        assert store.append_all(iter([])) == (0, 0)
        assert store.append_all([[]]) == (0, 0)
        assert store.count_events() == 0

    def test_append_all_counts_stored_events_as_duplicates(self, store: Store) -> None:
        events = build_run("run-a", 6)
        store.append(events[:4])
        assert store.append_all([events[:3], events[3:]]) == (2, 4)
        assert list(store.read("run-a")) == events
        assert store.runs()[0].events == 6

    def test_a_conflict_in_a_later_batch_stores_no_batch(self, store: Store) -> None:
        good = build_run("run-a", 4)
        other = build_run("run-b", 3)
        gap = build_run("run-c", 3)
        with pytest.raises(SequenceConflict):
            store.append_all([good[:2], good[2:], other, [gap[0], gap[2]]])
        assert store.count_events() == 0
        assert store.runs() == []
        assert store.head("run-a") is None
        # The same batches, without the gap, are then accepted whole.
        assert store.append_all([good[:2], good[2:], other, gap]) == (10, 0)

    def test_a_rival_of_a_stored_event_refuses_the_whole_unit(self, store: Store) -> None:
        stored = build_run("run-a", 3)
        store.append(stored)
        rival = build_run("run-a", 2)  # another recording under the same run id
        with pytest.raises(DuplicateConflict):
            store.append_all([build_run("run-b", 2), rival])
        assert store.count_events() == 3
        assert store.head("run-b") is None

    def test_a_producer_failing_midway_stores_nothing(self, store: Store) -> None:
        events = build_run("run-a", 6)

        def batches() -> Iterator[Sequence[Event]]:
            yield events[:3]
            raise _ProducerFailed("the file could not be read further")

        with pytest.raises(_ProducerFailed):
            store.append_all(batches())
        assert store.count_events() == 0
        assert store.runs() == []
        store.append(events)  # the store is usable afterwards
        assert store.count_events() == 6
