"""An erased payload that no erase record of the store audit names is pointed out by verify."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from click.testing import CliRunner

import tachograph as tg
from tachograph.cli.app import cli
from tachograph.testing import build_run


def _tacho(db: Path, *args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, ["--store", str(db), *args], catch_exceptions=False)


def _store(tmp_path: Path) -> Path:
    db = tmp_path / "t.db"
    with tg.open_store(db, create=True) as store:
        store.append(build_run("run-a", 6, payload=lambda seq: {"note": f"customer {seq}"}))
    return db


def _warned(db: Path) -> list[int] | None:
    result = _tacho(db, "verify", "run-a", "--json")
    assert result.exit_code == 0, result.output  # a warning, not a failure
    (run,) = json.loads(result.stdout)["runs"]
    return run.get("erased_without_record")


def test_an_erasure_through_tachograph_is_recorded_and_not_pointed_out(tmp_path: Path) -> None:
    db = _store(tmp_path)
    assert _tacho(db, "erase", "run-a", "--seq", "2", "--reason", "request 7").exit_code == 0
    assert _warned(db) is None


def test_a_payload_nulled_behind_the_stores_back_is_pointed_out(tmp_path: Path) -> None:
    db = _store(tmp_path)
    raw = sqlite3.connect(db, isolation_level=None)
    raw.execute("DROP TRIGGER payloads_erase_only")
    raw.execute(
        "UPDATE payloads SET body=NULL, salt=NULL WHERE id="
        "(SELECT id FROM events WHERE run_id='run-a' AND seq=3)"
    )
    raw.close()
    assert _warned(db) == [3]
    text = _tacho(db, "verify", "run-a")
    assert "ERASED WITHOUT RECORD: 1 payload(s) (seq 3)" in text.output


def test_an_erase_record_cut_from_the_audit_is_pointed_out(tmp_path: Path) -> None:
    db = _store(tmp_path)
    assert _tacho(db, "erase", "run-a", "--seq", "1", "--reason", "request 8").exit_code == 0
    raw = sqlite3.connect(db, isolation_level=None)
    raw.execute("DROP TRIGGER store_audit_append_only_delete")
    raw.execute("DELETE FROM store_audit WHERE action='erase'")
    raw.close()
    assert _warned(db) == [1]


def test_an_erasure_of_a_seq_the_run_has_not_names_its_seqs_and_no_other_step(
    tmp_path: Path,
) -> None:
    db = _store(tmp_path)
    result = _tacho(db, "erase", "run-a", "--seq", "9", "--reason", "request 9")
    assert result.exit_code == 2  # a usage error, as every seq outside a run is
    assert "has no event at seq 9 (it has seq 0..5); nothing was erased" in result.stderr
    assert "tacho runs" not in result.stderr  # the run is there: listing runs would not help
