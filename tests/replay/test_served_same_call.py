"""A replay's common tool call served in one step (``ReplayEngine.serve_same_call``): it hands
back what the general path would (the recorded result, the call's key as recorded, the step
consumed once), and leaves every other call to the general path with nothing consumed or
counted (a recorded error, a dry-run result, an erased answer, re-run pure tools, a fork)."""

from __future__ import annotations

from typing import Any

import pytest

import tachograph as tg
from tachograph.capture.boundary import CallTicket
from tachograph.lifecycle.erasure import erase
from tachograph.privacy.redactor import Redactor
from tachograph.record.event import EventType
from tachograph.replay.engine import ReplayEngine

# Behind the default secrets redactor the one step is tried only where the redactor names the
# words of its test (the compiled helpers built); with no processor at all, everywhere.
_WORDS = pytest.mark.skipif(
    Redactor()._engine.blob_table is None,
    reason="the compiled helpers are not built: the redactor names no words",
)
REDACTION = [
    pytest.param(True, marks=_WORDS, id="default-redactor"),
    pytest.param(False, id="none"),
]


class Refused(Exception):
    pass


@tg.tool(effect="read", name="same_lookup")
def lookup(item: str, n: int = 1) -> dict[str, Any]:
    if item == "broken":
        raise Refused(f"no {item}")
    return {"item": item, "n": n}


@tg.tool(effect="pure", name="same_double")
def double(x: int) -> int:
    return 2 * x


def calls(task: str) -> list[Any]:
    out: list[Any] = []
    for item, n in (("a", 1), ("b", 2), ("a", 1), ("a", 1), ("broken", 1), ("c", 3)):
        try:
            out.append(lookup(item, n))
        except Refused as exc:
            out.append(str(exc))
    out.append(double(21))
    return out


AGENT = tg.agent(name="same_calls", tools=[lookup, double])(calls)


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[CallTicket | None]:
    """What each call of ``serve_same_call`` gave: the served ticket, or None."""
    given: list[CallTicket | None] = []
    original = ReplayEngine.serve_same_call

    def spy(self: ReplayEngine, *args: Any) -> CallTicket | None:
        ticket = original(self, *args)
        given.append(ticket)
        return ticket

    monkeypatch.setattr(ReplayEngine, "serve_same_call", spy)
    return given


@pytest.mark.parametrize("redact", REDACTION)
def test_served_in_one_step_as_the_general_path_serves(
    store: tg.SQLiteStore, monkeypatch: pytest.MonkeyPatch, redact: bool
) -> None:
    recorded = tg.record_run(AGENT, "go", store=store, redact_secrets=redact)
    given = _spy(monkeypatch)
    report = tg.replay(store, recorded.run_id, AGENT, redact_secrets=redact)
    assert report.reproduced, report.render()
    assert report.output == recorded.output
    served = [t for t in given if t is not None]
    # every call but the recorded error: the repeats ("a", 1) too, numbered as recorded
    assert len(given) == 7
    assert len(served) == 6
    assert given[4] is None  # the recorded tool.failed: the general path raised it
    for ticket in served:
        assert ticket.served
        assert ticket.completion is not None
        assert ticket.key == ticket.completion.idempotency_key
    keys = [t.key for t in served]
    assert len(set(keys)) == len(keys)
    # the n-th repeat of a key ends in #n (SPEC section 5)
    assert sum(1 for k in keys if k is not None and k.endswith("#1")) == 1
    assert sum(1 for k in keys if k is not None and k.endswith("#2")) == 1
    # the same report as the general path gives (each step consumed and counted once)
    monkeypatch.setattr(ReplayEngine, "serve_same_call", lambda self, *args: None)
    general = tg.replay(store, recorded.run_id, AGENT, redact_secrets=redact)
    assert general.reproduced, general.render()
    assert report.to_dict() == general.to_dict()
    assert report.served == general.served == len(store.events(recorded.run_id))


@_WORDS
def test_the_general_path_after_one_that_is_not_served_keeps_the_keys(
    store: tg.SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repeat of a call the one step refused is numbered as recorded: the step derived no
    key for it."""

    def twice(task: str) -> list[Any]:
        out: list[Any] = []
        for _ in range(3):
            try:
                out.append(lookup("broken"))
            except Refused as exc:
                out.append(str(exc))
        return out

    agent = tg.agent(name="same_broken", tools=[lookup])(twice)
    recorded = tg.record_run(agent, "go", store=store)
    given = _spy(monkeypatch)
    report = tg.replay(store, recorded.run_id, agent)
    assert report.reproduced, report.render()
    assert given == [None, None, None]
    assert report.output == recorded.output


@_WORDS
@pytest.mark.parametrize("what", ["dry_run", "erased"])
def test_a_result_it_cannot_serve_goes_to_the_general_path(
    store: tg.SQLiteStore, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    @tg.tool(effect="write", name="same_write")
    def write(item: str) -> str:
        return f"wrote {item}"

    def agent_fn(task: str) -> str:
        return str(write("x"))

    agent = tg.agent(name=f"same_{what}", tools=[write])(agent_fn)
    if what == "dry_run":
        recorded = tg.record_run(agent, "go", store=store, dry_run=True)
    else:
        recorded = tg.record_run(agent, "go", store=store)
        answers = [
            e.seq for e in store.events(recorded.run_id) if e.type == EventType.TOOL_COMPLETED.value
        ]
        erase(store, recorded.run_id, reason="test", seqs=answers)
    given = _spy(monkeypatch)
    report = tg.replay(store, recorded.run_id, agent)
    assert given == [None]
    if what == "erased":
        assert not report.reproduced
        assert report.first is not None
        assert report.first.kind is tg.DivergenceKind.UNREPLAYABLE
    else:
        assert report.reproduced, report.render()


@_WORDS
def test_not_taken_when_pure_tools_are_re_run_nor_in_a_fork(
    store: tg.SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = tg.record_run(AGENT, "go", store=store)
    given = _spy(monkeypatch)
    report = tg.replay(store, recorded.run_id, AGENT, rerun_pure=True)
    assert report.reproduced, report.render()
    assert given
    assert all(t is None for t in given)
    given.clear()
    forked = tg.fork(store, recorded.run_id, 9, AGENT)
    assert forked.new_run_id is not None
    assert given
    assert all(t is None for t in given)
