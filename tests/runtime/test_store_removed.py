"""A store file removed (or replaced) while a run records into it: SQLite goes on writing to
the removed file's inode, every event is acknowledged and none is where anyone will read
it. The run's end says so instead of finishing as if all were kept."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

import tachograph as tg
from tachograph.errors import WriteFailed


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
