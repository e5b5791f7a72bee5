"""``tacho migrate`` carries each run's data-subject links: an erasure asked of the new store
finds the subject's events there (it found nothing, and said so, with the id still in the
file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import tachograph as tg
from tachograph.capture.recorder import writer_for
from tachograph.cli.app import cli
from tachograph.lifecycle.erasure import SubjectRule
from tachograph.store import MemoryStore


def _record(path: Path) -> dict[str, list[str]]:
    runs: dict[str, list[str]] = {}
    with tg.open_store(path, create=True) as store:
        rule = SubjectRule(store, paths=["$.input.customer", "$.customer"])
        for customer in ("cust-1", "cust-2", "cust-1"):
            with tg.record(
                store, actor="support", input={"customer": customer}, listeners=[rule]
            ) as run:
                tg.emit("acme.lookup", {"customer": customer, "note": f"{customer} details"})
            runs.setdefault(customer, []).append(run.run_id)
        writer_for(store).drain()
    return runs


def test_subject_links_go_with_their_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TACHOGRAPH_STORE", "TACHOGRAPH_PII_KEY", "TACHOGRAPH_PII_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    src, dst = tmp_path / "src.db", tmp_path / "dst.db"
    runs = _record(src)
    runner = CliRunner()
    moved = runner.invoke(cli, ["migrate", str(src), f"sqlite:///{dst}", "--json"])
    assert moved.exit_code == 0, moved.output
    report = json.loads(moved.stdout)
    with tg.open_store(src) as before, tg.open_store(dst) as after:
        for tenant, run_id in before.run_keys():
            assert after.run_subjects(tenant, run_id) == before.run_subjects(tenant, run_id)
        linked = sum(len(before.run_subjects(t, r)) for t, r in before.run_keys())
        assert linked > 0
        assert report["subject_links"] == linked
        assert after.subject_events("default", "cust-1") == before.subject_events(
            "default", "cust-1"
        )
    again = json.loads(
        runner.invoke(cli, ["migrate", str(src), f"sqlite:///{dst}", "--json"]).stdout
    )
    assert (again["skipped_runs"], again["subject_links"]) == (3, 0)  # nothing twice

    erased = runner.invoke(
        cli, ["--store", str(dst), "erase", "--subject", "cust-1", "--reason", "art. 17"]
    )
    assert erased.exit_code == 0, erased.output
    with tg.open_store(dst) as after:
        for run_id in runs["cust-1"]:
            assert after.verify(run_id).erased  # the subject's events are gone there
        assert after.subject_events("default", "cust-1") == []
    assert b"cust-1 details" not in dst.read_bytes()


def test_the_memory_engine_lists_a_runs_links_too() -> None:
    store = MemoryStore()
    tg.record_run(lambda task: task, {"customer": "c-9"}, store=store, run_id="m-1")
    store.link_subjects("default", "m-1", [(1, "b"), (0, "a"), (1, "a")])
    assert store.run_subjects("default", "m-1") == [(0, "a"), (1, "a"), (1, "b")]
    assert store.run_subjects("default", "other") == []
