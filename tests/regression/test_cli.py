"""``tacho save`` and ``tacho test`` as a user types them: real processes, real files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from click.testing import CliRunner

import tachograph as tg
from tachograph.cli.app import cli
from tachograph.demo.agent import billing_agent

from .conftest import EXPECTED, REFUND_A, REPO, UNDER_TEST


def tacho_exe() -> list[str]:
    """The installed ``tacho`` console script of this interpreter."""
    beside = Path(sys.executable).with_name("tacho")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("tacho")
    assert found, "the tacho console script is not installed"
    return [found]


def tacho(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TACHOGRAPH_STORE"}
    return subprocess.run(
        [*tacho_exe(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


# -- tacho save ---------------------------------------------------------------------------------


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    with tg.SQLiteStore(str(path)) as st:
        tg.record_run(billing_agent, REFUND_A, store=st, run_id="run-a4471")
    return path


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_save_writes_run_and_sidecar(store_path: Path, tmp_path: Path) -> None:
    code, out, _ = invoke(
        "--store",
        str(store_path),
        "save",
        "run-a4471",
        "--to",
        str(tmp_path / "c"),
        "--verdict",
        "bad",
        "--wrong-at",
        "9",
        "--note",
        "half refund",
        "--json",
    )
    assert code == 0, out
    data = json.loads(out)
    assert data["path"] == str(tmp_path / "c" / "run-a4471.jsonl")
    meta = json.loads(Path(data["sidecar"]).read_text())
    assert (meta["verdict"], meta["wrong_at"], meta["note"]) == ("bad", 9, "half refund")
    assert [r.ok for r in tg.verify_jsonl(data["path"])] == [True]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--verdict", "bad"], 2, "needs --wrong-at"),
        (["--verdict", "good", "--wrong-at", "3"], 2, "only for --verdict bad"),
        (["--verdict", "bad", "--wrong-at", "99"], 2, "outside run"),
        (
            ["--verdict", "good", "--processor", "nowhere:fn"],
            2,
            "--processor: cannot load processor 'nowhere:fn': no module named 'nowhere'",
        ),
    ],
)
def test_save_usage_errors_exit_2(
    store_path: Path, tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    got, _, err = invoke(
        "--store", str(store_path), "save", "run-a4471", "--to", str(tmp_path / "c"), *args
    )
    assert got == code
    assert message in err


def test_save_of_an_unknown_run_exits_3_and_names_close_runs(
    store_path: Path, tmp_path: Path
) -> None:
    code, _, err = invoke(
        "--store", str(store_path), "save", "run-a4472", "--to", str(tmp_path), "--verdict", "good"
    )
    assert code == 3
    assert "run-a4471" in err


def test_save_applies_processors(
    store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(REPO))
    with tg.SQLiteStore(str(store_path)) as st:
        tg.record_run(
            billing_agent, "Order C-0007 is broken, mail bo@example.org", store=st, run_id="r2"
        )
    code, out, err = invoke(
        "--store",
        str(store_path),
        "save",
        "r2",
        "--to",
        str(tmp_path / "c"),
        "--verdict",
        "good",
        "--processor",
        "tests.regression.agents:mask_emails",
        "--json",
    )
    assert code == 0, err
    saved = Path(json.loads(out)["path"]).read_bytes()
    assert b"bo@example.org" not in saved
    assert b"<email>" in saved


def test_save_takes_a_unique_prefix_of_a_run_id(store_path: Path, tmp_path: Path) -> None:
    code, out, _ = invoke(
        "--store", str(store_path), "save", "run-a44", "--to", str(tmp_path), "--verdict", "good"
    )
    assert code == 0
    assert out.startswith("saved run-a4471 (good) to ")
    assert (tmp_path / "run-a4471.jsonl").exists()


def test_save_then_test_round_trip(store_path: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "c"
    code, _, _ = invoke(
        "--store", str(store_path), "save", "run-a4471", "--to", str(corpus), "--verdict", "good"
    )
    assert code == 0
    code, out, _ = invoke(
        "test", str(corpus), "--agent", "tachograph.demo.agent:billing_agent", "--json"
    )
    assert code == 0
    assert json.loads(out)["counts"]["reproduced"] == 1


# -- tacho test ---------------------------------------------------------------------------------


def test_test_exits_1_names_runs_and_steps_and_writes_junit(
    corpus_master: Path, tmp_path: Path
) -> None:
    junit = tmp_path / "reports" / "corpus.xml"
    proc = tacho("test", str(corpus_master), "--agent", UNDER_TEST, "--junit", str(junit))
    assert proc.returncode == 1, proc.stderr
    assert (
        "good-refund-a4471: CHANGED (good run): decisions differ from the recording at seq 9"
        in (proc.stdout)
    )
    assert "bad-half-a4471: STILL WRONG (bad run): the wrong step at seq 9 is reproduced" in (
        proc.stdout
    )
    assert "14 runs against" in proc.stdout
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("14", "4", "4")
    failed = {
        c.get("name")
        for c in suite.findall("testcase")
        if c.find("failure") is not None or c.find("error") is not None
    }
    assert failed == {n for n, (o, _) in EXPECTED.items() if o not in ("reproduced", "fixed")}


def test_test_json_is_one_document_with_every_run(corpus_master: Path) -> None:
    proc = tacho("test", str(corpus_master), "--agent", UNDER_TEST, "--json", "--workers", "2")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["workers"] == 2
    assert {r["name"]: (r["outcome"], r["seq"]) for r in data["results"]} == EXPECTED


def test_test_accept_turns_a_reviewed_change_into_a_pass(
    corpus_master: Path, tmp_path: Path
) -> None:
    corpus = tmp_path / "c"
    corpus.mkdir()
    for name in ("good-refund-a4471", "good-escalate-b1002"):
        for suffix in (".jsonl", ".tacho.json"):
            shutil.copy(corpus_master / (name + suffix), corpus / (name + suffix))
    log = (corpus / "good-refund-a4471.jsonl").read_bytes()
    assert tacho("test", str(corpus), "--agent", UNDER_TEST, "--workers", "1").returncode == 1
    proc = tacho("test", str(corpus), "--agent", UNDER_TEST, "--accept", "good-refund-a4471")
    assert proc.returncode == 0, proc.stdout
    assert "reproduced (accepted)" in proc.stdout
    assert tacho("test", str(corpus), "--agent", UNDER_TEST, "--workers", "1").returncode == 0
    assert (corpus / "good-refund-a4471.jsonl").read_bytes() == log


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--agent", "no_such_module:agent"], "no module named 'no_such_module'"),
        (["--agent", "tachograph.demo.agent:billing_agnet"], "did you mean billing_agent"),
        (["--agent", "tachograph.demo.agent:billing_agent", "--accept", "nope"], "nope"),
    ],
)
def test_test_usage_errors_exit_2(corpus_master: Path, args: list[str], message: str) -> None:
    proc = tacho("test", str(corpus_master), *args)
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stderr


def test_test_of_an_empty_corpus_exits_2(tmp_path: Path) -> None:
    proc = tacho("test", str(tmp_path), "--agent", "tachograph.demo.agent:billing_agent")
    assert proc.returncode == 2
    assert "no runs in" in proc.stderr


def test_help_documents_outcomes_and_exit_codes() -> None:
    code, out, _ = invoke("test", "--help")
    assert code == 0
    for word in ("reproduced", "changed", "fixed", "still wrong", "unreplayable", "Exit codes"):
        assert word in out
    code, out, _ = invoke("save", "--help")
    assert code == 0
    assert "--wrong-at" in out


def test_a_run_whose_replay_ends_its_worker_is_reported_and_the_rest_still_run(
    corpus_master: Path,
) -> None:
    """An agent that ends the process replaying it (on the two C-0007 runs) broke the pool
    and ``tacho test`` ended in a traceback with no report. Those two runs are reported
    unreplayable, with how their process ended; every other run has its usual outcome."""
    proc = tacho(
        "test",
        str(corpus_master),
        "--agent",
        "tests.regression.agents:dies_on_order_c0007",
        "--json",
        "--workers",
        "2",
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    data = json.loads(proc.stdout)
    got = {r["name"]: (r["outcome"], r["seq"]) for r in data["results"]}
    assert list(got) == sorted(EXPECTED)  # every run, in the corpus order (by name)
    dying = {"good-refund-c0007", "bad-in-transit-c0007"}
    assert {n: o for n, o in got.items() if n not in dying} == {
        n: o for n, o in EXPECTED.items() if n not in dying
    }
    for result in data["results"]:
        if result["name"] in dying:
            assert result["outcome"] == "unreplayable"
            assert "ended on signal SIGKILL" in result["reason"]


def test_how_a_replaying_process_ended_is_said_in_words() -> None:
    from tachograph.regression.runner import _how_ended

    assert _how_ended(9) == "with exit code 9"
    assert _how_ended(-9) == "on signal SIGKILL"
    assert _how_ended(-11) == "on signal SIGSEGV"
    assert _how_ended(None) == "with exit code None"


# -- an agent that raises or exits is never a fix ----------------------------------------------


@pytest.fixture
def bad_runs(tmp_path: Path) -> Path:
    """The example corpus's three bad runs, alone: a corpus of bad runs only."""
    folder = tmp_path / "bad"
    folder.mkdir()
    for path in (REPO / "corpus" / "demo").glob("demo-bad-*"):
        shutil.copy(path, folder / path.name)
    return folder


@pytest.mark.parametrize(
    ("agent", "workers", "said"),
    [
        ("broken_billing_agent", "2", "the agent raised ImportError: No module named 'openai'"),
        ("broken_billing_agent", "1", "the agent raised ImportError: No module named 'openai'"),
        ("exiting_billing_agent", "1", "the agent exited (SystemExit: 0)"),
        ("os_exiting_billing_agent", "1", "the agent called os._exit(0)"),
        ("os_exiting_billing_agent", "2", "the agent called os._exit(0)"),
    ],
)
def test_an_agent_that_raises_or_exits_fixes_no_bad_run(
    bad_runs: Path, tmp_path: Path, agent: str, workers: str, said: str
) -> None:
    """A deploy that breaks the agent (a missing dependency, an early exit) made every bad
    run diverge at seq 1, ``fixed``: a corpus of bad runs passed, exit 0. ``os._exit(0)``
    replayed in this process ended ``tacho test`` itself with status 0, no report, no JUnit.
    Each run is now ``raised``, naming what the agent raised; the command fails."""
    junit = tmp_path / "reports" / "corpus.xml"
    proc = tacho(
        "test",
        str(bad_runs),
        "--agent",
        f"tests.regression.agents:{agent}",
        "--workers",
        workers,
        "--junit",
        str(junit),
        "--json",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] is False
    assert data["counts"]["raised"] == 3
    assert data["counts"]["fixed"] == 0
    for result in data["results"]:
        assert result["outcome"] == "raised", result
        assert result["passed"] is False
        assert result["reason"].startswith(said), result["reason"]
        assert "where the recording ended ok" in result["reason"]
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("errors") == "3"
    for case in suite.findall("testcase"):
        error = case.find("error")
        assert error is not None
        assert error.get("type") == "raised"
        assert said in (error.get("message") or "")


def test_a_single_run_corpus_replayed_in_process_is_not_ended_by_os_exit(
    bad_runs: Path, tmp_path: Path
) -> None:
    """A one-run corpus is replayed in this process whatever ``--workers`` says."""
    one = tmp_path / "one"
    one.mkdir()
    for path in bad_runs.glob("demo-bad-half-refund-a4471.*"):
        shutil.copy(path, one / path.name)
    proc = tacho("test", str(one), "--agent", "tests.regression.agents:os_exiting_billing_agent")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "raised" in proc.stdout
    assert "the agent called os._exit(0)" in proc.stdout
    assert "FAILED (1 failing)" in proc.stdout


# -- --json holds one document whatever the agent's module prints -------------------------------

NOISY = """
import os
print("importing the noisy agent")
os.write(1, b"and writing to descriptor 1\\n")
from tachograph.demo.agent import billing_agent


def keep(event_type, payload):
    return payload
"""


@pytest.mark.parametrize("command", ["test", "replay", "fork", "save"])
def test_json_stdout_is_one_document_when_the_agent_module_prints_as_it_is_imported(
    store_path: Path, tmp_path: Path, command: str
) -> None:
    """The agent (or processor) was imported before stdout was handed to stderr: what its
    module printed came first on stdout, and ``--json`` was no longer one document."""
    (tmp_path / "noisy_agent.py").write_text(NOISY)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for path in (REPO / "corpus" / "demo").glob("demo-good-refund-a4471.*"):
        shutil.copy(path, corpus / path.name)
    store = ["--store", str(store_path)]
    args = {
        "test": ["test", str(corpus), "--agent", "noisy_agent:billing_agent"],
        "replay": [
            "replay",
            str(corpus / "demo-good-refund-a4471.jsonl"),
            "--agent",
            "noisy_agent:billing_agent",
        ],
        "fork": [*store, "fork", "run-a4471", "--at", "3", "--agent", "noisy_agent:billing_agent"],
        "save": [
            *store,
            "save",
            "run-a4471",
            "--to",
            str(tmp_path / "saved"),
            "--verdict",
            "good",
            "--processor",
            "noisy_agent:keep",
        ],
    }[command]
    proc = tacho(*args, "--json", cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    json.loads(proc.stdout)  # exactly one document, nothing before it
    assert "importing the noisy agent" in proc.stderr
    assert "and writing to descriptor 1" in proc.stderr


def test_a_run_whose_sidecar_cannot_be_read_has_no_verdict(
    corpus_master: Path, tmp_path: Path
) -> None:
    """A bad run whose sidecar is truncated was shown as a good run."""
    corpus = tmp_path / "corpus"
    shutil.copytree(corpus_master, corpus)
    sidecar = corpus / "bad-half-a4471.tacho.json"
    sidecar.write_text(sidecar.read_text()[:40])
    proc = tacho("test", str(corpus), "--agent", UNDER_TEST, "--workers", "1")
    assert proc.returncode == 1
    row = next(line for line in proc.stdout.splitlines() if line.startswith("bad-half-a4471 "))
    assert row.split()[1:3] == ["-", "unreplayable"], row
    assert "bad-half-a4471: UNREPLAYABLE (verdict unknown): sidecar" in proc.stdout
    data = json.loads(
        tacho("test", str(corpus), "--agent", UNDER_TEST, "--workers", "1", "--json").stdout
    )
    result = next(r for r in data["results"] if r["name"] == "bad-half-a4471")
    assert result["verdict"] is None


@pytest.mark.parametrize(
    ("processor", "said"),
    [
        ("exploding_processor", "(model.request): raised ValueError: processor exploded"),
        ("dropping_processor", "(tool.completed): returned int, not a payload (a dict)"),
    ],
)
def test_a_processor_that_fails_is_an_error_naming_it_and_the_step(
    store_path: Path, tmp_path: Path, processor: str, said: str
) -> None:
    """A processor that raised, or returned no dict, gave a traceback and exit 1 (the code
    for a run that does not verify)."""
    target = tmp_path / "new-corpus"
    proc = tacho(
        "--store",
        str(store_path),
        "save",
        "run-a4471",
        "--to",
        str(target),
        "--verdict",
        "good",
        "--processor",
        f"tests.regression.agents:{processor}",
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(
        f"Error: processor tests.regression.agents:{processor} failed on seq "
    )
    assert said in proc.stderr
    assert not target.exists()  # nothing left on disk, not even the folder


# -- an accepted change does not depend on where the checkout is --------------------------------

NOTIFYING = """
import urllib.request

from tachograph.demo.agent import billing_agent as _billing_agent


def billing_agent(task):
    try:  # a notification the record does not hold: refused, reported as unrecorded_call
        urllib.request.urlopen("http://127.0.0.1:9/notify", timeout=2)
    except OSError:
        pass
    return _billing_agent(task)
"""


def _notifying_project(folder: Path) -> Path:
    folder.mkdir()
    (folder / "notifying_agent.py").write_text(NOTIFYING)
    corpus = folder / "corpus"
    corpus.mkdir()
    for path in (REPO / "corpus" / "demo").glob("demo-good-refund-a4471.*"):
        shutil.copy(path, corpus / path.name)
    return folder


def test_an_accepted_unrecorded_call_still_matches_in_another_checkout(tmp_path: Path) -> None:
    """The acceptance digest held the refused call's frame (the agent file's absolute path
    and line): moved to another folder (CI's workspace), or with a line added above the call,
    the accepted change was ``changed`` again."""
    first = _notifying_project(tmp_path / "laptop")
    args = ["test", "corpus", "--agent", "notifying_agent:billing_agent", "--workers", "1"]
    accepted = tacho(*args, "--accept", "demo-good-refund-a4471", cwd=first)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "reproduced (accepted)" in accepted.stdout
    moved = tmp_path / "ci-workspace"
    shutil.copytree(first, moved)
    agent = moved / "notifying_agent.py"
    agent.write_text("# a line added above everything\n\n" + agent.read_text())
    again = tacho(*args, "--json", cwd=moved)
    assert again.returncode == 0, again.stdout + again.stderr
    result = json.loads(again.stdout)["results"][0]
    assert (result["outcome"], result["accepted"]) == ("reproduced", True)
    assert result["kind"] == "unrecorded_call"


def test_an_acceptance_saved_with_the_old_digest_still_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Acceptances saved before locations were left out hold a digest over the frame: where
    they were made, they still match."""
    from tachograph.regression.runner import _digest, check_run, load_corpus
    from tachograph.replay.api import replay
    from tachograph.replay.history import RunHistory

    project = _notifying_project(tmp_path / "p")
    monkeypatch.syspath_prepend(str(project))
    import notifying_agent

    run = project / "corpus" / "demo-good-refund-a4471.jsonl"
    report = replay(
        RunHistory.from_jsonl(str(run)), None, notifying_agent.billing_agent, collect=True
    )
    old = _digest(report, legacy=True)
    assert old != _digest(report)
    sidecar = run.with_name("demo-good-refund-a4471.tacho.json")
    meta = json.loads(sidecar.read_text())
    meta["accepted"] = [{"accepted_at": "2026-12-01T00:00:00Z", "digest": old}]
    sidecar.write_text(json.dumps(meta))
    (entry,) = load_corpus(project / "corpus")
    result = check_run(entry, notifying_agent.billing_agent)
    assert result.outcome.value == "reproduced"
    assert result.accepted


# -- names every checkout can have -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("a:b", "it holds :"),
        ("what?", "it holds ?"),
        ("star*", "it holds *"),
        ("<x>", "it holds < >"),
        ('a"b', 'it holds "'),
        ("x|y", "it holds |"),
        ("CON", "device name"),
        ("nul", "device name"),
        ("com1", "device name"),
        ("aux.txt", "device name"),
        ("trail.", "trailing dot"),
    ],
)
def test_save_refuses_a_name_windows_cannot_check_out(
    store_path: Path, tmp_path: Path, name: str, said: str
) -> None:
    corpus = tmp_path / "c"
    code, _, err = invoke(
        "--store", str(store_path), "save", "run-a4471", "--to", str(corpus), "--verdict", "good",
        "--name", name,
    )  # fmt: skip
    assert code == 2, err
    assert "cannot be checked out everywhere" in err
    assert said in err
    assert not corpus.exists() or not list(corpus.iterdir())


def test_save_refuses_names_that_collide_on_a_case_insensitive_or_mapped_file_name(
    store_path: Path, tmp_path: Path
) -> None:
    """``Refund`` and ``refund`` are one file on Windows and macOS: a good and a bad run
    collapsed into one. Run ids ``ci:x1`` and ``ci_x1`` both give ``ci_x1.jsonl``, and the
    second save said only "already exists" (``--force`` replaced the other run)."""
    with tg.SQLiteStore(str(store_path)) as st:
        tg.record_run(billing_agent, REFUND_A, store=st, run_id="ci:x1")
        tg.record_run(billing_agent, REFUND_A, store=st, run_id="ci_x1")
    corpus = tmp_path / "c"
    base = ["--store", str(store_path), "save"]
    code, _, err = invoke(
        *base, "run-a4471", "--to", str(corpus), "--verdict", "good", "--name", "Refund"
    )
    assert code == 0, err
    code, _, err = invoke(
        *base, "run-a4471", "--to", str(corpus), "--verdict", "bad", "--wrong-at", "5",
        "--name", "refund", "--force",
    )  # fmt: skip
    assert code == 2
    assert "'refund' differs only in case from Refund.jsonl (run 'run-a4471')" in err
    assert not (corpus / "refund.jsonl").exists()
    code, _, err = invoke(*base, "ci:x1", "--to", str(corpus), "--verdict", "good")
    assert code == 0, err
    for force in ((), ("--force",)):
        code, _, err = invoke(*base, "ci_x1", "--to", str(corpus), "--verdict", "good", *force)
        assert code == 2
        assert "holds another run, 'ci:x1'" in err
    assert json.loads((corpus / "ci_x1.tacho.json").read_text())["run_id"] == "ci:x1"
    # the same run saved again under its own name: only "already exists"
    code, _, err = invoke(*base, "ci:x1", "--to", str(corpus), "--verdict", "good")
    assert code == 2
    assert "already exists;" in err
    assert "another run" not in err
