"""The writer's seal bookkeeping (``RunSeals``) on real sealed events, without a store.

A durable event is claimed on its caller's thread, usually alone: the plan of a batch of one
and the next due time are asked on that path for every write tool, and must say what they say
for the same events inside a longer batch.
"""

from __future__ import annotations

from tachograph.capture.seals import RunKey, RunSeals, SealPlan, SealPolicy
from tachograph.record.event import Event
from tachograph.record.seal import Sealer


def _events(run_id: str, n: int, *, tenant: str = "default", finish: bool = False) -> list[Event]:
    """A run's first ``n`` events, the last of them ``run.finished`` with ``finish``."""
    sealer = Sealer(run_id=run_id, actor="agent", tenant=tenant)
    events = [sealer.seal("run.started", {"input": None, "env": None})]
    events += [sealer.seal("decision.made", {"kind": "step", "value": i}) for i in range(n - 2)]
    if finish:
        events.append(sealer.seal("run.finished", {"status": "ok", "output": None}))
    else:
        events.append(sealer.seal("decision.made", {"kind": "step", "value": n}))
    return events


def _seals(*runs: tuple[RunKey, SealPolicy, float]) -> RunSeals:
    seals = RunSeals()
    for run, policy, now in runs:
        seals.track(run, policy, now=now)
    return seals


def _of_run(plan: SealPlan, run: RunKey) -> tuple[object, ...]:
    """What ``plan`` says of ``run`` alone: its seals, its pending event, its seal rows."""
    tenant, run_id = run
    rows = [(r.run_id, r.seq, r.leaf) for r in plan.rows.get(tenant, []) if r.run_id == run_id]
    return (
        [s for s in plan.sealed if s[0] == run],
        [p for p in plan.pending if p[0] == run],
        rows,
        [k for k in plan.keys if k[0] == tenant] if rows else [],
    )


def test_next_due_is_the_earliest_pending_run_and_none_without_one() -> None:
    a, b, c = ("default", "a"), ("default", "b"), ("default", "c")
    seals = _seals(
        (a, SealPolicy(every_events=100, every_seconds=5.0), 10.0),
        (b, SealPolicy(every_events=100, every_seconds=2.0), 11.0),
        (c, SealPolicy(every_events=100, every_seconds=1.0), 9.0),
    )
    assert seals.next_due() is None  # tracked, nothing stored unsealed yet
    run_a, run_b = _events("a", 3), _events("b", 3, finish=True)
    plan = seals.plan([*run_a, *run_b[:2]], 12.0)
    assert plan is not None
    assert not plan.sealed  # neither is due a seal yet
    seals.committed(plan, 12.0)
    # a was sealed at 10 (when tracked), every 5 s; b at 11, every 2 s; c has nothing pending
    assert seals.next_due() == 13.0
    last = seals.plan([run_b[2]], 12.5)  # b's run.finished
    assert last is not None
    assert last.sealed == [(b, 2, True)]
    seals.committed(last, 12.5)  # b is finished and forgotten: a is next
    assert seals.next_due() == 15.0
    seals.forget(a)
    assert seals.next_due() is None


def test_the_plan_of_a_lone_event_is_its_plan_in_a_longer_batch() -> None:
    """Each event of a run, planned alone and after two events of runs of other tenants, at
    moments that seal by count, by time and at the end."""
    policy = SealPolicy(every_events=3, every_seconds=60.0)
    solo = ("acme", "solo")
    others = [("default", "other"), ("globex", "other")]
    events = _events("solo", 6, tenant="acme", finish=True)
    beside = [_events("other", 2, tenant=tenant)[1] for tenant, _ in others]
    for i, event in enumerate(events):
        for now in (30.0, 90.0):  # before and after the run's period since it was tracked
            alone = _seals((solo, policy, 0.0), *((run, policy, 0.0) for run in others))
            among = _seals((solo, policy, 0.0), *((run, policy, 0.0) for run in others))
            for seals in (alone, among):
                if i:  # both stored the events before it, up to the same seal
                    before = seals.plan(events[:i], 1.0)
                    assert before is not None
                    seals.committed(before, 1.0)
            plan_alone = alone.plan([event], now)
            plan_among = among.plan([*beside, event], now)
            assert plan_alone is not None
            assert plan_among is not None
            assert plan_alone.pending or plan_alone.sealed
            assert _of_run(plan_alone, solo) == _of_run(plan_among, solo)
            assert plan_alone.sealed == _of_run(plan_alone, solo)[0]  # nothing of the others
            assert plan_alone.pending == _of_run(plan_alone, solo)[1]
    assert RunSeals().plan([events[0]], 0.0) is None  # an untracked run
    kinds = {
        (bool(alone_plan.sealed), event.type)
        for event in events
        for alone_plan in [_seals((solo, policy, 0.0)).plan([event], 30.0)]
        if alone_plan is not None
    }
    # the loop above met a count seal, a pending event and the final seal
    assert (True, "decision.made") in kinds
    assert (False, "decision.made") in kinds
    assert (True, "run.finished") in kinds
