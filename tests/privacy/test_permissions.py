"""The store's files are created 0600 and the folders it creates 0700, whatever the umask;
so is an export written with `-o`."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import tachograph
from tachograph.cli.app import cli

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0o022)  # the common default, which gives 0644 files and 0755 folders
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_store_files_and_folders_are_private(tmp_path: Path, open_umask: None) -> None:
    existing = tmp_path / "existing"
    existing.mkdir()
    os.chmod(existing, 0o755)
    db = existing / "a" / "b" / "runs.db"
    with tachograph.open_store(db, create=True) as store:
        with tachograph.record(store, actor="x") as run:
            tachograph.decide("d", 1)
            run.output = 1
        files = {p.name: _mode(p) for p in db.parent.iterdir()}
        assert files == {"runs.db": 0o600, "runs.db-wal": 0o600, "runs.db-shm": 0o600}
    assert _mode(existing / "a") == 0o700
    assert _mode(existing / "a" / "b") == 0o700
    assert _mode(existing) == 0o755  # a folder that existed is left as it was


def test_an_existing_store_keeps_its_mode(tmp_path: Path, open_umask: None) -> None:
    db = tmp_path / "runs.db"
    db.touch(mode=0o640)
    os.chmod(db, 0o640)
    tachograph.open_store(db, create=True).close()
    assert _mode(db) == 0o640  # the owner chose it


def test_export_file_is_private(tmp_path: Path, open_umask: None) -> None:
    db = tmp_path / "runs.db"
    result = tachograph.record_run(lambda task: task, "hi", store=str(db), actor="x")
    out = tmp_path / "run.jsonl"
    done = CliRunner().invoke(cli, ["--store", str(db), "export", result.run_id, "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert _mode(out) == 0o600
