"""What a new user's walk through the privacy docs found in ``tacho erase``, ``tacho audit``
and ``tacho resume``: a seq outside the run is a usage error as everywhere else, the
audit's failure report keeps one line a problem, an unfiltered empty audit does not say
"match these filters", and ``--takeover`` alone is refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import tachograph as tg
from tachograph.cli.app import EXIT_FAILED, EXIT_USAGE
from tachograph.lifecycle.audit import AuditEntry

from .conftest import Tacho


def test_a_seq_outside_the_run_is_a_usage_error_and_erases_nothing(
    tacho: Tacho, run_id: str, store_path: Path
) -> None:
    result = tacho("erase", run_id, "--seq", "1", "--seq", "99", "--reason", "x")
    assert result.exit_code == EXIT_USAGE, result.output
    assert "has no event at seq 99" in result.output
    with tg.open_store(store_path) as store:
        assert store.verify(run_id).erased == ()
    missing = tacho("erase", "run_nope", "--reason", "x")
    assert missing.exit_code == 3  # an unknown run stays a store error


def test_the_audits_failure_report_keeps_a_line_a_problem(
    tacho: Tacho, run_id: str, store_path: Path
) -> None:
    assert tacho("erase", run_id, "--seq", "1", "--reason", "one").exit_code == 0
    assert tacho("erase", run_id, "--seq", "2", "--reason", "two").exit_code == 0
    db = sqlite3.connect(store_path)
    db.execute("DROP TRIGGER store_audit_append_only_update")
    db.execute("UPDATE store_audit SET actor = 'forged' WHERE action = 'erase'")
    db.commit()
    db.close()
    result = tacho("audit")
    assert result.exit_code == EXIT_FAILED
    assert "\\x0a" not in result.output  # the report's own line feeds are lines
    lines = [line for line in result.output.splitlines() if line.strip().startswith("record ")]
    assert len(lines) >= 2, result.output


def test_an_empty_audit_says_filters_only_when_there_are_some(
    tacho: Tacho, tmp_path: Path, runner: object
) -> None:
    empty = Tacho(tmp_path / "empty.db", tacho.runner)
    with tg.open_store(empty.store, create=True):
        pass
    plain = empty("audit")
    assert plain.exit_code == 0
    assert "no audit records" in plain.output
    assert "match these filters" not in plain.output
    assert "match these filters" in empty("audit", "--action", "erase").output


def test_takeover_without_confirm_is_a_usage_error(tacho: Tacho, run_id: str) -> None:
    result = tacho("resume", run_id, "--agent", "tachograph.demo.agent:billing_agent", "--takeover")
    assert result.exit_code == EXIT_USAGE
    assert "--takeover goes with --confirm" in result.output


@pytest.mark.parametrize("narrow", [False, True])
def test_erase_subject_in_a_store_confined_to_a_tenant(
    tmp_path: Path, runner: object, narrow: bool
) -> None:
    from click.testing import CliRunner

    from tachograph.cli.app import cli
    from tachograph.lifecycle.erasure import SubjectRule

    url = f"sqlite:///{tmp_path / 'runs.db'}?tenant=acme"
    with tg.open_store(url, create=True) as store:
        rule = SubjectRule(store, paths=["$.input.customer"])
        with tg.record(store, actor="a", input={"customer": "cust-5"}, listeners=[rule]):
            pass
    argv = ["--store", url, "erase", "--subject", "cust-5", "--reason", "r", "--json"]
    if narrow:
        argv += ["--type", "run.started"]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    assert '"tenant": "acme"' in result.stdout


def test_an_unknown_audit_action_is_a_usage_error(tacho: Tacho, run_id: str) -> None:
    result = tacho("audit", "--action", "erasse")
    assert result.exit_code == EXIT_USAGE, result.output
    assert "unknown audit action 'erasse'" in result.output
    assert "retention.delete" in result.output
    # a known action or family with no records is an empty answer, not an error
    for known in ("erase", "retention", "read.denied"):
        assert tacho("audit", "--action", known).exit_code == 0
    # an action no release of this library writes, but a record of this store holds
    with tg.open_store(tacho.store) as store:
        store.append_audit(AuditEntry(action="custom.check", actor="ops"))
    assert tacho("audit", "--action", "custom").exit_code == 0
    assert "custom.check" in tacho("audit", "--action", "custom.check").output
