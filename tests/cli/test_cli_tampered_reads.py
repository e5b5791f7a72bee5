"""``state`` and ``diff`` over a store edited behind tachograph's back: what they show of a run
that fails verification is still shown, marked ``TAMPERED`` (text) and in ``verification``
(``--json``), and they exit 1, as ``verify`` does for such a run."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tachograph.cli.app import EXIT_FAILED, EXIT_OK

from .conftest import Tacho

V2 = "tachograph.demo.agent:billing_agent_v2"


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


@pytest.fixture
def fork_id(tacho: Tacho, run_id: str) -> str:
    """A fork of the demo run at seq 7 by the agent that refunds half (1250)."""
    result = tacho("fork", run_id, "--at", "7", "--agent", V2)
    assert result.exit_code == EXIT_OK, result.output
    return result.stdout.strip().splitlines()[-1].removeprefix("new run: ")


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


# -- diff ---------------------------------------------------------------------------------


def test_diff_with_a_tampered_run_is_shown_marked_and_exits_1(
    tacho: Tacho, run_id: str, fork_id: str, store_path: Path
) -> None:
    _tamper(store_path, run_id, 9)
    text = tacho("diff", run_id, fork_id)
    assert text.exit_code == EXIT_FAILED
    lines = text.stdout.splitlines()
    assert lines[0].startswith(f"TAMPERED: {run_id}: FAILED at seq 9, check 5 (payload digest)")
    assert lines[1].startswith("first difference at seq 9: ")
    assert "  $.payload.args.amount_cents: 2600 -> 1250" in lines
    data = tacho.json("diff", run_id, fork_id, code=EXIT_FAILED)
    assert data["changes"] == [{"path": "$.payload.args.amount_cents", "old": 2600, "new": 1250}]
    verification = data["verification"]
    assert verification["ok"] is False
    assert verification["run_a"]["run_id"] == run_id
    assert verification["run_a"]["status"] == "failed"
    assert [f["seq"] for f in verification["run_a"]["failures"]] == [9]
    assert verification["run_b"]["status"] == "verified"
    # either side
    swapped = tacho("diff", fork_id, run_id)
    assert swapped.exit_code == EXIT_FAILED
    assert swapped.stdout.startswith(f"TAMPERED: {run_id}: ")


def test_diff_of_a_tampered_run_with_itself_is_same_but_exits_1(
    tacho: Tacho, run_id: str, store_path: Path
) -> None:
    _tamper(store_path, run_id, 9)
    text = tacho("diff", run_id, run_id)
    assert text.exit_code == EXIT_FAILED
    lines = text.stdout.splitlines()
    assert [line.startswith("TAMPERED: ") for line in lines] == [True, False]  # marked once
    assert lines[1] == f"{run_id} and {run_id} record the same 15 steps"
    data = tacho.json("diff", run_id, run_id, code=EXIT_FAILED)
    assert data["same"] is True
    assert data["verification"]["ok"] is False


def test_diff_of_intact_runs_is_unmarked(tacho: Tacho, run_id: str, fork_id: str) -> None:
    text = tacho("diff", run_id, fork_id)
    assert text.exit_code == EXIT_FAILED  # they differ, like diff(1)
    assert "TAMPERED" not in text.stdout
    assert "  $.payload.args.amount_cents: 2500 -> 1250" in text.stdout.splitlines()
    data = tacho.json("diff", run_id, fork_id, code=EXIT_FAILED)
    assert data["verification"]["ok"] is True
    assert data["verification"]["run_a"]["status"] == "verified"
    assert data["verification"]["run_b"]["status"] == "verified"
    same = tacho("diff", run_id, run_id)
    assert same.exit_code == EXIT_OK
    assert "TAMPERED" not in same.stdout
    assert tacho.json("diff", run_id, run_id)["verification"]["ok"] is True
