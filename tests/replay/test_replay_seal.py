"""Replay holds a stored run against its seals, as ``tacho verify RUN`` does.

A review found that a run whose chain verifies but whose seal fails (the store's owner cut
its tail and made the run summary agree) replayed as "reproduced": replay checked the chain
and the summary, never the seals. Now such a run is refused like one that does not verify,
and replayed only on request, labelled unverified (a simulation), with the seal's verdict in
the report.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import tachograph as tg
from tachograph.cli.app import cli as main
from tachograph.store import verify_stored


def _agent() -> Any:
    @tg.tool(effect="read", name="lookup")
    def lookup(i: int) -> int:
        return i * 10

    @tg.agent(name="sealed", tools=[lookup], code_version="1")
    def sealed(n: int) -> int:
        return sum(lookup(i) for i in range(n))

    return sealed


def _cut_last_event(db: Path, run_id: str) -> None:
    """What the store's owner can do: drop the last event and make the summary agree."""
    raw = sqlite3.connect(db, isolation_level=None)
    for trigger in ("events_append_only_delete", "payloads_no_delete"):
        raw.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    (last,) = raw.execute("SELECT MAX(seq) FROM events WHERE run_id=?", (run_id,)).fetchone()
    (head,) = raw.execute(
        "SELECT hash FROM events WHERE run_id=? AND seq=?", (run_id, last - 1)
    ).fetchone()
    raw.execute(
        "DELETE FROM payloads WHERE id IN (SELECT id FROM events WHERE run_id=? AND seq=?)",
        (run_id, last),
    )
    raw.execute("DELETE FROM events WHERE run_id=? AND seq=?", (run_id, last))
    raw.execute("UPDATE runs SET events=?, head_hash=? WHERE run_id=?", (last, head, run_id))
    raw.close()


def test_a_sealed_run_replays_with_its_seal_in_the_report(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    result = tg.record_run(_agent(), 3, store=db)
    report = tg.replay(db, result.run_id, _agent())
    assert report.reproduced, report.render()
    assert report.seal is not None
    assert report.seal["status"] == "unsigned"  # sealed at its end; no signing key here
    assert report.seal["sealed_seq"] == report.events - 1
    assert report.seal["final"] is True
    assert f"sealed up to seq {report.events - 1}" in report.render()
    assert report.to_dict()["seal"]["status"] == "unsigned"


def test_a_run_whose_seal_fails_is_not_replayed_as_reproduced(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    result = tg.record_run(_agent(), 3, store=db)
    _cut_last_event(db, result.run_id)
    # The chain and the summary agree: only the seal shows the cut.
    with tg.open_store(db) as store:
        assert verify_stored(store, result.run_id).ok
    with pytest.raises(tg.Unreplayable, match="seal fails") as caught:
        tg.replay(db, result.run_id, _agent())
    assert "its tail was cut" in str(caught.value)
    report = tg.replay(db, result.run_id, _agent(), allow_unverified=True)
    assert report.unverified
    assert report.simulation
    assert report.seal is not None
    assert report.seal["status"] == "failed"
    assert "WARNING: the run's seal fails" in report.render()


def test_tacho_replay_refuses_a_run_whose_seal_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "runs.db"
    (tmp_path / "sealed_agent.py").write_text(
        "import tachograph as tg\n\n"
        "@tg.tool(effect='read', name='lookup')\n"
        "def lookup(i: int) -> int:\n"
        "    return i * 10\n\n"
        "@tg.agent(name='sealed', tools=[lookup], code_version='1')\n"
        "def sealed(n: int) -> int:\n"
        "    return sum(lookup(i) for i in range(n))\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import sealed_agent

    result = tg.record_run(sealed_agent.sealed, 3, store=db)
    runner = CliRunner()
    args = ["--store", str(db), "replay", result.run_id, "--agent", "sealed_agent:sealed"]
    ok = runner.invoke(main, [*args, "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["seal"]["status"] == "unsigned"
    _cut_last_event(db, result.run_id)
    refused = runner.invoke(main, args)
    assert refused.exit_code == 1, refused.output
    assert "seal fails" in refused.output
    forced = runner.invoke(main, [*args, "--allow-unverified", "--json"])
    data = json.loads(forced.output)
    assert data["unverified"] is True
    assert data["kind"] == "simulation"
    assert data["seal"]["status"] == "failed"


def test_tacho_show_says_when_a_runs_seal_fails(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    result = tg.record_run(_agent(), 2, store=db)
    runner = CliRunner()
    args = ["--store", str(db), "show", result.run_id]
    healthy = runner.invoke(main, args)
    assert healthy.exit_code == 0, healthy.output
    assert "sealed up to seq 5 (store's own seals only)" in healthy.output
    assert json.loads(runner.invoke(main, [*args, "--json"]).output)["seal"]["final"] is True
    _cut_last_event(db, result.run_id)
    shown = runner.invoke(main, args)
    assert "TAMPERED" not in shown.output  # the chain alone cannot show the cut
    assert "SEAL FAILED: the run stops at seq 4, before the sealed seq 5" in shown.output
    data = json.loads(runner.invoke(main, [*args, "--json"]).output)
    # the chain verifies (no first failure), and the run fails by its seal, as verify says
    assert data["verification"]["first_failure"] is None
    assert data["verification"]["status"] == "failed"
    assert data["seal"]["status"] == "failed"


def test_state_diff_export_and_otel_export_say_when_a_runs_seal_fails(tmp_path: Path) -> None:
    """Each showed or sent a run cut after it was sealed as if whole (exit 0, nothing said),
    while ``verify``, ``show`` and ``replay`` failed it."""
    db = tmp_path / "runs.db"
    result = tg.record_run(_agent(), 3, store=db)
    _cut_last_event(db, result.run_id)
    runner = CliRunner()

    def tacho(*args: str) -> Any:
        return runner.invoke(main, ["--store", str(db), *args], catch_exceptions=False)

    state = tacho("state", result.run_id)
    assert state.exit_code == 1, state.output
    assert "SEAL FAILED" in state.output
    assert json.loads(tacho("state", result.run_id, "--json").stdout)["seal"]["status"] == "failed"
    diff = tacho("diff", result.run_id, result.run_id)
    assert diff.exit_code == 1
    assert "SEAL FAILED" in diff.output
    exported = tacho("export", result.run_id, "-o", str(tmp_path / "out.jsonl"))
    assert exported.exit_code == 1
    assert "SEAL FAILED" in exported.stderr
    pytest.importorskip("opentelemetry.sdk.trace")
    sent = tacho("otel", "export", result.run_id, "--endpoint", "http://127.0.0.1:9/v1/traces")
    assert sent.exit_code == 1
    assert "refusing to export a run that does not verify: its seal failed" in sent.output
