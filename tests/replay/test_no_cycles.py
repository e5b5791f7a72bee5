"""A replay or fork leaves no reference cycle behind: the recorded run it loaded is freed when
it returns, by reference counting, not whenever the cyclic collector next runs (an engine that
held its session, which holds the engine, kept every event of the run alive until then, and
the collection that found them cost a few milliseconds per 5,000 events)."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tachograph as tg
from tachograph.record.event import Event


@tg.tool(effect="read", name="cycle_lookup")
def lookup(i: int) -> dict[str, int]:
    return {"item": i}


def calls(n: int) -> int:
    return sum(lookup(i)["item"] for i in range(n))


AGENT = tg.agent(name="cycle_agent", tools=[lookup])(calls)


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _in_cycles(action: Callable[[], Any]) -> int:
    """Events that ``action`` left in reference cycles: unreachable once it returned (and its
    result was dropped), yet not freed by reference counting (the cyclic collector is off
    meanwhile, and then finds them). An event the compiled helpers built is out of the
    collector's sight (``event.stored_event``): it is counted where an object the collector
    found holds it."""
    action()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        held = {id(o): o for o in gc.garbage if type(o) is Event}
        for o in gc.garbage:
            held.update((id(r), r) for r in gc.get_referents(o) if type(r) is Event)
        return len(held)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


@pytest.mark.usefixtures("collector_off")
def test_a_replay_frees_the_run_it_loaded(store: tg.SQLiteStore) -> None:
    run_id = tg.record_run(AGENT, 150, store=store).run_id
    assert tg.replay(store, run_id, AGENT).reproduced
    assert _in_cycles(lambda: tg.replay(store, run_id, AGENT)) == 0


@pytest.mark.usefixtures("collector_off")
def test_a_fork_frees_the_run_it_loaded(store: tg.SQLiteStore) -> None:
    run_id = tg.record_run(AGENT, 150, store=store).run_id
    assert _in_cycles(lambda: tg.fork(store, run_id, 100, AGENT)) == 0


@pytest.mark.usefixtures("collector_off")
def test_the_probe_finds_events_held_in_a_cycle(store: tg.SQLiteStore) -> None:
    run_id = tg.record_run(AGENT, 150, store=store).run_id

    def cycle() -> None:
        holder: dict[str, Any] = {"events": store.events(run_id)}
        holder["self"] = holder

    assert _in_cycles(cycle) == 302
