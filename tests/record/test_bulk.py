"""The collector pause of a bulk load leaves the collector as it found it."""

from __future__ import annotations

import gc

import pytest

from tachograph.record.bulk import collector_paused


def test_the_collector_is_paused_inside_and_back_on_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_error_inside_still_turns_it_back_on() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("the read failed")
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_replay_leaves_the_collector_on(tmp_path: object) -> None:
    import tachograph
    from tachograph.store import SQLiteStore

    @tachograph.tool(effect="pure")
    def double(n: int) -> int:
        return 2 * n

    def agent(k: int) -> int:
        return sum(double(i) for i in range(k))

    store = SQLiteStore(f"{tmp_path}/r.db")
    run = tachograph.record_run(agent, 3, store=store)
    assert tachograph.replay(store, run.run_id, agent).reproduced
    assert gc.isenabled()
