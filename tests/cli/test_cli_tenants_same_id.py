"""One run id under two tenants, from the CLI: ``runs`` shows the tenant (the two rows read
as duplicates), ``replay``, ``fork`` and ``resume`` take ``--tenant``, and the error
without one says how to name it from the command line (it said ``tenant=``, a Python
keyword)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import tachograph as tg
from tachograph.cli.app import EXIT_OK, EXIT_STORE

from .conftest import Tacho

AGENT = "tachograph.demo.agent:billing_agent"
TASK = "Order A-4471 arrived damaged. Please refund it."


@pytest.fixture
def twins(tmp_path: Path, runner: CliRunner) -> Tacho:
    db = tmp_path / "twins.db"
    from tachograph.demo.agent import billing_agent

    for tenant in ("alpha", "beta"):
        with tg.open_store(db, create=True) as store:
            tg.record_run(billing_agent, TASK, store=store, run_id="run_same_id", tenant=tenant)
    return Tacho(db, runner)


def test_runs_names_the_tenant_when_the_listing_spans_several(twins: Tacho) -> None:
    listed = twins("runs")
    assert listed.exit_code == EXIT_OK
    assert "TENANT" in listed.output
    assert "alpha" in listed.output
    assert "beta" in listed.output


def test_replay_names_the_tenant_with_an_option(twins: Tacho) -> None:
    ambiguous = twins("replay", "run_same_id", "--agent", AGENT)
    assert ambiguous.exit_code == EXIT_STORE, ambiguous.output
    assert "--tenant T" in ambiguous.output
    assert "?tenant=T" in ambiguous.output
    assert "name one with tenant=" not in ambiguous.output  # the Python keyword
    named = twins.json("replay", "run_same_id", "--agent", AGENT, "--tenant", "beta")
    assert named["verdict"] == "reproduced"
    forked = twins.json("fork", "run_same_id", "--at", "3", "--agent", AGENT, "--tenant", "beta")
    assert forked["new_run_id"].startswith("run_same_id.fork-")
    finished = twins("resume", "run_same_id", "--agent", AGENT, "--tenant", "alpha")
    assert "has finished" in finished.output  # the run was found in its tenant


def test_verify_diff_and_export_take_the_tenant_too(twins: Tacho, tmp_path: Path) -> None:
    assert twins("verify", "run_same_id").exit_code == EXIT_STORE
    verified = twins.json("verify", "run_same_id", "--tenant", "beta")
    assert [(r["tenant"], r["status"]) for r in verified["runs"]] == [("beta", "verified")]
    assert twins("verify", "--tenant", "beta").exit_code == 2  # a RUN's tenant: needs the RUN
    same = twins("diff", "run_same_id", "run_same_id", "--tenant", "alpha")
    assert same.exit_code == EXIT_OK, same.output
    out = tmp_path / "beta.jsonl"
    assert twins("export", "run_same_id", "--tenant", "beta", "-o", str(out)).exit_code == 0
    lines = out.read_text().splitlines()
    assert lines
    assert all('"tenant":"beta"' in line for line in lines)
    everything = tmp_path / "all-beta.jsonl"
    assert twins("export", "--all", "--tenant", "beta", "-o", str(everything)).exit_code == 0
    assert everything.read_text() == out.read_text()
