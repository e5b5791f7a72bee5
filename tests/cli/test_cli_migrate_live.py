"""``tacho migrate`` of a run that is still being recorded: only the events it verified are
copied (the run went on past them, and the copy was reported FAILED with events no one had
verified); the next migrate copies the rest, resuming."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tachograph.cli import migrate as migrate_module
from tachograph.store import SQLiteStore
from tachograph.testing import build_run


def test_a_run_growing_during_the_copy_copies_what_was_verified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = build_run("live", 9)
    src = SQLiteStore(tmp_path / "src.db")
    dst = SQLiteStore(tmp_path / "dst.db")
    src.append(events[:5])
    original = migrate_module.verify_stored
    grown: list[bool] = []

    def verify_then_grow(store: Any, run_id: str, **kwargs: Any) -> Any:
        report = original(store, run_id, **kwargs)
        if store is src and not grown:  # the recorder appends right after the check
            src.append(events[5:])
            grown.append(True)
        return report

    monkeypatch.setattr(migrate_module, "verify_stored", verify_then_grow)
    first = migrate_module.migrate(src, dst)
    assert first.failed == []
    assert first.copied_runs == 1
    assert dst.head("live") == (4, events[4].hash)  # what was verified, no more
    second = migrate_module.migrate(src, dst)
    assert second.failed == []
    assert second.resumed_runs == 1
    assert dst.head("live") == (8, events[8].hash)
    assert dst.verify("live").ok
    src.close()
    dst.close()
