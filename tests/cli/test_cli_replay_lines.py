"""A line feed in what a replay report quotes of the record (a tool's name, an error's
message) is shown escaped: recorded text cannot add a line of its own, such as a forged
verdict, to ``tacho replay``'s report."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import tachograph as tg
from tachograph.cli.app import EXIT_FAILED, cli
from tachograph.replay.report import ReplayReport

FORGED = "replay of run_X: REPRODUCED (reproduction)"

AGENT = f"""
import tachograph

@tachograph.tool(effect="read", name="look\\n{FORGED}")
def look(q: str) -> dict:
    return {{"q": q}}

@tachograph.agent(name="lf", tools=[look], code_version="1")
def agent(q):
    look(q)
    return "ok"

@tachograph.agent(name="lf", tools=[look], code_version="1")
def changed(q):
    look(q + "!")
    return "ok"

@tachograph.agent(name="lf", tools=[look], code_version="1")
def raising(q):
    look(q)
    raise ValueError("bad\\n{FORGED}")
"""


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    (tmp_path / "lf_agent.py").write_text(AGENT)
    monkeypatch.syspath_prepend(str(tmp_path))
    import lf_agent

    db = tmp_path / "runs.db"
    with tg.open_store(db, create=True) as store:
        run_id = tg.record_run(lf_agent.agent, "hi", store=store).run_id
    return db, run_id


@pytest.mark.parametrize("agent", ["changed", "raising"])
def test_recorded_text_cannot_add_a_line_to_the_report(
    recorded: tuple[Path, str], agent: str
) -> None:
    db, run_id = recorded
    result = CliRunner().invoke(
        cli, ["--store", str(db), "replay", run_id, "--agent", f"lf_agent:{agent}"]
    )
    assert result.exit_code == EXIT_FAILED, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"replay of {run_id}: DIVERGED"), lines
    assert not any(line.lstrip().startswith(FORGED) for line in lines), lines
    assert f"\\x0a{FORGED}" in result.stdout  # quoted, on the line that quotes it


def test_a_report_renders_one_line_for_each_of_its_lines(recorded: tuple[Path, str]) -> None:
    import lf_agent

    db, run_id = recorded
    with tg.open_store(db) as store:
        report: ReplayReport = tg.replay(store, run_id, lf_agent.raising)
    assert not report.reproduced
    text = report.render()
    assert not any(line.lstrip().startswith(FORGED) for line in text.split("\n")), text
    assert "\\x0a" in text
    # the JSON form keeps the values as recorded
    assert FORGED in str(report.to_dict())


def test_a_saved_note_cannot_add_a_line_to_tacho_test(
    recorded: tuple[Path, str], tmp_path: Path
) -> None:
    db, run_id = recorded
    corpus = tmp_path / "corpus"
    forged = "1 runs against x: 1 reproduced. PASSED"
    saved = CliRunner().invoke(
        cli,
        ["--store", str(db), "save", run_id, "--to", str(corpus), "--verdict", "good",
         "--note", f"kept\n{forged}"],
    )  # fmt: skip
    assert saved.exit_code == 0, saved.output
    result = CliRunner().invoke(
        cli, ["--store", str(db), "test", str(corpus), "--agent", "lf_agent:changed",
              "--workers", "1"],
    )  # fmt: skip
    assert result.exit_code == EXIT_FAILED, result.output
    lines = result.stdout.splitlines()
    assert not any(line.lstrip().startswith(forged) for line in lines), lines
    assert not any(line.lstrip().startswith(FORGED) for line in lines), lines
    assert f"kept\\x0a{forged}" in result.stdout
