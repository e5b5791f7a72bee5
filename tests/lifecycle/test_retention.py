"""Retention: windows per type and run, the six-month audit floor, holds, overrides; plan
counts per type and run on a store of mixed ages; apply erases and deletes, once."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import tachograph
from tachograph.cli.app import cli
from tachograph.errors import AppendRefused, PolicyError
from tachograph.lifecycle import retention
from tachograph.lifecycle.audit import verify_audit
from tachograph.lifecycle.blobs import BlobStore
from tachograph.record.event import Event, new_event
from tachograph.store import SQLiteStore
from test_independent_verifier import audit as independent_audit

NOW = "2027-06-01T00:00:00.000000Z"
STEPS: list[tuple[str, dict[str, Any], str | None]] = [
    ("run.started", {"input": "q", "env": {}}, None),
    ("model.request", {"request": {"messages": ["hi"]}}, None),
    ("model.response", {"response": {"text": "raw"}}, None),
    ("tool.requested", {"tool": "refund", "args": {"a": 1}, "effect": "irreversible"}, "k1"),
    ("tool.completed", {"tool": "refund", "result": {"ok": True}}, "k1"),
    ("tool.requested", {"tool": "lookup", "args": {"a": 2}, "effect": "read"}, "k2"),
    ("tool.completed", {"tool": "lookup", "result": {"row": 1}}, "k2"),
    ("decision", {"name": "route", "chosen": "b"}, None),
    ("run.finished", {"status": "ok"}, None),
]


def _run(run_id: str, day: str) -> list[Event]:
    events: list[Event] = []
    prev = None
    for seq, (kind, payload, key) in enumerate(STEPS):
        event = new_event(
            run_id=run_id,
            seq=seq,
            type=kind,
            actor="agent",
            payload=payload,
            prev_hash=prev,
            idempotency_key=key,
            ts=f"{day}T10:00:{seq:02d}.000000Z",
        )
        events.append(event)
        prev = event.hash
    return events


AGES = {  # run id -> the day it ran (NOW is 2027-06-01)
    "fresh": "2027-05-25",  # 7 days
    "month-old": "2027-04-20",  # 42 days: raw model traffic past 30 days
    "half-year": "2026-11-01",  # 212 days: past the audit floor, not past 400 days
    "old": "2025-12-01",  # 547 days: past everything
    "scratch-1": "2027-05-01",  # 31 days, in a 7-day run window, but within the floor
    "scratch-2": "2026-09-01",  # 273 days, in the run window and past the floor
    "case-7": "2025-12-01",  # as old as "old", but on legal hold
}


@pytest.fixture
def corpus(store: SQLiteStore) -> SQLiteStore:
    for run_id, day in AGES.items():
        store.append(_run(run_id, day))
    return store


POLICY = """
[retention]
default = "400d"
[retention.types]
"model.request" = "30d"
"model.response" = "30d"
"tool.*" = "60d"
"decision" = "60d"
[[retention.runs]]
match = "scratch-*"
window = "7d"
[[retention.holds]]
runs = "case-*"
reason = "litigation hold 2026-17"
"""


def _policy(tmp_path: Path, text: str = POLICY) -> retention.RetentionPolicy:
    path = tmp_path / "retention.toml"
    path.write_text(text)
    return retention.load_policy(path)


def _by_run(plan: retention.RetentionPlan) -> dict[str, retention.RunPlan]:
    return {r.run_id: r for r in plan.runs}


def test_the_plan_on_a_store_of_mixed_ages(corpus: SQLiteStore, tmp_path: Path) -> None:
    plan = retention.plan(corpus, _policy(tmp_path), now=NOW)
    runs = _by_run(plan)
    assert "fresh" not in runs  # nothing past any window
    month = runs["month-old"]
    assert month.action == "erase"
    assert dict(month.counts) == {"model.request": 1, "model.response": 1}
    # Past 60 days: the read tool's events go; the irreversible tool's and the decision are
    # the audit record, kept to the six-month floor.
    # Past the floor too: the irreversible tool's events and the decision go as well; run
    # start and end keep their 400 days.
    assert dict(runs["half-year"].counts) == {
        "decision": 1,
        "model.request": 1,
        "model.response": 1,
        "tool.completed": 2,
        "tool.requested": 2,
    }
    assert runs["old"].action == "erase"
    assert sum(runs["old"].counts.values()) == len(STEPS)
    assert runs["scratch-1"].action == "erase"  # its run window passed, the floor did not
    assert dict(runs["scratch-1"].floor_kept) == {}
    assert runs["scratch-2"].action == "delete"
    assert sum(runs["scratch-2"].counts.values()) == len(STEPS)
    assert (runs["case-7"].action, runs["case-7"].reason) == ("hold", "litigation hold 2026-17")
    totals = plan.totals()
    assert totals["delete_runs"] == 1
    assert totals["held_runs"] == 1


def test_the_audit_floor_keeps_decisions_and_effects_for_six_months(
    corpus: SQLiteStore, tmp_path: Path
) -> None:
    runs = _by_run(retention.plan(corpus, _policy(tmp_path), now=NOW))
    # month-old (42 days) is past the 30-day model window and the 60-day tool window is not
    # yet reached; scratch-1 (31 days) likewise. At 100 days the floor shows:
    later = _by_run(retention.plan(corpus, _policy(tmp_path), now="2027-07-30T00:00:00.000000Z"))
    kept = later["month-old"].floor_kept
    assert dict(kept) == {"decision": 1, "tool.completed": 1, "tool.requested": 1}
    assert "decision" not in later["month-old"].counts
    assert later["month-old"].counts["tool.requested"] == 1  # the read tool's intent
    assert runs["month-old"].floor_kept == {}


def test_the_floor_cannot_be_lowered_without_an_override(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="six months"):
        _policy(tmp_path, '[retention]\naudit_floor = "30d"\n')
    lowered = _policy(
        tmp_path,
        '[retention]\naudit_floor = "30d"\n[[retention.overrides]]\ntypes = ["*"]\n'
        'floor = "30d"\nreason = "sandbox tenant"\n',
    )
    assert lowered.floor("decision") == 30 * retention.DAY
    with pytest.raises(PolicyError, match="reason"):
        _policy(tmp_path, '[retention]\n[[retention.overrides]]\ntypes = ["*"]\nfloor = "30d"\n')
    with pytest.raises(PolicyError, match="duration"):
        _policy(tmp_path, '[retention]\ndefault = "soon"\n')
    # NaN compares false with everything: taken as a duration it lowered no floor and kept none
    for text in ("[retention]\naudit_floor = nan\n", "[retention]\ndefault = nan\n"):
        with pytest.raises(PolicyError, match="nan"):
            _policy(tmp_path, text)


def test_an_override_is_recorded_when_applied(corpus: SQLiteStore, tmp_path: Path) -> None:
    policy = _policy(
        tmp_path,
        POLICY + '[[retention.overrides]]\ntypes = ["decision"]\nfloor = "30d"\n'
        'reason = "decisions here are test data"\n',
    )
    plan = retention.plan(corpus, policy, now="2027-07-30T00:00:00.000000Z")
    assert "decision" in _by_run(plan)["month-old"].counts
    retention.apply(corpus, plan, actor="ops")
    overrides = [r for r in corpus.read_audit() if r.action == "retention.override"]
    assert [r.detail["reason"] for r in overrides] == ["decisions here are test data"]


def test_apply_erases_deletes_and_records_once(corpus: SQLiteStore, tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    plan = retention.plan(corpus, policy, now=NOW)
    done = retention.apply(corpus, plan, actor="ops")
    assert done["deleted_runs"] == 1
    assert done["deleted_events"] == len(STEPS)
    assert done["erased"] == plan.totals()["erase_payloads"] > 0
    assert {r.run_id for r in corpus.runs()} == set(AGES) - {"scratch-2"}
    for report in corpus.verify_all():
        assert report.ok, report.render()
    out = io.BytesIO()
    tachograph.export_run(corpus, "old", out)
    lines = out.getvalue().decode().rstrip("\n").split("\n")
    assert independent_audit(lines) == list(range(len(STEPS)))
    assert corpus.verify("case-7").erased == ()
    actions = [r.action for r in corpus.read_audit()]
    assert actions.count("retention.delete") == 1
    assert verify_audit(corpus).ok
    # Applying again: nothing left to do, nothing more recorded.
    again = retention.plan(corpus, policy, now=NOW)
    assert again.totals()["erase_payloads"] == 0
    assert again.totals()["delete_runs"] == 0
    before = len(list(corpus.read_audit()))
    retention.apply(corpus, again)
    assert len(list(corpus.read_audit())) == before


def test_a_deleted_run_stays_deleted(corpus: SQLiteStore, tmp_path: Path) -> None:
    retention.apply(corpus, retention.plan(corpus, _policy(tmp_path), now=NOW))
    with pytest.raises(AppendRefused, match="deleted by retention"):
        corpus.append(_run("scratch-2", "2027-05-30"))


def test_a_deleted_run_whose_summary_came_back_is_refused_in_the_same_words(
    corpus: SQLiteStore, tmp_path: Path
) -> None:
    """Append checks deleted_runs itself only for a run with no summary; a summary that
    outlived the deletion (put back by hand here) leaves the refusal to the table's trigger,
    which must read as the same refusal, not as an event id "already stored"."""
    import sqlite3

    retention.apply(corpus, retention.plan(corpus, _policy(tmp_path), now=NOW))
    events = _run("scratch-2", "2027-05-30")
    db = sqlite3.connect(corpus.path)
    with db:
        db.execute(
            "INSERT INTO runs (tenant, run_id, actor, started_at, last_at, events, head_hash) "
            "VALUES ('default', 'scratch-2', 'agent', ?, ?, ?, ?)",
            (events[0].ts, events[-2].ts, len(events) - 1, events[-2].hash),
        )
    db.close()
    with pytest.raises(AppendRefused) as refused:
        corpus.append(events[-1:])  # the next event after that head: only the trigger refuses
    assert "already stored" not in str(refused.value)
    message = str(refused.value)
    assert "run 'scratch-2' of tenant 'default' was deleted by retention at 20" in message
    assert message.endswith("; its id cannot be used again")
    assert refused.value.run_id == "scratch-2"
    from tachograph.store.sqlite_lifecycle import DELETED_RUN_REFUSAL, LIFECYCLE_MIGRATION

    assert f"RAISE(ABORT, '{DELETED_RUN_REFUSAL}')" in LIFECYCLE_MIGRATION
    assert corpus.events("scratch-2") == []


def test_expired_blobs_are_planned_and_removed(corpus: SQLiteStore) -> None:
    blobs = BlobStore.beside(corpus)
    short = blobs.put(b"short-lived", ttl=86400, now="2027-05-01T00:00:00.000000Z")
    kept = blobs.put(b"kept", ttl=None)
    plan = retention.plan(corpus, now=NOW, blobs=blobs)
    assert [b.digest for b in plan.blobs] == [short["$blob"]]
    assert retention.apply(corpus, plan, blobs=blobs)["deleted_blobs"] == 1
    assert blobs.get(short["$blob"]) is None
    assert blobs.get(kept["$blob"]) == b"kept"


def test_the_default_keeps_raw_model_output_shorter_than_decisions() -> None:
    policy = retention.DEFAULT_RETENTION
    assert policy.window("model.response") < policy.window("decision")
    assert policy.window("model.request") < policy.window("decision")
    assert policy.floor("decision") >= 183 * retention.DAY


def test_tacho_retention_plan_and_apply(corpus: SQLiteStore, tmp_path: Path) -> None:
    path = tmp_path / "retention.toml"
    path.write_text(POLICY)
    base = ["--store", corpus.path, "retention"]
    runner = CliRunner()
    shown = runner.invoke(cli, [*base, "plan", "--policy", str(path), "--now", "2027-06-01"])
    assert shown.exit_code == 0, shown.output
    assert "scratch-2  delete  run.started" in shown.output
    assert "case-7     hold" in shown.output
    assert "would: erase" in shown.output
    # applied, a plan for a time to come would delete what the floor keeps today
    future = runner.invoke(
        cli, [*base, "apply", "--policy", str(path), "--now", "2027-06-01", "--json"]
    )
    assert future.exit_code == 2, future.output
    assert "later than now" in future.output
    assert corpus.run_info("scratch-2") is not None  # nothing deleted
    applied = runner.invoke(cli, [*base, "apply", "--policy", str(path), "--json"])
    assert applied.exit_code == 0, applied.output
    assert '"deleted_runs": 0' in applied.output  # as of today, nothing is past its window
    bad = tmp_path / "bad.toml"
    bad.write_text('[retention]\naudit_floor = "1d"\n')
    refused = runner.invoke(cli, [*base, "plan", "--policy", str(bad)])
    assert refused.exit_code == 2
    assert "six months" in refused.output
