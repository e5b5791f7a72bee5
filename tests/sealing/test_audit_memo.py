"""A tenant's seal-log audit is kept per store between verdicts in one process, and made again
whenever the store may have changed: by another connection, this store object, or another
process. Replay, fork, resume and ``tacho show`` of one run no longer pay for the whole store
each time (docs/performance-history.md), and the memo must never hide a change."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tachograph as tg
from tachograph.sealing import log as seal_log
from tachograph.sealing.verdict import seal_verdict_of
from tachograph.store import SQLiteStore
from tachograph.store.audit import AuditEntry

from .helpers import record
from .test_owner_removals import _owner


@tg.tool(effect="pure", name="memo_lookup")
def _lookup(i: int) -> int:
    return i * 2


@tg.agent(name="memo_agent", tools=[_lookup], code_version="t")
def _agent(n: int) -> int:
    return sum(_lookup(i) for i in range(n))


@pytest.fixture
def audits(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tenants audited from now on (the real audit runs; its calls are counted)."""
    made: list[str] = []
    real = seal_log.audit_tenant

    def counting(store: object, tenant: str, **kwargs: object) -> seal_log.TenantAudit:
        made.append(tenant)
        return real(store, tenant, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(seal_log, "audit_tenant", counting)
    return made


_MOVE_SEAL = "UPDATE seals SET run_id='run-b' WHERE run_id='run-a'"
"""The owner files run-a's seals under run-b: the audit finds a seal moved."""


def _two_runs(db: Path) -> SQLiteStore:
    store = SQLiteStore(db)
    record(store, "run-a", 8, key=None)
    record(store, "run-b", 8, key=None)
    return store


def test_the_audit_is_kept_across_audited_reads_and_replays(
    tmp_path: Path, audits: list[str]
) -> None:
    with SQLiteStore(tmp_path / "t.db") as store:
        result = tg.record_run(_agent, 5, store=store, actor="memo")
        for _ in range(3):
            report = tg.replay(store, result.run_id, _agent)
            assert report.reproduced
            assert report.seal is not None
            assert report.seal["status"] == "unsigned"
        # each replay recorded its read in the store audit; none of them voided the audit
        assert audits == ["default"]
        assert sum(1 for r in store.read_audit() if r.action == "read") == 3


def test_a_seal_moved_by_another_connection_is_seen_at_once(
    tmp_path: Path, audits: list[str]
) -> None:
    db = tmp_path / "t.db"
    with _two_runs(db) as store:
        assert seal_verdict_of(store, "run-a", "default").status == "unsigned"
        assert seal_verdict_of(store, "run-a", "default").status == "unsigned"
        assert audits == ["default"]
        raw = _owner(db)
        raw.execute(_MOVE_SEAL)
        raw.close()
        verdict = seal_verdict_of(store, "run-a", "default")
        assert verdict.status == "failed"
        assert "a seal was moved" in (verdict.reason or "")
        assert audits == ["default", "default"]


def test_a_change_through_the_same_store_is_seen(tmp_path: Path, audits: list[str]) -> None:
    db = tmp_path / "t.db"
    with _two_runs(db) as store:
        assert seal_verdict_of(store, "run-a", "default").status == "unsigned"
        # the owner's own process, through this very store object: the run is deleted with
        # an audit record that is not a retention deletion, so its seals now name a run the
        # store no longer holds
        store.delete_run(
            "default",
            "run-b",
            audit=AuditEntry(action="owner.cleanup", actor="owner", tenant="default"),
        )
        verdict = seal_verdict_of(store, "run-a", "default")
        assert verdict.status == "failed"
        assert "run-b" in (verdict.reason or "")
        assert audits == ["default", "default"]


def test_a_change_by_another_process_is_seen(tmp_path: Path, audits: list[str]) -> None:
    db = tmp_path / "t.db"
    with _two_runs(db) as store:
        assert seal_verdict_of(store, "run-a", "default").status == "unsigned"
        script = textwrap.dedent(
            f"""
            import sqlite3
            raw = sqlite3.connect({str(db)!r}, isolation_level=None)
            for (name,) in raw.execute("SELECT name FROM sqlite_master WHERE type='trigger'"):
                raw.execute(f'DROP TRIGGER "{{name}}"')
            raw.execute({_MOVE_SEAL!r})
            raw.close()
            """
        )
        subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
        verdict = seal_verdict_of(store, "run-a", "default")
        assert verdict.status == "failed"
        assert audits == ["default", "default"]


def test_another_tenant_or_other_trusted_keys_are_audited_apart(
    tmp_path: Path, audits: list[str]
) -> None:
    from .helpers import make_key

    key, _ = make_key(tmp_path / "keys")
    with SQLiteStore(tmp_path / "t.db") as store:
        record(store, "run-a", 8, key=key)
        record(store, "run-x", 8, key=None, tenant="other")
        assert seal_verdict_of(store, "run-a", "default", keys=[]).status == "unsigned"
        assert seal_verdict_of(store, "run-a", "default", keys=[key.verifier]).status == "sealed"
        assert seal_verdict_of(store, "run-x", "other", keys=[]).status == "unsigned"
        assert audits == ["default", "default", "other"]
