"""Policy files are checked key by key: an unknown key, a missing one, or a value of the wrong
type in a retention or purpose policy is a PolicyError (exit 2) naming the table, the key and
what is expected. A typo must never silently widen what an entry applies to (the audit floor
of every type, a hold, a deletion)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tachograph.cli.app import cli
from tachograph.errors import PolicyError
from tachograph.lifecycle import purpose, retention
from tachograph.store import SQLiteStore

from .test_retention import AGES, _run

HEAD = '[retention]\ndefault = "200d"\n'

BAD_RETENTION = [
    # (entry, what the message names)
    ('[[retention.overrides]]\ntype = ["tool.requested"]\nfloor = "1d"\nreason = "sandbox"\n',
     ("[[retention.overrides]]", "'type'", "types")),
    ('[[retention.overrides]]\nfloor = "1d"\nreason = "sandbox"\n',
     ("[[retention.overrides]]", "missing 'types'", '["*"]')),
    ('[[retention.overrides]]\ntypes = "decision"\nfloor = "1d"\nreason = "x"\n',
     ("[[retention.overrides]]", "types must be a list", "'decision'")),
    ('[[retention.overrides]]\ntypes = ["decision", 3]\nfloor = "1d"\nreason = "x"\n',
     ("[[retention.overrides]]", "types must be a list")),
    ('[[retention.overrides]]\ntypes = []\nfloor = "1d"\nreason = "x"\n',
     ("[[retention.overrides]]", "types must be a list")),
    ('[[retention.holds]]\nruns = ["case-*"]\nreason = "litigation hold"\n',
     ("[[retention.holds]]", "runs must be a run id pattern", "['case-*']")),
    ('[[retention.holds]]\nrun = "case-7"\nreason = "litigation hold"\n',
     ("[[retention.holds]]", "'run'", "expected only runs, reason, tenant, actor")),
    ('[[retention.holds]]\nruns = "case-*"\nreason = "x"\ntenant = 7\n',
     ("[[retention.holds]]", "tenant must be", "not 7")),
    ('[[retention.runs]]\nmatches = "scratch-*"\nwindow = "7d"\n',
     ("[[retention.runs]]", "'matches'", "expected only match, window, tenant")),
    ('[[retention.runs]]\nwindow = "7d"\n', ("[[retention.runs]]", "missing 'match'")),
    ('[[retention.runs]]\nmatch = 5\nwindow = "7d"\n',
     ("[[retention.runs]]", "match must be a run id pattern", "not 5")),
    ('[[retention.runs]]\nmatch = "scratch-*"\n', ("[[retention.runs]]", "missing 'window'")),
    ('[[retention.runs]]\nmatch = "scratch-*"\nwindow = "soon"\n',
     ("[[retention.runs]] entry 1: window", "not a duration")),
    ('[[retention.runs]]\nmatch = "a"\nwindow = "7d"\n'
     '[[retention.runs]]\nmatch = ""\nwindow = "7d"\n',
     ("[[retention.runs]] entry 2", "match must be")),
]  # fmt: skip


@pytest.mark.parametrize(("entry", "named"), BAD_RETENTION)
def test_a_retention_entry_is_checked_key_by_key(
    entry: str, named: tuple[str, ...], tmp_path: Path
) -> None:
    path = tmp_path / "retention.toml"
    path.write_text(HEAD + entry)
    with pytest.raises(PolicyError) as caught:
        retention.load_policy(path)
    for words in (str(path), *named):
        assert words in str(caught.value)
    assert caught.value.path == str(path)
    assert caught.value.key


def test_the_written_out_forms_still_load(tmp_path: Path) -> None:
    path = tmp_path / "retention.toml"
    path.write_text(
        HEAD + '[[retention.runs]]\nmatch = "scratch-*"\nwindow = "7d"\ntenant = "t"\n'
        '[[retention.holds]]\nruns = "case-*"\nreason = "hold"\nactor = "a"\n'
        '[[retention.overrides]]\ntypes = ["tool.*"]\nfloor = "30d"\nreason = "sandbox"\n'
    )
    policy = retention.load_policy(path)
    assert policy.runs == (retention.RunWindow("scratch-*", 7 * retention.DAY, "t"),)
    assert policy.holds == (retention.Hold("hold", "case-*", "*", "a"),)
    assert policy.overrides == (retention.Override(30 * retention.DAY, "sandbox", ("tool.*",)),)


@pytest.mark.parametrize(
    "entry",
    [BAD_RETENTION[0][0], BAD_RETENTION[5][0], BAD_RETENTION[8][0]],
    ids=["override-type-typo", "hold-as-list", "run-window-matches-typo"],
)
def test_tacho_retention_refuses_the_typo_instead_of_acting_on_every_run(
    entry: str, store: SQLiteStore, tmp_path: Path
) -> None:
    for run_id, day in AGES.items():
        store.append(_run(run_id, day))
    path = tmp_path / "typo.toml"
    path.write_text(HEAD + entry)
    runner = CliRunner()
    for command in ("plan", "apply"):
        result = runner.invoke(
            cli, ["--store", store.path, "retention", command, "--policy", str(path)]
        )
        assert result.exit_code == 2, result.output
        assert "[[retention." in result.output
        assert "Traceback" not in result.output
    assert {r.run_id for r in store.runs()} == set(AGES)  # nothing deleted


BAD_PURPOSE = [
    ('[purposes.support]\npayload = ["decision"]\n', ("[purposes.support]", "'payload'")),
    ('[purposes.support]\npayloads = [1]\n', ("purposes.support.payloads", "not [1]")),
    ('[purposes.support]\ntenants = 5\n', ("purposes.support.tenants", "not 5")),
    ('[purposes.support]\ndescription = 5\n', ("purposes.support.description", "string")),
    ('[purposes.support]\nfields = ["tool"]\n', ("[purposes.support.fields]", "['tool']")),
    ('[purposes.support.fields]\n"tool.requested" = [true]\n',
     ("purposes.support.fields.tool.requested", "not [True]")),
    ('[purposes]\nsupport = "all"\n', ("purposes.support must be a table",)),
]  # fmt: skip


@pytest.mark.parametrize(("text", "named"), BAD_PURPOSE)
def test_a_purpose_policy_is_as_strict(text: str, named: tuple[str, ...], tmp_path: Path) -> None:
    path = tmp_path / "purposes.toml"
    path.write_text(text)
    with pytest.raises(PolicyError) as caught:
        purpose.load_policy(path)
    for words in (str(path), *named):
        assert words in str(caught.value)


def test_a_policy_that_is_not_utf8_is_a_policy_error(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.append(_run("r1", "2027-05-25"))
    path = tmp_path / "p.toml"
    path.write_bytes(b"\xff\xfe[retention]\n")
    for load in (retention.load_policy, purpose.load_policy):
        with pytest.raises(PolicyError, match="not UTF-8"):
            load(path)
    runner = CliRunner()
    plan = runner.invoke(cli, ["--store", store.path, "retention", "plan", "--policy", str(path)])
    assert plan.exit_code == 2, plan.output
    assert "not UTF-8" in plan.output
    monkeypatch.setenv("TACHOGRAPH_PURPOSE_POLICY", str(path))
    shown = runner.invoke(cli, ["--store", store.path, "show", "r1"])
    assert shown.exit_code == 2, shown.output
    assert "not UTF-8" in shown.output
