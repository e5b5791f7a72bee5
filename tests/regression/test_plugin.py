"""The pytest plugin, run as a user runs it: ``python -m pytest`` in a fresh folder."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

from .conftest import EXPECTED, REPO, UNDER_TEST

PASSING = {"reproduced", "fixed"}


def plugin_args() -> list[str]:
    """Load the plugin by name only when it is not installed as a pytest11 entry point."""
    names = {ep.name for ep in importlib.metadata.entry_points(group="pytest11")}
    return [] if "tachograph" in names else ["-p", "tachograph.pytest_plugin"]


def pytest_run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (folder / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TACHOGRAPH_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugin_args(), *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_one_test_per_run_with_the_report_as_failure_text(
    corpus_master: Path, tmp_path: Path
) -> None:
    proc = pytest_run(
        tmp_path,
        "--tacho-corpus",
        str(corpus_master),
        "--tacho-agent",
        UNDER_TEST,
        "--junitxml",
        "out.xml",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "8 failed, 6 passed" in proc.stdout
    suite = ET.parse(tmp_path / "out.xml").getroot().find("testsuite")
    assert suite is not None
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == set(EXPECTED)
    for name, (outcome, _) in EXPECTED.items():
        failed = cases[name].find("failure") is not None
        assert failed == (outcome not in PASSING), name
    changed = cases["good-refund-a4471"].find("failure")
    assert changed is not None
    text = changed.text or ""
    assert "CHANGED (good run): decisions differ from the recording at seq 9" in text
    assert "$.payload.args.amount_cents: 2500 -> 1250" in text
    assert "Traceback" not in text
    assert "regression.py" not in text


def test_keyword_selection_sees_the_corpus_runs(corpus_master: Path, tmp_path: Path) -> None:
    proc = pytest_run(
        tmp_path,
        "--tacho-corpus",
        str(corpus_master),
        "--tacho-agent",
        UNDER_TEST,
        "-k",
        "escalate or lenient",
        "-q",
    )
    assert proc.returncode == 0, proc.stdout
    assert "3 passed, 11 deselected" in proc.stdout


def test_the_example_corpus_passes_under_pytest(tmp_path: Path) -> None:
    proc = pytest_run(
        tmp_path,
        "--tacho-corpus",
        str(REPO / "corpus" / "demo"),
        "--tacho-agent",
        "tachograph.demo.agent:billing_agent",
        "-q",
    )
    assert proc.returncode == 0, proc.stdout
    assert "8 passed" in proc.stdout


def test_the_marker_parametrizes_a_test_in_a_module(corpus_master: Path, tmp_path: Path) -> None:
    shutil.copytree(corpus_master, tmp_path / "corpus")
    (tmp_path / "test_corpus_runs.py").write_text(
        "import pytest\n\n\n"
        f'@pytest.mark.tacho_corpus("corpus", agent="{UNDER_TEST}")\n'
        "def test_run(tacho_result):\n"
        "    assert tacho_result.passed, tacho_result.render()\n"
    )
    proc = pytest_run(tmp_path, "-q", "-rf")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "8 failed, 6 passed" in proc.stdout
    assert "FAILED test_corpus_runs.py::test_run[good-refund-a4471]" in proc.stdout
    assert "decisions differ from the recording at seq 9" in proc.stdout


def test_a_corpus_without_an_agent_is_a_usage_error(corpus_master: Path, tmp_path: Path) -> None:
    proc = pytest_run(tmp_path, "--tacho-corpus", str(corpus_master))
    assert proc.returncode == 4
    assert "--tacho-corpus needs --tacho-agent" in proc.stderr


def test_an_agent_that_does_not_import_is_a_usage_error(
    corpus_master: Path, tmp_path: Path
) -> None:
    proc = pytest_run(
        tmp_path, "--tacho-corpus", str(corpus_master), "--tacho-agent", "nowhere:agent"
    )
    assert proc.returncode == 4
    assert "no module named 'nowhere'" in proc.stderr


def test_importing_the_plugin_stays_light() -> None:
    code = (
        "import sys, tachograph.pytest_plugin\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('click', 'rich', 'opentelemetry') or m == 'tachograph.regression.runner')\n"
        "print(heavy)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert proc.stdout.strip() == "[]"


def test_an_agent_that_ends_the_process_fails_its_runs_under_pytest(tmp_path: Path) -> None:
    """Without xdist the runs are replayed in pytest's own process: an agent's ``os._exit(0)``
    ended pytest with status 0 and no --junitxml. Each run now fails, saying so."""
    proc = pytest_run(
        tmp_path,
        "--tacho-corpus",
        str(REPO / "corpus" / "demo"),
        "--tacho-agent",
        "tests.regression.agents:os_exiting_billing_agent",
        "--junitxml",
        "out.xml",
        "-q",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "8 failed" in proc.stdout
    assert "the agent called os._exit(0)" in proc.stdout
    suite = ET.parse(tmp_path / "out.xml").getroot().find("testsuite")
    assert suite is not None
    assert suite.get("failures") == "8"


def test_an_empty_corpus_is_a_usage_error(tmp_path: Path) -> None:
    """An emptied corpus (a wrong path, files not checked out) added no test and pytest
    passed, or said only "no tests ran"; ``tacho test`` calls it a usage error."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "test_other.py").write_text("def test_other():\n    pass\n")
    proc = pytest_run(tmp_path, "--tacho-corpus", "empty", "--tacho-agent", UNDER_TEST, "-q")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "--tacho-corpus empty: no saved runs in" in proc.stderr


def test_a_marker_on_an_empty_or_missing_corpus_or_without_agent_is_a_usage_error(
    corpus_master: Path, tmp_path: Path
) -> None:
    """The marker form skipped ("got empty parameter set"), gave a raw CorpusError traceback
    for a missing folder, and one error per run without an agent."""
    (tmp_path / "empty").mkdir()
    shutil.copytree(corpus_master, tmp_path / "corpus")
    cases = {
        f'"empty", agent="{UNDER_TEST}"': "no saved runs in",
        f'"nowhere", agent="{UNDER_TEST}"': "no corpus directory at",
        '"corpus"': "give agent='module:attr' or --tacho-agent",
    }
    for args, said in cases.items():
        (tmp_path / "test_corpus_runs.py").write_text(
            "import pytest\n\n\n"
            f"@pytest.mark.tacho_corpus({args})\n"
            "def test_run(tacho_result):\n"
            "    assert tacho_result.passed, tacho_result.render()\n"
        )
        proc = pytest_run(tmp_path, "-q")
        out = proc.stdout + proc.stderr
        assert proc.returncode not in (0, 5), out
        assert said in out, out
        assert "@pytest.mark.tacho_corpus(" in out
        assert "Traceback" not in out
        assert "skipped" not in out.lower()


def test_m_selects_corpus_runs_by_their_marks(corpus_master: Path, tmp_path: Path) -> None:
    """The docs said -m selects among the runs, but the items carried no marks."""
    base = ["--tacho-corpus", str(corpus_master), "--tacho-agent", UNDER_TEST, "-q"]
    bad = sum(1 for n in EXPECTED if n.startswith("bad-") and n != "bad-sidecar-b1002")
    good = sum(1 for n in EXPECTED if not n.startswith("bad-"))
    unknown = 1  # bad-sidecar-b1002: its sidecar cannot say its verdict
    selected = {}
    for expr in ("tacho_bad", "tacho_good", "tacho_corpus", "not tacho_corpus"):
        proc = pytest_run(tmp_path, *base, "-m", expr, "--co")
        assert proc.returncode in (0, 5), proc.stdout + proc.stderr
        selected[expr] = sum(1 for line in proc.stdout.splitlines() if "::" in line)
    assert selected == {
        "tacho_bad": bad,
        "tacho_good": good,
        "tacho_corpus": len(EXPECTED),
        "not tacho_corpus": 0,
    }
    assert bad + good + unknown == len(EXPECTED)
    # the marker form carries the verdict's mark too
    shutil.copytree(corpus_master, tmp_path / "corpus")
    (tmp_path / "test_corpus_runs.py").write_text(
        "import pytest\n\n\n"
        f'@pytest.mark.tacho_corpus("corpus", agent="{UNDER_TEST}")\n'
        "def test_run(tacho_result):\n"
        "    assert tacho_result.passed, tacho_result.render()\n"
    )
    proc = pytest_run(tmp_path, "-q", "-m", "tacho_bad", "--strict-markers")
    assert f"{bad} deselected" not in proc.stdout
    assert f"{len(EXPECTED) - bad} deselected" in proc.stdout, proc.stdout


def test_a_bad_run_whose_sidecar_cannot_be_read_is_not_shown_as_good(
    corpus_master: Path, tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(corpus_master, corpus)
    sidecar = corpus / "bad-half-a4471.tacho.json"
    sidecar.write_text(sidecar.read_text()[:40])  # truncated
    proc = pytest_run(
        tmp_path, "--tacho-corpus", "corpus", "--tacho-agent", UNDER_TEST, "-k", "bad-half"
    )
    assert proc.returncode == 1, proc.stdout
    assert "bad-half-a4471: UNREPLAYABLE (verdict unknown): sidecar" in proc.stdout
    assert "good run" not in proc.stdout
