"""A store file removed (or replaced) while a run records into it: SQLite goes on writing to
the removed file's inode, every event is acknowledged and none is where anyone will read
it. The run's end says so instead of finishing as if all were kept."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

import tachograph as tg
from tachograph.errors import WriteFailed
from tachograph.store import SQLiteStore


@tg.tool(effect="read")
def _lookup(i: int) -> dict[str, Any]:
    return {"i": i}


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_run_whose_store_file_went_away_fails_at_its_end(tmp_path: Path, how: str) -> None:
    db = tmp_path / "runs.db"
    with tg.open_store(db, create=True):
        pass  # the store exists before the run opens it

    def agent(n: int) -> int:
        for i in range(n):
            _lookup(i)
            if i == 2:
                if how == "removed":
                    db.unlink()
                else:  # another file put at the path, as a restore from a backup would
                    shutil.copy(db, tmp_path / "copy.db")
                    os.replace(tmp_path / "copy.db", db)
        return n

    with pytest.raises(WriteFailed, match=f"was {how}"):
        tg.record_run(agent, 5, store=db)


def test_a_run_whose_store_stayed_finishes(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    result = tg.record_run(lambda n: n, 5, store=db)
    assert result.status == "ok"
    with tg.open_store(db) as store:
        assert store.run_info(result.run_id).status == "ok"
        assert store.detached() is None


def test_a_write_after_the_store_file_went_away_is_refused_before_its_effect(
    tmp_path: Path,
) -> None:
    """The intent of a write tool is committed into the removed file's inode: durable where
    nobody will read it. The commit's check of the path fails it, so the effect never runs,
    and the reads after the removal fail at the next append, not only at the run's end."""
    db = tmp_path / "runs.db"
    with tg.open_store(db, create=True):
        pass
    sent: list[int] = []

    @tg.tool(effect="write")
    def send(i: int) -> dict[str, Any]:
        sent.append(i)
        return {"sent": i}

    def agent(n: int) -> int:
        send(0)
        db.unlink()
        send(1)
        return n

    with pytest.raises(WriteFailed, match="was removed while it was open"):
        tg.record_run(agent, 2, store=db)
    assert sent == [0]


def test_reads_after_the_store_file_went_away_fail_before_the_run_ends(tmp_path: Path) -> None:
    """With every event durable, the first one after the removal fails its call."""
    db = tmp_path / "runs.db"
    with tg.open_store(db, create=True):
        pass
    done: list[int] = []

    def agent(n: int) -> int:
        _lookup(0)
        db.unlink()
        for i in range(1, n):
            _lookup(i)
            done.append(i)
        return n

    with pytest.raises(WriteFailed, match="was removed while it was open"):
        tg.record_run(agent, 50, store=db, durability="every")
    assert done == []


def test_a_relative_store_path_is_not_taken_for_a_removed_one_after_a_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's path is looked at after each commit: made absolute when the store was
    opened, so an agent that changes directory (the default store is a relative path) does
    not read as one whose store went away."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "work").mkdir()
    sent: list[int] = []

    @tg.tool(effect="write")
    def send(i: int) -> dict[str, Any]:
        sent.append(i)
        return {"sent": i}

    def agent(n: int) -> int:
        send(0)
        os.chdir(tmp_path / "work")
        send(1)
        return n

    result = tg.record_run(agent, 2, store="runs.db")
    assert result.status == "ok"
    assert sent == [0, 1]
    with tg.open_store(tmp_path / "runs.db") as store:
        assert store.run_info(result.run_id).status == "ok"


def test_an_engine_whose_check_fails_loses_no_commit_and_keeps_its_writer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``detached()`` of an engine that raises says nothing about the commit before it: the
    batch is not taken for a refused one (appended again), and the writer thread lives."""

    class Flaky(SQLiteStore):
        def detached(self) -> str | None:
            raise TimeoutError("stat timed out")

    store = Flaky(tmp_path / "runs.db")
    try:
        for _ in range(3):
            result = tg.record_run(lambda n: [_lookup(i) for i in range(n)], 4, store=store)
            assert result.status == "ok"
            assert store.verify(result.run_id).ok
            assert store.run_info(result.run_id).events == 10
    finally:
        store.close()
    assert "stat timed out" in caplog.text


def test_a_store_opened_through_a_symbolic_link_is_watched_at_its_target(
    tmp_path: Path,
) -> None:
    """SQLite follows the link and writes to its target (WAL beside it): the link pointed
    elsewhere, or removed, leaves the record whole where it was; the target removed does not."""
    target = tmp_path / "data" / "runs.db"
    target.parent.mkdir()
    link = tmp_path / "runs.db"
    link.symlink_to(target)
    with tg.open_store(link, create=True):
        pass
    assert target.exists()

    def repoint(n: int) -> int:
        for i in range(n):
            _lookup(i)
            if i == 1:
                link.unlink()
                link.symlink_to(tmp_path / "nowhere.db")
        return n

    result = tg.record_run(repoint, 4, store=link)
    assert result.status == "ok"
    with tg.open_store(target) as store:
        assert store.run_info(result.run_id).status == "ok"
        assert store.verify(result.run_id).ok

    link.unlink()
    link.symlink_to(target)

    def remove_target(n: int) -> int:
        for i in range(n):
            _lookup(i)
            if i == 1:
                target.unlink()
        return n

    with pytest.raises(WriteFailed, match=re.escape(f"store file {target.resolve()} was removed")):
        tg.record_run(remove_target, 4, store=link)
