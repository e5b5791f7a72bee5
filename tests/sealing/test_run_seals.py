"""The writer's seal bookkeeping (``RunSeals``) on real sealed events, without a store.

A durable event is claimed on its caller's thread, usually alone: the plan of a batch of one
and the next due time are asked on that path for every write tool, and must say what they say
for the same events inside a longer batch.
"""

from __future__ import annotations

from tachograph.capture.seals import RunSeals, SealPlan, SealPolicy
from tachograph.record.event import Event
from tachograph.record.seal import Sealer


def _events(run_id: str, n: int, *, tenant: str = "default") -> list[Event]:
    sealer = Sealer(run_id=run_id, actor="agent", tenant=tenant)
    events = [sealer.seal("run.started", {"input": None, "env": None})]
    events += [sealer.seal("decision.made", {"kind": "step", "value": i}) for i in range(n - 1)]
    return events


def _seals(*runs: tuple[str, SealPolicy, float]) -> RunSeals:
    seals = RunSeals()
    for run_id, policy, now in runs:
        seals.track(("default", run_id), policy, now=now)
    return seals


def _summary(plan: SealPlan | None) -> tuple[object, ...] | None:
    if plan is None:
        return None
    return (plan.sealed, plan.pending, {t: [r.seq for r in rows] for t, rows in plan.rows.items()})


def test_next_due_is_the_earliest_pending_run_and_none_without_one() -> None:
    seals = _seals(
        ("a", SealPolicy(every_events=100, every_seconds=5.0), 10.0),
        ("b", SealPolicy(every_events=100, every_seconds=2.0), 11.0),
        ("c", SealPolicy(every_events=100, every_seconds=1.0), 9.0),
    )
    assert seals.next_due() is None  # tracked, nothing stored unsealed yet
    a, b = _events("a", 3), _events("b", 2)
    plan = seals.plan([*a, *b], 12.0)
    assert plan is not None
    assert not plan.sealed
    seals.committed(plan, 12.0)
    # a was sealed at 10 (tracked), every 5 s; b at 11, every 2 s; c has nothing pending
    assert seals.next_due() == 13.0
    (finished,) = [Sealer(run_id="b", actor="agent").seal("run.finished", {"status": "ok"})]
    last = seals.plan([finished], 12.5)
    assert last is not None
    assert last.sealed == [(("default", "b"), 0, True)]
    seals.committed(last, 12.5)  # b is finished and forgotten: a is next
    assert seals.next_due() == 15.0
    seals.forget(("default", "a"))
    assert seals.next_due() is None


def test_the_plan_of_a_lone_event_is_its_plan_in_a_longer_batch() -> None:
    policy = SealPolicy(every_events=3, every_seconds=60.0)
    events = _events("solo", 5)
    other = _events("other", 4)
    for i, event in enumerate(events):
        alone = _seals(("solo", policy, 0.0), ("other", policy, 0.0))
        among = _seals(("solo", policy, 0.0), ("other", policy, 0.0))
        if i:  # both have stored the events before it unsealed up to the same point
            for seals in (alone, among):
                before = seals.plan(events[:i], 1.0)
                assert before is not None
                seals.committed(before, 1.0)
        plan_alone = alone.plan([event], 2.0)
        plan_among = among.plan([*other[:2], event], 2.0)
        assert plan_alone is not None
        assert plan_among is not None
        solo = ("default", "solo")
        assert _summary(plan_alone) == (
            [s for s in plan_among.sealed if s[0] == solo],
            [p for p in plan_among.pending if p[0] == solo],
            {t: [r.seq for r in rows if r.run_id == "solo"] for t, rows in plan_among.rows.items()}
            if plan_alone.rows
            else {},
        )
    untracked = RunSeals()
    assert untracked.plan([events[0]], 0.0) is None
