"""The library: saving runs, loading a corpus, classifying every run, accepting a change."""

from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest

import tachograph as tg
from tachograph.demo.agent import billing_agent, billing_agent_v2
from tachograph.errors import RunNotFound
from tachograph.regression.runner import (
    CorpusError,
    Outcome,
    Verdict,
    junit_xml,
    load_corpus,
    save_run,
    test_corpus,
)

from .agents import mask_emails
from .conftest import EXPECTED, REFUND_A, REPO, UNDER_TEST


def _outcomes(report: Any) -> dict[str, tuple[str, int | None]]:
    return {r.name: (r.outcome.value, r.seq) for r in report.results}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- saving -----------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> tg.SQLiteStore:
    st = tg.SQLiteStore(str(tmp_path / "runs.db"))
    tg.record_run(billing_agent, REFUND_A, store=st, run_id="run:a4471")
    yield st
    st.close()


def test_save_keeps_the_run_byte_for_byte_and_the_verdict_beside_it(
    store: tg.SQLiteStore, tmp_path: Path
) -> None:
    path = save_run(
        store, "run:a4471", to=tmp_path / "c", verdict="bad", wrong_at=9, note="half refund"
    )
    assert path.name == "run_a4471.jsonl"  # ':' never reaches a file name
    exported = io.BytesIO()
    tg.export_run(store, "run:a4471", exported)
    assert path.read_bytes() == exported.getvalue()
    meta = json.loads(path.with_name("run_a4471.tacho.json").read_text())
    assert meta["tachograph_fixture"] == 1
    assert (meta["run_id"], meta["verdict"], meta["wrong_at"]) == ("run:a4471", "bad", 9)
    assert meta["wrong_type"] == "tool.requested"
    assert meta["note"] == "half refund"
    assert meta["source_head"] == store.run_info("run:a4471").head_hash
    [entry] = load_corpus(tmp_path / "c")
    assert (entry.name, entry.verdict, entry.wrong_at, entry.problem) == (
        "run_a4471",
        Verdict.BAD,
        9,
        None,
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"verdict": "bad"}, "needs wrong_at"),
        ({"verdict": "good", "wrong_at": 3}, "only for bad runs"),
        ({"verdict": "bad", "wrong_at": 15}, "outside run"),
        ({"verdict": "maybe"}, "unknown verdict 'maybe'; expected one of 'good', 'bad'"),
    ],
)
def test_save_refuses_what_would_make_a_useless_fixture(
    store: tg.SQLiteStore, tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(CorpusError, match=re.escape(message)):
        save_run(store, "run:a4471", to=tmp_path / "c", **options)
    assert not (tmp_path / "c").exists() or not list((tmp_path / "c").iterdir())


def test_save_does_not_overwrite_unless_asked(store: tg.SQLiteStore, tmp_path: Path) -> None:
    save_run(store, "run:a4471", to=tmp_path, verdict="good")
    with pytest.raises(CorpusError, match="already exists"):
        save_run(store, "run:a4471", to=tmp_path, verdict="bad", wrong_at=9)
    save_run(store, "run:a4471", to=tmp_path, verdict="bad", wrong_at=9, overwrite=True)
    assert load_corpus(tmp_path)[0].verdict is Verdict.BAD


def test_save_names_close_runs_when_the_run_is_unknown(
    store: tg.SQLiteStore, tmp_path: Path
) -> None:
    with pytest.raises(RunNotFound) as info:
        save_run(store, "run:a447", to=tmp_path, verdict="good")
    assert "run:a4471" in info.value.suggestions


def test_processors_trim_the_fixture_and_it_still_verifies_and_replays(tmp_path: Path) -> None:
    st = tg.SQLiteStore(str(tmp_path / "runs.db"))
    task = "Order A-4471 arrived damaged. Write to ann.lee@example.com please."
    tg.record_run(billing_agent, task, store=st, run_id="run-email")
    path = save_run(st, "run-email", to=tmp_path / "c", verdict="good", processors=[mask_emails])
    st.close()
    raw = path.read_bytes()
    assert b"ann.lee@example.com" not in raw
    assert raw.count(b"<email>") >= 3  # the input, then every model request that carries it
    [report] = tg.verify_jsonl(path)
    assert report.ok, report.render()
    meta = json.loads(path.with_name("run-email.tacho.json").read_text())
    assert meta["processors"] == [f"{mask_emails.__module__}:mask_emails"]
    result = test_corpus(tmp_path / "c", billing_agent, workers=1)
    assert _outcomes(result) == {"run-email": ("reproduced", None)}


# -- classifying --------------------------------------------------------------------------------


def test_every_outcome_is_recognised(corpus_master: Path) -> None:
    report = test_corpus(corpus_master, UNDER_TEST, workers=1)
    assert _outcomes(report) == EXPECTED
    assert report.counts() == {
        "reproduced": 4,
        "changed": 2,
        "fixed": 2,
        "still_wrong": 2,
        "raised": 0,
        "unreplayable": 4,
    }
    assert not report.ok
    assert [r.name for r in report.failures] == [
        n for n, (o, _) in sorted(EXPECTED.items()) if o not in ("reproduced", "fixed")
    ]


def test_unreplayable_runs_say_why(corpus_master: Path) -> None:
    by_name = {r.name: r for r in test_corpus(corpus_master, UNDER_TEST, workers=1).results}
    assert "payloads erased at seq 3" in by_name["erased-a4471"].reason
    assert "does not verify" in by_name["tampered-b1002"].reason
    assert "seq 5" in by_name["tampered-b1002"].reason
    assert "no completion" in by_name["crashed-b1002"].reason
    assert "unknown verdict 'meh'" in by_name["bad-sidecar-b1002"].reason


def test_drift_is_reported_per_run(corpus_master: Path) -> None:
    by_name = {r.name: r for r in test_corpus(corpus_master, UNDER_TEST, workers=1).results}
    escalate = by_name["good-escalate-b1002"]  # recorded by demo-1, replayed by demo-2
    assert escalate.outcome is Outcome.REPRODUCED
    assert escalate.simulation
    assert [(d.field, d.recorded, d.current) for d in escalate.drift] == [
        ("code_version", "demo-1", "demo-2")
    ]
    same = by_name["good-half-a4471"]  # recorded by the agent under test itself
    assert same.drift == ()
    assert not same.simulation
    assert by_name["bad-lenient-b1002"].drift[0].recorded == "demo-1-lenient"


def test_fixed_and_still_wrong_turn_on_the_wrong_step(corpus_master: Path) -> None:
    by_name = {r.name: r for r in test_corpus(corpus_master, UNDER_TEST, workers=1).results}
    at = by_name["bad-lenient-b1002"]
    assert (at.outcome, at.seq, at.kind) == (Outcome.FIXED, 8, "decision_changed")
    before = by_name["bad-accepted-a4471"]
    assert (before.outcome, before.seq, before.wrong_at) == (Outcome.FIXED, 9, 13)
    later = by_name["bad-in-transit-c0007"]
    assert (later.outcome, later.seq, later.kind) == (Outcome.STILL_WRONG, 8, "args_changed")
    assert "first diverges later, at seq 9" in later.reason
    through = by_name["bad-half-a4471"]
    assert (through.outcome, through.kind, through.divergences) == (Outcome.STILL_WRONG, None, 0)


def test_the_same_corpus_reads_differently_against_another_agent(
    corpus_master: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(REPO))
    report = test_corpus(corpus_master, billing_agent, workers=1)
    outcomes = _outcomes(report)
    assert outcomes["good-refund-a4471"] == ("reproduced", None)
    assert outcomes["good-half-a4471"] == ("changed", 9)
    assert outcomes["bad-half-a4471"] == ("fixed", 9)
    assert outcomes["bad-lenient-b1002"] == ("fixed", 8)
    lenient = _outcomes(
        test_corpus(corpus_master, "tests.regression.agents:lenient_billing_agent", workers=1)
    )
    assert lenient["bad-lenient-b1002"] == ("still_wrong", 8)
    assert lenient["good-escalate-b1002"] == ("changed", 8)


def test_parallel_replay_gives_the_same_results_in_the_same_order(corpus_master: Path) -> None:
    serial = test_corpus(corpus_master, UNDER_TEST, workers=1)
    parallel = test_corpus(corpus_master, UNDER_TEST, workers=3)
    assert parallel.workers == 3
    strip = [{**r.to_dict(), "seconds": 0} for r in serial.results]
    assert [{**r.to_dict(), "seconds": 0} for r in parallel.results] == strip


def test_an_agent_object_is_found_by_its_import_path_for_workers(corpus_master: Path) -> None:
    report = test_corpus(corpus_master, billing_agent_v2, workers=2)
    assert report.agent == UNDER_TEST
    assert report.workers == 2
    assert _outcomes(report) == EXPECTED


def test_report_json_and_text(corpus_master: Path) -> None:
    report = test_corpus(corpus_master, UNDER_TEST, workers=1)
    data = json.loads(json.dumps(report.to_dict()))
    assert data["ok"] is False
    assert data["runs"] == 14
    first = {r["name"]: r for r in data["results"]}["good-refund-a4471"]
    assert first["outcome"] == "changed"
    assert first["seq"] == 9
    assert first["passed"] is False
    assert first["replay"]["first_divergence"]["kind"] == "args_changed"
    assert first["replay_kind"] == "simulation"
    text = report.render()
    assert re.search(r"good-refund-a4471\s+good\s+changed\s+9\s+simulation", text)
    assert "14 runs against tachograph.demo.agent:billing_agent_v2" in text
    assert "FAILED (8 failing)" in text
    assert "$.payload.args.amount_cents: 2500 -> 1250" in text


# -- JUnit --------------------------------------------------------------------------------------


def test_junit_xml_is_what_ci_reads(corpus_master: Path) -> None:
    report = test_corpus(corpus_master, UNDER_TEST, workers=1)
    root = ET.fromstring(junit_xml(report))
    [suite] = root.findall("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("14", "4", "4")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == set(EXPECTED)
    changed = cases["good-refund-a4471"].find("failure")
    assert changed is not None
    assert changed.get("type") == "changed"
    assert changed.get("message", "").startswith("run-good-refund-a4471: changed at seq 9")
    assert "2500 -> 1250" in (changed.text or "")
    still = cases["bad-half-a4471"].find("failure")
    assert still is not None
    assert still.get("type") == "still_wrong"
    error = cases["tampered-b1002"].find("error")
    assert error is not None
    assert "does not verify" in error.get("message", "")
    passed = cases["bad-lenient-b1002"]
    assert passed.find("failure") is None
    assert passed.find("error") is None
    assert "drift" in (passed.findtext("system-out") or "")


def test_junit_xml_of_a_hostile_file_name_is_well_formed_and_escaped(
    store: tg.SQLiteStore, tmp_path: Path
) -> None:
    """A corpus checked out from elsewhere may hold any file name: an ESC made the XML
    unreadable to CI, and a bidi override reached its page raw."""
    folder = tmp_path / "c\u202e"
    path = save_run(store, "run:a4471", to=folder, verdict="good")
    hostile = "n\x1b[31mred\u202eevil\U000e0041"
    path.rename(folder / f"{hostile}.jsonl")
    path.with_name("run_a4471.tacho.json").rename(folder / f"{hostile}.tacho.json")
    report = test_corpus(folder, UNDER_TEST, workers=1)
    xml = junit_xml(report)
    root = ET.fromstring(xml)  # well-formed
    [case] = root.iter("testcase")
    assert case.get("name") == "n\\x1b[31mred\\u202eevil\\U000e0041"
    assert not any(ch in xml for ch in "\x1b\u202e\U000e0041")


# -- accepting a reviewed change ------------------------------------------------------------------


def test_accept_records_the_new_expectation_without_touching_the_log(corpus: Path) -> None:
    log = corpus / "good-refund-a4471.jsonl"
    before = _sha(log)
    report = test_corpus(corpus, UNDER_TEST, workers=1, accept=["good-refund-a4471"])
    result = {r.name: r for r in report.results}["good-refund-a4471"]
    assert (result.outcome, result.accepted) == (Outcome.REPRODUCED, True)
    assert _sha(log) == before
    meta = json.loads((corpus / "good-refund-a4471.tacho.json").read_text())
    [record] = meta["accepted"]
    assert record["first"] == {"seq": 9, "kind": "args_changed"}
    assert record["agent"] == UNDER_TEST
    assert record["digest"].startswith("sha256:")
    # From now on the accepted behaviour passes without --accept ...
    again = {r.name: r for r in test_corpus(corpus, UNDER_TEST, workers=1).results}
    assert again["good-refund-a4471"].outcome is Outcome.REPRODUCED
    assert again["good-refund-a4471"].accepted
    assert again["good-refund-c0007"].outcome is Outcome.CHANGED  # not accepted
    # ... and the old behaviour no longer does.
    old = {r.name: r for r in test_corpus(corpus, billing_agent, workers=1).results}
    assert old["good-refund-a4471"].outcome is Outcome.CHANGED
    assert "no longer produced" in old["good-refund-a4471"].reason


def test_accept_can_be_given_a_run_id_and_ignores_runs_with_nothing_to_accept(
    corpus: Path,
) -> None:
    report = test_corpus(
        corpus,
        UNDER_TEST,
        workers=1,
        accept=["run-good-refund-c0007", "bad-half-a4471", "good-no-order"],
    )
    by_name = {r.name: r for r in report.results}
    assert by_name["good-refund-c0007"].accepted
    assert by_name["bad-half-a4471"].outcome is Outcome.STILL_WRONG
    assert any("a bad run is not accepted" in n for n in by_name["bad-half-a4471"].notes)
    assert any("nothing to accept" in n for n in by_name["good-no-order"].notes)
    assert json.loads((corpus / "bad-half-a4471.tacho.json").read_text())["accepted"] == []


def test_accept_of_an_unknown_run_is_an_error_before_anything_runs(corpus: Path) -> None:
    with pytest.raises(CorpusError, match="not in the corpus: nope"):
        test_corpus(corpus, UNDER_TEST, workers=1, accept=["nope"])


def test_a_newer_sidecar_is_reported_not_guessed(corpus: Path) -> None:
    sidecar = corpus / "good-no-order.tacho.json"
    meta = json.loads(sidecar.read_text())
    meta["tachograph_fixture"] = 2
    sidecar.write_text(json.dumps(meta))
    entry = {e.name: e for e in load_corpus(corpus)}["good-no-order"]
    assert entry.problem is not None
    assert "upgrade tachograph" in entry.problem


def test_a_sidecar_without_its_run_is_an_entry_that_fails(corpus: Path) -> None:
    (corpus / "good-no-order.jsonl").unlink()
    entry = {e.name: e for e in load_corpus(corpus)}["good-no-order"]
    assert entry.problem == "sidecar good-no-order.tacho.json has no run file good-no-order.jsonl"


@pytest.mark.parametrize(
    ("wrong_at", "outcome"),
    [(8, Outcome.STILL_WRONG), (9, Outcome.UNREPLAYABLE)],
)
def test_a_crashed_bad_run_is_judged_on_what_it_recorded(
    corpus: Path, wrong_at: int, outcome: Outcome
) -> None:
    # crashed-b1002 ends inside the call at seq 9; the agent under test reproduces 0..8.
    sidecar = corpus / "crashed-b1002.tacho.json"
    meta = json.loads(sidecar.read_text())
    meta.update(verdict="bad", wrong_at=wrong_at)
    sidecar.write_text(json.dumps(meta))
    result = {r.name: r for r in test_corpus(corpus, UNDER_TEST, workers=1).results}
    crashed = result["crashed-b1002"]
    assert crashed.outcome is outcome
    assert "seq 9 cannot be served" in crashed.reason


def test_an_unknown_match_mode_fails_loudly(corpus_master: Path) -> None:
    with pytest.raises(CorpusError, match="expected 'strict' or 'key'"):
        test_corpus(corpus_master, UNDER_TEST, match="fuzzy")


def test_a_bad_run_whose_wrong_step_is_taken_before_the_agent_raises_is_still_wrong(
    corpus_master: Path,
) -> None:
    from .agents import raises_after_billing_agent_v2

    report = test_corpus(corpus_master, raises_after_billing_agent_v2, workers=1)
    results = {r.name: r for r in report.results}
    half = results["bad-half-a4471"]
    assert half.outcome is Outcome.STILL_WRONG
    assert "then the agent raised RuntimeError: crashed after the fact" in half.reason
    # a good run it reproduced up to the end, then raised: raised, not changed
    assert results["good-half-a4471"].outcome is Outcome.RAISED
    # diverging before the wrong step, then raising: not a fix
    assert results["bad-accepted-a4471"].outcome is Outcome.RAISED
    # the replay stopped the agent where it left the record (nothing to serve): it never
    # raised there, and the wrong step is not taken
    assert results["bad-lenient-b1002"].outcome is Outcome.FIXED


def test_a_good_run_that_now_raises_can_be_accepted(corpus: Path) -> None:
    from .agents import broken_billing_agent

    first = test_corpus(corpus, broken_billing_agent, workers=1, accept=["good-no-order"])
    accepted = {r.name: r for r in first.results}["good-no-order"]
    assert accepted.outcome is Outcome.REPRODUCED
    assert accepted.accepted
    again = {r.name: r for r in test_corpus(corpus, broken_billing_agent, workers=1).results}
    assert again["good-no-order"].outcome is Outcome.REPRODUCED
    assert again["good-escalate-b1002"].outcome is Outcome.RAISED
    back = {r.name: r for r in test_corpus(corpus, UNDER_TEST, workers=1).results}
    assert back["good-no-order"].outcome is Outcome.CHANGED
