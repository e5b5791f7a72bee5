"""The benchmark suite runs end to end at a tiny scale and reports every figure.

No time is asserted here: speed is judged by the suite itself, as ratios, on a quiet machine.
These tests prove that the suite produces what docs/performance.md quotes: every figure with
a numeric median for subject and baseline, a ratio, and a verdict per target.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import itertools
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import Target  # noqa: E402

from bench import run as bench_run  # noqa: E402


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _probe(
    main: Callable[[list[str]], dict[str, Any]],
    args: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> dict[str, Any]:
    """Run a probe's ``main`` with ``--json`` in ``tmp_path``: what it prints is what it
    returns, and it leaves no file behind."""
    result = main([*args, "--json", "--dir", str(tmp_path)])
    assert json.loads(capsys.readouterr().out) == result
    assert list(tmp_path.iterdir()) == []  # its files are gone
    return result


def _older_src(tmp_path: Path) -> tuple[Path, Path]:
    """This checkout's ``src`` and an "older" one for a side-by-side probe: a directory in
    ``tmp_path`` whose ``tachograph`` links to this one, so each side's samples show which
    tree they imported."""
    src = Path(__file__).resolve().parents[2] / "src"
    older = tmp_path / "older"
    older.mkdir()
    (older / "tachograph").symlink_to(src / "tachograph", target_is_directory=True)
    return src, older


def _side_by_side(
    main: Callable[[list[str]], Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    *args: str,
) -> dict[str, Any]:
    """A side-by-side probe's ``main`` over two rounds against an "older" tree (see
    :func:`_older_src`) with ``--json``: each side imported its own tree and took two
    samples. Returns what it printed."""
    src, older = _older_src(tmp_path)
    assert main(["--before", str(older), "--rounds", "2", *args, "--json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    # each side imported its own tree: the older one through the link, this one from src
    assert result["before"]["tachograph"] == [str(older / "tachograph")]
    assert result["after"]["tachograph"] == [str(src / "tachograph")]
    for side in ("before", "after"):
        assert result[side]["samples"] == 2
    return result


def _refused(
    main: Callable[[list[str]], Any], args: list[str], why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``main(args)`` exits with a usage error (2) whose message holds ``why``."""
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    assert why in capsys.readouterr().err


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, str]:
    base = tmp_path_factory.mktemp("bench")
    out = io.StringIO()
    json_path = base / "results" / "latest.json"
    document = bench_run.run_suite(
        scale=0.002,
        json_path=json_path,
        repeats=3,
        workdir=base / "work",
        out=out,
    )
    return document, json_path, out.getvalue()


def _expected_keys() -> set[str]:
    keys = set(bench_run.FIGURE_KEYS) | {"privacy_secrets", "privacy_pii"}
    if bench_run.bridge_available():
        keys |= {"bridge_on_off", "bridge_off_free"}
    if bench_run.postgres_available():
        keys |= {"pg_append_single", "pg_append_batched"}
    if importlib.util.find_spec("mcp") is not None:
        keys.add("adapter_mcp")
    from bench import adapter_langchain

    if adapter_langchain.available():
        keys.add("adapter_langchain")
    if importlib.util.find_spec("pydantic_ai") is not None:
        keys.add("adapter_pydantic_ai")
    if importlib.util.find_spec("google.adk") is not None:
        keys.add("adapter_google_adk")
    if importlib.util.find_spec("agents") is not None:
        keys.add("adapter_openai_agents")
    if importlib.util.find_spec("httpx") is not None:
        keys.add("adapter_httpx")
        if importlib.util.find_spec("httpx2") is not None:
            keys.add("adapter_httpx2")
    return keys


def test_json_is_written_and_matches_the_returned_document(
    suite: tuple[dict[str, Any], Path, str],
) -> None:
    document, json_path, _ = suite
    assert json.loads(json_path.read_text(encoding="utf-8")) == document
    assert document["scale"] == 0.002
    assert document["command"] == "python -m bench.run --scale 0.002 --repeats 3"
    machine = document["machine"]
    assert machine["cpus"] >= 1
    assert machine["python"].startswith(sys.implementation.name)
    assert isinstance(machine["bytecode_cached"], bool)


def test_the_command_names_every_option_that_changes_a_figure() -> None:
    from bench.run import _command

    assert _command(0.5, ["record", "verify"], 0) == (
        "python -m bench.run --only record,verify --scale 0.5"
    )
    assert _command(1.0, None, 3) == "python -m bench.run --repeats 3"
    assert _command(1.0, [], 0) == "python -m bench.run"


def test_every_figure_has_numeric_medians_ratio_and_verdicts(
    suite: tuple[dict[str, Any], Path, str],
) -> None:
    document, _, _ = suite
    figures = document["figures"]
    assert set(figures) == _expected_keys()
    for key, fig in figures.items():
        for side in ("subject", "baseline"):
            assert _number(fig[side]["median"]), (key, side)
            assert fig[side]["median"] > 0, (key, side)
            assert fig[side]["unit"], (key, side)
        assert _number(fig["ratio"]), key
        assert fig["ratio"] > 0, key
        assert fig["ratio_label"], key
        for target in fig["targets"]:
            assert _number(target["value"]), (key, target)
            assert _number(target["limit"]), (key, target)
            assert target["op"] in ("<", "<=", ">=", ">"), (key, target)
            verdict = Target(target["label"], target["value"], target["op"], target["limit"])
            assert target["pass"] == verdict.passed, (key, target)
        assert fig["pass"] == all(t["pass"] for t in fig["targets"]), key
        if key != "bridge_on_off":
            assert fig["targets"], f"{key} has no target"
    assert document["passed"] == all(f["pass"] for f in figures.values())


def test_missed_targets_come_with_a_profile(suite: tuple[dict[str, Any], Path, str]) -> None:
    document, _, _ = suite
    for key, fig in document["figures"].items():
        if fig["pass"] or key == "verify_memory":  # memory is measured in a subprocess
            continue
        assert fig["profile"], f"{key} missed a target but has no profile"
        for row in fig["profile"]:
            assert set(row) == {"function", "calls", "own_s", "cum_s", "own_share"}
            # docs quote these rows: package-relative names, never this machine's directories
            assert not row["function"].startswith("/"), row


def test_the_table_names_every_figure_and_verdict(suite: tuple[dict[str, Any], Path, str]) -> None:
    document, _, printed = suite
    table = printed.split("\n\n", 1)[1]
    for key, fig in document["figures"].items():
        assert key in table
        for target in fig["targets"]:
            assert target["label"] in table
    verdicts = sum(len(f["targets"]) for f in document["figures"].values())
    assert table.count(" pass") + table.count(" MISS") >= verdicts


def test_memory_figure_comes_from_both_stores(suite: tuple[dict[str, Any], Path, str]) -> None:
    fig = suite[0]["figures"]["verify_memory"]
    small, large = fig["extra"]["small"], fig["extra"]["large"]
    assert small["failed_runs"] == large["failed_runs"] == 0
    assert large["events"] > small["events"] > 0
    assert large["peak_rss_kb"] >= large["rss_before_kb"] > 0


def test_the_growth_figure_lists_pages_of_one_size(
    suite: tuple[dict[str, Any], Path, str],
) -> None:
    # a page of runs must hold as many runs in the small store as in the large one: a page
    # of 20 held 10 in the small store (at scale 1), and the large store's 20 rows alone
    # made it 1.25x slower
    extra = suite[0]["figures"]["store_growth"]["extra"]
    small_runs = extra["small_store"]["runs"]
    assert extra["runs_page"] == min(20, small_runs)
    assert extra["large_store"]["runs"] >= extra["runs_page"]


def test_a_kept_work_directory_runs_again(suite: tuple[dict[str, Any], Path, str]) -> None:
    # --dir keeps the stores: a second run into it must not trip over the first one's runs
    # (the writer's fixed run ids once failed with "already has a different event at seq 0")
    _, json_path, _ = suite
    workdir = json_path.parent.parent / "work"
    assert (workdir / "durable" / "writer.db").exists()
    again = bench_run.run_suite(
        scale=0.002,
        json_path=None,
        only=["durable", "sealing"],
        profile=False,
        repeats=3,
        workdir=workdir,
        out=io.StringIO(),
    )
    assert {"durable_appends", "intent_durable", "seal_overhead"} <= set(again["figures"])


def test_target_comparisons() -> None:
    assert Target("t", 1.0, "<", 2.0).passed
    assert not Target("t", 2.0, "<", 2.0).passed
    assert Target("t", 2.0, "<=", 2.0).passed
    assert Target("t", 0.5, ">=", 0.5).passed
    assert not Target("t", 0.49, ">=", 0.5).passed
    with pytest.raises(ValueError, match="unknown comparison"):
        _ = Target("t", 1.0, "~", 1.0).passed


def test_unknown_module_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    _refused(bench_run.main, ["--only", "nope", "--json", ""], "unknown module(s) nope", capsys)


def test_the_profile_of_a_slow_append_appends_runs_of_its_own(tmp_path: Path) -> None:
    # When `append` is the worst store_growth measure and misses, its profile appends more
    # runs to the store the measures already appended to: no run id may come twice (a
    # DuplicateConflict stopped the whole suite when noise made `append` the worst).
    from bench import scale
    from tachograph.store import SQLiteStore

    path = tmp_path / "grown.db"
    measured = scale._Probe(path, 1, 20, 1, 20)
    measured.append()
    measured.append()
    appends = scale._MEASURES["append"][1]
    for _ in range(2):  # the profile may be taken again: each time a probe of its own
        assert len(scale._repeat(appends, scale._Probe(path, 1, 20, 3, 20), 5)) == 5
    assert len(SQLiteStore(path).runs(limit=100)) == 2 + 5 + 5


def test_the_intent_probe_splits_a_commit_into_its_pages_statements_and_python(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import intentprobe

    result = _probe(intentprobe.main, ["--rounds", "3"], tmp_path, capsys)
    fresh, warm = result["fresh"], result["warm"]
    # SQLite writes one WAL frame per page a commit changed: one row, one frame; one row in
    # each of five tables, five. Counted from the fresh WAL's growth, not assumed.
    pages = fresh["pages_per_commit"]["tables"]
    assert [pages[k]["median_frames"] for k in ("1", "2", "3", "5")] == [1.0, 2.0, 3.0, 5.0]
    store = fresh["store_commit"]
    assert store["median_frames_per_raw_commit"] == 1.0
    # the event's row, its two unique indexes, its payload's row and the run's summary
    assert store["median_frames_per_append"] == 5.0
    # A warm WAL is written over in place: it does not grow, so no frames are counted.
    assert all(row["median_frames"] is None for row in warm["pages_per_commit"]["tables"].values())
    assert warm["store_commit"]["median_frames_per_append"] is None
    assert fresh["write_tool"]["intents_that_grew_the_wal"] == fresh["rounds"]
    assert warm["write_tool"]["intents_that_grew_the_wal"] == 0
    for phase in (fresh, warm):
        statements = phase["store_commit"]["statements_us"]
        assert {
            "BEGIN IMMEDIATE",
            "INSERT INTO events",
            "INSERT INTO payloads",
            "UPDATE runs SET",
            "COMMIT",
        } <= set(statements)
        assert all(_number(us) and us > 0 for us in statements.values())
        tool = phase["write_tool"]
        assert tool["call_to_body_us"] >= tool["append_us"] > 0
    assert all(_number(us) and us > 0 for us in result["in_memory"].values())
    for phase in (fresh, warm):
        entry = phase["journal"]
        if not intentprobe.journal_available():  # pragma: no cover - not on Linux
            assert entry is None
            continue
        # every line reached its file and reads back; the growing file holds exactly the
        # lines written, the two written over kept their reserved size
        assert entry["lines_read_back"] == dict.fromkeys(intentprobe.JOURNAL_KINDS, True)
        assert entry["reserved_bytes"] == intentprobe.journal_space(phase["rounds"])
        assert entry["file_bytes"] == {
            "growing": phase["rounds"] * entry["line_bytes"],
            "fallocated": entry["reserved_bytes"],
            "prewritten": entry["reserved_bytes"],
        }
        for kind in intentprobe.JOURNAL_KINDS:
            assert _number(entry[f"{kind}_us"])
            assert entry[f"{kind}_us"] > 0
            assert entry["estimate_in_raw_commits"][kind] > entry["in_raw_commits"][kind] > 0


def test_the_append_probe_inserts_every_variant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    from bench import appendprobe
    from tachograph.store import SQLiteStore

    result = _probe(appendprobe.main, ["--events", "250", "--rounds", "1"], tmp_path, capsys)
    variants = result["variants"]
    assert set(variants) == set(appendprobe.VARIANTS)
    # every variant stored every event it was given, once
    assert {name: v["rows"] for name, v in variants.items()} == dict.fromkeys(variants, 250)
    assert all(_number(v["us_per_event"]) and v["us_per_event"] > 0 for v in variants.values())

    # The plain-SQL variants insert the rows the store would, readable as its events.
    path = tmp_path / "schema.db"
    db = appendprobe._store_file(path, trigger=True)
    events = list(appendprobe.build_run("probe-check", 250, payload_bytes=100))
    appendprobe._sql_insert(db, events, one_table=False)
    db.execute(
        "INSERT INTO runs (tenant, run_id, actor, started_at, last_at, events, head_hash) "
        "VALUES (?,?,?,?,?,?,?)",
        ("default", "probe-check", "bench", events[0].ts, events[-1].ts, 250, events[-1].hash),
    )
    db.close()
    store = SQLiteStore(path)
    try:
        assert store.verify("probe-check").ok
        assert [e.hash for e in store.read("probe-check")] == [e.hash for e in events]
    finally:
        store.close()
    again = appendprobe._store_file(tmp_path / "again.db", trigger=False)
    try:
        with pytest.raises(sqlite3.IntegrityError):  # the schema's unique event ids, enforced
            appendprobe._sql_insert(again, events + events[:1], one_table=False)
    finally:
        again.close()


def test_the_read_probe_reads_every_run_three_ways(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import gc

    from bench import readprobe

    result = _probe(readprobe.main, ["--rounds", "2", "--lengths", "10,100"], tmp_path, capsys)
    assert result["lengths"] == [10, 100]  # the runs recorded hold exactly these many events
    assert set(result["variants"]) == set(readprobe.VARIANTS)
    for row in result["variants"].values():
        assert list(row["us_per_event"]) == ["10", "100"]
        assert all(_number(us) and us > 0 for us in row["us_per_event"].values())
        assert len(row["growth_to_next"]) == 1
    assert gc.isenabled()  # the variant with the collector off left it on


def test_the_read_probe_refuses_bad_lengths(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import readprobe

    _refused(readprobe.main, ["--lengths", "500,five"], "--lengths must be integers", capsys)
    for lengths in ("10,11", "10,10", "2,10"):  # odd, repeated, too short: runs would merge
        why = "--lengths must be distinct even numbers"
        _refused(readprobe.main, ["--lengths", lengths], why, capsys)


def test_the_replay_figure_reports_what_each_length_cost_the_process(
    suite: tuple[dict[str, Any], Path, str],
) -> None:
    fig = suite[0]["figures"]["replay"]
    rows = fig["extra"]["lengths"]
    assert [row["events"] for row in rows] == sorted(row["events"] for row in rows)
    for row in rows:  # POSIX: CPU in user and system mode and minor faults, per event
        for field in ("replay_user_us_per_event", "replay_system_us_per_event"):
            assert _number(row[field]), (row["events"], field)
            assert row[field] >= 0, (row["events"], field)
        assert _number(row["replay_minor_faults_per_event"])
        assert row["replay_minor_faults_per_event"] >= 0
    growth = [row["replay_us_per_event"] for row in rows]
    assert fig["extra"]["growth"] == max(b / a for a, b in itertools.pairwise(growth))
    assert fig["targets"][1]["value"] == fig["extra"]["growth"]


def test_the_replay_probe_replays_every_length_in_new_processes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import replayprobe

    result = _probe(replayprobe.main, ["--rounds", "1", "--lengths", "10,100"], tmp_path, capsys)
    assert result["lengths"] == [10, 100]  # the runs recorded hold exactly these many events
    for label in replayprobe.LABELS:
        row = result[label]
        for measure in replayprobe.MEASURES:
            assert list(row[measure]) == ["10", "100"], (label, measure)
            assert all(_number(v) and v >= 0 for v in row[measure].values()), (label, measure)
        assert all(us > 0 for us in row["us_per_event"].values())
        assert len(row["us_per_event_growth_to_next"]) == 1


def test_the_replay_probe_reports_a_process_that_failed(tmp_path: Path) -> None:
    from bench import replayprobe

    missing = tmp_path / "none.db"
    with pytest.raises(RuntimeError, match="the probe's process failed"):
        replayprobe._spawn(missing, "run_none", "run_none", 10)


def test_the_replay_probe_refuses_bad_lengths_and_rounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import replayprobe

    for args, why in (
        (["--lengths", "500,five"], "--lengths must be integers"),
        (["--lengths", "10,11"], "--lengths must be distinct even numbers"),
        (["--lengths", "10,10"], "--lengths must be distinct even numbers"),
        (["--lengths", "2,10"], "--lengths must be distinct even numbers"),
        (["--rounds", "0"], "--rounds must be at least 1"),
    ):
        _refused(replayprobe.main, args, why, capsys)
    with pytest.raises(ValueError, match="distinct even numbers"):  # called directly, too
        replayprobe.probe(tmp_path, 1, [100, 100])
    assert list(tmp_path.iterdir()) == []  # refused before any store was made


def test_the_replay_probe_prints_a_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import replayprobe

    result = replayprobe.main(["--rounds", "1", "--lengths", "100,10", "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert result["lengths"] == [10, 100]  # taken in increasing order
    assert "lengths in an order seeded 20" in out
    grown = [line for line in out.splitlines() if "; growth " in line]
    assert len(grown) == 2 * len(replayprobe.LABELS)  # wall and user CPU, for each label
    for line in grown:  # a value, or "-" where the shorter run's CPU time read 0
        assert line.rsplit("; growth ", 1)[1].strip() not in ("", ",")


def test_the_call_probe_measures_the_older_src_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import callprobe

    result = _side_by_side(callprobe.main, tmp_path, capsys, "--calls", "100")
    for side in ("before", "after"):
        row = result[side]
        low, high = row["ratio_quartiles"]
        assert _number(row["ratio"])
        assert low <= row["ratio"] <= high
        assert row["call_us"] > 0
        assert row["floor_us"] > 0
        assert len(row["compiled"]) == 1
    assert result["after_lower_in"] in (0, 1, 2)
    assert result["settings"] == {"rounds": 2, "calls": 100, "long": 0, "seed": 1}
    assert "growth" not in result["after"]


def test_the_call_probe_gives_the_growth_with_long_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench import callprobe

    assert callprobe.main(["--rounds", "2", "--calls", "100", "--long", "300", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["after"]
    low, high = row["growth_quartiles"]
    assert _number(row["growth"])
    assert low <= row["growth"] <= high
    assert row["long_us"] > 0
    with pytest.raises(SystemExit):
        callprobe.main(["--calls", "500", "--long", "300"])  # a long run shorter than a short


def test_the_call_probe_s_summary_is_the_medians_of_its_samples() -> None:
    from bench.callprobe import summary

    def row(ratio: float, floor: float = 8_000) -> dict[str, float]:
        return {"call_ns": ratio * floor, "floor_ns": floor, "ratio": ratio}

    before = [row(3.0), row(1.0), row(2.0, 7_000)]
    after = [row(2.5), row(1.5), row(0.5, 9_000)]
    result = summary({"before": before, "after": after})
    assert result["before"]["ratio"] == 2.0
    assert result["before"]["floor_us"] == 8.0
    assert result["before"]["call_us"] == 14.0  # of 24, 8 and 14 us
    assert result["before"]["ratio_quartiles"] == [1.5, 2.5]  # inside the samples
    assert result["after"]["ratio"] == 1.5
    # paired by round: 2.5 < 3.0, 1.5 > 1.0, 0.5 < 2.0 (sorted pairs would give 3, reversed 1)
    assert result["after_lower_in"] == 2
    alone = summary({"after": after})
    assert "after_lower_in" not in alone
    assert alone["after"]["samples"] == 3


def test_the_call_probe_refuses_bad_options_and_reports_a_failed_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import callprobe

    for args, why in (
        (["--rounds", "0"], "--rounds must be at least 1"),
        (["--calls", "50"], "--calls at least 100"),
        (["--before", str(tmp_path)], "no tachograph package in that directory"),
    ):
        _refused(callprobe.main, args, why, capsys)
    with pytest.raises(RuntimeError, match="a sample process failed"):
        callprobe._sample(tmp_path, 1)  # the child refuses its --calls


def test_the_claim_probe_times_the_writer_s_part_of_each_version_s_intent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import claimprobe

    result = _side_by_side(claimprobe.main, tmp_path, capsys, "--calls", "20")
    for side in ("before", "after"):
        row = result[side]
        assert all(row[f"{part}_us"] > 0 for part in claimprobe.PARTS)
        assert _number(row["ratio"])
        assert row["ratio"] > 0
        assert len(row["compiled"]) == 1
    assert result["after_lower_in"] in (0, 1, 2)
    assert result["settings"] == {"rounds": 2, "calls": 20, "seed": 1}


def test_the_claim_probe_s_summary_pairs_its_rounds_and_refuses_bad_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import claimprobe

    def row(ratio: float) -> dict[str, float]:
        parts = dict.fromkeys(claimprobe.PARTS, 10.0)
        return {**parts, "claim": ratio * 10.0, "ratio": ratio}

    result = claimprobe.summary(
        {"before": [row(0.8), row(0.6), row(0.7)], "after": [row(0.7), row(0.65), row(0.5)]}
    )
    assert result["before"]["ratio"] == 0.7
    assert result["before"]["claim_us"] == 7.0
    assert result["after"]["ratio"] == 0.65
    # paired by round: 0.7 < 0.8, 0.65 > 0.6, 0.5 < 0.7 (sorted pairs would give 3)
    assert result["after_lower_in"] == 2
    assert "after_lower_in" not in claimprobe.summary({"after": [row(0.5)]})
    for args, why in (
        (["--rounds", "0"], "--rounds must be at least 1"),
        (["--calls", "5"], "--calls at least 10"),
        (["--before", str(tmp_path)], "no tachograph package in that directory"),
    ):
        _refused(claimprobe.main, args, why, capsys)
    with pytest.raises(RuntimeError, match="a sample process failed"):
        claimprobe._sample(tmp_path, 1)  # the child refuses its --calls


def test_the_claim_probe_fails_a_sample_whose_intent_was_not_claimed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A refused claim sends the intent through the writer thread, with its marks in the same
    order: the probe must not time that as the claim."""
    from bench import claimprobe
    from tachograph.capture.recorder import Writer

    def refuse(self: Writer, event: object) -> None:
        return None

    # the probe's child wraps both in place: monkeypatch puts the originals back after
    monkeypatch.setattr(Writer, "submit", Writer.submit)
    monkeypatch.setattr(Writer, "claim", refuse)
    with pytest.raises(RuntimeError, match="was not claimed"):
        claimprobe._child(10)


def test_the_replay_parts_probe_splits_each_version_s_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import replayparts

    result = _side_by_side(replayparts.main, tmp_path, capsys, "--calls", "20", "--pairs", "2")
    for side in ("before", "after"):
        row = result[side]
        assert all(_number(row[name]) and row[name] > 0 for name in replayparts.PARTS[:4])
        # the replay holds its two timed phases, and its read is the figure's floor's
        assert row["load_ms"] + row["agent_ms"] < row["replay_ms"]
        # the median of each sample's ratio: with two noisy samples it may stand a factor
        # of two or more from the ratio of the medians (0.083 against 0.041 in one CI run)
        assert row["ratio"] > 0
        assert row["agent_us_per_call"] > 0
    assert result["after_higher_in"] in (0, 1, 2)
    assert result["settings"] == {"rounds": 2, "calls": 20, "pairs": 2, "seed": 1}
    # the arithmetic of the summary, on samples whose figures are known
    rows = [
        {"read_ms": 1.0, "replay_ms": 4.0, "load_ms": 1.0, "agent_ms": 2.0, "rest_ms": 0.0,
         "ratio": 0.25, "calls": 20},
        {"read_ms": 3.0, "replay_ms": 4.0, "load_ms": 1.0, "agent_ms": 2.0, "rest_ms": 0.0,
         "ratio": 0.75, "calls": 20},
        {"read_ms": 2.0, "replay_ms": 5.0, "load_ms": 1.0, "agent_ms": 4.0, "rest_ms": 0.0,
         "ratio": 0.4, "calls": 20},
    ]  # fmt: skip
    summed = replayparts.summary({"before": rows, "after": rows[::-1]})
    assert (summed["before"]["ratio"], summed["before"]["read_ms"]) == (0.4, 2.0)
    assert summed["before"]["agent_us_per_call"] == 100.0
    assert summed["after_higher_in"] == 1  # round 1: 0.4 > 0.25; round 2 ties; round 3 not


def test_the_held_probe_measures_what_a_read_run_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import heldprobe

    result = _side_by_side(heldprobe.main, tmp_path, capsys, "--calls", "200", "--reads", "2")
    for side in ("before", "after"):
        row = result[side]
        assert row["events"] == 402
        assert _number(row["read_us"])
        assert row["read_us"] > 0
        assert len(row["read_us_all"]) == 2
        # an event of this agent as read: its Event, its strings, its decoded payload
        assert 500 < row["held_bytes"] < 5_000
        assert row["parts"]
        assert row["parts"][0]["where"].startswith("tachograph/")
        assert row["parts"][0]["bytes_an_event"] > 100
    assert result["after_faster_in"] in (0, 1, 2)
    assert result["settings"] == {"rounds": 2, "calls": 200, "reads": 2, "seed": 1}
    for args, why in (
        (["--reads", "0"], "must be at least 1"),
        (["--before", str(tmp_path)], "no tachograph package in that directory"),
    ):
        _refused(heldprobe.main, args, why, capsys)


def test_the_lookup_probe_times_each_lookup_at_two_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import lookupprobe

    options = ("--runs", "200,600", "--reads", "2", "--audit", "3")
    result = _side_by_side(lookupprobe.main, tmp_path, capsys, *options)
    for side in ("before", "after"):
        for key in lookupprobe.LOOKUPS:
            row = result[side][key]
            for size in ("200", "600"):
                assert _number(row[size]["ms"])
                assert row[size]["ms"] > 0
                assert row[size]["steps"] > 0
            assert row["growth"] == pytest.approx(row["600"]["ms"] / row["200"]["ms"])
    assert result["settings"] == {
        "rounds": 2, "runs": [200, 600], "events": 3, "audit": 3, "reads": 2, "seed": 1
    }  # fmt: skip
    for args, why in (
        (["--runs", "600,200"], "expected SMALL,LARGE"),
        (["--runs", "100,1000"], "expected SMALL,LARGE"),
        (["--reads", "0"], "must be at least 1"),
        (["--before", str(tmp_path)], "no tachograph package in that directory"),
    ):
        _refused(lookupprobe.main, args, why, capsys)


def test_the_replay_parts_summary_is_the_medians_of_its_samples() -> None:
    from bench.replayparts import PARTS, summary

    def row(ratio: float, agent_ms: float) -> dict[str, Any]:
        values = dict.fromkeys(PARTS, 1.0)
        return {**values, "agent_ms": agent_ms, "calls": 100, "ratio": ratio}

    before = [row(0.4, 2.0), row(0.5, 1.0), row(0.6, 3.0)]
    after = [row(0.3, 1.0), row(0.7, 1.0), row(0.5, 1.0)]
    result = summary({"before": before, "after": after})
    assert result["before"]["ratio"] == 0.5
    assert result["before"]["agent_us_per_call"] == 20.0  # 2 ms over 100 calls
    # paired by round: 0.3 < 0.4, 0.7 > 0.5, 0.5 < 0.6
    assert result["after_higher_in"] == 1
    assert "after_higher_in" not in summary({"after": after})


def test_the_replay_parts_probe_refuses_bad_options_and_reports_a_failed_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import replayparts

    for args, why in (
        (["--rounds", "0"], "must be at least 1"),
        (["--pairs", "0"], "must be at least 1"),
        (["--before", str(tmp_path)], "no tachograph package in that directory"),
    ):
        _refused(replayparts.main, args, why, capsys)
    with pytest.raises(RuntimeError, match="a sample process failed"):
        replayparts._sample(tmp_path, 0, 1)  # the child refuses its --calls


def test_the_writer_probe_records_runs_that_verify_both_ways(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import writerprobe

    result = _probe(writerprobe.main, ["--events", "600", "--rounds", "1"], tmp_path, capsys)
    variants = result["variants"]
    assert set(variants) == set(writerprobe.VARIANTS)
    for row in variants.values():
        assert row["verified"] is True
        assert row["events_read"] == 600
        for key in ("recorded", "alone", "beside", "store", "writer_cpu_us", "agent_cpu_us"):
            assert _number(row[key])
            assert row[key] > 0


def test_the_writer_probes_one_statement_stores_what_the_store_stores(tmp_path: Path) -> None:
    """The probe's one-statement batch stores the rows the store's six statements store (read
    back equal, verifying), appends its seal rows after the tenant's last, and refuses a
    batch that does not continue the stored head, storing nothing of it."""
    from bench import writerprobe
    from tachograph.errors import StoreUnavailable
    from tachograph.store import SQLiteStore
    from tachograph.store.base import SealRow

    events = list(writerprobe.build_run("probe-one", 1_201, payload_bytes=100))
    stores = [writerprobe.OneStatementStore(tmp_path / "one.db"), SQLiteStore(tmp_path / "six.db")]
    try:
        for store in stores:
            store.append(events[:1])
            seals = {
                "default": [SealRow("probe-one", 600, b"leaf-a"), SealRow("probe-one", 9, b"b")]
            }
            store.append(events[1:601], seals=seals)
            store.append(events[601:])
        one, six = stores
        assert list(one.read("probe-one")) == list(six.read("probe-one")) == events
        assert one.verify("probe-one").ok
        leaves = "SELECT idx, run_id, seq, leaf FROM seals ORDER BY idx"
        assert one._db.execute(leaves).fetchall() == six._db.execute(leaves).fetchall()
        assert [r[0] for r in one._db.execute(leaves)] == [0, 1]
        more = list(writerprobe.build_run("probe-one", 1_210, payload_bytes=100))
        stale = [dataclasses.replace(e, prev_hash="sha256:" + "0" * 64) for e in more[1201:1203]]
        with pytest.raises(StoreUnavailable, match="stale head"):
            one.append(stale)
        assert one.head("probe-one") == (1_200, events[-1].hash)
        assert sum(1 for _ in one.read("probe-one")) == 1_201
    finally:
        for store in stores:
            store.close()


def test_the_page_probe_measures_every_page_size_on_stores_that_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import pageprobe

    args = ["--rounds", "1", "--calls", "10", "--events", "200"]
    result = _probe(pageprobe.main, args, tmp_path, capsys)
    sizes = result["page_sizes"]
    assert list(sizes) == [str(size) for size in pageprobe.PAGE_SIZES]
    for row in sizes.values():
        assert row["verified"] is True
        for key in ("intent_in_raw_commits", "appends_share_of_raw"):
            assert _number(row[key])
            assert row[key] > 0


def test_the_page_probe_makes_its_stores_with_the_page_size_asked(tmp_path: Path) -> None:
    """Each store the probe measures has the pages it names (SQLite takes a page size only
    before a file's first table), and is the store otherwise: it records and verifies."""
    import sqlite3

    from bench import pageprobe

    for size in pageprobe.PAGE_SIZES:
        path = tmp_path / f"{size}.db"
        store = pageprobe.store_with_pages(path, size)
        try:
            events = list(pageprobe.build_run(f"page-{size}", 300, payload_bytes=1_000))
            store.append(events)
            assert store.verify(f"page-{size}").ok
        finally:
            store.close()
        with sqlite3.connect(path) as db:
            assert db.execute("PRAGMA page_size").fetchone()[0] == size
