"""``tacho`` against a PostgreSQL store, as subprocesses: the demo, every read command, and
``tacho migrate`` between engines, resumed after a SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tachograph.store import SQLiteStore
from tachograph.store.postgres import PostgresStore
from tachograph.testing import build_run

from .conftest import APP, TENANT_ROLE, PgCluster

TIMEOUT = 300
TACHO = [sys.executable, "-c", "import sys; from tachograph.cli import main; main(sys.argv[1:])"]


def _tacho(
    env: dict[str, str], cwd: Path, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*TACHO, *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=TIMEOUT,
    )  # fmt: skip
    if check:
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    return done


def test_demo_and_every_read_command_work_on_postgres(
    tmp_path: Path, child_env: dict[str, str], pg_url: str
) -> None:
    store = ["--store", pg_url]
    _tacho(child_env, tmp_path, *store, "demo")
    runs = json.loads(_tacho(child_env, tmp_path, *store, "runs", "--json").stdout)
    assert runs["runs"], runs
    run_id = runs["runs"][0]["run_id"]
    shown = json.loads(_tacho(child_env, tmp_path, *store, "show", run_id, "--json").stdout)
    assert shown
    _tacho(child_env, tmp_path, *store, "state", run_id, "--at", "9", "--json")
    verified = json.loads(_tacho(child_env, tmp_path, *store, "verify", run_id, "--json").stdout)
    assert verified["ok"] is True, verified
    exported = tmp_path / "run.jsonl"
    _tacho(child_env, tmp_path, *store, "export", run_id, "-o", str(exported))
    assert len(exported.read_text().splitlines()) == runs["runs"][0]["events"]
    _tacho(child_env, tmp_path, "verify", str(exported))
    _tacho(
        child_env, tmp_path, *store, "replay", run_id,
        "--agent", "tachograph.demo.agent:billing_agent",
    )  # fmt: skip
    every = json.loads(_tacho(child_env, tmp_path, *store, "verify", "--all", "--json").stdout)
    assert every["ok"] is True, every
    # doctor compares the schema with what this engine writes (it used to hold PostgreSQL's
    # numbering against SQLite's and warn on every PostgreSQL store)
    doctor = _tacho(child_env, tmp_path, *store, "doctor", "--json", check=False)
    schema = [f for f in json.loads(doctor.stdout)["findings"] if f["check"] == "schema"]
    assert [f["level"] for f in schema] == ["ok"], schema


@pytest.mark.parametrize("role", [TENANT_ROLE, "postgres"])
def test_demo_and_reads_through_a_tenant_url(
    tmp_path: Path, child_env: dict[str, str], pg_cluster: PgCluster, pg_database: str, role: str
) -> None:
    # a role row-level security holds to its tenant, and a superuser it does not hold: the
    # run is of the URL's tenant either way, and every command reads it through the same URL
    url = pg_cluster.url(pg_database, role) + "?tenant=acme"
    store = ["--store", url]
    demo = json.loads(_tacho(child_env, tmp_path, *store, "demo", "--json").stdout)
    assert demo["ok"] is True, demo
    run_id = demo["run_id"]
    shown = json.loads(_tacho(child_env, tmp_path, *store, "show", run_id, "--json").stdout)
    assert shown["run"]["tenant"] == "acme", shown["run"]
    verified = json.loads(_tacho(child_env, tmp_path, *store, "verify", run_id, "--json").stdout)
    assert verified["ok"] is True, verified
    exported = tmp_path / "run.jsonl"
    _tacho(child_env, tmp_path, *store, "export", run_id, "-o", str(exported))
    assert json.loads(exported.read_text().splitlines()[0])["tenant"] == "acme"
    _tacho(child_env, tmp_path, "verify", str(exported))
    _tacho(
        child_env, tmp_path, *store, "replay", run_id,
        "--agent", "tachograph.demo.agent:billing_agent",
    )  # fmt: skip
    with PostgresStore(pg_cluster.url(pg_database, APP), create=False) as every:
        assert every.run_info(run_id).tenant == "acme"
    other = _tacho(child_env, tmp_path, *store, "show", run_id, "--tenant", "globex", check=False)
    assert other.returncode != 0
    assert "confined to tenant 'acme'" in other.stderr, other.stderr


def _fill_sqlite(path: Path, runs: int, length: int) -> dict[str, list[Any]]:
    made = {}
    with SQLiteStore(path) as store:
        for n in range(runs):
            events = build_run(
                f"run-{n:02d}", length, tenant=("acme", "globex")[n % 2], status="ok"
            )
            store.append(events)
            made[f"run-{n:02d}"] = events
    return made


def test_migrate_sqlite_to_postgres_and_back(
    tmp_path: Path, child_env: dict[str, str], pg_url: str
) -> None:
    made = _fill_sqlite(tmp_path / "src.db", 6, 40)
    with SQLiteStore(tmp_path / "src.db") as src:  # a data subject's links go with the run
        src.link_subjects("acme", "run-00", [(3, "cust-9"), (1, "cust-9"), (1, "cust-1")])
    out = _tacho(child_env, tmp_path, "migrate", str(tmp_path / "src.db"), pg_url, "--json")
    report = json.loads(out.stdout)
    assert (report["ok"], report["runs"], report["copied_runs"]) == (True, 6, 6)
    assert (report["events_copied"], report["subject_links"]) == (240, 3)
    with PostgresStore(pg_url) as pg:
        for run_id, events in made.items():
            assert list(pg.read(run_id)) == events
        assert pg.run_subjects("acme", "run-00") == [(1, "cust-1"), (1, "cust-9"), (3, "cust-9")]
        assert pg.subject_events("acme", "cust-9") == [("run-00", 1), ("run-00", 3)]
    again = json.loads(
        _tacho(child_env, tmp_path, "migrate", str(tmp_path / "src.db"), pg_url, "--json").stdout
    )
    assert (again["skipped_runs"], again["events_copied"]) == (6, 0)
    back = tmp_path / "back.db"
    report = json.loads(
        _tacho(child_env, tmp_path, "migrate", pg_url, f"sqlite:///{back}", "--json").stdout
    )
    assert (report["ok"], report["copied_runs"], report["events_copied"]) == (True, 6, 240)
    with SQLiteStore(back) as copy:
        for run_id, events in made.items():
            assert list(copy.read(run_id)) == events
        assert copy.run_subjects("acme", "run-00") == [(1, "cust-1"), (1, "cust-9"), (3, "cust-9")]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_migrate_resumes_after_a_kill(
    tmp_path: Path, child_env: dict[str, str], pg_url: str
) -> None:
    made = _fill_sqlite(tmp_path / "src.db", 4, 3000)
    proc = subprocess.Popen(
        [*TACHO, "migrate", str(tmp_path / "src.db"), pg_url,
         "--batch", "100"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.stderr is not None
    for lines, _line in enumerate(proc.stderr, 1):
        if lines == 45:  # mid-way through the second run
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=TIMEOUT)
    assert proc.returncode == -signal.SIGKILL
    with PostgresStore(pg_url) as pg:
        partial = pg.count_events()
    assert 0 < partial < 12_000
    out = _tacho(child_env, tmp_path, "migrate", str(tmp_path / "src.db"), pg_url, "--json")
    report = json.loads(out.stdout)
    assert report["ok"] is True, report
    assert report["events_copied"] == 12_000 - partial
    assert report["skipped_runs"] + report["copied_runs"] == 4
    assert report["resumed_runs"] >= 1
    with PostgresStore(pg_url) as pg:
        assert pg.count_events() == 12_000
        for run_id, events in made.items():
            assert pg.verify(run_id).ok
            assert [e.hash for e in pg.read(run_id)] == [e.hash for e in events]


def test_tacho_audit_of_a_tenant_checks_what_it_sees_and_counts_what_it_does_not(
    tmp_path: Path, child_env: dict[str, str], pg_cluster: PgCluster, pg_database: str
) -> None:
    """The store audit is one chain; row-level security hides the other tenants' records
    from a role confined to one. Its ``tacho audit`` failed ("seq 9 where 2 was expected")
    in every store another tenant had used: it checks the records it sees and their links,
    and counts the hidden ones."""
    every = ["--store", pg_cluster.url(pg_database, APP) + "?tenant=globex"]
    acme = ["--store", pg_cluster.url(pg_database, TENANT_ROLE) + "?tenant=acme"]
    for store in (every, acme, every, acme):  # interleaved: acme's records have gaps
        run_id = json.loads(_tacho(child_env, tmp_path, *store, "demo", "--json").stdout)["run_id"]
        _tacho(child_env, tmp_path, *store, "show", run_id)  # an audited read
    seen = json.loads(_tacho(child_env, tmp_path, *acme, "audit", "--json").stdout)
    assert seen["verify"]["ok"] is True, seen
    assert seen["verify"]["hidden"] > 0
    assert {r["tenant"] for r in seen["records"]} == {"acme"}
    text = _tacho(child_env, tmp_path, *acme, "audit").stdout
    assert "of other tenants are not visible" in text
    whole = json.loads(
        _tacho(
            child_env, tmp_path, "--store", pg_cluster.url(pg_database, APP), "audit", "--json"
        ).stdout
    )
    assert whole["verify"]["ok"] is True
    assert whole["verify"]["hidden"] == 0
    # a superuser's session with ?tenant= sees every record (no row-level security): it is
    # held to the whole chain, where a gap is a gap
    su = ["--store", pg_cluster.url(pg_database) + "?tenant=acme"]
    seen_all = json.loads(_tacho(child_env, tmp_path, *su, "audit", "--json").stdout)
    assert (seen_all["verify"]["ok"], seen_all["verify"]["hidden"]) == (True, 0)
