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
