"""``state`` over a store edited behind tachograph's back: what it shows of a run
that fails verification is still shown, marked ``TAMPERED`` (text) and in ``verification``
(``--json``), and it exits 1, as ``verify`` does for such a run."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tachograph.cli.app import EXIT_FAILED, EXIT_OK

from .conftest import Tacho


def _tamper(path: Path, run_id: str, *seqs: int) -> None:
    """Change the refund amount at each of ``seqs`` from 2500 to 2600, as someone with a copy
    of the file could (the append-only triggers dropped)."""
    db = sqlite3.connect(path)
    db.execute("DROP TRIGGER payloads_erase_only")
    for seq in seqs:
        (pid,) = db.execute(
            "SELECT id FROM events WHERE run_id=? AND seq=?", (run_id, seq)
        ).fetchone()
        (body,) = db.execute("SELECT body FROM payloads WHERE id=?", (pid,)).fetchone()
        edited = bytes(body).replace(b'"amount_cents":2500', b'"amount_cents":2600')
        assert edited != bytes(body)
        db.execute("UPDATE payloads SET body=? WHERE id=?", (edited, pid))
    db.commit()
    db.close()


# -- state --------------------------------------------------------------------------------


def test_state_of_a_tampered_run_is_shown_marked_and_exits_1(
    tacho: Tacho, run_id: str, store_path: Path
) -> None:
    _tamper(store_path, run_id, 9)
    text = tacho("state", run_id, "--at", "9")
    assert text.exit_code == EXIT_FAILED, text.output
    lines = text.stdout.splitlines()
    assert lines[0] == f"state of {run_id} after seq 9 (running)"
    assert lines[1].startswith(f"TAMPERED: {run_id}: FAILED at seq 9, check 5 (payload digest)")
    assert '"amount_cents": 2600' in text.stdout  # the state is still shown
    data = tacho.json("state", run_id, "--at", "9", code=EXIT_FAILED)
    assert data["pending"][0]["args"]["amount_cents"] == 2600
    verification = data["verification"]
    assert verification["status"] == "failed"
    assert [f["seq"] for f in verification["failures"]] == [9]
    # the run fails verification whatever step its state is asked at
    early = tacho("state", run_id, "--at", "3")
    assert early.exit_code == EXIT_FAILED
    assert "TAMPERED: " in early.stdout


def test_state_names_every_failing_seq(tacho: Tacho, run_id: str, store_path: Path) -> None:
    _tamper(store_path, run_id, 9, 10)
    text = tacho("state", run_id)
    assert text.exit_code == EXIT_FAILED
    (line,) = [line for line in text.stdout.splitlines() if line.startswith("TAMPERED: ")]
    assert "FAILED at seq 9" in line
    assert line.endswith("; failing seqs: 9, 10")
    data = tacho.json("state", run_id, code=EXIT_FAILED)
    assert [f["seq"] for f in data["verification"]["failures"]] == [9, 10]


def test_state_of_an_intact_run_is_unmarked(tacho: Tacho, run_id: str) -> None:
    text = tacho("state", run_id, "--at", "9")
    assert text.exit_code == EXIT_OK
    assert "TAMPERED" not in text.stdout
    assert '"amount_cents": 2500' in text.stdout
    data = tacho.json("state", run_id)
    assert data["verification"]["status"] == "verified"
    assert data["verification"]["failures"] == []
