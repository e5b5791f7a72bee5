"""``tacho show`` keeps what it prints, not the run's events: the same bytes as a document
built whole, for runs whose text needs escaping, and with no event held past its row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

import tachograph as tg
from tachograph.cli import commands_inspect
from tachograph.cli.app import EXIT_OK, emit_json, emit_json_rows
from tachograph.record.event import Event
from tachograph.views.text import escape_json
from tachograph.views.timeline import TimelineRow

from .conftest import Tacho

HOSTILE = 'caf\u00e9 \x9b31m red \u202e reversed \x7f del \u2028 line \u0000 nul "q" \\ end'


@tg.tool(effect="read", name="lookup")
def _lookup(i: int, note: str) -> dict[str, Any]:
    return {"i": i, "note": note, "nested": {"list": [1, 2.5, None, True], "empty": {}}}


def _agent(calls: int) -> str:
    for i in range(calls):
        _lookup(i, HOSTILE)
    return HOSTILE


def _document(raw: bytes) -> bytes:
    """The bytes ``emit_json`` writes for the document ``raw`` holds (built whole)."""
    text = orjson.dumps(orjson.loads(raw), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    return escape_json(text.decode()).encode() + b"\n"


@pytest.fixture
def hostile_run(store_path: Path) -> str:
    with tg.open_store(store_path) as store:
        return tg.record_run(_agent, 12, store=store, actor="agent \u202e\x9b").run_id


@pytest.mark.parametrize("full", [False, True])
def test_show_json_is_byte_for_byte_the_document_built_whole(
    tacho: Tacho, hostile_run: str, full: bool
) -> None:
    result = tacho("show", hostile_run, "--json", *(["--full"] if full else []))
    assert result.exit_code == EXIT_OK, result.stderr
    raw = result.stdout_bytes
    assert raw == _document(raw)
    text = raw.decode()
    assert not any(c in text for c in "\x9b\u202e\x7f\u2028")  # escaped, never raw
    data = orjson.loads(raw)
    assert len(data["events"]) == 2 + 2 * 12
    assert data["events"][0]["actor"] == "agent \u202e\x9b"  # equal once parsed
    if full:
        assert data["events"][1]["payload"]["args"]["note"] == HOSTILE


@pytest.mark.parametrize(
    "rows",
    [[], ["1"], ['{"b":"\\u009b","a":[1,{"c":null}]}', "[]", '"\u202e"', "{}"]],
)
def test_emit_json_rows_writes_what_emit_json_writes(
    rows: list[str], capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    data = {"z": {"events": 3}, "a": ["x\u2028"], "events_more": None}
    emit_json({**data, "events": [orjson.loads(r) for r in rows]})
    whole = capsysbinary.readouterr().out
    emit_json_rows(data, "events", rows)
    assert capsysbinary.readouterr().out == whole


def test_show_holds_rows_not_events(
    tacho: Tacho, hostile_run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what tacho show keeps of a run while it reads it: what it prints, not the events
    # (--full keeps the events: it prints every payload)
    made: list[Any] = []
    init = commands_inspect._Shown.__init__

    def keep(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(commands_inspect._Shown, "__init__", keep)
    for options, kind in (((), TimelineRow), (("--json",), str)):
        made.clear()
        assert tacho("show", hostile_run, *options).exit_code == EXIT_OK
        (shown,) = made
        assert len(shown.rows) == 26
        assert all(type(row) is kind for row in shown.rows)
        assert not any(isinstance(v, Event) for v in (*shown.rows, *shown.styles))
