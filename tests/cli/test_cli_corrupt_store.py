"""A store changed or damaged behind tachograph's back: each command gives a report (the
tampered event marked, the chain failing, exit 1) or one ``Error:`` line with the documented
exit code, never a traceback, and one bad row does not hide the rest. Each store is changed
with sqlite3 itself, its append-only triggers dropped first, as someone holding the file could.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import tachograph as tg
from tachograph.cli.app import EXIT_FAILED, EXIT_OK, EXIT_STORE
from tachograph.testing import build_run

from .conftest import Tacho

NOT_UTF8 = "CAST(X'61ff62' AS TEXT)"  # "a", a byte that is no UTF-8, "b"


def _tamper(db: Path, *statements: str) -> None:
    """Run ``statements`` against ``db`` with every append-only trigger dropped."""
    con = sqlite3.connect(db)
    triggers = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='trigger'")]
    for name in triggers:
        if "append_only" in name or "erase_only" in name:
            con.execute(f"DROP TRIGGER {name}")
    for statement in statements:
        con.execute(statement)
    con.commit()
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()


def _with_audit_record(tacho: Tacho, run_id: str) -> None:
    """One record in the store audit: a purpose-scoped read (``show`` records one)."""
    assert tacho("show", run_id).exit_code == EXIT_OK
    assert tacho.json("audit")["verify"]["records"] == 1


def _no_traceback(*outputs: str) -> None:
    for text in outputs:
        assert "Traceback" not in text


# -- the store audit ----------------------------------------------------------------------


def test_an_audit_record_whose_detail_is_not_json_fails_the_audit(
    tacho: Tacho, run_id: str, store_path: Path
) -> None:
    _with_audit_record(tacho, run_id)
    _tamper(store_path, "UPDATE store_audit SET detail=X'7b6e6f74' WHERE seq=0")  # "{not"
    text = tacho("audit")
    assert text.exit_code == EXIT_FAILED, text.output
    assert "store audit FAILED" in text.stdout
    assert "record 0: the stored record cannot be read: detail is not a JSON object" in text.stdout
    data = tacho.json("audit", code=EXIT_FAILED)
    assert data["verify"]["ok"] is False
    assert {p["seq"] for p in data["verify"]["problems"]} == {0}
    assert [r["seq"] for r in data["records"]] == [0]
    # verify reads the audit too (erasures without a record), and still reports the run
    assert tacho.json("verify")["ok"] is True


def test_an_audit_record_whose_text_is_not_utf8_fails_the_audit(
    tacho: Tacho, run_id: str, store_path: Path
) -> None:
    _with_audit_record(tacho, run_id)
    _tamper(store_path, f"UPDATE store_audit SET ts={NOT_UTF8} WHERE seq=0")
    text = tacho("audit")
    assert text.exit_code == EXIT_FAILED, text.output
    assert "record 0: the stored record cannot be read: ts is not valid UTF-8" in text.stdout
    assert "a\\udcffb" in text.stdout  # the bad byte shown escaped, as show shows it
    data = tacho.json("audit", code=EXIT_FAILED)
    assert data["verify"]["ok"] is False
    assert data["records"][0]["ts"] == "a\\udcffb"
    assert tacho("audit", "--action", "read").exit_code == EXIT_FAILED


# -- events holding text that is not UTF-8 --------------------------------------------------


def test_an_event_whose_actor_is_not_utf8_is_shown_as_json_and_exported_as_stored(
    tacho: Tacho, run_id: str, store_path: Path, tmp_path: Path
) -> None:
    _tamper(store_path, f"UPDATE events SET actor={NOT_UTF8} WHERE run_id='{run_id}' AND seq=1")
    data = tacho.json("show", run_id, code=EXIT_FAILED)  # valid JSON, the event marked
    row = data["events"][1]
    assert (row["seq"], row["tampered"], row["actor"]) == (1, True, "a\\udcffb")
    assert [e["seq"] for e in data["events"] if e["tampered"]] == [1]
    full = tacho.json("show", run_id, "--full", code=EXIT_FAILED)
    assert full["events"][1]["actor"] == "a\\udcffb"
    # export: the stored bytes, the run named TAMPERED, exit 1, as for any tampered run
    out = tmp_path / "run.jsonl"
    exported = tacho("export", run_id, "-o", str(out))
    assert exported.exit_code == EXIT_FAILED, exported.output
    assert f"TAMPERED: {run_id}: FAILED at seq 1, check 1" in exported.stderr
    lines = out.read_bytes().splitlines()
    assert len(lines) == 15
    assert b'"actor":"a\xffb"' in lines[1]
    to_stdout = tacho("export", run_id)
    assert to_stdout.exit_code == EXIT_FAILED
    assert to_stdout.stdout_bytes == out.read_bytes()
    checked = tacho("verify", str(out))
    assert checked.exit_code == EXIT_FAILED
    assert "FAILED at seq 1 (line 2), check 1" in checked.stdout


# -- a damaged file ---------------------------------------------------------------------------


def test_a_damaged_schema_is_a_store_error_for_every_command(
    tacho: Tacho, run_id: str, store_path: Path
) -> None:
    _tamper(store_path)  # checkpointed: the schema is in the file itself
    data = bytearray(store_path.read_bytes())
    at = data.find(b"tablepayloadspayloads")
    assert at > 0
    data[at + 6] = 0x8D  # a byte of a table name that is no UTF-8
    store_path.write_bytes(bytes(data))
    for args in (("runs",), ("verify", "--json"), ("audit",), ("show", run_id), ("doctor",)):
        result = tacho(*args)
        assert result.exit_code == EXIT_STORE, (args, result.output)
        assert result.stderr.startswith("Error: cannot open store "), result.stderr
        assert "malformed database schema" in result.stderr
        assert result.stdout == ""


def test_a_damaged_audit_page_is_a_store_error(tacho: Tacho, run_id: str, store_path: Path) -> None:
    _with_audit_record(tacho, run_id)
    _tamper(store_path)
    con = sqlite3.connect(store_path)
    (page,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name='store_audit'").fetchone()
    (size,) = con.execute("PRAGMA page_size").fetchone()
    con.close()
    data = bytearray(store_path.read_bytes())
    data[(page - 1) * size : page * size] = b"\xa5" * size
    store_path.write_bytes(bytes(data))
    for args in (("audit",), ("audit", "--json")):
        result = tacho(*args)
        assert result.exit_code == EXIT_STORE, (args, result.output)
        assert "Error: reading the store audit of" in result.stderr
        assert "database disk image is malformed" in result.stderr
        assert result.stdout == ""


# -- a run summary holding text that is not UTF-8 ---------------------------------------------


def test_one_unreadable_run_summary_fails_that_run_and_hides_no_other(
    tacho: Tacho, run_id: str, store_path: Path, tmp_path: Path
) -> None:
    with tg.open_store(store_path) as store:
        store.append(build_run("other", 4))
    _tamper(store_path, f"UPDATE runs SET actor={NOT_UTF8} WHERE run_id='{run_id}'")
    result = tacho("verify", "--json")
    assert result.exit_code == EXIT_FAILED, result.output
    data = json.loads(result.stdout)
    by_run = {r["run_id"]: r for r in data["runs"]}
    assert by_run["other"]["status"] == "verified"
    assert by_run[run_id]["status"] == "failed"
    assert "not valid UTF-8" in by_run[run_id]["first_failure"]["message"]
    assert (data["verified"], data["failed"]) == (1, 1)
    text = tacho("verify")
    assert text.exit_code == EXIT_FAILED
    assert "1 of 2 run(s) verified, 1 FAILED" in text.stdout
    # listed, with the bad byte escaped
    listed = tacho("runs")
    assert listed.exit_code == EXIT_OK, listed.output
    assert "a\\udcffb" in listed.stdout
    assert "other" in listed.stdout
    runs = tacho.json("runs")["runs"]
    assert {r["run_id"]: r["actor"] for r in runs}[run_id] == "a\\udcffb"
    # every run exported, the failed one named
    out = tmp_path / "all.jsonl"
    exported = tacho("export", "--all", "-o", str(out))
    assert exported.exit_code == EXIT_FAILED, exported.output
    assert f"TAMPERED: {run_id}" in exported.stderr
    assert len(out.read_bytes().splitlines()) == 15 + 4


# -- a payload that is not JSON ---------------------------------------------------------------


@pytest.mark.parametrize("body", [b"{not", b"[" * 5000, b"\xff\xfe"])
def test_show_marks_a_payload_that_is_not_json_and_shows_the_rest(
    tacho: Tacho, run_id: str, store_path: Path, body: bytes
) -> None:
    con = sqlite3.connect(store_path)
    (pid,) = con.execute("SELECT id FROM events WHERE run_id=? AND seq=2", (run_id,)).fetchone()
    con.close()
    _tamper(store_path, f"UPDATE payloads SET body=X'{body.hex()}' WHERE id={pid}")
    text = tacho("show", run_id)
    assert text.exit_code == EXIT_FAILED, text.output  # shown whole, and a failure
    assert f"TAMPERED: {run_id}: FAILED at seq 2, check 5" in text.stdout
    rows = {line.split()[0]: line for line in text.stdout.splitlines() if line[:1].isdigit()}
    assert len(rows) == 15
    assert "TAMPERED  (the stored payload is not valid JSON)" in rows["2"]
    assert "lookup_order(order_id=A-4471)" in rows["4"]
    data = tacho.json("show", run_id, code=EXIT_FAILED)
    assert len(data["events"]) == 15
    assert [e["seq"] for e in data["events"] if e["tampered"]] == [2]
    assert data["events"][2]["summary"] == "(the stored payload is not valid JSON)"
    assert data["verification"]["status"] == "failed"
    full = tacho.json("show", run_id, "--full", code=EXIT_FAILED)
    assert full["events"][2]["payload"] is None
    assert "(the stored payload is not valid JSON)" in tacho("show", run_id, "--full").stdout
    for purpose in ("metrics", "replay"):
        shown = tacho("show", run_id, "--purpose", purpose)
        assert shown.exit_code == EXIT_FAILED, shown.output
    _no_traceback(text.output)
